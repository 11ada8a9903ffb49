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
//! The decisions are in [`impair`] (seeded, pure); this module only moves
//! bytes, counts, and logs every impairment it made, so tests can compare a
//! measurement with the truth number for number.

pub mod framer;
pub mod impair;

use serde::Serialize;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use std::io::{self, BufWriter, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::proto::{Message, RrProto, TestSpec};
use crate::udp::header::{FLAG_HANDSHAKE, HEADER_LEN, Header};
use framer::{After, Framer, Piece};
pub mod limits;
use limits::QueueBytes;
pub use limits::RelayLimits;

use impair::{Action, DatagramImpairer, DropCause, ImpairSpec, SharedBucket, StreamImpairer};

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

/// What the relay did in one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DirCounts {
    /// Datagrams subject to impairment.
    pub datagrams: u64,
    /// Datagrams forwarded (duplicates not counted twice).
    pub forwarded: u64,
    /// Dropped by `--loss`/`--drop-every`.
    pub lost: u64,
    /// Dropped by the policer.
    pub policed: u64,
    /// Dropped because the shaping queue was full.
    pub queue_dropped: u64,
    /// Sent twice.
    pub duplicated: u64,
    /// Sent after a later datagram.
    pub reordered: u64,
    /// Datagrams with one flipped payload bit.
    pub corrupted: u64,
    /// Stream data bytes relayed (TCP).
    pub stream_bytes: u64,
    /// Stream bytes flipped (TCP).
    pub stream_corrupted: u64,
    /// Connections reset by `--reset-after` (TCP).
    pub resets: u64,
}

#[derive(Default)]
struct Counters {
    datagrams: AtomicU64,
    forwarded: AtomicU64,
    lost: AtomicU64,
    policed: AtomicU64,
    queue_dropped: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    corrupted: AtomicU64,
    stream_bytes: AtomicU64,
    stream_corrupted: AtomicU64,
    resets: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> DirCounts {
        DirCounts {
            datagrams: self.datagrams.load(SeqCst),
            forwarded: self.forwarded.load(SeqCst),
            lost: self.lost.load(SeqCst),
            policed: self.policed.load(SeqCst),
            queue_dropped: self.queue_dropped.load(SeqCst),
            duplicated: self.duplicated.load(SeqCst),
            reordered: self.reordered.load(SeqCst),
            corrupted: self.corrupted.load(SeqCst),
            stream_bytes: self.stream_bytes.load(SeqCst),
            stream_corrupted: self.stream_corrupted.load(SeqCst),
            resets: self.resets.load(SeqCst),
        }
    }
}

/// Everything the relay did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RelayCounts {
    /// Client to server.
    pub up: DirCounts,
    /// Server to client.
    pub down: DirCounts,
    /// TCP connections relayed.
    pub tcp_connections: u64,
    /// UDP flows relayed.
    pub udp_flows: u64,
    /// TCP connections reset because `max_conns` were open.
    pub tcp_refused: u64,
    /// Datagrams dropped because `max_flows` were open (new flows refused).
    pub udp_refused: u64,
    /// Connections and flows closed after `idle_timeout` without traffic.
    pub idle_closed: u64,
}

/// One impairment the relay made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Seconds since the relay started.
    pub t_s: f64,
    /// "tcp" or "udp".
    pub proto: &'static str,
    /// Connection or flow number, from 0 in order of arrival.
    pub flow: u64,
    /// Direction.
    pub dir: Dir,
    /// What was done: lost, policed, queue_dropped, duplicated, reordered,
    /// corrupted, reset.
    pub event: &'static str,
    /// UDP: the datagram's index in its flow and direction, from 0.
    pub index: Option<u64>,
    /// UDP: the netrig sequence number, when the datagram is netrig's.
    pub seq: Option<u64>,
    /// TCP: the data offset of the flipped byte or of the reset; UDP: the
    /// flipped byte's offset in the datagram.
    pub offset: Option<u64>,
}

