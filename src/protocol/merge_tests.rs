//! Unit tests of `merge`: results of each kind merged whole — counters
//! added, intervals and transactions on one wall-clock grid, latencies
//! exact over every sample, errors kept with their origin, and inputs that
//! do not merge named. udp results of streams are in `merge/udp_tests.rs`.

use super::*;
use crate::protocol::rr::hist::LatencyStats;
use proptest::prelude::*;
use serde_json::json;

fn stats(ns: &[u64]) -> LatencyStats {
    let mut s = LatencyStats::new(0.0, 10_000.0, 100, 10);
    for &v in ns {
        s.record_ns(v);
    }
    s
}

fn crr(handshake: &[u64], transactions: u64) -> Value {
    json!({
        "netrig": 1, "test": "crr",
        "config": {"pattern": "pushpull", "push_bytes": 64, "pull_bytes": 2},
        "result": {
            "transactions": transactions, "failed": 1, "cancelled": 0,
            "handshake": stats(handshake).summary(),
            "transaction": null,
        }
    })
}

fn named(docs: Vec<Value>) -> Vec<(String, Value)> {
    docs.into_iter()
        .enumerate()
        .map(|(i, d)| (format!("c{i}.json"), d))
        .collect()
}

/// The merged summary against the one of every sample at once.
fn assert_same(merged: &Summary, whole: &Summary) {
    assert_eq!(merged.count, whole.count);
    assert_eq!(merged.min_us, whole.min_us);
    assert_eq!(merged.max_us, whole.max_us);
    assert_eq!(merged.percentiles_us, whole.percentiles_us);
    assert_eq!(
        merged.hdr, whole.hdr,
        "the sum of histograms is the histogram of all"
    );
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(
        close(merged.mean_us, whole.mean_us),
        "{} {}",
        merged.mean_us,
        whole.mean_us
    );
    assert!(
        close(merged.variance_us2, whole.variance_us2),
        "{} {}",
        merged.variance_us2,
        whole.variance_us2
    );
    assert!(close(merged.stddev_us, whole.stddev_us));
}

#[test]
fn percentiles_are_those_of_all_samples_not_an_average() {
    // One fast client and one slow: averaging their p50s would give 500 µs;
    // the samples' own p50 is a fast one.
    let a: Vec<u64> = vec![10_000; 7];
    let b: Vec<u64> = vec![1_000_000; 3];
    let m = merge(&named(vec![crr(&a, 7), crr(&b, 3)]), 1.0).unwrap();
    let all: Vec<u64> = a.iter().chain(&b).copied().collect();
    let whole = stats(&all).summary().unwrap();
    assert_same(&m.latency["handshake"], &whole);
    assert_eq!(m.latency["handshake"].percentiles_us[0].0, "p50");
    assert!(m.latency["handshake"].percentiles_us[0].1 < 11.0);
    assert!(
        !m.latency.contains_key("transaction"),
        "no samples, no summary"
    );
    assert_eq!(m.totals["transactions"], 10);
    assert_eq!(m.totals["failed"], 2);
    assert_eq!(m.totals["cancelled"], 0);
    assert_eq!(m.inputs.len(), 2);
    assert_eq!(m.inputs[1].totals["transactions"], 3);
    assert_eq!(m.kind, "crr");
}

proptest! {
    #[test]
    fn any_split_merges_to_the_whole(
        parts in proptest::collection::vec(proptest::collection::vec(1u64..50_000_000_000, 1..60), 1..8)
    ) {
        let docs: Vec<Value> = parts.iter().map(|p| crr(p, p.len() as u64)).collect();
        let m = merge(&named(docs), 1.0).unwrap();
        let all: Vec<u64> = parts.concat();
        assert_same(&m.latency["handshake"], &stats(&all).summary().unwrap());
        prop_assert_eq!(m.totals["transactions"], all.len() as u64);
    }
}

fn tcp(start: f64, rows: &[(f64, u64)], sent: u64) -> Value {
    let intervals: Vec<Value> = rows
        .iter()
        .map(|&(t, bps)| json!({"TimeSlice": t, "SendBps": bps, "RecvBps": 0}))
        .collect();
    json!({
        "netrig": 1, "test": "tcp", "config": {"pattern": "push"},
        "result": {
            "start_unix": start, "duration_secs": rows.last().map_or(0.0, |r| r.0),
            "totals": {"sent": sent, "received": 0, "completed": 2, "net_errors": 1,
                       "data_errors": 0, "cancelled": 0, "retransmits": 5},
            "intervals": intervals,
            "connection_times": null,
            "server_errors": [["127.0.0.1:1", "limit"]],
        }
    })
}

