//! The TCP client engine: sets up one control session per target, keeps
//! `connections` data connections busy until `iterations` rounds or the time
//! limit are done, and reports intervals and per-connection results to an
//! [`Observer`].
//!
//! The data connections run on a few event-loop threads (`pool.rs`), about
//! two per core, whatever `--connections` is; a stop is delivered to them by
//! a flag they check at least every 20 ms.

use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::config::TcpClientConfig;
use crate::net::tcpinfo::TcpInfoTotals;
use crate::protocol::proto::SessionSummary;
use crate::protocol::stats::{Counters, IntervalRow, Snapshot};

pub use super::session::{ConnectionRecord, ServerRows};
use super::session::{Shared, note_lost_servers, open_sessions};
pub use crate::control::ClientError;

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
    /// The wall clock at the run's time zero (the intervals' `TimeSlice`
    /// counts from it), Unix seconds: results of several clients line up
    /// on it (`netrig merge`).
    pub start_unix: f64,
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
    pub refusals: Vec<RefusalCount>,
    /// Why servers stopped the test mid-way (a server limit), by server.
    pub server_errors: Vec<(SocketAddr, String)>,
    /// What the kernel granted the client's first data connection: buffer
    /// sizes, MSS, congestion control, TOS.
    pub granted: Option<crate::net::sockopt::Granted>,
    /// TCP_INFO of the client's ends, over every connection.
    pub tcp_info: Option<TcpInfoTotals>,
    /// Each server session's own status rows (`--get-server-output`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server_output: Vec<super::session::ServerRows>,
    /// TCP_INFO of the server's ends, from their final reports (the
    /// sender's view when the server sends: `--pattern pull`, duplex).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_tcp_info: Option<TcpInfoTotals>,
    /// How long the connections took, connect to agreed result (those
    /// that connected).
    pub connection_times: Option<crate::protocol::rr::hist::Summary>,
    /// The same durations in log-2 bins from 1 µs, for a histogram.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connection_histogram: Vec<crate::protocol::rr::hist::LogBin>,
    /// The first connections' bytes over time (runs with intervals), by
    /// their order of opening: per-connection goodput.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connection_progress: Vec<ConnectionProgress>,
    /// The `--omit` warm-up: the counters at its end and when it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub omitted: Option<Omitted>,
    /// CPU use of this process over the data phase and of the busiest
    /// server's over its session (iperf3's "CPU Utilization").
    pub cpu: crate::protocol::cpu::CpuBoth,
}

/// One of the first `session::TRACKED` connections' bytes so far,
/// from its opening to its end.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionProgress {
    pub index: u64,
    pub connection_id: uuid::Uuid,
    pub result: crate::protocol::outcome::ResultKind,
    pub points: Vec<crate::protocol::stats::Progress>,
}

/// Data connections the server refused for one reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefusalCount {
    /// The reason's code, as the server sent it.
    pub code: crate::protocol::proto::ErrorCode,
    /// The server's text.
    pub message: String,
    /// How many connections it refused so.
    pub connections: u64,
}

/// The counters when the `--omit` warm-up ended: subtracted from the
/// totals, they give what the rest of the run moved.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Omitted {
    /// Seconds since the start (the warm-up's length, as measured).
    pub secs: f64,
    /// The counters then.
    pub at: Snapshot,
}

/// How often the run's thread collects connection records and checks its
/// servers, limits and signals.
const COLLECT: Duration = Duration::from_millis(10);

/// How often the run's thread looks whether a server closed its control
/// connection (a halt a tenth of a second late is no loss).
const LOST_CHECK: Duration = Duration::from_millis(100);

/// How long a time-bounded run waits past its deadline for its
/// connections to end by themselves: a chunk (with a rate limit, about a
/// period of it), the peer's chunk when it sends (its deadline counts from
/// its first data connection, a little later), and the reports' round trip.
fn deadline_grace(cfg: &TcpClientConfig) -> Duration {
    let period = cfg.rate.map_or(0, |r| r.period_ms);
    Duration::from_secs(2) + Duration::from_millis(period.saturating_mul(2))
}

