//! `netrig tcp`: goodput and reliability with ctsTraffic's semantics.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::{
    Embedded, Exit, Json, KeyArg, Setup, Verbosity, client_error_exit, finish, interrupt_flag,
    positive_duration, run_code, size, target_arg, usage,
};
use netrig::protocol::proto::{IoPattern, VerifyLevel};
use netrig::report::{Reporter, print_summary};
use netrig::tcp::client;
use netrig::tcp::config::{BufferSpec, TcpClientConfig};

#[derive(Args)]
pub struct TcpArgs {
    /// Servers to test against (HOST, HOST:PORT, [V6]:PORT), used round-robin;
    /// none: an embedded server on loopback.
    #[arg(value_parser = target_arg)]
    targets: Vec<String>,
    /// Another target (same as a positional one; iperf3's -c HOST).
    #[arg(short = 'c', long = "target", visible_alias = "client", value_name = "HOST", value_parser = super::client_target)]
    more_targets: Vec<String>,
    /// Port for targets that do not name one.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    port: u16,
    /// Test against an iperf3 server (iperf3 -s) at HOST[:PORT] (port 5201
    /// by default) instead of a netrig server: -P streams, -R, --bidir, -t,
    /// -n, -l, -b, -w, -N, -C, -M and --get-server-output are carried to
    /// it; options it cannot carry are refused (exit 6).
    #[arg(long = "iperf3", value_name = "HOST[:PORT]", value_parser = target_arg, conflicts_with_all = ["targets", "more_targets"])]
    iperf3_server: Option<String>,
    /// Connections to keep established at once (ctsTraffic -Connections)
    /// [default: 8; with --iperf3, 1 stream].
    #[arg(
        short = 'P',
        long = "parallel",
        visible_alias = "connections",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    parallel: Option<u32>,
    /// Rounds of --parallel connections: total = parallel x iterations
    /// (ctsTraffic -Iterations). Default: until --time, or Ctrl-C with -n
    /// alone; 10 s with none of them (iperf3); one round when no target is
    /// given.
    #[arg(long, value_parser = super::count)]
    iterations: Option<u64>,
    /// Most connections being set up at once: connecting, or waiting for
    /// the server to acknowledge the data hello (ctsTraffic -Throttle counts
    /// connects only). Opening then keeps pace with what the server admits.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    throttle: u32,
    /// Bytes per connection, both directions together, or a range each
    /// connection picks from: [1M,64M] or 1M..64M (ctsTraffic -Transfer)
    /// [default: 1G].
    #[arg(short = 'n', long = "bytes", visible_alias = "transfer", value_parser = transfer)]
    bytes: Option<(u64, Option<u64>)>,
    /// Bytes per send/receive: a size (64K) or a random range per connection
    /// ([1K,1M]) (ctsTraffic -Buffer) [default: 256K; with --iperf3, 64K].
    #[arg(short = 'l', long = "length", visible_alias = "buffer", value_parser = buffer)]
    length: Option<BufferSpec>,
    /// Data flow: push (client sends), pull (server sends), pushpull (alternate), duplex (both).
    #[arg(long, default_value = "push", value_parser = super::named::<IoPattern>())]
    pattern: IoPattern,
    /// The server sends: the same as --pattern pull (iperf3 -R).
    #[arg(short = 'R', long, conflicts_with = "pattern")]
    reverse: bool,
    /// Both directions at once on every connection: the same as --pattern
    /// duplex (iperf3 --bidir, which opens a stream per direction instead).
    #[arg(long, conflicts_with_all = ["pattern", "reverse"])]
    bidir: bool,
    /// pushpull: bytes the client sends per turn.
    #[arg(long, default_value = "1M", value_parser = size)]
    push_bytes: u64,
    /// pushpull: bytes the server sends per turn.
    #[arg(long, default_value = "1M", value_parser = size)]
    pull_bytes: u64,
    /// Stop after this long: each connection ends its data at the next
    /// chunk and both ends agree on what it moved (iperf3 -t; pushpull's
    /// are cancelled, as ctsTraffic -TimeLimit's). Default: 10s with a
    /// target and none of -n and --iterations.
    #[arg(short = 't', long = "time", visible_alias = "time-limit", alias = "duration", value_parser = positive_duration)]
    time: Option<Duration>,
    #[command(flatten)]
    bind: super::Sources,
    /// data: check every byte against the pattern; connection: byte counts
    /// only [default: data; with --iperf3, connection].
    #[arg(long, value_parser = super::named::<VerifyLevel>())]
    verify: Option<VerifyLevel>,
    /// Status interval (ms resolution; at least 100ms, as iperf3).
    #[arg(short = 'i', long, default_value = "1s", value_parser = super::interval)]
    interval: Duration,
    /// Run this long first as a warm-up (slow start): its intervals are
    /// marked and the goodput is also given without it (iperf3 -O); --time
    /// runs this much longer. Every connection still ends with its verdict.
    #[arg(short = 'O', long, value_name = "D", value_parser = positive_duration)]
    omit: Option<Duration>,
    /// Ask each server for its own status rows, every --interval, and put
    /// them in the JSON (`server_output`; iperf3 --get-server-output).
    #[arg(long)]
    get_server_output: bool,
    /// Write the status table here (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    status_file: Option<PathBuf>,
    /// Write one row per connection here (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    connection_file: Option<PathBuf>,
    /// Write each connection's TCP_INFO here as it ends: the connection
    /// columns, then ctsTraffic's TCP_INFO columns (-TcpInfoFilename), then
    /// Linux's (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE", visible_alias = "tcp-info-filename")]
    tcp_info_file: Option<PathBuf>,
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
    /// A connection making no progress for this long fails with a network error.
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    idle_timeout: Duration,
    #[command(flatten)]
    connect: super::ConnectTimeout,
    /// Seed for random buffer sizes (for reproducible runs).
    #[arg(long)]
    seed: Option<u64>,
    /// Send each connection's bytes in bursts of this many (iperf2
    /// --burst-size; push or pull only).
    #[arg(long, value_parser = size, requires = "burst_period")]
    burst_size: Option<u64>,
    /// Time from one burst's start to the next.
    #[arg(long, value_parser = positive_duration, requires = "burst_size")]
    burst_period: Option<Duration>,
    /// Bursts: clocks are synchronised, so print each burst's end-to-end time
    /// (sender's first byte to receiver's last).
    #[arg(long, requires = "burst_size")]
    trip_times: bool,
    /// Limit each connection's sending to this rate in bit/s, whichever
    /// end sends (iperf3 -b for TCP, per stream; ctsTraffic -RateLimit,
    /// which counts bytes/s: multiply by 8). A range `[lo,hi]` gives each
    /// connection its own rate in it (ctsTraffic -RateLimit:[low,high]).
    #[arg(short = 'b', long = "bitrate", value_name = "RATE|[LO,HI]", value_parser = rates)]
    bitrate: Option<(u64, Option<u64>)>,
    /// The granularity --bitrate is enforced at: at most rate x period
    /// bytes per period (ctsTraffic -RateLimitPeriod, default 100 ms).
    #[arg(long, value_name = "D", default_value = "100ms", value_parser = positive_duration, requires = "bitrate")]
    rate_limit_period: Duration,
    #[command(flatten)]
    sock: super::sock::TcpFlags,
    #[command(flatten)]
    key: KeyArg,
}

