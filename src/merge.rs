//! `netrig merge`: results of one test kind from many clients (or runs) as
//! one. Counts and bytes add; intervals are laid on one wall-clock grid
//! (each result's `start_unix` plus its own interval times) and each grid
//! slice's goodput is what all clients moved in it; latency percentiles
//! come from the sum of the results' HDR histograms ([`crate::hdr`]), so
//! they are those of every sample together, never an average of
//! percentiles. rr, ping and crr results lay their transactions on the
//! grid the same way (each rr or ping interval row, a crr run as one even
//! slice). Pure: parsed documents in, a merged result out.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use thiserror::Error;

use crate::rr::hist::Summary;

/// The kinds that merge, and what must be equal for two results to merge:
/// the direction and shape of the traffic (config keys, as JSON pointers).
const KINDS: &[(&str, &[&str])] = &[
    ("tcp", &["/pattern"]),
    ("udp", &["/spec/reverse"]),
    ("crr", &["/pattern", "/push_bytes", "/pull_bytes"]),
    ("rr", &["/transport", "/size", "/reply"]),
    ("ping", &["/transport", "/size", "/reply"]),
];

/// Counters that add, by kind: (name in the merged result, pointer in a result).
fn counters(kind: &str) -> &'static [(&'static str, &'static str)] {
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

/// Why results cannot be merged.
#[derive(Debug, Error, PartialEq)]
pub enum MergeError {
    /// Nothing given.
    #[error("nothing to merge")]
    Empty,
    /// Not a netrig result envelope.
    #[error("{0}: not a netrig result (no \"netrig\" and \"test\" fields)")]
    NotAResult(String),
    /// A kind that does not merge.
    #[error("{name}: a {kind} result; netrig merge combines tcp, udp, crr, rr and ping results")]
    Unsupported { name: String, kind: String },
    /// Two kinds.
    #[error("{name} is a {kind} result, {first} a {first_kind} result: merge results of one kind")]
    MixedKinds {
        name: String,
        kind: String,
        first: String,
        first_kind: String,
    },
    /// Two configurations that measure different things.
    #[error(
        "{name}: config {key} is {value}, {first} has {first_value}: only runs of one configuration merge"
    )]
    Incompatible {
        name: String,
        key: String,
        value: String,
        first: String,
        first_value: String,
    },
    /// A result whose shape is not what its kind writes.
    #[error("{name}: {what}")]
    Malformed { name: String, what: String },
}

/// Why latency summaries cannot be merged into one (the merge goes on
/// without their percentiles, and says why).
#[derive(Debug, Error)]
pub enum SummaryError {
    /// An input whose summary carries no histogram.
    #[error("{0} has no HDR histogram (a result of an older netrig)")]
    NoHistogram(String),
    /// An input whose histogram does not decode.
    #[error("{who}: {source}")]
    BadHistogram {
        who: String,
        #[source]
        source: crate::hdr::HdrError,
    },
    /// Histograms that do not add up (ranges no histogram can hold).
    #[error("{0}")]
    Sum(#[source] crate::hdr::HdrError),
}

/// One input as the merged result lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InputInfo {
    /// The name it was given (its file).
    pub name: String,
    /// Its `--title`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its time zero on the wall clock, Unix seconds.
    pub start_unix: Option<f64>,
    /// How long it ran, s.
    pub duration_secs: Option<f64>,
    /// Its own counters.
    pub totals: BTreeMap<String, u64>,
}

/// An input's error, kept with its origin.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InputError {
    /// Which input.
    pub input: String,
    /// What it said.
    pub error: String,
    /// The server's refusal code, when the error is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
}

