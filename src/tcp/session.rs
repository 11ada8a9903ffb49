//! The servers a TCP run talks to (one control connection each) and what
//! the run's event loops share: configuration, counters, stop flags and the
//! `--throttle` budget; and the record each data connection ends with.

use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};
use uuid::Uuid;

use super::config::{ConfigError, TcpClientConfig};
use crate::control::STOP_GRACE;
use crate::control::{ClientError, Control};
use crate::protocol::asking::Accept;
use crate::protocol::outcome::ConnResult;
use crate::protocol::proto::{Message, TcpSpec, TestSpec};
use crate::protocol::stats::Counters;

/// One data connection as it ended; a row of the connection file.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionRecord {
    /// Seconds since the run started, when the connection ended.
    pub time_slice: f64,
    /// Local address and port (unspecified if the connect failed).
    pub local: Option<SocketAddr>,
    /// Server address and port.
    pub remote: SocketAddr,
    /// Payload bytes sent.
    pub sent: u64,
    /// Payload bytes received.
    pub received: u64,
    /// Wall time from connect to result, in milliseconds.
    pub time_ms: f64,
    /// Time the TCP handshake (connect) took, in milliseconds (0 if it failed).
    pub connect_ms: f64,
    /// Buffer size used.
    pub buffer: u32,
    /// The agreed result.
    pub result: ConnResult,
    /// The shared connection ID.
    pub connection_id: Uuid,
    /// Burst mode: both ends' account of each burst.
    pub bursts: Vec<crate::protocol::proto::TcpBurst>,
    /// The client end's TCP_INFO as its final report went out (the reading
    /// that report carries), or when the connection ended if it sent none.
    pub tcp_info: Option<crate::net::tcpinfo::TcpInfo>,
    /// The server end's, from its final report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_tcp_info: Option<crate::protocol::proto::TcpInfoSummary>,
    /// The server's reason and its code, when it refused this connection.
    #[serde(skip)]
    pub refused: Option<(crate::protocol::proto::ErrorCode, String)>,
    /// Its place in the run's order of opening (0 first).
    pub index: u64,
    /// The first `TRACKED` connections' bytes so far, sampled with
    /// TCP_INFO in the middle of each interval, from open to end (at most
    /// [`crate::protocol::stats::PROGRESS_POINTS`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub progress: Vec<crate::protocol::stats::Progress>,
}

/// How many connections (the first opened) keep a [`Progress`](crate::protocol::stats::Progress) series: a
/// chart of more lines is unreadable, and iperf3-style runs (`-P N`, one
/// long connection each) fit.
pub const TRACKED: u64 = 32;

/// The fewest `--throttle` places a server's connections may hold however
/// many servers share the throttle.
const MIN_SHARE: u64 = 16;

pub(super) struct ServerControl {
    pub(super) addr: SocketAddr,
    /// The `-B` address this session's connections come from.
    pub(super) bind: Option<IpAddr>,
    pub(super) id: Uuid,
    control: Mutex<Control>,
    /// The session's key (with a pre-shared key), for data connection proofs.
    pub(super) data_key: Option<crate::protocol::auth::DatagramKey>,
    /// The server reads data hellos in the fixed layout (its hello said so).
    pub(super) compact_data_hello: bool,
    /// The server did not answer the stop within the grace period: do not
    /// wait for it a second time.
    pub(super) unresponsive: AtomicBool,
    /// This server's connections being set up (each holding a `--throttle`
    /// place): at most its share ([`Shared::claim_session`]).
    pub(super) setting_up: AtomicU64,
    /// How many of its connections have been opened: the k-th is the
    /// run's connection `k * servers + this one's place` (round robin).
    pub(super) opened: AtomicU64,
}

/// Why no server can take a new connection now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoServer {
    /// Every server that has connections left to open holds its share of
    /// the `--throttle` places: one must finish a setup first.
    Full,
    /// Every server has opened all its connections.
    Done,
}

pub(super) struct Shared {
    pub(super) cfg: TcpClientConfig,
    /// `cfg.spec()`, made once: every connection's machine starts from it.
    pub(super) spec: TcpSpec,
    pub(super) sessions: Vec<ServerControl>,
    pub(super) counters: Counters,
    /// Set on a stop: start no new connections, and a failure from now on
    /// is a cancellation.
    pub(super) stop: AtomicBool,
    /// Set once the servers know of the stop: end every connection now.
    pub(super) abort: AtomicBool,
    /// Set when a server is lost: start no new connections, but let in-flight
    /// ones fail on their own so their errors count as errors.
    pub(super) halt: AtomicBool,
    /// Connections started so far (what an `--open-cap` bounds).
    pub(super) next: AtomicU64,
    /// Connections that may still start (`--throttle` minus those being
    /// set up: connecting, or waiting for the data hello's answer).
    pub(super) throttle: AtomicU64,
    pub(super) start: Instant,
    /// What the kernel granted the first data connection (`--window`,
    /// `--mss`, `--congestion`, `--tos`).
    pub(super) granted: std::sync::OnceLock<crate::net::sockopt::Granted>,
    /// `--cport`: the local ports free for a new connection.
    pub(super) ports: Option<std::sync::Arc<super::ports::PortPool>>,
}