/// Connections at once without `-P`.
const DEFAULT_PARALLEL: u32 = 8;

/// Bytes per connection without `-n` (ctsTraffic's -Transfer default).
const DEFAULT_BYTES: u64 = 1 << 30;
/// Bytes per send/receive unless -l says: on loopback (issue 28, 2 cores)
/// 256 KiB against ctsTraffic's 64 KiB moved 1.09-1.23x the verified
/// goodput at 0.83-0.92x the CPU per GiB at 1, 4 and 8 connections.
const DEFAULT_BUFFER: u32 = 256 << 10;
/// TCP_NOTSENT_LOWAT on a bulk run of two or more connections unless
/// --notsent-lowat says (issue 28, loopback, 2 cores, verified, 3 s runs
/// alternating with and without): goodput 1.18x at 2 connections, 1.16x
/// at 4, 1.04-1.27x at 8, with 0.81-0.97x the CPU per GiB; with less
/// unsent data queued, the receiver copies and verifies bytes the sender
/// wrote moments before, still in cache. At 1 connection it cost 0.88x
/// (the one sender waits for room more often), so none is set there.
const DEFAULT_NOTSENT_LOWAT: u32 = 128 << 10;
/// What --iperf3 carries as -l unless given, as before the default above.
const IPERF3_BUFFER: u32 = 64 << 10;

