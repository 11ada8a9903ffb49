//! Output people can use: the live console table, status and connection files
//! (CSV when the name ends in `.csv`, aligned text otherwise), the final
//! summary and the JSON report.
//!
//! Files are written a whole row at a time and flushed, so a file cut off by a
//! crash still parses; the JSON report is written to a temporary file and
//! renamed, so it is either complete or absent.

use serde::Serialize;

use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::outcome::ResultKind;
use crate::stats::IntervalRow;
use crate::tcp::client::{ConnectionRecord, Observer, RunReport};
use crate::tcp::config::TcpClientConfig;
use crate::units::{format_bits_per_sec, format_bytes};

/// Serde helper: an optional duration as integer milliseconds.
pub mod duration_ms {
    use serde::Serializer;
    use std::time::Duration;

    /// Serializes `Some(d)` as milliseconds, `None` as null.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_millis() as u64),
            None => s.serialize_none(),
        }
    }
}

/// Writes rows of cells as CSV or as fixed-width text.
pub struct RowWriter {
    out: Box<dyn Write + Send>,
    csv: bool,
    widths: Vec<usize>,
}

impl RowWriter {
    /// Creates the file and writes the header row. CSV if the name ends in `.csv`.
    pub fn create(path: &Path, headers: &[&str], widths: &[usize]) -> io::Result<RowWriter> {
        let csv = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        let mut w = RowWriter {
            out: Box::new(BufWriter::new(crate::output::create(path)?)),
            csv,
            widths: widths.to_vec(),
        };
        w.row(headers)?;
        Ok(w)
    }

    /// A writer to any sink (used for the console).
    pub fn console(out: Box<dyn Write + Send>, widths: &[usize]) -> RowWriter {
        RowWriter {
            out,
            csv: false,
            widths: widths.to_vec(),
        }
    }

    /// Writes one row and flushes it.
    pub fn row<S: AsRef<str>>(&mut self, cells: &[S]) -> io::Result<()> {
        let line = if self.csv {
            let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
            w.write_record(cells.iter().map(|c| c.as_ref()))
                .map_err(io::Error::other)?;
            w.into_inner()
                .map_err(|e| io::Error::other(e.to_string()))?
        } else {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let w = self.widths.get(i).copied().unwrap_or(0);
                if i > 0 {
                    s.push(' ');
                }
                s.push_str(&format!("{:>w$}", c.as_ref()));
            }
            s.push('\n');
            s.into_bytes()
        };
        self.out.write_all(&line)?;
        self.out.flush()
    }
}

/// Column widths of the status table.
pub const STATUS_WIDTHS: [usize; 7] = [10, 12, 12, 9, 9, 8, 9];
/// Widths of the console status table (rates with units).
const CONSOLE_STATUS_WIDTHS: [usize; 7] = [10, 14, 14, 9, 9, 8, 9];

/// Columns of the connection file.
pub const CONNECTION_HEADERS: [&str; 13] = [
    "TimeSlice",
    "LocalAddress",
    "RemoteAddress",
    "SendBytes",
    "SendBps",
    "RecvBytes",
    "RecvBps",
    "TimeMs",
    "BufferSize",
    "Result",
    "ErrorDetail",
    "ConnectionId",
    "ConnectMs",
];
const CONNECTION_WIDTHS: [usize; 13] = [10, 47, 47, 12, 12, 12, 12, 10, 10, 12, 0, 36, 10];

fn connection_cells(r: &ConnectionRecord) -> [String; 13] {
    let secs = r.time_ms / 1e3;
    let bps = |b: u64| {
        if secs > 0.0 {
            ((b as f64) / secs).round() as u64
        } else {
            0
        }
    };
    [
        format!("{:.3}", r.time_slice),
        r.local.map_or_else(|| "-".to_string(), |a| a.to_string()),
        r.remote.to_string(),
        r.sent.to_string(),
        bps(r.sent).to_string(),
        r.received.to_string(),
        bps(r.received).to_string(),
        format!("{:.3}", r.time_ms),
        r.buffer.to_string(),
        r.result.kind.to_string(),
        r.result.detail.clone(),
        r.connection_id.to_string(),
        format!("{:.3}", r.connect_ms),
    ]
}

/// The client's observer: console table and optional files.
pub struct Reporter {
    verbosity: u8,
    /// Print each burst's end-to-end time (clocks synchronised).
    pub trip_times: bool,
    console: RowWriter,
    status: Option<RowWriter>,
    connections: Option<RowWriter>,
    errors: Vec<io::Error>,
}

impl Reporter {
    /// Opens the output files (so a bad path fails before the test starts).
    pub fn new(
        verbosity: u8,
        status_file: Option<&Path>,
        connection_file: Option<&Path>,
    ) -> io::Result<Reporter> {
        let open = |p: Option<&Path>, h: &[&str], w: &[usize]| {
            p.map(|p| {
                RowWriter::create(p, h, w)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
            })
            .transpose()
        };
        Ok(Reporter {
            verbosity,
            trip_times: false,
            console: RowWriter::console(crate::output::console(), &CONSOLE_STATUS_WIDTHS),
            status: open(status_file, &IntervalRow::HEADERS, &STATUS_WIDTHS)?,
            connections: open(connection_file, &CONNECTION_HEADERS, &CONNECTION_WIDTHS)?,
            errors: Vec::new(),
        })
    }

