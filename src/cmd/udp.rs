//! `netrig udp`: paced UDP streams (loss, duplicates, reordering, one-way
//! delay, jitter), media streams, bursts and rate profiles. A run is its
//! steps in turn: the outputs checked ([`UdpArgs::setup`]), the flags turned
//! into the engine's config (`config.rs`), the test run, and its report.

use anyhow::{Context, Result};
use clap::Args;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::{
    Embedded, Json, KeyArg, Setup, Verbosity, client_error_exit, duration, finish, interrupt_flag,
    positive_duration, rate, run_code, signed_duration, size, target_arg, target_or_embedded,
    usage,
};
use netrig::protocol::udp::pace::Pacing;
use netrig::report::{JitterFormat, UdpReporter, print_analysis, print_udp_summary, write_bins};
use netrig::udp::client::UdpClientConfig;

mod config;

use config::{Isochronous, UdpConfig, isochronous};

/// The sending rate without --bitrate or --gap, bit/s.
pub const DEFAULT_RATE: u64 = 10_000_000;

#[derive(Args)]
pub struct UdpArgs {
    /// Server (HOST, HOST:PORT, [V6]:PORT); none: embedded loopback server.
    #[arg(value_parser = target_arg)]
    pub target: Option<String>,
    /// The server, as iperf3 names it (-c HOST): the same as TARGET.
    #[arg(short = 'c', long = "client", value_name = "HOST", value_parser = super::client_target, conflicts_with = "target")]
    client: Option<String>,
    /// Accepted for iperf3 habits (-u): this command is UDP already.
    #[arg(short = 'u', long = "udp", hide = true)]
    _udp: bool,
    /// End every test datagram with an HMAC-SHA256 tag under the session's key
    /// (needs --key here and on the server); altered or forged datagrams count as
    /// corrupt and never as received.
    #[arg(long)]
    auth_datagrams: bool,
    /// Port if the target names none.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    port: u16,
    /// Test against an iperf3 server (iperf3 -s) at HOST[:PORT] (port 5201
    /// by default) instead of a netrig server: -b (per stream), -l, -P, -R,
    /// -t, -w and --get-server-output are carried to it, with iperf3's
    /// 64-bit counters; options it cannot carry are refused (exit 6).
    #[arg(long = "iperf3", value_name = "HOST[:PORT]", value_parser = target_arg, conflicts_with_all = ["target", "client"])]
    pub iperf3_server: Option<String>,
    /// Sending rate in bit/s (e.g. 100M, 1700Mbit, 1G), default 10M; with
    /// --media, the stream's bit rate.
    #[arg(short = 'b', long = "bitrate", alias = "rate", short_alias = 'r', value_parser = rate, conflicts_with = "gap")]
    pub bitrate: Option<u64>,
    /// Gap between datagrams instead of a rate (e.g. 5us).
    #[arg(long, value_parser = positive_duration)]
    pub gap: Option<Duration>,
    /// Datagram size in bytes (UDP payload, including netrig's 32-byte header).
    #[arg(short = 'l', long = "length", alias = "size", short_alias = 's', default_value = "1000", value_parser = size)]
    pub length: u64,
    /// Server sends to client (default: client sends to server).
    #[arg(short = 'R', long)]
    pub reverse: bool,
    /// How long to send, default 10s. With --profile: the profile's length
    /// by default; a longer time repeats the profile (as FlowPing -w), a
    /// shorter one cuts it.
    #[arg(short = 't', long = "time", visible_aliases = ["duration", "stream-length"], short_alias = 'd', value_parser = positive_duration)]
    pub time: Option<Duration>,
    /// Receiver status interval (at least 100ms, as iperf3).
    #[arg(short = 'i', long, default_value = "1s", value_parser = super::interval)]
    interval: Duration,
    /// Streams at once, each with its own data socket, each at --bitrate
    /// (iperf3 -P; ctsTraffic UDP -Connections); one test to the server.
    #[arg(short = 'P', long, visible_alias = "connections", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(netrig::protocol::proto::MAX_STREAMS)))]
    parallel: u32,
    /// Run the streams both ways at once: -P each direction (iperf3 --bidir).
    #[arg(long, conflicts_with = "reverse")]
    bidir: bool,
    /// Send this long first as a warm-up: its intervals are shown, marked,
    /// and left out of every total (iperf3 -O); the stream lasts --time
    /// more. Not with --profile.
    #[arg(short = 'O', long, value_name = "D", value_parser = positive_duration, conflicts_with = "profile")]
    omit: Option<Duration>,
    /// How the sender waits between datagrams.
    #[arg(long, default_value = "hybrid", value_parser = super::named::<Pacing>())]
    pacing: Pacing,
    /// After a stall, send the missed datagrams in a burst instead of re-anchoring the schedule.
    #[arg(long)]
    catch_up: bool,
    /// Do not verify payloads.
    #[arg(long)]
    no_verify: bool,
    /// Trust that both clocks are synchronised (PTP): report absolute one-way delay.
    #[arg(long)]
    synced: bool,
    /// Known delay compensation added to every one-way delay (e.g. 2ms, -500us).
    #[arg(long, value_parser = signed_duration, allow_hyphen_values = true, default_value = "0")]
    offset_comp: i64,
    /// Delay histogram: width of its first buckets.
    #[arg(long, default_value = "50us", value_parser = positive_duration)]
    hist_bin: Duration,
    /// Delay histogram: buckets of --hist-bin before they widen (then as many, twice as wide, per segment).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    hist_bins: u32,
    /// Send in bursts of this many bytes (iperf2 --burst-size); with --rate, datagrams
    /// within a burst are paced at that rate, otherwise sent back to back.
    #[arg(long, value_parser = size, requires = "burst_period", conflicts_with_all = ["profile", "media"])]
    pub burst_size: Option<u64>,
    /// Time from one burst's start to the next (iperf2 --burst-period).
    #[arg(long, value_parser = positive_duration, requires = "burst_size")]
    burst_period: Option<Duration>,
    /// Bursts: clocks are synchronised, so report each burst's first-send-to-last-arrival
    /// time end to end (implies --synced).
    #[arg(long)]
    trip_times: bool,
    /// Profile/sweep runs: compute the whole schedule before the stream starts, and keep
    /// per-datagram results in memory, writing them (--jitter-file) after the test.
    #[arg(long)]
    precompute: bool,
    /// Profile/sweep runs: rate bin width of the final table (default: a twentieth of the peak).
    #[arg(long, value_parser = rate)]
    bin: Option<u64>,
    /// Profile/sweep runs: write the rate-bin table here (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Rate profile file (FlowPing scenario: TIME RATE SIZE [ramp|hold] per line);
    /// replaces --rate/--gap/--size/--duration.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["bitrate", "gap", "media"])]
    pub profile: Option<PathBuf>,
    /// Scenario file format: auto (bare numbers only = FlowPing), netrig
    /// (rates need units) or flowping (seconds, kbit/s, bytes).
    #[arg(long, default_value = "auto", requires = "profile", value_parser = super::named::<netrig::protocol::udp::scenario::Format>())]
    profile_format: netrig::protocol::udp::scenario::Format,
    /// Media stream (ctsTraffic): the server sends frames of --bitrate / 8 /
    /// --fps bytes as --datagram-size datagrams (so no --length or --gap),
    /// always server to client; the client judges whole frames.
    #[arg(long, requires = "bitrate", conflicts_with_all = ["gap", "length", "reverse"], group = "frames")]
    pub media: bool,
    /// Media: each frame leaves as datagrams of this many bytes (UDP
    /// payload, header included), the last one shorter (ctsTraffic
    /// -DatagramByteSize), so no frame is fragmented by IP.
    #[arg(long, default_value_t = 1400, value_parser = clap::value_parser!(u32).range(netrig::protocol::udp::header::HEADER_LEN as i64..=netrig::protocol::udp::header::MAX_DATAGRAM as i64), requires = "media")]
    datagram_size: u32,
    /// Media: frames per second.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=100_000), requires = "media")]
    fps: u32,
    /// Media and isochronous frames: playout buffer; frames later than
    /// their slot plus this are late.
    #[arg(long, default_value = "1s", value_parser = duration, requires = "frames")]
    buffer_depth: Duration,
    /// Isochronous frames (iperf2 --isochronous): FPS frames a second whose
    /// sizes follow a log-normal distribution with mean MEAN and standard
    /// deviation STDEV, given as rates (20m: 20 Mbit/s; 20MB/s: bytes) or
    /// as datagrams per frame (25p); each frame leaves as --length
    /// datagrams, back to back, and the receiver judges whole frames.
    #[arg(long, value_name = "FPS:MEAN,STDEV", num_args = 0..=1, require_equals = true, default_missing_value = "60:20m,0", value_parser = isochronous, conflicts_with_all = ["media", "gap", "bitrate", "profile", "burst_size"])]
    isochronous: Option<Isochronous>,
    /// Write one row per received datagram (needs --reverse or --media: the client must receive).
    #[arg(long, value_name = "FILE")]
    jitter_file: Option<PathBuf>,
    /// The per-datagram file's columns: netrig's, or ctsTraffic's
    /// -JitterFilename columns (cts).
    #[arg(long, default_value = "netrig", requires = "jitter_file", value_parser = super::named::<JitterFormat>())]
    jitter_format: JitterFormat,
    /// Write the stream's row here when it ends: ctsTraffic's UDP
    /// connection columns (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    connection_file: Option<PathBuf>,
    /// Accepted for iperf3 scripts (--get-server-output): a udp result
    /// already holds the server's side, its receiver intervals (`intervals`,
    /// `totals`) or, with -R, its sender report (`sender`, with
    /// `sent_intervals` per interval).
    #[arg(long)]
    get_server_output: bool,
    /// The data socket's local port (iperf3 --cport).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    cport: Option<u16>,
    /// Local address for the control and data sockets.
    #[arg(short = 'B', long, value_name = "IP")]
    bind: Option<IpAddr>,
    /// Data socket receive buffer (default 1M for media, 4M otherwise).
    #[arg(long, value_parser = size)]
    rcvbuf: Option<u64>,
    /// Data socket send buffer (default 4M).
    #[arg(long, value_parser = size)]
    sndbuf: Option<u64>,
    /// Write the interval table here (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    status_file: Option<PathBuf>,
    #[command(flatten)]
    sock: super::sock::IpFlags,
    /// ECN codepoint on every datagram (RFC 3168: ect0, ect1, ce, not-ect),
    /// with --dscp/--tos or alone; the receiver counts what arrived.
    #[arg(long, value_name = "CODEPOINT", value_parser = super::named::<netrig::protocol::udp::marks::Ecn>())]
    ecn: Option<netrig::protocol::udp::marks::Ecn>,
    /// No UDP segmentation offload on either end: every datagram crosses
    /// into the kernel (sendmmsg) and out of it (recvmmsg) on its own,
    /// instead of as UDP_SEGMENT/UDP_GRO super-buffers.
    #[arg(long)]
    no_offload: bool,
    #[command(flatten)]
    json: Json,
    #[command(flatten)]
    iperf3: super::Iperf3Out,
    #[command(flatten)]
    verbosity: Verbosity,
    #[command(flatten)]
    console: super::ConsoleArgs,
    #[command(flatten)]
    start: super::StartAt,
    #[command(flatten)]
    pub key: KeyArg,
    #[command(flatten)]
    connect: super::ConnectTimeout,
}

