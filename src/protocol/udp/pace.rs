//! Pacing: when each datagram is due, on an absolute schedule.
//!
//! Datagram `i` is due at `anchor + (i - anchor_index) * gap`. Datagrams that
//! are due together go out in one batch (that is how high rates are reached).
//! A departure the sender is late for is sent late (and counted late), so a
//! run sends the datagrams its rate implies, as iperf2 does: its UDP sender
//! (`Client::RunUDP`) keeps a running delay "to preserve the requested
//! transmit rate" and forgives it only past a bound of half the test or
//! report interval, between 1 ms and 1 s. Only after such a *stall* — the
//! sender fell behind by more than its forgiveness bound — is the schedule
//! re-anchored at "now" instead of bursting to catch up (never, if catch-up
//! was asked for); each re-anchoring is counted as a slip. The schedule is
//! pure: the caller supplies the clock.

use serde::{Deserialize, Serialize};

/// Lateness below which due datagrams are simply batched, not treated as a
/// stall, and the most a re-anchored schedule keeps of what was missed.
pub const STALL_NS: u64 = 200_000;

/// How far behind a sender may fall before the missed departures are
/// forgiven rather than sent late: iperf2's bound, half the run, at least
/// 1 ms and at most 1 s; `catch_up` never forgives.
pub fn forgive_ns(duration_ns: u64, catch_up: bool) -> u64 {
    if catch_up {
        u64::MAX
    } else {
        (duration_ns / 2).clamp(1_000_000, 1_000_000_000)
    }
}

/// How close together datagrams may be due and still leave apart under
/// `hybrid` pacing: those due within this of a wake-up leave with it, as
/// one batch (iperf2 likewise sleeps only once it is 100 µs ahead).
pub const GROUP_NS: u64 = 100_000;

/// How the sender waits for the next departure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pacing {
    /// Sleep until due (cheap, ~50 µs granularity).
    Sleep,
    /// Sleep until shortly before due, then spin; datagrams due within
    /// 100 µs of a wake-up leave with it, in one batch (default).
    Hybrid,
    /// Spin on the clock (one core busy, best precision).
    Spin,
}

impl crate::protocol::names::Named for Pacing {
    const NAMES: &'static [(Self, &'static str, &'static str)] = &[
        (Pacing::Sleep, "sleep", "sleep until due: cheap, coarser"),
        (
            Pacing::Hybrid,
            "hybrid",
            "sleep, then spin the last microseconds",
        ),
        (
            Pacing::Spin,
            "spin",
            "spin on the clock: one core busy, finest",
        ),
    ];
}

impl Pacing {
    /// What a server does when a client asks for this: it never spins a core
    /// on a client's behalf for longer than the last 100 µs before a
    /// departure, so `spin` becomes `hybrid`.
    pub fn on_server(self) -> Pacing {
        match self {
            Pacing::Spin => Pacing::Hybrid,
            p => p,
        }
    }
}

/// The time between two departures, kept as the exact fraction it is:
/// `num_ps / den` picoseconds. A stream asked for in bit/s keeps its rate
/// (`size × 8 × 10¹² / rate`), so the k-th departure is where the rate puts
/// it however long the run, rather than k times a gap rounded once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    num_ps: u128,
    den: u64,
}

impl Gap {
    /// A gap of `ps` picoseconds (at least 1).
    pub fn from_ps(ps: u64) -> Gap {
        Gap {
            num_ps: u128::from(ps.max(1)),
            den: 1,
        }
    }

    /// The gap between `size`-byte datagrams sent at `rate_bps` bit/s (a
    /// zero rate is [`gap_for_rate`]'s "never").
    pub fn for_rate(size: u32, rate_bps: u64) -> Gap {
        if rate_bps == 0 {
            return Gap::from_ps(gap_for_rate(size, 0));
        }
        Gap {
            num_ps: (u128::from(size) * 8 * 1_000_000_000_000).max(1),
            den: rate_bps,
        }
    }

