//! The relay's UDP path on one event loop (mio), whatever the number of
//! flows: flows keyed by client address (or one per netrig UDP test), each
//! with its own upstream socket, datagrams impaired (loss, policing, shaping
//! queue, duplication, reordering, corruption) and counted in both
//! directions. Delayed datagrams wait in a queue per direction, on the
//! loop's timers, and their memory is taken from the relay's `--max-queue`.
//! The loop is the shared skeleton's ([`crate::net::event_loop`]): a flow's
//! one timer entry is its next departure, a held datagram's release or its
//! idle deadline, whichever is first; a test's flow ends when its control
//! connection's loop says so ([`Link::end`]); nothing scans the flows.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use mio::event::Event as Ready;
use mio::unix::SourceFd;
use mio::{Interest, Token};

use super::limits::{self, MemBudget, entry_cost};
use super::{Dir, Event, Shared, bind_udp, unspecified_like};
use crate::net::event_loop::{self, Core, Flow as Go, Handler};
use crate::net::loops::Mailboxes;
use crate::net::sockopt::send_marked;
use crate::protocol::relay::impair::{Action, DatagramImpairer, DropCause};
use crate::protocol::udp::header::{FLAG_HANDSHAKE, HEADER_LEN, Header};

/// The listening socket's token (a flow's sockets are its slot's: the
/// client side 0, the server side 1).
const LISTEN: Token = Token(usize::MAX - 1);

/// How often the loop looks whether the relay stopped (idle flows are
/// found by their own timers, ended ones by a message).
const TICK: Duration = Duration::from_millis(100);

/// A datagram held back for `--reorder` leaves in order if nothing
/// follows it for this long.
const HOLD: Duration = Duration::from_millis(20);

/// Datagrams one socket may deliver per wake-up before the others get a turn.
const BATCH: usize = 256;

/// What a netrig UDP flow shares with the control connection that set it up:
/// when to end, and when it last carried anything (so the control connection,
/// silent during the test, is not idle while its flow is busy).
#[derive(Debug)]
pub(super) struct Link {
    /// The control connection closed: end the flow.
    stop: AtomicBool,
    /// The flow's token on the UDP loop once it runs there ([`NO_FLOW`]
    /// before): where the control connection's end is sent.
    flow: AtomicUsize,
    /// When the flow last carried a datagram (relay clock, ns).
    pub(super) last_ns: AtomicU64,
}

/// A link whose flow is not (yet) on the loop.
const NO_FLOW: usize = usize::MAX;

impl Default for Link {
    fn default() -> Link {
        Link {
            stop: AtomicBool::new(false),
            flow: AtomicUsize::new(NO_FLOW),
            last_ns: AtomicU64::new(0),
        }
    }
}

impl Link {
    /// The control connection closed: its flow, if any, ends. Either the
    /// loop has named the flow, and is sent its end, or it sees `stop`
    /// when it takes the flow in (both stores come before both loads).
    pub(super) fn end(&self, sh: &Shared) {
        self.stop.store(true, SeqCst);
        let flow = self.flow.load(SeqCst);
        if flow != NO_FLOW
            && let Some(b) = sh.udp_box.get()
        {
            b.send(0, UdpMsg::End(Token(flow)));
        }
    }
}

/// What reaches the UDP loop from the control connections' loops.
pub(super) enum UdpMsg {
    /// A netrig UDP test to relay.
    Test(NewTest),
    /// The control connection of the test whose flow has this token closed.
    End(Token),
}

/// A netrig UDP test's two sockets, for the loop.
pub(super) struct NewTest {
    client: UdpSocket,
    server: UdpSocket,
    link: Arc<Link>,
    place: limits::Place,
}

/// The way into the UDP loop.
pub(super) type UdpBox = Mailboxes<UdpMsg>;

