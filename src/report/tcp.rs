//! The TCP engine's output: status and connection tables, bursts, the summary.

use crate::net::tcpinfo::TcpInfoTotals;
use std::io;
use std::path::Path;

use super::connection_row::{CONNECTION_HEADERS, CONNECTION_WIDTHS, connection_cells};
use super::{RowWriter, granted_line};
use crate::protocol::outcome::ResultKind;
use crate::protocol::stats::IntervalRow;
use crate::protocol::units::{format_bits_per_sec, format_bytes};
use crate::tcp::client::{ConnectionRecord, Observer, RunReport};
use crate::tcp::config::TcpClientConfig;

/// Column widths of the status table.
pub const STATUS_WIDTHS: [usize; 7] = [10, 12, 12, 9, 9, 8, 9];
/// Widths of the console status table (rates with units).
const CONSOLE_STATUS_WIDTHS: [usize; 9] = [10, 14, 14, 9, 9, 8, 9, 6, 9];

/// Bytes sent and received after the `--omit` warm-up, and the seconds
/// they took.
pub fn after_omit(rep: &RunReport, o: &crate::tcp::client::Omitted) -> (u64, u64, f64) {
    (
        rep.totals.sent.saturating_sub(o.at.sent),
        rep.totals.received.saturating_sub(o.at.received),
        (rep.duration_secs - o.secs).max(1e-9),
    )
}

/// The client's observer: console table and optional files.
pub struct Reporter {
    verbosity: u8,
    /// Print each burst's end-to-end time (clocks synchronised).
    pub trip_times: bool,
    console: RowWriter,
    status: Option<RowWriter>,
    connections: Option<RowWriter>,
    /// `--tcp-info-file` (ctsTraffic -TcpInfoFilename).
    tcp_info: Option<RowWriter>,
    errors: Vec<io::Error>,
    /// The first failed connection's result detail: why the run failed,
    /// said even when failures are not printed one by one.
    first_failure: Option<String>,
    /// `--json-stream`: a line per interval and per connection.
    pub stream: super::StreamSink,
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
            tcp_info: None,
            errors: Vec::new(),
            first_failure: None,
            stream: super::StreamSink::default(),
        })
    }

    /// Opens ctsTraffic's TCP_INFO file (`--tcp-info-file`).
    pub fn tcp_info_file(&mut self, path: &Path) -> io::Result<()> {
        let h = super::tcp_info_file::headers();
        let w = super::tcp_info_file::widths();
        let f = RowWriter::create(path, &h, &w)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        self.tcp_info = Some(f);
        Ok(())
    }

    /// The first failed connection's reason, if one failed.
    pub fn first_failure(&self) -> Option<&str> {
        self.first_failure.as_deref()
    }

    /// Prints the settings banner and the table header.
    pub fn banner(&mut self, cfg: &TcpClientConfig, targets: &[String]) {
        if self.verbosity == 0 {
            return;
        }
        for l in banner_lines(cfg, targets, self.verbosity) {
            let _ = self.console.line(&l);
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
        let mut e = std::mem::take(&mut self.errors);
        e.extend(self.stream.take_errors());
        e
    }
}

impl Observer for Reporter {
    fn started(&mut self, cfg: &TcpClientConfig) {
        self.banner(cfg, &cfg.targets);
    }

    fn interval(&mut self, row: &IntervalRow) {
        self.stream.event("interval", row);
        let cells = row.cells();
        if self.verbosity >= 1 {
            if row.omitted {
                let mut c = row.console_cells().to_vec();
                c.push("(omitted)".into());
                let _ = self.console.row(&c);
            } else {
                let _ = self.console.row(&row.console_cells());
            }
        }
        if self.status.is_some() {
            self.note(|r| r.status.as_mut().map_or(Ok(()), |w| w.row(&cells)));
        }
    }

    fn connection(&mut self, rec: &ConnectionRecord) {
        self.stream.event("connection", rec);
        if matches!(
            rec.result.kind,
            ResultKind::NetworkError | ResultKind::DataError
        ) && rec.refused.is_none()
        {
            self.first_failure
                .get_or_insert_with(|| rec.result.detail.clone());
        }
        let show = match rec.result.kind {
            ResultKind::Success | ResultKind::Cancelled => self.verbosity >= 3,
            _ => self.verbosity >= 2,
        };
        if show {
            let _ = self.console.line(&connection_line(rec));
        }
        if self.verbosity >= 1 {
            for l in burst_lines(rec, self.trip_times) {
                let _ = self.console.line(&l);
            }
        }
        if self.connections.is_some() {
            let cells = connection_cells(rec);
            self.note(|r| r.connections.as_mut().map_or(Ok(()), |w| w.row(&cells)));
        }
        if self.tcp_info.is_some()
            && let Some(cells) = super::tcp_info_file::cells(rec)
        {
            self.note(|r| r.tcp_info.as_mut().map_or(Ok(()), |w| w.row(&cells)));
        }
    }
}