/// A server's own status rows of its session (`--get-server-output`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ServerRows {
    /// The server's address.
    pub server: Option<SocketAddr>,
    /// Its rows, in order.
    pub rows: Vec<crate::protocol::stats::IntervalRow>,
    /// It left rows out (past its cap).
    pub truncated: bool,
}

impl ServerControl {
    /// Says goodbye to the session's server: its summary, if it came within
    /// [`STOP_GRACE`], and its own rows that came before it.
    pub(super) fn goodbye(&self) -> (Option<crate::protocol::proto::SessionSummary>, ServerRows) {
        let mut c = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let summary = c.goodbye(STOP_GRACE);
        let (rows, truncated) = c.take_server_rows();
        let rows = ServerRows {
            server: Some(self.addr),
            rows,
            truncated,
        };
        (summary, rows)
    }
}

/// Whether the server has closed (or reset) a control connection. While
/// the test runs the server never speaks first (it answers a stop or a
/// goodbye), so any readable byte or end of stream means the session is over.
pub(super) fn control_lost(s: &ServerControl) -> bool {
    let c = s.control.lock().unwrap_or_else(|e| e.into_inner());
    crate::net::peer_state(&c.stream) != crate::net::PeerState::Quiet
}

/// The error message a server sent before closing the control connection, if any.
pub(super) fn control_error(s: &ServerControl) -> Option<String> {
    let c = s.control.lock().unwrap_or_else(|e| e.into_inner());
    let _ = c.stream.set_read_timeout(Some(Duration::from_millis(200)));
    let r = crate::protocol::proto::read_message(&mut &c.stream);
    let _ = c.stream.set_read_timeout(None);
    match r {
        Ok(Message::Error { message, .. }) => Some(message),
        _ => None,
    }
}

/// Notes servers that closed their control connection, with the reason
/// they gave, and stops starting connections if there is one.
pub(super) fn note_lost_servers(
    shared: &Shared,
    lost: &mut Vec<SocketAddr>,
    errors: &mut Vec<(SocketAddr, String)>,
    wait: Duration,
) {
    for s in &shared.sessions {
        if !wait.is_zero() {
            let c = s.control.lock().unwrap_or_else(|e| e.into_inner());
            crate::net::wait_readable(&c.stream, wait);
        }
        if !lost.contains(&s.addr) && control_lost(s) {
            if let Some(why) = control_error(s) {
                errors.push((s.addr, why));
            }
            lost.push(s.addr);
            shared.halt.store(true, SeqCst);
        }
    }
}

/// Opens the sessions a run uses on `target`: one per source address. The
/// server admits a session's data connections only from the address its
/// control connection came from, so each `-B` address of the target's IP
/// family gets a session of its own (none given: one, from the address the
/// kernel picks).
pub(super) fn open_sessions(
    target: &str,
    cfg: &TcpClientConfig,
) -> Result<Vec<ServerControl>, ClientError> {
    let first = open_session(target, cfg, |addr| first_bind(cfg, addr))?;
    let server = first.addr;
    let more: Vec<IpAddr> = cfg
        .bind
        .iter()
        .filter(|ip| ip.is_ipv4() == server.is_ipv4() && Some(**ip) != first.bind)
        .copied()
        .collect();
    let mut out = vec![first];
    for ip in more {
        // The address the first session resolved to, so every session
        // reaches the same server.
        out.push(open_session(&server.to_string(), cfg, |_| Ok(Some(ip)))?);
    }
    Ok(out)
}

fn open_session(
    target: &str,
    cfg: &TcpClientConfig,
    bind: impl Fn(SocketAddr) -> Result<Option<IpAddr>, ConfigError>,
) -> Result<ServerControl, ClientError> {
    let timeout = cfg.idle_timeout.unwrap_or(Duration::from_secs(30));
    let connect = cfg.connect_timeout.unwrap_or(timeout);
    let mut c = Control::connect_within(
        target,
        cfg.port,
        bind,
        connect,
        timeout,
        crate::net::Via::default(),
        cfg.key.as_ref(),
    )?;
    let bind = match cfg.bind.is_empty() {
        true => None,
        false => c.stream.local_addr().ok().map(|a| a.ip()),
    };
    let id = match c.request(TestSpec::Tcp(cfg.spec()))? {
        Accept::Session(session) => session,
        a => return Err(c.failed(format!("accepted as another kind of test: {a:?}"))),
    };
    // The control connection now idles for the whole test.
    let _ = c.stream.set_read_timeout(None);
    Ok(ServerControl {
        addr: c.addr,
        bind,
        id,
        data_key: c.datagram_key,
        compact_data_hello: c.compact_data_hello,
        control: Mutex::new(c),
        unresponsive: AtomicBool::new(false),
        setting_up: AtomicU64::new(0),
        opened: AtomicU64::new(0),
    })
}

