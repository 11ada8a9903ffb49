//! `netrig serve`: one port, many clients, no test options.
//!
//! Every accepted connection says in its first frame whether it is a control
//! connection (a client describing a test) or a data connection of a session
//! set up earlier. Accepted connections go to a few event loops (`core.rs`,
//! two per core): a connection that says nothing costs no thread, TCP data
//! connections live on the loops, and a control connection moves to a thread
//! of its own. A session lives exactly as long as its control connection:
//! when that closes — Goodbye, a crash, a vanished client — the session's
//! data connections end (cancelled) and its state is freed, so the server can
//! never be left "busy".

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::conversation::{Conversation, Step};
use crate::proto::{
    Hello, Message, PROTOCOL_VERSION, ReadError, TestSpec, read_message, write_message,
};
use crate::refusal::{Limit, Refusal};

mod core;
mod groups;
pub mod limits;
mod lines;
mod log;
mod tcp;

use crate::net::Timed;
use limits::{ClientSlot, Slot, take_slot};
pub use limits::{GRACE, Limits};
use tcp::{Session, validate};

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

pub(crate) struct State {
    cfg: ServerConfig,
    sessions: Mutex<HashMap<Uuid, Arc<Session>>>,
    admitted: AtomicU64,
    finished: AtomicU64,
    stop: Arc<AtomicBool>,
    tests: AtomicU64,
    per_client: Mutex<HashMap<IpAddr, u32>>,
    tests_per_client: Mutex<HashMap<IpAddr, u32>>,
    /// Connections being served.
    open: AtomicU64,
    /// UDP stream groups open for more streams.
    groups: groups::Groups,
}

/// How long the accept loop rests when the process is out of descriptors.
pub(super) const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Least time between two accept-failure log lines.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

/// Accept failures, logged at most once per [`ACCEPT_LOG_EVERY`] with a count.
#[derive(Default)]
pub(super) struct RateLimitedLog {
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    pub(super) fn note(&mut self, e: &io::Error, verbosity: u8) {
        if self.last.is_some_and(|t| t.elapsed() < ACCEPT_LOG_EVERY) {
            self.suppressed += 1;
            return;
        }
        if verbosity >= 1 {
            let more = match self.suppressed {
                0 => String::new(),
                n => format!(" ({n} more since the last report)"),
            };
            eprintln!("accept: {e}{more}");
        }
        self.last = Some(Instant::now());
        self.suppressed = 0;
    }
}

/// A bound server, ready to [`Server::run`].
pub struct Server {
    /// TCP listeners first, then SCTP ones.
    listeners: Vec<TcpListener>,
    tcp_listeners: usize,
    state: Arc<State>,
    core: core::Core,
}