/// The settings banner (and with `-vv` ctsTraffic's settings block and
/// legend) printed before the table.
fn banner_lines(cfg: &TcpClientConfig, targets: &[String], verbosity: u8) -> Vec<String> {
    let mut lines = Vec::new();
    if cfg.iterations.is_none() && cfg.time_limit.is_none() {
        push_line!(
            lines,
            "Runs until Ctrl-C: no --iterations or --time (ctsTraffic's default)."
        );
    }
    let buffer = match cfg.buffer {
        crate::tcp::config::BufferSpec::Fixed(b) => {
            crate::protocol::units::format_bytes(u64::from(b))
        }
        crate::tcp::config::BufferSpec::Range(a, b) => format!(
            "{}..{} (random per connection)",
            crate::protocol::units::format_bytes(u64::from(a)),
            crate::protocol::units::format_bytes(u64::from(b))
        ),
    };
    let total = match (cfg.iterations, cfg.time_limit) {
        (Some(i), _) => {
            crate::protocol::units::count_of(i * u64::from(cfg.connections), "connection")
                + " in all"
        }
        (None, Some(t)) => format!("for {:.3} s", t.as_secs_f64()),
        (None, None) => "until Ctrl-C".into(),
    };
    let each = match cfg.transfer_max {
        Some(hi) => format!(
            "{}..{} (by connection)",
            crate::protocol::units::format_bytes(cfg.transfer),
            crate::protocol::units::format_bytes(hi)
        ),
        None => crate::protocol::units::format_bytes(cfg.transfer),
    };
    let limit = match cfg.rate {
        Some(r) => match r.bps_max {
            Some(hi) => format!(
                ", at most {}..{} (by connection)",
                format_bits_per_sec(r.bps as f64),
                format_bits_per_sec(hi as f64)
            ),
            None => format!(", at most {} each", format_bits_per_sec(r.bps as f64)),
        },
        None => String::new(),
    };
    push_line!(
        lines,
        "TCP {:?} to {}: {} at a time x {} each{}, {} buffers, verify {:?}; {}",
        cfg.pattern,
        targets.join(", "),
        cfg.connections,
        each,
        limit,
        buffer,
        cfg.verify,
        total
    );
    if verbosity >= 2 {
        // ctsTraffic's own settings block and legend, for those who know it.
        push_line!(lines, "Configured Settings");
        push_line!(lines, "    Protocol: TCP");
        push_line!(lines, "    IoPattern: {:?}", cfg.pattern);
        push_line!(lines, "    Level of verification: {:?}", cfg.verify);
        push_line!(lines, "    Buffer used for each IO request: {buffer}");
        push_line!(
            lines,
            "    Total transfer per connection: {} bytes",
            cfg.transfer
        );
        push_line!(lines, "    Connecting out to: {}", targets.join(", "));
        push_line!(
            lines,
            "    Connection limit (maximum established connections): {}",
            cfg.connections
        );
        push_line!(
            lines,
            "    Connection throttling rate (maximum pended connection attempts): {}",
            cfg.throttle
        );
        push_line!(lines);
        push_line!(lines, "Legend:");
        push_line!(lines, "* TimeSlice - (seconds) cumulative runtime");
        push_line!(
            lines,
            "* Send & Recv - bit/s transferred within the TimeSlice period (files: SendBps/RecvBps, bytes/s)"
        );
        push_line!(
            lines,
            "* In-Flight - count of established connections transmitting IO pattern data"
        );
        push_line!(
            lines,
            "* Completed - cumulative count of successfully completed IO patterns"
        );
        push_line!(
            lines,
            "* NetError - cumulative count of failed IO patterns due to network errors"
        );
        push_line!(
            lines,
            "* DataError - cumulative count of failed IO patterns due to data errors"
        );
    }
    lines
}

/// A connection's line as it ends (`-vv` for failures, `-vvv` for all).
fn connection_line(rec: &ConnectionRecord) -> String {
    format!(
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
    )
}

/// A connection's bursts: the receiver's timing and read sizes, the
/// sender's writes and TCP_INFO, side by side per burst.
fn burst_lines(rec: &ConnectionRecord, trip_times: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let mut i = 0;
    while i < rec.bursts.len() {
        let idx = rec.bursts[i].index;
        let same: Vec<&crate::protocol::proto::TcpBurst> = rec.bursts[i..]
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
        lines.push(line.trim_end_matches(';').to_string());
    }
    lines
}