    /// The gap rounded down to whole picoseconds (at least 1).
    pub fn ps(self) -> u64 {
        u64::try_from(self.num_ps / u128::from(self.den))
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// How long `k` gaps last, ns (rounded down).
    pub fn span_ns(self, k: u64) -> u64 {
        let ps = u128::from(k).saturating_mul(self.num_ps) / u128::from(self.den);
        u64::try_from(ps / 1000).unwrap_or(u64::MAX)
    }

    /// How many departures a schedule starting at 0 makes before `t_ns`:
    /// the smallest k with `span_ns(k) >= t_ns`.
    pub fn count_before(self, t_ns: u64) -> u64 {
        let scaled = u128::from(t_ns) * 1000 * u128::from(self.den);
        u64::try_from(scaled.div_ceil(self.num_ps)).unwrap_or(u64::MAX)
    }
}

impl From<u64> for Gap {
    fn from(ps: u64) -> Gap {
        Gap::from_ps(ps)
    }
}

/// The absolute departure schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    gap: Gap,
    anchor_ns: u64,
    anchor_index: u64,
    next: u64,
    forgive_ns: u64,
    slips: u64,
}

impl Schedule {
    /// A schedule starting at `start_ns` with one datagram every `gap`
    /// (a [`Gap`], or picoseconds), forgiving lateness past `forgive_ns`
    /// ([`forgive_ns`]).
    pub fn new(start_ns: u64, gap: impl Into<Gap>, forgive_ns: u64) -> Self {
        Schedule {
            gap: gap.into(),
            anchor_ns: start_ns,
            anchor_index: 0,
            next: 0,
            forgive_ns,
            slips: 0,
        }
    }

    /// When datagram `index` is due, ns.
    pub fn due_of(&self, index: u64) -> u64 {
        let k = index.saturating_sub(self.anchor_index);
        self.anchor_ns.saturating_add(self.gap.span_ns(k))
    }

    /// When the next datagram is due, ns.
    pub fn next_due(&self) -> u64 {
        self.due_of(self.next)
    }

    /// Index of the next datagram.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// Times the schedule was re-anchored after a stall.
    pub fn slips(&self) -> u64 {
        self.slips
    }

    /// Takes the datagrams due at `now_ns`, at most `max`: returns the first
    /// index and how many. Zero means nothing is due yet.
    pub fn take_due(&mut self, now_ns: u64, max: u64) -> (u64, u64) {
        self.take_due_within(now_ns, 0, max)
    }

    /// As [`Schedule::take_due`], and also the datagrams due less than
    /// `ahead_ns` after `now_ns` (they leave early, with the batch).
    pub fn take_due_within(&mut self, now_ns: u64, ahead_ns: u64, max: u64) -> (u64, u64) {
        if now_ns < self.next_due() {
            return (self.next, 0);
        }
        let stall = self.forgive_ns.max(STALL_NS).max(self.gap.span_ns(2));
        if now_ns >= self.next_due().saturating_add(stall) {
            // Stalled: forget the missed datagrams and start again from now,
            // keeping only what the batching tolerance allows (at most
            // STALL_NS worth, at most one batch), so a sender that cannot keep
            // up still sends full batches while a slow stream sends one.
            let window = STALL_NS.min(self.gap.span_ns(max.max(1) - 1));
            self.anchor_ns = now_ns - window.min(now_ns);
            self.anchor_index = self.next;
            self.slips += 1;
        }
        let first = self.next;
        let mut n = 1;
        while n < max.max(1) && self.due_of(first + n) < now_ns.saturating_add(ahead_ns.max(1)) {
            n += 1;
        }
        self.next += n;
        (first, n)
    }
}

