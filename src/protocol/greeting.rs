//! The client's opening of a control connection as a state machine, without
//! sockets or clocks: hello, the server's hello, and with a key the mutual
//! proof (the client proves it holds the key, then checks that the server
//! does too). Fed each message the server sends, it says what to send next,
//! when the client may ask for a test, or why it must give up. The server's
//! half is [`crate::protocol::conversation`]; `control.rs` runs this one over a socket.
//!
//! What is not a netrig frame at all (another protocol answering, silence, a
//! close) is the I/O layer's to name, as only it sees the bytes and the time.

use thiserror::Error;

use crate::protocol::auth::{AuthError, DatagramKey, Key, decode_nonce};
use crate::protocol::proto::{ErrorCode, Hello, Message, PROTOCOL_VERSION};

/// What the client does next.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Send this and feed the server's answer back.
    Send(Box<Message>),
    /// Greeted: a test may be asked for. With a key, the session's datagram
    /// key derived from both nonces.
    Ready(Option<DatagramKey>),
}

/// Why the greeting failed.
#[derive(Debug, Error, PartialEq)]
pub enum GreetingError {
    /// The server refused (an error frame), or cannot be spoken to: another
    /// protocol version, or it wants a key this client was not given.
    #[error("{message}")]
    Refused {
        /// The reason's code.
        code: ErrorCode,
        /// The reason.
        message: String,
    },
    /// This client holds a key and the server did not prove it holds it.
    #[error("{0}")]
    Unproven(&'static str),
    /// A nonce that is not one.
    #[error("{0}")]
    Nonce(#[from] AuthError),
    /// A message that has no place in a greeting.
    #[error("unexpected reply {0:?}")]
    Unexpected(Box<Message>),
}

#[derive(Debug)]
enum State<'k> {
    /// Our hello is out; the server's is awaited.
    Hello,
    /// Our proof is out; the server's is awaited.
    Proving {
        key: &'k Key,
        client_nonce: Vec<u8>,
        server_nonce: Vec<u8>,
    },
    /// Greeted or failed: nothing more is read.
    Over,
}

/// One client greeting.
#[derive(Debug)]
pub struct Greeting<'k> {
    key: Option<&'k Key>,
    client_nonce: String,
    state: State<'k>,
    compact_data_hello: bool,
}

impl<'k> Greeting<'k> {
    /// Starts a greeting with `client_nonce` (fresh random hex; the server
    /// uses it only with a key) and returns the hello to send.
    pub fn new(key: Option<&'k Key>, client_nonce: String) -> (Greeting<'k>, Message) {
        let mut hello = Message::hello();
        hello.nonce = Some(client_nonce.clone());
        let g = Greeting {
            key,
            client_nonce,
            state: State::Hello,
            compact_data_hello: false,
        };
        (g, Message::Hello(hello))
    }

    /// Whether the greeting has ended, greeted or failed.
    pub fn is_over(&self) -> bool {
        matches!(self.state, State::Over)
    }

    /// Whether the server said it reads a data hello in the fixed layout
    /// ([`crate::protocol::proto::COMPACT_DATA_HELLO`]); false until its hello came.
    pub fn compact_data_hello(&self) -> bool {
        self.compact_data_hello
    }

    /// The server's next message.
    pub fn on_message(&mut self, m: Message) -> Result<Next, GreetingError> {
        let state = std::mem::replace(&mut self.state, State::Over);
        match (state, m) {
            (State::Over, m) => Err(GreetingError::Unexpected(Box::new(m))),
            (_, Message::Error { code, message }) => Err(GreetingError::Refused { code, message }),
            (State::Hello, Message::HelloAck(h)) => self.on_hello(h),
            (
                State::Proving {
                    key,
                    client_nonce,
                    server_nonce,
                },
                Message::AuthOk { proof },
            ) => match key.verify_server(&client_nonce, &server_nonce, &proof) {
                true => Ok(Next::Ready(Some(
                    key.datagram_key(&client_nonce, &server_nonce),
                ))),
                false => Err(GreetingError::Unproven("its proof does not match our key")),
            },
            (_, m) => Err(GreetingError::Unexpected(Box::new(m))),
        }
    }

    fn on_hello(&mut self, h: Hello) -> Result<Next, GreetingError> {
        if h.protocol != PROTOCOL_VERSION {
            return Err(GreetingError::Refused {
                code: ErrorCode::UnsupportedVersion,
                message: format!("server speaks protocol {}", h.protocol),
            });
        }
        self.compact_data_hello = h.reads_compact_data_hello();
        match (h.nonce, self.key) {
            (Some(_), None) => Err(GreetingError::Refused {
                code: ErrorCode::Auth,
                message: "server requires authentication: give --key FILE or set NETRIG_KEY".into(),
            }),
            (Some(server_nonce), Some(key)) => {
                let client_nonce = decode_nonce(&self.client_nonce)?;
                let server_nonce = decode_nonce(&server_nonce)?;
                let proof = key.client_proof(&client_nonce, &server_nonce);
                self.state = State::Proving {
                    key,
                    client_nonce,
                    server_nonce,
                };
                Ok(Next::Send(Box::new(Message::Auth { proof })))
            }
            // A client given a key talks only to a server that proves it
            // holds the same key: one that asks for none could be anyone.
            (None, Some(_)) => Err(GreetingError::Unproven(
                "it asks for no key (it runs without --key)",
            )),
            (None, None) => Ok(Next::Ready(None)),
        }
    }
}

#[cfg(test)]
#[path = "greeting_tests.rs"]
mod tests;
