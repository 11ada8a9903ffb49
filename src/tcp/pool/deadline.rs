//! When a connection fails for waiting: its deadline (the connect timeout,
//! then the idle timeout) as its one timer entry, and what a timer that
//! comes due does to it.

use std::io;
use std::time::{Duration, Instant};

use super::ending::Ended;
use super::{Slot, Stage, Worker};

impl Worker<'_> {
    /// When connection `s` fails if nothing happens first: the connect
    /// timeout while connecting, the idle timeout after (a wait for the next
    /// burst is not idleness); none while reading the burst account, which
    /// has its own timer.
    pub(super) fn deadline(&self, s: &Slot) -> Option<Instant> {
        let idle = self.sh.cfg.idle_timeout;
        match &s.stage {
            Stage::Connecting | Stage::Hello { up: false, .. } => {
                let connect = self.sh.cfg.connect_timeout.or(idle);
                Some(s.started + connect.unwrap_or(Duration::from_secs(30)))
            }
            Stage::Bursts { .. } => None,
            Stage::Hello { .. } => Some(s.last_progress + idle?),
            Stage::Data { conn, .. } => {
                let from = conn
                    .quiet_until()
                    .map_or(s.last_progress, |q| q.max(s.last_progress));
                Some(from + idle?)
            }
        }
    }

    /// Connection `k`'s timer came due at `now`: failed if past its
    /// deadline (connect or idle), stepped otherwise. Its one timer entry
    /// is its deadline unless something earlier was asked for, so an idle
    /// connection costs its loop one look per deadline, not one per tick.
    ///
    /// A connection past its deadline is first stepped once more: a loop
    /// that was starved of CPU sees its timers come due together with, or
    /// before, the readiness of the sockets they wait on (a poll reports a
    /// bounded number of events), and an answer already in the socket is
    /// not a timeout.
    pub(super) fn expire(&mut self, k: usize, now: Instant) {
        let Some(slot) = self.core.slots.get(k) else {
            return;
        };
        if self.deadline(slot).is_none_or(|d| now < d) {
            return self.advance(k);
        }
        self.advance(k);
        let Some(slot) = self.core.slots.get(k) else {
            return;
        };
        if self.deadline(slot).is_none_or(|d| now < d) {
            return;
        }
        let Some(mut slot) = self.core.slots.take(k) else {
            return;
        };
        let e = io::Error::new(io::ErrorKind::TimedOut, "timed out");
        match &mut slot.stage {
            Stage::Data { conn, out } => {
                conn.on_error(&e);
                // What is queued will not go out either.
                out.clear();
                self.core.slots.put(k, slot);
                self.advance(k);
            }
            Stage::Connecting | Stage::Hello { up: false, .. } => {
                let why = format!("connect to {}: {e}", slot.rec.remote);
                self.close(k, slot, Ended::Failed(why));
            }
            _ => self.close(k, slot, Ended::Failed(format!("data hello: {e}"))),
        }
    }
}
