//! The control conversation driven in memory: every path of the protocol's
//! order, and arbitrary message sequences that must never break its rules.

use super::*;
use crate::protocol::proto::{IoPattern, TcpSpec, VerifyLevel};
use proptest::prelude::*;

const MAX: Duration = Duration::from_secs(60);

fn hello() -> Hello {
    Message::hello()
}

fn tcp_request() -> Message {
    Message::TestRequest {
        test: TestSpec::Tcp(TcpSpec {
            pattern: IoPattern::Push,
            transfer: 1000,
            push_bytes: 0,
            pull_bytes: 0,
            connections: 1,
            verify: VerifyLevel::Data,
            burst: None,
            time_bound_ms: 0,
            sock: Default::default(),
            rate: None,
            transfer_max: None,
            server_interval_ms: 0,
            duration_ms: 0,
        }),
    }
}

fn key() -> Key {
    Key::from_text(b"correct horse battery staple, twice over").unwrap()
}

fn sent(steps: &[Step]) -> Vec<&Message> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Send(m) => Some(m),
            _ => None,
        })
        .collect()
}

#[test]
fn a_test_runs_from_hello_to_goodbye() {
    let (mut c, steps) = Conversation::new(&hello(), false, None, vec![0; 16], MAX);
    assert!(matches!(sent(&steps)[..], [Message::HelloAck(_)]));
    let steps = c.on_message(tcp_request());
    assert!(matches!(steps[..], [Step::Admit(TestSpec::Tcp(_))]));
    // Nothing is read while the test is being decided.
    assert!(c.on_message(Message::Stop).is_empty());
    let id = Uuid::new_v4();
    let steps = c.accepted(id);
    assert!(matches!(sent(&steps)[..], [Message::TestAccept { session }] if *session == id));
    assert_eq!(c.session(), Some(id));
    let steps = c.on_message(Message::Stop);
    assert!(matches!(
        steps[..],
        [Step::Cancel, Step::Send(Message::StopAck)]
    ));
    assert!(!c.is_done());
    let steps = c.on_message(Message::Goodbye);
    assert!(matches!(steps[..], [Step::Finish, Step::Close]));
    assert!(c.is_done());
    assert!(c.on_message(Message::Goodbye).is_empty());
}

#[test]
fn a_wrong_version_or_an_exiting_server_refuses_at_once() {
    let mut old = hello();
    old.protocol = PROTOCOL_VERSION + 1;
    let (c, steps) = Conversation::new(&old, false, None, vec![], MAX);
    assert!(c.is_done());
    assert!(matches!(
        &steps[..],
        [Step::Refuse(Refusal::Version { client, server })]
            if *client == PROTOCOL_VERSION + 1 && *server == PROTOCOL_VERSION
    ));
    let (c, steps) = Conversation::new(&hello(), true, None, vec![], MAX);
    assert!(c.is_done());
    assert!(matches!(steps[..], [Step::Refuse(Refusal::Exiting)]));
}

#[test]
fn the_key_is_proven_before_anything_else() {
    let k = key();
    let server_nonce = vec![7u8; 16];
    // A client that does not try.
    let (c, steps) = Conversation::new(&hello(), false, Some(k.clone()), server_nonce.clone(), MAX);
    assert!(c.is_done());
    assert!(matches!(
        steps[..],
        [Step::Refuse(Refusal::Auth(AuthFailure::Required))]
    ));
    let client_nonce = vec![3u8; 16];
    let mut h = hello();
    h.nonce = Some(hex::encode(&client_nonce));
    let start = || Conversation::new(&h, false, Some(k.clone()), server_nonce.clone(), MAX);
    // The challenge carries the server's nonce.
    let (_, steps) = start();
    match sent(&steps)[..] {
        [Message::HelloAck(a)] => assert_eq!(a.nonce.as_deref(), Some("07".repeat(16).as_str())),
        _ => panic!("{steps:?}"),
    }
    // A test request instead of the proof.
    let (mut c, _) = start();
    let steps = c.on_message(tcp_request());
    assert!(matches!(
        steps[..],
        [Step::Refuse(Refusal::Auth(AuthFailure::Required))]
    ));
    // A wrong proof.
    let (mut c, _) = start();
    let wrong = key_other().client_proof(&client_nonce, &server_nonce);
    let steps = c.on_message(Message::Auth { proof: wrong });
    assert!(matches!(
        steps[..],
        [Step::Refuse(Refusal::Auth(AuthFailure::WrongKey))]
    ));
    assert!(c.datagram_key().is_none());
    // The right one: the server proves itself back, and both ends hold the
    // same datagram key.
    let (mut c, _) = start();
    let proof = k.client_proof(&client_nonce, &server_nonce);
    let steps = c.on_message(Message::Auth { proof });
    match sent(&steps)[..] {
        [Message::AuthOk { proof }] => {
            assert!(k.verify_server(&client_nonce, &server_nonce, proof))
        }
        _ => panic!("{steps:?}"),
    }
    assert_eq!(
        c.datagram_key(),
        Some(k.datagram_key(&client_nonce, &server_nonce))
    );
    assert!(matches!(c.on_message(tcp_request())[..], [Step::Admit(_)]));
}

