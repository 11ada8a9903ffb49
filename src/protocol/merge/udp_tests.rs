//! Unit tests of `merge` on udp results: a result of streams (`-P`,
//! `--bidir`) merges per direction, each input summing its streams, and an
//! input that measured nothing decides no direction.

use super::*;

/// A one-stream udp result as a stream's report: `start`, datagrams of
/// 100 B received with delays `ns`, one interval of 1 s.
fn udp_report(start: f64, ns: &[u64]) -> Value {
    let mut h = crate::protocol::hdr::empty();
    for &v in ns {
        h.record(v).unwrap();
    }
    let s = stats(ns).summary().unwrap();
    let n = ns.len() as u64;
    json!({"start_unix": start, "duration_secs": 1.0,
           "totals": {"sent": 10, "unique": n, "packets": n, "bytes": 100 * n, "lost": 10 - n,
                      "duplicates": 0, "reordered": 0, "corrupt": 0, "late": 0,
                      "delay_min_us": s.min_us, "delay_max_us": s.max_us, "delay_avg_us": s.mean_us,
                      "percentiles_us": [["p50", 0.0], ["max", 0.0]], "hdr": crate::protocol::hdr::encode(&h)},
           "intervals": [{"time_slice": 1.0, "bytes": 100 * n}]})
}

/// A udp result of streams: (reverse, report) each.
fn udp_streams(streams: Vec<(bool, Value)>) -> Value {
    let streams: Vec<Value> = streams
        .into_iter()
        .enumerate()
        .map(|(i, (rev, report))| json!({"index": i, "reverse": rev, "report": report, "error": null}))
        .collect();
    json!({"netrig": 1, "test": "udp", "config": {"spec": {"reverse": false}},
           "result": {"streams": streams, "duration_secs": 1.5}})
}

#[test]
fn udp_streams_merge_per_direction_and_each_input_sums_its_streams() {
    let a = udp_streams(vec![
        (false, udp_report(100.0, &[10_000, 20_000])),
        (true, udp_report(100.5, &[40_000])),
    ]);
    let mut b = udp_streams(vec![
        (false, udp_report(101.0, &[30_000])),
        (true, udp_report(101.0, &[50_000, 60_000, 70_000])),
    ]);
    b["result"]["streams"][1]["error"] = json!("server lost");
    let m = merge(&named(vec![a, b]), 1.0).unwrap();
    assert_eq!(
        (m.totals["bytes"], m.totals["unique"], m.totals["lost"]),
        (300, 3, 17)
    );
    assert_eq!(
        (
            m.totals["bytes_bidir_reverse"],
            m.totals["unique_bidir_reverse"],
            m.totals["sent_bidir_reverse"]
        ),
        (400, 4, 20)
    );
    assert_eq!(m.inputs[1].totals["bytes_bidir_reverse"], 300);
    assert_eq!(m.inputs[0].start_unix, Some(100.0));
    let one_way = |ns: &[u64]| stats(ns).summary().unwrap();
    let fwd = &m.latency["one_way_delay"];
    assert_eq!(fwd.count, 3);
    assert_eq!(fwd.hdr, one_way(&[10_000, 20_000, 30_000]).hdr);
    let back = &m.latency["one_way_delay_bidir_reverse"];
    assert_eq!(back.count, 4);
    assert_eq!(back.hdr, one_way(&[40_000, 50_000, 60_000, 70_000]).hdr);
    // On the grid from 100.0: input 0's streams add into its column.
    let got: Vec<_> = m
        .intervals
        .iter()
        .map(|s| (s.bytes, s.per_input.clone()))
        .collect();
    assert_eq!(
        got,
        [(250, vec![250, 0]), (450, vec![50, 400])],
        "{:?}",
        m.intervals
    );
    assert_eq!(m.goodput_bps, Some(700.0 * 8.0 / 2.0));
    assert_eq!(m.errors.len(), 1);
    assert_eq!(m.errors[0].input, "c1.json");
    assert_eq!(m.errors[0].error, "stream 1: server lost");

    // Both ways and one way do not merge; -P one way and one stream do.
    let one_way_p = udp_streams(vec![
        (false, udp_report(1.0, &[1_000])),
        (false, udp_report(1.0, &[2_000])),
    ]);
    let both = udp_streams(vec![
        (false, udp_report(1.0, &[1_000])),
        (true, udp_report(1.0, &[2_000])),
    ]);
    let err = merge(&named(vec![one_way_p.clone(), both]), 1.0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "c1.json: config --bidir is both ways, c0.json has one way: only runs of one configuration merge"
    );
    let mut single = udp_streams(vec![]);
    single["result"] = udp_report(1.0, &[3_000]);
    let m = merge(&named(vec![one_way_p, single]), 1.0).unwrap();
    assert_eq!(m.totals["unique"], 3);
    assert!(!m.totals.contains_key("unique_bidir_reverse"));
    assert_eq!(m.intervals[0].per_input, vec![200, 100]);
}

#[test]
fn a_failed_udp_input_does_not_decide_the_direction() {
    // The first input measured nothing: the both-ways inputs after it
    // merge, and it is no one-way run beside them.
    let both = || {
        udp_streams(vec![
            (false, udp_report(1.0, &[1_000])),
            (true, udp_report(1.0, &[2_000])),
        ])
    };
    let mut failed = both();
    failed["result"] = Value::Null;
    failed["error"] = json!("refused");
    let m = merge(&named(vec![failed, both(), both()]), 1.0).unwrap();
    assert_eq!(m.totals["unique"], 2);
    assert_eq!(m.totals["unique_bidir_reverse"], 2);
    assert_eq!(m.errors.len(), 1);
}
