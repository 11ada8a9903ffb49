//! The server's connections on a few event loops (mio, two per core, and up
//! to two more per core for lasting data connections, [`loops`]): every
//! accepted connection starts on the loop that accepted it,
//! which reads its first frame without a thread of its own (one that will
//! last then moves to the least busy loop), so idle and trickling
//! connections cost a descriptor and a few bytes, never a thread. A control
//! connection (a hello) runs its conversation here too (`control.rs`), and
//! then its admitted session: rr/ping over UDP (`rr_udp.rs`), rr over TCP
//! (`rr_tcp.rs`) and over SCTP one-to-many (`rr_sctp.rs`), a UDP stream the
//! server receives (`udp_recv.rs`) or sends (`udp_send.rs`, a fast one
//! paced by a thread of the sender pool). A data connection stays on the
//! loop for its whole life as a [`Conn`] state machine, within its
//! session's send limits, and ends with the result both ends agree on.
//!
//! Until it says who it is, a connection counts in its loop's queue of
//! unnamed connections, not in `--max-conns`; past their bound each loop closes its
//! oldest such connection, so silent ones cannot keep a client out.
//!
//! Each loop runs on the shared skeleton ([`crate::net::event_loop`]): its
//! slots, their tokens and timers, the "again" list and the mailbox are the
//! skeleton's [`Core`](event_loop::Core); this module is the
//! [`Handler`]: what a connection's readiness, timer and tick mean, and
//! the listeners (tokens outside the slots) loop 0 accepts on.

use mio::event::Event;
use mio::net::TcpStream;
use mio::{Interest, Poll, Token};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

mod accept;
mod ends;
mod loops;
mod sessions;
mod step;

use super::State;
use super::account::Charge;
use super::control::Control;
use super::iperf2_tcp::Iperf2Tcp;
use super::limits::Slot;
use super::rr_sctp::RrSctp;
use super::rr_tcp::RrTcp;
use super::rr_udp::RrUdp;
use super::sources::SourceSlot;
use super::tcp::{Admitted, Session};
use super::udp_recv::UdpRecv;
use super::udp_send::UdpSend;
use crate::net::ahead::ReadAhead;
use crate::net::event_loop::{self, Flow, Handler};
use crate::net::out::Out;
use crate::protocol::outcome::ResultKind;
use crate::protocol::refusal::Refusal;
use crate::protocol::tcp::machine::Conn;

/// Longest sleep of a loop: how soon it notices a stopped session.
const TICK: Duration = Duration::from_millis(20);
/// Longest sleep of a loop that holds no connection and does not accept:
/// its tick has nothing to look at but whether the server stopped, and a
/// connection handed to it wakes it. An idle server's loops then cost a
/// wake-up a second each, loop 0's ticks aside.
const IDLE_TICK: Duration = Duration::from_secs(1);
/// Idle ticks (about a second each) after which a loop the server added
/// for lasting data connections ends its thread ([`loops`]): long enough
/// that back-to-back tests keep their loops, short enough that the
/// server's threads are back to its base soon after the load.
const PARK_AFTER: u32 = 10;

/// First token of the listeners loop 0 accepts on (counting down, outside
/// the slots' tokens: the skeleton hands them to [`Handler::on_token`]).
const LISTEN: usize = usize::MAX - 1;
/// A slot's sockets: its connection, and a loop-side session's own socket
/// (an rr/ping session's or a UDP stream's UDP socket, an SCTP one-to-many
/// session's).
const CONN: usize = 0;
const UDP: usize = 1;

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
    /// An accepted connection; `moved` when the loop that accepted it
    /// read its first frame and moved it on ([`Loop::moves_to`]).
    Conn {
        stream: std::net::TcpStream,
        peer: SocketAddr,
        moved: Option<Moved>,
    },
    /// The TCP listeners, for loop 0 to accept on.
    Listen(Vec<std::net::TcpListener>),
    /// An iperf2 client's TCP test, its header read on the iperf2 port's
    /// thread: admitted (or refused) and counted on the loop.
    Iperf2(Box<Iperf2Conn>),
}

