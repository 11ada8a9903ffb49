//! The client's side of request/response tests (`rr`, `ping`): time each
//! request until its whole reply is back, on a monotonic clock, keeping
//! warm-up samples apart; over UDP also split the round trip into one-way
//! estimates and tell loss on the way up from loss on the way down.

use serde::Serialize;
use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use super::hist::{LatencyStats, Summary};
use super::serve::write_pattern;
use crate::control::{ClientError, Control};
use crate::pattern::{Direction, Pattern, stream_start};
use crate::proto::{Message, RrProto, RrSpec, TestSpec};
use crate::udp::clock::Offset;

/// Transport as the user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP one-to-one (SOCK_STREAM).
    Sctp,
    /// SCTP one-to-many (SOCK_SEQPACKET).
    SctpSeqpacket,
}

/// Everything a request/response run needs.
#[derive(Debug, Clone, Serialize)]
pub struct RrConfig {
    /// Server.
    pub target: String,
    /// Port if the target names none.
    pub port: u16,
    /// Pre-shared key for servers that require one (never written to files).
    #[serde(skip)]
    pub key: Option<crate::auth::Key>,
    /// Transport.
    pub transport: Transport,
    /// Request payload bytes.
    pub size: u32,
    /// Reply payload bytes.
    pub reply: u32,
    /// Measured iterations ([`UNBOUNDED`] = until Ctrl-C).
    pub iterations: u64,
    /// Iterations before measuring, reported separately.
    pub warmup: u64,
    /// Enable Nagle.
    pub nagle: bool,
    /// Spin on non-blocking sockets instead of sleeping in the kernel.
    pub busy_poll: bool,
    /// UDP: end each round trip at the kernel's receive time of the reply
    /// (SO_TIMESTAMPNS), not when this process wakes up to read it.
    #[serde(default)]
    pub rx_timestamps: bool,
    /// UDP: a reply later than this counts as lost.
    #[serde(with = "crate::report::duration_ms")]
    pub timeout: Option<Duration>,
    /// Send requests on this schedule instead of back to back.
    #[serde(with = "crate::report::duration_ms")]
    pub interval: Option<Duration>,
    /// Histogram lower bound, µs.
    pub hist_min_us: f64,
    /// Histogram upper bound, µs.
    pub hist_max_us: f64,
    /// Histogram bins.
    pub hist_bins: usize,
    /// Largest outliers kept.
    pub outliers: usize,
    /// Trust clocks (no offset estimate) for one-way splits.
    pub synced: bool,
    /// Local addresses: the first for the connection (and UDP socket); all of
    /// them for an SCTP one-to-many association (multi-homed).
    pub bind: Vec<IpAddr>,
}

/// `RrConfig::iterations` for a run that goes on until it is interrupted.
pub const UNBOUNDED: u64 = u64::MAX;

/// One request's outcome, for ping-style printing.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// Sequence number.
    pub seq: u64,
    /// Round trip, µs (None: lost).
    pub rtt_us: Option<f64>,
    /// Estimated client-to-server delay, µs (UDP).
    pub up_us: Option<f64>,
    /// Estimated server-to-client delay, µs (UDP).
    pub down_us: Option<f64>,
    /// The one-way split is right to within ± this, µs (the clock offset's
    /// bound); `None` when the clocks are trusted (`--synced`) or over TCP.
    pub split_error_us: Option<f64>,
    /// A reply that came after its request had timed out (and was reported lost).
    pub late: bool,
    /// Part of the warm-up.
    pub warmup: bool,
}

/// What a request/response run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RrReport {
    /// Request bytes.
    pub size: u32,
    /// Reply bytes.
    pub reply: u32,
    /// Transport.
    pub transport: Transport,
    /// Warm-up round trips.
    pub warmup: Option<Summary>,
    /// Measured round trips.
    pub latency: Option<Summary>,
    /// Measured transactions per second.
    pub transactions_per_sec: f64,
    /// Requests sent (warm-up included).
    pub sent: u64,
    /// Replies received in time.
    pub received: u64,
    /// Replies that came after their timeout.
    pub late: u64,
    /// Requests that never reached the server (UDP).
    pub lost_up: Option<u64>,
    /// Replies the server sent that never arrived (UDP).
    pub lost_down: Option<u64>,
    /// Clock offset used for one-way splits (UDP).
    pub offset: Option<Offset>,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
    /// Corrupt replies.
    pub corrupt: u64,
    /// Requests the server says it answered.
    pub server_requests: Option<u64>,
    /// Corrupt requests the server saw.
    pub server_corrupt: Option<u64>,
    /// Replies timed by their kernel receive timestamp (`rx_timestamps`).
    pub rx_stamped: u64,
    /// The network error that ended the run early, if one did; everything
    /// above counts what was measured before it.
    pub error: Option<String>,
}

