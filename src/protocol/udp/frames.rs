//! Media frames reassembled from their datagrams (ctsTraffic's UDP media
//! stream): a frame of `F` bytes goes out as `k` datagrams of the
//! datagram size (the last one shorter), numbered consecutively, so
//! datagram `s` belongs to frame `s / k`. A frame is *completed* when all
//! its datagrams arrived verified and in time for playout, *dropped* when
//! one never arrived (or arrived past its deadline), an *error* when one
//! failed verification, and *repeated* when one arrived twice. Frames are
//! judged once: when their last datagram arrives, or when a datagram
//! [`REORDER_FRAMES`] frames later shows the missing one will not come, or
//! at the end of the stream.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::iso::FrameIndex;

/// How many frames later a datagram may still complete a frame.
pub const REORDER_FRAMES: u64 = 8;

/// Frame counts, per interval or in total (ctsTraffic's columns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameCounts {
    /// Frames whose every datagram arrived verified and on time.
    pub completed: u64,
    /// Frames with a datagram missing or late.
    pub dropped: u64,
    /// Frames with a datagram received twice.
    pub repeated: u64,
    /// Frames with a datagram that failed verification.
    pub errors: u64,
}

impl FrameCounts {
    fn add(&mut self, o: &FrameCounts) {
        self.completed += o.completed;
        self.dropped += o.dropped;
        self.repeated += o.repeated;
        self.errors += o.errors;
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Frame {
    got: u64,
    corrupt: bool,
    late: bool,
}

/// Reassembles frames and counts them.
#[derive(Debug, Clone)]
pub struct FrameTracker {
    index: FrameIndex,
    open: BTreeMap<u64, Frame>,
    /// Every frame below this is judged.
    judged_below: u64,
    /// Frames below this are the `--omit` warm-up: counted in intervals only.
    omit_below: u64,
    cur: FrameCounts,
    total: FrameCounts,
}

impl FrameTracker {
    /// Frames laid out by `index`; frames numbered below `omit_below` stay
    /// out of the totals.
    pub fn new(index: FrameIndex, omit_below: u64) -> FrameTracker {
        FrameTracker {
            index,
            open: BTreeMap::new(),
            judged_below: 0,
            omit_below,
            cur: FrameCounts::default(),
            total: FrameCounts::default(),
        }
    }

    /// Frames that `datagrams` datagrams make (the last may be cut short).
    pub fn frames_for(&mut self, datagrams: u64) -> u64 {
        self.index.frames_before(datagrams)
    }

    /// The frame datagram `seq` belongs to.
    pub fn frame_of(&mut self, seq: u64) -> u64 {
        self.index.frame_of(seq)
    }

    fn count(&mut self, frame: u64, f: impl Fn(&mut FrameCounts)) {
        f(&mut self.cur);
        if frame >= self.omit_below {
            f(&mut self.total);
        }
    }

    fn judge(&mut self, frame: u64, f: Frame) {
        if f.corrupt {
            self.count(frame, |c| c.errors += 1);
        } else if f.got < self.index.datagrams_in(frame) || f.late {
            self.count(frame, |c| c.dropped += 1);
        } else {
            self.count(frame, |c| c.completed += 1);
        }
    }

    /// Judges every frame below `frame` (none of its datagrams can still
    /// come in time to count): those with datagrams by what they got, the
    /// rest dropped, counted at once however many (a forged jump costs
    /// nothing per frame skipped).
    fn judge_below(&mut self, frame: u64) {
        if frame <= self.judged_below {
            return;
        }
        let keep = self.open.split_off(&frame);
        let judged = std::mem::replace(&mut self.open, keep);
        let seen = judged.len() as u64;
        let seen_warm = judged.range(..self.omit_below).count() as u64;
        for (n, f) in judged {
            self.judge(n, f);
        }
        let none = frame - self.judged_below - seen;
        let warm = self.omit_below.clamp(self.judged_below, frame) - self.judged_below;
        let none_warm = warm - seen_warm.min(warm);
        self.cur.dropped += none;
        self.total.dropped += none - none_warm.min(none);
        self.judged_below = frame;
        self.index.judged_below(frame);
    }

    /// Judges, in order, the frames at the front that are complete.
    fn judge_complete(&mut self) {
        while let Some(f) = self.open.get(&self.judged_below).copied() {
            if f.got < self.index.datagrams_in(self.judged_below) {
                break;
            }
            self.open.remove(&self.judged_below);
            self.judge(self.judged_below, f);
            self.judged_below += 1;
        }
        self.index.judged_below(self.judged_below);
    }

    /// Datagram `seq` arrived, a `duplicate` of one seen, `corrupt`, or
    /// `late` for playout.
    pub fn on_datagram(&mut self, seq: u64, duplicate: bool, corrupt: bool, late: bool) {
        let frame = self.frame_of(seq);
        if duplicate {
            // Once per duplicate datagram, as ctsTraffic counts repeats.
            self.count(frame, |c| c.repeated += 1);
            return;
        }
        if frame < self.judged_below {
            // Its frame was already judged dropped.
            return;
        }
        // A datagram this far ahead: older frames are over.
        self.judge_below(frame.saturating_sub(REORDER_FRAMES));
        let f = self.open.entry(frame).or_default();
        f.got += 1;
        f.corrupt |= corrupt;
        f.late |= late;
        self.judge_complete();
    }

    /// The counts since the last call.
    pub fn take_interval(&mut self) -> FrameCounts {
        std::mem::take(&mut self.cur)
    }

    /// The stream is over: judges every frame up to `frames` (the number
    /// the sender sent; the highest seen if unknown) and returns the totals.
    pub fn finish(&mut self, frames: Option<u64>) -> FrameCounts {
        let end = frames.unwrap_or_else(|| {
            self.open
                .keys()
                .next_back()
                .map_or(self.judged_below, |&f| f + 1)
        });
        self.judge_below(end.max(self.judged_below));
        let mut t = FrameCounts::default();
        t.add(&self.total);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(k: u64, seqs: &[(u64, bool, bool, bool)], frames: u64) -> (FrameCounts, FrameCounts) {
        let mut t = FrameTracker::new(FrameIndex::fixed(k), 0);
        for &(s, a, c, l) in seqs {
            t.on_datagram(s, a, c, l);
        }
        let iv = t.take_interval();
        let total = t.finish(Some(frames));
        (iv, total)
    }

    const NEW: bool = false;
    const DUP: bool = true;

    #[test]
    fn a_frame_completes_when_all_its_datagrams_arrive() {
        let seqs: Vec<_> = (0..9).map(|s| (s, NEW, false, false)).collect();
        let (iv, total) = run(3, &seqs, 3);
        assert_eq!(iv.completed, 3);
        assert_eq!(
            total,
            FrameCounts {
                completed: 3,
                ..Default::default()
            }
        );
    }

    #[test]
    fn missing_corrupt_late_and_repeated_frames_are_told_apart() {
        // Frames of 3: frame 0 whole; frame 1 misses datagram 4; frame 2
        // has a corrupt datagram; frame 3 a late one; frame 4 a repeat.
        let mut seqs: Vec<_> = [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
            .iter()
            .map(|&s| (s, NEW, s == 7, s == 10))
            .collect();
        seqs.push((13, DUP, false, false));
        seqs.push((13, DUP, false, false));
        let (_, total) = run(3, &seqs, 5);
        assert_eq!(
            total,
            FrameCounts {
                completed: 2,
                dropped: 2,
                repeated: 2,
                errors: 1
            }
        );
    }

    #[test]
    fn a_reordered_datagram_still_completes_its_frame() {
        let seqs = [
            (0, NEW, false, false),
            (2, NEW, false, false),
            (3, NEW, false, false),
            (1, NEW, false, false),
        ];
        let (iv, total) = run(2, &seqs, 2);
        assert_eq!(iv.completed, 2);
        assert_eq!(total.completed, 2);
        assert_eq!(total.dropped, 0);
    }

    #[test]
    fn frames_are_judged_when_far_enough_behind_or_at_the_end() {
        // Frame 0 lacks datagram 1; nothing is judged until a datagram
        // more than REORDER_FRAMES frames later arrives.
        let mut t = FrameTracker::new(FrameIndex::fixed(2), 0);
        t.on_datagram(0, NEW, false, false);
        t.on_datagram(2, NEW, false, false);
        t.on_datagram(3, NEW, false, false);
        assert_eq!(t.take_interval(), FrameCounts::default());
        t.on_datagram(2 * REORDER_FRAMES, NEW, false, false);
        assert_eq!(t.take_interval(), FrameCounts::default());
        t.on_datagram(2 * (REORDER_FRAMES + 1), NEW, false, false);
        let iv = t.take_interval();
        assert_eq!((iv.dropped, iv.completed), (1, 1));
        // Its datagram, arriving after the verdict, changes nothing.
        t.on_datagram(1, NEW, false, false);
        // The end judges what is left: frames the sender sent and no
        // datagram of which arrived are dropped.
        let total = t.finish(Some(REORDER_FRAMES + 2));
        assert_eq!(total.completed, 1);
        assert_eq!(total.dropped, REORDER_FRAMES + 1);
    }

    #[test]
    fn a_datagram_count_makes_whole_and_cut_frames() {
        let mut t = FrameTracker::new(FrameIndex::fixed(4), 0);
        assert_eq!(t.frames_for(0), 0);
        assert_eq!(t.frames_for(8), 2);
        assert_eq!(t.frames_for(9), 3);
        assert_eq!(t.frame_of(7), 1);
    }

    #[test]
    fn warm_up_frames_seen_and_unseen_stay_out_of_the_totals_together() {
        // Frames of 2, the first 4 frames the warm-up. Frames 0 and 2 get
        // half their datagrams, 1, 3, 4 and 5 none; the end judges them
        // all at once: six dropped in the intervals, only 4 and 5 in total.
        let mut t = FrameTracker::new(FrameIndex::fixed(2), 4);
        t.on_datagram(0, NEW, false, false);
        t.on_datagram(4, NEW, false, false);
        let total = t.finish(Some(6));
        assert_eq!(t.take_interval().dropped, 6);
        assert_eq!(total.dropped, 2);
    }

    #[test]
    fn without_the_senders_count_the_end_judges_up_to_the_last_frame_seen() {
        // Frame 0 whole, frame 1 half: with no count from the sender, the
        // end still judges frame 1 (dropped).
        let mut t = FrameTracker::new(FrameIndex::fixed(2), 0);
        for s in 0..3 {
            t.on_datagram(s, NEW, false, false);
        }
        let total = t.finish(None);
        assert_eq!((total.completed, total.dropped), (1, 1));
    }

    #[test]
    fn the_warm_up_counts_in_intervals_only() {
        let mut t = FrameTracker::new(FrameIndex::fixed(1), 2);
        for s in 0..4 {
            t.on_datagram(s, NEW, false, false);
        }
        assert_eq!(t.take_interval().completed, 4);
        assert_eq!(t.finish(Some(4)).completed, 2);
    }
}
