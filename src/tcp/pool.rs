//! The TCP client's data connections on a fixed number of threads: each
//! thread runs one mio event loop (epoll) over its share of the concurrent
//! connections, whatever `--connections` is. A connection is one socket and
//! a few hundred bytes of state: connect (non-blocking), the data hello and
//! its acknowledgement, the data phase as a [`Conn`] state machine, then the
//! server's account of the bursts. Reads go into one buffer per thread, so
//! memory does not grow with the buffer size times the connections.

use mio::Poll;
use mio::event::Event;
use mio::net::TcpStream;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use super::config::BufferSpec;
use super::session::{ConnectionRecord, Shared};
use crate::net::ahead::ReadAhead;
use crate::net::event_loop::{self, Core, Flow, Handler};
use crate::net::out::Out;
use crate::protocol::outcome::ConnResult;
use crate::protocol::tcp::machine::Conn;
use ending::{Ended, Span};

mod deadline;
mod ending;
mod open;
mod sample;
mod step;

/// Longest sleep of an event loop: how soon it notices a stop.
const TICK: Duration = Duration::from_millis(20);
/// How long to wait for the server's account of the bursts.
const BURSTS_WAIT: Duration = Duration::from_secs(2);

/// Where one connection is.
enum Stage {
    /// The TCP handshake is in progress (a connection with bursts or a
    /// rate, whose schedule starts once it is up).
    Connecting,
    /// Sending the data hello, then reading the acknowledgement. The data
    /// does not wait for it: it follows the hello at once, in the same
    /// write when it is small (the server reads the hello and the data
    /// behind it together, and hands the data to the connection once it
    /// has admitted it), which saves a round trip per connection; only
    /// reading waits. Until `up`, the handshake may still be in progress:
    /// the first write that goes through says it is over.
    Hello { out: Out, conn: Box<Conn>, up: bool },
    /// The data phase, and what is queued to be written.
    Data { conn: Box<Conn>, out: Out },
    /// Reading the server's account of the bursts until `until`.
    Bursts { until: Instant },
}

struct Slot {
    stream: TcpStream,
    /// `--cport`: the local port, given back after `stream` is closed
    /// (fields drop in order).
    _port: Option<super::ports::PortLease>,
    /// Index of the control session (target) this connection belongs to.
    session: usize,
    stage: Stage,
    /// What was read past what the connection wanted yet (the server's
    /// reply and report behind its acknowledgement).
    ahead: ReadAhead,
    rec: ConnectionRecord,
    started: Instant,
    /// Holds one of the `--throttle` places: from connect until the data
    /// hello is acknowledged.
    throttled: bool,
    last_progress: Instant,
    /// The agreed result once the data phase is over.
    result: Option<ConnResult>,
    /// Retransmissions already added to the run's count.
    retrans_counted: u32,
    /// In the worker's `moved` list (moved since its TCP_INFO was last read).
    listed: bool,
    /// Registered with the poll, whose first report says whether anything
    /// arrived before: no read is tried until then.
    polled: bool,
    /// Watched for room to write. Only while it has something to write
    /// ([`Slot::wants_write`]): otherwise every acknowledgement of what it
    /// sent would wake its loop for nothing.
    writable: bool,
}

/// One event loop's connections and what they share.
struct Worker<'a> {
    sh: &'a Shared,
    /// The loop's poll, connections and their timers (the shared
    /// skeleton). Slots are boxed: a slot is taken out for each step and
    /// put back, and a connection's record makes it some 600 bytes to copy
    /// each way. A connection that used up its turn
    /// ([`Ran::Yielded`](crate::tcp::drive::Ran::Yielded)) runs again
    /// after the next poll's events and timers ([`Core::again`]), so that
    /// the other connections come first.
    core: Core<Box<Slot>>,
    /// Concurrent connections this loop keeps.
    quota: usize,
    buf: Vec<u8>,
    tx: Sender<ConnectionRecord>,
    rng: SmallRng,
    /// Connection IDs: random version-4 UUIDs from a generator the OS
    /// seeded, without a getrandom call per connection.
    ids: SmallRng,
    no_more: bool,
    /// Connections ended but not yet finished ([`Worker::finish_ending`]).
    ending: Vec<(Box<Slot>, Span, Ended)>,
    /// When to next sample the live connections' TCP_INFO: the middle of
    /// each status interval, so every interval's row has its samples.
    next_sample: Option<Instant>,
    /// Connections that moved since their TCP_INFO was last read, by
    /// slot: the only ones a row samples (an idle connection's RTT and
    /// window have not changed, and reading them for 100,000 held
    /// connections cost the loops more than the connections did).
    moved: Vec<usize>,
    /// The slots of the connections whose bytes are charted
    /// ([`TRACKED`](crate::tcp::session::TRACKED)).
    tracked: Vec<usize>,
}

