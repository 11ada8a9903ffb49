//! The loop timers against a plain model: one entry per slot, the earliest
//! kept, due in time order.

use super::*;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn timers_come_due_in_order_and_bound_the_sleep() {
    let t0 = Instant::now();
    let mut t = Timers::default();
    assert_eq!(t.timeout(t0, ms(20)), ms(20));
    assert_eq!(t.earliest(), None);
    t.push(t0 + ms(30), 1);
    t.push(t0 + ms(10), 2);
    t.push(t0 + ms(11), 3);
    assert_eq!(t.earliest(), Some(t0 + ms(10)));
    assert_eq!(t.timeout(t0, ms(20)), ms(10));
    assert_eq!(t.timeout(t0 + ms(50), ms(20)), Duration::ZERO);
    assert_eq!(t.due(t0 + ms(9)), Vec::<usize>::new());
    assert_eq!(t.due(t0 + ms(11)), vec![2, 3]);
    assert_eq!(t.earliest(), Some(t0 + ms(30)));
    assert_eq!(t.due(t0 + ms(40)), vec![1]);
    assert!(t.due(t0 + ms(100)).is_empty());
    assert_eq!(t.fired(), 3);
}

/// A connection that re-arms on every segment (a one-byte sender) holds one
/// entry, at the earliest time it asked for: the heap is bounded by the
/// slots, and a later wish does not postpone an earlier one (an idle
/// deadline stays armed under a burst's timer).
#[test]
fn a_slot_holds_one_entry_at_its_earliest_time() {
    let t0 = Instant::now();
    let mut t = Timers::default();
    for i in 0..10_000u64 {
        t.push(t0 + ms(1000 - i % 500), 7);
        t.push(t0 + ms(2000 + i), 8);
    }
    assert_eq!(t.len(), 2);
    assert_eq!(t.at(7), Some(t0 + ms(501)));
    assert_eq!(t.at(8), Some(t0 + ms(2000)));
    assert_eq!(t.at(9), None);
    t.push(t0 + ms(600), 7);
    assert_eq!(t.at(7), Some(t0 + ms(501)), "a later time moved it");
    assert_eq!(t.due(t0 + ms(1999)), vec![7]);
    assert_eq!(t.due(t0 + ms(5000)), vec![8]);
    assert!(t.is_empty());
}

#[test]
fn a_cancelled_slot_never_comes_due() {
    let t0 = Instant::now();
    let mut t = Timers::default();
    for k in 0..5 {
        t.push(t0 + ms(10 * k as u64), k);
    }
    t.cancel(0);
    t.cancel(3);
    t.cancel(3);
    t.cancel(99);
    assert_eq!(t.len(), 3);
    assert_eq!(t.due(t0 + ms(100)), vec![1, 2, 4]);
}

/// Random pushes, cancels and takes against a model that keeps every
/// wish: a slot comes due once its earliest is due, and then waits on for
/// the next one after that (a third is left to the slot to ask again).
#[test]
fn timers_match_a_model_under_random_use() {
    use std::collections::{BTreeMap, BTreeSet};
    let t0 = Instant::now();
    let mut rng = SmallRng::seed_from_u64(27);
    let mut t = Timers::default();
    let mut model: BTreeMap<usize, BTreeSet<Instant>> = BTreeMap::new();
    let mut now = t0;
    for _ in 0..20_000 {
        let k = rng.random_range(0..64usize);
        match rng.random_range(0..10u32) {
            0..=5 => {
                let at = now + ms(rng.random_range(0..200u64));
                t.push(at, k);
                model.entry(k).or_default().insert(at);
            }
            6 => {
                t.cancel(k);
                model.remove(&k);
            }
            _ => {
                now += ms(rng.random_range(0..30u64));
                let mut want: Vec<usize> = model
                    .iter()
                    .filter(|(_, w)| w.first().is_some_and(|&a| a <= now))
                    .map(|(&k, _)| k)
                    .collect();
                let got = t.due(now);
                let times: Vec<Instant> = got
                    .iter()
                    .map(|k| model[k].first().copied().unwrap())
                    .collect();
                assert!(times.windows(2).all(|w| w[0] <= w[1]), "out of order");
                let mut g = got.clone();
                g.sort();
                want.sort();
                assert_eq!(g, want);
                for k in got {
                    let next = model[&k].iter().nth(1).copied().filter(|&a| a > now);
                    match next {
                        Some(a) => {
                            model.insert(k, BTreeSet::from([a]));
                        }
                        None => {
                            model.remove(&k);
                        }
                    }
                }
            }
        }
        assert_eq!(t.len(), model.len());
        assert_eq!(
            t.timeout(now, ms(1000)),
            model
                .values()
                .filter_map(|w| w.first())
                .min()
                .map_or(ms(1000), |&a| a
                    .saturating_duration_since(now)
                    .min(ms(1000)))
        );
    }
}
