//! The arithmetic of UDP segmentation offload, free of sockets: how a send
//! batch groups into `UDP_SEGMENT` (GSO) super-buffers, and how a buffer the
//! kernel coalesced under `UDP_GRO` splits back into the datagrams it was
//! made of, so that every count (sequence, loss, duplicates, reordering,
//! delay) stays per datagram. The kernel cuts a super-buffer at every
//! `seg` bytes and only the last piece may be shorter (Linux
//! `Documentation/networking/segmentation-offloads.rst`, "UDP
//! fragmentation offload"; udp(7) `UDP_SEGMENT`, `UDP_GRO`).

/// Most segments in one super-buffer. Linux accepted 64 (UDP_MAX_SEGMENTS)
/// from GSO's introduction in 4.18; later kernels accept more, but 64 works
/// on every kernel that has GSO.
pub const MAX_SEGMENTS: usize = 64;

/// Most UDP payload in one super-buffer: what one IPv4 datagram can carry
/// (65535 bytes less a 20-byte IP and an 8-byte UDP header).
pub const MAX_BYTES: usize = 65_507;

/// The datagrams in a received buffer of `len` bytes that the kernel
/// coalesced from segments of `seg` bytes (0: not coalesced, one datagram):
/// each one's (offset, length). A buffer is at least one datagram, even
/// an empty one.
pub fn split(len: usize, seg: usize) -> Split {
    Split {
        at: 0,
        len,
        seg,
        done: false,
    }
}

/// The (offset, length) of each datagram of a coalesced buffer, in order.
#[derive(Debug, Clone)]
pub struct Split {
    at: usize,
    len: usize,
    seg: usize,
    done: bool,
}

impl Iterator for Split {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        if self.done {
            return None;
        }
        let left = self.len - self.at;
        if self.seg == 0 || left <= self.seg {
            self.done = true;
            return Some((self.at, left));
        }
        let d = (self.at, self.seg);
        self.at += self.seg;
        Some(d)
    }
}

/// One super-buffer of a send batch: datagrams `start..start + count`,
/// each `seg` bytes except the last, which may be shorter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// Index of its first datagram in the batch.
    pub start: usize,
    /// Datagrams in it.
    pub count: usize,
    /// Segment size: the length of every datagram in it but the last.
    pub seg: usize,
}

/// Groups a batch's datagram lengths, in order, into super-buffers the
/// kernel will cut back into exactly these datagrams: runs of one length,
/// each closed early by a shorter datagram (which can only be the last), at
/// most [`MAX_SEGMENTS`] datagrams and [`MAX_BYTES`] bytes each.
pub fn groups(lens: &[usize], out: &mut Vec<Group>) {
    out.clear();
    let mut i = 0;
    while i < lens.len() {
        let seg = lens[i];
        let cap = (MAX_BYTES / seg.max(1)).clamp(1, MAX_SEGMENTS);
        let mut count = 1;
        while i + count < lens.len() && count < cap {
            let l = lens[i + count];
            if l > seg {
                break;
            }
            count += 1;
            if l < seg {
                break;
            }
        }
        out.push(Group {
            start: i,
            count,
            seg,
        });
        i += count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_coalesced_buffer_splits_at_every_segment_with_a_short_tail() {
        assert_eq!(
            split(3000, 1400).collect::<Vec<_>>(),
            [(0, 1400), (1400, 1400), (2800, 200)]
        );
        assert_eq!(split(2800, 1400).count(), 2);
        assert_eq!(split(64, 0).collect::<Vec<_>>(), [(0, 64)]);
        assert_eq!(split(64, 64).collect::<Vec<_>>(), [(0, 64)]);
        assert_eq!(split(0, 1400).collect::<Vec<_>>(), [(0, 0)]);
        assert_eq!(split(0, 0).collect::<Vec<_>>(), [(0, 0)]);
    }

    #[test]
    fn groups_are_runs_of_one_size_closed_by_a_shorter_one() {
        let mut g = Vec::new();
        groups(&[100, 100, 100, 40, 100, 200, 200], &mut g);
        let want = [
            Group {
                start: 0,
                count: 4,
                seg: 100,
            },
            Group {
                start: 4,
                count: 1,
                seg: 100,
            },
            Group {
                start: 5,
                count: 2,
                seg: 200,
            },
        ];
        assert_eq!(g, want);
    }

    #[test]
    fn groups_stop_at_the_segment_and_byte_limits() {
        let mut g = Vec::new();
        groups(&[64; 130], &mut g);
        assert_eq!(g.iter().map(|g| g.count).collect::<Vec<_>>(), [64, 64, 2]);
        groups(&[1400; 100], &mut g);
        // 46 × 1400 = 64 400 fits in 65 507 bytes; 47 would not.
        assert_eq!(g.iter().map(|g| g.count).collect::<Vec<_>>(), [46, 46, 8]);
        groups(&[65_507, 65_507], &mut g);
        assert_eq!(g.len(), 2);
    }

    proptest! {
        /// Whatever the lengths, the groups cover the batch in order, obey
        /// the kernel's limits, and what the receiver's split makes of each
        /// super-buffer is exactly the datagrams that went into it.
        #[test]
        fn groups_split_back_into_the_datagrams_sent(
            lens in proptest::collection::vec(
                prop_oneof![Just(64usize), Just(1400), Just(37), 1usize..3000], 0..300)
        ) {
            let mut g = Vec::new();
            groups(&lens, &mut g);
            let mut next = 0;
            for grp in &g {
                prop_assert_eq!(grp.start, next);
                prop_assert!(grp.count >= 1 && grp.count <= MAX_SEGMENTS);
                let part = &lens[grp.start..grp.start + grp.count];
                let total: usize = part.iter().sum();
                prop_assert!(grp.count == 1 || total <= MAX_BYTES);
                let got: Vec<usize> = split(total, grp.seg).map(|(_, l)| l).collect();
                prop_assert_eq!(&got[..], part);
                next += grp.count;
            }
            prop_assert_eq!(next, lens.len());
        }

        /// A split covers the buffer with adjacent pieces of `seg` bytes but
        /// the last, which is 1..=seg bytes.
        #[test]
        fn a_split_tiles_the_buffer(len in 0usize..70_000, seg in 1usize..70_000) {
            let parts: Vec<_> = split(len, seg).collect();
            let mut at = 0;
            for (k, &(off, l)) in parts.iter().enumerate() {
                prop_assert_eq!(off, at);
                prop_assert!((l >= 1 || len == 0) && l <= seg);
                prop_assert!(k + 1 == parts.len() || l == seg);
                at += l;
            }
            prop_assert_eq!(at, len);
            prop_assert_eq!(parts.len(), len.div_ceil(seg).max(1));
        }
    }
}
