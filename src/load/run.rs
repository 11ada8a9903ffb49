//! `netrig load`'s run: an idle phase, then each loaded phase with TCP load
//! connections ramped up one a second (as the responsiveness draft adds
//! them) until goodput stops growing, while three kinds of probes run on
//! their own schedules over the whole run: UDP request/responses with their
//! one-way split, new TCP connections (handshake, then the hello exchange
//! as a request/response on the fresh connection), and the load
//! connections' own smoothed RTT from TCP_INFO at their sending end.

use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use thiserror::Error;

use super::probes::{Samples, foreign_probes, ms, push};
use crate::control::ClientError;
use crate::protocol::load::model::{
    self, Phase, PhaseLoad, PhaseReport, ProbeKind, Sample, Schedule, Stability,
};
use crate::protocol::proto::IoPattern;
use crate::protocol::stats::IntervalRow;
use crate::rr::client::{Probe, RrConfig, Transport};
use crate::tcp::client::{ConnectionRecord, Observer};
use crate::tcp::config::TcpClientConfig;

/// A UDP probe without a reply this long is lost.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a `netrig load` run does.
#[derive(Debug, Clone, Serialize)]
pub struct LoadConfig {
    /// Server.
    pub target: String,
    /// Port if the target names none.
    pub port: u16,
    /// Pre-shared key.
    #[serde(skip)]
    pub key: Option<crate::protocol::auth::Key>,
    /// Idle phase, s.
    pub idle_secs: f64,
    /// Each loaded phase, s.
    pub phase_secs: f64,
    /// The loaded phases, in order.
    pub phases: Vec<Phase>,
    /// Time between probes of each kind, ms.
    pub probe_interval_ms: u64,
    /// Most load connections a phase ramps up to.
    pub max_connections: u32,
    /// Options for the load connections (`-C`, `-w`, ...).
    pub sock: crate::protocol::sockopts::SockOpts,
    /// The interface every socket of the run is bound to (`--bind-dev`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_dev: Option<String>,
    /// Give up on a connection whose TCP handshake takes longer than this
    /// (`--connect-timeout`): the probes' control connection and the load
    /// connections.
    #[serde(
        with = "crate::protocol::units::duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub connect_timeout: Option<Duration>,
    /// Seconds of each live line (`-i`): its rates are the interval's
    /// means and its medians the interval's probes'; at least 1.
    pub interval_secs: u32,
}

/// A [`LoadConfig`] that cannot run.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LoadConfigError {
    /// Nothing to load.
    #[error("--phases: give at least one of download, upload, both")]
    NoPhases,
    /// Phases too short to see the ramp and the responsiveness window.
    #[error(
        "--phase-time must be at least {0} s: the draft's responsiveness takes its last {0} seconds"
    )]
    PhaseTooShort(usize),
    /// No time for a baseline.
    #[error("--idle must be at least 1 s: the baseline needs probes")]
    IdleTooShort,
    /// Probes too often or too rarely.
    #[error("--probe-interval must be 10ms..=1s")]
    Interval,
    /// Connections.
    #[error("--max-connections must be 1..=64")]
    Connections,
    /// A socket option value is not usable.
    #[error("{0}")]
    SockOpt(#[from] crate::protocol::sockopts::SockOptError),
}

impl LoadConfig {
    /// Checks the configuration before anything is sent.
    pub fn validate(&self) -> Result<(), LoadConfigError> {
        if self.phases.is_empty() {
            return Err(LoadConfigError::NoPhases);
        }
        if self.idle_secs < 1.0 {
            return Err(LoadConfigError::IdleTooShort);
        }
        if self.phase_secs < model::MAD as f64 {
            return Err(LoadConfigError::PhaseTooShort(model::MAD));
        }
        if !(10..=1000).contains(&self.probe_interval_ms) {
            return Err(LoadConfigError::Interval);
        }
        if !(1..=64).contains(&self.max_connections) {
            return Err(LoadConfigError::Connections);
        }
        self.sock.validate()?;
        Ok(())
    }

