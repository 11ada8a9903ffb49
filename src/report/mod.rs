//! Output people can use: the live console tables, status and connection files
//! (CSV when the name ends in `.csv`, aligned text otherwise), the final
//! summaries and the JSON report, one module per engine's output (`tcp`,
//! `udp`, `rr`, `analysis`); what they share lives here.
//!
//! Files are written a whole row at a time and flushed, so a file cut off by a
//! crash still parses; the JSON report is written to a temporary file and
//! renamed, so it is either complete or absent.

use serde::Serialize;

use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Appends a line to a list of console lines, in `crate::out!`'s form: the
/// summaries are built as lines (which unit tests read) and printed at the
/// edge by the `print_*` functions below.
macro_rules! push_line {
    ($v:expr) => {
        $v.push(String::new())
    };
    ($v:expr, $($t:tt)*) => {
        $v.push(format!($($t)*))
    };
}

mod analysis;
mod connection_row;
mod load;
mod merge;
mod rr;
mod stream;
mod tcp;
pub mod tcp_info_file;
mod udp;
mod udp_cells;
mod udp_multi;

pub use analysis::*;
pub use connection_row::CONNECTION_HEADERS;
pub use load::*;
pub use merge::merge_summary;
pub use rr::*;
pub use stream::{JsonStream, StreamSink};
pub use tcp::*;
pub use udp::*;
pub use udp_cells::{
    CTS_JITTER_HEADERS, JitterFormat, MEDIA_HEADERS, PACKET_HEADERS, UDP_CONNECTION_HEADERS,
    UDP_HEADERS, interval_loss_pct,
};
pub use udp_multi::MultiReporter;

/// Prints console lines (the edge of the `*_lines` functions).
fn print_lines(lines: impl IntoIterator<Item = String>) {
    for l in lines {
        crate::out!("{l}");
    }
}

/// Prints the TCP run's final summary ([`summary_lines`]).
pub fn print_summary(rep: &crate::tcp::client::RunReport) {
    print_lines(summary_lines(rep));
}

/// Prints the UDP run's final summary ([`udp_summary_lines`]).
pub fn print_udp_summary(
    cfg: &crate::udp::client::UdpClientConfig,
    rep: &crate::udp::client::UdpReport,
    verbose: bool,
) {
    print_lines(udp_summary_lines(cfg, rep, verbose));
}

/// Prints the rate-bin table and the analysis ([`analysis_lines`]).
pub fn print_analysis(
    bins: &[crate::protocol::udp::analyze::Bin],
    a: &crate::protocol::udp::analyze::Analysis,
) {
    print_lines(analysis_lines(bins, a));
}

/// Prints `netrig load`'s summary ([`load_lines`]).
pub fn print_load(rep: &crate::load::run::LoadReport) {
    print_lines(load_lines(rep));
}

/// Prints a request/response run's results ([`rr_lines`]), then its ACE
/// histogram when it measured any round trip.
pub fn print_rr(
    r: &crate::rr::client::RrReport,
    stats: &crate::protocol::rr::hist::LatencyStats,
    all_bins: bool,
) {
    print_lines(rr_lines(r));
    if r.latency.is_some() {
        let title = rr_ace_title(r);
        let _ = write!(
            crate::output::console(),
            "{}",
            stats.render_ace(&title, all_bins)
        );
    }
}

/// Prints ping's closing summary ([`ping_summary_lines`]).
pub fn print_ping_summary(cfg: &crate::rr::client::RrConfig, r: &crate::rr::client::RrReport) {
    print_lines(ping_summary_lines(cfg, r));
}

/// Prints a crr run's results ([`crr_lines`]).
pub fn print_crr(r: &crate::rr::crr::CrrReport, first_failure: Option<&str>) {
    print_lines(crr_lines(r, first_failure));
}

/// What the kernel granted `whose` sockets (`--window`, `--mss`, ...):
/// the TCP-only fields only where the socket has them.
fn granted_line(whose: &str, g: &crate::protocol::sockopts::Granted) -> String {
    let opt = |v: Option<u64>| v.map_or("?".into(), crate::protocol::units::format_bytes);
    let mut parts = vec![
        format!("send buffer {}", opt(g.sndbuf)),
        format!("receive buffer {}", opt(g.rcvbuf)),
    ];
    if let Some(m) = g.mss {
        parts.push(format!("MSS at setup (TCP_MAXSEG) {m}"));
    }
    if let Some(c) = &g.congestion {
        parts.push(format!("congestion {c}"));
    }
    parts.push(format!("TOS 0x{:02x}", g.tos.unwrap_or(0)));
    format!("{whose} (as granted): {}", parts.join(", "))
}

