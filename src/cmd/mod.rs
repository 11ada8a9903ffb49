//! The `netrig` command line: one module per subcommand (flags to a library
//! configuration, a run, a report and an exit code), and what they share:
//! the flags every test spells the same way, output-path checks, signals,
//! the embedded server and exit codes.
//!
//! Flags follow iperf3 where the concept is the same (`-t` time, `-i`
//! interval, `-n` bytes or count, `-P` parallel connections, `-l` length,
//! `-b` bit rate, `-R` reverse, `-J` JSON, `-p` port, `-B` bind), with
//! ctsTraffic's long names as aliases. Spellings of earlier releases stay as
//! hidden aliases for one release.

use anyhow::{Context, Result};
use clap::{ArgAction, Args};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use netrig::names::Named;
use netrig::server::{Server, ServerConfig};
use netrig::tcp::client::ClientError;
use netrig::units;

pub mod analyze;
pub mod crr;
pub mod docs;
pub mod habits;
pub mod iperf3c;
pub mod load;
pub mod merge;
pub mod mesh;
pub mod ping;
pub mod progress;
pub mod relay;
pub mod report;
pub mod rr;
pub mod serve;
pub mod sock;
pub mod sweep;
pub mod tcp;
pub mod udp;
pub mod udp_streams;
pub mod version;

/// Exit codes, documented in the README. Declared in increasing value, so
/// `max` keeps the more serious of two outcomes (a data error over a network
/// error over success).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Exit {
    Ok = 0,
    Fatal = 1,
    Usage = 2,
    NetworkError = 3,
    DataError = 4,
    Refused = 5,
    Unsupported = 6,
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// `-v`/`-vv` (more), `-q` (quiet), or a level with `--verbosity N`.
#[derive(Args, Clone, Copy)]
pub struct Verbosity {
    /// More output: -v also failed connections or every bin, -vv everything.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count, conflicts_with = "level")]
    more: u8,
    /// Errors and warnings only.
    #[arg(short = 'q', long, conflicts_with_all = ["more", "level"])]
    quiet: bool,
    /// Output level 0–3 (0 = -q, 1 = default, 2 = -v, 3 = -vv).
    #[arg(long = "verbosity", value_name = "N", value_parser = clap::value_parser!(u8).range(0..=3))]
    level: Option<u8>,
}

impl Verbosity {
    /// The level: 0 quiet, 1 default, 2 and 3 more.
    pub fn level(self) -> u8 {
        match (self.level, self.quiet) {
            (Some(l), _) => l,
            (None, true) => 0,
            (None, false) => (1 + self.more).min(3),
        }
    }
}

/// iperf3's console decorations: `--title`, `--timestamps`, `--logfile`.
#[derive(Args, Clone, Default)]
pub struct ConsoleArgs {
    /// Put this before every console line, and in the JSON (iperf3 --title).
    #[arg(long, value_name = "STR")]
    title: Option<String>,
    /// Put the wall-clock time before every console line, in this strftime
    /// format (iperf3 --timestamps; default "%c ").
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, default_missing_value = "%c ", require_equals = true)]
    timestamps: Option<String>,
    /// Send the console to this file, appended, instead of the terminal
    /// (iperf3 --logfile); errors stay on standard error.
    #[arg(long, value_name = "FILE")]
    logfile: Option<PathBuf>,
}

impl ConsoleArgs {
    /// `--logfile`, to check with the other outputs.
    pub fn logfile(&self) -> Option<&Path> {
        self.logfile.as_deref()
    }

    /// Sets the decorations for the rest of the run; an unusable log file
    /// is a usage error, already reported.
    pub fn apply(&self) -> Result<(), ExitCode> {
        let logfile = match &self.logfile {
            None => None,
            Some(p) => match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
            {
                Ok(f) => Some(f),
                Err(e) => return Err(usage(format!("--logfile {}: {e}", p.display()))),
            },
        };
        netrig::console::set(netrig::console::Decor {
            title: self.title.clone(),
            timestamps: self.timestamps.clone(),
            logfile,
        });
        Ok(())
    }
}

