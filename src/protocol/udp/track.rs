//! Receiver-side accounting for a UDP stream, free of I/O: loss, runs of
//! consecutive loss, duplicates, reordering, one-way delay and RFC 3550 jitter.
//!
//! Definitions (exact, so they can be compared with what an impairment relay did):
//! - a *gap* opens when a sequence number arrives more than one above the highest
//!   seen; the skipped numbers are *missing*;
//! - a missing number that arrives later is *reordered* (it is no longer missing);
//! - a number that arrives when it is neither new nor missing is a *duplicate*;
//! - *lost* at the end = numbers the sender sent that never arrived.
//!
//! Missing numbers are kept in a window of [`WINDOW`] below the highest seen;
//! older ones are final losses, so memory stays bounded whatever arrives.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// How far below the highest sequence a late arrival is still recognised.
pub const WINDOW: u64 = 1 << 20;

/// What one arrival was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// In order (possibly after a gap of `gap` missing numbers).
    New {
        /// Numbers skipped just before this one.
        gap: u64,
    },
    /// A missing number, arriving late.
    Reordered,
    /// Seen before (or older than the window).
    Duplicate,
}

/// Sequence-number bookkeeping.
#[derive(Debug, Default, Clone)]
pub struct SeqTracker {
    next: u64,
    missing: BTreeSet<u64>,
    pruned: u64,
    /// `u64::MAX` itself has arrived (`next` cannot go past it).
    saw_top: bool,
}

impl SeqTracker {
    /// Accounts one arrival.
    pub fn on_seq(&mut self, seq: u64) -> Arrival {
        // A sequence number comes off the network: the top one must not
        // overflow `next`, and seen twice it is a duplicate.
        if seq == u64::MAX && self.saw_top {
            return Arrival::Duplicate;
        }
        if seq >= self.next {
            let gap = seq - self.next;
            // Remember at most WINDOW missing numbers; a forged huge jump cannot exhaust memory.
            let remember_from = self.next.max(seq.saturating_sub(WINDOW));
            self.pruned += remember_from - self.next;
            self.missing.extend(remember_from..seq);
            self.next = seq.saturating_add(1);
            self.saw_top |= seq == u64::MAX;
            let floor = self.next.saturating_sub(WINDOW);
            while let Some(&m) = self.missing.first() {
                if m >= floor {
                    break;
                }
                self.missing.pop_first();
                self.pruned += 1;
            }
            Arrival::New { gap }
        } else if self.missing.remove(&seq) {
            Arrival::Reordered
        } else {
            Arrival::Duplicate
        }
    }

    /// Numbers below the highest seen that never arrived.
    pub fn missing(&self) -> u64 {
        self.missing.len() as u64 + self.pruned
    }

    /// Numbers missing below `s` (those still in the window; the pruned
    /// ones are counted above it).
    pub fn missing_below(&self, s: u64) -> u64 {
        self.missing.range(..s).count() as u64
    }

    /// One more than the highest number seen.
    pub fn next(&self) -> u64 {
        self.next
    }
}

/// RFC 3550 interarrival jitter, in ns.
#[derive(Debug, Default, Clone, Copy)]
pub struct Jitter {
    last_transit: Option<i64>,
    j: f64,
}

impl Jitter {
    /// Feeds one packet's transit time (receive minus send, any fixed offset cancels).
    pub fn on_transit(&mut self, transit: i64) {
        if let Some(prev) = self.last_transit {
            let d = (transit - prev).unsigned_abs() as f64;
            self.j += (d - self.j) / 16.0;
        }
        self.last_transit = Some(transit);
    }

    /// Current jitter estimate, ns.
    pub fn ns(&self) -> f64 {
        self.j
    }
}

/// Min/avg/max of a set of delays, ns.
#[derive(Debug, Clone, Copy)]
pub struct MinMax {
    min: i64,
    max: i64,
    sum: i128,
    n: u64,
}

impl Default for MinMax {
    fn default() -> Self {
        MinMax {
            min: i64::MAX,
            max: i64::MIN,
            sum: 0,
            n: 0,
        }
    }
}