/// A microsecond figure for a table cell, `-` when there is none.
fn opt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.1}"))
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

    /// Writes a line as it is (no columns) and flushes it.
    pub fn line(&mut self, line: &str) -> io::Result<()> {
        self.out.write_all(line.as_bytes())?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    /// Sends what this writer writes to memory, for a test to read.
    #[cfg(test)]
    pub(crate) fn capture(&mut self) -> Capture {
        let c = Capture::default();
        self.out = Box::new(c.clone());
        c
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
            let mut s = aligned(cells, &self.widths);
            s.push('\n');
            s.into_bytes()
        };
        self.out.write_all(&line)?;
        self.out.flush()
    }
}

/// What a console writer wrote, in memory (tests).
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl Capture {
    /// The text written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

#[cfg(test)]
impl Write for Capture {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Cells right-aligned in their widths, one space apart (a console row
/// without its newline).
fn aligned<S: AsRef<str>>(cells: &[S], widths: &[usize]) -> String {
    let mut s = String::new();
    for (i, c) in cells.iter().enumerate() {
        let w = widths.get(i).copied().unwrap_or(0);
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&format!("{:>w$}", c.as_ref()));
    }
    s
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
    /// `--title`, when given (iperf3's `title`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<&'a str>,
    /// The configuration as run.
    pub config: &'a C,
    /// What was measured (null when nothing was).
    pub result: Option<&'a R>,
    /// Why the run failed, when it did; `result` then holds what was
    /// measured before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a str>,
    /// The code of the server's refusal, when a refusal is the error: what
    /// a monitor matches (the text may change between versions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<crate::protocol::proto::ErrorCode>,
}

/// Writes a command's JSON envelope to `path` (see [`write_atomically`]).
pub fn write_envelope<C: Serialize, R: Serialize>(
    path: &Path,
    test: &str,
    config: &C,
    result: Option<&R>,
    error: Option<&str>,
) -> io::Result<()> {
    write_envelope_coded(path, test, config, result, error, None)
}

/// [`write_envelope`] with the code of the refusal that is the error.
pub fn write_envelope_coded<C: Serialize, R: Serialize>(
    path: &Path,
    test: &str,
    config: &C,
    result: Option<&R>,
    error: Option<&str>,
    error_code: Option<crate::protocol::proto::ErrorCode>,
) -> io::Result<()> {
    write_atomically(
        path,
        &Envelope {
            netrig: ENVELOPE_VERSION,
            version: env!("CARGO_PKG_VERSION"),
            test,
            title: crate::console::title(),
            config,
            result,
            error,
            error_code,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn read(path: &Path) -> (String, Value) {
        let text = std::fs::read_to_string(path).unwrap();
        let doc = serde_json::from_str(&text).unwrap();
        (text, doc)
    }

    #[test]
    fn the_envelope_says_what_ran_with_what_and_what_it_measured() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        write_envelope(
            &path,
            "udp",
            &json!({"rate": 5}),
            Some(&json!({"lost": 2})),
            None,
        )
        .unwrap();
        let (_, doc) = read(&path);
        assert_eq!(doc["netrig"], ENVELOPE_VERSION);
        assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(doc["test"], "udp");
        assert_eq!(doc["config"]["rate"], 5);
        assert_eq!(doc["result"]["lost"], 2);
        assert!(doc.get("error").is_none() && doc.get("error_code").is_none());
        // A failed run: its error, and nothing measured.
        write_envelope::<_, Value>(&path, "tcp", &json!({}), None, Some("refused")).unwrap();
        let (_, doc) = read(&path);
        assert_eq!(
            (&doc["test"], &doc["error"]),
            (&json!("tcp"), &json!("refused"))
        );
        assert_eq!(doc["result"], Value::Null);
    }

    #[test]
    fn a_refusal_carries_its_code() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        write_envelope_coded::<_, Value>(
            &path,
            "rr",
            &json!({}),
            None,
            Some("busy"),
            Some(crate::protocol::proto::ErrorCode::Refused),
        )
        .unwrap();
        let (_, doc) = read(&path);
        assert_eq!(doc["error_code"], "refused");
        assert_eq!(doc["error"], "busy");
    }

    #[test]
    fn a_document_is_pretty_json_ending_in_a_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.json");
        write_atomically(&path, &json!({"a": [1, 2]})).unwrap();
        let (text, doc) = read(&path);
        assert_eq!(doc, json!({"a": [1, 2]}));
        assert!(
            text.contains("\n  \"a\": [\n") && text.ends_with("}\n"),
            "{text}"
        );
    }
}
