//! The console summary of `netrig merge`.

use crate::merge::Merged;
use crate::units::format_bits_per_sec;

/// A few lines: what was merged, the totals, goodput, every latency's
/// percentiles and every input's errors.
pub fn merge_summary(m: &Merged) -> String {
    let mut lines = vec![format!("merged {} {} results", m.inputs.len(), m.kind)];
    let totals: Vec<String> = m.totals.iter().map(|(k, v)| format!("{k} {v}")).collect();
    lines.push(format!("  totals: {}", totals.join(", ")));
    if let (Some(g), Some(last)) = (m.goodput_bps, m.intervals.last()) {
        lines.push(format!(
            "  goodput {} over {:.3} s of wall clock",
            format_bits_per_sec(g),
            last.end_secs
        ));
    }
    for (name, s) in &m.latency {
        let p: Vec<String> = s
            .percentiles_us
            .iter()
            .map(|(n, v)| format!("{n} {v:.1}"))
            .collect();
        lines.push(format!(
            "  {name} (µs, {} samples): {}",
            s.count,
            p.join(", ")
        ));
    }
    for e in &m.errors {
        lines.push(format!("  error in {}: {}", e.input, e.error));
    }
    lines.join("\n")
}