impl MinMax {
    /// Adds one value.
    pub fn add(&mut self, v: i64) {
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v as i128;
        self.n += 1;
    }
    /// (min, avg, max) in µs, or `None` if empty.
    pub fn us(&self) -> Option<(f64, f64, f64)> {
        (self.n > 0).then(|| {
            (
                self.min as f64 / 1e3,
                (self.sum as f64 / self.n as f64) / 1e3,
                self.max as f64 / 1e3,
            )
        })
    }
}

/// One receiver interval, as printed and written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpInterval {
    /// Seconds since the stream started, at the end of the interval.
    pub time_slice: f64,
    /// Payload+header bytes received (unique and duplicate).
    pub bytes: u64,
    /// Datagrams received (unique and duplicate).
    pub packets: u64,
    /// Gaps opened in this interval minus late arrivals that filled older gaps.
    pub drops: i64,
    /// Longest single gap opened in this interval.
    pub max_consecutive_drops: u64,
    /// Duplicates received.
    pub duplicates: u64,
    /// Late (reordered) arrivals.
    pub reordered: u64,
    /// Datagrams whose payload failed verification, or whose header was unreadable.
    pub corrupt: u64,
    /// Media mode: frames that arrived after their playout deadline.
    pub late: u64,
    /// One-way delay min, µs (see the clock notes).
    pub delay_min_us: Option<f64>,
    /// One-way delay mean, µs.
    pub delay_avg_us: Option<f64>,
    /// One-way delay max, µs.
    pub delay_max_us: Option<f64>,
    /// RFC 3550 jitter at the end of the interval, µs.
    pub jitter_us: f64,
    /// The interval is in the `--omit` warm-up: shown, left out of the totals.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub omitted: bool,
    /// Media: frames judged in the interval (ctsTraffic's columns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<super::frames::FrameCounts>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Totals of a stream, from the receiver's point of view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpTotals {
    /// Datagrams the sender says it sent (if known).
    pub sent: Option<u64>,
    /// Unique datagrams received.
    pub unique: u64,
    /// All datagrams received.
    pub packets: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Datagrams never received: `sent - unique` when the sender's count is known.
    pub lost: u64,
    /// Longest run of consecutive losses seen.
    pub max_consecutive_drops: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Reordered (late) arrivals.
    pub reordered: u64,
    /// Corrupt payloads or unreadable headers.
    pub corrupt: u64,
    /// Media mode: frames that arrived after their playout deadline.
    pub late: u64,
    /// Delay min/avg/max, µs.
    pub delay_min_us: Option<f64>,
    /// Delay mean, µs.
    pub delay_avg_us: Option<f64>,
    /// Delay max, µs.
    pub delay_max_us: Option<f64>,
    /// Final jitter, µs.
    pub jitter_us: f64,
    /// Delay percentiles (p50, p90, p99, p99.9, max), µs.
    pub percentiles_us: Vec<(String, f64)>,
    /// Delay histogram: its non-empty log-linear buckets as (lower edge
    /// µs, upper edge µs, count), lowest first (see [`super::hist`]).
    pub histogram: Vec<super::hist::Bucket>,
    /// Datagrams received from the `--omit` warm-up, left out of every
    /// figure above (`sent` counts only those after it too).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u64,
    /// Media: every frame the sender sent, judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<super::frames::FrameCounts>,
    /// Datagrams that arrived "before" they were sent once the clock
    /// offset was applied: the offset estimate is off by at least
    /// [`UdpTotals::below_zero_by_us`]. Their delays count as 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delays_below_zero: u64,
    /// The most negative such delay, as a positive number of µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below_zero_by_us: Option<f64>,
    /// The IP marking (DSCP, ECN) the counted datagrams arrived with,
    /// against what the sender set; absent where the kernel does not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marking: Option<super::marks::Marking>,
    /// Every delay, lossless: the HDR histogram (ns) the percentiles come
    /// from, as [`crate::protocol::hdr::encode`] writes it; absent from peers that
    /// predate it, and when no datagram arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hdr: Option<String>,
}

