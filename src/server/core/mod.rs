//! The server's connections on a fixed number of event loops (mio, two per
//! core): every accepted connection is handed to one of them, which reads
//! its first frame without a thread of its own, so idle and trickling
//! connections cost a descriptor and a few bytes, never a thread. A control
//! connection (a hello) runs its conversation here too (`control.rs`), an
//! rr/ping session over UDP its whole session (`rr_udp.rs`), and so does a
//! UDP stream the server receives (`udp_recv.rs`) or sends (`udp_send.rs`,
//! a fast one paced by a thread of the sender pool); only an admitted
//! TCP/SCTP request/response test moves to a worker thread, which holds a
//! test slot. A data connection stays on the loop for its whole life
//! as a [`Conn`] state machine, within its session's send limits, and ends
//! with the result both ends agree on.
//!
//! Until it says who it is, a connection counts in its loop's queue of
//! unnamed connections, not in `--max-conns`; past their bound each loop closes its
//! oldest such connection, so silent ones cannot keep a client out.

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

mod accept;
mod ends;
mod sessions;
mod step;

use super::State;
use super::control::{Control, Job, WorkerTest};
use super::limits::Slot;
use super::rr_tcp::RrTcp;
use super::rr_udp::RrUdp;
use super::sources::SourceSlot;
use super::tcp::{Admitted, Session};
use super::udp_recv::UdpRecv;
use super::udp_send::UdpSend;
use crate::net::ahead::ReadAhead;
use crate::net::loops::{Mailboxes, WAKE};
use crate::net::out::Out;
use crate::net::timers::Timers;
use crate::protocol::outcome::ResultKind;
use crate::protocol::refusal::Refusal;
use crate::protocol::tcp::machine::Conn;

/// Longest sleep of a loop: how soon it notices a stopped session.
const TICK: Duration = Duration::from_millis(20);

/// First token of the listeners loop 0 accepts on (counting down).
const LISTEN: usize = usize::MAX - 1;
/// Set in the token of a slot's UDP socket (an rr/ping session's or a
/// received stream's): the slot is the token without it.
const UDP_TOKEN: usize = 1 << (usize::BITS - 2);

/// Longest a refused connection stays open after its error frame: long
/// enough for the frame to reach a client that reads it, short enough that
/// a client that goes on sending (iperf, a stream of zeros) learns of the
/// refusal at once rather than being read from until the idle timeout.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// Most bytes read from a refused connection, to be discarded: a netrig
/// client's first data behind its hello fits (so it reads the refusal, not a
/// reset); a client that sends more is reset once the frame is delivered.
const REFUSAL_READ: u64 = 1 << 20;
/// How often a lingering connection whose reading is done looks whether its
/// frame has been acknowledged.
const LINGER_CHECK: Duration = Duration::from_millis(5);

/// What reaches a loop from outside.
enum Incoming {
    /// An accepted connection.
    Conn {
        stream: std::net::TcpStream,
        peer: SocketAddr,
    },
    /// The TCP listeners, for loop 0 to accept on.
    Listen(Vec<std::net::TcpListener>),
}

type Loops = Mailboxes<Incoming>;

/// The loops, and where the next connection goes.
pub(super) struct Core {
    loops: Arc<Loops>,
}

impl Core {
    /// Starts `threads` loops serving `st`.
    pub(super) fn start(st: &Arc<State>, threads: usize) -> io::Result<Core> {
        let (loops, ends) = Mailboxes::open(threads)?;
        let loops = Arc::new(loops);
        for (i, end) in ends.into_iter().enumerate() {
            let st = Arc::clone(st);
            let loops = Arc::clone(&loops);
            std::thread::Builder::new()
                .name(format!("serve-{i}"))
                .spawn(move || Loop::new(&st, end.poll, end.rx, i, loops).run())?;
        }
        Ok(Core { loops })
    }

    /// Has loop 0 accept on the TCP listeners: a new connection then starts
    /// on the thread that accepted it when that loop is the least busy,
    /// without a hand-over (which cost connection churn a thread wake-up
    /// per connection).
    pub(super) fn listen(&self, listeners: Vec<std::net::TcpListener>) -> bool {
        self.loops.send(0, Incoming::Listen(listeners))
    }

    /// Hands an accepted connection to a loop.
    pub(super) fn hand(&self, stream: std::net::TcpStream, peer: SocketAddr) -> bool {
        let _ = stream.set_nonblocking(true);
        // SCTP associations: their Nagle is SCTP_NODELAY, not inherited.
        let _ = crate::net::set_nodelay(&stream, true);
        self.loops.hand_round(Incoming::Conn { stream, peer })
    }
}