/// Sums the sessions each server held; a server whose account of any of
/// them is missing has none.
fn merge_by_server(
    sessions: Vec<(SocketAddr, Option<SessionSummary>)>,
) -> Vec<(SocketAddr, Option<SessionSummary>)> {
    let mut out: Vec<(SocketAddr, Option<SessionSummary>)> = Vec::new();
    for (addr, sum) in sessions {
        match out.iter_mut().find(|(a, _)| *a == addr) {
            None => out.push((addr, sum)),
            Some((_, total)) => {
                *total = match (total.take(), sum) {
                    (Some(t), Some(s)) => Some(t.plus(&s)),
                    _ => None,
                }
            }
        }
    }
    out
}

/// Runs a TCP test. `interrupt` is set by the Ctrl-C handler; the run then
/// stops gracefully and still returns everything measured.
pub fn run(
    cfg: TcpClientConfig,
    interrupt: Arc<AtomicBool>,
    obs: &mut dyn Observer,
) -> Result<RunReport, ClientError> {
    cfg.validate()?;
    if let Some(name) = &cfg.sock.congestion {
        crate::net::sockopt::check_congestion(name)?;
    }
    let mut sessions = Vec::new();
    for t in &cfg.targets {
        sessions.extend(open_sessions(t, &cfg)?);
    }
    if sessions.is_empty() {
        return Err(ClientError::Control {
            target: String::new(),
            detail: "no target given".into(),
        });
    }
    if let Some(at) = cfg.start_at {
        crate::net::wait_for_epoch(at, &interrupt);
    }
    obs.started(&cfg);
    let start_unix = crate::net::realtime_ns() as f64 / 1e9;
    let seed = cfg.seed.unwrap_or_else(rand::random);
    let cfg_ports = cfg
        .local_ports
        .map(|(lo, hi)| super::ports::PortPool::new(lo, hi));
    let shared = Arc::new(Shared {
        throttle: AtomicU64::new(u64::from(cfg.throttle)),
        spec: cfg.spec(),
        cfg,
        sessions,
        counters: Counters::default(),
        stop: AtomicBool::new(false),
        abort: AtomicBool::new(false),
        halt: AtomicBool::new(false),
        next: AtomicU64::new(0),
        start: Instant::now(),
        granted: std::sync::OnceLock::new(),
        ports: cfg_ports,
    });
    let (tx, rx) = mpsc::channel::<ConnectionRecord>();
    let mut tcp_info = TcpInfoTotals::default();
    // Up to an hour, the longest a server runs a session by default.
    let mut times = crate::protocol::rr::hist::LatencyStats::new(0.0, 3.6e9, 1000, 10);
    let mut server_tcp_info = TcpInfoTotals::default();
    let mut progress: Vec<ConnectionProgress> = Vec::new();
    let threads = crate::net::data_loops();
    let cpu_start = crate::net::cpu::sample();
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
    let mut refusals: Vec<RefusalCount> = Vec::new();
    let mut server_errors = Vec::new();
    // The loops' records are collected every few ms rather than one wake-up
    // each: at tens of thousands of connections a second, waking this thread
    // per connection cost the loops a core's share of context switches.
    let mut last_end = 0.0f64;
    let mut omitted: Option<Omitted> = None;
    let mut next_lost_check = shared.start;
    'run: loop {
        let now = Instant::now();
        if let Some(o) = shared.cfg.omit
            && omitted.is_none()
            && now >= shared.start + o
        {
            omitted = Some(Omitted {
                secs: shared.elapsed(),
                at: shared.counters.snapshot(),
            });
        }
        let mut wait = COLLECT;
        if let Some(t) = next_tick {
            wait = wait.min(t.saturating_duration_since(now));
        }
        std::thread::sleep(wait);
        loop {
            match rx.try_recv() {
                Ok(rec) => {
                    if let Some((code, why)) = &rec.refused {
                        match refusals
                            .iter_mut()
                            .find(|r| r.code == *code && r.message == *why)
                        {
                            Some(r) => r.connections += 1,
                            None => refusals.push(RefusalCount {
                                code: *code,
                                message: why.clone(),
                                connections: 1,
                            }),
                        }
                        // More connections would only be refused too.
                        shared.halt.store(true, SeqCst);
                    }
                    last_end = last_end.max(rec.time_slice);
                    if let Some(i) = rec.peer_tcp_info {
                        server_tcp_info.add(&i.into());
                    }
                    if let Some(i) = &rec.tcp_info {
                        tcp_info.add(i);
                    }
                    // A connection that came up (it has a handshake time;
                    // crr records no local addresses).
                    if rec.connect_ms > 0.0 {
                        times.record_ns((rec.time_ms * 1e6) as u64);
                    }
                    if !rec.progress.is_empty() {
                        progress.push(ConnectionProgress {
                            index: rec.index,
                            connection_id: rec.connection_id,
                            result: rec.result.kind,
                            points: rec.progress.clone(),
                        });
                    }
                    obs.connection(&rec)
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => break 'run,
            }
        }
        if interrupt.load(SeqCst) && !shared.stop.load(SeqCst) {
            interrupted = true;
            shared.stop_all();
        }
        if let Some(d) = deadline
            && Instant::now() >= d
        {
            match shared.data_deadline() {
                // Time-bounded: each connection ends its data at its next
                // chunk and agrees on it; no new one starts. One that has
                // not ended after the grace is cancelled.
                Some(_) if Instant::now() < d + deadline_grace(&shared.cfg) => {
                    shared.halt.store(true, SeqCst)
                }
                _ => shared.stop_all(),
            }
        }
        // Three calls per server each: a tenth as often as the records,
        // so a run holding idle connections costs next to nothing.
        if !shared.stop.load(SeqCst) && now >= next_lost_check {
            next_lost_check = now + LOST_CHECK;
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
            let mut row = IntervalRow::between(&prev.0, prev.1, &snap, secs);
            // Ticks fall on the interval grid: a row ending at the omit is in it.
            row.omitted = shared
                .cfg
                .omit
                .is_some_and(|o| t <= shared.start + o + Duration::from_micros(1));
            obs.interval(&row);
            intervals.push(row);
            prev = (snap, secs);
            next_tick = Some(t + iv);
        }
    }
    for h in handles {
        let _ = h.join();
    }
    let cpu_local = crate::protocol::cpu::CpuUsage::between(&cpu_start, &crate::net::cpu::sample());
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
    // A run that ran out of connections ended with its last one, not when
    // this thread next looked.
    let duration_secs = match shared.stop.load(SeqCst) || last_end == 0.0 {
        true => shared.elapsed(),
        false => last_end.max(prev.1),
    };
    let totals = shared.counters.snapshot();
    let last = IntervalRow::between(&prev.0, prev.1, &totals, duration_secs);
    obs.interval(&last);
    intervals.push(last);

    let mut servers = Vec::new();
    let mut server_output = Vec::new();
    for s in &shared.sessions {
        if lost_servers.contains(&s.addr)
            || s.unresponsive.load(SeqCst)
            || crate::control::hurried()
        {
            servers.push((s.addr, None));
            continue;
        }
        let (summary, rows) = s.goodbye();
        if shared.cfg.server_output {
            server_output.push(rows);
        }
        servers.push((s.addr, summary));
    }
    // One entry per server, whatever number of source addresses used it.
    let servers = merge_by_server(servers);
    let cpu = crate::protocol::cpu::CpuBoth::new(
        cpu_local,
        servers.iter().filter_map(|(_, s)| s.as_ref()?.cpu),
    );
    Ok(RunReport {
        start_unix,
        duration_secs,
        totals,
        intervals,
        servers,
        interrupted,
        lost_servers,
        refusals,
        server_errors,
        granted: shared.granted.get().cloned(),
        tcp_info: (tcp_info.connections > 0).then_some(tcp_info),
        connection_times: times.summary(),
        connection_histogram: times.log_bins(),
        connection_progress: {
            progress.sort_by_key(|p| p.index);
            progress
        },
        server_tcp_info: (server_tcp_info.connections > 0).then_some(server_tcp_info),
        server_output,
        omitted,
        cpu,
    })
}
