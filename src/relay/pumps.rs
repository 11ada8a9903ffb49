//! The relay's TCP connections on a fixed number of event loops (mio, one
//! per core), as the server's: a relayed connection costs two descriptors
//! and its queued bytes, never a thread, whatever the delay line holds.
//! The accepting thread hands each connection to the least busy loop, which
//! connects upstream without blocking and moves both directions ([`Half`])
//! as the sockets and the departure times allow. The loops are the shared
//! skeleton's ([`crate::net::event_loop`]): a pair's one timer entry is its
//! next departure or its deadline (connect, then idle), so an idle pair is
//! found by its own timer, never by a scan of every pair.

use mio::Interest;
use mio::event::Event;
use mio::net::TcpStream;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use super::datagram::Link;
use super::limits::{AddrPlace, Place};
use super::stream::{Half, Meta, Turn};
use super::{Dir, Shared};
use crate::net::event_loop::{self, Core, Flow, Handler};
use crate::net::loops::{LoopEnd, Mailboxes};

/// How long connecting upstream may take before the client is reset.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a loop looks whether the relay stopped (idle connections
/// are found by their own timers).
const TICK: Duration = Duration::from_millis(100);

/// An accepted client connection and its places under `--max-conns` and
/// `--max-conns-per-addr`.
pub(super) struct Accepted(pub std::net::TcpStream, pub Place, pub AddrPlace);

/// The way into the loops.
pub(super) struct Pumps {
    boxes: Arc<Mailboxes<Accepted>>,
}

impl Pumps {
    /// Starts `threads` loops relaying for `sh`.
    pub(super) fn start(sh: &Arc<Shared>, threads: usize) -> io::Result<Pumps> {
        let (boxes, ends) = Mailboxes::open(threads)?;
        let boxes = Arc::new(boxes);
        for (i, end) in ends.into_iter().enumerate() {
            let mut l = Loop::new(Arc::clone(sh), end, i, Arc::clone(&boxes));
            std::thread::Builder::new()
                .name(format!("relay-{i}"))
                .spawn(move || l.run())?;
        }
        Ok(Pumps { boxes })
    }

    /// Hands a connection to the least busy loop; false if none runs.
    pub(super) fn hand(&self, a: Accepted) -> bool {
        let k = self.boxes.least_busy(0);
        self.boxes.hand_to(k, a)
    }
}

/// A relayed connection: the client's socket, the upstream one, and the two
/// directions between them.
struct Pair {
    flow: u64,
    client: TcpStream,
    server: TcpStream,
    /// Until when the upstream connection may take; `None` once it is up.
    connecting: Option<Instant>,
    up: Half,
    down: Half,
    meta: Meta,
    /// Ends the UDP flows this connection's test set up, and says when
    /// they last carried anything.
    link: Arc<Link>,
    _place: (Place, AddrPlace),
}

/// What happens to a pair after a turn.
enum Next {
    /// Look again when a socket is ready, or at this time.
    Keep(Option<Instant>),
    /// Both directions are over: close.
    Close,
    /// Reset both ends and close.
    Reset,
}

struct Loop {
    sh: Arc<Shared>,
    core: Core<Pair, Accepted>,
    index: usize,
    boxes: Arc<Mailboxes<Accepted>>,
    buf: Vec<u8>,
}

impl Handler for Loop {
    type Slot = Pair;
    type Msg = Accepted;

    fn core(&mut self) -> &mut Core<Pair, Accepted> {
        &mut self.core
    }

    fn on_ready(&mut self, k: usize, _sub: usize, _ev: Option<&Event>) {
        self.advance(k);
    }

    fn on_timer(&mut self, k: usize, _now: Instant) {
        self.expire(k);
    }

    fn on_message(&mut self, Accepted(client, place, from): Accepted) {
        self.add(client, (place, from));
    }

    fn on_tick(&mut self, _now: Instant) -> Flow {
        match self.sh.stop.load(SeqCst) && self.core.slots.is_empty() {
            true => Flow::Stop,
            false => Flow::Go,
        }
    }
}

impl Loop {
    fn new(
        sh: Arc<Shared>,
        end: LoopEnd<Accepted>,
        index: usize,
        boxes: Arc<Mailboxes<Accepted>>,
    ) -> Loop {
        Loop {
            sh,
            core: Core::new(end.poll, Some(end.rx), TICK),
            index,
            boxes,
            buf: vec![0u8; 256 * 1024],
        }
    }

    fn run(&mut self) {
        if let Err(e) = event_loop::run(self) {
            eprintln!("netrig relay: event loop failed: {e}");
        }
    }

