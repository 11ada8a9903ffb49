//! The responder's side of the mesh: answers each probe, and remembers per
//! prober (address and run) which of its recent probes arrived, so that
//! the reply can say so and duplicates are told apart. Memory is bounded:
//! at most [`MAX_PROBERS`] probers are remembered, the longest silent
//! forgotten first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::wire::{Probe, Reply};

/// Most probers remembered at once.
pub const MAX_PROBERS: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Prober {
    epoch: u64,
    /// The highest number seen.
    newest: u64,
    /// Bit i: `newest - i` arrived.
    seen: u64,
    received: u64,
    last: Duration,
}

/// Every prober heard from lately.
#[derive(Debug, Default)]
pub struct Answerer {
    probers: HashMap<SocketAddr, Prober>,
    /// Probes answered, duplicates included.
    pub answered: u64,
}

impl Answerer {
    /// The reply to `p` from `from`, received at `now` (monotonic) and
    /// `t2` (realtime ns), sent at `t3`.
    pub fn answer(
        &mut self,
        from: SocketAddr,
        p: &Probe,
        now: Duration,
        t2: u64,
        t3: u64,
    ) -> Reply {
        if !self.probers.contains_key(&from)
            && self.probers.len() >= MAX_PROBERS
            && let Some(oldest) = (self.probers.iter())
                .min_by_key(|(_, s)| s.last)
                .map(|(a, _)| *a)
        {
            self.probers.remove(&oldest);
        }
        let fresh = Prober {
            epoch: p.epoch,
            newest: p.seq,
            seen: 0,
            received: 0,
            last: now,
        };
        let s = self.probers.entry(from).or_insert(fresh);
        if s.epoch != p.epoch {
            *s = fresh;
        }
        s.last = now;
        let duplicate = if p.seq > s.newest {
            let up = p.seq - s.newest;
            s.seen = if up >= 64 { 0 } else { s.seen << up };
            s.newest = p.seq;
            false
        } else if s.newest - p.seq < 64 {
            s.seen & (1 << (s.newest - p.seq)) != 0
        } else {
            // Too far behind to tell: taken as new.
            false
        };
        if !duplicate {
            s.received += 1;
            if s.newest - p.seq < 64 {
                s.seen |= 1 << (s.newest - p.seq);
            }
        }
        let shift = s.newest - p.seq + 1;
        let before = if shift >= 64 { 0 } else { s.seen >> shift };
        self.answered += 1;
        Reply {
            epoch: p.epoch,
            seq: p.seq,
            t1: p.t1,
            t2,
            t3,
            received: s.received,
            before,
            duplicate,
        }
    }

    /// Distinct probers (by address) heard from in the `window` up to `now`.
    pub fn probers(&self, now: Duration, window: Duration) -> usize {
        let since = now.saturating_sub(window);
        self.probers.values().filter(|s| s.last >= since).count()
    }

    /// Forgets probers silent for longer than `keep`.
    pub fn prune(&mut self, now: Duration, keep: Duration) {
        let since = now.saturating_sub(keep);
        self.probers.retain(|_, s| s.last >= since);
    }

