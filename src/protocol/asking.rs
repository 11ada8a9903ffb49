//! The client's end of a control conversation once greeted, as a state
//! machine without sockets or clocks: it asks for one test, takes the
//! server's acceptance (of the kind that test calls for) or refusal, and
//! later asks the server to stop and says goodbye, keeping the server's own
//! interval rows on the way and ending with its summary. The greeting before
//! it is [`crate::protocol::greeting`]; the server's half of both is
//! [`crate::protocol::conversation`]. `control.rs` and the engines' clients
//! run it over a socket, and say what only they see: silence, a close,
//! bytes that are not a frame.
//!
//! A UDP stream hands the connection to its own machine once accepted
//! ([`crate::protocol::udp::client_machine`]), which speaks the stream's end;
//! rr over UDP comes back to this one for its goodbye.
//!
//! It is strict: a stop is answered by its acknowledgement (or a reason),
//! and any other message then ends the conversation. The server sends its
//! rows and summary only after goodbye, so a frame out of turn means a
//! server that is not following the protocol, whose summary would not be
//! trusted either.

use thiserror::Error;
use uuid::Uuid;

use crate::protocol::proto::{ErrorCode, MAX_SERVER_ROWS, Message, SessionSummary, TestSpec};
use crate::protocol::spec::RrProto;
use crate::protocol::stats::IntervalRow;

/// How the server accepted the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// A TCP test, or round trips over the control connection itself (TCP,
    /// SCTP one-to-one): the session's ID.
    Session(Uuid),
    /// A UDP stream or UDP round trips: the server's data port and the
    /// token that proves the datagrams are this session's.
    Udp {
        /// The session's ID.
        session: Uuid,
        /// The server's UDP port.
        port: u16,
        /// The session's token.
        token: u64,
    },
    /// Round trips over an SCTP one-to-many association to `port`.
    Seqpacket {
        /// The session's ID.
        session: Uuid,
        /// The server's SCTP port.
        port: u16,
    },
}

/// What the server's message meant.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// The test is accepted: it runs now.
    Accepted(Accept),
    /// The server acknowledged the stop.
    Stopped,
    /// The server's own interval rows came and were kept ([`Asking::take_rows`]).
    Rows,
    /// A message that asks nothing more: a stop's acknowledgement that came
    /// after goodbye went out.
    Skipped,
    /// The server's summary: the conversation is over.
    Summary(Box<SessionSummary>),
}

/// Why the conversation ended before its summary.
#[derive(Debug, Error, PartialEq)]
pub enum AskingError {
    /// The server refused, with its reason's code and text.
    #[error("{message}")]
    Refused {
        /// The reason's code, as it came.
        code: ErrorCode,
        /// The reason.
        message: String,
    },
    /// A message with no place at this point of the conversation (an
    /// acceptance of another kind of test, or anything after the summary).
    #[error("unexpected reply {got:?} {when}")]
    Unexpected {
        /// What came.
        got: Box<Message>,
        /// At which point.
        when: &'static str,
    },
}

/// The acceptance each kind of test calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Session,
    Udp,
    Seqpacket,
}