/// How long a UDP stream or sweep runs without --duration.
pub const DEFAULT_UDP_DURATION: Duration = Duration::from_secs(10);

pub fn run(a: UdpArgs) -> Result<ExitCode> {
    run_with(a, None)
}

/// A `udp` run, or a `sweep` run with its `sweep_profile`: the outputs
/// checked, the flags turned into the engine's config, the test run and
/// reported.
pub fn run_with(
    a: UdpArgs,
    sweep_profile: Option<netrig::protocol::udp::profile::Profile>,
) -> Result<ExitCode> {
    // The test's name in the JSON envelope.
    let test = if sweep_profile.is_some() {
        "sweep"
    } else {
        "udp"
    };
    let setup = match a.setup(sweep_profile.is_some()) {
        Ok(s) => s,
        Err(c) => return Ok(c),
    };
    if let Some(server) = &a.iperf3_server {
        if sweep_profile.is_some() {
            return Ok(super::iperf3c::refuse(
                "sweep",
                "iperf3 servers run one rate",
            ));
        }
        return Ok(against_iperf3(
            &a,
            server,
            setup.json,
            setup.verbosity,
            setup.key.is_some(),
        ));
    }
    let UdpConfig {
        mut cfg,
        streams,
        banner,
    } = match a.to_config(sweep_profile, setup.key.clone(), setup.verbosity) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let host = Some(std::mem::take(&mut cfg.target)).filter(|t| !t.is_empty());
    let (target, embedded) = target_or_embedded(&host, &setup.key, setup.verbosity)?;
    cfg.target = target;
    if streams.many() {
        let outputs = super::udp_streams::Outputs {
            json: setup.json.as_deref(),
            stream: setup.stream.as_deref(),
            status_file: a.status_file.as_deref(),
            connection_file: a.connection_file.as_deref(),
        };
        let code = super::udp_streams::run(&cfg, streams, setup.verbosity, banner, outputs, test);
        if let Some(e) = embedded {
            e.finish();
        }
        return code;
    }
    run_one(&a, &cfg, &setup, banner, embedded, test)
}

