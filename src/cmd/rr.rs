//! `netrig rr`: request/response round trips (ACE's perf tests) over TCP,
//! UDP or SCTP, one size or a spectrum of sizes.

use anyhow::Result;
use clap::Args;
use serde::Serialize;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::{
    Exit, Json, KeyArg, Setup, Target, Verbosity, client_error_code, client_error_exit, duration,
    finish, interrupt_flag, positive_duration, size, target_or_embedded, usage,
};
use netrig::protocol::rr::interval::{Intervals, RrInterval};
use netrig::rr::client::{RrConfig, RrReport, Transport};
use std::time::Instant;

#[derive(Args)]
pub struct HistArgs {
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
pub struct RrArgs {
    #[command(flatten)]
    pub to: Target,
    /// Transport.
    #[arg(long, default_value = "tcp", value_parser = super::named::<Transport>())]
    proto: Transport,
    /// Request size in bytes.
    #[arg(short = 'l', long = "length", alias = "size", short_alias = 's', default_value = "64", value_parser = size)]
    length: u64,
    /// Reply size in bytes (ACE replies with 2).
    #[arg(long, default_value = "2", value_parser = size)]
    reply: u64,
    /// Measured round trips (ACE -i); default 100000, or, with --time,
    /// as many as fit in it.
    #[arg(
        short = 'n',
        long = "count",
        visible_alias = "iterations",
        value_parser = super::count
    )]
    count: Option<u64>,
    /// Send requests for this long, warm-up included (sockperf -t); with
    /// -n too, whichever ends first.
    #[arg(short = 't', long = "time", visible_alias = "duration", value_name = "D", value_parser = positive_duration)]
    time: Option<Duration>,
    /// Print a status line every interval: round trips, rate and latency
    /// percentiles of the interval (at least 100ms, as iperf3's -i).
    #[arg(short = 'i', long, value_name = "D", value_parser = super::interval, conflicts_with = "spectrum")]
    interval: Option<Duration>,
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
    #[arg(
        short = 'B',
        long,
        value_name = "ADDR[,ADDR...]",
        value_delimiter = ','
    )]
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
    hist: HistArgs,
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

/// What `rr` and `ping` put under `result` in the JSON envelope: one run per
/// request size (one, unless `--spectrum`).
#[derive(Serialize)]
pub struct RrResult<'a> {
    /// The runs, in order.
    pub runs: &'a [RrReport],
    /// ping: every probe, in order (at most [`MAX_PROBES`]), for plotting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probes: Option<&'a ProbeLog>,
    /// The wall clock when the first measured request left, Unix seconds:
    /// the intervals' time zero (as tcp's and udp's); none if no round
    /// trip ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_unix: Option<f64>,
    /// From then to the end of the last round trip, s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_secs: Option<f64>,
    /// The round trips by interval (rr's `-i`, else 1 s; ping's 1 s), on
    /// the clock of `start_unix`, for `netrig merge`'s time series.
    pub intervals: &'a [RrInterval],
}

/// Measured round trips without -n or -t.
const DEFAULT_COUNT: u64 = 100_000;

/// The most probes a ping keeps for its JSON: 100 a second for 15 minutes.
pub const MAX_PROBES: usize = 90_000;

/// A ping's probes as they completed: (seq, round trip ms or none if lost).
#[derive(Serialize, Default)]
pub struct ProbeLog {
    /// (sequence number, round trip ms; none: lost), in completion order.
    pub rows: Vec<(u64, Option<f64>)>,
    /// Probes past [`MAX_PROBES`], not kept (the run's summary counts them).
    pub left_out: u64,
}

impl ProbeLog {
    /// Keeps a completed probe, or counts it left out past the cap.
    pub fn push(&mut self, p: &netrig::rr::client::Probe) {
        if !p.is_fate() {
            return;
        }
        if self.rows.len() < MAX_PROBES {
            self.rows.push((p.seq, p.rtt_us.map(|u| u / 1e3)));
        } else {
            self.left_out += 1;
        }
    }
}

/// A row per interval, kept for the JSON result; with `rr -i`, also on the
/// console (tcp's and udp's way) and in the JSON stream, as round trips end.
pub(super) struct IntervalLines {
    rows: Intervals,
    /// When the first measured request left: the intervals count from it.
    t0: Option<Instant>,
    /// That moment on the wall clock, Unix seconds.
    t0_unix: Option<f64>,
    /// Every row so far.
    kept: Vec<RrInterval>,
    /// When the last round trip ended: the last interval ends there.
    last: Option<Instant>,
    console: Option<netrig::report::RowWriter>,
    /// The header row is out.
    headed: bool,
}

