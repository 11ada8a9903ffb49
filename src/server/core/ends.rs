//! How a loop's connections end: the periodic scan (setup deadlines,
//! lingering refusals, idle data connections, stopped sessions), the
//! eviction of the oldest silent connections past the loop's share, and
//! closing a slot.

use std::io;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// How long a connection must have been silent before a newer one may
/// take its place.
const EVICT_AGE: Duration = Duration::from_secs(2);

use super::{Loop, Slot2, Stage};
use crate::outcome::ResultKind;
use crate::server::tcp::finished;

impl<'a> Loop<'a> {
    /// Past its share of [`Limits::max_pending`](super::Limits::max_pending)
    /// connections yet to say who they are, closes this loop's oldest: a client that
    /// connects and says hello at once is never the oldest, so silent
    /// connections, however many addresses they come from, cannot keep it
    /// out (they would if the newest were refused instead). Called before
    /// the newest joins the queue, so it is never the one closed.
    pub(super) fn evict_unnamed(&mut self, now: Instant) {
        // Each loop holds its share; connections being refused (which
        // linger at most a second) do not count here.
        let loops = self.loops.len().max(1);
        let share = (self.st.cfg.limits.max_pending() as usize / loops).max(16);
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
            if let Some(s) = self.slots[k].take() {
                if self.st.cfg.verbosity >= 2 {
                    eprintln!("{}: closed: silent while {share} others waited", s.peer);
                }
                self.close(k, *s);
            }
        }
        // Entries of connections that have since said who they are, or
        // gone, are dropped before they outnumber the live ones.
        if self.unnamed.len() > 2 * self.slots.len().max(64) {
            let mut q = std::mem::take(&mut self.unnamed);
            q.retain(|&(k, born)| self.is_unnamed(k, born));
            self.unnamed = q;
        }
    }

    /// Whether slot `k` still holds the connection accepted at `born`, not
    /// yet identified.
    fn is_unnamed(&self, k: usize, born: Instant) -> bool {
        matches!(self.slots.get(k), Some(Some(s)) if s.born == born && matches!(s.stage, Stage::First { .. }))
    }

    pub(super) fn close(&mut self, k: usize, slot: Slot2<'a>) {
        // Dropping the socket closes it, which takes it out of the poll.
        match &slot.stage {
            Stage::Data { a, .. } => finished(self.st, a, ResultKind::NetworkError),
            Stage::Tail { a, kind, .. } => finished(self.st, a, *kind),
            _ => {}
        }
        if let Stage::Data { a, .. } | Stage::Tail { a, .. } = &slot.stage
            && a.sess.aborted()
        {
            crate::net::reset(&slot.stream);
        }
        self.free.push(k);
        self.loops.left(self.index);
    }

    /// Ends connections past their setup deadline or idle timeout, and
    /// those of stopped sessions.
    pub(super) fn scan(&mut self, now: Instant) {
        // Silent connections age past EVICT_AGE without a newcomer too.
        self.evict_unnamed(now);
        if self.index == 0 {
            // What `--max-memory` compares with: the process's whole
            // resident memory, read once a tick (a few microseconds).
            self.st.resident.store(crate::net::resident_bytes(), SeqCst);
        }
        let idle = self.st.cfg.idle_timeout;
        let mut due = Vec::new();
        for (k, s) in self.slots.iter_mut().enumerate() {
            let Some(s) = s else { continue };
            match &mut s.stage {
                Stage::First { setup, .. } if now >= *setup => due.push((k, true)),
                Stage::Linger { until, .. } if now >= *until => due.push((k, true)),
                Stage::Refuse(_) | Stage::Tail { .. }
                    if now.saturating_duration_since(s.last_progress) >= idle =>
                {
                    due.push((k, true))
                }
                Stage::Data { a, conn, out } => {
                    a.sess.tick(now, std::os::fd::AsRawFd::as_raw_fd(&s.stream));
                    // A wait for the next burst is not idleness.
                    let from = conn
                        .quiet_until()
                        .map_or(s.last_progress, |q| q.max(s.last_progress));
                    let stalled = now.saturating_duration_since(from) >= idle;
                    if stalled {
                        // A peer that reads nothing will not take what is queued.
                        out.clear();
                    }
                    if a.sess.cancelled() {
                        conn.cancel();
                        due.push((k, false));
                    } else if stalled {
                        conn.on_error(&io::Error::new(io::ErrorKind::TimedOut, "no progress"));
                        due.push((k, false));
                    }
                }
                _ => {}
            }
        }
        for (k, drop_now) in due {
            if drop_now {
                if let Some(s) = self.slots[k].take() {
                    self.close(k, *s);
                }
            } else {
                self.advance(k);
            }
        }
    }
}
