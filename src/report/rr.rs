//! Request/response output: rr reports and spectra, ACE histograms, ping
//! lines and summaries, crr.

use std::io;
use std::path::Path;

use super::RowWriter;

/// Writes a UDP run's JSON report atomically.
/// Columns of a spectrum row (one request size).
pub const SPECTRUM_HEADERS: [&str; 12] = [
    "SizeBytes",
    "ReplyBytes",
    "Count",
    "MinUs",
    "MeanUs",
    "P50Us",
    "P99Us",
    "P99.9Us",
    "MaxUs",
    "StddevUs",
    "PerSec",
    "Lost",
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
pub fn write_hist_csv(
    path: &Path,
    stats: &crate::protocol::rr::hist::LatencyStats,
) -> io::Result<()> {
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

/// A latency summary's line.
fn summary_line(label: &str, s: &crate::protocol::rr::hist::Summary) -> String {
    format!(
        "{label}: count {} min {:.3} mean {:.3} max {:.3} stddev {:.3} variance {:.3} (us)",
        s.count, s.min_us, s.mean_us, s.max_us, s.stddev_us, s.variance_us2
    )
}

/// The line a request/response run starts with, printed before its first
/// round trip.
pub fn rr_banner(cfg: &crate::rr::client::RrConfig) -> String {
    format!(
        "Request/response over {}: {} B request, {} B reply, {}{}{}",
        transport_name(cfg.transport),
        cfg.size,
        cfg.reply,
        if let (Some(d), false) = (cfg.duration, cfg.iterations == crate::rr::client::UNBOUNDED) {
            format!(
                "{} measured + {} warm-up iterations or {:.3} s, whichever ends first",
                cfg.iterations,
                cfg.warmup,
                d.as_secs_f64()
            )
        } else if let Some(d) = cfg.duration {
            format!(
                "for {:.3} s after {} warm-up iterations",
                d.as_secs_f64(),
                cfg.warmup
            )
        } else if cfg.iterations == crate::rr::client::UNBOUNDED {
            format!("until stopped after {} warm-up iterations", cfg.warmup)
        } else {
            format!(
                "{} measured + {} warm-up iterations",
                cfg.iterations, cfg.warmup
            )
        },
        if cfg.nagle { ", Nagle on" } else { "" },
        if cfg.busy_poll { ", busy-poll" } else { "" }
    )
}

/// A transport as people write it.
pub fn transport_name(t: crate::rr::client::Transport) -> &'static str {
    use crate::rr::client::Transport;
    match t {
        Transport::Tcp => "TCP",
        Transport::Udp => "UDP",
        Transport::Sctp => "SCTP",
        Transport::SctpSeqpacket => "SCTP one-to-many",
    }
}

/// A request/response run's results (its banner went first): summary,
/// percentiles, TPS, losses; the ACE histogram follows them.
pub fn rr_lines(r: &crate::rr::client::RrReport) -> Vec<String> {
    let mut lines = Vec::new();
    if r.interrupted {
        push_line!(
            lines,
            "Interrupted after {} requests: the figures cover what was measured.",
            r.sent
        );
    }
    if let Some(w) = &r.warmup {
        lines.push(summary_line("Warm-up round trip", w));
    }
    let Some(l) = &r.latency else {
        push_line!(lines, "No measured round trips.");
        return lines;
    };
    lines.push(summary_line("Round trip", l));
    let p: Vec<String> = l
        .percentiles_us
        .iter()
        .map(|(n, v)| format!("{n} {v:.3}"))
        .collect();
    push_line!(lines, "Percentiles (us): {}", p.join(", "));
    push_line!(
        lines,
        "Transactions per second: {:.0}",
        r.transactions_per_sec
    );
    if let (Some(up), Some(down)) = (r.lost_up, r.lost_down) {
        push_line!(
            lines,
            "Lost: {up} requests on the way up, {down} replies on the way down; {} late replies",
            r.late
        );
    }
    if let Some(line) = dup_reorder_line(r) {
        push_line!(lines, "{line}");
    }
    if r.corrupt > 0 {
        push_line!(lines, "Corrupt replies: {}", r.corrupt);
    }
    if r.rx_stamped > 0 {
        push_line!(
            lines,
            "Kernel receive timestamps timed {} of {} replies",
            r.rx_stamped,
            r.received
        );
    }
    lines.extend(reply_marking_line(r));
    push_line!(lines);
    lines
}

/// The title of a run's ACE histogram.
pub fn rr_ace_title(r: &crate::rr::client::RrReport) -> String {
    format!(
        "netrig {} Synchronous Latency Test (Message Size {}, Reply Size {})",
        transport_name(r.transport),
        r.size,
        r.reply
    )
}

/// Duplicates and reordering each way (UDP), or `None` over a transport that
/// has neither. A direction the client could not learn (no server summary)
/// shows `?`.
fn dup_reorder_line(r: &crate::rr::client::RrReport) -> Option<String> {
    each_way(
        (r.duplicates_up, r.duplicates_down),
        (r.reordered_up, r.reordered_down),
    )
}

/// [`dup_reorder_line`] from its counts, (up, down) each.
fn each_way(
    (du, dd): (Option<u64>, Option<u64>),
    (ru, rd): (Option<u64>, Option<u64>),
) -> Option<String> {
    if [du, dd, ru, rd].iter().all(Option::is_none) {
        return None;
    }
    let n = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    let total = |a: Option<u64>, b: Option<u64>| n(a.zip(b).map(|(a, b)| a + b));
    Some(format!(
        "Duplicates: {} (up {}, down {}); reordered: {} (up {}, down {})",
        total(du, dd),
        n(du),
        n(dd),
        total(ru, rd),
        n(ru),
        n(rd)
    ))
}

/// One `ping` line per probe. The one-way split is shown as a fact only when
/// the clocks are trusted (`--synced`); otherwise with the clock offset's ±
/// bound, since a queue on one side of an estimated offset moves half its
/// delay to the other direction.
pub fn ping_line(size: u64, target: &str, p: &crate::rr::client::Probe) -> String {
    if p.duplicate {
        return format!("seq={} duplicate reply (DUP!; counted once)", p.seq);
    }
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

/// Ping's closing summary.
pub fn ping_summary_lines(
    cfg: &crate::rr::client::RrConfig,
    r: &crate::rr::client::RrReport,
) -> Vec<String> {
    let mut lines = Vec::new();
    let lost = r.sent.saturating_sub(r.received);
    push_line!(lines);
    push_line!(lines, "--- {} netrig ping statistics ---", cfg.target);
    push_line!(
        lines,
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
    if let Some(line) = dup_reorder_line(r) {
        push_line!(lines, "{line}");
    }
    if r.interrupted && cfg.iterations != crate::rr::client::UNBOUNDED {
        push_line!(lines, "interrupted before its {} probes", cfg.iterations);
    }
    if let Some(l) = &r.latency {
        push_line!(
            lines,
            "rtt min/avg/max/mdev = {:.3}/{:.3}/{:.3}/{:.3} ms",
            l.min_us / 1e3,
            l.mean_us / 1e3,
            l.max_us / 1e3,
            l.stddev_us / 1e3
        );
    }
    if let Some(o) = &r.offset {
        push_line!(
            lines,
            "one-way split uses a clock offset of {:.1} us +/- {:.1} us (estimated in band)",
            o.server_minus_client_ns as f64 / 1e3,
            o.uncertainty_ns as f64 / 1e3
        );
    }
    lines.extend(reply_marking_line(r));
    lines
}

/// The marking UDP replies arrived with, where any was set or seen.
fn reply_marking_line(r: &crate::rr::client::RrReport) -> Option<String> {
    r.reply_marking
        .as_ref()
        .filter(|m| !m.is_plain())
        .map(|m| super::marking_line("Reply marking", m))
}

/// Writes request/response reports as JSON.
/// The line a crr run starts with, printed before its first connection.
pub fn crr_banner(size: u64, reply: u64, parallel: u32) -> String {
    format!(
        "Connect/request/response/close over TCP: {size} B request, {reply} B reply, {parallel} in flight"
    )
}

/// A crr run's results (its banner went first).
pub fn crr_lines(r: &crate::rr::crr::CrrReport, first_failure: Option<&str>) -> Vec<String> {
    let mut lines = Vec::new();
    push_line!(
        lines,
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
            lines.push(summary_line(label, s));
            let p: Vec<String> = s
                .percentiles_us
                .iter()
                .map(|(n, v)| format!("{n} {v:.3}"))
                .collect();
            push_line!(lines, "  percentiles (us): {}", p.join(", "));
        }
    }
    if let Some(i) = &r.tcp_info {
        push_line!(lines, "{}", super::tcp::tcp_info_line("client", i));
    }
    if let Some(i) = &r.server_tcp_info {
        push_line!(lines, "{}", super::tcp::tcp_info_line("server", i));
    }
    if let Some(f) = first_failure {
        push_line!(lines, "First failure: {f}");
    }
    if r.interrupted {
        push_line!(
            lines,
            "Interrupted: stopped before its count or time; {} transactions in flight were cancelled",
            r.cancelled
        );
    }
    lines
}

#[cfg(test)]
#[path = "rr_tests.rs"]
mod lines_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_and_reordering_each_way() {
        assert_eq!(
            each_way((None, None), (None, None)),
            None,
            "TCP has neither"
        );
        assert_eq!(
            each_way((None, Some(3)), (None, Some(1))).as_deref(),
            Some("Duplicates: ? (up ?, down 3); reordered: ? (up ?, down 1)")
        );
        assert_eq!(
            each_way((Some(20), Some(3)), (Some(4), Some(1))).as_deref(),
            Some("Duplicates: 23 (up 20, down 3); reordered: 5 (up 4, down 1)")
        );
    }
}
