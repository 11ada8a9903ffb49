//! Unit tests of `udp::intake`: the server's receiving machine against a
//! scripted client in memory, on a simulated clock, through a path that
//! loses, duplicates, reorders, truncates and corrupts datagrams, with the
//! client leaving at every step; a property test against a model of the
//! receiver's counts. The handshake and session control are tested in
//! `intake_control_tests.rs`, the path and the leaving client in
//! `intake_path_tests.rs`.

use super::*;
use crate::protocol::udp::header::{FLAG_HANDSHAKE, Header, fill_payload};
use crate::protocol::udp::sent::SenderReport;
use crate::protocol::udp::track::UdpTotals;
use std::collections::HashSet;

const TOKEN: u64 = 0x7070_7070;
const NONCE: u64 = 0x5eed_5eed;
const PAYLOAD: usize = 40;

fn client() -> SocketAddr {
    "127.0.0.2:5000".parse().unwrap()
}

fn terms() -> Terms {
    Terms {
        session: Uuid::nil(),
        port: 9,
        token: TOKEN,
        nonce: NONCE,
        setup: Duration::from_secs(10),
        deadline: Duration::from_secs(65),
        max_duration: Duration::from_secs(60),
        drain: Duration::from_millis(500),
    }
}

fn config() -> ReceiverConfig {
    ReceiverConfig {
        stream: 1,
        max_size: HEADER_LEN + PAYLOAD,
        offset_ns: 0,
        comp_ns: 0,
        interval: Duration::from_secs(1),
        media: None,
        verify: true,
        burst: None,
        tag_key: None,
        offload: false,
    }
}

fn intake(t0: Instant) -> Intake {
    intake_with(config(), t0)
}

fn intake_with(cfg: ReceiverConfig, t0: Instant) -> Intake {
    Intake::new(terms(), cfg, ReceiverStats::new(1000, 100), t0)
}

/// The client's datagram `seq`, sent at `send_ns`: header and pattern.
fn datagram(seq: u64, send_ns: u64) -> Vec<u8> {
    let mut d = vec![0u8; HEADER_LEN + PAYLOAD];
    fill_payload(1, seq, &mut d[HEADER_LEN..]);
    Header {
        flags: 0,
        stream: 1,
        seq,
        send_ns,
        payload_len: PAYLOAD as u32,
    }
    .write(&mut d);
    d
}

fn handshake(token: u64) -> Vec<u8> {
    let mut d = vec![0u8; HEADER_LEN];
    Header {
        flags: FLAG_HANDSHAKE,
        stream: 0,
        seq: token,
        send_ns: 1,
        payload_len: 0,
    }
    .write(&mut d);
    d
}

/// Arrived at `now`, stamped `recv_ns` by the kernel.
fn at(now: Instant, recv_ns: u64) -> Arrived {
    Arrived {
        now,
        batch_ns: recv_ns,
        recv_ns,
        tos: None,
    }
}

/// What the machine asked for, gathered.
#[derive(Debug, Default)]
struct Said {
    sent: Vec<Message>,
    connect: Option<SocketAddr>,
    probes: Vec<[u8; HEADER_LEN]>,
    started: bool,
    summary: Option<SessionSummary>,
    refused: Option<Refusal>,
    closed: bool,
}

impl Said {
    fn intervals<'a>(&'a self) -> Vec<&'a UdpInterval> {
        let f = |m: &'a Message| match m {
            Message::UdpInterval(iv) => Some(iv),
            _ => None,
        };
        self.sent.iter().filter_map(f).collect()
    }

    fn totals<'a>(&'a self) -> Vec<&'a UdpTotals> {
        let f = |m: &'a Message| match m {
            Message::UdpResult(t) => Some(t),
            _ => None,
        };
        self.sent.iter().filter_map(f).collect()
    }
}

fn drain(a: &mut Intake, s: &mut Said) {
    while let Some(x) = a.poll_action() {
        assert!(s.refused.is_none() && !s.closed, "{x:?} after the end");
        match x {
            Action::Send(m) => s.sent.push(*m),
            Action::Connect(to) => s.connect = Some(to),
            Action::Datagram(d) => s.probes.push(d),
            Action::Started => s.started = true,
            Action::Summary(sum) => s.summary = Some(*sum),
            Action::Refuse(why) => s.refused = Some(why),
            Action::Close => s.closed = true,
        }
    }
}

fn done(packets: u64) -> Message {
    Message::UdpDone(SenderReport {
        packets,
        ..Default::default()
    })
}

/// A session through its setup to the start of the stream at `t0`.
fn started(t0: Instant) -> (Intake, Said) {
    started_with(config(), t0)
}

