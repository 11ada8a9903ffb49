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
use netrig::proto::{MediaSpec, UdpSpec};
use netrig::report::{
    Reporter, UdpReporter, print_analysis, print_summary, print_udp_summary, write_bins,
    write_json, write_udp_json,
};
use netrig::rr::client::{RrConfig, Transport};
use netrig::server::{Limits, Server, ServerConfig};
use netrig::tcp::client::{self, ClientError};
use netrig::tcp::config::{BufferSpec, TcpClientConfig};
use netrig::udp::client::UdpClientConfig;
use netrig::udp::pace::{Pacing, gap_for_rate};
use netrig::units;

/// Exit codes, documented in the README.
mod relay_cmd;

mod exit {
    pub const FATAL: u8 = 1;
    pub const NETWORK_ERROR: u8 = 3;
    pub const DATA_ERROR: u8 = 4;
    pub const REFUSED: u8 = 5;
    pub const UNSUPPORTED: u8 = 6;
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
    /// Pre-shared key file: a server requires clients to prove they know it;
    /// a client proves it. The key itself may be given in NETRIG_KEY instead.
    #[arg(long, global = true, value_name = "FILE")]
    key: Option<PathBuf>,
}

/// The pre-shared key of this run, loaded once in `main`.
static KEY: std::sync::OnceLock<Option<netrig::auth::Key>> = std::sync::OnceLock::new();

fn key() -> Option<netrig::auth::Key> {
    KEY.get().cloned().flatten()
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a server. It needs no test options: each client describes its test.
    Serve(ServeArgs),
    /// TCP goodput and reliability test (ctsTraffic semantics). Without a target,
    /// runs against an embedded server on loopback.
    Tcp(TcpArgs),
    /// Paced UDP stream: loss, duplicates, reordering, one-way delay, jitter;
    /// or a ctsTraffic-style media stream with --media. Without a target, runs
    /// against an embedded server on loopback.
    Udp(UdpArgs),
    /// Request/response round-trip latency (ACE perf tests) over TCP, UDP or SCTP;
    /// --spectrum runs a range of power-of-two request sizes.
    Rr(RrArgs),
    /// Ping over UDP: one line per probe with round trip and one-way estimates.
    Ping(PingArgs),
    /// Connect/request/response/close churn: connections per second and
    /// handshake and transaction time percentiles.
    Crr(CrrArgs),
    /// UDP rate sweep (bwdelaytester -s): ramp the rate linearly, then print a
    /// table per offered-rate bin and the congestion analysis.
    Sweep(SweepArgs),
    /// Analyse a saved profile/sweep result (--json file): rate bins,
    /// congestion point, shaping or policing, committed burst.
    Analyze(AnalyzeArgs),
    /// User-space impairment relay for TCP and UDP (no netem needed): loss,
    /// duplication, reordering, delay and jitter, rate limits, corruption,
    /// resets; seeded, and logs exactly what it did.
    Relay(relay_cmd::RelayArgs),
}

/// A sweep makes its own rate profile: the flags that set another rate or
/// stream shape conflict with it.
#[derive(Args)]
#[command(group(
    clap::ArgGroup::new("sweep_range")
        .args(["to"])
        .conflicts_with_all(["rate", "gap", "profile", "media", "burst_size"])
))]
struct SweepArgs {
    /// Rate at the end of the sweep.
    #[arg(long, value_parser = rate)]
    to: u64,
    /// Rate at the start of the sweep.
    #[arg(long, default_value = "0", value_parser = rate_or_zero)]
    from: u64,
    #[command(flatten)]
    udp: UdpArgs,
}

#[derive(Args)]
struct AnalyzeArgs {
    /// A JSON file written by `netrig udp --profile … --json` or `netrig sweep … --json`.
    file: PathBuf,
    /// Rate bin width (default: a twentieth of the peak rate).
    #[arg(long, value_parser = rate)]
    bin: Option<u64>,
    /// Write the rate-bin table here (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
}

fn rate_or_zero(s: &str) -> Result<u64, String> {
    units::parse_rate(s).map_err(|e| e.to_string())
}