    /// Prints the settings banner and the table header.
    pub fn banner(&mut self, cfg: &TcpClientConfig, targets: &[String]) {
        if self.verbosity == 0 {
            return;
        }
        if cfg.iterations.is_none() && cfg.time_limit.is_none() {
            crate::out!("Runs until Ctrl-C: no --iterations or --time (ctsTraffic's default).");
        }
        let buffer = match cfg.buffer {
            crate::tcp::config::BufferSpec::Fixed(b) => crate::units::format_bytes(u64::from(b)),
            crate::tcp::config::BufferSpec::Range(a, b) => format!(
                "{}..{} (random per connection)",
                crate::units::format_bytes(u64::from(a)),
                crate::units::format_bytes(u64::from(b))
            ),
        };
        let total = match (cfg.iterations, cfg.time_limit) {
            (Some(i), _) => format!("{} connections in all", i * u64::from(cfg.connections)),
            (None, Some(t)) => format!("for {:.3} s", t.as_secs_f64()),
            (None, None) => "until Ctrl-C".into(),
        };
        crate::out!(
            "TCP {:?} to {}: {} at a time x {} each, {} buffers, verify {:?}; {}",
            cfg.pattern,
            targets.join(", "),
            cfg.connections,
            crate::units::format_bytes(cfg.transfer),
            buffer,
            cfg.verify,
            total
        );
        if self.verbosity >= 2 {
            // ctsTraffic's own settings block and legend, for those who know it.
            crate::out!("Configured Settings");
            crate::out!("    Protocol: TCP");
            crate::out!("    IoPattern: {:?}", cfg.pattern);
            crate::out!("    Level of verification: {:?}", cfg.verify);
            crate::out!("    Buffer used for each IO request: {buffer}");
            crate::out!("    Total transfer per connection: {} bytes", cfg.transfer);
            crate::out!("    Connecting out to: {}", targets.join(", "));
            crate::out!(
                "    Connection limit (maximum established connections): {}",
                cfg.connections
            );
            crate::out!(
                "    Connection throttling rate (maximum pended connection attempts): {}",
                cfg.throttle
            );
            crate::out!();
            crate::out!("Legend:");
            crate::out!("* TimeSlice - (seconds) cumulative runtime");
            crate::out!(
                "* Send & Recv - bit/s transferred within the TimeSlice period (files: SendBps/RecvBps, bytes/s)"
            );
            crate::out!(
                "* In-Flight - count of established connections transmitting IO pattern data"
            );
            crate::out!("* Completed - cumulative count of successfully completed IO patterns");
            crate::out!(
                "* NetError - cumulative count of failed IO patterns due to network errors"
            );
            crate::out!("* DataError - cumulative count of failed IO patterns due to data errors");
        }
        let h = IntervalRow::CONSOLE_HEADERS;
        // The console is not an output file: a closed stdout is not an error.
        let _ = self.console.row(&h);
    }

    fn note(&mut self, f: impl FnOnce(&mut Self) -> io::Result<()>) {
        if let Err(e) = f(self) {
            self.errors.push(e);
        }
    }

    /// Output errors seen so far (a full disk must not stop the measurement).
    pub fn take_errors(&mut self) -> Vec<io::Error> {
        std::mem::take(&mut self.errors)
    }
}

impl Observer for Reporter {
    fn started(&mut self, cfg: &TcpClientConfig) {
        self.banner(cfg, &cfg.targets);
    }

    fn interval(&mut self, row: &IntervalRow) {
        let cells = row.cells();
        if self.verbosity >= 1 {
            let _ = self.console.row(&row.console_cells());
        }
        if self.status.is_some() {
            self.note(|r| r.status.as_mut().map_or(Ok(()), |w| w.row(&cells)));
        }
    }

    fn connection(&mut self, rec: &ConnectionRecord) {
        let show = match rec.result.kind {
            ResultKind::Success | ResultKind::Cancelled => self.verbosity >= 3,
            _ => self.verbosity >= 2,
        };
        if show {
            crate::out!(
                "[{:.3}] {} {} -> {} sent {} recv {} in {:.3} ms: {} {}",
                rec.time_slice,
                rec.connection_id,
                rec.local.map_or_else(|| "-".to_string(), |a| a.to_string()),
                rec.remote,
                rec.sent,
                rec.received,
                rec.time_ms,
                rec.result.kind,
                rec.result.detail
            );
        }
        if self.verbosity >= 1 {
            print_tcp_bursts(rec, self.trip_times);
        }
        if self.connections.is_some() {
            let cells = connection_cells(rec);
            self.note(|r| r.connections.as_mut().map_or(Ok(()), |w| w.row(&cells)));
        }
    }
}