impl Kind {
    fn of(test: &TestSpec) -> Kind {
        match test {
            TestSpec::Tcp(_) => Kind::Session,
            TestSpec::Udp(_) => Kind::Udp,
            TestSpec::Rr(rr) => match rr.proto {
                RrProto::Tcp => Kind::Session,
                RrProto::Udp => Kind::Udp,
                RrProto::SctpSeqpacket => Kind::Seqpacket,
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The request is out; the answer is awaited.
    Asked(Kind),
    /// Accepted: the test runs. The server speaks only when asked.
    Running,
    /// A stop is out; its acknowledgement is awaited.
    Stopping,
    /// The server acknowledged the stop.
    Stopped,
    /// Goodbye is out; the summary is awaited. `stop_unanswered`: a stop
    /// went out before it and its acknowledgement may still come.
    Ending { stop_unanswered: bool },
    /// Summary, refusal or nonsense: nothing more is read.
    Over,
}

/// The conversation after the greeting, client side.
#[derive(Debug)]
pub struct Asking {
    state: State,
    rows: Vec<IntervalRow>,
    /// Rows already taken, which count toward the bound.
    taken: usize,
    truncated: bool,
}

impl Asking {
    /// Asks for `test`; returns the request to send.
    pub fn ask(test: TestSpec) -> (Asking, Message) {
        let a = Asking {
            state: State::Asked(Kind::of(&test)),
            rows: Vec::new(),
            taken: 0,
            truncated: false,
        };
        (a, Message::TestRequest { test })
    }

    /// Whether the conversation has ended (summary, refusal or nonsense).
    pub fn is_over(&self) -> bool {
        self.state == State::Over
    }

    /// Asks the running test to stop: the message to send, or nothing if
    /// the test is not running (never asked, already stopping, over).
    pub fn stop(&mut self) -> Option<Message> {
        (self.state == State::Running).then(|| {
            self.state = State::Stopping;
            Message::Stop
        })
    }

    /// Says goodbye (the server answers with its summary): the message to
    /// send, or nothing if there is no accepted test to end.
    pub fn goodbye(&mut self) -> Option<Message> {
        matches!(
            self.state,
            State::Running | State::Stopping | State::Stopped
        )
        .then(|| {
            self.state = State::Ending {
                stop_unanswered: self.state == State::Stopping,
            };
            Message::Goodbye
        })
    }

    /// The server's rows kept since the last take (at most
    /// [`MAX_SERVER_ROWS`] in all, however many it sends) and whether any
    /// were left out since, by it or here.
    pub fn take_rows(&mut self) -> (Vec<IntervalRow>, bool) {
        self.taken += self.rows.len();
        (
            std::mem::take(&mut self.rows),
            std::mem::take(&mut self.truncated),
        )
    }

    /// The server sent `m`.
    pub fn on_message(&mut self, m: Message) -> Result<Event, AskingError> {
        let state = std::mem::replace(&mut self.state, State::Over);
        let (next, event) = match (state, m) {
            (State::Over, m) => return Err(unexpected(m, "after the conversation ended")),
            (_, Message::Error { code, message }) => {
                return Err(AskingError::Refused { code, message });
            }
            (State::Asked(kind), m) => (State::Running, Event::Accepted(accept(kind, m)?)),
            (State::Stopping, Message::StopAck) => (State::Stopped, Event::Stopped),
            (
                State::Ending {
                    stop_unanswered: true,
                },
                Message::StopAck,
            ) => (
                State::Ending {
                    stop_unanswered: false,
                },
                Event::Skipped,
            ),
            (
                s @ (State::Stopping | State::Ending { .. }),
                Message::ServerIntervals { rows, truncated },
            ) => {
                let room = MAX_SERVER_ROWS.saturating_sub(self.taken + self.rows.len());
                self.truncated |= truncated || rows.len() > room;
                self.rows.extend(rows.into_iter().take(room));
                (s, Event::Rows)
            }
            (State::Ending { .. }, Message::Summary(s)) => {
                (State::Over, Event::Summary(Box::new(s)))
            }
            (State::Running | State::Stopped, m) => {
                return Err(unexpected(m, "while the test runs"));
            }
            (State::Stopping, m) => return Err(unexpected(m, "to stop")),
            (State::Ending { .. }, m) => return Err(unexpected(m, "to goodbye")),
        };
        self.state = next;
        Ok(event)
    }
}

fn unexpected(m: Message, when: &'static str) -> AskingError {
    AskingError::Unexpected {
        got: Box::new(m),
        when,
    }
}

/// The acceptance `m`, if it is the kind `kind` calls for.
fn accept(kind: Kind, m: Message) -> Result<Accept, AskingError> {
    match (kind, m) {
        (Kind::Session, Message::TestAccept { session }) => Ok(Accept::Session(session)),
        (
            Kind::Udp,
            Message::UdpAccept {
                session,
                port,
                token,
            },
        ) => Ok(Accept::Udp {
            session,
            port,
            token,
        }),
        (Kind::Seqpacket, Message::SeqpacketAccept { session, port }) => {
            Ok(Accept::Seqpacket { session, port })
        }
        (_, m) => Err(unexpected(m, "to the test request")),
    }
}

#[cfg(test)]
#[path = "asking_tests.rs"]
mod tests;