const MAX_KEPT_EVENTS: usize = 1_000_000;

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
    counts: [Counters; 2],
    tcp_connections: AtomicU64,
    udp_flows: AtomicU64,
    tcp_refused: AtomicU64,
    udp_refused: AtomicU64,
    idle_closed: AtomicU64,
    /// TCP connections and UDP flows open now.
    open_conns: Arc<AtomicU64>,
    open_flows: Arc<AtomicU64>,
    next_flow: AtomicU64,
    events: Mutex<Vec<Event>>,
    log: Option<Mutex<BufWriter<Box<dyn std::io::Write + Send>>>>,
    /// TCP test sessions seen on control connections: data bytes (up, down)
    /// of each of their data connections.
    sessions: Mutex<HashMap<Uuid, (u64, u64)>>,
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
                crate::udp::clock::realtime_ns()
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

    fn counts(&self, dir: Dir) -> &Counters {
        &self.counts[dir.index()]
    }

    fn seed(&self, flow: u64, dir: Dir) -> u64 {
        self.cfg.seed ^ flow.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (dir as u64 + 1) << 56
    }

    fn event(&self, e: Event) {
        if let Some(log) = &self.log {
            let mut w = log.lock().unwrap_or_else(|p| p.into_inner());
            let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
            let _ = writeln!(
                w,
                "{:.6},{},{},{},{},{},{},{}",
                e.t_s,
                e.proto,
                e.flow,
                match e.dir {
                    Dir::Up => "up",
                    Dir::Down => "down",
                },
                e.event,
                opt(e.index),
                opt(e.seq),
                opt(e.offset)
            );
        }
        if self.cfg.keep_events {
            let mut v = self.events.lock().unwrap_or_else(|p| p.into_inner());
            if v.len() < MAX_KEPT_EVENTS {
                v.push(e);
            }
        }
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
        self.shared
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops accepting; relayed connections and flows wind down by themselves.
    pub fn stop(&self) {
        self.shared.stop.store(true, SeqCst);
        self.flush();
    }

    /// Writes out the event log.
    pub fn flush(&self) {
        if let Some(log) = &self.shared.log {
            let _ = log.lock().unwrap_or_else(|p| p.into_inner()).flush();
        }
    }
}

