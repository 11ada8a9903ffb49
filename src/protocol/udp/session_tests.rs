//! Unit tests of `udp::session`: the part every UDP session's machine
//! shares, on a simulated clock, with a machine's actions of its own.

use super::*;
use crate::protocol::udp::header::{FLAG_HANDSHAKE, Header};

const TOKEN: u64 = 0x7071;
const NONCE: u64 = 0xabcd_ef01;

/// A machine's actions: the common ones and one of its own.
#[derive(Debug)]
enum Action {
    Send(Box<Message>),
    Connect(SocketAddr),
    Datagram([u8; HEADER_LEN]),
    Refuse(Refusal),
    Close,
    Own,
}

acts!(Action);

fn client() -> SocketAddr {
    "127.0.0.2:5000".parse().unwrap()
}

fn admitted(setup: u64, deadline: u64) -> Admitted {
    Admitted {
        session: Uuid::from_u128(7),
        port: 9,
        token: TOKEN,
        nonce: NONCE,
        setup: Duration::from_secs(setup),
        deadline: Duration::from_secs(deadline),
        max_duration: Duration::from_secs(deadline - 5),
    }
}

fn handshake(token: u64) -> [u8; HEADER_LEN] {
    let mut d = [0u8; HEADER_LEN];
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

/// A session admitted at `t0`, its acceptance taken off the queue.
fn opened(t0: Instant, setup: u64, deadline: u64) -> (Opening, VecDeque<Action>) {
    let mut q = VecDeque::new();
    let o = Opening::new(admitted(setup, deadline), t0, &mut q);
    match q.pop_front() {
        Some(Action::Send(m)) => assert!(
            matches!(
                *m,
                Message::UdpAccept {
                    session,
                    port: 9,
                    token: TOKEN
                } if session == Uuid::from_u128(7)
            ),
            "{m:?}"
        ),
        other => panic!("no acceptance first: {other:?}"),
    }
    assert!(q.is_empty(), "{q:?}");
    (o, q)
}

/// The probes' actions, in order: connect, three probes, `udp_probed`.
fn assert_probed(q: &mut VecDeque<Action>, send_ns: u64) {
    assert!(matches!(q.pop_front(), Some(Action::Connect(to)) if to == client()));
    for _ in 0..PROBES {
        let Some(Action::Datagram(d)) = q.pop_front() else {
            panic!("fewer than {PROBES} probes")
        };
        let h = Header::read(&d).unwrap();
        assert_eq!(
            (h.flags, h.seq, h.send_ns),
            (FLAG_HANDSHAKE, NONCE, send_ns)
        );
    }
    match q.pop_front() {
        Some(Action::Send(m)) => assert!(matches!(*m, Message::UdpProbed), "{m:?}"),
        other => panic!("no udp_probed: {other:?}"),
    }
    assert!(q.is_empty(), "{q:?}");
}

#[test]
fn a_clock_request_is_answered_in_and_after_the_setup() {
    let t0 = Instant::now();
    let (mut o, mut q) = opened(t0, 10, 65);
    for in_setup in [true, false] {
        let m = Message::TimeRequest { t1: 11 };
        assert_eq!(o.on_message(m, in_setup, t0, 42, &mut q), Heard::Done);
        match q.pop_front() {
            Some(Action::Send(m)) => assert!(
                matches!(
                    *m,
                    Message::TimeReply {
                        t1: 11,
                        t2: 42,
                        t3: 42
                    }
                ),
                "{m:?}"
            ),
            other => panic!("no reply: {other:?}"),
        }
    }
}

#[test]
fn the_handshake_message_then_its_datagram_prove_the_client() {
    let t0 = Instant::now();
    let (mut o, mut q) = opened(t0, 10, 65);
    // Another token, or after the setup: the machine's own (a refusal).
    let wrong = Message::UdpHandshake { token: TOKEN + 1 };
    assert!(matches!(
        o.on_message(wrong, true, t0, 1, &mut q),
        Heard::Other(Message::UdpHandshake { token }) if token == TOKEN + 1
    ));
    let late = Message::UdpHandshake { token: TOKEN };
    assert!(matches!(
        o.on_message(late, false, t0, 1, &mut q),
        Heard::Other(_)
    ));
    let m = Message::UdpHandshake { token: TOKEN };
    assert_eq!(o.on_message(m, true, t0, 1, &mut q), Heard::Done);
    assert!(q.is_empty(), "nothing before a datagram: {q:?}");
    // The wait for it is the setup's next deadline.
    assert_eq!(o.setup_deadline(), t0 + HANDSHAKE_WAIT);
    assert_eq!(
        o.on_datagram(&handshake(TOKEN + 1), client(), 5, &mut q),
        None
    );
    assert_eq!(
        o.on_datagram(&handshake(TOKEN), client(), 77, &mut q),
        Some(client())
    );
    assert_probed(&mut q, 77);
    // A second handshake message is no longer expected.
    let again = Message::UdpHandshake { token: TOKEN };
    assert!(matches!(
        o.on_message(again, true, t0, 1, &mut q),
        Heard::Other(_)
    ));
    assert!(o.ready(NONCE + 1).is_err());
    assert_eq!(o.ready(NONCE).unwrap(), client());
    assert_eq!(o.setup_deadline(), t0 + Duration::from_secs(10));
}

#[test]
fn a_datagram_before_the_message_is_probed_when_the_message_comes() {
    let t0 = Instant::now();
    let (mut o, mut q) = opened(t0, 10, 65);
    assert_eq!(o.on_datagram(&handshake(TOKEN), client(), 5, &mut q), None);
    assert!(q.is_empty());
    let m = Message::UdpHandshake { token: TOKEN };
    assert_eq!(
        o.on_message(m, true, t0, 9, &mut q),
        Heard::Proven(client())
    );
    assert_probed(&mut q, 9);
}

#[test]
fn the_setup_ends_with_its_reasons_and_the_session_at_its_deadline() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let (o, _) = opened(t0, 10, 65);
    assert!(o.setup_timeout(t0 + 9 * s).is_none());
    assert!(matches!(
        o.setup_timeout(t0 + 10 * s),
        Some(Refusal::NotStarted(d)) if d == 10 * s
    ));
    assert_eq!(o.ends(), t0 + 65 * s);
    assert!(o.timeout(t0 + 64 * s).is_none());
    let max = 60 * s;
    assert!(matches!(
        o.timeout(t0 + 65 * s),
        Some(Refusal::Limit(Limit::DurationReached { max: m })) if m == max
    ));
    // A handshake message with no datagram: its wait ends it first.
    let (mut o, mut q) = opened(t0, 10, 65);
    let m = Message::UdpHandshake { token: TOKEN };
    assert_eq!(o.on_message(m, true, t0 + s, 1, &mut q), Heard::Done);
    let wait = t0 + s + HANDSHAKE_WAIT;
    assert!(o.setup_timeout(wait - Duration::from_nanos(1)).is_none());
    assert!(matches!(
        o.setup_timeout(wait),
        Some(Refusal::NoHandshake(d)) if d == HANDSHAKE_WAIT
    ));
    // A setup time past the deadline: the deadline ends the setup, as the
    // test's time being up.
    let (o, _) = opened(t0, 30, 20);
    assert_eq!(o.setup_deadline(), t0 + 20 * s);
    assert!(matches!(
        o.setup_timeout(t0 + 20 * s),
        Some(Refusal::Limit(Limit::DurationReached { .. }))
    ));
}

