//! Unit tests of `udp::outflow`: the server's sending machine against a
//! scripted client and a simulated sender in memory, on a simulated clock,
//! through a path that loses, duplicates, reorders and truncates the
//! handshake's datagrams, with the client leaving at every step; a
//! property test that no order of events breaks the session's rules.

use super::*;
use crate::protocol::refusal::AuthFailure;
use crate::protocol::udp::header::{FLAG_HANDSHAKE, Header};
use crate::protocol::udp::setup::HANDSHAKE_WAIT;
use proptest::prelude::*;

const TOKEN: u64 = 0x7070_7070;
const NONCE: u64 = 0x5eed_5eed;

fn client() -> SocketAddr {
    "127.0.0.2:5000".parse().unwrap()
}

fn other() -> SocketAddr {
    "127.0.0.3:5000".parse().unwrap()
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
    }
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

fn ready(nonce: u64) -> Message {
    Message::UdpReady {
        nonce,
        offset_ns: 0,
    }
}

fn report(packets: u64) -> SenderReport {
    SenderReport {
        packets,
        bytes: packets * 100,
        ..Default::default()
    }
}

/// What the machine asked for, gathered, in order.
#[derive(Debug, Default)]
struct Said {
    sent: Vec<Message>,
    connect: Option<SocketAddr>,
    probes: Vec<[u8; HEADER_LEN]>,
    starts: usize,
    stops: usize,
    summary: Option<SessionSummary>,
    refused: Option<Refusal>,
    closed: bool,
}

impl Said {
    fn done(&self) -> Vec<&SenderReport> {
        self.sent
            .iter()
            .filter_map(|m| match m {
                Message::UdpDone(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    fn names(&self) -> Vec<String> {
        self.sent.iter().map(|m| m.type_name()).collect()
    }
}

fn drain(a: &mut Outflow, s: &mut Said) {
    while let Some(x) = a.poll_action() {
        assert!(s.refused.is_none() && !s.closed, "{x:?} after the end");
        match x {
            Action::Send(m) => s.sent.push(*m),
            Action::Connect(to) => {
                assert!(s.connect.is_none(), "connected twice");
                s.connect = Some(to)
            }
            Action::Datagram(d) => {
                assert!(s.connect.is_some(), "a datagram before the client is found");
                s.probes.push(d)
            }
            Action::Start => s.starts += 1,
            Action::StopSending => {
                assert_eq!(s.starts, 1, "a stop without a start");
                s.stops += 1
            }
            Action::Summary(sum) => s.summary = Some(*sum),
            Action::Refuse(why) => s.refused = Some(why),
            Action::Close => s.closed = true,
        }
    }
}

/// A session through its setup to the sender's start at `t0`.
fn started(t0: Instant) -> (Outflow, Said) {
    let mut a = Outflow::new(terms(), t0);
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
    assert!(a.wants_datagrams());
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 5);
    drain(&mut a, &mut s);
    assert!(s.probes.is_empty(), "no probe before a datagram");
    a.on_datagram(&handshake(TOKEN), client(), 7);
    drain(&mut a, &mut s);
    assert_eq!(s.connect, Some(client()));
    assert_eq!(s.probes.len(), PROBES);
    let probe = Header::read(&s.probes[0]).unwrap();
    assert_eq!(
        (probe.flags, probe.seq, probe.send_ns),
        (FLAG_HANDSHAKE, NONCE, 7)
    );
    assert!(matches!(s.sent.last(), Some(Message::UdpProbed)));
    assert!(!a.wants_datagrams() && s.starts == 0);
    a.on_message(ready(NONCE), t0, 8);
    drain(&mut a, &mut s);
    assert!(matches!(s.sent.last(), Some(Message::UdpGo)));
    assert!(s.starts == 1 && s.stops == 0 && a.is_sending());
    s.sent.clear();
    (a, s)
}

#[test]
fn a_stream_runs_to_its_account_then_the_summary() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(65)));
    a.on_message(Message::TimeRequest { t1: 3 }, t0, 11);
    a.on_sent(report(40));
    drain(&mut a, &mut s);
    assert_eq!(s.names(), ["time_reply", "udp_done"]);
    assert_eq!(s.done(), [&report(40)]);
    assert!(!a.is_sending() && !a.is_over());
    // A second account (a driver's mistake) is not sent again.
    a.on_sent(report(41));
    a.on_message(Message::Goodbye, t0, 12);
    drain(&mut a, &mut s);
    assert_eq!(s.done().len(), 1);
    assert!(s.summary.is_some() && s.closed && a.is_over());
    assert_eq!(s.stops, 0, "a sender that ended is not stopped");
    assert_eq!(a.deadline(), None);
}

