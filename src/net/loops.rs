//! How work reaches a fixed set of event loops from outside them: one
//! channel and one mio waker per loop, and a count of what each loop holds
//! so new connections go to the least busy. The server's loops and the
//! relay's share it.

use mio::{Poll, Token, Waker};
use std::io;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, Sender, channel};

/// The token every loop's waker fires with.
pub const WAKE: Token = Token(usize::MAX);

/// What one loop needs to run: its poll (with the waker registered) and
/// where its messages arrive.
pub struct LoopEnd<T> {
    /// The loop's poll.
    pub poll: Poll,
    /// Messages for the loop.
    pub rx: Receiver<T>,
}

/// The way into every loop, and how many connections each holds.
pub struct Mailboxes<T> {
    ways: Vec<(Sender<T>, Arc<Waker>)>,
    live: Vec<AtomicUsize>,
    next: AtomicUsize,
}

impl<T> Mailboxes<T> {
    /// `n` loops' (at least one) mailboxes, and the ends the loops keep.
    pub fn open(n: usize) -> io::Result<(Mailboxes<T>, Vec<LoopEnd<T>>)> {
        let mut ways = Vec::new();
        let mut ends = Vec::new();
        for _ in 0..n.max(1) {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
            let (tx, rx) = channel();
            ways.push((tx, waker));
            ends.push(LoopEnd { poll, rx });
        }
        let boxes = Mailboxes {
            live: ways.iter().map(|_| AtomicUsize::new(0)).collect(),
            ways,
            next: AtomicUsize::new(0),
        };
        Ok((boxes, ends))
    }

    /// How many loops there are.
    pub fn len(&self) -> usize {
        self.ways.len()
    }

    /// Whether there are none (never, once opened).
    pub fn is_empty(&self) -> bool {
        self.ways.is_empty()
    }

    /// Sends `m` to loop `k` and wakes it; false if loop `k` is gone.
    pub fn send(&self, k: usize, m: T) -> bool {
        let Some((tx, waker)) = self.ways.get(k) else {
            return false;
        };
        tx.send(m).is_ok() && waker.wake().is_ok()
    }

    /// Counts a connection in on loop `k` before it gets there, so the next
    /// choice sees it (connections accepted in one batch would otherwise all
    /// go to the same loop), and sends it; false if loop `k` is gone.
    pub fn hand_to(&self, k: usize, m: T) -> bool {
        self.arrived(k);
        let sent = self.send(k, m);
        if !sent {
            self.left(k);
        }
        sent
    }

    /// Hands `m` to the next in turn of the first `n` loops (at least one).
    pub fn hand_round_of(&self, n: usize, m: T) -> bool {
        let n = n.clamp(1, self.ways.len());
        let k = self.next.fetch_add(1, Relaxed) % n;
        self.hand_to(k, m)
    }

    /// The loop holding the fewest connections; `prefer` on a tie.
    pub fn least_busy(&self, prefer: usize) -> usize {
        self.least_busy_of(self.live.len(), prefer)
    }

    /// Of the first `n` loops, the one holding the fewest connections;
    /// `prefer` on a tie (and whatever its number).
    pub fn least_busy_of(&self, n: usize, prefer: usize) -> usize {
        let load = |k: usize| self.load(k);
        (0..n.min(self.live.len())).fold(
            prefer,
            |best, k| if load(k) < load(best) { k } else { best },
        )
    }

    /// How many connections loop `k` holds (0 for a loop that is not).
    pub fn load(&self, k: usize) -> usize {
        self.live.get(k).map_or(0, |l| l.load(Relaxed))
    }

    /// Loop `k` holds one more connection.
    pub fn arrived(&self, k: usize) {
        self.live[k].fetch_add(1, Relaxed);
    }

    /// Loop `k` holds one fewer.
    pub fn left(&self, k: usize) {
        self.live[k].fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_go_to_the_least_busy_loop_and_are_counted_out() {
        let (boxes, ends) = Mailboxes::<u32>::open(3).unwrap();
        assert_eq!(boxes.len(), 3);
        assert!(boxes.hand_to(0, 7));
        assert!(boxes.hand_to(1, 8));
        assert_eq!(boxes.least_busy(0), 2);
        assert!(boxes.hand_round_of(3, 9));
        assert_eq!(ends[0].rx.try_recv().ok(), Some(7));
        assert_eq!(ends[0].rx.try_recv().ok(), Some(9));
        boxes.left(1);
        assert_eq!(boxes.least_busy(0), 1);
        // A tie keeps the preferred loop (no hand-over).
        assert_eq!(boxes.least_busy(2), 2);
        boxes.left(0);
        assert_eq!(boxes.least_busy(0), 1);
        assert!(!boxes.send(5, 1));
        drop(ends);
        // A send that fails is counted back out.
        assert!(!boxes.hand_to(2, 1));
        boxes.left(0);
        assert_eq!(boxes.least_busy(2), 2);
    }

    #[test]
    fn the_first_n_loops_take_turns_and_the_least_busy_of_them_is_chosen() {
        let (boxes, ends) = Mailboxes::<u32>::open(4).unwrap();
        for m in 0..4 {
            assert!(boxes.hand_round_of(2, m));
        }
        // Loops 2 and 3 were never handed anything.
        assert_eq!((boxes.load(0), boxes.load(1), boxes.load(2)), (2, 2, 0));
        assert_eq!(ends[0].rx.try_iter().collect::<Vec<_>>(), [0, 2]);
        assert_eq!(ends[1].rx.try_iter().collect::<Vec<_>>(), [1, 3]);
        assert!(ends[2].rx.try_recv().is_err());
        // The idle loops 2 and 3 are not among the first two.
        boxes.left(1);
        assert_eq!(boxes.least_busy_of(2, 0), 1);
        assert_eq!(boxes.least_busy_of(4, 0), 2);
        // A preferred loop past the first n stays the choice on a tie.
        boxes.left(1);
        assert_eq!(boxes.least_busy_of(2, 3), 3);
        assert_eq!(boxes.least_busy_of(2, 0), 1);
        assert_eq!(boxes.load(9), 0);
        // n past the loops there are, or zero, still hands to one of them.
        assert!(boxes.hand_round_of(0, 5));
        assert!(boxes.hand_round_of(99, 6));
    }
}
