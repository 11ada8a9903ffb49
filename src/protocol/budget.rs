//! What one server session may still send, free of I/O: a token bucket for
//! the peak rate, a byte allowance and an absolute deadline. The server asks
//! it before every write or datagram batch, so a limit holds where the bytes
//! leave, whatever the request said (bursts, profiles and replies included).
//! Times are ns since the session started, given by the caller.

/// The answer to "may I send `n` bytes now?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Send them.
    Go,
    /// Wait this many ns and ask again.
    Wait(u64),
    /// Never: the session has used up a limit.
    Over(Exceeded),
}

/// Which limit a session used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    /// The byte allowance.
    #[error("server limit: max bytes per test reached")]
    Bytes,
    /// The session's absolute deadline.
    #[error("server limit: max duration reached")]
    Deadline,
}

/// Smallest bucket depth, bytes: one large write may leave at once.
pub const MIN_BURST_BYTES: u64 = 16 * 1024;
/// The bucket holds this much time's worth of the rate, ns.
pub const BURST_NS: u64 = 5_000_000;

/// A session's sending allowance.
#[derive(Debug, Clone)]
pub struct Budget {
    rate_bps: u64,
    /// Bucket depth, bytes.
    depth: u64,
    /// What may leave now, in bits × 10⁹ (so a ns of rate refills exactly
    /// `rate_bps`); negative after a send larger than the bucket.
    tokens: i128,
    last_ns: u64,
    bytes_left: u64,
    deadline_ns: u64,
}

impl Budget {
    /// At most `rate_bps` (peak, over any 5 ms beyond one 16 KiB write),
    /// `max_bytes` in all, and nothing at or after `deadline_ns`.
    pub fn new(rate_bps: u64, max_bytes: u64, deadline_ns: u64) -> Budget {
        let rate_bps = rate_bps.max(1);
        let depth = (u128::from(rate_bps) * u128::from(BURST_NS) / 8_000_000_000)
            .max(u128::from(MIN_BURST_BYTES)) as u64;
        Budget {
            rate_bps,
            depth,
            tokens: units(depth),
            last_ns: 0,
            bytes_left: max_bytes,
            deadline_ns,
        }
    }

    /// Asks to send `n` bytes at `now_ns`; on [`Admit::Go`] they are counted.
    pub fn admit(&mut self, now_ns: u64, n: u64) -> Admit {
        if now_ns >= self.deadline_ns {
            return Admit::Over(Exceeded::Deadline);
        }
        if n > self.bytes_left {
            return Admit::Over(Exceeded::Bytes);
        }
        let elapsed = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        let rate = i128::from(self.rate_bps);
        self.tokens = (self.tokens + i128::from(elapsed) * rate).min(units(self.depth));
        if self.tokens < 0 {
            // Whole ns, rounded up, so the next ask finds the bucket refilled.
            let wait = (-self.tokens + rate - 1) / rate;
            return Admit::Wait(u64::try_from(wait).unwrap_or(u64::MAX));
        }
        self.tokens -= units(n);
        self.bytes_left -= n;
        Admit::Go
    }

    /// Bytes still allowed.
    pub fn bytes_left(&self) -> u64 {
        self.bytes_left
    }

    /// The deadline, ns.
    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns
    }
}

/// Bytes in the bucket's units.
fn units(bytes: u64) -> i128 {
    i128::from(bytes) * 8_000_000_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Sends `chunk`-byte writes as fast as the budget allows until `until_ns`;
    /// returns the bytes sent.
    fn drive(b: &mut Budget, chunk: u64, until_ns: u64) -> u64 {
        let (mut now, mut sent) = (0u64, 0u64);
        while now < until_ns {
            match b.admit(now, chunk) {
                Admit::Go => sent += chunk,
                Admit::Wait(ns) => now += ns,
                Admit::Over(_) => break,
            }
        }
        sent
    }

    #[test]
    fn the_rate_holds_for_large_and_small_writes() {
        // 10 Mbit/s for 1 s is 1.25 MB, plus at most one bucket and one write.
        for chunk in [1u64, 1000, 65_536, 1 << 20] {
            let mut b = Budget::new(10_000_000, u64::MAX, u64::MAX);
            let sent = drive(&mut b, chunk, 1_000_000_000);
            let most = 1_250_000 + MIN_BURST_BYTES + chunk;
            assert!(sent <= most, "chunk {chunk}: {sent} > {most}");
            assert!(sent >= 1_250_000 - chunk, "chunk {chunk}: only {sent}");
        }
    }

    #[test]
    fn the_bucket_is_five_ms_of_the_rate_or_16_kib() {
        let b = Budget::new(8_000_000_000, u64::MAX, u64::MAX);
        assert_eq!(b.depth, 5_000_000);
        let b = Budget::new(8_000, u64::MAX, u64::MAX);
        assert_eq!(b.depth, MIN_BURST_BYTES);
        let b = Budget::new(26_214_400 + 8, u64::MAX, u64::MAX);
        assert_eq!(b.depth, MIN_BURST_BYTES);
    }

    #[test]
    fn a_write_larger_than_the_bucket_is_paid_back_before_the_next() {
        let mut b = Budget::new(8_000_000, u64::MAX, u64::MAX); // 1 byte per µs
        assert_eq!(b.admit(0, 1_016_384), Admit::Go);
        // 1,000,000 bytes of debt at 1 byte/µs: 1 s.
        assert_eq!(b.admit(0, 1), Admit::Wait(1_000_000_000));
        assert_eq!(b.admit(999_999_000, 1), Admit::Wait(1_000));
        assert_eq!(b.admit(999_999_999, 1), Admit::Wait(1));
        assert_eq!(b.admit(1_000_000_000, 1), Admit::Go);
    }

    #[test]
    fn bytes_and_deadline_are_absolute() {
        let mut b = Budget::new(u64::MAX / 2, 100, 1_000);
        assert_eq!(b.admit(0, 60), Admit::Go);
        assert_eq!(b.bytes_left(), 40);
        assert_eq!(b.admit(1, 41), Admit::Over(Exceeded::Bytes));
        assert_eq!(b.admit(2, 40), Admit::Go);
        assert_eq!(b.admit(3, 1), Admit::Over(Exceeded::Bytes));
        assert_eq!(b.admit(999, 0), Admit::Go);
        assert_eq!(b.admit(1_000, 0), Admit::Over(Exceeded::Deadline));
        assert_eq!(b.deadline_ns(), 1_000);
    }

    #[test]
    fn time_going_backwards_refills_nothing() {
        let mut b = Budget::new(8_000_000, u64::MAX, u64::MAX);
        assert_eq!(b.admit(1_000_000, 16_384 + 1_000), Admit::Go);
        assert!(matches!(b.admit(0, 1), Admit::Wait(_)));
    }

    proptest! {
        #[test]
        fn no_window_exceeds_the_rate_plus_one_bucket(
            rate in 1_000u64..10_000_000_000,
            chunk in 1u64..200_000,
            until_ms in 1u64..3_000,
        ) {
            let mut b = Budget::new(rate, u64::MAX, u64::MAX);
            let until = until_ms * 1_000_000;
            let sent = drive(&mut b, chunk, until);
            let bucket = (rate as f64 / 8.0 * BURST_NS as f64 / 1e9).max(MIN_BURST_BYTES as f64);
            let most = rate as f64 / 8.0 * until as f64 / 1e9 + bucket + chunk as f64;
            prop_assert!(sent as f64 <= most + 1.0, "{sent} > {most}");
        }
    }
}