/// How often a UDP run checks that the server is still there.
pub(super) const LIVENESS_CHECK: Duration = Duration::from_millis(250);

/// One run in progress: its settings, its samples so far, and its stop flag.
pub(super) struct Run<'a> {
    pub(super) cfg: &'a RrConfig,
    /// Requests to send, warm-up included.
    pub(super) total: u64,
    pub(super) interrupt: &'a AtomicBool,
    warm: LatencyStats,
    main: LatencyStats,
    pub(super) rep: RrReport,
    /// Wall-clock span of the measured round trips: from the start of the
    /// first to the end of the last (transactions per second, as ACE counts
    /// them, include everything between round trips).
    main_span: Option<(Instant, Instant)>,
}

impl Run<'_> {
    pub(super) fn record(&mut self, seq: u64, rtt: Duration) {
        let ns = rtt.as_nanos() as u64;
        if seq < self.cfg.warmup {
            self.warm.record_ns(ns);
        } else {
            self.main.record_ns(ns);
            let now = Instant::now();
            let first = self
                .main_span
                .map_or(now.checked_sub(rtt).unwrap_or(now), |s| s.0);
            self.main_span = Some((first, now));
        }
    }
}

fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match retrying(true, || s.read(&mut buf[got..]))? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    Ok(())
}

fn spin_write(s: &mut TcpStream, buf: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        done += retrying(true, || s.write(&buf[done..]))?;
    }
    Ok(())
}

