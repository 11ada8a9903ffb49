//! The TCP client engine: sets up one control session per target, keeps
//! `connections` data connections busy until `iterations` rounds or the time
//! limit are done, and reports intervals and per-connection results to an
//! [`Observer`].
//!
//! The data connections run on a few event-loop threads (`pool.rs`), about
//! two per core, whatever `--connections` is; a stop is delivered to them by
//! a flag they check at least every 20 ms.

use serde::Serialize;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

use super::config::{ConfigError, TcpClientConfig};
use crate::control::Control;
use crate::control::STOP_GRACE;
use crate::outcome::ConnResult;
use crate::proto::{Message, SessionSummary, TestSpec, read_message, write_message};
use crate::stats::{Counters, IntervalRow, Snapshot};

pub use crate::control::ClientError;

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
    pub bursts: Vec<crate::proto::TcpBurst>,
    /// The server's reason, when it refused this connection.
    #[serde(skip)]
    pub refused: Option<String>,
}

/// Receives the run's output as it happens.
pub trait Observer {
    /// Every server has accepted the test; data connections start now.
    fn started(&mut self, _cfg: &TcpClientConfig) {}
    /// A status interval ended.
    fn interval(&mut self, row: &IntervalRow);
    /// A connection ended.
    fn connection(&mut self, rec: &ConnectionRecord);
}

/// What a finished run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Wall time of the data phase, seconds.
    pub duration_secs: f64,
    /// Final counter values.
    pub totals: Snapshot,
    /// Every status interval.
    pub intervals: Vec<IntervalRow>,
    /// Each server's own tallies, by server address.
    pub servers: Vec<(SocketAddr, Option<SessionSummary>)>,
    /// Whether the run was interrupted (Ctrl-C) rather than finishing.
    pub interrupted: bool,
    /// Servers whose control connection was lost mid-test (the run stopped starting connections).
    pub lost_servers: Vec<SocketAddr>,
    /// Reasons the server gave for refusing data connections (a server
    /// limit), with how many were refused for each; the run stops starting
    /// connections at the first.
    pub refusals: Vec<(String, u64)>,
    /// Why servers stopped the test mid-way (a server limit), by server.
    pub server_errors: Vec<(SocketAddr, String)>,
}

pub(super) struct ServerControl {
    pub(super) addr: SocketAddr,
    pub(super) id: Uuid,
    control: Mutex<TcpStream>,
    /// The session's key (with a pre-shared key), for data connection proofs.
    pub(super) data_key: Option<crate::auth::DatagramKey>,
    /// The server did not answer the stop within the grace period: do not
    /// wait for it a second time.
    unresponsive: AtomicBool,
}

pub(super) struct Shared {
    pub(super) cfg: TcpClientConfig,
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
    pub(super) next: AtomicU64,
    /// Connects that may still start (`--throttle` minus those in progress).
    throttle: AtomicU64,
    start: Instant,
}

/// Sends `msg` on a session's control connection, waiting at most
/// [`STOP_GRACE`] for room to write it.
fn control_send(s: &ServerControl, msg: &Message) -> bool {
    let mut c = s.control.lock().unwrap_or_else(|e| e.into_inner());
    let _ = c.set_write_timeout(Some(STOP_GRACE));
    write_message(&mut *c, msg).is_ok()
}