impl Server {
    /// Binds the listening sockets.
    pub fn bind(cfg: ServerConfig) -> io::Result<Server> {
        let (listen, port, verbosity) = (cfg.listen.clone(), cfg.port, cfg.verbosity);
        let state = Arc::new(State {
            cfg,
            sessions: Mutex::new(HashMap::new()),
            admitted: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            tests: AtomicU64::new(0),
            per_client: Mutex::new(HashMap::new()),
            tests_per_client: Mutex::new(HashMap::new()),
            open: AtomicU64::new(0),
            groups: groups::Groups::default(),
        });
        // The event loops exist before anything can connect.
        let threads = crate::net::event_loops();
        let core = core::Core::start(&state, threads)?;
        let bound = if listen.is_empty() {
            crate::net::default_listeners(port)
        } else {
            listen.iter().map(|a| crate::net::listen(*a)).collect()
        };
        let listeners: Vec<TcpListener> = match bound {
            // Accepted connections inherit Nagle off from their listener,
            // which saves a call per connection.
            Ok(l) => l
                .into_iter()
                .inspect(|l| {
                    let _ = socket2::SockRef::from(l).set_tcp_nodelay(true);
                })
                .collect(),
            Err(e) => {
                // Nothing to serve: the event loops end.
                state.stop.store(true, SeqCst);
                return Err(e);
            }
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
                    Err(e) if verbosity >= 2 => eprintln!("no SCTP listener on {a}: {e}"),
                    Err(_) => {}
                }
            }
        }
        let clones: io::Result<Vec<TcpListener>> = listeners[..tcp_listeners]
            .iter()
            .map(TcpListener::try_clone)
            .collect();
        if !core.listen(clones?) {
            state.stop.store(true, SeqCst);
            return Err(io::Error::other("the event loops did not start"));
        }
        Ok(Server {
            listeners,
            tcp_listeners,
            state,
            core,
        })
    }

    /// The TCP addresses actually bound (useful with port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners[..self.tcp_listeners]
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Prints the addresses it listens on, a line each.
    pub fn announce(&self) {
        for a in self.local_addrs() {
            crate::out!("netrig server listening on {a} (protocol v{PROTOCOL_VERSION})");
        }
    }

    /// Whether the kernel picked a listening port (`:0`).
    pub fn picked_port(&self) -> bool {
        let cfg = &self.state.cfg;
        if cfg.listen.is_empty() {
            cfg.port == 0
        } else {
            cfg.listen.iter().any(|a| a.port() == 0)
        }
    }

    /// A flag that makes [`Server::run`] return when set.
    pub fn stop_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.state.stop)
    }

    /// Accepts and serves until stopped or `exit_after` is reached.
    pub fn run(self) -> io::Result<()> {
        let st = &self.state;
        if st.cfg.verbosity >= 1 {
            self.announce();
            if st.cfg.key.is_some() {
                crate::out!("clients must authenticate with the pre-shared key");
            }
            if self.listeners.len() > self.tcp_listeners {
                crate::out!("also accepting SCTP on the same addresses");
            }
        }
        let core = &self.core;
        let mut accept_log = RateLimitedLog::default();
        // TCP is accepted on the first event loop; this thread accepts SCTP.
        let sctp = &self.listeners[self.tcp_listeners..];
        while !st.stop.load(SeqCst) {
            if sctp.is_empty() {
                std::thread::sleep(Duration::from_millis(100));
            }
            let ready = match sctp.is_empty() {
                true => Vec::new(),
                false => crate::net::poll_readable(sctp, Duration::from_millis(100))?,
            };
            for (l, r) in sctp.iter().zip(ready) {
                if !r {
                    continue;
                }
                loop {
                    match l.accept() {
                        Ok((s, peer)) => self.admit(core, s, peer),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        // Per-connection failures (ECONNABORTED, EMFILE) must not stop the server.
                        Err(e) => {
                            // Out of descriptors, the pending connection stays
                            // queued and the listener stays readable: back off
                            // instead of spinning, and say so once in a while.
                            let starved =
                                matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                            accept_log.note(&e, st.cfg.verbosity);
                            if starved {
                                std::thread::sleep(ACCEPT_BACKOFF);
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
        // The event loops end once their connections have.
        st.stop.store(true, SeqCst);
        Ok(())
    }

    /// Counts an accepted connection in and hands it to an event loop, or
    /// refuses it when the server holds `--max-conns` already.
    fn admit(&self, core: &core::Core, stream: TcpStream, peer: SocketAddr) {
        if count_in(&self.state, &stream, peer) && !core.hand(stream, peer) {
            self.state.open.fetch_sub(1, SeqCst);
        }
    }
}

/// Counts a new connection in `open`, or refuses it when the server holds
/// `--max-conns` already.
fn count_in(st: &State, stream: &TcpStream, peer: SocketAddr) -> bool {
    if st.open.fetch_add(1, SeqCst) >= u64::from(st.cfg.limits.max_conns) {
        st.open.fetch_sub(1, SeqCst);
        // Refused here: a short frame into an empty send buffer never blocks.
        let _ = stream.set_nonblocking(true);
        let why = Limit::OpenConnections {
            max: st.cfg.limits.max_conns,
        }
        .into();
        log_refusal(st, peer, &why);
        reply_error(stream, &why);
        return false;
    }
    true
}

/// Every refusal, and every test stopped at a limit or ended by an error
/// sent to the client, is one line of the log (verbosity 1 and up): the
/// client's address and the reason, which names the limit. Under a flood
/// the lines are rate-limited, and those not written are counted ([`log`]).
fn log_refusal(st: &State, peer: SocketAddr, why: &Refusal) {
    if st.cfg.verbosity >= 1 {
        log::refusal(format_args!("{peer}: {}: {why}", refusal_verb(why)));
    }
}

/// How the log says what became of the client.
fn refusal_verb(why: &Refusal) -> &'static str {
    match why {
        Refusal::Limit(Limit::DurationReached { .. }) => "stopped",
        _ => "refused",
    }
}

fn reply_error(stream: &TcpStream, why: &Refusal) {
    let mut s = stream;
    // Best effort: the peer may already be gone.
    let _ = write_message(&mut s, &why.message());
}

/// Counts one more connection from `ip`; returns the slot and the count.
fn take_client_slot(map: &Mutex<HashMap<IpAddr, u32>>, ip: IpAddr) -> (ClientSlot<'_>, u32) {
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    let n = m.entry(ip).or_insert(0);
    *n += 1;
    (ClientSlot { map, ip }, *n)
}

/// Takes a test slot, server-wide and for `ip`, or names the limit reached.
fn take_test_slots(st: &State, ip: IpAddr) -> Result<(Slot<'_>, ClientSlot<'_>), Limit> {
    let limits = st.cfg.limits;
    let all = take_slot(&st.tests, u64::from(limits.max_tests)).ok_or(Limit::Tests {
        max: limits.max_tests,
    })?;
    let (mine, n) = take_client_slot(&st.tests_per_client, ip);
    if n > limits.max_tests_per_client {
        return Err(Limit::TestsPerClient {
            max: limits.max_tests_per_client,
            ip,
            has: n - 1,
        });
    }
    Ok((all, mine))
}

fn control(st: &State, stream: &TcpStream, peer: SocketAddr, hello: Hello, setup: Instant) {
    let exiting = st
        .cfg
        .exit_after
        .is_some_and(|n| st.admitted.load(SeqCst) >= n);
    let limits = st.cfg.limits;
    let (mut conv, mut steps) = Conversation::new(
        &hello,
        exiting,
        st.cfg.key.clone(),
        crate::auth::nonce_bytes(),
        limits.max_duration,
    );
    let _ = crate::net::keepalive(stream);
    let mut s = stream;
    let mut session: Option<(Uuid, Arc<Session>)> = None;
    let mut _test_slots = None;
    // Before a test: the setup deadline bounds the greeting and the proof.
    let mut reader = Timed::new(stream, st.cfg.handshake_timeout, setup);
    'talk: loop {
        let mut i = 0;
        while i < steps.len() {
            let step = std::mem::replace(&mut steps[i], Step::Close);
            i += 1;
            match step {
                Step::Send(m) => {
                    if write_message(&mut s, &m).is_err() {
                        break 'talk;
                    }
                }
                Step::Refuse(why) => {
                    log_refusal(st, peer, &why);
                    reply_error(stream, &why);
                    break 'talk;
                }
                Step::Close => break 'talk,
                Step::Cancel => {
                    if let Some((_, sess)) = &session {
                        sess.cancel();
                    }
                }
                Step::Abort => {
                    if let Some((_, sess)) = &session {
                        sess.abort();
                    }
                }
                Step::Finish => {
                    if let Some((_, sess)) = &session {
                        // The client may say goodbye while our side of its
                        // last connections is still being counted: wait
                        // briefly for them.
                        let t0 = Instant::now();
                        while sess.counters.in_flight.load(SeqCst) > 0
                            && t0.elapsed() < Duration::from_secs(5)
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        for m in sess.rows_frames() {
                            let _ = write_message(&mut s, &m);
                        }
                        let _ = write_message(&mut s, &Message::Summary(sess.summary()));
                    }
                }
                Step::Admit(test) => {
                    let ip = peer.ip().to_canonical();
                    let group = match &test {
                        TestSpec::Udp(u) => u.group,
                        _ => None,
                    };
                    let now = Instant::now();
                    // A group's later streams ride on its first one's slot.
                    let joined =
                        group.is_some_and(|g| g.index > 0 && st.groups.join(g.id, ip, now));
                    if !joined {
                        match take_test_slots(st, ip) {
                            Ok(slots) => _test_slots = Some(slots),
                            Err(why) => {
                                steps.extend(conv.refused(why.into()));
                                continue;
                            }
                        }
                        if let Some(g) = group.filter(|g| g.index == 0) {
                            st.groups.open(g.id, ip, g.streams.saturating_sub(1), now);
                        }
                    }
                    match admit_test(st, stream, peer, test, conv.datagram_key()) {
                        Admission::HandedOff => {
                            conv.handed_off();
                            break 'talk;
                        }
                        Admission::Refused(why) => steps.extend(conv.refused(why)),
                        Admission::Tcp(id, sess) => {
                            // Control idles during the test; keepalive
                            // notices a vanished client, the deadline ends an
                            // endless session.
                            reader = Timed::new(stream, limits.deadline(), sess.guard.deadline());
                            session = Some((id, sess));
                            steps.extend(conv.accepted(id));
                        }
                    }
                }
            }
        }
        if conv.is_done() {
            break;
        }
        steps = match read_message(&mut reader) {
            Ok(m) => conv.on_message(m),
            Err(ReadError::Proto(e)) => conv.on_malformed(e),
            Err(ReadError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                conv.on_timeout()
            }
            Err(_) => conv.on_closed(),
        };
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

/// What became of a test request.
enum Admission {
    /// A UDP or request/response test ran on this connection, to its end.
    HandedOff,
    /// Refused, with the reason.
    Refused(Refusal),
    /// A TCP test runs as this session.
    Tcp(Uuid, Arc<Session>),
}

/// Runs or registers the test `test` asks for, within the server's limits.
fn admit_test(
    st: &State,
    stream: &TcpStream,
    peer: SocketAddr,
    test: TestSpec,
    datagram_key: Option<crate::auth::DatagramKey>,
) -> Admission {
    let limits = st.cfg.limits;
    match test {
        TestSpec::Udp(spec) => {
            // Checked here too, so that a refusal is answered (and logged)
            // in one place for every kind of test.
            if let Err(why) = crate::udp::serve::check(&spec, limits, datagram_key) {
                return Admission::Refused(why);
            }
            let ran = crate::udp::serve::serve(
                stream,
                peer,
                spec,
                st.cfg.verbosity,
                limits,
                datagram_key,
            );
            if let Err(why) = ran {
                log_refusal(st, peer, &why);
            }
            Admission::HandedOff
        }
        TestSpec::Rr(mut spec) => {
            if let Err(why) = crate::rr::serve::validate(&spec) {
                return Admission::Refused(why.into());
            }
            match limits
                .check_duration(spec.duration_ms)
                .and_then(|()| limits.rr_requests(&spec))
            {
                Ok(n) => spec.iterations = n,
                Err(why) => return Admission::Refused(why.into()),
            }
            let (verbosity, idle) = (st.cfg.verbosity, st.cfg.idle_timeout);
            if let Err(why) = crate::rr::serve::serve(stream, peer, spec, verbosity, idle, limits) {
                log_refusal(st, peer, &why);
            }
            Admission::HandedOff
        }
        TestSpec::Tcp(tcp) => {
            let spec = match validate(&tcp, &limits).and_then(|t| {
                limits.check_duration(t.duration_ms)?;
                Ok(limits.check_bytes(t.transfer_hi()).map(|_| t)?)
            }) {
                Ok(spec) => spec,
                Err(why) => return Admission::Refused(why),
            };
            let id = Uuid::new_v4();
            let sess = Arc::new(Session::new(peer, spec, &limits, datagram_key));
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
            Admission::Tcp(id, sess)
        }
    }
}
