//! Unit tests of `udp::track`: the tracker against the definitions in its
//! module comment, and the receiver's totals.

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
    // Only the buckets that hold something: 10 µs wide (ten of them, then 20 µs).
    assert_eq!(
        t.histogram,
        vec![
            (0.0, 10.0, 1),
            (10.0, 20.0, 1),
            (20.0, 30.0, 1),
            (30.0, 40.0, 1)
        ]
    );
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

#[test]
fn a_delay_below_zero_is_counted_as_the_offsets_error_and_taken_as_zero() {
    let mut r = ReceiverStats::new(1000, 10);
    r.omit(1, 1);
    // The warm-up's early datagram counts in its interval only.
    r.on_datagram(0, 100, -9_000, 0, false);
    r.on_datagram(1, 100, -5_000, 0, false);
    r.on_datagram(2, 100, 3_000, 0, false);
    r.on_datagram(3, 100, -2_000, 0, false);
    let iv = r.take_interval(1.0);
    assert_eq!(iv.delay_min_us, Some(0.0));
    assert_eq!(iv.delay_avg_us, Some(0.75));
    assert_eq!(iv.delay_max_us, Some(3.0));
    let t = r.totals(Some(4));
    assert_eq!((t.delays_below_zero, t.below_zero_by_us), (2, Some(5.0)));
    assert_eq!(t.delay_min_us, Some(0.0));
    assert_eq!(t.delay_avg_us, Some(1.0));
    // The percentiles and the histogram agree with the mean: nothing below 0.
    assert!(t.percentiles_us.iter().all(|(_, v)| *v >= 0.0));
    assert_eq!(t.histogram[0].0, 0.0);
    // None early: none counted, no figure.
    let mut r = ReceiverStats::new(1000, 10);
    r.on_datagram(0, 100, 0, 0, false);
    let t = r.totals(Some(1));
    assert_eq!((t.delays_below_zero, t.below_zero_by_us), (0, None));
}
