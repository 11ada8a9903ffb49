//! How a loop's connections end: each one's deadline (setup, lingering
//! refusal, idle) as its one timer entry, stopped sessions seen on the
//! loop's tick, the eviction of the oldest silent connections past the
//! loop's share, and closing a slot. Nothing here visits every connection
//! on a tick: 100,000 held idle connections cost their loops nothing
//! between their deadlines.

use std::collections::HashSet;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// How long a connection must have been silent before a newer one may
/// take its place.
const EVICT_AGE: Duration = Duration::from_secs(2);

use super::{Here, Loop, Session, Slot2, Stage};
use crate::protocol::outcome::ResultKind;
use crate::server::tcp::finished;

impl<'a> Loop<'a> {
    /// Past its share of [`Limits::max_pending`](crate::server::Limits::max_pending)
    /// connections yet to say who they are (all of it on the loop that
    /// accepts), closes this loop's oldest: a client that
    /// connects and says hello at once is never the oldest, so silent
    /// connections, however many addresses they come from, cannot keep it
    /// out (they would if the newest were refused instead). Called before
    /// the newest joins the queue, so it is never the one closed.
    pub(super) fn evict_unnamed(&mut self, now: Instant) {
        // The loop that accepts holds every TCP connection until it says
        // who it is (`moves_to`), so all of them; the others hold their
        // share (SCTP associations, handed round). Connections being
        // refused (which linger at most a second) do not count here.
        let loops = self.loops.base();
        let max = self.st.cfg.limits.max_pending() as usize;
        let share = match self.listeners.is_empty() {
            true => (max / loops).max(16),
            false => max.max(16),
        };
        while self.unnamed.len() >= share {
            let Some(&(k, born)) = self.unnamed.front() else {
                break;
            };
            if !self.is_unnamed(k, born) {
                // Said who it is since, or gone.
                self.unnamed.pop_front();
                continue;
            }
            // A burst of clients (19,000 connections at once, or a client
            // starved of CPU) may take a moment to send their hellos: only
            // a connection silent for EVICT_AGE is closed for a newer one.
            if now.saturating_duration_since(born) < EVICT_AGE {
                break;
            }
            self.unnamed.pop_front();
            if let Some(s) = self.core.slots.take(k) {
                if self.st.cfg.verbosity >= 2 {
                    eprintln!("{}: closed: silent while {share} others waited", s.peer);
                }
                self.close(k, *s);
            }
        }
        // Entries of connections that have since said who they are, or
        // gone, are dropped before they outnumber the live ones.
        if self.unnamed.len() > 2 * self.core.slots.live().max(64) {
            let mut q = std::mem::take(&mut self.unnamed);
            q.retain(|&(k, born)| self.is_unnamed(k, born));
            self.unnamed = q;
        }
    }

    /// Whether slot `k` still holds the connection accepted at `born`, not
    /// yet identified.
    fn is_unnamed(&self, k: usize, born: Instant) -> bool {
        matches!(self.core.slots.get(k), Some(s) if s.born == born && matches!(s.stage, Stage::First { .. }))
    }

    pub(super) fn close(&mut self, k: usize, slot: Slot2<'a>) {
        // Dropping the socket closes it, which takes it out of the poll
        // (its session's UDP socket too); closing the slot cancels its
        // timer and makes its tokens and "again" entry stale.
        match &slot.stage {
            Stage::Data { a, .. } => finished(self.st, a, ResultKind::NetworkError),
            Stage::Tail { a, kind, .. } => finished(self.st, a, *kind),
            _ => {}
        }
        if let Stage::Data { a, .. } | Stage::Tail { a, .. } = &slot.stage {
            if a.sess.aborted() {
                crate::net::reset(&slot.stream);
            }
            self.parted(&a.sess, k);
        }
        self.core.close(k);
        self.loops.left(self.index);
    }

    /// A data connection of `sess`, in slot `k`, is on this loop from now
    /// on.
    pub(super) fn joined(&mut self, sess: &Arc<Session>, k: usize) {
        let here = self
            .sessions
            .entry(Arc::as_ptr(sess) as usize)
            .or_insert_with(|| Here {
                sess: Arc::clone(sess),
                slots: HashSet::new(),
                stopped: false,
            });
        here.slots.insert(k);
    }

