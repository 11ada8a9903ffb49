//! Unit tests of `rr::answer`: the server's machine against a scripted
//! client in memory, on a simulated clock, through a path that loses,
//! duplicates, reorders, truncates and corrupts datagrams, with the client
//! leaving at every step.

use super::*;
use crate::protocol::refusal::AuthFailure;
use crate::protocol::rr::echo::read_reply_words;
use crate::protocol::udp::header::fill_payload;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

const TOKEN: u64 = 0x7070_7070;
const NONCE: u64 = 0x5eed_5eed;

fn client() -> SocketAddr {
    "127.0.0.2:5000".parse().unwrap()
}

fn terms(iterations: u64) -> Terms {
    Terms {
        session: Uuid::nil(),
        port: 9,
        token: TOKEN,
        nonce: NONCE,
        reply: 0,
        iterations,
        setup: Duration::from_secs(10),
        deadline: Duration::from_secs(65),
        max_duration: Duration::from_secs(60),
    }
}

/// A client's request `seq`: header and 8 pattern bytes.
fn request(seq: u64) -> Vec<u8> {
    let mut d = vec![0u8; HEADER_LEN + 8];
    fill_payload(1, seq, &mut d[HEADER_LEN..]);
    Header {
        flags: 0,
        stream: 1,
        seq,
        send_ns: 1,
        payload_len: 8,
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

/// What the machine asked for, gathered.
#[derive(Debug, Default)]
struct Said {
    sent: Vec<Message>,
    connect: Option<SocketAddr>,
    probes: Vec<[u8; HEADER_LEN]>,
    refused: Option<Refusal>,
    closed: bool,
}

fn drain(a: &mut Answerer, s: &mut Said) {
    loop {
        // A driver waits on `has_actions`: it must say exactly whether
        // `poll_action` has something.
        let queued = a.has_actions();
        let Some(x) = a.poll_action() else {
            assert!(!queued, "has_actions said yes with nothing queued");
            break;
        };
        assert!(queued, "has_actions said no before {x:?}");
        assert!(s.refused.is_none() && !s.closed, "{x:?} after the end");
        match x {
            Action::Send(m) => s.sent.push(*m),
            Action::Connect(to) => s.connect = Some(to),
            Action::Datagram(d) => s.probes.push(d),
            Action::Refuse(why) => s.refused = Some(why),
            Action::Close => s.closed = true,
        }
    }
}

/// Offers `d` and, if a reply comes, lets it leave: the reply.
fn answer(a: &mut Answerer, d: &[u8], from: SocketAddr) -> Option<Vec<u8>> {
    let r = a.on_datagram(d, from, 1_000, |r| r.to_vec())?;
    a.sent();
    Some(r)
}

/// A session through its setup to the start of the requests.
fn started(iterations: u64, t0: Instant) -> (Answerer, Said) {
    let mut a = Answerer::new(terms(iterations), t0);
    let mut s = Said::default();
    drain(&mut a, &mut s);
    assert!(!a.is_over());
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
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 5);
    assert_eq!(
        a.on_datagram(&handshake(TOKEN), client(), 5, |r| r.to_vec()),
        None
    );
    drain(&mut a, &mut s);
    assert_eq!(s.connect, Some(client()));
    assert_eq!(s.probes.len(), PROBES);
    let probe = Header::read(&s.probes[0]).unwrap();
    assert_eq!((probe.flags, probe.seq), (FLAG_HANDSHAKE, NONCE));
    assert!(matches!(s.sent.last(), Some(Message::UdpProbed)));
    assert!(!a.wants_datagrams(), "requests wait for the start");
    a.on_message(
        Message::UdpReady {
            nonce: probe.seq,
            offset_ns: 0,
        },
        t0,
        6,
    );
    drain(&mut a, &mut s);
    assert!(matches!(s.sent.last(), Some(Message::UdpGo)));
    assert!(a.is_answering() && a.wants_datagrams() && !a.is_over());
    (a, s)
}

fn summary(a: &mut Answerer) -> SessionSummary {
    let mut s = Said::default();
    a.on_message(Message::Goodbye, Instant::now(), 0);
    drain(a, &mut s);
    assert!(s.closed && a.is_over() && a.deadline().is_none());
    match s.sent.pop() {
        Some(Message::Summary(sum)) => sum,
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_request_is_answered_once_with_its_stamp_place_and_pattern() {
    let (mut a, _) = started(10, Instant::now());
    for seq in 0..3 {
        let r = answer(&mut a, &request(seq), client()).expect("a reply");
        let h = Header::read(&r).unwrap();
        assert_eq!((h.flags, h.stream, h.seq), (0, 1, seq));
        assert_eq!(h.payload_len, UDP_REPLY_MIN);
        assert_eq!(r.len(), HEADER_LEN + UDP_REPLY_MIN as usize);
        let w = |i: usize| u64::from_be_bytes(r[HEADER_LEN + 8 * i..][..8].try_into().unwrap());
        assert_eq!(read_reply_words([w(0), w(1), w(2)]), Some((1_000, seq)));
        assert_eq!(h.send_ns, 1_000);
    }
    let sum = summary(&mut a);
    assert_eq!(
        (sum.requests, sum.duplicates, sum.reordered, sum.data_errors),
        (3, 0, 0, 0)
    );
}

#[test]
fn a_longer_reply_carries_the_pattern_after_its_words() {
    let mut t = terms(1);
    t.reply = 100;
    let mut a = Answerer::new(t, Instant::now());
    a.on_message(Message::UdpHandshake { token: TOKEN }, Instant::now(), 0);
    a.on_datagram(&handshake(TOKEN), client(), 0, |r| r.to_vec());
    a.on_message(
        Message::UdpReady {
            nonce: NONCE,
            offset_ns: 0,
        },
        Instant::now(),
        0,
    );
    let r = answer(&mut a, &request(4), client()).unwrap();
    assert_eq!(r.len(), HEADER_LEN + 100);
    let mut want = vec![0u8; 100];
    fill_payload(0, 4, &mut want);
    assert_eq!(r[HEADER_LEN + 24..], want[24..]);
    // The one announced request is answered: no more.
    assert!(!a.is_answering() && !a.wants_datagrams());
    assert_eq!(
        a.on_datagram(&request(5), client(), 0, |r| r.to_vec()),
        None
    );
}

#[test]
fn a_16_kib_reply_points_into_the_pattern_and_a_corrupt_request_counts_whatever_the_send() {
    use crate::protocol::pattern::{ONE_SLICE, PERIOD, Pattern};
    let mut t = terms(3);
    t.reply = 16 << 10;
    let t0 = Instant::now();
    let mut a = Answerer::new(t, t0);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 0);
    a.on_datagram(&handshake(TOKEN), client(), 0, |r| r.to_vec());
    a.on_message(
        Message::UdpReady {
            nonce: NONCE,
            offset_ns: 0,
        },
        t0,
        0,
    );
    // Where the pattern's bytes are: a cycle and its repeated tail.
    let base = Pattern::get().slice(0, 0, 1).as_ptr() as usize;
    let pattern = base..base + PERIOD + ONE_SLICE - 1;
    // Each request has a flipped byte; its reply left, failed to leave,
    // or was kept back by the server's limits.
    for seq in 0..3 {
        let mut req = request(seq);
        req[HEADER_LEN + 7] ^= 1;
        let (size, r, tail) = a
            .on_datagram(&req, client(), 1_000, |r| {
                (r.size(), r.to_vec(), r.tail.as_ptr_range())
            })
            .expect("answered");
        assert_eq!((size, r.len()), (HEADER_LEN + (16 << 10), size));
        assert_eq!(Header::read(&r).unwrap().payload_len, 16 << 10);
        let mut want = vec![0u8; 16 << 10];
        fill_payload(0, seq, &mut want);
        assert!(r[HEADER_LEN + 24..] == want[24..], "seq {seq}");
        // Not a copy: the pattern's own bytes.
        assert!(
            pattern.contains(&(tail.start as usize)) && pattern.contains(&(tail.end as usize - 1))
        );
        match seq {
            0 => a.sent(),
            1 => a.send_failed(),
            _ => a.halt(),
        }
    }
    let sum = summary(&mut a);
    assert_eq!(
        (sum.requests, sum.data_errors, sum.network_errors),
        (1, 3, 1)
    );
    assert_eq!(sum.bytes_sent, HEADER_LEN as u64 + (16 << 10));
}

#[test]
fn duplicates_are_counted_never_answered_and_reordering_is_told() {
    let (mut a, _) = started(10, Instant::now());
    let mut answered = Vec::new();
    for seq in [0, 1, 1, 0, 3, 2, 3] {
        if let Some(r) = answer(&mut a, &request(seq), client()) {
            answered.push(Header::read(&r).unwrap().seq);
        }
    }
    assert_eq!(answered, [0, 1, 3, 2]);
    let sum = summary(&mut a);
    assert_eq!((sum.requests, sum.duplicates, sum.reordered), (4, 3, 1));
}

#[test]
fn garbage_truncated_foreign_and_early_datagrams_get_nothing() {
    let t0 = Instant::now();
    let mut a = Answerer::new(terms(10), t0);
    assert!(a.wants_datagrams(), "for the handshake");
    // Before the client is proven, a request is not answered.
    assert_eq!(
        a.on_datagram(&request(0), client(), 0, |r| r.to_vec()),
        None
    );
    let (mut a, _) = started(10, t0);
    let stranger: SocketAddr = "127.0.0.3:5000".parse().unwrap();
    let mut cut = request(7);
    cut.truncate(HEADER_LEN + 3);
    let mut bad_magic = request(7);
    bad_magic[0] = b'X';
    for d in [
        &[][..],
        &[1, 2, 3],
        &request(7)[..HEADER_LEN - 1],
        &cut,
        &bad_magic,
    ] {
        assert_eq!(a.on_datagram(d, client(), 0, |r| r.to_vec()), None, "{d:?}");
    }
    assert_eq!(
        a.on_datagram(&request(7), stranger, 0, |r| r.to_vec()),
        None
    );
    // A handshake datagram now is not a request.
    assert_eq!(
        a.on_datagram(&handshake(TOKEN), client(), 0, |r| r.to_vec()),
        None
    );
    // A flipped payload byte is answered, and counted corrupt.
    let mut flipped = request(7);
    flipped[HEADER_LEN + 2] ^= 0x40;
    assert!(answer(&mut a, &flipped, client()).is_some());
    let sum = summary(&mut a);
    assert_eq!(
        (sum.requests, sum.data_errors, sum.duplicates, sum.reordered),
        (1, 1, 0, 0)
    );
}

#[test]
fn a_handshake_before_the_clients_word_is_remembered_and_a_wrong_token_is_not() {
    let t0 = Instant::now();
    let mut a = Answerer::new(terms(1), t0);
    let mut s = Said::default();
    let other: SocketAddr = "127.0.0.9:1".parse().unwrap();
    a.on_datagram(&handshake(TOKEN + 1), other, 0, |r| r.to_vec());
    a.on_datagram(&handshake(TOKEN), client(), 0, |r| r.to_vec());
    a.on_datagram(&handshake(TOKEN), other, 0, |r| r.to_vec());
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 0);
    drain(&mut a, &mut s);
    assert_eq!(s.connect, Some(client()), "the first with the token");
    assert_eq!(s.probes.len(), PROBES);
}

#[test]
fn setup_and_session_deadlines_end_it_with_their_reasons() {
    let t0 = Instant::now();
    let s10 = Duration::from_secs(10);
    // Nothing after the acceptance: not started within the setup time.
    let mut a = Answerer::new(terms(1), t0);
    assert_eq!(a.deadline(), Some(t0 + s10));
    a.on_timeout(t0 + s10 - Duration::from_nanos(1));
    let mut s = Said::default();
    drain(&mut a, &mut s);
    assert!(s.refused.is_none());
    a.on_timeout(t0 + s10);
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::NotStarted(d)) if d == s10));
    assert_eq!(a.deadline(), None);

    // Told the handshake leaves, none arrives within HANDSHAKE_WAIT.
    let mut a = Answerer::new(terms(1), t0);
    let t1 = t0 + Duration::from_secs(1);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t1, 0);
    assert_eq!(a.deadline(), Some(t1 + HANDSHAKE_WAIT));
    a.on_timeout(t1 + HANDSHAKE_WAIT);
    let mut s = Said::default();
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::NoHandshake(_))), "{s:?}");

    // Running: the session's deadline, naming the longest test.
    let (mut a, _) = started(10, t0);
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(65)));
    a.on_timeout(t0 + Duration::from_secs(64));
    assert!(a.is_answering());
    a.on_timeout(t0 + Duration::from_secs(65));
    let mut s = Said::default();
    drain(&mut a, &mut s);
    assert!(
        matches!(s.refused, Some(Refusal::Limit(Limit::DurationReached { max })) if max == Duration::from_secs(60)),
        "{s:?}"
    );
    assert_eq!(
        a.on_datagram(&request(0), client(), 0, |r| r.to_vec()),
        None
    );

    // A setup longer than the session: its deadline, not "not started".
    let mut t = terms(1);
    t.setup = Duration::from_secs(100);
    let mut a = Answerer::new(t, t0);
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(65)));
    a.on_timeout(t0 + Duration::from_secs(65));
    let mut s = Said::default();
    drain(&mut a, &mut s);
    assert!(matches!(
        s.refused,
        Some(Refusal::Limit(Limit::DurationReached { .. }))
    ));
}

