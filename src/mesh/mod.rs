//! `netrig mesh`: continuous probing of a bounded, deterministic set of k
//! peers, each node answering the others' probes on the same UDP port,
//! with the results on `/metrics`.
//!
//! One thread runs the node (probes, replies, timeouts, TCP connect
//! probes) on one UDP socket; one reads the peer list (DNS or file) every
//! refresh interval; one serves `/metrics` (the `serve --metrics` endpoint,
//! `server/scrape.rs`). Three threads and memory bounded by k peers
//! and [`MAX_PROBERS`](crate::protocol::mesh::answer::MAX_PROBERS), whatever the mesh's size. The logic —
//! choice, accounting, statistics — is in the I/O-free [`crate::protocol::mesh::node`].
pub mod metrics;
pub mod source;

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use thiserror::Error;

use crate::protocol::mesh::node::{self, Node};
use source::{ReadError, Source};

/// How a mesh node runs.
#[derive(Debug, Clone)]
pub struct MeshConfig {
    /// The UDP address probes are answered on and sent from (and, with TCP
    /// connect probes, the TCP one).
    pub listen: SocketAddr,
    /// This node's address as its peers list it; None: found in the list.
    pub me: Option<SocketAddr>,
    pub source: Source,
    pub node: node::Config,
    /// Between two reads of the peer list (±20%).
    pub refresh: Duration,
    /// The probers gauge's window.
    pub window: Duration,
}

/// Why a mesh node cannot run.
#[derive(Debug, Error)]
pub enum MeshError {
    #[error("cannot listen on UDP {0}: {1}")]
    Bind(SocketAddr, io::Error),
    #[error("cannot listen for TCP connect probes on {0}: {1}")]
    TcpBind(SocketAddr, io::Error),
    #[error("cannot start the metrics endpoint: {0}")]
    Metrics(io::Error),
    #[error("mesh event loop failed: {0}")]
    Io(#[from] io::Error),
}

/// What the node's thread and the scrapes share.
struct Shared {
    node: Mutex<Node>,
    stop: Arc<AtomicBool>,
    start: Instant,
    window: Duration,
    refreshes: AtomicU64,
    refresh_errors: AtomicU64,
    send_errors: AtomicU64,
}

impl Shared {
    fn node(&self) -> MutexGuard<'_, Node> {
        // A panic while holding it leaves counters, nothing inconsistent
        // enough to stop reporting.
        self.node.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl crate::server::scrape::Source for Shared {
    fn stopping(&self) -> bool {
        self.stop.load(SeqCst)
    }

    fn render(&self, openmetrics: bool) -> String {
        let r = metrics::Readings {
            now: self.start.elapsed(),
            window: self.window,
            refreshes: self.refreshes.load(Relaxed),
            refresh_errors: self.refresh_errors.load(Relaxed),
            send_errors: self.send_errors.load(Relaxed),
        };
        metrics::render(&self.node(), &r, openmetrics)
    }
}

const UDP: Token = Token(0);
const TCP: Token = Token(1);
/// Tokens from here on are TCP connect probes in flight, one slot each.
const CONNECTS: usize = 2;
/// Longest the loop sleeps: the peer list and `stop` are looked at this often.
const TICK: Duration = Duration::from_millis(100);

/// A TCP connect probe in flight.
struct Connect {
    peer: SocketAddr,
    started: Instant,
    stream: mio::net::TcpStream,
}

/// A bound mesh node.
pub struct Mesh {
    cfg: MeshConfig,
    shared: Arc<Shared>,
    socket: mio::net::UdpSocket,
    tcp: Option<mio::net::TcpListener>,
    local: SocketAddr,
    peers: Receiver<Result<Vec<SocketAddr>, ReadError>>,
    /// Whether `me` came from the configuration or the list.
    me_known: bool,
    /// Whether the node said it is not in the list.
    warned: bool,
}

impl Mesh {
    /// Binds the node's sockets and starts reading the peer list; `stop`
    /// ends it.
    pub fn bind(cfg: MeshConfig, stop: Arc<AtomicBool>) -> Result<Mesh, MeshError> {
        let socket = UdpSocket::bind(cfg.listen).map_err(|e| MeshError::Bind(cfg.listen, e))?;
        let local = socket.local_addr()?;
        socket.set_nonblocking(true)?;
        let tcp = match cfg.node.tcp {
            false => None,
            true => {
                let l = TcpListener::bind(local).map_err(|e| MeshError::TcpBind(local, e))?;
                l.set_nonblocking(true)?;
                Some(mio::net::TcpListener::from_std(l))
            }
        };
        let me = cfg.me.unwrap_or(local);
        let seed: u64 = rand::random();
        let shared = Arc::new(Shared {
            node: Mutex::new(Node::new(cfg.node, me, seed)),
            stop: Arc::clone(&stop),
            start: Instant::now(),
            window: cfg.window,
            refreshes: AtomicU64::new(0),
            refresh_errors: AtomicU64::new(0),
            send_errors: AtomicU64::new(0),
        });
        let (tx, rx) = channel();
        source::refresh(cfg.source.clone(), local.port(), cfg.refresh, tx, stop)?;
        Ok(Mesh {
            me_known: cfg.me.is_some(),
            warned: false,
            cfg,
            shared,
            socket: mio::net::UdpSocket::from_std(socket),
            tcp,
            local,
            peers: rx,
        })
    }

