//! The `netrig` command line: parses flags into library configurations, runs
//! them, and maps results to exit codes. All measuring lives in the library.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use netrig::proto::{IoPattern, VerifyLevel};
use netrig::report::{Reporter, print_summary, write_json};
use netrig::server::{Server, ServerConfig};
use netrig::tcp::client::{self, ClientError};
use netrig::tcp::config::{BufferSpec, TcpClientConfig};
use netrig::units;

/// Exit codes, documented in the README.
mod exit {
    pub const FATAL: u8 = 1;
    pub const NETWORK_ERROR: u8 = 3;
    pub const DATA_ERROR: u8 = 4;
    pub const REFUSED: u8 = 5;
    pub const INTERRUPTED: u8 = 130;
}

#[derive(Parser)]
#[command(
    name = "netrig",
    version,
    about = "Measure what a network path really delivers: goodput, latency, loss, reliability — every byte verified."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a server. It needs no test options: each client describes its test.
    Serve(ServeArgs),
    /// TCP goodput and reliability test (ctsTraffic semantics). Without a target,
    /// runs against an embedded server on loopback.
    Tcp(TcpArgs),
}

fn size(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.to_string())
}
fn duration(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}
fn positive_duration(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        d if d.is_zero() => Err("must be greater than zero".into()),
        d => Ok(d),
    }
}
fn buffer(s: &str) -> Result<BufferSpec, String> {
    s.parse()
        .map_err(|e: netrig::tcp::config::ConfigError| e.to_string())
}

#[derive(Args)]
struct ServeArgs {
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
    /// 0 silent, 1 sessions, 2 also failed connections, 3 every connection.
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    verbosity: u8,
}

#[derive(Args)]
struct TcpArgs {
    /// Servers to test against (HOST, HOST:PORT, [V6]:PORT), used round-robin.
    targets: Vec<String>,
    /// Another target (same as a positional one).
    #[arg(long = "target", value_name = "HOST")]
    more_targets: Vec<String>,
    /// Port for targets that do not name one.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    port: u16,
    /// Concurrent connections to keep established.
    #[arg(short, long, default_value_t = 8)]
    connections: u32,
    /// Rounds of --connections; total connections = connections x iterations. Default: unbounded
    /// (one round when no target is given).
    #[arg(short, long)]
    iterations: Option<u64>,
    /// Maximum connection attempts in progress at once.
    #[arg(long, default_value_t = 1000)]
    throttle: u32,
    /// Bytes per connection, both directions together (e.g. 64, 1M, 1G).
    #[arg(short, long, default_value = "1G", value_parser = size)]
    transfer: u64,
    /// Bytes per send/receive: a size (64K) or a random range per connection ([1K,1M]).
    #[arg(short, long, default_value = "64K", value_parser = buffer)]
    buffer: BufferSpec,
    /// Data flow: push (client sends), pull (server sends), pushpull (alternate), duplex (both).
    #[arg(long, value_enum, default_value_t = IoPattern::Push)]
    pattern: IoPattern,
    /// pushpull: bytes the client sends per turn.
    #[arg(long, default_value = "1M", value_parser = size)]
    push_bytes: u64,
    /// pushpull: bytes the server sends per turn.
    #[arg(long, default_value = "1M", value_parser = size)]
    pull_bytes: u64,
    /// Stop after this long (in-flight connections are cancelled, not failed).
    #[arg(long, value_parser = positive_duration)]
    time_limit: Option<Duration>,
    /// Local address to connect from (repeatable; used round-robin per IP family).
    #[arg(long, value_name = "IP")]
    bind: Vec<IpAddr>,
    /// data: check every byte against the pattern; connection: byte counts only.
    #[arg(long, value_enum, default_value_t = VerifyLevel::Data)]
    verify: VerifyLevel,
    /// Status interval (ms resolution).
    #[arg(long, default_value = "5s", value_parser = positive_duration)]
    interval: Duration,
    /// Write the status table here (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    status_file: Option<PathBuf>,
    /// Write one row per connection here (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    connection_file: Option<PathBuf>,
    /// Write configuration, intervals and totals as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// 0 nothing but errors, 1 status table and summary, 2 also failed connections, 3 every connection.
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    verbosity: u8,
    /// A connection making no progress for this long fails with a network error.
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    idle_timeout: Duration,
    /// Seed for random buffer sizes (for reproducible runs).
    #[arg(long)]
    seed: Option<u64>,
}

fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&flag);
    // A second Ctrl-C exits at once; files are flushed row by row, so they stay parseable.
    let r = ctrlc::set_handler(move || {
        if f.swap(true, SeqCst) {
            std::process::exit(exit::INTERRUPTED as i32);
        }
    });
    if let Err(e) = r {
        eprintln!("warning: cannot install the Ctrl-C handler: {e}");
    }
    flag
}

fn serve(a: ServeArgs) -> Result<ExitCode> {
    let server = Server::bind(ServerConfig {
        listen: a.listen,
        port: a.port,
        exit_after: a.exit_after,
        handshake_timeout: a.handshake_timeout,
        idle_timeout: a.idle_timeout,
        verbosity: a.verbosity,
    })
    .context("cannot listen")?;
    let stop = server.stop_handle();
    let flag = interrupt_flag();
    std::thread::spawn(move || {
        while !flag.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, SeqCst);
    });
    server.run().context("server failed")?;
    Ok(ExitCode::SUCCESS)
}

/// An in-process server on loopback for runs without a target.
struct Embedded {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<std::io::Result<()>>,
}

impl Embedded {
    fn start() -> Result<Embedded> {
        let server = Server::bind(ServerConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
            verbosity: 0,
            ..ServerConfig::default()
        })
        .context("cannot start the embedded server")?;
        let addr = server.local_addrs()[0];
        let stop = server.stop_handle();
        let handle = std::thread::spawn(move || server.run());
        Ok(Embedded { addr, stop, handle })
    }

    fn finish(self) {
        self.stop.store(true, SeqCst);
        let _ = self.handle.join();
    }
}

fn tcp(a: TcpArgs) -> Result<ExitCode> {
    let mut targets = a.targets;
    targets.extend(a.more_targets);
    let mut cfg = TcpClientConfig {
        targets: Vec::new(),
        port: a.port,
        connections: a.connections,
        iterations: a.iterations,
        throttle: a.throttle,
        pattern: a.pattern,
        transfer: a.transfer,
        push_bytes: a.push_bytes,
        pull_bytes: a.pull_bytes,
        buffer: a.buffer,
        verify: a.verify,
        time_limit: a.time_limit,
        bind: a.bind,
        interval: Some(a.interval),
        idle_timeout: Some(a.idle_timeout),
        seed: a.seed,
    };
    let embedded = if targets.is_empty() {
        let e = Embedded::start()?;
        if cfg.iterations.is_none() && cfg.time_limit.is_none() {
            cfg.iterations = Some(1);
        }
        if a.verbosity >= 1 {
            println!(
                "No target given: testing against an embedded server on {}.\n",
                e.addr
            );
        }
        targets.push(e.addr.to_string());
        Some(e)
    } else {
        None
    };
    cfg.targets = targets.clone();

    let mut reporter = Reporter::new(
        a.verbosity,
        a.status_file.as_deref(),
        a.connection_file.as_deref(),
    )
    .context("cannot open an output file")?;
    let flag = interrupt_flag();
    reporter.banner(&cfg, &targets);
    let result = client::run(cfg.clone(), flag, &mut reporter);
    if let Some(e) = embedded {
        e.finish();
    }
    let rep = match result {
        Ok(r) => r,
        Err(e @ ClientError::Refused { .. }) => {
            eprintln!("netrig: {e}");
            return Ok(ExitCode::from(exit::REFUSED));
        }
        Err(e @ ClientError::Connect { .. }) | Err(e @ ClientError::Control { .. }) => {
            eprintln!("netrig: {e}");
            return Ok(ExitCode::from(exit::NETWORK_ERROR));
        }
        Err(e) => return Err(e.into()),
    };
    if a.verbosity >= 1 {
        print_summary(&rep);
    }
    let mut code = if rep.totals.data_errors > 0 {
        exit::DATA_ERROR
    } else if rep.totals.net_errors > 0 || !rep.lost_servers.is_empty() {
        exit::NETWORK_ERROR
    } else if rep.interrupted {
        exit::INTERRUPTED
    } else {
        0
    };
    if let Some(p) = &a.json
        && let Err(e) = write_json(p, &cfg, &rep)
    {
        eprintln!("netrig: cannot write {}: {e}", p.display());
        code = code.max(exit::FATAL);
    }
    for e in reporter.take_errors() {
        eprintln!("netrig: output error: {e}");
        code = code.max(exit::FATAL);
    }
    Ok(ExitCode::from(code))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Serve(a) => serve(a),
        Cmd::Tcp(a) => tcp(a),
    };
    r.unwrap_or_else(|e| {
        eprintln!("netrig: {e:#}");
        ExitCode::from(exit::FATAL)
    })
}
