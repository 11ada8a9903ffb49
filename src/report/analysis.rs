//! Rate-profile output: the per-rate-bin table and the congestion analysis.

use std::io;
use std::path::Path;

use super::{RowWriter, aligned, opt_us};
use crate::protocol::units::format_bits_per_sec;

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

fn bin_cells(b: &crate::protocol::udp::analyze::Bin) -> Vec<String> {
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
    bins: &[crate::protocol::udp::analyze::Bin],
    a: &crate::protocol::udp::analyze::Analysis,
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
pub fn write_bins(path: &Path, bins: &[crate::protocol::udp::analyze::Bin]) -> io::Result<()> {
    let mut w = RowWriter::create(path, &BIN_HEADERS, &BIN_WIDTHS)?;
    for b in bins {
        w.row(&bin_cells(b))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::udp::analyze::{Analysis, Bin, Limiter};

    fn bin() -> Bin {
        Bin {
            from_bps: 1e6,
            asked_bps: 1.5e6,
            offered_bps: 1.25e6,
            received_bps: 1_000_500.0,
            loss_pct: 12.345,
            delay_min_us: Some(10.0),
            delay_avg_us: None,
            delay_max_us: Some(30.25),
            intervals: 4,
        }
    }

    fn analysis() -> Analysis {
        Analysis {
            congestion_bps: Some(8e6),
            congestion_wire_bps: Some(8.4e6),
            frame_overhead_bytes: 42,
            congestion_size: Some(1000.0),
            congestion_at: Some(3.5),
            settled_bps: None,
            limiter: Some(Limiter::Policing),
            burst_bytes: Some(15000.0),
            confidence: 0.8,
            evidence: vec!["loss rose".into()],
        }
    }

    #[test]
    fn the_table_gives_each_bin_in_mbits_and_the_analysis_its_point_and_limiter() {
        let l = analysis_lines(&[bin()], &analysis());
        assert_eq!(l[0], "");
        assert_eq!(l[2].split_whitespace().next(), Some("FromMbps"));
        assert_eq!(
            l[3].split_whitespace().collect::<Vec<_>>(),
            [
                "1.000", "1.500", "1.250", "1.000", "12.35", "10.0", "-", "30.2", "4"
            ]
        );
        assert_eq!(l[3].len(), l[2].len(), "{l:?}");
        assert_eq!(l[4], "");
        assert_eq!(
            l[5],
            "Analysis: congestion from t=3.50 s at 8.00 Mbit/s of UDP payload (8.40 Mbit/s on the wire with 42 B of UDP/IPv4/Ethernet headers per 1000 B datagram); limiter: Policing, committed burst ~15000 B; confidence 80%"
        );
        assert_eq!(l[6], "  - loss rose");
        assert_eq!(l.len(), 7);
        let mut a = analysis();
        a.limiter = None;
        let l = analysis_lines(&[], &a);
        assert_eq!(l[4], "Analysis: no congestion point found (confidence 80%)");
    }

    #[test]
    fn the_bin_file_has_the_header_and_a_row_per_bin() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bins.csv");
        write_bins(&p, &[bin(), bin()]).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("FromMbps,AskedMbps,"), "{text}");
        assert_eq!(lines[1], "1.000,1.500,1.250,1.000,12.35,10.0,-,30.2,4");
    }
}