    /// The UDP address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves `/metrics` on `listener` from a thread of its own.
    pub fn serve_metrics(&self, listener: TcpListener) -> Result<(), MeshError> {
        crate::server::scrape::start(Arc::clone(&self.shared), listener).map_err(MeshError::Metrics)
    }

    /// Runs the node until `stop`.
    pub fn run(mut self) -> Result<(), MeshError> {
        let mut poll = Poll::new()?;
        poll.registry()
            .register(&mut self.socket, UDP, Interest::READABLE)?;
        if let Some(l) = self.tcp.as_mut() {
            poll.registry().register(l, TCP, Interest::READABLE)?;
        }
        let mut events = Events::with_capacity(256);
        let mut connects: Vec<Option<Connect>> = Vec::new();
        let mut buf = [0u8; 2048];
        while !self.shared.stop.load(SeqCst) {
            self.take_peers();
            let now = self.shared.start.elapsed();
            let real = crate::net::realtime_ns();
            let (probes, tcp_due, wake) = {
                let mut n = self.shared.node();
                let probes = n.due(now, real);
                let tcp_due = n.tcp_due(now);
                (probes, tcp_due, n.next_wake())
            };
            for (to, b) in probes {
                self.send(&b, to);
            }
            for peer in tcp_due {
                self.start_connect(&poll, &mut connects, peer);
            }
            self.expire_connects(&poll, &mut connects);
            let now = self.shared.start.elapsed();
            let wait = wake.map_or(TICK, |w| w.saturating_sub(now).min(TICK));
            match poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            for ev in &events {
                match ev.token() {
                    UDP => self.read_all(&mut buf),
                    TCP => self.accept_all(),
                    Token(t) => self.finish_connect(&poll, &mut connects, t - CONNECTS),
                }
            }
        }
        Ok(())
    }

    /// Takes the newest peer list read, if any.
    fn take_peers(&mut self) {
        let mut newest = None;
        while let Ok(r) = self.peers.try_recv() {
            match r {
                Ok(list) => {
                    self.shared.refreshes.fetch_add(1, Relaxed);
                    newest = Some(list);
                }
                Err(e) => {
                    self.shared.refresh_errors.fetch_add(1, Relaxed);
                    eprintln!("netrig mesh: {e}; keeping the last peer list");
                }
            }
        }
        let Some(list) = newest else {
            return;
        };
        let now = self.shared.start.elapsed();
        let mut n = self.shared.node();
        if !self.me_known {
            match find_self(&list, self.local) {
                Some(me) => {
                    n.set_me(me);
                    self.me_known = true;
                }
                // Said once: nodes that do not know their own address all
                // hash alike and pick the same peers.
                None if !self.warned => {
                    eprintln!(
                        "netrig mesh: none of the peer list's {} addresses is this node's (port {}); give --self ADDR:PORT",
                        list.len(),
                        self.local.port()
                    );
                    self.warned = true;
                }
                None => {}
            }
        }
        n.set_peers(&list, now);
    }

