//! `netrig serve`: one port, many clients, no test options.
//!
//! Every accepted connection says in its first frame whether it is a control
//! connection (a client describing a test) or a data connection of a session
//! set up earlier. Accepted connections go to a few event loops (`core.rs`,
//! two per core): a connection that says nothing costs no thread, control
//! conversations (`control.rs`) and TCP data connections live on the loops,
//! and only an admitted UDP or request/response test runs on a worker
//! thread, holding one of `--max-tests`. A session lives exactly as long as its control connection:
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

use crate::protocol::proto::{PROTOCOL_VERSION, TestSpec};
use crate::protocol::refusal::{Drawn, Limit, Refusal, Share};

pub mod account;
mod control;
mod core;
mod groups;
mod iperf2;
mod iperf2_tcp;
mod iperf3;
pub mod limits;
mod lines;
mod log;
mod loop_session;
mod loop_turn;
pub(crate) mod metrics;
mod rr_sctp;
mod rr_tcp;
mod rr_udp;
pub(crate) mod scrape;
mod sources;
mod tcp;
mod udp_recv;
mod udp_send;

use limits::take_slot;
pub use limits::{GRACE, Limits};
pub use log::LogFormat;
use metrics::Kind;
use sources::{PerSource, SourceSlot};
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
    pub key: Option<crate::protocol::auth::Key>,
    /// Text lines or JSON objects (`--log-format`).
    pub log_format: LogFormat,
    /// Serve iperf3 clients on this port too (`--iperf3-port`).
    pub iperf3_port: Option<u16>,
    /// Let iperf3 clients in although a key is set: they cannot prove it.
    pub iperf3_allow_unauthenticated: bool,
    /// Serve iperf3 clients on the main port too, told apart by their
    /// first bytes (`--iperf3-detect`).
    pub iperf3_detect: bool,
    /// Serve iperf2 clients on this port (`--iperf2-port`).
    pub iperf2_port: Option<u16>,
    /// Let iperf2 clients in although a key is set: they cannot prove it.
    pub iperf2_allow_unauthenticated: bool,
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
            log_format: LogFormat::Text,
            iperf3_port: None,
            iperf3_allow_unauthenticated: false,
            iperf3_detect: false,
            iperf2_port: None,
            iperf2_allow_unauthenticated: false,
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
    /// Threads of the sender pool in use (`udp_send.rs`).
    senders: Arc<std::sync::atomic::AtomicUsize>,
    /// Connections per client address and prefix, identified or not.
    per_client: PerSource,
    tests_per_client: PerSource,
    /// UDP streams per client address and prefix.
    streams_per_client: PerSource,
    /// Connections that said who they are (`--max-conns`).
    open: AtomicU64,
    /// Resident memory, bytes, as loop 0 last read it (`--max-memory`).
    resident: AtomicU64,
    /// What running tests have drawn of `--max-memory` ([`account`]).
    memory: account::Account,
    /// UDP stream groups open for more streams.
    groups: groups::Groups,
    /// What `--metrics` reports.
    metrics: metrics::Metrics,
    /// Running iperf3 tests, for their streams to find them.
    iperf3: Arc<iperf3::Registry>,
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
    /// Where `--metrics` is served.
    metrics: Option<SocketAddr>,
    /// Where iperf3 clients are served (`--iperf3-port`).
    iperf3: Option<SocketAddr>,
    /// Where iperf2 clients are served (`--iperf2-port`).
    iperf2: Option<SocketAddr>,
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
            senders: Arc::default(),
            per_client: PerSource::default(),
            tests_per_client: PerSource::default(),
            streams_per_client: PerSource::default(),
            open: AtomicU64::new(0),
            resident: AtomicU64::new(crate::net::resident_bytes()),
            memory: account::Account::default(),
            groups: groups::Groups::default(),
            metrics: metrics::Metrics::default(),
            iperf3: Arc::default(),
        });
        // The event loops exist before anything can connect.
        let base = crate::net::event_loops();
        let core = core::Core::start(&state, base, crate::net::data_loops())?;
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
        let iperf3 = match state.cfg.iperf3_port {
            None => None,
            Some(p) => match iperf3::start(&state, p) {
                Ok(a) => Some(a),
                Err(e) => {
                    state.stop.store(true, SeqCst);
                    return Err(io::Error::new(e.kind(), format!("iperf3 port {p}: {e}")));
                }
            },
        };
        let iperf2 = match state.cfg.iperf2_port {
            None => None,
            Some(p) => match iperf2::start(&state, p, core.clone()) {
                Ok(a) => Some(a),
                Err(e) => {
                    state.stop.store(true, SeqCst);
                    return Err(io::Error::new(e.kind(), format!("iperf2 port {p}: {e}")));
                }
            },
        };
        if state.cfg.iperf3_detect {
            let addrs: Vec<SocketAddr> = listeners[..tcp_listeners]
                .iter()
                .filter_map(|l| l.local_addr().ok())
                .collect();
            if let Err(e) = iperf3::start_detect(&state, &addrs) {
                state.stop.store(true, SeqCst);
                return Err(io::Error::new(
                    e.kind(),
                    format!("iperf3 on the main port's UDP: {e}"),
                ));
            }
        }
        Ok(Server {
            listeners,
            tcp_listeners,
            state,
            core,
            metrics: None,
            iperf3,
            iperf2,
        })
    }

    /// Serves the metrics (`--metrics`) on `listener`, from a thread of
    /// their own that ends with the server.
    pub fn serve_metrics(&mut self, listener: TcpListener) -> io::Result<SocketAddr> {
        let at = listener.local_addr()?;
        scrape::start(Arc::clone(&self.state), listener)?;
        self.metrics = Some(at);
        Ok(at)
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
        let format = self.state.cfg.log_format;
        for a in self.local_addrs() {
            log::event(
                format,
                "listening",
                format_args!("netrig server listening on {a} (protocol v{PROTOCOL_VERSION})"),
                || serde_json::json!({"address": a.to_string(), "protocol": PROTOCOL_VERSION}),
            );
        }
        if let Some(a) = self.metrics {
            log::event(
                format,
                "metrics_listening",
                format_args!("metrics at http://{a}/metrics"),
                || serde_json::json!({"address": a.to_string()}),
            );
        }
        if let Some(a) = self.iperf3 {
            log::event(
                format,
                "iperf3_listening",
                format_args!("iperf3 clients served on {a} (TCP and UDP)"),
                || serde_json::json!({"address": a.to_string()}),
            );
        }
        if let Some(a) = self.iperf2 {
            log::event(
                format,
                "iperf2_listening",
                format_args!("iperf2 clients served on {a} (TCP and UDP)"),
                || serde_json::json!({"address": a.to_string()}),
            );
        }
    }

    /// The address iperf2 clients are served on, if any.
    pub fn iperf2_addr(&self) -> Option<SocketAddr> {
        self.iperf2
    }

    /// The address iperf3 clients are served on, if any.
    pub fn iperf3_addr(&self) -> Option<SocketAddr> {
        self.iperf3
    }

    /// Whether the kernel picked a listening port (`:0`).
    pub fn picked_port(&self) -> bool {
        let cfg = &self.state.cfg;
        if cfg.iperf3_port == Some(0) || cfg.iperf2_port == Some(0) {
            return true;
        }
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
            let format = st.cfg.log_format;
            if st.cfg.key.is_some() {
                log::event(
                    format,
                    "key_required",
                    format_args!("clients must authenticate with the pre-shared key"),
                    || serde_json::json!({}),
                );
            }
            if self.listeners.len() > self.tcp_listeners {
                log::event(
                    format,
                    "sctp_listening",
                    format_args!("also accepting SCTP on the same addresses"),
                    || serde_json::json!({}),
                );
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
                    log::event(
                        st.cfg.log_format,
                        "exit",
                        format_args!("exit limit of {n} connections reached; exiting"),
                        || serde_json::json!({ "exit_after": n }),
                    );
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

    /// Hands an accepted connection to an event loop.
    fn admit(&self, core: &core::Core, stream: TcpStream, peer: SocketAddr) {
        core.hand(stream, peer);
    }
}

/// Every refusal, and every test stopped at a limit or ended by an error
/// sent to the client, is one line of the log (verbosity 1 and up): the
/// client's address and the reason, which names the limit. Under a flood
/// the lines are rate-limited, and those not written are counted ([`log`]).
/// Every one counts in the metrics, by its code.
fn log_refusal(st: &State, peer: SocketAddr, why: &Refusal) {
    st.metrics.refused(why.code());
    if st.cfg.verbosity >= 1 {
        log::refusal(st.cfg.log_format, peer, why);
    }
}

/// How the log says what became of the client.
fn refusal_verb(why: &Refusal) -> &'static str {
    match why {
        Refusal::Limit(Limit::DurationReached { .. }) => "stopped",
        _ => "refused",
    }
}

