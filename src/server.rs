//! `netrig serve`: one port, many clients, no test options.
//!
//! Every accepted connection says in its first frame whether it is a control
//! connection (a client describing a test) or a data connection of a session
//! set up earlier. Each connection gets its own thread. A session lives
//! exactly as long as its control connection: when that closes — Goodbye, a
//! crash, a vanished client — the session's data sockets are shut down and its
//! state freed, so the server can never be left "busy".

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::outcome::ResultKind;
use crate::plan::Role;
use crate::proto::{
    DataHello, ErrorCode, Hello, Message, PROTOCOL_VERSION, ReadError, SessionSummary, TcpSpec,
    TestSpec, read_message, write_message,
};
use crate::stats::Counters;
use crate::tcp::config::MAX_BUFFER;
use crate::tcp::conn::{Transfer, cancel_if_stopped, exchange_finals};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Addresses to listen on; empty means dual-stack `[::]` (or `0.0.0.0`) on `port`.
    pub listen: Vec<SocketAddr>,
    /// Port for the default listen address.
    pub port: u16,
    /// Exit after this many data connections have completed.
    pub exit_after: Option<u64>,
    /// A new connection must send its first frame within this time.
    pub handshake_timeout: Duration,
    /// A data connection making no progress for this long is dropped.
    pub idle_timeout: Duration,
    /// 0 silent, 1 sessions, 2 plus failed connections, 3 every connection.
    pub verbosity: u8,
    /// Caps on what a client may ask this server to send or receive.
    pub limits: Limits,
    /// Require clients to prove they know this pre-shared key.
    pub key: Option<crate::auth::Key>,
}

/// Caps the server enforces on every test request. A refusal names the
/// limit ("server limit: max duration 60 s …").
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Highest UDP stream rate, bit/s.
    pub max_rate_bps: u64,
    /// Longest test of any kind; a TCP session still running then is stopped.
    pub max_duration: Duration,
    /// Most bytes one test may move, both directions together.
    pub max_bytes: u64,
    /// Most tests running at once, from all clients.
    pub max_tests: u32,
    /// Most open connections (control and data) from one client address.
    pub max_conns_per_client: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_rate_bps: 40_000_000_000,
            max_duration: Duration::from_secs(3600),
            max_bytes: 4 << 40,
            max_tests: 64,
            max_conns_per_client: 1024,
        }
    }
}

impl Limits {
    /// How many requests a request/response test may have answered: all it
    /// asks for if they fit `max_bytes`, or, for a test that runs until the
    /// client stops, as many as fit.
    pub fn rr_requests(&self, spec: &crate::proto::RrSpec) -> Result<u64, String> {
        let per = (u64::from(spec.size) + u64::from(spec.reply)).max(1);
        if spec.until_stopped {
            return match self.max_bytes / per {
                0 => Err(format!(
                    "server limit: max bytes per test {} (one request and reply take {per})",
                    self.max_bytes
                )),
                n => Ok(n),
            };
        }
        self.check_bytes(per.saturating_mul(spec.iterations))
            .map(|()| spec.iterations)
    }

    /// Refuses a test that would move more than `max_bytes`.
    pub fn check_bytes(&self, bytes: u64) -> Result<(), String> {
        if bytes > self.max_bytes {
            return Err(format!(
                "server limit: max bytes per test {} (asked for {})",
                self.max_bytes, bytes
            ));
        }
        Ok(())
    }
}

/// Counts something limited; the count goes down when the guard drops.
struct Slot<'a>(&'a AtomicU64);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

/// Takes one of `max` slots, or `None` when all are taken.
fn take_slot(counter: &AtomicU64, max: u64) -> Option<Slot<'_>> {
    let prev = counter.fetch_add(1, SeqCst);
    let slot = Slot(counter);
    (prev < max).then_some(slot)
}

/// Open connections from one client address.
struct ClientSlot<'a> {
    map: &'a Mutex<HashMap<IpAddr, u32>>,
    ip: IpAddr,
}