#[test]
fn totals_add_and_intervals_share_one_wall_clock_grid() {
    // A: 1000 B/s for 2 s from t=100; B: 500 B/s for 1 s from t=100.5.
    let a = tcp(100.0, &[(1.0, 1000), (2.0, 1000)], 2000);
    let b = tcp(100.5, &[(1.0, 500)], 500);
    let m = merge(&named(vec![a, b]), 1.0).unwrap();
    assert_eq!(m.totals["sent_bytes"], 2500);
    assert_eq!(m.totals["completed"], 4);
    assert_eq!(m.totals["net_errors"], 2);
    assert_eq!(m.totals["retransmits"], 10);
    assert_eq!(m.start_unix, Some(100.0));
    let got: Vec<(f64, f64, u64, Vec<u64>, f64)> = m
        .intervals
        .iter()
        .map(|s| {
            (
                s.start_secs,
                s.end_secs,
                s.bytes,
                s.per_input.clone(),
                s.goodput_bps,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0.0, 1.0, 1250, vec![1000, 250], 10_000.0),
            (1.0, 2.0, 1250, vec![1000, 250], 10_000.0),
        ]
    );
    assert_eq!(m.goodput_bps, Some(2500.0 * 8.0 / 2.0));
    // Each input's errors, with its name.
    assert_eq!(m.errors.len(), 2);
    assert_eq!(m.errors[1].input, "c1.json");
    assert_eq!(m.errors[1].error, "server 127.0.0.1:1: limit");
}

#[test]
fn bad_inputs_are_named_errors() {
    let err = |docs: Vec<Value>| merge(&named(docs), 1.0).unwrap_err();
    assert_eq!(merge(&[], 1.0).unwrap_err(), MergeError::Empty);
    assert_eq!(
        err(vec![json!({"hello": 1})]),
        MergeError::NotAResult("c0.json".into())
    );
    let e = err(vec![crr(&[1], 1), tcp(1.0, &[], 0)]);
    assert_eq!(
        e.to_string(),
        "c1.json is a tcp result, c0.json a crr result: merge results of one kind"
    );
    let mut pull = tcp(1.0, &[], 0);
    pull["config"]["pattern"] = json!("pull");
    let e = err(vec![tcp(1.0, &[], 0), pull]);
    assert_eq!(
        e.to_string(),
        "c1.json: config pattern is pull, c0.json has push: only runs of one configuration merge"
    );
    let e = err(vec![
        json!({"netrig": 1, "test": "load", "config": {}, "result": null}),
    ]);
    assert!(matches!(e, MergeError::Unsupported { .. }), "{e}");
    let mut bad = tcp(1.0, &[], 0);
    bad["result"] = json!(3);
    assert!(matches!(err(vec![bad]), MergeError::Malformed { .. }));
    let ping = |sizes: &[u64]| {
        let runs: Vec<Value> = sizes
            .iter()
            .map(|s| json!({"size": s, "latency": null}))
            .collect();
        json!({"netrig": 1, "test": "ping", "config": {"transport": "udp", "size": 64, "reply": 64},
               "result": {"runs": runs}})
    };
    assert!(matches!(
        err(vec![ping(&[64]), ping(&[64, 128])]),
        MergeError::Malformed { .. }
    ));
}

#[test]
fn a_failed_input_keeps_its_error_and_an_old_one_a_warning() {
    let mut failed = tcp(5.0, &[], 0);
    failed["result"] = Value::Null;
    failed["error"] = json!("the server refused the test");
    failed["error_code"] = json!("limit_duration");
    let mut old = tcp(0.0, &[(1.0, 10)], 10);
    old["result"].as_object_mut().unwrap().remove("start_unix");
    let mut no_hdr = crr(&[5_000], 1);
    no_hdr["result"]["handshake"]
        .as_object_mut()
        .unwrap()
        .remove("hdr");
    let m = merge(&named(vec![tcp(5.0, &[(1.0, 8)], 8), failed, old]), 1.0).unwrap();
    assert_eq!(m.errors[1].input, "c1.json");
    assert_eq!(m.errors[1].error_code.as_deref(), Some("limit_duration"));
    assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
    assert!(m.warnings[0].starts_with("c2.json has no start_unix"));
    assert_eq!(m.intervals.len(), 1);
    assert_eq!(m.intervals[0].per_input, vec![8, 0, 0]);
    assert_eq!(m.totals["sent_bytes"], 18);
    let m = merge(&named(vec![crr(&[1_000], 1), no_hdr]), 1.0).unwrap();
    assert!(m.latency.is_empty());
    assert!(
        m.warnings[0].contains("c1.json has no HDR histogram"),
        "{:?}",
        m.warnings
    );
}