    fn add(&mut self, client: std::net::TcpStream, place: (Place, AddrPlace)) {
        let sh = &self.sh;
        let flow = sh.next_flow.fetch_add(1, SeqCst);
        let _ = client.set_nonblocking(true);
        let mut client = TcpStream::from_std(client);
        let Ok(mut server) = TcpStream::connect(sh.cfg.to) else {
            crate::net::reset(&client);
            self.boxes.left(self.index);
            return;
        };
        sh.remark(&server, super::Dir::Up);
        sh.remark(&client, super::Dir::Down);
        let k = self.core.slots.vacant();
        let both = Interest::READABLE | Interest::WRITABLE;
        if self.core.register(&mut client, k, 0, both).is_err()
            || self.core.register(&mut server, k, 1, both).is_err()
        {
            crate::net::reset(&client);
            self.core.close(k);
            self.boxes.left(self.index);
            return;
        }
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        self.core.arm(k, deadline);
        let pair = Pair {
            flow,
            client,
            server,
            connecting: Some(deadline),
            up: Half::new(sh, flow, Dir::Up),
            down: Half::new(sh, flow, Dir::Down),
            meta: Meta::new(sh.now_ns()),
            link: Arc::default(),
            _place: place,
        };
        self.core.slots.put(k, pair);
        self.advance(k);
    }

    fn advance(&mut self, k: usize) {
        let Some(mut pair) = self.core.slots.take(k) else {
            return;
        };
        match self.turn(&mut pair) {
            Next::Keep(at) => {
                // One timer entry: the earlier of the next departure and
                // the deadline (connect, then idle).
                let deadline = self.deadline(&pair);
                if let Some(at) = [at, Some(deadline)].into_iter().flatten().min() {
                    self.core.arm(k, at);
                }
                self.core.slots.put(k, pair);
            }
            Next::Close => self.close(k, pair),
            Next::Reset => {
                crate::net::reset(&pair.client);
                crate::net::reset(&pair.server);
                self.close(k, pair);
            }
        }
    }

    /// When pair `p` is to be looked at if nothing moves: its connect
    /// deadline while connecting, then when it has been quiet either way
    /// for `--idle-timeout` (a control connection is not idle while its
    /// UDP test's datagrams pass).
    fn deadline(&self, p: &Pair) -> Instant {
        if let Some(d) = p.connecting {
            return d;
        }
        let last = p.meta.last_ns.max(p.link.last_ns.load(SeqCst));
        self.sh.t0 + Duration::from_nanos(last) + self.sh.cfg.limits.idle_timeout
    }

    /// Pair `k`'s timer came due: reset if it has been idle for
    /// `--idle-timeout`, moved on (and its deadline re-armed) otherwise;
    /// an idle pair costs one look per idle period, never a scan.
    fn expire(&mut self, k: usize) {
        let Some(p) = self.core.slots.get(k) else {
            return;
        };
        let idle = p.connecting.is_none() && Instant::now() >= self.deadline(p);
        if !idle {
            return self.advance(k);
        }
        if let Some(p) = self.core.slots.take(k) {
            self.sh.idle_closed.fetch_add(1, SeqCst);
            crate::net::reset(&p.client);
            crate::net::reset(&p.server);
            self.close(k, p);
        }
    }

    fn turn(&mut self, p: &mut Pair) -> Next {
        let sh = &self.sh;
        if let Some(deadline) = p.connecting {
            match connected(&p.server) {
                Ok(true) => {
                    p.connecting = None;
                    sh.tcp_connections.fetch_add(1, SeqCst);
                    let _ = p.client.set_nodelay(true);
                    let _ = p.server.set_nodelay(true);
                    if sh.cfg.verbosity >= 1 {
                        crate::out!(
                            "tcp {}: {} -> {}",
                            p.flow,
                            p.client.peer_addr().map_or("?".into(), |a| a.to_string()),
                            sh.cfg.to
                        );
                    }
                }
                Ok(false) if Instant::now() < deadline => return Next::Keep(None),
                // Upstream refused or never answered: the client sees a
                // reset, as it would from the server.
                _ => {
                    crate::net::reset(&p.client);
                    return Next::Close;
                }
            }
        }
        let buf = &mut self.buf;
        let up =
            p.up.turn(sh, &mut p.meta, &p.link, (&p.client, &p.server), buf);
        let down = p
            .down
            .turn(sh, &mut p.meta, &p.link, (&p.server, &p.client), buf);
        match (up, down) {
            (Turn::Reset, _) | (_, Turn::Reset) => Next::Reset,
            (Turn::Done, Turn::Done) => Next::Close,
            (a, b) => {
                let at = [a, b]
                    .into_iter()
                    .filter_map(|t| match t {
                        Turn::Going(at) => at,
                        _ => None,
                    })
                    .min();
                Next::Keep(at.map(|ns| sh.t0 + Duration::from_nanos(ns)))
            }
        }
    }

    fn close(&mut self, k: usize, mut p: Pair) {
        self.core.deregister(&mut p.client);
        self.core.deregister(&mut p.server);
        self.core.close(k);
        p.link.end(&self.sh);
        if let Some(id) = p.meta.session {
            self.sh
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        }
        self.boxes.left(self.index);
    }
}

/// Whether a non-blocking connect finished: Ok(false) while it is under way.
fn connected(s: &TcpStream) -> io::Result<bool> {
    if let Some(e) = s.take_error()? {
        return Err(e);
    }
    match s.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(e),
    }
}
