//! The server's side of a UDP test it sends (`-R`), driven over the control
//! connection by a worker thread, and what both ends derive from a UDP spec
//! (checks, sender and receiver settings). A stream the server receives
//! runs on its loops instead (`udp::intake`, `server::udp_recv`).
//!
//! The server never sends a datagram to an address until the client has
//! shown it receives there: the client's handshake datagram (carrying the
//! session token) tells the server where the client is, the server answers
//! with a probe carrying a random nonce, and only when the client echoes that
//! nonce over the authenticated control connection does the stream start.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

use super::header::{FLAG_HANDSHAKE, HEADER_LEN, Header, MAX_DATAGRAM};
use super::receive::ReceiverConfig;
use super::send::{SenderConfig, run_sender};
use super::sent::SenderReport;
use super::track::ReceiverStats;
use crate::auth::DatagramKey;
use crate::net::realtime_ns;
use crate::proto::{Message, ReadError, SessionSummary, UdpSpec, read_message, write_message};
use crate::refusal::{AuthFailure, Invalid, Limit, Refusal};
use crate::server::limits::Limits;

/// Longest stream a client may ask for.
pub const MAX_DURATION_MS: u64 = 24 * 3600 * 1000;
/// How long the receiver keeps listening after the sender's last datagram.
pub const DRAIN: Duration = Duration::from_millis(500);

/// The stream's rate in bit/s that server limits apply to: the peak of a
/// profile, the average of a burst train.
pub fn rate_bps(s: &UdpSpec) -> f64 {
    if let Some((per_burst, period_ns)) = burst_plan(s) {
        // Bursts leave back to back by design: cap the train's average rate.
        return (per_burst * u64::from(s.size)) as f64 * 8.0 * 1e9 / period_ns.max(1) as f64;
    }
    if let Some(m) = s.media.filter(|m| m.frame_bytes > 0) {
        return m.frame_bytes as f64 * 8.0 * f64::from(m.fps);
    }
    match &s.profile {
        Some(p) => p.max_rate() as f64,
        None => s.size as f64 * 8.0 * 1e12 / s.gap_ps.max(1) as f64,
    }
}

/// Most fixed-width histogram bins a test may ask for (8 bytes each in
/// memory, about 20 on the wire).
pub const MAX_HIST_BINS: u32 = 100_000;
/// Longest media playout buffer, ms.
pub const MAX_BUFFER_DEPTH_MS: u64 = 60_000;

/// Checks a UDP spec against sanity and the server's limits before anything
/// is allocated for it; the error names the problem.
pub fn validate(s: &UdpSpec, limits: Limits) -> Result<(), Refusal> {
    let sizes = HEADER_LEN..=MAX_DATAGRAM;
    if !sizes.contains(&(s.size as usize)) {
        return Err(Invalid::DatagramSize {
            size: s.size,
            min: HEADER_LEN,
            max: MAX_DATAGRAM,
        }
        .into());
    }
    if s.duration_ms == 0 || s.duration_ms > MAX_DURATION_MS {
        return Err(Invalid::Duration {
            ms: s.duration_ms,
            max_ms: MAX_DURATION_MS,
        }
        .into());
    }
    if s.gap_ps == 0 {
        return Err(Invalid::ZeroGap.into());
    }
    if s.interval_ms == 0 || s.hist_bin_ns == 0 || !(1..=MAX_HIST_BINS).contains(&s.hist_bins) {
        return Err(Invalid::Histogram {
            max_bins: MAX_HIST_BINS,
        }
        .into());
    }
    if s.burst.is_some_and(|b| b.size == 0 || b.period_ms == 0) {
        return Err(Invalid::BurstZero.into());
    }
    if s.omit_ms > 0 && (s.omit_ms >= s.duration_ms || s.profile.is_some()) {
        return Err(Invalid::Omit.into());
    }
    if s.group.is_some_and(|g| {
        g.streams == 0 || g.streams > crate::spec::MAX_STREAMS || g.index >= g.streams
    }) {
        return Err(Invalid::Streams {
            max: crate::spec::MAX_STREAMS,
        }
        .into());
    }
    if s.media
        .is_some_and(|m| m.fps == 0 || m.buffer_depth_ms > MAX_BUFFER_DEPTH_MS)
    {
        return Err(Invalid::Media {
            max_buffer_ms: MAX_BUFFER_DEPTH_MS,
        }
        .into());
    }
    if let Some(p) = &s.profile {
        p.check().map_err(Invalid::Profile)?;
        if !sizes.contains(&(p.min_size() as usize)) || !sizes.contains(&(p.max_size() as usize)) {
            return Err(Invalid::ProfileSizes {
                lo: p.min_size(),
                hi: p.max_size(),
                min: HEADER_LEN,
                max: MAX_DATAGRAM,
            }
            .into());
        }
        if p.duration_ns() > s.duration_ms.saturating_mul(1_000_000) {
            return Err(Invalid::ProfileLonger {
                profile: Duration::from_nanos(p.duration_ns()),
                test: Duration::from_millis(s.duration_ms),
            }
            .into());
        }
    }
    // A group's streams share the limit: each carries the group's size.
    let streams = f64::from(s.group.map_or(1, |g| g.streams.max(1)));
    if rate_bps(s) * streams > limits.max_rate_bps as f64 * 1.000_001 {
        return Err(Limit::Rate {
            max_bps: limits.max_rate_bps,
            asked_bps: rate_bps(s) * streams,
        }
        .into());
    }
    limits.check_duration(s.duration_ms)?;
    let bytes = match &s.profile {
        Some(p) => p.bytes_until(p.duration_ns()),
        None => rate_bps(s) / 8.0 * s.duration_ms as f64 / 1e3,
    };
    Ok(limits.check_bytes(bytes as u64)?)
}