/// Prints a connection's bursts: the receiver's timing and read sizes, the
/// sender's writes and TCP_INFO, side by side per burst.
fn print_tcp_bursts(rec: &ConnectionRecord, trip_times: bool) {
    let mut i = 0;
    while i < rec.bursts.len() {
        let idx = rec.bursts[i].index;
        let same: Vec<&crate::proto::TcpBurst> = rec.bursts[i..]
            .iter()
            .take_while(|b| b.index == idx)
            .collect();
        i += same.len();
        let mut line = format!("{} burst {idx:>4}:", rec.connection_id);
        for b in same {
            if b.side == "recv" {
                let sizes: Vec<String> = b
                    .read_sizes
                    .iter()
                    .map(|(e, n)| format!("{e}+B x{n}"))
                    .collect();
                line += &format!(
                    " recv {:.6}-{:.6} s, {} bytes in {} reads, transfer {:.3} ms, {}, duty {:.1}%, reads {};",
                    b.start_s,
                    b.end_s,
                    b.bytes,
                    b.calls,
                    b.transfer_ms,
                    format_bits_per_sec(b.rate_bps),
                    b.duty_pct,
                    sizes.join(" ")
                );
            } else {
                let opt = |v: Option<u32>| v.map_or("-".to_string(), |x| x.to_string());
                line += &format!(
                    " send {} writes, {} errors, retransmits {}, cwnd {}, rtt {} us;",
                    b.calls,
                    b.errors,
                    opt(b.retransmits),
                    opt(b.cwnd),
                    opt(b.rtt_us)
                );
            }
        }
        let pair = (
            rec.bursts
                .iter()
                .find(|b| b.index == idx && b.side == "send"),
            rec.bursts
                .iter()
                .find(|b| b.index == idx && b.side == "recv"),
        );
        if let (true, (Some(s), Some(r))) = (trip_times, pair) {
            line += &format!(
                " trip {:.3} ms;",
                (r.end_rt_ns as f64 - s.start_rt_ns as f64) / 1e6
            );
        }
        crate::out!("{}", line.trim_end_matches(';'));
    }
}

/// Prints the final summary (ctsTraffic's "Historic Connection Statistics").
pub fn print_summary(rep: &RunReport) {
    let t = &rep.totals;
    let secs = rep.duration_secs.max(1e-9);
    crate::out!();
    crate::out!("Historic Connection Statistics (all connections over the complete lifetime)");
    crate::out!();
    crate::out!(
        "SuccessfulConnections [{}] NetworkErrors [{}] DataErrors [{}] Cancelled [{}]",
        t.completed,
        t.net_errors,
        t.data_errors,
        t.cancelled
    );
    for (why, n) in &rep.refusals {
        crate::out!("Server refused {n} connection(s): {why}");
    }
    for (addr, why) in &rep.server_errors {
        crate::out!("Server {addr} stopped the test: {why}");
    }
    crate::out!();
    crate::out!(
        "Total Bytes Recv : {} ({})",
        t.received,
        format_bytes(t.received)
    );
    crate::out!("Total Bytes Sent : {} ({})", t.sent, format_bytes(t.sent));
    crate::out!(
        "Total Time : {} ms.",
        (rep.duration_secs * 1e3).round() as u64
    );
    // Client-to-server goodput counts what the servers received (and verified),
    // not what the client handed to its sockets.
    let c2s = if rep.servers.iter().all(|(_, s)| s.is_some()) {
        rep.servers
            .iter()
            .filter_map(|(_, s)| s.as_ref())
            .map(|s| s.bytes_received)
            .sum()
    } else {
        t.sent
    };
    crate::out!(
        "Goodput (received at the far end) : client->server {} / server->client {}",
        format_bits_per_sec(c2s as f64 * 8.0 / secs),
        format_bits_per_sec(t.received as f64 * 8.0 / secs)
    );
    for (addr, sum) in &rep.servers {
        match sum {
            Some(s) => crate::out!(
                "Server {addr}: {} connections, {} succeeded, {} network errors, {} data errors, {} cancelled; received and verified {} bytes, sent {} bytes",
                s.connections,
                s.success,
                s.network_errors,
                s.data_errors,
                s.cancelled,
                s.bytes_received,
                s.bytes_sent
            ),
            None => crate::out!("Server {addr}: no summary (control connection lost)"),
        }
    }
    for addr in &rep.lost_servers {
        crate::out!(
            "Server {addr} closed the control connection mid-test: no new connections were started"
        );
    }
    if rep.interrupted {
        crate::out!("(interrupted: in-flight connections were cancelled)");
    }
}

/// Version of the JSON envelope every command writes (`netrig` in the
/// document; `schema/netrig.schema.json` describes it).
pub const ENVELOPE_VERSION: u32 = 1;

/// The one JSON document every command writes: which test, with what
/// configuration, what it measured, and why it failed if it did.
#[derive(Serialize)]
pub struct Envelope<'a, C: Serialize, R: Serialize> {
    /// Envelope format version.
    pub netrig: u32,
    /// netrig's version.
    pub version: &'static str,
    /// The command: tcp, udp, rr, ping, crr, sweep, relay.
    pub test: &'a str,
    /// The configuration as run.
    pub config: &'a C,
    /// What was measured (null when nothing was).
    pub result: Option<&'a R>,
    /// Why the run failed, when it did; `result` then holds what was
    /// measured before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a str>,
}

/// Writes a command's JSON envelope to `path` (see [`write_atomically`]).
pub fn write_envelope<C: Serialize, R: Serialize>(
    path: &Path,
    test: &str,
    config: &C,
    result: Option<&R>,
    error: Option<&str>,
) -> io::Result<()> {
    write_atomically(
        path,
        &Envelope {
            netrig: ENVELOPE_VERSION,
            version: env!("CARGO_PKG_VERSION"),
            test,
            config,
            result,
            error,
        },
    )
}