/// The receiver's account of one burst.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BurstReport {
    /// Burst number, from 0.
    pub index: u64,
    /// First datagram's arrival, s since the stream started (receiver clock).
    pub start_s: f64,
    /// Last datagram's arrival, s.
    pub end_s: f64,
    /// Bytes received.
    pub bytes: u64,
    /// Datagrams received (unique).
    pub datagrams: u64,
    /// Datagrams of the burst that never arrived.
    pub lost: u64,
    /// First to last arrival, ms (µs resolution).
    pub transfer_ms: f64,
    /// Bytes × 8 over the transfer time, bit/s (0 for a single datagram).
    pub rate_bps: f64,
    /// Transfer time as a share of the period, percent.
    pub duty_pct: f64,
    /// First send (sender clock) to last arrival (receiver clock), ms: end to
    /// end only when the clocks are synchronised (`--trip-times`).
    pub trip_ms: f64,
    /// Read (datagram) sizes and how often each occurred.
    pub read_sizes: Vec<(u64, u64)>,
}

/// Accumulates the burst in progress.
#[derive(Debug, Default)]
pub struct BurstTracker {
    cur: Option<(BurstReport, u64)>,
    per_burst: u64,
    period_s: f64,
}

impl BurstTracker {
    /// Bursts of `per_burst` datagrams every `period_s`.
    pub fn new(per_burst: u64, period_s: f64) -> Self {
        BurstTracker {
            cur: None,
            per_burst: per_burst.max(1),
            period_s,
        }
    }

    /// Accounts a (non-duplicate) datagram; returns the previous burst's report when a new burst begins.
    pub fn on_datagram(
        &mut self,
        seq: u64,
        bytes: usize,
        at_s: f64,
        send_ns: u64,
        recv_ns: u64,
    ) -> Option<BurstReport> {
        let k = seq / self.per_burst;
        let mut done = None;
        if self.cur.as_ref().is_some_and(|(b, _)| k > b.index) {
            done = self.finish();
        }
        if self.cur.as_ref().is_some_and(|(b, _)| k < b.index) {
            return done; // a straggler from a burst already reported
        }
        let (b, first_send) = self.cur.get_or_insert_with(|| {
            (
                BurstReport {
                    index: k,
                    start_s: at_s,
                    ..Default::default()
                },
                send_ns,
            )
        });
        b.end_s = at_s;
        b.bytes += bytes as u64;
        b.datagrams += 1;
        b.trip_ms = (recv_ns as f64 - *first_send as f64) / 1e6;
        match b.read_sizes.iter_mut().find(|(s, _)| *s == bytes as u64) {
            Some((_, n)) => *n += 1,
            None => b.read_sizes.push((bytes as u64, 1)),
        }
        done
    }

    /// Closes the burst in progress.
    pub fn finish(&mut self) -> Option<BurstReport> {
        let (mut b, _) = self.cur.take()?;
        b.lost = self.per_burst.saturating_sub(b.datagrams);
        b.transfer_ms = (b.end_s - b.start_s) * 1e3;
        let secs = b.end_s - b.start_s;
        b.rate_bps = if secs > 0.0 {
            b.bytes as f64 * 8.0 / secs
        } else {
            0.0
        };
        b.duty_pct = if self.period_s > 0.0 {
            100.0 * secs / self.period_s
        } else {
            0.0
        };
        Some(b)
    }
}

/// Everything the receiver accumulates.
pub struct ReceiverStats {
    seq: SeqTracker,
    jitter: Jitter,
    total_delay: MinMax,
    hdr: Histogram<u64>,
    layout: super::hist::Layout,
    totals: UdpTotals,
    cur: UdpInterval,
    cur_delay: MinMax,
    /// The most negative delay counted, as a positive number, ns.
    below_zero_by_ns: u64,
    late_filled: u64,
    /// `--omit`: sequence numbers below this are the warm-up, which counts
    /// in intervals only; intervals ending by `omit_ns` are marked.
    omit_below: u64,
    omit_ns: u64,
    frames: Option<super::frames::FrameTracker>,
    tos: super::marks::TosCounts,
    sent_tos: u8,
}