impl UdpArgs {
    /// Checks every output path (and that `--json-iperf3` can describe the
    /// run) and loads the key; a problem is a usage error, already reported.
    fn setup(&self, sweep: bool) -> Result<Setup, ExitCode> {
        let outputs = [
            ("--csv", self.csv.as_deref()),
            ("--status-file", self.status_file.as_deref()),
            ("--jitter-file", self.jitter_file.as_deref()),
            ("--connection-file", self.connection_file.as_deref()),
            ("--json-iperf3", self.iperf3.path.as_deref()),
        ];
        let setup = Setup::new(
            &self.json,
            self.verbosity,
            &self.key,
            &self.console,
            outputs,
        )?;
        if self.iperf3.path.is_some() && (self.profile.is_some() || sweep) {
            return Err(usage(
                "--json-iperf3 covers steady UDP streams (no --profile or sweep)",
            ));
        }
        self.iperf3.set();
        Ok(setup)
    }

    /// The console and the files that follow one stream.
    fn reporter(
        &self,
        cfg: &UdpClientConfig,
        setup: &Setup,
        banner: Vec<String>,
        test: &'static str,
    ) -> Result<UdpReporter> {
        let cts_jitter = self.jitter_format == JitterFormat::Cts;
        let mut reporter = UdpReporter::new(
            setup.verbosity,
            cfg.spec.media.is_some(),
            self.status_file.as_deref(),
            self.jitter_file.as_deref().filter(|_| !cts_jitter),
        )
        .context("cannot open an output file")?;
        reporter.stream_secs(cfg.spec.duration_ms as f64 / 1e3);
        if let (Some(p), true) = (&self.jitter_file, cts_jitter) {
            reporter
                .cts_jitter_file(p)
                .context("cannot open an output file")?;
        }
        if let Some(p) = &self.connection_file {
            reporter
                .connection_file(p)
                .context("cannot open an output file")?;
        }
        // Printed once the server has accepted, so an error comes first and alone.
        reporter.set_banner(banner);
        if self.precompute {
            reporter.hold_packets();
        }
        if self.trip_times {
            reporter.show_trip_times();
        }
        reporter.stream = netrig::report::StreamSink::open(setup.stream.as_deref(), test, cfg)
            .context("cannot open --json-stream")?;
        Ok(reporter)
    }
}

