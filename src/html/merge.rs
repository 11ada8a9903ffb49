//! What `netrig report` draws for a merged result (`netrig merge`): the
//! goodput of every input and of all together on the common wall-clock
//! grid, and the merged latency percentiles. Pure.

use serde_json::Value;

use super::plot::{View, arr, chart, f, ms_fact, percentile, percentile_bars, series};
use super::svg::{Style, Unit};

/// The view of a merged result.
pub fn view(r: &Value) -> View {
    let slices = arr(&r["intervals"]);
    let rate = |s: &Value, bytes: Option<f64>| {
        let (a, b, n) = (f(&s["start_secs"])?, f(&s["end_secs"])?, bytes?);
        (b > a).then(|| (b, n * 8.0 / (b - a)))
    };
    let mut lines = vec![series(
        "total",
        Style::Line,
        slices
            .iter()
            .filter_map(|s| Some((f(&s["end_secs"])?, f(&s["goodput_bps"])?)))
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
                .filter_map(|s| rate(s, f(&s["per_input"][i])))
                .collect(),
        ));
    }
    let goodput = chart(
        "Goodput over time, every input and the total",
        "On one wall-clock grid from the earliest start: the total is what the path carried for all clients together; a client far below the others was treated unfairly or started late.",
        ("time", Unit::Secs),
        ("goodput", Unit::Bps),
        lines,
    );
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
        (
            "kind".to_string(),
            r["kind"].as_str().unwrap_or("?").to_string(),
        ),
    ];
    if let Some(g) = f(&r["goodput_bps"]) {
        facts.push(("goodput".into(), crate::units::format_bits_per_sec(g)));
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
        charts: vec![goodput, percentiles],
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
