//! What each kind of result plots: the points, the marks and the key
//! numbers, from small JSON results in memory.

use super::*;
use serde_json::json;

fn titles(v: &View) -> Vec<&str> {
    v.charts.iter().map(|c| c.title.as_str()).collect()
}

fn chart_of<'a>(v: &'a View, title: &str) -> &'a Chart {
    v.charts
        .iter()
        .find(|c| c.title == title)
        .unwrap_or_else(|| panic!("no chart {title:?} in {:?}", titles(v)))
}

fn points<'a>(c: &'a Chart, name: &str) -> &'a [(f64, f64)] {
    &c.series
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no series {name:?} in {}", c.title))
        .points
}

fn fact<'a>(v: &'a View, name: &str) -> &'a str {
    &v.facts
        .iter()
        .find(|f| f.0 == name)
        .unwrap_or_else(|| panic!("no fact {name:?} in {:?}", v.facts))
        .1
}

#[test]
fn an_intervals_rate_is_its_bits_over_its_own_length() {
    let rows = [
        json!({"time_slice": 1.0, "bytes": 1000}),
        json!({"time_slice": 3.0, "bytes": 500}),
        // No length: left out.
        json!({"time_slice": 3.0, "bytes": 9}),
        json!({"bytes": 9}),
        json!({"time_slice": 4.0}),
    ];
    assert_eq!(rates(&rows), [(1.0, 8000.0), (3.0, 2000.0), (4.0, 0.0)]);
}

#[test]
fn loss_is_a_share_of_what_was_sent() {
    assert_eq!(loss_fact(&json!({"sent": 200, "lost": 3})), "1.500%");
    assert_eq!(loss_fact(&json!({"sent": 200})), "0.000%");
    assert_eq!(loss_fact(&json!({"sent": 0, "lost": 0})), "-");
    assert_eq!(loss_fact(&json!({})), "-");
}

#[test]
fn several_streams_are_plotted_each_with_their_directions_sums() {
    let stream = |index: u64, reverse: bool, bytes: u64, delay: f64| {
        json!({"index": index, "reverse": reverse, "report": {"intervals": [
            {"time_slice": 1.0, "bytes": bytes, "delay_avg_us": delay}
        ]}})
    };
    let r = json!({
        "streams": [stream(1, false, 1000, 2000.0), stream(2, true, 3000, 500.0)],
        "sum_up": {"sent": 100, "lost": 1, "percentiles_us": [["p50", 1500.0]]},
    });
    let v = udp(&r);
    assert_eq!(
        v.facts,
        [
            ("up loss".to_string(), "1.000%".to_string()),
            ("up delay p50".to_string(), "1.500 ms".to_string()),
        ]
    );
    let rate = chart_of(&v, "Received rate per stream");
    assert_eq!(points(rate, "1 up"), [(1.0, 8000.0)]);
    assert_eq!(points(rate, "2 down"), [(1.0, 24000.0)]);
    let delay = chart_of(&v, "Mean one-way delay per stream");
    assert_eq!(points(delay, "1 up"), [(1.0, 2.0)]);
    assert_eq!(points(delay, "2 down"), [(1.0, 0.5)]);
}

fn udp_result() -> serde_json::Value {
    json!({
        "intervals": [
            {"time_slice": 1.0, "bytes": 1000, "drops": 2, "duplicates": 0, "reordered": 1,
             "corrupt": 0, "delay_max_us": 3000.0, "delay_avg_us": 2000.0,
             "delay_min_us": 1000.0, "jitter_us": 500.0},
        ],
        "totals": {
            "unique": 99, "sent": 100, "lost": 1, "jitter_us": 250.0,
            "percentiles_us": [["p50", 1500.0], ["p99", 4000.0], ["p99.9", 6000.0]],
            "histogram": [[1000.0, 2000.0, 30], [2000.0, 4000.0, 10]],
        },
    })
}