#[test]
fn a_wrong_nonce_an_early_ready_and_out_of_order_messages_are_refused() {
    let t0 = Instant::now();
    let refused = |msgs: &[Message]| {
        let mut a = Answerer::new(terms(1), t0);
        a.on_datagram(&handshake(TOKEN), client(), 0, |r| r.to_vec());
        for m in msgs {
            a.on_message(m.clone(), t0, 0);
        }
        let mut s = Said::default();
        drain(&mut a, &mut s);
        s.refused
    };
    let ready = |nonce| Message::UdpReady {
        nonce,
        offset_ns: 0,
    };
    let hs = Message::UdpHandshake { token: TOKEN };
    assert!(matches!(
        refused(&[ready(NONCE)]),
        Some(Refusal::Auth(AuthFailure::ProbeNonce))
    ));
    assert!(matches!(
        refused(&[hs.clone(), ready(NONCE + 1)]),
        Some(Refusal::Auth(AuthFailure::ProbeNonce))
    ));
    assert!(refused(&[hs.clone(), ready(NONCE)]).is_none());
    for twice in [
        vec![hs.clone(), hs.clone()],
        vec![hs.clone(), ready(NONCE), ready(NONCE)],
        vec![Message::UdpHandshake { token: TOKEN + 1 }],
        vec![Message::HelloAck(Message::hello())],
    ] {
        assert!(
            matches!(refused(&twice), Some(Refusal::Unexpected { .. })),
            "{twice:?}"
        );
    }
    // A malformed frame is refused as such.
    let mut a = Answerer::new(terms(1), t0);
    a.on_malformed(ProtoError::Oversized(1));
    let mut s = Said::default();
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::Malformed(_))));
}