#[test]
fn the_handshake_datagram_may_come_before_the_message() {
    let t0 = Instant::now();
    let mut a = Outflow::new(terms(), t0);
    let mut s = Said::default();
    // Garbage, a wrong token, a truncated handshake, and a data datagram
    // are not the handshake.
    a.on_datagram(&[1, 2, 3], other(), 1);
    a.on_datagram(&handshake(TOKEN ^ 1), other(), 1);
    a.on_datagram(&handshake(TOKEN)[..HEADER_LEN - 1], other(), 1);
    a.on_datagram(&handshake(TOKEN), client(), 2);
    // A duplicate from elsewhere does not move the client.
    a.on_datagram(&handshake(TOKEN), other(), 3);
    drain(&mut a, &mut s);
    assert!(
        s.probes.is_empty(),
        "nothing sent before the client says so"
    );
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 9);
    drain(&mut a, &mut s);
    assert_eq!(s.connect, Some(client()));
    assert_eq!(s.probes.len(), PROBES);
    assert_eq!(Header::read(&s.probes[0]).unwrap().send_ns, 9);
    // Handshakes after the probes change nothing.
    a.on_datagram(&handshake(TOKEN), other(), 10);
    drain(&mut a, &mut s);
    assert_eq!(s.probes.len(), PROBES);
}

#[test]
fn a_wrong_or_early_nonce_is_refused() {
    let t0 = Instant::now();
    let mut a = Outflow::new(terms(), t0);
    let mut s = Said::default();
    a.on_message(ready(NONCE), t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(
        s.refused,
        Some(Refusal::Auth(AuthFailure::ProbeNonce))
    ));
    assert_eq!(s.starts, 0);

    let mut a = Outflow::new(terms(), t0);
    let mut s = Said::default();
    a.on_datagram(&handshake(TOKEN), client(), 1);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    a.on_message(ready(NONCE ^ 1), t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(
        s.refused,
        Some(Refusal::Auth(AuthFailure::ProbeNonce))
    ));
    assert_eq!(s.starts, 0);
}

#[test]
fn a_handshake_that_never_comes_ends_the_setup_at_its_wait() {
    let t0 = Instant::now();
    let mut a = Outflow::new(terms(), t0);
    let mut s = Said::default();
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    assert_eq!(a.deadline(), Some(t0 + HANDSHAKE_WAIT));
    a.on_timeout(t0 + HANDSHAKE_WAIT - Duration::from_nanos(1));
    drain(&mut a, &mut s);
    assert!(s.refused.is_none());
    a.on_timeout(t0 + HANDSHAKE_WAIT);
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::NoHandshake(_))));
    assert!(a.is_over() && a.deadline().is_none());
}

#[test]
fn a_silent_client_ends_at_setup_and_a_long_one_at_the_deadline() {
    let t0 = Instant::now();
    let mut a = Outflow::new(terms(), t0);
    let mut s = Said::default();
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(10)));
    a.on_timeout(t0 + Duration::from_secs(9));
    drain(&mut a, &mut s);
    assert!(s.refused.is_none());
    a.on_timeout(t0 + Duration::from_secs(10));
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::NotStarted(d)) if d == Duration::from_secs(10)));

    let (mut a, mut s) = started(t0);
    a.on_timeout(t0 + Duration::from_secs(64));
    drain(&mut a, &mut s);
    assert!(s.refused.is_none());
    a.on_timeout(t0 + Duration::from_secs(65));
    drain(&mut a, &mut s);
    assert!(matches!(
        s.refused,
        Some(Refusal::Limit(Limit::DurationReached { max })) if max == Duration::from_secs(60)
    ));

    // Setup longer than the deadline: the deadline is what is named.
    let mut t = terms();
    t.setup = Duration::from_secs(100);
    let mut a = Outflow::new(t, t0);
    let mut s = Said::default();
    a.on_timeout(t0 + Duration::from_secs(65));
    drain(&mut a, &mut s);
    assert!(matches!(
        s.refused,
        Some(Refusal::Limit(Limit::DurationReached { .. }))
    ));
}