fn key_other() -> Key {
    Key::from_text(b"another key entirely, long enough to pass").unwrap()
}

#[test]
fn messages_out_of_turn_end_it_with_a_reason() {
    for m in [Message::Stop, Message::Goodbye, Message::StopAck] {
        let (mut c, _) = Conversation::new(&hello(), false, None, vec![], MAX);
        let steps = c.on_message(m.clone());
        assert!(
            matches!(&steps[..], [Step::Refuse(Refusal::Unexpected { got, .. })] if *got == m.type_name()),
            "{m:?}: {steps:?}"
        );
        assert!(c.is_done());
    }
    // One test per conversation.
    let (mut c, _) = Conversation::new(&hello(), false, None, vec![], MAX);
    c.on_message(tcp_request());
    c.accepted(Uuid::nil());
    let steps = c.on_message(tcp_request());
    assert!(matches!(
        steps[..],
        [Step::Refuse(Refusal::Unexpected { .. })]
    ));
}

#[test]
fn timeouts_malformed_frames_and_refusals() {
    // Before a test, silence ends the conversation without a word.
    let (mut c, _) = Conversation::new(&hello(), false, None, vec![], MAX);
    assert!(matches!(c.on_timeout()[..], [Step::Close]));
    assert!(c.is_done());
    // During one, it is the server's duration limit.
    let (mut c, _) = Conversation::new(&hello(), false, None, vec![], MAX);
    c.on_message(tcp_request());
    c.accepted(Uuid::nil());
    let steps = c.on_timeout();
    assert!(matches!(
        &steps[..],
        [Step::Abort, Step::Refuse(Refusal::Limit(Limit::DurationReached { max }))] if *max == MAX
    ));
    let (mut c, _) = Conversation::new(&hello(), false, None, vec![], MAX);
    let steps = c.on_malformed(ProtoError::BadMagic([0, 0]));
    assert!(matches!(steps[..], [Step::Refuse(Refusal::Malformed(_))]));
    let (mut c, _) = Conversation::new(&hello(), false, None, vec![], MAX);
    c.on_message(tcp_request());
    let steps = c.refused(Limit::Tests { max: 1 }.into());
    assert!(matches!(
        steps[..],
        [Step::Refuse(Refusal::Limit(Limit::Tests { max: 1 }))]
    ));
    // A UDP or rr test keeps the connection: nothing more is read here.
    let (mut c, _) = Conversation::new(&hello(), false, None, vec![], MAX);
    c.on_message(tcp_request());
    c.handed_off();
    assert!(c.is_done());
    assert!(c.on_message(Message::Goodbye).is_empty());
    assert!(c.accepted(Uuid::nil()).is_empty());
    let (mut c, _) = Conversation::new(&hello(), false, None, vec![], MAX);
    assert!(matches!(c.on_closed()[..], [Step::Close]));
    assert!(c.on_closed().is_empty());
}