#[test]
fn a_udp_run_plots_rate_losses_delays_and_its_delay_distribution() {
    let v = udp(&udp_result());
    assert_eq!(
        titles(&v),
        [
            "Received rate over time",
            "Loss, duplicates and reordering per interval",
            "One-way delay per interval",
            "Delay histogram",
            "Delay CDF",
        ]
    );
    assert_eq!(
        points(chart_of(&v, "Received rate over time"), "received"),
        [(1.0, 8000.0)]
    );
    let loss = chart_of(&v, "Loss, duplicates and reordering per interval");
    assert_eq!(points(loss, "drops"), [(1.0, 2.0)]);
    assert_eq!(points(loss, "reordered"), [(1.0, 1.0)]);
    let delay = chart_of(&v, "One-way delay per interval");
    assert_eq!(points(delay, "max"), [(1.0, 3.0)]);
    assert_eq!(points(delay, "mean"), [(1.0, 2.0)]);
    assert_eq!(points(delay, "min"), [(1.0, 1.0)]);
    assert_eq!(points(delay, "jitter"), [(1.0, 0.5)]);
    // Bars at the bins' lower edges, the CDF at their upper ones, in ms.
    assert_eq!(
        points(chart_of(&v, "Delay histogram"), "datagrams"),
        [(1.0, 30.0), (2.0, 10.0)]
    );
    let cdf = chart_of(&v, "Delay CDF");
    assert_eq!(points(cdf, "at or under"), [(2.0, 75.0), (4.0, 100.0)]);
    let marks: Vec<_> = cdf.marks.iter().map(|m| m.x).collect();
    assert_eq!(marks, [1.5, 4.0, 6.0]);
    assert_eq!(fact(&v, "received"), "99");
    assert_eq!(fact(&v, "loss"), "1.000%");
    assert_eq!(fact(&v, "delay p50"), "1.500 ms");
    assert_eq!(fact(&v, "delay p99"), "4.000 ms");
    assert_eq!(fact(&v, "jitter"), "0.250 ms");
}

#[test]
fn charts_without_data_are_left_out() {
    let v = udp(&json!({"intervals": [{"time_slice": 1.0, "bytes": 10}], "bins": []}));
    assert_eq!(
        titles(&v),
        [
            "Received rate over time",
            "Loss, duplicates and reordering per interval",
            "One-way delay per interval",
        ]
    );
}

#[test]
fn media_frames_and_bursts_get_their_charts() {
    let mut r = udp_result();
    r["intervals"][0]["frames"] =
        json!({"completed": 30, "dropped": 1, "repeated": 0, "errors": 2});
    r["bursts"] = json!([{"index": 0, "transfer_ms": 4.5, "trip_ms": 5.0}]);
    let v = udp(&r);
    let frames = chart_of(&v, "Media frames per interval");
    assert_eq!(points(frames, "completed"), [(1.0, 30.0)]);
    assert_eq!(points(frames, "errors"), [(1.0, 2.0)]);
    let bursts = chart_of(&v, "Bursts");
    assert_eq!(points(bursts, "transfer ms"), [(0.0, 4.5)]);
    assert_eq!(points(bursts, "trip ms"), [(0.0, 5.0)]);
}

