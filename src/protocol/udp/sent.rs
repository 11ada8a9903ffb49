//! What a UDP sender reports about itself at the end of a stream: its own
//! account of what it sent, per interval, and whether it kept to its
//! schedule. Pure data, shared by the sender, the receiving side and the
//! congestion analysis.

use serde::{Deserialize, Serialize};

/// What the sender did, reported to the receiving side at the end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderReport {
    /// Datagrams handed to the kernel.
    pub packets: u64,
    /// Bytes handed to the kernel (UDP payload).
    pub bytes: u64,
    /// Seconds from first to last send.
    pub duration_secs: f64,
    /// bytes × 8 / duration.
    pub achieved_bps: f64,
    /// Departure lateness versus the schedule, µs: p50.
    pub late_p50_us: f64,
    /// Departure lateness p99, µs.
    pub late_p99_us: f64,
    /// Departure lateness max, µs.
    pub late_max_us: f64,
    /// Mean |actual inter-departure − scheduled gap|, µs.
    pub gap_error_mean_us: f64,
    /// Times the schedule was re-anchored after a stall.
    pub slips: u64,
    /// Send calls that failed (e.g. ENOBUFS, ICMP-refused); the datagrams count as not sent.
    pub send_errors: u64,
    /// Bytes the schedule asked for up to when sending stopped.
    #[serde(default)]
    pub asked_bytes: u64,
    /// The schedule's rate over the same time, bit/s.
    #[serde(default)]
    pub asked_bps: f64,
    /// Less than 99% of the asked bytes left this sender: it could not keep
    /// up, and the path was never offered the asked rate.
    #[serde(default)]
    pub sender_limited: bool,
    /// Bytes sent in each interval of `interval_ms` from the first
    /// departure's schedule origin (empty when not kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sent_intervals: Vec<u64>,
    /// The length of those intervals, ms.
    #[serde(default)]
    pub interval_ms: u64,
}

/// Share of the asked bytes below which a sender counts as limited.
pub const SENDER_LIMITED_BELOW: f64 = 0.99;

/// Most per-interval counts a sender reports (they travel in one control
/// frame); a longer series is dropped rather than cut.
pub const MAX_SENT_INTERVALS: usize = 4096;

/// Whether a sender that sent `sent` of `asked` bytes fell short of its
/// schedule by more than 1%.
pub fn sender_limited(sent: u64, asked: u64) -> bool {
    (sent as f64) < asked as f64 * SENDER_LIMITED_BELOW
}

#[cfg(test)]
mod limited_tests {
    use super::sender_limited;

    #[test]
    fn more_than_one_percent_short_is_sender_limited() {
        assert!(!sender_limited(990, 1000));
        assert!(sender_limited(989, 1000));
        assert!(!sender_limited(1000, 1000));
        assert!(!sender_limited(1200, 1000));
        assert!(!sender_limited(0, 0));
    }
}
