//! The client's side of a UDP test: set the stream up over the control
//! connection, prove reachability, estimate the clock offset, then send or
//! receive while one event loop collects intervals, results and Ctrl-C.

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub use super::drive::UdpObserver;
use super::drive::{Ends, Worker, drive};
use super::receive::Receiver;
use super::send::run_sender;
use super::serve::{drain_for, receiver_config, receiver_stats, sender_config};
use super::setup::{Started, set_up};
use crate::control::{ClientError, Control};
use crate::protocol::asking::Accept;
use crate::protocol::proto::{TestSpec, UdpSpec};
use crate::protocol::sockopts::SockOpts;
use crate::protocol::udp::client_machine::{Bounds, ClientMachine};
use crate::protocol::udp::client_setup::Clock;
use crate::protocol::udp::clock::Offset;
use crate::protocol::udp::sent::SenderReport;
use crate::protocol::udp::track::{BurstReport, UdpInterval, UdpTotals};

/// Everything a UDP client run needs.
#[derive(Debug, Clone, Serialize)]
pub struct UdpClientConfig {
    /// Server.
    pub target: String,
    /// Port if the target names none.
    pub port: u16,
    /// Pre-shared key for servers that require one (never written to files).
    #[serde(skip)]
    pub key: Option<crate::protocol::auth::Key>,
    /// The stream, as sent to the server.
    pub spec: UdpSpec,
    /// Trust the clocks (PTP): no offset estimation.
    pub synced: bool,
    /// Local address for control and data.
    pub bind: Option<IpAddr>,
    /// Interface for the data socket (SO_BINDTODEVICE).
    pub bind_dev: Option<String>,
    /// Receive buffer of the data socket, bytes.
    pub rcvbuf: Option<usize>,
    /// Send buffer of the data socket, bytes.
    pub sndbuf: Option<usize>,
    /// Deliver every received datagram to the observer (for the jitter file).
    pub per_packet: bool,
    /// The data socket's local port (iperf3 --cport).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cport: Option<u16>,
    /// Start the stream when the wall clock reads this (Unix seconds;
    /// iperf2 --txstart-time), after the setup exchanges.
    #[serde(rename = "txstart_time", skip_serializing_if = "Option::is_none")]
    pub start_at: Option<f64>,
    /// Give up on the control connection's TCP handshake after this
    /// (`--connect-timeout`); none: 10 s.
    #[serde(
        with = "crate::protocol::units::duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub connect_timeout: Option<Duration>,
}

/// What a UDP run measured.
#[derive(Debug, Clone, Serialize)]
pub struct UdpReport {
    /// The wall clock at the stream's time zero (the intervals'
    /// `time_slice` counts from it), Unix seconds: results of several
    /// clients line up on it (`netrig merge`).
    pub start_unix: f64,
    /// Clock offset estimate (absent with `--synced`).
    pub offset: Option<Offset>,
    /// The sender's account.
    pub sender: Option<SenderReport>,
    /// The receiver's totals.
    pub totals: Option<UdpTotals>,
    /// Every receiver interval.
    pub intervals: Vec<UdpInterval>,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
    /// The server vanished mid-test.
    pub server_lost: bool,
    /// Wall time of the stream phase, s.
    pub duration_secs: f64,
    /// Burst mode: one report per burst.
    pub bursts: Vec<BurstReport>,
    /// Profile runs: the per-rate-bin table.
    pub bins: Option<Vec<crate::protocol::udp::analyze::Bin>>,
    /// Profile runs: the congestion analysis.
    pub analysis: Option<crate::protocol::udp::analyze::Analysis>,
    /// What the kernel granted on the client's data socket.
    pub granted: crate::net::sockopt::Granted,
    /// The data socket's local address and the server's, and the session
    /// ID both ends log (ctsTraffic's UDP connection file).
    pub local: Option<SocketAddr>,
    pub remote: SocketAddr,
    pub session: uuid::Uuid,
    /// CPU use of this process over the stream and of the server's over
    /// its session (iperf3's "CPU Utilization"); absent when the stream
    /// never started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<crate::protocol::cpu::CpuBoth>,
}