/// Receiver configuration both ends derive from the spec.
pub fn receiver_config(
    s: &UdpSpec,
    offset_ns: i64,
    tag_key: Option<DatagramKey>,
) -> ReceiverConfig {
    ReceiverConfig {
        tag_key: tag_key.filter(|_| s.auth_datagrams),
        stream: 1,
        max_size: s
            .profile
            .as_ref()
            .map_or(s.size, |p| p.max_size().max(s.size)) as usize,
        offset_ns,
        comp_ns: s.offset_comp_ns,
        interval: Duration::from_millis(s.interval_ms),
        media: s.media.map(|m| super::receive::MediaPlan {
            frame_ns: m.frame_ns(),
            depth_ns: m.buffer_depth_ms.saturating_mul(1_000_000),
        }),
        verify: s.verify,
        burst: burst_plan(s),
        offload: !s.sock.no_offload,
    }
}

/// The receiver's accounts for the spec, empty, as both ends start them.
pub fn receiver_stats(s: &UdpSpec) -> ReceiverStats {
    let mut stats = ReceiverStats::new(s.hist_bin_ns, s.hist_bins as usize);
    stats.expect_tos(s.sock.tos.unwrap_or(0));
    stats.omit(s.omit_seq(), s.omit_ms.saturating_mul(1_000_000));
    if let Some(m) = s.media {
        stats.media_frames(m.frame_index(s.size));
    }
    stats
}

/// Sender configuration both ends derive from the spec.
pub fn sender_config(s: &UdpSpec, tag_key: Option<DatagramKey>) -> SenderConfig {
    SenderConfig {
        tag_key: tag_key.filter(|_| s.auth_datagrams),
        size: s.size as usize,
        gap_ps: s.gap_ps,
        duration: Duration::from_millis(s.duration_ms),
        pacing: s.pacing,
        catch_up: s.catch_up,
        stream: 1,
        profile: s.profile.clone(),
        precompute: s.precompute,
        burst: burst_plan(s),
        frames: s.media.and_then(|m| Some((m.frame_sizes()?, m.fps))),
        interval_ns: s.interval_ms.saturating_mul(1_000_000),
        guard: None,
        offload: !s.sock.no_offload,
    }
}

/// Bursts as (datagrams per burst, period ns), rounding a burst up to whole datagrams.
pub fn burst_plan(s: &UdpSpec) -> Option<(u64, u64)> {
    s.burst.map(|b| {
        (
            b.size.div_ceil(u64::from(s.size.max(1))).max(1),
            b.period_ms.saturating_mul(1_000_000),
        )
    })
}

/// How long the receiver drains after the sender is done.
pub fn drain_for(s: &UdpSpec) -> Duration {
    DRAIN + Duration::from_millis(s.media.map_or(0, |m| m.buffer_depth_ms))
}

fn send(w: &Mutex<TcpStream>, m: &Message) -> bool {
    let mut s = w.lock().unwrap_or_else(|e| e.into_inner());
    write_message(&mut *s, m).is_ok()
}

