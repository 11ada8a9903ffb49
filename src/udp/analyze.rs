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
pub fn note_sender(a: &mut Analysis, s: &super::engine::SenderReport) {
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
        .filter(|s| s.asked_bps > 0.0 && s.offered_bps < s.asked_bps * SENDER_SHORT)
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
mod tests {
    use super::*;

    /// A sweep 0..20 Mbit/s over 20 s in 0.5 s intervals through a model path.
    fn model(limit: f64, shaping: bool, burst_bytes: f64) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut bucket: f64 = burst_bytes;
        let mut queue_us: f64 = 0.0;
        for k in 0..40 {
            let (start, end) = (k as f64 * 0.5, k as f64 * 0.5 + 0.5);
            let offered = 20e6 * (start + end) / 2.0 / 20.0;
            let (got, loss, delay) = if shaping {
                if offered > limit {
                    queue_us = (queue_us + 4000.0).min(40_000.0);
                }
                (
                    offered.min(limit) * 0.5 / 8.0,
                    if queue_us >= 40_000.0 { 0.05 } else { 0.0 },
                    100.0 + queue_us,
                )
            } else {
                // A token bucket (rate `limit`, depth `burst_bytes`) in 1 ms steps.
                let (mut got, mut want) = (0.0, 0.0);
                for _ in 0..500 {
                    bucket = (bucket + limit * 0.001 / 8.0).min(burst_bytes);
                    let w = offered * 0.001 / 8.0;
                    let g = w.min(bucket);
                    bucket -= g;
                    got += g;
                    want += w;
                }
                (got, 1.0 - got / want.max(1.0), 100.0)
            };
            out.push(Sample {
                start,
                end,
                offered_bps: offered,
                asked_bps: offered,
                received_bps: got * 8.0 / 0.5,
                bytes: got as u64,
                loss,
                delay_avg_us: Some(delay),
                delay_min_us: Some(delay * 0.9),
                delay_max_us: Some(delay * 1.1),
                size: 1000.0,
            });
        }
        out
    }

    #[test]
    fn the_headline_time_is_the_evidence_time_and_wire_rates_add_headers() {
        let a = analyze(&model(10e6, false, 400_000.0));
        let t = a.congestion_at.unwrap();
        assert!(
            a.evidence[0].contains(&format!("at t={t:.2}s")),
            "{t} {:?}",
            a.evidence
        );
        let (p, w) = (a.congestion_bps.unwrap(), a.congestion_wire_bps.unwrap());
        assert_eq!(w, p * 1042.0 / 1000.0);
        assert_eq!(
            wire_bps(47.97e6, 1000.0, FRAME_OVERHEAD_V4).round(),
            49_984_740.0
        );
        assert_eq!(wire_bps(1e6, 0.0, 42), 1e6);
    }

    /// What one synthetic series must yield.
    struct Case {
        name: &'static str,
        samples: Vec<Sample>,
        limiter: Option<Limiter>,
        /// Congestion point, bit/s, within 10%.
        at_bps: Option<f64>,
        /// Committed burst, bytes, within 5%.
        burst: Option<f64>,
        /// Words one evidence line must contain.
        says: &'static str,
    }

    #[test]
    fn samples_turn_intervals_into_exact_rates_and_loss() {
        // 0 → 8 Mbit/s over 2 s, in 1000-byte datagrams.
        let profile = Profile::sweep(0, 8_000_000, 2_000_000_000, 1000).unwrap();
        let iv = |time_slice, bytes, packets, drops, duplicates| UdpInterval {
            time_slice,
            bytes,
            packets,
            drops,
            duplicates,
            delay_avg_us: Some(150.0),
            delay_min_us: Some(100.0),
            delay_max_us: Some(200.0),
            ..Default::default()
        };
        let intervals = [
            iv(0.5, 50_000, 52, 2, 2),
            iv(1.0, 150_000, 150, 0, 0),
            iv(1.5, 200_000, 200, 50, 0),
            iv(2.0, 250_000, 250, 0, 0),
            // The drain after the stream ends is not a sample.
            iv(2.5, 0, 0, 0, 0),
        ];
        let got = samples(&profile, &intervals, None);
        assert_eq!(got.len(), 4);
        assert_eq!((got[3].start, got[3].end), (1.5, 2.0));
        assert_eq!(got[3].asked_bps, 7_000_000.0);
        let s0 = got[0];
        assert_eq!((s0.start, s0.end), (0.0, 0.5));
        // Mid-interval (0.25 s) the sweep asks 1 Mbit/s.
        assert_eq!(s0.asked_bps, 1_000_000.0);
        assert_eq!(s0.offered_bps, 1_000_000.0);
        assert_eq!(s0.received_bps, 800_000.0);
        assert_eq!(s0.bytes, 50_000);
        // 2 lost of (52 − 2 duplicates + 2 lost) expected.
        assert_eq!(s0.loss, 2.0 / 52.0);
        assert_eq!(s0.size, 1000.0);
        assert_eq!(s0.delay_avg_us, Some(150.0));
        assert_eq!((got[1].start, got[1].end), (0.5, 1.0));
        assert_eq!(got[1].asked_bps, 3_000_000.0);
        assert_eq!(got[1].loss, 0.0);
        assert_eq!(got[2].loss, 50.0 / 250.0);
        assert_eq!(got[2].received_bps, 200_000.0 * 8.0 / 0.5);
        // With the sender's own counts, the offered rate is what left it.
        let sent = [25_000u64, 25_000, 100_000, 100_000, 0, 0];
        let got = samples(&profile, &intervals, Some((&sent, 0.25)));
        assert_eq!(got[0].offered_bps, 50_000.0 * 8.0 / 0.5);
        assert_eq!(got[0].asked_bps, 1_000_000.0);
        assert_eq!(got[1].offered_bps, 200_000.0 * 8.0 / 0.5);
        assert_eq!(got[2].offered_bps, 0.0);
        // No intervals, no samples.
        assert!(samples(&profile, &[], None).is_empty());
    }

    #[test]
    fn congestion_table() {
        let mut stalled = model(100e6, false, 1e6);
        // The host stalled the receiver once: one interval short, queue and all.
        stalled[20].received_bps *= 0.5;
        stalled[20].delay_avg_us = Some(20_000.0);
        let mut behind = model(100e6, false, 1e6);
        // The sender left only 60% of what the profile asked from t = 15 s; the path
        // carried all of it, so there is no congestion, only a slow sender.
        for s in behind.iter_mut().filter(|s| s.start >= 15.0) {
            s.offered_bps = s.asked_bps * 0.6;
            s.received_bps = s.offered_bps;
        }
        let cases = vec![
            Case {
                name: "clean link",
                samples: model(100e6, false, 1e6),
                limiter: None,
                at_bps: None,
                burst: None,
                says: "followed the offered rate throughout",
            },
            Case {
                name: "shaper: delay grows, no loss at first",
                samples: model(10e6, true, 0.0),
                limiter: Some(Limiter::Shaping),
                at_bps: Some(10e6),
                burst: None,
                says: "",
            },
            // The FlowPing paper's own setting: CIR 5 Mbit/s, Bc 256 kB; its
            // estimate was 252,000 B.
            Case {
                name: "policer, FlowPing paper",
                samples: model(5e6, false, 256_000.0),
                limiter: Some(Limiter::Policing),
                at_bps: Some(5e6),
                burst: Some(256_000.0),
                says: "Bc =",
            },
            Case {
                name: "policer, 10 Mbit/s, 400 kB",
                samples: model(10e6, false, 400_000.0),
                limiter: Some(Limiter::Policing),
                at_bps: Some(10e6),
                burst: Some(400_000.0),
                says: "Bc =",
            },
            Case {
                name: "a lone host stall",
                samples: stalled,
                limiter: None,
                at_bps: None,
                burst: None,
                says: "followed the offered rate throughout",
            },
            Case {
                name: "a sender that fell behind",
                samples: behind,
                limiter: None,
                at_bps: None,
                burst: None,
                says: "the sender sent less than the profile asked in 10 of 40 intervals",
            },
            Case {
                name: "too few intervals",
                samples: model(5e6, false, 256_000.0)[..3].to_vec(),
                limiter: None,
                at_bps: None,
                burst: None,
                says: "only 3 intervals with traffic: too few to analyse",
            },
        ];
        for c in cases {
            let a = analyze(&c.samples);
            let ctx = format!("{}: {:?}", c.name, a.evidence);
            assert_eq!(a.limiter, c.limiter, "{ctx}");
            match (c.at_bps, a.congestion_bps) {
                (Some(want), Some(got)) => assert!((got / want - 1.0).abs() < 0.1, "{got} {ctx}"),
                (None, None) => {}
                (want, got) => panic!("congestion {got:?}, expected {want:?}: {ctx}"),
            }
            match (c.burst, a.burst_bytes) {
                (Some(want), Some(got)) => {
                    assert!((got / want - 1.0).abs() < 0.05, "Bc {got} {ctx}")
                }
                (None, None) => {}
                (want, got) => panic!("burst {got:?}, expected {want:?}: {ctx}"),
            }
            assert!(a.evidence.iter().any(|e| e.contains(c.says)), "{ctx}");
        }
    }

    #[test]
    fn shaping_is_found_at_the_shaper_rate() {
        let a = analyze(&model(10e6, true, 0.0));
        assert_eq!(a.limiter, Some(Limiter::Shaping), "{:?}", a.evidence);
        let c = a.congestion_bps.unwrap();
        assert!((c / 10e6 - 1.0).abs() < 0.1, "{c}");
    }

    #[test]
    fn policing_is_found_and_its_burst_estimated() {
        let a = analyze(&model(10e6, false, 400_000.0));
        assert_eq!(a.limiter, Some(Limiter::Policing), "{:?}", a.evidence);
        let bc = a.burst_bytes.unwrap();
        assert!(
            (bc / 400_000.0 - 1.0).abs() < 0.3,
            "Bc {bc}: {:?}",
            a.evidence
        );
    }

    #[test]
    fn a_lone_slow_interval_does_not_make_a_policer_a_shaper() {
        let mut samples = model(10e6, false, 400_000.0);
        // The host paused the receiver for 20 ms once, after congestion.
        samples[30].delay_avg_us = Some(20_000.0);
        let a = analyze(&samples);
        assert_eq!(a.limiter, Some(Limiter::Policing), "{:?}", a.evidence);
        assert!(a.burst_bytes.is_some(), "{:?}", a.evidence);
    }

    #[test]
    fn a_sender_stall_at_the_burst_leaves_it_unestimated_rather_than_wrong() {
        let mut samples = model(10e6, false, 400_000.0);
        // Nothing left the sender from t=10 s (when the offered rate reached
        // the policer's) to t=12 s.
        for s in samples
            .iter_mut()
            .filter(|s| s.start >= 10.0 && s.end <= 12.0)
        {
            (s.bytes, s.received_bps, s.loss) = (0, 0.0, 0.0);
        }
        let a = analyze(&samples);
        assert_eq!(a.limiter, Some(Limiter::Policing), "{:?}", a.evidence);
        assert_eq!(a.burst_bytes, None, "{:?}", a.evidence);
        assert!(
            a.evidence
                .iter()
                .any(|e| e.contains("burst: not estimated")),
            "{:?}",
            a.evidence
        );
    }

    #[test]
    fn a_late_or_limited_sender_is_flagged_and_lowers_confidence_once() {
        use crate::udp::engine::SenderReport;
        let sender = |late_max_us, sender_limited| SenderReport {
            late_max_us,
            sender_limited,
            asked_bps: 50e6,
            achieved_bps: 42.818e6,
            ..Default::default()
        };
        let base = analyze(&model(10e6, false, 400_000.0));
        let mut a = base.clone();
        note_sender(&mut a, &sender(500.0, false));
        assert_eq!(a, base, "a punctual sender that kept up changes nothing");
        note_sender(&mut a, &sender(150_000.0, false));
        assert_eq!(a.confidence, base.confidence / 2.0);
        assert!(a.evidence.last().unwrap().contains("up to 150 ms behind"));
        let mut b = base.clone();
        note_sender(&mut b, &sender(DISTURBED_LATE_US, true));
        assert_eq!(b.confidence, base.confidence / 2.0);
        assert_eq!(
            b.evidence.len(),
            base.evidence.len() + 1,
            "exactly at the bound is not late"
        );
        assert!(
            b.evidence
                .last()
                .unwrap()
                .contains("42.82 Mbit/s left the sender where the profile asked for 50.00")
        );
        let mut c = base.clone();
        note_sender(&mut c, &sender(150_000.0, true));
        assert_eq!(
            c.confidence,
            base.confidence / 2.0,
            "halved once, not twice"
        );
        assert_eq!(c.evidence.len(), base.evidence.len() + 2);
    }

    #[test]
    fn an_unlimited_path_is_not_congested() {
        let a = analyze(&model(1e12, true, 0.0));
        assert_eq!(a.congestion_bps, None);
        assert!(a.evidence[0].contains("followed"));
    }

    #[test]
    fn a_sender_that_falls_behind_is_not_congestion() {
        // An unlimited path, but the sender stalls for three intervals early on:
        // fewer datagrams arrive, none are lost and no queue builds.
        let mut s = model(1e12, true, 0.0);
        for x in &mut s[4..7] {
            x.received_bps *= 0.5;
        }
        let a = analyze(&s);
        assert_eq!(a.congestion_bps, None, "{:?}", a.evidence);
    }

    #[test]
    fn sent_counts_are_spread_over_the_intervals_they_overlap() {
        let sent = [1000, 2000, 3000];
        assert_eq!(sent_between(&sent, 1.0, 0.0, 1.0), 1000.0);
        assert_eq!(sent_between(&sent, 1.0, 0.5, 1.5), 500.0 + 1000.0);
        assert_eq!(sent_between(&sent, 1.0, 1.0, 3.0), 5000.0);
        assert_eq!(sent_between(&sent, 1.0, 2.5, 10.0), 1500.0);
        assert_eq!(sent_between(&sent, 1.0, 3.0, 4.0), 0.0);
        assert_eq!(sent_between(&sent, 0.0, 0.0, 4.0), 0.0);
        assert_eq!(sent_between(&sent, 1.0, 2.0, 1.0), 0.0);
        // Half-second intervals: each count belongs to its own half second.
        assert_eq!(sent_between(&sent, 0.5, 0.0, 0.5), 1000.0);
        assert_eq!(sent_between(&sent, 0.5, 0.25, 0.75), 500.0 + 1000.0);
        assert_eq!(sent_between(&sent, 0.5, 1.0, 1.5), 3000.0);
        assert_eq!(sent_between(&sent, 0.5, 1.5, 9.0), 0.0);
        assert_eq!(sent_between(&sent, 2.0, 0.0, 1.0), 500.0);
        assert_eq!(sent_between(&sent, 2.0, 2.5, 4.0), 1500.0);
    }

    #[test]
    fn offered_is_what_left_the_sender() {
        use crate::udp::profile::{Profile, Step};
        let p = Profile::new(vec![
            Step {
                at_ns: 0,
                rate_bps: 8_000_000,
                size: 1000,
                hold: true,
            },
            Step {
                at_ns: 4_000_000_000,
                rate_bps: 8_000_000,
                size: 1000,
                hold: false,
            },
        ])
        .unwrap();
        // The profile asks 8 Mbit/s (1 MB/s); the sender managed 0.5 MB/s in
        // its second second, and the path delivered all of it.
        let sent = [1_000_000, 500_000, 1_000_000, 1_000_000];
        let ivs: Vec<UdpInterval> = sent
            .iter()
            .enumerate()
            .map(|(k, &b)| UdpInterval {
                time_slice: (k + 1) as f64,
                bytes: b,
                packets: b / 1000,
                ..Default::default()
            })
            .collect();
        let with = samples(&p, &ivs, Some((&sent, 1.0)));
        assert_eq!(with[1].asked_bps, 8e6);
        assert_eq!(with[1].offered_bps, 4e6);
        assert_eq!(with[1].received_bps, 4e6);
        let without = samples(&p, &ivs, None);
        assert_eq!(without[1].offered_bps, 8e6);
        let a = analyze(&with);
        assert_eq!(a.congestion_bps, None);
        assert!(
            a.evidence
                .iter()
                .any(|e| e.contains("less than the profile asked in 1 of 4")),
            "{:?}",
            a.evidence
        );
        let b = bins(&with, 1e6);
        assert_eq!(b.len(), 1, "binned by the asked rate");
        assert_eq!((b[0].asked_bps, b[0].offered_bps), (8e6, 7e6));
    }

    #[test]
    fn bins_group_by_offered_rate() {
        let s = model(10e6, true, 0.0);
        let b = bins(&s, 5e6);
        assert_eq!(b.len(), 4);
        assert_eq!(b.iter().map(|x| x.intervals).sum::<usize>(), 40);
        assert!(b[3].received_bps < b[3].offered_bps * 0.7);
    }
}