/// Counts one more for `ip` in `per`, or names the limit (`max` for the
/// address, [`sources::PREFIX_SHARE`] × `max` for its network) it would pass.
fn take_source<'a>(
    per: &'a PerSource,
    ip: IpAddr,
    max: u32,
    what: Share,
) -> Result<SourceSlot<'a>, Limit> {
    per.take(ip, max).map_err(|over| match over {
        sources::Over::Address { has } => Limit::PerClient { what, max, ip, has },
        sources::Over::Prefix { prefix, has } => Limit::PerPrefix {
            what,
            max: max.saturating_mul(sources::PREFIX_SHARE),
            prefix,
            has,
        },
    })
}

/// Most UDP streams one address may run at once: half the server's tests,
/// so that one address's groups can never hold every test slot.
fn max_streams_per_client(limits: &Limits) -> u32 {
    (limits.max_tests / 2).max(1)
}

/// Takes the slots `test` needs, or says why not (a request no server would
/// run, or the limit reached): one of the
/// server's `--max-tests` for every test and every UDP stream (a sent one
/// runs on a worker thread of its own); one of its address's
/// `--max-tests-per-client` for a test, or for a UDP group as a whole (as
/// iperf3 counts one test however many streams it has); and for UDP, one of
/// its address's [`max_streams_per_client`].
fn take_test_slots<'a>(
    st: &'a State,
    ip: IpAddr,
    test: &TestSpec,
    now: Instant,
) -> Result<control::TestSlots<'a>, Refusal> {
    let limits = st.cfg.limits;
    limits.check_memory(st.resident.load(SeqCst))?;
    // A request no server would run is refused as such, not charged for
    // (its charge could be anything).
    match test {
        TestSpec::Udp(u) => crate::udp::serve::sane(u)?,
        TestSpec::Rr(r) => crate::rr::serve::validate(r)?,
        TestSpec::Tcp(_) => {}
    }
    let memory = st
        .memory
        .take(account::test_bytes(test), limits.max_memory, Drawn::Test)?;
    let group = match test {
        TestSpec::Udp(u) => Some(u.group),
        _ => None,
    };
    let test = take_slot(&st.tests, u64::from(limits.max_tests)).ok_or(Limit::Tests {
        max: limits.max_tests,
    })?;
    let streams = match group {
        None => None,
        Some(_) => {
            let max = max_streams_per_client(&limits);
            Some(take_source(
                &st.streams_per_client,
                ip,
                max,
                Share::UdpStreams,
            )?)
        }
    };
    // A group's later streams ride on its first one's client slot.
    let group = group.flatten();
    if group.is_some_and(|g| g.index > 0 && st.groups.join(g.id, ip, now)) {
        return Ok(control::TestSlots {
            _test: test,
            _client: None,
            _streams: streams,
            _memory: memory,
        });
    }
    let max = limits.max_tests_per_client;
    let mine = take_source(&st.tests_per_client, ip, max, Share::Tests)?;
    if let Some(g) = group.filter(|g| g.index == 0) {
        st.groups.open(g.id, ip, g.streams.saturating_sub(1), now);
    }
    Ok(control::TestSlots {
        _test: test,
        _client: Some(mine),
        _streams: streams,
        _memory: memory,
    })
}

