//! The server's one memory account (`serve --max-memory`): what a test may
//! allocate is charged before it is admitted, and given back when it ends.
//!
//! `--max-memory` bounds two things. The resident memory loop 0 reads every
//! 20 ms is a backstop (`Limits::check_memory`); this account is the budget
//! every test draws from before it allocates, so a burst of admissions can
//! never be let in together while the resident figure still lags behind.
//! A test is charged the most its session can hold, computed from its spec
//! by the same constants its code allocates by:
//! - every test: [`SESSION_BYTES`] (its control connection's state and the
//!   answers queued to it, capped at 64 KiB, its conversation, its record);
//! - TCP: the server's own status rows when `--get-server-output` asks for
//!   them, and [`BURST_RECORD_BYTES`] for each burst record a data connection
//!   holds, charged when the connection is admitted;
//! - UDP, each stream of a group alike: the delay histogram ([`HDR_BYTES`])
//!   and its fixed bins when it receives; when it sends, its batch buffer,
//!   its lateness histogram, its per-interval counts and, precomputed, the
//!   whole departure schedule;
//! - request/response: its request and reply buffers and two histograms.
//!
//! Connections are bounded by count instead (`--max-conns`, the pending
//! cap, a first frame of at most 4 KiB), each holding a few KiB.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;

use crate::protocol::proto::{MAX_SERVER_ROWS, RrSpec, TcpSpec, TestSpec, UdpSpec};
use crate::protocol::refusal::Limit;

/// Charged for every test: its control connection (state, read-ahead and
/// the answers queued to a client that does not read, at most 64 KiB), its
/// conversation and its session's record.
pub const SESSION_BYTES: u64 = 96 << 10;

/// One `hdrhistogram` of three significant digits that may grow to cover
/// the whole u64 range: 2,048 sub-buckets, half of them again for each of
/// about 53 doublings, 8 bytes a count (432 KiB), rounded up.
pub const HDR_BYTES: u64 = 448 << 10;

/// One TCP burst record as the server keeps it and queues it to the client
/// (the record, its side's name, its encoded frame).
pub const BURST_RECORD_BYTES: u64 = 256;

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

    /// Draws `bytes` if the account stays within `max`, or names the limit
    /// (nothing, as nothing is asked, is always drawn).
    pub fn take(&self, bytes: u64, max: u64) -> Result<Charge, Limit> {
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
            });
        }
        Ok(charge)
    }
}

impl Charge {
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

/// A request/response session: its request and reply buffers and its
/// histograms (the run's and the interval's).
fn rr_bytes(s: &RrSpec) -> u64 {
    let buffers = u64::from(s.size).saturating_add(u64::from(s.reply));
    buffers.saturating_add(2 * HDR_BYTES)
}

#[cfg(test)]
#[path = "account_tests.rs"]
mod tests;