/// How long a run lasts without `-t` against a server: iperf3's default
/// (`-t`, 10 s), so that `netrig tcp HOST` ends by itself. A count of
/// rounds or bytes per connection keeps ctsTraffic's meaning instead
/// (rounds, or until Ctrl-C), and the embedded server's run is one round.
pub const DEFAULT_TIME: Duration = Duration::from_secs(10);

fn default_time(
    time: &Option<Duration>,
    targets: &[String],
    iterations: Option<u64>,
    bytes_given: bool,
) -> Option<Duration> {
    let counted = iterations.is_some() || bytes_given;
    time.or((!targets.is_empty() && !counted).then_some(DEFAULT_TIME))
}

fn buffer(s: &str) -> Result<BufferSpec, netrig::tcp::config::ConfigError> {
    s.parse()
}

/// `-n`: a size, or a range `[lo,hi]` / `lo..hi`.
fn transfer(s: &str) -> Result<(u64, Option<u64>)> {
    match super::range_of(s, size)? {
        (0, _) => anyhow::bail!("must be greater than zero"),
        r => Ok(r),
    }
}

/// `-b`: a rate, or a range of them, one per connection.
fn rates(s: &str) -> Result<(u64, Option<u64>)> {
    super::range_of(s, super::rate)
}

/// A `tcp` run: the outputs checked, the flags turned into the engine's
/// config, the test run and reported.
pub fn run(a: TcpArgs) -> Result<ExitCode> {
    let setup = match a.setup() {
        Ok(s) => s,
        Err(c) => return Ok(c),
    };
    if let Some(server) = &a.iperf3_server {
        return Ok(against_iperf3(
            &a,
            server,
            setup.json,
            setup.verbosity,
            setup.key.is_some(),
        ));
    }
    let mut cfg = match a.to_config(setup.key.clone()) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let embedded = embedded_if_no_target(&mut cfg, setup.verbosity)?;
    let mut reporter = a.reporter(&cfg, &setup)?;
    let result = client::run(cfg.clone(), interrupt_flag(), &mut reporter);
    if let Some(e) = embedded {
        e.finish();
    }
    match result {
        Ok(rep) => Ok(report(&cfg, rep, reporter, &setup)),
        Err(e) => {
            reporter.stream.end::<()>(None, Some(&e.to_string()));
            Ok(client_error_exit(e, "tcp", setup.json.as_deref(), &cfg))
        }
    }
}

impl TcpArgs {
    /// Checks every output path and loads the key; a problem is a usage
    /// error, already reported.
    fn setup(&self) -> Result<Setup, ExitCode> {
        let outputs = [
            ("--status-file", self.status_file.as_deref()),
            ("--connection-file", self.connection_file.as_deref()),
            ("--tcp-info-file", self.tcp_info_file.as_deref()),
            ("--json-iperf3", self.iperf3.path.as_deref()),
        ];
        let setup = Setup::new(
            &self.json,
            self.verbosity,
            &self.key,
            &self.console,
            outputs,
        )?;
        self.iperf3.set();
        Ok(setup)
    }