/// An iperf2 client's connection with its header read.
struct Iperf2Conn {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    hdr: crate::protocol::iperf2::ClientHeader,
    /// Bytes read so far (the header).
    got: u64,
}

use loops::Loops;

/// What a connection brings from the loop that accepted it to the loop it
/// moves to once its first frame says it will last.
struct Moved {
    /// Its first frame (encoded again) and what followed it.
    ahead: ReadAhead,
    /// Its setup deadline, fixed at accept.
    setup: Instant,
    /// It holds a place in its address's and network's connections, which
    /// goes with it (forgotten here, adopted there): given back and taken
    /// again, another loop's connection from the same address could take
    /// the place in between, and at `--max-conns-per-client` the moved
    /// one would be refused.
    sourced: bool,
}

/// The loops, and where the next connection goes.
#[derive(Clone)]
pub(super) struct Core {
    loops: Arc<Loops>,
}

impl Core {
    /// Starts `base` loops serving `st`, which may grow to `most` for
    /// lasting data connections ([`Loops`]).
    pub(super) fn start(st: &Arc<State>, base: usize, most: usize) -> io::Result<Core> {
        let loops = Loops::start(st, base, most)?;
        Ok(Core { loops })
    }

    /// Has loop 0 accept on the TCP listeners: a new connection starts on
    /// the thread that accepted it, without a hand-over (which cost
    /// connection churn a thread wake-up per connection), and moves on only
    /// once its first frame shows it will last (`Loop::moves_to`).
    pub(super) fn listen(&self, listeners: Vec<std::net::TcpListener>) -> bool {
        self.loops.send(0, Incoming::Listen(listeners))
    }

    /// Hands an iperf2 client's TCP test (its header, `got` bytes, read)
    /// to the least busy loop, starting an added one if each running loop
    /// holds a connection: it lasts, as a netrig data connection does.
    pub(super) fn hand_iperf2(
        &self,
        st: &Arc<State>,
        stream: std::net::TcpStream,
        peer: SocketAddr,
        hdr: crate::protocol::iperf2::ClientHeader,
        got: u64,
    ) -> bool {
        let k = self.loops.for_data(usize::MAX, st);
        let c = Iperf2Conn {
            stream,
            peer,
            hdr,
            got,
        };
        self.loops.hand_to(k, Incoming::Iperf2(Box::new(c)))
    }

    /// Hands an accepted connection to a loop.
    pub(super) fn hand(&self, stream: std::net::TcpStream, peer: SocketAddr) -> bool {
        let _ = stream.set_nonblocking(true);
        // SCTP associations: their Nagle is SCTP_NODELAY, not inherited.
        let _ = crate::net::set_nodelay(&stream, true);
        self.loops.hand_round(Incoming::Conn {
            stream,
            peer,
            moved: None,
        })
    }
}

