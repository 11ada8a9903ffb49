//! The server's one memory account (`serve --max-memory`): what a test or
//! a connection may allocate is charged before it is admitted, and given
//! back when it ends.
//!
//! `--max-memory` bounds two things. The resident memory loop 0 reads every
//! 20 ms is a backstop (`Limits::check_memory`); this account is the budget
//! every test and every identified connection draws from before it
//! allocates, so a burst of admissions can never be let in together while
//! the resident figure still lags behind. Each is charged the most it can
//! hold, by the same constants its code allocates by:
//! - a control connection, at its hello: [`CONTROL_BYTES`] (the frame it
//!   may be reading, the answers queued to a client that does not read);
//! - a data connection, when it is admitted: [`DATA_CONN_BYTES`] (its
//!   slot, its machine, what it read ahead) and [`BURST_RECORD_BYTES`] for
//!   each burst record it holds;
//! - every test: [`SESSION_BYTES`] (its session, conversation and record);
//! - TCP: the server's own status rows when `--get-server-output` asks for
//!   them, and the connection numbers its data hellos have claimed, a
//!   block of [`CLAIM_BLOCK`] at a time as the set grows;
//! - UDP, each stream of a group alike: the delay histogram ([`HDR_BYTES`])
//!   and its fixed bins when it receives; when it sends, its batch buffer,
//!   its lateness histogram, its per-interval counts and, precomputed, the
//!   whole departure schedule;
//! - request/response: its request and reply buffers and two histograms;
//! - a test of iperf3's protocol: its worker thread, its buffer, its
//!   streams and the results it exchanges ([`iperf3_bytes`]); an iperf2 TCP
//!   test: its record and its slot on a loop ([`IPERF2_TCP_BYTES`]).
//!
//! Connections yet to say who they are, and refused ones, are bounded by
//! count instead (`Limits::max_pending`), each holding its slot and at
//! most a 4 KiB first frame.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;

use crate::protocol::proto::{MAX_SERVER_ROWS, RrSpec, TcpSpec, TestSpec, UdpSpec};
use crate::protocol::refusal::{Drawn, Limit};

/// Charged for every test: its session (shared by its connections), its
/// conversation and its record. Its control connection is charged apart
/// ([`CONTROL_BYTES`]).
pub const SESSION_BYTES: u64 = 16 << 10;

/// A control connection once it said hello: the frame it may be reading
/// (a payload of at most 64 KiB, its header, and one read past it), the
/// answers queued to a client that does not read (its messages wait past
/// 64 KiB, and the answers to the last one may be a whole frame more), and
/// its slot and state.
pub const CONTROL_BYTES: u64 = {
    use crate::protocol::proto::{HEADER_LEN, MAX_PAYLOAD};
    let frame = (MAX_PAYLOAD + HEADER_LEN) as u64;
    let reading = frame + crate::net::ahead::AHEAD as u64;
    let queued = crate::server::limits::OUT_HIGH as u64 + frame;
    reading + queued + (8 << 10)
};

/// A data connection once admitted: its slot and stage, its machine, the
/// bytes it read ahead of its machine (one read, [`crate::net::ahead::AHEAD`])
/// and the small writes queued behind its acknowledgement. Its burst
/// records are charged apart ([`burst_bytes`]); its buffer is its loop's.
pub const DATA_CONN_BYTES: u64 = 8 << 10;

/// The smallest buffer an iperf3 test moves its blocks through.
pub const IPERF3_MIN_BUFFER: usize = 64 << 10;

/// An iperf2 TCP test: its record and its slot on an event loop (it reads
/// into its loop's buffer, on no thread of its own).
pub const IPERF2_TCP_BYTES: u64 = SESSION_BYTES + DATA_CONN_BYTES;

/// What a worker thread of a test holds of its stack: the pages its calls
/// touch, not the reservation.
const THREAD_BYTES: u64 = 64 << 10;

/// One stream of an iperf3 test: its socket's state and counts.
const IPERF3_STREAM_BYTES: u64 = 1 << 10;

/// One `hdrhistogram` of three significant digits that may grow to cover
/// the whole u64 range: 2,048 sub-buckets, half of them again for each of
/// about 53 doublings, 8 bytes a count (432 KiB), rounded up.
pub const HDR_BYTES: u64 = 448 << 10;

/// One TCP burst record as the server keeps it and queues it to the client
/// (the record, its side's name, its encoded frame).
pub const BURST_RECORD_BYTES: u64 = 256;

/// A TCP session remembers every connection number its data hellos have
/// claimed, for the session's life, so that a replayed hello is refused:
/// each number is 16 bytes and its control byte in a hash set at most 7/8
/// full and grown by doubling, so at most about 40 bytes.
pub const CLAIMED_ID_BYTES: u64 = 40;
/// Numbers charged at once ([`CLAIMED_ID_BYTES`] each): one draw from the
/// account per this many data connections, not per connection.
pub const CLAIM_BLOCK: u64 = 4096;

/// One departure of a precomputed schedule (time and size).
const DEPARTURE_BYTES: u64 = 16;

/// Bytes held in the account, shared by everything that draws from it.
#[derive(Debug, Default, Clone)]
pub struct Account {
    held: Arc<AtomicU64>,
}