/// Inter-datagram gap in picoseconds for `size`-byte datagrams at `rate` bit/s.
pub fn gap_for_rate(size: u32, rate_bps: u64) -> u64 {
    if rate_bps == 0 {
        return u64::MAX / 4;
    }
    ((size as u128 * 8 * 1_000_000_000_000) / rate_bps as u128).max(1) as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_server_never_spins_on_a_clients_behalf() {
        use super::Pacing::*;
        assert_eq!(Spin.on_server(), Hybrid);
        assert_eq!(Hybrid.on_server(), Hybrid);
        assert_eq!(Sleep.on_server(), Sleep);
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn gaps() {
        assert_eq!(gap_for_rate(1000, 8_000_000), 1_000_000_000); // 1 ms
        assert_eq!(gap_for_rate(1000, 1_700_000_000), 4_705_882);
    }

    #[test]
    fn forgiveness_is_half_the_run_within_1ms_and_1s() {
        assert_eq!(forgive_ns(1_000_000_000, false), 500_000_000);
        assert_eq!(forgive_ns(3_000_000_000, false), 1_000_000_000);
        assert_eq!(forgive_ns(1_000_000, false), 1_000_000);
        assert_eq!(forgive_ns(2_000_000, false), 1_000_000);
        assert_eq!(forgive_ns(1_000_000, true), u64::MAX);
    }

    #[test]
    fn late_departures_within_the_bound_are_sent_late() {
        let mut s = Schedule::new(0, 1_000_000_000, 5_000_000); // 1 ms, forgive 5 ms
        assert_eq!(s.take_due(0, 64), (0, 1));
        // 3.5 ms late for datagram 1: it and the two due since leave now.
        assert_eq!(s.take_due(4_500_000, 64), (1, 4));
        assert_eq!(s.slips(), 0);
        assert_eq!(s.next_index(), 5);
        assert_eq!(s.next_due(), 5_000_000, "the schedule did not move");
        // Just under the bound is still sent late; at it, forgiven.
        assert_eq!(s.take_due(9_999_999, 64), (5, 5));
        assert_eq!(s.slips(), 0);
    }

    #[test]
    fn stall_past_the_bound_reanchors() {
        let mut s = Schedule::new(0, 1_000_000_000, 5_000_000); // 1 ms
        assert_eq!(s.take_due(0, 64), (0, 1));
        // 9.5 ms late: one datagram now, not ten.
        assert_eq!(s.take_due(10_500_000, 64), (1, 1));
        assert_eq!(s.slips(), 1);
        assert_eq!(
            s.next_due(),
            11_300_000,
            "re-anchored 200 us back, one datagram sent"
        );
        // Exactly at the bound is a stall too.
        let mut b = Schedule::new(0, 1_000_000_000, 5_000_000);
        assert_eq!(b.take_due(5_000_000, 64), (0, 1));
        assert_eq!(b.slips(), 1);
        // A sender that cannot keep up (5 ns gap) still sends whole batches after a stall.
        let mut m = Schedule::new(0, 5_000, 1_000_000);
        assert_eq!(m.take_due(1_000_000, 64), (0, 64));
        assert_eq!(m.slips(), 1);
        // Re-anchored one batch back (63 gaps of 5 ns), so the next is due a gap on.
        assert_eq!(m.next_due(), 1_000_000 + 5);
        // A slow stream keeps one gap's worth at most (under 200 µs): a
        // stalled 10 µs stream re-anchors 30 µs back for a batch of 4.
        let mut w = Schedule::new(0, 10_000_000, 1_000_000);
        assert_eq!(w.take_due(2_000_000, 4), (0, 4));
        assert_eq!(w.next_due(), 2_000_000 + 10_000);
        // Small lateness at a high rate is batched, not a stall.
        let mut f = Schedule::new(0, 1_000_000, 1_000_000); // 1 µs
        assert_eq!(f.take_due(10_500, 64), (0, 11));
        assert_eq!(f.slips(), 0);
    }

    #[test]
    fn stall_with_catch_up_bursts() {
        let mut s = Schedule::new(0, 1_000_000_000, forgive_ns(0, true));
        assert_eq!(s.take_due(0, 64), (0, 1));
        assert_eq!(s.take_due(10_500_000, 64), (1, 10));
        assert_eq!(s.slips(), 0);
    }

    #[test]
    fn datagrams_due_within_the_window_leave_together() {
        let mut s = Schedule::new(0, 10_000_000, u64::MAX); // 10 µs
        // Due at 0, 10, ..., 90 µs: all under 100 µs from now.
        assert_eq!(s.take_due_within(0, 100_000, 64), (0, 10));
        assert_eq!(s.next_due(), 100_000);
        assert_eq!(s.take_due_within(99_999, 100_000, 64), (10, 0));
        // The window never takes more than the batch holds.
        assert_eq!(s.take_due_within(100_000, 100_000, 4), (10, 4));
        // A window of 0 or 1 ns takes only what is due.
        assert_eq!(s.take_due_within(140_000, 1, 64), (14, 1));
        assert_eq!(s.take_due_within(150_000, 0, 64), (15, 1));
    }

    #[test]
    fn a_rate_keeps_its_schedule_exact_however_long_the_run() {
        // 1000-byte datagrams at 3 Gbit/s: 2,666,666.6 ps apart, 375,000 a second.
        let exact = Schedule::new(0, Gap::for_rate(1000, 3_000_000_000), u64::MAX);
        assert_eq!(exact.due_of(375_000), 1_000_000_000);
        assert_eq!(exact.due_of(375_000 * 3600), 3_600_000_000_000);
        assert_eq!(exact.due_of(1), 2_666);
        assert_eq!(exact.due_of(3), 8_000);
        // The gap rounded once to whole picoseconds drifts: 250 ns a second.
        let rounded = Schedule::new(0, gap_for_rate(1000, 3_000_000_000), u64::MAX);
        assert_eq!(rounded.due_of(375_000), 999_999_750);
        let g = Gap::for_rate(1000, 3_000_000_000);
        assert_eq!(g.ps(), 2_666_666);
        assert_eq!(g.count_before(1_000_000_000), 375_000);
        assert_eq!(g.count_before(1_000_000_001), 375_001);
        assert_eq!(g.count_before(0), 0);
        assert_eq!(Gap::from_ps(0), Gap::from_ps(1));
        // No rate: a gap of about 146 years, never due in any run.
        assert_eq!(gap_for_rate(1000, 0), 4_611_686_018_427_387_903);
        assert_eq!(Gap::for_rate(1000, 0).ps(), gap_for_rate(1000, 0));
        assert_eq!(Gap::from(5_000u64).span_ns(3), 15);
    }

    proptest! {
        /// Polled often enough, the schedule sends the profile's bytes within one datagram.
        #[test]
        fn delivers_the_rate(size in 64u32..9000, mbit in 1u64..10_000, dur_ms in 1u64..200, poll_ns in 1u64..5_000) {
            let gap = gap_for_rate(size, mbit * 1_000_000);
            let end = dur_ms * 1_000_000;
            let mut s = Schedule::new(0, gap, forgive_ns(end, false));
            let mut now = 0;
            let mut sent = 0u64;
            while now < end {
                let (_, n) = s.take_due(now, u64::MAX);
                sent += n;
                now += poll_ns.min(gap / 1000).max(1);
            }
            let expected = (end as u128 * 1000 / gap as u128) as u64;
            prop_assert!(sent.abs_diff(expected) <= 1, "sent {} expected {}", sent, expected);
        }

        /// `count_before` is the inverse of `span_ns`: the departures before
        /// a time are those whose due time is earlier.
        #[test]
        fn count_before_inverts_the_span(size in 1u32..65_536, rate in 1u64..400_000_000_000, t in 0u64..10_000_000_000_000) {
            let g = Gap::for_rate(size, rate);
            let k = g.count_before(t);
            prop_assert!(g.span_ns(k) >= t || k == u64::MAX);
            if k > 0 {
                prop_assert!(g.span_ns(k - 1) < t, "k {} span {} t {}", k, g.span_ns(k - 1), t);
            }
        }
    }
}