/// What happens to a connection after a step.
enum Next {
    /// It waits for its socket or a timer.
    Keep,
    /// It is over.
    Close,
    /// An iperf3 client's connection (`--iperf3-detect`), which sent this
    /// cookie: the iperf3 side takes it.
    Iperf3(crate::protocol::iperf3::Cookie),
    /// Its first frame (put back in its read-ahead) shows it will last: it
    /// goes on on loop `.0` ([`Loop::moves_to`]).
    Move(usize),
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
    /// An rr session over an SCTP one-to-many socket of its own.
    RrSctp(Box<RrSctp<'a>>),
    /// A UDP stream the client sends: its control connection and its socket.
    UdpRecv(Box<UdpRecv<'a>>),
    /// A UDP stream the server sends: its control connection and its socket.
    UdpSend(Box<UdpSend<'a>>),
    /// An iperf2 client's TCP test: its bytes counted until it closes.
    Iperf2(Box<Iperf2Tcp<'a>>),
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
    /// What it draws from `--max-memory`'s account as a control connection
    /// (a data connection's charge is its admission's).
    memory: Option<Charge>,
    /// Watched for room to write: from the first step that leaves it
    /// something to write ([`Slot2::wants_write`]). A data connection that
    /// wrote all it had (a crr server's acknowledgement, reply and report
    /// go out in its first step) is not woken by every acknowledgement of
    /// what it sent.
    writable: bool,
    /// This loop accepted it: once its first frame says what it is, it may
    /// move to a less busy loop ([`Loop::moves_to`]).
    may_move: bool,
}

impl<'a> Slot2<'a> {
    /// A connection arriving `now` at `stage`, with `ahead` read: holding
    /// no place yet, watched for reading only, staying on this loop.
    fn new(
        stream: TcpStream,
        peer: SocketAddr,
        stage: Stage<'a>,
        ahead: ReadAhead,
        now: Instant,
    ) -> Box<Slot2<'a>> {
        Box::new(Slot2 {
            stream,
            peer,
            stage,
            ahead,
            last_progress: now,
            born: now,
            open: None,
            _source: None,
            memory: None,
            writable: false,
            may_move: false,
        })
    }

    /// Whether the connection has something to write that may wait for
    /// room: a data connection's queued bytes or its machine's, a burst
    /// account, anything a conversation, a session or a refusal writes. A
    /// first frame and a lingering refusal are only read.
    fn wants_write(&self) -> bool {
        match &self.stage {
            Stage::First { .. } | Stage::Linger { .. } | Stage::Iperf2(_) => false,
            Stage::Data { out, conn, .. } => !out.is_empty() || conn.has_to_send(),
            Stage::Tail { out, .. } => !out.is_empty(),
            Stage::Control(_)
            | Stage::RrUdp(_)
            | Stage::RrTcp(_)
            | Stage::RrSctp(_)
            | Stage::UdpRecv(_)
            | Stage::UdpSend(_)
            | Stage::Refuse(_) => true,
        }
    }
}

/// A loop's poll, connections, their timers and its mailbox.
type LoopCore<'a> = event_loop::Core<Box<Slot2<'a>>, Incoming>;

struct Loop<'a> {
    st: &'a State,
    arc: Arc<State>,
    /// The loop's poll, its connections (boxed: a slot is taken out for
    /// each step and put back), their timers (each connection's deadline
    /// is its one entry), the mailbox, and the connections that used up
    /// their turn ([`Ran::Yielded`](crate::tcp::drive::Ran::Yielded), a
    /// session's budget) and could go on: those run again after the next
    /// poll's events and timers ([`event_loop::Core::again`]), so that
    /// every other connection, and accepting, comes first (edge-triggered
    /// readiness reports nothing new for them).
    core: LoopCore<'a>,
    buf: Vec<u8>,
    /// This loop's number, and every loop's.
    index: usize,
    loops: Arc<Loops>,
    /// Loop 0: the listeners it accepts on, and until when accepting
    /// pauses after running out of descriptors (a loop-wide wake-up,
    /// [`event_loop::Core::wake_by`], ends the loop's sleep by then).
    listeners: Vec<mio::net::TcpListener>,
    paused: Option<Instant>,
    accept_log: super::RateLimitedLog,
    /// Connections yet to say who they are, oldest first (slot, born): the
    /// first to go when the server holds too many.
    unnamed: VecDeque<(usize, Instant)>,
    /// The sessions this loop's data connections belong to (by address),
    /// with the slots of those here: looked at every tick (a due status row
    /// taken, a stopped session's connections stepped once) instead of
    /// every connection.
    sessions: HashMap<usize, Here>,
    /// Ticks in a row that found the loop holding nothing.
    idle_ticks: u32,
    /// An added loop that held nothing for [`PARK_AFTER`] ticks: its run
    /// ends and its thread parks it ([`loops::Ended::Idle`]).
    parking: bool,
}

/// A session some of a loop's data connections belong to.
struct Here {
    sess: Arc<Session>,
    /// The slots of its connections on this loop.
    slots: HashSet<usize>,
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
            core: LoopCore::new(poll, Some(rx), TICK),
            buf: vec![0u8; super::tcp::SERVER_BUFFER],
            index,
            loops,
            listeners: Vec::new(),
            paused: None,
            accept_log: super::RateLimitedLog::default(),
            unnamed: VecDeque::new(),
            sessions: HashMap::new(),
            idle_ticks: 0,
            parking: false,
        }
    }