/// Waits for the client's handshake datagram, connects to its source, and probes it.
fn handshake(sock: &UdpSocket, token: u64, nonce: u64) -> Result<SocketAddr, Refusal> {
    let io = |source| Refusal::Resource {
        what: "the session's UDP socket",
        source,
    };
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(io)?;
    let t0 = Instant::now();
    let mut buf = [0u8; 2048];
    let from = loop {
        if t0.elapsed() > Duration::from_secs(3) {
            return Err(Refusal::NoHandshake(Duration::from_secs(3)));
        }
        if let Ok((n, from)) = sock.recv_from(&mut buf)
            && let Ok(h) = Header::read(&buf[..n])
            && h.flags & FLAG_HANDSHAKE != 0
            && h.seq == token
        {
            break from;
        }
    };
    sock.connect(from).map_err(io)?;
    let mut probe = [0u8; HEADER_LEN];
    Header {
        flags: FLAG_HANDSHAKE,
        stream: 0,
        seq: nonce,
        send_ns: realtime_ns(),
        payload_len: 0,
    }
    .write(&mut probe);
    for _ in 0..3 {
        let _ = sock.send(&probe);
    }
    Ok(from)
}

/// What a UDP session runs once the client has proven it receives at its address.
pub trait UdpWork {
    /// Starts the worker on the connected socket. `offset_ns` is the server
    /// clock minus the client clock (0 if the client trusts its clocks).
    fn start(&mut self, ctx: WorkContext, offset_ns: i64) -> std::thread::JoinHandle<()>;
    /// What the session moved, for the server's metrics once the worker
    /// is joined: bytes sent and received, failed sends, corrupt datagrams.
    fn moved(&self) -> SessionSummary {
        SessionSummary::default()
    }
    /// Options for the session's data socket.
    fn sock_opts(&self) -> crate::sockopts::SockOpts {
        crate::sockopts::SockOpts::default()
    }
}

/// Shared handles a worker and the session loop both use.
#[derive(Clone)]
pub struct WorkContext {
    /// The data socket, connected to the proven client address.
    pub sock: Arc<UdpSocket>,
    /// Set to stop the worker.
    pub stop: Arc<AtomicBool>,
    /// Time zero of the stream (set when the work starts).
    pub epoch: Instant,
    /// Writes to the control connection.
    pub writer: Arc<Mutex<TcpStream>>,
}

/// Sends a control message from any thread; false if the connection is gone.
pub fn send_control(w: &Mutex<TcpStream>, m: &Message) -> bool {
    send(w, m)
}

/// Runs the UDP session protocol on an accepted control connection: open a
/// socket, prove the client's address, answer clock requests, start `work`,
/// and stop it on `stop`, goodbye or a closed connection.
///
/// An error the client was sent, which ended the session, is returned for
/// the server's log (the caller logs it, once, with its other refusals),
/// beside what the session moved ([`UdpWork::moved`]).
pub fn session(
    stream: &TcpStream,
    peer: SocketAddr,
    label: &str,
    work: &mut dyn UdpWork,
    verbosity: u8,
    deadline: Duration,
    setup: Duration,
) -> (SessionSummary, Result<(), Refusal>) {
    let ended = run_session(stream, peer, label, work, verbosity, deadline, setup);
    (work.moved(), ended)
}

