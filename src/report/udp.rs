//! The UDP engine's output: interval and media tables, per-datagram rows,
//! the banner, the summary and the sender-limited warning.

use std::io;
use std::path::Path;

use super::udp_cells::*;
use super::{RowWriter, opt_us};
use crate::protocol::units::format_bits_per_sec;

/// The one-line description of a UDP stream printed before its table.
pub fn udp_banner(s: &crate::protocol::proto::UdpSpec) -> String {
    let dir = if s.reverse {
        "server -> client"
    } else {
        "client -> server"
    };
    if let Some(m) = s.media
        && let Some(v) = m.varying
    {
        return format!(
            "UDP {dir}: isochronous, {} frames a second of {} B mean ({}), {} B standard deviation, as {} B datagrams, for {:.3} s",
            m.fps,
            m.frame_bytes,
            format_bits_per_sec(m.frame_bytes as f64 * 8.0 * f64::from(m.fps)),
            v.stdev_bytes,
            s.size,
            s.duration_ms as f64 / 1e3
        );
    }
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
            format_bits_per_sec(s.steady_rate_bps()),
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

/// Creates a row file, naming it in any error.
fn open_rows(p: &Path, h: &[&str], w: &[usize]) -> io::Result<RowWriter> {
    RowWriter::create(p, h, w)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
}

/// The UDP client's observer: console table and optional files.
pub struct UdpReporter {
    verbosity: u8,
    /// Lines printed, with the table header, once the server has accepted.
    banner: Vec<String>,
    header: Vec<&'static str>,
    media: bool,
    last_slice: f64,
    console: RowWriter,
    status: Option<RowWriter>,
    packets: Option<RowWriter>,
    /// Per-datagram rows kept in memory until [`UdpReporter::finish`].
    held: Option<Vec<crate::udp::receive::PacketRow>>,
    /// Print each burst's end-to-end time (clocks synchronised).
    trip_times: bool,
    /// ctsTraffic's jitter columns instead of netrig's.
    cts_jitter: Option<CtsJitter>,
    /// The stream's length, s: slices ending after it have no stream
    /// running (ctsTraffic's `Streams` column).
    stream_secs: f64,
    /// `--connection-file`: one row per stream.
    connections: Option<RowWriter>,
    errors: Vec<io::Error>,
    /// `--json-stream`: a line per interval and per burst.
    pub stream: super::StreamSink,
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

    fn write_packet(&mut self, p: &crate::udp::receive::PacketRow) {
        if let (Some(w), Some(cts)) = (self.packets.as_mut(), self.cts_jitter.as_mut()) {
            if let Err(e) = w.row(&cts.cells(p)) {
                self.errors.push(e);
            }
        } else if let Some(w) = self.packets.as_mut() {
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
        let open =
            |p: Option<&Path>, h: &[&str], w: &[usize]| p.map(|p| open_rows(p, h, w)).transpose();
        // -v (verbosity 2) shows every column; the default fits 100 characters.
        let all = verbosity >= 2;
        let cw: Vec<usize> = if media {
            w.to_vec()
        } else {
            udp_console_pick(&UDP_CONSOLE_WIDTHS, all)
        };
        let r = UdpReporter {
            verbosity,
            banner: Vec::new(),
            header: if media {
                MEDIA_HEADERS.to_vec()
            } else {
                udp_console_pick(&udp_console_headers(), all)
            },
            media,
            last_slice: 0.0,
            console: RowWriter::console(crate::output::console(), &cw),
            status: open(status_file, h, w)?,
            packets: open(jitter_file, &PACKET_HEADERS, &PACKET_WIDTHS)?,
            held: None,
            trip_times: false,
            cts_jitter: None,
            stream_secs: f64::INFINITY,
            connections: None,
            errors: Vec::new(),
            stream: super::StreamSink::default(),
        };
        Ok(r)
    }

    /// Output errors seen so far.
    pub fn take_errors(&mut self) -> Vec<io::Error> {
        let mut e = std::mem::take(&mut self.errors);
        e.extend(self.stream.take_errors());
        e
    }

    /// Lines to print before the table, once the server has accepted.
    pub fn set_banner(&mut self, lines: Vec<String>) {
        self.banner = lines;
    }

    /// Writes the per-datagram file in ctsTraffic's columns (reopening it
    /// with their header).
    pub fn cts_jitter_file(&mut self, path: &Path) -> io::Result<()> {
        self.packets = Some(open_rows(path, &CTS_JITTER_HEADERS, &CTS_JITTER_WIDTHS)?);
        self.cts_jitter = Some(CtsJitter::default());
        Ok(())
    }

    /// The stream's length, for the `Streams` column.
    pub fn stream_secs(&mut self, secs: f64) {
        self.stream_secs = secs;
    }

    /// Opens the UDP connection file.
    pub fn connection_file(&mut self, path: &Path) -> io::Result<()> {
        self.connections = Some(open_rows(
            path,
            &UDP_CONNECTION_HEADERS,
            &UDP_CONNECTION_WIDTHS,
        )?);
        Ok(())
    }

    /// Writes the stream's row to the connection file, if one is open.
    pub fn connection(&mut self, rep: &crate::udp::client::UdpReport) {
        let Some(w) = self.connections.as_mut() else {
            return;
        };
        let cells = connection_cells(rep);
        if let Err(e) = w.row(&cells) {
            self.errors.push(e);
        }
    }
}

impl crate::udp::client::UdpObserver for UdpReporter {
    fn started(&mut self) {
        if self.verbosity >= 1 {
            for l in &self.banner {
                let _ = self.console.line(l);
            }
            // The console is not an output file: a closed stdout is not an error.
            let _ = self.console.row(&self.header);
        }
    }

    fn interval(&mut self, iv: &crate::protocol::udp::track::UdpInterval) {
        self.stream.event("interval", iv);
        let secs = iv.time_slice - self.last_slice;
        let cells = if self.media {
            let running = iv.time_slice <= self.stream_secs + 1e-3;
            media_cells(iv, secs, u32::from(running))
        } else {
            udp_cells(iv)
        };
        self.last_slice = iv.time_slice;
        if self.verbosity >= 1 {
            let mut shown = if self.media {
                cells.clone()
            } else {
                udp_console_pick(&udp_console_cells(iv, secs), self.verbosity >= 2)
            };
            if iv.omitted {
                shown.push("(omitted)".into());
            }
            let _ = self.console.row(&shown);
        }
        if let Some(w) = self.status.as_mut()
            && let Err(e) = w.row(&cells)
        {
            self.errors.push(e);
        }
    }

    fn burst(&mut self, b: &crate::protocol::udp::track::BurstReport) {
        self.stream.event("burst", b);
        if self.verbosity == 0 {
            return;
        }
        let _ = self.console.line(&burst_line(b, self.trip_times));
    }

    fn packet(&mut self, p: &crate::udp::receive::PacketRow) {
        match self.held.as_mut() {
            Some(h) => h.push(p.clone()),
            None => self.write_packet(p),
        }
    }
}

/// A burst's line: the receiver's timing, loss and read sizes.
fn burst_line(b: &crate::protocol::udp::track::BurstReport, trip_times: bool) -> String {
    let sizes: Vec<String> = b
        .read_sizes
        .iter()
        .map(|(s, n)| format!("{s}B x{n}"))
        .collect();
    format!(
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
        if trip_times {
            format!(", trip {:.3} ms", b.trip_ms)
        } else {
            String::new()
        },
        sizes.join(" ")
    )
}

/// The UDP run's final summary; `verbose` adds the delay histogram (which the
/// JSON report always has).
pub fn udp_summary_lines(
    cfg: &crate::udp::client::UdpClientConfig,
    rep: &crate::udp::client::UdpReport,
    verbose: bool,
) -> Vec<String> {
    let mut lines = Vec::new();
    push_line!(lines);
    match &rep.offset {
        Some(o) => push_line!(
            lines,
            "Clocks: not synchronised; server-client offset estimated in band as {:.1} us +/- {:.1} us (delays below carry that uncertainty)",
            o.server_minus_client_ns as f64 / 1e3,
            o.uncertainty_ns as f64 / 1e3
        ),
        None => push_line!(
            lines,
            "Clocks: trusted as synchronised (--synced, or --trip-times, which implies it); delays are absolute"
        ),
    }
    if cfg.spec.offset_comp_ns != 0 {
        push_line!(
            lines,
            "Delay compensation: {:+.1} us added",
            cfg.spec.offset_comp_ns as f64 / 1e3
        );
    }
    if let Some(s) = &rep.sender {
        push_line!(
            lines,
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
    if let Some(c) = &rep.cpu {
        let (me, peer) = match cfg.spec.reverse {
            true => ("receiver", "sender"),
            false => ("sender", "receiver"),
        };
        push_line!(lines, "{}", c.line(me, peer));
        if let Some(v) = c.verdict() {
            push_line!(lines, "{v}");
        }
    }
    let Some(t) = &rep.totals else {
        push_line!(lines, "Receiver: no totals (the stream did not finish)");
        return lines;
    };
    // The stream's own duration (the sender's), not the drain after it,
    // nor the --omit warm-up.
    let omit = cfg.spec.omit_ms as f64 / 1e3;
    let secs = (rep
        .sender
        .as_ref()
        .map_or(rep.duration_secs, |s| s.duration_secs)
        - omit)
        .max(1e-9);
    if t.omitted > 0 {
        push_line!(
            lines,
            "Omitted: the first {omit:.3} s ({} datagrams received) are a warm-up, left out of everything below",
            t.omitted
        );
    }
    push_line!(
        lines,
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
    push_line!(
        lines,
        "One-way delay (us): min {} avg {} max {}; jitter {:.1} us",
        opt_us(t.delay_min_us),
        opt_us(t.delay_avg_us),
        opt_us(t.delay_max_us),
        t.jitter_us
    );
    if let Some(note) = early_note(t, rep.offset.as_ref()) {
        push_line!(lines, "{note}");
    }
    if !t.percentiles_us.is_empty() {
        let p: Vec<String> = t
            .percentiles_us
            .iter()
            .map(|(n, v)| format!("{n} {v:.1}"))
            .collect();
        push_line!(lines, "Delay percentiles (us): {}", p.join(", "));
    }
    if verbose && !t.histogram.is_empty() {
        push_line!(
            lines,
            "Delay histogram (us, datagrams; the buckets that hold any):"
        );
        for (lo, hi, n) in &t.histogram {
            push_line!(lines, "  {lo:>10.1} - {hi:<10.1} {n}");
        }
    }
    if let Some(f) = &t.frames {
        push_line!(
            lines,
            "Frames: {} completed, {} dropped, {} repeated, {} errors",
            f.completed,
            f.dropped,
            f.repeated,
            f.errors
        );
    }
    if let Some(m) = t.marking.as_ref().filter(|m| !m.is_plain()) {
        push_line!(lines, "{}", marking_line("Marking", m));
    }
    if !cfg.spec.sock.is_default() {
        push_line!(lines, "{}", super::granted_line("Socket", &rep.granted));
    }
    if rep.server_lost {
        push_line!(lines, "(the server was lost before the test finished)");
    }
    if rep.interrupted {
        push_line!(lines, "(interrupted)");
    }
    lines
}

/// What datagrams that arrived "before" they were sent say about the
/// delays (`None` when none did): the clock offset is off by at least that
/// much, so no delay above is exact to better than it.
pub(super) fn early_note(
    t: &crate::protocol::udp::track::UdpTotals,
    offset: Option<&crate::protocol::udp::clock::Offset>,
) -> Option<String> {
    let by = t.below_zero_by_us.filter(|_| t.delays_below_zero > 0)?;
    let clock = match offset {
        Some(o) => format!(
            "the clock offset estimate (+/- {:.1} us) is off by at least that",
            o.uncertainty_ns as f64 / 1e3
        ),
        None => "the clocks are not as synchronised as --synced trusts".into(),
    };
    Some(format!(
        "Early: {} datagrams arrived up to {by:.1} us before they were sent by these clocks: {clock}, so the delays may read up to that much short; theirs count as 0",
        t.delays_below_zero
    ))
}

/// A TOS byte as DSCP and ECN, e.g. `0xba (EF, ECT(0))`.
fn tos_label(tos: u8) -> String {
    let dscp = crate::protocol::sockopts::dscp_label(tos >> 2)
        .unwrap_or_else(|| format!("DSCP {}", tos >> 2));
    let ecn = crate::protocol::udp::marks::Ecn::of(tos).name();
    format!("0x{tos:02x} ({dscp}, {ecn})")
}

/// The receiver's account of the marking, in one line headed `what`.
pub fn marking_line(what: &str, m: &crate::protocol::udp::marks::Marking) -> String {
    let seen: Vec<String> = m
        .seen
        .iter()
        .map(|s| format!("{} x{}", tos_label(s.tos), s.datagrams))
        .collect();
    format!(
        "{what}: sent {}; arrived {}; DSCP changed on {}, ECN CE-marked {}, ECN cleared {}, other ECN changes {}",
        tos_label(m.sent_tos),
        seen.join(", "),
        m.dscp_changed,
        m.ecn_ce,
        m.ecn_cleared,
        m.ecn_other
    )
}

/// The warning for a sender that fell more than 1% short of its schedule
/// (`None` when it kept up).
pub fn sender_limited_warning(s: &crate::protocol::udp::sent::SenderReport) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::udp::track::UdpInterval;

    #[test]
    fn interval_loss_counts_drops_over_what_the_interval_accounts_for() {
        let iv = |packets, duplicates, drops| UdpInterval {
            packets,
            duplicates,
            drops,
            ..Default::default()
        };
        assert_eq!(interval_loss_pct(&iv(90, 0, 10)), 10.0);
        // Duplicates are not datagrams sent; late fills (negative drops) are no loss.
        assert_eq!(interval_loss_pct(&iv(95, 5, 10)), 10.0);
        assert_eq!(interval_loss_pct(&iv(100, 0, -3)), 0.0);
        assert_eq!(interval_loss_pct(&iv(0, 0, 0)), 0.0);
        assert_eq!(interval_loss_pct(&iv(0, 0, 4)), 100.0);
    }

    #[test]
    fn console_cells_show_the_rate_with_units_and_the_loss() {
        let iv = UdpInterval {
            time_slice: 2.5,
            bytes: 1_000_000,
            packets: 900,
            drops: 100,
            ..Default::default()
        };
        let c = udp_console_cells(&iv, 0.5);
        assert_eq!(c.len(), udp_console_headers().len());
        assert_eq!((c[0].as_str(), c[1].as_str()), ("2.500", "16.00 Mbit/s"));
        assert_eq!((c[2].as_str(), c[5].as_str()), ("1000000", "10.00"));
    }

    #[test]
    fn the_sender_limited_warning_gives_both_rates() {
        use crate::protocol::udp::sent::SenderReport;
        let mut s = SenderReport {
            bytes: 900,
            asked_bytes: 1000,
            asked_bps: 8e6,
            achieved_bps: 7.2e6,
            ..Default::default()
        };
        assert_eq!(sender_limited_warning(&s), None);
        s.sender_limited = true;
        let w = sender_limited_warning(&s).unwrap();
        assert!(w.starts_with("sender-limited: the schedule asked for 1000 bytes (8.00 Mbit/s), 900 bytes (7.20 Mbit/s)"), "{w}");
        assert!(w.contains("10.0% short"), "{w}");
    }

    #[test]
    fn console_headers_add_rate_and_loss_to_the_files() {
        let h = udp_console_headers();
        assert_eq!(h.len(), UDP_HEADERS.len() + 2);
        assert_eq!((h[1], h[5]), ("Rate", "Loss%"));
        assert_eq!(h[4], "Drops");
    }
}

#[cfg(test)]
#[path = "udp_tests.rs"]
pub(super) mod console_tests;