/// Starts the UDP loop with the listening socket `sock`.
pub(super) fn start(sh: &Arc<Shared>, sock: UdpSocket) -> io::Result<()> {
    let (boxes, mut ends) = Mailboxes::open(1)?;
    let Some(end) = ends.pop() else {
        return Err(io::Error::other("no UDP loop"));
    };
    sock.set_nonblocking(true)?;
    crate::udp::receive::enable_rx_timestamps(&sock);
    crate::udp::receive::enable_rx_tos(&sock);
    end.poll
        .registry()
        .register(&mut SourceFd(&sock.as_raw_fd()), LISTEN, Interest::READABLE)?;
    let _ = sh.udp_box.set(boxes);
    let mut l = UdpLoop {
        sh: Arc::clone(sh),
        core: Core::new(end.poll, Some(end.rx), TICK),
        listener: sock,
        by_src: HashMap::new(),
        buf: vec![0u8; 65536],
    };
    std::thread::Builder::new()
        .name("relay-udp".into())
        .spawn(move || {
            if let Err(e) = event_loop::run(&mut l) {
                eprintln!("netrig relay: UDP loop failed: {e}");
            }
        })?;
    Ok(())
}

/// Starts relaying a netrig UDP test whose server listens on `port`; returns
/// the relay's port for the client.
pub(super) fn udp_flow(sh: &Arc<Shared>, port: u16, link: &Arc<Link>) -> io::Result<u16> {
    let place = limits::take(&sh.open_flows, sh.cfg.limits.max_flows).ok_or_else(|| {
        sh.udp_refused.fetch_add(1, SeqCst);
        io::Error::other(format!(
            "{} UDP flows open (--max-flows)",
            sh.cfg.limits.max_flows
        ))
    })?;
    let client = bind_udp(SocketAddr::new(sh.cfg.listen.ip(), 0))?;
    let server = bind_udp(SocketAddr::new(unspecified_like(sh.cfg.to.ip()), 0))?;
    server.connect(SocketAddr::new(sh.cfg.to.ip(), port))?;
    let my_port = client.local_addr()?.port();
    let t = NewTest {
        client,
        server,
        link: Arc::clone(link),
        place,
    };
    let sent = sh.udp_box.get().is_some_and(|b| b.send(0, UdpMsg::Test(t)));
    if !sent {
        return Err(io::Error::other("the relay's UDP loop is not running"));
    }
    Ok(my_port)
}

/// Where a flow's datagrams come from and go to.
enum Kind {
    /// Plain UDP on the listening port: `src`'s datagrams go up through
    /// `up`, and what comes back on `up` leaves the listener to `src`.
    Plain { src: SocketAddr, up: UdpSocket },
    /// A netrig UDP test: the client talks to `client` (its address learnt
    /// from what it sends), `server` is connected to the server's port.
    Test {
        client: UdpSocket,
        server: UdpSocket,
        peer: Option<SocketAddr>,
        link: Arc<Link>,
    },
}

struct Flow {
    kind: Kind,
    /// Up, then down.
    pipes: [Pipe; 2],
    last: Instant,
    _place: limits::Place,
}

impl Flow {
    fn sockets(&self) -> Vec<&UdpSocket> {
        match &self.kind {
            Kind::Plain { up, .. } => vec![up],
            Kind::Test { client, server, .. } => vec![client, server],
        }
    }
}

struct UdpLoop {
    sh: Arc<Shared>,
    core: Core<Flow, UdpMsg>,
    listener: UdpSocket,
    by_src: HashMap<SocketAddr, usize>,
    buf: Vec<u8>,
}

impl Handler for UdpLoop {
    type Slot = Flow;
    type Msg = UdpMsg;

    fn core(&mut self) -> &mut Core<Flow, UdpMsg> {
        &mut self.core
    }

    fn on_ready(&mut self, k: usize, sub: usize, _ev: Option<&Ready>) {
        self.read_flow(k, sub == 0);
    }

    fn on_token(&mut self, t: Token, _ev: Option<&Ready>) {
        if t == LISTEN {
            self.read_listener();
        }
    }

