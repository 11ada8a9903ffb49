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
use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

mod ends;
mod sessions;

use super::State;
use super::control::{Control, Job, Turn, WorkerTest, run_job};
use super::limits::{Slot, take_slot};
use super::rr_tcp::RrTcp;
use super::rr_udp::RrUdp;
use super::sources::SourceSlot;
use super::tcp::{Admitted, Session, admit, burst_frames, machine};
use super::udp_recv::UdpRecv;
use super::udp_send::UdpSend;
use crate::net::ahead::ReadAhead;
use crate::net::loops::{Mailboxes, WAKE};
use crate::net::out::Out;
use crate::net::sockopt::apply;
use crate::net::timers::Timers;
use crate::outcome::ResultKind;
use crate::proto::{DataHello, MAX_FIRST_PAYLOAD, Message, ReadError};
use crate::refusal::{Limit, Refusal};
use crate::tcp::drive::{Env, Fin, Ran, Socket, run_until_blocked};
use crate::tcp::machine::Conn;

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
    Iperf3(crate::iperf3::Cookie),
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
    /// Connections that used up their turn ([`Ran::Yielded`]) and could go
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

    /// Accepts what is pending on listener `i` (loop 0).
    fn accept(&mut self, i: usize) {
        let now = Instant::now();
        if self.st.stop.load(SeqCst) || self.paused.is_some_and(|t| now < t) {
            return;
        }
        self.paused = None;
        loop {
            let Some(l) = self.listeners.get(i) else {
                return;
            };
            match l.accept() {
                Ok((s, peer)) => {
                    // SAFETY: the descriptor was just accepted and is owned
                    // by `s`, which gives it up here.
                    let stream = unsafe { std::net::TcpStream::from_raw_fd(s.into_raw_fd()) };
                    let k = self.loops.least_busy(self.index);
                    if k == self.index {
                        self.loops.arrived(k);
                        self.add(stream, peer);
                    } else {
                        self.loops.hand_to(k, Incoming::Conn { stream, peer });
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Per-connection failures (ECONNABORTED) must not stop
                    // the server. Out of descriptors, the pending connection
                    // stays queued: pause, and try again when the timer is due.
                    self.accept_log.note(&e, self.st.cfg.verbosity);
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        // The loop's sleep ends by then (`run`).
                        self.paused = Some(now + super::ACCEPT_BACKOFF);
                    }
                    return;
                }
            }
        }
    }

    /// Loop 0 stops accepting once the server stops.
    fn stop_listening(&mut self) {
        for mut l in self.listeners.drain(..) {
            let _ = self.poll.registry().deregister(&mut l);
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

    fn add(&mut self, stream: std::net::TcpStream, peer: SocketAddr) {
        let st = self.st;
        let ip = peer.ip().to_canonical();
        let max = st.cfg.limits.max_conns_per_client;
        // Non-blocking and without Nagle already: accept4 and the
        // listener (Server::new) made TCP connections so on loop 0, and
        // Core::hand the SCTP associations accepted elsewhere.
        let (source, stage) =
            match super::take_source(&st.per_client, ip, max, crate::refusal::Share::Connections) {
                Ok(source) => (Some(source), None),
                Err(why) => (None, Some(refuse(st, peer, &why.into()))),
            };
        let now = Instant::now();
        let stage = stage.unwrap_or(Stage::First {
            setup: now + st.cfg.handshake_timeout,
        });
        let k = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let mut slot = Box::new(Slot2 {
            stream: TcpStream::from_std(stream),
            peer,
            stage,
            ahead: ReadAhead::default(),
            last_progress: now,
            born: now,
            open: None,
            _source: source,
        });
        // A client sends its hello (and its first data) right behind the
        // handshake: the answer goes out before the socket joins the poll,
        // so that registering it is not between the request and the
        // reply. What arrives meanwhile shows in the registration's first
        // readiness report.
        let next = self.step(&mut slot, k);
        let unnamed = matches!(slot.stage, Stage::First { .. });
        self.put_back(k, slot, next, true);
        if unnamed && self.slots.get(k).is_some_and(Option::is_some) {
            self.evict_unnamed(now);
            self.unnamed.push_back((k, now));
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

    /// A connection whose first bytes may be an iperf3 cookie
    /// (`--iperf3-detect`): reads the rest of the cookie, as netrig's first
    /// frame is read, within the setup deadline and in the queue of
    /// unnamed connections. A client says nothing past its cookie until
    /// asked (`iperf_connect`, `iperf_tcp_connect`), so more is refused.
    fn iperf3_first(&mut self, slot: &mut Slot2<'a>) -> Next<'a> {
        use crate::iperf3::{COOKIE_LEN, Cookie};
        let stream = &slot.stream;
        while slot.ahead.bytes().len() < COOKIE_LEN {
            match slot.ahead.fill(&mut self.buf, |b| (&*stream).read(b)) {
                Ok(0) => return Next::Close,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::Keep,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        let b = slot.ahead.bytes();
        let why = match Cookie::parse(&b[..COOKIE_LEN]) {
            Ok(c) if b.len() == COOKIE_LEN => return Next::Iperf3(c),
            Ok(_) => "bytes from an iperf3 client past its cookie, before the server asked".into(),
            Err(e) => e.to_string(),
        };
        let code = crate::proto::ErrorCode::Malformed;
        super::iperf3::refuse_line(self.st, slot.peer, code, &why);
        Next::Close
    }

    /// Moves `slot` until it blocks, ends, or turns out to be a control
    /// connection.
    fn step(&mut self, slot: &mut Slot2<'a>, k: usize) -> Next<'a> {
        let st = self.st;
        loop {
            match &mut slot.stage {
                Stage::First { .. } => {
                    if st.cfg.iperf3_detect && crate::iperf3::Cookie::may_start(slot.ahead.bytes())
                    {
                        return self.iperf3_first(slot);
                    }
                    let stream = &slot.stream;
                    let ahead = &mut slot.ahead;
                    let hello =
                        match ahead
                            .read_frame_within(&mut self.buf, MAX_FIRST_PAYLOAD, |b| stream.recv(b))
                        {
                            Ok(None) => return Next::Keep,
                            Ok(Some(m)) => m,
                            // Not netrig's magic: iperf3's cookie, maybe.
                            Err(ReadError::Proto(_))
                                if st.cfg.iperf3_detect
                                    && crate::iperf3::Cookie::may_start(slot.ahead.bytes()) =>
                            {
                                continue;
                            }
                            Err(ReadError::Proto(e)) => {
                                slot.stage = refuse(st, slot.peer, &e.into());
                                continue;
                            }
                            Err(e) => {
                                if st.cfg.verbosity >= 2 {
                                    eprintln!("{}: no hello: {e}", slot.peer);
                                }
                                return Next::Close;
                            }
                        };
                    slot.last_progress = Instant::now();
                    // Said who it is: from here on it counts in
                    // `--max-conns`, which refused and silent connections
                    // never take.
                    if matches!(hello, Message::Hello(_) | Message::DataHello(_)) {
                        let max = st.cfg.limits.max_conns;
                        match take_slot(&st.open, u64::from(max)) {
                            Some(open) => slot.open = Some(open),
                            None => {
                                let why = Limit::OpenConnections { max };
                                slot.stage = refuse(st, slot.peer, &why.into());
                                continue;
                            }
                        }
                    }
                    match hello {
                        Message::Hello(h) => {
                            let setup = match slot.stage {
                                Stage::First { setup, .. } => setup,
                                _ => Instant::now(),
                            };
                            let _ = crate::net::keepalive(&slot.stream);
                            let c = Control::new(st, slot.peer, &h, setup);
                            slot.stage = Stage::Control(Box::new(c));
                        }
                        Message::DataHello(h) => {
                            slot.stage = self.data(slot.peer, &h);
                            if let Stage::Data { a, .. } = &slot.stage {
                                self.joined(&a.sess);
                                // The client's window, congestion control,
                                // marking and pacing, on this end too.
                                let v6 = slot.peer.is_ipv6();
                                let _ = apply(&slot.stream, &a.sess.spec.sock, v6, true);
                                a.sess.granted.get_or_init(|| {
                                    crate::net::sockopt::granted(&slot.stream, v6, true)
                                });
                            }
                        }
                        m => {
                            slot.stage = refuse(
                                st,
                                slot.peer,
                                &Refusal::Unexpected {
                                    got: m.type_name(),
                                    context: "where a hello or data hello belongs",
                                },
                            )
                        }
                    }
                }
                Stage::Refuse(out) => {
                    match out.flush(&slot.stream) {
                        Ok(true) => {}
                        Ok(false) => return Next::Keep,
                        Err(_) => return Next::Close,
                    }
                    // A client sends its first data right behind its hello,
                    // and closing with unread bytes resets the connection,
                    // which can destroy the refusal before it arrives: close
                    // this side, and linger briefly (not until the idle
                    // timeout, which let a sender of garbage be read from
                    // for 30 s).
                    let _ = slot.stream.shutdown(std::net::Shutdown::Write);
                    slot.stage = Stage::Linger {
                        until: Instant::now() + REFUSAL_LINGER,
                        read: 0,
                    };
                }
                Stage::Linger { until, read } => {
                    while *read < REFUSAL_READ {
                        let room = self.buf.len().min((REFUSAL_READ - *read) as usize);
                        match (&slot.stream).read(&mut self.buf[..room]) {
                            Ok(0) => return Next::Close,
                            Ok(n) => *read += n as u64,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => return Next::Close,
                        }
                    }
                    let now = Instant::now();
                    if now >= *until || (*read >= REFUSAL_READ && all_acked(&slot.stream)) {
                        return Next::Close;
                    }
                    // Reading wakes it while it reads, and its deadline's
                    // timer ends it at `until`; once reading is done, a
                    // timer looks for the acknowledgement.
                    if *read >= REFUSAL_READ {
                        self.timers.push((now + LINGER_CHECK).min(*until), k);
                    }
                    return Next::Keep;
                }
                Stage::Data { a, conn, out } => {
                    // The ack waits in `out` for the first write, which
                    // carries the first answer too (drive::pump reads first).
                    if let Some(h) = a.sess.guard.halted() {
                        conn.abort(crate::tcp::drive::halt_verdict(h));
                    }
                    let sess = Arc::clone(&a.sess);
                    let stopped = || sess.cancelled();
                    let env = Env {
                        counters: &a.sess.counters,
                        guard: Some(&a.sess.guard),
                        stopped: &stopped,
                        may_read: true,
                        // A burst account follows the report otherwise.
                        fin: match a.sess.spec.burst {
                            None => Fin::WithReport,
                            Some(_) => Fin::OnClose,
                        },
                    };
                    let before = slot.last_progress;
                    let last = &mut slot.last_progress;
                    let ran = run_until_blocked(
                        conn,
                        out,
                        &mut slot.ahead,
                        &slot.stream,
                        &mut self.buf,
                        &env,
                        last,
                    );
                    // TCP_INFO for the session's status rows, from a
                    // connection that is moving: an idle one is not read.
                    if !matches!(ran, Ran::Blocked { .. }) || *last > before {
                        a.sess.sample(*last, slot.stream.as_raw_fd());
                    }
                    match ran {
                        Ran::Settled => {}
                        Ran::Blocked { timer } => {
                            if let Some(at) = timer {
                                self.timers.push(at.min(a.sess.guard.deadline()), k);
                            }
                            return Next::Keep;
                        }
                        Ran::Yielded => {
                            self.again(k);
                            return Next::Keep;
                        }
                    }
                    let Stage::Data { a, conn, .. } =
                        std::mem::replace(&mut slot.stage, Stage::Refuse(Out::new(Vec::new())))
                    else {
                        return Next::Close;
                    };
                    let (result, mine, bursts) = conn.into_result();
                    let show = match result.kind {
                        ResultKind::Success | ResultKind::Cancelled => st.cfg.verbosity >= 3,
                        _ => st.cfg.verbosity >= 2,
                    };
                    if show {
                        crate::out!(
                            "{} sent {} received {} {} {}",
                            slot.peer,
                            mine.sent,
                            mine.received,
                            result.kind,
                            result.detail
                        );
                    }
                    let out = Out::new(burst_frames(&a.sess.spec, result.kind, &bursts));
                    slot.stage = Stage::Tail {
                        a,
                        out,
                        kind: result.kind,
                    };
                }
                Stage::Tail { out, .. } => return keep_if_blocked(out.flush(&slot.stream)),
                Stage::Control(c) => {
                    let now = Instant::now();
                    match c.turn(&slot.stream, &mut slot.ahead, &mut self.buf, now) {
                        Turn::Wait(at) => {
                            if let Some(at) = at {
                                self.timers.push(at, k);
                            }
                            return Next::Keep;
                        }
                        // Dropping the conversation ends its session.
                        Turn::Last(out) => slot.stage = Stage::Refuse(out),
                        Turn::Gone => return Next::Close,
                        Turn::Run(job) => {
                            if let Some(next) = self.start_session(slot, k, *job, now) {
                                return next;
                            }
                        }
                    }
                }
                Stage::UdpRecv(_) | Stage::UdpSend(_) | Stage::RrTcp(_) | Stage::RrUdp(_) => {
                    if let Some(next) = self.session_turn(slot, k) {
                        return next;
                    }
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

    /// The stage after a data hello: admitted (the ack is queued) or refused.
    fn data(&self, peer: SocketAddr, h: &DataHello) -> Stage<'a> {
        match admit(self.st, peer, h) {
            Err(why) => refuse(self.st, peer, &why),
            Ok(a) => {
                let conn = Box::new(machine(&a, h));
                let out = Out::new(crate::proto::encode(&Message::DataAck {
                    connection: h.connection,
                }));
                Stage::Data { a, conn, out }
            }
        }
    }

    /// An admitted UDP or request/response test goes to a worker thread of
    /// its own, with its test slots (which bound the workers) and its
    /// connection, counted in the open connections (and its client's) from
    /// then on.
    fn spawn_worker(&mut self, slot: Slot2<'a>, job: Box<Job<'a, WorkerTest>>) {
        let Slot2 {
            mut stream,
            peer,
            open,
            _source,
            ..
        } = slot;
        let _ = self.poll.registry().deregister(&mut stream);
        // SAFETY: the descriptor was just released by the mio stream and is
        // owned by the std stream from here on.
        let stream = unsafe { std::net::TcpStream::from_raw_fd(stream.into_raw_fd()) };
        let st = Arc::clone(&self.arc);
        let Job { test, slots } = *job;
        let ip = peer.ip().to_canonical();
        let held = slots.hand_over(ip);
        // A control connection was counted open when it said hello.
        std::mem::forget(open);
        let sourced = _source.is_some();
        std::mem::forget(_source);
        let r = std::thread::Builder::new()
            .name("serve-test".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let _open = Slot::adopt(&st.open);
                let _source = sourced.then(|| st.per_client.adopt(ip));
                let _slots = held.adopt(&st);
                run_job(&st, &stream, peer, test);
            });
        if let Err(e) = r {
            eprintln!("cannot start a thread for {peer}: {e}");
        }
    }
}

/// Whether the peer has acknowledged everything this end wrote (the
/// refusal, and the FIN behind it), so a reset on closing cannot destroy
/// it. A socket that cannot tell (SCTP) counts as acknowledged.
fn all_acked(s: &TcpStream) -> bool {
    let mut queued: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int: bytes written and not
    // yet acknowledged.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    r != 0 || queued == 0
}

/// The stage that refuses a connection, logged.
fn refuse<'a>(st: &State, peer: SocketAddr, why: &Refusal) -> Stage<'a> {
    super::log_refusal(st, peer, why);
    Stage::Refuse(Out::new(crate::proto::encode(&why.message())))
}

/// Keep a connection whose output is still going out; close it once all
/// is out or the write failed.
fn keep_if_blocked<'a>(r: io::Result<bool>) -> Next<'a> {
    match r {
        Ok(false) => Next::Keep,
        _ => Next::Close,
    }
}