impl Drop for ClientSlot<'_> {
    fn drop(&mut self) {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: Vec::new(),
            port: crate::net::DEFAULT_PORT,
            exit_after: None,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            verbosity: 1,
            limits: Limits::default(),
            key: None,
        }
    }
}

struct Session {
    peer: SocketAddr,
    spec: TcpSpec,
    /// Bytes promised to data connections so far (transfer each).
    reserved: AtomicU64,
    counters: Counters,
    cancelled: AtomicBool,
    live: Mutex<HashMap<Uuid, TcpStream>>,
    started: Instant,
}

impl Session {
    fn cancel(&self) {
        self.cancelled.store(true, SeqCst);
        for (_, s) in self.live.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Ends the session at once: data connections are reset, not wound
    /// down, so a client blocked in a write learns of it immediately.
    fn abort(&self) {
        self.cancelled.store(true, SeqCst);
        for (_, s) in self.live.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            crate::net::reset(&s);
        }
    }

    fn summary(&self) -> SessionSummary {
        let s = self.counters.snapshot();
        SessionSummary {
            connections: s.completed + s.net_errors + s.data_errors + s.cancelled,
            success: s.completed,
            network_errors: s.net_errors,
            data_errors: s.data_errors,
            cancelled: s.cancelled,
            bytes_sent: s.sent,
            bytes_received: s.received,
            requests: 0,
        }
    }
}

struct State {
    cfg: ServerConfig,
    sessions: Mutex<HashMap<Uuid, Arc<Session>>>,
    admitted: AtomicU64,
    finished: AtomicU64,
    stop: Arc<AtomicBool>,
    tests: AtomicU64,
    per_client: Mutex<HashMap<IpAddr, u32>>,
}

/// A bound server, ready to [`Server::run`].
pub struct Server {
    /// TCP listeners first, then SCTP ones.
    listeners: Vec<TcpListener>,
    tcp_listeners: usize,
    state: Arc<State>,
}

