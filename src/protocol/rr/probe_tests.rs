//! Unit tests of `rr::probe`: the client's machine against the server's own
//! machine (`rr::answer::Answerer`) in memory, on a simulated clock, through
//! a channel that loses, duplicates, reorders and truncates datagrams each
//! way, with the server gone from every step on. What the machine counts is
//! checked against what the channel did.

use super::*;
use crate::protocol::rr::echo::reply_words;
use proptest::prelude::*;

#[path = "probe_sim_tests.rs"]
mod sim;
use sim::*;

#[test]
fn a_clean_path_answers_every_request_with_its_round_trip_and_split() {
    for interval in [None, Some(ms(10))] {
        let mut s = Sim::new(plan(5, interval, ms(100)));
        s.theta = 7_000_000;
        s.plan.offset_ns = 7_000_000;
        s.plan.split_error_us = Some(12.5);
        s.plan.warmup = 2;
        let t = run_checked(s);
        assert_eq!(t.counts.received, 5);
        assert_eq!(t.counts.corrupt, 0);
        let fates = t.fates();
        assert_eq!(fates.len(), 5);
        for (i, (_, o)) in fates.iter().enumerate() {
            let p = &o.probe;
            assert_eq!(p.seq, i as u64);
            assert_eq!(p.rtt_us, Some(500.0));
            assert_eq!(o.rtt, Some(us(500)));
            // The offset taken out: 300 µs up, 200 down.
            assert_eq!((p.up_us, p.down_us), (Some(300.0), Some(200.0)));
            assert_eq!(p.split_error_us, Some(12.5));
            assert_eq!(p.warmup, i < 2, "{i}");
            assert!(!p.late && !p.duplicate);
        }
        // Back to back: one request per round trip.
        let step = interval.unwrap_or(us(500));
        assert_eq!(t.sends, (0..5).map(|i| step * i).collect::<Vec<_>>());
        assert_eq!(t.end, step * 4 + us(500) + ms(1) + us(500));
    }
}

#[test]
fn a_wrong_offset_shows_in_the_split_not_the_round_trip() {
    let mut s = Sim::new(plan(1, None, ms(100)));
    s.theta = 1_000_000;
    s.plan.offset_ns = 0;
    let t = run_checked(s);
    let p = &t.fates()[0].1.probe;
    assert_eq!(p.rtt_us, Some(500.0));
    assert_eq!((p.up_us, p.down_us), (Some(1300.0), Some(-800.0)));
}

#[test]
fn a_lost_reply_times_out_and_never_delays_the_interval_schedule() {
    let mut s = Sim::new(plan(4, Some(ms(10)), ms(25)));
    s.down.fates = vec![
        Fate::default(),
        Fate {
            lose: true,
            ..Fate::default()
        },
    ];
    let t = run_checked(s);
    assert_eq!((t.counts.received, t.counts.late), (3, 0));
    assert_eq!(t.sends, [ms(0), ms(10), ms(20), ms(30)]);
    let lost: Vec<_> = t
        .fates()
        .iter()
        .filter(|f| f.1.rtt.is_none())
        .map(|f| (f.0, f.1.probe.seq))
        .collect();
    assert_eq!(lost, [(ms(35), 1)]);
    assert_eq!(t.summary.requests, 4, "the server answered it: lost down");
}

#[test]
fn back_to_back_the_next_request_waits_for_the_timeout_of_a_lost_one() {
    let mut s = Sim::new(plan(3, None, ms(25)));
    s.up.fates = vec![Fate {
        lose: true,
        ..Fate::default()
    }];
    let t = run_checked(s);
    assert_eq!(t.sends, [ms(0), ms(25), ms(25) + us(500)]);
    assert_eq!(t.summary.requests, 2, "lost up");
    assert_eq!(t.end, ms(26) + us(1500));
}

#[test]
fn a_reply_after_its_timeout_is_late_not_received_and_not_lost_twice() {
    let mut s = Sim::new(plan(3, Some(ms(10)), ms(5)));
    // Reply 1 comes 10.5 ms late: after its timeout (5 ms) and after
    // reply 2, within the drain.
    s.down.fates = vec![
        Fate::default(),
        Fate {
            extra_us: 10_500,
            ..Fate::default()
        },
    ];
    let t = run_checked(s);
    assert_eq!((t.counts.received, t.counts.late), (2, 1));
    assert_eq!(t.counts.reordered_down, 1, "behind reply 2");
    let late: Vec<_> = t.events.iter().filter(|e| e.1.probe.late).collect();
    assert_eq!(late.len(), 1);
    assert_eq!((late[0].0, late[0].1.probe.seq), (ms(21), 1));
    assert_eq!(late[0].1.probe.rtt_us, None);
}

