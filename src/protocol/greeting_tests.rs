//! The greeting driven in memory against the server's own conversation
//! machine (both ends, no sockets): every way a greeting ends, and arbitrary
//! server messages that must end it cleanly.

use super::*;
use crate::protocol::auth::nonce;
use crate::protocol::conversation::{Conversation, Step, wire};
use crate::protocol::proto::{IoPattern, TcpSpec, TestSpec, VerifyLevel};
use proptest::prelude::*;
use std::time::Duration;

fn key() -> Key {
    Key::from_text(b"correct horse battery staple, twice over").unwrap()
}

fn other_key() -> Key {
    Key::from_text(b"a different horse, battery and staple too").unwrap()
}

/// Both ends: the client with `ck`, the server with `sk`. The greeting's
/// end, the server's conversation, and how many messages crossed.
fn greet(ck: Option<&Key>, sk: Option<&Key>) -> (Result<Next, GreetingError>, Conversation, usize) {
    let (mut g, hello) = Greeting::new(ck, nonce());
    let Message::Hello(h) = hello else {
        panic!("the first message is a hello: {hello:?}")
    };
    let server_nonce = crate::protocol::auth::nonce_bytes();
    let (mut conv, steps) = Conversation::new(
        &h,
        false,
        sk.cloned(),
        server_nonce,
        Duration::from_secs(60),
    );
    let mut inbox = wire(steps);
    let mut crossed = 1 + inbox.len();
    loop {
        assert!(!g.is_over());
        let m = inbox.remove(0);
        match g.on_message(m) {
            Ok(Next::Send(m)) => {
                inbox = wire(conv.on_message(*m));
                crossed += 1 + inbox.len();
            }
            end => {
                assert!(g.is_over(), "{end:?}");
                return (end, conv, crossed);
            }
        }
    }
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

/// The server takes a test request once greeted (its turn to admit).
fn admits(conv: &mut Conversation) -> bool {
    conv.on_message(tcp_request())
        .iter()
        .any(|s| matches!(s, Step::Admit(_)))
}

#[test]
fn without_keys_two_messages_greet_and_a_test_may_be_asked() {
    let (end, mut conv, crossed) = greet(None, None);
    assert_eq!(end, Ok(Next::Ready(None)));
    assert_eq!(crossed, 2);
    assert!(admits(&mut conv));
}

#[test]
fn with_the_same_key_both_ends_prove_it_and_derive_one_datagram_key() {
    let k = key();
    let (end, mut conv, crossed) = greet(Some(&k), Some(&k));
    let Ok(Next::Ready(Some(dk))) = end else {
        panic!("{end:?}")
    };
    assert_eq!(conv.datagram_key(), Some(dk));
    assert_eq!(crossed, 4);
    assert!(admits(&mut conv));
}

#[test]
fn a_client_with_another_key_is_refused_by_the_server() {
    let (ck, sk) = (other_key(), key());
    let (end, conv, _) = greet(Some(&ck), Some(&sk));
    assert!(
        matches!(
            end,
            Err(GreetingError::Refused {
                code: ErrorCode::Auth,
                ..
            })
        ),
        "{end:?}"
    );
    assert!(conv.is_done());
}

#[test]
fn a_client_without_a_key_stops_at_a_server_that_wants_one() {
    let k = key();
    let (end, _, crossed) = greet(None, Some(&k));
    let Err(GreetingError::Refused { code, message }) = end else {
        panic!("{end:?}")
    };
    assert_eq!(code, ErrorCode::Auth);
    assert!(message.contains("--key"), "{message}");
    // Nothing was proven or sent after the server's hello.
    assert_eq!(crossed, 2);
}

#[test]
fn a_client_with_a_key_does_not_trust_a_server_without_one() {
    let k = key();
    let (end, _, _) = greet(Some(&k), None);
    assert_eq!(
        end,
        Err(GreetingError::Unproven(
            "it asks for no key (it runs without --key)"
        ))
    );
}

/// A keyed greeting that has sent its proof and awaits the server's.
fn proving(k: &Key) -> Greeting<'_> {
    let (mut g, _) = Greeting::new(Some(k), nonce());
    let mut ack = Message::hello();
    ack.nonce = Some(nonce());
    let sent = g.on_message(Message::HelloAck(ack));
    assert!(
        matches!(&sent, Ok(Next::Send(m)) if matches!(**m, Message::Auth { .. })),
        "{sent:?}"
    );
    assert!(!g.is_over());
    g
}

#[test]
fn a_server_whose_proof_is_wrong_is_not_trusted() {
    let k = key();
    // A proof made with another key, and one that is not hex at all.
    for proof in [other_key().server_proof(&[1; 16], &[2; 16]), "zz".into()] {
        let mut g = proving(&k);
        assert_eq!(
            g.on_message(Message::AuthOk { proof }),
            Err(GreetingError::Unproven("its proof does not match our key"))
        );
        assert!(g.is_over());
    }
}

