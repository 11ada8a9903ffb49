//! `netrig serve`: the server. It takes no test options, only limits: each
//! client describes its test.

use anyhow::{Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::{KeyArg, Verbosity, interrupt_flag, positive_duration, rate, size};
use netrig::server::{Limits, LogFormat, Server, ServerConfig};

#[derive(Args)]
#[group(id = "iperf3", multiple = true, args = ["iperf3_port", "iperf3_detect"])]
pub struct ServeArgs {
    /// Address to listen on (repeatable). Default: [::] dual-stack (IPv4 and IPv6).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Vec<SocketAddr>,
    /// Port for the default listen address.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    port: u16,
    /// Exit after this many data connections have completed.
    #[arg(long, value_name = "N")]
    exit_after: Option<u64>,
    /// A new connection must identify itself within this time.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    handshake_timeout: Duration,
    /// Drop a data connection that makes no progress for this long.
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    idle_timeout: Duration,
    /// -q silent, default one line per session, -v also failed
    /// connections, -vv every connection.
    #[command(flatten)]
    verbosity: Verbosity,
    #[command(flatten)]
    console: super::ConsoleArgs,
    /// Refuse UDP streams faster than this.
    #[arg(long, default_value = "40Gbit", value_parser = rate)]
    max_rate: u64,
    /// Refuse tests longer than this; stop TCP sessions that run longer.
    #[arg(long, default_value = "1h", value_parser = positive_duration)]
    max_duration: Duration,
    /// Refuse tests that would move more bytes than this (both directions).
    #[arg(long, default_value = "4T", value_parser = size)]
    max_bytes: u64,
    /// Refuse new tests while this many are running.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    max_tests: u32,
    /// Refuse connections beyond this many open from one client address
    /// (four times this from one IPv4 /24 or IPv6 /64).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    max_conns_per_client: u32,
    /// Refuse new tests while this many run from one client address (four
    /// times this from one IPv4 /24 or IPv6 /64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    max_tests_per_client: u32,
    /// Refuse connections beyond this many open in all, counted once they
    /// say who they are. Default: the open-file limit less 256 (one
    /// descriptor per connection; the rest for listeners, UDP sockets and
    /// files). Connections yet to say who they are are held apart, at most
    /// an eighth of this (at least 64), the oldest closed first.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_conns: Option<u32>,
    /// Refuse new tests and data connections while the server's resident
    /// memory is past this. Default: a quarter of the machine's memory, at
    /// least 1G.
    #[arg(long, value_parser = size)]
    max_memory: Option<u64>,
    #[command(flatten)]
    key: KeyArg,
    /// Also serve unmodified iperf3 clients (TCP and UDP) on this port,
    /// under the same limits. Default: off.
    #[arg(long, value_name = "PORT")]
    iperf3_port: Option<u16>,
    /// Also serve unmodified iperf3 clients on the main port, told apart
    /// from netrig's by their first bytes (iperf3's cookie), under the
    /// same limits as on --iperf3-port. Default: off.
    #[arg(long)]
    iperf3_detect: bool,
    /// With a key set, let iperf3 clients in anyway (they cannot prove
    /// it); without this they are refused.
    #[arg(long, requires = "iperf3")]
    iperf3_allow_unauthenticated: bool,
    /// Also serve unmodified iperf2 clients (`iperf -c`, TCP and UDP) on
    /// this port, under the same limits; the server only receives, so
    /// iperf2's -d, -r, -R and --full-duplex are refused. Default: off.
    #[arg(long, value_name = "PORT")]
    iperf2_port: Option<u16>,
    /// With a key set, let iperf2 clients in anyway (they cannot prove
    /// it); without this they are refused.
    #[arg(long, requires = "iperf2_port")]
    iperf2_allow_unauthenticated: bool,
    /// Serve Prometheus/OpenMetrics metrics over HTTP at this address
    /// (path /metrics).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    /// The log's format: text lines, or one JSON object per line.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text)]
    log_format: LogFormatArg,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

impl ServeArgs {
    /// The flags turned into the server's config, in this one place; `fds`
    /// is how many files this process may open, which `--max-conns`
    /// defaults to (less a margin).
    fn to_config(&self, key: Option<netrig::protocol::auth::Key>, fds: u64) -> ServerConfig {
        let log_format = match self.log_format {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        };
        // -v and -vv add text lines; a JSON log keeps to its events.
        let verbosity = match log_format {
            LogFormat::Text => self.verbosity.level(),
            LogFormat::Json => self.verbosity.level().min(1),
        };
        ServerConfig {
            log_format,
            key,
            iperf3_port: self.iperf3_port,
            iperf3_allow_unauthenticated: self.iperf3_allow_unauthenticated,
            iperf3_detect: self.iperf3_detect,
            iperf2_port: self.iperf2_port,
            iperf2_allow_unauthenticated: self.iperf2_allow_unauthenticated,
            listen: self.listen.clone(),
            port: self.port,
            exit_after: self.exit_after,
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.idle_timeout,
            verbosity,
            limits: Limits {
                max_rate_bps: self.max_rate,
                max_duration: self.max_duration,
                max_bytes: self.max_bytes,
                max_tests: self.max_tests,
                max_conns_per_client: self.max_conns_per_client,
                max_tests_per_client: self.max_tests_per_client,
                max_conns: self.max_conns.unwrap_or_else(|| default_max_conns(fds)),
                max_memory: self.max_memory.unwrap_or_else(default_max_memory),
                setup: self.handshake_timeout,
            },
        }
    }
}

pub fn run(a: ServeArgs) -> Result<ExitCode> {
    if let Err(c) =
        super::check_outputs([("--logfile", a.console.logfile())]).and_then(|_| a.console.apply())
    {
        return Ok(c);
    }
    let key = match a.key.load() {
        Ok(k) => k,
        Err(c) => return Ok(c),
    };
    // The default soft limit (1024 under systemd) is far below what a busy
    // server needs; the hard limit is the real ceiling.
    let fds = netrig::net::raise_fd_limit().unwrap_or(1024);
    let cfg = a.to_config(key, fds);
    let verbosity = cfg.verbosity;
    // Named in the error: a port in use says nothing about which.
    let at = if cfg.listen.is_empty() {
        format!("[::]:{} (every address)", cfg.port)
    } else {
        cfg.listen
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Bound first: a metrics address in use fails before the server starts.
    let metrics = match a.metrics {
        None => None,
        Some(m) => Some(
            std::net::TcpListener::bind(m)
                .with_context(|| format!("cannot listen for --metrics on {m}"))?,
        ),
    };
    let mut server = Server::bind(cfg).with_context(|| format!("cannot listen on {at}"))?;
    if let Some(l) = metrics {
        server
            .serve_metrics(l)
            .context("cannot start the metrics endpoint")?;
    }
    let stop = server.stop_handle();
    let flag = interrupt_flag();
    let flag_fired = std::sync::Arc::clone(&flag);
    std::thread::spawn(move || {
        while !flag.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, SeqCst);
    });
    // A port the kernel picked is said even when quiet: nothing else tells
    // a script which port to point its clients at. Said once every thread
    // the server keeps is running, so a caller counting them from here on
    // sees the server's own, not its start-up.
    if verbosity == 0 && server.picked_port() {
        server.announce();
    }
    server.run().context("server failed")?;
    // Stopped by SIGINT or SIGTERM: the documented code for an interrupted run.
    if flag_fired.load(SeqCst) {
        return Ok(ExitCode::from(super::Exit::Interrupted));
    }
    Ok(ExitCode::SUCCESS)
}

/// A quarter of the machine's memory, at least 1 GiB.
fn default_max_memory() -> u64 {
    (netrig::net::total_memory().unwrap_or(0) / 4).max(1 << 30)
}

/// Connections that fit `fds` open files: one descriptor each, less 256 for
/// listeners, the UDP sockets of running tests, and files.
fn default_max_conns(fds: u64) -> u32 {
    u32::try_from(fds.saturating_sub(256))
        .unwrap_or(u32::MAX)
        .max(1)
}