    /// Flow `k`'s timer: closed if idle for `--idle-timeout`, otherwise
    /// what is due is sent and its next times (departure, held datagram,
    /// idle deadline) are armed.
    fn on_timer(&mut self, k: usize, now: Instant) {
        let Some(f) = self.core.slots.get(k) else {
            return;
        };
        if now >= f.last + self.sh.cfg.limits.idle_timeout {
            self.sh.idle_closed.fetch_add(1, SeqCst);
            return self.close(k);
        }
        self.wake(k);
    }

    fn on_message(&mut self, m: UdpMsg) {
        match m {
            UdpMsg::Test(t) => self.take_test(t),
            UdpMsg::End(t) => {
                if let Some((k, _)) = self.core.slots.resolve(t) {
                    self.close(k);
                }
            }
        }
    }

    /// Once the relay stops every flow ends (dropped with the loop).
    fn on_tick(&mut self, _now: Instant) -> Go {
        match self.sh.stop.load(SeqCst) {
            true => Go::Stop,
            false => Go::Go,
        }
    }
}

impl UdpLoop {
    fn take_test(&mut self, t: NewTest) {
        let flow = self.sh.next_flow.fetch_add(1, SeqCst);
        self.sh.udp_flows.fetch_add(1, SeqCst);
        let link = Arc::clone(&t.link);
        let kind = Kind::Test {
            client: t.client,
            server: t.server,
            peer: None,
            link: t.link,
        };
        let Some(k) = self.add(flow, kind, t.place) else {
            return;
        };
        link.flow.store(self.core.token(k, 0).0, SeqCst);
        // Its control connection may have closed before the flow was named.
        if link.stop.load(SeqCst) {
            self.close(k);
        }
    }

    /// Registers a new flow's sockets; false if they could not be.
    fn add(&mut self, flow: u64, kind: Kind, place: limits::Place) -> Option<usize> {
        let k = self.core.slots.vacant();
        let f = Flow {
            kind,
            pipes: [
                Pipe::new(&self.sh, flow, Dir::Up),
                Pipe::new(&self.sh, flow, Dir::Down),
            ],
            last: Instant::now(),
            _place: place,
        };
        let socks = f.sockets();
        // A plain flow's one socket is the upstream one (sub 1).
        let first = if socks.len() == 1 { 1 } else { 0 };
        for (i, s) in socks.iter().enumerate() {
            let ok = s.set_nonblocking(true).is_ok()
                && (self.core)
                    .register(
                        &mut SourceFd(&s.as_raw_fd()),
                        k,
                        first + i,
                        Interest::READABLE,
                    )
                    .is_ok();
            if !ok {
                for s in &socks[..i] {
                    self.core.deregister(&mut SourceFd(&s.as_raw_fd()));
                }
                self.core.close(k);
                return None;
            }
            crate::udp::receive::enable_rx_timestamps(s);
            crate::udp::receive::enable_rx_tos(s);
        }
        self.core.arm(k, f.last + self.sh.cfg.limits.idle_timeout);
        self.core.slots.put(k, f);
        Some(k)
    }

    /// Ends flow `k`: its sockets out of the poll, its slot and timer freed.
    fn close(&mut self, k: usize) {
        if let Some(f) = self.core.close(k) {
            for s in f.sockets() {
                self.core.deregister(&mut SourceFd(&s.as_raw_fd()));
            }
            if let Kind::Plain { src, .. } = &f.kind {
                self.by_src.remove(src);
            }
        }
    }

    /// Datagrams on the listening port: plain UDP, one flow per client address.
    fn read_listener(&mut self) {
        for _ in 0..BATCH {
            let (n, src, got) =
                match crate::udp::receive::recv_from_stamped(&self.listener, &mut self.buf) {
                    Ok(x) => x,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    // An ICMP error reported once, a signal: read on.
                    Err(_) => continue,
                };
            let k = match self.by_src.get(&src) {
                Some(&k) => k,
                None => {
                    let Some(k) = self.plain_flow(src) else {
                        continue;
                    };
                    k
                }
            };
            let at = self.sh.arrival_ns(got.stamp);
            self.arrive(k, Dir::Up, n, at, got.tos);
        }
        self.core.again_token(LISTEN);
    }