    fn send(&self, b: &[u8], to: SocketAddr) {
        loop {
            match self.socket.send_to(b, to) {
                Ok(_) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A full buffer or an unreachable peer: the probe is lost,
                // as it would be on the wire.
                Err(_) => {
                    self.shared.send_errors.fetch_add(1, Relaxed);
                    return;
                }
            }
        }
    }

    fn read_all(&self, buf: &mut [u8]) {
        loop {
            match self.socket.recv_from(buf) {
                Ok((len, from)) => {
                    let now = self.shared.start.elapsed();
                    let real = crate::net::realtime_ns();
                    let reply = self.shared.node().datagram(from, &buf[..len], now, real);
                    if let Some(r) = reply {
                        self.send(&r, from);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // An ICMP error from an earlier send: reported here, nothing
                // to do but read on.
                Err(_) => {}
            }
        }
    }

    /// Accepts and closes: a connect probe only needs the handshake.
    fn accept_all(&self) {
        let Some(l) = self.tcp.as_ref() else {
            return;
        };
        loop {
            match l.accept() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    fn start_connect(&self, poll: &Poll, connects: &mut Vec<Option<Connect>>, peer: SocketAddr) {
        // One connect per peer at a time: a slow peer is not piled on.
        if connects.iter().flatten().any(|c| c.peer == peer) {
            return;
        }
        let mut stream = match mio::net::TcpStream::connect(peer) {
            Ok(s) => s,
            Err(_) => return self.shared.node().tcp_done(peer, None),
        };
        let i = match connects.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                connects.push(None);
                connects.len() - 1
            }
        };
        if poll
            .registry()
            .register(&mut stream, Token(CONNECTS + i), Interest::WRITABLE)
            .is_err()
        {
            return self.shared.node().tcp_done(peer, None);
        }
        connects[i] = Some(Connect {
            peer,
            started: Instant::now(),
            stream,
        });
    }

    fn finish_connect(&self, poll: &Poll, connects: &mut [Option<Connect>], i: usize) {
        let Some(c) = connects.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let took = match c.stream.take_error() {
            Ok(None) => match c.stream.peer_addr() {
                Ok(_) => Some(c.started.elapsed()),
                // Not yet: a spurious wake-up.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(_) => None,
            },
            _ => None,
        };
        let peer = c.peer;
        if let Some(mut c) = connects[i].take() {
            let _ = poll.registry().deregister(&mut c.stream);
        }
        self.shared.node().tcp_done(peer, took);
    }

    fn expire_connects(&self, poll: &Poll, connects: &mut [Option<Connect>]) {
        for slot in connects.iter_mut() {
            if slot
                .as_ref()
                .is_some_and(|c| c.started.elapsed() >= self.cfg.node.timeout)
                && let Some(mut c) = slot.take()
            {
                let _ = poll.registry().deregister(&mut c.stream);
                self.shared.node().tcp_done(c.peer, None);
            }
        }
    }
}

/// This node's entry in `list`: its port is the one bound, and its address
/// the one bound or, bound to every address, one of this host's.
pub fn find_self(list: &[SocketAddr], bound: SocketAddr) -> Option<SocketAddr> {
    list.iter().copied().find(|a| {
        a.port() == bound.port()
            && match bound.ip().is_unspecified() {
                false => a.ip() == bound.ip(),
                // Only an address of this host can be bound.
                true => UdpSocket::bind((a.ip(), 0)).is_ok(),
            }
    })
}