    /// The flags turned into the engine's config, in this one place, and
    /// checked (the descriptors it needs included); its `targets` are empty
    /// when none was given (the embedded server's, once it has started). A
    /// config that cannot run is a usage error, already reported.
    fn to_config(
        &self,
        key: Option<netrig::protocol::auth::Key>,
    ) -> Result<TcpClientConfig, ExitCode> {
        let mut targets = self.targets.clone();
        targets.extend(self.more_targets.iter().cloned());
        let mut cfg = TcpClientConfig {
            server_output: self.get_server_output,
            local_addrs: true,
            bind_dev: self.sock.ip.bind_dev.clone(),
            local_ports: self.sock.cport,
            start_at: self.start.at,
            key,
            targets: Vec::new(),
            port: self.port,
            connections: self.parallel.unwrap_or(DEFAULT_PARALLEL),
            iterations: self.iterations,
            throttle: self.throttle,
            open_cap: None,
            pattern: if self.reverse {
                IoPattern::Pull
            } else if self.bidir {
                IoPattern::Duplex
            } else {
                self.pattern
            },
            transfer: self.bytes.map_or(DEFAULT_BYTES, |b| b.0),
            transfer_max: self.bytes.and_then(|b| b.1),
            push_bytes: self.push_bytes,
            pull_bytes: self.pull_bytes,
            buffer: self.length.unwrap_or(BufferSpec::Fixed(DEFAULT_BUFFER)),
            verify: self.verify.unwrap_or(VerifyLevel::Data),
            time_limit: default_time(&self.time, &targets, self.iterations, self.bytes.is_some())
                .map(|t| t + self.omit.unwrap_or_default()),
            time_bound: true,
            omit: self.omit,
            bind: self.bind.addrs(),
            interval: Some(self.interval),
            idle_timeout: Some(self.idle_timeout),
            connect_timeout: Some(self.connect.connect_timeout),
            seed: self.seed,
            burst: self.burst_size.zip(self.burst_period).map(|(size, p)| {
                netrig::protocol::proto::BurstSpec {
                    size,
                    period_ms: p.as_millis().max(1) as u64,
                }
            }),
            sock: self.sock.opts(),
            rate: self
                .bitrate
                .map(|(bps, bps_max)| netrig::protocol::proto::RateLimit {
                    bps,
                    period_ms: self.rate_limit_period.as_millis().min(u128::from(u64::MAX)) as u64,
                    bps_max,
                }),
        };
        // Measured on streams one way or both; turns, bursts and rates wait
        // for their own reasons.
        let bulk = cfg.burst.is_none() && cfg.rate.is_none() && cfg.pattern != IoPattern::Pushpull;
        if bulk && cfg.connections >= 2 && !self.sock.notsent_lowat_given() {
            cfg.sock.notsent_lowat = Some(DEFAULT_NOTSENT_LOWAT);
        }
        // Validated before the targets are in, so --cport's check of ports
        // against connections counts one server, as it always has.
        cfg.validate().map_err(usage)?;
        // One descriptor per connection (two with the embedded server, which
        // holds the other end), plus a margin for control, files and epoll.
        let fds = netrig::net::raise_fd_limit().unwrap_or(1024);
        let per = if targets.is_empty() { 2 } else { 1 };
        let need = u64::from(cfg.connections)
            .min(cfg.total_connections())
            .saturating_mul(per)
            .saturating_add(64);
        if need > fds {
            return Err(usage(format!(
                "-P {} needs about {need} open files and this process may open {fds} \
                 (ulimit -n); raise the hard limit (ulimit -Hn, or LimitNOFILE= for a \
                 service), or spread the connections over several processes",
                cfg.connections
            )));
        }
        cfg.targets = targets;
        Ok(cfg)
    }

    /// The console and the files the run writes as it goes.
    fn reporter(&self, cfg: &TcpClientConfig, setup: &Setup) -> Result<Reporter> {
        let mut reporter = Reporter::new(
            setup.verbosity,
            self.status_file.as_deref(),
            self.connection_file.as_deref(),
        )
        .context("cannot open an output file")?;
        reporter.trip_times = self.trip_times;
        if let Some(p) = &self.tcp_info_file {
            reporter
                .tcp_info_file(p)
                .context("cannot open --tcp-info-file")?;
        }
        reporter.stream = netrig::report::StreamSink::open(setup.stream.as_deref(), "tcp", cfg)
            .context("cannot open --json-stream")?;
        Ok(reporter)
    }
}