    /// Probers remembered.
    pub fn len(&self) -> usize {
        self.probers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.probers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn probe(epoch: u64, seq: u64) -> Probe {
        Probe {
            epoch,
            seq,
            t1: 1000 + seq,
        }
    }

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 4795))
    }

    #[test]
    fn replies_say_what_arrived_before_and_count_it() {
        let mut a = Answerer::default();
        let r = a.answer(addr(1), &probe(7, 0), at(0), 50, 60);
        assert_eq!(
            r,
            Reply {
                epoch: 7,
                seq: 0,
                t1: 1000,
                t2: 50,
                t3: 60,
                received: 1,
                before: 0,
                duplicate: false
            }
        );
        // 1 and 2 lost on the way up; 3 arrives: of 0..=2 only 0 came.
        let r = a.answer(addr(1), &probe(7, 3), at(1), 0, 0);
        assert_eq!((r.received, r.before, r.duplicate), (2, 0b100, false));
        // 2 comes late: 1 not, 0 yes.
        let r = a.answer(addr(1), &probe(7, 2), at(1), 0, 0);
        assert_eq!((r.received, r.before, r.duplicate), (3, 0b10, false));
        // 3 again: a duplicate, not counted; 2 and 0 came, 1 not.
        let r = a.answer(addr(1), &probe(7, 3), at(1), 0, 0);
        assert_eq!((r.received, r.before, r.duplicate), (3, 0b101, true));
        let r = a.answer(addr(1), &probe(7, 4), at(1), 0, 0);
        assert_eq!((r.received, r.before), (4, 0b1011), "3, 2 and 0 came");
        assert_eq!(a.answered, 5);
        // A jump past the window forgets the bits.
        let r = a.answer(addr(1), &probe(7, 100), at(1), 0, 0);
        assert_eq!((r.received, r.before), (5, 0));
        let r = a.answer(addr(1), &probe(7, 101), at(1), 0, 0);
        assert_eq!((r.received, r.before), (6, 1));
        // 36 is 64 behind 100: in the window no more, taken as new.
        let r = a.answer(addr(1), &probe(7, 37), at(1), 0, 0);
        assert_eq!((r.received, r.duplicate), (7, false));
        let r = a.answer(addr(1), &probe(7, 38), at(1), 0, 0);
        assert_eq!(
            (r.received, r.before & 1),
            (8, 0),
            "37 is outside 101's window"
        );
    }

    #[test]
    fn duplicates_of_older_probes_far_along_the_run_are_told() {
        let mut a = Answerer::default();
        for seq in 100..=103 {
            a.answer(addr(1), &probe(7, seq), at(0), 0, 0);
        }
        // 101 again, two behind the newest: a duplicate, not counted; of
        // what came before it, 100 did.
        let r = a.answer(addr(1), &probe(7, 101), at(0), 0, 0);
        assert_eq!((r.received, r.before, r.duplicate), (4, 1, true));
        let r = a.answer(addr(1), &probe(7, 103), at(0), 0, 0);
        assert_eq!((r.received, r.before, r.duplicate), (4, 0b111, true));
        assert_eq!(a.answered, 6);
    }

    #[test]
    fn a_new_run_or_another_address_starts_afresh() {
        let mut a = Answerer::default();
        a.answer(addr(1), &probe(7, 0), at(0), 0, 0);
        a.answer(addr(1), &probe(7, 1), at(0), 0, 0);
        let r = a.answer(addr(2), &probe(7, 2), at(0), 0, 0);
        assert_eq!((r.received, r.before), (1, 0));
        let r = a.answer(addr(1), &probe(8, 2), at(0), 0, 0);
        assert_eq!((r.received, r.before), (1, 0));
        let r = a.answer(addr(1), &probe(8, 3), at(0), 0, 0);
        assert_eq!((r.received, r.before), (2, 1));
    }

    #[test]
    fn probers_in_the_window_and_the_bound() {
        let mut a = Answerer::default();
        assert!(a.is_empty());
        a.answer(addr(1), &probe(1, 0), at(10), 0, 0);
        assert!(!a.is_empty());
        a.answer(addr(2), &probe(1, 0), at(20), 0, 0);
        a.answer(addr(2), &probe(1, 1), at(25), 0, 0);
        a.answer(addr(3), &probe(1, 0), at(30), 0, 0);
        assert_eq!(a.probers(at(30), at(10)), 2);
        assert_eq!(
            a.probers(at(30), at(5)),
            2,
            "25 and 30 are within 5 s of 30"
        );
        assert_eq!(a.probers(at(30), at(4)), 1);
        assert_eq!(a.probers(at(30), at(20)), 3);
        a.prune(at(30), at(10));
        assert_eq!(a.len(), 2);
        // Full: the longest silent goes.
        let mut a = Answerer::default();
        for i in 0..MAX_PROBERS {
            let from = SocketAddr::from(([10, 1, (i >> 8) as u8, i as u8], 1));
            a.answer(
                from,
                &probe(1, 0),
                Duration::from_millis(1000 + i as u64),
                0,
                0,
            );
        }
        assert_eq!(a.len(), MAX_PROBERS);
        a.answer(addr(9), &probe(1, 0), at(100), 0, 0);
        assert_eq!(a.len(), MAX_PROBERS);
        let first = SocketAddr::from(([10, 1, 0, 0], 1));
        assert!(!a.probers.contains_key(&first));
        assert!(
            a.probers
                .contains_key(&SocketAddr::from(([10, 1, 0, 1], 1)))
        );
    }
}
