//! Impairment decisions, free of I/O: which datagram to drop, duplicate, hold
//! back or corrupt and when each may leave; which byte of a stream to flip and
//! where to cut it. Every random choice comes from a seeded generator, so the
//! same seed and the same arrivals give the same impairments.
//!
//! Each datagram gets at most one of drop, corrupt, reorder and duplicate, so
//! the relay's counts can be compared with a receiver's number for number.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::sync::{Arc, Mutex, PoisonError};
use thiserror::Error;

/// What the relay does to one direction of traffic.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ImpairSpec {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Drop every Nth datagram (0 = never).
    pub drop_every: u64,
    /// Probability that a datagram is sent twice.
    pub dup: f64,
    /// Duplicate every Nth datagram.
    pub dup_every: u64,
    /// Probability that a datagram is held back and sent after the next one.
    pub reorder: f64,
    /// Hold back every Nth datagram.
    pub reorder_every: u64,
    /// Datagrams: probability a datagram gets one flipped payload byte.
    /// Streams: probability per byte.
    pub corrupt: f64,
    /// Datagrams: corrupt every Nth datagram. Streams: every Nth byte.
    pub corrupt_every: u64,
    /// Fixed one-way delay added, ns.
    pub delay_ns: u64,
    /// Uniform jitter ± this around the delay, ns (order is kept).
    pub jitter_ns: u64,
    /// Token-bucket rate, bit/s (0 = unlimited).
    pub rate_bps: u64,
    /// Token-bucket depth, bytes.
    pub burst: u64,
    /// Queue what exceeds the rate (shaping) instead of dropping it (policing).
    pub shape: bool,
    /// Shaping: a datagram that would wait longer than this is dropped, ns.
    pub queue_limit_ns: u64,
    /// Streams: reset the connection after this many data bytes.
    pub reset_after: Option<u64>,
    /// Rewrite the TOS byte (DSCP and ECN) of everything sent on, as a
    /// router that remarks or bleaches would (TCP keeps its own ECN bits).
    pub remark_tos: Option<u8>,
}

/// An impairment setting that makes no sense.
#[derive(Debug, Error, PartialEq)]
pub enum ImpairError {
    /// A probability outside 0..=1.
    #[error("{name} must be a probability between 0 and 100%, got {value}")]
    Probability {
        /// The option.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// A rate without a bucket to hold a single packet.
    #[error("a rate needs a burst (token bucket depth) of at least 1 byte")]
    NoBurst,
}

impl ImpairSpec {
    /// Checks the settings; the error names the bad one.
    pub fn validate(&self) -> Result<(), ImpairError> {
        for (name, value) in [
            ("loss", self.loss),
            ("dup", self.dup),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ImpairError::Probability { name, value });
            }
        }
        if self.rate_bps > 0 && self.burst == 0 {
            return Err(ImpairError::NoBurst);
        }
        Ok(())
    }

    /// Whether datagrams or bytes must wait (delay, jitter or shaping).
    pub fn delays(&self) -> bool {
        self.delay_ns > 0 || self.jitter_ns > 0 || (self.rate_bps > 0 && self.shape)
    }
}

/// A token bucket measured in bytes, refilled continuously at `rate_bps`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_bps: u64,
    depth: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket at time `now_ns`.
    pub fn new(rate_bps: u64, depth: u64, now_ns: u64) -> TokenBucket {
        TokenBucket {
            rate_bps,
            depth: depth as f64,
            tokens: depth as f64,
            last_ns: now_ns,
        }
    }

    fn refill(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.last_ns) as f64;
        self.tokens = (self.tokens + dt * self.rate_bps as f64 / 8e9).min(self.depth);
        self.last_ns = self.last_ns.max(now_ns);
    }

    /// Policing: takes `len` tokens if there are enough; `false` means drop.
    pub fn police(&mut self, len: usize, now_ns: u64) -> bool {
        self.refill(now_ns);
        if self.tokens >= len as f64 {
            self.tokens -= len as f64;
            true
        } else {
            false
        }
    }

    /// Shaping: when `len` bytes may leave, if that is within `limit_ns` of
    /// now (otherwise `None`, and no tokens are taken). Tokens go into debt
    /// for queued bytes, so later packets wait behind earlier ones.
    pub fn shape(&mut self, len: usize, now_ns: u64, limit_ns: u64) -> Option<u64> {
        self.refill(now_ns);
        let after = self.tokens - len as f64;
        let wait = if after >= 0.0 {
            0
        } else {
            (-after * 8e9 / self.rate_bps as f64).ceil() as u64
        };
        if wait > limit_ns {
            return None;
        }
        self.tokens = after;
        Some(now_ns + wait)
    }
}