    /// Opens the upstream socket for a new client address.
    fn plain_flow(&mut self, src: SocketAddr) -> Option<usize> {
        let sh = &self.sh;
        let Some(place) = limits::take(&sh.open_flows, sh.cfg.limits.max_flows) else {
            sh.udp_refused.fetch_add(1, SeqCst);
            return None;
        };
        let up = bind_udp(SocketAddr::new(unspecified_like(sh.cfg.to.ip()), 0)).ok()?;
        up.connect(sh.cfg.to).ok()?;
        let flow = sh.next_flow.fetch_add(1, SeqCst);
        sh.udp_flows.fetch_add(1, SeqCst);
        let k = self.add(flow, Kind::Plain { src, up }, place)?;
        self.by_src.insert(src, k);
        Some(k)
    }

    /// Datagrams on flow `k`'s socket facing the client (`client_side`) or
    /// the server.
    fn read_flow(&mut self, k: usize, client_side: bool) {
        for _ in 0..BATCH {
            let Some(f) = self.core.slots.get_mut(k) else {
                return;
            };
            let got = match (&mut f.kind, client_side) {
                (Kind::Test { client, peer, .. }, true) => {
                    let r = crate::udp::receive::recv_from_stamped(client, &mut self.buf);
                    if let Ok((_, src, _)) = &r {
                        *peer = Some(*src);
                    }
                    r
                }
                (Kind::Test { server: s, .. }, false) | (Kind::Plain { up: s, .. }, false) => {
                    crate::udp::receive::recv_from_stamped(s, &mut self.buf)
                }
                (Kind::Plain { .. }, true) => return,
            };
            match got {
                Ok((n, _, got)) => {
                    let at = self.sh.arrival_ns(got.stamp);
                    let dir = if client_side { Dir::Up } else { Dir::Down };
                    self.arrive(k, dir, n, at, got.tos);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // An ICMP error (the server's port closed) is reported once.
                Err(_) => {}
            }
        }
        self.core.again(k, usize::from(!client_side));
    }

    /// One datagram of `n` bytes (in `buf`) arrived at `at` on flow `k`.
    fn arrive(&mut self, k: usize, dir: Dir, n: usize, at: u64, tos: Option<u8>) {
        let Some(f) = self.core.slots.get_mut(k) else {
            return;
        };
        let now = Instant::now();
        f.last = now;
        if let Kind::Test { link, .. } = &f.kind {
            link.last_ns.store(self.sh.now_ns(), SeqCst);
        }
        let listener = &self.listener;
        let d = &mut self.buf[..n];
        let (pipes, rest) = (&mut f.pipes, &f.kind);
        let flow_view = FlowOut {
            kind: rest,
            listener,
        };
        pipes[dir.index()].handle(d, at, tos, now, &mut |d, tos| flow_view.send(dir, d, tos));
        self.wake(k);
    }

    /// Sends what is due on flow `k`, releases a held datagram nothing
    /// followed, and asks the timers for the next time (or its idle
    /// deadline: the flow's one entry keeps the earliest).
    fn wake(&mut self, k: usize) {
        let Some(f) = self.core.slots.get_mut(k) else {
            return;
        };
        let now = Instant::now();
        let now_ns = self.sh.now_ns();
        let view = FlowOut {
            kind: &f.kind,
            listener: &self.listener,
        };
        let mut next = f.last + self.sh.cfg.limits.idle_timeout;
        for (i, dir) in [Dir::Up, Dir::Down].into_iter().enumerate() {
            let p = &mut f.pipes[i];
            let mut out = |d: &[u8], tos: u8| view.send(dir, d, tos);
            if let Some(since) = p.held_since
                && now >= since + HOLD
            {
                p.idle(now_ns, &mut out);
            }
            let due = p.flush(now_ns, &mut out);
            let at = [
                due.map(|ns| self.sh.t0 + Duration::from_nanos(ns)),
                p.held_since.map(|s| s + HOLD),
            ];
            next = at.into_iter().flatten().fold(next, Instant::min);
        }
        self.core.arm(k, next);
    }
}

/// How a flow's pipes send on, without borrowing the flow mutably.
struct FlowOut<'a> {
    kind: &'a Kind,
    listener: &'a UdpSocket,
}