    fn every(&self) -> Duration {
        Duration::from_millis(self.probe_interval_ms)
    }
}

/// Why a run failed.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The configuration.
    #[error("{0}")]
    Config(#[from] LoadConfigError),
    /// The server or the network, before anything was measured.
    #[error("{0}")]
    Client(#[from] ClientError),
}

/// One interval of the run (a second, or `-i`), for the live console.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Second {
    /// Seconds since the run began.
    pub t: f64,
    /// The phase.
    pub phase: Phase,
    /// Goodput down over the line's interval (a second, or `-i`), bit/s.
    pub down_bps: f64,
    /// Goodput up, bit/s.
    pub up_bps: f64,
    /// Load connections allowed.
    pub connections: u32,
    /// Median UDP round trip of the interval's probes, ms.
    pub udp_ms: Option<f64>,
    /// Median new-connection handshake, ms.
    pub connect_ms: Option<f64>,
    /// Median load-connection RTT, ms.
    pub self_ms: Option<f64>,
}

/// Sees the run as it goes.
pub trait LoadObserver {
    /// A second of the run ended.
    fn second(&mut self, s: &Second);
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// The phases' times.
    pub schedule: Schedule,
    /// Each phase's figures.
    pub phases: Vec<PhaseReport>,
    /// One line for anyone.
    pub verdict: String,
    /// UDP probes that never reached the server.
    pub udp_lost_up: Option<u64>,
    /// UDP replies that never came back.
    pub udp_lost_down: Option<u64>,
    /// The clock offset the one-way split used.
    pub offset: Option<crate::protocol::udp::clock::Offset>,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
    /// Failures of the load or the probes; what they measured is kept.
    pub errors: Vec<String>,
    /// Every probe, in time order.
    pub probes: Vec<Sample>,
}

/// Counts a load run's goodput and takes its self samples.
struct LoadObs {
    down: Arc<AtomicU64>,
    up: Arc<AtomicU64>,
    samples: Samples,
    /// The run's start, s since the load run began.
    base: f64,
    last: f64,
    /// This end sends on the load connections: its RTT is the self probe.
    sends: bool,
}

impl LoadObs {
    /// Counts a load run of `pattern` that began `base` s into the load
    /// run; its RTT is a self probe when this end sends.
    fn new(samples: Samples, base: f64, pattern: IoPattern) -> LoadObs {
        LoadObs {
            down: Arc::new(AtomicU64::new(0)),
            up: Arc::new(AtomicU64::new(0)),
            samples,
            base,
            last: 0.0,
            sends: pattern != IoPattern::Pull,
        }
    }
}

impl Observer for LoadObs {
    fn interval(&mut self, row: &IntervalRow) {
        let dt = (row.time_slice - self.last).max(0.0);
        self.last = row.time_slice;
        self.down
            .fetch_add((row.recv_bps as f64 * dt) as u64, SeqCst);
        self.up.fetch_add((row.send_bps as f64 * dt) as u64, SeqCst);
        if let (true, Some(r)) = (self.sends, row.rtt_us) {
            push(
                &self.samples,
                ms(
                    self.base + row.time_slice,
                    ProbeKind::SelfRtt,
                    Some(r / 1e3),
                ),
            );
        }
    }

    fn connection(&mut self, _rec: &ConnectionRecord) {}
}

/// The median of the `span` seconds before `t` for the live line.
fn last_second(samples: &Samples, t: f64, span: f64, kind: ProbeKind) -> Option<f64> {
    let s = samples.lock().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<f64> = s
        .iter()
        .filter(|x| x.kind == kind && x.t > t - span && x.t <= t)
        .filter_map(|x| x.ms)
        .collect();
    v.sort_by(f64::total_cmp);
    model::percentile(&v, 50.0)
}