#[test]
fn a_stop_stops_the_sender_once_and_its_account_still_goes_out() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    a.on_message(Message::Stop, t0, 1);
    a.on_message(Message::Stop, t0, 1);
    drain(&mut a, &mut s);
    assert_eq!(s.names(), ["stop_ack", "stop_ack"]);
    assert_eq!(s.stops, 1);
    a.on_sent(report(3));
    a.on_message(Message::Goodbye, t0, 1);
    drain(&mut a, &mut s);
    assert_eq!(s.done(), [&report(3)]);
    assert!(s.summary.is_some() && s.closed);
}

#[test]
fn a_stop_before_the_start_ends_the_sender_as_it_starts() {
    let t0 = Instant::now();
    let mut a = Outflow::new(terms(), t0);
    let mut s = Said::default();
    a.on_message(Message::Stop, t0, 1);
    a.on_datagram(&handshake(TOKEN), client(), 1);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    a.on_message(ready(NONCE), t0, 1);
    drain(&mut a, &mut s);
    assert_eq!((s.starts, s.stops), (1, 1));
    let go = s.names().iter().position(|n| n == "udp_go");
    assert!(go.is_some());
}

#[test]
fn a_goodbye_while_sending_waits_for_the_account() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    a.on_message(Message::Goodbye, t0, 1);
    drain(&mut a, &mut s);
    assert_eq!(s.stops, 1);
    assert!(s.summary.is_none() && !s.closed && a.is_sending());
    // A second goodbye, or messages, do not end it before the account.
    a.on_message(Message::Goodbye, t0, 1);
    drain(&mut a, &mut s);
    assert!(s.summary.is_none());
    a.on_sent(report(7));
    drain(&mut a, &mut s);
    assert_eq!(s.names(), ["udp_done"]);
    assert!(s.summary.is_some() && s.closed && a.is_over());
}

#[test]
fn the_client_leaving_at_any_step_closes_and_nothing_follows() {
    let t0 = Instant::now();
    // Steps of a session, as messages and datagrams.
    type Step<'a> = Box<dyn Fn(&mut Outflow) + 'a>;
    let steps: Vec<Step> = vec![
        Box::new(|a| a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1)),
        Box::new(|a| a.on_datagram(&handshake(TOKEN), client(), 1)),
        Box::new(|a| a.on_message(ready(NONCE), t0, 1)),
        Box::new(|a| a.on_message(Message::Stop, t0, 1)),
        Box::new(|a| a.on_sent(report(1))),
        Box::new(|a| a.on_message(Message::Goodbye, t0, 1)),
    ];
    for gone_at in 0..steps.len() {
        let mut a = Outflow::new(terms(), t0);
        let mut s = Said::default();
        for step in &steps[..gone_at] {
            step(&mut a);
        }
        drain(&mut a, &mut s);
        let started = s.starts == 1;
        let over = a.is_over();
        a.on_closed();
        drain(&mut a, &mut s);
        assert!(
            a.is_over() && a.deadline().is_none(),
            "gone after {gone_at}"
        );
        assert!(over || s.closed, "gone after {gone_at}: closed");
        // Whatever comes after, nothing more is asked.
        for step in &steps {
            step(&mut a);
        }
        a.on_timeout(t0 + Duration::from_secs(100));
        assert!(a.poll_action().is_none(), "gone after {gone_at}");
        let _ = started;
    }
    // A malformed frame is refused, once.
    let (mut a, mut s) = started(t0);
    a.on_malformed(ProtoError::Oversized(1));
    a.on_malformed(ProtoError::Oversized(1));
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::Malformed(_))));
}

#[test]
fn an_unexpected_message_is_refused() {
    let t0 = Instant::now();
    let mut a = Outflow::new(terms(), t0);
    let mut s = Said::default();
    // A second handshake message is not expected.
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::Unexpected { .. })));
}