/// One stream: run, then reported.
fn run_one(
    a: &UdpArgs,
    cfg: &UdpClientConfig,
    setup: &Setup,
    banner: Vec<String>,
    embedded: Option<Embedded>,
    test: &'static str,
) -> Result<ExitCode> {
    let mut reporter = a.reporter(cfg, setup, banner, test)?;
    let result = netrig::udp::client::run(cfg, interrupt_flag(), &mut reporter);
    reporter.finish();
    if let Some(e) = embedded {
        e.finish();
    }
    match result {
        Ok(rep) => Ok(report(a, cfg, rep, reporter, setup, test)),
        Err(e) => {
            reporter.stream.end::<()>(None, Some(&e.to_string()));
            Ok(client_error_exit(e, test, setup.json.as_deref(), cfg))
        }
    }
}

/// One stream's result: the profile's analysis, the summary, the files and
/// the exit code.
fn report(
    a: &UdpArgs,
    cfg: &UdpClientConfig,
    mut rep: netrig::udp::client::UdpReport,
    mut reporter: UdpReporter,
    setup: &Setup,
    test: &'static str,
) -> ExitCode {
    let verbosity = setup.verbosity;
    if let Some(p) = &cfg.spec.profile {
        let (bins, analysis) = analyse(p, &rep.intervals, rep.sender.as_ref(), a.bin);
        rep.bins = Some(bins);
        rep.analysis = Some(analysis);
    }
    if let Some(w) = rep
        .sender
        .as_ref()
        .and_then(netrig::report::sender_limited_warning)
    {
        eprintln!("netrig: warning: {w}");
    }
    if verbosity >= 1 {
        print_udp_summary(cfg, &rep, verbosity >= 2);
        if let (Some(b), Some(an)) = (&rep.bins, &rep.analysis) {
            print_analysis(b, an);
        }
    }
    let failure = rep.server_lost.then_some("the server was lost mid-test");
    reporter.connection(&rep);
    reporter.stream.end(Some(&rep), failure);
    let mut output_errors = reporter.take_errors();
    if let (Some(path), Some(b)) = (&a.csv, &rep.bins)
        && let Err(e) = write_bins(path, b)
    {
        output_errors.push(std::io::Error::new(
            e.kind(),
            format!("cannot write {}: {e}", path.display()),
        ));
    }
    let code = run_code(
        rep.totals.as_ref().is_some_and(|t| t.corrupt > 0),
        rep.server_lost,
        rep.interrupted,
    );
    finish(
        code,
        setup.json.as_deref(),
        |p| netrig::report::write_envelope(p, test, cfg, Some(&rep), failure),
        output_errors,
    )
}