/// The server a client tests against, and its port.
#[derive(Args, Clone)]
pub struct Target {
    /// Server (HOST, HOST:PORT, [V6]:PORT); none: embedded loopback server.
    #[arg(value_parser = target_arg)]
    target: Option<String>,
    /// The server, as iperf3 names it (-c HOST): the same as TARGET.
    #[arg(short = 'c', long = "client", value_name = "HOST", value_parser = client_target, conflicts_with = "target")]
    client: Option<String>,
    /// Port if the target names none.
    #[arg(short, long, default_value_t = netrig::net::DEFAULT_PORT)]
    pub port: u16,
}

impl Target {
    /// The server given, as TARGET or `-c HOST`.
    pub fn host(&self) -> Option<String> {
        self.target.clone().or_else(|| self.client.clone())
    }
}

/// `--connect-timeout`, on every client command.
#[derive(Args, Clone, Copy)]
pub struct ConnectTimeout {
    /// Give up on reaching the server after this long: each TCP handshake,
    /// of the control connection and of every data connection (iperf3
    /// --connect-timeout).
    #[arg(long = "connect-timeout", value_name = "D", default_value = "10s", value_parser = positive_duration)]
    pub connect_timeout: Duration,
}

/// `-J` / `--json FILE`.
#[derive(Args, Clone)]
pub struct Json {
    /// Write the JSON report to FILE ("-": standard output; the console then
    /// goes to standard error).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The JSON report on standard output, as iperf3 -J (same as --json -).
    #[arg(short = 'J', conflicts_with = "json")]
    json_stdout: bool,
    /// Also write the run as JSON lines while it happens: a start line, one
    /// per interval (per probe for ping), an end line ("-": standard output;
    /// iperf3 --json-stream).
    #[arg(long = "json-stream", value_name = "FILE")]
    stream: Option<PathBuf>,
    /// Also write the result as a self-contained HTML report with charts
    /// when the run ends (after Ctrl-C too), as `netrig report` does.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

impl Json {
    /// `--json-stream`, if given.
    pub fn stream_path(&self) -> Option<&Path> {
        self.stream.as_deref()
    }