fn started_with(cfg: ReceiverConfig, t0: Instant) -> (Intake, Said) {
    let mut a = intake_with(cfg, t0);
    let mut s = Said::default();
    drain(&mut a, &mut s);
    assert!(
        matches!(
            s.sent[..],
            [Message::UdpAccept {
                port: 9,
                token: TOKEN,
                ..
            }]
        ),
        "{:?}",
        s.sent
    );
    assert!(a.wants_datagrams(), "the handshake is read");
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 5);
    a.on_datagram(&handshake(TOKEN), client(), at(t0, 5));
    drain(&mut a, &mut s);
    assert_eq!(s.connect, Some(client()));
    assert_eq!(s.probes.len(), PROBES);
    let probe = Header::read(&s.probes[0]).unwrap();
    assert_eq!((probe.flags, probe.seq), (FLAG_HANDSHAKE, NONCE));
    assert!(matches!(s.sent.last(), Some(Message::UdpProbed)));
    assert!(!a.wants_datagrams(), "the stream waits for the start");
    assert!(!s.started);
    a.on_message(
        Message::UdpReady {
            nonce: NONCE,
            offset_ns: 0,
        },
        t0,
        6,
    );
    drain(&mut a, &mut s);
    assert!(matches!(s.sent.last(), Some(Message::UdpGo)));
    assert!(s.started && a.is_running() && a.wants_datagrams());
    s.sent.clear();
    (a, s)
}

/// Feeds `a` everything due up to `until`, as a loop's timer would.
fn run_clock(a: &mut Intake, s: &mut Said, until: Instant) {
    while let Some(d) = a.deadline().filter(|d| *d <= until) {
        a.on_timeout(d);
        drain(a, s);
    }
}

#[test]
fn a_clean_stream_is_counted_then_reported_and_summarised() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    for seq in 0..10u64 {
        let now = t0 + Duration::from_millis(10 * seq);
        // 2 ms in flight on the server's clock.
        a.on_datagram(
            &datagram(seq, 1_000 + seq),
            client(),
            at(now, 2_001_000 + seq),
        );
    }
    drain(&mut a, &mut s);
    assert!(s.totals().is_empty(), "nothing reported before the account");
    let t = t0 + Duration::from_millis(200);
    a.on_message(done(10), t, 7);
    drain(&mut a, &mut s);
    assert_eq!(
        a.deadline(),
        Some(t + Duration::from_millis(500)),
        "the drain"
    );
    assert_eq!(
        a.received(),
        (10 * (HEADER_LEN + PAYLOAD) as u64, 0),
        "so far"
    );
    // Still counted while draining.
    a.on_timeout(t + Duration::from_millis(499));
    drain(&mut a, &mut s);
    assert!(a.is_running());
    a.on_timeout(t + Duration::from_millis(500));
    drain(&mut a, &mut s);
    assert!(!a.wants_datagrams(), "not read once reported");
    let tot = s.totals();
    assert_eq!(tot.len(), 1, "{:?}", s.sent);
    let tot = tot[0];
    assert_eq!(
        (tot.sent, tot.unique, tot.packets, tot.lost),
        (Some(10), 10, 10, 0)
    );
    assert_eq!((tot.duplicates, tot.reordered, tot.corrupt), (0, 0, 0));
    assert_eq!(tot.bytes, 10 * (HEADER_LEN + PAYLOAD) as u64);
    // The server's metrics count what the report says.
    assert_eq!(a.received(), (tot.bytes, 0));
    assert_eq!(tot.delay_min_us, Some(2000.0));
    // The last (partial) interval goes out just before the totals, at 0.7 s.
    let ivs = s.intervals();
    assert_eq!(ivs.len(), 1);
    assert!(
        (ivs[0].time_slice - 0.7).abs() < 1e-9,
        "{}",
        ivs[0].time_slice
    );
    assert_eq!(ivs[0].packets, 10);
    assert!(matches!(s.sent.last(), Some(Message::UdpResult(_))));
    assert!(s.summary.is_none() && !s.closed);
    a.on_message(Message::Goodbye, t + Duration::from_secs(1), 8);
    drain(&mut a, &mut s);
    assert_eq!(s.summary, Some(SessionSummary::default()));
    assert!(s.closed && a.is_over());
    assert_eq!(a.deadline(), None);
}