#[test]
fn clock_requests_stop_and_the_servers_limit_end_the_answering() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(10, t0);
    a.on_message(Message::TimeRequest { t1: 3 }, t0, 77);
    drain(&mut a, &mut s);
    assert!(matches!(
        s.sent.last(),
        Some(Message::TimeReply {
            t1: 3,
            t2: 77,
            t3: 77
        })
    ));
    assert!(answer(&mut a, &request(0), client()).is_some());
    a.on_message(Message::Stop, t0, 0);
    drain(&mut a, &mut s);
    assert!(matches!(s.sent.last(), Some(Message::StopAck)));
    assert_eq!(
        a.on_datagram(&request(1), client(), 0, |r| r.to_vec()),
        None
    );
    // A stopped session still answers its goodbye.
    assert_eq!(summary(&mut a).requests, 1);

    let (mut a, _) = started(10, t0);
    assert!(
        a.on_datagram(&request(0), client(), 0, |r| r.to_vec())
            .is_some()
    );
    // Held back by the server's limits: not counted, and no more replies.
    a.halt();
    assert_eq!(
        a.on_datagram(&request(1), client(), 0, |r| r.to_vec()),
        None
    );
    assert_eq!(summary(&mut a).requests, 0);
}

type Step<'a> = Box<dyn Fn(&mut Answerer) + 'a>;