/// What became of a test request.
enum Admission {
    /// A UDP or request/response test, checked, to leave the conversation
    /// for its session on the loop.
    Session(control::Test),
    /// Refused, with the reason.
    Refused(Refusal),
    /// A TCP test runs as this session.
    Tcp(Uuid, Arc<Session>),
}

/// Runs or registers the test `test` asks for, within the server's limits
/// (its slots taken, and its request's sanity checked, by
/// [`take_test_slots`]).
fn admit_test(
    st: &State,
    peer: SocketAddr,
    test: TestSpec,
    datagram_key: Option<crate::protocol::auth::DatagramKey>,
) -> Admission {
    let limits = st.cfg.limits;
    match test {
        TestSpec::Udp(spec) => {
            // Checked here too, so that a refusal is answered (and logged)
            // in one place for every kind of test.
            if let Err(why) = crate::udp::serve::check(&spec, limits, datagram_key) {
                return Admission::Refused(why);
            }
            // Received and sent (-R) on the loop (sent by a pool thread
            // if fast).
            Admission::Session(match crate::udp::serve::Outbound::new(Box::new(spec)) {
                Ok(out) => control::Test::UdpSend(out, datagram_key),
                Err(spec) => control::Test::UdpRecv(spec, datagram_key),
            })
        }
        TestSpec::Rr(mut spec) => {
            // Its sizes were checked by `take_test_slots`, before any
            // memory was charged for them.
            match limits
                .check_duration(spec.duration_ms)
                .and_then(|()| limits.rr_requests(&spec))
            {
                Ok(n) => spec.iterations = n,
                Err(why) => return Admission::Refused(why.into()),
            }
            use crate::protocol::proto::RrProto;
            Admission::Session(match spec.proto {
                RrProto::Tcp => control::Test::RrTcp(spec),
                RrProto::Udp => control::Test::RrUdp(spec),
                RrProto::SctpSeqpacket => control::Test::RrSctp(spec),
            })
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
            st.metrics.started(Kind::Tcp);
            if st.cfg.verbosity >= 1 {
                let t = &sess.spec;
                log::event(
                    st.cfg.log_format,
                    "session_start",
                    format_args!(
                        "session {id} from {peer}: tcp {:?}, {} bytes per connection, {} connections, verify {:?}",
                        t.pattern, t.transfer, t.connections, t.verify
                    ),
                    || {
                        serde_json::json!({
                            "session": id.to_string(),
                            "client": peer.to_string(),
                            "kind": Kind::Tcp.name(),
                            "connections": t.connections,
                        })
                    },
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
