//! Output people can use: the live console table, status and connection files
//! (CSV when the name ends in `.csv`, aligned text otherwise), the final
//! summary and the JSON report.
//!
//! Files are written a whole row at a time and flushed, so a file cut off by a
//! crash still parses; the JSON report is written to a temporary file and
//! renamed, so it is either complete or absent.

use serde::Serialize;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

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
        let file = File::create(path)?;
        let mut w = RowWriter {
            out: Box::new(BufWriter::new(file)),
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

/// Columns of the connection file.
pub const CONNECTION_HEADERS: [&str; 12] = [
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
];
const CONNECTION_WIDTHS: [usize; 12] = [10, 47, 47, 12, 12, 12, 12, 10, 10, 12, 0, 36];

fn connection_cells(r: &ConnectionRecord) -> [String; 12] {
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
    ]
}

/// The client's observer: console table and optional files.
pub struct Reporter {
    verbosity: u8,
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
            console: RowWriter::console(Box::new(io::stdout()), &STATUS_WIDTHS),
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
        println!("Configured Settings");
        println!("    Protocol: TCP");
        println!("    IoPattern: {:?}", cfg.pattern);
        println!("    Level of verification: {:?}", cfg.verify);
        match cfg.buffer {
            crate::tcp::config::BufferSpec::Fixed(b) => {
                println!("    Buffer used for each IO request: {b} bytes")
            }
            crate::tcp::config::BufferSpec::Range(a, b) => {
                println!(
                    "    Buffer used for each IO request: random per connection in [{a}, {b}] bytes"
                )
            }
        }
        println!("    Total transfer per connection: {} bytes", cfg.transfer);
        println!("    Connecting out to: {}", targets.join(", "));
        println!(
            "    Connection limit (maximum established connections): {}",
            cfg.connections
        );
        println!(
            "    Connection throttling rate (maximum pended connection attempts): {}",
            cfg.throttle
        );
        match cfg.iterations {
            Some(i) => println!(
                "    Total outgoing connections before exit (iterations * concurrent connections): {}",
                i * cfg.connections as u64
            ),
            None => println!("    Total outgoing connections before exit: unbounded"),
        }
        if let Some(t) = cfg.time_limit {
            println!("    Time limit: {:.3} s", t.as_secs_f64());
        }
        println!();
        println!("Legend:");
        println!("* TimeSlice - (seconds) cumulative runtime");
        println!(
            "* Send & Recv Rates - bytes/sec that were transferred within the TimeSlice period"
        );
        println!("* In-Flight - count of established connections transmitting IO pattern data");
        println!("* Completed - cumulative count of successfully completed IO patterns");
        println!("* NetError - cumulative count of failed IO patterns due to network errors");
        println!("* DataError - cumulative count of failed IO patterns due to data errors");
        let h = IntervalRow::HEADERS;
        self.note(|r| r.console.row(&h));
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
    fn interval(&mut self, row: &IntervalRow) {
        let cells = row.cells();
        if self.verbosity >= 1 {
            self.note(|r| r.console.row(&cells));
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
            println!(
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
        if self.connections.is_some() {
            let cells = connection_cells(rec);
            self.note(|r| r.connections.as_mut().map_or(Ok(()), |w| w.row(&cells)));
        }
    }
}

/// Prints the final summary (ctsTraffic's "Historic Connection Statistics").
pub fn print_summary(rep: &RunReport) {
    let t = &rep.totals;
    let secs = rep.duration_secs.max(1e-9);
    println!();
    println!("Historic Connection Statistics (all connections over the complete lifetime)");
    println!();
    println!(
        "SuccessfulConnections [{}] NetworkErrors [{}] DataErrors [{}] Cancelled [{}]",
        t.completed, t.net_errors, t.data_errors, t.cancelled
    );
    println!();
    println!(
        "Total Bytes Recv : {} ({})",
        t.received,
        format_bytes(t.received)
    );
    println!("Total Bytes Sent : {} ({})", t.sent, format_bytes(t.sent));
    println!(
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
    println!(
        "Goodput (received at the far end) : client->server {} / server->client {}",
        format_bits_per_sec(c2s as f64 * 8.0 / secs),
        format_bits_per_sec(t.received as f64 * 8.0 / secs)
    );
    for (addr, sum) in &rep.servers {
        match sum {
            Some(s) => println!(
                "Server {addr}: {} connections, {} succeeded, {} network errors, {} data errors, {} cancelled; received and verified {} bytes, sent {} bytes",
                s.connections,
                s.success,
                s.network_errors,
                s.data_errors,
                s.cancelled,
                s.bytes_received,
                s.bytes_sent
            ),
            None => println!("Server {addr}: no summary (control connection lost)"),
        }
    }
    for addr in &rep.lost_servers {
        println!(
            "Server {addr} closed the control connection mid-test: no new connections were started"
        );
    }
    if rep.interrupted {
        println!("(interrupted: in-flight connections were cancelled)");
    }
}

#[derive(Serialize)]
struct JsonReport<'a> {
    netrig: &'static str,
    test: &'static str,
    config: &'a TcpClientConfig,
    result: &'a RunReport,
}

/// Writes the JSON report atomically (temporary file, then rename).
pub fn write_json(path: &Path, cfg: &TcpClientConfig, rep: &RunReport) -> io::Result<()> {
    let doc = JsonReport {
        netrig: env!("CARGO_PKG_VERSION"),
        test: "tcp",
        config: cfg,
        result: rep,
    };
    let mut tmp = PathBuf::from(path);
    tmp.set_extension(format!("tmp{}", std::process::id()));
    {
        let mut f = BufWriter::new(File::create(&tmp)?);
        serde_json::to_writer_pretty(&mut f, &doc).map_err(io::Error::other)?;
        f.write_all(b"\n")?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
