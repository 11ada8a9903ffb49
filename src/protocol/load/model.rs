//! Latency under load, as numbers: the phases of a `netrig load` run, the
//! probe samples taken in them, their percentiles and trimmed means, the
//! responsiveness (RPM) of the IETF IPPM draft "Responsiveness under Working
//! Conditions" (draft-ietf-ippm-responsiveness-06, TCP-only case), the
//! goodput-stability rule that stops the connection ramp, and the verdict.
//! Pure: samples in, summaries out.

use serde::Serialize;
use std::collections::VecDeque;

/// A part of the run with its own traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// No load: the latency baseline.
    Idle,
    /// The server sends on the load connections.
    Download,
    /// The client sends.
    Upload,
    /// Both at once (each load connection sends both ways).
    Both,
}

impl Phase {
    /// What the phase loads, for the verdict ("while downloading").
    pub fn doing(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Download => "downloading",
            Phase::Upload => "uploading",
            Phase::Both => "downloading and uploading at once",
        }
    }
}

/// What a probe measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    /// A UDP request/response with its one-way split.
    Udp,
    /// A new TCP connection's handshake (the draft's `tcp_f`).
    TcpConnect,
    /// A request/response on that new connection (`http_f`).
    TcpRequest,
    /// The smoothed RTT of a load connection's sending end, from TCP_INFO
    /// (the draft's `http_l`, by its TCP-stack substitute).
    SelfRtt,
}

/// One probe's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the run began, when the probe started.
    pub t: f64,
    /// What it measured.
    pub kind: ProbeKind,
    /// Round trip (or handshake), ms; `None`: lost.
    pub ms: Option<f64>,
    /// UDP: client-to-server delay, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_ms: Option<f64>,
    /// UDP: server-to-client delay, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub down_ms: Option<f64>,
}

/// The phases in order, each `secs` long after `idle_secs` of idle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    /// (phase, start s, end s), in order.
    pub phases: Vec<(Phase, f64, f64)>,
}

impl Schedule {
    /// Idle for `idle` s, then each of `loaded` for `each` s.
    pub fn new(idle: f64, loaded: &[Phase], each: f64) -> Schedule {
        let mut phases = vec![(Phase::Idle, 0.0, idle)];
        let mut t = idle;
        for &p in loaded {
            phases.push((p, t, t + each));
            t += each;
        }
        Schedule { phases }
    }

    /// The phase running at `t` (the last one's end belongs to it).
    pub fn phase_at(&self, t: f64) -> Option<Phase> {
        let last = self.phases.last()?;
        self.phases
            .iter()
            .find(|(_, a, b)| t >= *a && t < *b)
            .or((t >= last.1 && t <= last.2).then_some(last))
            .map(|(p, _, _)| *p)
    }

    /// The whole run, s.
    pub fn end(&self) -> f64 {
        self.phases.last().map_or(0.0, |p| p.2)
    }

    /// The schedule as run when a stop came at `t`: the phases that had
    /// begun, the last ending at `t`. Returns the phase cut short, if any.
    pub fn cut(&mut self, t: f64) -> Option<Phase> {
        self.phases.retain(|&(_, start, _)| start < t);
        let last = self.phases.last_mut()?;
        (t < last.2).then(|| {
            last.2 = t;
            last.0
        })
    }
}

/// A change in ms as the console shows it: signed, one decimal, and a
/// change that rounds to nothing is "+0.0" (never "-0.0").
pub fn signed_ms(v: f64) -> String {
    if v.abs() < 0.05 {
        "+0.0".into()
    } else {
        format!("{v:+.1}")
    }
}

/// The draft's defaults (its "Test Parameters" table).
pub const MAD: usize = 4;
/// Standard deviation tolerance for stability, as a fraction of the mean.
pub const SDT: f64 = 0.05;
/// Trimmed mean: the fraction of samples kept (the highest 5% dropped).
pub const TMP: f64 = 0.95;

/// Single-sided trimmed mean: the mean of the lowest `keep` fraction.
pub fn trimmed_mean(values: &[f64], keep: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = ((v.len() as f64 * keep).ceil() as usize).clamp(1, v.len());
    Some(v[..n].iter().sum::<f64>() / n as f64)
}

/// The `p`-th percentile (0..=100) by nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Round trips per minute, as the draft computes them without TLS.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Responsiveness {
    /// 60000 / ((TM(tcp_f) + TM(http_f)) / 2): new connections.
    pub foreign_rpm: f64,
    /// 60000 / TM(http_l): the load connections themselves.
    pub loaded_rpm: Option<f64>,
    /// The mean of the two (foreign alone without self samples).
    pub rpm: f64,
    /// The trimmed means the figures are made from, ms: TM(tcp_f),
    /// TM(http_f) (netrig's request on a new connection: its hello and the
    /// answer) and TM(http_l).
    pub from_ms: RpmInputs,
}

