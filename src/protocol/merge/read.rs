//! What one result document says, by kind: its counters, latency
//! summaries, intervals, streams and errors, read from its JSON for
//! [`merge`](super::merge) to combine.

use serde_json::Value;
use std::collections::BTreeMap;

use super::InputError;

/// Counters that add, by kind: (name in the merged result, pointer in a result).
pub(super) fn counters(kind: &str) -> &'static [(&'static str, &'static str)] {
    match kind {
        "tcp" => &[
            ("sent_bytes", "/totals/sent"),
            ("received_bytes", "/totals/received"),
            ("completed", "/totals/completed"),
            ("net_errors", "/totals/net_errors"),
            ("data_errors", "/totals/data_errors"),
            ("cancelled", "/totals/cancelled"),
            ("retransmits", "/totals/retransmits"),
        ],
        "udp" => &[
            ("sent", "/totals/sent"),
            ("unique", "/totals/unique"),
            ("packets", "/totals/packets"),
            ("bytes", "/totals/bytes"),
            ("lost", "/totals/lost"),
            ("duplicates", "/totals/duplicates"),
            ("reordered", "/totals/reordered"),
            ("corrupt", "/totals/corrupt"),
            ("late", "/totals/late"),
        ],
        "crr" => &[
            ("transactions", "/transactions"),
            ("failed", "/failed"),
            ("cancelled", "/cancelled"),
        ],
        // rr and ping: summed over their runs.
        _ => &[
            ("sent", "/sent"),
            ("received", "/received"),
            ("late", "/late"),
            ("corrupt", "/corrupt"),
            ("lost_up", "/lost_up"),
            ("lost_down", "/lost_down"),
        ],
    }
}

pub(super) fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// The latency summaries of a result, by name.
pub(super) fn latencies<'a>(kind: &str, r: &'a Value) -> Vec<(String, &'a Value)> {
    let named = |n: &str, p: &str| r.pointer(p).map(|v| (n.to_string(), v));
    match kind {
        "tcp" => named("connection_times", "/connection_times")
            .into_iter()
            .collect(),
        "udp" => named("one_way_delay", "/totals").into_iter().collect(),
        "crr" => [
            named("handshake", "/handshake"),
            named("transaction", "/transaction"),
        ]
        .into_iter()
        .flatten()
        .collect(),
        _ => {
            let runs = runs(r);
            runs.iter()
                .enumerate()
                .filter_map(|(i, run)| {
                    let n = if runs.len() == 1 {
                        "rtt".to_string()
                    } else {
                        format!("rtt_{}_{}B", i + 1, run["size"])
                    };
                    run.get("latency").map(|l| (n, l))
                })
                .collect()
        }
    }
}

pub(super) fn runs(r: &Value) -> &[Value] {
    r["runs"].as_array().map_or(&[], Vec::as_slice)
}

/// A result's counters: its totals, or its runs' summed (rr, ping).
pub(super) fn input_totals(kind: &str, r: &Value) -> BTreeMap<String, u64> {
    let from = |v: &Value| {
        counters(kind)
            .iter()
            .map(|&(n, p)| (n.to_string(), v.pointer(p).and_then(Value::as_u64)))
            .collect::<Vec<_>>()
    };
    let mut out = BTreeMap::new();
    let parts: Vec<&Value> = match kind {
        "rr" | "ping" => runs(r).iter().collect(),
        _ => vec![r],
    };
    for part in parts {
        for (n, v) in from(part) {
            if let Some(v) = v {
                *out.entry(n).or_insert(0) += v;
            }
        }
    }
    out
}

/// Whether a kind's series counts transactions, not bytes.
pub(super) fn transactional(kind: &str) -> bool {
    matches!(kind, "rr" | "ping" | "crr")
}

/// An input's intervals as (start s, end s, bytes, or transactions for
/// [`transactional`] kinds), from its time zero. A crr run keeps no
/// intervals: it is one slice over its duration.
pub(super) fn slices(kind: &str, r: &Value) -> Vec<(f64, f64, f64)> {
    if kind == "crr" {
        return match (r["duration_secs"].as_f64(), r["transactions"].as_f64()) {
            (Some(d), Some(n)) if d >= 0.0 => vec![(0.0, d, n)],
            _ => Vec::new(),
        };
    }
    let Some(rows) = r["intervals"].as_array() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut prev = 0.0;
    for row in rows {
        let (end, bytes) = match kind {
            "tcp" => {
                let end = row["TimeSlice"].as_f64().unwrap_or(prev);
                // Rates are bytes per second over the slice.
                let bps =
                    row["SendBps"].as_f64().unwrap_or(0.0) + row["RecvBps"].as_f64().unwrap_or(0.0);
                (end, bps * (end - prev))
            }
            "rr" | "ping" => (
                row["end_secs"].as_f64().unwrap_or(prev),
                row["count"].as_f64().unwrap_or(0.0),
            ),
            _ => (
                row["time_slice"].as_f64().unwrap_or(prev),
                row["bytes"].as_f64().unwrap_or(0.0),
            ),
        };
        if end >= prev {
            out.push((prev, end, bytes));
            prev = end;
        }
    }
    out
}

/// A udp result's parts, each shaped as a one-stream result: itself, or
/// its streams' reports (`-P`, `--bidir`), each marked whether it runs the
/// other way than `main_reverse` (the configuration's direction).
pub(super) fn udp_parts<'a>(r: &'a Value, main_reverse: &Value) -> Vec<(bool, &'a Value)> {
    let Some(streams) = r["streams"].as_array() else {
        return vec![(false, r)];
    };
    let main = main_reverse.as_bool().unwrap_or(false);
    streams
        .iter()
        .filter(|s| s["report"].is_object())
        .map(|s| (s["reverse"].as_bool().unwrap_or(main) != main, &s["report"]))
        .collect()
}

/// An input's errors: the run's own, and what its servers reported.
pub(super) fn errors_of(name: &str, doc: &Value) -> Vec<InputError> {
    let mut out = Vec::new();
    let e = |error: String, code: Option<String>| InputError {
        input: name.to_string(),
        error,
        error_code: code,
    };
    if let Some(err) = doc["error"].as_str() {
        out.push(e(
            err.to_string(),
            doc["error_code"].as_str().map(str::to_string),
        ));
    }
    let r = &doc["result"];
    for s in r["server_errors"].as_array().into_iter().flatten() {
        out.push(e(format!("server {}: {}", text(&s[0]), text(&s[1])), None));
    }
    for s in r["refusals"].as_array().into_iter().flatten() {
        out.push(e(
            format!(
                "{} connections refused: {}",
                s["connections"],
                text(&s["message"])
            ),
            s["code"].as_str().map(str::to_string),
        ));
    }
    for s in r["lost_servers"].as_array().into_iter().flatten() {
        out.push(e(format!("server {} lost mid-test", text(s)), None));
    }
    if r["server_lost"].as_bool() == Some(true) {
        out.push(e("server lost mid-test".into(), None));
    }
    for run in runs(r) {
        if let Some(err) = run["error"].as_str() {
            out.push(e(format!("run of {} B: {err}", run["size"]), None));
        }
    }
    for s in r["streams"].as_array().into_iter().flatten() {
        if let Some(err) = s["error"].as_str() {
            out.push(e(format!("stream {}: {err}", s["index"]), None));
        }
    }
    out
}
