//! The mesh probe and its reply on the wire, free of I/O.
//!
//! A probe carries the prober's run (`epoch`, random at start), a sequence
//! number and its send time. The reply echoes them, adds the responder's
//! receive and send times (for the clock offset, NTP's on-wire method as in
//! [`crate::protocol::udp::clock`]), how many distinct probes of this run it has
//! received, and which of the 64 probes before this one it received: from
//! that the prober tells a probe lost on the way up (the responder never
//! saw it) from one lost on the way down (the reply was lost).
//!
//! Both are [`LEN`] bytes: a probe is padded to the reply's size, so a
//! responder never sends more than it was sent (no amplification towards a
//! forged source address).

use thiserror::Error;

/// Every mesh datagram's size.
pub const LEN: usize = 64;
const MAGIC: [u8; 4] = *b"nrMP";
const VERSION: u8 = 1;
const KIND_PROBE: u8 = 1;
const KIND_REPLY: u8 = 2;
/// Reply flag: this probe's number had arrived before.
const FLAG_DUPLICATE: u8 = 1;

/// A probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The prober's run.
    pub epoch: u64,
    /// The probe's number in its run, from 0.
    pub seq: u64,
    /// Prober's send time, CLOCK_REALTIME ns.
    pub t1: u64,
}

/// A reply to a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The probe's run, number and send time, echoed.
    pub epoch: u64,
    pub seq: u64,
    pub t1: u64,
    /// Responder's receive and send times, CLOCK_REALTIME ns.
    pub t2: u64,
    pub t3: u64,
    /// Distinct probes of this run the responder has received.
    pub received: u64,
    /// Bit i: the responder received probe `seq - 1 - i`.
    pub before: u64,
    /// This probe's number had reached the responder before (duplicated on
    /// the way up).
    pub duplicate: bool,
}

/// A datagram read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram {
    Probe(Probe),
    Reply(Reply),
}

/// Why a datagram is not a mesh datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("{0} bytes, not {LEN}")]
    Length(usize),
    #[error("not a netrig mesh datagram")]
    Magic,
    #[error("mesh protocol version {0}, not {VERSION}")]
    Version(u8),
    #[error("unknown mesh datagram kind {0}")]
    Kind(u8),
}

fn head(kind: u8, flags: u8) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[..4].copy_from_slice(&MAGIC);
    b[4] = VERSION;
    b[5] = kind;
    b[6] = flags;
    b
}

fn put(b: &mut [u8; LEN], words: &[u64]) {
    for (i, w) in words.iter().enumerate() {
        b[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_be_bytes());
    }
}

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[8 + 8 * i..16 + 8 * i]);
    u64::from_be_bytes(w)
}

impl Probe {
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = head(KIND_PROBE, 0);
        put(&mut b, &[self.epoch, self.seq, self.t1]);
        b
    }
}

impl Reply {
    pub fn encode(&self) -> [u8; LEN] {
        let flags = if self.duplicate { FLAG_DUPLICATE } else { 0 };
        let mut b = head(KIND_REPLY, flags);
        put(
            &mut b,
            &[
                self.epoch,
                self.seq,
                self.t1,
                self.t2,
                self.t3,
                self.received,
                self.before,
            ],
        );
        b
    }
}

/// Reads a datagram.
pub fn decode(b: &[u8]) -> Result<Datagram, WireError> {
    if b.len() != LEN {
        return Err(WireError::Length(b.len()));
    }
    if b[..4] != MAGIC {
        return Err(WireError::Magic);
    }
    if b[4] != VERSION {
        return Err(WireError::Version(b[4]));
    }
    match b[5] {
        KIND_PROBE => Ok(Datagram::Probe(Probe {
            epoch: word(b, 0),
            seq: word(b, 1),
            t1: word(b, 2),
        })),
        KIND_REPLY => Ok(Datagram::Reply(Reply {
            epoch: word(b, 0),
            seq: word(b, 1),
            t1: word(b, 2),
            t2: word(b, 3),
            t3: word(b, 4),
            received: word(b, 5),
            before: word(b, 6),
            duplicate: b[6] & FLAG_DUPLICATE != 0,
        })),
        k => Err(WireError::Kind(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bad_datagrams_are_named() {
        let p = Probe {
            epoch: 1,
            seq: 2,
            t1: 3,
        }
        .encode();
        assert_eq!(decode(&p[..63]), Err(WireError::Length(63)));
        let mut x = p;
        x[0] = b'X';
        assert_eq!(decode(&x), Err(WireError::Magic));
        let mut x = p;
        x[4] = 2;
        assert_eq!(decode(&x), Err(WireError::Version(2)));
        let mut x = p;
        x[5] = 3;
        assert_eq!(decode(&x), Err(WireError::Kind(3)));
        // The probe is as long as the reply: no amplification.
        assert_eq!(p.len(), LEN);
        assert_eq!(&p[..8], b"nrMP\x01\x01\x00\x00");
        assert_eq!(&p[8..16], &1u64.to_be_bytes());
        assert_eq!(&p[32..], &[0u8; 32]);
    }

    proptest! {
        #[test]
        fn round_trip(w in proptest::array::uniform7(any::<u64>()), dup: bool) {
            let p = Probe { epoch: w[0], seq: w[1], t1: w[2] };
            prop_assert_eq!(decode(&p.encode()), Ok(Datagram::Probe(p)));
            let r = Reply {
                epoch: w[0], seq: w[1], t1: w[2], t2: w[3], t3: w[4],
                received: w[5], before: w[6], duplicate: dup,
            };
            prop_assert_eq!(decode(&r.encode()), Ok(Datagram::Reply(r)));
        }
    }
}