/// The header line of the `--log` CSV file.
pub const LOG_HEADER: &str = "time_s,proto,flow,dir,event,index,seq,offset";

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
            Some(bind_udp(a).map_err(io_err(format!("cannot listen on UDP {a}")))?)
        } else {
            None
        };
        let log = match &cfg.log {
            Some(p) => {
                let mut w = BufWriter::new(
                    crate::output::create(p)
                        .map_err(io_err(format!("cannot create {}", p.display())))?,
                );
                let _ = writeln!(w, "{LOG_HEADER}");
                Some(Mutex::new(w))
            }
            None => None,
        };
        let buckets = [
            impair::bucket_for(&cfg.up, 0),
            impair::bucket_for(&cfg.down, 0),
        ];
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
                open_flows: Arc::new(AtomicU64::new(0)),
                next_flow: AtomicU64::new(0),
                events: Mutex::new(Vec::new()),
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
        if let Some(u) = self.udp {
            let sh = Arc::clone(&sh);
            std::thread::spawn(move || plain_udp(sh, u));
        }
        let Some(l) = self.tcp else {
            while !sh.stop.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
            return;
        };
        let ls = [l];
        while !sh.stop.load(SeqCst) {
            let Ok(ready) = crate::net::poll_readable(&ls, Duration::from_millis(50)) else {
                continue;
            };
            if !ready[0] {
                continue;
            }
            while let Ok((c, _)) = ls[0].accept() {
                let Some(place) = limits::take(&sh.open_conns, sh.cfg.limits.max_conns) else {
                    sh.tcp_refused.fetch_add(1, SeqCst);
                    crate::net::reset(&c);
                    continue;
                };
                let sh = Arc::clone(&sh);
                std::thread::spawn(move || {
                    let _place = place;
                    tcp_connection(sh, c)
                });
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

/// Per-connection state shared by its two directions.
#[derive(Default)]
struct Conn {
    /// The test requested on this control connection, until it is accepted.
    pending: Option<TestSpec>,
    /// Data bytes the server will send on this data connection.
    down_data: Option<u64>,
    /// The TCP session this control connection set up.
    session: Option<Uuid>,
    /// When either direction last carried bytes (relay clock, ns).
    last_ns: u64,
    /// An idle connection was already counted and reset.
    idle_closed: bool,
}

fn tcp_connection(sh: Arc<Shared>, client: TcpStream) {
    let flow = sh.next_flow.fetch_add(1, SeqCst);
    let _ = client.set_nonblocking(false);
    let Ok(server) = TcpStream::connect_timeout(&sh.cfg.to, Duration::from_secs(5)) else {
        crate::net::reset(&client);
        return;
    };
    sh.tcp_connections.fetch_add(1, SeqCst);
    if sh.cfg.verbosity >= 1 {
        crate::out!(
            "tcp {flow}: {} -> {}",
            client.peer_addr().map_or("?".into(), |a| a.to_string()),
            sh.cfg.to
        );
    }
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // A peer that stops reading cannot hold a pump in a write for ever.
    let _ = client.set_write_timeout(Some(sh.cfg.limits.idle_timeout));
    let _ = server.set_write_timeout(Some(sh.cfg.limits.idle_timeout));
    let conn = Arc::new(Mutex::new(Conn {
        last_ns: sh.now_ns(),
        ..Conn::default()
    }));
    let udp_stop = Arc::new(AtomicBool::new(false));
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = {
        let (sh, conn, udp_stop) = (Arc::clone(&sh), Arc::clone(&conn), Arc::clone(&udp_stop));
        let (c3, s3) = (client.try_clone(), server.try_clone());
        std::thread::spawn(move || {
            if let (Ok(c3), Ok(s3)) = (c3, s3) {
                pump(&sh, &conn, &udp_stop, flow, Dir::Up, c2, s2, (&c3, &s3));
            }
        })
    };
    let (c4, s4) = (client.try_clone(), server.try_clone());
    if let (Ok(c4), Ok(s4)) = (c4, s4) {
        pump(
            &sh,
            &conn,
            &udp_stop,
            flow,
            Dir::Down,
            server,
            client,
            (&c4, &s4),
        );
    }
    let _ = up.join();
    udp_stop.store(true, SeqCst);
    let session = conn.lock().unwrap_or_else(|p| p.into_inner()).session;
    if let Some(id) = session {
        sh.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

/// Looks at one frame going `dir` and says how much data follows it.
fn on_frame(
    sh: &Arc<Shared>,
    conn: &Mutex<Conn>,
    udp_stop: &Arc<AtomicBool>,
    dir: Dir,
    m: &mut Message,
) -> After {
    let mut c = conn.lock().unwrap_or_else(|p| p.into_inner());
    let mut after = After::default();
    match (dir, m) {
        (Dir::Up, Message::TestRequest { test }) => {
            if let TestSpec::Rr(r) = test
                && r.proto == RrProto::Tcp
            {
                after.data = Some(u64::from(r.size) * r.iterations);
            }
            c.pending = Some(test.clone());
        }
        (Dir::Up, Message::DataHello(h)) => {
            let known = sh
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&h.session)
                .copied();
            if let Some((up, down)) = known {
                after.data = Some(up);
                c.down_data = Some(down);
            }
        }
        (Dir::Down, Message::TestAccept { session }) => match c.pending.take() {
            Some(TestSpec::Tcp(t)) => {
                let bytes =
                    crate::plan::expected_bytes(t.pattern, t.transfer, t.push_bytes, t.pull_bytes);
                sh.sessions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(*session, bytes);
                c.session = Some(*session);
            }
            Some(TestSpec::Rr(r)) if r.proto == RrProto::Tcp => {
                after.data = Some(u64::from(r.reply) * r.iterations);
            }
            _ => {}
        },
        (Dir::Down, Message::DataAck { .. }) => after.data = c.down_data,
        (Dir::Down, Message::UdpAccept { port, .. }) if sh.cfg.udp => {
            match udp_flow(sh, *port, udp_stop) {
                Ok(p) => {
                    *port = p;
                    after.rewritten = true;
                }
                Err(e) => eprintln!("relay: cannot relay UDP port {port}: {e}"),
            }
        }
        _ => {}
    }
    after
}

/// Sends chunks after their departure time, in order, from its own thread.
struct Delayed {
    tx: Option<mpsc::SyncSender<(u64, Vec<u8>)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Delayed {
    fn start(sh: &Arc<Shared>, mut to: TcpStream) -> Delayed {
        let (tx, rx) = mpsc::sync_channel::<(u64, Vec<u8>)>(256);
        let sh = Arc::clone(sh);
        let thread = std::thread::spawn(move || {
            for (at, bytes) in rx {
                sleep_until(&sh, at);
                if to.write_all(&bytes).is_err() {
                    break;
                }
            }
        });
        Delayed {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    fn finish(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn sleep_until(sh: &Shared, at_ns: u64) {
    let now = sh.now_ns();
    if at_ns > now {
        std::thread::sleep(Duration::from_nanos(at_ns - now));
    }
}

/// Relays one direction of a TCP connection.
#[allow(clippy::too_many_arguments)]
fn pump(
    sh: &Arc<Shared>,
    conn: &Mutex<Conn>,
    udp_stop: &Arc<AtomicBool>,
    flow: u64,
    dir: Dir,
    mut from: TcpStream,
    mut to: TcpStream,
    both: (&TcpStream, &TcpStream),
) {
    let spec = sh.spec(dir).clone();
    let mut framer = Framer::default();
    let mut imp = StreamImpairer::new(spec.clone(), sh.seed(flow, dir));
    let delayed = if spec.delays() {
        to.try_clone().ok().map(|t| Delayed::start(sh, t))
    } else {
        None
    };
    let mut out = StreamOut {
        to: &mut to,
        bucket: sh.bucket(dir),
        delayed,
    };
    let counts = sh.counts(dir);
    let mut buf = vec![0u8; 64 * 1024];
    let idle = sh.cfg.limits.idle_timeout;
    let _ = from.set_read_timeout(Some(idle.min(Duration::from_secs(1))));
    'outer: loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Err(e) if crate::udp::engine::nothing_yet(&e) => {
                if idle_out(sh, conn, idle) {
                    crate::net::reset(both.0);
                    crate::net::reset(both.1);
                    break;
                }
                continue;
            }
            Err(_) => break,
            Ok(n) => n,
        };
        conn.lock().unwrap_or_else(|p| p.into_inner()).last_ns = sh.now_ns();
        let pieces = framer.push(&buf[..n], &mut |m| on_frame(sh, conn, udp_stop, dir, m));
        for piece in pieces {
            let bytes = match piece {
                Piece::Frame(f) => f,
                Piece::Data(mut d) => {
                    let off = imp.offset();
                    let e = imp.apply(&mut d);
                    counts
                        .stream_bytes
                        .fetch_add(e.cut.map_or(d.len(), |k| k) as u64, Relaxed);
                    for at in &e.corrupted {
                        counts.stream_corrupted.fetch_add(1, SeqCst);
                        sh.event(Event {
                            t_s: sh.t_s(),
                            proto: "tcp",
                            flow,
                            dir,
                            event: "corrupted",
                            index: None,
                            seq: None,
                            offset: Some(*at),
                        });
                    }
                    if let Some(keep) = e.cut {
                        d.truncate(keep);
                        let at = imp.departure(out.ready(sh, d.len()));
                        let _ = out.send(at, d);
                        out.finish();
                        counts.resets.fetch_add(1, SeqCst);
                        sh.event(Event {
                            t_s: sh.t_s(),
                            proto: "tcp",
                            flow,
                            dir,
                            event: "reset",
                            index: None,
                            seq: None,
                            offset: Some(off + keep as u64),
                        });
                        crate::net::reset(both.0);
                        crate::net::reset(both.1);
                        return;
                    }
                    d
                }
            };
            let at = imp.departure(out.ready(sh, bytes.len()));
            if !out.send(at, bytes) {
                break 'outer;
            }
        }
    }
    out.finish();
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// Whether a connection has been idle both ways for `idle`; counts it once.
fn idle_out(sh: &Shared, conn: &Mutex<Conn>, idle: Duration) -> bool {
    let mut c = conn.lock().unwrap_or_else(|p| p.into_inner());
    let quiet = Duration::from_nanos(sh.now_ns().saturating_sub(c.last_ns));
    if quiet < idle {
        return false;
    }
    if !c.idle_closed {
        c.idle_closed = true;
        sh.idle_closed.fetch_add(1, SeqCst);
    }
    true
}

/// Where one direction of a TCP connection goes: straight out, or through a
/// shaper and a delay line.
struct StreamOut<'a> {
    to: &'a mut TcpStream,
    bucket: Option<SharedBucket>,
    delayed: Option<Delayed>,
}

impl StreamOut<'_> {
    /// When `len` bytes arriving now may leave the shaper.
    fn ready(&mut self, sh: &Shared, len: usize) -> u64 {
        let now = sh.now_ns();
        match &self.bucket {
            // TCP's own flow control bounds the queue: no limit here.
            Some(b) => b
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .shape(len, now, u64::MAX)
                .unwrap_or(now),
            None => now,
        }
    }

    fn send(&mut self, at: u64, bytes: Vec<u8>) -> bool {
        match self.delayed.as_ref().and_then(|d| d.tx.as_ref()) {
            Some(tx) => tx.send((at, bytes)).is_ok(),
            None => self.to.write_all(&bytes).is_ok(),
        }
    }

    fn finish(&mut self) {
        if let Some(d) = &mut self.delayed {
            d.finish();
        }
    }
}

/// Starts relaying a netrig UDP test whose server listens on `port`; returns
/// the relay's port for the client.
fn udp_flow(sh: &Arc<Shared>, port: u16, stop: &Arc<AtomicBool>) -> io::Result<u16> {
    let place = Arc::new(
        limits::take(&sh.open_flows, sh.cfg.limits.max_flows).ok_or_else(|| {
            sh.udp_refused.fetch_add(1, SeqCst);
            io::Error::other(format!(
                "{} UDP flows open (--max-flows)",
                sh.cfg.limits.max_flows
            ))
        })?,
    );
    let client_side = bind_udp(SocketAddr::new(sh.cfg.listen.ip(), 0))?;
    let server_side = bind_udp(SocketAddr::new(unspecified_like(sh.cfg.to.ip()), 0))?;
    server_side.connect(SocketAddr::new(sh.cfg.to.ip(), port))?;
    let my_port = client_side.local_addr()?.port();
    let flow = sh.next_flow.fetch_add(1, SeqCst);
    sh.udp_flows.fetch_add(1, SeqCst);
    let peer: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
    {
        let (sh, stop, peer) = (Arc::clone(sh), Arc::clone(stop), Arc::clone(&peer));
        let (from, to) = (client_side.try_clone()?, server_side.try_clone()?);
        let place = Arc::clone(&place);
        std::thread::spawn(move || {
            let _place = place;
            let out = move |d: &[u8]| {
                let _ = to.send(d);
            };
            datagram_pump(&sh, flow, Dir::Up, &from, Some(&peer), out, &stop);
        });
    }
    {
        let (sh, stop) = (Arc::clone(sh), Arc::clone(stop));
        std::thread::spawn(move || {
            let _place = place;
            let to = client_side;
            let out = move |d: &[u8]| {
                if let Some(a) = *peer.lock().unwrap_or_else(|p| p.into_inner()) {
                    let _ = to.send_to(d, a);
                }
            };
            datagram_pump(&sh, flow, Dir::Down, &server_side, None, out, &stop);
        });
    }
    Ok(my_port)
}

/// Plain UDP on the listening port: one upstream socket per client address.
fn plain_udp(sh: Arc<Shared>, sock: UdpSocket) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
    crate::udp::engine::enable_rx_timestamps(&sock);
    let sock = Arc::new(sock);
    let mut flows: HashMap<SocketAddr, PlainFlow> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    while !sh.stop.load(SeqCst) {
        let (n, src, stamp) = match crate::udp::engine::recv_from_stamped(&sock, &mut buf) {
            Ok(x) => x,
            Err(_) => {
                for (_, p, _, _) in flows.values_mut() {
                    p.idle();
                }
                flows.retain(|_, (_, _, done, _)| !done.load(SeqCst));
                continue;
            }
        };
        let flow = match flows.entry(src) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                let Some(place) = limits::take(&sh.open_flows, sh.cfg.limits.max_flows) else {
                    sh.udp_refused.fetch_add(1, SeqCst);
                    continue;
                };
                match plain_flow(&sh, &sock, src, place) {
                    Some(f) => v.insert(f),
                    None => continue,
                }
            }
        };
        flow.1.handle(&mut buf[..n], sh.arrival_ns(stamp));
    }
}

/// The upstream socket, the up pipe, "the flow is over", and its place.
type PlainFlow = (Arc<UdpSocket>, Pipe, Arc<AtomicBool>, limits::Place);

/// Opens the upstream socket for a new client address and starts relaying
/// what comes back.
fn plain_flow(
    sh: &Arc<Shared>,
    sock: &Arc<UdpSocket>,
    src: SocketAddr,
    place: limits::Place,
) -> Option<PlainFlow> {
    let up = bind_udp(SocketAddr::new(unspecified_like(sh.cfg.to.ip()), 0)).ok()?;
    up.connect(sh.cfg.to).ok()?;
    let up = Arc::new(up);
    let flow = sh.next_flow.fetch_add(1, SeqCst);
    sh.udp_flows.fetch_add(1, SeqCst);
    let done = Arc::new(AtomicBool::new(false));
    {
        let (sh, up, back, done) = (
            Arc::clone(sh),
            Arc::clone(&up),
            Arc::clone(sock),
            Arc::clone(&done),
        );
        std::thread::spawn(move || {
            let out = move |d: &[u8]| {
                let _ = back.send_to(d, src);
            };
            datagram_pump(&sh, flow, Dir::Down, &up, None, out, &done);
            done.store(true, SeqCst);
        });
    }
    let to = Arc::clone(&up);
    let pipe = Pipe::new(sh, flow, Dir::Up, move |d: &[u8]| {
        let _ = to.send(d);
    });
    Some((up, pipe, done, place))
}

/// Reads datagrams from `from` and passes them through a [`Pipe`] until
/// `stop` is set or the flow has been silent for the idle timeout.
fn datagram_pump(
    sh: &Arc<Shared>,
    flow: u64,
    dir: Dir,
    from: &UdpSocket,
    learn: Option<&Mutex<Option<SocketAddr>>>,
    out: impl Fn(&[u8]) + Send + Sync + 'static,
    stop: &AtomicBool,
) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    crate::udp::engine::enable_rx_timestamps(from);
    let mut pipe = Pipe::new(sh, flow, dir, out);
    let mut buf = vec![0u8; 65536];
    let mut last = Instant::now();
    let idle = sh.cfg.limits.idle_timeout;
    while !stop.load(SeqCst) && !sh.stop.load(SeqCst) {
        if last.elapsed() >= idle {
            sh.idle_closed.fetch_add(1, SeqCst);
            break;
        }
        match crate::udp::engine::recv_from_stamped(from, &mut buf) {
            Ok((n, src, stamp)) => {
                last = Instant::now();
                if let Some(l) = learn {
                    *l.lock().unwrap_or_else(|p| p.into_inner()) = Some(src);
                }
                pipe.handle(&mut buf[..n], sh.arrival_ns(stamp));
            }
            // Nothing followed a held datagram: release it in order (not a reorder).
            Err(_) => pipe.idle(),
        }
    }
    pipe.idle();
}