/// A token bucket that several flows draw from, so that a rate limits a
/// whole direction of a relay rather than each connection or flow.
pub type SharedBucket = Arc<Mutex<TokenBucket>>;

/// A full bucket for `spec`'s rate, if it has one.
pub fn bucket_for(spec: &ImpairSpec, now_ns: u64) -> Option<SharedBucket> {
    (spec.rate_bps > 0).then(|| {
        Arc::new(Mutex::new(TokenBucket::new(
            spec.rate_bps,
            spec.burst,
            now_ns,
        )))
    })
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// Random or every-Nth loss.
    Loss,
    /// No tokens (policing).
    Police,
    /// The shaping queue was full.
    Queue,
}

/// What to do with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Do not forward it.
    Drop(DropCause),
    /// Forward it at `at_ns`.
    Forward {
        /// Earliest departure, ns on the caller's clock.
        at_ns: u64,
        /// Flip one bit of the byte at this offset.
        corrupt: Option<usize>,
        /// Send it twice.
        duplicate: bool,
        /// Hold it back and send it right after the next datagram.
        hold: bool,
    },
}

fn every(n: u64, i: u64) -> bool {
    n > 0 && i % n == n - 1
}

/// Departure time with delay and jitter, never before the previous departure
/// (so jitter does not reorder; reordering is its own, counted, impairment).
fn delayed(spec: &ImpairSpec, rng: &mut SmallRng, ready_ns: u64, last_ns: u64) -> u64 {
    let mut at = ready_ns + spec.delay_ns;
    if spec.jitter_ns > 0 {
        let j = rng.random_range(0..=2 * spec.jitter_ns);
        at = (at + j).saturating_sub(spec.jitter_ns).max(ready_ns);
    }
    at.max(last_ns)
}

/// Decides the fate of each datagram of one direction of one flow.
#[derive(Debug, Clone)]
pub struct DatagramImpairer {
    spec: ImpairSpec,
    rng: SmallRng,
    bucket: Option<SharedBucket>,
    index: u64,
    last_departure: u64,
}

impl DatagramImpairer {
    /// A new impairer; `seed` makes its random choices repeatable.
    pub fn new(spec: ImpairSpec, seed: u64, now_ns: u64) -> DatagramImpairer {
        let bucket = bucket_for(&spec, now_ns);
        DatagramImpairer {
            spec,
            rng: SmallRng::seed_from_u64(seed),
            bucket,
            index: 0,
            last_departure: 0,
        }
    }

    /// Draws from `bucket` (shared with other flows) instead of a bucket of
    /// its own.
    pub fn with_bucket(mut self, bucket: Option<SharedBucket>) -> DatagramImpairer {
        self.bucket = bucket;
        self
    }

    /// Datagrams decided so far.
    pub fn seen(&self) -> u64 {
        self.index
    }

    fn chance(&mut self, p: f64) -> bool {
        // Always draw, so one setting does not shift another's random stream.
        let u: f64 = self.rng.random();
        u < p
    }

    /// Decides what happens to a datagram of `len` bytes arriving at `now_ns`.
    /// Corruption only touches bytes from `protect` on (a header to keep).
    pub fn decide(&mut self, len: usize, protect: usize, now_ns: u64) -> Action {
        let i = self.index;
        self.index += 1;
        let s = &self.spec;
        let (lossy, corrupt_every, reorder_every, dup_every) =
            (s.loss, s.corrupt_every, s.reorder_every, s.dup_every);
        let (p_corrupt, p_reorder, p_dup) = (s.corrupt, s.reorder, s.dup);
        let lost = self.chance(lossy) || every(self.spec.drop_every, i);
        let corrupt = self.chance(p_corrupt) || every(corrupt_every, i);
        let hold = self.chance(p_reorder) || every(reorder_every, i);
        let dup = self.chance(p_dup) || every(dup_every, i);
        let pick = self.rng.random::<u64>() as usize;
        let mut ready = now_ns;
        if let Some(b) = &self.bucket {
            let mut b = b.lock().unwrap_or_else(PoisonError::into_inner);
            if self.spec.shape {
                match b.shape(len, now_ns, self.spec.queue_limit_ns) {
                    Some(t) => ready = t,
                    None => return Action::Drop(DropCause::Queue),
                }
            } else if !b.police(len, now_ns) {
                return Action::Drop(DropCause::Police);
            }
        }
        if lost {
            return Action::Drop(DropCause::Loss);
        }
        let at_ns = delayed(&self.spec, &mut self.rng, ready, self.last_departure);
        self.last_departure = at_ns;
        let corrupt = (corrupt && len > protect).then(|| protect + pick % (len - protect));
        Action::Forward {
            at_ns,
            corrupt,
            hold: corrupt.is_none() && hold,
            duplicate: corrupt.is_none() && !hold && dup,
        }
    }
}