/// Starts the embedded server when no target was given and points `cfg` at
/// it (one iteration, unless a time or count says otherwise).
fn embedded_if_no_target(cfg: &mut TcpClientConfig, verbosity: u8) -> Result<Option<Embedded>> {
    if !cfg.targets.is_empty() {
        return Ok(None);
    }
    let e = Embedded::start(cfg.key.clone())?;
    if cfg.iterations.is_none() && cfg.time_limit.is_none() {
        cfg.iterations = Some(1);
    }
    if verbosity >= 1 {
        netrig::out!(
            "No target given: testing against an embedded server on {}.\n",
            e.addr
        );
    }
    cfg.targets.push(e.addr.to_string());
    Ok(Some(e))
}

/// The run's result: the summary, what stopped it early, the files and the
/// exit code.
fn report(
    cfg: &TcpClientConfig,
    rep: client::RunReport,
    mut reporter: Reporter,
    setup: &Setup,
) -> ExitCode {
    if setup.verbosity >= 1 {
        print_summary(&rep);
    }
    let network = rep.totals.net_errors > 0 || !rep.lost_servers.is_empty();
    let mut code = run_code(rep.totals.data_errors > 0, network, rep.interrupted);
    let mut failure = None;
    let mut error_code = None;
    if !(rep.refusals.is_empty() && rep.server_errors.is_empty()) && code != Exit::DataError {
        for r in &rep.refusals {
            let (n, why) = (r.connections, &r.message);
            eprintln!("netrig: server refused {n} connection(s): {why}");
            if failure.is_none() {
                failure = Some(format!("server refused {n} connection(s): {why}"));
                error_code = Some(r.code);
            }
        }
        for (addr, why) in &rep.server_errors {
            eprintln!("netrig: server {addr} stopped the test: {why}");
            failure.get_or_insert_with(|| format!("server {addr} stopped the test: {why}"));
        }
        code = Exit::Refused;
    }
    if let Some(lost) = rep.lost_servers.first()
        && failure.is_none()
    {
        // The console's report says what was measured; the error says why
        // the run ended early, where errors go.
        let why = format!("server {lost} was lost mid-test (it closed the control connection)");
        eprintln!("netrig: {why}; the report keeps what was measured until then");
        failure = Some(why);
    }
    let failed = rep.totals.net_errors + rep.totals.data_errors;
    if let Some(first) = reporter.first_failure()
        && failure.is_none()
    {
        let why = format!("{failed} connection(s) failed; first: {first}");
        eprintln!("netrig: {why}");
        failure = Some(why);
    }
    reporter.stream.end(Some(&rep), failure.as_deref());
    finish(
        code,
        setup.json.as_deref(),
        |p| {
            netrig::report::write_envelope_coded(
                p,
                "tcp",
                cfg,
                Some(&rep),
                failure.as_deref(),
                error_code,
            )
        },
        reporter.take_errors(),
    )
}

