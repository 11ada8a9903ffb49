//! The delay histogram a UDP report carries: log-linear buckets, as HDR
//! histograms have, so that it covers every delay measured however long.
//!
//! The first `per_segment` buckets are `width` wide (`--hist-bins` ×
//! `--hist-bin`); each following segment holds as many buckets, each twice
//! as wide as the segment before's: with 100 × 50 µs, 0–5 ms by 50 µs,
//! 5–15 ms by 100 µs, 15–35 ms by 200 µs, and so on. A bucket is never
//! wider than 2/`per_segment` of the delays it holds, and nothing clips.
//!
//! The buckets are filled at the end from the receiver's HDR histogram (the
//! one the percentiles come from), each HDR value range by its highest
//! value, as HDR's percentiles are: the bucket in which the histogram's
//! cumulative count passes a share is the bucket holding that percentile.
//! Only buckets that hold something are listed, as `(lower µs, upper µs,
//! count)`, lowest first.

use hdrhistogram::Histogram;

/// One listed bucket: lower edge µs, upper edge µs (exclusive), datagrams.
pub type Bucket = (f64, f64, u64);

/// Most buckets a report may list: an HDR histogram of 1 ns to an hour at
/// three significant digits has fewer distinct values than this, so a
/// longer list (from a peer) is cut here.
pub const MAX_BUCKETS: usize = 100_000;

/// The bucket layout: `per_segment` buckets of `width_ns`, then segments of
/// as many buckets, each segment's twice as wide as the one before's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    width_ns: u64,
    per_segment: u64,
}

impl Layout {
    /// `per_segment` buckets of `width_ns` first (each at least 1).
    pub fn new(width_ns: u64, per_segment: u64) -> Layout {
        Layout {
            width_ns: width_ns.max(1),
            per_segment: per_segment.max(1),
        }
    }

    /// The index of the bucket holding `v_ns`.
    pub fn index(&self, v_ns: u64) -> u64 {
        let (w, s) = (u128::from(self.width_ns), u128::from(self.per_segment));
        let v = u128::from(v_ns);
        // Segment k starts at s·w·(2^k − 1), so v/(s·w) + 1 lies in [2^k, 2^(k+1)).
        let k = 127 - (v / (s * w) + 1).leading_zeros();
        let start = s * w * ((1u128 << k) - 1);
        let i = u128::from(k) * s + (v - start) / (w << k);
        i as u64
    }

    /// Bucket `i`'s lower and upper (exclusive) edges, ns.
    pub fn edges(&self, i: u64) -> (u128, u128) {
        let (w, s) = (u128::from(self.width_ns), u128::from(self.per_segment));
        let (k, j) = (u128::from(i) / s, u128::from(i) % s);
        let lo = s * w * ((1u128 << k) - 1) + j * (w << k);
        (lo, lo + (w << k))
    }
}

/// The non-empty buckets of `h`'s values in `layout`, lowest first.
pub fn buckets(h: &Histogram<u64>, layout: Layout) -> Vec<Bucket> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for v in h.iter_recorded() {
        let i = layout.index(v.value_iterated_to());
        match out.last_mut() {
            Some((last, n)) if *last == i => *n += v.count_at_value(),
            _ => out.push((i, v.count_at_value())),
        }
    }
    out.into_iter()
        .map(|(i, n)| {
            let (lo, hi) = layout.edges(i);
            (lo as f64 / 1e3, hi as f64 / 1e3, n)
        })
        .collect()
}

/// Two bucket lists of the same layout as one (the streams of a `-P` test
/// share theirs): counts of the same bucket (the same lower edge) add.
pub fn merge(a: &[Bucket], b: &[Bucket]) -> Vec<Bucket> {
    use std::cmp::Ordering::*;
    let mut out: Vec<Bucket> = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    loop {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => match x.0.total_cmp(&y.0) {
                Equal => {
                    i += 1;
                    j += 1;
                    (x.0, x.1, x.2 + y.2)
                }
                Less => {
                    i += 1;
                    *x
                }
                Greater => {
                    j += 1;
                    *y
                }
            },
            (Some(x), None) => {
                i += 1;
                *x
            }
            (None, Some(y)) => {
                j += 1;
                *y
            }
            (None, None) => return out,
        };
        out.push(next);
    }
}