fn sweep(a: SweepArgs) -> Result<ExitCode> {
    if a.from > a.to {
        eprintln!("netrig: --from must not be above --to");
        return Ok(ExitCode::from(2));
    }
    let size = a.udp.size as u32;
    let dur = a.udp.duration.unwrap_or(DEFAULT_UDP_DURATION).as_nanos() as u64;
    let profile = match netrig::udp::profile::Profile::sweep(a.from, a.to, dur, size) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("netrig: sweep: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    udp_with(a.udp, Some(profile))
}

/// Bins and analyses a profile run's intervals.
fn analyse(
    profile: &netrig::udp::profile::Profile,
    intervals: &[netrig::udp::track::UdpInterval],
    bin: Option<u64>,
) -> (
    Vec<netrig::udp::analyze::Bin>,
    netrig::udp::analyze::Analysis,
) {
    let samples = netrig::udp::analyze::samples(profile, intervals);
    let width = bin.map_or(profile.max_rate() as f64 / 20.0, |b| b as f64);
    (
        netrig::udp::analyze::bins(&samples, width),
        netrig::udp::analyze::analyze(&samples),
    )
}

fn analyze_file(a: AnalyzeArgs) -> Result<ExitCode> {
    if let Err(c) = check_outputs([("--csv", a.csv.as_deref())]) {
        return Ok(c);
    }
    let text =
        std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    let bad = |why: String| {
        eprintln!("netrig: {}: {why}", a.file.display());
        Ok(ExitCode::from(2))
    };
    let doc: serde_json::Value = match serde_json::from_slice(&text) {
        Ok(d) => d,
        Err(e) => return bad(format!("not JSON: {e}")),
    };
    let profile =
        match serde_json::from_value::<netrig::udp::profile::Profile>(
            doc["config"]["spec"]["profile"].clone(),
        ) {
            Ok(p) => p,
            Err(_) => return bad(
                "no rate profile in config.spec.profile (is it from `udp --profile` or `sweep`?)"
                    .into(),
            ),
        };
    let intervals = match serde_json::from_value::<Vec<netrig::udp::track::UdpInterval>>(
        doc["result"]["intervals"].clone(),
    ) {
        Ok(i) => i,
        Err(e) => return bad(format!("result.intervals: {e}")),
    };
    let (bins, mut analysis) = analyse(&profile, &intervals, a.bin);
    if let Ok(s) =
        serde_json::from_value::<netrig::udp::engine::SenderReport>(doc["result"]["sender"].clone())
    {
        netrig::udp::analyze::note_sender(&mut analysis, &s);
    }
    print_analysis(&bins, &analysis);
    if let Some(p) = &a.csv {
        write_bins(p, &bins).with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
struct CrrArgs {
    /// Server (HOST, HOST:PORT, [V6]:PORT); none: embedded loopback server.
    #[arg(value_parser = target_arg)]
    target: Option<String>,
    /// Port if the target names none.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    port: u16,
    /// Request size in bytes.
    #[arg(short, long, default_value = "64", value_parser = size)]
    size: u64,
    /// Reply size in bytes.
    #[arg(long, default_value = "2", value_parser = size)]
    reply: u64,
    /// Transactions (connections) in total.
    #[arg(short = 'n', long, default_value_t = 10_000)]
    transactions: u64,
    /// Transactions in flight at once.
    #[arg(short, long, default_value_t = 1)]
    connections: u32,
    /// Stop after this long.
    #[arg(long, value_parser = positive_duration)]
    time_limit: Option<Duration>,
    /// Write the report as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// 0 errors only, 1 summary.
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    verbosity: u8,
}

fn crr(a: CrrArgs) -> Result<ExitCode> {
    if let Err(c) = check_outputs([("--json", a.json.as_deref())]) {
        return Ok(c);
    }
    if a.size == 0 || a.size > 1 << 20 || a.reply > 1 << 20 {
        eprintln!("netrig: --size must be 1..=1M and --reply at most 1M");
        return Ok(ExitCode::from(2));
    }
    let (target, embedded) = target_or_embedded(&a.target, a.verbosity)?;
    let mut cfg = netrig::rr::crr::config(
        target,
        a.port,
        a.size as u32,
        a.reply as u32,
        a.transactions,
        a.connections,
    );
    cfg.time_limit = a.time_limit;
    cfg.key = key();
    let mut col = netrig::rr::crr::CrrCollector::default();
    let result = client::run(cfg, interrupt_flag(), &mut col);
    if let Some(e) = embedded {
        e.finish();
    }
    let run = match result {
        Ok(r) => r,
        Err(e) => return Ok(client_error_exit(e)),
    };
    let rep = col.report(run.duration_secs);
    if a.verbosity >= 1 {
        netrig::report::print_crr(
            a.size,
            a.reply,
            a.connections,
            &rep,
            col.first_failure.as_deref(),
        );
    } else if let Some(f) = &col.first_failure {
        // Quiet mode still says why the exit code is not 0.
        eprintln!("netrig: {} transactions failed; first: {f}", rep.failed);
    }
    let code = run_code(run.totals.data_errors > 0, rep.failed > 0, run.interrupted);
    Ok(finish(
        code,
        a.json.as_deref(),
        |p| netrig::report::write_crr_json(p, &rep),
        Vec::new(),
    ))
}

#[derive(Args)]
struct HistArgs {
    /// Histogram lower bound (ACE -m).
    #[arg(long, default_value = "0", value_parser = duration)]
    hist_min: Duration,
    /// Histogram upper bound (ACE -M).
    #[arg(long, default_value = "10ms", value_parser = positive_duration)]
    hist_max: Duration,
    /// Histogram bins (ACE -b).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    hist_bins: u32,
    /// Largest outliers kept and listed (ACE -x).
    #[arg(long, default_value_t = 100)]
    outliers: usize,
}

#[derive(Args)]
struct RrArgs {
    /// Server (HOST, HOST:PORT, [V6]:PORT); none: embedded loopback server.
    #[arg(value_parser = target_arg)]
    target: Option<String>,
    /// Port if the target names none.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    port: u16,
    /// Transport.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    proto: Transport,
    /// Request size in bytes.
    #[arg(short, long, default_value = "64", value_parser = size)]
    size: u64,
    /// Reply size in bytes (ACE replies with 2).
    #[arg(long, default_value = "2", value_parser = size)]
    reply: u64,
    /// Measured round trips.
    #[arg(short = 'n', long, default_value_t = 100_000)]
    iterations: u64,
    /// Round trips before measuring, reported separately.
    #[arg(long, default_value_t = 100)]
    warmup: u64,
    /// Enable Nagle's algorithm (off by default, as ACE).
    #[arg(long)]
    nagle: bool,
    /// Spin on non-blocking sockets instead of blocking (lowest latency, one core busy).
    #[arg(long)]
    busy_poll: bool,
    /// UDP: end each round trip at the kernel's receive time of the reply
    /// (SO_TIMESTAMPNS) instead of when netrig wakes up to read it.
    #[arg(long)]
    rx_timestamps: bool,
    /// UDP: a reply later than this counts as lost. TCP and SCTP: no reply in
    /// this time fails the run (what was measured is kept).
    #[arg(long, default_value = "1s", value_parser = positive_duration)]
    timeout: Duration,
    /// Local address to test from. With --proto sctp-seqpacket, a comma-separated
    /// list makes the association multi-homed (sctp_bindx), as ACE's --bind a,b.
    #[arg(long, value_name = "ADDR[,ADDR...]", value_delimiter = ',')]
    bind: Vec<IpAddr>,
    /// Run request sizes 2^A ..= 2^B (e.g. 0..16) and print one row per size.
    #[arg(long, value_name = "A..B")]
    spectrum: Option<String>,
    /// Write the spectrum rows (or the single run's summary) as CSV.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write the histogram as CSV (low_us, high_us, count, fraction, cumulative).
    #[arg(long, value_name = "FILE")]
    hist_file: Option<PathBuf>,
    /// Write the report as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    #[command(flatten)]
    hist: HistArgs,
    /// 0 errors only, 1 summary and non-empty histogram bins, 2 every bin.
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    verbosity: u8,
}

#[derive(Args)]
struct PingArgs {
    /// Server (HOST, HOST:PORT, [V6]:PORT); none: embedded loopback server.
    #[arg(value_parser = target_arg)]
    target: Option<String>,
    /// Port if the target names none.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    port: u16,
    /// Time between probes (down to microseconds; use --busy-poll below ~100us).
    #[arg(short, long, default_value = "1s", value_parser = positive_duration, conflicts_with = "rate")]
    interval: Duration,
    /// Probes per second instead of --interval.
    #[arg(long)]
    rate: Option<f64>,
    /// Probe payload bytes.
    #[arg(short, long, default_value = "64", value_parser = size)]
    size: u64,
    /// Stop after this many probes (default: until Ctrl-C).
    #[arg(short, long)]
    count: Option<u64>,
    /// A reply later than this counts as lost.
    #[arg(long, default_value = "1s", value_parser = positive_duration)]
    timeout: Duration,
    /// Spin instead of sleeping.
    #[arg(long)]
    busy_poll: bool,
    /// End each round trip at the kernel's receive time of the reply (SO_TIMESTAMPNS).
    #[arg(long)]
    rx_timestamps: bool,
    /// Trust the clocks for the one-way split.
    #[arg(long)]
    synced: bool,
    /// Write the report as JSON ("-": standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// 0 summary only, 1 a line per probe.
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    verbosity: u8,
}

/// Starts an embedded server when no target is given; returns the target to use.
fn target_or_embedded(
    target: &Option<String>,
    verbosity: u8,
) -> Result<(String, Option<Embedded>)> {
    match target {
        Some(t) => Ok((t.clone(), None)),
        None => {
            let e = Embedded::start()?;
            if verbosity >= 1 {
                netrig::out!(
                    "No target given: testing against an embedded server on {}.",
                    e.addr
                );
            }
            Ok((e.addr.to_string(), Some(e)))
        }
    }
}

fn parse_spectrum(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = s.split_once("..").ok_or("expected A..B, e.g. 0..16")?;
    let a: u32 = a
        .trim()
        .parse()
        .map_err(|_| format!("'{a}' is not a power of two exponent"))?;
    let b: u32 = b
        .trim()
        .parse()
        .map_err(|_| format!("'{b}' is not a power of two exponent"))?;
    if a > b || b > 24 {
        return Err(format!("spectrum {a}..{b}: need A <= B <= 24"));
    }
    Ok((a, b))
}

fn rr(a: RrArgs) -> Result<ExitCode> {
    if let Err(c) = check_outputs([
        ("--json", a.json.as_deref()),
        ("--csv", a.csv.as_deref()),
        ("--hist-file", a.hist_file.as_deref()),
    ]) {
        return Ok(c);
    }
    let spectrum = match a.spectrum.as_deref().map(parse_spectrum).transpose() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("netrig: --spectrum: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if matches!(a.proto, Transport::Sctp | Transport::SctpSeqpacket)
        && let Err(e) = netrig::sctp::support(a.proto == Transport::SctpSeqpacket)
    {
        eprintln!("netrig: {e}");
        return Ok(ExitCode::from(exit::UNSUPPORTED));
    }
    if a.size == 0 || a.size > u32::MAX as u64 || a.reply > u32::MAX as u64 {
        eprintln!("netrig: --size must be at least 1 byte");
        return Ok(ExitCode::from(2));
    }
    if a.bind.len() > 1 && a.proto != Transport::SctpSeqpacket {
        eprintln!("netrig: several --bind addresses need --proto sctp-seqpacket (multi-homing)");
        return Ok(ExitCode::from(2));
    }
    if a.bind.iter().any(|b| b.is_ipv4() != a.bind[0].is_ipv4()) {
        eprintln!("netrig: --bind addresses must all be IPv4 or all IPv6");
        return Ok(ExitCode::from(2));
    }
    let (target, embedded) = target_or_embedded(&a.target, a.verbosity)?;
    let base = RrConfig {
        key: key(),
        target,
        port: a.port,
        transport: a.proto,
        size: a.size as u32,
        reply: a.reply as u32,
        iterations: a.iterations,
        warmup: a.warmup,
        nagle: a.nagle,
        busy_poll: a.busy_poll,
        rx_timestamps: a.rx_timestamps,
        timeout: Some(a.timeout),
        interval: None,
        hist_min_us: a.hist.hist_min.as_secs_f64() * 1e6,
        hist_max_us: a.hist.hist_max.as_secs_f64() * 1e6,
        hist_bins: a.hist.hist_bins as usize,
        outliers: a.hist.outliers,
        synced: false,
        bind: a.bind.clone(),
    };
    let sizes: Vec<u32> = match spectrum {
        Some((lo, hi)) => (lo..=hi).map(|k| 1u32 << k).collect(),
        None => vec![base.size],
    };
    let interrupt = interrupt_flag();
    let mut reports = Vec::new();
    let mut code = 0;
    if spectrum.is_some() && a.verbosity >= 1 {
        netrig::out!("{}", netrig::report::SPECTRUM_HEADERS.join(" "));
    }
    for size in sizes {
        if interrupt.load(SeqCst) {
            break;
        }
        let cfg = RrConfig {
            size,
            ..base.clone()
        };
        match netrig::rr::client::run(&cfg, Arc::clone(&interrupt), &mut |_| {}) {
            Ok((rep, stats)) => {
                if spectrum.is_some() {
                    if a.verbosity >= 1 {
                        netrig::out!("{}", netrig::report::spectrum_cells(&rep).join(" "));
                    }
                } else {
                    if a.verbosity >= 1 {
                        netrig::report::print_rr(&cfg, &rep, &stats, a.verbosity >= 2);
                    }
                    if let Some(p) = &a.hist_file
                        && let Err(e) = netrig::report::write_hist_csv(p, &stats)
                    {
                        eprintln!("netrig: cannot write {}: {e}", p.display());
                        code = exit::FATAL;
                    }
                }
                if rep.corrupt > 0 || rep.server_corrupt.is_some_and(|c| c > 0) {
                    code = code.max(exit::DATA_ERROR);
                }
                let failed = rep.error.clone();
                reports.push(rep);
                if let Some(e) = failed {
                    // What was measured before the failure still goes to the files.
                    eprintln!("netrig: {e}");
                    code = code.max(exit::NETWORK_ERROR);
                    break;
                }
            }
            Err(e) => {
                let c = client_error_exit(e);
                if let Some(e) = embedded {
                    e.finish();
                }
                return Ok(c);
            }
        }
    }
    if let Some(e) = embedded {
        e.finish();
    }
    if let Some(p) = &a.csv
        && let Err(e) = netrig::report::write_spectrum_csv(p, &reports)
    {
        eprintln!("netrig: cannot write {}: {e}", p.display());
        code = code.max(exit::FATAL);
    }
    if let Some(p) = &a.json
        && let Err(e) = netrig::report::write_rr_json(p, &base, &reports)
    {
        eprintln!("netrig: cannot write {}: {e}", p.display());
        code = code.max(exit::FATAL);
    }
    if interrupt.load(SeqCst) && code == 0 {
        code = exit::INTERRUPTED;
    }
    Ok(ExitCode::from(code))
}

fn ping(a: PingArgs) -> Result<ExitCode> {
    if let Err(c) = check_outputs([("--json", a.json.as_deref())]) {
        return Ok(c);
    }
    let interval = match a.rate {
        Some(r) if r > 0.0 && r.is_finite() => Duration::from_secs_f64(1.0 / r),
        Some(_) => {
            eprintln!("netrig: --rate must be a positive number of probes per second");
            return Ok(ExitCode::from(2));
        }
        None => a.interval,
    };
    if a.size > (netrig::udp::header::MAX_DATAGRAM - netrig::udp::header::HEADER_LEN) as u64
        || a.size == 0
    {
        eprintln!(
            "netrig: --size must be 1..={} bytes",
            netrig::udp::header::MAX_DATAGRAM - netrig::udp::header::HEADER_LEN
        );
        return Ok(ExitCode::from(2));
    }
    let (target, embedded) = target_or_embedded(&a.target, a.verbosity)?;
    let cfg = RrConfig {
        key: key(),
        target: target.clone(),
        port: a.port,
        transport: Transport::Udp,
        size: a.size as u32,
        reply: a.size as u32,
        iterations: a.count.unwrap_or(netrig::rr::client::UNBOUNDED),
        warmup: 0,
        nagle: false,
        busy_poll: a.busy_poll,
        rx_timestamps: a.rx_timestamps,
        timeout: Some(a.timeout),
        interval: Some(interval),
        hist_min_us: 0.0,
        hist_max_us: 1e6,
        hist_bins: 1000,
        outliers: 10,
        synced: a.synced,
        bind: Vec::new(),
    };
    let verbose = a.verbosity >= 1;
    let size = a.size;
    let mut on_probe = |p: &netrig::rr::client::Probe| {
        if verbose {
            netrig::out!("{}", netrig::report::ping_line(size, &target, p));
        }
    };
    let result = netrig::rr::client::run(&cfg, interrupt_flag(), &mut on_probe);
    if let Some(e) = embedded {
        e.finish();
    }
    let (rep, _) = match result {
        Ok(r) => r,
        Err(e) => return Ok(client_error_exit(e)),
    };
    netrig::report::print_ping_summary(&cfg, &rep);
    let code = if let Some(e) = &rep.error {
        eprintln!("netrig: {e}");
        exit::NETWORK_ERROR
    } else if rep.received == 0 && rep.sent > 0 {
        exit::NETWORK_ERROR
    } else if rep.interrupted && a.count.is_some() {
        // Without -c, Ctrl-C is how a ping ends (as ping(8)); with one, it
        // cut the run short.
        exit::INTERRUPTED
    } else {
        0
    };
    let reports = [rep];
    Ok(finish(
        code,
        a.json.as_deref(),
        |p| netrig::report::write_rr_json(p, &cfg, &reports),
        Vec::new(),
    ))
}

fn target_arg(s: &str) -> Result<String, String> {
    netrig::net::check_target(s).map(|()| s.to_string())
}

/// Checks every output path before a test starts; a bad one is a usage
/// error that names the flag (exit 2).
fn check_outputs<'a>(
    outputs: impl IntoIterator<Item = (&'static str, Option<&'a std::path::Path>)>,
) -> Result<(), ExitCode> {
    let outputs: Vec<_> = outputs.into_iter().collect();
    let paths = outputs.iter().map(|(_, p)| *p);
    netrig::output::check_all(paths).map_err(|e| {
        let flag = outputs
            .iter()
            .find(|(_, p)| *p == Some(e.path()))
            .map_or("output", |(f, _)| f);
        eprintln!("netrig: {flag} {e}");
        ExitCode::from(2)
    })
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
    /// Refuse connections beyond this many open from one client address.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    max_conns_per_client: u32,
}

#[derive(Args)]
struct TcpArgs {
    /// Servers to test against (HOST, HOST:PORT, [V6]:PORT), used round-robin.
    #[arg(value_parser = target_arg)]
    targets: Vec<String>,
    /// Another target (same as a positional one).
    #[arg(long = "target", value_name = "HOST", value_parser = target_arg)]
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
    /// Send each connection's transfer in bursts of this many bytes (iperf2
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
}

fn rate(s: &str) -> Result<u64, String> {
    match units::parse_rate(s).map_err(|e| e.to_string())? {
        0 => Err("must be greater than zero".into()),
        r => Ok(r),
    }
}
fn signed_duration(s: &str) -> Result<i64, String> {
    let (neg, body) = s.strip_prefix('-').map_or((false, s), |b| (true, b));
    let ns = duration(body)?.as_nanos() as i64;
    Ok(if neg { -ns } else { ns })
}

#[derive(Args)]
struct UdpArgs {
    /// Server (HOST, HOST:PORT, [V6]:PORT); none: embedded loopback server.
    #[arg(value_parser = target_arg)]
    target: Option<String>,
    /// End every test datagram with an HMAC-SHA256 tag under the session's key
    /// (needs --key here and on the server); altered or forged datagrams count as
    /// corrupt and never as received.
    #[arg(long)]
    auth_datagrams: bool,
    /// Port if the target names none.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    port: u16,
    /// Sending rate, bits per second (e.g. 100M, 1700Mbit, 1G).
    #[arg(short, long, value_parser = rate, conflicts_with = "gap")]
    rate: Option<u64>,
    /// Gap between datagrams instead of a rate (e.g. 5us).
    #[arg(long, value_parser = positive_duration)]
    gap: Option<Duration>,
    /// Datagram size in bytes (UDP payload, including netrig's 32-byte header).
    #[arg(short, long, default_value = "1000", value_parser = size)]
    size: u64,
    /// Server sends to client (default: client sends to server).
    #[arg(short = 'R', long)]
    reverse: bool,
    /// How long to send, default 10s (--length is the same, as in ctsTraffic).
    /// With --profile: the profile's length by default; a longer duration
    /// repeats the profile (as FlowPing -w), a shorter one cuts it.
    #[arg(short, long, alias = "length", value_parser = positive_duration)]
    duration: Option<Duration>,
    /// Receiver status interval.
    #[arg(long, default_value = "1s", value_parser = positive_duration)]
    interval: Duration,
    /// How the sender waits between datagrams.
    #[arg(long, value_enum, default_value_t = Pacing::Hybrid)]
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
    /// Delay histogram bin width.
    #[arg(long, default_value = "50us", value_parser = positive_duration)]
    hist_bin: Duration,
    /// Delay histogram bin count (the last bin takes everything above).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    hist_bins: u32,
    /// Send in bursts of this many bytes (iperf2 --burst-size); with --rate, datagrams
    /// within a burst are paced at that rate, otherwise sent back to back.
    #[arg(long, value_parser = size, requires = "burst_period", conflicts_with_all = ["profile", "media"])]
    burst_size: Option<u64>,
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
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rate", "gap", "media"])]
    profile: Option<PathBuf>,
    /// Scenario file format: auto (bare numbers only = FlowPing), netrig
    /// (rates need units) or flowping (seconds, kbit/s, bytes).
    #[arg(long, value_enum, default_value_t = netrig::udp::scenario::Format::Auto, requires = "profile")]
    profile_format: netrig::udp::scenario::Format,
    /// Media stream (ctsTraffic): the server sends one datagram per frame
    /// (so the frame size follows from --bitrate and --fps, and the direction
    /// is always server to client).
    #[arg(long, requires = "bitrate", conflicts_with_all = ["rate", "gap", "size", "reverse"])]
    media: bool,
    /// Media: stream bit rate (frame size = bitrate / 8 / fps).
    #[arg(long, value_parser = rate, requires = "media")]
    bitrate: Option<u64>,
    /// Media: frames per second.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=100_000), requires = "media")]
    fps: u32,
    /// Media: playout buffer; frames later than their slot plus this are late.
    #[arg(long, default_value = "1s", value_parser = duration, requires = "media")]
    buffer_depth: Duration,
    /// Write one row per received datagram (needs --reverse or --media: the client must receive).
    #[arg(long, value_name = "FILE")]
    jitter_file: Option<PathBuf>,
    /// Bind the data socket to this interface (SO_BINDTODEVICE).
    #[arg(long, value_name = "IFACE")]
    bind_dev: Option<String>,
    /// Local address for the control and data sockets.
    #[arg(long, value_name = "IP")]
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
    /// Write configuration, intervals, sender and receiver totals as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// 0 errors only, 1 table and summary.
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    verbosity: u8,
}

/// How long a UDP stream or sweep runs without --duration.
const DEFAULT_UDP_DURATION: Duration = Duration::from_secs(10);

fn udp(a: UdpArgs) -> Result<ExitCode> {
    udp_with(a, None)
}

fn udp_with(a: UdpArgs, sweep_profile: Option<netrig::udp::profile::Profile>) -> Result<ExitCode> {
    if let Err(c) = check_outputs([
        ("--json", a.json.as_deref()),
        ("--csv", a.csv.as_deref()),
        ("--status-file", a.status_file.as_deref()),
        ("--jitter-file", a.jitter_file.as_deref()),
    ]) {
        return Ok(c);
    }
    use netrig::udp::header::{HEADER_LEN, MAX_DATAGRAM};
    if a.profile.is_none() && sweep_profile.is_none() {
        for (set, flag) in [
            (a.precompute, "--precompute"),
            (a.bin.is_some(), "--bin"),
            (a.csv.is_some(), "--csv"),
        ] {
            if set {
                eprintln!(
                    "netrig: {flag} applies to rate profiles: give --profile FILE or use `netrig sweep`"
                );
                return Ok(ExitCode::from(2));
            }
        }
    }
    let (size, gap_ps, reverse, media) = if a.media {
        let bitrate = a.bitrate.unwrap_or_default();
        let frame = bitrate / 8 / u64::from(a.fps);
        if frame < HEADER_LEN as u64 || frame > MAX_DATAGRAM as u64 {
            anyhow::bail!(
                "media frame of {frame} bytes (bitrate / 8 / fps) must be {HEADER_LEN}..={MAX_DATAGRAM} bytes: adjust --bitrate or --fps"
            );
        }
        let media = MediaSpec {
            fps: a.fps,
            buffer_depth_ms: a.buffer_depth.as_millis() as u64,
        };
        (
            frame,
            1_000_000_000_000 / u64::from(a.fps),
            true,
            Some(media),
        )
    } else {
        if a.size < HEADER_LEN as u64 || a.size > MAX_DATAGRAM as u64 {
            eprintln!("netrig: --size must be {HEADER_LEN}..={MAX_DATAGRAM} bytes");
            return Ok(ExitCode::from(2));
        }
        let gap = match (a.rate, a.gap) {
            (_, Some(g)) => g.as_nanos() as u64 * 1000,
            (r, None) => gap_for_rate(a.size as u32, r.unwrap_or(10_000_000)),
        };
        (a.size, gap, a.reverse, None)
    };
    if a.jitter_file.is_some() && !reverse {
        eprintln!(
            "netrig: --jitter-file needs --reverse or --media (the client must be the receiver)"
        );
        return Ok(ExitCode::from(2));
    }
    let profile = match (&a.profile, sweep_profile) {
        (_, Some(p)) => Some(p),
        (None, None) => None,
        (Some(path), None) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let parsed =
                netrig::udp::scenario::parse(&text, a.profile_format).and_then(|(p, f)| {
                    match a.duration {
                        Some(d) => p.fit(d.as_nanos().min(u64::MAX as u128) as u64),
                        None => Ok(p),
                    }
                    .map(|p| (p, f))
                });
            match parsed {
                Ok((p, format)) => {
                    if a.verbosity >= 1 {
                        netrig::out!(
                            "Profile {}: {}, {} steps, {:.3} s, {} on average",
                            path.display(),
                            format.describe(),
                            p.steps().len(),
                            p.duration_ns() as f64 / 1e9,
                            units::format_bits_per_sec(p.bytes() * 8e9 / p.duration_ns() as f64)
                        );
                    }
                    Some(p)
                }
                Err(e) => {
                    eprintln!("netrig: {}: {e}", path.display());
                    return Ok(ExitCode::from(2));
                }
            }
        }
    };
    let (size, gap_ps, duration_ms) = match &profile {
        Some(p) => (
            u64::from(p.max_size()),
            gap_for_rate(p.max_size(), p.max_rate().max(1)),
            (p.duration_ns() / 1_000_000).max(1),
        ),
        None => (
            size,
            gap_ps,
            a.duration
                .unwrap_or(DEFAULT_UDP_DURATION)
                .as_millis()
                .max(1) as u64,
        ),
    };
    let burst = a
        .burst_size
        .zip(a.burst_period)
        .map(|(b, p)| netrig::proto::BurstSpec {
            size: b,
            period_ms: p.as_millis().max(1) as u64,
        });
    // Without an explicit rate, a burst's datagrams go back to back.
    let gap_ps = if burst.is_some() && a.rate.is_none() && a.gap.is_none() {
        1
    } else {
        gap_ps
    };
    let spec = UdpSpec {
        reverse,
        size: size as u32,
        gap_ps,
        duration_ms,
        pacing: a.pacing,
        catch_up: a.catch_up,
        verify: !a.no_verify,
        interval_ms: a.interval.as_millis().max(1) as u64,
        hist_bin_ns: a.hist_bin.as_nanos() as u64,
        hist_bins: a.hist_bins,
        offset_comp_ns: a.offset_comp,
        media,
        profile,
        precompute: a.precompute,
        burst,
        auth_datagrams: a.auth_datagrams,
    };
    let embedded = match &a.target {
        Some(_) => None,
        None => Some(Embedded::start()?),
    };
    let target = match (&a.target, &embedded) {
        (Some(t), _) => t.clone(),
        (None, Some(e)) => {
            if a.verbosity >= 1 {
                netrig::out!(
                    "No target given: testing against an embedded server on {}.",
                    e.addr
                );
            }
            e.addr.to_string()
        }
        (None, None) => unreachable!("an embedded server is started when no target is given"),
    };
    let cfg = UdpClientConfig {
        key: key(),
        target,
        port: a.port,
        spec,
        synced: a.synced || a.trip_times,
        bind: a.bind,
        bind_dev: a.bind_dev,
        rcvbuf: a.rcvbuf.map(|v| v as usize),
        sndbuf: a.sndbuf.map(|v| v as usize),
        per_packet: a.jitter_file.is_some(),
    };
    if a.verbosity >= 1 && cfg.spec.burst.is_some() {
        let (s, b) = (
            &cfg.spec,
            cfg.spec.burst.unwrap_or(netrig::proto::BurstSpec {
                size: 0,
                period_ms: 1,
            }),
        );
        netrig::out!(
            "UDP {}: bursts of {} bytes ({} B datagrams{}) every {} ms for {:.3} s",
            if s.reverse {
                "server -> client"
            } else {
                "client -> server"
            },
            b.size,
            s.size,
            if s.gap_ps > 1 {
                format!(", {:.3} us apart", s.gap_ps as f64 / 1e6)
            } else {
                ", back to back".into()
            },
            b.period_ms,
            s.duration_ms as f64 / 1e3
        );
    } else if a.verbosity >= 1 {
        let s = &cfg.spec;
        netrig::out!(
            "UDP {}: {} B datagrams every {:.3} us ({}) for {:.3} s, pacing {:?}{}",
            if s.reverse {
                "server -> client"
            } else {
                "client -> server"
            },
            s.size,
            s.gap_ps as f64 / 1e6,
            units::format_bits_per_sec(s.size as f64 * 8.0 * 1e12 / s.gap_ps as f64),
            s.duration_ms as f64 / 1e3,
            s.pacing,
            if s.media.is_some() {
                ", media stream"
            } else {
                ""
            }
        );
    }
    let mut reporter = UdpReporter::new(
        a.verbosity,
        cfg.spec.media.is_some(),
        a.status_file.as_deref(),
        a.jitter_file.as_deref(),
    )
    .context("cannot open an output file")?;
    if a.precompute {
        reporter.hold_packets();
    }
    if a.trip_times {
        reporter.show_trip_times();
    }
    let result = netrig::udp::client::run(&cfg, interrupt_flag(), &mut reporter);
    reporter.finish();
    if let Some(e) = embedded {
        e.finish();
    }
    let rep = match result {
        Ok(r) => r,
        Err(e) => return Ok(client_error_exit(e)),
    };
    let mut rep = rep;
    if let Some(p) = &cfg.spec.profile {
        let (bins, mut analysis) = analyse(p, &rep.intervals, a.bin);
        if let Some(s) = &rep.sender {
            netrig::udp::analyze::note_sender(&mut analysis, s);
        }
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
    if a.verbosity >= 1 {
        print_udp_summary(&cfg, &rep);
        if let (Some(b), Some(an)) = (&rep.bins, &rep.analysis) {
            print_analysis(b, an);
        }
    }
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
    Ok(finish(
        code,
        a.json.as_deref(),
        |p| write_udp_json(p, &cfg, &rep),
        output_errors,
    ))
}

/// The exit code of a finished run: data errors win over network errors,
/// which win over an interrupt.
fn run_code(data_error: bool, network_error: bool, interrupted: bool) -> u8 {
    if data_error {
        exit::DATA_ERROR
    } else if network_error {
        exit::NETWORK_ERROR
    } else if interrupted {
        exit::INTERRUPTED
    } else {
        0
    }
}

/// Writes the JSON report if asked and folds output errors into the exit code.
fn finish(
    mut code: u8,
    json: Option<&std::path::Path>,
    write: impl FnOnce(&std::path::Path) -> std::io::Result<()>,
    output_errors: Vec<std::io::Error>,
) -> ExitCode {
    if let Some(p) = json
        && let Err(e) = write(p)
    {
        eprintln!("netrig: cannot write {}: {e}", p.display());
        code = code.max(exit::FATAL);
    }
    for e in output_errors {
        eprintln!("netrig: output error: {e}");
        code = code.max(exit::FATAL);
    }
    ExitCode::from(code)
}

/// Reports a client error and picks its exit code.
fn client_error_exit(e: ClientError) -> ExitCode {
    eprintln!("netrig: {e}");
    ExitCode::from(match e {
        ClientError::Refused { .. } => exit::REFUSED,
        ClientError::Connect { .. }
        | ClientError::Control { .. }
        | ClientError::NotNetrig { .. } => exit::NETWORK_ERROR,
        ClientError::Config(_) => 2,
    })
}

/// The flag SIGINT and SIGTERM set: the run stops gracefully and writes
/// everything it measured. GNU `timeout` and impatient users send a second
/// signal within a second, so only a third one exits at once (row files are
/// flushed row by row and stay parseable; the JSON is then not written).
fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&flag);
    let signals = std::sync::atomic::AtomicU32::new(0);
    let r = ctrlc::set_handler(move || {
        f.store(true, SeqCst);
        match signals.fetch_add(1, SeqCst) {
            0 => {}
            1 => eprintln!("netrig: stopping and writing results; a third signal exits at once"),
            _ => std::process::exit(exit::INTERRUPTED as i32),
        }
    });
    if let Err(e) = r {
        eprintln!("warning: cannot install the Ctrl-C handler: {e}");
    }
    flag
}

fn serve(a: ServeArgs) -> Result<ExitCode> {
    let server = Server::bind(ServerConfig {
        key: key(),
        listen: a.listen,
        port: a.port,
        exit_after: a.exit_after,
        handshake_timeout: a.handshake_timeout,
        idle_timeout: a.idle_timeout,
        verbosity: a.verbosity,
        limits: Limits {
            max_rate_bps: a.max_rate,
            max_duration: a.max_duration,
            max_bytes: a.max_bytes,
            max_tests: a.max_tests,
            max_conns_per_client: a.max_conns_per_client,
        },
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
            key: key(),
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
    if let Err(c) = check_outputs([
        ("--json", a.json.as_deref()),
        ("--status-file", a.status_file.as_deref()),
        ("--connection-file", a.connection_file.as_deref()),
    ]) {
        return Ok(c);
    }
    let mut targets = a.targets;
    targets.extend(a.more_targets);
    let mut cfg = TcpClientConfig {
        key: key(),
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
        burst: a
            .burst_size
            .zip(a.burst_period)
            .map(|(size, p)| netrig::proto::BurstSpec {
                size,
                period_ms: p.as_millis().max(1) as u64,
            }),
    };
    if let Err(e) = cfg.validate() {
        eprintln!("netrig: {e}");
        return Ok(ExitCode::from(2));
    }
    let embedded = if targets.is_empty() {
        let e = Embedded::start()?;
        if cfg.iterations.is_none() && cfg.time_limit.is_none() {
            cfg.iterations = Some(1);
        }
        if a.verbosity >= 1 {
            netrig::out!(
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
    reporter.trip_times = a.trip_times;
    let flag = interrupt_flag();
    let result = client::run(cfg.clone(), flag, &mut reporter);
    if let Some(e) = embedded {
        e.finish();
    }
    let rep = match result {
        Ok(r) => r,
        Err(e) => return Ok(client_error_exit(e)),
    };
    if a.verbosity >= 1 {
        print_summary(&rep);
    }
    let network = rep.totals.net_errors > 0 || !rep.lost_servers.is_empty();
    let mut code = run_code(rep.totals.data_errors > 0, network, rep.interrupted);
    if !(rep.refusals.is_empty() && rep.server_errors.is_empty()) && code != exit::DATA_ERROR {
        for (why, n) in &rep.refusals {
            eprintln!("netrig: server refused {n} connection(s): {why}");
        }
        for (addr, why) in &rep.server_errors {
            eprintln!("netrig: server {addr} stopped the test: {why}");
        }
        code = exit::REFUSED;
    }
    Ok(finish(
        code,
        a.json.as_deref(),
        |p| write_json(p, &cfg, &rep),
        reporter.take_errors(),
    ))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match netrig::auth::Key::from_file_or_env(cli.key.as_deref()) {
        Ok(k) => {
            let _ = KEY.set(k);
        }
        Err(e) => {
            eprintln!("netrig: {e}");
            return ExitCode::from(2);
        }
    }
    let r = match cli.cmd {
        Cmd::Serve(a) => serve(a),
        Cmd::Tcp(a) => tcp(a),
        Cmd::Udp(a) => udp(a),
        Cmd::Rr(a) => rr(a),
        Cmd::Ping(a) => ping(a),
        Cmd::Crr(a) => crr(a),
        Cmd::Sweep(a) => sweep(a),
        Cmd::Analyze(a) => analyze_file(a),
        Cmd::Relay(a) => relay_cmd::run(a),
    };
    r.unwrap_or_else(|e| {
        eprintln!("netrig: {e:#}");
        ExitCode::from(exit::FATAL)
    })
}
