use super::*;

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The reply a responder `ahead` ns ahead of us sends to `p`, received
/// `up` ns after sending and held `hold` ns, with `before` and `received`.
fn reply_to(p: &Probe, up: u64, hold: u64, ahead: u64, before: u64) -> Reply {
    Reply {
        epoch: p.epoch,
        seq: p.seq,
        t1: p.t1,
        t2: p.t1 + up + ahead,
        t3: p.t1 + up + hold + ahead,
        received: 0,
        before,
        duplicate: false,
    }
}

#[test]
fn round_trip_less_the_responders_hold() {
    let mut peer = Peer::new(9, ms(500));
    let p = peer.probe(ms(1000), 5_000_000_000);
    assert_eq!((p.epoch, p.seq, p.t1), (9, 0, 5_000_000_000));
    // Sent at 1000 ms, back at 1003 ms, held 1 ms: 2 ms on the wire.
    let r = reply_to(&p, 600_000, 1_000_000, 0, 0);
    peer.reply(&r, ms(1003), 5_003_000_000);
    assert_eq!(peer.counts.sent, 1);
    assert_eq!(peer.counts.answered, 1);
    // 2 ms: in the (1 ms, 2.5 ms] bucket, index 4.
    let mut want = [0u64; RTT_BUCKETS.len() + 1];
    want[4] = 1;
    assert_eq!(peer.rtt.buckets, want);
    assert!((peer.rtt.sum - 0.002).abs() < 1e-12, "{}", peer.rtt.sum);
    assert_eq!(peer.rtt.count(), 1);
    // A round trip past the last bound counts beyond it.
    let p = peer.probe(ms(2000), 6_000_000_000);
    peer.reply(
        &reply_to(&p, 0, 0, 0, 1),
        ms(2000) + Duration::from_secs(2) - MS * 499,
        0,
    );
    assert_eq!(peer.counts.answered, 1, "past the timeout: late");
    assert_eq!(peer.counts.late, 1);
    assert_eq!(peer.counts.lost, 1);
}

#[test]
fn bucket_edges_are_inclusive() {
    let mut r = Rtt::default();
    r.add(0.0001);
    r.add(0.00010001);
    r.add(1.0);
    r.add(1.5);
    assert_eq!(r.buckets[0], 1);
    assert_eq!(r.buckets[1], 1);
    assert_eq!(r.buckets[RTT_BUCKETS.len() - 1], 1);
    assert_eq!(r.buckets[RTT_BUCKETS.len()], 1);
}

#[test]
fn lost_after_the_timeout_and_placed_by_a_later_reply() {
    let mut peer = Peer::new(1, ms(300));
    let p0 = peer.probe(ms(0), 0);
    let _p1 = peer.probe(ms(100), 100);
    let _p2 = peer.probe(ms(200), 200);
    peer.expire(ms(299));
    assert_eq!(peer.counts.lost, 0, "not yet");
    peer.expire(ms(300));
    assert_eq!(peer.counts.lost, 1, "exactly at the timeout");
    assert_eq!(peer.window().loss_ratio, 1.0);
    peer.expire(ms(500));
    assert_eq!(peer.counts.lost, 3);
    assert_eq!((peer.counts.lost_up, peer.counts.lost_down), (0, 0));
    // Probe 3's reply says 1 reached the peer (bit 1 is seq 3-1-1), 0 and
    // 2 did not.
    let p3 = peer.probe(ms(600), 600);
    peer.reply(&reply_to(&p3, 0, 0, 0, 0b010), ms(601), 0);
    assert_eq!((peer.counts.lost_up, peer.counts.lost_down), (2, 1));
    // Placed once only.
    let p4 = peer.probe(ms(700), 700);
    peer.reply(&reply_to(&p4, 0, 0, 0, 0), ms(701), 0);
    assert_eq!((peer.counts.lost_up, peer.counts.lost_down), (2, 1));
    // p0's reply now: late; no new way.
    peer.reply(&reply_to(&p0, 0, 0, 0, 0), ms(702), 0);
    assert_eq!(peer.counts.late, 1);
    assert_eq!(peer.counts.lost, 3);
    assert_eq!(peer.counts.answered, 2);
    let w = peer.window();
    assert_eq!(w.loss_ratio, 3.0 / 5.0);
}

#[test]
fn a_late_reply_is_placed_neither_way() {
    let mut peer = Peer::new(1, ms(100));
    let p0 = peer.probe(ms(0), 0);
    peer.expire(ms(100));
    peer.reply(&reply_to(&p0, 0, 0, 0, 0), ms(150), 0);
    let p1 = peer.probe(ms(200), 0);
    // The responder says 0 never came, but its reply did: not lost up.
    peer.reply(&reply_to(&p1, 0, 0, 0, 0), ms(201), 0);
    assert_eq!((peer.counts.lost, peer.counts.late), (1, 1));
    assert_eq!((peer.counts.lost_up, peer.counts.lost_down), (0, 0));
}

#[test]
fn duplicates_each_way_and_foreign_replies() {
    let mut peer = Peer::new(1, ms(100));
    let p = peer.probe(ms(0), 10);
    let r = reply_to(&p, 0, 0, 0, 0);
    peer.reply(&r, ms(1), 0);
    peer.reply(&r, ms(2), 0);
    assert_eq!(peer.counts.duplicates_down, 1);
    let mut dup = r;
    dup.duplicate = true;
    peer.reply(&dup, ms(3), 0);
    assert_eq!(peer.counts.duplicates_up, 1);
    assert_eq!(peer.counts.answered, 1);
    // Another run's reply, or a number never sent, or a forged send time.
    let mut other = r;
    other.epoch = 2;
    peer.reply(&other, ms(3), 0);
    let mut unsent = r;
    unsent.seq = 1;
    peer.reply(&unsent, ms(3), 0);
    let mut forged = r;
    forged.t1 = 11;
    peer.reply(&forged, ms(3), 0);
    assert_eq!(peer.counts.duplicates_down, 1);
    assert_eq!(peer.counts.answered, 1);
    assert_eq!(peer.rtt.count(), 1);
}

