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
    /// Fixed-width delay histogram: (bin lower edge µs, count); last bin collects overflow.
    pub histogram: Vec<(f64, u64)>,
    /// Datagrams received from the `--omit` warm-up, left out of every
    /// figure above (`sent` counts only those after it too).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u64,
    /// The IP marking (DSCP, ECN) the counted datagrams arrived with,
    /// against what the sender set; absent where the kernel does not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marking: Option<super::marks::Marking>,
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
    bins: Vec<u64>,
    bin_width_ns: u64,
    totals: UdpTotals,
    cur: UdpInterval,
    cur_delay: MinMax,
    late_filled: u64,
    /// `--omit`: sequence numbers below this are the warm-up, which counts
    /// in intervals only; intervals ending by `omit_ns` are marked.
    omit_below: u64,
    omit_ns: u64,
    tos: super::marks::TosCounts,
    sent_tos: u8,
}

impl ReceiverStats {
    /// `bin_width_ns` × `bins` is the fixed histogram's range.
    pub fn new(bin_width_ns: u64, bins: usize) -> Self {
        ReceiverStats {
            seq: SeqTracker::default(),
            jitter: Jitter::default(),
            total_delay: MinMax::default(),
            // 1 ns .. 1 hour at 3 significant digits; construction with these bounds cannot fail.
            hdr: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .unwrap_or_else(|_| Histogram::new(3).expect("3 sigfig histogram")),
            bins: vec![0; bins.max(1)],
            bin_width_ns: bin_width_ns.max(1),
            totals: UdpTotals::default(),
            cur: UdpInterval::default(),
            cur_delay: MinMax::default(),
            late_filled: 0,
            omit_below: 0,
            omit_ns: 0,
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
        self.cur_delay.add(delay_ns);
        if !counted {
            return a;
        }
        self.total_delay.add(delay_ns);
        let d = delay_ns.max(1) as u64;
        let _ = self.hdr.record(d.min(self.hdr.high()));
        let bin = ((d / self.bin_width_ns) as usize).min(self.bins.len() - 1);
        self.bins[bin] += 1;
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
        if !self.hdr.is_empty() {
            for (name, q) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9)] {
                t.percentiles_us
                    .push((name.into(), self.hdr.value_at_percentile(q) as f64 / 1e3));
            }
            t.percentiles_us
                .push(("max".into(), self.hdr.max() as f64 / 1e3));
        }
        t.histogram = self
            .bins
            .iter()
            .enumerate()
            .map(|(i, &n)| ((i as u64 * self.bin_width_ns) as f64 / 1e3, n))
            .collect();
        t.marking = self.tos.marking(self.sent_tos);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definitions in the module comment, as plainly as they can be
    /// written: what one arrival is, given every number seen before.
    fn reference(seqs: &[u64]) -> (Vec<Arrival>, u64) {
        let mut seen = std::collections::HashSet::new();
        let mut next = 0u64;
        let mut out = Vec::new();
        for &s in seqs {
            out.push(if s >= next {
                let gap = s - next;
                next = s + 1;
                Arrival::New { gap }
            } else if seen.contains(&s) {
                Arrival::Duplicate
            } else {
                Arrival::Reordered
            });
            seen.insert(s);
        }
        let missing = next - seen.len() as u64;
        (out, missing)
    }