    /// Where the JSON report goes, if anywhere.
    pub fn path(&self) -> Option<PathBuf> {
        self.json.clone().or_else(|| {
            self.json_stdout
                .then(|| PathBuf::from(netrig::output::STDOUT))
        })
    }
}

/// `--json-iperf3 FILE` on tcp and udp.
#[derive(Args, Clone, Default)]
pub struct Iperf3Out {
    /// Also write the result as iperf3-compatible JSON, the subset of
    /// iperf3 -J that tools read (start, intervals, end.sum_sent,
    /// end.sum_received, end.sum for UDP; "-": standard output).
    #[arg(long = "json-iperf3", value_name = "FILE")]
    pub path: Option<PathBuf>,
}

impl Iperf3Out {
    /// Asks for the iperf3 document when the run's envelope is written
    /// (after the paths are checked).
    pub fn set(&self) {
        if let Some(p) = &self.path {
            let _ = IPERF3_OUT.set(p.clone());
        }
    }
}

/// `--json-iperf3`: where the iperf3-compatible document goes.
static IPERF3_OUT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// What every client command sets up before its test, every output path
/// checked first: where the JSON goes, how much to print, and the key.
pub struct Setup {
    pub json: Option<PathBuf>,
    /// `--json-stream`, checked.
    pub stream: Option<PathBuf>,
    pub verbosity: u8,
    pub key: Option<netrig::auth::Key>,
}

impl Setup {
    /// Checks `--json` and the command's other `outputs`, and loads the key;
    /// a problem is a usage error, already reported.
    pub fn new<'a>(
        json: &Json,
        verbosity: Verbosity,
        key: &KeyArg,
        console: &ConsoleArgs,
        outputs: impl IntoIterator<Item = (&'static str, Option<&'a Path>)>,
    ) -> Result<Setup, ExitCode> {
        let path = json.path();
        let others: Vec<(&'static str, Option<PathBuf>)> = outputs
            .into_iter()
            .map(|(f, p)| (f, p.map(Path::to_path_buf)))
            .collect();
        check_outputs(
            std::iter::once(("--json", path.as_deref()))
                .chain(std::iter::once(("--logfile", console.logfile())))
                .chain(std::iter::once(("--json-stream", json.stream.as_deref())))
                .chain(std::iter::once(("--html", json.html.as_deref())))
                .chain(others.iter().map(|(f, p)| (*f, p.as_deref()))),
        )?;
        console.apply()?;
        if let Some(h) = &json.html {
            let _ = HTML_OUT.set(h.clone());
        }
        Ok(Setup {
            key: key.load()?,
            verbosity: verbosity.level(),
            json: path,
            stream: json.stream.clone(),
        })
    }
}

/// `--key FILE` (or NETRIG_KEY) on the commands that talk to a server.
#[derive(Args, Clone)]
pub struct KeyArg {
    /// Pre-shared key file: a server requires clients to prove they know it;
    /// a client proves it. The key itself may be given in NETRIG_KEY instead.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

impl KeyArg {
    /// Loads the key from the file or NETRIG_KEY (a bad key is a usage error).
    pub fn load(&self) -> Result<Option<netrig::auth::Key>, ExitCode> {
        netrig::keyfile::from_file_or_env(self.key.as_deref()).map_err(|e| {
            eprintln!("netrig: {e}");
            ExitCode::from(Exit::Usage)
        })
    }
}

/// Most addresses one `-B A-B` range may name.
pub const MAX_BIND_RANGE: u128 = 1024;

/// A `-B` value: one address, or an inclusive range `A-B` of one family.
#[derive(Clone, Debug)]
pub struct Addrs(pub Vec<IpAddr>);

/// `-B` for the commands built on the TCP engine (tcp, crr).
#[derive(Args, Clone)]
pub struct Sources {
    /// Local addresses to connect from: repeatable, comma-separated, or a
    /// range A-B (loopback has about 28,000 ports per source address). Each
    /// address of the target's IP family opens a session of its own, and
    /// connections take them in turn.
    #[arg(short = 'B', long, value_name = "IP[,IP|A-B...]", value_delimiter = ',', value_parser = addrs)]
    bind: Vec<Addrs>,
}

impl Sources {
    /// Every address given, in order, each once.
    pub fn addrs(&self) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = Vec::new();
        for ip in self.bind.iter().flat_map(|a| a.0.iter()) {
            if !out.contains(ip) {
                out.push(*ip);
            }
        }
        out
    }
}

// Value parsers for clap: each error becomes clap's one-line usage error.
pub fn addrs(s: &str) -> Result<Addrs> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let ip = |t: &str| -> Result<IpAddr> {
        t.trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("'{}' is not an IP address", t.trim()))
    };
    let Some((a, b)) = s.split_once('-') else {
        return Ok(Addrs(vec![ip(s)?]));
    };
    let (lo, hi, v4) = match (ip(a)?, ip(b)?) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            (u128::from(u32::from(a)), u128::from(u32::from(b)), true)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), false),
        _ => anyhow::bail!("range {s} mixes IPv4 and IPv6"),
    };
    if hi < lo {
        anyhow::bail!("range {s} ends before it starts");
    }
    if hi - lo >= MAX_BIND_RANGE {
        anyhow::bail!(
            "range {s} names {} addresses; at most {MAX_BIND_RANGE}",
            hi - lo + 1
        );
    }
    Ok(Addrs(
        (lo..=hi)
            .map(|n| match v4 {
                true => IpAddr::V4(Ipv4Addr::from(n as u32)),
                false => IpAddr::V6(Ipv6Addr::from(n)),
            })
            .collect(),
    ))
}