#[test]
fn ping_runs_merge_by_position_and_udp_by_its_totals() {
    let ping = |ns: &[u64], lost: u64| {
        json!({"netrig": 1, "test": "ping", "config": {"transport": "udp", "size": 64, "reply": 64},
               "result": {"runs": [{"size": 64, "sent": ns.len() as u64 + lost, "received": ns.len(),
                                    "lost_up": lost, "lost_down": 0, "late": 0, "corrupt": 0,
                                    "latency": stats(ns).summary(), "error": null}]}})
    };
    let m = merge(
        &named(vec![ping(&[1_000, 2_000], 1), ping(&[3_000], 0)]),
        1.0,
    )
    .unwrap();
    assert_eq!(m.totals["sent"], 4);
    assert_eq!(m.totals["received"], 3);
    assert_eq!(m.totals["lost_up"], 1);
    assert_same(
        &m.latency["rtt"],
        &stats(&[1_000, 2_000, 3_000]).summary().unwrap(),
    );

    let udp = |start: f64, ns: &[u64]| {
        let mut h = crate::protocol::hdr::empty();
        for &v in ns {
            h.record(v).unwrap();
        }
        let s = stats(ns).summary().unwrap();
        json!({"netrig": 1, "test": "udp", "config": {"spec": {"reverse": false}},
               "result": {"start_unix": start, "duration_secs": 1.0,
                          "totals": {"sent": 10, "unique": ns.len(), "packets": ns.len(), "bytes": 100 * ns.len() as u64,
                                     "lost": 10 - ns.len() as u64, "duplicates": 0, "reordered": 1, "corrupt": 0, "late": 0,
                                     "delay_min_us": s.min_us, "delay_max_us": s.max_us,
                                     "delay_avg_us": s.mean_us,
                                     "percentiles_us": [["p50", 0.0], ["p99", 0.0], ["max", 0.0]],
                                     "hdr": crate::protocol::hdr::encode(&h)},
                          "intervals": [{"time_slice": 1.0, "bytes": 100 * ns.len() as u64}],
                          "server_lost": start > 1.0}})
    };
    let m = merge(
        &named(vec![udp(1.0, &[10_000, 20_000]), udp(1.5, &[30_000])]),
        0.5,
    )
    .unwrap();
    assert_eq!(
        (m.totals["sent"], m.totals["lost"], m.totals["bytes"]),
        (20, 17, 300)
    );
    assert_eq!(m.totals["reordered"], 2);
    let owd = &m.latency["one_way_delay"];
    let names: Vec<&str> = owd.percentiles_us.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(names, ["p50", "p99", "max"]);
    assert_eq!(owd.count, 3);
    assert_eq!((owd.min_us, owd.max_us, owd.mean_us), (10.0, 30.0, 20.0));
    let mut whole = crate::protocol::hdr::empty();
    for v in [10_000, 20_000, 30_000] {
        whole.record(v).unwrap();
    }
    assert_eq!(
        owd.percentiles_us,
        crate::protocol::hdr::percentiles_us(
            &whole,
            &[("p50", 50.0), ("p99", 99.0), ("max", 100.0)]
        )
    );
    assert_eq!(m.intervals.len(), 3, "1.0 s to 2.5 s by 0.5 s");
    assert_eq!(m.intervals.iter().map(|s| s.bytes).sum::<u64>(), 300);
    assert_eq!(m.errors.len(), 1);
    assert_eq!(m.errors[0].input, "c1.json");
}