#[test]
fn other_messages_are_the_machines_and_unexpected_ones_are_named() {
    let t0 = Instant::now();
    let (mut o, mut q) = opened(t0, 10, 65);
    for m in [Message::Stop, Message::Goodbye, Message::UdpGo] {
        let name = m.type_name();
        match o.on_message(m, true, t0, 1, &mut q) {
            Heard::Other(back) => assert_eq!(back.type_name(), name),
            other => panic!("{name}: {other:?}"),
        }
    }
    assert!(q.is_empty(), "{q:?}");
    match unexpected(&Message::UdpGo) {
        Refusal::Unexpected { got, context } => {
            assert!(got.contains("UdpGo"), "{got}");
            assert_eq!(context, "in a UDP session");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_machines_actions_go_to_common_and_back_and_its_own_stay_its_own() {
    let round = |a: Action| a.into_common().map(Action::from_common);
    assert!(matches!(round(Action::Close), Ok(Action::Close)));
    assert!(matches!(
        round(Action::Connect(client())),
        Ok(Action::Connect(to)) if to == client()
    ));
    assert!(matches!(
        round(Action::Datagram([1; HEADER_LEN])),
        Ok(Action::Datagram(d)) if d == [1; HEADER_LEN]
    ));
    assert!(matches!(
        round(Action::Send(Box::new(Message::Stop))),
        Ok(Action::Send(m)) if matches!(*m, Message::Stop)
    ));
    assert!(matches!(
        round(Action::Refuse(unexpected(&Message::Stop))),
        Ok(Action::Refuse(Refusal::Unexpected { .. }))
    ));
    assert!(matches!(round(Action::Own), Err(Action::Own)));
}
