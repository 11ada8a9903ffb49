//! The timers of an event loop: which connection (by slot) wants to be
//! looked at again when. Earliest first; a connection may be in it more than
//! once, and a look at one with nothing to do is harmless.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// Pending wake-ups, earliest first.
#[derive(Debug, Default)]
pub struct Timers(BinaryHeap<Reverse<(Instant, usize)>>);

impl Timers {
    /// Slot `k` wants a look at `at`.
    pub fn push(&mut self, at: Instant, k: usize) {
        self.0.push(Reverse((at, k)));
    }

    /// How long the loop may sleep: until the earliest timer, at most `cap`.
    pub fn timeout(&self, now: Instant, cap: Duration) -> Duration {
        self.0
            .peek()
            .map_or(cap, |Reverse((t, _))| t.saturating_duration_since(now))
            .min(cap)
    }

    /// The slots whose time has come, taken out.
    pub fn due(&mut self, now: Instant) -> Vec<usize> {
        let mut out = Vec::new();
        while let Some(&Reverse((t, k))) = self.0.peek() {
            if t > now {
                break;
            }
            self.0.pop();
            out.push(k);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_come_due_in_order_and_bound_the_sleep() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut t = Timers::default();
        assert_eq!(t.timeout(t0, ms(20)), ms(20));
        t.push(t0 + ms(30), 1);
        t.push(t0 + ms(10), 2);
        t.push(t0 + ms(10), 3);
        assert_eq!(t.timeout(t0, ms(20)), ms(10));
        assert_eq!(t.timeout(t0 + ms(50), ms(20)), Duration::ZERO);
        assert_eq!(t.due(t0 + ms(9)), Vec::<usize>::new());
        assert_eq!(t.due(t0 + ms(10)), vec![2, 3]);
        assert_eq!(t.due(t0 + ms(40)), vec![1]);
        assert!(t.due(t0 + ms(100)).is_empty());
    }
}
