//! `netrig merge`: results of one test kind from many clients (or runs) as
//! one. Counts and bytes add; intervals are laid on one wall-clock grid
//! (each result's `start_unix` plus its own interval times) and each grid
//! slice's goodput is what all clients moved in it; latency percentiles
//! come from the sum of the results' HDR histograms ([`crate::protocol::hdr`]), so
//! they are those of every sample together, never an average of
//! percentiles. rr, ping and crr results lay their transactions on the
//! grid the same way (each rr or ping interval row, a crr run as one even
//! slice). Pure: parsed documents in, a merged result out.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use thiserror::Error;

use crate::protocol::rr::hist::Summary;

mod grid;
mod read;
mod summary;

pub use grid::{Timed, align};
use grid::{as_transactions, by_owner};
use read::{errors_of, input_totals, latencies, runs, slices, text, transactional, udp_parts};
pub use summary::{SummaryError, merge_summaries};

/// The kinds that merge, and what must be equal for two results to merge:
/// the direction and shape of the traffic (config keys, as JSON pointers).
const KINDS: &[(&str, &[&str])] = &[
    ("tcp", &["/pattern"]),
    ("udp", &["/spec/reverse"]),
    ("crr", &["/pattern", "/push_bytes", "/pull_bytes"]),
    ("rr", &["/transport", "/size", "/reply"]),
    ("ping", &["/transport", "/size", "/reply"]),
];

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