impl ReceiverStats {
    /// The histogram's first `bins` buckets are `bin_width_ns` wide (see
    /// [`super::hist`]).
    pub fn new(bin_width_ns: u64, bins: usize) -> Self {
        ReceiverStats {
            seq: SeqTracker::default(),
            jitter: Jitter::default(),
            total_delay: MinMax::default(),
            // 1 ns .. 1 hour at 3 significant digits; construction with these bounds cannot fail.
            hdr: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .unwrap_or_else(|_| Histogram::new(3).expect("3 sigfig histogram")),
            layout: super::hist::Layout::new(bin_width_ns, bins as u64),
            totals: UdpTotals::default(),
            cur: UdpInterval::default(),
            cur_delay: MinMax::default(),
            below_zero_by_ns: 0,
            late_filled: 0,
            omit_below: 0,
            omit_ns: 0,
            frames: None,
            tos: super::marks::TosCounts::default(),
            sent_tos: 0,
        }
    }

    /// The TOS byte the sender sets, to compare arrivals with.
    pub fn expect_tos(&mut self, tos: u8) {
        self.sent_tos = tos;
    }

    /// Leaves the warm-up out of the totals: datagrams numbered below
    /// `seq` (the sender's first `ns` of schedule), and marks the intervals
    /// ending within it.
    pub fn omit(&mut self, seq: u64, ns: u64) {
        self.omit_below = seq;
        self.omit_ns = ns;
    }

    /// Media: judge frames laid out by `index` (call after
    /// [`ReceiverStats::omit`]).
    pub fn media_frames(&mut self, mut index: super::iso::FrameIndex) {
        let warm = index.frames_before(self.omit_below);
        self.frames = Some(super::frames::FrameTracker::new(index, warm));
    }

    /// Media: the frame datagram `seq` belongs to.
    pub fn frame_of(&mut self, seq: u64) -> Option<u64> {
        self.frames.as_mut().map(|f| f.frame_of(seq))
    }

    /// Media: datagram `seq`, as it arrived, for its frame's verdict.
    pub fn on_frame(&mut self, seq: u64, arrival: Arrival, corrupt: bool, late: bool) {
        if let Some(f) = self.frames.as_mut() {
            f.on_datagram(seq, arrival == Arrival::Duplicate, corrupt, late);
        }
    }

    /// Datagram `seq` arrived with TOS byte `tos`.
    pub fn on_tos(&mut self, seq: u64, tos: u8) {
        if seq >= self.omit_below {
            self.tos.on(tos);
        }
    }

    /// Accounts one datagram. `delay_ns` is the one-way delay after clock
    /// correction; `transit_ns` the raw receive-minus-send (for jitter).
    pub fn on_datagram(
        &mut self,
        seq: u64,
        bytes: usize,
        delay_ns: i64,
        transit_ns: i64,
        corrupt: bool,
    ) -> Arrival {
        let a = self.seq.on_seq(seq);
        // The warm-up counts in its intervals, never in the totals.
        let counted = seq >= self.omit_below;
        self.cur.packets += 1;
        self.cur.bytes += bytes as u64;
        if counted {
            self.totals.packets += 1;
            self.totals.bytes += bytes as u64;
        } else {
            self.totals.omitted += 1;
        }
        if corrupt {
            self.cur.corrupt += 1;
            self.totals.corrupt += u64::from(counted);
        }
        match a {
            Arrival::New { gap } => {
                self.cur.drops += gap as i64;
                self.cur.max_consecutive_drops = self.cur.max_consecutive_drops.max(gap);
                if counted {
                    // Only the part of a gap past the warm-up.
                    let g = gap.min(seq - self.omit_below);
                    self.totals.max_consecutive_drops = self.totals.max_consecutive_drops.max(g);
                    self.totals.unique += 1;
                }
            }
            Arrival::Reordered => {
                self.cur.reordered += 1;
                self.cur.drops -= 1;
                self.late_filled += 1;
                if counted {
                    self.totals.reordered += 1;
                    self.totals.unique += 1;
                }
            }
            Arrival::Duplicate => {
                self.cur.duplicates += 1;
                self.totals.duplicates += u64::from(counted);
                return a;
            }
        }
        self.jitter.on_transit(transit_ns);
        // A delay below zero is impossible: it is the clock offset's error
        // showing, counted as such, and the delay taken as the least it can be.
        let early = delay_ns.min(0).unsigned_abs();
        let delay_ns = delay_ns.max(0);
        self.cur_delay.add(delay_ns);
        if !counted {
            return a;
        }
        if early > 0 {
            self.totals.delays_below_zero += 1;
            self.below_zero_by_ns = self.below_zero_by_ns.max(early);
        }
        self.total_delay.add(delay_ns);
        let d = delay_ns.max(1) as u64;
        let _ = self.hdr.record(d.min(self.hdr.high()));
        a
    }