#[test]
fn a_client_that_leaves_or_stalls_before_its_proof_is_refused_for_the_key() {
    let mut h = hello();
    h.nonce = Some(hex::encode([1u8; 16]));
    let required =
        |steps: &[Step]| matches!(steps, [Step::Refuse(Refusal::Auth(AuthFailure::Required))]);
    let (mut c, _) = Conversation::new(&h, false, Some(key()), vec![2; 16], MAX);
    assert!(required(&c.on_closed()));
    assert!(c.is_done());
    assert!(c.on_closed().is_empty());
    let (mut c, _) = Conversation::new(&h, false, Some(key()), vec![2; 16], MAX);
    assert!(required(&c.on_timeout()));
    assert!(c.is_done());
    // Once proven, leaving is only a close.
    let (mut c, _) = Conversation::new(&h, false, Some(key()), vec![2; 16], MAX);
    c.on_message(Message::Auth {
        proof: key().client_proof(&[1; 16], &[2; 16]),
    });
    assert!(matches!(c.on_closed()[..], [Step::Close]));
}

/// One thing that can happen to a conversation.
#[derive(Debug, Clone)]
enum Input {
    Msg(u8),
    Timeout,
    Malformed,
    Closed,
    Accept,
    Refuse,
    HandOff,
    Proof(bool),
}

fn message(k: u8) -> Message {
    match k % 6 {
        0 => tcp_request(),
        1 => Message::Stop,
        2 => Message::Goodbye,
        3 => Message::StopAck,
        4 => Message::HelloAck(Message::hello()),
        _ => Message::TimeRequest { t1: 1 },
    }
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        any::<u8>().prop_map(Input::Msg),
        Just(Input::Timeout),
        Just(Input::Malformed),
        Just(Input::Closed),
        Just(Input::Accept),
        Just(Input::Refuse),
        Just(Input::HandOff),
        any::<bool>().prop_map(Input::Proof),
    ]
}

proptest! {
    /// Whatever arrives, in whatever order: a refusal or close is the last
    /// step ever; a test is admitted at most once and accepted only after
    /// it was asked for; the key is never skipped; Finish only ends a test.
    #[test]
    fn no_sequence_breaks_the_order(
        keyed in any::<bool>(),
        inputs in proptest::collection::vec(input(), 0..40),
    ) {
        let k = key();
        let (cn, sn) = (vec![1u8; 16], vec![2u8; 16]);
        let mut h = hello();
        h.nonce = Some(hex::encode(&cn));
        let (mut c, first) = Conversation::new(&h, false, keyed.then(|| k.clone()), sn.clone(), MAX);
        let (mut ended, mut admitted, mut asked, mut proven) = (false, 0, false, !keyed);
        let mut running = false;
        let mut all = vec![first];
        for i in inputs {
            let steps = match i {
                Input::Msg(m) => c.on_message(message(m)),
                Input::Timeout => c.on_timeout(),
                Input::Malformed => c.on_malformed(ProtoError::Oversized(1 << 30)),
                Input::Closed => c.on_closed(),
                Input::Accept => c.accepted(Uuid::nil()),
                Input::Refuse => c.refused(Limit::Tests { max: 1 }.into()),
                Input::HandOff => { c.handed_off(); Vec::new() }
                Input::Proof(right) => {
                    let key = if right { k.clone() } else { key_other() };
                    c.on_message(Message::Auth { proof: key.client_proof(&cn, &sn) })
                }
            };
            all.push(steps);
        }
        for steps in &all {
            for s in steps {
                prop_assert!(!ended, "a step after the end: {s:?}");
                match s {
                    Step::Refuse(_) | Step::Close => ended = true,
                    Step::Admit(_) => {
                        prop_assert!(proven, "a test before the key was proven");
                        admitted += 1;
                        asked = true;
                    }
                    Step::Send(Message::AuthOk { .. }) => proven = true,
                    Step::Send(Message::TestAccept { .. }) => {
                        prop_assert!(asked);
                        running = true;
                    }
                    Step::Finish | Step::Cancel | Step::Abort => prop_assert!(running, "{s:?} without a test"),
                    _ => {}
                }
            }
        }
        prop_assert!(admitted <= 1);
        if ended {
            prop_assert!(c.is_done());
        }
    }
}