/// One slice of the common wall-clock grid.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Slice {
    /// Seconds since the merged start (the earliest input's time zero).
    pub start_secs: f64,
    pub end_secs: f64,
    /// Bytes every input moved in the slice, and each input's (in input
    /// order); 0 for rr, ping and crr, whose series is `transactions`.
    pub bytes: u64,
    pub per_input: Vec<u64>,
    /// `bytes` as bits per second over the slice.
    pub goodput_bps: f64,
    /// rr, ping, crr: transactions (answered round trips) every input
    /// completed in the slice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactions: Option<u64>,
    /// Each input's, in input order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_input_transactions: Option<Vec<u64>>,
    /// `transactions` per second of the slice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactions_per_sec: Option<f64>,
}

/// The merged result (the envelope's `result` when `test` is `merge`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Merged {
    /// The inputs' test kind.
    pub kind: String,
    /// Every input, in the order given.
    pub inputs: Vec<InputInfo>,
    /// The inputs' counters, added.
    pub totals: BTreeMap<String, u64>,
    /// The earliest input's time zero, Unix seconds.
    pub start_unix: Option<f64>,
    /// The grid's step, s.
    pub interval_secs: f64,
    /// The inputs' intervals on one wall-clock grid.
    pub intervals: Vec<Slice>,
    /// Bits per second over the whole merged span (tcp, udp).
    pub goodput_bps: Option<f64>,
    /// Latencies of every sample of every input, by name, exact.
    pub latency: BTreeMap<String, Summary>,
    /// Every input's errors, each with its origin.
    pub errors: Vec<InputError>,
    /// What could not be merged exactly, and why.
    pub warnings: Vec<String>,
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// The kind of an envelope, checked.
fn kind_of<'a>(name: &str, doc: &'a Value) -> Result<&'a str, MergeError> {
    match (doc.get("netrig"), doc.get("test").and_then(Value::as_str)) {
        (Some(_), Some(k)) => Ok(k),
        _ => Err(MergeError::NotAResult(name.to_string())),
    }
}

fn malformed(name: &str, what: impl Into<String>) -> MergeError {
    MergeError::Malformed {
        name: name.to_string(),
        what: what.into(),
    }
}

