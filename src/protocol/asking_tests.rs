//! The client's conversation after its greeting, driven in memory against
//! the server's own conversation machine (both ends, no sockets) for a TCP
//! test, and against hand-made acceptances for the others: every way a test
//! is accepted, refused, stopped and ended, and arbitrary server messages
//! that must end it cleanly.

use super::*;
use crate::protocol::conversation::{Conversation, Step, wire};
use crate::protocol::proto::{IoPattern, TcpSpec, UdpSpec};
use crate::protocol::refusal::{Limit, Refusal};
use crate::protocol::spec::RrSpec;
use crate::protocol::stats::Counters;
use proptest::prelude::*;
use std::time::Duration;

const MAX: Duration = Duration::from_secs(60);

fn tcp() -> TestSpec {
    TestSpec::Tcp(TcpSpec::plain(IoPattern::Push, 1000, 0, 0))
}

fn rr(proto: RrProto) -> TestSpec {
    TestSpec::Rr(RrSpec::plain(proto, 64, 2, 10))
}

fn udp() -> TestSpec {
    TestSpec::Udp(UdpSpec::steady(1000, 1_000_000, 1000))
}

/// A server conversation that has greeted a client without a key.
fn greeted() -> Conversation {
    let (conv, steps) = Conversation::new(&Message::hello(), false, None, Vec::new(), MAX);
    assert!(matches!(steps[..], [Step::Send(Message::HelloAck(_))]));
    conv
}

/// Feeds the client every message, returning its events in order.
fn feed(a: &mut Asking, msgs: Vec<Message>) -> Vec<Result<Event, AskingError>> {
    msgs.into_iter().map(|m| a.on_message(m)).collect()
}

fn rows(n: usize, truncated: bool) -> Message {
    let c = Counters::default().snapshot();
    Message::ServerIntervals {
        rows: vec![IntervalRow::between(&c, 0.0, &c, 1.0); n],
        truncated,
    }
}

fn summary(connections: u64) -> Message {
    Message::Summary(SessionSummary {
        connections,
        ..Default::default()
    })
}

/// A TCP test accepted by the server's conversation as `id`: both ends.
fn running_tcp(id: Uuid) -> (Asking, Conversation) {
    let mut conv = greeted();
    let (mut a, request) = Asking::ask(tcp());
    let steps = conv.on_message(request);
    assert!(matches!(steps[..], [Step::Admit(TestSpec::Tcp(_))]));
    let got = feed(&mut a, wire(conv.accepted(id)));
    assert_eq!(got, [Ok(Event::Accepted(Accept::Session(id)))]);
    (a, conv)
}

#[test]
fn a_tcp_test_runs_from_request_through_stop_to_the_servers_summary() {
    let id = Uuid::from_u128(7);
    let (mut a, mut conv) = running_tcp(id);
    assert!(!a.is_over());
    let stop = a.stop().expect("a running test can be stopped");
    let steps = conv.on_message(stop);
    assert!(matches!(steps[0], Step::Cancel));
    assert_eq!(feed(&mut a, wire(steps)), [Ok(Event::Stopped)]);
    let bye = a.goodbye().expect("a stopped test says goodbye");
    let steps = conv.on_message(bye);
    assert!(matches!(steps[..], [Step::Finish, Step::Close]));
    // On Finish the server's I/O sends its rows, then the summary.
    let got = feed(&mut a, vec![rows(3, false), summary(4)]);
    assert_eq!(got[0], Ok(Event::Rows));
    let Ok(Event::Summary(s)) = &got[1] else {
        panic!("{got:?}")
    };
    assert_eq!(s.connections, 4);
    assert!(a.is_over());
    assert_eq!(a.take_rows().0.len(), 3);
    // Over is over: nothing more is asked or taken.
    assert_eq!((a.stop(), a.goodbye()), (None, None));
    assert!(matches!(
        a.on_message(summary(1)),
        Err(AskingError::Unexpected { .. })
    ));
}

#[test]
fn goodbye_without_a_stop_and_a_late_stop_ack_is_skipped() {
    let (mut a, mut conv) = running_tcp(Uuid::nil());
    assert_eq!(conv.on_message(a.goodbye().unwrap()).len(), 2);
    assert_eq!(a.on_message(summary(0)).map(|_| ()), Ok(()));
    // A stop whose acknowledgement was not waited for.
    let (mut a, _) = running_tcp(Uuid::nil());
    a.stop().unwrap();
    a.goodbye().unwrap();
    let got = feed(&mut a, vec![Message::StopAck, rows(1, false), summary(0)]);
    assert_eq!(got[..2], [Ok(Event::Skipped), Ok(Event::Rows)]);
    assert!(a.is_over());
    // Asking twice gives one message.
    let (mut a, _) = running_tcp(Uuid::nil());
    assert_eq!(a.stop(), Some(Message::Stop));
    assert_eq!(a.stop(), None);
    // A stop's acknowledgement is skipped once, and only for a stop that
    // went out unanswered.
    let (mut a, _) = running_tcp(Uuid::nil());
    a.stop().unwrap();
    a.goodbye().unwrap();
    assert_eq!(a.on_message(Message::StopAck), Ok(Event::Skipped));
    assert!(matches!(
        a.on_message(Message::StopAck),
        Err(AskingError::Unexpected {
            when: "to goodbye",
            ..
        })
    ));
    for stopped in [false, true] {
        let (mut a, _) = running_tcp(Uuid::nil());
        if stopped {
            a.stop().unwrap();
            a.on_message(Message::StopAck).unwrap();
        }
        a.goodbye().unwrap();
        assert!(a.on_message(Message::StopAck).is_err());
        assert!(a.is_over());
    }
}