fn run_session(
    stream: &TcpStream,
    peer: SocketAddr,
    label: &str,
    work: &mut dyn UdpWork,
    verbosity: u8,
    deadline: Duration,
    setup: Duration,
) -> Result<(), Refusal> {
    // Everything this session does ends by its deadline, whatever the
    // client sends (clock requests, stops) in the meantime.
    let ends = Instant::now() + deadline;
    let no_descriptor = |source| Refusal::Resource {
        what: "a descriptor for the control connection",
        source,
    };
    let writer = match stream.try_clone() {
        Ok(w) => Arc::new(Mutex::new(w)),
        Err(source) => {
            let why = no_descriptor(source);
            let mut s = stream;
            let _ = write_message(&mut s, &why.message());
            return Err(why);
        }
    };
    let refuse = |why: Refusal| {
        send(&writer, &why.message());
        Err(why)
    };
    let local = match stream.local_addr() {
        Ok(a) => a,
        Err(source) => return refuse(no_descriptor(source)),
    };
    let sock = match UdpSocket::bind(SocketAddr::new(local.ip(), 0)) {
        Ok(s) => s,
        Err(source) => {
            return refuse(Refusal::Resource {
                what: "a UDP socket",
                source,
            });
        }
    };
    let port = sock.local_addr().map_or(0, |a| a.port());
    let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(4 << 20);
    let _ = socket2::SockRef::from(&sock).set_send_buffer_size(4 << 20);
    let opts = work.sock_opts();
    if let Err(e) = crate::net::sockopt::apply(&sock, &opts, local.is_ipv6(), false) {
        use crate::net::sockopt::SockOptFailed;
        return refuse(match e {
            SockOptFailed::Congestion { name, available } => {
                Refusal::Congestion { name, available }
            }
            SockOptFailed::Refused { option, source } => Refusal::SockOptRefused { option, source },
        });
    }
    let session = Uuid::new_v4();
    let token: u64 = rand::random();
    let nonce: u64 = rand::random();
    if !send(
        &writer,
        &Message::UdpAccept {
            session,
            port,
            token,
        },
    ) {
        return Ok(());
    }
    if verbosity >= 1 {
        crate::out!("session {session} from {peer}: {label}");
    }
    let mut ctx = WorkContext {
        sock: Arc::new(sock),
        stop: Arc::new(AtomicBool::new(false)),
        epoch: Instant::now(),
        writer: Arc::clone(&writer),
    };
    let mut proven: Option<SocketAddr> = None;
    let mut worker: Option<std::thread::JoinHandle<()>> = None;
    // The process's CPU clocks when the stream starts: the summary reports
    // the CPU used from then to the goodbye.
    let mut cpu_start: Option<crate::cpu::CpuSample> = None;
    // Until its stream starts (the handshake datagram, the clock exchange,
    // the client's ready), a session must move on within `setup`:
    // a client that goes silent after its acceptance holds a test slot
    // (and a worker), which it would otherwise keep until the deadline.
    let setup_ends = (Instant::now() + setup).min(ends);
    let mut r = crate::net::Timed::new(stream, deadline, setup_ends);
    let ended = loop {
        let msg = match read_message(&mut r) {
            Ok(m) => m,
            Err(ReadError::Proto(e)) => break refuse(e.into()),
            Err(ReadError::Io(e))
                if worker.is_none()
                    && Instant::now() >= setup_ends
                    && setup_ends < ends
                    && crate::net::nothing_yet(&e) =>
            {
                break refuse(Refusal::NotStarted(setup));
            }
            Err(ReadError::Io(e)) if Instant::now() >= ends && crate::net::nothing_yet(&e) => {
                break refuse(
                    Limit::DurationReached {
                        max: deadline.saturating_sub(crate::server::limits::GRACE),
                    }
                    .into(),
                );
            }
            Err(_) => break Ok(()),
        };
        match msg {
            Message::TimeRequest { t1 } => {
                let t2 = realtime_ns();
                if !send(
                    &writer,
                    &Message::TimeReply {
                        t1,
                        t2,
                        t3: realtime_ns(),
                    },
                ) {
                    break Ok(());
                }
            }
            Message::UdpHandshake { token: t } if t == token && proven.is_none() => {
                match handshake(&ctx.sock, token, nonce) {
                    Ok(from) => {
                        proven = Some(from);
                        if !send(&writer, &Message::UdpProbed) {
                            break Ok(());
                        }
                    }
                    Err(why) => break refuse(why),
                }
            }
            Message::UdpReady {
                nonce: n,
                offset_ns,
            } if worker.is_none() => {
                if proven.is_none() || n != nonce {
                    break refuse(AuthFailure::ProbeNonce.into());
                }
                // Intervals and deadlines count from the start of the stream, not
                // from the setup before it; taken before the client may start sending.
                ctx.epoch = Instant::now();
                if !send(&writer, &Message::UdpGo) {
                    break Ok(());
                }
                cpu_start = Some(crate::net::cpu::sample());
                worker = Some(work.start(ctx.clone(), offset_ns));
                // Started: the session's own deadline holds from here.
                r = crate::net::Timed::new(stream, deadline, ends);
            }
            // The client's account of a stream it sent: none flows that
            // way in a session a worker serves.
            Message::UdpDone(_) => {}
            Message::Stop => {
                ctx.stop.store(true, SeqCst);
                if !send(&writer, &Message::StopAck) {
                    break Ok(());
                }
            }
            Message::Goodbye => {
                // Read before the worker is joined: its thread, gone after,
                // may be the busiest.
                let cpu_end = crate::net::cpu::sample();
                if let Some(h) = worker.take() {
                    ctx.stop.store(true, SeqCst);
                    let _ = h.join();
                }
                let sum = crate::proto::SessionSummary {
                    cpu: cpu_start
                        .as_ref()
                        .map(|a| crate::cpu::CpuUsage::between(a, &cpu_end)),
                    ..Default::default()
                };
                send(&writer, &Message::Summary(sum));
                break Ok(());
            }
            other => {
                break refuse(Refusal::Unexpected {
                    got: format!("{other:?}"),
                    context: "in a UDP session",
                });
            }
        }
    };
    ctx.stop.store(true, SeqCst);
    if let Some(h) = worker.take() {
        // A worker blocked writing to a client that stopped reading is freed by this.
        let _ = stream.shutdown(std::net::Shutdown::Both);
        let _ = h.join();
    }
    if verbosity >= 1 {
        crate::out!("session {session} from {peer} ended");
    }
    ended
}

