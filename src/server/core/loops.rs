//! The server's event loops: a fixed set that starts with the server and
//! takes every connection first, and as many again that start one at a time
//! when a lasting TCP data connection finds every running loop holding a
//! connection. Busy data connections then each get a loop of their own, as
//! the client's do (at `-P 8` on 2 cores, eight server loops against four
//! gave 1.17× the verified goodput at 0.86× the CPU per GiB), while hellos,
//! control conversations, idle and refused connections, UDP and rr
//! sessions never add a thread: the bound is a function of the cores only
//! (README: "Running a public server"). An added loop that has held nothing
//! for [`super::PARK_AFTER`] idle ticks ends its thread and is parked (its
//! poll and mailbox kept here), so the server's threads come back to what
//! it started with once the load is gone; the next lasting connection
//! starts it again.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Incoming, Loop};
use crate::net::loops::{LoopEnd, Mailboxes};
use crate::server::State;

/// Where a loop is.
enum Place {
    /// Its thread runs it.
    Running,
    /// Not running: its poll and mailbox wait here to be started.
    Parked(LoopEnd<Incoming>),
    /// Its thread could not start, or its loop failed: never chosen again.
    Gone,
}

/// How a loop's thread ended ([`Loop::run`]).
pub(super) enum Ended {
    /// The server stopped, or the loop failed.
    Done,
    /// An added loop with nothing to do: its poll and mailbox, to park.
    Idle(LoopEnd<Incoming>),
}

/// The server's loops: their mailboxes, how many start with the server,
/// and where each is.
pub(in crate::server) struct Loops {
    boxes: Mailboxes<Incoming>,
    base: usize,
    /// Every choice of a loop for a data connection, every hand-over to an
    /// added loop and every parking happens under this lock, so nothing is
    /// ever sent to a loop that is parking or parked.
    places: Mutex<Vec<Place>>,
}

impl Loops {
    /// Opens `most` loops' mailboxes (at least `base`) and starts the first
    /// `base` loops serving `st`.
    pub(super) fn start(st: &Arc<State>, base: usize, most: usize) -> io::Result<Arc<Loops>> {
        let base = base.max(1);
        let (boxes, ends) = Mailboxes::open(most.max(base))?;
        let loops = Arc::new(Loops {
            boxes,
            base,
            places: Mutex::new(ends.into_iter().map(Place::Parked).collect()),
        });
        for i in 0..base {
            loops.start_one(&mut loops.places(), i, st, None)?;
        }
        Ok(loops)
    }

    fn places(&self) -> MutexGuard<'_, Vec<Place>> {
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts parked loop `i` on a thread of its own, `first` its first
    /// message. A loop that cannot start (out of threads) is gone; the
    /// others serve on.
    fn start_one(
        self: &Arc<Self>,
        places: &mut [Place],
        i: usize,
        st: &Arc<State>,
        first: Option<Incoming>,
    ) -> io::Result<()> {
        let Some(place) = places.get_mut(i) else {
            return Err(io::Error::other("no such event loop"));
        };
        let Place::Parked(end) = std::mem::replace(place, Place::Running) else {
            return Err(io::Error::other("that event loop is not parked"));
        };
        let (st, me) = (Arc::clone(st), Arc::clone(self));
        let spawned = std::thread::Builder::new()
            .name(format!("serve-{i}"))
            .spawn(move || me.serve(i, &st, end, first));
        if let Err(e) = spawned {
            *place = Place::Gone;
            return Err(e);
        }
        Ok(())
    }

    /// Loop `i`'s thread: runs it until the server stops, or until it
    /// parks with nothing to do; a connection handed to it meanwhile runs
    /// it again on the same thread.
    fn serve(
        self: Arc<Self>,
        i: usize,
        st: &Arc<State>,
        end: LoopEnd<Incoming>,
        first: Option<Incoming>,
    ) {
        let (mut end, mut first) = (end, first);
        loop {
            let ended = Loop::new(st, end.poll, end.rx, i, Arc::clone(&self)).run(first);
            let Ended::Idle(idle) = ended else {
                let mut places = self.places();
                if let Some(p @ Place::Running) = places.get_mut(i) {
                    // Stopped with the server, or failed: not chosen again
                    // (and nothing reads its mailbox any more).
                    *p = Place::Gone;
                }
                return;
            };
            let mut places = self.places();
            match idle.rx.try_recv() {
                // Handed a connection before it could park: on it goes.
                Ok(m) => (end, first) = (idle, Some(m)),
                Err(_) => {
                    if let Some(p) = places.get_mut(i) {
                        *p = Place::Parked(idle);
                    }
                    return;
                }
            }
        }
    }

    /// How many loops started with the server: those control connections
    /// and SCTP associations go to, which never park.
    pub(super) fn base(&self) -> usize {
        self.base
    }

    /// Where a control connection on loop `here` goes on: the least busy
    /// of the loops that started with the server.
    pub(super) fn for_control(&self, here: usize) -> usize {
        self.boxes.least_busy_of(self.base, here)
    }

    /// Where a lasting data connection on loop `here` (still counted there)
    /// goes on: the least busy running loop, or a parked one started for
    /// it when every running loop holds a connection besides it.
    pub(super) fn for_data(self: &Arc<Self>, here: usize, st: &Arc<State>) -> usize {
        let mut places = self.places();
        let k = self.least_busy_running(&places, here);
        let others = self.boxes.load(k).saturating_sub(usize::from(k == here));
        if others == 0 {
            return k;
        }
        let Some(j) = places.iter().position(|p| matches!(p, Place::Parked(_))) else {
            return k;
        };
        match self.start_one(&mut places, j, st, None) {
            Ok(()) => j,
            Err(e) => {
                if st.cfg.verbosity >= 1 {
                    eprintln!("netrig serve: no more event loops ({e}); serving on {k}");
                }
                k
            }
        }
    }

    /// The running loop holding the fewest connections; `prefer` on a tie.
    fn least_busy_running(&self, places: &[Place], prefer: usize) -> usize {
        let running = |k: usize| matches!(places.get(k), Some(Place::Running));
        let load = |k: usize| self.boxes.load(k);
        (0..places.len())
            .filter(|&k| running(k))
            .fold(prefer, |best, k| {
                match !running(best) || load(k) < load(best) {
                    true => k,
                    false => best,
                }
            })
    }

    /// Counts a connection in on loop `k` and sends it there; if `k` has
    /// parked since it was chosen, on the least busy running loop instead.
    pub(super) fn hand_to(&self, k: usize, m: Incoming) -> bool {
        if k < self.base {
            return self.boxes.hand_to(k, m);
        }
        let places = self.places();
        let k = match places.get(k) {
            Some(Place::Running) => k,
            _ => self.least_busy_running(&places, 0),
        };
        self.boxes.hand_to(k, m)
    }

    /// Hands an SCTP association to the next of the loops that started
    /// with the server.
    pub(super) fn hand_round(&self, m: Incoming) -> bool {
        self.boxes.hand_round_of(self.base, m)
    }

    /// Sends `m` to loop `k` (one of the base loops) and wakes it; false if
    /// it is gone.
    pub(super) fn send(&self, k: usize, m: Incoming) -> bool {
        self.boxes.send(k, m)
    }

    /// Loop `k` holds one more connection.
    pub(super) fn arrived(&self, k: usize) {
        self.boxes.arrived(k)
    }

    /// Loop `k` holds one fewer.
    pub(super) fn left(&self, k: usize) {
        self.boxes.left(k)
    }
}
