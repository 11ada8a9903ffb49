//! iperf2's wire format, as far as a receiving server needs it: the client
//! header a TCP test's first bytes and every UDP datagram carry, the UDP
//! datagram's sequence number, the receiver's loss/order/jitter count, and
//! the server report datagram that answers a UDP test's final datagram.
//!
//! Facts from iperf 2.1.8's sources (cited, not copied):
//! - `include/payloads.h`: all fields big-endian 32-bit words.
//!   `client_hdr_v1` is six words (flags, numThreads, mPort, mBufLen,
//!   mWinBand, mAmount); `client_hdrext` follows (type, length, two 16-bit
//!   flag words, version...). The base flag bits: HEADER_VERSION1
//!   0x80000000 (a dual test, `-d`/`-r`: the server connects back),
//!   HEADER_EXTEND 0x40000000, HEADER_UDPTESTS, HEADER_KEYCHECK
//!   0x10000000 (`--permit-key`), HEADER_SEQNO64B 0x08000000,
//!   HEADER_VERSION2, HEADER_BOUNCEBACK 0x00800000, HEADER_LEN_BIT
//!   0x00010000 with the header's length in HEADER_LEN_MASK 0x1FE (at most
//!   MAX_HEADER_LEN 256), RUN_NOW 1. The extended flags HEADER_REVERSE
//!   0x0400 and HEADER_FULLDUPLEX 0x0800 ask the server to send.
//!   `UDP_datagram` is id, tv_sec, tv_usec, id2 (the upper half of a 64-bit
//!   sequence number under HEADER_SEQNO64B); `server_hdr` is `server_hdr_v1`
//!   (flags, total_len1/2, stop_sec/usec, error_cnt, outorder_cnt,
//!   datagrams, jitter1/2), `server_hdr_extension` (15 words) and
//!   `server_hdr_extension2` (the upper halves of the three counts).
//! - `src/Server.cpp` (`ReadPacketID`): a negative sequence number ends a
//!   UDP test; its magnitude is one past the last data datagram's.
//! - `src/Reporter.c` (`write_UDP_AckFIN`, and the client's reading of
//!   it): the answer is a `UDP_datagram` then a `server_hdr`, flags
//!   HEADER_VERSION1 | HEADER_SEQNO64B, jitter and stop time as whole
//!   seconds plus microseconds.
//!
//! By experiment with iperf 2.1.8: a TCP test sends its header as the start
//! of its first write and never waits for an answer, so the bytes the
//! client reports are all the bytes the connection carries; UDP sequence
//! numbers start at 1, and the client's "Lost/Total" shows the report's
//! `error_cnt`/`datagrams`.
//!
//! Protocol layer: times are arguments.

use thiserror::Error;

pub const HEADER_VERSION1: u32 = 0x8000_0000;
pub const HEADER_EXTEND: u32 = 0x4000_0000;
pub const HEADER_KEYCHECK: u32 = 0x1000_0000;
pub const HEADER_SEQNO64B: u32 = 0x0800_0000;
pub const HEADER_BOUNCEBACK: u32 = 0x0080_0000;
pub const HEADER_LEN_BIT: u32 = 0x0001_0000;
pub const HEADER_LEN_MASK: u32 = 0x0000_01FE;
/// Every base flag bit iperf2 defines (payloads.h); a word with others set
/// is not an iperf2 header.
const KNOWN_FLAGS: u32 = 0xFF00_0000 | HEADER_BOUNCEBACK | 0x0002_0000 | HEADER_LEN_BIT | 0x1FF;
pub const MAX_HEADER_LEN: u32 = 256;
pub const EXT_REVERSE: u16 = 0x0400;
pub const EXT_FULLDUPLEX: u16 = 0x0800;

/// `client_hdr_v1`'s bytes.
pub const V1_LEN: usize = 24;
/// The client header up to and including the extended flag words.
pub const EXT_LEN: usize = 36;
/// `UDP_datagram`'s bytes, before a UDP datagram's client header.
pub const DATAGRAM_LEN: usize = 16;
/// The server report datagram: `UDP_datagram` + `server_hdr`.
pub const REPORT_LEN: usize = DATAGRAM_LEN + 4 * (10 + 15 + 3);

/// Why a client header is refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HeaderError {
    #[error("too short for an iperf2 client header ({0} bytes)")]
    Short(usize),
    #[error("not an iperf2 client header (flags {0:#010x})")]
    NotIperf2(u32),
    #[error("iperf2 header length {0} out of range (24..=256)")]
    Length(u32),
    #[error("{0} is not served: {1}")]
    Unsupported(&'static str, &'static str),
}

/// How long or how much the client means to send (`mAmount`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// `-t`, in hundredths of a second (a negative `mAmount`).
    Centis(u32),
    /// `-n`, bytes.
    Bytes(u32),
    /// A header without the field's meaning (flags 0: an old client).
    Unset,
}