/// Writes `doc` as pretty JSON; a regular file is replaced atomically, so
/// readers see the old file or the complete new one (see [`crate::output`]).
pub fn write_atomically(path: &Path, doc: &impl Serialize) -> io::Result<()> {
    crate::output::replace(path, |w| {
        serde_json::to_writer_pretty(&mut *w, doc).map_err(io::Error::other)?;
        w.write_all(b"\n")
    })
}

/// Columns of the UDP receiver table.
pub const UDP_HEADERS: [&str; 13] = [
    "TimeSlice",
    "Bytes",
    "Packets",
    "Drops",
    "ConsecDrops",
    "Dups",
    "Reordered",
    "Corrupt",
    "Late",
    "DelayMinUs",
    "DelayAvgUs",
    "DelayMaxUs",
    "JitterUs",
];
const UDP_WIDTHS: [usize; 13] = [10, 12, 9, 7, 11, 6, 9, 7, 6, 11, 11, 11, 9];
/// Columns of the media-stream table (ctsTraffic's).
pub const MEDIA_HEADERS: [&str; 6] = [
    "TimeSlice",
    "Bits/Sec",
    "Completed",
    "Dropped",
    "Repeated",
    "Errors",
];
const MEDIA_WIDTHS: [usize; 6] = [10, 12, 10, 8, 9, 7];
/// Columns of the per-datagram (jitter) file.
pub const PACKET_HEADERS: [&str; 6] = [
    "Sequence",
    "SenderNs",
    "ReceiverNs",
    "FlightUs",
    "Arrival",
    "Corrupt",
];
const PACKET_WIDTHS: [usize; 6] = [10, 20, 20, 12, 10, 7];

fn opt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.1}"))
}

fn udp_cells(iv: &crate::udp::track::UdpInterval) -> Vec<String> {
    vec![
        format!("{:.3}", iv.time_slice),
        iv.bytes.to_string(),
        iv.packets.to_string(),
        iv.drops.to_string(),
        iv.max_consecutive_drops.to_string(),
        iv.duplicates.to_string(),
        iv.reordered.to_string(),
        iv.corrupt.to_string(),
        iv.late.to_string(),
        opt_us(iv.delay_min_us),
        opt_us(iv.delay_avg_us),
        opt_us(iv.delay_max_us),
        format!("{:.1}", iv.jitter_us),
    ]
}

/// Columns of the UDP table on the console: the file's, plus the rate (bit/s
/// with units) and loss percent, as iperf3 users expect.
pub const UDP_CONSOLE_HEADERS: [&str; 15] = [
    "TimeSlice",
    "Rate",
    "Bytes",
    "Packets",
    "Drops",
    "Loss%",
    "ConsecDrops",
    "Dups",
    "Reordered",
    "Corrupt",
    "Late",
    "DelayMinUs",
    "DelayAvgUs",
    "DelayMaxUs",
    "JitterUs",
];
const UDP_CONSOLE_WIDTHS: [usize; 15] = [10, 14, 12, 9, 7, 7, 11, 6, 9, 7, 6, 11, 11, 11, 9];

/// Loss in an interval, percent: gaps opened (net of late arrivals) over the
/// datagrams the interval accounts for.
pub fn interval_loss_pct(iv: &crate::udp::track::UdpInterval) -> f64 {
    let drops = iv.drops.max(0) as f64;
    let expected = iv.packets.saturating_sub(iv.duplicates) as f64 + drops;
    if expected > 0.0 {
        100.0 * drops / expected
    } else {
        0.0
    }
}

fn udp_console_cells(iv: &crate::udp::track::UdpInterval, interval_secs: f64) -> Vec<String> {
    let mut c = udp_cells(iv);
    c.insert(
        1,
        format_bits_per_sec(iv.bytes as f64 * 8.0 / interval_secs.max(1e-9)),
    );
    c.insert(5, format!("{:.2}", interval_loss_pct(iv)));
    c
}

fn media_cells(iv: &crate::udp::track::UdpInterval, interval_secs: f64) -> Vec<String> {
    let good = iv
        .packets
        .saturating_sub(iv.duplicates + iv.corrupt + iv.late);
    vec![
        format!("{:.3}", iv.time_slice),
        ((iv.bytes as f64 * 8.0 / interval_secs.max(1e-9)).round() as u64).to_string(),
        good.to_string(),
        (iv.drops.max(0) as u64 + iv.late).to_string(),
        iv.duplicates.to_string(),
        iv.corrupt.to_string(),
    ]
}

/// The one-line description of a UDP stream printed before its table.
pub fn udp_banner(s: &crate::proto::UdpSpec) -> String {
    let dir = if s.reverse {
        "server -> client"
    } else {
        "client -> server"
    };
    match s.burst {
        Some(b) => format!(
            "UDP {dir}: bursts of {} bytes ({} B datagrams{}) every {} ms for {:.3} s",
            b.size,
            s.size,
            if s.gap_ps > 1 {
                format!(", {:.3} us apart", s.gap_ps as f64 / 1e6)
            } else {
                ", back to back".into()
            },
            b.period_ms,
            s.duration_ms as f64 / 1e3
        ),
        None => format!(
            "UDP {dir}: {} B datagrams every {:.3} us ({}) for {:.3} s, pacing {:?}{}",
            s.size,
            s.gap_ps as f64 / 1e6,
            format_bits_per_sec(s.size as f64 * 8.0 * 1e12 / s.gap_ps as f64),
            s.duration_ms as f64 / 1e3,
            s.pacing,
            if s.media.is_some() {
                ", media stream"
            } else {
                ""
            }
        ),
    }
}

