//! `netrig relay`: a user-space impairment relay for TCP and UDP, for places
//! without netem.
//!
//! It listens on one address (TCP and UDP on the same port) and forwards to
//! one upstream. It understands just enough of netrig's protocol to impair
//! test data and leave the protocol around it alone: the data of netrig TCP
//! connections (offsets counted as netrig counts them), and UDP test
//! datagrams (the server's UDP port announced on the control connection is
//! rewritten to a relay port, so the stream passes through). Anything else is
//! relayed and impaired as plain bytes or datagrams, so iperf3 and friends can
//! use it too.
//!
//! The decisions are in [`crate::protocol::relay::impair`] (seeded, pure); this module only moves
//! bytes, counts, and logs every impairment it made, so tests can compare a
//! measurement with the truth number for number.

mod datagram;
mod log;
mod pumps;
mod stream;

use serde::Serialize;
use std::collections::HashMap;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

pub mod limits;
use datagram::udp_flow;
pub use limits::RelayLimits;
use log::{DirCounters, EventLog};
pub use log::{DirCounts, Event, LOG_HEADER, RelayCounts};

use crate::protocol::relay::impair::{self, ImpairSpec, SharedBucket};

/// Relay settings.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Where to listen (TCP and UDP, same port; port 0 picks one).
    pub listen: SocketAddr,
    /// Where to forward.
    pub to: SocketAddr,
    /// Impairments client → server.
    pub up: ImpairSpec,
    /// Impairments server → client.
    pub down: ImpairSpec,
    /// Seed for every random choice.
    pub seed: u64,
    /// Relay TCP.
    pub tcp: bool,
    /// Relay UDP.
    pub udp: bool,
    /// Write every impairment to this CSV file.
    pub log: Option<PathBuf>,
    /// Keep every impairment in memory too (for tests; capped).
    pub keep_events: bool,
    /// 0 quiet, 1 connections and flows.
    pub verbosity: u8,
    /// A rate limits each TCP connection and UDP flow on its own, instead of
    /// each direction of the whole relay.
    pub rate_per_flow: bool,
    /// Caps on connections, flows, idle time and queued bytes.
    pub limits: RelayLimits,
}

/// Direction through the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

impl Dir {
    fn index(self) -> usize {
        self as usize
    }
}

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// A setting is invalid.
    #[error("{0}")]
    Config(String),
    /// A socket or file could not be opened.
    #[error("{what}: {source}")]
    Io {
        /// What was being opened.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
}

struct Shared {
    cfg: RelayConfig,
    counts: [DirCounters; 2],
    tcp_connections: AtomicU64,
    udp_flows: AtomicU64,
    tcp_refused: AtomicU64,
    udp_refused: AtomicU64,
    idle_closed: AtomicU64,
    /// TCP connections and UDP flows open now.
    open_conns: Arc<AtomicU64>,
    /// TCP connections open now, per client address.
    per_addr: Arc<limits::PerAddr>,
    /// The memory all queues hold together (`--max-queue`).
    budget: Arc<limits::MemBudget>,
    /// The way into the UDP loop, once it runs.
    udp_box: std::sync::OnceLock<datagram::UdpBox>,
    open_flows: Arc<AtomicU64>,
    next_flow: AtomicU64,
    log: EventLog,
    /// TCP test sessions seen on control connections: data bytes (up, down)
    /// of each of their data connections.
    sessions: Mutex<HashMap<Uuid, crate::protocol::proto::TcpSpec>>,
    stop: AtomicBool,
    t0: Instant,
    /// One token bucket per direction for the whole relay (unless
    /// `rate_per_flow`), as a link's rate limits everything on it.
    buckets: [Option<SharedBucket>; 2],
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// When a datagram reached the relay's socket, on the relay's clock, from
    /// its kernel receive time (CLOCK_REALTIME). Impairments act on arrival
    /// times, as a router's would: if this process is descheduled for a few
    /// ms, the datagrams that queued meanwhile are not seen as a burst (which
    /// a policer would drop), and their delay counts from when they came.
    fn arrival_ns(&self, stamp: Option<u64>) -> u64 {
        let now = self.now_ns();
        match stamp {
            // A clock step could make the age absurd; trust it up to a second.
            Some(st) => now.saturating_sub(
                crate::net::realtime_ns()
                    .saturating_sub(st)
                    .min(1_000_000_000),
            ),
            None => now,
        }
    }

