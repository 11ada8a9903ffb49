//! The console summary of `netrig merge`.

use crate::protocol::merge::Merged;
use crate::protocol::units::format_bits_per_sec;

/// A few lines: what was merged, the totals, goodput (or the transaction
/// rate of rr, ping and crr), every latency's
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
    if let Some(last) = m.intervals.last() {
        // rr, ping, crr: the grid counts transactions; each slice's rate
        // times its width, over the span.
        let done: Option<f64> = m
            .intervals
            .iter()
            .map(|s| Some(s.transactions_per_sec? * (s.end_secs - s.start_secs)))
            .sum();
        if let Some(done) = done.filter(|_| last.end_secs > 0.0) {
            lines.push(format!(
                "  {:.1} transactions/s over {:.3} s of wall clock",
                done / last.end_secs,
                last.end_secs
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::merge::Slice;

    fn slice(start_secs: f64, end_secs: f64, tps: Option<f64>) -> Slice {
        Slice {
            start_secs,
            end_secs,
            bytes: 0,
            per_input: vec![0],
            goodput_bps: 0.0,
            transactions: tps.map(|t| (t * (end_secs - start_secs)) as u64),
            per_input_transactions: None,
            transactions_per_sec: tps,
        }
    }

    fn merged(kind: &str, intervals: Vec<Slice>, goodput_bps: Option<f64>) -> Merged {
        Merged {
            kind: kind.into(),
            inputs: Vec::new(),
            totals: [("sent".to_string(), 21)].into(),
            start_unix: Some(1.0),
            interval_secs: 0.5,
            intervals,
            goodput_bps,
            latency: Default::default(),
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_transactional_merge_prints_its_transaction_rate() {
        let m = merged(
            "rr",
            vec![slice(0.0, 0.5, Some(30.0)), slice(0.5, 0.75, Some(24.0))],
            None,
        );
        assert_eq!(
            merge_summary(&m),
            "merged 0 rr results\n  totals: sent 21\n  28.0 transactions/s over 0.750 s of wall clock"
        );
    }

    #[test]
    fn a_byte_merge_prints_goodput_only() {
        let m = merged("tcp", vec![slice(0.0, 2.0, None)], Some(8000.0));
        assert_eq!(
            merge_summary(&m),
            "merged 0 tcp results\n  totals: sent 21\n  goodput 8.00 kbit/s over 2.000 s of wall clock"
        );
        let zero = merged("rr", vec![slice(0.0, 0.0, Some(3.0))], None);
        assert_eq!(
            merge_summary(&zero),
            "merged 0 rr results\n  totals: sent 21"
        );
    }
}