/// The UDP client's observer: console table and optional files.
pub struct UdpReporter {
    verbosity: u8,
    /// Lines printed, with the table header, once the server has accepted.
    banner: Vec<String>,
    header: &'static [&'static str],
    media: bool,
    last_slice: f64,
    console: RowWriter,
    status: Option<RowWriter>,
    packets: Option<RowWriter>,
    /// Per-datagram rows kept in memory until [`UdpReporter::finish`].
    held: Option<Vec<crate::udp::engine::PacketRow>>,
    /// Print each burst's end-to-end time (clocks synchronised).
    trip_times: bool,
    errors: Vec<io::Error>,
}

impl UdpReporter {
    /// Keep per-datagram rows in memory and write them in [`UdpReporter::finish`]
    /// (no file I/O while the stream runs).
    pub fn hold_packets(&mut self) {
        self.held = Some(Vec::new());
    }

    /// Print each burst's end-to-end time (only meaningful with synchronised clocks).
    pub fn show_trip_times(&mut self) {
        self.trip_times = true;
    }

    /// Writes held per-datagram rows.
    pub fn finish(&mut self) {
        for p in self.held.take().unwrap_or_default() {
            self.write_packet(&p);
        }
    }

    fn write_packet(&mut self, p: &crate::udp::engine::PacketRow) {
        if let Some(w) = self.packets.as_mut() {
            let cells = [
                p.seq.to_string(),
                p.send_ns.to_string(),
                p.recv_ns.to_string(),
                format!("{:.3}", p.flight_us),
                p.arrival.to_string(),
                p.corrupt.to_string(),
            ];
            if let Err(e) = w.row(&cells) {
                self.errors.push(e);
            }
        }
    }

    /// Opens the files and prints the table header.
    pub fn new(
        verbosity: u8,
        media: bool,
        status_file: Option<&Path>,
        jitter_file: Option<&Path>,
    ) -> io::Result<UdpReporter> {
        let (h, w): (&[&str], &[usize]) = if media {
            (&MEDIA_HEADERS, &MEDIA_WIDTHS)
        } else {
            (&UDP_HEADERS, &UDP_WIDTHS)
        };
        let open = |p: Option<&Path>, h: &[&str], w: &[usize]| {
            p.map(|p| {
                RowWriter::create(p, h, w)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
            })
            .transpose()
        };
        let cw: &[usize] = if media { w } else { &UDP_CONSOLE_WIDTHS };
        let r = UdpReporter {
            verbosity,
            banner: Vec::new(),
            header: if media {
                &MEDIA_HEADERS
            } else {
                &UDP_CONSOLE_HEADERS
            },
            media,
            last_slice: 0.0,
            console: RowWriter::console(crate::output::console(), cw),
            status: open(status_file, h, w)?,
            packets: open(jitter_file, &PACKET_HEADERS, &PACKET_WIDTHS)?,
            held: None,
            trip_times: false,
            errors: Vec::new(),
        };
        Ok(r)
    }

    /// Output errors seen so far.
    pub fn take_errors(&mut self) -> Vec<io::Error> {
        std::mem::take(&mut self.errors)
    }

    /// Lines to print before the table, once the server has accepted.
    pub fn set_banner(&mut self, lines: Vec<String>) {
        self.banner = lines;
    }
}

impl crate::udp::client::UdpObserver for UdpReporter {
    fn started(&mut self) {
        if self.verbosity >= 1 {
            for l in &self.banner {
                crate::out!("{l}");
            }
            // The console is not an output file: a closed stdout is not an error.
            let _ = self.console.row(self.header);
        }
    }

    fn interval(&mut self, iv: &crate::udp::track::UdpInterval) {
        let secs = iv.time_slice - self.last_slice;
        let cells = if self.media {
            media_cells(iv, secs)
        } else {
            udp_cells(iv)
        };
        self.last_slice = iv.time_slice;
        if self.verbosity >= 1 {
            let shown = if self.media {
                cells.clone()
            } else {
                udp_console_cells(iv, secs)
            };
            let _ = self.console.row(&shown);
        }
        if let Some(w) = self.status.as_mut()
            && let Err(e) = w.row(&cells)
        {
            self.errors.push(e);
        }
    }

    fn burst(&mut self, b: &crate::udp::track::BurstReport) {
        if self.verbosity == 0 {
            return;
        }
        let sizes: Vec<String> = b
            .read_sizes
            .iter()
            .map(|(s, n)| format!("{s}B x{n}"))
            .collect();
        crate::out!(
            "burst {:>4}: {:.6}-{:.6} s, {} bytes in {} datagrams ({} lost), transfer {:.3} ms, {}, duty {:.1}%{}; reads {}",
            b.index,
            b.start_s,
            b.end_s,
            b.bytes,
            b.datagrams,
            b.lost,
            b.transfer_ms,
            format_bits_per_sec(b.rate_bps),
            b.duty_pct,
            if self.trip_times {
                format!(", trip {:.3} ms", b.trip_ms)
            } else {
                String::new()
            },
            sizes.join(" ")
        );
    }