#[test]
fn rr_ping_and_crr_transactions_share_the_wall_clock_grid() {
    let rr = |start: f64, rows: &[(f64, f64, u64)]| {
        let rows: Vec<Value> = rows
            .iter()
            .map(|&(a, b, n)| json!({"start_secs": a, "end_secs": b, "count": n, "lost": 0}))
            .collect();
        json!({"netrig": 1, "test": "rr", "config": {"transport": "tcp", "size": 64, "reply": 2},
               "result": {"start_unix": start, "duration_secs": 2.0, "intervals": rows,
                          "runs": [{"size": 64, "sent": 30, "received": 30, "late": 0, "corrupt": 0,
                                    "latency": null, "error": null}]}})
    };
    let docs = vec![
        rr(100.0, &[(0.0, 1.0, 10), (1.0, 2.0, 20)]),
        rr(100.5, &[(0.0, 1.0, 4)]),
    ];
    let m = merge(&named(docs), 1.0).unwrap();
    assert_eq!(m.start_unix, Some(100.0));
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    let got: Vec<_> = m
        .intervals
        .iter()
        .map(|s| {
            (
                s.start_secs,
                s.end_secs,
                s.transactions,
                s.per_input_transactions.clone(),
                s.transactions_per_sec,
                s.bytes,
                s.goodput_bps,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (0.0, 1.0, Some(12), Some(vec![10, 2]), Some(12.0), 0, 0.0),
            (1.0, 2.0, Some(22), Some(vec![20, 2]), Some(22.0), 0, 0.0),
        ]
    );
    assert_eq!(m.intervals[1].per_input, vec![0, 0]);
    assert_eq!(m.goodput_bps, None);
    assert_eq!(m.inputs[1].duration_secs, Some(2.0));

    // A crr run is one even slice over its duration; half a slice long,
    // its rate over the slice is its count over that half.
    let crr_at = |start: f64, secs: f64, n: u64| {
        let mut d = crr(&[1_000], n);
        d["result"]["start_unix"] = json!(start);
        d["result"]["duration_secs"] = json!(secs);
        d
    };
    let m = merge(
        &named(vec![crr_at(10.0, 2.0, 8), crr_at(11.0, 0.5, 3)]),
        1.0,
    )
    .unwrap();
    let got: Vec<_> = m
        .intervals
        .iter()
        .map(|s| (s.transactions, s.per_input_transactions.clone()))
        .collect();
    assert_eq!(
        got,
        [(Some(4), Some(vec![4, 0])), (Some(7), Some(vec![4, 3]))]
    );
    assert_eq!(m.intervals[1].transactions_per_sec, Some(7.0));
    // An old crr result without a time zero: warned, kept out of the grid.
    let mut old = crr_at(0.0, 1.0, 5);
    old["result"].as_object_mut().unwrap().remove("start_unix");
    let m = merge(&named(vec![crr_at(10.0, 2.0, 8), old]), 1.0).unwrap();
    assert!(m.warnings[0].starts_with("c1.json has no start_unix"));
    assert_eq!(m.intervals.len(), 2);
    assert_eq!(m.intervals[0].per_input_transactions, Some(vec![4, 0]));
    assert_eq!(m.totals["transactions"], 13);
}

#[test]
fn one_sample_has_no_variance() {
    let m = merge(&named(vec![crr(&[250_000], 1)]), 1.0).unwrap();
    let h = &m.latency["handshake"];
    assert_eq!(h.count, 1);
    assert_eq!((h.variance_us2, h.stddev_us), (0.0, 0.0));
}

#[test]
fn every_kind_of_input_error_is_kept_with_its_origin() {
    let mut a = tcp(1.0, &[(1.0, 8)], 8);
    a["result"]["server_errors"] = json!([["10.0.0.1:4794", "busy"]]);
    a["result"]["refusals"] = json!([
        {"connections": 3, "message": "too many sessions", "code": "limit_sessions"},
    ]);
    a["result"]["lost_servers"] = json!(["10.0.0.2:4794"]);
    a["result"]["server_lost"] = json!(true);
    let mut b = tcp(1.0, &[(1.0, 8)], 8);
    b["result"]["server_errors"] = json!([]);
    b["result"]["server_lost"] = json!(false);
    let m = merge(&named(vec![a, b]), 1.0).unwrap();
    let got: Vec<(&str, &str, Option<&str>)> = m
        .errors
        .iter()
        .map(|e| (e.input.as_str(), e.error.as_str(), e.error_code.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("c0.json", "server 10.0.0.1:4794: busy", None),
            (
                "c0.json",
                "3 connections refused: too many sessions",
                Some("limit_sessions")
            ),
            ("c0.json", "server 10.0.0.2:4794 lost mid-test", None),
            ("c0.json", "server lost mid-test", None),
        ]
    );
    // A run's own error (rr, ping) names its request size.
    let ping = json!({"netrig": 1, "test": "ping",
        "config": {"transport": "udp", "size": 64, "reply": 64},
        "result": {"runs": [{"size": 64, "latency": null, "error": null},
                            {"size": 1400, "latency": null, "error": "no route"}]}});
    let m = merge(&named(vec![ping]), 1.0).unwrap();
    assert_eq!(m.errors.len(), 1);
    assert_eq!(
        (m.errors[0].input.as_str(), m.errors[0].error.as_str()),
        ("c0.json", "run of 1400 B: no route")
    );
}

#[test]
fn a_tcp_slice_counts_both_directions_bytes() {
    // A duplex run: what was sent and received in a slice both count.
    let mut a = tcp(10.0, &[(1.0, 300), (3.0, 100)], 500);
    a["result"]["intervals"][0]["RecvBps"] = json!(200);
    a["result"]["intervals"][1]["RecvBps"] = json!(50);
    let m = merge(&named(vec![a]), 1.0).unwrap();
    let bytes: Vec<u64> = m.intervals.iter().map(|s| s.bytes).collect();
    assert_eq!(bytes, [500, 150, 150]);
    assert_eq!(m.goodput_bps, Some(800.0 * 8.0 / 3.0));
}

#[test]
fn inputs_that_measured_no_time_have_no_goodput() {
    let m = merge(&named(vec![tcp(10.0, &[], 0), tcp(11.0, &[], 0)]), 1.0).unwrap();
    assert_eq!(m.start_unix, Some(10.0));
    assert!(m.intervals.is_empty());
    assert_eq!(m.goodput_bps, None);
}

#[test]
fn several_runs_latencies_are_named_by_position_and_size() {
    let ping = |ns: &[u64]| {
        json!({"netrig": 1, "test": "ping", "config": {"transport": "udp", "size": 64, "reply": 64},
               "result": {"runs": [
                   {"size": 64, "sent": 1, "received": 1, "latency": stats(ns).summary(), "error": null},
                   {"size": 1400, "sent": 2, "received": 2, "latency": stats(&[9_000]).summary(), "error": null}]}})
    };
    let m = merge(&named(vec![ping(&[1_000]), ping(&[2_000])]), 1.0).unwrap();
    let names: Vec<&str> = m.latency.keys().map(String::as_str).collect();
    assert_eq!(names, ["rtt_1_64B", "rtt_2_1400B"]);
    assert_eq!(m.latency["rtt_1_64B"].count, 2);
    assert_eq!(m.latency["rtt_2_1400B"].count, 2);
    assert_eq!((m.totals["sent"], m.totals["received"]), (6, 6));
}

#[test]
fn tcp_connection_times_merge_from_every_input() {
    let with_times = |start: f64, ns: &[u64]| {
        let mut d = tcp(start, &[(1.0, 10)], 10);
        d["result"]["connection_times"] = json!(stats(ns).summary());
        d
    };
    let m = merge(
        &named(vec![
            with_times(1.0, &[1_000, 3_000]),
            with_times(2.0, &[2_000]),
        ]),
        1.0,
    )
    .unwrap();
    let names: Vec<&str> = m.latency.keys().map(String::as_str).collect();
    assert_eq!(names, ["connection_times"]);
    assert_same(
        &m.latency["connection_times"],
        &stats(&[1_000, 2_000, 3_000]).summary().unwrap(),
    );
}

#[test]
fn a_crr_run_with_a_negative_duration_is_left_off_the_grid() {
    // A duration below zero is no span of time: the run's transactions
    // count in the totals but are placed in no grid slice.
    let crr_at = |start: f64, secs: f64, n: u64| {
        let mut d = crr(&[1_000], n);
        d["result"]["start_unix"] = json!(start);
        d["result"]["duration_secs"] = json!(secs);
        d
    };
    let m = merge(
        &named(vec![crr_at(10.0, 2.0, 8), crr_at(10.5, -1.0, 5)]),
        1.0,
    )
    .unwrap();
    let per: Vec<_> = m
        .intervals
        .iter()
        .map(|s| s.per_input_transactions.clone())
        .collect();
    assert_eq!(per, [Some(vec![4, 0]), Some(vec![4, 0])]);
    assert_eq!(m.totals["transactions"], 13);
}

#[path = "merge/udp_tests.rs"]
mod udp;