#[test]
fn the_servers_duration_limit_reaches_a_stopping_or_ending_client_as_a_refusal() {
    // The server's conversation still runs the test after a stop, so its
    // deadline can end it while the client waits for the ack or the summary.
    for (stop, acked, bye) in [
        (true, false, false),
        (true, true, false),
        (true, false, true),
        (false, false, true),
    ] {
        let (mut a, mut conv) = running_tcp(Uuid::nil());
        if stop {
            let steps = conv.on_message(a.stop().unwrap());
            if acked {
                assert_eq!(feed(&mut a, wire(steps)), [Ok(Event::Stopped)]);
            }
        }
        if bye {
            a.goodbye().unwrap();
        }
        let steps = conv.on_timeout();
        assert!(matches!(steps[0], Step::Abort));
        let got = feed(&mut a, wire(steps));
        assert!(
            matches!(
                &got[..],
                [Err(AskingError::Refused {
                    code: ErrorCode::LimitDuration,
                    ..
                })]
            ),
            "{stop} {acked} {bye}: {got:?}"
        );
        assert!(a.is_over());
    }
}

#[test]
fn the_servers_refusals_reach_the_client_with_their_codes() {
    // At the request: the server's limit.
    let mut conv = greeted();
    let (mut a, request) = Asking::ask(tcp());
    conv.on_message(request);
    let why: Refusal = Limit::Tests { max: 1 }.into();
    let code = why.code();
    let got = feed(&mut a, wire(conv.refused(why)));
    assert!(
        matches!(&got[..], [Err(AskingError::Refused { code: c, .. })] if *c == code),
        "{got:?}"
    );
    assert!(a.is_over());
    // While running: the server's duration limit ends the test.
    let (mut a, mut conv) = running_tcp(Uuid::nil());
    let steps = conv.on_timeout();
    assert!(matches!(steps[0], Step::Abort));
    let got = feed(&mut a, wire(steps));
    assert!(matches!(
        &got[..],
        [Err(AskingError::Refused {
            code: ErrorCode::LimitDuration,
            ..
        })]
    ));
    assert!(a.is_over());
    // Answering a stop or a goodbye with an error ends it too.
    for stopping in [true, false] {
        let (mut a, _) = running_tcp(Uuid::nil());
        match stopping {
            true => a.stop(),
            false => a.goodbye(),
        }
        .unwrap();
        let got = a.on_message(Message::error(ErrorCode::Refused, "no"));
        assert!(matches!(got, Err(AskingError::Refused { .. })));
        assert!(a.is_over());
    }
}

#[test]
fn each_kind_of_test_takes_only_its_own_acceptance() {
    let id = Uuid::from_u128(9);
    let session = Message::TestAccept { session: id };
    let udp_accept = Message::UdpAccept {
        session: id,
        port: 5000,
        token: 77,
    };
    let seq = Message::SeqpacketAccept {
        session: id,
        port: 6000,
    };
    let by_udp = Some(Accept::Udp {
        session: id,
        port: 5000,
        token: 77,
    });
    let cases = [
        (tcp(), Some(Accept::Session(id)), None, None),
        (udp(), None, by_udp, None),
        (rr(RrProto::Tcp), Some(Accept::Session(id)), None, None),
        (rr(RrProto::Udp), None, by_udp, None),
        (
            rr(RrProto::SctpSeqpacket),
            None,
            None,
            Some(Accept::Seqpacket {
                session: id,
                port: 6000,
            }),
        ),
    ];
    for (test, on_session, on_udp, on_seq) in cases {
        for (m, want) in [
            (session.clone(), on_session),
            (udp_accept.clone(), on_udp),
            (seq.clone(), on_seq),
        ] {
            let (mut a, request) = Asking::ask(test.clone());
            assert_eq!(request, Message::TestRequest { test: test.clone() });
            match (a.on_message(m), want) {
                (Ok(Event::Accepted(got)), Some(want)) => assert_eq!(got, want),
                (Err(AskingError::Unexpected { when, .. }), None) => {
                    assert_eq!(when, "to the test request");
                    assert!(a.is_over());
                }
                (got, want) => panic!("{test:?}: {got:?}, wanted {want:?}"),
            }
        }
    }
}