#[test]
fn a_reply_exactly_at_the_timeout_is_in_time() {
    let mut s = Sim::new(plan(1, None, ms(5)));
    s.down.fates = vec![Fate {
        extra_us: 4_500,
        ..Fate::default()
    }];
    let t = run_checked(s);
    assert_eq!((t.counts.received, t.counts.late), (1, 0));
    assert_eq!(t.fates()[0].1.rtt, Some(ms(5)));
    // The drain is capped at the timeout.
    assert_eq!(t.end, ms(10));
}

#[test]
fn duplicates_each_way_are_counted_once_and_never_as_loss() {
    let mut s = Sim::new(plan(3, Some(ms(10)), ms(50)));
    let dup = Fate {
        dup_us: Some(700),
        ..Fate::default()
    };
    s.up.fates = vec![dup, dup, Fate::default()];
    s.down.fates = vec![Fate::default(), dup, dup];
    let t = run_checked(s);
    assert_eq!((t.counts.received, t.counts.duplicates_down), (3, 2));
    assert_eq!((t.summary.requests, t.summary.duplicates), (3, 2));
    let d: Vec<_> = t
        .events
        .iter()
        .filter(|e| e.1.probe.duplicate)
        .map(|e| e.1.probe.seq)
        .collect();
    assert_eq!(d, [1, 2]);
}

#[test]
fn a_truncated_datagram_is_not_a_reply_nor_a_request() {
    let cut = Fate {
        truncate: true,
        ..Fate::default()
    };
    let mut s = Sim::new(plan(3, Some(ms(10)), ms(5)));
    s.up.fates = vec![Fate::default(), cut];
    s.down.fates = vec![cut];
    let t = run_checked(s);
    assert_eq!(t.counts.received, 1);
    assert_eq!(t.summary.requests, 2, "request 1 never reached it");
    assert_eq!(t.counts.corrupt, 0);
}

#[test]
fn when_the_server_goes_at_any_step_the_rest_time_out_and_the_run_ends() {
    let n = 6;
    for interval in [None, Some(ms(10))] {
        for k in 0..=n {
            let mut s = Sim::new(plan(n, interval, ms(20)));
            s.gone_after = Some(k);
            let t = run_checked(s);
            assert_eq!(t.counts.received, k, "k {k}");
            let lost = t.fates().iter().filter(|f| f.1.rtt.is_none()).count() as u64;
            assert_eq!(lost, n - k, "k {k}");
            // Back to back, each lost request holds the next for a timeout.
            let last_send = match interval {
                Some(iv) => iv * (n as u32 - 1),
                None if k == n => us(500) * (n as u32 - 1),
                None => us(500) * k as u32 + ms(20) * (n - k - 1) as u32,
            };
            assert_eq!(t.sends.last(), Some(&last_send), "k {k}");
            let drain = if k > 0 { ms(1) + us(500) } else { ms(1) };
            let last_fate = last_send + if k == n { us(500) } else { ms(20) };
            assert_eq!(t.end, last_fate + drain, "k {k} {interval:?}");
        }
    }
}

#[test]
fn no_request_leaves_after_the_duration() {
    let mut p = plan(100, Some(ms(10)), ms(5));
    p.duration = Some(ms(35));
    let t = Sim::new(p.clone()).run();
    assert_eq!(t.sends, [ms(0), ms(10), ms(20), ms(30)]);
    assert_eq!(t.counts.received, 4);
    // The drain starts when the next would have been due.
    assert_eq!(t.end, ms(40) + ms(1) + us(500));
    // Back to back, until the duration has passed since the first.
    p.interval = None;
    p.duration = Some(ms(2));
    let t = Sim::new(p).run();
    assert_eq!(t.sends.len(), 4, "{:?}", t.sends);
    assert_eq!(t.sends[3], us(1500));
    assert_eq!(t.end, ms(2) + ms(1) + us(500));
}

/// A prober started at `t0` whose request 0 left: the driver's part by hand.
fn one_out(t0: Instant, total: u64) -> Prober {
    let mut p = Prober::new(plan(total, None, ms(100)), t0);
    assert_eq!(p.poll(t0), Next::Send);
    p.request(REAL0);
    p.sent(t0, REAL0 + 10);
    p
}

/// The server's reply to request `seq` at `t2` (its clock), `place`-th sent.
fn reply(seq: u64, t2: u64, place: u64, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; HEADER_LEN + len];
    fill_payload(0, seq, &mut d[HEADER_LEN..]);
    for (i, w) in reply_words(t2, place).into_iter().enumerate() {
        d[HEADER_LEN + 8 * i..][..8].copy_from_slice(&w.to_be_bytes());
    }
    Header {
        flags: 0,
        stream: 1,
        seq,
        send_ns: t2,
        payload_len: len as u32,
    }
    .write(&mut d);
    d
}