pub fn target_arg(s: &str) -> Result<String> {
    netrig::net::check_target(s)?;
    Ok(s.to_string())
}
/// `-c HOST`: iperf3's client flag names the server. A bare number is
/// what `-c` meant in earlier releases (connections), so say where that went.
pub fn client_target(s: &str) -> Result<String> {
    if s.trim().parse::<u32>().is_ok() {
        anyhow::bail!(
            "-c names the server, as iperf3's -c HOST; for {s} connections at once give -P {s}"
        );
    }
    target_arg(s)
}
/// The shortest status interval. iperf3 refuses `-i` below 0.1 s
/// (MIN_INTERVAL in its src/iperf.h; "invalid report interval"): shorter
/// intervals print more lines than anyone reads and cost the run itself.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// `-i` of the status lines: at least [`MIN_INTERVAL`].
pub fn interval(s: &str) -> Result<Duration> {
    match duration(s)? {
        d if d < MIN_INTERVAL => {
            anyhow::bail!("at least 100ms (a status line per interval; iperf3 has the same floor)")
        }
        d => Ok(d),
    }
}
/// A count (`-n`) of at least one.
pub fn count(s: &str) -> Result<u64> {
    match s.trim().parse::<u64>() {
        Ok(0) => anyhow::bail!("must be at least 1"),
        Ok(n) => Ok(n),
        Err(_) => anyhow::bail!("'{s}' is not a whole number"),
    }
}
pub fn size(s: &str) -> Result<u64> {
    Ok(units::parse_size(s)?)
}
pub fn duration(s: &str) -> Result<Duration> {
    Ok(units::parse_duration(s)?)
}
pub fn positive_duration(s: &str) -> Result<Duration> {
    match duration(s)? {
        d if d.is_zero() => anyhow::bail!("must be greater than zero"),
        d => Ok(d),
    }
}
/// iperf2's `--txstart-time`: when the traffic starts, on the wall clock.
#[derive(Args, Clone, Copy, Default)]
pub struct StartAt {
    /// Start the traffic when the wall clock reads TIME: Unix seconds with
    /// a fraction (iperf2 --txstart-time), or +D from now (+5s). The setup
    /// (connect, handshake, clock exchange) happens first, so clients on
    /// several hosts with synchronised clocks begin together.
    #[arg(long = "txstart-time", value_name = "TIME", value_parser = txstart)]
    pub at: Option<f64>,
}

/// The furthest ahead `--txstart-time` may be: the wait counts against the
/// server's --max-duration (an hour by default).
const TXSTART_AHEAD_MAX: f64 = 3600.0;

fn txstart(s: &str) -> Result<f64> {
    let now = netrig::net::realtime_ns() as f64 / 1e9;
    let at = match s.strip_prefix('+') {
        Some(d) => now + duration(d)?.as_secs_f64(),
        None => s
            .parse::<f64>()
            .map_err(|_| anyhow::anyhow!("give Unix seconds (1712345678.25) or +D (+5s)"))?,
    };
    if !at.is_finite() || at <= 0.0 {
        anyhow::bail!("give Unix seconds (1712345678.25) or +D (+5s)");
    }
    if at > now + TXSTART_AHEAD_MAX {
        anyhow::bail!(
            "{:.0} s ahead; at most {TXSTART_AHEAD_MAX:.0} s (the wait counts against the server's --max-duration)",
            at - now
        );
    }
    Ok(at)
}