/// The final summary (ctsTraffic's "Historic Connection Statistics").
pub fn summary_lines(rep: &RunReport) -> Vec<String> {
    let mut lines = Vec::new();
    let t = &rep.totals;
    let secs = rep.duration_secs.max(1e-9);
    push_line!(lines);
    push_line!(
        lines,
        "Historic Connection Statistics (all connections over the complete lifetime)"
    );
    push_line!(lines);
    push_line!(
        lines,
        "SuccessfulConnections [{}] NetworkErrors [{}] DataErrors [{}] Cancelled [{}]",
        t.completed,
        t.net_errors,
        t.data_errors,
        t.cancelled
    );
    for r in &rep.refusals {
        let (n, why) = (r.connections, &r.message);
        push_line!(lines, "Server refused {n} connection(s): {why}");
    }
    for (addr, why) in &rep.server_errors {
        push_line!(lines, "Server {addr} stopped the test: {why}");
    }
    push_line!(lines);
    push_line!(
        lines,
        "Total Bytes Recv : {} ({})",
        t.received,
        format_bytes(t.received)
    );
    push_line!(
        lines,
        "Total Bytes Sent : {} ({})",
        t.sent,
        format_bytes(t.sent)
    );
    push_line!(
        lines,
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
    push_line!(
        lines,
        "Goodput (received at the far end) : client->server {} / server->client {}",
        format_bits_per_sec(c2s as f64 * 8.0 / secs),
        format_bits_per_sec(t.received as f64 * 8.0 / secs)
    );
    if let Some(o) = &rep.omitted {
        let (sent, recv, secs) = after_omit(rep, o);
        push_line!(
            lines,
            "Goodput after the {:.3} s warm-up (-O; counted at the client) : client->server {} / server->client {}",
            o.secs,
            format_bits_per_sec(sent as f64 * 8.0 / secs),
            format_bits_per_sec(recv as f64 * 8.0 / secs)
        );
    }
    for (addr, sum) in &rep.servers {
        match sum {
            Some(s) => push_line!(
                lines,
                "Server {addr}: {}, {} succeeded, {} network errors, {} data errors, {} cancelled; received and verified {} bytes, sent {} bytes",
                crate::protocol::units::count_of(s.connections, "connection"),
                s.success,
                s.network_errors,
                s.data_errors,
                s.cancelled,
                s.bytes_received,
                s.bytes_sent
            ),
            None => push_line!(lines, "Server {addr}: no summary (control connection lost)"),
        }
    }
    if let Some(i) = &rep.tcp_info {
        push_line!(lines, "{}", tcp_info_line("client", i));
    }
    if let Some(i) = &rep.server_tcp_info {
        push_line!(lines, "{}", tcp_info_line("server", i));
    }
    push_line!(lines, "{}", rep.cpu.line("client", "server"));
    if let Some(v) = rep.cpu.verdict() {
        push_line!(lines, "{v}");
    }
    if let Some(g) = &rep.granted {
        push_line!(lines, "{}", granted_line("Socket", g));
    }
    for (addr, sum) in &rep.servers {
        if let Some(g) = sum.as_ref().and_then(|s| s.granted.as_ref()) {
            push_line!(
                lines,
                "{}",
                granted_line(&format!("Server {addr} socket"), g)
            );
        }
    }
    for addr in &rep.lost_servers {
        push_line!(
            lines,
            "Server {addr} closed the control connection mid-test: no new connections were started"
        );
    }
    if rep.interrupted {
        push_line!(lines, "(interrupted: in-flight connections were cancelled)");
    }
    lines
}

/// The client ends' TCP_INFO over the run, as iperf3's `Retr` and RTT.
pub(super) fn tcp_info_line(end: &str, i: &TcpInfoTotals) -> String {
    let ms = |us: f64| format!("{:.3} ms", us / 1e3);
    format!(
        "TCP_INFO ({end} ends, {}): Retr {} ({}), RTT mean {} max {} min {}, \
         Cwnd up to {} segments, snd_mss (smallest) {}; limited by receive window {:.3} s, \
         by send buffer {:.3} s",
        crate::protocol::units::count_of(i.connections, "connection"),
        i.retransmits,
        format_bytes(i.bytes_retrans),
        ms(i.rtt_mean_us),
        ms(f64::from(i.rtt_max_us)),
        ms(f64::from(i.min_rtt_us)),
        i.cwnd_max,
        i.snd_mss_min,
        i.rwnd_limited_us as f64 / 1e6,
        i.sndbuf_limited_us as f64 / 1e6,
    )
}

#[cfg(test)]
#[path = "tcp_tests.rs"]
mod tests;