fn at(t0: Instant, after: Duration) -> Arrived {
    Arrived {
        at: t0 + after,
        real_ns: REAL0 + after.as_nanos() as u64,
        stamp: None,
        tos: None,
    }
}

#[test]
fn a_corrupt_pattern_or_check_word_is_counted_but_still_a_reply() {
    let t0 = Instant::now();
    for (byte, len) in [
        (HEADER_LEN + 30, 40),
        (HEADER_LEN + 3, 24),
        (HEADER_LEN + 20, 24),
    ] {
        let mut p = one_out(t0, 1);
        let mut d = reply(0, REAL0, 0, len);
        d[byte] ^= 0x10;
        p.on_datagram(&d, at(t0, ms(1)));
        let c = p.counts();
        assert_eq!((c.received, c.corrupt), (1, 1), "byte {byte}");
    }
    // Intact, with a long pattern: not corrupt.
    let mut p = one_out(t0, 1);
    p.on_datagram(&reply(0, REAL0, 0, 40), at(t0, ms(1)));
    assert_eq!((p.counts().received, p.counts().corrupt), (1, 0));
}

#[test]
fn a_bad_check_word_tells_no_place() {
    let t0 = Instant::now();
    let mut p = one_out(t0, 2);
    assert_eq!(p.poll(t0 + ms(1)), Next::Wait(t0 + ms(100)));
    let mut d = reply(0, REAL0, 5, 24);
    d[HEADER_LEN + 8] ^= 1;
    p.on_datagram(&d, at(t0, ms(1)));
    assert_eq!(p.poll(t0 + ms(1)), Next::Send);
    p.request(REAL0);
    p.sent(t0 + ms(1), REAL0);
    // Place 4 would be behind 5 if the bad words had counted.
    p.on_datagram(&reply(1, REAL0, 4, 24), at(t0, ms(2)));
    assert_eq!(p.counts().reordered_down, 0);
}

#[test]
fn stray_short_and_handshake_datagrams_are_ignored() {
    let t0 = Instant::now();
    let mut p = one_out(t0, 1);
    let mut hs = reply(0, REAL0, 0, 24);
    hs[3] = FLAG_HANDSHAKE;
    let short = {
        let mut d = vec![0u8; HEADER_LEN + 16];
        Header {
            flags: 0,
            stream: 1,
            seq: 0,
            send_ns: 0,
            payload_len: 16,
        }
        .write(&mut d);
        d
    };
    for d in [hs, short, reply(7, REAL0, 0, 24), vec![1, 2, 3]] {
        p.on_datagram(&d, at(t0, ms(1)));
    }
    assert_eq!(
        p.counts(),
        Counts {
            sent: 1,
            ..Counts::default()
        }
    );
    assert!(p.poll_event().is_none());
    // The real one is still taken.
    p.on_datagram(&reply(0, REAL0, 0, 24), at(t0, ms(2)));
    assert_eq!(p.counts().received, 1);
}

#[test]
fn a_kernel_stamp_shortens_the_round_trip_and_ends_the_down_split() {
    let t0 = Instant::now();
    let mut p = one_out(t0, 2);
    // Woken 2 ms after the reply came in; the stamp says 1 ms after t_send.
    let mut r = at(t0, ms(3));
    r.stamp = Some(REAL0 + 10 + 1_000_000);
    r.tos = Some(0x2e << 2);
    p.on_datagram(&reply(0, REAL0 + 400_000, 0, 24), r);
    let o = p.poll_event().unwrap();
    assert_eq!(o.rtt, Some(Duration::from_nanos(1_000_000)));
    assert_eq!(o.probe.up_us, Some(400.0));
    assert_eq!(o.probe.down_us, Some(600.01));
    assert_eq!(p.counts().rx_stamped, 1);
    // A stamp later than the wake-up does not lengthen it.
    assert_eq!(p.poll(t0 + ms(3)), Next::Send);
    p.request(REAL0);
    p.sent(t0 + ms(3), REAL0 + 3_000_000);
    let mut r = at(t0, ms(4));
    r.stamp = Some(REAL0 + 9_000_000);
    p.on_datagram(&reply(1, REAL0, 1, 24), r);
    assert_eq!(p.poll_event().unwrap().rtt, Some(ms(1)));
    assert_eq!(p.counts().rx_stamped, 2);
    let m = p.marking(0).expect("a marking");
    assert_eq!(m.seen.len(), 1);
    assert_eq!((m.seen[0].dscp, m.seen[0].datagrams), (0x2e, 1));
}