/// Buffer sizes and options for a client's data socket.
pub(crate) struct DataSocketOpts<'a> {
    /// Interface to bind to (SO_BINDTODEVICE).
    pub bind_dev: Option<&'a str>,
    /// SO_RCVBUF, bytes.
    pub rcvbuf: usize,
    /// SO_SNDBUF, bytes.
    pub sndbuf: usize,
    /// Marking, don't fragment, pacing cap (its window is the buffers above).
    pub opts: &'a SockOpts,
    /// Local port (`--cport`); the kernel picks when absent.
    pub port: Option<u16>,
}

/// Opens the client's data socket towards `server`, bound as asked.
pub(crate) fn data_socket(
    server: SocketAddr,
    bind: Option<IpAddr>,
    o: DataSocketOpts<'_>,
    c: &Control,
) -> Result<UdpSocket, ClientError> {
    let DataSocketOpts {
        bind_dev,
        rcvbuf,
        sndbuf,
        opts,
        port,
    } = o;
    let io = |what: &str, e: std::io::Error| c.failed(format!("{what}: {e}"));
    let s = Socket::new(
        Domain::for_address(server),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .map_err(|e| io("UDP socket", e))?;
    if let Some(dev) = bind_dev {
        s.bind_device(Some(dev.as_bytes()))
            .map_err(|e| io(&format!("--bind-dev {dev}"), e))?;
    }
    s.set_recv_buffer_size(rcvbuf)
        .map_err(|e| io("receive buffer", e))?;
    s.set_send_buffer_size(sndbuf)
        .map_err(|e| io("send buffer", e))?;
    let opts = SockOpts {
        window: None,
        ..opts.clone()
    };
    crate::net::sockopt::apply(&s, &opts, server.is_ipv6(), false)?;
    let port = port.unwrap_or(0);
    let local = match bind.filter(|b| b.is_ipv4() == server.is_ipv4()) {
        Some(ip) => SocketAddr::new(ip, port),
        None if server.is_ipv4() => SocketAddr::from(([0, 0, 0, 0], port)),
        None => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)),
    };
    s.bind(&local.into())
        .map_err(|e| io(&format!("bind {local}"), e))?;
    s.connect(&server.into())
        .map_err(|e| io(&format!("connect {server}"), e))?;
    Ok(s.into())
}

/// Runs a UDP test; `interrupt` is the Ctrl-C flag.
pub fn run(
    cfg: &UdpClientConfig,
    interrupt: Arc<AtomicBool>,
    obs: &mut dyn UdpObserver,
) -> Result<UdpReport, ClientError> {
    run_with_offset(cfg, None, interrupt, obs)
}

