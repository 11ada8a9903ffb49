//! What `netrig report` draws for a merged result (`netrig merge`): the
//! goodput of every input and of all together on the common wall-clock
//! grid (transactions per second for rr, ping and crr, whose slices carry
//! no bytes), and the merged latency percentiles. Pure.

use serde_json::Value;

use super::plot::{View, arr, chart, f, ms_fact, percentile, percentile_bars, series};
use super::svg::{Chart, Style, Unit};

/// Whether a merged kind's grid counts transactions, not bytes (as
/// `crate::protocol::merge` lays rr, ping and crr results out).
fn transactional(kind: &str) -> bool {
    matches!(kind, "rr" | "ping" | "crr")
}

/// The series of the grid: the total (`total` per slice, already a rate)
/// and every input's (`per` per slice, an amount made a rate by `scale`
/// over the slice's width).
fn grid_chart(
    r: &Value,
    (total, per, scale): (&str, &str, f64),
    (title, caption): (&str, &str),
    y: (&str, Unit),
) -> Chart {
    let slices = arr(&r["intervals"]);
    let rate = |s: &Value, amount: Option<f64>| {
        let (a, b, n) = (f(&s["start_secs"])?, f(&s["end_secs"])?, amount?);
        (b > a).then(|| (b, n * scale / (b - a)))
    };
    let mut lines = vec![series(
        "total",
        Style::Line,
        slices
            .iter()
            .filter_map(|s| Some((f(&s["end_secs"])?, f(&s[total])?)))
            .collect(),
    )];
    for (i, input) in arr(&r["inputs"]).iter().enumerate() {
        let name = input["title"]
            .as_str()
            .or_else(|| input["name"].as_str())
            .unwrap_or("?");
        lines.push(series(
            name,
            Style::Line,
            slices
                .iter()
                .filter_map(|s| rate(s, f(&s[per][i])))
                .collect(),
        ));
    }
    chart(title, caption, ("time", Unit::Secs), y, lines)
}

/// Transactions per second over the whole grid: every slice's rate
/// times its width, over the grid's span.
fn transaction_rate(r: &Value) -> Option<f64> {
    let slices = arr(&r["intervals"]);
    let span = f(&slices.last()?["end_secs"])?;
    let done: f64 = slices
        .iter()
        .filter_map(|s| {
            Some(f(&s["transactions_per_sec"])? * (f(&s["end_secs"])? - f(&s["start_secs"])?))
        })
        .sum();
    (span > 0.0).then(|| done / span)
}

