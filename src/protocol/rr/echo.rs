//! UDP request/response on the wire, free of I/O: the words that lead every
//! reply, and which sequence numbers have arrived, so each request is
//! answered once and each reply counted once, and an arrival behind a newer
//! one is told apart as reordered (irtt's "late" packets).
//!
//! The arrivals are a bitmap over the newest [`SPAN`] numbers: memory is
//! fixed per session whatever the peer sends, and a number that far behind
//! the newest is too old to tell from a duplicate ([`Arrival::Stale`]).

/// Bytes at the start of every UDP reply payload: the three words of
/// [`reply_words`].
pub const UDP_REPLY_MIN: u32 = 24;

/// The first payload words of a UDP reply: the server's receive time, the
/// reply's place in the order the server sent its replies (so the client
/// tells reordering on the way down from reordering on the way up), and a
/// check word over both, so a corrupted stamp or place is seen.
pub fn reply_words(t2: u64, place: u64) -> [u64; 3] {
    [t2, place, !(t2 ^ place)]
}

/// The receive time and place of a reply whose leading words are `w`, if
/// its check word holds.
pub fn read_reply_words(w: [u64; 3]) -> Option<(u64, u64)> {
    (w[2] == !(w[0] ^ w[1])).then_some((w[0], w[1]))
}

/// How many sequence numbers behind the newest are remembered.
pub const SPAN: u64 = 1 << 16;
const WORDS: usize = (SPAN / 64) as usize;

/// What one arrival is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The first arrival of this number; `reordered` when a higher number
    /// arrived before it.
    Fresh {
        /// A higher number came first.
        reordered: bool,
    },
    /// This number arrived before.
    Duplicate,
    /// More than [`SPAN`] behind the newest: whether it came before is no
    /// longer known.
    Stale,
}

/// The sequence numbers seen, within [`SPAN`] of the newest.
#[derive(Debug, Clone)]
pub struct SeqWindow {
    /// Bit `n % SPAN` is set when `n`, within the window, has arrived.
    bits: Box<[u64; WORDS]>,
    /// The highest number seen so far.
    newest: Option<u64>,
}

impl Default for SeqWindow {
    fn default() -> Self {
        SeqWindow {
            bits: Box::new([0; WORDS]),
            newest: None,
        }
    }
}

impl SeqWindow {
    fn bit(n: u64) -> (usize, u64) {
        let i = n % SPAN;
        ((i / 64) as usize, 1 << (i % 64))
    }

    /// Records an arrival of `n` and says what it is.
    pub fn arrive(&mut self, n: u64) -> Arrival {
        match self.newest {
            Some(top) if n <= top && top - n >= SPAN => return Arrival::Stale,
            Some(top) if n > top => {
                // The window moves up to n: the bits of the numbers it leaves
                // behind are those of top+1..=n, cleared for them.
                if n - top >= SPAN {
                    self.bits.fill(0);
                } else {
                    for m in top + 1..=n {
                        let (w, b) = Self::bit(m);
                        self.bits[w] &= !b;
                    }
                }
            }
            _ => {}
        }
        let reordered = self.newest.is_some_and(|top| n < top);
        self.newest = Some(self.newest.map_or(n, |top| top.max(n)));
        let (w, b) = Self::bit(n);
        if self.bits[w] & b != 0 {
            return Arrival::Duplicate;
        }
        self.bits[w] |= b;
        Arrival::Fresh { reordered }
    }
}

/// Counts of one direction's arrivals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrivalCounts {
    /// First arrivals.
    pub fresh: u64,
    /// Second and later arrivals of a number.
    pub duplicates: u64,
    /// First arrivals behind a higher number.
    pub reordered: u64,
    /// Arrivals too far behind to tell.
    pub stale: u64,
}