    /// The token bucket a new connection or flow in `dir` draws from.
    fn bucket(&self, dir: Dir) -> Option<SharedBucket> {
        if self.cfg.rate_per_flow {
            impair::bucket_for(self.spec(dir), self.now_ns())
        } else {
            self.buckets[dir.index()].clone()
        }
    }

    fn spec(&self, dir: Dir) -> &ImpairSpec {
        match dir {
            Dir::Up => &self.cfg.up,
            Dir::Down => &self.cfg.down,
        }
    }

    /// Gives the TCP socket `s`, which sends in direction `dir`, the TOS
    /// byte `--remark` asks for there (datagrams carry theirs one by one).
    /// Both families' options are tried: an IPv6 socket may carry IPv4.
    fn remark<S: std::os::fd::AsFd>(&self, s: &S, dir: Dir) {
        if let Some(tos) = self.spec(dir).remark_tos {
            let r = socket2::SockRef::from(s);
            let _ = r.set_tos_v4(u32::from(tos));
            let _ = r.set_tclass_v6(u32::from(tos));
        }
    }

    fn counts(&self, dir: Dir) -> &DirCounters {
        &self.counts[dir.index()]
    }

    fn seed(&self, flow: u64, dir: Dir) -> u64 {
        self.cfg.seed ^ flow.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (dir as u64 + 1) << 56
    }

    fn event(&self, e: Event) {
        self.log.record(e);
    }

    fn t_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

/// A bound relay, ready to [`Relay::run`] or [`Relay::spawn`].
pub struct Relay {
    shared: Arc<Shared>,
    tcp: Option<TcpListener>,
    udp: Option<UdpSocket>,
}

/// A handle on a running relay: its counts, its events, and a stop switch.
#[derive(Clone)]
pub struct RelayHandle {
    shared: Arc<Shared>,
    /// The address the relay listens on.
    pub addr: SocketAddr,
}

impl RelayHandle {
    /// Everything done so far.
    pub fn counts(&self) -> RelayCounts {
        let s = &self.shared;
        RelayCounts {
            up: s.counts(Dir::Up).snapshot(),
            down: s.counts(Dir::Down).snapshot(),
            tcp_connections: s.tcp_connections.load(SeqCst),
            udp_flows: s.udp_flows.load(SeqCst),
            tcp_refused: s.tcp_refused.load(SeqCst),
            udp_refused: s.udp_refused.load(SeqCst),
            idle_closed: s.idle_closed.load(SeqCst),
        }
    }

    /// Every impairment so far (only with `keep_events`).
    pub fn events(&self) -> Vec<Event> {
        self.shared.log.events()
    }

    /// Stops accepting; relayed connections and flows wind down by themselves.
    pub fn stop(&self) {
        self.shared.stop.store(true, SeqCst);
        self.flush();
    }