    proptest! {
        #[test]
        fn the_tracker_matches_the_definitions(
            seqs in proptest::collection::vec(0u64..200, 0..400)
        ) {
            let (t, got) = feed(&seqs);
            let (want, missing) = reference(&seqs);
            prop_assert_eq!(got, want);
            prop_assert_eq!(t.missing(), missing);
        }

        #[test]
        fn loss_runs_reordering_and_duplicates_from_a_clean_stream(
            n in 1u64..300,
            drops in proptest::collection::btree_set(0u64..300, 0..40),
            late in proptest::collection::btree_set(0u64..300, 0..20),
            dups in proptest::collection::btree_set(0u64..300, 0..20),
        ) {
            // A stream of n datagrams: drop some, deliver some late (at the
            // end), repeat some; the counts must be exactly what was done.
            let drops: Vec<u64> = drops.into_iter().filter(|&d| d < n).collect();
            let late: Vec<u64> = late
                .into_iter()
                .filter(|&l| l < n && !drops.contains(&l))
                .collect();
            // Repeats of datagrams that came in order: a repeat of a late one
            // would arrive before it and make it the repeat.
            let dups: Vec<u64> = dups
                .into_iter()
                .filter(|&d| d < n && !drops.contains(&d) && !late.contains(&d))
                .collect();
            let mut seqs: Vec<u64> = (0..n)
                .filter(|s| !drops.contains(s) && !late.contains(s))
                .collect();
            let top = seqs.last().copied();
            seqs.extend(dups.iter().copied());
            seqs.extend(late.iter().copied());
            let (t, arrivals) = feed(&seqs);
            let count = |f: fn(&Arrival) -> bool| arrivals.iter().filter(|a| f(a)).count() as u64;
            // A late number above the highest in-order one arrives as new.
            let late_below = late.iter().filter(|&&l| top.is_some_and(|t| l < t)).count() as u64;
            prop_assert_eq!(count(|a| matches!(a, Arrival::Reordered)), late_below);
            prop_assert_eq!(count(|a| matches!(a, Arrival::Duplicate)), dups.len() as u64);
            let highest = seqs.iter().max().copied().unwrap_or(0);
            let dropped_below = drops.iter().filter(|&&d| d < highest).count() as u64;
            prop_assert_eq!(t.missing(), dropped_below);
        }
    }

    #[test]
    fn the_top_sequence_number_neither_overflows_nor_repeats_as_new() {
        let (t, a) = feed(&[u64::MAX - 2, u64::MAX, u64::MAX, u64::MAX - 1, 0]);
        assert_eq!(
            a,
            [
                Arrival::New { gap: u64::MAX - 2 },
                Arrival::New { gap: 1 },
                Arrival::Duplicate,
                Arrival::Reordered,
                Arrival::Duplicate,
            ]
        );
        assert_eq!(t.next(), u64::MAX);
        // Everything below u64::MAX − 2 is missing, most of it past the window.
        assert_eq!(t.missing(), u64::MAX - 2);
    }

    #[test]
    fn numbers_older_than_the_window_are_final_losses() {
        let (t, a) = feed(&[0, WINDOW + 10, 5, WINDOW + 5]);
        assert_eq!(a[1], Arrival::New { gap: WINDOW + 9 });
        // 5 fell out of the window: a final loss, and its arrival a duplicate.
        assert_eq!(a[2], Arrival::Duplicate);
        assert_eq!(a[3], Arrival::Reordered);
        assert_eq!(t.missing(), WINDOW + 8);
        assert!(t.missing.len() as u64 <= WINDOW);
    }

    fn feed(seqs: &[u64]) -> (SeqTracker, Vec<Arrival>) {
        let mut t = SeqTracker::default();
        let a = seqs.iter().map(|&s| t.on_seq(s)).collect();
        (t, a)
    }

    #[test]
    fn the_omitted_warm_up_counts_in_intervals_and_never_in_totals() {
        let mut r = ReceiverStats::new(1000, 10);
        r.omit(10, 1_000_000_000);
        // Warm-up: 0..10 with 3 lost, 4 reordered after 5, 2 repeated.
        // Then 10..20 with 12, 13 lost (a gap opened at 14 that starts in
        // the warm-up: 8, 9 are missing too), 15 repeated, 12 late.
        for seq in [
            0, 1, 2, 5, 4, 6, 7, 2, 14, 10, 11, 15, 15, 16, 17, 18, 19, 12,
        ] {
            r.on_datagram(seq, 100, 5_000, 5_000, false);
            r.on_tos(seq, if seq < 10 { 0 } else { 0xb8 });
        }
        r.on_late(3);
        r.on_late(16);
        let iv = r.take_interval(0.5);
        assert!(iv.omitted);
        assert_eq!(iv.packets, 18);
        assert_eq!(iv.duplicates, 2);
        assert!(!r.take_interval(1.5).omitted);
        let t = r.totals(Some(20));
        assert_eq!(t.omitted, 8);
        assert_eq!(t.sent, Some(10));
        // 10, 11, 12, 14, 15, 16, 17, 18, 19: 9 unique, 13 lost; 10, 11
        // and 12 came after 14.
        assert_eq!((t.unique, t.lost), (9, 1));
        assert_eq!((t.packets, t.bytes), (10, 1000));
        assert_eq!((t.duplicates, t.reordered, t.late), (1, 3, 1));
        // The gap 8..14 counts from 10: 4 long.
        assert_eq!(t.max_consecutive_drops, 4);
        assert_eq!(r.hdr.len(), 9);
        let m = t.marking.unwrap();
        assert_eq!(m.seen.len(), 1);
        assert_eq!(m.seen[0].datagrams, 10);
        // Without the sender's count: the numbers missing at or past 10.
        assert_eq!(r.totals(None).lost, 1);
        // A sender that stopped inside the warm-up sent nothing counted.
        assert_eq!(r.totals(Some(5)).sent, Some(0));
    }

