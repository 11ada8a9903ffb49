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
            loops.start_one(&mut loops.places(), i, st)?;
        }
        Ok(loops)
    }

    fn places(&self) -> MutexGuard<'_, Vec<Place>> {
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts parked loop `i` on a thread of its own. A loop that cannot
    /// start (out of threads) is gone; the others serve on.
    fn start_one(
        self: &Arc<Self>,
        places: &mut [Place],
        i: usize,
        st: &Arc<State>,
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
            .spawn(move || me.serve(i, &st, end, None));
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
        mut end: LoopEnd<Incoming>,
        mut first: Option<Incoming>,
    ) {
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
        let (k, start) = for_data(&self.states(&places), here);
        let Some(j) = start else {
            return k;
        };
        match self.start_one(&mut places, j, st) {
            Ok(()) => j,
            Err(e) => {
                if st.cfg.verbosity >= 1 {
                    eprintln!("netrig serve: no more event loops ({e}); serving on {k}");
                }
                k
            }
        }
    }

    /// Each loop's place and load, for the choices below.
    fn states(&self, places: &[Place]) -> Vec<Seen> {
        let seen = |(k, p): (usize, &Place)| match p {
            Place::Running => Seen::Running(self.boxes.load(k)),
            Place::Parked(_) => Seen::Parked,
            Place::Gone => Seen::Gone,
        };
        places.iter().enumerate().map(seen).collect()
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
            _ => least_busy_running(&self.states(&places), 0),
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

/// A loop as the choices see it: running with its load, parked, or gone.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Seen {
    Running(usize),
    Parked,
    Gone,
}

/// The running loop holding the fewest connections; `prefer` on a tie (or
/// if no loop runs).
fn least_busy_running(loops: &[Seen], prefer: usize) -> usize {
    let load = |k: usize| match loops.get(k) {
        Some(Seen::Running(n)) => Some(*n),
        _ => None,
    };
    (0..loops.len()).fold(prefer, |best, k| match (load(k), load(best)) {
        (Some(n), Some(b)) if n < b => k,
        (Some(_), None) => k,
        _ => best,
    })
}

/// Where a lasting data connection on loop `here` (still counted there)
/// goes: the least busy running loop `.0`, unless that loop holds another
/// connection and a parked loop `.1` can be started for it.
fn for_data(loops: &[Seen], here: usize) -> (usize, Option<usize>) {
    let k = least_busy_running(loops, here);
    let load = match loops.get(k) {
        Some(Seen::Running(n)) => *n,
        _ => 0,
    };
    let others = load.saturating_sub(usize::from(k == here));
    if others == 0 {
        return (k, None);
    }
    (k, loops.iter().position(|l| *l == Seen::Parked))
}

#[cfg(test)]
mod tests {
    use super::Seen::{Gone, Parked, Running};
    use super::{for_data, least_busy_running};

    #[test]
    fn a_lasting_connection_takes_an_empty_running_loop_first() {
        // Loop 0 holds only the connection itself: it stays there.
        assert_eq!(for_data(&[Running(1), Running(1), Parked], 0), (0, None));
        // Loop 0 holds another too; loop 1 is empty.
        assert_eq!(for_data(&[Running(2), Running(0), Parked], 0), (1, None));
        // The least busy wins, not the first.
        assert_eq!(
            for_data(&[Running(3), Running(2), Running(1), Parked], 0),
            (2, Some(3))
        );
    }

    #[test]
    fn a_parked_loop_starts_only_when_every_running_one_holds_another() {
        // Every running loop holds a connection besides this one.
        assert_eq!(
            for_data(&[Running(2), Running(1), Gone, Parked, Parked], 0),
            (1, Some(3))
        );
        // Nothing parked: the least busy running loop.
        assert_eq!(for_data(&[Running(2), Running(1), Gone], 0), (1, None));
        // The connection counts on its own loop only: loop 1 holds nothing
        // else, loop 0 holds another.
        assert_eq!(for_data(&[Running(1), Running(1), Parked], 1), (1, None));
        assert_eq!(for_data(&[Running(1), Running(2), Parked], 1), (0, Some(2)));
        assert_eq!(for_data(&[Running(0), Running(1), Parked], 1), (0, None));
    }

    #[test]
    fn parked_and_gone_loops_are_never_chosen_to_run_a_connection() {
        assert_eq!(least_busy_running(&[Running(5), Gone, Parked], 0), 0);
        assert_eq!(least_busy_running(&[Running(5), Gone, Running(4)], 0), 2);
        // A tie keeps the preferred loop.
        assert_eq!(least_busy_running(&[Running(1), Running(1)], 1), 1);
        assert_eq!(least_busy_running(&[Running(1), Running(1)], 0), 0);
        // A preferred loop that does not run gives way to one that does.
        assert_eq!(least_busy_running(&[Running(7), Parked], 1), 0);
        assert_eq!(least_busy_running(&[Parked, Running(7)], 0), 1);
        // None runs: the preferred one.
        assert_eq!(least_busy_running(&[Parked, Gone], 1), 1);
        assert_eq!(for_data(&[Parked, Gone], 0), (0, None));
    }
}