    fn packet(&mut self, p: &crate::udp::engine::PacketRow) {
        match self.held.as_mut() {
            Some(h) => h.push(p.clone()),
            None => self.write_packet(p),
        }
    }
}

/// Prints the UDP run's final summary; `verbose` adds the delay histogram (which the
/// JSON report always has).
pub fn print_udp_summary(
    cfg: &crate::udp::client::UdpClientConfig,
    rep: &crate::udp::client::UdpReport,
    verbose: bool,
) {
    crate::out!();
    match &rep.offset {
        Some(o) => crate::out!(
            "Clocks: not synchronised; server-client offset estimated in band as {:.1} us +/- {:.1} us (delays below carry that uncertainty)",
            o.server_minus_client_ns as f64 / 1e3,
            o.uncertainty_ns as f64 / 1e3
        ),
        None => crate::out!("Clocks: trusted as synchronised (--synced); delays are absolute"),
    }
    if cfg.spec.offset_comp_ns != 0 {
        crate::out!(
            "Delay compensation: {:+.1} us added",
            cfg.spec.offset_comp_ns as f64 / 1e3
        );
    }
    if let Some(s) = &rep.sender {
        crate::out!(
            "Sender: {} datagrams, {} bytes in {:.3} s = {}; departure lateness p50 {:.1} us, p99 {:.1} us, max {:.1} us; mean inter-departure error {:.2} us; {} stalls re-anchored; {} send errors",
            s.packets,
            s.bytes,
            s.duration_secs,
            format_bits_per_sec(s.achieved_bps),
            s.late_p50_us,
            s.late_p99_us,
            s.late_max_us,
            s.gap_error_mean_us,
            s.slips,
            s.send_errors
        );
    }
    let Some(t) = &rep.totals else {
        crate::out!("Receiver: no totals (the stream did not finish)");
        return;
    };
    // The stream's own duration (the sender's), not the drain after it.
    let secs = rep
        .sender
        .as_ref()
        .map_or(rep.duration_secs, |s| s.duration_secs)
        .max(1e-9);
    crate::out!(
        "Receiver: {} datagrams ({} unique), {} bytes, {}; lost {} ({:.3}%), longest loss run {}, duplicates {}, reordered {}, corrupt {}, late {}",
        t.packets,
        t.unique,
        t.bytes,
        format_bits_per_sec(t.bytes as f64 * 8.0 / secs),
        t.lost,
        t.sent.map_or(0.0, |s| if s > 0 {
            100.0 * t.lost as f64 / s as f64
        } else {
            0.0
        }),
        t.max_consecutive_drops,
        t.duplicates,
        t.reordered,
        t.corrupt,
        t.late
    );
    crate::out!(
        "One-way delay (us): min {} avg {} max {}; jitter {:.1} us",
        opt_us(t.delay_min_us),
        opt_us(t.delay_avg_us),
        opt_us(t.delay_max_us),
        t.jitter_us
    );
    if !t.percentiles_us.is_empty() {
        let p: Vec<String> = t
            .percentiles_us
            .iter()
            .map(|(n, v)| format!("{n} {v:.1}"))
            .collect();
        crate::out!("Delay percentiles (us): {}", p.join(", "));
    }
    let shown: Vec<_> = t.histogram.iter().filter(|(_, n)| *n > 0).collect();
    if verbose && !shown.is_empty() {
        crate::out!("Delay histogram (bin start us, count; last bin includes everything above):");
        for (edge, n) in shown {
            crate::out!("  {edge:>10.1} {n}");
        }
    }
    if rep.server_lost {
        crate::out!("(the server was lost before the test finished)");
    }
    if rep.interrupted {
        crate::out!("(interrupted)");
    }
}

/// Writes a UDP run's JSON report atomically.
/// Columns of a spectrum row (one request size).
pub const SPECTRUM_HEADERS: [&str; 12] = [
    "Size", "Reply", "Count", "MinUs", "MeanUs", "P50Us", "P99Us", "P99.9Us", "MaxUs", "StddevUs",
    "TPS", "Lost",
];

/// One spectrum row.
pub fn spectrum_cells(r: &crate::rr::client::RrReport) -> Vec<String> {
    let l = r.latency.as_ref();
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.3}"));
    let pct = |name: &str| {
        l.and_then(|s| {
            s.percentiles_us
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| *v)
        })
    };
    vec![
        r.size.to_string(),
        r.reply.to_string(),
        l.map_or(0, |s| s.count).to_string(),
        f(l.map(|s| s.min_us)),
        f(l.map(|s| s.mean_us)),
        f(pct("p50")),
        f(pct("p99")),
        f(pct("p99.9")),
        f(l.map(|s| s.max_us)),
        f(l.map(|s| s.stddev_us)),
        format!("{:.0}", r.transactions_per_sec),
        r.sent.saturating_sub(r.received).to_string(),
    ]
}

