//! Rate-profile results, free of I/O: per-interval offered versus received
//! rate, the per-rate-bin sweep table, and the congestion analysis — where
//! the path stops following the offered rate, whether the limiter shapes
//! (queues: delay grows, little loss) or polices (drops: loss, no delay
//! growth), and for a policer the committed burst size by FlowPing's Eq. 1:
//! Bc = Σ bytes received in [t1, t2] − TRf·(t2 − t1)/8, where TRf is the rate
//! the path settles at, t1 the time the offered rate reached TRf and t2 the
//! time the received rate fell back to it.

use serde::{Deserialize, Serialize};

use super::profile::Profile;
use super::track::UdpInterval;

/// One interval as the analysis sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Interval start, s.
    pub start: f64,
    /// Interval end, s.
    pub end: f64,
    /// Offered rate: what left the sender in the interval when it said
    /// (else what the profile asked for), bit/s.
    pub offered_bps: f64,
    /// What the profile asked for in the interval, bit/s.
    #[serde(default)]
    pub asked_bps: f64,
    /// Received rate, bit/s.
    pub received_bps: f64,
    /// Bytes received.
    pub bytes: u64,
    /// Loss in the interval, 0..1.
    pub loss: f64,
    /// Mean one-way delay, µs.
    pub delay_avg_us: Option<f64>,
    /// Min one-way delay, µs.
    pub delay_min_us: Option<f64>,
    /// Max one-way delay, µs.
    pub delay_max_us: Option<f64>,
    /// Datagram size the profile asks for in the interval, bytes (UDP payload).
    #[serde(default)]
    pub size: f64,
}

/// Bytes each datagram carries on an Ethernet link besides its UDP payload:
/// the UDP header (8), IPv4 header (20) and Ethernet header (14), which is
/// what a Linux qdisc such as tbf counts.
pub const FRAME_OVERHEAD_V4: u32 = 8 + 20 + 14;

/// The on-the-wire rate of `payload_bps` of UDP payload in `size`-byte datagrams.
pub fn wire_bps(payload_bps: f64, size: f64, overhead: u32) -> f64 {
    if size <= 0.0 {
        return payload_bps;
    }
    payload_bps * (size + f64::from(overhead)) / size
}

/// Bytes a sender's per-interval counts (`sent`, each `width_s` long) put in
/// `[start, end)` s, spreading each count evenly over its interval.
pub fn sent_between(sent: &[u64], width_s: f64, start: f64, end: f64) -> f64 {
    if width_s <= 0.0 || end <= start {
        return 0.0;
    }
    let first = (start / width_s).floor().max(0.0) as usize;
    sent.iter()
        .enumerate()
        .skip(first)
        .take_while(|(k, _)| *k as f64 * width_s < end)
        .map(|(k, &b)| {
            let (lo, hi) = (k as f64 * width_s, (k + 1) as f64 * width_s);
            let overlap = (hi.min(end) - lo.max(start)).max(0.0);
            b as f64 * overlap / width_s
        })
        .sum()
}

/// Turns receiver intervals into samples. The offered rate is what the
/// sender says left it in each interval (`sent`: its per-interval byte
/// counts and their length in s), so a sender that fell behind is not taken
/// for a path that lost; without that account it is the profile's rate.
pub fn samples(
    profile: &Profile,
    intervals: &[UdpInterval],
    sent: Option<(&[u64], f64)>,
) -> Vec<Sample> {
    let mut prev = 0.0;
    let mut out = Vec::new();
    for iv in intervals {
        let (start, end) = (prev, iv.time_slice);
        prev = end;
        let dur = end - start;
        if dur <= 0.0 || start * 1e9 >= profile.duration_ns() as f64 {
            continue; // the drain after the stream
        }
        let mid = ((start + end) / 2.0 * 1e9) as u64;
        let expected = iv.packets.saturating_sub(iv.duplicates) as f64 + iv.drops.max(0) as f64;
        let asked_bps = profile.at(mid).0;
        let offered_bps = match sent {
            Some((s, width)) if !s.is_empty() => sent_between(s, width, start, end) * 8.0 / dur,
            _ => asked_bps,
        };
        out.push(Sample {
            start,
            end,
            offered_bps,
            asked_bps,
            received_bps: iv.bytes as f64 * 8.0 / dur,
            bytes: iv.bytes,
            loss: if expected > 0.0 {
                iv.drops.max(0) as f64 / expected
            } else {
                0.0
            },
            delay_avg_us: iv.delay_avg_us,
            delay_min_us: iv.delay_min_us,
            delay_max_us: iv.delay_max_us,
            size: profile.at(mid).1,
        });
    }
    out
}