/// The client's part of a whole session, a step at a time; `gone_at`: the
/// step at which its control connection closes.
fn session_leaving_at(gone_at: usize) -> (Said, Answerer) {
    let t0 = Instant::now();
    let mut a = Answerer::new(terms(3), t0);
    let mut s = Said::default();
    let steps: Vec<Step<'_>> = vec![
        Box::new(|a| a.on_message(Message::TimeRequest { t1: 1 }, t0, 2)),
        Box::new(|a| {
            a.on_datagram(&handshake(TOKEN), client(), 0, |r| r.to_vec());
        }),
        Box::new(|a| a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 0)),
        Box::new(|a| {
            a.on_message(
                Message::UdpReady {
                    nonce: NONCE,
                    offset_ns: 0,
                },
                t0,
                0,
            )
        }),
        Box::new(|a| {
            answer(a, &request(0), client());
        }),
        Box::new(|a| {
            answer(a, &request(1), client());
        }),
        Box::new(|a| a.on_message(Message::Stop, t0, 0)),
        Box::new(|a| a.on_message(Message::Goodbye, t0, 0)),
    ];
    for (i, step) in steps.iter().enumerate() {
        if i == gone_at {
            a.on_closed();
        }
        step(&mut a);
        drain(&mut a, &mut s);
    }
    a.on_timeout(t0 + Duration::from_secs(1000));
    drain(&mut a, &mut s);
    (s, a)
}

