//! The server's end of a control connection as a state machine, without
//! sockets or clocks: it is fed the messages the client sends (and
//! timeouts, malformed frames, the end of the connection) and answers with
//! the [`Step`]s the I/O layer takes — what to send, whether to admit a
//! test, cancel, finish or close. The protocol's order lives here: hello
//! and version, the pre-shared-key proof, one test request, then stop and
//! goodbye; anything else out of turn ends the conversation with a reason.
//!
//! Whether a test fits the server's limits is the I/O layer's answer to
//! [`Step::Admit`] ([`Conversation::accepted`], [`Conversation::refused`],
//! [`Conversation::handed_off`]), as it needs the server's shared state.

use std::time::Duration;
use uuid::Uuid;

use crate::protocol::auth::{DatagramKey, Key};
use crate::protocol::proto::{Hello, Message, PROTOCOL_VERSION, ProtoError, TestSpec};
use crate::protocol::refusal::{AuthFailure, Limit, Refusal};

/// What the I/O layer does next, in order.
#[derive(Debug)]
pub enum Step {
    /// Write this message.
    Send(Message),
    /// Write this refusal (its code and text), then close.
    Refuse(Refusal),
    /// Decide on this test and answer with `accepted`, `refused` or
    /// `handed_off`.
    Admit(TestSpec),
    /// Stop the running test (the client asked): connections end cancelled.
    Cancel,
    /// The running test overran its deadline: end its connections now.
    Abort,
    /// Send the test's summary once its connections are counted, then close.
    Finish,
    /// Close the connection.
    Close,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting for the client's proof of the key.
    Proving {
        client_nonce: Vec<u8>,
        server_nonce: Vec<u8>,
    },
    /// Greeted: a test request may come.
    Idle,
    /// A test request is with the I/O layer.
    Admitting,
    /// A TCP test runs under this session.
    Running(Uuid),
    /// Over: nothing more is read.
    Done,
}

/// One control conversation, server side.
#[derive(Debug)]
pub struct Conversation {
    state: State,
    key: Option<Key>,
    datagram_key: Option<DatagramKey>,
    max_duration: Duration,
}

impl Conversation {
    /// Starts from the client's hello. `exiting`: the server takes no more
    /// tests; `server_nonce`: fresh random bytes for the key exchange (unused
    /// without a key); `max_duration`: the limit named if a test overruns.
    pub fn new(
        hello: &Hello,
        exiting: bool,
        key: Option<Key>,
        server_nonce: Vec<u8>,
        max_duration: Duration,
    ) -> (Conversation, Vec<Step>) {
        let mut c = Conversation {
            state: State::Done,
            key,
            datagram_key: None,
            max_duration,
        };
        let steps = if hello.protocol != PROTOCOL_VERSION {
            c.refuse(Refusal::Version {
                client: hello.protocol,
                server: PROTOCOL_VERSION,
            })
        } else if exiting {
            c.refuse(Refusal::Exiting)
        } else if c.key.is_none() {
            c.state = State::Idle;
            vec![Step::Send(Message::HelloAck(Message::hello()))]
        } else {
            let client_nonce = hello
                .nonce
                .as_deref()
                .and_then(|n| crate::protocol::auth::decode_nonce(n).ok());
            match client_nonce {
                None => c.refuse(AuthFailure::Required.into()),
                Some(client_nonce) => {
                    let mut ack = Message::hello();
                    ack.nonce = Some(hex::encode(&server_nonce));
                    c.state = State::Proving {
                        client_nonce,
                        server_nonce,
                    };
                    vec![Step::Send(Message::HelloAck(ack))]
                }
            }
        };
        (c, steps)
    }

    /// The session's datagram key, once the client proved the key.
    pub fn datagram_key(&self) -> Option<DatagramKey> {
        self.datagram_key
    }

    /// Whether the conversation is over.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The TCP session running under this conversation, if any.
    pub fn session(&self) -> Option<Uuid> {
        match self.state {
            State::Running(id) => Some(id),
            _ => None,
        }
    }

    fn refuse(&mut self, why: Refusal) -> Vec<Step> {
        self.state = State::Done;
        vec![Step::Refuse(why)]
    }