/// What happened to one chunk of a byte stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamEffect {
    /// Stream offsets (of this direction's data) whose byte was flipped.
    pub corrupted: Vec<u64>,
    /// Forward only this many bytes of the chunk, then reset the connection.
    pub cut: Option<usize>,
}

/// Corrupts and cuts one direction of one byte stream. Offsets count the
/// data bytes given to [`StreamImpairer::apply`], so they do not depend on how
/// the stream happened to be split into reads.
#[derive(Debug, Clone)]
pub struct StreamImpairer {
    spec: ImpairSpec,
    rng: SmallRng,
    offset: u64,
    next_corrupt: Option<u64>,
    last_departure: u64,
}

impl StreamImpairer {
    /// A new impairer; `seed` makes its random choices repeatable.
    pub fn new(spec: ImpairSpec, seed: u64) -> StreamImpairer {
        let mut s = StreamImpairer {
            spec,
            rng: SmallRng::seed_from_u64(seed),
            offset: 0,
            next_corrupt: None,
            last_departure: 0,
        };
        s.next_corrupt = s.following(None);
        s
    }

    /// The first corrupted offset after `prev` (or from the start).
    fn following(&mut self, prev: Option<u64>) -> Option<u64> {
        let from = prev.map_or(0, |p| p + 1);
        let mut best: Option<u64> = None;
        if self.spec.corrupt_every > 0 {
            let n = self.spec.corrupt_every;
            let k = from.div_ceil(n).max(1);
            let mut at = k * n - 1;
            if at < from {
                at += n;
            }
            best = Some(at);
        }
        if self.spec.corrupt > 0.0 {
            // Geometric gap: each byte is hit with probability p.
            let u: f64 = self.rng.random_range(f64::MIN_POSITIVE..1.0);
            let p = self.spec.corrupt;
            let gap = if p >= 1.0 {
                0
            } else {
                (u.ln() / (1.0 - p).ln()).floor().min(1e18) as u64
            };
            let at = from.saturating_add(gap);
            best = Some(best.map_or(at, |b| b.min(at)));
        }
        best
    }

    /// Data bytes seen so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Impairs the next chunk of data in place.
    pub fn apply(&mut self, data: &mut [u8]) -> StreamEffect {
        let start = self.offset;
        let mut len = data.len() as u64;
        let mut effect = StreamEffect::default();
        if let Some(r) = self.spec.reset_after
            && start + len > r
        {
            len = r.saturating_sub(start);
            effect.cut = Some(len as usize);
        }
        while let Some(at) = self.next_corrupt
            && at < start + len
        {
            data[(at - start) as usize] ^= 0x01;
            effect.corrupted.push(at);
            self.next_corrupt = self.following(Some(at));
        }
        self.offset = start + len;
        effect
    }

