//! The timers of an event loop: which connection (by slot) wants to be
//! looked at again when. Earliest first, and at most one entry per slot
//! (the earliest it asked for), so the heap never grows past the slots
//! however often a connection re-arms (one-byte segments, each setting a
//! wake-up, once kept a duplicate each), and a loop can give every
//! connection its idle deadline as a timer instead of scanning them all.
//! A look at a slot with nothing to do is harmless.

use std::time::{Duration, Instant};

/// Not in the heap.
const NONE: usize = usize::MAX;

/// Pending wake-ups, earliest first, one per slot: a binary heap whose
/// entries know their places, so a slot's entry is found, moved earlier or
/// removed in O(log n).
#[derive(Debug, Default)]
pub struct Timers {
    heap: Vec<(Instant, usize)>,
    /// Slot -> its entry's index in `heap`, or [`NONE`].
    pos: Vec<usize>,
    /// Slot -> the earliest time it asked for after its entry's: the entry
    /// moves there when it fires, so a wish an earlier one displaced (a
    /// setup deadline under a nearer wake-up) is not lost.
    later: Vec<Option<Instant>>,
    /// Entries that came due, in all: what the loop woke up for.
    fired: u64,
}

impl Timers {
    /// Slot `k` wants a look at `at`: its one entry keeps the earlier of
    /// this and what it already had, and the later of the two waits behind
    /// it (only the earliest such: a third wish displaced before the entry
    /// fires is left to the slot's next step to ask again).
    pub fn push(&mut self, at: Instant, k: usize) {
        if self.pos.len() <= k {
            self.pos.resize(k + 1, NONE);
            self.later.resize(k + 1, None);
        }
        let keep = |l: &mut Option<Instant>, t: Instant| {
            *l = Some(l.map_or(t, |l| l.min(t)));
        };
        match self.pos[k] {
            NONE => {
                self.heap.push((at, k));
                self.pos[k] = self.heap.len() - 1;
                self.up(self.heap.len() - 1);
            }
            i if at < self.heap[i].0 => {
                keep(&mut self.later[k], self.heap[i].0);
                self.heap[i].0 = at;
                self.up(i);
            }
            i if at > self.heap[i].0 => keep(&mut self.later[k], at),
            _ => {}
        }
    }

    /// Slot `k` wants no look (its connection is gone).
    pub fn cancel(&mut self, k: usize) {
        let Some(&i) = self.pos.get(k) else {
            return;
        };
        if i == NONE {
            return;
        }
        self.pos[k] = NONE;
        self.later[k] = None;
        let last = self.heap.len() - 1;
        if i != last {
            self.heap.swap(i, last);
            self.pos[self.heap[i].1] = i;
        }
        self.heap.pop();
        if i < self.heap.len() {
            self.down(i);
            self.up(i);
        }
    }

    /// When slot `k` is to be looked at, if at all.
    pub fn at(&self, k: usize) -> Option<Instant> {
        match self.pos.get(k) {
            Some(&i) if i != NONE => Some(self.heap[i].0),
            _ => None,
        }
    }

    /// How many entries are pending (at most one per slot).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether none is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// How many entries have come due since the loop started.
    pub fn fired(&self) -> u64 {
        self.fired
    }

    /// When the earliest entry is due, if any.
    pub fn earliest(&self) -> Option<Instant> {
        self.heap.first().map(|&(t, _)| t)
    }

    /// How long the loop may sleep: until the earliest timer, at most `cap`.
    pub fn timeout(&self, now: Instant, cap: Duration) -> Duration {
        self.earliest()
            .map_or(cap, |t| t.saturating_duration_since(now))
            .min(cap)
    }

    /// The slots whose time has come, taken out.
    pub fn due(&mut self, now: Instant) -> Vec<usize> {
        let mut out = Vec::new();
        while let Some(&(t, k)) = self.heap.first() {
            if t > now {
                break;
            }
            let later = self.later[k].take();
            self.cancel(k);
            self.fired += 1;
            out.push(k);
            // This look covers every wish up to now.
            if let Some(l) = later.filter(|&l| l > now) {
                self.push(l, k);
            }
        }
        out
    }

    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent].0 <= self.heap[i].0 {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < self.heap.len() && self.heap[l].0 < self.heap[least].0 {
                least = l;
            }
            if r < self.heap.len() && self.heap[r].0 < self.heap[least].0 {
                least = r;
            }
            if least == i {
                return;
            }
            self.swap(i, least);
            i = least;
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1] = a;
        self.pos[self.heap[b].1] = b;
    }
}

#[cfg(test)]
#[path = "timers_tests.rs"]
mod tests;
