//! Several UDP streams of one test (`-P`, `--bidir`) added up: counts add,
//! extremes are the extremes, means are weighted by what they are means of.
//! The streams' delay histograms share one bucket layout, so they add too,
//! and a sum's percentiles come from its histogram (right to within a
//! bucket; each stream's own are HDR's).

use super::frames::FrameCounts;
use super::track::{UdpInterval, UdpTotals};

fn add_frames(a: Option<FrameCounts>, b: Option<FrameCounts>) -> Option<FrameCounts> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => Some(FrameCounts {
            completed: a.completed + b.completed,
            dropped: a.dropped + b.dropped,
            repeated: a.repeated + b.repeated,
            errors: a.errors + b.errors,
        }),
    }
}

fn min_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (x, None) | (None, x) => x,
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (x, None) | (None, x) => x,
    }
}

/// The mean of `a` over `na` samples and `b` over `nb`.
fn mean_opt(a: Option<f64>, na: u64, b: Option<f64>, nb: u64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if na + nb > 0 => {
            Some((a * na as f64 + b * nb as f64) / (na + nb) as f64)
        }
        (Some(a), None) => Some(a),
        (None, Some(b)) => Some(b),
        _ => None,
    }
}

/// One stream's delay figures: min, mean over `weight` samples, max, jitter.
type Delays = (Option<f64>, Option<f64>, u64, Option<f64>, f64);

/// `acc` (the first `n` streams' combined delays) with stream `d` added.
fn add_delays(acc: Delays, n: usize, d: Delays) -> Delays {
    let (min, avg, w, max, jitter) = acc;
    let (dmin, davg, dw, dmax, djitter) = d;
    (
        min_opt(min, dmin),
        mean_opt(avg, w, davg, dw),
        w + dw,
        max_opt(max, dmax),
        (jitter * n as f64 + djitter) / (n + 1) as f64,
    )
}

/// The streams' totals as one.
pub fn totals(ts: &[&UdpTotals]) -> UdpTotals {
    let mut s = UdpTotals {
        sent: Some(0),
        ..UdpTotals::default()
    };
    let mut d: Delays = (None, None, 0, None, 0.0);
    let mut max_delay = None;
    for (n, t) in ts.iter().enumerate() {
        s.sent = s.sent.zip(t.sent).map(|(a, b)| a + b);
        d = add_delays(
            d,
            n,
            (
                t.delay_min_us,
                t.delay_avg_us,
                t.unique,
                t.delay_max_us,
                t.jitter_us,
            ),
        );
        s.unique += t.unique;
        s.packets += t.packets;
        s.bytes += t.bytes;
        s.lost += t.lost;
        s.max_consecutive_drops = s.max_consecutive_drops.max(t.max_consecutive_drops);
        s.duplicates += t.duplicates;
        s.reordered += t.reordered;
        s.corrupt += t.corrupt;
        s.late += t.late;
        s.omitted += t.omitted;
        s.frames = add_frames(s.frames, t.frames);
        s.histogram = super::hist::merge(&s.histogram, &t.histogram);
        s.delays_below_zero += t.delays_below_zero;
        s.below_zero_by_us = max_opt(s.below_zero_by_us, t.below_zero_by_us);
        max_delay = max_opt(
            max_delay,
            t.percentiles_us.iter().find(|p| p.0 == "max").map(|p| p.1),
        );
    }
    // The streams' percentile q of them all lies between the least and the
    // greatest of their own: a bucket's upper edge past the greatest says
    // less than it, so the smaller of the two is the figure.
    s.percentiles_us = super::hist::percentiles(&s.histogram)
        .into_iter()
        .map(|(name, edge)| {
            let own = ts
                .iter()
                .filter_map(|t| t.percentiles_us.iter().find(|p| p.0 == name))
                .map(|p| p.1)
                .reduce(f64::max);
            let v = own.map_or(edge, |o| o.min(edge));
            (name, v)
        })
        .collect();
    if let Some(m) = max_delay.filter(|_| !s.percentiles_us.is_empty()) {
        s.percentiles_us.push(("max".into(), m));
    }
    // With every stream's histogram at hand the percentiles of all are
    // exact, and so is the histogram kept for later merges.
    if let Some(all) = exact_sum(ts) {
        s.percentiles_us = crate::protocol::hdr::percentiles_us(&all, &PERCENTILES);
        s.hdr = Some(crate::protocol::hdr::encode(&all));
    }
    (
        s.delay_min_us,
        s.delay_avg_us,
        _,
        s.delay_max_us,
        s.jitter_us,
    ) = d;
    if ts.is_empty() {
        s.sent = None;
    }
    s
}