impl Server {
    /// Binds the listening sockets.
    pub fn bind(cfg: ServerConfig) -> io::Result<Server> {
        let listeners = if cfg.listen.is_empty() {
            crate::net::default_listeners(cfg.port)?
        } else {
            cfg.listen
                .iter()
                .map(|a| crate::net::listen(*a))
                .collect::<io::Result<_>>()?
        };
        // Where the kernel has SCTP, accept one-to-one SCTP on the same
        // addresses and ports too (for `rr --proto sctp`); best effort.
        let tcp_listeners = listeners.len();
        let mut listeners = listeners;
        if crate::net::sctp_available() {
            let addrs: Vec<SocketAddr> = listeners
                .iter()
                .filter_map(|l| l.local_addr().ok())
                .collect();
            for a in addrs {
                match crate::net::listen_on(a, crate::net::Stream::Sctp) {
                    Ok(l) => listeners.push(l),
                    Err(e) if cfg.verbosity >= 2 => eprintln!("no SCTP listener on {a}: {e}"),
                    Err(_) => {}
                }
            }
        }
        Ok(Server {
            listeners,
            tcp_listeners,
            state: Arc::new(State {
                cfg,
                sessions: Mutex::new(HashMap::new()),
                admitted: AtomicU64::new(0),
                finished: AtomicU64::new(0),
                stop: Arc::new(AtomicBool::new(false)),
                tests: AtomicU64::new(0),
                per_client: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The TCP addresses actually bound (useful with port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners[..self.tcp_listeners]
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// A flag that makes [`Server::run`] return when set.
    pub fn stop_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.state.stop)
    }

    /// Accepts and serves until stopped or `exit_after` is reached.
    pub fn run(self) -> io::Result<()> {
        let st = &self.state;
        if st.cfg.verbosity >= 1 {
            for a in self.local_addrs() {
                crate::out!("netrig server listening on {a} (protocol v{PROTOCOL_VERSION})");
            }
            if st.cfg.key.is_some() {
                crate::out!("clients must authenticate with the pre-shared key");
            }
            if self.listeners.len() > self.tcp_listeners {
                crate::out!("also accepting SCTP on the same addresses");
            }
        }
        while !st.stop.load(SeqCst) {
            let ready = crate::net::poll_readable(&self.listeners, Duration::from_millis(100))?;
            for (l, r) in self.listeners.iter().zip(ready) {
                if !r {
                    continue;
                }
                loop {
                    match l.accept() {
                        Ok((s, peer)) => self.spawn(s, peer),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        // Per-connection failures (ECONNABORTED, EMFILE) must not stop the server.
                        Err(e) => {
                            if st.cfg.verbosity >= 2 {
                                eprintln!("accept: {e}");
                            }
                            break;
                        }
                    }
                }
            }
            if let Some(n) = st.cfg.exit_after
                && st.finished.load(SeqCst) >= n
            {
                if st.cfg.verbosity >= 1 {
                    crate::out!("exit limit of {n} connections reached; exiting");
                }
                break;
            }
        }
        for s in st
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            s.cancel();
        }
        Ok(())
    }

    fn spawn(&self, stream: TcpStream, peer: SocketAddr) {
        let st = Arc::clone(&self.state);
        let r = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || handle(&st, stream, peer));
        if let Err(e) = r {
            eprintln!("cannot start a thread for {peer}: {e}");
        }
    }
}

fn reply_error(stream: &TcpStream, code: ErrorCode, message: String) {
    let mut s = stream;
    // Best effort: the peer may already be gone.
    let _ = write_message(&mut s, &Message::error(code, message));
}

fn handle(st: &State, stream: TcpStream, peer: SocketAddr) {
    // The listener is non-blocking; accepted sockets must block.
    if stream.set_nonblocking(false).is_err()
        || stream
            .set_read_timeout(Some(st.cfg.handshake_timeout))
            .is_err()
    {
        return;
    }
    let _ = crate::net::set_nodelay(&stream, true);
    let ip = peer.ip().to_canonical();
    let (_client, open) = {
        let mut m = st.per_client.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        *n += 1;
        let slot = ClientSlot {
            map: &st.per_client,
            ip,
        };
        (slot, *n)
    };
    let max = st.cfg.limits.max_conns_per_client;
    if open > max {
        return reply_error(
            &stream,
            ErrorCode::Refused,
            format!("server limit: max {max} connections per client address ({ip} has {open})"),
        );
    }
    let mut s = &stream;
    match read_message(&mut s) {
        Ok(Message::Hello(h)) => control(st, &stream, peer, h),
        Ok(Message::DataHello(h)) => data(st, &stream, peer, h),
        Ok(m) => reply_error(
            &stream,
            ErrorCode::UnexpectedMessage,
            format!("expected hello or data hello, got {}", msg_name(&m)),
        ),
        Err(ReadError::Proto(e)) => {
            if st.cfg.verbosity >= 2 {
                eprintln!("{peer}: {e}");
            }
            reply_error(&stream, ErrorCode::Malformed, e.to_string());
        }
        Err(e) => {
            if st.cfg.verbosity >= 2 {
                eprintln!("{peer}: no hello: {e}");
            }
        }
    }
}

fn msg_name(m: &Message) -> String {
    serde_json::to_value(m)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str().map(String::from)))
        .unwrap_or_else(|| "unknown".into())
}

fn validate(t: &TcpSpec) -> Result<TcpSpec, String> {
    if t.transfer == 0 {
        return Err("transfer must be greater than zero".into());
    }
    if t.pattern == crate::proto::IoPattern::Pushpull && (t.push_bytes == 0 || t.pull_bytes == 0) {
        return Err("pushpull needs non-zero push and pull bytes".into());
    }
    if let Some(b) = t.burst {
        if !matches!(
            t.pattern,
            crate::proto::IoPattern::Push | crate::proto::IoPattern::Pull
        ) {
            return Err("bursts need pattern push or pull".into());
        }
        if b.size == 0 || b.period_ms == 0 {
            return Err("burst size and period must be positive".into());
        }
    }
    Ok(t.clone())
}

