//! iperf3's UDP datagrams: the connect message and reply, the header every
//! datagram starts with, and the receiver's loss, order and jitter count,
//! so that an iperf3 client and this server report the same figures.
//!
//! From iperf3's `src/iperf.h` (UDP_CONNECT_MSG "6789", UDP_CONNECT_REPLY
//! "9876", in host order on the wire: the bytes a little-endian host
//! writes) and `src/iperf_udp.c`: `iperf_udp_send` writes seconds and
//! microseconds (32 bits each, big-endian) and a counter from 1, 32 or,
//! with `--udp-counters-64bit`, 64 bits; `iperf_udp_recv` counts a gap in
//! the counter as lost, a counter at or below the highest seen as out of
//! order (taking one back from the lost), and keeps RFC 1889's jitter
//! (A.8: J += (|D| - J)/16) over transit times.
//!
//! Protocol layer: arrival times are arguments.

/// The client's connect datagram's bytes, as a little-endian iperf3 sends
/// them ("6789" written as a host-order integer).
pub const CONNECT_MSG: [u8; 4] = 0x3637_3839u32.to_le_bytes();
/// The server's reply ("9876").
pub const CONNECT_REPLY: [u8; 4] = 0x3938_3736u32.to_le_bytes();
/// iperf3's older connect message, 123456789, which its servers still take.
pub const LEGACY_CONNECT_MSG: [u8; 4] = 123_456_789u32.to_le_bytes();

/// Whether a datagram is a client's connect message.
pub fn is_connect(d: &[u8]) -> bool {
    d == CONNECT_MSG || d == LEGACY_CONNECT_MSG
}

/// The start of every data datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub sec: u32,
    pub usec: u32,
    /// From 1.
    pub count: u64,
}

impl Header {
    /// Bytes of the header: 12, or 16 with 64-bit counters.
    pub fn len(wide: bool) -> usize {
        if wide { 16 } else { 12 }
    }

    /// Writes the header at the start of `buf` (which must hold it).
    pub fn write(&self, wide: bool, buf: &mut [u8]) {
        buf[..4].copy_from_slice(&self.sec.to_be_bytes());
        buf[4..8].copy_from_slice(&self.usec.to_be_bytes());
        if wide {
            buf[8..16].copy_from_slice(&self.count.to_be_bytes());
        } else {
            buf[8..12].copy_from_slice(&(self.count as u32).to_be_bytes());
        }
    }

    /// Reads a datagram's header, `None` if it is too short.
    pub fn read(wide: bool, d: &[u8]) -> Option<Header> {
        let be32 = |i: usize| {
            d.get(i..i + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let count = if wide {
            let b = d.get(8..16)?;
            u64::from_be_bytes(b.try_into().ok()?)
        } else {
            u64::from(be32(8)?)
        };
        Some(Header {
            sec: be32(0)?,
            usec: be32(4)?,
            count,
        })
    }

    /// The send time, seconds.
    pub fn secs(&self) -> f64 {
        f64::from(self.sec) + f64::from(self.usec) / 1e6
    }
}

/// A receiving stream's count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Receiver {
    pub bytes: u64,
    /// Highest counter seen (iperf3's `packet_count`).
    pub packets: u64,
    /// Counters skipped, less late arrivals (`cnt_error`).
    pub lost: u64,
    pub out_of_order: u64,
    /// Seconds.
    pub jitter: f64,
    prev_transit: Option<f64>,
}

impl Receiver {
    /// Counts one datagram of `len` bytes with header `h` that arrived at
    /// `arrival` seconds (any clock; only differences matter).
    pub fn on_datagram(&mut self, len: usize, h: Header, arrival: f64) {
        self.bytes += len as u64;
        if h.count > self.packets {
            self.lost += h.count - 1 - self.packets;
            self.packets = h.count;
        } else {
            self.out_of_order += 1;
            self.lost = self.lost.saturating_sub(1);
        }
        let transit = arrival - h.secs();
        let prev = self.prev_transit.unwrap_or(transit);
        let d = (transit - prev).abs();
        self.prev_transit = Some(transit);
        self.jitter += (d - self.jitter) / 16.0;
    }
}
