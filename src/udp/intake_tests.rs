//! Unit tests of `udp::intake`: the server's receiving machine against a
//! scripted client in memory, on a simulated clock, through a path that
//! loses, duplicates, reorders, truncates and corrupts datagrams, with the
//! client leaving at every step; a property test against a model of the
//! receiver's counts.

use super::*;
use crate::udp::header::{FLAG_HANDSHAKE, Header, fill_payload};
use crate::udp::sent::SenderReport;
use crate::udp::track::UdpTotals;
use proptest::prelude::*;
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
fn a_wrong_nonce_or_a_start_before_the_proof_is_refused() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    let ready = |nonce| Message::UdpReady {
        nonce,
        offset_ns: 0,
    };
    a.on_message(ready(NONCE), t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(
        s.refused,
        Some(Refusal::Auth(AuthFailure::ProbeNonce))
    ));
    assert!(a.is_over() && !s.started);

    let mut a = intake(t0);
    let mut s = Said::default();
    // The datagram first, then the message: the address heard is proven.
    a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
    a.on_datagram(&handshake(TOKEN), "127.0.0.3:1".parse().unwrap(), at(t0, 1));
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    drain(&mut a, &mut s);
    assert_eq!(s.connect, Some(client()), "the first address heard");
    a.on_message(ready(NONCE ^ 1), t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(
        s.refused,
        Some(Refusal::Auth(AuthFailure::ProbeNonce))
    ));
    assert!(!s.started);
}

#[test]
fn a_wrong_token_proves_nothing_and_the_handshake_wait_ends() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    a.on_datagram(&handshake(TOKEN ^ 1), client(), at(t0, 1));
    a.on_datagram(&datagram(0, 0), client(), at(t0, 1));
    drain(&mut a, &mut s);
    assert_eq!((s.connect, s.probes.len()), (None, 0));
    assert_eq!(a.deadline(), Some(t0 + HANDSHAKE_WAIT));
    a.on_timeout(t0 + HANDSHAKE_WAIT - Duration::from_nanos(1));
    drain(&mut a, &mut s);
    assert!(s.refused.is_none());
    a.on_timeout(t0 + HANDSHAKE_WAIT);
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::NoHandshake(_))));
}

#[test]
fn setup_and_the_session_deadline_are_enforced() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(10)));
    a.on_timeout(t0 + Duration::from_secs(10));
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::NotStarted(_))));

    // Running: the interval ends, then the deadline, even when the
    // client never says it is done.
    let (mut a, mut s) = started(t0);
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(64));
    assert!(s.refused.is_none());
    assert_eq!(s.intervals().len(), 64);
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(66));
    assert!(matches!(
        s.refused,
        Some(Refusal::Limit(Limit::DurationReached { max })) if max == Duration::from_secs(60)
    ));
    assert!(s.totals().is_empty(), "the refusal ends it");

    // Reported, and no goodbye: the deadline still ends it.
    let (mut a, mut s) = started(t0);
    a.on_message(done(0), t0, 1);
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(1));
    assert_eq!(s.totals().len(), 1);
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(65)));
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(65));
    assert!(matches!(
        s.refused,
        Some(Refusal::Limit(Limit::DurationReached { .. }))
    ));
}

