//! The relay's TCP connections on a fixed number of event loops (mio, one
//! per core), as the server's: a relayed connection costs two descriptors
//! and its queued bytes, never a thread, whatever the delay line holds.
//! The accepting thread hands each connection to the least busy loop, which
//! connects upstream without blocking and moves both directions ([`Half`])
//! as the sockets and the departure times allow.

use mio::net::TcpStream;
use mio::{Events, Interest, Token};
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use super::datagram::Link;
use super::limits::{AddrPlace, Place};
use super::stream::{Half, Meta, Turn};
use super::{Dir, Shared};
use crate::net::loops::{LoopEnd, Mailboxes, WAKE};
use crate::net::timers::Timers;

/// How long connecting upstream may take before the client is reset.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a loop looks for idle connections and a stopped relay.
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
    end: LoopEnd<Accepted>,
    index: usize,
    boxes: Arc<Mailboxes<Accepted>>,
    pairs: Vec<Option<Pair>>,
    free: Vec<usize>,
    timers: Timers,
    buf: Vec<u8>,
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
            end,
            index,
            boxes,
            pairs: Vec::new(),
            free: Vec::new(),
            timers: Timers::default(),
            buf: vec![0u8; 256 * 1024],
        }
    }

    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut next_scan = Instant::now();
        loop {
            let timeout = self.timers.timeout(Instant::now(), TICK);
            if let Err(e) = self.end.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                eprintln!("netrig relay: event loop failed: {e}");
                return;
            }
            for ev in &events {
                match ev.token() {
                    WAKE => self.take_incoming(),
                    Token(t) => self.advance(t / 2),
                }
            }
            let now = Instant::now();
            for k in self.timers.due(now) {
                self.advance(k);
            }
            if now >= next_scan {
                self.close_idle();
                next_scan = now + TICK;
                if self.sh.stop.load(SeqCst) && self.pairs.iter().all(Option::is_none) {
                    return;
                }
            }
        }
    }

    fn take_incoming(&mut self) {
        while let Ok(Accepted(client, place, from)) = self.end.rx.try_recv() {
            let place = (place, from);
            self.add(client, place);
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
        let k = self.free.pop().unwrap_or_else(|| {
            self.pairs.push(None);
            self.pairs.len() - 1
        });
        let both = Interest::READABLE | Interest::WRITABLE;
        let reg = self.end.poll.registry();
        if reg.register(&mut client, Token(2 * k), both).is_err()
            || reg.register(&mut server, Token(2 * k + 1), both).is_err()
        {
            crate::net::reset(&client);
            self.free.push(k);
            self.boxes.left(self.index);
            return;
        }
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        self.timers.push(deadline, k);
        self.pairs[k] = Some(Pair {
            flow,
            client,
            server,
            connecting: Some(deadline),
            up: Half::new(sh, flow, Dir::Up),
            down: Half::new(sh, flow, Dir::Down),
            meta: Meta::new(sh.now_ns()),
            link: Arc::default(),
            _place: place,
        });
        self.advance(k);
    }

    fn advance(&mut self, k: usize) {
        let Some(mut pair) = self.pairs.get_mut(k).and_then(Option::take) else {
            return;
        };
        match self.turn(&mut pair) {
            Next::Keep(at) => {
                if let Some(at) = at {
                    self.timers.push(at, k);
                }
                self.pairs[k] = Some(pair);
            }
            Next::Close => self.close(k, pair),
            Next::Reset => {
                crate::net::reset(&pair.client);
                crate::net::reset(&pair.server);
                self.close(k, pair);
            }
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

    /// Resets connections with no traffic either way for `--idle-timeout`
    /// (a control connection is not idle while its UDP test's datagrams
    /// pass), and upstream connections that never came up.
    fn close_idle(&mut self) {
        let now = self.sh.now_ns();
        let idle = self.sh.cfg.limits.idle_timeout.as_nanos() as u64;
        for k in 0..self.pairs.len() {
            let quiet = self.pairs[k].as_ref().is_some_and(|p| {
                let last = p.meta.last_ns.max(p.link.last_ns.load(SeqCst));
                p.connecting.is_none() && now.saturating_sub(last) >= idle
            });
            if quiet && let Some(p) = self.pairs[k].take() {
                self.sh.idle_closed.fetch_add(1, SeqCst);
                crate::net::reset(&p.client);
                crate::net::reset(&p.server);
                self.close(k, p);
            }
        }
    }

    fn close(&mut self, k: usize, mut p: Pair) {
        let reg = self.end.poll.registry();
        let _ = reg.deregister(&mut p.client);
        let _ = reg.deregister(&mut p.server);
        p.link.stop.store(true, SeqCst);
        if let Some(id) = p.meta.session {
            self.sh
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        }
        self.free.push(k);
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