/// A duration that may be negative (`-500us`), in ns.
pub fn signed_duration(s: &str) -> Result<i64> {
    let (neg, body) = s.strip_prefix('-').map_or((false, s), |b| (true, b));
    let ns = duration(body)?.as_nanos() as i64;
    Ok(if neg { -ns } else { ns })
}
pub fn rate(s: &str) -> Result<u64> {
    match units::parse_rate(s)? {
        0 => anyhow::bail!("must be greater than zero"),
        r => Ok(r),
    }
}
/// A value, or a range of them `[lo,hi]` / `lo..hi` (ctsTraffic's
/// `-transfer:[lo,hi]`, `-RateLimit:[lo,hi]`): the low end and, for a
/// range, the high one.
pub fn range_of(s: &str, one: fn(&str) -> Result<u64>) -> Result<(u64, Option<u64>)> {
    let t = s.trim();
    let range = t
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|r| r.split_once(','))
        .or_else(|| t.split_once(".."));
    match range {
        None => Ok((one(t)?, None)),
        Some((a, b)) => {
            let (lo, hi) = (one(a.trim())?, one(b.trim())?);
            if lo == 0 || lo > hi {
                anyhow::bail!("[{lo},{hi}]: give 0 < lo <= hi");
            }
            Ok((lo, Some(hi)))
        }
    }
}

pub fn rate_or_zero(s: &str) -> Result<u64> {
    Ok(units::parse_rate(s)?)
}

/// Checks every output path before a test starts; a bad one is a usage
/// error that names the flag (exit 2).
pub fn check_outputs<'a>(
    outputs: impl IntoIterator<Item = (&'static str, Option<&'a Path>)>,
) -> Result<(), ExitCode> {
    let outputs: Vec<_> = outputs.into_iter().collect();
    netrig::output::check_all(outputs.iter().map(|(_, p)| *p)).map_err(|e| {
        let flag = outputs
            .iter()
            .find(|(_, p)| *p == Some(e.path()))
            .map_or("output", |(f, _)| f);
        eprintln!("netrig: {flag} {e}");
        ExitCode::from(Exit::Usage)
    })
}

/// A usage error found after parsing: one line, exit 2.
pub fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("netrig: {msg}");
    ExitCode::from(Exit::Usage)
}

/// The exit code of a finished run: data errors win over network errors,
/// which win over an interrupt.
pub fn run_code(data_error: bool, network_error: bool, interrupted: bool) -> Exit {
    if data_error {
        Exit::DataError
    } else if network_error {
        Exit::NetworkError
    } else if interrupted {
        Exit::Interrupted
    } else {
        Exit::Ok
    }
}