/// The view of a merged result.
pub fn view(r: &Value) -> View {
    let kind = r["kind"].as_str().unwrap_or("?");
    let over_time = if transactional(kind) {
        grid_chart(
            r,
            ("transactions_per_sec", "per_input_transactions", 1.0),
            (
                "Transactions per second over time, every input and the total",
                "On one wall-clock grid from the earliest start: the total is the round trips the server answered for all clients together; a client far below the others was treated unfairly or started late.",
            ),
            ("transactions/s", Unit::Plain),
        )
    } else {
        grid_chart(
            r,
            ("goodput_bps", "per_input", 8.0),
            (
                "Goodput over time, every input and the total",
                "On one wall-clock grid from the earliest start: the total is what the path carried for all clients together; a client far below the others was treated unfairly or started late.",
            ),
            ("goodput", Unit::Bps),
        )
    };
    let latency = r["latency"].as_object();
    let named: Vec<(&str, &Value)> = latency
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let percentiles = percentile_bars(
        "Merged latency percentiles",
        "Of every sample of every input, from their summed HDR histograms: exact, not an average of the inputs' percentiles.",
        "latency",
        &named,
    );
    let mut facts = vec![
        ("inputs".to_string(), arr(&r["inputs"]).len().to_string()),
        ("kind".to_string(), kind.to_string()),
    ];
    if transactional(kind) {
        if let Some(t) = transaction_rate(r) {
            facts.push(("transactions".into(), format!("{t:.1}/s")));
        }
    } else if let Some(g) = f(&r["goodput_bps"]) {
        facts.push((
            "goodput".into(),
            crate::protocol::units::format_bits_per_sec(g),
        ));
    }
    for (name, l) in &named {
        facts.push((
            format!("{name} p99"),
            ms_fact(&percentile(&l["percentiles_us"], "p99")),
        ));
    }
    facts.push(("errors".into(), arr(&r["errors"]).len().to_string()));
    View {
        facts,
        charts: vec![over_time, percentiles],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_input_has_a_goodput_series_beside_the_total() {
        let r = json!({
            "kind": "tcp", "goodput_bps": 12000.0,
            "inputs": [{"name": "a.json"}, {"name": "b.json", "title": "B"}],
            "intervals": [
                {"start_secs": 0.0, "end_secs": 1.0, "goodput_bps": 10000.0, "per_input": [1000, 250]},
                {"start_secs": 1.0, "end_secs": 1.5, "goodput_bps": 4000.0, "per_input": [250, 0]}
            ],
            "latency": {"connection_times": {"percentiles_us": [["p50", 1000.0], ["p99", 2000.0]]}},
            "errors": [{"input": "b.json", "error": "x"}]
        });
        let v = view(&r);
        let g = &v.charts[0];
        let names: Vec<&str> = g.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["total", "a.json", "B"]);
        assert_eq!(g.series[0].points, [(1.0, 10000.0), (1.5, 4000.0)]);
        assert_eq!(g.series[1].points, [(1.0, 8000.0), (1.5, 4000.0)]);
        assert_eq!(g.series[2].points, [(1.0, 2000.0), (1.5, 0.0)]);
        assert_eq!(v.charts[1].categories, ["p50", "p99"]);
        assert!(
            v.facts
                .contains(&("connection_times p99".into(), "2.000 ms".into()))
        );
        assert!(v.facts.contains(&("errors".into(), "1".into())));
        assert!(v.facts.contains(&("inputs".into(), "2".into())));
        assert!(v.facts.contains(&("goodput".into(), "12.00 kbit/s".into())));
        assert!(!v.facts.iter().any(|f| f.0 == "transactions"));
        assert_eq!(g.title, "Goodput over time, every input and the total");
        assert_eq!(g.y.1, Unit::Bps);
    }

    #[test]
    fn transactional_merges_chart_transactions_per_second_not_goodput() {
        for kind in ["rr", "ping", "crr"] {
            let r = json!({
                "kind": kind, "goodput_bps": null,
                "inputs": [{"name": "a.json"}, {"name": "b.json", "title": "B"}],
                "intervals": [
                    {"start_secs": 0.0, "end_secs": 0.5, "bytes": 0, "per_input": [0, 0],
                     "goodput_bps": 0.0, "transactions": 15, "per_input_transactions": [10, 5],
                     "transactions_per_sec": 30.0},
                    {"start_secs": 0.5, "end_secs": 0.75, "bytes": 0, "per_input": [0, 0],
                     "goodput_bps": 0.0, "transactions": 6, "per_input_transactions": [2, 4],
                     "transactions_per_sec": 24.0}
                ],
                "latency": {"rtt": {"percentiles_us": [["p50", 100.0], ["p99", 250.0]]}},
                "errors": []
            });
            let v = view(&r);
            let g = &v.charts[0];
            assert_eq!(
                g.title,
                "Transactions per second over time, every input and the total"
            );
            assert_eq!(g.y, ("transactions/s".to_string(), Unit::Plain));
            let names: Vec<&str> = g.series.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["total", "a.json", "B"], "{kind}");
            assert_eq!(g.series[0].points, [(0.5, 30.0), (0.75, 24.0)]);
            assert_eq!(g.series[1].points, [(0.5, 20.0), (0.75, 8.0)]);
            assert_eq!(g.series[2].points, [(0.5, 10.0), (0.75, 16.0)]);
            // (30 * 0.5 + 24 * 0.25) / 0.75 transactions a second.
            assert!(
                v.facts.contains(&("transactions".into(), "28.0/s".into())),
                "{kind}: {:?}",
                v.facts
            );
            assert!(!v.facts.iter().any(|f| f.0 == "goodput"), "{kind}");
            assert!(v.facts.contains(&("rtt p99".into(), "0.250 ms".into())));
        }
    }

    #[test]
    fn a_grid_of_no_time_has_no_transaction_rate() {
        let one = |end: f64| json!({"intervals": [{"start_secs": 0.0, "end_secs": end, "transactions_per_sec": 5.0}]});
        assert_eq!(transaction_rate(&one(0.0)), None);
        assert_eq!(transaction_rate(&one(2.0)), Some(5.0));
        assert_eq!(transaction_rate(&json!({"intervals": []})), None);
    }

    #[test]
    fn an_interval_of_no_length_gives_an_input_no_rate() {
        let r = json!({
            "kind": "tcp",
            "inputs": [{"name": "a.json"}],
            "intervals": [
                {"start_secs": 0.0, "end_secs": 1.0, "goodput_bps": 8.0, "per_input": [1]},
                {"start_secs": 1.0, "end_secs": 1.0, "goodput_bps": 0.0, "per_input": [1]}
            ]
        });
        let v = view(&r);
        assert_eq!(v.charts[0].series[1].points, [(1.0, 8.0)]);
    }
}