/// What happens to a connection after a step.
enum Next<'a> {
    /// It waits for its socket or a timer.
    Keep,
    /// It is over.
    Close,
    /// Its test runs on a worker thread, which takes the connection.
    Run(Box<Job<'a, WorkerTest>>),
    /// An iperf3 client's connection (`--iperf3-detect`), which sent this
    /// cookie: the iperf3 side takes it.
    Iperf3(crate::protocol::iperf3::Cookie),
}

enum Stage<'a> {
    /// Reading the first frame, until the setup deadline.
    First { setup: Instant },
    /// A control conversation.
    Control(Box<Control<'a>>),
    /// An rr/ping session over UDP: its control connection and its socket.
    RrUdp(Box<RrUdp<'a>>),
    /// An rr session over its control connection (TCP, SCTP one-to-one).
    RrTcp(Box<RrTcp<'a>>),
    /// A UDP stream the client sends: its control connection and its socket.
    UdpRecv(Box<UdpRecv<'a>>),
    /// A UDP stream the server sends: its control connection and its socket.
    UdpSend(Box<UdpSend<'a>>),
    /// Writing a last frame or a few (a refusal, a conversation's last
    /// answers), then lingering.
    Refuse(Out),
    /// The error frame is written and this end shut: what still arrives is
    /// read and discarded, at most [`REFUSAL_READ`] bytes, until the client
    /// closes, or the frame is acknowledged with the reading done, or
    /// `until`; then it closes.
    Linger { until: Instant, read: u64 },
    /// A data connection: its machine, and what is queued to be written
    /// (the ack first, then the machine's small writes behind it).
    Data {
        a: Admitted,
        conn: Box<Conn>,
        out: Out,
    },
    /// The result is agreed: the burst account goes out, then it closes.
    Tail {
        a: Admitted,
        out: Out,
        kind: ResultKind,
    },
}

struct Slot2<'a> {
    stream: TcpStream,
    peer: SocketAddr,
    stage: Stage<'a>,
    /// What was read past what the connection wanted yet (the first data
    /// behind a data hello).
    ahead: ReadAhead,
    last_progress: Instant,
    /// When it was accepted: with its slot number, names it in the
    /// loop's queue of connections yet to say who they are.
    born: Instant,
    /// Its place in `open` (`--max-conns`), once it said who it is; until
    /// then it counts only in its loop's queue of unnamed connections.
    open: Option<Slot<'a>>,
    /// Its place in its address's and network's connections.
    _source: Option<SourceSlot<'a>>,
}

struct Loop<'a> {
    st: &'a State,
    arc: Arc<State>,
    poll: Poll,
    rx: Receiver<Incoming>,
    /// Boxed: a slot is taken out for each step and put back.
    slots: Vec<Option<Box<Slot2<'a>>>>,
    free: Vec<usize>,
    timers: Timers,
    /// Connections that used up their turn
    /// ([`Ran::Yielded`](crate::tcp::drive::Ran::Yielded)) and could go
    /// on: run again after the next poll's events and timers, so that
    /// every other connection, and accepting, comes first. Edge-triggered
    /// readiness reports nothing new for them, so this list is what
    /// resumes them. `queued` marks the slots in it, each at most once.
    ready: Vec<usize>,
    queued: Vec<bool>,
    buf: Vec<u8>,
    /// This loop's number, and every loop's.
    index: usize,
    loops: Arc<Loops>,
    /// Loop 0: the listeners it accepts on, and until when accepting
    /// pauses after running out of descriptors.
    listeners: Vec<mio::net::TcpListener>,
    paused: Option<Instant>,
    accept_log: super::RateLimitedLog,
    /// Connections yet to say who they are, oldest first (slot, born): the
    /// first to go when the server holds too many.
    unnamed: VecDeque<(usize, Instant)>,
    /// The sessions this loop's data connections belong to (by address),
    /// with how many of them are here: looked at every tick (a due status
    /// row taken, a stopped session's connections stepped once) instead of
    /// every connection.
    sessions: HashMap<usize, Here>,
}

/// A session some of a loop's data connections belong to.
struct Here {
    sess: Arc<Session>,
    conns: usize,
    /// Its stop was seen and its connections here stepped.
    stopped: bool,
}

impl<'a> Loop<'a> {
    fn new(
        st: &'a Arc<State>,
        poll: Poll,
        rx: Receiver<Incoming>,
        index: usize,
        loops: Arc<Loops>,
    ) -> Loop<'a> {
        Loop {
            st,
            arc: Arc::clone(st),
            poll,
            rx,
            slots: Vec::new(),
            free: Vec::new(),
            timers: Timers::default(),
            ready: Vec::new(),
            queued: Vec::new(),
            buf: vec![0u8; super::tcp::SERVER_BUFFER],
            index,
            loops,
            listeners: Vec::new(),
            paused: None,
            accept_log: super::RateLimitedLog::default(),
            unnamed: VecDeque::new(),
            sessions: HashMap::new(),
        }
    }

    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut next_scan = Instant::now();
        loop {
            let now = Instant::now();
            let timeout = match self.ready.is_empty() {
                true => self.timers.timeout(now, TICK),
                false => Duration::ZERO,
            };
            let timeout = match self.paused {
                Some(at) => timeout.min(at.saturating_duration_since(now)),
                None => timeout,
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                eprintln!("netrig serve: event loop failed: {e}");
                return;
            }
            for ev in &events {
                match ev.token() {
                    WAKE => self.take_incoming(),
                    Token(k) if k > LISTEN - self.listeners.len() => self.accept(LISTEN - k),
                    Token(k) => {
                        // The control connection's readiness: its next read
                        // may find a frame (a session's turn skips reading
                        // it otherwise).
                        if k & UDP_TOKEN == 0
                            && (ev.is_readable() || ev.is_read_closed() || ev.is_error())
                            && let Some(Some(slot)) = self.slots.get_mut(k)
                        {
                            slot.ahead.stir();
                        }
                        self.advance(k & !UDP_TOKEN)
                    }
                }
            }
            let now = Instant::now();
            if self.paused.is_some_and(|at| now >= at) {
                for i in 0..self.listeners.len() {
                    self.accept(i);
                }
            }
            for k in self.timers.due(now) {
                self.expire(k, now);
            }
            // Last, the connections that had their turn: one more turn each.
            for k in std::mem::take(&mut self.ready) {
                self.queued[k] = false;
                self.advance(k);
            }
            if now >= next_scan {
                if self.st.stop.load(SeqCst) && !self.listeners.is_empty() {
                    self.stop_listening();
                }
                self.tick(now);
                next_scan = now + TICK;
                if self.st.stop.load(SeqCst) && self.slots.iter().all(Option::is_none) {
                    return;
                }
            }
        }
    }

    fn take_incoming(&mut self) {
        while let Ok(m) = self.rx.try_recv() {
            match m {
                Incoming::Conn { stream, peer } => self.add(stream, peer),
                Incoming::Listen(ls) => {
                    for l in ls {
                        let mut l = mio::net::TcpListener::from_std(l);
                        let token = Token(LISTEN - self.listeners.len());
                        if self
                            .poll
                            .registry()
                            .register(&mut l, token, Interest::READABLE)
                            .is_ok()
                        {
                            self.listeners.push(l);
                        }
                    }
                    for i in 0..self.listeners.len() {
                        self.accept(i);
                    }
                }
            }
        }
    }

    fn advance(&mut self, k: usize) {
        let Some(mut slot) = self.slots.get_mut(k).and_then(Option::take) else {
            return;
        };
        let next = self.step(&mut slot, k);
        self.put_back(k, slot, next, false);
    }

    /// Keeps `slot` (joining it to the poll first when `new`), closes it,
    /// or hands it to a worker thread, as its step said.
    fn put_back(&mut self, k: usize, mut slot: Box<Slot2<'a>>, next: Next<'a>, new: bool) {
        match next {
            Next::Keep => {
                let both = Interest::READABLE | Interest::WRITABLE;
                if new
                    && (self.poll.registry())
                        .register(&mut slot.stream, Token(k), both)
                        .is_err()
                {
                    return self.close(k, *slot);
                }
                self.arm(k, &slot);
                self.slots[k] = Some(slot)
            }
            Next::Close => self.close(k, *slot),
            Next::Run(job) => {
                self.timers.cancel(k);
                self.free.push(k);
                self.loops.left(self.index);
                self.spawn_worker(*slot, job);
            }
            Next::Iperf3(cookie) => {
                self.timers.cancel(k);
                self.free.push(k);
                self.loops.left(self.index);
                let Slot2 {
                    mut stream, peer, ..
                } = *slot;
                if !new {
                    let _ = self.poll.registry().deregister(&mut stream);
                }
                // SAFETY: the descriptor was just released by the mio
                // stream and is owned by the std stream from here on.
                let stream = unsafe { std::net::TcpStream::from_raw_fd(stream.into_raw_fd()) };
                if stream.set_nonblocking(false).is_ok() {
                    super::iperf3::route(&self.arc, stream, peer, cookie);
                }
            }
        }
    }

    /// Slot `k` had its turn and could go on: it runs again on the next
    /// turn of the loop, after everything else.
    fn again(&mut self, k: usize) {
        if self.queued.len() <= k {
            self.queued.resize(k + 1, false);
        }
        if !std::mem::replace(&mut self.queued[k], true) {
            self.ready.push(k);
        }
    }
}

/// The stage that refuses a connection, logged.
fn refuse<'a>(st: &State, peer: SocketAddr, why: &Refusal) -> Stage<'a> {
    super::log_refusal(st, peer, why);
    Stage::Refuse(Out::new(crate::protocol::proto::encode(&why.message())))
}
