//! The one event-loop skeleton the client pool, the server core and the
//! relay (TCP pumps and UDP flows) run on, so that each loop is only what it
//! does with a connection, not its own copy of the plumbing around it.
//!
//! Every loop had the same parts, written once per loop:
//! - **a slot table**: connections in a `Vec` of options with a free list,
//!   the slot index in the poll token (with a few bits for which of the
//!   slot's sockets, e.g. the relay's client and upstream sides), a slot
//!   taken out for its step and put back or closed;
//! - **poll and events**: one mio poll per thread, its events dispatched
//!   by token, a few tokens outside the slots (the waker, listeners), and
//!   a loop-wide wake-up outside the slots' timers ([`Core::wake_by`]);
//! - **timers**: [`Timers`], one entry per slot (its earliest wish), for
//!   departure times, connect/setup deadlines and idle deadlines alike;
//! - **a mailbox**: a channel and a waker ([`super::loops`]) that new
//!   connections and other work arrive by, drained when the waker fires;
//! - **a tick**: the longest sleep, and a little work on it (has the run
//!   stopped, is the loop empty) — once also a scan of every slot for idle
//!   connections, which [`Timers`] replaced: idleness is each slot's timer;
//! - **closing a slot**: deregister its sockets, cancel its timer, free the
//!   index;
//! - **per-wake-up budgets**: a connection that used up its turn asks to go
//!   again after everyone else (edge-triggered readiness would not report it
//!   again), a socket that delivered a whole batch likewise.
//!
//! Here they are one [`Core`] (poll, [`Slots`], [`Timers`], mailbox, the
//! "again" list) and one [`turn`] of the loop, with what a loop does
//! supplied by a [`Handler`] (statically dispatched). It adds what the
//! copies lacked: a slot's token carries its generation, so an event left
//! in a batch for a connection closed earlier in the same batch does not
//! reach the next occupant of its slot, nor does its "again" entry; closing
//! cancels the slot's timer; and the mailbox is drained at most
//! [`MAIL_BUDGET`] messages per turn (the rest on the next turns, without
//! sleeping), so a flood of new connections cannot hold the loop's sockets
//! back.

use mio::event::{Event, Source};
use mio::{Events, Interest, Poll, Token};
use std::io;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use super::loops::WAKE;
use super::timers::Timers;

/// Messages taken from the mailbox per turn of a loop.
pub const MAIL_BUDGET: usize = 64;

/// Bits of a token naming which of its slot's sockets fired.
const SUB_BITS: u32 = 2;
/// Sockets a slot may register (tokens `0..SUBS`).
pub const SUBS: usize = 1 << SUB_BITS;
/// Bits of a token for the slot index (2^32 slots on 64-bit targets).
const INDEX_BITS: u32 = usize::BITS / 2;
/// Bits of a token for the slot's generation (the rest below [`RESERVED`]).
const GEN_BITS: u32 = usize::BITS - 2 - INDEX_BITS - SUB_BITS;
const GEN_MASK: usize = (1 << GEN_BITS) - 1;
/// Tokens from here up are not slots: the waker, a loop's listeners.
pub const RESERVED: usize = 1 << (usize::BITS - 2);

/// What a loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Go,
    /// Return from [`run`].
    Stop,
}

struct Entry<T> {
    /// Bumped each time the slot is freed: a token of an earlier occupant
    /// no longer resolves.
    era: u32,
    /// Taken by a connection (its value may be out for its step).
    used: bool,
    value: Option<T>,
}

/// A slab of connections: indices reused through a free list, each with a
/// generation so that tokens of a closed connection go stale.
pub struct Slots<T> {
    entries: Vec<Entry<T>>,
    free: Vec<usize>,
    live: usize,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            entries: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }
}

impl<T> Slots<T> {
    /// Takes a slot for a connection not yet made (its token is needed to
    /// register its sockets first); [`Slots::put`] fills it.
    pub fn vacant(&mut self) -> usize {
        self.live += 1;
        if let Some(k) = self.free.pop() {
            self.entries[k].used = true;
            return k;
        }
        self.entries.push(Entry {
            era: 0,
            used: true,
            value: None,
        });
        self.entries.len() - 1
    }

    /// Takes a slot for `v`.
    pub fn insert(&mut self, v: T) -> usize {
        let k = self.vacant();
        self.entries[k].value = Some(v);
        k
    }

    /// Puts connection `v` (back) in its slot `k`, which must be taken.
    pub fn put(&mut self, k: usize, v: T) {
        if let Some(e) = self.entries.get_mut(k)
            && e.used
        {
            e.value = Some(v);
        }
    }