/// What a client header says that matters to this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientHeader {
    pub flags: u32,
    pub threads: u32,
    pub amount: Amount,
    /// The first extended flag word (`-R`, `--full-duplex`), 0 without one.
    pub ext_flags: u16,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

impl ClientHeader {
    /// How many bytes of a header whose first word is `flags` to read
    /// before [`ClientHeader::parse`]: the extended flags when it has them.
    pub fn wanted(flags: u32) -> usize {
        let declared = if flags & HEADER_LEN_BIT != 0 {
            (flags & HEADER_LEN_MASK) as usize
        } else if flags & HEADER_EXTEND != 0 {
            EXT_LEN
        } else {
            V1_LEN
        };
        declared.clamp(V1_LEN, EXT_LEN)
    }

    /// Reads a client header (a TCP test's first bytes, or a UDP
    /// datagram's after its [`DATAGRAM_LEN`]) and refuses what this server
    /// cannot serve: it only receives.
    pub fn parse(b: &[u8]) -> Result<ClientHeader, HeaderError> {
        let word = |i: usize| be32(b, i * 4).ok_or(HeaderError::Short(b.len()));
        let flags = word(0)?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(HeaderError::NotIperf2(flags));
        }
        if flags & HEADER_LEN_BIT != 0 {
            let len = flags & HEADER_LEN_MASK;
            if !(V1_LEN as u32..=MAX_HEADER_LEN).contains(&len) {
                return Err(HeaderError::Length(len));
            }
        }
        if b.len() < V1_LEN {
            return Err(HeaderError::Short(b.len()));
        }
        if flags & HEADER_VERSION1 != 0 {
            return Err(HeaderError::Unsupported(
                "-d/-r (dual test)",
                "the server would have to connect back to the client",
            ));
        }
        if flags & HEADER_BOUNCEBACK != 0 {
            return Err(HeaderError::Unsupported(
                "--bounceback",
                "the server would have to echo",
            ));
        }
        if flags & HEADER_KEYCHECK != 0 {
            return Err(HeaderError::Unsupported(
                "--permit-key",
                "netrig's key is its own",
            ));
        }
        let ext_flags = if flags & HEADER_EXTEND != 0 && Self::wanted(flags) >= EXT_LEN {
            let w = word(8)?;
            (w >> 16) as u16
        } else {
            0
        };
        if ext_flags & (EXT_REVERSE | EXT_FULLDUPLEX) != 0 {
            return Err(HeaderError::Unsupported(
                "-R/--full-duplex",
                "the server would have to send",
            ));
        }
        let amount = match word(5)? as i32 {
            _ if flags == 0 => Amount::Unset,
            0 => Amount::Unset,
            a if a < 0 => Amount::Centis(a.unsigned_abs()),
            a => Amount::Bytes(a.unsigned_abs()),
        };
        Ok(ClientHeader {
            flags,
            threads: word(1)?,
            amount,
            ext_flags,
        })
    }

    /// The test for a log line: "-t 2.00 s, 1 of 2 streams".
    pub fn describe(&self) -> String {
        let amount = match self.amount {
            Amount::Centis(c) => format!("-t {:.2} s", f64::from(c) / 100.0),
            Amount::Bytes(n) => format!("-n {n} bytes"),
            Amount::Unset => "no length given".into(),
        };
        format!("{amount}, -P {}", self.threads.max(1))
    }
}

/// A UDP datagram's sequence number and send time (`UDP_datagram`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Negative on the final datagram.
    pub seq: i64,
    pub sec: u32,
    pub usec: u32,
}

impl Datagram {
    /// Reads a datagram's sequence number: 64 bits when its own header
    /// says HEADER_SEQNO64B, else a signed 32-bit one. `None` if too short.
    pub fn read(d: &[u8]) -> Option<Datagram> {
        let id = be32(d, 0)?;
        let id2 = be32(d, 12)?;
        let wide = be32(d, DATAGRAM_LEN).is_some_and(|f| f & HEADER_SEQNO64B != 0);
        let seq = if wide {
            ((u64::from(id2) << 32) | u64::from(id)) as i64
        } else {
            i64::from(id as i32)
        };
        Some(Datagram {
            seq,
            sec: be32(d, 4)?,
            usec: be32(d, 8)?,
        })
    }

    /// The send time in seconds.
    pub fn sent(&self) -> f64 {
        f64::from(self.sec) + f64::from(self.usec) / 1e6
    }
}

/// Sequence numbers remembered for telling duplicates from late arrivals.
const WINDOW: u64 = 1 << 16;

/// A UDP test's receiver count.
#[derive(Debug, Clone)]
pub struct UdpCount {
    /// Data datagrams received, duplicates included.
    pub received: u64,
    pub bytes: u64,
    pub highest: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// RFC 3550's interarrival jitter (A.8), seconds.
    pub jitter: f64,
    last_transit: Option<f64>,
    seen: Vec<u64>,
}