/// The live line's interval so far: seconds, bytes down and up.
#[derive(Debug, Default, PartialEq)]
struct LiveAcc {
    secs: u32,
    down: f64,
    up: f64,
}

impl LiveAcc {
    /// Adds a second's bytes. A line is due every `every` seconds and at a
    /// phase's `last` second: then returns its span (s) and bytes down and
    /// up, and starts the next.
    fn add(&mut self, down: f64, up: f64, every: u32, last: bool) -> Option<(f64, f64, f64)> {
        self.secs += 1;
        self.down += down;
        self.up += up;
        if self.secs < every.max(1) && !last {
            return None;
        }
        let line = (f64::from(self.secs), self.down, self.up);
        *self = LiveAcc::default();
        Some(line)
    }
}

/// The live line at `t` (s since the start) of an interval of `span` s that
/// moved `down` and `up` bytes: its rates, and its probes' medians.
fn live_line(
    samples: &Samples,
    t: f64,
    phase: Phase,
    (span, down, up): (f64, f64, f64),
    connections: u32,
) -> Second {
    Second {
        t,
        phase,
        down_bps: down * 8.0 / span,
        up_bps: up * 8.0 / span,
        connections,
        udp_ms: last_second(samples, t, span, ProbeKind::Udp),
        connect_ms: last_second(samples, t, span, ProbeKind::TcpConnect),
        self_ms: last_second(samples, t, span, ProbeKind::SelfRtt),
    }
}

/// The ends of a phase's seconds (s since the start): the whole seconds
/// after `from` up to `end`, each with whether it is the phase's last.
fn ticks(from: f64, end: f64) -> impl Iterator<Item = (f64, bool)> {
    std::iter::successors(Some(from.floor() + 1.0), |t| Some(t + 1.0))
        .take_while(move |&t| t <= end + 1e-9)
        .map(move |t| (t, t + 1.0 > end + 1e-9))
}

/// A loaded phase's ramp: one more connection each second until goodput
/// is stable or `max` are open.
struct Ramp {
    stability: Stability,
    saturated: bool,
    /// Bytes down and up counted at the last second's end.
    seen: (u64, u64),
    max: u64,
}

impl Ramp {
    fn new(max: u32) -> Ramp {
        Ramp {
            stability: Stability::default(),
            saturated: false,
            seen: (0, 0),
            max: u64::from(max),
        }
    }

    /// A second ended with `total` bytes (down, up) counted so far and
    /// `open` connections allowed: the second's bytes, and how many
    /// connections to allow from now if that changes.
    fn second(&mut self, total: (u64, u64), open: u64) -> ((u64, u64), Option<u64>) {
        let moved = (total.0 - self.seen.0, total.1 - self.seen.1);
        self.seen = total;
        let mut more = None;
        if !self.saturated {
            self.saturated = self.stability.push((moved.0 + moved.1) as f64);
            if !self.saturated && open < self.max {
                more = Some(open + 1);
            }
        }
        (moved, more)
    }
}

/// The load connections' settings for `phase` from `now` to `end` (s since
/// the start), opening at most `cap` at a time.
fn load_config(
    cfg: &LoadConfig,
    phase: Phase,
    now: f64,
    end: f64,
    cap: &Arc<AtomicU64>,
) -> TcpClientConfig {
    let mut c = TcpClientConfig::new(vec![cfg.target.clone()]);
    c.port = cfg.port;
    c.key = cfg.key.clone();
    c.pattern = match phase {
        Phase::Download => IoPattern::Pull,
        Phase::Upload => IoPattern::Push,
        _ => IoPattern::Duplex,
    };
    c.connections = cfg.max_connections;
    c.iterations = None;
    c.transfer = 1 << 40;
    c.time_limit = Some(Duration::from_secs_f64((end - now).max(0.5)));
    c.interval = Some(cfg.every());
    // The server's own rows: what it received (the upload's goodput,
    // verified), and when it sends, its RTT.
    c.server_output = true;
    c.open_cap = Some(Arc::clone(cap));
    c.sock = cfg.sock.clone();
    c.bind_dev = cfg.bind_dev.clone();
    c.connect_timeout = cfg.connect_timeout;
    c
}