/// One row of the sweep table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bin {
    /// Bin lower edge (of the asked rate), bit/s.
    pub from_bps: f64,
    /// Mean rate the profile asked for, bit/s.
    pub asked_bps: f64,
    /// Mean rate that left the sender, bit/s.
    pub offered_bps: f64,
    /// Mean received rate, bit/s.
    pub received_bps: f64,
    /// Loss, percent.
    pub loss_pct: f64,
    /// Delay min/avg/max, µs.
    pub delay_min_us: Option<f64>,
    /// Mean delay, µs.
    pub delay_avg_us: Option<f64>,
    /// Max delay, µs.
    pub delay_max_us: Option<f64>,
    /// Intervals in the bin.
    pub intervals: usize,
}

/// Groups samples by offered rate into bins `bin_bps` wide.
pub fn bins(samples: &[Sample], bin_bps: f64) -> Vec<Bin> {
    let mut out: Vec<Bin> = Vec::new();
    let w = bin_bps.max(1.0);
    let mut keyed: Vec<(i64, &Sample)> = samples
        .iter()
        .map(|s| ((s.asked_bps / w).floor() as i64, s))
        .collect();
    keyed.sort_by_key(|k| k.0);
    for chunk in keyed.chunk_by(|a, b| a.0 == b.0) {
        let n = chunk.len() as f64;
        let mean = |f: &dyn Fn(&Sample) -> f64| chunk.iter().map(|(_, s)| f(s)).sum::<f64>() / n;
        let delays: Vec<&Sample> = chunk
            .iter()
            .map(|(_, s)| *s)
            .filter(|s| s.delay_avg_us.is_some())
            .collect();
        out.push(Bin {
            from_bps: chunk[0].0 as f64 * w,
            asked_bps: mean(&|s| s.asked_bps),
            offered_bps: mean(&|s| s.offered_bps),
            received_bps: mean(&|s| s.received_bps),
            loss_pct: 100.0 * mean(&|s| s.loss),
            delay_min_us: delays
                .iter()
                .filter_map(|s| s.delay_min_us)
                .reduce(f64::min),
            delay_avg_us: (!delays.is_empty()).then(|| {
                delays.iter().filter_map(|s| s.delay_avg_us).sum::<f64>() / delays.len() as f64
            }),
            delay_max_us: delays
                .iter()
                .filter_map(|s| s.delay_max_us)
                .reduce(f64::max),
            intervals: chunk.len(),
        });
    }
    out
}

/// What limits the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limiter {
    /// Queues: delay grows, little loss.
    Shaping,
    /// Drops: loss without delay growth.
    Policing,
    /// Congested, but the evidence fits neither clearly.
    Unclear,
}

/// The congestion analysis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// UDP payload rate where the path stopped following the offered rate,
    /// bit/s (None: never congested).
    pub congestion_bps: Option<f64>,
    /// The same rate on the wire: payload plus [`Analysis::frame_overhead_bytes`]
    /// per datagram, bit/s.
    #[serde(default)]
    pub congestion_wire_bps: Option<f64>,
    /// Header bytes per datagram counted for the wire rate.
    #[serde(default)]
    pub frame_overhead_bytes: u32,
    /// Datagram size at the congestion point, bytes (UDP payload).
    #[serde(default)]
    pub congestion_size: Option<f64>,
    /// When congestion began: the start of the first of the two congested
    /// intervals that mark it, s. The evidence uses the same time.
    pub congestion_at: Option<f64>,
    /// The rate the path settles at after congestion (TRf), bit/s.
    pub settled_bps: Option<f64>,
    /// Shaping, policing or unclear.
    pub limiter: Option<Limiter>,
    /// Policing: estimated committed burst, bytes.
    pub burst_bytes: Option<f64>,
    /// 0..1: how clear the evidence is.
    pub confidence: f64,
    /// The observations behind the verdict, for people.
    pub evidence: Vec<String>,
}

/// Congestion thresholds.
const RATE_SHORTFALL: f64 = 0.10;
const LOSS_ONSET: f64 = 0.01;
/// Delay growth that shows a queue, µs.
const QUEUE_GROWTH_US: f64 = 1000.0;