/// Starts `threads` event loops sharing `sh.cfg.connections` concurrent
/// connections between them; each sends every finished connection's record
/// to `tx` and returns when no connection is left to run.
pub(super) fn spawn(
    sh: &Arc<Shared>,
    threads: usize,
    seed: u64,
    tx: &Sender<ConnectionRecord>,
) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
    let total = (sh.cfg.connections as u64).min(sh.cfg.total_connections()) as usize;
    let threads = threads.clamp(1, total.max(1));
    let mut handles = Vec::new();
    for w in 0..threads {
        let quota = total / threads + usize::from(w < total % threads);
        let sh = Arc::clone(sh);
        let tx = tx.clone();
        let poll = Poll::new()?;
        let h = std::thread::Builder::new()
            .name(format!("conns-{w}"))
            .spawn(move || {
                // The report's busiest thread counts this one whole.
                let _cpu = crate::net::cpu::EndNote;
                let buf_len = match sh.cfg.buffer {
                    BufferSpec::Fixed(b) => b,
                    BufferSpec::Range(_, hi) => hi,
                } as usize;
                let mut wk = Worker {
                    sh: &sh,
                    core: Core::new(poll, None, TICK),
                    quota,
                    // At least a frame's worth, so a peer's report is read
                    // whole (the machine reads data in its own buffer's steps).
                    buf: vec![0u8; buf_len.max(crate::net::ahead::AHEAD)],
                    tx,
                    rng: SmallRng::seed_from_u64(seed ^ (w as u64).wrapping_mul(0x9E37)),
                    ids: rand::make_rng(),
                    no_more: false,
                    ending: Vec::new(),
                    next_sample: sh.cfg.interval.map(|i| sh.start + i / 2),
                    moved: Vec::new(),
                    tracked: Vec::new(),
                };
                wk.run();
            })?;
        handles.push(h);
    }
    Ok(handles)
}

impl Handler for Worker<'_> {
    type Slot = Box<Slot>;
    type Msg = ();

    fn core(&mut self) -> &mut Core<Box<Slot>> {
        &mut self.core
    }

    fn on_ready(&mut self, k: usize, _sub: usize, ev: Option<&Event>) {
        // Only readiness to read (or a connection's end) makes a read worth
        // trying again after one would have blocked.
        if ev.is_none_or(|e| e.is_readable() || e.is_read_closed() || e.is_error())
            && let Some(slot) = self.core.slots.get_mut(k)
        {
            slot.ahead.stir();
        }
        self.advance(k);
    }

    fn on_timer(&mut self, k: usize, now: Instant) {
        // A deadline's last look reads whatever came, even if its
        // readiness is not among this turn's events yet.
        if let Some(slot) = self.core.slots.get_mut(k) {
            slot.ahead.stir();
        }
        self.expire(k, now);
    }

    /// Between two polls: a stopped run's connections cancelled, a due
    /// status row sampled, new connections opened, ended ones finished;
    /// the loop ends once it holds none and will open none.
    fn on_turn(&mut self, now: Instant) -> Flow {
        if self.sh.abort.load(SeqCst) {
            self.cancel_all();
        }
        if let (Some(at), Some(iv)) = (self.next_sample, self.sh.cfg.interval)
            && now >= at
        {
            self.sample(iv);
            self.next_sample = Some(at + iv);
        }
        self.start_more();
        self.finish_ending();
        match self.core.slots.is_empty() && (self.no_more || self.stopping()) {
            true => Flow::Stop,
            false => Flow::Go,
        }
    }
}

impl Slot {
    /// Whether the connection has bytes to write, or waits for its
    /// handshake (a socket becomes writable when it is up).
    fn wants_write(&self) -> bool {
        match &self.stage {
            Stage::Connecting | Stage::Hello { up: false, .. } => true,
            Stage::Hello { out, conn, .. } | Stage::Data { out, conn } => {
                !out.is_empty() || conn.has_to_send()
            }
            Stage::Bursts { .. } => false,
        }
    }
}

impl Worker<'_> {
    fn run(&mut self) {
        if let Err(e) = event_loop::run(self) {
            self.fail_all(&e.to_string());
            self.finish_ending();
        }
    }

    fn stopping(&self) -> bool {
        self.sh.stop.load(SeqCst) || self.sh.halt.load(SeqCst)
    }

    /// Moves connection `k` as far as it can go without blocking.
    fn advance(&mut self, k: usize) {
        let Some(mut slot) = self.core.slots.take(k) else {
            return;
        };
        let outcome = self.step(&mut slot, k);
        self.put_back(k, slot, outcome);
    }

    /// Keeps connection `k` when its step blocked (its deadline armed, and
    /// listed for TCP_INFO if it moved), or closes it with its result.
    fn put_back(&mut self, k: usize, mut slot: Box<Slot>, outcome: Result<(), Ended>) {
        match outcome {
            Ok(()) => {
                if !slot.writable && slot.wants_write() {
                    // Something to write that did not all go out: watch for room.
                    let both = mio::Interest::READABLE | mio::Interest::WRITABLE;
                    let token = self.core.token(k, 0);
                    let r = self
                        .core
                        .poll
                        .registry()
                        .reregister(&mut slot.stream, token, both);
                    if let Err(e) = r {
                        return self.close(k, slot, Ended::Failed(e.to_string()));
                    }
                    slot.writable = true;
                }
                if let Some(at) = self.deadline(&slot) {
                    self.core.arm(k, at);
                }
                if !slot.listed && self.next_sample.is_some() {
                    slot.listed = true;
                    self.moved.push(k);
                }
                self.core.slots.put(k, slot)
            }
            Err(result) => self.close(k, slot, result),
        }
    }

    /// The run was stopped: every connection ends now, cancelled.
    fn cancel_all(&mut self) {
        for k in self.core.slots.keys() {
            let Some(mut slot) = self.core.slots.take(k) else {
                continue;
            };
            if let Stage::Data { conn, out } = &mut slot.stage {
                conn.cancel();
                out.clear();
                self.core.slots.put(k, slot);
                self.advance(k);
            } else {
                self.close(k, slot, Ended::Failed("stopped".into()));
            }
        }
    }

    /// The event loop failed: every connection ends with `why`.
    fn fail_all(&mut self, why: &str) {
        for k in self.core.slots.keys() {
            if let Some(s) = self.core.slots.take(k) {
                self.close(k, s, Ended::Failed(why.to_string()));
            }
        }
    }
}