#[test]
fn a_client_gone_at_any_step_ends_the_session_quietly() {
    for gone_at in 0..8 {
        let (s, mut a) = session_leaving_at(gone_at);
        assert!(s.closed && s.refused.is_none(), "step {gone_at}: {s:?}");
        assert!(a.is_over() && a.deadline().is_none() && !a.is_answering());
        assert!(!s.sent.iter().any(|m| matches!(m, Message::Summary(_))));
        // Nothing it is given later makes it act.
        assert_eq!(
            a.on_datagram(&request(2), client(), 0, |r| r.to_vec()),
            None
        );
        a.on_message(Message::Goodbye, Instant::now(), 0);
        a.on_closed();
        assert!(a.poll_action().is_none(), "step {gone_at}");
    }
    // Staying to the end: the goodbye is answered.
    let (s, _) = session_leaving_at(usize::MAX);
    assert!(s.closed);
    assert!(matches!(s.sent.last(), Some(Message::Summary(x)) if x.requests == 2));
}

/// A path for datagrams: each is lost, duplicated or held back, as a
/// simple generator seeded by the property test decides.
struct Path {
    state: u64,
    loss: u64,
    dup: u64,
    hold: u64,
}

impl Path {
    fn roll(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % 100
    }

    /// What comes out of the path for `sent`, in arrival order.
    fn carry(&mut self, sent: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        let mut held: Vec<u64> = Vec::new();
        for &seq in sent {
            if self.roll() < self.loss {
                continue;
            }
            let copies = if self.roll() < self.dup { 2 } else { 1 };
            for _ in 0..copies {
                if self.roll() < self.hold {
                    held.push(seq);
                } else {
                    out.push(seq);
                    if self.roll() < 50
                        && let Some(h) = held.pop()
                    {
                        out.push(h);
                    }
                }
            }
        }
        out.extend(held.into_iter().rev());
        out
    }
}