/// Runs one socket call until it completes: again after a signal, and, when
/// busy-polling a non-blocking socket, again (spinning) while it would block.
fn retrying<T>(busy: bool, mut call: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match call() {
            Err(e) if busy && e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// Waits for the next slot of an `--interval` schedule.
fn pace(start: Instant, seq: u64, interval: Option<Duration>, busy: bool, interrupt: &AtomicBool) {
    let Some(iv) = interval else { return };
    let due = start + iv.saturating_mul(seq.min(u32::MAX as u64) as u32);
    while Instant::now() < due && !interrupt.load(SeqCst) {
        let left = due - Instant::now();
        if busy || left < Duration::from_micros(200) {
            std::hint::spin_loop();
        } else {
            std::thread::sleep((left - Duration::from_micros(100)).min(Duration::from_millis(50)));
        }
    }
}

/// Runs a request/response test. `on_probe` sees every request as it completes.
pub fn run(
    cfg: &RrConfig,
    interrupt: Arc<AtomicBool>,
    on_probe: &mut dyn FnMut(&Probe),
) -> Result<(RrReport, LatencyStats), ClientError> {
    if matches!(cfg.transport, Transport::Sctp | Transport::SctpSeqpacket) {
        crate::sctp::support(cfg.transport == Transport::SctpSeqpacket)?;
    }
    let (proto, stream_kind) = match cfg.transport {
        Transport::Tcp => (RrProto::Tcp, crate::net::Stream::Tcp),
        Transport::Udp => (RrProto::Udp, crate::net::Stream::Tcp),
        // SCTP one-to-one runs the stream protocol, exactly like TCP.
        Transport::Sctp => (RrProto::Tcp, crate::net::Stream::Sctp),
        // One-to-many: control over TCP, messages on an association of their own.
        Transport::SctpSeqpacket => (RrProto::SctpSeqpacket, crate::net::Stream::Tcp),
    };
    let total = cfg.warmup.saturating_add(cfg.iterations);
    let spec = RrSpec {
        proto,
        size: cfg.size,
        reply: cfg.reply,
        iterations: total,
        nagle: cfg.nagle,
        until_stopped: cfg.iterations == UNBOUNDED,
    };
    let bind = |a: std::net::SocketAddr| {
        Ok(cfg
            .bind
            .iter()
            .copied()
            .find(|b| b.is_ipv4() == a.is_ipv4()))
    };
    let mut c = Control::connect_over(
        &cfg.target,
        cfg.port,
        bind,
        Duration::from_secs(10),
        stream_kind,
        cfg.key.as_ref(),
    )?;
    let accept = c.request(TestSpec::Rr(spec))?;
    let new_stats = || {
        LatencyStats::new(
            cfg.hist_min_us,
            cfg.hist_max_us,
            cfg.hist_bins,
            cfg.outliers,
        )
    };
    let mut run = Run {
        cfg,
        total,
        interrupt: &interrupt,
        warm: new_stats(),
        main: new_stats(),
        rep: RrReport {
            size: cfg.size,
            reply: cfg.reply,
            transport: cfg.transport,
            warmup: None,
            latency: None,
            transactions_per_sec: 0.0,
            sent: 0,
            received: 0,
            late: 0,
            lost_up: None,
            lost_down: None,
            offset: None,
            interrupted: false,
            corrupt: 0,
            server_requests: None,
            server_corrupt: None,
            rx_stamped: 0,
            error: None,
        },
        main_span: None,
    };
    let result = match (proto, accept) {
        (RrProto::Tcp, Message::TestAccept { session }) => tcp(&mut c, session, &mut run, on_probe),
        (RrProto::Udp, Message::UdpAccept { port, token, .. }) => {
            super::udp::run(&mut c, port, token, &mut run, on_probe)
        }
        (RrProto::SctpSeqpacket, Message::SeqpacketAccept { session, port }) => {
            seqpacket(&mut c, session, port, &mut run, on_probe)
        }
        (_, m) => Err(c.unexpected(m)),
    };
    // Once round trips have begun, a failure ends the run but keeps what was
    // measured: the caller reports it and still writes its files.
    let failed = result.err().map(|e| e.to_string());
    let _ = c.stream.set_nonblocking(false);
    let _ = c.stream.set_read_timeout(Some(Duration::from_secs(5)));
    // A TCP server that still expects raw requests would read a goodbye frame
    // as request bytes: after an early stop, closing is the goodbye.
    let finished = failed.is_none()
        && (proto != RrProto::Tcp || run.rep.sent == total)
        && !crate::control::hurried();
    let server = match finished.then(|| c.call(&Message::Goodbye)) {
        Some(Ok(Message::Summary(s))) => Some(s),
        _ => None,
    };
    let mut rep = run.rep;
    rep.error = failed;
    rep.interrupted = interrupt.load(SeqCst);
    rep.server_requests = server.as_ref().map(|s| s.requests);
    rep.server_corrupt = server.as_ref().map(|s| s.data_errors);
    rep.warmup = run.warm.summary();
    rep.latency = run.main.summary();
    if let Some((first, last)) = run.main_span
        && last > first
    {
        rep.transactions_per_sec = run.main.count() as f64 / (last - first).as_secs_f64();
    }
    if proto == RrProto::Udp
        && let Some(s) = server
    {
        rep.lost_up = Some(rep.sent.saturating_sub(s.requests));
        rep.lost_down = Some(s.requests.saturating_sub(rep.received + rep.late));
    }
    Ok((rep, run.main))
}

/// Request/response on the control connection itself (TCP, SCTP one-to-one).
fn tcp(
    c: &mut Control,
    session: uuid::Uuid,
    run: &mut Run,
    on_probe: &mut dyn FnMut(&Probe),
) -> Result<(), ClientError> {
    let cfg = run.cfg;
    let s = &mut c.stream;
    let _ = crate::net::set_nodelay(s, !cfg.nagle);
    let _ = s.set_read_timeout(Some(cfg.timeout.unwrap_or(Duration::from_secs(30))));
    if cfg.busy_poll {
        let _ = s.set_nonblocking(true);
    }
    let busy = cfg.busy_poll;
    let r = exchanges(run, session, on_probe, |req, rep| {
        if busy {
            spin_write(s, req)?;
            spin_read(s, rep)?;
        } else {
            s.write_all(req)?;
            s.read_exact(rep)?;
        }
        Ok(rep.len())
    });
    r.map_err(|(done, e)| {
        c.failed(format!(
            "request/response failed after {done} requests: {e}"
        ))
    })
}

/// Request/response as messages on an SCTP one-to-many association from a
/// socket bound to every `--bind` address (multi-homed).
fn seqpacket(
    c: &mut Control,
    session: uuid::Uuid,
    port: u16,
    run: &mut Run,
    on_probe: &mut dyn FnMut(&Probe),
) -> Result<(), ClientError> {
    let cfg = run.cfg;
    let server = std::net::SocketAddr::new(c.addr.ip(), port);
    let bind: Vec<IpAddr> = cfg
        .bind
        .iter()
        .copied()
        .filter(|b| b.is_ipv4() == server.is_ipv4())
        .collect();
    let sock = crate::sctp::seqpacket_client(server, &bind)
        .map_err(|e| c.failed(format!("SCTP one-to-many socket bound to {bind:?}: {e}")))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    let _ = crate::sctp::set_nodelay(fd, !cfg.nagle);
    let _ = sock.set_read_timeout(Some(cfg.timeout.unwrap_or(Duration::from_secs(30))));
    if cfg.busy_poll {
        let _ = sock.set_nonblocking(true);
    }
    let to = socket2::SockAddr::from(server);
    let busy = cfg.busy_poll;
    let r = exchanges(run, session, on_probe, |req, rep| {
        retrying(busy, || sock.send_to(req, &to))?;
        retrying(busy, || crate::sctp::recv_message(&sock, rep)).map(|(n, _)| n)
    });
    r.map_err(|(done, e)| {
        c.failed(format!(
            "SCTP one-to-many request/response failed after {done} requests: {e}"
        ))
    })
}

/// The loop shared by the transports whose every byte arrives or the run
/// fails: build request `seq` as pattern, time `exchange` (which sends it and
/// receives the reply, returning the reply's length), check the reply against
/// the pattern. A failure returns the replies received before it.
fn exchanges(
    run: &mut Run,
    session: uuid::Uuid,
    on_probe: &mut dyn FnMut(&Probe),
    mut exchange: impl FnMut(&[u8], &mut [u8]) -> io::Result<usize>,
) -> Result<(), (u64, io::Error)> {
    let (cfg, total, interrupt) = (run.cfg, run.total, run.interrupt);
    let (req_start, rep_start) = (
        stream_start(session, Direction::ClientToServer),
        stream_start(session, Direction::ServerToClient),
    );
    let mut req = Vec::with_capacity(cfg.size as usize);
    // One byte more than a reply, so a message transport shows a longer one.
    let mut rep = vec![0u8; cfg.reply as usize + 1];
    let reply = cfg.reply as usize;
    let message = cfg.transport == Transport::SctpSeqpacket;
    let start = Instant::now();
    for seq in 0..total {
        if interrupt.load(SeqCst) {
            break;
        }
        pace(start, seq, cfg.interval, cfg.busy_poll, interrupt);
        req.clear();
        // Build the request outside the timed section.
        let _ = write_pattern(
            &mut req,
            req_start,
            seq * cfg.size as u64,
            cfg.size as usize,
        );
        let t0 = Instant::now();
        let r = exchange(&req, if message { &mut rep } else { &mut rep[..reply] });
        let rtt = t0.elapsed();
        run.rep.sent += 1;
        let n = r.map_err(|e| {
            let e = match e.kind() {
                // A read timeout shows as EAGAIN; say what it means.
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no reply within {:?} (--timeout)",
                        cfg.timeout.unwrap_or_default()
                    ),
                ),
                _ => e,
            };
            (run.rep.received, e)
        })?;
        run.rep.received += 1;
        if n != reply
            || Pattern::get()
                .verify(rep_start, seq * cfg.reply as u64, &rep[..reply])
                .is_err()
        {
            run.rep.corrupt += 1;
        }
        run.record(seq, rtt);
        on_probe(&Probe {
            seq,
            rtt_us: Some(rtt.as_nanos() as f64 / 1e3),
            up_us: None,
            down_us: None,
            split_error_us: None,
            late: false,
            warmup: seq < cfg.warmup,
        });
    }
    Ok(())
}