/// The trimmed means a [`Responsiveness`] is made from, ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RpmInputs {
    /// New connections' handshakes.
    pub connect: f64,
    /// Requests on new connections.
    pub request: f64,
    /// The load connections' round trips.
    pub load: Option<f64>,
}

/// The draft's TCP-only responsiveness from handshake times `tcp_f`,
/// request times on new connections `http_f` and load-connection round
/// trips `http_l` (all ms).
pub fn responsiveness(tcp_f: &[f64], http_f: &[f64], http_l: &[f64]) -> Option<Responsiveness> {
    let (connect, request) = (trimmed_mean(tcp_f, TMP)?, trimmed_mean(http_f, TMP)?);
    let foreign_rpm = 60_000.0 / ((connect + request) / 2.0).max(1e-3);
    let load = trimmed_mean(http_l, TMP);
    let loaded_rpm = load.map(|l| 60_000.0 / l.max(1e-3));
    Some(Responsiveness {
        foreign_rpm,
        loaded_rpm,
        rpm: loaded_rpm.map_or(foreign_rpm, |l| (foreign_rpm + l) / 2.0),
        from_ms: RpmInputs {
            connect,
            request,
            load,
        },
    })
}

/// The draft's stability rule: a value is stable when the standard
/// deviation of the last [`MAD`] moving averages (each over [`MAD`]
/// intervals) is within [`SDT`] of the latest one.
#[derive(Debug, Clone, Default)]
pub struct Stability {
    values: VecDeque<f64>,
    averages: VecDeque<f64>,
}

impl Stability {
    /// Adds one interval's value; whether the series is now stable.
    pub fn push(&mut self, v: f64) -> bool {
        self.values.push_back(v);
        if self.values.len() > MAD {
            self.values.pop_front();
        }
        let avg = self.values.iter().sum::<f64>() / self.values.len() as f64;
        self.averages.push_back(avg);
        if self.averages.len() > MAD {
            self.averages.pop_front();
        }
        if self.averages.len() < MAD || avg <= 0.0 {
            return false;
        }
        let mean = self.averages.iter().sum::<f64>() / MAD as f64;
        let var = self
            .averages
            .iter()
            .map(|a| (a - mean).powi(2))
            .sum::<f64>()
            / MAD as f64;
        var.sqrt() < SDT * avg
    }
}

/// Percentiles of one probe kind in one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindStats {
    /// Probes with a result.
    pub count: u64,
    /// Probes lost (no reply in time).
    pub lost: u64,
    /// Median, ms.
    pub p50_ms: Option<f64>,
    /// 90th percentile, ms.
    pub p90_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
    /// Every result, lossless: the HDR histogram of the probes' times (ns,
    /// rounded to the nearest), as [`crate::protocol::hdr::encode`] writes it, so
    /// phases and runs add up exactly; absent when no probe had a result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hdr: Option<String>,
}

impl KindStats {
    fn of<'a>(samples: impl Iterator<Item = &'a Sample>) -> KindStats {
        let (mut v, mut lost) = (Vec::new(), 0);
        for s in samples {
            match s.ms {
                Some(ms) => v.push(ms),
                None => lost += 1,
            }
        }
        v.sort_by(f64::total_cmp);
        let mut h = crate::protocol::hdr::empty();
        for ms in &v {
            // A negative time (clock trouble) counts as 0, as nothing faster exists.
            let _ = h.record((ms * 1e6).round().max(0.0) as u64);
        }
        KindStats {
            count: v.len() as u64,
            lost,
            p50_ms: percentile(&v, 50.0),
            p90_ms: percentile(&v, 90.0),
            p99_ms: percentile(&v, 99.0),
            hdr: (!v.is_empty()).then(|| crate::protocol::hdr::encode(&h)),
        }
    }
}

/// What one phase measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseReport {
    /// The phase.
    pub phase: Phase,
    /// Its start and end, s since the run began.
    pub start: f64,
    /// End, s.
    pub end: f64,
    /// Goodput server to client, bit/s (verified by the client).
    pub down_bps: f64,
    /// Goodput client to server, bit/s (received and verified by the
    /// server; sent by the client if the server kept no rows).
    pub up_bps: f64,
    /// Load connections open at the end.
    pub connections: u32,
    /// Whether goodput stopped growing (the ramp's stability rule).
    pub saturated: bool,
    /// UDP round trips.
    pub udp: KindStats,
    /// UDP one-way delays, median, ms (their sum is the round trip).
    pub udp_up_p50_ms: Option<f64>,
    /// Server-to-client median, ms.
    pub udp_down_p50_ms: Option<f64>,
    /// New-connection handshakes.
    pub tcp_connect: KindStats,
    /// Requests on new connections.
    pub tcp_request: KindStats,
    /// Load connections' smoothed RTTs.
    pub self_rtt: KindStats,
    /// Median UDP round trip less the idle phase's, ms: the bufferbloat.
    pub increase_ms: Option<f64>,
    /// Responsiveness over the phase's last [`MAD`] seconds (none for a
    /// phase cut short: its last seconds are not a loaded phase's).
    pub responsiveness: Option<Responsiveness>,
    /// Cut short by a stop (Ctrl-C).
    pub interrupted: bool,
}