/// `--html`: where the report goes, set once the paths are checked.
static HTML_OUT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Writes the result envelope where it is wanted, as HTML too with
/// `--html` and as iperf3's JSON with `--json-iperf3` (both made from the
/// envelope itself).
fn write_outputs(
    json: Option<&Path>,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Result<(), (PathBuf, std::io::Error)> {
    let (html, iperf3) = (HTML_OUT.get(), IPERF3_OUT.get());
    if html.is_none() && iperf3.is_none() {
        return match json {
            Some(p) => write(p).map_err(|e| (p.to_path_buf(), e)),
            None => Ok(()),
        };
    }
    // The envelope is written once, to the JSON file or a temporary one,
    // and read back for the report.
    let to_stdout = json.is_some_and(netrig::output::is_stdout);
    let tmp = std::env::temp_dir().join(format!("netrig-{}-report.json", std::process::id()));
    let file = json.filter(|_| !to_stdout).unwrap_or(&tmp).to_path_buf();
    let result = (|| {
        write(&file).map_err(|e| (file.clone(), e))?;
        let text = std::fs::read(&file).map_err(|e| (file.clone(), e))?;
        if to_stdout {
            use std::io::Write as _;
            std::io::stdout()
                .write_all(&text)
                .map_err(|e| (PathBuf::from("-"), e))?;
        }
        let doc: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| (file.clone(), std::io::Error::other(e)))?;
        if let Some(ip) = iperf3 {
            let out = netrig::iperf3::json::from_envelope(&doc)
                .map_err(|e| (ip.clone(), std::io::Error::other(e)))?;
            netrig::output::replace(ip, |w| {
                serde_json::to_writer_pretty(&mut *w, &out)?;
                w.write_all(b"\n")
            })
            .map_err(|e| (ip.clone(), e))?;
        }
        if let Some(html) = html {
            let page = netrig::html::render(&[(String::from("this run"), doc)]);
            netrig::output::replace(html, |w| w.write_all(page.as_bytes()))
                .map_err(|e| (html.clone(), e))?;
        }
        Ok(())
    })();
    if file == tmp {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes the JSON report if asked and folds output errors into the exit code.
pub fn finish(
    mut code: Exit,
    json: Option<&Path>,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
    output_errors: Vec<std::io::Error>,
) -> ExitCode {
    if let Err((p, e)) = write_outputs(json, write) {
        eprintln!("netrig: cannot write {}: {e}", p.display());
        code = code.max(Exit::Fatal);
    }
    for e in output_errors {
        eprintln!("netrig: output error: {e}");
        code = code.max(Exit::Fatal);
    }
    ExitCode::from(code)
}

/// Reports a client error that stopped a run before it measured anything,
/// writes a JSON report saying so (for monitoring), and picks the exit code.
/// The exit code for a client error.
pub fn client_error_code(e: &ClientError) -> Exit {
    match e {
        ClientError::Refused { .. } | ClientError::Unproven { .. } => Exit::Refused,
        ClientError::Connect { .. }
        | ClientError::Control { .. }
        | ClientError::NotNetrig { .. } => Exit::NetworkError,
        ClientError::Config(_) | ClientError::SockOpt(_) => Exit::Usage,
        ClientError::Unsupported(_) => Exit::Unsupported,
    }
}

pub fn client_error_exit(
    e: ClientError,
    test: &str,
    json: Option<&Path>,
    config: &impl serde::Serialize,
) -> ExitCode {
    eprintln!("netrig: {e}");
    let code = client_error_code(&e);
    let message = e.to_string();
    let error_code = e.code();
    finish(
        code,
        json,
        |p| {
            netrig::report::write_envelope_coded(
                p,
                test,
                config,
                None::<&()>,
                Some(&message),
                error_code,
            )
        },
        Vec::new(),
    )
}

/// The flag SIGINT and SIGTERM set: the run stops gracefully and writes
/// everything it measured. GNU `timeout` and impatient users send a second
/// signal within a second, so only a third one cuts the waiting short: the
/// run skips its remaining waits for the server and writes its files, and
/// the process exits after 2 s whatever happens (row files are flushed row
/// by row, so they hold what was measured even then).
pub fn interrupt_flag() -> Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&flag);
        let signals = std::sync::atomic::AtomicU32::new(0);
        let r = ctrlc::set_handler(move || {
            f.store(true, SeqCst);
            match signals.fetch_add(1, SeqCst) {
                0 => {}
                1 => {
                    eprintln!("netrig: stopping and writing results; a third signal exits at once")
                }
                _ => {
                    // Skip every remaining wait; exit anyway if the results
                    // are not written within a moment.
                    netrig::control::hurry();
                    std::thread::spawn(|| {
                        std::thread::sleep(Duration::from_secs(2));
                        std::process::exit(i32::from(Exit::Interrupted as u8));
                    });
                }
            }
        });
        if let Err(e) = r {
            eprintln!("netrig: warning: cannot install the Ctrl-C handler: {e}");
        }
        flag
    })
    .clone()
}

/// An in-process server on loopback for runs without a target.
pub struct Embedded {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<std::io::Result<()>>,
}