/// Bins and analyses a profile run's intervals.
pub fn analyse(
    profile: &netrig::protocol::udp::profile::Profile,
    intervals: &[netrig::protocol::udp::track::UdpInterval],
    sender: Option<&netrig::protocol::udp::sent::SenderReport>,
    bin: Option<u64>,
) -> (
    Vec<netrig::protocol::udp::analyze::Bin>,
    netrig::protocol::udp::analyze::Analysis,
) {
    let sent = sender
        .filter(|s| s.interval_ms > 0)
        .map(|s| (s.sent_intervals.as_slice(), s.interval_ms as f64 / 1e3));
    let samples = netrig::protocol::udp::analyze::samples(profile, intervals, sent);
    let width = bin.map_or(profile.max_rate() as f64 / 20.0, |b| b as f64);
    let mut analysis = netrig::protocol::udp::analyze::analyze(&samples);
    if let Some(s) = sender {
        netrig::protocol::udp::analyze::note_sender(&mut analysis, s);
    }
    (
        netrig::protocol::udp::analyze::bins(&samples, width),
        analysis,
    )
}

/// `--iperf3 HOST[:PORT]`: the options an iperf3 server can be given, the
/// others refused by name.
fn against_iperf3(
    a: &UdpArgs,
    server: &str,
    json: Option<PathBuf>,
    verbosity: u8,
    key: bool,
) -> ExitCode {
    use super::iperf3c::{Common, first_refused, params, refuse, whole_seconds};
    use netrig::protocol::iperf3::{MAX_UDP_BLOCKSIZE, MIN_UDP_BLOCKSIZE, Mode, Params, Proto};
    let own = [
        (
            a.bidir,
            "--bidir",
            "not carried yet for UDP (use -R or two runs)",
        ),
        (a.gap.is_some(), "--gap", "iperf3 paces by rate (-b)"),
        (
            a.auth_datagrams,
            "--auth-datagrams",
            "iperf3 datagrams carry no tag",
        ),
        (
            a.synced || a.offset_comp != 0,
            "--synced, --offset-comp",
            "one-way delay needs netrig's server",
        ),
        (
            a.trip_times || a.burst_size.is_some(),
            "--burst-size, --trip-times",
            "iperf3 servers know no bursts",
        ),
        (
            a.profile.is_some(),
            "--profile",
            "iperf3 servers run one rate",
        ),
        (
            a.media || a.isochronous.is_some(),
            "--media, --isochronous",
            "iperf3 servers send no frames",
        ),
        (
            a.bind.is_some() || a.cport.is_some(),
            "-B, --cport",
            "not carried yet",
        ),
        (
            a.status_file.is_some()
                || a.jitter_file.is_some()
                || a.connection_file.is_some()
                || a.csv.is_some(),
            "--status-file, --jitter-file, --connection-file, --csv",
            "not written for iperf3 runs",
        ),
    ];
    let stream = a.json.stream_path().is_some();
    if let Some(code) = first_refused(key, a.omit.is_some(), a.start.at.is_some(), stream, &own) {
        return code;
    }
    let time = match whole_seconds(a.time, DEFAULT_UDP_DURATION.as_secs()) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let len = match u32::try_from(a.length) {
        Ok(l) if (MIN_UDP_BLOCKSIZE..=MAX_UDP_BLOCKSIZE).contains(&l) => l,
        _ => return refuse("-l", "an iperf3 datagram is 16 to 65507 bytes"),
    };
    let mode = match a.reverse {
        true => Mode::Reverse,
        false => Mode::ClientSends,
    };
    let params = Params {
        parallel: a.parallel,
        time,
        len,
        window: a.sock.window.unwrap_or(0),
        bandwidth: a.bitrate.unwrap_or(DEFAULT_RATE),
        get_server_output: a.get_server_output,
        udp_counters_64bit: true,
        ..params(Proto::Udp, mode)
    };
    super::iperf3c::udp(
        Common {
            server,
            connect_timeout: a.connect.connect_timeout,
            interval: a.interval,
            json,
            verbosity,
        },
        params,
    )
}