#[test]
fn intervals_end_on_the_timer_and_add_up_to_the_totals() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(1)));
    let mut seq = 0;
    // 3.5 s of one datagram every 100 ms, the clock run between them.
    for k in 0..35u64 {
        let now = t0 + Duration::from_millis(100 * k + 50);
        run_clock(&mut a, &mut s, now);
        a.on_datagram(&datagram(seq, 0), client(), at(now, 10));
        seq += 1;
    }
    run_clock(&mut a, &mut s, t0 + Duration::from_millis(3600));
    let ivs = s.intervals();
    let slices: Vec<f64> = ivs.iter().map(|iv| iv.time_slice).collect();
    assert_eq!(slices, [1.0, 2.0, 3.0]);
    assert_eq!(
        ivs.iter().map(|iv| iv.packets).collect::<Vec<_>>(),
        [10, 10, 10]
    );
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(4)));
    // An interval whose end passed is sent before a datagram after it counts.
    let late = t0 + Duration::from_millis(4100);
    a.on_datagram(&datagram(seq, 0), client(), at(late, 10));
    drain(&mut a, &mut s);
    assert_eq!(s.intervals().len(), 4);
    assert_eq!(s.intervals()[3].packets, 5);
    a.on_message(Message::Goodbye, late, 9);
    drain(&mut a, &mut s);
    let ivs = s.intervals();
    assert_eq!(ivs.len(), 5, "the partial one at the goodbye");
    assert_eq!(ivs[4].packets, 1);
    let sum: u64 = ivs.iter().map(|iv| iv.packets).sum();
    let tot = s.totals();
    assert_eq!(tot.len(), 1);
    assert_eq!((tot[0].packets, sum, tot[0].sent), (36, 36, None));
    assert!(s.summary.is_some() && s.closed);
}

#[test]
fn datagrams_from_elsewhere_or_of_another_stream_are_not_counted() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    let other: SocketAddr = "127.0.0.3:5000".parse().unwrap();
    a.on_datagram(&datagram(0, 0), other, at(t0, 1));
    let mut d = datagram(1, 0);
    // Stream 2: not this one's (the header's stream field).
    d[4..8].copy_from_slice(&2u32.to_be_bytes());
    a.on_datagram(&d, client(), at(t0, 1));
    a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
    a.on_message(Message::Goodbye, t0, 1);
    drain(&mut a, &mut s);
    let tot = s.totals();
    assert_eq!((tot[0].packets, tot[0].unique, tot[0].corrupt), (0, 0, 0));
}

#[test]
fn an_offset_from_the_start_corrects_the_delays() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
    a.on_message(
        Message::UdpReady {
            nonce: NONCE,
            offset_ns: 500_000,
        },
        t0,
        1,
    );
    // 1.5 ms apart on the two clocks, the server's 0.5 ms ahead.
    a.on_datagram(&datagram(0, 1_000_000), client(), at(t0, 2_500_000));
    a.on_message(Message::Goodbye, t0, 1);
    drain(&mut a, &mut s);
    assert_eq!(s.totals()[0].delay_min_us, Some(1000.0));
}

#[test]
fn bursts_are_reported_as_the_next_begins_and_the_last_at_the_end() {
    let t0 = Instant::now();
    let mut cfg = config();
    cfg.burst = Some((4, 100_000_000));
    let (mut a, mut s) = started_with(cfg, t0);
    let bursts = |s: &Said| {
        let f = |m: &Message| match m {
            Message::UdpBurst(b) => Some(b.clone()),
            _ => None,
        };
        s.sent.iter().filter_map(f).collect::<Vec<_>>()
    };
    let ms = |n: u64| t0 + Duration::from_millis(n);
    for (seq, t) in [(0, 0), (1, 1), (2, 2), (3, 3)] {
        a.on_datagram(&datagram(seq, 0), client(), at(ms(t), 1_000_000));
    }
    // A duplicate is no burst's datagram.
    a.on_datagram(&datagram(3, 0), client(), at(ms(3), 1_000_000));
    drain(&mut a, &mut s);
    assert!(bursts(&s).is_empty(), "a burst ends when the next begins");
    for (seq, t) in [(4, 100), (6, 102), (7, 103)] {
        a.on_datagram(&datagram(seq, 0), client(), at(ms(t), 1_000_000));
    }
    drain(&mut a, &mut s);
    let b = bursts(&s);
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].index, b[0].datagrams, b[0].lost), (0, 4, 0));
    assert_eq!(b[0].bytes, 4 * (HEADER_LEN + PAYLOAD) as u64);
    assert!(
        (b[0].transfer_ms - 3.0).abs() < 1e-6,
        "{}",
        b[0].transfer_ms
    );
    a.on_message(Message::Goodbye, ms(200), 1);
    drain(&mut a, &mut s);
    let b = bursts(&s);
    assert_eq!(b.len(), 2, "the last one at the end");
    assert_eq!((b[1].index, b[1].datagrams, b[1].lost), (1, 3, 1));
    let last_burst = s
        .sent
        .iter()
        .rposition(|m| matches!(m, Message::UdpBurst(_)));
    let result = s
        .sent
        .iter()
        .position(|m| matches!(m, Message::UdpResult(_)));
    assert!(last_burst < result, "before the totals");
}