    /// Writes out the event log.
    pub fn flush(&self) {
        self.shared.log.flush();
    }
}

impl Relay {
    /// Validates the settings and binds the listening sockets.
    pub fn bind(cfg: RelayConfig) -> Result<Relay, RelayError> {
        for (name, s) in [("up", &cfg.up), ("down", &cfg.down)] {
            s.validate()
                .map_err(|e| RelayError::Config(format!("{name}: {e}")))?;
        }
        if !cfg.tcp && !cfg.udp {
            return Err(RelayError::Config(
                "nothing to relay: neither TCP nor UDP".into(),
            ));
        }
        let io_err = |what: String| move |source| RelayError::Io { what, source };
        // Both listen on one port. Asked for port 0, the kernel picks the
        // TCP one, and its UDP twin may already be taken: another pick is
        // tried, at most PICKS in all.
        const PICKS: usize = 16;
        let mut picks = 0;
        let (tcp, udp) = loop {
            picks += 1;
            let mut port = cfg.listen.port();
            let tcp = if cfg.tcp {
                let l = crate::net::listen(cfg.listen)
                    .map_err(io_err(format!("cannot listen on TCP {}", cfg.listen)))?;
                port = l
                    .local_addr()
                    .map_err(io_err("listener address".into()))?
                    .port();
                Some(l)
            } else {
                None
            };
            let udp = if cfg.udp {
                let a = SocketAddr::new(cfg.listen.ip(), port);
                match bind_udp(a) {
                    Ok(s) => Some(s),
                    Err(e)
                        if e.kind() == std::io::ErrorKind::AddrInUse
                            && tcp.is_some()
                            && cfg.listen.port() == 0
                            && picks < PICKS =>
                    {
                        continue;
                    }
                    Err(e) => return Err(io_err(format!("cannot listen on UDP {a}"))(e)),
                }
            } else {
                None
            };
            break (tcp, udp);
        };
        let log = EventLog::open(cfg.log.as_deref(), cfg.keep_events).map_err(io_err(format!(
            "cannot create {}",
            cfg.log.as_deref().unwrap_or(Path::new("")).display()
        )))?;
        let buckets = [
            impair::bucket_for(&cfg.up, 0),
            impair::bucket_for(&cfg.down, 0),
        ];
        let budget = Arc::new(limits::MemBudget::new(cfg.limits.max_queue_bytes));
        Ok(Relay {
            shared: Arc::new(Shared {
                buckets,
                cfg,
                counts: Default::default(),
                tcp_connections: AtomicU64::new(0),
                udp_flows: AtomicU64::new(0),
                tcp_refused: AtomicU64::new(0),
                udp_refused: AtomicU64::new(0),
                idle_closed: AtomicU64::new(0),
                open_conns: Arc::new(AtomicU64::new(0)),
                per_addr: Arc::default(),
                budget,
                udp_box: std::sync::OnceLock::new(),
                open_flows: Arc::new(AtomicU64::new(0)),
                next_flow: AtomicU64::new(0),
                log,
                sessions: Mutex::new(HashMap::new()),
                stop: AtomicBool::new(false),
                t0: Instant::now(),
            }),
            tcp,
            udp,
        })
    }

    /// A handle for counts, events and stopping.
    pub fn handle(&self) -> RelayHandle {
        let addr = self
            .tcp
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .or_else(|| self.udp.as_ref().and_then(|u| u.local_addr().ok()))
            .unwrap_or(self.shared.cfg.listen);
        RelayHandle {
            shared: Arc::clone(&self.shared),
            addr,
        }
    }

    /// Runs in background threads; returns at once.
    pub fn spawn(self) -> RelayHandle {
        let h = self.handle();
        std::thread::spawn(move || self.run());
        h
    }

    /// Relays until stopped.
    pub fn run(self) {
        let sh = self.shared;
        if let Some(u) = self.udp
            && let Err(e) = datagram::start(&sh, u)
        {
            eprintln!("netrig relay: cannot start its UDP loop: {e}");
        }
        let Some(l) = self.tcp else {
            while !sh.stop.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
            return;
        };
        // Without loops nothing can be relayed; say why once and refuse.
        let pumps = match pumps::Pumps::start(&sh, crate::net::event_loops()) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("netrig relay: cannot start its event loops: {e}");
                None
            }
        };
        let ls = [l];
        while !sh.stop.load(SeqCst) {
            let Ok(ready) = crate::net::poll_readable(&ls, Duration::from_millis(50)) else {
                continue;
            };
            if !ready[0] {
                continue;
            }
            while let Ok((c, peer)) = ls[0].accept() {
                // Refused at once, before any memory or upstream socket.
                let ip = peer.ip().to_canonical();
                let per = sh.cfg.limits.max_conns_per_addr;
                let Some(from) = limits::take_for(&sh.per_addr, ip, per) else {
                    sh.tcp_refused.fetch_add(1, SeqCst);
                    crate::net::reset(&c);
                    continue;
                };
                let Some(place) = limits::take(&sh.open_conns, sh.cfg.limits.max_conns) else {
                    sh.tcp_refused.fetch_add(1, SeqCst);
                    crate::net::reset(&c);
                    continue;
                };
                if !pumps
                    .as_ref()
                    .is_some_and(|p| p.hand(pumps::Accepted(c, place, from)))
                {
                    sh.tcp_refused.fetch_add(1, SeqCst);
                }
            }
        }
    }
}

fn bind_udp(a: SocketAddr) -> io::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(a),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    if a.is_ipv6() {
        s.set_only_v6(false)?;
    }
    // Large buffers so the relay itself does not drop what it did not mean to.
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s.bind(&a.into())?;
    Ok(s.into())
}

fn unspecified_like(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}