/// p50, p90, p99 and p99.9 from a bucket list: each the upper edge of the
/// bucket in which the cumulative count reaches that share (so right to
/// within a bucket). Empty for an empty list.
pub fn percentiles(b: &[Bucket]) -> Vec<(String, f64)> {
    let total: u64 = b.iter().map(|x| x.2).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (name, q) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9)] {
        // The rank of the datagram at q percent, from 1, as HDR counts it
        // (the same arithmetic, so the same rank).
        let rank = ((q / 100.0 * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for x in b {
            seen += x.2;
            if seen >= rank {
                out.push((name.to_string(), x.1));
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_double_their_bucket_width() {
        let l = Layout::new(50_000, 100);
        // The first segment: 100 buckets of 50 µs.
        assert_eq!(l.index(0), 0);
        assert_eq!(l.index(49_999), 0);
        assert_eq!(l.index(50_000), 1);
        assert_eq!(l.index(4_999_999), 99);
        assert_eq!(l.edges(99), (4_950_000, 5_000_000));
        // Then 100 of 100 µs up to 15 ms, 100 of 200 µs up to 35 ms.
        assert_eq!(l.index(5_000_000), 100);
        assert_eq!(l.index(5_099_999), 100);
        assert_eq!(l.index(5_100_000), 101);
        assert_eq!(l.edges(100), (5_000_000, 5_100_000));
        assert_eq!(l.index(14_999_999), 199);
        assert_eq!(l.index(15_000_000), 200);
        assert_eq!(l.edges(200), (15_000_000, 15_200_000));
        assert_eq!(l.index(40_000_000), 312);
        assert_eq!(l.edges(312), (39_800_000, 40_200_000));
        // An hour still has its bucket, under 2% wide.
        let i = l.index(3_600_000_000_000);
        let (lo, hi) = l.edges(i);
        assert!(lo <= 3_600_000_000_000 && 3_600_000_000_000 < hi);
        assert!((hi - lo) * 50 <= lo, "{lo} {hi}");
        // Degenerate layouts are one-wide.
        assert_eq!(Layout::new(0, 0), Layout::new(1, 1));
        assert_eq!(Layout::new(1, 1).edges(3), (7, 15));
    }

    #[test]
    fn every_value_lies_in_its_bucket() {
        for l in [
            Layout::new(50_000, 100),
            Layout::new(7, 3),
            Layout::new(1, 1),
        ] {
            let mut v = 0u64;
            while v < 10_000_000_000 {
                let (lo, hi) = l.edges(l.index(v));
                assert!(lo <= u128::from(v) && u128::from(v) < hi, "{l:?} {v}");
                v = v * 3 / 2 + 1;
            }
        }
    }

    #[test]
    fn buckets_hold_every_value_and_the_percentiles_fall_in_theirs() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        // 5–7 ms, past the first segment's 5 ms, and one at 40 ms.
        for i in 0..2000u64 {
            h.record(5_000_000 + i * 1000).unwrap();
        }
        h.record(40_000_000).unwrap();
        let b = buckets(&h, Layout::new(50_000, 100));
        assert_eq!(b.iter().map(|x| x.2).sum::<u64>(), 2001);
        // One entry a bucket, in order.
        assert!(b.windows(2).all(|w| w[0].1 <= w[1].0), "{b:?}");
        assert_eq!(b[0].0, 5000.0);
        assert_eq!(b[0].1, 5100.0);
        let last = *b.last().unwrap();
        assert_eq!((last.0, last.1, last.2), (39800.0, 40200.0, 1));
        for (q, name) in [(50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p99.9")] {
            let p = h.value_at_percentile(q) as f64 / 1e3;
            let mine = percentiles(&b);
            let (_, at) = mine.iter().find(|(n, _)| n == name).unwrap();
            // The bucket list's percentile is the upper edge of the bucket HDR's is in.
            let holding = b.iter().find(|x| x.0 <= p && p < x.1).unwrap();
            assert_eq!(*at, holding.1, "{name}");
        }
        assert_eq!(percentiles(&b).len(), 4);
        assert!(percentiles(&[]).is_empty());
    }

    #[test]
    fn percentiles_count_ranks_as_hdr_does() {
        let layout = Layout::new(1000, 1);
        for (a, b) in [
            (1, 1),
            (999, 1),
            (998, 2),
            (9, 1),
            (1, 9),
            (899, 101),
            (3, 0),
        ] {
            let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
            h.record_n(500, a).unwrap();
            h.record_n(1500, b).unwrap();
            let list = buckets(&h, layout);
            let mine = percentiles(&list);
            for (k, q) in [50.0, 90.0, 99.0, 99.9].into_iter().enumerate() {
                let hdr = h.value_at_percentile(q);
                let want = if hdr < 1000 { 1.0 } else { 3.0 };
                assert_eq!(mine[k].1, want, "{a} {b} {q}");
            }
        }
    }

    #[test]
    fn merging_adds_the_same_buckets_and_keeps_the_order() {
        let a = [(0.0, 1.0, 2), (2.0, 3.0, 1), (5.0, 6.0, 4)];
        let b = [(1.0, 2.0, 7), (2.0, 3.0, 3), (9.0, 10.0, 1)];
        assert_eq!(
            merge(&a, &b),
            vec![
                (0.0, 1.0, 2),
                (1.0, 2.0, 7),
                (2.0, 3.0, 4),
                (5.0, 6.0, 4),
                (9.0, 10.0, 1)
            ]
        );
        assert_eq!(merge(&b, &a), merge(&a, &b));
        assert_eq!(merge(&a, &[]), a.to_vec());
        assert!(merge(&[], &[]).is_empty());
    }
}