#[test]
fn a_stop_reports_at_once_and_time_requests_are_answered_throughout() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    a.on_message(Message::TimeRequest { t1: 3 }, t0, 44);
    drain(&mut a, &mut s);
    assert!(matches!(
        s.sent.last(),
        Some(Message::TimeReply {
            t1: 3,
            t2: 44,
            t3: 44
        })
    ));
    let (mut a, mut s) = started(t0);
    a.on_datagram(&datagram(0, 0), client(), at(t0, 1));
    a.on_message(Message::Stop, t0 + Duration::from_millis(300), 1);
    drain(&mut a, &mut s);
    assert!(matches!(s.sent[0], Message::StopAck));
    assert_eq!(s.totals().len(), 1);
    assert_eq!(s.totals()[0].packets, 1);
    // Nothing is counted after the totals.
    assert!(!a.wants_datagrams());
    a.on_datagram(&datagram(1, 0), client(), at(t0, 1));
    a.on_message(Message::TimeRequest { t1: 4 }, t0, 45);
    a.on_message(Message::Goodbye, t0, 1);
    drain(&mut a, &mut s);
    assert_eq!(s.totals().len(), 1, "the totals once");
    assert!(s.summary.is_some() && s.closed);

    // A stop before the start: the totals follow the start at once.
    let mut a = intake(t0);
    let mut s = Said::default();
    a.on_message(Message::Stop, t0, 1);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
    a.on_message(
        Message::UdpReady {
            nonce: NONCE,
            offset_ns: 0,
        },
        t0,
        1,
    );
    drain(&mut a, &mut s);
    assert!(s.started && !a.is_running());
    assert_eq!(s.totals().len(), 1);
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
fn unexpected_and_malformed_messages_are_refused() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::Unexpected { .. })));
    let (mut a, mut s) = started(t0);
    a.on_malformed(ProtoError::Oversized(1 << 30));
    drain(&mut a, &mut s);
    assert!(s.refused.is_some() && a.is_over());
    a.on_closed();
    a.on_message(Message::Goodbye, t0, 1);
    assert!(!a.has_actions());
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
    cfg.media = Some(crate::udp::reception::MediaPlan {
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
    let key: crate::auth::DatagramKey = [7; 32];
    let mut cfg = config();
    cfg.tag_key = Some(key);
    let (mut a, mut s) = started_with(cfg, t0);
    let mut signed = datagram(0, 0);
    crate::auth::sign_datagram(&key, &mut signed);
    a.on_datagram(&signed, client(), at(t0, 1));
    let mut forged = datagram(1, 0);
    crate::auth::sign_datagram(&[8; 32], &mut forged);
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

/// One step of a client's session, for leaving after any of them.
fn step(a: &mut Intake, k: usize, t0: Instant) {
    let t = t0 + Duration::from_millis(k as u64);
    match k {
        0 => a.on_message(Message::TimeRequest { t1: 1 }, t, 1),
        1 => a.on_message(Message::UdpHandshake { token: TOKEN }, t, 1),
        2 => a.on_datagram(&handshake(TOKEN), client(), at(t, 1)),
        3 => a.on_message(
            Message::UdpReady {
                nonce: NONCE,
                offset_ns: 0,
            },
            t,
            1,
        ),
        4 => a.on_datagram(&datagram(0, 0), client(), at(t, 1)),
        5 => a.on_timeout(t0 + Duration::from_secs(1)),
        6 => a.on_message(done(1), t0 + Duration::from_secs(1), 1),
        7 => a.on_timeout(t0 + Duration::from_secs(2)),
        _ => a.on_message(Message::Goodbye, t0 + Duration::from_secs(2), 1),
    }
}

#[test]
fn a_client_gone_at_every_step_closes_it_and_nothing_follows() {
    for gone in 0..=9 {
        let t0 = Instant::now();
        let mut a = intake(t0);
        let mut s = Said::default();
        for k in 0..gone {
            step(&mut a, k, t0);
            drain(&mut a, &mut s);
        }
        let was_over = a.is_over();
        a.on_closed();
        drain(&mut a, &mut s);
        assert!(a.is_over() && a.deadline().is_none(), "gone after {gone}");
        assert!(s.refused.is_none(), "gone after {gone}: {:?}", s.refused);
        // Over already (after the goodbye) or closed now: once either way.
        assert!(s.closed, "gone after {gone}");
        let before = s.sent.len();
        for k in 0..=8 {
            step(&mut a, k, t0);
        }
        a.on_closed();
        assert!(!a.has_actions(), "gone after {gone}");
        assert_eq!(s.sent.len(), before);
        assert_eq!(was_over, gone == 9, "over only after the goodbye");
    }
}

/// What the path does to one datagram.
#[derive(Debug, Clone)]
enum Fate {
    Deliver,
    Lose,
    Duplicate,
    /// Held back and delivered this many datagrams later.
    Delay(usize),
    /// Cut to this many bytes.
    Truncate(usize),
    /// A payload byte flipped.
    Flip(usize),
    /// Replaced by bytes that are no datagram.
    Garbage(Vec<u8>),
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        6 => Just(Fate::Deliver),
        2 => Just(Fate::Lose),
        1 => Just(Fate::Duplicate),
        1 => (1usize..6).prop_map(Fate::Delay),
        1 => (0usize..HEADER_LEN + PAYLOAD).prop_map(Fate::Truncate),
        1 => (0usize..PAYLOAD).prop_map(Fate::Flip),
        1 => proptest::collection::vec(any::<u8>(), 0..80).prop_map(|mut g| {
            // Never the header's magic.
            if let Some(b) = g.first_mut() {
                *b = 0;
            }
            Fate::Garbage(g)
        }),
    ]
}

/// The receiver's counts as a model: what arrives at or above the next
/// expected number is new, a missing one arriving is reordered, anything
/// else a duplicate; unreadable datagrams count as corrupt packets.
#[derive(Debug, Default, PartialEq)]
struct Model {
    packets: u64,
    bytes: u64,
    unique: u64,
    duplicates: u64,
    reordered: u64,
    corrupt: u64,
}

impl Model {
    fn arrive(&mut self, d: &[u8], seen: &mut HashSet<u64>, next: &mut u64) {
        self.packets += 1;
        self.bytes += d.len() as u64;
        let Ok(h) = Header::read(d) else {
            self.corrupt += 1;
            return;
        };
        if verify_payload(&d[HEADER_LEN..], h.seq) {
            self.corrupt += 1;
        }
        if h.seq >= *next {
            self.unique += 1;
            *next = h.seq + 1;
        } else if !seen.contains(&h.seq) {
            self.unique += 1;
            self.reordered += 1;
        } else {
            self.duplicates += 1;
        }
        seen.insert(h.seq);
    }
}

fn verify_payload(p: &[u8], seq: u64) -> bool {
    crate::udp::header::verify_payload(1, seq, p).is_err()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn counts_equal_a_model_of_the_path(
        fates in proptest::collection::vec(fate(), 0..120),
        tell in any::<bool>(),
        gap_ms in 1u64..400,
    ) {
        let t0 = Instant::now();
        let (mut a, mut s) = started(t0);
        let mut arrivals: Vec<Vec<u8>> = Vec::new();
        let mut held: Vec<(usize, Vec<u8>)> = Vec::new();
        for (seq, f) in fates.iter().enumerate() {
            let d = datagram(seq as u64, 0);
            match f {
                Fate::Deliver => arrivals.push(d),
                Fate::Lose => {}
                Fate::Duplicate => {
                    arrivals.push(d.clone());
                    arrivals.push(d);
                }
                Fate::Delay(n) => held.push((arrivals.len() + n, d)),
                Fate::Truncate(n) => arrivals.push(d[..*n].to_vec()),
                Fate::Flip(i) => {
                    let mut d = d;
                    d[HEADER_LEN + i] ^= 0x40;
                    arrivals.push(d);
                }
                Fate::Garbage(g) => arrivals.push(g.clone()),
            }
            held.sort_by_key(|(at, _)| *at);
            while held.first().is_some_and(|(at, _)| *at <= arrivals.len()) {
                arrivals.push(held.remove(0).1);
            }
        }
        arrivals.extend(held.into_iter().map(|(_, d)| d));
        let mut model = Model::default();
        let (mut seen, mut next) = (HashSet::new(), 0);
        let mut now = t0;
        for d in &arrivals {
            now += Duration::from_millis(gap_ms);
            run_clock(&mut a, &mut s, now);
            a.on_datagram(d, client(), at(now, 7));
            model.arrive(d, &mut seen, &mut next);
        }
        let sent = fates.len() as u64;
        if tell {
            a.on_message(done(sent), now, 1);
            run_clock(&mut a, &mut s, now + Duration::from_secs(1));
            prop_assert!(!a.is_running());
        }
        a.on_message(Message::Goodbye, now + Duration::from_secs(1), 1);
        drain(&mut a, &mut s);
        let tot = s.totals();
        prop_assert_eq!(tot.len(), 1);
        let t = tot[0];
        let got = Model {
            packets: t.packets,
            bytes: t.bytes,
            unique: t.unique,
            duplicates: t.duplicates,
            reordered: t.reordered,
            corrupt: t.corrupt,
        };
        prop_assert_eq!(&got, &model);
        let lost = match tell {
            true => sent - model.unique,
            // Without the sender's account: the gaps below the highest seen.
            false => next - model.unique,
        };
        prop_assert_eq!(t.lost, lost);
        prop_assert_eq!(t.sent, tell.then_some(sent));
        // The intervals add up to the totals, each ended in order.
        let ivs = s.intervals();
        let sum: u64 = ivs.iter().map(|iv| iv.packets).sum();
        prop_assert_eq!(sum, model.packets);
        let sum: u64 = ivs.iter().map(|iv| iv.duplicates).sum();
        prop_assert_eq!(sum, model.duplicates);
        prop_assert!(ivs.windows(2).all(|w| w[0].time_slice <= w[1].time_slice));
        prop_assert!(s.closed && s.refused.is_none());
    }
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
fn once_reported_only_the_deadline_ends_the_session() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    a.on_message(done(0), t0, 1);
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(1));
    assert_eq!(s.totals().len(), 1);
    // A look before the deadline (another session's timer) ends nothing.
    a.on_timeout(t0 + Duration::from_secs(30));
    drain(&mut a, &mut s);
    assert!(s.refused.is_none() && !a.is_over());
    a.on_message(Message::Goodbye, t0 + Duration::from_secs(31), 1);
    drain(&mut a, &mut s);
    assert!(s.summary.is_some() && s.closed);
}

#[test]
fn a_setup_as_long_as_the_deadline_ends_as_the_duration_limit() {
    // Setup may last to the session's deadline: past it the duration limit
    // is what was reached, not the setup's.
    let t0 = Instant::now();
    for setup in [65, 70] {
        let t = Terms {
            setup: Duration::from_secs(setup),
            ..terms()
        };
        let mut a = Intake::new(t, config(), ReceiverStats::new(1000, 100), t0);
        let mut s = Said::default();
        a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
        a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
        drain(&mut a, &mut s);
        assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(65)));
        a.on_timeout(t0 + Duration::from_secs(65));
        drain(&mut a, &mut s);
        assert!(
            matches!(
                s.refused,
                Some(Refusal::Limit(Limit::DurationReached { .. }))
            ),
            "setup {setup} s: {:?}",
            s.refused
        );
    }
}

#[test]
fn a_handshake_message_with_another_token_is_refused() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
    a.on_message(Message::UdpHandshake { token: TOKEN ^ 1 }, t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::Unexpected { .. })));
    assert_eq!((s.connect, s.probes.len()), (None, 0), "nothing is proven");
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