/// The latency summaries of a result, by name.
fn latencies<'a>(kind: &str, r: &'a Value) -> Vec<(String, &'a Value)> {
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

fn runs(r: &Value) -> &[Value] {
    r["runs"].as_array().map_or(&[], Vec::as_slice)
}

/// A result's counters: its totals, or its runs' summed (rr, ping).
fn input_totals(kind: &str, r: &Value) -> BTreeMap<String, u64> {
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
fn transactional(kind: &str) -> bool {
    matches!(kind, "rr" | "ping" | "crr")
}

/// An input's intervals as (start s, end s, bytes, or transactions for
/// [`transactional`] kinds), from its time zero. A crr run keeps no
/// intervals: it is one slice over its duration.
fn slices(kind: &str, r: &Value) -> Vec<(f64, f64, f64)> {
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

/// Several latency summaries as one: counts, extremes, mean and variance
/// combined exactly, percentiles from the sum of their histograms named as
/// the first input names them. `None` (with the reason) when a summary has
/// no readable histogram.
pub fn merge_summaries(parts: &[(&str, &Value)]) -> Result<Option<Summary>, SummaryError> {
    let mut hs = Vec::new();
    let (mut n, mut min, mut max, mut mean, mut m2) =
        (0u64, f64::INFINITY, f64::NEG_INFINITY, 0.0, 0.0);
    let mut names: Vec<String> = Vec::new();
    for (who, s) in parts {
        // Nothing measured: a summary of no samples, UDP totals of no datagram.
        if s.is_null() || s["count"].as_u64() == Some(0) || s["unique"].as_u64() == Some(0) {
            continue;
        }
        let text = s["hdr"]
            .as_str()
            .ok_or_else(|| SummaryError::NoHistogram(who.to_string()))?;
        let h = crate::hdr::decode(text).map_err(|source| SummaryError::BadHistogram {
            who: who.to_string(),
            source,
        })?;
        // UDP totals name their figures delay_*_us and keep no count or
        // variance: the histogram's count, and its spread (to its 0.1 %).
        let c = s["count"].as_u64().unwrap_or_else(|| h.len());
        if c == 0 {
            continue;
        }
        let g = |a: &str, b: &str| s[a].as_f64().or_else(|| s[b].as_f64());
        let f = |a: &str, b: &str| g(a, b).unwrap_or(0.0);
        let m = g("mean_us", "delay_avg_us").unwrap_or(h.mean() / 1e3);
        // This part's sum of squared deviations: a summary's variance is
        // the samples' (divided by c − 1), a histogram's spread is the
        // population's (divided by c).
        let part_m2 = match s["variance_us2"].as_f64() {
            Some(var) => var * c.saturating_sub(1) as f64,
            None => (h.stdev() / 1e3).powi(2) * c as f64,
        };
        hs.push(h);
        // Chan et al.'s pairwise update of the sum of squared deviations.
        let total = n + c;
        let d = m - mean;
        m2 += part_m2 + d * d * (n as f64 * c as f64) / total as f64;
        mean += d * c as f64 / total as f64;
        n = total;
        min = min.min(f("min_us", "delay_min_us"));
        max = max.max(f("max_us", "delay_max_us"));
        if names.is_empty() {
            names = s["percentiles_us"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p[0].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
        }
    }
    if n == 0 {
        return Ok(None);
    }
    let all = crate::hdr::sum(&hs).map_err(SummaryError::Sum)?;
    let which: Vec<(&str, f64)> = names
        .iter()
        .filter_map(|n| crate::hdr::quantile_of(n).map(|q| (n.as_str(), q)))
        .collect();
    let variance = if n > 1 { m2 / (n - 1) as f64 } else { 0.0 };
    Ok(Some(Summary {
        count: n,
        min_us: min,
        max_us: max,
        mean_us: mean,
        variance_us2: variance,
        stddev_us: variance.sqrt(),
        percentiles_us: crate::hdr::percentiles_us(&all, &which),
        hdr: crate::hdr::encode(&all),
    }))
}

/// An input's time zero on the wall clock (if it has one) and its
/// intervals as (start s, end s, bytes) from it.
pub type Timed = (Option<f64>, Vec<(f64, f64, f64)>);

/// Lays each input's slices (absolute start, slices) on a grid of
/// `step` s from the earliest start (an input without a start adds
/// nothing but keeps its place in `per_input`); a slice's bytes go to the grid slices
/// it overlaps in proportion to the overlap (the rate within a slice is
/// taken as even).
pub fn align(inputs: &[Timed], step: f64) -> Vec<Slice> {
    let Some(t0) = inputs.iter().filter_map(|i| i.0).reduce(f64::min) else {
        return Vec::new();
    };
    let end = inputs
        .iter()
        .filter_map(|(s, sl)| Some(s.as_ref()? + sl.last()?.1))
        .fold(t0, f64::max);
    if step <= 0.0 || end <= t0 {
        return Vec::new();
    }
    let bins = ((end - t0) / step).ceil().max(1.0) as usize;
    let mut per: Vec<Vec<f64>> = vec![vec![0.0; inputs.len()]; bins];
    for (i, (start, sl)) in inputs.iter().enumerate() {
        let Some(start) = start else {
            continue;
        };
        for &(a, b, bytes) in sl {
            let (a, b) = (start + a - t0, start + b - t0);
            if b <= a {
                let k = ((a / step) as usize).min(bins - 1);
                per[k][i] += bytes;
                continue;
            }
            let first = ((a / step) as usize).min(bins - 1);
            let last = ((b / step).ceil() as usize).clamp(first + 1, bins);
            for (k, cell) in per.iter_mut().enumerate().take(last).skip(first) {
                let lo = a.max(k as f64 * step);
                let hi = b.min((k + 1) as f64 * step);
                if hi > lo {
                    cell[i] += bytes * (hi - lo) / (b - a);
                }
            }
        }
    }
    per.into_iter()
        .enumerate()
        .map(|(k, cells)| {
            let start = k as f64 * step;
            let stop = ((k + 1) as f64 * step).min(end - t0);
            let total: f64 = cells.iter().sum();
            Slice {
                start_secs: start,
                end_secs: stop,
                bytes: total.round() as u64,
                per_input: cells.iter().map(|c| c.round() as u64).collect(),
                goodput_bps: if stop > start {
                    total * 8.0 / (stop - start)
                } else {
                    0.0
                },
                transactions: None,
                per_input_transactions: None,
                transactions_per_sec: None,
            }
        })
        .collect()
}

/// A udp result's parts, each shaped as a one-stream result: itself, or
/// its streams' reports (`-P`, `--bidir`), each marked whether it runs the
/// other way than `main_reverse` (the configuration's direction).
fn udp_parts<'a>(r: &'a Value, main_reverse: &Value) -> Vec<(bool, &'a Value)> {
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

/// A slice laid out with a column per entry of `owner`, with a column per
/// input (of `n`) instead: an input's entries added.
fn by_owner(s: Slice, owner: &[usize], n: usize) -> Slice {
    let mut per_input = vec![0; n];
    for (&i, v) in owner.iter().zip(&s.per_input) {
        per_input[i] += v;
    }
    Slice { per_input, ..s }
}

/// A slice [`align`] counted transactions in, as such: its byte fields 0.
fn as_transactions(s: Slice) -> Slice {
    Slice {
        transactions: Some(s.bytes),
        transactions_per_sec: Some(s.goodput_bps / 8.0),
        per_input_transactions: Some(s.per_input.clone()),
        bytes: 0,
        per_input: vec![0; s.per_input.len()],
        goodput_bps: 0.0,
        ..s
    }
}

/// An input's errors: the run's own, and what its servers reported.
fn errors_of(name: &str, doc: &Value) -> Vec<InputError> {
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

/// Merges `inputs` ((name, envelope) pairs, all of one kind and
/// configuration) on a grid of `step` seconds.
pub fn merge(inputs: &[(String, Value)], step: f64) -> Result<Merged, MergeError> {
    let Some((first, first_doc)) = inputs.first() else {
        return Err(MergeError::Empty);
    };
    let kind = kind_of(first, first_doc)?;
    let Some(&(_, keys)) = KINDS.iter().find(|k| k.0 == kind) else {
        return Err(MergeError::Unsupported {
            name: first.clone(),
            kind: kind.to_string(),
        });
    };
    for (name, doc) in inputs {
        let k = kind_of(name, doc)?;
        if k != kind {
            return Err(MergeError::MixedKinds {
                name: name.clone(),
                kind: k.to_string(),
                first: first.clone(),
                first_kind: kind.to_string(),
            });
        }
        for key in keys {
            let (a, b) = (first_doc["config"].pointer(key), doc["config"].pointer(key));
            if a != b {
                let show = |v: Option<&Value>| v.map_or_else(|| "absent".into(), text);
                return Err(MergeError::Incompatible {
                    name: name.clone(),
                    key: key.trim_start_matches('/').replace('/', "."),
                    value: show(b),
                    first: first.clone(),
                    first_value: show(a),
                });
            }
        }
        if !doc["result"].is_object() && !doc["result"].is_null() {
            return Err(malformed(name, "\"result\" is neither an object nor null"));
        }
        if matches!(kind, "rr" | "ping")
            && runs(&doc["result"]).len() != runs(&first_doc["result"]).len()
        {
            return Err(malformed(
                name,
                "a different number of runs (request sizes) than the first result",
            ));
        }
    }
    let mut m = Merged {
        kind: kind.to_string(),
        inputs: Vec::new(),
        totals: BTreeMap::new(),
        start_unix: None,
        interval_secs: step,
        intervals: Vec::new(),
        goodput_bps: None,
        latency: BTreeMap::new(),
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let mut timed = Vec::new();
    // Which input each entry of `timed` is of (a udp input's streams are
    // an entry each).
    let mut owner = Vec::new();
    let mut lat: BTreeMap<String, Vec<(&str, &Value)>> = BTreeMap::new();
    let main_reverse = &first_doc["config"]["spec"]["reverse"];
    let both_ways = |r: &Value| udp_parts(r, main_reverse).iter().any(|p| p.0);
    // The first input that measured: whether it ran both ways.
    let first_bidir = inputs
        .iter()
        .find(|(_, d)| !d["result"].is_null())
        .map(|(n, d)| (n, both_ways(&d["result"])));
    for (i, (name, doc)) in inputs.iter().enumerate() {
        let r = &doc["result"];
        // A udp result's streams (-P, --bidir), each a result of its own;
        // --bidir's other direction counts apart, as iperf3's *_bidir_reverse.
        let parts: Vec<(bool, &Value)> = match kind {
            "udp" => udp_parts(r, main_reverse),
            _ => vec![(false, r)],
        };
        let bidir = parts.iter().any(|p| p.0);
        if let Some((other, b)) = first_bidir.filter(|f| !r.is_null() && f.1 != bidir) {
            let way = |b: bool| if b { "both ways" } else { "one way" };
            return Err(MergeError::Incompatible {
                name: name.clone(),
                key: "--bidir".into(),
                value: way(bidir).into(),
                first: other.clone(),
                first_value: way(b).into(),
            });
        }
        let mut totals = BTreeMap::new();
        let mut start: Option<f64> = None;
        let mut old = false;
        for &(back, part) in &parts {
            let suffix = if back { "_bidir_reverse" } else { "" };
            for (k, v) in input_totals(kind, part) {
                *totals.entry(format!("{k}{suffix}")).or_insert(0) += v;
            }
            let at = part["start_unix"].as_f64();
            let mine = slices(kind, part);
            // A result without a time zero is an old one; an rr or ping run
            // in which no round trip ended has none either, and no rows.
            old |= at.is_none() && !part.is_null() && (!transactional(kind) || !mine.is_empty());
            start = match (start, at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            timed.push((at, mine));
            owner.push(i);
            for (n, v) in latencies(kind, part) {
                lat.entry(format!("{n}{suffix}"))
                    .or_default()
                    .push((name.as_str(), v));
            }
        }
        for (k, v) in &totals {
            *m.totals.entry(k.clone()).or_insert(0) += v;
        }
        if old {
            m.warnings.push(format!(
                "{name} has no start_unix (a result of an older netrig): its intervals are left out of the aligned series"
            ));
        }
        m.errors.extend(errors_of(name, doc));
        m.inputs.push(InputInfo {
            name: name.clone(),
            title: doc["title"].as_str().map(str::to_string),
            start_unix: start,
            duration_secs: r["duration_secs"].as_f64(),
            totals,
        });
    }
    for (n, parts) in lat {
        match merge_summaries(&parts) {
            Ok(Some(s)) => {
                m.latency.insert(n, s);
            }
            Ok(None) => {}
            Err(why) => m.warnings.push(format!("{n}: percentiles left out, {why}")),
        }
    }
    m.start_unix = timed.iter().filter_map(|t| t.0).reduce(f64::min);
    if m.start_unix.is_some() && transactional(kind) {
        m.intervals = align(&timed, step)
            .into_iter()
            .map(as_transactions)
            .collect();
    } else if m.start_unix.is_some() {
        m.intervals = align(&timed, step)
            .into_iter()
            .map(|s| by_owner(s, &owner, inputs.len()))
            .collect();
        let span = m.intervals.last().map_or(0.0, |s| s.end_secs);
        let bytes: f64 = timed
            .iter()
            .filter(|t| t.0.is_some())
            .flat_map(|t| t.1.iter().map(|s| s.2))
            .sum();
        m.goodput_bps = (span > 0.0).then(|| bytes * 8.0 / span);
    }
    Ok(m)
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