#[test]
fn media_frames_after_their_playout_deadline_are_late() {
    let t0 = Instant::now();
    let mut cfg = config();
    cfg.media = Some(crate::protocol::udp::reception::MediaPlan {
        frame_ns: 10_000_000,
        depth_ns: 20_000_000,
    });
    let (mut a, mut s) = started_with(cfg, t0);
    let ms = |n: u64| t0 + Duration::from_millis(n);
    // Frame 0 at 5 ms sets the clock: frame k is due by 5 + 10k + 20 ms.
    for (seq, t) in [(0, 5), (1, 35), (2, 46), (3, 55)] {
        a.on_datagram(&datagram(seq, 0), client(), at(ms(t), 1));
    }
    // A duplicate of a late frame is not late again.
    a.on_datagram(&datagram(2, 0), client(), at(ms(90), 1));
    a.on_message(Message::Goodbye, ms(100), 1);
    drain(&mut a, &mut s);
    assert_eq!(s.totals()[0].late, 1, "frame 2 only (46 > 45 ms)");
    assert_eq!(s.intervals().last().map(|iv| iv.late), Some(1));
}

#[test]
fn with_a_key_only_tagged_datagrams_count() {
    let t0 = Instant::now();
    let key: crate::protocol::auth::DatagramKey = [7; 32];
    let mut cfg = config();
    cfg.tag_key = Some(key);
    let (mut a, mut s) = started_with(cfg, t0);
    let mut signed = datagram(0, 0);
    crate::protocol::auth::sign_datagram(&key, &mut signed);
    a.on_datagram(&signed, client(), at(t0, 1));
    let mut forged = datagram(1, 0);
    crate::protocol::auth::sign_datagram(&[8; 32], &mut forged);
    a.on_datagram(&forged, client(), at(t0, 1));
    a.on_message(Message::Goodbye, t0, 1);
    drain(&mut a, &mut s);
    let t = s.totals()[0];
    assert_eq!((t.packets, t.unique, t.corrupt), (2, 1, 1));
}

#[test]
fn the_kernels_receive_time_and_marking_are_what_count() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    // Read in one batch 3 ms after the kernel stamped it.
    let arrived = Arrived {
        now: t0 + Duration::from_millis(10),
        batch_ns: 5_000_000,
        recv_ns: 2_000_000,
        tos: Some(0x01),
    };
    a.on_datagram(&datagram(0, 1_000_000), client(), arrived);
    a.on_message(Message::Goodbye, t0 + Duration::from_millis(20), 1);
    drain(&mut a, &mut s);
    let t = s.totals()[0];
    assert_eq!(t.delay_min_us, Some(1000.0));
    let marking = t.marking.as_ref().expect("a marking seen");
    // Sent Not-ECT, arrived ECT(1): set on the way.
    assert_eq!((marking.sent_tos, marking.ecn_other), (0, 1));
}

#[test]
fn the_acceptance_is_queued_at_once_and_the_slot_fits_the_largest_datagram() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    assert!(a.has_actions(), "the acceptance waits to be written");
    drain(&mut a, &mut Said::default());
    assert!(!a.has_actions());
    // One byte more than the largest datagram: a longer one shows as longer.
    assert_eq!(a.slot(), HEADER_LEN + PAYLOAD + 1);
}

#[test]
fn a_datagram_arrived_when_the_kernel_stamped_it_not_when_its_batch_was_read() {
    // Bursts of two: the first datagram waited 3 ms in the socket before
    // its batch was read at 10 ms, the second 1 ms before its batch at 20 ms.
    let t0 = Instant::now();
    let mut cfg = config();
    cfg.burst = Some((2, 100_000_000));
    let (mut a, mut s) = started_with(cfg, t0);
    let read = |ms: u64, batch_ns: u64, recv_ns: u64| Arrived {
        now: t0 + Duration::from_millis(ms),
        batch_ns,
        recv_ns,
        tos: None,
    };
    a.on_datagram(&datagram(0, 0), client(), read(10, 5_000_000, 2_000_000));
    a.on_datagram(&datagram(1, 0), client(), read(20, 15_000_000, 14_000_000));
    a.on_message(Message::Goodbye, t0 + Duration::from_millis(30), 1);
    drain(&mut a, &mut s);
    let b: Vec<_> = s
        .sent
        .iter()
        .filter_map(|m| match m {
            Message::UdpBurst(b) => Some(b),
            _ => None,
        })
        .collect();
    assert_eq!(b.len(), 1);
    let near = |x: f64, want: f64| (x - want).abs() < 1e-9;
    assert!(near(b[0].start_s, 0.007), "{}", b[0].start_s);
    assert!(near(b[0].end_s, 0.019), "{}", b[0].end_s);
    assert!(
        (b[0].transfer_ms - 12.0).abs() < 1e-6,
        "{}",
        b[0].transfer_ms
    );
}

#[path = "intake_control_tests.rs"]
mod control;

#[path = "intake_path_tests.rs"]
mod path;