proptest! {
    /// Whatever the path does, against a model: every number that arrives
    /// is answered once while answers are owed, arrivals again are counted
    /// duplicates, first arrivals behind a higher one reordered, replies
    /// carry their places in order, and the summary says the same.
    #[test]
    fn every_request_answered_once_through_any_path(
        seed in 1u64..u64::MAX,
        loss in 0u64..30,
        dup in 0u64..30,
        hold in 0u64..40,
        n in 1u64..200,
        iterations in 1u64..250,
        garbage in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..5),
    ) {
        let (mut a, _) = started(iterations, Instant::now());
        let sent: Vec<u64> = (0..n).collect();
        let arrived = Path { state: seed, loss, dup, hold }.carry(&sent);
        let (mut seen, mut top) = (HashSet::new(), None::<u64>);
        let (mut dups, mut reord, mut answered) = (0u64, 0u64, HashMap::new());
        let mut places = Vec::new();
        for (i, &seq) in arrived.iter().enumerate() {
            if let Some(g) = garbage.get(i) {
                prop_assert_eq!(a.on_datagram(g, client(), 0, |r| r.to_vec()), None);
            }
            let owed = (answered.len() as u64) < iterations;
            let got = answer(&mut a, &request(seq), client());
            if !owed {
                prop_assert!(got.is_none());
                continue;
            }
            if !seen.insert(seq) {
                dups += 1;
                prop_assert!(got.is_none(), "{} twice", seq);
                continue;
            }
            reord += u64::from(top.is_some_and(|t| seq < t));
            top = Some(top.map_or(seq, |t| t.max(seq)));
            let r = got.expect("a first arrival is answered");
            let h = Header::read(&r).unwrap();
            prop_assert_eq!(h.seq, seq);
            let w = |i: usize| u64::from_be_bytes(r[HEADER_LEN + 8 * i..][..8].try_into().unwrap());
            places.push(read_reply_words([w(0), w(1), w(2)]).map(|(_, p)| p));
            *answered.entry(seq).or_insert(0) += 1;
        }
        prop_assert!(answered.values().all(|&c| c == 1));
        let want: Vec<_> = (0..places.len() as u64).map(Some).collect();
        prop_assert_eq!(places, want);
        let sum = summary(&mut a);
        prop_assert_eq!(sum.requests, answered.len() as u64);
        prop_assert_eq!(sum.duplicates, dups);
        prop_assert_eq!(sum.reordered, reord);
        prop_assert_eq!(sum.data_errors, 0);
    }
}

#[test]
fn bytes_count_fresh_requests_and_replies_that_left_and_failed_sends_are_network_errors() {
    let (mut a, _) = started(10, Instant::now());
    // Requests 0 and 1 answered, 1 again a duplicate (not counted), 2
    // offered but its reply failed to leave.
    for seq in [0, 1, 1] {
        answer(&mut a, &request(seq), client());
    }
    assert!(
        a.on_datagram(&request(2), client(), 1_000, |r| r.to_vec())
            .is_some()
    );
    a.send_failed();
    let sum = summary(&mut a);
    let (req, rep) = (HEADER_LEN as u64 + 8, HEADER_LEN as u64 + 24);
    assert_eq!(
        (sum.requests, sum.bytes_received, sum.bytes_sent),
        (2, 3 * req, 2 * rep)
    );
    assert_eq!(
        (sum.network_errors, sum.data_errors, sum.duplicates),
        (1, 0, 1)
    );
}
