//! The verification pattern: what every byte of a data stream must be.
//!
//! Both ends build the same read-only pattern buffer once per process. A data
//! stream (one direction of one connection) reads the pattern cyclically from a
//! start position derived from the connection ID and the direction, so byte `o`
//! of a stream is `P[(start + o) mod PERIOD]`. Sending is a zero-copy write from
//! the buffer; verifying is a `memcmp` against it — the cheapest check that
//! still catches corruption, truncation, duplication, reordering of segments
//! and cross-connection mix-ups.
//!
//! `PERIOD` is a prime (262,139) so that no realistic duplicated or skipped span
//! (a multiple of an MSS, a page or a buffer size) lines up with the pattern
//! again; the buffer is `PERIOD + EXTRA` long so most reads need no wrap.

use std::sync::OnceLock;
use uuid::Uuid;

/// Length of one cycle of the pattern (a prime).
pub const PERIOD: usize = 262_139;
/// Bytes repeated past the end of the cycle so slices rarely wrap. Kept small
/// so the whole buffer (~320 KiB) stays in L2: with a 1 MiB tail, verification
/// cost half of single-connection goodput; with this one, about a tenth.
const EXTRA: usize = 64 << 10;
const _: () = assert!(EXTRA <= PERIOD, "the tail repeats the start of one cycle");
/// Reads of up to this many bytes always come in one [`Pattern::slice`],
/// from anywhere in the cycle: a send can point into the pattern instead of
/// copying it.
pub const ONE_SLICE: usize = EXTRA + 1;

/// Which way a stream flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server.
    ClientToServer,
    /// Server to client.
    ServerToClient,
}

/// The shared pattern buffer.
pub struct Pattern {
    data: Vec<u8>,
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Pattern {
    fn build() -> Pattern {
        let mut state = 0x6e65_7472_6967_0001; // "netrig" + version: fixed, both ends agree.
        let mut data: Vec<u8> = std::iter::repeat_with(|| splitmix64(&mut state).to_le_bytes())
            .flatten()
            .take(PERIOD)
            .collect();
        data.reserve_exact(EXTRA);
        data.extend_from_within(..EXTRA);
        Pattern { data }
    }

    /// The process-wide pattern, built on first use (~1 ms).
    pub fn get() -> &'static Pattern {
        static PATTERN: OnceLock<Pattern> = OnceLock::new();
        PATTERN.get_or_init(Pattern::build)
    }

    /// The bytes a stream starting at `start` carries from `offset`, at most `max` of them.
    pub fn slice(&self, start: u64, offset: u64, max: usize) -> &[u8] {
        let pos = ((start + offset) % PERIOD as u64) as usize;
        let n = max.min(self.data.len() - pos);
        &self.data[pos..pos + n]
    }

    /// Asks the CPU to bring the pattern's bytes at stream position `at` (a
    /// stream's next bytes) into its cache ahead of their use, without
    /// waiting for them: a hint, with no effect on what is read.
    pub fn prefetch(&self, at: u64) {
        let pos = (at % PERIOD as u64) as usize;
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let p = self.data[pos..].as_ptr().cast::<i8>();
            // SAFETY: a prefetch is a hint; `p` points into `data`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = pos;
    }

    /// Checks `data`, which arrived at stream `offset`, against the pattern.
    /// Returns the stream offset of the first wrong byte.
    pub fn verify(&self, start: u64, offset: u64, data: &[u8]) -> Result<(), u64> {
        let mut done = 0usize;
        while done < data.len() {
            let expected = self.slice(start, offset + done as u64, data.len() - done);
            let got = &data[done..done + expected.len()];
            if got != expected {
                let i = got
                    .iter()
                    .zip(expected)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Err(offset + (done + i) as u64);
            }
            done += expected.len();
        }
        Ok(())
    }
}