fn control(st: &State, stream: &TcpStream, peer: SocketAddr, hello: Hello) {
    if hello.protocol != PROTOCOL_VERSION {
        return reply_error(
            stream,
            ErrorCode::UnsupportedVersion,
            format!(
                "client speaks protocol version {}, this server speaks {PROTOCOL_VERSION}",
                hello.protocol
            ),
        );
    }
    if st
        .cfg
        .exit_after
        .is_some_and(|n| st.admitted.load(SeqCst) >= n)
    {
        return reply_error(stream, ErrorCode::Refused, "server is about to exit".into());
    }
    let mut s = stream;
    let mut datagram_key = None;
    match &st.cfg.key {
        None => {
            if write_message(&mut s, &Message::HelloAck(Message::hello())).is_err() {
                return;
            }
        }
        Some(key) => match authenticate(key, stream, &hello) {
            Ok(k) => datagram_key = Some(k),
            Err(why) => {
                if st.cfg.verbosity >= 1 {
                    crate::out!("{peer}: {why}");
                }
                return reply_error(stream, ErrorCode::Refused, why);
            }
        },
    }
    let _ = crate::net::keepalive(stream);
    let mut session: Option<(Uuid, Arc<Session>)> = None;
    let mut _test_slot = None;
    let limits = st.cfg.limits;
    loop {
        let msg = match read_message(&mut s) {
            Ok(m) => m,
            Err(ReadError::Proto(e)) => {
                reply_error(stream, ErrorCode::Malformed, e.to_string());
                break;
            }
            Err(ReadError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) && session.is_some() =>
            {
                if let Some((_, sess)) = &session {
                    sess.abort();
                }
                reply_error(
                    stream,
                    ErrorCode::Refused,
                    format!(
                        "server limit: max duration {} s reached; session stopped",
                        limits.max_duration.as_secs_f64()
                    ),
                );
                break;
            }
            Err(_) => break,
        };
        if matches!(msg, Message::TestRequest { .. }) && session.is_none() {
            match take_slot(&st.tests, u64::from(limits.max_tests)) {
                Some(slot) => _test_slot = Some(slot),
                None => {
                    reply_error(
                        stream,
                        ErrorCode::Refused,
                        format!(
                            "server limit: max {} concurrent tests reached; try again later",
                            limits.max_tests
                        ),
                    );
                    break;
                }
            }
        }
        match (msg, &session) {
            (
                Message::TestRequest {
                    test: TestSpec::Udp(spec),
                },
                None,
            ) => {
                crate::udp::serve::serve(
                    stream,
                    peer,
                    spec,
                    st.cfg.verbosity,
                    st.cfg.limits,
                    datagram_key,
                );
                break;
            }
            (
                Message::TestRequest {
                    test: TestSpec::Rr(spec),
                },
                None,
            ) => {
                let mut spec = spec;
                match limits.rr_requests(&spec) {
                    Ok(n) => spec.iterations = n,
                    Err(why) => {
                        reply_error(stream, ErrorCode::Refused, why);
                        break;
                    }
                }
                crate::rr::serve::serve(
                    stream,
                    peer,
                    spec,
                    st.cfg.verbosity,
                    st.cfg.idle_timeout,
                    st.cfg.limits.max_duration,
                );
                break;
            }
            (
                Message::TestRequest {
                    test: TestSpec::Tcp(tcp),
                },
                None,
            ) => match validate(&tcp).and_then(|t| limits.check_bytes(t.transfer).map(|_| t)) {
                Ok(spec) => {
                    let id = Uuid::new_v4();
                    let sess = Arc::new(Session {
                        peer,
                        spec,
                        reserved: AtomicU64::new(0),
                        counters: Counters::default(),
                        cancelled: AtomicBool::new(false),
                        live: Mutex::new(HashMap::new()),
                        started: Instant::now(),
                    });
                    if st.cfg.verbosity >= 1 {
                        let t = &sess.spec;
                        crate::out!(
                            "session {id} from {peer}: tcp {:?}, {} bytes per connection, {} connections, verify {:?}",
                            t.pattern,
                            t.transfer,
                            t.connections,
                            t.verify
                        );
                    }
                    st.sessions
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id, Arc::clone(&sess));
                    session = Some((id, sess));
                    // Control idles during the test; keepalive notices a
                    // vanished client, the timeout ends an endless session.
                    let _ = stream.set_read_timeout(Some(limits.max_duration));
                    if write_message(&mut s, &Message::TestAccept { session: id }).is_err() {
                        break;
                    }
                }
                Err(why) => {
                    reply_error(stream, ErrorCode::Refused, why);
                    break;
                }
            },
            (Message::Stop, Some((_, sess))) => {
                sess.cancel();
                if write_message(&mut s, &Message::StopAck).is_err() {
                    break;
                }
            }
            (Message::Goodbye, Some((_, sess))) => {
                // The client may say goodbye while our side of its last
                // connections is still being counted: wait briefly for them.
                let t0 = Instant::now();
                while sess.counters.in_flight.load(SeqCst) > 0
                    && t0.elapsed() < Duration::from_secs(5)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = write_message(&mut s, &Message::Summary(sess.summary()));
                break;
            }
            (m, _) => {
                reply_error(
                    stream,
                    ErrorCode::UnexpectedMessage,
                    format!("unexpected {} on control connection", msg_name(&m)),
                );
                break;
            }
        }
    }
    if let Some((id, sess)) = session {
        sess.cancel();
        st.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        if st.cfg.verbosity >= 1 {
            let sum = sess.summary();
            crate::out!(
                "session {id} from {} ended after {:.3}s: {} connections, {} succeeded, {} network errors, {} data errors, {} cancelled; {} bytes sent, {} bytes received",
                sess.peer,
                sess.started.elapsed().as_secs_f64(),
                sum.connections,
                sum.success,
                sum.network_errors,
                sum.data_errors,
                sum.cancelled,
                sum.bytes_sent,
                sum.bytes_received
            );
        }
    }
}