/// Writes spectrum (or single-run) rows as CSV.
pub fn write_spectrum_csv(path: &Path, reports: &[crate::rr::client::RrReport]) -> io::Result<()> {
    let mut w = RowWriter::create(path, &SPECTRUM_HEADERS, &[0; 12])?;
    for r in reports {
        w.row(&spectrum_cells(r))?;
    }
    Ok(())
}

/// Writes the histogram as CSV: low, high (µs; empty for below/above), count, fraction, cumulative.
pub fn write_hist_csv(path: &Path, stats: &crate::rr::hist::LatencyStats) -> io::Result<()> {
    let mut w = csv::Writer::from_writer(crate::output::create(path)?);
    w.write_record(["LowUs", "HighUs", "Count", "Fraction", "Cumulative"])
        .map_err(io::Error::other)?;
    let n = stats.count().max(1) as f64;
    let mut cum = 0;
    for (lo, hi, c) in stats.rows() {
        cum += c;
        let s = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
        w.write_record([
            s(lo),
            s(hi),
            c.to_string(),
            format!("{:.6}", c as f64 / n),
            format!("{:.6}", cum as f64 / n),
        ])
        .map_err(io::Error::other)?;
    }
    w.flush()
}

fn print_summary_line(label: &str, s: &crate::rr::hist::Summary) {
    crate::out!(
        "{label}: count {} min {:.3} mean {:.3} max {:.3} stddev {:.3} variance {:.3} (us)",
        s.count,
        s.min_us,
        s.mean_us,
        s.max_us,
        s.stddev_us,
        s.variance_us2
    );
}

/// Prints a request/response run: summary, percentiles, TPS, ACE histogram.
pub fn print_rr(
    cfg: &crate::rr::client::RrConfig,
    r: &crate::rr::client::RrReport,
    stats: &crate::rr::hist::LatencyStats,
    all_bins: bool,
) {
    crate::out!(
        "Request/response over {:?}: {} B request, {} B reply, {} measured + {} warm-up iterations{}{}",
        r.transport,
        r.size,
        r.reply,
        cfg.iterations,
        cfg.warmup,
        if cfg.nagle { ", Nagle on" } else { "" },
        if cfg.busy_poll { ", busy-poll" } else { "" }
    );
    if let Some(w) = &r.warmup {
        print_summary_line("Warm-up round trip", w);
    }
    let Some(l) = &r.latency else {
        crate::out!("No measured round trips.");
        return;
    };
    print_summary_line("Round trip", l);
    let p: Vec<String> = l
        .percentiles_us
        .iter()
        .map(|(n, v)| format!("{n} {v:.3}"))
        .collect();
    crate::out!("Percentiles (us): {}", p.join(", "));
    crate::out!("Transactions per second: {:.0}", r.transactions_per_sec);
    if let (Some(up), Some(down)) = (r.lost_up, r.lost_down) {
        crate::out!(
            "Lost: {up} requests on the way up, {down} replies on the way down; {} late replies",
            r.late
        );
    }
    if r.corrupt > 0 {
        crate::out!("Corrupt replies: {}", r.corrupt);
    }
    if r.rx_stamped > 0 {
        crate::out!(
            "Kernel receive timestamps timed {} of {} replies",
            r.rx_stamped,
            r.received
        );
    }
    crate::out!();
    let title = format!(
        "netrig {:?} Synchronous Latency Test (Message Size {}, Reply Size {})",
        r.transport, r.size, r.reply
    );
    let _ = write!(
        crate::output::console(),
        "{}",
        stats.render_ace(&title, all_bins)
    );
}

/// The warning for a sender that fell more than 1% short of its schedule
/// (`None` when it kept up).
pub fn sender_limited_warning(s: &crate::udp::engine::SenderReport) -> Option<String> {
    s.sender_limited.then(|| {
        format!(
            "sender-limited: the schedule asked for {} bytes ({}), {} bytes ({}) left the sender, {:.1}% short; this host could not keep up, so the path was never offered the asked rate",
            s.asked_bytes,
            format_bits_per_sec(s.asked_bps),
            s.bytes,
            format_bits_per_sec(s.achieved_bps),
            100.0 * (1.0 - s.bytes as f64 / s.asked_bytes.max(1) as f64)
        )
    })
}

/// One `ping` line per probe. The one-way split is shown as a fact only when
/// the clocks are trusted (`--synced`); otherwise with the clock offset's ±
/// bound, since a queue on one side of an estimated offset moves half its
/// delay to the other direction.
pub fn ping_line(size: u64, target: &str, p: &crate::rr::client::Probe) -> String {
    if p.late {
        return format!(
            "seq={} late reply (after the timeout; counted late, not received)",
            p.seq
        );
    }
    let Some(rtt) = p.rtt_us else {
        return format!("seq={} lost (no reply within the timeout)", p.seq);
    };
    let mut line = format!(
        "{size} bytes from {target}: seq={} rtt={:.3} ms",
        p.seq,
        rtt / 1e3
    );
    if let (Some(up), Some(down)) = (p.up_us, p.down_us) {
        let err = p
            .split_error_us
            .map_or(String::new(), |e| format!("\u{b1}{:.3}", e / 1e3));
        line += &format!(" up={:.3}{err} ms down={:.3}{err} ms", up / 1e3, down / 1e3);
    }
    line
}