#[test]
fn a_sweep_plots_against_the_offered_rate_first_with_the_congestion_point() {
    let mut r = udp_result();
    r["bins"] = json!([
        {"offered_bps": 2e6, "received_bps": 1.5e6, "loss_pct": 25.0, "delay_avg_us": 9000.0},
        {"offered_bps": 1e6, "received_bps": 1e6, "loss_pct": 0.0, "delay_avg_us": 1000.0},
    ]);
    r["analysis"] = json!({"congestion_bps": 1e6, "limiter": "policer"});
    let v = udp(&r);
    assert_eq!(
        titles(&v)[..3],
        [
            "Offered vs received rate",
            "Loss and delay against offered rate",
            "Received rate over time"
        ]
    );
    let rate = chart_of(&v, "Offered vs received rate");
    assert_eq!(points(rate, "received"), [(1e6, 1e6), (2e6, 1.5e6)]);
    assert_eq!(points(rate, "offered"), [(1e6, 1e6), (2e6, 2e6)]);
    let loss = chart_of(&v, "Loss and delay against offered rate");
    assert_eq!(points(loss, "loss %"), [(1e6, 0.0), (2e6, 25.0)]);
    assert_eq!(points(loss, "mean delay ms"), [(1e6, 1.0), (2e6, 9.0)]);
    for c in [rate, loss] {
        assert_eq!(
            c.marks,
            [Mark {
                x: 1e6,
                label: format!(
                    "congestion (policer) {}",
                    crate::protocol::units::format_bits_per_sec(1e6)
                ),
            }]
        );
    }
    let bins = arr(&r["bins"]);
    let plain = sweep(bins, &json!({"congestion_bps": 1e6}));
    assert_eq!(plain.len(), 2);
    assert_eq!(
        plain[0].marks[0].label,
        format!(
            "congestion {}",
            crate::protocol::units::format_bits_per_sec(1e6)
        )
    );
    assert!(sweep(bins, &json!({})).iter().all(|c| c.marks.is_empty()));
}

fn rr_result() -> serde_json::Value {
    json!({
        "probes": {"rows": [[0, 1.5], [1, null], [2, 2.5]]},
        "runs": [
            {"size": 64, "sent": 10, "received": 8, "transactions_per_sec": 1234.4,
             "latency": {"percentiles_us": [["p50", 1000.0], ["p99", 3000.0], ["p99.9", 4000.0]]},
             "histogram": [[1000.0, 2000.0, 6], [2000.0, 4000.0, 2], [4000.0, null, 2]]},
            {"size": 1024, "latency": {"percentiles_us": [["p50", 2000.0], ["p99", 5000.0]]}},
        ],
    })
}

#[test]
fn a_request_response_run_plots_probes_sizes_and_its_distribution() {
    let v = rr(&rr_result(), 0.5);
    assert_eq!(
        titles(&v),
        [
            "Round trip over time",
            "Round trip by request size",
            "Round-trip histogram (ACE's bins)",
            "Round-trip CDF",
            "Round-trip percentiles",
        ]
    );
    // Probe k left k intervals (0.5 s) after the first; a lost one sits on the axis.
    let over = chart_of(&v, "Round trip over time");
    assert_eq!(points(over, "round trip"), [(0.0, 1.5), (1.0, 2.5)]);
    assert_eq!(points(over, "lost"), [(0.5, 0.0)]);
    let sizes = chart_of(&v, "Round trip by request size");
    assert_eq!(points(sizes, "p50"), [(64.0, 1.0), (1024.0, 2.0)]);
    assert_eq!(points(sizes, "p99"), [(64.0, 3.0), (1024.0, 5.0)]);
    // Bars at the bins' middles; the bin above --hist-max has none.
    assert_eq!(
        points(
            chart_of(&v, "Round-trip histogram (ACE's bins)"),
            "round trips"
        ),
        [(1.5, 6.0), (3.0, 2.0)]
    );
    // The CDF stops short of 100% by the round trips above --hist-max.
    let cdf = chart_of(&v, "Round-trip CDF");
    assert_eq!(points(cdf, "at or under"), [(2.0, 60.0), (4.0, 80.0)]);
    let marks: Vec<_> = cdf.marks.iter().map(|m| m.x).collect();
    assert_eq!(marks, [1.0, 3.0, 4.0]);
    assert_eq!(fact(&v, "p50"), "1.000 ms");
    assert_eq!(fact(&v, "p99"), "3.000 ms");
    assert_eq!(fact(&v, "per second"), "1234");
    assert_eq!(fact(&v, "lost"), "2");
}