/// The message a client without the key gets.
pub const AUTH_REQUIRED: &str =
    "authentication required: this server needs a pre-shared key (--key FILE or NETRIG_KEY)";

/// Runs the challenge-response on a control connection (see `crate::auth`);
/// returns the session's datagram key.
fn authenticate(
    key: &crate::auth::Key,
    stream: &TcpStream,
    hello: &Hello,
) -> Result<crate::auth::DatagramKey, String> {
    let client_nonce = hello
        .nonce
        .as_deref()
        .and_then(|n| crate::auth::decode_nonce(n).ok())
        .ok_or_else(|| AUTH_REQUIRED.to_string())?;
    let server_nonce = crate::auth::nonce();
    let mut ack = Message::hello();
    ack.nonce = Some(server_nonce.clone());
    let mut s = stream;
    write_message(&mut s, &Message::HelloAck(ack)).map_err(|e| e.to_string())?;
    let sn = crate::auth::decode_nonce(&server_nonce).map_err(|e| e.to_string())?;
    match read_message(&mut s) {
        Ok(Message::Auth { proof }) if key.verify_client(&client_nonce, &sn, &proof) => {
            let proof = key.server_proof(&client_nonce, &sn);
            write_message(&mut s, &Message::AuthOk { proof }).map_err(|e| e.to_string())?;
            Ok(key.datagram_key(&client_nonce, &sn))
        }
        Ok(Message::Auth { .. }) => Err("authentication failed: wrong key".into()),
        Ok(_) => Err(AUTH_REQUIRED.into()),
        Err(e) => Err(format!("authentication: {e}")),
    }
}

