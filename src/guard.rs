//! The server's hand on everything one session sends: every write, datagram
//! batch and reply asks its [`Budget`] first, and every wait (pacing, a
//! burst's period, a rate limit) sleeps in slices of at most
//! [`SLICE`] so a stopped or expired session lets go within 100 ms.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::budget::{Admit, Budget, Exceeded};

/// Longest single sleep of a guarded wait.
pub const SLICE: Duration = Duration::from_millis(100);

/// What the server's limits let a send do, for a sender on an event loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// It leaves now.
    Go,
    /// Not yet (a rate limit): the same bytes are offered again later.
    Hold,
    /// Never: the session sends no more.
    Halt,
}

/// Why a guarded send or wait gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Halt {
    /// The session was stopped (stop, goodbye, a closed control connection).
    #[error("session stopped")]
    Stopped,
    /// A server limit ran out.
    #[error(transparent)]
    Limit(#[from] Exceeded),
}

/// One session's sending allowance and stop flag, shared by its threads.
#[derive(Debug)]
pub struct SendGuard {
    budget: Mutex<Budget>,
    start: Instant,
    stop: Arc<AtomicBool>,
}

impl SendGuard {
    /// A guard allowing `rate_bps` peak and `max_bytes` in all until `deadline`
    /// after now; `stop` ends every wait.
    pub fn new(rate_bps: u64, max_bytes: u64, deadline: Duration, stop: Arc<AtomicBool>) -> Self {
        let deadline_ns = u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX);
        SendGuard {
            budget: Mutex::new(Budget::new(rate_bps, max_bytes, deadline_ns)),
            start: Instant::now(),
            stop,
        }
    }

    fn now_ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    /// `now` as nanoseconds since the guard's start.
    fn ns_at(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The session's deadline as an instant (far in the future if it cannot be one).
    pub fn deadline(&self) -> Instant {
        let ns = self.lock().deadline_ns();
        self.start
            .checked_add(Duration::from_nanos(ns))
            .unwrap_or_else(|| self.start + Duration::from_secs(100 * 365 * 86_400))
    }

    /// The session's stop flag.
    pub fn stop_flag(&self) -> &Arc<AtomicBool> {
        &self.stop
    }

    /// Whether the session was stopped or is past its deadline.
    pub fn halted(&self) -> Option<Halt> {
        self.halted_at(Instant::now())
    }

    /// [`SendGuard::halted`] at `now`, a time the caller has just read.
    pub fn halted_at(&self, now: Instant) -> Option<Halt> {
        if self.stop.load(SeqCst) {
            return Some(Halt::Stopped);
        }
        let deadline = self.lock().deadline_ns();
        (self.ns_at(now) >= deadline).then_some(Halt::Limit(Exceeded::Deadline))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Budget> {
        self.budget.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `n` bytes may leave, and counts them.
    pub fn admit(&self, n: u64) -> Result<(), Halt> {
        loop {
            if self.stop.load(SeqCst) {
                return Err(Halt::Stopped);
            }
            let verdict = self.lock().admit(self.now_ns(), n);
            match verdict {
                Admit::Go => return Ok(()),
                Admit::Wait(ns) => std::thread::sleep(Duration::from_nanos(ns).min(SLICE)),
                Admit::Over(e) => return Err(e.into()),
            }
        }
    }

    /// Counts `n` bytes that may leave at `now` (Ok(None)), or says when to
    /// ask again (Ok(Some(t))): [`SendGuard::admit`] for event loops, which
    /// must not sleep, at a time the caller has just read (an event loop's
    /// step, which reads the clock once for all it does).
    pub fn try_admit_at(&self, n: u64, now: Instant) -> Result<Option<Instant>, Halt> {
        if self.stop.load(SeqCst) {
            return Err(Halt::Stopped);
        }
        let verdict = self.lock().admit(self.ns_at(now), n);
        match verdict {
            Admit::Go => Ok(None),
            Admit::Wait(ns) => Ok(Some(now + Duration::from_nanos(ns))),
            Admit::Over(e) => Err(e.into()),
        }
    }

    /// [`SendGuard::try_admit_at`] for a session on an event loop that keeps
    /// the time the rate limit last named in `held`: before then it holds
    /// without asking; asked, a wait is kept in `held`, and a go or a halt
    /// clears it.
    pub fn gate(&self, n: u64, held: &mut Option<Instant>, now: Instant) -> Gate {
        if held.is_some_and(|at| now < at) {
            return Gate::Hold;
        }
        match self.try_admit_at(n, now) {
            Ok(None) => {
                *held = None;
                Gate::Go
            }
            Ok(Some(at)) => {
                *held = Some(at);
                Gate::Hold
            }
            Err(_) => {
                *held = None;
                Gate::Halt
            }
        }
    }

    /// Sleeps until `due`, in slices, giving up when the session stops or
    /// its deadline passes first.
    pub fn sleep_until(&self, due: Instant) -> Result<(), Halt> {
        loop {
            if let Some(h) = self.halted() {
                return Err(h);
            }
            match due.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => std::thread::sleep(left.min(SLICE)),
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_far_wait_ends_within_a_slice_of_a_stop() {
        let stop = Arc::new(AtomicBool::new(false));
        let g = Arc::new(SendGuard::new(
            8_000,
            u64::MAX,
            Duration::from_secs(3600),
            Arc::clone(&stop),
        ));
        let g2 = Arc::clone(&g);
        let h = std::thread::spawn(move || {
            let t0 = Instant::now();
            let r = g2.sleep_until(Instant::now() + Duration::from_secs(3600));
            (r, t0.elapsed())
        });
        // And a send that must wait for a big debt to be paid.
        g.admit(1 << 20).unwrap();
        let g3 = Arc::clone(&g);
        let h2 = std::thread::spawn(move || g3.admit(1));
        stop.store(true, SeqCst);
        let (r, took) = h.join().unwrap();
        assert_eq!(r, Err(Halt::Stopped));
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert_eq!(h2.join().unwrap(), Err(Halt::Stopped));
    }

    #[test]
    fn a_gate_holds_until_the_time_the_rate_limit_named_then_asks_again() {
        let stop = Arc::new(AtomicBool::new(false));
        let g = SendGuard::new(
            8_000,
            u64::MAX,
            Duration::from_secs(3600),
            Arc::clone(&stop),
        );
        let now = Instant::now();
        let mut held = Some(now);
        assert_eq!(
            g.gate(100_000, &mut held, now),
            Gate::Go,
            "a time passed is asked"
        );
        assert_eq!(held, None, "a go clears it");
        assert_eq!(g.gate(1, &mut held, now), Gate::Hold, "the bucket is empty");
        let at = held.expect("the time to ask again");
        assert!(at > now);
        // Before then it does not ask: a stop is not seen yet.
        stop.store(true, SeqCst);
        assert_eq!(g.gate(1, &mut held, now), Gate::Hold);
        assert_eq!(held, Some(at));
        assert_eq!(g.gate(1, &mut held, at), Gate::Halt);
        assert_eq!(held, None, "nothing is waited for after a halt");
    }

    #[test]
    fn the_deadline_ends_waits_and_sends() {
        let stop = Arc::new(AtomicBool::new(false));
        let g = SendGuard::new(u64::MAX, u64::MAX, Duration::from_millis(50), stop);
        assert_eq!(g.admit(1), Ok(()));
        let r = g.sleep_until(Instant::now() + Duration::from_secs(3600));
        assert_eq!(r, Err(Halt::Limit(Exceeded::Deadline)));
        assert_eq!(g.admit(1), Err(Halt::Limit(Exceeded::Deadline)));
        assert_eq!(g.halted(), Some(Halt::Limit(Exceeded::Deadline)));
    }
}