#[test]
fn another_protocol_version_is_named() {
    let (mut g, _) = Greeting::new(None, nonce());
    let mut ack = Message::hello();
    ack.protocol = PROTOCOL_VERSION + 1;
    assert_eq!(
        g.on_message(Message::HelloAck(ack)),
        Err(GreetingError::Refused {
            code: ErrorCode::UnsupportedVersion,
            message: format!("server speaks protocol {}", PROTOCOL_VERSION + 1),
        })
    );
    assert!(g.is_over());
}

#[test]
fn a_malformed_server_nonce_is_an_error_not_a_proof() {
    let k = key();
    let (mut g, _) = Greeting::new(Some(&k), nonce());
    let mut ack = Message::hello();
    ack.nonce = Some("not hex".into());
    assert!(matches!(
        g.on_message(Message::HelloAck(ack)),
        Err(GreetingError::Nonce(_))
    ));
}

#[test]
fn an_error_frame_at_any_step_is_the_servers_refusal_with_its_code() {
    let k = key();
    for step in 0..2 {
        let mut g = match step {
            0 => Greeting::new(Some(&k), nonce()).0,
            _ => proving(&k),
        };
        let refused = g.on_message(Message::error(ErrorCode::LimitTests, "full"));
        assert_eq!(
            refused,
            Err(GreetingError::Refused {
                code: ErrorCode::LimitTests,
                message: "full".into()
            })
        );
        assert!(g.is_over());
    }
}

#[test]
fn messages_out_of_turn_end_the_greeting() {
    let k = key();
    // An AuthOk before the server's hello; a second hello while proving;
    // anything once greeted.
    let (mut g, _) = Greeting::new(Some(&k), nonce());
    assert!(matches!(
        g.on_message(Message::AuthOk { proof: "00".into() }),
        Err(GreetingError::Unexpected(_))
    ));
    let mut g = proving(&k);
    assert!(matches!(
        g.on_message(Message::HelloAck(Message::hello())),
        Err(GreetingError::Unexpected(_))
    ));
    let (mut g, _) = Greeting::new(None, nonce());
    assert_eq!(
        g.on_message(Message::HelloAck(Message::hello())),
        Ok(Next::Ready(None))
    );
    assert!(matches!(
        g.on_message(Message::HelloAck(Message::hello())),
        Err(GreetingError::Unexpected(_))
    ));
}

fn server_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        Just(Message::HelloAck(Message::hello())),
        "[0-9a-f]{0,40}".prop_map(|n| {
            let mut h = Message::hello();
            h.nonce = Some(n);
            Message::HelloAck(h)
        }),
        "[0-9a-z]{0,70}".prop_map(|proof| Message::AuthOk { proof }),
        Just(Message::error(ErrorCode::LimitTests, "busy")),
        Just(Message::Goodbye),
    ]
}

proptest! {
    /// Whatever a server sends, a greeting ends once, within two answers,
    /// and a keyed client is ready only with a datagram key.
    #[test]
    fn any_server_ends_a_greeting_once(
        keyed in any::<bool>(),
        msgs in proptest::collection::vec(server_message(), 1..5),
    ) {
        let k = key();
        let (mut g, _) = Greeting::new(keyed.then_some(&k), nonce());
        let mut ended = None;
        for (i, m) in msgs.into_iter().enumerate() {
            let was_over = g.is_over();
            let r = g.on_message(m);
            if was_over {
                prop_assert!(matches!(r, Err(GreetingError::Unexpected(_))));
                continue;
            }
            match r {
                Ok(Next::Send(m)) => {
                    prop_assert!(matches!(*m, Message::Auth { .. }), "sent {m:?}");
                    prop_assert!(keyed && i == 0);
                }
                Ok(Next::Ready(dk)) => {
                    prop_assert_eq!(dk.is_some(), keyed);
                    ended = Some(i);
                }
                Err(_) => ended = Some(i),
            }
            prop_assert_eq!(g.is_over(), ended.is_some());
        }
        if let Some(i) = ended {
            prop_assert!(i <= 1);
        }
    }
}

/// The client learns from the server's hello whether its data hellos may
/// go in the fixed layout: this server's says so, with a key or without;
/// an older server's (no such capability) does not.
#[test]
fn the_servers_hello_says_whether_it_reads_the_data_hello_layout() {
    let older = crate::protocol::proto::Hello {
        capabilities: vec!["tcp".into(), "udp".into(), "rr".into()],
        ..Message::hello()
    };
    for (ack, reads) in [(older, false), (Message::hello(), true)] {
        let (mut g, _) = Greeting::new(None, nonce());
        assert!(!g.compact_data_hello());
        assert_eq!(g.on_message(Message::HelloAck(ack)), Ok(Next::Ready(None)));
        assert_eq!(g.compact_data_hello(), reads);
    }
    let k = key();
    for sk in [None, Some(&k)] {
        let (_, hello) = Greeting::new(sk, nonce());
        let Message::Hello(h) = hello else { panic!() };
        let (_, steps) = Conversation::new(
            &h,
            false,
            sk.cloned(),
            crate::protocol::auth::nonce_bytes(),
            Duration::from_secs(60),
        );
        match &wire(steps)[..] {
            [Message::HelloAck(a)] => assert!(a.reads_compact_data_hello(), "{a:?}"),
            other => panic!("{other:?}"),
        }
    }
}
