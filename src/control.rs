//! The client's end of a control connection, shared by every test kind:
//! connect (trying each resolved address), say hello, ask for a test.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;
use thiserror::Error;

use crate::net;
use crate::protocol::asking::{Accept, Asking, AskingError, Event};
use crate::protocol::auth::Key;
use crate::protocol::greeting::{Greeting, GreetingError, Next};
use crate::protocol::proto::{
    ErrorCode, Message, ProtoError, ReadError, SessionSummary, TestSpec, foreign_server,
    read_message, write_message,
};
use crate::protocol::stats::IntervalRow;

/// How long a client waits for a server's answers once a run is stopping
/// (Ctrl-C, --time): a stuck server must not keep the results from being
/// written.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Set when the user insists on stopping (a third Ctrl-C): runs that are
/// already stopping skip every remaining wait for the server, so the results
/// can still be written before the process exits.
static HURRY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks stopping runs to wait for nothing more.
pub fn hurry() {
    HURRY.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether a stopping run should skip its remaining waits.
pub fn hurried() -> bool {
    HURRY.load(std::sync::atomic::Ordering::SeqCst)
}

/// How long a server has to answer hello before it is taken for something
/// that is not a netrig server.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(3);
use crate::tcp::config::ConfigError;

/// Why a run could not start or the server could not be talked to.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The configuration is unusable.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The request/response configuration is unusable.
    #[error("{0}")]
    RrConfig(#[from] crate::rr::run::RrConfigError),
    /// A target did not resolve or could not be reached.
    #[error("cannot reach {target}: {source}")]
    Connect {
        /// The target as given.
        target: String,
        /// Why.
        source: io::Error,
    },
    /// The control connection failed or spoke nonsense.
    #[error("control connection to {target}: {detail}")]
    Control {
        /// The target.
        target: String,
        /// What went wrong.
        detail: String,
    },
    /// Something answered at the address, but not a netrig server.
    #[error("{target} is not a netrig server ({why})")]
    NotNetrig {
        /// The target and the address that answered.
        target: String,
        /// What it did instead.
        why: String,
    },
    /// The server refused the test.
    #[error("server {target} refused the test: {message}")]
    Refused {
        /// The target.
        target: String,
        /// The reason's code, as the server sent it (or as this client
        /// names a refusal it makes itself): what code and tests match.
        code: ErrorCode,
        /// The server's reason.
        message: String,
    },
    /// This client holds a key and the server did not prove it knows it
    /// (authentication is mutual): it runs without a key, or with another.
    #[error("server {target} did not prove it knows the key: {why}")]
    Unproven {
        /// The target.
        target: String,
        /// What the server did instead.
        why: &'static str,
    },
    /// A socket option the test asks for cannot be applied here.
    #[error(transparent)]
    SockOpt(#[from] crate::net::sockopt::SockOptFailed),
    /// A test no server would run as asked (the server's own check, made
    /// before asking).
    #[error("{0}")]
    Invalid(#[from] crate::protocol::refusal::Invalid),
    /// This host lacks a transport the test needs.
    #[error(transparent)]
    Unsupported(#[from] crate::protocol::refusal::Unsupported),
}

impl ClientError {
    /// The refusal's code, when the server (or this client) refused.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Refused { code, .. } => Some(*code),
            ClientError::Unproven { .. } => Some(ErrorCode::Auth),
            _ => None,
        }
    }
}

/// `target` as it is reached: with `port` when it names none, so an error
/// says which port could not be reached.
fn with_port(target: &str, port: u16) -> String {
    let t = target.trim();
    if t.parse::<SocketAddr>().is_ok() {
        t.to_string()
    } else if let Ok(ip) = t.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
        SocketAddr::new(ip, port).to_string()
    } else if t.contains(':') {
        t.to_string()
    } else {
        format!("{t}:{port}")
    }
}

/// An open control connection that has exchanged hellos.
pub struct Control {
    /// The target as the user gave it.
    pub target: String,
    /// The address that answered.
    pub addr: SocketAddr,
    /// The connection.
    pub stream: TcpStream,
    /// Key for this session's UDP datagram tags, when the server authenticated us.
    pub datagram_key: Option<crate::protocol::auth::DatagramKey>,
    /// The server reads data hellos in the fixed layout
    /// ([`crate::protocol::proto::COMPACT_DATA_HELLO`]).
    pub compact_data_hello: bool,
    /// The conversation after the greeting, once a test was asked for.
    asking: Option<Asking>,
}

impl Control {
    /// Connects to the first address of `target` that answers (from the local
    /// address `bind` picks for it) and exchanges hellos.
    pub fn connect(
        target: &str,
        port: u16,
        bind: impl Fn(SocketAddr) -> Result<Option<IpAddr>, ConfigError>,
        timeout: Duration,
        key: Option<&Key>,
    ) -> Result<Control, ClientError> {
        Self::connect_over(target, port, bind, timeout, net::Via::default(), key)
    }

    /// As [`Control::connect`], over TCP or one-to-one SCTP, perhaps bound
    /// to an interface.
    pub fn connect_over(
        target: &str,
        port: u16,
        bind: impl Fn(SocketAddr) -> Result<Option<IpAddr>, ConfigError>,
        timeout: Duration,
        via: net::Via<'_>,
        key: Option<&Key>,
    ) -> Result<Control, ClientError> {
        Self::connect_within(target, port, bind, timeout, timeout, via, key)
    }

    /// As [`Control::connect_over`], giving up on each address's TCP
    /// handshake after `connect` (`--connect-timeout`); `timeout` bounds
    /// the waits for the server's answers once connected.
    pub fn connect_within(
        target: &str,
        port: u16,
        bind: impl Fn(SocketAddr) -> Result<Option<IpAddr>, ConfigError>,
        connect: Duration,
        timeout: Duration,
        via: net::Via<'_>,
        key: Option<&Key>,
    ) -> Result<Control, ClientError> {
        let conn_err = |source| ClientError::Connect {
            target: with_port(target, port),
            source,
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        let mut found = None;
        for addr in net::resolve(target, port).map_err(conn_err)? {
            match net::connect_stream(addr, bind(addr)?, connect, via) {
                Ok(s) => {
                    found = Some((addr, s));
                    break;
                }
                // A black-holed address says nothing: name the limit that
                // ended the wait, so the user knows which knob to turn.
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    last = io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no answer within {connect:?} (--connect-timeout)"),
                    )
                }
                Err(e) => last = e,
            }
        }
        let (addr, stream) = found.ok_or_else(|| conn_err(last))?;
        Self::greet(target, addr, stream, timeout, key)
    }

    /// Says hello on `stream`, connected to `addr` (what `target` named),
    /// and with a key proves it both ways; `timeout` bounds the waits for the
    /// server's answers.
    pub(crate) fn greet(
        target: &str,
        addr: SocketAddr,
        stream: TcpStream,
        timeout: Duration,
        key: Option<&Key>,
    ) -> Result<Control, ClientError> {
        // Best effort: keepalive only speeds up noticing a vanished server.
        let _ = net::keepalive(&stream);
        let _ = stream.set_read_timeout(Some(timeout));
        let mut c = Control {
            target: target.to_string(),
            addr,
            stream,
            datagram_key: None,
            compact_data_hello: false,
            asking: None,
        };
        let (mut greeting, hello) = Greeting::new(key, crate::protocol::auth::nonce());
        c.send(&hello)?;
        let _ = c.stream.set_read_timeout(Some(timeout.min(HELLO_TIMEOUT)));
        let mut reply = c.hello_reply()?;
        let _ = c.stream.set_read_timeout(Some(timeout));
        loop {
            match greeting.on_message(reply) {
                Ok(Next::Send(m)) => reply = c.call(&m)?,
                Ok(Next::Ready(datagram_key)) => {
                    c.datagram_key = datagram_key;
                    c.compact_data_hello = greeting.compact_data_hello();
                    return Ok(c);
                }
                Err(e) => return Err(c.not_greeted(e)),
            }
        }
    }

    /// Reads the answer to our hello, naming what answered when it is not a
    /// netrig server: silence, a close, or another protocol's first bytes.
    fn hello_reply(&mut self) -> Result<Message, ClientError> {
        let not_netrig = |c: &Control, why: String| ClientError::NotNetrig {
            // The address that answered, when the target named it otherwise.
            target: if c.target == c.addr.to_string() {
                c.target.clone()
            } else {
                format!("{} ({})", c.target, c.addr)
            },
            why,
        };
        match read_message(&mut self.stream) {
            Ok(Message::Error { code, message }) => Err(self.refused(code, message)),
            Ok(m) => Ok(m),
            Err(ReadError::Proto(ProtoError::BadMagic(m))) => {
                let first = if m[1] == 0 { &m[..1] } else { &m[..] };
                let why = foreign_server(first).map_or_else(
                    || format!("it answered with bytes {first:02x?}"),
                    str::to_string,
                );
                Err(not_netrig(self, why))
            }
            Err(ReadError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                let secs = self
                    .stream
                    .read_timeout()
                    .ok()
                    .flatten()
                    .unwrap_or(HELLO_TIMEOUT)
                    .as_secs_f64();
                Err(not_netrig(
                    self,
                    format!("no reply to hello within {secs}s"),
                ))
            }
            Err(ReadError::Eof) => Err(not_netrig(
                self,
                "it closed the connection without answering hello".into(),
            )),
            Err(e) => Err(self.failed(e.to_string())),
        }
    }

    /// Sends a message and reads the reply; an error reply becomes [`ClientError::Refused`].
    pub fn call(&mut self, msg: &Message) -> Result<Message, ClientError> {
        self.send(msg)?;
        self.recv()
    }

    /// Sends one message.
    pub fn send(&mut self, msg: &Message) -> Result<(), ClientError> {
        write_message(&mut self.stream, msg).map_err(|e| self.failed(e.to_string()))
    }

    /// Reads one message; an error reply becomes [`ClientError::Refused`].
    pub fn recv(&mut self) -> Result<Message, ClientError> {
        match read_message(&mut self.stream) {
            Ok(Message::Error { code, message }) => Err(self.refused(code, message)),
            Ok(m) => Ok(m),
            Err(e) => Err(self.failed(e.to_string())),
        }
    }

    /// Asks for a test; returns the server's acceptance, of the kind the
    /// test calls for.
    pub fn request(&mut self, test: TestSpec) -> Result<Accept, ClientError> {
        let (asking, request) = Asking::ask(test);
        self.asking = Some(asking);
        self.send(&request)?;
        match self.answer()? {
            Event::Accepted(a) => Ok(a),
            e => Err(self.failed(format!("unexpected answer to the test request: {e:?}"))),
        }
    }

    /// Reads the server's next message into the conversation.
    fn answer(&mut self) -> Result<Event, ClientError> {
        let m = read_message(&mut self.stream).map_err(|e| self.failed(e.to_string()))?;
        let Some(asking) = self.asking.as_mut() else {
            return Err(self.unexpected(m));
        };
        asking.on_message(m).map_err(|e| match e {
            AskingError::Refused { code, message } => self.refused(code, message),
            e @ AskingError::Unexpected { .. } => self.failed(e.to_string()),
        })
    }

    /// Sends what `step` makes of the conversation (a stop, a goodbye), then
    /// reads until the server answers it, taking its rows and messages that
    /// need nothing on the way. Waits at most `grace` in all, and no longer
    /// once the user insists on stopping: a stuck server must not keep the
    /// results from being written. `None`: nothing to send, it could not go
    /// out, or no answer came in time.
    fn finish_step(
        &mut self,
        step: fn(&mut Asking) -> Option<Message>,
        grace: Duration,
    ) -> Option<Result<Event, ClientError>> {
        let msg = step(self.asking.as_mut()?)?;
        let _ = self.stream.set_write_timeout(Some(grace));
        self.send(&msg).ok()?;
        let deadline = std::time::Instant::now() + grace;
        loop {
            if hurried() || std::time::Instant::now() >= deadline {
                return None;
            }
            if !net::wait_readable(&self.stream, Duration::from_millis(100)) {
                continue;
            }
            let _ = self.stream.set_read_timeout(Some(grace));
            match self.answer() {
                Ok(Event::Rows | Event::Skipped) => continue,
                r => return Some(r),
            }
        }
    }

    /// Asks the running test to stop (the server counts its connections
    /// cancelled): whether the server answered within `grace`, with its
    /// acknowledgement or a reason.
    pub fn stop_test(&mut self, grace: Duration) -> bool {
        matches!(
            self.finish_step(Asking::stop, grace),
            Some(Ok(Event::Stopped) | Err(ClientError::Refused { .. }))
        )
    }

    /// Says goodbye: the server's summary of the session, if it came within
    /// `grace`.
    pub fn goodbye(&mut self, grace: Duration) -> Option<SessionSummary> {
        match self.finish_step(Asking::goodbye, grace)? {
            Ok(Event::Summary(s)) => Some(*s),
            _ => None,
        }
    }

    /// The server's own rows that came with its answers (at most
    /// [`crate::protocol::proto::MAX_SERVER_ROWS`]), and whether any were
    /// left out.
    pub fn take_server_rows(&mut self) -> (Vec<IntervalRow>, bool) {
        self.asking
            .as_mut()
            .map_or_else(Default::default, Asking::take_rows)
    }

    /// A control failure naming this target.
    pub fn failed(&self, detail: impl Into<String>) -> ClientError {
        ClientError::Control {
            target: self.target.clone(),
            detail: detail.into(),
        }
    }

    /// A server that did not prove it knows our key.
    pub fn unproven(&self, why: &'static str) -> ClientError {
        ClientError::Unproven {
            target: self.target.clone(),
            why,
        }
    }

    /// A refusal naming this target.
    pub fn refused(&self, code: ErrorCode, message: String) -> ClientError {
        ClientError::Refused {
            target: self.target.clone(),
            code,
            message,
        }
    }

    /// Whether the server has closed or reset the control connection, checked
    /// without blocking and without consuming anything it sent.
    ///
    /// Tests whose data moves elsewhere (UDP) call this now and then: the
    /// control connection is the only sign that a server died.
    pub fn peer_gone(&self) -> bool {
        crate::net::peer_state(&self.stream) == crate::net::PeerState::Gone
    }

    /// Why the greeting failed, naming this target.
    fn not_greeted(&self, e: GreetingError) -> ClientError {
        match e {
            GreetingError::Refused { code, message } => self.refused(code, message),
            GreetingError::Unproven(why) => self.unproven(why),
            GreetingError::Nonce(e) => self.failed(e.to_string()),
            GreetingError::Unexpected(m) => self.unexpected(*m),
        }
    }

    /// A reply that makes no sense at this point.
    pub fn unexpected(&self, m: Message) -> ClientError {
        self.failed(format!("unexpected reply {m:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::with_port;

    #[test]
    fn an_error_names_the_port_the_target_was_tried_at() {
        assert_eq!(with_port("127.0.0.1", 5555), "127.0.0.1:5555");
        assert_eq!(with_port("::1", 5555), "[::1]:5555");
        assert_eq!(with_port("[::1]", 5555), "[::1]:5555");
        assert_eq!(with_port("127.0.0.1:1", 5555), "127.0.0.1:1");
        assert_eq!(with_port("host.example", 80), "host.example:80");
        assert_eq!(with_port("host.example:81", 80), "host.example:81");
    }
}
