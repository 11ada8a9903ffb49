//! What a server allows one client and one test, and the counters that
//! enforce it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use crate::protocol::refusal::Limit;

/// Caps the server enforces on every test request. A refusal names the
/// limit ("server limit: max duration 60 s …").
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Highest UDP stream rate, bit/s.
    pub max_rate_bps: u64,
    /// Longest test of any kind; a TCP session still running then is stopped.
    pub max_duration: Duration,
    /// Most bytes one test may move, both directions together.
    pub max_bytes: u64,
    /// Most tests running at once, from all clients.
    pub max_tests: u32,
    /// Most open connections (control and data) from one client address.
    pub max_conns_per_client: u32,
    /// Most tests running at once from one client address.
    pub max_tests_per_client: u32,
    /// Most open connections in all (kept below the descriptor limit).
    pub max_conns: u32,
    /// Resident memory past which new tests and data connections are
    /// refused, bytes.
    pub max_memory: u64,
    /// Longest a test's setup may take, from its acceptance to the start of
    /// its stream (`serve --handshake-timeout`).
    pub setup: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_rate_bps: 40_000_000_000,
            max_duration: Duration::from_secs(3600),
            max_bytes: 4 << 40,
            max_tests: 64,
            max_conns_per_client: 256,
            max_tests_per_client: 4,
            max_conns: 8192,
            max_memory: 1 << 30,
            setup: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// Refuses new work while the server's resident memory, `used` bytes,
    /// is past `max_memory`.
    pub fn check_memory(&self, used: u64) -> Result<(), Limit> {
        if used > self.max_memory {
            return Err(Limit::Memory {
                max: self.max_memory,
                used,
            });
        }
        Ok(())
    }

    /// Most connections held before they say who they are, or while they
    /// are refused: an eighth of `max_conns`, at least 64. They never count
    /// in `max_conns`, so neither silent nor refused connections can keep
    /// the server's identified clients out.
    pub fn max_pending(&self) -> u32 {
        (self.max_conns / 8).max(64)
    }
}

/// Answers queued to a control client that does not read them, past which
/// the server stops reading its messages until they are out: a client
/// cannot make the server queue without bound by sending faster than it
/// reads (the control thread's conversations and the loop-side sessions
/// alike).
pub(crate) const OUT_HIGH: usize = 64 * 1024;

/// How long past `max_duration` a session may take to wind down (setup,
/// draining, final reports) before everything it runs is stopped.
pub const GRACE: Duration = Duration::from_secs(5);

impl Limits {
    /// A guard for one session's sends, its deadline counted from now.
    pub fn guard(
        &self,
        stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> crate::guard::SendGuard {
        crate::guard::SendGuard::new(
            self.max_rate_bps,
            self.max_bytes,
            self.deadline(),
            std::sync::Arc::clone(stop),
        )
    }

    /// A session's absolute deadline, from the moment its test is accepted.
    pub fn deadline(&self) -> Duration {
        self.max_duration.saturating_add(GRACE)
    }

    /// How many requests a request/response test may have answered: all it
    /// asks for if they fit `max_bytes`, or, for a test that runs until the
    /// client stops, as many as fit.
    pub fn rr_requests(&self, spec: &crate::protocol::proto::RrSpec) -> Result<u64, Limit> {
        let per = (u64::from(spec.size) + u64::from(spec.reply)).max(1);
        if spec.until_stopped {
            return match self.max_bytes / per {
                0 => Err(Limit::BytesPerRound {
                    max: self.max_bytes,
                    per,
                }),
                n => Ok(n),
            };
        }
        self.check_bytes(per.saturating_mul(spec.iterations))
            .map(|()| spec.iterations)
    }

    /// Refuses a test that says it runs longer than `max_duration`: every
    /// kind alike, when its request says how long it runs (`ms` 0: it does
    /// not, and the session's deadline stops it).
    pub fn check_duration(&self, ms: u64) -> Result<(), Limit> {
        let asked = Duration::from_millis(ms);
        if asked > self.max_duration {
            return Err(Limit::Duration {
                max: self.max_duration,
                asked,
            });
        }
        Ok(())
    }

    /// Refuses a test that would move more than `max_bytes`.
    pub fn check_bytes(&self, bytes: u64) -> Result<(), Limit> {
        if bytes > self.max_bytes {
            return Err(Limit::Bytes {
                max: self.max_bytes,
                asked: bytes,
            });
        }
        Ok(())
    }
}

/// `n` counted in a total; the count goes down by `n` when the guard drops.
pub(crate) struct Slot<'a>(&'a AtomicU64, u64);

impl<'a> Slot<'a> {
    /// Gives back on drop one that was already added to `counter`.
    pub(crate) fn adopt(counter: &'a AtomicU64) -> Slot<'a> {
        Slot(counter, 1)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, SeqCst);
    }
}

/// Takes one of `max` slots, or `None` when all are taken.
pub(crate) fn take_slot(counter: &AtomicU64, max: u64) -> Option<Slot<'_>> {
    let prev = counter.fetch_add(1, SeqCst);
    let slot = Slot(counter, 1);
    (prev < max).then_some(slot)
}

/// Open connections from one client address.
pub(crate) struct ClientSlot<'a> {
    pub(crate) map: &'a Mutex<HashMap<IpAddr, u32>>,
    pub(crate) ip: IpAddr,
}

impl Drop for ClientSlot<'_> {
    fn drop(&mut self) {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::proto::{RrProto, RrSpec};

    fn spec(iterations: u64, until_stopped: bool) -> RrSpec {
        RrSpec {
            proto: RrProto::Udp,
            size: 60,
            reply: 40,
            iterations,
            nagle: false,
            until_stopped,
            sock: Default::default(),
            duration_ms: 0,
        }
    }

    #[test]
    fn a_duration_past_max_duration_is_refused_naming_both() {
        let l = Limits {
            max_duration: Duration::from_secs(5),
            ..Limits::default()
        };
        assert_eq!(l.check_duration(0), Ok(()));
        assert_eq!(l.check_duration(5000), Ok(()));
        assert_eq!(
            l.check_duration(5001),
            Err(Limit::Duration {
                max: Duration::from_secs(5),
                asked: Duration::from_millis(5001),
            })
        );
    }

    #[test]
    fn a_sessions_deadline_is_max_duration_plus_grace() {
        let l = Limits {
            max_duration: Duration::from_secs(10),
            ..Limits::default()
        };
        assert_eq!(l.deadline(), Duration::from_secs(15));
        let forever = Limits {
            max_duration: Duration::MAX,
            ..Limits::default()
        };
        assert_eq!(forever.deadline(), Duration::MAX);
    }

    #[test]
    fn rr_requests_fit_max_bytes() {
        let l = Limits {
            max_bytes: 1000,
            ..Limits::default()
        };
        // 100 bytes a round trip: 10 fit.
        assert_eq!(l.rr_requests(&spec(10, false)), Ok(10));
        assert!(l.rr_requests(&spec(11, false)).is_err());
        assert!(l.rr_requests(&spec(u64::MAX, false)).is_err());
        // Until stopped: as many as fit, whatever iterations says.
        assert_eq!(l.rr_requests(&spec(u64::MAX, true)), Ok(10));
        let tiny = Limits {
            max_bytes: 99,
            ..Limits::default()
        };
        assert!(tiny.rr_requests(&spec(1, true)).is_err());
    }
}