    /// When a chunk that is ready at `ready_ns` may leave (delay and jitter,
    /// in order).
    pub fn departure(&mut self, ready_ns: u64) -> u64 {
        let at = delayed(&self.spec, &mut self.rng, ready_ns, self.last_departure);
        self.last_departure = at;
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn forwards(a: Action) -> bool {
        matches!(a, Action::Forward { .. })
    }

    #[test]
    fn every_nth_is_exact() {
        let spec = ImpairSpec {
            drop_every: 10,
            dup_every: 7,
            corrupt_every: 17,
            ..Default::default()
        };
        let mut im = DatagramImpairer::new(spec, 1, 0);
        let (mut lost, mut dup, mut cor) = (0, 0, 0);
        for _ in 0..1000 {
            match im.decide(100, 32, 0) {
                Action::Drop(DropCause::Loss) => lost += 1,
                Action::Forward {
                    corrupt, duplicate, ..
                } => {
                    if let Some(c) = corrupt {
                        assert!((32..100).contains(&c));
                        cor += 1;
                    }
                    dup += duplicate as u32;
                }
                a => panic!("{a:?}"),
            }
        }
        assert_eq!(lost, 100);
        // Corruption wins over duplication only where a datagram is not dropped.
        assert!(cor > 40 && cor <= 58, "{cor}");
        assert!(dup > 100 && dup <= 142, "{dup}");
    }

    #[test]
    fn random_loss_is_seeded_and_near_its_rate() {
        let spec = ImpairSpec {
            loss: 0.05,
            ..Default::default()
        };
        let run = |seed| {
            let mut im = DatagramImpairer::new(spec.clone(), seed, 0);
            (0..20_000)
                .map(|_| !forwards(im.decide(64, 0, 0)))
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        let lost = a.iter().filter(|&&l| l).count();
        assert!((800..1200).contains(&lost), "{lost}");
    }

    #[test]
    fn policing_passes_the_rate_plus_the_burst() {
        // 8 Mbit/s = 1 byte/µs; 10 kB bucket; offer 1000-byte datagrams every 500 µs
        // (2× the rate) for one second.
        let spec = ImpairSpec {
            rate_bps: 8_000_000,
            burst: 10_000,
            ..Default::default()
        };
        let mut im = DatagramImpairer::new(spec, 0, 0);
        let passed = (0..2000u64)
            .filter(|i| forwards(im.decide(1000, 0, i * 500_000)))
            .count();
        // 1 s × 1 MB/s + 10 kB, in 1000-byte datagrams.
        assert!((1009..=1011).contains(&passed), "{passed}");
    }

    #[test]
    fn shaping_delays_then_drops_beyond_the_queue() {
        let spec = ImpairSpec {
            rate_bps: 8_000_000,
            burst: 1000,
            shape: true,
            queue_limit_ns: 5_000_000,
            ..Default::default()
        };
        let mut im = DatagramImpairer::new(spec, 0, 0);
        let mut times = Vec::new();
        let mut dropped = 0;
        for _ in 0..20 {
            match im.decide(1000, 0, 0) {
                Action::Forward { at_ns, .. } => times.push(at_ns),
                Action::Drop(DropCause::Queue) => dropped += 1,
                a => panic!("{a:?}"),
            }
        }
        // One from the bucket, then one per ms up to the 5 ms queue.
        assert_eq!(
            times,
            vec![0, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000]
        );
        assert_eq!(dropped, 14);
    }

    #[test]
    fn jitter_keeps_order() {
        let spec = ImpairSpec {
            delay_ns: 10_000_000,
            jitter_ns: 5_000_000,
            ..Default::default()
        };
        let mut im = DatagramImpairer::new(spec, 3, 0);
        let mut last = 0;
        let mut spread = (u64::MAX, 0);
        for i in 0..1000u64 {
            let now = i * 1_000_000;
            let Action::Forward { at_ns, .. } = im.decide(10, 0, now) else {
                panic!()
            };
            assert!(at_ns >= last && at_ns >= now + 5_000_000 && at_ns <= now + 15_000_000);
            spread = (spread.0.min(at_ns - now), spread.1.max(at_ns - now));
            last = at_ns;
        }
        assert!(spread.1 - spread.0 > 5_000_000, "{spread:?}");
    }

    #[test]
    fn stream_corruption_every_nth_byte_and_cut() {
        let spec = ImpairSpec {
            corrupt_every: 1000,
            reset_after: Some(2500),
            ..Default::default()
        };
        let mut im = StreamImpairer::new(spec, 0);
        let mut data = vec![0u8; 1500];
        let e = im.apply(&mut data);
        assert_eq!(e.corrupted, vec![999]);
        assert_eq!(data[999], 1);
        assert_eq!(e.cut, None);
        let mut data = vec![0u8; 1500];
        let e = im.apply(&mut data);
        assert_eq!(e.corrupted, vec![1999]);
        assert_eq!(e.cut, Some(1000));
    }

    #[test]
    fn invalid_specs_are_named() {
        let s = ImpairSpec {
            loss: 1.5,
            ..Default::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("loss"));
        let s = ImpairSpec {
            rate_bps: 1,
            ..Default::default()
        };
        assert_eq!(s.validate(), Err(ImpairError::NoBurst));
    }

    proptest! {
        /// Corruption offsets do not depend on how the stream is split into reads.
        #[test]
        fn stream_offsets_ignore_read_sizes(seed in any::<u64>(), cuts in proptest::collection::vec(1usize..5000, 1..40)) {
            let spec = ImpairSpec { corrupt: 0.001, corrupt_every: 3001, ..Default::default() };
            let total: usize = cuts.iter().sum();
            let mut whole = vec![0u8; total];
            let a = StreamImpairer::new(spec.clone(), seed).apply(&mut whole).corrupted;
            let mut im = StreamImpairer::new(spec, seed);
            let mut b = Vec::new();
            let mut pieces = vec![0u8; total];
            let mut at = 0;
            for c in cuts {
                b.extend(im.apply(&mut pieces[at..at + c]).corrupted);
                at += c;
            }
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(whole, pieces);
        }

        /// Every datagram gets at most one counted impairment.
        #[test]
        fn one_action_per_datagram(seed in any::<u64>(), len in 33usize..2000) {
            let spec = ImpairSpec { loss: 0.2, dup: 0.2, reorder: 0.2, corrupt: 0.2, ..Default::default() };
            let mut im = DatagramImpairer::new(spec, seed, 0);
            for _ in 0..200 {
                if let Action::Forward { corrupt, duplicate, hold, .. } = im.decide(len, 32, 0) {
                    prop_assert!(corrupt.is_some() as u8 + duplicate as u8 + hold as u8 <= 1);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "impair_tests.rs"]
mod more_tests;