#[test]
fn messages_out_of_turn_end_it_with_a_reason() {
    for m in [Message::StopAck, summary(0), rows(1, false), Message::Stop] {
        let (mut a, _) = running_tcp(Uuid::nil());
        let got = a.on_message(m);
        assert!(
            matches!(
                got,
                Err(AskingError::Unexpected {
                    when: "while the test runs",
                    ..
                })
            ),
            "{got:?}"
        );
        assert!(a.is_over());
    }
    // A summary answers goodbye, not a stop.
    let (mut a, _) = running_tcp(Uuid::nil());
    a.stop().unwrap();
    assert!(matches!(
        a.on_message(summary(0)),
        Err(AskingError::Unexpected {
            when: "to stop",
            ..
        })
    ));
    // Nothing is asked of a test never accepted.
    let (mut a, _) = Asking::ask(tcp());
    assert_eq!((a.stop(), a.goodbye()), (None, None));
}

#[test]
fn the_servers_rows_are_kept_up_to_the_bound_whatever_it_sends() {
    let (mut a, _) = running_tcp(Uuid::nil());
    a.stop().unwrap();
    let got = feed(
        &mut a,
        vec![rows(MAX_SERVER_ROWS - 2, false), rows(5, false)],
    );
    assert_eq!(got, [Ok(Event::Rows), Ok(Event::Rows)]);
    let (kept, truncated) = a.take_rows();
    assert_eq!((kept.len(), truncated), (MAX_SERVER_ROWS, true));
    // Rows taken still count toward the bound; the mark is taken with them.
    a.goodbye().unwrap();
    a.on_message(rows(1, false)).unwrap();
    let (kept, truncated) = a.take_rows();
    assert_eq!((kept.len(), truncated), (0, true));
    assert!(!a.take_rows().1);
    // The server's own mark of rows it left out is kept.
    let (mut a, _) = running_tcp(Uuid::nil());
    a.goodbye().unwrap();
    a.on_message(rows(1, true)).unwrap();
    assert!(a.take_rows().1);
    // Up to the bound nothing is marked.
    let (mut a, _) = running_tcp(Uuid::nil());
    a.goodbye().unwrap();
    a.on_message(rows(1, false)).unwrap();
    let (kept, truncated) = a.take_rows();
    assert_eq!((kept.len(), truncated), (1, false));
    a.on_message(rows(MAX_SERVER_ROWS - 1, false)).unwrap();
    let (kept, truncated) = a.take_rows();
    assert_eq!((kept.len(), truncated), (MAX_SERVER_ROWS - 1, false));
}

#[derive(Debug, Clone)]
enum Input {
    Msg(u8),
    Stop,
    Goodbye,
}

fn message(k: u8) -> Message {
    match k % 9 {
        0 => Message::TestAccept {
            session: Uuid::nil(),
        },
        1 => Message::UdpAccept {
            session: Uuid::nil(),
            port: 1,
            token: 2,
        },
        2 => Message::StopAck,
        3 => rows(2, false),
        4 => summary(1),
        5 => Message::error(ErrorCode::Refused, "no"),
        6 => Message::Stop,
        7 => Message::HelloAck(Message::hello()),
        _ => Message::SeqpacketAccept {
            session: Uuid::nil(),
            port: 3,
        },
    }
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        any::<u8>().prop_map(Input::Msg),
        Just(Input::Stop),
        Just(Input::Goodbye),
    ]
}

proptest! {
    /// Whatever the server sends and whenever the client asks: an error or
    /// a summary is the last thing taken; a test is accepted at most once
    /// and only first; a summary only answers goodbye; stop and goodbye go
    /// out at most once each, and only for an accepted test.
    #[test]
    fn no_sequence_breaks_the_order(
        kind in 0u8..3,
        inputs in proptest::collection::vec(input(), 0..40),
    ) {
        let test = match kind {
            0 => tcp(),
            1 => udp(),
            _ => rr(RrProto::SctpSeqpacket),
        };
        let (mut a, _) = Asking::ask(test);
        let (mut over, mut accepted, mut stops, mut byes, mut first) = (false, 0, 0, 0, true);
        for i in inputs {
            match i {
                Input::Stop => {
                    if a.stop().is_some() {
                        prop_assert!(accepted == 1 && !over && byes == 0);
                        stops += 1;
                    }
                }
                Input::Goodbye => {
                    if a.goodbye().is_some() {
                        prop_assert!(accepted == 1 && !over);
                        byes += 1;
                    }
                }
                Input::Msg(k) => {
                    let got = a.on_message(message(k));
                    prop_assert!(!over || got.is_err(), "taken after the end: {got:?}");
                    match got {
                        Ok(Event::Accepted(_)) => {
                            prop_assert!(first);
                            accepted += 1;
                        }
                        Ok(Event::Summary(_)) => {
                            prop_assert!(byes == 1);
                            over = true;
                        }
                        Ok(_) => prop_assert!(accepted == 1),
                        Err(_) => over = true,
                    }
                    first = false;
                }
            }
            prop_assert_eq!(a.is_over(), over);
        }
        prop_assert!(accepted <= 1 && stops <= 1 && byes <= 1);
    }
}