impl IntervalLines {
    pub(super) fn new(every: Duration, verbosity: u8) -> IntervalLines {
        IntervalLines {
            rows: Intervals::new(every.as_secs_f64()),
            t0: None,
            t0_unix: None,
            kept: Vec::new(),
            last: None,
            headed: false,
            console: (verbosity >= 1).then(|| {
                netrig::report::RowWriter::console(netrig::output::console(), &RrInterval::WIDTHS)
            }),
        }
    }

    /// A round trip ended at `now` (its reply's arrival, or when it was
    /// found lost): the intervals that closed before it.
    pub(super) fn probe(&mut self, p: &netrig::rr::client::Probe, now: Instant) -> Vec<RrInterval> {
        if p.warmup || p.late {
            return Vec::new();
        }
        let rtt_ns = p.rtt_us.map(|us| (us * 1e3) as u64);
        let t0 = *self.t0.get_or_insert_with(|| {
            let rtt = Duration::from_nanos(rtt_ns.unwrap_or(0));
            let at = now.checked_sub(rtt).unwrap_or(now);
            let ago = now.saturating_duration_since(at).as_secs_f64();
            self.t0_unix = Some(netrig::net::realtime_ns() as f64 / 1e9 - ago);
            at
        });
        self.last = Some(now);
        let rows = self
            .rows
            .record(now.saturating_duration_since(t0).as_secs_f64(), rtt_ns);
        self.print(&rows);
        self.kept.extend_from_slice(&rows);
        rows
    }

    /// The last, partial interval, when the run has ended.
    pub(super) fn finish(&mut self) -> Option<RrInterval> {
        let at = self.last?.saturating_duration_since(self.t0?).as_secs_f64();
        let row = self.rows.finish(at)?;
        self.print(std::slice::from_ref(&row));
        self.kept.push(row);
        Some(row)
    }

    /// The intervals' time zero on the wall clock, Unix seconds.
    pub(super) fn start_unix(&self) -> Option<f64> {
        self.t0_unix
    }

    /// From the time zero to the last round trip's end, s.
    pub(super) fn duration_secs(&self) -> Option<f64> {
        Some(self.last?.saturating_duration_since(self.t0?).as_secs_f64())
    }

    /// Every row so far.
    pub(super) fn rows(&self) -> &[RrInterval] {
        &self.kept
    }

    fn print(&mut self, rows: &[RrInterval]) {
        let Some(c) = self.console.as_mut() else {
            return;
        };
        for r in rows {
            if !std::mem::replace(&mut self.headed, true) {
                let _ = c.row(&RrInterval::HEADERS);
            }
            let _ = c.row(&r.cells());
        }
    }
}

fn parse_spectrum(s: &str) -> Result<(u32, u32)> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| anyhow::anyhow!("expected A..B, e.g. 0..16"))?;
    let exponent = |x: &str| {
        x.trim()
            .parse::<u32>()
            .map_err(|_| anyhow::anyhow!("'{x}' is not a power of two exponent"))
    };
    let (a, b) = (exponent(a)?, exponent(b)?);
    if a > b || b > 24 {
        anyhow::bail!("spectrum {a}..{b}: need A <= B <= 24");
    }
    Ok((a, b))
}