#[test]
fn a_failed_send_is_lost_at_once_and_back_to_back_goes_on() {
    let t0 = Instant::now();
    let mut p = Prober::new(plan(2, None, ms(100)), t0);
    assert_eq!(p.poll(t0), Next::Send);
    p.request(REAL0);
    p.send_failed();
    let o = p.poll_event().unwrap();
    assert_eq!((o.probe.seq, o.rtt, o.probe.is_fate()), (0, None, true));
    assert_eq!(p.poll(t0), Next::Send);
    assert_eq!(p.counts().sent, 1);
    // Said twice, told once.
    p.send_failed();
    assert!(p.poll_event().is_none());
}

#[test]
fn a_late_reply_is_remembered_for_the_last_65536_timeouts_only() {
    let t0 = Instant::now();
    let n = EXPIRED_MEMORY as u64 + 1;
    let mut p = Prober::new(plan(n, None, us(1)), t0);
    let mut now = t0;
    for step in 0.. {
        assert!(step < 3 * n, "the run does not end");
        match p.poll(now) {
            Next::Send => {
                p.request(REAL0);
                p.sent(now, REAL0);
            }
            Next::Wait(t) => now = t,
            Next::Done => break,
        }
    }
    while p.poll_event().is_some() {}
    p.on_datagram(&reply(0, REAL0, 0, 24), at(t0, Duration::ZERO));
    assert_eq!(p.counts().late, 0, "forgotten");
    p.on_datagram(&reply(1, REAL0, 1, 24), at(t0, Duration::ZERO));
    assert_eq!(p.counts().late, 1, "the oldest remembered");
    // Late once: again is a duplicate.
    p.on_datagram(&reply(1, REAL0, 1, 24), at(t0, Duration::ZERO));
    assert_eq!((p.counts().late, p.counts().duplicates_down), (1, 1));
}

#[test]
fn schedule_is_absolute_and_does_not_overflow() {
    let s = Instant::now();
    let iv = Duration::from_millis(10);
    assert_eq!(due(s, iv, 0), s);
    assert_eq!(due(s, iv, 7) - s, Duration::from_millis(70));
    // Far beyond u32 sequence numbers the schedule still moves forward.
    let far = (1u64 << 33) + 5;
    assert_eq!(
        due(s, Duration::from_nanos(1), far) - s,
        Duration::from_nanos(far)
    );
    // An absurd product saturates instead of panicking: a time beyond
    // any run (a century on).
    let never = due(s, Duration::from_secs(1 << 40), u64::MAX);
    assert!(never - s > Duration::from_secs(100 * 365 * 86_400));
}

#[test]
fn the_drain_is_three_round_trips_within_bounds() {
    assert_eq!(drain_time(ms(2), ms(1000)), ms(6));
    assert_eq!(drain_time(Duration::ZERO, ms(1000)), ms(1));
    assert_eq!(drain_time(ms(400), ms(1000)), ms(1000));
}

fn fate() -> impl Strategy<Value = Fate> {
    (
        0u8..100,
        0u8..100,
        0u8..100,
        prop_oneof![3 => Just(0u64), 1 => 0u64..30_000],
        0u64..30_000,
    )
        .prop_map(|(lose, dup, cut, extra_us, dup_us)| Fate {
            lose: lose < 15,
            truncate: cut < 5,
            dup_us: (dup < 15).then_some(dup_us),
            extra_us,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever the channel loses, duplicates, reorders, delays past the
    /// timeout or cuts short, each way, the counts are what it did and the
    /// schedule and drain hold.
    #[test]
    fn counts_equal_what_the_channel_did(
        total in 1u64..40,
        interval in prop_oneof![Just(None), (1u64..15).prop_map(|m| Some(ms(m)))],
        timeout_ms in 2u64..25,
        up in proptest::collection::vec(fate(), 0..60),
        down in proptest::collection::vec(fate(), 0..60),
        gone in prop_oneof![3 => Just(None), 1 => (0u64..40).prop_map(Some)],
    ) {
        let mut s = Sim::new(plan(total, interval, ms(timeout_ms)));
        s.up.fates = up;
        s.down.fates = down;
        s.gone_after = gone;
        let plan = s.plan.clone();
        let t = s.run();
        check(&t, &plan)?;
    }
}

#[test]
fn a_reply_is_reordered_only_behind_a_later_place() {
    let t0 = Instant::now();
    let mut p = Prober::new(plan(3, Some(ms(1)), ms(100)), t0);
    for i in 0..3 {
        assert_eq!(p.poll(t0 + ms(i)), Next::Send);
        p.request(REAL0);
        p.sent(t0 + ms(i), REAL0);
    }
    // Places 2, 2 (not behind: the same place), then 1 (behind).
    for (seq, place) in [(0, 2), (1, 2), (2, 1)] {
        p.on_datagram(&reply(seq, REAL0, place, 24), at(t0, ms(3)));
    }
    let c = p.counts();
    assert_eq!((c.received, c.reordered_down), (3, 1));
}