impl FlowOut<'_> {
    fn send(&self, dir: Dir, d: &[u8], tos: u8) {
        let _ = match (self.kind, dir) {
            (Kind::Plain { up, .. }, Dir::Up) => send_marked(up, d, None, tos),
            (Kind::Plain { src, .. }, Dir::Down) => send_marked(self.listener, d, Some(*src), tos),
            (Kind::Test { server, .. }, Dir::Up) => send_marked(server, d, None, tos),
            (Kind::Test { client, peer, .. }, Dir::Down) => match peer {
                Some(a) => send_marked(client, d, Some(*a), tos),
                None => Ok(0),
            },
        };
    }
}

/// A datagram waiting in a delay line: when it leaves, and its TOS byte.
struct Queued {
    at_ns: u64,
    bytes: Vec<u8>,
    tos: u8,
}

/// What a datagram of `len` bytes costs in a delay line.
fn queued_cost(len: usize) -> u64 {
    entry_cost::<Queued>(len)
}

/// One direction of one UDP flow: decides, counts, logs, and sends now or
/// queues for later. Each datagram leaves with the TOS byte it arrived with
/// (a path that carries marking unchanged), or `--remark`'s.
struct Pipe {
    sh: Arc<Shared>,
    flow: u64,
    dir: Dir,
    imp: DatagramImpairer,
    held: Option<(Vec<u8>, u64, u8)>,
    /// When the last datagram arrived while one is held.
    held_since: Option<Instant>,
    /// Whether datagrams wait for their departure time.
    delays: bool,
    queue: VecDeque<Queued>,
    /// What `queue` holds, as allocated, taken from the relay's budget.
    queued: u64,
    budget: Arc<MemBudget>,
    remark: Option<u8>,
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.budget.give(self.queued);
    }
}

impl Pipe {
    fn new(sh: &Arc<Shared>, flow: u64, dir: Dir) -> Pipe {
        let spec = sh.spec(dir).clone();
        Pipe {
            remark: spec.remark_tos,
            delays: spec.delays(),
            imp: DatagramImpairer::new(spec, sh.seed(flow, dir), sh.now_ns())
                .with_bucket(sh.bucket(dir)),
            sh: Arc::clone(sh),
            flow,
            dir,
            held: None,
            held_since: None,
            queue: VecDeque::new(),
            queued: 0,
            budget: Arc::clone(&sh.budget),
        }
    }

    /// Sends now or queues for `at`; false when the relay's queues are full
    /// and the datagram was dropped (counted and logged as a queue drop).
    fn emit(&mut self, at: u64, d: &[u8], index: u64, tos: u8, out: Out<'_>) -> bool {
        let tos = self.remark.unwrap_or(tos);
        if !self.delays {
            out(d, tos);
            return true;
        }
        let cost = queued_cost(d.len());
        if !self.budget.try_take(cost) {
            let seq = Header::read(d).ok().map(|h| h.seq);
            self.sh.counts(self.dir).queue_dropped.fetch_add(1, SeqCst);
            self.log("queue_dropped", index, seq, None);
            return false;
        }
        self.queued += cost;
        self.queue.push_back(Queued {
            at_ns: at,
            bytes: d.to_vec(),
            tos,
        });
        true
    }

    /// Sends every queued datagram whose time has come; the time of the
    /// next one, if any.
    fn flush(&mut self, now_ns: u64, out: Out<'_>) -> Option<u64> {
        while let Some(q) = self.queue.front() {
            if q.at_ns > now_ns {
                return Some(q.at_ns);
            }
            out(&q.bytes, q.tos);
            let cost = queued_cost(q.bytes.len());
            self.queue.pop_front();
            self.queued -= cost;
            self.budget.give(cost);
        }
        // A VecDeque never shrinks by itself: give an emptied ring back.
        if self.queue.capacity() > 16 {
            self.queue = VecDeque::new();
        }
        None
    }