#[test]
fn the_window_forgets_past_the_ring() {
    let mut peer = Peer::new(1, ms(50));
    for i in 0..10u64 {
        peer.probe(ms(100 * i), 0);
    }
    peer.expire(ms(2000));
    assert_eq!(peer.window().loss_ratio, 1.0);
    for i in 0..RING as u64 {
        let t = ms(3000 + 100 * i);
        let p = peer.probe(t, 0);
        peer.reply(&reply_to(&p, 0, 0, 0, 0), t + MS, 0);
    }
    assert_eq!(peer.window().loss_ratio, 0.0);
    assert_eq!(peer.counts.lost, 10);
    assert_eq!(peer.counts.sent, 10 + RING as u64);
    // One more lost: 1 of RING.
    peer.probe(ms(20_000), 0);
    peer.expire(ms(21_000));
    assert_eq!(peer.window().loss_ratio, 1.0 / RING as f64);
}

#[test]
fn a_slot_reused_while_pending_counts_its_probe_lost() {
    // A timeout longer than the ring's span: the old probe is lost when
    // its slot is taken.
    let mut peer = Peer::new(1, Duration::from_secs(1000));
    for i in 0..=RING as u64 {
        peer.probe(ms(i), 0);
    }
    assert_eq!(peer.counts.lost, 1);
    assert_eq!(peer.counts.sent, RING as u64 + 1);
}

#[test]
fn offset_and_one_way_split_from_the_shortest_exchange() {
    let mut peer = Peer::new(1, Duration::from_secs(1));
    assert_eq!(peer.window().offset, None);
    assert_eq!(peer.window().up, None);
    // The peer's clock is 5 ms ahead. Paths: 1 ms up and 1 ms down (the
    // best), then 3 ms up, 1 ms down, then 1 ms up, 4 ms down.
    let ahead = 5_000_000;
    let legs = [
        (1_000_000u64, 1_000_000u64),
        (3_000_000, 1_000_000),
        (1_000_000, 4_000_000),
    ];
    let mut t = 1_000_000_000u64;
    for (up, down) in legs {
        let p = peer.probe(Duration::from_nanos(t), t);
        let r = reply_to(&p, up, 100_000, ahead, 0);
        let t4 = t + up + 100_000 + down;
        peer.reply(&r, Duration::from_nanos(t4), t4);
        t += 1_000_000_000;
    }
    let w = peer.window();
    let o = w.offset.unwrap();
    assert_eq!(o.server_minus_client_ns, 5_000_000);
    assert_eq!(o.uncertainty_ns, 1_000_000, "half the best round trip");
    // Ups 1, 3, 1 ms: median 1; downs 1, 1, 4: median 1.
    assert_eq!(w.up, Some(0.001));
    assert_eq!(w.down, Some(0.001));
    assert_eq!(peer.rtt.sum, 0.002 + 0.004 + 0.005);
}

#[test]
fn median_of_even_counts_is_the_lower_middle() {
    assert_eq!(median(&mut []), None);
    assert_eq!(median(&mut [3_000_000_000, 1_000_000_000]), Some(1.0));
    assert_eq!(
        median(&mut [5, 1, 3].map(|x: i128| x * 1_000_000_000)),
        Some(3.0)
    );
}

#[test]
fn tcp_connects() {
    let mut peer = Peer::new(1, ms(100));
    peer.tcp(Some(ms(2)));
    peer.tcp(None);
    peer.tcp(None);
    assert_eq!((peer.counts.tcp_connects, peer.counts.tcp_failures), (1, 2));
    assert_eq!(peer.tcp_last, Some(ms(2)));
}

#[test]
fn a_later_reply_places_each_lost_probe_by_its_own_bit() {
    // 0 and 1 lost; 2's reply says 1 reached the peer (bit 0) and 0 did
    // not (bit 1): 1 was lost on the way down, 0 on the way up.
    let mut peer = Peer::new(1, ms(100));
    peer.probe(ms(0), 0);
    peer.probe(ms(10), 10);
    peer.expire(ms(200));
    let p2 = peer.probe(ms(200), 200);
    peer.reply(&reply_to(&p2, 0, 0, 0, 0b01), ms(201), 0);
    assert_eq!((peer.counts.lost_up, peer.counts.lost_down), (1, 1));
    // One lost, and the next reply says it came: down.
    let mut peer = Peer::new(1, ms(100));
    peer.probe(ms(0), 0);
    peer.expire(ms(100));
    let p1 = peer.probe(ms(100), 100);
    peer.reply(&reply_to(&p1, 0, 0, 0, 0b1), ms(101), 0);
    assert_eq!((peer.counts.lost_up, peer.counts.lost_down), (0, 1));
}

#[test]
fn the_deadline_is_when_the_oldest_probe_in_flight_times_out() {
    let mut peer = Peer::new(1, ms(300));
    assert_eq!(peer.deadline(), None);
    let p0 = peer.probe(ms(100), 0);
    peer.probe(ms(200), 0);
    assert_eq!(peer.deadline(), Some(ms(400)));
    // Answered: the next in flight's.
    peer.reply(&reply_to(&p0, 0, 0, 0, 0), ms(150), 0);
    assert_eq!(peer.deadline(), Some(ms(500)));
    // Lost: nothing in flight.
    peer.expire(ms(500));
    assert_eq!(peer.deadline(), None);
}
