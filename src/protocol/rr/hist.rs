//! Latency statistics for request/response tests, free of I/O: an ACE-style
//! fixed-bin histogram (range, bins, below/above, the largest outliers),
//! exact min/max/mean/variance (Welford), and HDR percentiles.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Latency statistics of one run, in microseconds.
pub struct LatencyStats {
    min_us: f64,
    max_us: f64,
    n: u64,
    mean: f64,
    m2: f64,
    hdr: Histogram<u64>,
    lo: f64,
    hi: f64,
    bins: Vec<u64>,
    below: u64,
    above: u64,
    outliers: BinaryHeap<Reverse<u64>>,
    max_outliers: usize,
}

/// A printable/serialisable summary.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Smallest, µs.
    pub min_us: f64,
    /// Largest, µs.
    pub max_us: f64,
    /// Mean, µs.
    pub mean_us: f64,
    /// Variance, µs².
    pub variance_us2: f64,
    /// Standard deviation, µs.
    pub stddev_us: f64,
    /// Percentiles (name, µs).
    pub percentiles_us: Vec<(String, f64)>,
    /// Every sample, lossless: the HDR histogram (ns) the percentiles come
    /// from, as [`crate::protocol::hdr::encode`] writes it, so results merge exactly.
    pub hdr: String,
}

/// One bin of [`LatencyStats::log_bins`]: samples in `[lo_us, hi_us)`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct LogBin {
    pub lo_us: f64,
    pub hi_us: f64,
    pub count: u64,
}

/// Percentiles reported everywhere.
pub const PERCENTILES: [(&str, f64); 7] = [
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
    ("p99.99", 99.99),
    ("p99.999", 99.999),
    ("max", 100.0),
];

impl LatencyStats {
    /// A histogram over `[lo, hi)` µs in `bins` bins, keeping the `outliers` largest samples outside it.
    pub fn new(lo_us: f64, hi_us: f64, bins: usize, outliers: usize) -> Self {
        LatencyStats {
            min_us: f64::INFINITY,
            max_us: f64::NEG_INFINITY,
            n: 0,
            mean: 0.0,
            m2: 0.0,
            // 1 ns to 1 h at 3 significant digits.
            hdr: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid HDR bounds"),
            lo: lo_us,
            hi: hi_us.max(lo_us + f64::EPSILON),
            bins: vec![0; bins.max(1)],
            below: 0,
            above: 0,
            outliers: BinaryHeap::new(),
            max_outliers: outliers,
        }
    }