    fn log(&self, event: &'static str, index: u64, seq: Option<u64>, offset: Option<u64>) {
        self.sh.event(Event {
            t_s: self.sh.t_s(),
            proto: "udp",
            flow: self.flow,
            dir: self.dir,
            event,
            index: Some(index),
            seq,
            offset,
        });
    }

    /// Impairs and forwards one datagram that arrived at `now` (relay
    /// clock) with TOS byte `tos` (0 where the kernel did not say);
    /// `arrived` is the loop's clock, for releasing a held datagram.
    fn handle(&mut self, d: &mut [u8], now: u64, tos: Option<u8>, arrived: Instant, out: Out<'_>) {
        let tos = tos.unwrap_or(0);
        let header = Header::read(d).ok();
        // netrig's setup handshake is not test traffic.
        if header.is_some_and(|h| h.flags & FLAG_HANDSHAKE != 0) {
            let index = self.imp.seen();
            self.emit(now, d, index, tos, out);
            return;
        }
        let seq = header.map(|h| h.seq);
        let protect = if header.is_some() { HEADER_LEN } else { 0 };
        let sh = Arc::clone(&self.sh);
        let c = sh.counts(self.dir);
        c.datagrams.fetch_add(1, SeqCst);
        let index = self.imp.seen();
        match self.imp.decide(d.len(), protect, now) {
            Action::Drop(cause) => {
                let (counter, name) = match cause {
                    DropCause::Loss => (&c.lost, "lost"),
                    DropCause::Police => (&c.policed, "policed"),
                    DropCause::Queue => (&c.queue_dropped, "queue_dropped"),
                };
                counter.fetch_add(1, SeqCst);
                self.log(name, index, seq, None);
            }
            Action::Forward {
                at_ns,
                corrupt,
                duplicate,
                hold,
            } => {
                if let Some(o) = corrupt {
                    d[o] ^= 0x10;
                    c.corrupted.fetch_add(1, SeqCst);
                    self.log("corrupted", index, seq, Some(o as u64));
                }
                if hold && self.held.is_none() {
                    self.held = Some((d.to_vec(), index, tos));
                    self.held_since = Some(arrived);
                    return;
                }
                if self.emit(at_ns, d, index, tos, out) {
                    c.forwarded.fetch_add(1, SeqCst);
                }
                if let Some((h, hi, ht)) = self.held.take() {
                    self.held_since = None;
                    if self.emit(at_ns, &h, hi, ht, out) {
                        c.forwarded.fetch_add(1, SeqCst);
                        c.reordered.fetch_add(1, SeqCst);
                        let hs = Header::read(&h).ok().map(|h| h.seq);
                        self.log("reordered", hi, hs, None);
                    }
                }
                if duplicate && self.emit(at_ns, d, index, tos, out) {
                    c.duplicated.fetch_add(1, SeqCst);
                    self.log("duplicated", index, seq, None);
                }
            }
        }
        if self.held.is_some() {
            self.held_since = Some(arrived);
        }
    }

    /// Releases a held datagram in order (nothing followed it).
    fn idle(&mut self, now_ns: u64, out: Out<'_>) {
        self.held_since = None;
        if let Some((h, hi, ht)) = self.held.take()
            && self.emit(now_ns, &h, hi, ht, out)
        {
            self.sh.counts(self.dir).forwarded.fetch_add(1, SeqCst);
        }
    }
}

/// Sends a datagram with a TOS byte.
type Out<'a> = &'a mut dyn FnMut(&[u8], u8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_datagram_costs_its_allocation_and_entry() {
        let entry = 2 * std::mem::size_of::<Queued>() as u64;
        assert_eq!(queued_cost(1), 32 + entry);
        assert_eq!(queued_cost(8000), 8016 + entry);
        // A one-byte datagram: 112 bytes, as README says.
        assert_eq!(queued_cost(1), 112);
    }
}
