//! When a connection's sender may write: iperf2-style bursts (a burst of
//! `size` bytes every period, each timed by both ends) and ctsTraffic's
//! rate limit (a per-period allowance). Part of the sans-IO machine.

use std::time::{Duration, Instant};

use crate::protocol::proto::{BurstSpec, TcpBurst};

/// The time as the I/O layer read it: monotonic for intervals, wall clock
/// (CLOCK_REALTIME ns) for trip times across hosts.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Monotonic time.
    pub mono: Instant,
    /// CLOCK_REALTIME, ns: read only for a machine that logs bursts
    /// ([`super::machine::Conn::wants_real_time`]), 0 for any other.
    pub real_ns: u64,
}

/// Further than any burst period a test can use (a year).
pub(super) const FAR: Duration = Duration::from_secs(365 * 86_400);

/// One burst's progress on the sending or receiving side.
#[derive(Debug, Default)]
pub(super) struct BurstLog {
    /// Bursts so far, the last one in progress.
    pub(super) done: Vec<TcpBurst>,
    /// Read-size bins of the burst in progress (receiver).
    pub(super) bins: Vec<(u64, u64)>,
}

/// Burst mode: one burst of `size` bytes every `period`.
#[derive(Debug)]
pub(super) struct Bursts {
    pub(super) spec: BurstSpec,
    pub(super) sending: bool,
    pub(super) t0: Instant,
    pub(super) log: BurstLog,
}

impl Bursts {
    pub(super) fn period(&self) -> Duration {
        Duration::from_millis(self.spec.period_ms)
    }

    pub(super) fn due(&self, k: u64) -> Instant {
        // Far periods saturate rather than overflow.
        self.t0
            .checked_add(
                self.period()
                    .saturating_mul(u32::try_from(k).unwrap_or(u32::MAX)),
            )
            .unwrap_or(self.t0 + FAR)
    }

    pub(super) fn secs(&self, now: Instant) -> f64 {
        now.saturating_duration_since(self.t0).as_secs_f64()
    }

    /// Opens burst `k` of `bytes` at `now`.
    pub(super) fn open(&mut self, k: u64, bytes: u64, now: Now) {
        let start_s = self.secs(now.mono);
        self.log.done.push(TcpBurst {
            index: k,
            side: if self.sending { "send" } else { "recv" }.into(),
            bytes,
            start_s,
            end_s: start_s,
            start_rt_ns: now.real_ns,
            end_rt_ns: now.real_ns,
            ..Default::default()
        });
        self.log.bins.clear();
    }

    /// One write or read of `n` bytes at `now` in the open burst.
    pub(super) fn call(&mut self, n: usize, now: Now) {
        let end_s = self.secs(now.mono);
        let Some(b) = self.log.done.last_mut() else {
            return;
        };
        if b.calls == 0 && !self.sending {
            // A receiver's burst starts with its first byte.
            (b.start_s, b.start_rt_ns) = (end_s, now.real_ns);
        }
        b.calls += 1;
        (b.end_s, b.end_rt_ns) = (end_s, now.real_ns);
        if !self.sending {
            // Power-of-two bins: 1, 2, 4, ... bytes.
            let edge = if n == 0 {
                0
            } else {
                1u64 << (63 - (n as u64).leading_zeros())
            };
            match self.log.bins.iter_mut().find(|(e, _)| *e == edge) {
                Some((_, c)) => *c += 1,
                None => self.log.bins.push((edge, 1)),
            }
        }
    }

    /// Closes the open burst (also one cut short by a failure).
    pub(super) fn close(&mut self, failed: bool) {
        let period = self.period().as_secs_f64();
        let mut bins = std::mem::take(&mut self.log.bins);
        bins.sort_unstable();
        let sending = self.sending;
        let Some(b) = self.log.done.last_mut() else {
            return;
        };
        if !sending {
            b.read_sizes = bins;
        } else if failed {
            b.errors = 1;
        }
        let secs = b.end_s - b.start_s;
        b.transfer_ms = secs * 1e3;
        b.rate_bps = if secs > 0.0 {
            b.bytes as f64 * 8.0 / secs
        } else {
            0.0
        };
        b.duty_pct = 100.0 * secs / period;
    }
}

/// Sending under a rate limit: at most `per_period` bytes in each period
/// counted from `t0`, the connection's start (ctsTraffic's -RateLimit with
/// -RateLimitPeriod). What a period leaves unused is not carried over
/// beyond the cumulative allowance, so the average never exceeds the rate.
#[derive(Debug)]
pub(super) struct Paced {
    pub(super) per_period: u64,
    pub(super) period: Duration,
    pub(super) t0: Instant,
}

impl Paced {
    /// The bytes that may have been sent by `now`, and when that allowance
    /// next grows.
    pub(super) fn allowance(&self, now: Instant) -> (u64, Instant) {
        let period_ns = self.period.as_nanos().max(1);
        let k = now.saturating_duration_since(self.t0).as_nanos() / period_ns;
        let next = u64::try_from(k.saturating_add(1)).unwrap_or(u64::MAX);
        let at = u64::try_from(period_ns.saturating_mul(u128::from(next)))
            .ok()
            .map_or(self.t0 + FAR, |ns| {
                self.t0 + Duration::from_nanos(ns).min(FAR)
            });
        (next.saturating_mul(self.per_period), at)
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