fn data(st: &State, stream: &TcpStream, peer: SocketAddr, hello: DataHello) {
    let sess = st
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&hello.session)
        .cloned();
    let Some(sess) = sess else {
        return reply_error(
            stream,
            ErrorCode::UnknownSession,
            format!("unknown session {}", hello.session),
        );
    };
    if hello.buffer == 0 || u64::from(hello.buffer) > MAX_BUFFER {
        return reply_error(
            stream,
            ErrorCode::Refused,
            format!("buffer size {} outside 1..={MAX_BUFFER}", hello.buffer),
        );
    }
    let promised = sess
        .reserved
        .fetch_add(sess.spec.transfer, SeqCst)
        .saturating_add(sess.spec.transfer);
    if promised > st.cfg.limits.max_bytes {
        return reply_error(
            stream,
            ErrorCode::Refused,
            format!(
                "server limit: max bytes per test {} reached",
                st.cfg.limits.max_bytes
            ),
        );
    }
    if let Some(n) = st.cfg.exit_after
        && st.admitted.fetch_add(1, SeqCst) >= n
    {
        return reply_error(
            stream,
            ErrorCode::Refused,
            format!("server exit limit of {n} connections reached"),
        );
    }
    // Counted before the ack so a Goodbye waits for this connection's result.
    sess.counters.in_flight.fetch_add(1, SeqCst);
    {
        let mut live = sess.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(c) = stream.try_clone() {
            live.insert(hello.connection, c);
        }
    }
    let idle = Some(st.cfg.idle_timeout);
    let _ = stream.set_read_timeout(idle);
    let _ = stream.set_write_timeout(idle);
    let mut s = stream;
    let kind = if sess.cancelled.load(SeqCst) {
        reply_error(stream, ErrorCode::Refused, "session stopped".into());
        ResultKind::Cancelled
    } else if write_message(
        &mut s,
        &Message::DataAck {
            connection: hello.connection,
        },
    )
    .is_err()
    {
        ResultKind::NetworkError
    } else {
        let (mut mine, bursts) = Transfer {
            stream,
            connection: hello.connection,
            role: Role::Server,
            buffer: hello.buffer as usize,
            spec: &sess.spec,
            counters: &sess.counters,
        }
        .run_with_bursts();
        cancel_if_stopped(&mut mine, sess.cancelled.load(SeqCst));
        let (mine, result) = exchange_finals(stream, mine);
        if sess.spec.burst.is_some()
            && matches!(result.kind, ResultKind::Success | ResultKind::DataError)
        {
            // Our account of each burst, for the client to print (it only reads).
            let mut s = stream;
            let mut chunks = bursts.chunks(100).peekable();
            if chunks.peek().is_none() {
                let _ = write_message(
                    &mut s,
                    &Message::TcpBursts {
                        bursts: Vec::new(),
                        last: true,
                    },
                );
            }
            while let Some(c) = chunks.next() {
                let last = chunks.peek().is_none();
                if write_message(
                    &mut s,
                    &Message::TcpBursts {
                        bursts: c.to_vec(),
                        last,
                    },
                )
                .is_err()
                {
                    break;
                }
            }
        }
        let show = match result.kind {
            ResultKind::Success | ResultKind::Cancelled => st.cfg.verbosity >= 3,
            _ => st.cfg.verbosity >= 2,
        };
        if show {
            crate::out!(
                "{} {peer} sent {} received {} {} {}",
                hello.connection,
                mine.sent,
                mine.received,
                result.kind,
                result.detail
            );
        }
        result.kind
    };
    sess.live
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&hello.connection);
    sess.counters.record(kind);
    sess.counters.in_flight.fetch_sub(1, SeqCst);
    st.finished.fetch_add(1, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{RrProto, RrSpec};

    fn spec(iterations: u64, until_stopped: bool) -> RrSpec {
        RrSpec {
            proto: RrProto::Udp,
            size: 60,
            reply: 40,
            iterations,
            nagle: false,
            until_stopped,
        }
    }

    #[test]
    fn rr_requests_fit_max_bytes() {
        let l = Limits {
            max_bytes: 1000,
            ..Limits::default()
        };
        // 100 bytes a round trip: 10 fit.
        assert_eq!(l.rr_requests(&spec(10, false)), Ok(10));
        assert!(l.rr_requests(&spec(11, false)).is_err());
        assert!(l.rr_requests(&spec(u64::MAX, false)).is_err());
        // Until stopped: as many as fit, whatever iterations says.
        assert_eq!(l.rr_requests(&spec(u64::MAX, true)), Ok(10));
        let tiny = Limits {
            max_bytes: 99,
            ..Limits::default()
        };
        assert!(tiny.rr_requests(&spec(1, true)).is_err());
    }
}
