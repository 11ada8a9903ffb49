//! `netrig ping`: UDP probes on an absolute schedule, one line each, with
//! the round trip, its one-way split and loss per direction.

use anyhow::Result;
use clap::Args;
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use super::rr::RrResult;
use super::{
    Exit, Json, KeyArg, Setup, Verbosity, client_error_exit, finish, interrupt_flag,
    positive_duration, size, target_or_embedded, usage,
};
use netrig::rr::client::{RrConfig, Transport};

/// The server ping probes: ping(8)'s `-c` is the count here, so no
/// iperf3-style `-c HOST`.
#[derive(Args, Clone)]
pub struct PingTarget {
    /// Server (HOST, HOST:PORT, [V6]:PORT); none: embedded loopback server.
    #[arg(value_parser = super::target_arg)]
    pub target: Option<String>,
    /// Port if the target names none.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    pub port: u16,
}

#[derive(Args)]
pub struct PingArgs {
    #[command(flatten)]
    pub to: PingTarget,
    /// Time between probes (down to microseconds; use --busy-poll below ~100us).
    #[arg(short, long, default_value = "1s", value_parser = positive_duration, conflicts_with = "rate")]
    interval: Duration,
    /// Probes per second instead of --interval.
    #[arg(long)]
    rate: Option<f64>,
    /// Probe payload bytes.
    #[arg(short = 'l', long = "length", alias = "size", short_alias = 's', default_value = "64", value_parser = size)]
    length: u64,
    /// Stop after this many probes (ping -c; default: until Ctrl-C or --time).
    #[arg(short = 'n', long = "count", short_alias = 'c', value_parser = super::count)]
    count: Option<u64>,
    /// Send probes for this long (irtt -d); with -n too, whichever ends
    /// first.
    #[arg(short = 't', long = "time", visible_alias = "duration", short_alias = 'd', value_name = "D", value_parser = positive_duration)]
    time: Option<Duration>,
    /// A reply later than this counts as lost (and, if it comes, late).
    #[arg(long, default_value = "1s", value_parser = positive_duration)]
    timeout: Duration,
    /// Spin instead of sleeping.
    #[arg(long)]
    busy_poll: bool,
    /// End each round trip at the kernel's receive time of the reply (SO_TIMESTAMPNS).
    #[arg(long)]
    rx_timestamps: bool,
    /// Trust the clocks: print the one-way split without its ± bound.
    #[arg(long)]
    synced: bool,
    /// Local address to probe from.
    #[arg(short = 'B', long, value_name = "IP")]
    bind: Option<IpAddr>,
    /// Accepted for iperf3 scripts (--get-server-output): each run's
    /// result holds the server's own counts already (`server_requests`,
    /// `server_corrupt`).
    #[arg(long)]
    get_server_output: bool,
    /// The local port of the test's socket: the connection for TCP and
    /// SCTP, the data socket for UDP (iperf3 --cport).
    #[arg(long, value_name = "PORT", visible_alias = "local-port", value_parser = clap::value_parser!(u16).range(1..))]
    cport: Option<u16>,
    #[command(flatten)]
    sock: super::sock::IpFlags,
    #[command(flatten)]
    json: Json,
    #[command(flatten)]
    verbosity: Verbosity,
    #[command(flatten)]
    console: super::ConsoleArgs,
    #[command(flatten)]
    start: super::StartAt,
    #[command(flatten)]
    key: KeyArg,
    #[command(flatten)]
    connect: super::ConnectTimeout,
}