/// The delay percentiles a UDP report lists.
const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
    ("max", 100.0),
];

/// The sum of the streams' HDR histograms, when every stream that received
/// something carries one that reads.
fn exact_sum(ts: &[&UdpTotals]) -> Option<hdrhistogram::Histogram<u64>> {
    let mut hs = Vec::new();
    for t in ts.iter().filter(|t| t.unique > 0 || t.hdr.is_some()) {
        hs.push(crate::protocol::hdr::decode(t.hdr.as_deref()?).ok()?);
    }
    if hs.is_empty() {
        return None;
    }
    crate::protocol::hdr::sum(&hs)
        .ok()
        .filter(|h| !h.is_empty())
}

/// The streams' intervals of one slice as one row, stamped with the
/// latest of their times.
pub fn interval(ivs: &[&UdpInterval]) -> UdpInterval {
    let mut s = UdpInterval::default();
    let mut d: Delays = (None, None, 0, None, 0.0);
    for (n, iv) in ivs.iter().enumerate() {
        s.time_slice = s.time_slice.max(iv.time_slice);
        d = add_delays(
            d,
            n,
            (
                iv.delay_min_us,
                iv.delay_avg_us,
                iv.packets,
                iv.delay_max_us,
                iv.jitter_us,
            ),
        );
        s.bytes += iv.bytes;
        s.packets += iv.packets;
        s.drops += iv.drops;
        s.max_consecutive_drops = s.max_consecutive_drops.max(iv.max_consecutive_drops);
        s.duplicates += iv.duplicates;
        s.reordered += iv.reordered;
        s.corrupt += iv.corrupt;
        s.late += iv.late;
        s.omitted |= iv.omitted;
        s.frames = add_frames(s.frames, iv.frames);
    }
    (
        s.delay_min_us,
        s.delay_avg_us,
        _,
        s.delay_max_us,
        s.jitter_us,
    ) = d;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_with_histograms_give_exact_percentiles_of_all() {
        let stream = |ns: &[u64]| {
            let mut h = crate::protocol::hdr::empty();
            for &v in ns {
                h.record(v).unwrap();
            }
            UdpTotals {
                unique: ns.len() as u64,
                hdr: Some(crate::protocol::hdr::encode(&h)),
                ..UdpTotals::default()
            }
        };
        let (a, b) = (stream(&[1_000, 2_000, 3_000]), stream(&[50_000, 60_000]));
        let s = totals(&[&a, &b]);
        let all = stream(&[1_000, 2_000, 3_000, 50_000, 60_000]);
        let whole = crate::protocol::hdr::decode(all.hdr.as_deref().unwrap()).unwrap();
        assert_eq!(
            s.percentiles_us,
            crate::protocol::hdr::percentiles_us(&whole, &PERCENTILES)
        );
        assert_eq!(s.percentiles_us[0].1, 3.001, "HDR reports a bucket's top");
        assert_eq!(
            crate::protocol::hdr::decode(s.hdr.as_deref().unwrap())
                .unwrap()
                .len(),
            5
        );
        // One stream without its histogram: no exact sum is claimed.
        let old = UdpTotals {
            unique: 2,
            ..UdpTotals::default()
        };
        assert_eq!(totals(&[&a, &old]).hdr, None);
    }

    #[test]
    fn counts_add_and_extremes_and_means_combine() {
        let a = UdpTotals {
            sent: Some(100),
            unique: 90,
            packets: 95,
            bytes: 9500,
            lost: 10,
            max_consecutive_drops: 3,
            duplicates: 5,
            reordered: 2,
            corrupt: 1,
            late: 4,
            delay_min_us: Some(10.0),
            delay_avg_us: Some(20.0),
            delay_max_us: Some(30.0),
            jitter_us: 2.0,
            omitted: 7,
            frames: Some(FrameCounts {
                completed: 1,
                dropped: 2,
                repeated: 3,
                errors: 4,
            }),
            ..UdpTotals::default()
        };
        let b = UdpTotals {
            sent: Some(50),
            unique: 30,
            packets: 30,
            bytes: 3000,
            lost: 20,
            max_consecutive_drops: 9,
            delay_min_us: Some(5.0),
            delay_avg_us: Some(60.0),
            delay_max_us: Some(25.0),
            jitter_us: 4.0,
            frames: None,
            ..UdpTotals::default()
        };
        let s = totals(&[&a, &b]);
        assert_eq!(s.sent, Some(150));
        assert_eq!(
            (s.unique, s.packets, s.bytes, s.lost),
            (120, 125, 12500, 30)
        );
        assert_eq!(s.max_consecutive_drops, 9);
        assert_eq!((s.duplicates, s.reordered, s.corrupt, s.late), (5, 2, 1, 4));
        assert_eq!((s.delay_min_us, s.delay_max_us), (Some(5.0), Some(30.0)));
        // (20 × 90 + 60 × 30) / 120.
        assert_eq!(s.delay_avg_us, Some(30.0));
        assert_eq!(s.jitter_us, 3.0);
        assert_eq!(s.omitted, 7);
        assert_eq!(s.frames, a.frames);
        assert!(s.percentiles_us.is_empty() && s.histogram.is_empty());
        // Histograms add bucket by bucket; the percentiles come from the
        // sum, each no more than the greatest stream's own.
        let h = |histogram: Vec<crate::protocol::udp::hist::Bucket>, max: f64| UdpTotals {
            histogram,
            percentiles_us: vec![("p90".into(), max - 1.0), ("max".into(), max)],
            ..UdpTotals::default()
        };
        let mut x = h(vec![(0.0, 10.0, 6), (20.0, 30.0, 1)], 25.0);
        let mut y = h(vec![(10.0, 20.0, 2), (20.0, 30.0, 1)], 21.0);
        (x.delays_below_zero, x.below_zero_by_us) = (3, Some(2.0));
        (y.delays_below_zero, y.below_zero_by_us) = (4, Some(7.5));
        let s = totals(&[&x, &y]);
        assert_eq!(
            s.histogram,
            vec![(0.0, 10.0, 6), (10.0, 20.0, 2), (20.0, 30.0, 2)]
        );
        let p: Vec<(&str, f64)> = s
            .percentiles_us
            .iter()
            .map(|(n, v)| (n.as_str(), *v))
            .collect();
        assert_eq!(
            p,
            vec![
                ("p50", 10.0),
                ("p90", 24.0),
                ("p99", 30.0),
                ("p99.9", 30.0),
                ("max", 25.0)
            ]
        );
        assert_eq!((s.delays_below_zero, s.below_zero_by_us), (7, Some(7.5)));
        // No histogram, no percentiles: not even a max alone.
        let z = h(Vec::new(), 9.0);
        assert!(totals(&[&z]).percentiles_us.is_empty());
        // A stream whose sender's count never came: the sum has none either.
        let c = UdpTotals::default();
        assert_eq!(totals(&[&a, &c]).sent, None);
        assert_eq!(totals(&[]).sent, None);
    }

    #[test]
    fn an_interval_sum_takes_the_latest_time_and_adds_counts() {
        let a = UdpInterval {
            time_slice: 1.0,
            bytes: 100,
            packets: 10,
            drops: 2,
            max_consecutive_drops: 2,
            delay_avg_us: Some(10.0),
            delay_min_us: Some(1.0),
            delay_max_us: Some(20.0),
            jitter_us: 1.0,
            ..UdpInterval::default()
        };
        let b = UdpInterval {
            time_slice: 1.002,
            bytes: 50,
            packets: 30,
            drops: -1,
            max_consecutive_drops: 1,
            delay_avg_us: Some(30.0),
            delay_min_us: Some(3.0),
            delay_max_us: Some(40.0),
            jitter_us: 3.0,
            omitted: true,
            ..UdpInterval::default()
        };
        let s = interval(&[&a, &b]);
        assert_eq!(s.time_slice, 1.002);
        assert_eq!(
            (s.bytes, s.packets, s.drops, s.max_consecutive_drops),
            (150, 40, 1, 2)
        );
        assert_eq!(s.delay_avg_us, Some(25.0));
        assert_eq!((s.delay_min_us, s.delay_max_us), (Some(1.0), Some(40.0)));
        assert_eq!(s.jitter_us, 2.0);
        assert!(s.omitted);
    }
}