/// From the servers' rows of a load run of `pattern` that began `base` s
/// into the load run: the bytes they received (none without rows), and
/// when they sent (a download), their RTT as self probes.
fn server_side(
    out: &[crate::tcp::client::ServerRows],
    pattern: IoPattern,
    base: f64,
) -> (Option<u64>, Vec<Sample>) {
    let mut received = 0.0;
    let mut selfs = Vec::new();
    for rows in out {
        let mut last = 0.0;
        for row in &rows.rows {
            received += row.recv_bps as f64 * (row.time_slice - last).max(0.0);
            last = row.time_slice;
            if let (IoPattern::Pull, Some(r)) = (pattern, row.rtt_us) {
                selfs.push(ms(base + row.time_slice, ProbeKind::SelfRtt, Some(r / 1e3)));
            }
        }
    }
    ((!out.is_empty()).then_some(received as u64), selfs)
}

struct Ctx<'a> {
    cfg: &'a LoadConfig,
    t0: Instant,
    samples: Samples,
    interrupt: &'a Arc<AtomicBool>,
    obs: &'a mut dyn LoadObserver,
    errors: Vec<String>,
    acc: LiveAcc,
}

impl Ctx<'_> {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Sleeps to `t` (s since the start) unless interrupted.
    fn sleep_to(&self, t: f64) -> bool {
        while self.now() < t {
            if self.interrupt.load(SeqCst) {
                return false;
            }
            std::thread::sleep(Duration::from_secs_f64((t - self.now()).clamp(0.0, 0.05)));
        }
        !self.interrupt.load(SeqCst)
    }

    /// One second of a phase went by; `last`: the phase's last. A live
    /// line goes out every `interval_secs` seconds and at a phase's end.
    fn second(&mut self, phase: Phase, down: f64, up: f64, connections: u32, last: bool) {
        if let Some(acc) = self.acc.add(down, up, self.cfg.interval_secs, last) {
            let s = live_line(&self.samples, self.now(), phase, acc, connections);
            self.obs.second(&s);
        }
    }

    fn idle(&mut self, end: f64) -> PhaseLoad {
        for (t, last) in ticks(self.now(), end) {
            if !self.sleep_to(t) {
                break;
            }
            self.second(Phase::Idle, 0.0, 0.0, 0, last);
        }
        PhaseLoad::default()
    }

    fn loaded(&mut self, phase: Phase, end: f64) -> PhaseLoad {
        let cap = Arc::new(AtomicU64::new(1));
        let base = self.now();
        let c = load_config(self.cfg, phase, base, end, &cap);
        let pattern = c.pattern;
        let mut o = LoadObs::new(Arc::clone(&self.samples), base, pattern);
        let (down, up) = (Arc::clone(&o.down), Arc::clone(&o.up));
        let stop = Arc::clone(self.interrupt);
        let run = std::thread::spawn(move || crate::tcp::client::run(c, stop, &mut o));
        let mut ramp = Ramp::new(self.cfg.max_connections);
        let mut open = 1;
        for (t, last) in ticks(base, end) {
            if run.is_finished() || !self.sleep_to(t) {
                break;
            }
            let now = (down.load(SeqCst), up.load(SeqCst));
            let n = cap.load(SeqCst);
            open = n;
            let ((d, u), more) = ramp.second(now, n);
            if let Some(m) = more {
                cap.store(m, SeqCst);
            }
            self.second(phase, d as f64, u as f64, n as u32, last);
        }
        match run.join() {
            Ok(Ok(rep)) => {
                let (received, selfs) = server_side(&rep.server_output, pattern, base);
                for s in selfs {
                    push(&self.samples, s);
                }
                if let Some(r) = received {
                    // Goodput up is what the server received, not what
                    // the client wrote into its socket buffers.
                    up.store(r, SeqCst);
                }
            }
            Ok(Err(e)) => self.errors.push(format!("{phase:?} load: {e}")),
            Err(_) => self
                .errors
                .push(format!("{phase:?} load: the run panicked")),
        }
        PhaseLoad {
            down_bytes: down.load(SeqCst),
            up_bytes: up.load(SeqCst),
            connections: open as u32,
            saturated: ramp.saturated,
        }
    }
}