    /// Takes slot `k`'s connection out for a step (the slot stays taken).
    pub fn take(&mut self, k: usize) -> Option<T> {
        self.entries.get_mut(k)?.value.take()
    }

    /// Slot `k`'s connection, unless it is out or the slot is free.
    pub fn get(&self, k: usize) -> Option<&T> {
        self.entries.get(k)?.value.as_ref()
    }

    /// Slot `k`'s connection, to change.
    pub fn get_mut(&mut self, k: usize) -> Option<&mut T> {
        self.entries.get_mut(k)?.value.as_mut()
    }

    /// Whether slot `k` is taken.
    pub fn is_used(&self, k: usize) -> bool {
        self.entries.get(k).is_some_and(|e| e.used)
    }

    /// Frees slot `k`, returning what it held; its tokens go stale.
    fn release(&mut self, k: usize) -> Option<T> {
        let e = self.entries.get_mut(k)?;
        if !e.used {
            return None;
        }
        e.used = false;
        e.era = e.era.wrapping_add(1);
        self.free.push(k);
        self.live -= 1;
        e.value.take()
    }

    /// How many slots are taken.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The taken slots, for the rare pass over all of them (the run stopped,
    /// the loop failed): never on a loop's every turn.
    pub fn keys(&self) -> Vec<usize> {
        (self.entries.iter().enumerate())
            .filter_map(|(k, e)| e.used.then_some(k))
            .collect()
    }

    /// The token of socket `sub` (below [`SUBS`]) of slot `k`'s present
    /// occupant.
    pub fn token(&self, k: usize, sub: usize) -> Token {
        debug_assert!(k < 1 << INDEX_BITS, "slot {k} past the token's index bits");
        let era = self.entries.get(k).map_or(0, |e| e.era as usize & GEN_MASK);
        Token((era << (INDEX_BITS + SUB_BITS)) | (k << SUB_BITS) | (sub & (SUBS - 1)))
    }

    /// The slot and socket a token names, if it is not reserved and its
    /// connection still holds the slot.
    pub fn resolve(&self, t: Token) -> Option<(usize, usize)> {
        if t.0 >= RESERVED {
            return None;
        }
        let k = (t.0 >> SUB_BITS) & ((1 << INDEX_BITS) - 1);
        let era = t.0 >> (INDEX_BITS + SUB_BITS);
        let e = self.entries.get(k)?;
        (e.used && e.era as usize & GEN_MASK == era).then_some((k, t.0 & (SUBS - 1)))
    }
}

/// What every loop has: its poll, its connections, their timers, its
/// mailbox and what is to run again.
pub struct Core<T, M = ()> {
    /// The loop's poll.
    pub poll: Poll,
    /// Its connections.
    pub slots: Slots<T>,
    /// Their timers, by slot: at most one entry each.
    pub timers: Timers,
    rx: Option<Receiver<M>>,
    events: Option<Events>,
    /// Tokens to run again after the next poll, each at most once.
    again: Vec<Token>,
    /// Per slot, which of its sockets are in `again`.
    queued: Vec<u8>,
    /// The waker fired, or the last drain stopped at its budget.
    mail: bool,
    tick: Duration,
    next_tick: Instant,
    /// A wake-up outside the slots' timers, for the next poll only.
    by: Option<Instant>,
    /// When the last turn looked at its timers: the next turn's
    /// [`Handler::on_turn`] is told this time rather than reading the
    /// clock again (what it does with it, opening connections or sampling
    /// a status row, is not timed to the microsecond).
    looked: Option<Instant>,
    /// When the last poll returned: the time this turn's events, timers
    /// and what runs again are handled at.
    woke: Instant,
}

impl<T, M> Core<T, M> {
    /// A loop on `poll` (with `rx`'s waker registered as [`WAKE`] if it has
    /// a mailbox) that sleeps at most `tick` and calls
    /// [`Handler::on_tick`] that often.
    pub fn new(poll: Poll, rx: Option<Receiver<M>>, tick: Duration) -> Core<T, M> {
        Core {
            poll,
            slots: Slots::default(),
            timers: Timers::default(),
            rx,
            events: Some(Events::with_capacity(1024)),
            again: Vec::new(),
            queued: Vec::new(),
            mail: false,
            tick,
            next_tick: Instant::now(),
            by: None,
            looked: None,
            woke: Instant::now(),
        }
    }