/// [`run`], with the clock offset `known` already (another stream of the
/// same test to the same server measured it) instead of estimating it.
pub fn run_with_offset(
    cfg: &UdpClientConfig,
    known: Option<Offset>,
    interrupt: Arc<AtomicBool>,
    obs: &mut dyn UdpObserver,
) -> Result<UdpReport, ClientError> {
    let spec = &cfg.spec;
    let bind = |a: SocketAddr| Ok(cfg.bind.filter(|b| b.is_ipv4() == a.is_ipv4()));
    let mut c = Control::connect_within(
        &cfg.target,
        cfg.port,
        bind,
        cfg.connect_timeout.unwrap_or(Duration::from_secs(10)),
        Duration::from_secs(10),
        crate::net::Via::default(),
        cfg.key.as_ref(),
    )?;
    if spec.auth_datagrams && c.datagram_key.is_none() {
        return Err(c.refused(
            crate::protocol::proto::ErrorCode::Invalid,
            "--auth-datagrams needs a server with a pre-shared key, and the key here (--key or NETRIG_KEY)"
                .into(),
        ));
    }
    let (port, token, session) = match c.request(TestSpec::Udp(spec.clone()))? {
        Accept::Udp {
            port,
            token,
            session,
        } => (port, token, session),
        a => return Err(c.failed(format!("accepted as another kind of test: {a:?}"))),
    };
    // ctsTraffic's 1 MB receive buffer for media; more for bulk streams;
    // -w for both unless one is given on its own.
    let window = spec.sock.window.map(|w| w as usize);
    let rcv = cfg.rcvbuf.or(window).unwrap_or(if spec.media.is_some() {
        1 << 20
    } else {
        4 << 20
    });
    let server_udp = SocketAddr::new(c.addr.ip(), port);
    let sock = Arc::new(data_socket(
        server_udp,
        cfg.bind,
        DataSocketOpts {
            bind_dev: cfg.bind_dev.as_deref(),
            rcvbuf: rcv,
            sndbuf: cfg.sndbuf.or(window).unwrap_or(4 << 20),
            opts: &spec.sock,
            port: cfg.cport,
        },
        &c,
    )?);
    let granted = crate::net::sockopt::granted(&*sock, server_udp.is_ipv6(), false);
    let clock = match (cfg.synced, known) {
        (true, _) => Clock::Trusted,
        (false, Some(o)) => Clock::Known(o),
        (false, None) => Clock::Estimate,
    };
    // Time zero of the stream (`epoch`) is taken before the server may
    // start sending, so no datagram can arrive "before" it.
    let Started {
        offset,
        epoch,
        start_unix,
    } = set_up(&mut c, &sock, token, clock, cfg.start_at, &interrupt)?;
    obs.clock(offset);
    obs.started();
    let theta = offset.map_or(0, |o| o.server_minus_client_ns);
    let _ = c.stream.set_read_timeout(None);

    let cpu_start = crate::net::cpu::sample();
    let worker = if spec.reverse {
        let rc = receiver_config(spec, -theta, c.datagram_key);
        let rx = Receiver::new(&sock, &rc, receiver_stats(spec), epoch)
            .map_err(|e| c.failed(format!("data socket: {e}")))?;
        Worker::Receives {
            rx: Box::new(rx),
            deadline: None,
            stop: false,
        }
    } else {
        let stop = Arc::new(AtomicBool::new(false));
        let (sock, stop2) = (Arc::clone(&sock), Arc::clone(&stop));
        let cfg = sender_config(spec, c.datagram_key);
        let handle = std::thread::Builder::new()
            .name("udp-sender".into())
            .spawn(move || {
                let _cpu = crate::net::cpu::EndNote;
                run_sender(&sock, &cfg, &stop2)
            })
            .map_err(|e| c.failed(format!("starting the sender: {e}")))?;
        Worker::Sends { stop, handle }
    };

    let local_addr = sock.local_addr().ok();
    let mut machine = ClientMachine::new(
        spec.reverse,
        Bounds {
            limit: Duration::from_millis(spec.duration_ms)
                + drain_for(spec)
                + Duration::from_secs(10),
            drain: drain_for(spec),
            grace: crate::control::STOP_GRACE,
        },
    );
    let ends = Ends {
        c: &mut c,
        sock: &sock,
        interrupt: &interrupt,
        obs,
        per_packet: cfg.per_packet,
    };
    drive(ends, worker, &mut machine, epoch);
    let end = machine.finish();
    let server_cpu = end.server_cpu;
    let mut rep = UdpReport {
        start_unix,
        offset,
        sender: end.sender,
        totals: end.totals,
        intervals: end.intervals,
        interrupted: end.interrupted,
        server_lost: end.server_lost,
        duration_secs: end.duration_secs,
        bins: None,
        analysis: None,
        bursts: end.bursts,
        granted,
        local: local_addr,
        remote: server_udp,
        session,
        cpu: None,
    };
    let local = crate::protocol::cpu::CpuUsage::between(&cpu_start, &crate::net::cpu::sample());
    rep.cpu = Some(crate::protocol::cpu::CpuBoth::new(local, server_cpu));
    Ok(rep)
}