impl RrArgs {
    /// The flags turned into the engine's config, in this one place, and
    /// checked (`RrConfig::validate`), with the sizes of a `--spectrum`; its
    /// target is empty until the embedded server (if none was given) has
    /// started. A config that cannot run is a usage error, already reported.
    fn to_config(
        &self,
        key: Option<netrig::protocol::auth::Key>,
    ) -> Result<(RrConfig, Option<(u32, u32)>), ExitCode> {
        let spectrum = self
            .spectrum
            .as_deref()
            .map(parse_spectrum)
            .transpose()
            .map_err(|e| usage(format!("--spectrum: {e}")))?;
        let max = u64::from(u32::MAX);
        if self.length > max || self.reply > max {
            return Err(usage(format!(
                "--length and --reply must be at most {max} bytes"
            )));
        }
        let cfg = RrConfig {
            bind_dev: self.sock.bind_dev.clone(),
            cport: self.cport,
            start_at: self.start.at,
            sock: self.sock.opts(),
            key,
            target: String::new(),
            port: self.to.port,
            transport: self.proto,
            size: self.length as u32,
            reply: self.reply as u32,
            iterations: match (self.count, self.time) {
                (Some(n), _) => n,
                (None, Some(_)) => netrig::rr::client::UNBOUNDED,
                (None, None) => DEFAULT_COUNT,
            },
            warmup: self.warmup,
            nagle: self.nagle,
            busy_poll: self.busy_poll,
            rx_timestamps: self.rx_timestamps,
            timeout: Some(self.timeout),
            interval: None,
            hist_min_us: self.hist.hist_min.as_secs_f64() * 1e6,
            hist_max_us: self.hist.hist_max.as_secs_f64() * 1e6,
            hist_bins: self.hist.hist_bins as usize,
            outliers: self.hist.outliers,
            synced: false,
            bind: self.bind.clone(),
            duration: self.time,
            connect_timeout: Some(self.connect.connect_timeout),
        };
        cfg.validate().map_err(|e| usage(e.to_string()))?;
        Ok((cfg, spectrum))
    }
}

