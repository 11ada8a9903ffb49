//! The flag groups the commands share (verbosity, console, target, JSON
//! outputs, key, sources, start time), each a clap `Args` struct that a
//! command flattens into its own, and the rewrite of earlier releases'
//! spellings. The value parsers they use are in [`super::values`].

use anyhow::Result;
use clap::{ArgAction, Args};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::values::{Addrs, addrs, client_target, duration, positive_duration, target_arg};
use super::{Exit, IPERF3_OUT, usage};

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

    /// `--html`, if given.
    pub fn html_path(&self) -> Option<&Path> {
        self.html.as_deref()
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
    pub fn load(&self) -> Result<Option<netrig::protocol::auth::Key>, ExitCode> {
        netrig::keyfile::from_file_or_env(self.key.as_deref()).map_err(|e| {
            eprintln!("netrig: {e}");
            ExitCode::from(Exit::Usage)
        })
    }
}

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