    /// The data connection of `sess` in slot `k` left this loop.
    fn parted(&mut self, sess: &Arc<Session>, k: usize) {
        let key = Arc::as_ptr(sess) as usize;
        if let Some(here) = self.sessions.get_mut(&key) {
            here.slots.remove(&k);
            if here.slots.is_empty() {
                self.sessions.remove(&key);
            }
        }
    }

    /// When slot `s` is to be ended if nothing happens first: its setup
    /// deadline, its lingering's end, or its idle timeout (a wait for the
    /// next burst is not idleness). Conversations and UDP sessions keep
    /// their own times.
    fn deadline(&self, s: &Slot2<'a>) -> Option<Instant> {
        let idle = self.st.cfg.idle_timeout;
        match &s.stage {
            Stage::First { setup } => Some(*setup),
            Stage::Linger { until, .. } => Some(*until),
            Stage::Refuse(_) | Stage::Tail { .. } => Some(s.last_progress + idle),
            Stage::Data { conn, .. } => {
                let from = conn
                    .quiet_until()
                    .map_or(s.last_progress, |q| q.max(s.last_progress));
                Some(from + idle)
            }
            Stage::Control(_)
            | Stage::RrUdp(_)
            | Stage::RrTcp(_)
            | Stage::RrSctp(_)
            | Stage::UdpRecv(_)
            | Stage::UdpSend(_)
            | Stage::Iperf2(_) => None,
        }
    }

    /// Gives slot `k` a timer entry no later than its deadline. Its one
    /// entry keeps the earliest time asked for, so a connection that moved
    /// since is woken once at its old deadline and re-armed then: one
    /// wake-up per idle timeout at most, and none per step.
    pub(super) fn arm(&mut self, k: usize, s: &Slot2<'a>) {
        if let Some(at) = self.deadline(s) {
            self.core.arm(k, at);
        }
    }

    /// Slot `k`'s timer came due at `now`: ended if past its deadline,
    /// stepped otherwise (and re-armed as it is put back).
    ///
    /// One past its deadline is first stepped once more: a loop starved of
    /// CPU sees its timers come due with, or before, the readiness of the
    /// sockets they wait on (a poll reports a bounded number of events), and
    /// a hello already in the socket is not a silent client. The deadline
    /// itself does not move (the setup deadline is fixed at accept), so a
    /// hostile client gains one read, not time.
    pub(super) fn expire(&mut self, k: usize, now: Instant) {
        let Some(s) = self.core.slots.get(k) else {
            return;
        };
        if self.deadline(s).is_none_or(|d| now < d) {
            return self.advance(k);
        }
        self.advance(k);
        let Some(s) = self.core.slots.get(k) else {
            return;
        };
        if self.deadline(s).is_none_or(|d| now < d) {
            return;
        }
        let Some(mut s) = self.core.slots.take(k) else {
            return;
        };
        if let Stage::Data { conn, out, .. } = &mut s.stage {
            // A peer that reads nothing will not take what is queued.
            out.clear();
            conn.on_error(&io::Error::new(io::ErrorKind::TimedOut, "no progress"));
            self.core.slots.put(k, s);
            return self.advance(k);
        }
        self.close(k, *s);
    }

    /// Every tick: silent connections past their age evicted, the
    /// resident memory read (loop 0), the sessions' status rows taken, and
    /// a stopped session's connections here stepped once (they see the
    /// stop and end as cancelled).
    pub(super) fn tick(&mut self, now: Instant) {
        // Silent connections age past EVICT_AGE without a newcomer too.
        self.evict_unnamed(now);
        if self.index == 0 {
            // What `--max-memory` compares with: the process's whole
            // resident memory, read once a tick (a few microseconds).
            self.st.resident.store(crate::net::resident_bytes(), SeqCst);
        }
        // A stopped session's connections here, from its own list: no pass
        // over the loop's other connections.
        let mut of_stopped = Vec::new();
        for here in self.sessions.values_mut() {
            here.sess.rows(now);
            if !here.stopped && here.sess.cancelled() {
                here.stopped = true;
                of_stopped.extend(here.slots.iter().copied());
            }
        }
        for k in of_stopped {
            // Those still moving data; one agreeing on its result goes on.
            if let Some(s) = self.core.slots.get_mut(k)
                && let Stage::Data { conn, .. } = &mut s.stage
            {
                conn.cancel();
                self.advance(k);
            }
        }
    }
}