/// An interval whose sender offered less than this share of the asked rate
/// is noted in the evidence (interval edges alone move a few percent).
const SENDER_SHORT: f64 = 0.95;

/// Sender lateness above which a profile run counts as disturbed, µs.
pub const DISTURBED_LATE_US: f64 = 10_000.0;

/// Adds what the sender knows to an analysis: a sender that fell more than
/// [`DISTURBED_LATE_US`] behind its schedule (a busy host) did not offer the
/// profile's rate then, and one that sent over 1% less than the profile
/// asked for (sender-limited) never offered it; either way the verdict is
/// flagged and its confidence halved (once).
pub fn note_sender(a: &mut Analysis, s: &super::sent::SenderReport) {
    let mut disturbed = false;
    if s.late_max_us > DISTURBED_LATE_US {
        a.evidence.push(format!(
            "disturbed: the sender fell up to {:.0} ms behind its schedule (this host was busy), so the offered rate was not the profile's at times; repeat the run before trusting the verdict",
            s.late_max_us / 1e3
        ));
        disturbed = true;
    }
    if s.sender_limited {
        a.evidence.push(format!(
            "sender-limited: {:.2} Mbit/s left the sender where the profile asked for {:.2} Mbit/s; rates below are what was asked, not what was offered, so a shortfall may be the sender's",
            s.achieved_bps / 1e6,
            s.asked_bps / 1e6
        ));
        disturbed = true;
    }
    if disturbed {
        a.confidence *= 0.5;
    }
}