/// Runs the phases with probes throughout. Fails only if the UDP probes
/// cannot start (the server is unreachable or refuses); later failures are
/// kept in the report's `errors` with everything measured.
pub fn run(
    cfg: &LoadConfig,
    interrupt: Arc<AtomicBool>,
    obs: &mut dyn LoadObserver,
) -> Result<LoadReport, LoadError> {
    cfg.validate()?;
    let addr = crate::net::resolve(&cfg.target, cfg.port)
        .ok()
        .and_then(|a| a.into_iter().next())
        .ok_or_else(|| ClientError::Connect {
            target: cfg.target.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
        })?;
    let samples: Samples = Arc::new(Mutex::new(Vec::new()));
    let schedule = Schedule::new(cfg.idle_secs, &cfg.phases, cfg.phase_secs);
    let rr = probe_plan(cfg, schedule.end());
    // The run starts when the first UDP probe left (after the server
    // accepted the probes and the clock offset is known): probe k leaves k
    // intervals later, on the probes' absolute schedule.
    let (ready_tx, ready_rx) = mpsc::channel::<Instant>();
    let udp = {
        let (samples, stop) = (Arc::clone(&samples), Arc::clone(&interrupt));
        let every_ms = cfg.probe_interval_ms as f64;
        std::thread::spawn(move || {
            let mut first = true;
            // `at` is when the probe's fate was known, the moment
            // since_first_probe counts back from.
            let mut on_probe = |p: &Probe, at: Instant| {
                if std::mem::take(&mut first) {
                    let took = since_first_probe(p, every_ms);
                    let _ = ready_tx.send(at.checked_sub(took).unwrap_or(at));
                }
                if let Some(s) = udp_sample(p, every_ms) {
                    push(&samples, s);
                }
            };
            crate::rr::client::run(&rr, stop, &mut on_probe)
        })
    };
    let t0 = loop {
        match ready_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(t) => break t,
            Err(mpsc::RecvTimeoutError::Timeout) if !udp.is_finished() => {}
            _ => {
                return match udp.join() {
                    Ok(Err(e)) => Err(e.into()),
                    _ => Err(ClientError::Control {
                        target: cfg.target.clone(),
                        detail: "the UDP probes ended before the first one".into(),
                    }
                    .into()),
                };
            }
        }
    };
    let foreign_stop = Arc::new(AtomicBool::new(false));
    let foreign = {
        let (samples, stop, every) = (Arc::clone(&samples), Arc::clone(&foreign_stop), cfg.every());
        let dev = cfg.bind_dev.clone();
        std::thread::spawn(move || foreign_probes(addr, dev, every, t0, samples, stop))
    };
    let mut ctx = Ctx {
        cfg,
        t0,
        samples: Arc::clone(&samples),
        interrupt: &interrupt,
        obs,
        errors: Vec::new(),
        acc: LiveAcc::default(),
    };
    let mut loads = Vec::new();
    for &(phase, _, end) in &schedule.phases {
        if interrupt.load(SeqCst) {
            break;
        }
        loads.push(match phase {
            Phase::Idle => ctx.idle(end),
            p => ctx.loaded(p, end),
        });
    }
    let ended_at = ctx.now();
    let errors = std::mem::take(&mut ctx.errors);
    foreign_stop.store(true, SeqCst);
    let _ = foreign.join();
    let udp = udp.join().ok();
    let probes = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(report(
        schedule,
        probes,
        &loads,
        interrupt.load(SeqCst).then_some(ended_at),
        udp,
        errors,
    ))
}