/// Bytes drawn from an [`Account`], given back when dropped.
#[derive(Debug)]
pub struct Charge {
    held: Arc<AtomicU64>,
    bytes: u64,
}

impl Account {
    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(SeqCst)
    }

    /// Draws `bytes` for `what` if the account stays within `max`, or names
    /// the limit (nothing, as nothing is asked, is always drawn).
    pub fn take(&self, bytes: u64, max: u64, what: Drawn) -> Result<Charge, Limit> {
        let before = self.held.fetch_add(bytes, SeqCst);
        let charge = Charge {
            held: Arc::clone(&self.held),
            bytes,
        };
        if bytes > 0 && before.saturating_add(bytes) > max {
            drop(charge);
            return Err(Limit::MemoryBudget {
                max,
                held: before,
                asked: bytes,
                what,
            });
        }
        Ok(charge)
    }
}

impl Charge {
    /// Takes `other` into this charge: both are given back together.
    pub fn absorb(&mut self, mut other: Charge) {
        self.bytes += other.bytes;
        other.bytes = 0;
    }

    /// Bytes this charge holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, SeqCst);
    }
}

/// The most a test's session may hold, charged when it is admitted.
pub fn test_bytes(test: &TestSpec) -> u64 {
    SESSION_BYTES.saturating_add(match test {
        TestSpec::Tcp(s) => tcp_bytes(s),
        TestSpec::Udp(s) => udp_bytes(s),
        TestSpec::Rr(s) => rr_bytes(s),
    })
}

/// A TCP session's status rows (`--get-server-output`): one every
/// interval for the test's length, at most [`MAX_SERVER_ROWS`]. Burst
/// records are charged per connection ([`burst_bytes`]).
fn tcp_bytes(s: &TcpSpec) -> u64 {
    if s.server_interval_ms == 0 {
        return 0;
    }
    let most = MAX_SERVER_ROWS as u64;
    let rows = match s.duration_ms {
        0 => most,
        ms => (ms / s.server_interval_ms).saturating_add(2).min(most),
    };
    rows.saturating_mul(size_of::<crate::protocol::stats::IntervalRow>() as u64)
}

/// What a data connection's `bursts` burst records hold.
pub fn burst_bytes(bursts: u64) -> u64 {
    bursts.saturating_mul(BURST_RECORD_BYTES)
}

/// A UDP stream's receiving or sending end on the server.
fn udp_bytes(s: &UdpSpec) -> u64 {
    let sends = s.reverse;
    if !sends {
        // The delay histogram and the fixed bins in front of it (the
        // receive buffer is the loop's, shared by its sessions).
        return HDR_BYTES.saturating_add(u64::from(s.hist_bins).saturating_mul(8));
    }
    let stride = s
        .profile
        .as_ref()
        .map_or(s.size, |p| p.max_size())
        .max(crate::protocol::udp::header::HEADER_LEN as u32);
    let buffer = crate::udp::send::buffer_bytes(stride as usize, !s.sock.no_offload) as u64;
    let intervals = (crate::protocol::udp::sent::MAX_SENT_INTERVALS as u64) * 8;
    let schedule = match &s.profile {
        Some(p) if s.precompute => precomputed(p).saturating_mul(DEPARTURE_BYTES),
        _ => 0,
    };
    buffer
        .saturating_add(HDR_BYTES)
        .saturating_add(intervals)
        .saturating_add(schedule)
}

/// The most departures a precomputed profile holds: its bytes in its
/// smallest datagrams, one more for each step's rounding, and never more
/// than the sender keeps ([`crate::udp::send::MAX_PRECOMPUTED`], plus the
/// one that tells it the schedule is too long).
fn precomputed(p: &crate::protocol::udp::profile::Profile) -> u64 {
    let most = crate::udp::send::MAX_PRECOMPUTED as u64 + 1;
    let bytes = p.bytes_until(p.duration_ns()).max(0.0);
    let smallest = f64::from(p.min_size().max(1));
    let n = (bytes / smallest).ceil().min(most as f64) as u64;
    n.saturating_add(p.steps().len() as u64).min(most)
}

/// An iperf3 test of `streams` streams whose blocks are `len` bytes: its
/// worker thread, its buffer (at least 64 KiB), its streams, and the
/// results it reads from the client and writes back (each at most
/// [`crate::protocol::iperf3::MAX_RESULTS_JSON`]).
pub fn iperf3_bytes(len: u32, streams: u32) -> u64 {
    let results = 2 * u64::from(crate::protocol::iperf3::MAX_RESULTS_JSON);
    let buffer = u64::from(len).max(IPERF3_MIN_BUFFER as u64);
    SESSION_BYTES
        + THREAD_BYTES
        + results
        + buffer
        + u64::from(streams).saturating_mul(IPERF3_STREAM_BYTES)
}

/// A request/response session: its request and reply buffers and its
/// histograms (the run's and the interval's).
fn rr_bytes(s: &RrSpec) -> u64 {
    let buffers = u64::from(s.size).saturating_add(u64::from(s.reply));
    buffers.saturating_add(2 * HDR_BYTES)
}

#[cfg(test)]
#[path = "account_tests.rs"]
mod tests;
