//! Frame sizes and the datagram ↔ frame map of a frame stream: ctsTraffic's
//! media frames, all one size, and iperf2's `--isochronous=fps:mean,stdev`
//! frames, whose sizes follow a log-normal distribution. Neither end sends
//! a frame's size: both compute it from the spec (a varying frame's size
//! from the seed and its number), so the receiver knows which frame each
//! datagram belongs to and how many make the frame whole.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

use super::header::HEADER_LEN;

/// A varying frame is at most this many times the mean (the log-normal's
/// tail is cut, so one frame cannot hold seconds of the stream).
pub const MAX_FRAME_OVER_MEAN: u64 = 16;

/// How far one datagram may move the map ahead, frames: a sequence number
/// further on than this (a forged one) is placed at this horizon instead of
/// costing time and memory per frame skipped.
const MAX_EXTEND: u64 = 1 << 20;

/// Frames the map keeps behind the oldest one still open, for duplicates
/// of datagrams already judged.
const KEEP_BEHIND: u64 = 1024;

/// The spread of varying frame sizes (iperf2 `--isochronous`): the mean is
/// the media spec's frame size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Varying {
    /// Standard deviation of the frame size, bytes.
    pub stdev_bytes: u64,
    /// Seed both ends draw the sizes from.
    pub seed: u64,
}

/// The size of every frame of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameBytes {
    /// Every frame this many bytes.
    Fixed(u64),
    /// Log-normal sizes with this mean and spread.
    Varying {
        /// Mean frame size, bytes.
        mean: u64,
        /// The spread and the seed.
        spread: Varying,
    },
}

/// SplitMix64: a well-mixed 64-bit value from any input, so frame `k`'s
/// size needs no state from frames before it.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform value in (0, 1].
fn unit(bits: u64) -> f64 {
    ((bits >> 11) + 1) as f64 / (1u64 << 53) as f64
}

impl FrameBytes {
    /// Bytes of frame `k` (at least a header's worth).
    pub fn bytes(&self, k: u64) -> u64 {
        match *self {
            FrameBytes::Fixed(b) => b,
            FrameBytes::Varying { mean, spread } => {
                let m = mean.max(HEADER_LEN as u64);
                if spread.stdev_bytes == 0 {
                    return m;
                }
                // Log-normal with mean m and standard deviation s:
                // sigma^2 = ln(1 + s^2/m^2), mu = ln(m) - sigma^2/2.
                let (mf, s) = (m as f64, spread.stdev_bytes as f64);
                let var = (1.0 + (s / mf).powi(2)).ln();
                let mu = mf.ln() - var / 2.0;
                let r = mix(spread.seed ^ mix(k));
                let (u1, u2) = (unit(r), unit(mix(r)));
                // Box-Muller: a standard normal from two uniforms.
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let x = (mu + var.sqrt() * z).exp().round();
                (x as u64).clamp(HEADER_LEN as u64, m.saturating_mul(MAX_FRAME_OVER_MEAN))
            }
        }
    }

    /// Datagrams of `size` bytes frame `k` leaves as (the last shorter).
    pub fn datagrams(&self, k: u64, size: u32) -> u64 {
        self.bytes(k).div_ceil(u64::from(size.max(1))).max(1)
    }
}

/// Which frame each datagram belongs to: fixed frames by division, varying
/// ones by a window of frame starts that grows as datagrams arrive and is
/// trimmed behind the frames still open.
#[derive(Debug, Clone)]
pub struct FrameIndex {
    shape: Shape,
}

#[derive(Debug, Clone)]
enum Shape {
    Fixed(u64),
    Varying {
        bytes: FrameBytes,
        size: u32,
        /// Frame number of `starts[0]`.
        base: u64,
        /// First datagram of frames `base..`; never empty.
        starts: VecDeque<u64>,
    },
}

impl FrameIndex {
    /// Frames of `per_frame` datagrams each.
    pub fn fixed(per_frame: u64) -> FrameIndex {
        FrameIndex {
            shape: Shape::Fixed(per_frame.max(1)),
        }
    }

    /// Frames of `bytes` sent as datagrams of `size` bytes.
    pub fn new(bytes: FrameBytes, size: u32) -> FrameIndex {
        match bytes {
            FrameBytes::Fixed(_) => FrameIndex::fixed(bytes.datagrams(0, size)),
            FrameBytes::Varying { .. } => FrameIndex {
                shape: Shape::Varying {
                    bytes,
                    size,
                    base: 0,
                    starts: VecDeque::from([0]),
                },
            },
        }
    }

