//! The server's event loops: a fixed set that starts with the server and
//! takes every connection first, and as many again that start one at a time
//! when a lasting TCP data connection finds every started loop holding a
//! connection. Busy data connections then each get a loop of their own, as
//! the client's do (at `-P 8` on 2 cores, eight server loops against four
//! gave 1.17× the verified goodput at 0.86× the CPU per GiB), while hellos,
//! control conversations, idle and refused connections, UDP and rr
//! sessions never add a thread: the bound is a function of the cores only
//! (README: "Running a public server"). A started loop stays; holding
//! nothing, it sleeps a second at a time ([`super::IDLE_TICK`]).

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};

use super::{Incoming, Loop};
use crate::net::loops::{LoopEnd, Mailboxes};
use crate::server::State;

/// The server's loops: their mailboxes, how many start with the server,
/// and those not started yet.
pub(in crate::server) struct Loops {
    boxes: Mailboxes<Incoming>,
    base: usize,
    started: AtomicUsize,
    /// The ends of the loops not started yet, next first.
    unstarted: Mutex<VecDeque<LoopEnd<Incoming>>>,
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
            started: AtomicUsize::new(0),
            unstarted: Mutex::new(ends.into()),
        });
        for _ in 0..base {
            if loops.start_next(st)?.is_none() {
                return Err(io::Error::other("no event loop left to start"));
            }
        }
        Ok(loops)
    }

    /// Starts the next loop; None when all have started. A loop that
    /// cannot start (out of threads) ends the growth: the loops started
    /// so far serve on.
    fn start_next(self: &Arc<Self>, st: &Arc<State>) -> io::Result<Option<usize>> {
        let mut unstarted = self.unstarted.lock().unwrap_or_else(|e| e.into_inner());
        let Some(end) = unstarted.pop_front() else {
            return Ok(None);
        };
        let i = self.started.load(SeqCst);
        let (st, me) = (Arc::clone(st), Arc::clone(self));
        let spawned = std::thread::Builder::new()
            .name(format!("serve-{i}"))
            .spawn(move || Loop::new(&st, end.poll, end.rx, i, me).run());
        match spawned {
            Ok(_) => {
                self.started.store(i + 1, SeqCst);
                Ok(Some(i))
            }
            Err(e) => {
                unstarted.clear();
                Err(e)
            }
        }
    }

    /// How many loops started with the server: those control connections
    /// and SCTP associations go to.
    pub(super) fn base(&self) -> usize {
        self.base
    }

    /// How many loops run now.
    pub(super) fn started(&self) -> usize {
        self.started.load(SeqCst)
    }

    /// Where a control connection on loop `here` goes on: the least busy
    /// of the loops that started with the server.
    pub(super) fn for_control(&self, here: usize) -> usize {
        self.boxes.least_busy_of(self.base, here)
    }

    /// Where a lasting data connection on loop `here` (still counted there)
    /// goes on: the least busy running loop, or a loop started for it when
    /// every running loop holds a connection besides it.
    pub(super) fn for_data(self: &Arc<Self>, here: usize, st: &Arc<State>) -> usize {
        let k = self.boxes.least_busy_of(self.started(), here);
        let others = self.boxes.load(k).saturating_sub(usize::from(k == here));
        if others == 0 {
            return k;
        }
        match self.start_next(st) {
            Ok(Some(new)) => new,
            Ok(None) => k,
            Err(e) => {
                if st.cfg.verbosity >= 1 {
                    eprintln!("netrig serve: no more event loops ({e}); serving on {k}");
                }
                k
            }
        }
    }

    /// Hands an SCTP association to the next of the loops that started
    /// with the server.
    pub(super) fn hand_round(&self, m: Incoming) -> bool {
        self.boxes.hand_round_of(self.base, m)
    }

    /// Sends `m` to loop `k` and wakes it; false if it is gone.
    pub(super) fn send(&self, k: usize, m: Incoming) -> bool {
        self.boxes.send(k, m)
    }

    /// Counts a connection in on loop `k` and sends it there.
    pub(super) fn hand_to(&self, k: usize, m: Incoming) -> bool {
        self.boxes.hand_to(k, m)
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