#[test]
fn a_single_run_without_probes_has_only_its_percentiles() {
    let v = rr(&json!({"runs": [{"latency": {}}]}), 1.0);
    assert_eq!(titles(&v), ["Round-trip percentiles"]);
    assert_eq!(fact(&v, "per second"), "-");
    assert_eq!(fact(&v, "lost"), "0");
}

#[test]
fn load_probes_are_plotted_by_kind_with_the_phases_marked() {
    let r = json!({
        "verdict": "mild bufferbloat",
        "probes": [
            {"t": 0.5, "kind": "udp", "ms": 1.0},
            {"t": 1.5, "kind": "tcp_connect", "ms": 2.0},
            {"t": 2.5, "kind": "self_rtt", "ms": 30.0},
            {"t": 3.0, "kind": "udp", "ms": null},
        ],
        "phases": [
            {"phase": "idle", "start": 0.0, "responsiveness": {"rpm": 5000.0}},
            {"phase": "download", "start": 2.0, "down_bps": 9e6,
             "responsiveness": {"rpm": 1234.4}},
            {"phase": "upload", "start": 7.0},
        ],
    });
    let v = load(&r);
    let lat = chart_of(&v, "Probe latency over the run");
    assert_eq!(points(lat, "UDP round trip"), [(0.5, 1.0)]);
    assert_eq!(points(lat, "new connection"), [(1.5, 2.0)]);
    assert_eq!(points(lat, "load connection RTT"), [(2.5, 30.0)]);
    let marks: Vec<_> = lat.marks.iter().map(|m| (m.x, m.label.as_str())).collect();
    assert_eq!(marks, [(0.0, "idle"), (2.0, "download"), (7.0, "upload")]);
    assert_eq!(
        points(chart_of(&v, "Goodput per phase"), "down"),
        [(1.0, 9e6)]
    );
    // The idle phase's RPM is the baseline, not a fact of its own.
    assert_eq!(
        v.facts,
        [
            ("verdict".to_string(), "mild bufferbloat".to_string()),
            ("download RPM".to_string(), "1234".to_string()),
        ]
    );
}

/// The same view: its facts and charts.
fn same(a: &View, b: &View) {
    assert_eq!(a.facts, b.facts);
    assert_eq!(a.charts, b.charts);
    assert!(!a.facts.is_empty() || !a.charts.is_empty());
}

#[test]
fn each_test_is_viewed_by_its_own_kind() {
    let doc = |test: &str, r: serde_json::Value| json!({"test": test, "result": r});
    let tcp_r = json!({"totals": {"sent": 10}, "intervals": []});
    same(&view(&doc("tcp", tcp_r.clone())), &tcp(&tcp_r));
    same(&view(&doc("udp", udp_result())), &udp(&udp_result()));
    same(&view(&doc("sweep", udp_result())), &udp(&udp_result()));
    same(&view(&doc("rr", rr_result())), &rr(&rr_result(), 1.0));
    same(&view(&doc("ping", rr_result())), &rr(&rr_result(), 1.0));
    // Probes are placed by the run's interval (ms).
    let mut ping = doc("ping", rr_result());
    ping["config"] = json!({"interval": 250.0});
    same(&view(&ping), &rr(&rr_result(), 0.25));
    let crr_r = json!({"per_sec": 10.0, "transactions": 5, "failed": 0});
    same(&view(&doc("crr", crr_r.clone())), &crr(&crr_r));
    let load_r = json!({"verdict": "ok", "probes": [], "phases": []});
    same(&view(&doc("load", load_r.clone())), &load(&load_r));
    let merge_r = json!({"kind": "tcp", "inputs": [1, 2]});
    same(
        &view(&doc("merge", merge_r.clone())),
        &super::super::merge::view(&merge_r),
    );
    let v = view(&doc("relay", json!({})));
    assert!(v.facts.is_empty() && v.charts.is_empty());
}