impl Default for UdpCount {
    fn default() -> Self {
        UdpCount {
            received: 0,
            bytes: 0,
            highest: 0,
            out_of_order: 0,
            duplicates: 0,
            jitter: 0.0,
            last_transit: None,
            seen: vec![0; (WINDOW / 64) as usize],
        }
    }
}

impl UdpCount {
    /// Counts a data datagram: `seq` from 1, `transit` its arrival time
    /// less its send time (seconds; clocks apart only shift it).
    pub fn datagram(&mut self, seq: u64, len: usize, transit: f64) {
        self.received += 1;
        self.bytes += len as u64;
        if seq + WINDOW > self.highest {
            let (word, bit) = (((seq % WINDOW) / 64) as usize, seq % 64);
            if seq > self.highest {
                // Forget the slots the window moves past.
                let from = self.highest.max(seq.saturating_sub(WINDOW)) + 1;
                // At most WINDOW - 1 slots: a jump past the whole window
                // clears every slot but seq's own, which is set below.
                for s in from..seq {
                    self.seen[((s % WINDOW) / 64) as usize] &= !(1 << (s % 64));
                }
            } else if self.seen[word] & (1 << bit) != 0 {
                self.duplicates += 1;
                return;
            }
            self.seen[word] |= 1 << bit;
        }
        if seq < self.highest {
            self.out_of_order += 1;
        }
        self.highest = self.highest.max(seq);
        if let Some(prev) = self.last_transit {
            self.jitter += ((transit - prev).abs() - self.jitter) / 16.0;
        }
        self.last_transit = Some(transit);
    }

    /// The datagrams the client numbered: the highest seen, or one less
    /// than the final datagram's number if that says more were sent.
    pub fn total(&self, fin: Option<u64>) -> u64 {
        self.highest.max(fin.map_or(0, |f| f.saturating_sub(1)))
    }

    /// Numbered datagrams that never arrived.
    pub fn lost(&self, fin: Option<u64>) -> u64 {
        let unique = self.received - self.duplicates;
        self.total(fin).saturating_sub(unique)
    }
}

/// The figures a server report datagram carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerReport {
    pub bytes: u64,
    /// From the first datagram to the last, seconds.
    pub secs: f64,
    pub lost: u64,
    pub out_of_order: u64,
    pub datagrams: u64,
    pub jitter: f64,
}

/// Seconds as whole seconds and microseconds, as the report carries them.
fn split(s: f64) -> (u32, u32) {
    let s = s.max(0.0);
    let whole = s.trunc();
    (whole as u32, ((s - whole) * 1e6) as u32)
}

impl ServerReport {
    /// From a finished count.
    pub fn of(c: &UdpCount, fin: Option<u64>, secs: f64) -> ServerReport {
        ServerReport {
            bytes: c.bytes,
            secs,
            lost: c.lost(fin),
            out_of_order: c.out_of_order,
            datagrams: c.total(fin),
            jitter: c.jitter,
        }
    }

    /// The datagram answering a final datagram.
    pub fn encode(&self) -> [u8; REPORT_LEN] {
        let mut out = [0u8; REPORT_LEN];
        let mut put = |word: usize, v: u32| {
            let at = DATAGRAM_LEN + 4 * word;
            out[at..at + 4].copy_from_slice(&v.to_be_bytes());
        };
        let hi = |v: u64| (v >> 32) as u32;
        let lo = |v: u64| v as u32;
        let (stop_s, stop_us) = split(self.secs);
        let (jit_s, jit_us) = split(self.jitter);
        put(0, HEADER_VERSION1 | HEADER_SEQNO64B);
        put(1, hi(self.bytes));
        put(2, lo(self.bytes));
        put(3, stop_s);
        put(4, stop_us);
        put(5, lo(self.lost));
        put(6, lo(self.out_of_order));
        put(7, lo(self.datagrams));
        put(8, jit_s);
        put(9, jit_us);
        // server_hdr_extension (words 10..25) stays zero: without
        // SERVER_HEADER_EXTEND the client does not read it.
        put(25, hi(self.lost));
        put(26, hi(self.out_of_order));
        put(27, hi(self.datagrams));
        out
    }

    /// Reads a report datagram (as an iperf2 client does), `None` if it is
    /// too short.
    pub fn decode(d: &[u8]) -> Option<ServerReport> {
        let w = |i: usize| be32(d, DATAGRAM_LEN + 4 * i);
        let wide = w(0)? & HEADER_SEQNO64B != 0;
        let join = |hi: usize, lo: usize| -> Option<u64> {
            let h = if wide { u64::from(w(hi)?) } else { 0 };
            Some((h << 32) | u64::from(w(lo)?))
        };
        Some(ServerReport {
            bytes: (u64::from(w(1)?) << 32) | u64::from(w(2)?),
            secs: f64::from(w(3)?) + f64::from(w(4)?) / 1e6,
            lost: join(25, 5)?,
            out_of_order: join(26, 6)?,
            datagrams: join(27, 7)?,
            jitter: f64::from(w(8)?) + f64::from(w(9)?) / 1e6,
        })
    }
}

#[cfg(test)]
mod tests;