    /// When the last poll returned, read once for all this turn handles:
    /// a handler's step takes it rather than reading the clock again.
    pub fn woke(&self) -> Instant {
        self.woke
    }

    /// The poll and the mailbox back, for a loop that ends while what it
    /// was started for goes on (the server's added loops, parked when idle
    /// and started again on them).
    pub fn into_parts(self) -> (Poll, Option<Receiver<M>>) {
        (self.poll, self.rx)
    }

    /// Sleeps at most `tick` from now on, and calls [`Handler::on_tick`]
    /// that often: the next tick comes no later than `tick` after `now`. A
    /// loop that holds nothing may sleep longer than one at work (its tick
    /// then only looks whether the run stopped).
    pub fn set_tick(&mut self, tick: Duration, now: Instant) {
        self.tick = tick;
        self.next_tick = self.next_tick.min(now + tick);
    }

    /// The token of socket `sub` of slot `k`.
    pub fn token(&self, k: usize, sub: usize) -> Token {
        self.slots.token(k, sub)
    }

    /// Registers `s` as socket `sub` of slot `k`.
    pub fn register<S: Source + ?Sized>(
        &self,
        s: &mut S,
        k: usize,
        sub: usize,
        interest: Interest,
    ) -> io::Result<()> {
        self.poll
            .registry()
            .register(s, self.token(k, sub), interest)
    }

    /// Changes what socket `sub` of slot `k` is watched for.
    pub fn reregister<S: Source + ?Sized>(
        &self,
        s: &mut S,
        k: usize,
        sub: usize,
        interest: Interest,
    ) -> io::Result<()> {
        self.poll
            .registry()
            .reregister(s, self.token(k, sub), interest)
    }

    /// Takes `s` out of the poll.
    pub fn deregister<S: Source + ?Sized>(&self, s: &mut S) {
        let _ = self.poll.registry().deregister(s);
    }

    /// Slot `k` wants a look at `at` (its one timer entry keeps the
    /// earliest wish, see [`Timers::push`]).
    pub fn arm(&mut self, k: usize, at: Instant) {
        self.timers.push(at, k);
    }

    /// Socket `sub` of slot `k` used up its turn and could go on: it runs
    /// again ([`Handler::on_ready`] without an event) after the next poll's
    /// events and timers, so everything else comes first.
    pub fn again(&mut self, k: usize, sub: usize) {
        if self.queued.len() <= k {
            self.queued.resize(k + 1, 0);
        }
        let bit = 1u8 << (sub & (SUBS - 1));
        if self.queued[k] & bit == 0 {
            self.queued[k] |= bit;
            let t = self.token(k, sub);
            self.again.push(t);
        }
    }

    /// A reserved token (a listener) used up its turn: like [`Core::again`],
    /// through [`Handler::on_token`].
    pub fn again_token(&mut self, t: Token) {
        if t.0 >= RESERVED && !self.again.contains(&t) {
            self.again.push(t);
        }
    }

    /// The next poll returns by `at` at the latest: a loop-wide wake-up,
    /// not a slot's (the server's accepting, paused after running out of
    /// descriptors). It holds for one poll: a loop that still wants it asks
    /// again from [`Handler::on_turn`].
    pub fn wake_by(&mut self, at: Instant) {
        self.by = Some(self.by.map_or(at, |b| b.min(at)));
    }

    /// Closes slot `k`: its timer cancelled, its "again" entries and
    /// tokens stale, its index free for the next connection. What it held
    /// is returned; deregistering its sockets is the caller's (closing
    /// them does it too, unless their descriptors are shared).
    pub fn close(&mut self, k: usize) -> Option<T> {
        if !self.slots.is_used(k) {
            return None;
        }
        self.timers.cancel(k);
        if let Some(q) = self.queued.get_mut(k) {
            *q = 0;
        }
        self.slots.release(k)
    }

    /// How long the next poll may sleep.
    fn timeout(&self, now: Instant) -> Duration {
        if !self.again.is_empty() || self.mail {
            return Duration::ZERO;
        }
        // The earliest of the wake-ups, then one subtraction: Instant
        // arithmetic is dearer than comparing (a loop turns once a round
        // trip, and each subtraction was about 3 % of a server's user-space
        // instructions for one).
        let at = [self.timers.earliest(), self.by]
            .into_iter()
            .flatten()
            .fold(self.next_tick, Instant::min);
        at.saturating_duration_since(now).min(self.tick)
    }
}