    /// Datagrams frame `k` has.
    pub fn datagrams_in(&self, k: u64) -> u64 {
        match &self.shape {
            Shape::Fixed(n) => *n,
            Shape::Varying { bytes, size, .. } => bytes.datagrams(k, *size),
        }
    }

    /// Adds frame starts until frame `upto`'s is known or the horizon is
    /// reached; the last frame whose start is known.
    fn extend(&mut self, until: impl Fn(u64, u64) -> bool) -> u64 {
        let Shape::Varying {
            bytes,
            size,
            base,
            starts,
        } = &mut self.shape
        else {
            return 0;
        };
        let mut added = 0;
        loop {
            let last = *base + starts.len() as u64 - 1;
            let start = *starts.back().unwrap_or(&0);
            if until(last, start) || added >= MAX_EXTEND {
                return last;
            }
            starts.push_back(start.saturating_add(bytes.datagrams(last, *size)));
            added += 1;
        }
    }

    /// The frame datagram `seq` belongs to. A datagram of a frame already
    /// forgotten gets the oldest frame remembered, less one.
    pub fn frame_of(&mut self, seq: u64) -> u64 {
        if let Shape::Fixed(n) = self.shape {
            return seq / n;
        }
        let last = self.extend(|_, start| start > seq);
        let Shape::Varying { base, starts, .. } = &self.shape else {
            return 0;
        };
        if starts.back().is_some_and(|&s| s <= seq) {
            // Past the horizon.
            return last;
        }
        match starts.partition_point(|&s| s <= seq) {
            0 => base.saturating_sub(1),
            i => base + i as u64 - 1,
        }
    }

    /// The first datagram of frame `k` (of the oldest frame remembered, if
    /// `k` is forgotten).
    pub fn start_of(&mut self, k: u64) -> u64 {
        if let Shape::Fixed(n) = self.shape {
            return k.saturating_mul(n);
        }
        self.extend(|last, _| last >= k);
        let Shape::Varying { base, starts, .. } = &self.shape else {
            return 0;
        };
        let i = k.saturating_sub(*base).min(starts.len() as u64 - 1);
        starts[i as usize]
    }

    /// Frames begun by the first `datagrams` datagrams.
    pub fn frames_before(&mut self, datagrams: u64) -> u64 {
        match datagrams {
            0 => 0,
            n => self.frame_of(n - 1) + 1,
        }
    }

    /// Frames below `open` are judged: forgets all but the last
    /// `KEEP_BEHIND` of them.
    pub fn judged_below(&mut self, open: u64) {
        if let Shape::Varying { base, starts, .. } = &mut self.shape {
            while *base + KEEP_BEHIND < open && starts.len() > 1 {
                starts.pop_front();
                *base += 1;
            }
        }
    }