impl ArrivalCounts {
    /// Adds `a` to the counts.
    pub fn count(&mut self, a: Arrival) {
        match a {
            Arrival::Fresh { reordered } => {
                self.fresh += 1;
                self.reordered += u64::from(reordered);
            }
            Arrival::Duplicate => self.duplicates += 1,
            Arrival::Stale => self.stale += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn fresh(reordered: bool) -> Arrival {
        Arrival::Fresh { reordered }
    }

    #[test]
    fn in_order_duplicates_and_reordering() {
        let mut w = SeqWindow::default();
        assert_eq!(w.arrive(0), fresh(false));
        assert_eq!(w.arrive(0), Arrival::Duplicate, "the newest, twice");
        assert_eq!(w.arrive(2), fresh(false), "a gap is not reordering");
        assert_eq!(w.arrive(1), fresh(true), "behind 2");
        assert_eq!(w.arrive(1), Arrival::Duplicate);
        assert_eq!(w.arrive(2), Arrival::Duplicate);
        assert_eq!(w.arrive(3), fresh(false));
    }

    #[test]
    fn a_number_out_of_the_window_is_stale_and_bits_are_reused() {
        let mut w = SeqWindow::default();
        assert_eq!(w.arrive(5), fresh(false));
        assert_eq!(w.arrive(5 + SPAN), fresh(false));
        // 5 is SPAN behind: too old to tell.
        assert_eq!(w.arrive(5), Arrival::Stale);
        // 6 is SPAN - 1 behind: still in the window, and its bit (shared
        // with 6 + SPAN, not yet seen) is clear.
        assert_eq!(w.arrive(6), fresh(true));
        // A jump of more than a window forgets everything before it.
        assert_eq!(w.arrive(10 * SPAN), fresh(false));
        assert_eq!(w.arrive(10 * SPAN - 1), fresh(true));
        assert_eq!(w.arrive(9 * SPAN), Arrival::Stale);
        assert_eq!(w.arrive(9 * SPAN + 1), fresh(true));
    }

    #[test]
    fn moving_up_clears_exactly_the_bits_it_reuses() {
        let mut w = SeqWindow::default();
        for n in 0..SPAN {
            assert_eq!(w.arrive(n), fresh(false));
        }
        // Moving up by 3 frees the bits of 0, 1 and 2 for SPAN..SPAN+2;
        // SPAN - 1 and 3 stay seen.
        assert_eq!(w.arrive(SPAN + 2), fresh(false));
        assert_eq!(w.arrive(SPAN + 1), fresh(true));
        assert_eq!(w.arrive(SPAN), fresh(true));
        assert_eq!(w.arrive(3), Arrival::Duplicate);
        assert_eq!(w.arrive(SPAN - 1), Arrival::Duplicate);
        assert_eq!(w.arrive(2), Arrival::Stale);
    }

    #[test]
    fn reply_words_round_trip_and_any_flipped_bit_shows() {
        // The check word is the complement of the XOR: bits set in both
        // stamp and place cancel.
        assert_eq!(reply_words(0b1100, 0b1010), [0b1100, 0b1010, !0b0110]);
        assert_eq!(read_reply_words([0b1100, 0b1010, !0b0110]), Some((12, 10)));
        assert_eq!(read_reply_words([0b1100, 0b1010, !0b1110]), None);
        let w = reply_words(1_700_000_000_123_456_789, 42);
        assert_eq!(read_reply_words(w), Some((1_700_000_000_123_456_789, 42)));
        for word in 0..3 {
            for bit in [0, 17, 63] {
                let mut x = w;
                x[word] ^= 1 << bit;
                assert_eq!(read_reply_words(x), None, "word {word} bit {bit}");
            }
        }
    }

    #[test]
    fn counts_add_up() {
        let mut c = ArrivalCounts::default();
        for a in [
            fresh(false),
            fresh(true),
            fresh(true),
            Arrival::Duplicate,
            Arrival::Stale,
        ] {
            c.count(a);
        }
        assert_eq!(
            c,
            ArrivalCounts {
                fresh: 3,
                duplicates: 1,
                reordered: 2,
                stale: 1
            }
        );
    }

    proptest! {
        /// Against a set of every number seen and the running maximum.
        #[test]
        fn matches_a_set(seq in proptest::collection::vec(0u64..3 * SPAN, 1..400)) {
            let mut w = SeqWindow::default();
            let mut seen = HashSet::new();
            let mut top: Option<u64> = None;
            for n in seq {
                let want = match top {
                    Some(t) if n + SPAN <= t => Arrival::Stale,
                    _ if seen.contains(&n) => Arrival::Duplicate,
                    _ => Arrival::Fresh { reordered: top.is_some_and(|t| n < t) },
                };
                prop_assert_eq!(w.arrive(n), want, "n {}", n);
                if want != Arrival::Stale {
                    seen.insert(n);
                    top = Some(top.map_or(n, |t| t.max(n)));
                }
            }
        }
    }
}