    #[test]
    fn loss_dup_reorder() {
        let (t, a) = feed(&[0, 1, 3, 2, 2, 6, 7, 7]);
        assert_eq!(a[2], Arrival::New { gap: 1 });
        assert_eq!(a[3], Arrival::Reordered);
        assert_eq!(a[4], Arrival::Duplicate);
        assert_eq!(a[5], Arrival::New { gap: 2 });
        assert_eq!(a[7], Arrival::Duplicate);
        assert_eq!(t.missing(), 2);
        assert_eq!(t.next(), 8);
    }

    #[test]
    fn bursts_are_split_by_sequence() {
        let mut b = BurstTracker::new(3, 0.1);
        assert_eq!(b.on_datagram(0, 100, 0.000, 0, 10), None);
        assert_eq!(b.on_datagram(1, 100, 0.001, 0, 20), None);
        let r = b.on_datagram(3, 100, 0.100, 0, 30).expect("burst 0 closes");
        assert_eq!((r.index, r.datagrams, r.lost, r.bytes), (0, 2, 1, 200));
        assert!((r.transfer_ms - 1.0).abs() < 1e-9 && (r.duty_pct - 1.0).abs() < 1e-9);
        assert_eq!(r.read_sizes, vec![(100, 2)]);
        let last = b.finish().unwrap();
        assert_eq!((last.index, last.datagrams, last.rate_bps), (1, 1, 0.0));
    }

    #[test]
    fn huge_jump_is_bounded() {
        let (t, _) = feed(&[0, u64::MAX / 2]);
        assert_eq!(t.missing(), u64::MAX / 2 - 1);
        assert!(t.missing.len() as u64 <= WINDOW);
    }

    #[test]
    fn jitter_of_constant_transit_is_zero_and_grows_with_variation() {
        let mut j = Jitter::default();
        for _ in 0..100 {
            j.on_transit(5000);
        }
        assert_eq!(j.ns(), 0.0);
        for i in 0..1000 {
            j.on_transit(if i % 2 == 0 { 0 } else { 1600 });
        }
        assert!((j.ns() - 1600.0).abs() < 1.0, "{}", j.ns());
    }

    #[test]
    fn receiver_stats_intervals_and_totals() {
        let mut r = ReceiverStats::new(10_000, 10);
        for (s, d) in [
            (0u64, 5_000i64),
            (1, 15_000),
            (3, 25_000),
            (3, 1),
            (2, 35_000),
        ] {
            r.on_datagram(s, 100, d, d, false);
        }
        let iv = r.take_interval(1.0);
        assert_eq!(
            (iv.packets, iv.duplicates, iv.reordered, iv.drops),
            (5, 1, 1, 0)
        );
        assert_eq!(iv.delay_min_us, Some(5.0));
        assert_eq!(iv.delay_max_us, Some(35.0));
        let t = r.totals(Some(6));
        assert_eq!((t.unique, t.lost, t.duplicates, t.reordered), (4, 2, 1, 1));
        assert_eq!(t.histogram[0], (0.0, 1));
        assert_eq!(t.histogram[3], (30.0, 1));
        assert_eq!(t.percentiles_us.len(), 5);
    }

    proptest! {
        /// Any arrival order of any subset (with repeats) is classified exactly.
        #[test]
        fn exact_accounting(order in proptest::collection::vec(0u64..200, 0..400)) {
            let (t, arrivals) = feed(&order);
            let mut seen = std::collections::HashSet::new();
            let mut dups = 0;
            for &s in &order { if !seen.insert(s) { dups += 1; } }
            let counted_dups = arrivals.iter().filter(|a| **a == Arrival::Duplicate).count();
            prop_assert_eq!(counted_dups, dups);
            let max = order.iter().max().map_or(0, |m| m + 1);
            prop_assert_eq!(t.missing(), max - seen.len() as u64);
        }
    }
}