impl Embedded {
    pub fn start(key: Option<netrig::auth::Key>) -> Result<Embedded> {
        let server = Server::bind(ServerConfig {
            key,
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

    pub fn finish(self) {
        self.stop.store(true, SeqCst);
        let _ = self.handle.join();
    }
}

/// Starts an embedded server when no target is given; returns the target to use.
pub fn target_or_embedded(
    target: &Option<String>,
    key: &Option<netrig::auth::Key>,
    verbosity: u8,
) -> Result<(String, Option<Embedded>)> {
    match target {
        Some(t) => Ok((t.clone(), None)),
        None => {
            let e = Embedded::start(key.clone())?;
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

/// Rewrites spellings of earlier releases that clap cannot express as
/// aliases: `-v N` (a level) is now `--verbosity N`, since `-v` counts;
/// tcp's and crr's `-c N` (a number of connections) is now `-P N`, since
/// `-c` names the server as in iperf3 (no server is named by a bare number).
pub fn legacy_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = Vec::new();
    let mut sub: Option<String> = None;
    let mut it = args.into_iter().peekable();
    while let Some(a) = it.next() {
        let next = it.peek().and_then(|n| n.to_str());
        let level = next.is_some_and(|n| matches!(n, "0" | "1" | "2" | "3"));
        let number = next.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let connections = matches!(sub.as_deref(), Some("tcp" | "crr"));
        if (a == "-v" || a == "--verbosity") && level {
            out.push("--verbosity".into());
        } else if a == "-c" && number && connections {
            out.push("-P".into());
        } else {
            if sub.is_none() && !out.is_empty() && a.to_str().is_some_and(|s| !s.starts_with('-')) {
                sub = a.to_str().map(String::from);
            }
            out.push(a);
        }
    }
    out
}

/// The JSON documents in `files`, in order, or the usage error (exit 2)
/// naming the first that cannot be read or is not JSON (`report`, `merge`).
/// A flag's choices from a wire enum's table of names ([`Named`]): listed in
/// `--help`, and anything else refused by clap with the list.
pub fn named<T: Named + Send + Sync + Clone>() -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        T::NAMES
            .iter()
            .map(|(_, n, h)| PossibleValue::new(*n).help(*h)),
    )
    .try_map(|s| T::from_typed(&s).ok_or("not one of the choices"))
}

pub(crate) fn read_json_files(files: &[PathBuf]) -> Result<Vec<serde_json::Value>, ExitCode> {
    let mut docs = Vec::with_capacity(files.len());
    for f in files {
        let text =
            std::fs::read(f).map_err(|e| usage(format!("cannot read {}: {e}", f.display())))?;
        let doc = serde_json::from_slice(&text)
            .map_err(|e| usage(format!("{} is not JSON: {e}", f.display())))?;
        docs.push(doc);
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_verbosity_numbers_become_levels() {
        let v = |a: &[&str]| {
            legacy_args(a.iter().map(std::ffi::OsString::from))
                .into_iter()
                .map(|s| s.into_string().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(v(&["tcp", "-v", "0"]), ["tcp", "--verbosity", "0"]);
        assert_eq!(v(&["tcp", "-v", "host"]), ["tcp", "-v", "host"]);
        assert_eq!(v(&["tcp", "-vv"]), ["tcp", "-vv"]);
        assert_eq!(v(&["tcp", "-v"]), ["tcp", "-v"]);
    }

    #[test]
    fn legacy_connection_counts_become_parallel() {
        let v = |a: &[&str]| {
            legacy_args(a.iter().map(std::ffi::OsString::from))
                .into_iter()
                .map(|s| s.into_string().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            v(&["netrig", "tcp", "-c", "4"]),
            ["netrig", "tcp", "-P", "4"]
        );
        assert_eq!(
            v(&["netrig", "crr", "h", "-c", "2"]),
            ["netrig", "crr", "h", "-P", "2"]
        );
        assert_eq!(
            v(&["netrig", "tcp", "-c", "h4"]),
            ["netrig", "tcp", "-c", "h4"]
        );
        assert_eq!(
            v(&["netrig", "tcp", "-c", "10.0.0.1"]),
            ["netrig", "tcp", "-c", "10.0.0.1"]
        );
        // ping's -c is its count (ping(8)); udp's -c is the server.
        assert_eq!(
            v(&["netrig", "ping", "-c", "3"]),
            ["netrig", "ping", "-c", "3"]
        );
        assert_eq!(
            v(&["netrig", "udp", "-c", "3"]),
            ["netrig", "udp", "-c", "3"]
        );
    }
}