/// Prints ping's closing summary.
pub fn print_ping_summary(cfg: &crate::rr::client::RrConfig, r: &crate::rr::client::RrReport) {
    let lost = r.sent.saturating_sub(r.received);
    crate::out!();
    crate::out!("--- {} netrig ping statistics ---", cfg.target);
    crate::out!(
        "{} probes sent, {} received, {:.1}% loss (up {}, down {}), {} late",
        r.sent,
        r.received,
        if r.sent > 0 {
            100.0 * lost as f64 / r.sent as f64
        } else {
            0.0
        },
        r.lost_up.map_or("?".into(), |v| v.to_string()),
        r.lost_down.map_or("?".into(), |v| v.to_string()),
        r.late
    );
    if let Some(l) = &r.latency {
        crate::out!(
            "rtt min/avg/max/mdev = {:.3}/{:.3}/{:.3}/{:.3} ms",
            l.min_us / 1e3,
            l.mean_us / 1e3,
            l.max_us / 1e3,
            l.stddev_us / 1e3
        );
    }
    if let Some(o) = &r.offset {
        crate::out!(
            "one-way split uses a clock offset of {:.1} us +/- {:.1} us (estimated in band)",
            o.server_minus_client_ns as f64 / 1e3,
            o.uncertainty_ns as f64 / 1e3
        );
    }
}

/// Writes request/response reports as JSON.
/// Prints a crr run.
pub fn print_crr(
    size: u64,
    reply: u64,
    parallel: u32,
    r: &crate::rr::crr::CrrReport,
    first_failure: Option<&str>,
) {
    crate::out!(
        "Connect/request/response/close over TCP: {size} B request, {reply} B reply, {parallel} in flight"
    );
    crate::out!(
        "Transactions: {} succeeded, {} failed in {:.3} s = {:.0} connections/s",
        r.transactions,
        r.failed,
        r.duration_secs,
        r.per_sec
    );
    for (label, s) in [
        ("Handshake (connect)", &r.handshake),
        ("Transaction (connect to agreed result)", &r.transaction),
    ] {
        if let Some(s) = s {
            print_summary_line(label, s);
            let p: Vec<String> = s
                .percentiles_us
                .iter()
                .map(|(n, v)| format!("{n} {v:.3}"))
                .collect();
            crate::out!("  percentiles (us): {}", p.join(", "));
        }
    }
    if let Some(f) = first_failure {
        crate::out!("First failure: {f}");
    }
}

/// Columns of the sweep (rate bin) table.
pub const BIN_HEADERS: [&str; 8] = [
    "FromMbps",
    "OfferedMbps",
    "ReceivedMbps",
    "LossPct",
    "DelayMinUs",
    "DelayAvgUs",
    "DelayMaxUs",
    "Intervals",
];

fn bin_cells(b: &crate::udp::analyze::Bin) -> Vec<String> {
    vec![
        format!("{:.3}", b.from_bps / 1e6),
        format!("{:.3}", b.offered_bps / 1e6),
        format!("{:.3}", b.received_bps / 1e6),
        format!("{:.2}", b.loss_pct),
        opt_us(b.delay_min_us),
        opt_us(b.delay_avg_us),
        opt_us(b.delay_max_us),
        b.intervals.to_string(),
    ]
}

/// Prints the rate-bin table and the analysis of a profile/sweep run.
pub fn print_analysis(bins: &[crate::udp::analyze::Bin], a: &crate::udp::analyze::Analysis) {
    crate::out!();
    crate::out!(
        "Per offered-rate bin (rates are UDP payload, Mbit/s; on the wire add the headers below):"
    );
    let mut w = RowWriter::console(crate::output::console(), &[9, 12, 13, 8, 11, 11, 11, 10]);
    let _ = w.row(&BIN_HEADERS);
    for b in bins {
        let _ = w.row(&bin_cells(b));
    }
    crate::out!();
    match (a.congestion_bps, a.limiter) {
        (Some(c), Some(l)) => crate::out!(
            "Analysis: congestion from t={:.2} s at {} of UDP payload ({} on the wire with {} B of UDP/IPv4/Ethernet headers per {:.0} B datagram); limiter: {:?}{}; confidence {:.0}%",
            a.congestion_at.unwrap_or(0.0),
            format_bits_per_sec(c),
            format_bits_per_sec(a.congestion_wire_bps.unwrap_or(c)),
            a.frame_overhead_bytes,
            a.congestion_size.unwrap_or(0.0),
            l,
            a.burst_bytes
                .map_or(String::new(), |b| format!(", committed burst ~{b:.0} B")),
            100.0 * a.confidence
        ),
        _ => crate::out!(
            "Analysis: no congestion point found (confidence {:.0}%)",
            100.0 * a.confidence
        ),
    }
    for e in &a.evidence {
        crate::out!("  - {e}");
    }
}

/// Writes the rate-bin table as CSV (or aligned text).
pub fn write_bins(path: &Path, bins: &[crate::udp::analyze::Bin]) -> io::Result<()> {
    let mut w = RowWriter::create(path, &BIN_HEADERS, &[9, 12, 13, 8, 11, 11, 11, 10])?;
    for b in bins {
        w.row(&bin_cells(b))?;
    }
    Ok(())
}