impl PingArgs {
    /// The flags turned into the engine's config (rr over UDP on a
    /// schedule), in this one place, and checked (`RrConfig::validate`); its
    /// target is empty until the embedded server (if none was given) has
    /// started. A config that cannot run is a usage error, already reported.
    fn to_config(&self, key: Option<netrig::protocol::auth::Key>) -> Result<RrConfig, ExitCode> {
        let interval = match self.rate {
            Some(r) if r > 0.0 && r.is_finite() => Duration::from_secs_f64(1.0 / r),
            Some(_) => {
                return Err(usage(
                    "--rate must be a positive number of probes per second",
                ));
            }
            None => self.interval,
        };
        let length = u32::try_from(self.length).unwrap_or(u32::MAX);
        let cfg = RrConfig {
            bind_dev: self.sock.bind_dev.clone(),
            cport: self.cport,
            start_at: self.start.at,
            sock: self.sock.opts(),
            key,
            target: String::new(),
            port: self.to.port,
            transport: Transport::Udp,
            size: length,
            reply: length,
            iterations: self.count.unwrap_or(netrig::rr::client::UNBOUNDED),
            warmup: 0,
            nagle: false,
            busy_poll: self.busy_poll,
            rx_timestamps: self.rx_timestamps,
            timeout: Some(self.timeout),
            interval: Some(interval),
            hist_min_us: 0.0,
            hist_max_us: 1e6,
            hist_bins: 1000,
            outliers: 10,
            synced: self.synced,
            bind: self.bind.into_iter().collect(),
            duration: self.time,
            connect_timeout: Some(self.connect.connect_timeout),
        };
        cfg.validate().map_err(|e| usage(e.to_string()))?;
        Ok(cfg)
    }
}

pub fn run(a: PingArgs) -> Result<ExitCode> {
    let Setup {
        json,
        stream,
        verbosity,
        key,
    } = match Setup::new(&a.json, a.verbosity, &a.key, &a.console, []) {
        Ok(s) => s,
        Err(c) => return Ok(c),
    };
    let mut cfg = match a.to_config(key.clone()) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let (target, embedded) = target_or_embedded(&a.to.target, &key, verbosity)?;
    cfg.target = target.clone();
    let size = a.length;
    let mut sink = match netrig::report::StreamSink::open(stream.as_deref(), "ping", &cfg) {
        Ok(s) => s,
        Err(e) => return Ok(usage(format!("cannot open --json-stream: {e}"))),
    };
    let mut log = super::rr::ProbeLog::default();
    // Rows of a second each, for the result's time series (not shown).
    let mut lines = super::rr::IntervalLines::new(std::time::Duration::from_secs(1), 0);
    let mut on_probe = |p: &netrig::rr::client::Probe, at| {
        log.push(p);
        lines.probe(p, at);
        sink.event("probe", p);
        if verbosity >= 1 {
            netrig::out!("{}", netrig::report::ping_line(size, &target, p));
        }
    };
    let result = netrig::rr::client::run(&cfg, interrupt_flag(), &mut on_probe);
    lines.finish();
    if let Some(e) = embedded {
        e.finish();
    }
    let (rep, _) = match result {
        Ok(r) => r,
        Err(e) => {
            sink.end::<()>(None, Some(&e.to_string()));
            return Ok(client_error_exit(e, "ping", json.as_deref(), &cfg));
        }
    };
    // As ping(8) -q: quiet leaves out the probe lines, not the summary.
    netrig::report::print_ping_summary(&cfg, &rep);
    let code = if let Some(e) = &rep.error {
        eprintln!("netrig: {e}");
        Exit::NetworkError
    } else if rep.received == 0 && rep.sent > 0 {
        Exit::NetworkError
    } else if rep.interrupted && (a.count.is_some() || a.time.is_some()) {
        // Without a count, Ctrl-C is how a ping ends (as ping(8)); with one,
        // it cut the run short.
        Exit::Interrupted
    } else {
        Exit::Ok
    };
    let failure = rep.error.clone().or_else(|| {
        (rep.received == 0 && rep.sent > 0).then(|| "no probe was answered".to_string())
    });
    let runs = [rep];
    sink.end(
        Some(&RrResult {
            runs: &runs,
            probes: Some(&log),
            start_unix: lines.start_unix(),
            duration_secs: lines.duration_secs(),
            intervals: lines.rows(),
        }),
        failure.as_deref(),
    );
    Ok(finish(
        code,
        json.as_deref(),
        |p| {
            netrig::report::write_envelope(
                p,
                "ping",
                &cfg,
                Some(&RrResult {
                    runs: &runs,
                    probes: Some(&log),
                    start_unix: lines.start_unix(),
                    duration_secs: lines.duration_secs(),
                    intervals: lines.rows(),
                }),
                failure.as_deref(),
            )
        },
        sink.take_errors(),
    ))
}