/// The UDP probes of a load run whose schedule ends `end` s after the
/// start: one every interval from 0 to the end, so the stream ends on its
/// own, every probe answered or timed out, and its losses add up exactly.
fn probe_plan(cfg: &LoadConfig, end: f64) -> RrConfig {
    let udp_probes = (end * 1000.0 / cfg.probe_interval_ms as f64).floor() as u64 + 1;
    RrConfig {
        target: cfg.target.clone(),
        port: cfg.port,
        key: cfg.key.clone(),
        transport: Transport::Udp,
        size: 64,
        reply: 64,
        iterations: udp_probes,
        warmup: 0,
        nagle: false,
        busy_poll: false,
        rx_timestamps: false,
        timeout: Some(PROBE_TIMEOUT),
        interval: Some(cfg.every()),
        hist_min_us: 0.0,
        hist_max_us: 1e6,
        hist_bins: 1000,
        outliers: 10,
        synced: false,
        bind: Vec::new(),
        sock: Default::default(),
        bind_dev: cfg.bind_dev.clone(),
        cport: None,
        start_at: None,
        duration: None,
        connect_timeout: cfg.connect_timeout,
    }
}

/// How long ago probe 0 left, told by the first probe to come back (`seq`
/// intervals of `every_ms` after it; a lost probe is told when its timeout
/// passes).
fn since_first_probe(p: &Probe, every_ms: f64) -> Duration {
    let rtt = p.rtt_us.map_or(PROBE_TIMEOUT.as_secs_f64(), |u| u / 1e6);
    Duration::from_secs_f64(rtt + p.seq as f64 * every_ms / 1e3)
}

/// A UDP probe's sample, placed at its send time on the probes' absolute
/// schedule; none for a late reply (counted lost when its timeout passed)
/// or a duplicate (counted when its first copy came).
fn udp_sample(p: &Probe, every_ms: f64) -> Option<Sample> {
    p.is_fate().then(|| Sample {
        t: p.seq as f64 * every_ms / 1e3,
        kind: ProbeKind::Udp,
        ms: p.rtt_us.map(|u| u / 1e3),
        up_ms: p.up_us.map(|u| u / 1e3),
        down_ms: p.down_us.map(|u| u / 1e3),
    })
}

/// The report of a run from its probes and loads; `stopped_at`: when a
/// Ctrl-C ended it (s since the start); `udp`: how the UDP probes ended
/// (none if their thread panicked).
fn report(
    schedule: Schedule,
    mut probes: Vec<Sample>,
    loads: &[PhaseLoad],
    stopped_at: Option<f64>,
    udp: Option<
        Result<
            (
                crate::rr::client::RrReport,
                crate::protocol::rr::hist::LatencyStats,
            ),
            ClientError,
        >,
    >,
    mut errors: Vec<String>,
) -> LoadReport {
    let (lost_up, lost_down, offset) = match udp {
        Some(Ok((r, _))) => {
            if let Some(e) = r.error {
                errors.push(format!("UDP probes: {e}"));
            }
            (r.lost_up, r.lost_down, r.offset)
        }
        Some(Err(e)) => {
            errors.push(format!("UDP probes: {e}"));
            (None, None, None)
        }
        None => (None, None, None),
    };
    probes.sort_by(|a, b| a.t.total_cmp(&b.t));
    let mut schedule = schedule;
    let stopped = stopped_at.is_some();
    let cut = stopped_at.is_some_and(|t| schedule.cut(t).is_some());
    let phases = model::summarize(&schedule, &probes, loads, cut);
    let verdict = match (stopped, model::verdict(&phases)) {
        (true, v) => format!("interrupted before the end of the schedule; {v}"),
        (false, v) => v,
    };
    LoadReport {
        verdict,
        schedule,
        phases,
        udp_lost_up: lost_up,
        udp_lost_down: lost_down,
        offset,
        interrupted: stopped,
        errors,
        probes,
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