    /// Accounts a datagram whose header could not be read (it cannot be
    /// attributed to a sequence number).
    pub fn on_invalid(&mut self, bytes: usize) {
        self.cur.packets += 1;
        self.cur.bytes += bytes as u64;
        self.cur.corrupt += 1;
        self.totals.packets += 1;
        self.totals.bytes += bytes as u64;
        self.totals.corrupt += 1;
    }

    /// Accounts media frame `seq`, which missed its playout deadline.
    pub fn on_late(&mut self, seq: u64) {
        if seq >= self.omit_below {
            self.totals.late += 1;
        }
    }

    /// Closes the current interval.
    pub fn take_interval(&mut self, time_slice: f64) -> UdpInterval {
        let mut iv = std::mem::take(&mut self.cur);
        iv.time_slice = time_slice;
        if let Some((a, b, c)) = self.cur_delay.us() {
            (iv.delay_min_us, iv.delay_avg_us, iv.delay_max_us) = (Some(a), Some(b), Some(c));
        }
        iv.jitter_us = self.jitter.ns() / 1e3;
        iv.omitted = self.omit_ns > 0 && (time_slice * 1e9) as u64 <= self.omit_ns;
        iv.frames = self.frames.as_mut().map(|f| f.take_interval());
        self.cur_delay = MinMax::default();
        iv
    }

    /// Final totals; `sent` is the sender's count if it reported one.
    pub fn totals(&self, sent: Option<u64>) -> UdpTotals {
        let mut t = self.totals.clone();
        t.sent = sent.map(|s| s.saturating_sub(self.omit_below));
        t.lost = match t.sent {
            Some(s) => s.saturating_sub(t.unique),
            None => self
                .seq
                .missing()
                .saturating_sub(self.seq.missing_below(self.omit_below)),
        };
        if let Some((a, b, c)) = self.total_delay.us() {
            (t.delay_min_us, t.delay_avg_us, t.delay_max_us) = (Some(a), Some(b), Some(c));
        }
        t.jitter_us = self.jitter.ns() / 1e3;
        t.below_zero_by_us = (t.delays_below_zero > 0).then(|| self.below_zero_by_ns as f64 / 1e3);
        if !self.hdr.is_empty() {
            for (name, q) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9)] {
                t.percentiles_us
                    .push((name.into(), self.hdr.value_at_percentile(q) as f64 / 1e3));
            }
            t.percentiles_us
                .push(("max".into(), self.hdr.max() as f64 / 1e3));
        }
        t.histogram = super::hist::buckets(&self.hdr, self.layout);
        t.hdr = (!self.hdr.is_empty()).then(|| crate::protocol::hdr::encode(&self.hdr));
        t.marking = self.tos.marking(self.sent_tos);
        // Every frame the sender began, judged (a clone: totals may be
        // asked for more than once).
        t.frames = self.frames.clone().map(|mut f| {
            let frames = sent.map(|s| f.frames_for(s));
            f.finish(frames)
        });
        t
    }
}

#[cfg(test)]
#[path = "track_tests.rs"]
mod tests;