/// `--iperf3 HOST[:PORT]`: the options an iperf3 server can be given, the
/// others refused by name.
fn against_iperf3(
    a: &TcpArgs,
    server: &str,
    json: Option<PathBuf>,
    verbosity: u8,
    key: bool,
) -> ExitCode {
    use super::iperf3c::{Common, first_refused, params, refuse, whole_seconds};
    use netrig::protocol::iperf3::{Mode, Params, Proto};
    let mode = match (a.reverse, a.bidir, a.pattern) {
        (true, _, _) | (_, _, IoPattern::Pull) => Mode::Reverse,
        (_, true, _) | (_, _, IoPattern::Duplex) => Mode::Bidir,
        (_, _, IoPattern::Push) => Mode::ClientSends,
        (_, _, IoPattern::Pushpull) => {
            return refuse(
                "--pattern pushpull",
                "iperf3 streams carry one direction each",
            );
        }
    };
    let own = [
        (
            a.verify == Some(VerifyLevel::Data),
            "--verify data",
            "iperf3 does not check payloads (--verify connection, the default with --iperf3, counts bytes)",
        ),
        (
            a.iterations.is_some(),
            "--iterations",
            "an iperf3 test is one set of streams",
        ),
        (
            a.bytes.is_some_and(|b| b.1.is_some()),
            "-n with a range",
            "iperf3 takes one byte count",
        ),
        (
            matches!(a.length, Some(BufferSpec::Range(..))),
            "-l with a range",
            "iperf3 takes one block size",
        ),
        (
            a.bitrate.is_some_and(|b| b.1.is_some()),
            "-b with a range",
            "iperf3 takes one rate",
        ),
        (
            a.burst_size.is_some(),
            "--burst-size",
            "iperf3 servers know no bursts",
        ),
        (!a.bind.addrs().is_empty(), "-B", "not carried yet"),
        (
            a.status_file.is_some() || a.connection_file.is_some() || a.tcp_info_file.is_some(),
            "--status-file, --connection-file, --tcp-info-file",
            "not written for iperf3 runs",
        ),
    ];
    let stream = a.json.stream_path().is_some();
    if let Some(code) = first_refused(key, a.omit.is_some(), a.start.at.is_some(), stream, &own) {
        return code;
    }
    let default = match a.bytes {
        Some(_) => 0,
        None => DEFAULT_TIME.as_secs(),
    };
    let time = match whole_seconds(a.time, default) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let len = match a.length.unwrap_or(BufferSpec::Fixed(IPERF3_BUFFER)) {
        BufferSpec::Fixed(l) if l <= netrig::protocol::iperf3::MAX_BLOCKSIZE => l,
        _ => return refuse("-l over 1M", "iperf3's largest TCP block is 1 MiB"),
    };
    let parallel = a.parallel.unwrap_or(1);
    if parallel > netrig::protocol::iperf3::MAX_STREAMS {
        return refuse("-P over 128", "iperf3 runs at most 128 streams");
    }
    let params = Params {
        parallel,
        time,
        num: a.bytes.map_or(0, |b| b.0),
        len,
        window: a.sock.ip.window.unwrap_or(0),
        bandwidth: a.bitrate.map_or(0, |b| b.0),
        get_server_output: a.get_server_output,
        nodelay: a.sock.no_delay,
        congestion: a.sock.congestion.clone(),
        mss: a.sock.mss.unwrap_or(0),
        ..params(Proto::Tcp, mode)
    };
    super::iperf3c::tcp(
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: TcpArgs,
    }

    /// The TCP_NOTSENT_LOWAT the data sockets get from these flags.
    fn lowat(flags: &[&str]) -> Option<u32> {
        let argv = ["tcp", "127.0.0.1"]
            .into_iter()
            .chain(flags.iter().copied());
        let cmd = Cmd::try_parse_from(argv).expect("flags parse");
        let cfg = cmd.args.to_config(None).expect("a config");
        cfg.sock.notsent_lowat
    }

    #[test]
    fn bulk_runs_of_two_or_more_connections_queue_little_unsent_data() {
        assert_eq!(lowat(&[]), Some(DEFAULT_NOTSENT_LOWAT), "8 connections");
        assert_eq!(lowat(&["-P", "2", "-R"]), Some(DEFAULT_NOTSENT_LOWAT));
        assert_eq!(lowat(&["-P", "1"]), None, "measured slower at one");
        assert_eq!(
            lowat(&["-P", "4", "--notsent-lowat", "64K"]),
            Some(64 << 10)
        );
        assert_eq!(
            lowat(&["-P", "4", "--notsent-lowat", "0"]),
            None,
            "0: the system's"
        );
        assert_eq!(lowat(&["-P", "4", "-b", "1G"]), None, "a rate waits anyway");
        assert_eq!(lowat(&["-P", "4", "--pattern", "pushpull"]), None);
    }
}