/// Goodput and ramp state of one phase, from the load connections.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseLoad {
    /// Bytes received from the server.
    pub down_bytes: u64,
    /// Bytes the server received.
    pub up_bytes: u64,
    /// Connections open at the end.
    pub connections: u32,
    /// Whether goodput was declared stable.
    pub saturated: bool,
}

/// Summarises every phase of `schedule` from `samples` (any order) and
/// each loaded phase's `load` (in the schedule's order, idle included);
/// the last phase was cut short by a stop when `cut`.
pub fn summarize(
    schedule: &Schedule,
    samples: &[Sample],
    load: &[PhaseLoad],
    cut: bool,
) -> Vec<PhaseReport> {
    let last = schedule.phases.len().saturating_sub(1);
    let mut out: Vec<PhaseReport> = Vec::new();
    for (i, &(phase, start, end)) in schedule.phases.iter().enumerate() {
        let within = |s: &&Sample| schedule.phase_at(s.t) == Some(phase);
        let of = |k: ProbeKind| {
            KindStats::of(samples.iter().filter(within).filter(move |s| s.kind == k))
        };
        let one_way = |f: fn(&Sample) -> Option<f64>| {
            let mut v: Vec<f64> = samples.iter().filter(within).filter_map(f).collect();
            v.sort_by(f64::total_cmp);
            percentile(&v, 50.0)
        };
        let tail = |k: ProbeKind| -> Vec<f64> {
            samples
                .iter()
                .filter(within)
                .filter(|s| s.kind == k && s.t >= end - MAD as f64)
                .filter_map(|s| s.ms)
                .collect()
        };
        let l = load.get(i).copied().unwrap_or_default();
        let secs = (end - start).max(1e-9);
        let udp = of(ProbeKind::Udp);
        let udp_p50 = udp.p50_ms;
        let idle_p50 = out.first().and_then(|r| r.udp.p50_ms);
        out.push(PhaseReport {
            phase,
            start,
            end,
            down_bps: l.down_bytes as f64 * 8.0 / secs,
            up_bps: l.up_bytes as f64 * 8.0 / secs,
            connections: l.connections,
            saturated: l.saturated,
            udp,
            udp_up_p50_ms: one_way(|s| s.up_ms),
            udp_down_p50_ms: one_way(|s| s.down_ms),
            tcp_connect: of(ProbeKind::TcpConnect),
            tcp_request: of(ProbeKind::TcpRequest),
            self_rtt: of(ProbeKind::SelfRtt),
            increase_ms: match (phase, udp_p50, idle_p50) {
                (Phase::Idle, _, _) => None,
                (_, Some(l), Some(i)) => Some(l - i),
                _ => None,
            },
            responsiveness: responsiveness(
                &tail(ProbeKind::TcpConnect),
                &tail(ProbeKind::TcpRequest),
                &tail(ProbeKind::SelfRtt),
            )
            .filter(|_| !(cut && i == last)),
            interrupted: cut && i == last,
        });
    }
    out
}

/// How much more delay load adds before netrig calls it bufferbloat, ms,
/// and the worse grades (netrig's own thresholds; the draft defines RPM, not
/// grades): under 5 ms none, under 30 ms mild, under 100 ms clear, beyond
/// that severe.
pub const GRADES_MS: [f64; 3] = [5.0, 30.0, 100.0];

/// One line a non-expert understands, from the worst loaded phase.
pub fn verdict(phases: &[PhaseReport]) -> String {
    let worst = phases
        .iter()
        .filter(|p| p.phase != Phase::Idle)
        .filter_map(|p| Some((p, p.increase_ms?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let Some((p, up)) = worst else {
        return "no verdict: too few probes came back to compare loaded with idle latency".into();
    };
    let what = p.phase.doing();
    if up < GRADES_MS[0] {
        format!(
            "no bufferbloat: latency under load {} ms at most (while {what})",
            signed_ms(up)
        )
    } else if up < GRADES_MS[1] {
        format!(
            "mild bufferbloat: latency under load +{up:.0} ms while {what}; calls and games barely notice"
        )
    } else if up < GRADES_MS[2] {
        format!(
            "bufferbloat: latency under load +{up:.0} ms while {what}; games and calls will lag"
        )
    } else {
        format!(
            "severe bufferbloat: latency under load +{up:.0} ms while {what}; calls will stutter and web pages stall"
        )
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