    fn unexpected(&mut self, m: &Message, context: &'static str) -> Vec<Step> {
        self.refuse(Refusal::Unexpected {
            got: m.type_name(),
            context,
        })
    }

    /// The client sent `m`.
    pub fn on_message(&mut self, m: Message) -> Vec<Step> {
        match (&self.state, m) {
            (State::Done | State::Admitting, _) => Vec::new(),
            (
                State::Proving {
                    client_nonce,
                    server_nonce,
                },
                Message::Auth { proof },
            ) => {
                let (cn, sn) = (client_nonce.clone(), server_nonce.clone());
                let Some(key) = self.key.clone() else {
                    return self.refuse(AuthFailure::Required.into());
                };
                if !key.verify_client(&cn, &sn, &proof) {
                    return self.refuse(AuthFailure::WrongKey.into());
                }
                self.datagram_key = Some(key.datagram_key(&cn, &sn));
                self.state = State::Idle;
                vec![Step::Send(Message::AuthOk {
                    proof: key.server_proof(&cn, &sn),
                })]
            }
            (State::Proving { .. }, _) => self.refuse(AuthFailure::Required.into()),
            (State::Idle, Message::TestRequest { test }) => {
                self.state = State::Admitting;
                vec![Step::Admit(test)]
            }
            (State::Running(_), Message::Stop) => vec![Step::Cancel, Step::Send(Message::StopAck)],
            (State::Running(_), Message::Goodbye) => {
                self.state = State::Done;
                vec![Step::Finish, Step::Close]
            }
            (State::Idle | State::Running(_), m) => {
                self.unexpected(&m, "on the control connection")
            }
        }
    }

    /// The I/O layer admitted the TCP test as `session`.
    pub fn accepted(&mut self, session: Uuid) -> Vec<Step> {
        if self.state != State::Admitting {
            return Vec::new();
        }
        self.state = State::Running(session);
        vec![Step::Send(Message::TestAccept { session })]
    }

    /// The I/O layer refused the test.
    pub fn refused(&mut self, why: Refusal) -> Vec<Step> {
        if self.state != State::Admitting {
            return Vec::new();
        }
        self.refuse(why)
    }

    /// The I/O layer runs the test on this connection itself (UDP and
    /// request/response tests keep the connection to the end).
    pub fn handed_off(&mut self) {
        if self.state == State::Admitting {
            self.state = State::Done;
        }
    }

    /// No message came in time: the setup deadline before a test, the
    /// server's duration limit during one.
    pub fn on_timeout(&mut self) -> Vec<Step> {
        match self.state {
            State::Running(_) => {
                let mut steps = vec![Step::Abort];
                steps.extend(
                    self.refuse(
                        Limit::DurationReached {
                            max: self.max_duration,
                        }
                        .into(),
                    ),
                );
                steps
            }
            State::Done => Vec::new(),
            // A client that will not prove the key is refused for it, so
            // the server's log says so (the answer may reach no one).
            State::Proving { .. } => self.refuse(AuthFailure::Required.into()),
            _ => {
                self.state = State::Done;
                vec![Step::Close]
            }
        }
    }

    /// A frame did not decode.
    pub fn on_malformed(&mut self, e: ProtoError) -> Vec<Step> {
        match self.state {
            State::Done => Vec::new(),
            _ => self.refuse(e.into()),
        }
    }

    /// The client closed, or the connection failed.
    pub fn on_closed(&mut self) -> Vec<Step> {
        match self.state {
            State::Done => Vec::new(),
            // A client without the key closes when it learns one is needed.
            State::Proving { .. } => self.refuse(AuthFailure::Required.into()),
            _ => {
                self.state = State::Done;
                vec![Step::Close]
            }
        }
    }
}

/// What `steps` put on the wire to the client, in order: for the tests
/// that run both ends of a conversation in memory.
#[cfg(test)]
pub(crate) fn wire(steps: Vec<Step>) -> Vec<Message> {
    steps
        .into_iter()
        .filter_map(|s| match s {
            Step::Send(m) => Some(m),
            Step::Refuse(r) => Some(r.message()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
#[path = "conversation_tests.rs"]
mod tests;