/// One event of the client, the path or the sender.
#[derive(Debug, Clone)]
enum Ev {
    HandshakeMsg(bool),
    Datagram {
        good: bool,
        cut: usize,
        from_other: bool,
    },
    Ready(bool),
    Stop,
    Goodbye,
    Sent,
    Time(u64),
    Closed,
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        any::<bool>().prop_map(Ev::HandshakeMsg),
        (any::<bool>(), 0..=HEADER_LEN, any::<bool>()).prop_map(|(good, cut, from_other)| {
            Ev::Datagram {
                good,
                cut,
                from_other,
            }
        }),
        any::<bool>().prop_map(Ev::Ready),
        Just(Ev::Stop),
        Just(Ev::Goodbye),
        Just(Ev::Sent),
        (0u64..20_000).prop_map(Ev::Time),
        Just(Ev::Closed),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    #[test]
    fn no_order_of_events_breaks_the_session(evs in proptest::collection::vec(ev(), 0..40)) {
        let t0 = Instant::now();
        let mut a = Outflow::new(terms(), t0);
        let mut s = Said::default();
        let mut now = t0;
        let mut sender_ran = false;
        for e in evs {
            match e {
                Ev::HandshakeMsg(good) => {
                    let token = if good { TOKEN } else { TOKEN ^ 1 };
                    a.on_message(Message::UdpHandshake { token }, now, 1)
                }
                Ev::Datagram { good, cut, from_other } => {
                    let d = handshake(if good { TOKEN } else { TOKEN ^ 1 });
                    let from = if from_other { other() } else { client() };
                    a.on_datagram(&d[..cut], from, 1)
                }
                Ev::Ready(good) => a.on_message(ready(if good { NONCE } else { 0 }), now, 1),
                Ev::Stop => a.on_message(Message::Stop, now, 1),
                Ev::Goodbye => a.on_message(Message::Goodbye, now, 1),
                // The driver hands an account only for a sender it ran.
                Ev::Sent if sender_ran && a.is_sending() => {
                    a.on_sent(report(1));
                    sender_ran = false;
                }
                Ev::Sent => {}
                Ev::Time(ms) => {
                    now += Duration::from_millis(ms);
                    if a.deadline().is_some_and(|d| now >= d) {
                        a.on_timeout(now);
                    }
                }
                Ev::Closed => a.on_closed(),
            }
            let starts = s.starts;
            drain(&mut a, &mut s);
            if s.starts > starts {
                sender_ran = true;
            }
            // Rules: one start at most, only after probes went to the
            // client that sent the token; no account without a start; one
            // account at most; the go only after the probes.
            prop_assert!(s.starts <= 1 && s.stops <= 1);
            prop_assert!(s.done().len() <= s.starts);
            if s.starts == 1 {
                prop_assert_eq!(s.probes.len(), PROBES);
                prop_assert!(s.connect.is_some());
                let names = s.names();
                let probed = names.iter().position(|n| n == "udp_probed");
                let go = names.iter().position(|n| n == "udp_go");
                prop_assert!(probed.is_some() && go.is_some() && probed < go);
            }
            for p in &s.probes {
                let h = Header::read(p).unwrap();
                prop_assert_eq!(h.seq, NONCE);
            }
            if s.summary.is_some() {
                prop_assert!(s.done().len() == s.starts, "the summary follows the account");
            }
        }
        // However it went, the session ends by its deadline.
        let end = t0 + Duration::from_secs(65);
        if let Some(d) = a.deadline() {
            prop_assert!(d <= end.max(now));
            a.on_timeout(end.max(now));
            drain(&mut a, &mut s);
        }
        prop_assert!(a.is_over());
        prop_assert!(s.closed || s.refused.is_some() || s.summary.is_some());
    }
}

#[test]
fn the_session_says_when_it_has_actions_queued() {
    // A driver writes only while this is true: the acceptance must go out,
    // and an empty queue must not keep it looking.
    let t0 = Instant::now();
    let mut a = Outflow::new(terms(), t0);
    assert!(a.has_actions(), "the acceptance waits to be written");
    let mut s = Said::default();
    drain(&mut a, &mut s);
    assert!(!a.has_actions());
    a.on_message(Message::TimeRequest { t1: 3 }, t0, 4);
    assert!(a.has_actions(), "the time reply waits");
    drain(&mut a, &mut s);
    assert!(!a.has_actions());
}