pub fn run(a: RrArgs) -> Result<ExitCode> {
    let outputs = [
        ("--csv", a.csv.as_deref()),
        ("--hist-file", a.hist_file.as_deref()),
    ];
    let Setup {
        json,
        stream,
        verbosity,
        key,
    } = match Setup::new(&a.json, a.verbosity, &a.key, &a.console, outputs) {
        Ok(s) => s,
        Err(c) => return Ok(c),
    };
    // A usage error first: it is one whatever the kernel supports.
    let (mut base, spectrum) = match a.to_config(key.clone()) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if matches!(a.proto, Transport::Sctp | Transport::SctpSeqpacket)
        && let Err(e) = netrig::sctp::support(a.proto == Transport::SctpSeqpacket)
    {
        eprintln!("netrig: {e}");
        return Ok(ExitCode::from(Exit::Unsupported));
    }
    let (target, embedded) = target_or_embedded(&a.to.host(), &key, verbosity)?;
    base.target = target;
    let sizes: Vec<u32> = match spectrum {
        Some((lo, hi)) => (lo..=hi).map(|k| 1u32 << k).collect(),
        None => vec![base.size],
    };
    let interrupt = interrupt_flag();
    // The bar would only fight the interval lines, and has no end to show
    // for a run that --time ends.
    let bar = a.interval.is_none() && base.iterations != netrig::rr::client::UNBOUNDED;
    let progress = super::progress::Progress::new(
        (base.iterations.saturating_add(base.warmup)).saturating_mul(sizes.len() as u64),
        "round trips",
        if bar { verbosity } else { 0 },
    );
    // Rows are kept for the result at -i, or each second; shown only at -i.
    let every = a.interval.unwrap_or(Duration::from_secs(1));
    let mut lines = IntervalLines::new(every, if a.interval.is_some() { verbosity } else { 0 });
    let stream_rows = a.interval.is_some();
    let mut sink = match netrig::report::StreamSink::open(stream.as_deref(), "rr", &base) {
        Ok(s) => s,
        Err(e) => return Ok(usage(format!("cannot open --json-stream: {e}"))),
    };
    let mut reports = Vec::new();
    let mut code = Exit::Ok;
    let mut output_errors = Vec::new();
    let mut setup_failure = None;
    // Said with the first round trip: a server that cannot be reached gets
    // its one error line alone.
    let mut banner =
        (spectrum.is_none() && verbosity >= 1).then(|| netrig::report::rr_banner(&base));
    if spectrum.is_some() && verbosity >= 1 {
        netrig::out!("{}", netrig::report::SPECTRUM_HEADERS.join(" "));
    }
    for size in sizes {
        if interrupt.load(SeqCst) {
            break;
        }
        let mut cfg = base.clone();
        cfg.size = size;
        let result = netrig::rr::client::run(&cfg, Arc::clone(&interrupt), &mut |p, at| {
            if let Some(b) = banner.take() {
                netrig::out!("{b}");
            }
            progress.inc();
            for row in lines.probe(p, at) {
                if stream_rows {
                    sink.event("interval", &row);
                }
            }
        });
        if let Some(row) = lines.finish()
            && stream_rows
        {
            sink.event("interval", &row);
        }
        if spectrum.is_none() {
            progress.finish();
        }
        match result {
            Ok((rep, stats)) => {
                if spectrum.is_some() {
                    if verbosity >= 1 {
                        netrig::out!("{}", netrig::report::spectrum_cells(&rep).join(" "));
                    }
                } else {
                    if verbosity >= 1 {
                        netrig::report::print_rr(&rep, &stats, verbosity >= 2);
                    }
                    if let Some(p) = &a.hist_file
                        && let Err(e) = netrig::report::write_hist_csv(p, &stats)
                    {
                        output_errors.push(std::io::Error::new(
                            e.kind(),
                            format!("cannot write {}: {e}", p.display()),
                        ));
                    }
                }
                if rep.corrupt > 0 || rep.server_corrupt.is_some_and(|c| c > 0) {
                    code = code.max(Exit::DataError);
                }
                let failed = rep.error.clone();
                sink.event("run", &rep);
                reports.push(rep);
                if let Some(e) = failed {
                    // What was measured before the failure still goes to the files.
                    eprintln!("netrig: {e}");
                    code = code.max(Exit::NetworkError);
                    break;
                }
            }
            Err(e) if reports.is_empty() => {
                if let Some(e) = embedded {
                    e.finish();
                }
                sink.end::<()>(None, Some(&e.to_string()));
                return Ok(client_error_exit(e, "rr", json.as_deref(), &base));
            }
            Err(e) => {
                // A later size of a spectrum failed to start: the sizes
                // already measured still go to the files.
                eprintln!("netrig: {e}");
                code = code.max(client_error_code(&e));
                setup_failure = Some(e.to_string());
                break;
            }
        }
    }
    progress.finish();
    if let Some(e) = embedded {
        e.finish();
    }
    if let Some(p) = &a.csv
        && let Err(e) = netrig::report::write_spectrum_csv(p, &reports)
    {
        output_errors.push(std::io::Error::new(
            e.kind(),
            format!("cannot write {}: {e}", p.display()),
        ));
    }
    if interrupt.load(SeqCst) && code == Exit::Ok {
        code = Exit::Interrupted;
    }
    let failure = reports
        .iter()
        .find_map(|r| r.error.clone())
        .or(setup_failure);
    sink.end(
        Some(&RrResult {
            probes: None,
            runs: &reports,
            start_unix: lines.start_unix(),
            duration_secs: lines.duration_secs(),
            intervals: lines.rows(),
        }),
        failure.as_deref(),
    );
    output_errors.extend(sink.take_errors());
    Ok(finish(
        code,
        json.as_deref(),
        |p| {
            netrig::report::write_envelope(
                p,
                "rr",
                &base,
                Some(&RrResult {
                    probes: None,
                    runs: &reports,
                    start_unix: lines.start_unix(),
                    duration_secs: lines.duration_secs(),
                    intervals: lines.rows(),
                }),
                failure.as_deref(),
            )
        },
        output_errors,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use netrig::rr::client::Probe;

    fn answered(seq: u64, rtt_us: f64) -> Probe {
        Probe {
            seq,
            rtt_us: Some(rtt_us),
            up_us: None,
            down_us: None,
            split_error_us: None,
            late: false,
            duplicate: false,
            warmup: false,
        }
    }

    #[test]
    fn intervals_are_cut_at_the_times_the_round_trips_ended() {
        let mut lines = IntervalLines::new(Duration::from_secs(1), 0);
        let t = Instant::now();
        // The first round trip started its rtt before it ended: time zero.
        assert!(lines.probe(&answered(0, 250_000.0), t).is_empty());
        assert!(
            lines
                .probe(&answered(1, 100.0), t + Duration::from_millis(500))
                .is_empty()
        );
        let rows = lines.probe(&answered(2, 100.0), t + Duration::from_millis(1_500));
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].count, 2, "{rows:?}");
        let took = lines.duration_secs().unwrap();
        assert!((took - 1.75).abs() < 1e-9, "{took}");
        // Warm-up and late replies move no interval.
        let warm = Probe {
            warmup: true,
            ..answered(3, 1.0)
        };
        assert!(lines.probe(&warm, t + Duration::from_secs(9)).is_empty());
        assert!((lines.duration_secs().unwrap() - 1.75).abs() < 1e-9);
    }
}