/// Finds the congestion point and classifies the limiter.
pub fn analyze(samples: &[Sample]) -> Analysis {
    let mut a = Analysis {
        congestion_bps: None,
        congestion_wire_bps: None,
        frame_overhead_bytes: FRAME_OVERHEAD_V4,
        congestion_size: None,
        congestion_at: None,
        settled_bps: None,
        limiter: None,
        burst_bytes: None,
        confidence: 0.0,
        evidence: Vec::new(),
    };
    let busy: Vec<&Sample> = samples.iter().filter(|s| s.offered_bps > 0.0).collect();
    let short = samples
        .iter()
        .filter(|s| s.offered_bps < s.asked_bps * SENDER_SHORT)
        .count();
    if short > 0 {
        a.evidence.push(format!(
            "the sender sent less than the profile asked in {short} of {} intervals: offered rates are what left it, not what was asked",
            samples.len()
        ));
    }
    if busy.len() < 4 {
        a.evidence.push(format!(
            "only {} intervals with traffic: too few to analyse",
            busy.len()
        ));
        return a;
    }
    // A shortfall without loss is congestion only if a queue is building (a
    // shaper); otherwise the sender fell behind its schedule (a stall on a
    // busy host), which says nothing about the path.
    let floor = busy
        .iter()
        .filter_map(|s| s.delay_min_us)
        .reduce(f64::min)
        .unwrap_or(0.0);
    let queueing = |s: &Sample| {
        s.delay_avg_us
            .is_some_and(|d| d > floor + QUEUE_GROWTH_US.max(3.0 * floor))
    };
    let congested = |s: &Sample| {
        s.loss > LOSS_ONSET
            || (s.received_bps < s.offered_bps * (1.0 - RATE_SHORTFALL) && queueing(s))
    };
    // Two consecutive congested intervals mark the point (one can be noise).
    let idx = busy
        .windows(2)
        .position(|w| congested(w[0]) && congested(w[1]));
    let Some(i) = idx else {
        a.evidence
            .push("received rate followed the offered rate throughout, with no loss onset".into());
        a.confidence = 0.8;
        return a;
    };
    let point = busy[i];
    let before: Vec<&Sample> = busy[..i].to_vec();
    let after: Vec<&Sample> = busy[i..].to_vec();
    // The path's capacity: the received rate once congested (median, robust to the transition).
    let mut recv: Vec<f64> = after.iter().map(|s| s.received_bps).collect();
    recv.sort_by(f64::total_cmp);
    let settled = recv[recv.len() / 2];
    // The congestion point is where the offered rate reaches what the path
    // carries: the last interval before congestion whose offered rate is at
    // or below the settled rate, else the first congested interval.
    let reach = before
        .iter()
        .rev()
        .find(|s| s.offered_bps <= settled * 1.02)
        .copied();
    a.settled_bps = Some(settled);
    let loss_after = after.iter().map(|s| s.loss).sum::<f64>() / after.len() as f64;
    // Delays are compared as medians of the intervals' means, before and
    // after the congestion point. A shaper's queue stays full while the
    // offered rate is above what it passes, so the typical interval after
    // shows it. A busy host pauses processes for a few ms now and then, before
    // congestion as much as after: medians let that pass, so it is not
    // mistaken for a queue.
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let base_delay = median(&mut before.iter().filter_map(|s| s.delay_avg_us).collect())
        .or_else(|| busy.iter().filter_map(|s| s.delay_min_us).reduce(f64::min))
        .unwrap_or(0.0);
    let mut delays: Vec<f64> = after.iter().filter_map(|s| s.delay_avg_us).collect();
    let delay_after = median(&mut delays).unwrap_or(0.0);
    let delay_peak = delays.last().copied().unwrap_or(0.0);
    let delay_growth = delay_after - base_delay;
    a.evidence.push(format!(
        "received rate fell {:.0}% below offered at t={:.2}s (offered {:.2} Mbit/s, received {:.2} Mbit/s); settles at {:.2} Mbit/s",
        100.0 * (1.0 - point.received_bps / point.offered_bps.max(1.0)),
        point.start,
        point.offered_bps / 1e6,
        point.received_bps / 1e6,
        settled / 1e6
    ));
    a.evidence.push(format!(
        "mean loss after congestion {:.1}%; median one-way delay {:.0} us before congestion, {:.0} us after (peak {:.0} us)",
        100.0 * loss_after,
        base_delay,
        delay_after,
        delay_peak
    ));
    // A shaper's queue adds at least a few ms (and many times the base delay);
    // a policer adds none.
    let queued = delay_growth > 2000.0_f64.max(4.0 * base_delay);
    let flat = delay_growth < 1000.0_f64.max(2.0 * base_delay);
    a.limiter = Some(if queued {
        Limiter::Shaping
    } else if flat && loss_after > LOSS_ONSET {
        Limiter::Policing
    } else {
        Limiter::Unclear
    });
    let payload = reach.map_or(point.offered_bps, |_| settled);
    a.congestion_bps = Some(payload);
    a.congestion_size = Some(point.size);
    a.congestion_wire_bps = Some(wire_bps(payload, point.size, a.frame_overhead_bytes));
    a.congestion_at = Some(point.start);
    a.confidence = match a.limiter {
        Some(Limiter::Shaping) => (delay_growth / (delay_growth + 5000.0)).clamp(0.5, 0.95),
        Some(Limiter::Policing) => (loss_after / (loss_after + 0.05)).clamp(0.5, 0.95),
        _ => 0.3,
    };
    if a.limiter == Some(Limiter::Policing) {
        // Eq. 1: t1 = when the offered rate reached TRf; t2 = when the received rate fell back to it.
        let t1 = busy
            .iter()
            .find(|s| s.offered_bps >= settled)
            .map(|s| s.start);
        let t2 = busy[i..]
            .iter()
            .find(|s| s.received_bps <= settled * 1.05)
            .map(|s| s.start);
        if let (Some(t1), Some(t2)) = (t1, t2)
            && t2 > t1
        {
            let received: f64 = busy
                .iter()
                .filter(|s| s.start >= t1 && s.end <= t2)
                .map(|s| s.bytes as f64)
                .sum();
            let carried = settled * (t2 - t1) / 8.0;
            let bc = received - carried;
            if bc > 0.0 {
                a.burst_bytes = Some(bc);
                a.evidence.push(format!(
                    "burst: t1={t1:.2}s (offered reached {:.2} Mbit/s), t2={t2:.2}s (received fell back): Bc = {received:.0} B received - TRf*(t2-t1)/8 = {bc:.0} B",
                    settled / 1e6,
                ));
            } else {
                // A policer lets through at least TRf: less means the stream
                // did not follow its schedule there, and Eq. 1 does not apply.
                a.evidence.push(format!(
                    "burst: not estimated: only {received:.0} B arrived between t1={t1:.2}s and t2={t2:.2}s, less than the {carried:.0} B the settled rate carries; the stream did not follow its schedule there (a sender stall?)"
                ));
            }
        }
    }
    a
}

#[cfg(test)]
#[path = "analyze_tests.rs"]
mod tests;