/// A stream the server sends (`-R`, the server's half of `--bidir`): made
/// only by [`Outbound::new`], so a stream the server receives (on its
/// loops, `udp::intake`) cannot reach a worker's [`serve`].
#[derive(Debug, Clone)]
pub struct Outbound(Box<UdpSpec>);

impl Outbound {
    /// The spec, if the server sends its stream; any other comes back.
    pub fn new(spec: Box<UdpSpec>) -> Result<Outbound, Box<UdpSpec>> {
        match spec.reverse {
            true => Ok(Outbound(spec)),
            false => Err(spec),
        }
    }
}

/// A paced stream the server sends.
struct StreamWork {
    spec: UdpSpec,
    tag_key: Option<DatagramKey>,
    limits: Limits,
    /// What the sender moved, set as it ends.
    moved: Arc<Mutex<SessionSummary>>,
}

impl UdpWork for StreamWork {
    fn sock_opts(&self) -> crate::sockopts::SockOpts {
        self.spec.sock.for_server()
    }

    fn start(&mut self, ctx: WorkContext, _offset_ns: i64) -> std::thread::JoinHandle<()> {
        let mut cfg = sender_config(&self.spec, self.tag_key);
        cfg.pacing = cfg.pacing.on_server();
        cfg.guard = Some(Arc::new(self.limits.guard(&ctx.stop)));
        let moved = Arc::clone(&self.moved);
        std::thread::spawn(move || {
            // The session's summary sees this thread whole.
            let _cpu = crate::net::cpu::EndNote;
            let rep = run_sender(&ctx.sock, &cfg, &ctx.stop);
            *moved.lock().unwrap_or_else(|e| e.into_inner()) = sent_moved(&rep);
            send(&ctx.writer, &Message::UdpDone(rep));
        })
    }

    fn moved(&self) -> SessionSummary {
        self.moved.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Whether the server runs `spec`: within its limits, and with what it
/// needs (a key for tagged datagrams).
pub fn check(spec: &UdpSpec, limits: Limits, tag_key: Option<DatagramKey>) -> Result<(), Refusal> {
    validate(spec, limits)?;
    spec.sock.validate().map_err(Invalid::from)?;
    if spec.auth_datagrams && tag_key.is_none() {
        return Err(Invalid::DatagramAuthWithoutKey.into());
    }
    if spec.auth_datagrams && (spec.size as usize) < HEADER_LEN + crate::auth::TAG_LEN {
        return Err(Invalid::DatagramAuthSize {
            min: HEADER_LEN + crate::auth::TAG_LEN,
        }
        .into());
    }
    Ok(())
}

/// How the server's log names a stream.
pub fn label(spec: &UdpSpec) -> String {
    format!(
        "udp {} {} B every {:.3} us for {} ms{}",
        if spec.reverse {
            "server->client"
        } else {
            "client->server"
        },
        spec.size,
        spec.gap_ps as f64 / 1e6,
        spec.duration_ms,
        if spec.media.is_some() { " (media)" } else { "" }
    )
}

/// Serves one UDP stream test on an accepted control connection. An error
/// the client was sent, which ended the test, is returned for the log,
/// beside what the test moved.
pub fn serve(
    stream: &TcpStream,
    peer: SocketAddr,
    Outbound(spec): Outbound,
    verbosity: u8,
    limits: Limits,
    tag_key: Option<DatagramKey>,
) -> (SessionSummary, Result<(), Refusal>) {
    if let Err(why) = check(&spec, limits, tag_key) {
        let mut s = stream;
        let _ = write_message(&mut s, &why.message());
        return (SessionSummary::default(), Err(why));
    }
    let label = label(&spec);
    let mut work = StreamWork {
        spec: *spec,
        tag_key,
        limits,
        moved: Arc::default(),
    };
    session(
        stream,
        peer,
        &label,
        &mut work,
        verbosity,
        limits.deadline(),
        limits.setup,
    )
}

#[cfg(test)]
#[path = "serve_tests.rs"]
mod tests;

/// What a server sending a stream moved: its bytes, and its failed sends
/// as network errors.
fn sent_moved(rep: &SenderReport) -> SessionSummary {
    SessionSummary {
        bytes_sent: rep.bytes,
        network_errors: rep.send_errors,
        ..SessionSummary::default()
    }
}