    /// Adds one sample, in ns.
    pub fn record_ns(&mut self, ns: u64) {
        let us = ns as f64 / 1e3;
        self.n += 1;
        self.min_us = self.min_us.min(us);
        self.max_us = self.max_us.max(us);
        let d = us - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (us - self.mean);
        let _ = self.hdr.record(ns.clamp(1, self.hdr.high()));
        if us < self.lo {
            self.below += 1;
        } else if us >= self.hi {
            self.above += 1;
        } else {
            let w = (self.hi - self.lo) / self.bins.len() as f64;
            let i = (((us - self.lo) / w) as usize).min(self.bins.len() - 1);
            self.bins[i] += 1;
        }
        if us < self.lo || us >= self.hi {
            self.outliers.push(Reverse(ns));
            if self.outliers.len() > self.max_outliers {
                self.outliers.pop();
            }
        }
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// The summary (None if empty).
    pub fn summary(&self) -> Option<Summary> {
        if self.n == 0 {
            return None;
        }
        let variance = if self.n > 1 {
            self.m2 / (self.n - 1) as f64
        } else {
            0.0
        };
        Some(Summary {
            count: self.n,
            min_us: self.min_us,
            max_us: self.max_us,
            mean_us: self.mean,
            variance_us2: variance,
            stddev_us: variance.sqrt(),
            percentiles_us: crate::protocol::hdr::percentiles_us(&self.hdr, &PERCENTILES),
            hdr: crate::protocol::hdr::encode(&self.hdr),
        })
    }

    /// Log-2 bins from 1 µs up (from the HDR histogram, so at its 0.1 %
    /// resolution), from the first non-empty bin to the last: counts of
    /// durations that span decades, where fixed bins would put every short
    /// one in the first bin.
    pub fn log_bins(&self) -> Vec<LogBin> {
        let mut out = Vec::new();
        let mut lo_ns = 0u64;
        for v in self.hdr.iter_log(1000, 2.0) {
            // The last value the bin holds, so the next starts one ns on.
            let hi_ns = v.value_iterated_to() + 1;
            let count = v.count_since_last_iteration();
            if count > 0 || !out.is_empty() {
                out.push(LogBin {
                    lo_us: lo_ns as f64 / 1e3,
                    hi_us: hi_ns as f64 / 1e3,
                    count,
                });
            }
            lo_ns = hi_ns;
        }
        // The walk may run past the largest sample by an empty bin.
        while out.last().is_some_and(|b| b.count == 0) {
            out.pop();
        }
        out
    }

    /// The largest outliers, descending, µs.
    pub fn outliers_us(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self.outliers.iter().map(|r| r.0 as f64 / 1e3).collect();
        v.sort_by(|a, b| b.total_cmp(a));
        v
    }

    /// Histogram rows: (low µs or None for "below", high µs or None for "above", count).
    pub fn rows(&self) -> Vec<(Option<f64>, Option<f64>, u64)> {
        let w = (self.hi - self.lo) / self.bins.len() as f64;
        let mut out = vec![(None, Some(self.lo), self.below)];
        for (i, &c) in self.bins.iter().enumerate() {
            out.push((
                Some(self.lo + i as f64 * w),
                Some(self.lo + (i + 1) as f64 * w),
                c,
            ));
        }
        out.push((Some(self.hi), None, self.above));
        out
    }

    /// ACE's text rendering of the histogram; only non-empty bins are listed
    /// unless `all` (ACE lists them all).
    pub fn render_ace(&self, title: &str, all: bool) -> String {
        let mut s = format!("Histogram {title}\n");
        if let Some(sum) = self.summary() {
            s += &format!(
                "minimum: {:.3}\nmaximum: {:.3}\nmean: {:.3}\nvariance: {:.3}\nnum_points: {}\nnum_bins: {} {} {}\n",
                sum.min_us,
                sum.max_us,
                sum.mean_us,
                sum.variance_us2,
                sum.count,
                self.bins.len(),
                self.lo,
                self.hi
            );
        }
        s += "Low - High Count Fraction Cumulative\n";
        let mut cum = 0u64;
        let n = self.n.max(1) as f64;
        for (lo, hi, c) in self.rows() {
            cum += c;
            if c == 0 && !all {
                continue;
            }
            let lo = lo.map_or("below".into(), |v| format!("{v:.3}"));
            let hi = hi.map_or("above".into(), |v| format!("{v:.3}"));
            s += &format!(
                "{lo} - {hi} : {c} {:.3} {:.3}\n",
                c as f64 / n,
                cum as f64 / n
            );
        }
        s += "outliers:\n";
        for o in self.outliers_us() {
            s += &format!("{o:.3}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ace_example_shape() {
        let mut h = LatencyStats::new(0.0, 10_000.0, 1000, 100);
        for _ in 0..988 {
            h.record_ns(45_000);
        }
        h.record_ns(60_182_000);
        let sum = h.summary().unwrap();
        assert_eq!(sum.count, 989);
        assert_eq!(sum.max_us, 60_182.0);
        assert_eq!(h.outliers_us(), vec![60_182.0]);
        let text = h.render_ace("test", false);
        assert!(text.contains("40.000 - 50.000 : 988"));
        assert!(text.contains("10000.000 - above : 1"));
        assert!(text.ends_with("outliers:\n60182.000\n"));
    }

    #[test]
    fn keeps_only_the_largest_outliers() {
        let mut h = LatencyStats::new(0.0, 1.0, 10, 3);
        for us in [5u64, 9, 2, 7, 11, 3] {
            h.record_ns(us * 1000);
        }
        assert_eq!(h.outliers_us(), vec![11.0, 9.0, 7.0]);
    }

    #[test]
    fn log_bins_double_from_a_microsecond_and_hold_every_sample() {
        let mut h = LatencyStats::new(0.0, 1.0, 1, 0);
        // 3 µs, twice; 5 µs; 40 µs: bins [2,4), [4,8), then empty ones to [32,64).
        for ns in [3_000, 3_000, 5_000, 40_000] {
            h.record_ns(ns);
        }
        let bins = h.log_bins();
        let got: Vec<(f64, f64, u64)> = bins.iter().map(|b| (b.lo_us, b.hi_us, b.count)).collect();
        assert_eq!(
            got,
            vec![
                (2.0, 4.0, 2),
                (4.0, 8.0, 1),
                (8.0, 16.0, 0),
                (16.0, 32.0, 0),
                (32.0, 64.0, 1)
            ],
            "{bins:?}"
        );
        assert!(LatencyStats::new(0.0, 1.0, 1, 0).log_bins().is_empty());
    }

    #[test]
    fn a_range_not_from_zero_bins_from_its_low_edge() {
        // Bins of 1 µs over [10, 20): below, the edges, inside, above.
        let mut h = LatencyStats::new(10.0, 20.0, 10, 5);
        for ns in [5_000, 9_999, 10_000, 15_500, 19_999, 20_000, 31_000] {
            h.record_ns(ns);
        }
        let rows = h.rows();
        assert_eq!(rows[0], (None, Some(10.0), 2));
        assert_eq!(rows[1], (Some(10.0), Some(11.0), 1));
        assert_eq!(rows[6], (Some(15.0), Some(16.0), 1));
        assert_eq!(rows[10], (Some(19.0), Some(20.0), 1));
        assert_eq!(rows[11], (Some(20.0), None, 2));
        assert_eq!(rows.iter().map(|r| r.2).sum::<u64>(), 7);
        assert_eq!(h.count(), 7);
        // One sample has no spread (not 0/0).
        let mut one = LatencyStats::new(0.0, 1.0, 1, 0);
        one.record_ns(2_000);
        assert_eq!(one.summary().unwrap().variance_us2, 0.0);
        // What fell outside the range is kept, largest first.
        assert_eq!(h.outliers_us(), vec![31.0, 20.0, 9.999, 5.0]);
    }

    #[test]
    fn a_sample_just_below_the_top_that_rounds_to_past_the_last_bin_is_in_it() {
        // 3 ns is below this top by one float step, yet 0.003 / (top / 5)
        // is 5.0 in floating point: the last bin, not past it.
        let mut h = LatencyStats::new(0.0, 0.003_000_000_000_000_000_5, 5, 0);
        h.record_ns(3);
        let rows = h.rows();
        assert_eq!((rows[5].2, rows[6].2), (1, 0), "{rows:?}");
    }

    #[test]
    fn ace_text_lists_non_empty_bins_with_their_running_total() {
        let mut h = LatencyStats::new(0.0, 3.0, 3, 0);
        for ns in [500, 2_500, 2_600, 9_000] {
            h.record_ns(ns);
        }
        let some = h.render_ace("t", false);
        assert!(some.contains("0.000 - 1.000 : 1 0.250 0.250\n"), "{some}");
        assert!(some.contains("2.000 - 3.000 : 2 0.500 0.750\n"), "{some}");
        assert!(some.contains("3.000 - above : 1 0.250 1.000\n"), "{some}");
        assert!(!some.contains("1.000 - 2.000"), "{some}");
        let all = h.render_ace("t", true);
        assert!(all.contains("1.000 - 2.000 : 0 0.000 0.250\n"), "{all}");
        assert!(all.contains("below - 0.000 : 0 0.000 0.000\n"), "{all}");
    }

    proptest! {
        #[test]
        fn log_bins_count_every_sample_in_its_bin(samples in proptest::collection::vec(1u64..100_000_000_000, 1..200)) {
            let mut h = LatencyStats::new(0.0, 1.0, 1, 0);
            for &s in &samples { h.record_ns(s); }
            let bins = h.log_bins();
            prop_assert_eq!(bins.iter().map(|b| b.count).sum::<u64>(), samples.len() as u64);
            for w in bins.windows(2) {
                prop_assert_eq!(w[0].hi_us, w[1].lo_us);
            }
            // The largest sample is in the last bin (to HDR's 0.1 %).
            let max = *samples.iter().max().unwrap() as f64 / 1e3;
            let last = bins.last().unwrap();
            prop_assert!(max >= last.lo_us * 0.999 && max < last.hi_us * 1.001, "{} not in {:?}", max, last);
        }

        #[test]
        fn mean_variance_and_bins_are_exact(samples in proptest::collection::vec(1u64..10_000_000, 1..300)) {
            let mut h = LatencyStats::new(0.0, 5_000.0, 50, 10);
            for &s in &samples { h.record_ns(s); }
            let us: Vec<f64> = samples.iter().map(|&s| s as f64 / 1e3).collect();
            let mean = us.iter().sum::<f64>() / us.len() as f64;
            let sum = h.summary().unwrap();
            prop_assert!((sum.mean_us - mean).abs() < 1e-6 * mean.max(1.0));
            if us.len() > 1 {
                let var = us.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (us.len() - 1) as f64;
                prop_assert!((sum.variance_us2 - var).abs() < 1e-6 * var.max(1.0));
            }
            prop_assert_eq!(h.rows().iter().map(|r| r.2).sum::<u64>(), samples.len() as u64);
            let p50 = sum.percentiles_us[0].1;
            let mut sorted = us.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            let exact = sorted[(sorted.len() - 1) / 2];
            prop_assert!(p50 >= exact * 0.99 - 0.001 && p50 <= sorted[sorted.len() / 2] * 1.01 + 0.001, "p50 {} exact {}", p50, exact);
        }
    }
}