/// The first `-B` address of `to`'s IP family, if `-B` was given.
fn first_bind(cfg: &TcpClientConfig, to: SocketAddr) -> Result<Option<IpAddr>, ConfigError> {
    if cfg.bind.is_empty() {
        return Ok(None);
    }
    match cfg.bind.iter().find(|ip| ip.is_ipv4() == to.is_ipv4()) {
        Some(ip) => Ok(Some(*ip)),
        None => Err(ConfigError::NoBindForFamily(to.to_string())),
    }
}

impl Shared {
    pub(super) fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The session (target) connection `index` goes to: round robin.
    pub(super) fn session_for(&self, index: u64) -> usize {
        (index % self.sessions.len() as u64) as usize
    }

    /// Takes one of the `--throttle` places of connections being set up, if
    /// one is free.
    pub(super) fn throttle_try_acquire(&self) -> bool {
        self.throttle
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    pub(super) fn throttle_release(&self) {
        self.throttle.fetch_add(1, SeqCst);
    }

    /// How many `--throttle` places one server's connections may hold: the
    /// throttle over the servers, at least [`MIN_SHARE`]. Without a share
    /// the places gather on the slowest server, the one whose connections
    /// do not complete, and the others wait behind it: bench/scale.sh at
    /// 1,000,000 connections over 60 + 60 processes had a starved server's
    /// listen queue (4,096) overflow and connects time out, while 60
    /// clients x 16 places per server stay under it.
    fn share(&self) -> u64 {
        (u64::from(self.cfg.throttle) / self.sessions.len().max(1) as u64).max(MIN_SHARE)
    }

    /// How many of the run's connections go to server `session` (round
    /// robin: connection `i` to `i % servers`).
    fn quota_of(&self, session: usize) -> u64 {
        let (total, n) = (self.cfg.total_connections(), self.sessions.len() as u64);
        total / n + u64::from((session as u64) < total % n)
    }

    /// Counts a setup on the first server from `from` on (round robin)
    /// that has connections left to open and holds fewer than its share of
    /// the `--throttle` places, and returns it; the setup ends with
    /// [`Shared::setup_done`]. A stalled server then holds only its share,
    /// and the others' connections go on opening.
    pub(super) fn claim_session(&self, from: u64) -> Result<usize, NoServer> {
        let n = self.sessions.len();
        let share = self.share();
        let mut why = NoServer::Done;
        for i in 0..n as u64 {
            let s = ((from % n as u64 + i) % n as u64) as usize;
            let c = &self.sessions[s];
            if c.opened.load(SeqCst) >= self.quota_of(s) {
                continue;
            }
            why = NoServer::Full;
            let took = c
                .setting_up
                .fetch_update(SeqCst, SeqCst, |k| (k < share).then_some(k + 1));
            if took.is_ok() {
                return Ok(s);
            }
        }
        Err(why)
    }

    /// The run's index of server `session`'s next connection, if it has one
    /// left to open (it may have opened its last since [`claim_session`]).
    ///
    /// [`claim_session`]: Shared::claim_session
    pub(super) fn claim_index(&self, session: usize) -> Option<u64> {
        let quota = self.quota_of(session);
        let k = (self.sessions[session].opened)
            .fetch_update(SeqCst, SeqCst, |k| (k < quota).then_some(k + 1))
            .ok()?;
        // k < quota: within the run's count, so no overflow.
        Some(k * self.sessions.len() as u64 + session as u64)
    }

    /// A setup counted by [`Shared::claim_session`] ended (connected and
    /// acknowledged, or failed), or never started.
    pub(super) fn setup_done(&self, session: usize) {
        self.sessions[session].setting_up.fetch_sub(1, SeqCst);
    }

    /// When a time-bounded run's connections end their data (`-t`).
    pub(super) fn data_deadline(&self) -> Option<Instant> {
        let t = self
            .cfg
            .time_limit
            .filter(|_| self.spec.time_bound_ms > 0)?;
        self.start.checked_add(t)
    }

    /// Stops the run: tells each server (so it counts cancellations, not
    /// errors), then has every connection end at once.
    pub(super) fn stop_all(&self) {
        if self.stop.swap(true, SeqCst) {
            return;
        }
        for s in &self.sessions {
            // The server marks the session cancelled before we shut its
            // connections, so both ends count cancellations; a stuck server
            // gets the grace period, and is not asked again.
            let mut c = s.control.lock().unwrap_or_else(|e| e.into_inner());
            if !c.stop_test(STOP_GRACE) {
                s.unresponsive.store(true, SeqCst);
            }
        }
        self.abort.store(true, SeqCst);
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