/// What a loop does with its connections; the skeleton does the rest.
pub trait Handler {
    /// A connection, as its slot holds it.
    type Slot;
    /// What arrives in the mailbox.
    type Msg;

    /// The loop's core.
    fn core(&mut self) -> &mut Core<Self::Slot, Self::Msg>;

    /// Socket `sub` of slot `k` is ready (`ev`), or runs again after using
    /// up its turn (`None`).
    fn on_ready(&mut self, k: usize, sub: usize, ev: Option<&Event>);

    /// Slot `k`'s timer came due at `now`.
    fn on_timer(&mut self, k: usize, now: Instant);

    /// A message from the mailbox.
    fn on_message(&mut self, _m: Self::Msg) {}

    /// A reserved token other than the waker is ready (`ev`), or runs again.
    fn on_token(&mut self, _t: Token, _ev: Option<&Event>) {}

    /// Before each poll: work outside the slots (open more connections);
    /// [`Flow::Stop`] ends the loop.
    fn on_turn(&mut self, _now: Instant) -> Flow {
        Flow::Go
    }

    /// Every tick: loop-wide checks (has the run stopped); never a pass
    /// over every slot.
    fn on_tick(&mut self, _now: Instant) -> Flow {
        Flow::Go
    }
}

/// Runs turns of `h`'s loop until it stops, or its poll fails.
pub fn run<H: Handler>(h: &mut H) -> io::Result<()> {
    while turn(h)? == Flow::Go {}
    Ok(())
}

/// One turn of the loop: [`Handler::on_turn`], a poll (no longer than the
/// earliest timer, the tick, or not at all when something is to run
/// again), the events, the timers that came due, what was to run again,
/// a budget of the mailbox, and the tick if it is time.
pub fn turn<H: Handler>(h: &mut H) -> io::Result<Flow> {
    // Two clock reads a turn, not four (a crr client's loop turns about
    // once a connection): the time its timers were looked at serves the
    // tick after them and the next turn's start; how long to sleep is
    // reckoned from a fresh reading, as the turn's start may have taken a
    // while (opening connections).
    let start = h.core().looked.take().unwrap_or_else(Instant::now);
    if h.on_turn(start) == Flow::Stop {
        return Ok(Flow::Stop);
    }
    let core = h.core();
    let timeout = core.timeout(Instant::now());
    core.by = None;
    let mut events = core
        .events
        .take()
        .unwrap_or_else(|| Events::with_capacity(1024));
    if let Err(e) = core.poll.poll(&mut events, Some(timeout)) {
        core.events = Some(events);
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(Flow::Go),
            _ => Err(e),
        };
    }
    let now = Instant::now();
    core.woke = now;
    // Those of the last turn, not any this one adds.
    let again = std::mem::take(&mut core.again);
    for ev in &events {
        dispatch(h, ev.token(), Some(ev));
    }
    h.core().events = Some(events);
    let due = h.core().timers.due(now);
    for k in due {
        if h.core().slots.is_used(k) {
            h.on_timer(k, now);
        }
    }
    for t in again {
        if let Some((k, sub)) = h.core().slots.resolve(t) {
            let q = &mut h.core().queued[k];
            let bit = 1u8 << sub;
            if *q & bit == 0 {
                // Closed since (or already run): not for the new occupant.
                continue;
            }
            *q &= !bit;
        }
        dispatch(h, t, None);
    }
    if h.core().mail {
        drain(h);
    }
    h.core().looked = Some(now);
    if now >= h.core().next_tick {
        let tick = h.core().tick;
        h.core().next_tick = now + tick;
        return Ok(h.on_tick(now));
    }
    Ok(Flow::Go)
}

fn dispatch<H: Handler>(h: &mut H, t: Token, ev: Option<&Event>) {
    if t == WAKE {
        h.core().mail = true;
    } else if t.0 >= RESERVED {
        h.on_token(t, ev);
    } else if let Some((k, sub)) = h.core().slots.resolve(t) {
        h.on_ready(k, sub, ev);
    }
}

/// Takes at most [`MAIL_BUDGET`] messages; if there may be more, the next
/// turn takes more without sleeping (the waker does not fire again for
/// them).
fn drain<H: Handler>(h: &mut H) {
    h.core().mail = false;
    for _ in 0..MAIL_BUDGET {
        let Some(rx) = &h.core().rx else {
            return;
        };
        match rx.try_recv() {
            Ok(m) => h.on_message(m),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
        }
    }
    h.core().mail = true;
}

#[cfg(test)]
#[path = "event_loop_tests.rs"]
mod tests;