/// Start position in the pattern of one direction of one connection.
pub fn stream_start(connection: Uuid, dir: Direction) -> u64 {
    // Each half is mixed in turn (a plain XOR of the halves would give IDs
    // such as 1 and 2^64 the same start).
    let id = connection.as_u128();
    let mut state = id as u64;
    let mut h = splitmix64(&mut state) ^ (id >> 64) as u64;
    if dir == Direction::ServerToClient {
        h ^= 0x5555_5555_5555_5555;
    }
    splitmix64(&mut h) % PERIOD as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stream(start: u64, offset: u64, len: usize) -> Vec<u8> {
        let p = Pattern::get();
        let mut out = Vec::new();
        while out.len() < len {
            out.extend_from_slice(p.slice(start, offset + out.len() as u64, len - out.len()));
        }
        out
    }

    /// The pattern is part of the protocol: a peer built from another
    /// version must expect the same bytes. splitmix64 is checked against its
    /// published first output for seed 0, and the pattern against its own
    /// first and last words.
    #[test]
    fn the_pattern_is_splitmix64_from_the_fixed_seed() {
        let mut s = 0;
        let first: Vec<u64> = (0..3).map(|_| splitmix64(&mut s)).collect();
        assert_eq!(
            first,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
        let p = Pattern::get();
        assert_eq!(
            p.slice(0, 0, 16),
            0x345f_a611_fb19_f67e_14f4_b202_4f86_c13d_u128.to_be_bytes()
        );
        assert_eq!(
            p.slice(0, PERIOD as u64 - 8, 8),
            0x2773_643c_bde7_ea94_u64.to_be_bytes()
        );
    }

    /// A read of up to 64 KiB (the default buffer) comes in one slice even
    /// from the last byte of a cycle: the tail repeats the cycle's start.
    #[test]
    fn reads_near_the_end_of_a_cycle_need_no_wrap() {
        let p = Pattern::get();
        let last = PERIOD as u64 - 1;
        let s = p.slice(0, last, 64 << 10);
        assert_eq!(s.len(), 64 << 10);
        assert_eq!(p.slice(0, last, ONE_SLICE + 1).len(), ONE_SLICE);
        assert_eq!(&s[1..], p.slice(0, 0, (64 << 10) - 1));
    }

    /// Where each connection's streams start is protocol too: pinned for one ID.
    #[test]
    fn stream_starts_are_fixed_per_id_and_direction() {
        let id = Uuid::from_u128(0x1234_5678_9abc_def0_0fed_cba9_8765_4321);
        assert_eq!(stream_start(id, Direction::ClientToServer), 16_218);
        assert_eq!(stream_start(id, Direction::ServerToClient), 38_868);
    }

    /// Valid data longer than the tail, read across the end of a cycle,
    /// is checked in two slices and passes.
    #[test]
    fn valid_data_across_the_end_of_a_cycle_passes() {
        let start = 1000;
        let offset = (PERIOD - 1000 - 10) as u64;
        let data = stream(start, offset, EXTRA + 5000);
        assert_eq!(Pattern::get().verify(start, offset, &data), Ok(()));
        let mut bad = data.clone();
        bad[EXTRA + 4000] ^= 1;
        assert_eq!(
            Pattern::get().verify(start, offset, &bad),
            Err(offset + (EXTRA + 4000) as u64)
        );
    }

    #[test]
    fn periodic_and_deterministic() {
        let p = Pattern::get();
        assert_eq!(p.slice(0, 0, 16), p.slice(0, PERIOD as u64, 16));
        assert_eq!(p.slice(5, 0, 16), p.slice(0, 5, 16));
        assert_ne!(p.slice(0, 0, 16), p.slice(0, 1, 16));
    }

    #[test]
    fn connections_start_at_independent_points() {
        // Connections whose IDs differ in either half, or in one bit, start
        // apart: a stream misdelivered to another connection fails to verify.
        let ids = [
            Uuid::from_u128(1),
            Uuid::from_u128(2),
            Uuid::from_u128(3),
            Uuid::from_u128(1 << 64),
            Uuid::from_u128((1 << 64) | 1),
            Uuid::from_u128(u128::MAX),
            Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
        ];
        let mut starts = std::collections::HashSet::new();
        for id in ids {
            for dir in [Direction::ClientToServer, Direction::ServerToClient] {
                let s = stream_start(id, dir);
                assert!(s < PERIOD as u64);
                assert!(starts.insert(s), "{id} {dir:?} repeats start {s}");
            }
        }
        // Spread over the period: 1,000 random connections land in most of 16 bands.
        let mut bands = [0u32; 16];
        for _ in 0..1000 {
            let s = stream_start(Uuid::new_v4(), Direction::ClientToServer);
            bands[(s * 16 / PERIOD as u64) as usize] += 1;
        }
        assert!(bands.iter().all(|&n| n > 20), "{bands:?}");
    }

    #[test]
    fn directions_differ() {
        let id = Uuid::from_u128(42);
        assert_ne!(
            stream_start(id, Direction::ClientToServer),
            stream_start(id, Direction::ServerToClient)
        );
    }

    #[test]
    fn detects_flip_at_exact_offset() {
        let data = stream(1234, 1000, 300_000);
        let p = Pattern::get();
        assert_eq!(p.verify(1234, 1000, &data), Ok(()));
        let mut bad = data.clone();
        bad[299_000] ^= 0x01;
        assert_eq!(p.verify(1234, 1000, &bad), Err(1000 + 299_000));
    }

    #[test]
    fn detects_duplicated_segment() {
        // A 1448-byte segment delivered twice shifts everything after it.
        let mut data = stream(7, 0, 10_000);
        let dup: Vec<u8> = data[2896..4344].to_vec();
        data.splice(4344..4344, dup);
        assert_eq!(Pattern::get().verify(7, 0, &data[..10_000]), Err(4344));
    }

    proptest! {
        #[test]
        fn any_flip_is_found(start in 0u64..PERIOD as u64, offset in 0u64..(1 << 40),
                             len in 1usize..70_000, at in any::<usize>(), bit in 0u8..8) {
            let mut data = stream(start, offset, len);
            prop_assert_eq!(Pattern::get().verify(start, offset, &data), Ok(()));
            let i = at % len;
            data[i] ^= 1 << bit;
            prop_assert_eq!(Pattern::get().verify(start, offset, &data), Err(offset + i as u64));
        }
    }
}