type Out = Box<dyn Fn(&[u8]) + Send + Sync>;

/// One direction of one UDP flow: decides, counts, logs, and sends now or
/// after a delay.
struct Pipe {
    sh: Arc<Shared>,
    flow: u64,
    dir: Dir,
    imp: DatagramImpairer,
    held: Option<(Vec<u8>, u64)>,
    out: Arc<Out>,
    queue: Option<mpsc::Sender<(u64, Vec<u8>)>>,
    /// Bytes waiting in `queue`, bounded by `max_queue_bytes`.
    queued: Arc<QueueBytes>,
}

impl Pipe {
    fn new(
        sh: &Arc<Shared>,
        flow: u64,
        dir: Dir,
        out: impl Fn(&[u8]) + Send + Sync + 'static,
    ) -> Pipe {
        let spec = sh.spec(dir).clone();
        let out: Arc<Out> = Arc::new(Box::new(out));
        let queued = Arc::new(QueueBytes::default());
        let queue = spec.delays().then(|| {
            let (tx, rx) = mpsc::channel::<(u64, Vec<u8>)>();
            let (sh, out, queued) = (Arc::clone(sh), Arc::clone(&out), Arc::clone(&queued));
            std::thread::spawn(move || {
                for (at, d) in rx {
                    sleep_until(&sh, at);
                    out(&d);
                    queued.remove(d.len() as u64);
                }
            });
            tx
        });
        Pipe {
            imp: DatagramImpairer::new(spec, sh.seed(flow, dir), sh.now_ns())
                .with_bucket(sh.bucket(dir)),
            sh: Arc::clone(sh),
            flow,
            dir,
            held: None,
            out,
            queue,
            queued,
        }
    }

