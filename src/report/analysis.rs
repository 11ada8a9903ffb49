//! Rate-profile output: the per-rate-bin table and the congestion analysis.

use std::io;
use std::path::Path;

use super::{RowWriter, aligned, opt_us};
use crate::units::format_bits_per_sec;

/// Columns of the sweep (rate bin) table.
pub const BIN_HEADERS: [&str; 9] = [
    "FromMbps",
    "AskedMbps",
    "OfferedMbps",
    "ReceivedMbps",
    "LossPct",
    "DelayMinUs",
    "DelayAvgUs",
    "DelayMaxUs",
    "Intervals",
];

const BIN_WIDTHS: [usize; 9] = [9, 10, 12, 13, 8, 11, 11, 11, 10];

fn bin_cells(b: &crate::udp::analyze::Bin) -> Vec<String> {
    vec![
        format!("{:.3}", b.from_bps / 1e6),
        format!("{:.3}", b.asked_bps / 1e6),
        format!("{:.3}", b.offered_bps / 1e6),
        format!("{:.3}", b.received_bps / 1e6),
        format!("{:.2}", b.loss_pct),
        opt_us(b.delay_min_us),
        opt_us(b.delay_avg_us),
        opt_us(b.delay_max_us),
        b.intervals.to_string(),
    ]
}

/// The rate-bin table and the analysis of a profile/sweep run.
pub fn analysis_lines(
    bins: &[crate::udp::analyze::Bin],
    a: &crate::udp::analyze::Analysis,
) -> Vec<String> {
    let mut lines = Vec::new();
    push_line!(lines);
    push_line!(
        lines,
        "Per asked-rate bin (UDP payload, Mbit/s: asked by the profile, offered = what left the sender; on the wire add the headers below):"
    );
    lines.push(aligned(&BIN_HEADERS, &BIN_WIDTHS));
    for b in bins {
        lines.push(aligned(&bin_cells(b), &BIN_WIDTHS));
    }
    push_line!(lines);
    match (a.congestion_bps, a.limiter) {
        (Some(c), Some(l)) => push_line!(
            lines,
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
        _ => push_line!(
            lines,
            "Analysis: no congestion point found (confidence {:.0}%)",
            100.0 * a.confidence
        ),
    }
    for e in &a.evidence {
        push_line!(lines, "  - {e}");
    }
    lines
}

/// Writes the rate-bin table as CSV (or aligned text).
pub fn write_bins(path: &Path, bins: &[crate::udp::analyze::Bin]) -> io::Result<()> {
    let mut w = RowWriter::create(path, &BIN_HEADERS, &BIN_WIDTHS)?;
    for b in bins {
        w.row(&bin_cells(b))?;
    }
    Ok(())
}
