//! The UDP test datagram: a fixed 32-byte header followed by pattern payload.
//!
//! Header (big endian): magic `NU` (2), version (1), flags (1), stream id (4),
//! sequence (8), send timestamp in ns of the sender's CLOCK_REALTIME (8),
//! payload length (4), reserved (4). The payload is the verification pattern
//! from a position derived from stream id and sequence, so every datagram can
//! be checked on its own, whatever order datagrams arrive in.

use thiserror::Error;

use crate::protocol::pattern::{ONE_SLICE, PERIOD, Pattern};

/// Header size in bytes.
pub const HEADER_LEN: usize = 32;
/// Magic at the start of every test datagram.
pub const MAGIC: [u8; 2] = *b"NU";
/// Datagram layout version.
pub const VERSION: u8 = 1;
/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;

/// Flag: a control datagram of the setup handshake, not test data.
pub const FLAG_HANDSHAKE: u8 = 0x01;

/// Why a datagram is not a valid test datagram.
#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
pub enum DatagramError {
    /// Shorter than the header or than the length it declares.
    #[error("datagram of {0} bytes is truncated")]
    Truncated(usize),
    /// Not a netrig datagram.
    #[error("not a netrig datagram")]
    BadMagic,
    /// A layout version this build does not know.
    #[error("unsupported datagram version {0}")]
    Version(u8),
}

/// The decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Flags (see `FLAG_*`).
    pub flags: u8,
    /// Stream the datagram belongs to.
    pub stream: u32,
    /// Sequence number, from 0.
    pub seq: u64,
    /// Sender's CLOCK_REALTIME at send, ns.
    pub send_ns: u64,
    /// Payload bytes after the header.
    pub payload_len: u32,
}

impl Header {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    pub fn write(&self, buf: &mut [u8]) {
        buf[0..2].copy_from_slice(&MAGIC);
        buf[2] = VERSION;
        buf[3] = self.flags;
        buf[4..8].copy_from_slice(&self.stream.to_be_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        buf[16..24].copy_from_slice(&self.send_ns.to_be_bytes());
        buf[24..28].copy_from_slice(&self.payload_len.to_be_bytes());
        buf[28..32].fill(0);
    }

    /// Reads a header, checking it against the datagram's real length.
    pub fn read(buf: &[u8]) -> Result<Header, DatagramError> {
        if buf.len() < HEADER_LEN {
            return Err(DatagramError::Truncated(buf.len()));
        }
        if buf[0..2] != MAGIC {
            return Err(DatagramError::BadMagic);
        }
        if buf[2] != VERSION {
            return Err(DatagramError::Version(buf[2]));
        }
        let u32_at = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[i..i + 8]);
            u64::from_be_bytes(b)
        };
        let h = Header {
            flags: buf[3],
            stream: u32_at(4),
            seq: u64_at(8),
            send_ns: u64_at(16),
            payload_len: u32_at(24),
        };
        if buf.len() != HEADER_LEN + h.payload_len as usize {
            return Err(DatagramError::Truncated(buf.len()));
        }
        Ok(h)
    }
}

fn payload_start(stream: u32, seq: u64) -> u64 {
    (u64::from(stream).wrapping_mul(0x9E37_79B9) ^ seq.wrapping_mul(7919)) % PERIOD as u64
}

/// Fills `payload` with the pattern for (stream, seq).
pub fn fill_payload(stream: u32, seq: u64, payload: &mut [u8]) {
    let p = Pattern::get();
    let start = payload_start(stream, seq);
    let mut done = 0;
    while done < payload.len() {
        let s = p.slice(start, done as u64, payload.len() - done);
        payload[done..done + s.len()].copy_from_slice(s);
        done += s.len();
    }
}

/// Bytes `from..from + len` of the payload [`fill_payload`] writes for
/// (stream, seq), as one slice of the pattern, so that a sender can point
/// at them instead of copying them: whole for any `len` up to
/// [`ONE_SLICE`], longer than any datagram's payload.
pub fn payload_slice(stream: u32, seq: u64, from: usize, len: usize) -> &'static [u8] {
    Pattern::get().slice(payload_start(stream, seq), from as u64, len)
}
const _: () = assert!(MAX_DATAGRAM <= ONE_SLICE);

/// Checks a payload; returns the offset of the first wrong byte.
pub fn verify_payload(stream: u32, seq: u64, payload: &[u8]) -> Result<(), u64> {
    Pattern::get().verify(payload_start(stream, seq), 0, payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn datagram(seq: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN + len];
        Header {
            flags: 0,
            stream: 9,
            seq,
            send_ns: 123,
            payload_len: len as u32,
        }
        .write(&mut b);
        fill_payload(9, seq, &mut b[HEADER_LEN..]);
        b
    }

    #[test]
    fn roundtrip_and_verify() {
        let b = datagram(42, 1000);
        let h = Header::read(&b).unwrap();
        assert_eq!(
            (h.stream, h.seq, h.send_ns, h.payload_len),
            (9, 42, 123, 1000)
        );
        assert_eq!(verify_payload(9, 42, &b[HEADER_LEN..]), Ok(()));
        assert!(
            verify_payload(9, 43, &b[HEADER_LEN..]).is_err(),
            "payload is per sequence"
        );
        // The slice a sender points at is what the payload holds.
        assert_eq!(payload_slice(9, 42, 24, 976), &b[HEADER_LEN + 24..]);
        let mut c = b.clone();
        c[HEADER_LEN + 500] ^= 0x80;
        assert_eq!(verify_payload(9, 42, &c[HEADER_LEN..]), Err(500));
    }

    #[test]
    fn rejects_bad_datagrams() {
        let b = datagram(1, 10);
        assert_eq!(Header::read(&b[..5]), Err(DatagramError::Truncated(5)));
        assert_eq!(
            Header::read(&b[..b.len() - 1]),
            Err(DatagramError::Truncated(b.len() - 1))
        );
        let mut c = b.clone();
        c[0] = b'X';
        assert_eq!(Header::read(&c), Err(DatagramError::BadMagic));
        c = b.clone();
        c[2] = 7;
        assert_eq!(Header::read(&c), Err(DatagramError::Version(7)));
    }

    proptest! {
        #[test]
        fn read_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = Header::read(&bytes);
        }
    }
}