    /// Sends now or queues for `at`; false when the delay line is full and
    /// the datagram was dropped (counted and logged as a queue drop).
    fn emit(&self, at: u64, d: &[u8], index: u64) -> bool {
        let Some(q) = &self.queue else {
            (self.out)(d);
            return true;
        };
        if !self
            .queued
            .try_add(d.len() as u64, self.sh.cfg.limits.max_queue_bytes)
        {
            let seq = Header::read(d).ok().map(|h| h.seq);
            self.sh.counts(self.dir).queue_dropped.fetch_add(1, SeqCst);
            self.log("queue_dropped", index, seq, None);
            return false;
        }
        let _ = q.send((at, d.to_vec()));
        true
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

    /// Impairs and forwards one datagram that arrived at `now` (relay clock).
    fn handle(&mut self, d: &mut [u8], now: u64) {
        let header = Header::read(d).ok();
        // netrig's setup handshake is not test traffic.
        if header.is_some_and(|h| h.flags & FLAG_HANDSHAKE != 0) {
            self.emit(now, d, self.imp.seen());
            return;
        }
        let seq = header.map(|h| h.seq);
        let protect = if header.is_some() { HEADER_LEN } else { 0 };
        let c = self.sh.counts(self.dir);
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
                    self.held = Some((d.to_vec(), index));
                    return;
                }
                if self.emit(at_ns, d, index) {
                    c.forwarded.fetch_add(1, SeqCst);
                }
                if let Some((h, hi)) = self.held.take()
                    && self.emit(at_ns, &h, hi)
                {
                    c.forwarded.fetch_add(1, SeqCst);
                    c.reordered.fetch_add(1, SeqCst);
                    let hs = Header::read(&h).ok().map(|h| h.seq);
                    self.log("reordered", hi, hs, None);
                }
                if duplicate && self.emit(at_ns, d, index) {
                    c.duplicated.fetch_add(1, SeqCst);
                    self.log("duplicated", index, seq, None);
                }
            }
        }
    }

    /// Releases a held datagram in order.
    fn idle(&mut self) {
        if let Some((h, hi)) = self.held.take()
            && self.emit(self.sh.now_ns(), &h, hi)
        {
            self.sh.counts(self.dir).forwarded.fetch_add(1, SeqCst);
        }
    }
}