    /// Frame starts held (for tests of the memory bound).
    pub fn remembered(&self) -> usize {
        match &self.shape {
            Shape::Fixed(_) => 0,
            Shape::Varying { starts, .. } => starts.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn varying(mean: u64, stdev: u64, seed: u64) -> FrameBytes {
        FrameBytes::Varying {
            mean,
            spread: Varying {
                stdev_bytes: stdev,
                seed,
            },
        }
    }

    #[test]
    fn sizes_have_the_mean_and_spread_asked_and_repeat_by_seed() {
        let f = varying(40_000, 10_000, 7);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|k| f.bytes(k) as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!((mean / 40_000.0 - 1.0).abs() < 0.02, "mean {mean}");
        assert!((sd / 10_000.0 - 1.0).abs() < 0.05, "sd {sd}");
        // Skewed right, as a log-normal is: the median is below the mean.
        let mut sorted = xs.clone();
        sorted.sort_by(f64::total_cmp);
        assert!(sorted[n as usize / 2] < mean);
        // The same seed gives the same sizes; another seed others.
        assert_eq!(f.bytes(123), varying(40_000, 10_000, 7).bytes(123));
        let other = varying(40_000, 10_000, 8);
        assert!((0..100).any(|k| other.bytes(k) != f.bytes(k)));
    }

    /// Both ends draw every frame's size, so a netrig that drew other
    /// sizes from the same spec could not talk to this one: the mixer is
    /// SplitMix64 (its published first outputs), and these sizes are
    /// fixed for good.
    #[test]
    fn the_sizes_drawn_never_change() {
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(unit(0), 1.0 / (1u64 << 53) as f64);
        assert_eq!(unit(u64::MAX), 1.0);
        let f = varying(40_000, 10_000, 7);
        let sizes: Vec<u64> = (0..6).map(|k| f.bytes(k)).collect();
        assert_eq!(sizes, [34536, 52291, 29761, 38858, 57823, 37928]);
        let wide = varying(1000, 50_000, 3);
        let sizes: Vec<u64> = (0..6).map(|k| wide.bytes(k)).collect();
        assert_eq!(sizes, [32, 96, 32, 168, 32, 32]);
    }

    #[test]
    fn no_spread_is_the_mean_and_sizes_stay_in_bounds() {
        assert!((0..100).all(|k| varying(5000, 0, 1).bytes(k) == 5000));
        let wide = varying(1000, 50_000, 3);
        assert!((0..10_000).all(|k| (32..=16_000).contains(&wide.bytes(k))));
        assert!((0..10_000).any(|k| wide.bytes(k) == 16_000));
        assert!((0..10_000).any(|k| wide.bytes(k) == 32));
        assert_eq!(varying(10, 0, 1).bytes(0), 32);
        assert_eq!(FrameBytes::Fixed(3000).datagrams(9, 1400), 3);
        assert_eq!(FrameBytes::Fixed(2800).datagrams(9, 1400), 2);
        assert_eq!(FrameBytes::Fixed(0).datagrams(9, 1400), 1);
    }

    proptest! {
        /// The map agrees with the frames laid end to end, in any order of
        /// questions, and forgetting judged frames changes no answer about
        /// the frames kept.
        #[test]
        fn the_map_matches_frames_laid_end_to_end(
            seed in any::<u64>(),
            stdev in 0u64..20_000,
            seqs in proptest::collection::vec(0u64..3_000, 1..50),
        ) {
            let bytes = varying(8_000, stdev, seed);
            let mut owner = Vec::new();
            let mut firsts = Vec::new();
            let mut k = 0;
            while owner.len() < 3_100 {
                firsts.push(owner.len() as u64);
                owner.extend(std::iter::repeat_n(k, bytes.datagrams(k, 1400) as usize));
                k += 1;
            }
            let mut ix = FrameIndex::new(bytes, 1400);
            for &s in &seqs {
                prop_assert_eq!(ix.frame_of(s), owner[s as usize]);
                let f = owner[s as usize];
                prop_assert_eq!(ix.start_of(f), firsts[f as usize]);
                prop_assert_eq!(ix.datagrams_in(f), bytes.datagrams(f, 1400));
                prop_assert_eq!(ix.frames_before(s + 1), f + 1);
            }
            let mut fixed = FrameIndex::fixed(3);
            prop_assert_eq!(fixed.frame_of(seqs[0]), seqs[0] / 3);
            prop_assert_eq!(fixed.start_of(seqs[0]), seqs[0] * 3);
            prop_assert_eq!(fixed.frames_before(seqs[0]), seqs[0].div_ceil(3));
        }
    }

    #[test]
    fn judged_frames_are_forgotten_and_far_jumps_stop_at_the_horizon() {
        let mut ix = FrameIndex::new(varying(2800, 500, 1), 1400);
        let f = ix.frame_of(100_000);
        assert!(ix.remembered() as u64 > f);
        ix.judged_below(f);
        assert_eq!(ix.remembered() as u64, KEEP_BEHIND + 2);
        // The frames kept still answer; one forgotten is placed just
        // behind them (below every open frame).
        assert_eq!(ix.frame_of(100_000), f);
        assert_eq!(ix.frame_of(0), f - KEEP_BEHIND - 1);
        // A forged sequence number far ahead costs at most the horizon.
        let mut ix = FrameIndex::new(varying(1400, 0, 1), 1400);
        assert_eq!(ix.frame_of(u64::MAX), MAX_EXTEND);
        assert_eq!(ix.remembered() as u64, MAX_EXTEND + 1);
        assert_eq!(ix.frame_of(5), 5);
        // A start past the horizon is the last one known.
        assert_eq!(ix.start_of(3 * MAX_EXTEND), MAX_EXTEND * 2);
        assert_eq!(FrameIndex::fixed(4).remembered(), 0);
        // However far the judged frames go, the map keeps a start to grow from.
        let mut fresh = FrameIndex::new(varying(1400, 0, 1), 1400);
        fresh.judged_below(1 << 30);
        assert_eq!(fresh.remembered(), 1);
        assert_eq!(fresh.frame_of(7), 7);
    }
}