/// Sends `msg` and returns the first reply `wanted` accepts (skipping others,
/// such as the acknowledgement of a stop that was not waited for); waits at
/// most [`STOP_GRACE`], and not at all once the user insists on stopping (a
/// stuck server must not keep the results from being written).
fn control_finish(
    s: &ServerControl,
    msg: &Message,
    wanted: impl Fn(&Message) -> bool,
) -> Option<Message> {
    if !control_send(s, msg) {
        return None;
    }
    let mut c = s.control.lock().unwrap_or_else(|e| e.into_inner());
    let deadline = Instant::now() + STOP_GRACE;
    loop {
        if crate::control::hurried() || Instant::now() >= deadline {
            return None;
        }
        if !crate::net::wait_readable(&*c, Duration::from_millis(100)) {
            continue;
        }
        let _ = c.set_read_timeout(Some(STOP_GRACE));
        match read_message(&mut *c) {
            Ok(m) if wanted(&m) => return Some(m),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

/// Whether the server has closed (or reset) a control connection. Between
/// request/response calls the server never speaks first, so any readable
/// byte or end of stream means the session is over.
fn control_lost(s: &ServerControl) -> bool {
    let c = s.control.lock().unwrap_or_else(|e| e.into_inner());
    crate::net::peer_state(&c) != crate::net::PeerState::Quiet
}

/// The error message a server sent before closing the control connection, if any.
fn control_error(s: &ServerControl) -> Option<String> {
    let c = s.control.lock().unwrap_or_else(|e| e.into_inner());
    let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
    let r = crate::proto::read_message(&mut &*c);
    let _ = c.set_read_timeout(None);
    match r {
        Ok(Message::Error { message, .. }) => Some(message),
        _ => None,
    }
}

/// Notes servers that closed their control connection, with the reason
/// they gave, and stops starting connections if there is one.
fn note_lost_servers(
    shared: &Shared,
    lost: &mut Vec<SocketAddr>,
    errors: &mut Vec<(SocketAddr, String)>,
    wait: Duration,
) {
    for s in &shared.sessions {
        if !wait.is_zero() {
            let c = s.control.lock().unwrap_or_else(|e| e.into_inner());
            crate::net::wait_readable(&*c, wait);
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

fn open_session(target: &str, cfg: &TcpClientConfig) -> Result<ServerControl, ClientError> {
    let timeout = cfg.idle_timeout.unwrap_or(Duration::from_secs(30));
    let mut c = Control::connect(
        target,
        cfg.port,
        |addr| pick_bind(cfg, addr, 0),
        timeout,
        cfg.key.as_ref(),
    )?;
    let id = match c.request(TestSpec::Tcp(cfg.spec()))? {
        Message::TestAccept { session } => session,
        m => return Err(c.unexpected(m)),
    };
    // The control connection now idles for the whole test.
    let _ = c.stream.set_read_timeout(None);
    Ok(ServerControl {
        addr: c.addr,
        id,
        data_key: c.datagram_key,
        control: Mutex::new(c.stream),
        unresponsive: AtomicBool::new(false),
    })
}

pub(super) fn pick_bind(
    cfg: &TcpClientConfig,
    to: SocketAddr,
    index: u64,
) -> Result<Option<std::net::IpAddr>, ConfigError> {
    if cfg.bind.is_empty() {
        return Ok(None);
    }
    let same: Vec<_> = cfg
        .bind
        .iter()
        .filter(|ip| ip.is_ipv4() == to.is_ipv4())
        .collect();
    if same.is_empty() {
        return Err(ConfigError::NoBindForFamily(to.to_string()));
    }
    Ok(Some(*same[(index % same.len() as u64) as usize]))
}

impl Shared {
    pub(super) fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The session (target) connection `index` goes to: round robin.
    pub(super) fn session_for(&self, index: u64) -> usize {
        (index % self.sessions.len() as u64) as usize
    }

    /// Takes one of the `--throttle` connects in progress, if one is free.
    pub(super) fn throttle_try_acquire(&self) -> bool {
        self.throttle
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    pub(super) fn throttle_release(&self) {
        self.throttle.fetch_add(1, SeqCst);
    }

    /// Stops the run: tells each server (so it counts cancellations, not
    /// errors), then has every connection end at once.
    fn stop_all(&self) {
        if self.stop.swap(true, SeqCst) {
            return;
        }
        for s in &self.sessions {
            // The server marks the session cancelled before we shut its
            // connections, so both ends count cancellations; a stuck server
            // gets the grace period, and is not asked again.
            let ack = control_finish(s, &Message::Stop, |m| {
                matches!(m, Message::StopAck | Message::Error { .. })
            });
            if ack.is_none() {
                s.unresponsive.store(true, SeqCst);
            }
        }
        self.abort.store(true, SeqCst);
    }
}

/// Runs a TCP test. `interrupt` is set by the Ctrl-C handler; the run then
/// stops gracefully and still returns everything measured.
pub fn run(
    cfg: TcpClientConfig,
    interrupt: Arc<AtomicBool>,
    obs: &mut dyn Observer,
) -> Result<RunReport, ClientError> {
    cfg.validate()?;
    let mut sessions = Vec::new();
    for t in &cfg.targets {
        sessions.push(open_session(t, &cfg)?);
    }
    if sessions.is_empty() {
        return Err(ClientError::Control {
            target: String::new(),
            detail: "no target given".into(),
        });
    }
    obs.started(&cfg);
    let seed = cfg.seed.unwrap_or_else(rand::random);
    let shared = Arc::new(Shared {
        throttle: AtomicU64::new(u64::from(cfg.throttle)),
        cfg,
        sessions,
        counters: Counters::default(),
        stop: AtomicBool::new(false),
        abort: AtomicBool::new(false),
        halt: AtomicBool::new(false),
        next: AtomicU64::new(0),
        start: Instant::now(),
    });
    let (tx, rx) = mpsc::channel::<ConnectionRecord>();
    let threads = crate::net::event_loops();
    let handles = match super::pool::spawn(&shared, threads, seed, &tx) {
        Ok(h) => h,
        Err(e) => {
            shared.stop_all();
            return Err(ClientError::Control {
                target: String::new(),
                detail: format!("cannot start the connection threads: {e}"),
            });
        }
    };
    drop(tx);

    let mut intervals = Vec::new();
    let mut prev = (Snapshot::default(), 0.0);
    let first = IntervalRow::between(&prev.0, 0.0, &shared.counters.snapshot(), shared.elapsed());
    obs.interval(&first);
    intervals.push(first);
    let mut next_tick = shared.cfg.interval.map(|i| shared.start + i);
    let deadline = shared.cfg.time_limit.map(|t| shared.start + t);
    let mut interrupted = false;
    let mut lost_servers = Vec::new();
    let mut refusals: Vec<(String, u64)> = Vec::new();
    let mut server_errors = Vec::new();
    loop {
        let now = Instant::now();
        let mut wait = Duration::from_millis(50);
        if let Some(t) = next_tick {
            wait = wait.min(t.saturating_duration_since(now));
        }
        match rx.recv_timeout(wait) {
            Ok(rec) => {
                if let Some(why) = &rec.refused {
                    match refusals.iter_mut().find(|(w, _)| w == why) {
                        Some((_, n)) => *n += 1,
                        None => refusals.push((why.to_string(), 1)),
                    }
                    // More connections would only be refused too.
                    shared.halt.store(true, SeqCst);
                }
                obs.connection(&rec)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if interrupt.load(SeqCst) && !shared.stop.load(SeqCst) {
            interrupted = true;
            shared.stop_all();
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            shared.stop_all();
        }
        if !shared.stop.load(SeqCst) {
            note_lost_servers(
                &shared,
                &mut lost_servers,
                &mut server_errors,
                Duration::ZERO,
            );
        }
        if let (Some(t), Some(iv)) = (next_tick, shared.cfg.interval)
            && Instant::now() >= t
        {
            let snap = shared.counters.snapshot();
            let secs = shared.elapsed();
            let row = IntervalRow::between(&prev.0, prev.1, &snap, secs);
            obs.interval(&row);
            intervals.push(row);
            prev = (snap, secs);
            next_tick = Some(t + iv);
        }
    }
    for h in handles {
        let _ = h.join();
    }
    if !shared.stop.load(SeqCst) {
        // A server that stopped the test as the last connections ended has
        // its reason read too; after a refusal, its reason may be on the way.
        let wait = if refusals.is_empty() {
            Duration::ZERO
        } else {
            Duration::from_millis(500)
        };
        note_lost_servers(&shared, &mut lost_servers, &mut server_errors, wait);
    }
    let duration_secs = shared.elapsed();
    let totals = shared.counters.snapshot();
    let last = IntervalRow::between(&prev.0, prev.1, &totals, duration_secs);
    obs.interval(&last);
    intervals.push(last);

    let mut servers = Vec::new();
    for s in &shared.sessions {
        if lost_servers.contains(&s.addr)
            || s.unresponsive.load(SeqCst)
            || crate::control::hurried()
        {
            servers.push((s.addr, None));
            continue;
        }
        let summary = match control_finish(s, &Message::Goodbye, |m| !matches!(m, Message::StopAck))
        {
            Some(Message::Summary(sum)) => Some(sum),
            _ => None,
        };
        servers.push((s.addr, summary));
    }
    Ok(RunReport {
        duration_secs,
        totals,
        intervals,
        servers,
        interrupted,
        lost_servers,
        refusals,
        server_errors,
    })
}