    /// Runs the loop, `first` its first message, until the server stops or
    /// (an added loop) it parks with nothing to do.
    fn run(mut self, first: Option<Incoming>) -> loops::Ended {
        if let Some(m) = first {
            self.on_message(m);
        }
        if let Err(e) = event_loop::run(&mut self) {
            eprintln!("netrig serve: event loop failed: {e}");
            return loops::Ended::Done;
        }
        if !self.parking {
            return loops::Ended::Done;
        }
        match self.core.into_parts() {
            (poll, Some(rx)) => loops::Ended::Idle(crate::net::loops::LoopEnd { poll, rx }),
            (_, None) => loops::Ended::Done,
        }
    }

    /// The TCP listeners reached loop 0: they join its poll (as tokens
    /// outside the slots), and what is already pending is accepted.
    fn listen(&mut self, ls: Vec<std::net::TcpListener>) {
        for l in ls {
            let mut l = mio::net::TcpListener::from_std(l);
            let token = Token(LISTEN - self.listeners.len());
            if (self.core.poll.registry())
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

    fn advance(&mut self, k: usize) {
        let Some(mut slot) = self.core.slots.take(k) else {
            return;
        };
        let next = self.step(&mut slot, k);
        self.put_back(k, slot, next, false);
    }

    /// Keeps `slot` (joining it to the poll first when `new`), closes it,
    /// or hands it to a worker thread, as its step said.
    fn put_back(&mut self, k: usize, mut slot: Box<Slot2<'a>>, next: Next, new: bool) {
        match next {
            Next::Keep => {
                // Watched for room to write once it has something to write
                // (and from then on); registering or widening the interest
                // reports the socket's readiness at once.
                let write = slot.writable || slot.wants_write();
                let interest = match write {
                    true => Interest::READABLE | Interest::WRITABLE,
                    false => Interest::READABLE,
                };
                let r = match (new, write && !slot.writable) {
                    (true, _) => self.core.register(&mut slot.stream, k, CONN, interest),
                    (false, true) => self.core.reregister(&mut slot.stream, k, CONN, interest),
                    (false, false) => Ok(()),
                };
                if r.is_err() {
                    return self.close(k, *slot);
                }
                slot.writable = write;
                self.arm(k, &slot);
                self.core.slots.put(k, slot)
            }
            Next::Close => self.close(k, *slot),
            Next::Move(to) => self.move_to(to, k, slot, new),
            Next::Iperf3(cookie) => {
                self.core.close(k);
                self.loops.left(self.index);
                let Slot2 { stream, peer, .. } = *slot;
                let stream = self.release(stream, !new);
                if stream.set_nonblocking(false).is_ok() {
                    super::iperf3::route(&self.arc, stream, peer, cookie);
                }
            }
        }
    }

    /// Slot `k` had its turn and could go on: it runs again on the next
    /// turn of the loop, after everything else.
    fn again(&mut self, k: usize) {
        self.core.again(k, CONN);
    }
}

impl<'a> Handler for Loop<'a> {
    type Slot = Box<Slot2<'a>>;
    type Msg = Incoming;

    fn core(&mut self) -> &mut LoopCore<'a> {
        &mut self.core
    }

    /// Slot `k`'s connection or its session's UDP socket is ready, or the
    /// slot runs again after its turn: it is stepped.
    fn on_ready(&mut self, k: usize, sub: usize, ev: Option<&Event>) {
        // The control connection's readiness: its next read may find a
        // frame (a session's turn skips reading it otherwise).
        if sub == CONN
            && ev.is_some_and(|ev| ev.is_readable() || ev.is_read_closed() || ev.is_error())
            && let Some(slot) = self.core.slots.get_mut(k)
        {
            slot.ahead.stir();
        }
        self.advance(k);
    }

    fn on_timer(&mut self, k: usize, now: Instant) {
        // A data connection's timer (its next burst, its idle deadline's
        // last look) reads whatever came, even if its readiness is not
        // among this turn's events yet. A session's timers do not: its
        // control connection is read on its readiness only.
        if let Some(slot) = self.core.slots.get_mut(k)
            && let Stage::Data { .. } = slot.stage
        {
            slot.ahead.stir();
        }
        self.expire(k, now);
    }

    fn on_message(&mut self, m: Incoming) {
        // A connection brings back the loop's short tick.
        if !matches!(m, Incoming::Listen(_)) {
            self.core.set_tick(TICK, Instant::now());
            self.idle_ticks = 0;
        }
        match m {
            Incoming::Conn {
                stream,
                peer,
                moved,
            } => self.add(stream, peer, moved, false),
            Incoming::Listen(ls) => self.listen(ls),
            Incoming::Iperf2(c) => self.add_iperf2(*c),
        }
    }

    /// A listener (loop 0) has connections to accept.
    fn on_token(&mut self, t: Token, _ev: Option<&Event>) {
        if let Some(i) = LISTEN.checked_sub(t.0)
            && i < self.listeners.len()
        {
            self.accept(i);
        }
    }

    /// Accepting, paused after running out of descriptors, resumes when
    /// its time comes; until then no poll sleeps past it.
    fn on_turn(&mut self, now: Instant) -> Flow {
        if self.paused.is_some_and(|at| now >= at) {
            for i in 0..self.listeners.len() {
                self.accept(i);
            }
        }
        if let Some(at) = self.paused {
            self.core.wake_by(at);
        }
        Flow::Go
    }

    /// Every tick: loop 0 stops accepting once the server stops, the
    /// loop's loop-wide checks run ([`Loop::tick`]), and a stopped server's
    /// loop ends once it holds no connection.
    fn on_tick(&mut self, now: Instant) -> Flow {
        let stop = self.st.stop.load(SeqCst);
        if stop && !self.listeners.is_empty() {
            self.stop_listening();
        }
        self.tick(now);
        let empty = self.core.slots.is_empty();
        match empty && self.listeners.is_empty() {
            true => {
                self.core.set_tick(IDLE_TICK, now);
                self.idle_ticks = self.idle_ticks.saturating_add(1);
            }
            false => self.idle_ticks = 0,
        }
        self.parking = self.index >= self.loops.base() && self.idle_ticks > PARK_AFTER;
        match (stop || self.parking) && empty {
            true => Flow::Stop,
            false => Flow::Go,
        }
    }
}

impl Loop<'_> {
    /// Takes a connection's socket off this loop, out of its poll unless it
    /// never joined it (`registered` false), as the std stream its next
    /// owner takes: another loop, a worker thread, the iperf3 side.
    fn release(&self, mut stream: TcpStream, registered: bool) -> std::net::TcpStream {
        if registered {
            self.core.deregister(&mut stream);
        }
        // SAFETY: the descriptor was just released by the mio stream and is
        // owned by the std stream from here on.
        unsafe { std::net::TcpStream::from_raw_fd(stream.into_raw_fd()) }
    }
}

/// The stage that refuses a connection, logged.
fn refuse<'a>(st: &State, peer: SocketAddr, why: &Refusal) -> Stage<'a> {
    super::log_refusal(st, peer, why);
    Stage::Refuse(Out::new(crate::protocol::proto::encode(&why.message())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_connections_charge_covers_its_slot_machine_and_what_it_holds() {
        // Its slot (boxed), its machine (boxed), one read ahead of the
        // machine, and its acknowledgement and final report queued.
        let held = size_of::<Slot2<'static>>()
            + size_of::<Conn>()
            + crate::net::ahead::AHEAD
            + 2 * crate::protocol::proto::MAX_FIRST_PAYLOAD / 4;
        let charged = crate::server::account::DATA_CONN_BYTES;
        assert!(held as u64 <= charged, "{held} bytes against {charged}");
        assert!(held as u64 * 2 > charged, "{held} bytes against {charged}");
    }
}
