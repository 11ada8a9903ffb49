//! What to plot for each kind of netrig result, read from its JSON
//! envelope: the charts (with a caption saying what to look for) and the
//! key numbers for the header. Pure: a JSON value in, charts out.

use serde_json::Value;

use super::plot::{
    View, arr, cdf, chart, f, ms_fact, percentile, percentile_bars, percentile_marks, pts, series,
};
use super::svg::{Chart, Mark, Series, Style, Unit};
use super::tcp::{crr, tcp};

type Points = Vec<(f64, f64)>;

/// Received bits per second of each interval (from its bytes and length).
fn rates(rows: &[Value]) -> Vec<(f64, f64)> {
    let mut prev = 0.0;
    rows.iter()
        .filter_map(|row| {
            let t = f(&row["time_slice"])?;
            let dt = t - std::mem::replace(&mut prev, t);
            (dt > 0.0).then(|| (t, f(&row["bytes"]).unwrap_or(0.0) * 8.0 / dt))
        })
        .collect()
}

fn loss_fact(t: &Value) -> String {
    let sent = f(&t["sent"]).unwrap_or(0.0);
    if sent > 0.0 {
        format!("{:.3}%", f(&t["lost"]).unwrap_or(0.0) * 100.0 / sent)
    } else {
        "-".into()
    }
}

/// Several streams (`-P`, `--bidir`): each stream's rate and delay, and
/// the sums per direction.
fn udp_streams(r: &Value, streams: &[Value]) -> View {
    let name = |s: &Value| {
        format!(
            "{} {}",
            s["index"],
            if s["reverse"].as_bool() == Some(true) {
                "down"
            } else {
                "up"
            }
        )
    };
    let per = |y: fn(&[Value]) -> Points| -> Vec<Series> {
        streams
            .iter()
            .map(|s| series(&name(s), Style::Line, y(arr(&s["report"]["intervals"]))))
            .collect()
    };
    let mut facts = Vec::new();
    for (dir, k) in [("up", "sum_up"), ("down", "sum_down")] {
        if r[k].is_object() {
            facts.push((format!("{dir} loss"), loss_fact(&r[k])));
            facts.push((
                format!("{dir} delay p50"),
                ms_fact(&percentile(&r[k]["percentiles_us"], "p50")),
            ));
        }
    }
    View {
        facts,
        charts: vec![
            chart(
                "Received rate per stream",
                "One line per stream and direction: a stream below the others is starved or limited.",
                ("time", Unit::Secs),
                ("rate", Unit::Bps),
                per(rates),
            ),
            chart(
                "Mean one-way delay per stream",
                "Streams sharing a queue rise together; one direction rising alone is that direction's queue.",
                ("time", Unit::Secs),
                ("delay", Unit::Ms),
                per(|rows| {
                    pts(rows, "time_slice", |row| {
                        f(&row["delay_avg_us"]).map(|u| u / 1e3)
                    })
                }),
            ),
        ],
    }
}

fn udp(r: &Value) -> View {
    if let Some(streams) = r["streams"].as_array() {
        return udp_streams(r, streams);
    }
    let rows = arr(&r["intervals"]);
    let rate = rates(rows);
    let us_ms = |k: &'static str| move |row: &Value| f(&row[k]).map(|u| u / 1e3);
    let t = &r["totals"];
    // Buckets as (lower µs, upper µs, count), log-linear: bars at their
    // lower edges, the CDF at their upper ones.
    let buckets: Vec<(f64, f64, f64)> = arr(&t["histogram"])
        .iter()
        .filter_map(|b| Some((f(&b[0])? / 1e3, f(&b[1])? / 1e3, f(&b[2])?)))
        .collect();
    let hist: Points = buckets.iter().map(|&(lo, _, n)| (lo, n)).collect();
    let mut charts = vec![
        chart(
            "Received rate over time",
            "What arrived each interval; a flat line under the sending rate is a limit on the path.",
            ("time", Unit::Secs),
            ("rate", Unit::Bps),
            vec![series("received", Style::Line, rate)],
        ),
        chart(
            "Loss, duplicates and reordering per interval",
            "Bursts of loss point to queues overflowing or policers; any corrupt datagram is a fault.",
            ("time", Unit::Secs),
            ("datagrams", Unit::Plain),
            ["drops", "duplicates", "reordered", "corrupt"]
                .iter()
                .map(|k| series(k, Style::Line, pts(rows, "time_slice", |row| f(&row[*k]))))
                .collect(),
        ),
        chart(
            "One-way delay per interval",
            "The gap between min and max is queueing; a rising minimum is a longer path or a clock drift.",
            ("time", Unit::Secs),
            ("delay", Unit::Ms),
            vec![
                series(
                    "max",
                    Style::Line,
                    pts(rows, "time_slice", us_ms("delay_max_us")),
                ),
                series(
                    "mean",
                    Style::Line,
                    pts(rows, "time_slice", us_ms("delay_avg_us")),
                ),
                series(
                    "min",
                    Style::Line,
                    pts(rows, "time_slice", us_ms("delay_min_us")),
                ),
                series(
                    "jitter",
                    Style::Line,
                    pts(rows, "time_slice", us_ms("jitter_us")),
                ),
            ],
        ),
    ];
    let frames = |k: &'static str| pts(rows, "time_slice", move |row| f(&row["frames"][k]));
    if !frames("completed").is_empty() {
        charts.push(chart(
            "Media frames per interval",
            "Every frame should complete; dropped frames are late or lost datagrams, errors failed verification.",
            ("time", Unit::Secs),
            ("frames", Unit::Plain),
            ["completed", "dropped", "repeated", "errors"]
                .iter()
                .map(|k| series(k, Style::Line, frames(k)))
                .collect(),
        ));
    }
    let bursts = arr(&r["bursts"]);
    if !bursts.is_empty() {
        charts.push(chart(
            "Bursts",
            "Each burst's time to arrive whole (first datagram to last); with --trip-times, from its first send.",
            ("burst", Unit::Plain),
            ("time", Unit::Ms),
            vec![
                series("transfer ms", Style::Bars, pts(bursts, "index", |b| f(&b["transfer_ms"]))),
                series("trip ms", Style::Bars, pts(bursts, "index", |b| f(&b["trip_ms"]))),
            ],
        ));
    }
    if !hist.is_empty() {
        charts.push(chart(
            "Delay histogram",
            "Datagrams per delay bin; a long right tail is occasional queueing.",
            ("one-way delay", Unit::Ms),
            ("datagrams", Unit::Plain),
            vec![series("datagrams", Style::Bars, hist.clone())],
        ));
    }
    let uppers: Points = buckets.iter().map(|&(_, hi, n)| (hi, n)).collect();
    let mut delay_cdf = chart(
        "Delay CDF",
        "Share of datagrams at or under each delay, with the HDR percentiles marked: a steep curve is a steady path, a long flat top is a tail.",
        ("one-way delay", Unit::Ms),
        ("datagrams (%)", Unit::Plain),
        vec![series("at or under", Style::Line, cdf(&uppers))],
    );
    if !delay_cdf.series.is_empty() {
        delay_cdf.marks = percentile_marks(&t["percentiles_us"], &["p50", "p99", "p99.9"]);
        charts.push(delay_cdf);
    }
    if let Some(bins) = r["bins"].as_array().filter(|b| !b.is_empty()) {
        // A sweep's point is the rate curve: it comes first.
        let time = std::mem::take(&mut charts);
        charts = sweep(bins, &r["analysis"]);
        charts.extend(time);
    }
    let loss = loss_fact(t);
    View {
        facts: vec![
            ("received".into(), t["unique"].to_string()),
            ("loss".into(), loss),
            (
                "delay p50".into(),
                ms_fact(&percentile(&t["percentiles_us"], "p50")),
            ),
            (
                "delay p99".into(),
                ms_fact(&percentile(&t["percentiles_us"], "p99")),
            ),
            ("jitter".into(), ms_fact(&t["jitter_us"])),
        ],
        charts,
    }
}

/// Offered against received rate, loss and delay against offered, with the
/// congestion point marked.
fn sweep(bins: &[Value], a: &Value) -> Vec<Chart> {
    // Curves against the offered rate read left to right.
    let mut bins = bins.to_vec();
    bins.sort_by(|x, y| {
        f(&x["offered_bps"])
            .unwrap_or(0.0)
            .total_cmp(&f(&y["offered_bps"]).unwrap_or(0.0))
    });
    let bins = bins.as_slice();
    let mut charts = vec![
        chart(
            "Offered vs received rate",
            "Received follows offered until the path's limit; the bend is the congestion point.",
            ("offered", Unit::Bps),
            ("rate", Unit::Bps),
            vec![
                series(
                    "received",
                    Style::Line,
                    pts(bins, "offered_bps", |b| f(&b["received_bps"])),
                ),
                series(
                    "offered",
                    Style::Line,
                    pts(bins, "offered_bps", |b| f(&b["offered_bps"])),
                ),
            ],
        ),
        chart(
            "Loss and delay against offered rate",
            "A shaper queues (delay rises, then loss); a policer drops at once with no delay.",
            ("offered", Unit::Bps),
            ("loss % / delay ms", Unit::Plain),
            vec![
                series(
                    "loss %",
                    Style::Line,
                    pts(bins, "offered_bps", |b| f(&b["loss_pct"])),
                ),
                series(
                    "mean delay ms",
                    Style::Line,
                    pts(bins, "offered_bps", |b| {
                        f(&b["delay_avg_us"]).map(|u| u / 1e3)
                    }),
                ),
            ],
        ),
    ];
    if let Some(c) = f(&a["congestion_bps"]) {
        let label = match a["limiter"].as_str() {
            Some(l) => format!(
                "congestion ({l}) {}",
                crate::protocol::units::format_bits_per_sec(c)
            ),
            None => format!(
                "congestion {}",
                crate::protocol::units::format_bits_per_sec(c)
            ),
        };
        for ch in &mut charts {
            ch.marks.push(Mark {
                x: c,
                label: label.clone(),
            });
        }
    }
    charts
}

fn rr(r: &Value, every_s: f64) -> View {
    let runs = arr(&r["runs"]);
    let mut charts = Vec::new();
    let probes = arr(&r["probes"]["rows"]);
    if !probes.is_empty() {
        // A probe leaves `seq` intervals after the first.
        let at = |p: &Value| f(&p[0]).map(|s| s * every_s);
        charts.push(chart(
            "Round trip over time",
            "Each probe at its send time; lost ones on the axis. Steps are route or queue changes.",
            ("time", Unit::Secs),
            ("round trip", Unit::Ms),
            vec![
                series(
                    "round trip",
                    Style::Points,
                    probes
                        .iter()
                        .filter_map(|p| Some((at(p)?, f(&p[1])?)))
                        .collect(),
                ),
                series(
                    "lost",
                    Style::Points,
                    probes
                        .iter()
                        .filter(|p| p[1].is_null())
                        .filter_map(|p| Some((at(p)?, 0.0)))
                        .collect(),
                ),
            ],
        ));
    }
    if runs.len() > 1 {
        let by_size = |k: &'static str| {
            move |run: &Value| f(&percentile(&run["latency"]["percentiles_us"], k)).map(|u| u / 1e3)
        };
        charts.push(chart(
            "Round trip by request size",
            "Latency against size: a knee shows where a size starts to cost extra round trips or copies.",
            ("request size", Unit::Bytes),
            ("round trip", Unit::Ms),
            vec![
                series("p50", Style::Line, pts(runs, "size", by_size("p50"))),
                series("p99", Style::Line, pts(runs, "size", by_size("p99"))),
            ],
        ));
    }
    let first = runs.first().cloned().unwrap_or(Value::Null);
    let hist: Points = arr(&first["histogram"])
        .iter()
        .filter_map(|b| Some(((f(&b[0])? + f(&b[1])?) / 2e3, f(&b[2])?)))
        .collect();
    if !hist.is_empty() {
        charts.push(chart(
            "Round-trip histogram (ACE's bins)",
            "Round trips per bin of --hist-min..--hist-max; more than one hump is more than one path or wake-up.",
            ("round trip", Unit::Ms),
            ("round trips", Unit::Plain),
            vec![series("round trips", Style::Bars, hist)],
        ));
    }
    // Round trips above --hist-max have no upper edge: they count in the
    // total, so the curve ends short of 100% by their share.
    let ace: Points = arr(&first["histogram"])
        .iter()
        .filter_map(|b| Some((f(&b[1]).map_or(f64::INFINITY, |u| u / 1e3), f(&b[2])?)))
        .collect();
    let mut rtt_cdf = chart(
        "Round-trip CDF",
        "Share of round trips at or under each time (ACE's bins), with the HDR percentiles marked: the gap between p50 and p99 is the jitter a user feels.",
        ("round trip", Unit::Ms),
        ("round trips (%)", Unit::Plain),
        vec![series(
            "at or under",
            Style::Line,
            cdf(&ace).into_iter().filter(|p| p.0.is_finite()).collect(),
        )],
    );
    if !rtt_cdf.series.is_empty() {
        rtt_cdf.marks = percentile_marks(
            &first["latency"]["percentiles_us"],
            &["p50", "p99", "p99.9"],
        );
        charts.push(rtt_cdf);
    }
    charts.push(percentile_bars(
        "Round-trip percentiles",
        "A tall tail is rare slow round trips.",
        "round trip",
        &[("round trip", &first["latency"])],
    ));
    let l = &first["latency"];
    View {
        facts: vec![
            (
                "p50".into(),
                ms_fact(&percentile(&l["percentiles_us"], "p50")),
            ),
            (
                "p99".into(),
                ms_fact(&percentile(&l["percentiles_us"], "p99")),
            ),
            (
                "per second".into(),
                f(&first["transactions_per_sec"]).map_or("-".into(), |v| format!("{v:.0}")),
            ),
            (
                "lost".into(),
                (f(&first["sent"]).unwrap_or(0.0) - f(&first["received"]).unwrap_or(0.0))
                    .to_string(),
            ),
        ],
        charts,
    }
}

fn load(r: &Value) -> View {
    let probes = arr(&r["probes"]);
    let kind = |k: &'static str| {
        probes
            .iter()
            .filter(|p| p["kind"] == k)
            .filter_map(|p| Some((f(&p["t"])?, f(&p["ms"])?)))
            .collect::<Vec<_>>()
    };
    let phases = arr(&r["phases"]);
    let mut latency = chart(
        "Probe latency over the run",
        "Each phase's probes against idle: latency that climbs under load is bufferbloat.",
        ("time", Unit::Secs),
        ("latency", Unit::Ms),
        vec![
            series("UDP round trip", Style::Points, kind("udp")),
            series("new connection", Style::Points, kind("tcp_connect")),
            series("load connection RTT", Style::Points, kind("self_rtt")),
        ],
    );
    latency.marks = phases
        .iter()
        .filter_map(|p| {
            Some(Mark {
                x: f(&p["start"])?,
                label: p["phase"].as_str()?.into(),
            })
        })
        .collect();
    // Phases by name along x, in the order they ran.
    let names: Vec<String> = phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            p["phase"]
                .as_str()
                .map_or_else(|| format!("phase {i}"), str::to_string)
        })
        .collect();
    let per_phase = |y: &dyn Fn(&Value) -> Option<f64>| -> Vec<(f64, f64)> {
        phases
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i as f64, y(p)?)))
            .collect()
    };
    let mut goodput = chart(
        "Goodput per phase",
        "What each phase moved each way: idle moves nothing, each loaded phase should fill the path.",
        ("phase", Unit::Plain),
        ("goodput", Unit::Bps),
        vec![
            series("down", Style::Bars, per_phase(&|p| f(&p["down_bps"]))),
            series("up", Style::Bars, per_phase(&|p| f(&p["up_bps"]))),
        ],
    );
    goodput.categories = names.clone();
    // Idle RPM is often a hundred times a loaded one: on a linear axis the
    // loaded bars, the ones that matter, would be slivers.
    let mut rpm = chart(
        "Responsiveness per phase (RPM)",
        "Round trips per minute, higher is better, on a log scale (each gridline ten times the one below): a loaded phase far below idle is bufferbloat.",
        ("phase", Unit::Plain),
        ("RPM (log scale)", Unit::Plain),
        vec![series(
            "RPM",
            Style::Bars,
            per_phase(&|p| f(&p["responsiveness"]["rpm"])),
        )],
    );
    rpm.categories = names;
    rpm.log_y = true;
    let charts = vec![latency, goodput, rpm];
    let mut facts = vec![(
        "verdict".into(),
        r["verdict"].as_str().unwrap_or("-").to_string(),
    )];
    for p in phases.iter().skip(1) {
        if let (Some(name), Some(rpm)) = (p["phase"].as_str(), f(&p["responsiveness"]["rpm"])) {
            facts.push((format!("{name} RPM"), format!("{rpm:.0}")));
        }
    }
    View { facts, charts }
}

/// The view of one result envelope (its `test` and `result`).
pub fn view(doc: &Value) -> View {
    let r = &doc["result"];
    match doc["test"].as_str() {
        Some("tcp") => tcp(r),
        Some("udp") | Some("sweep") => udp(r),
        Some("rr") | Some("ping") => rr(r, f(&doc["config"]["interval"]).unwrap_or(1000.0) / 1e3),
        Some("crr") => crr(r),
        Some("load") => load(r),
        Some("merge") => super::merge::view(r),
        _ => View {
            facts: Vec::new(),
            charts: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn load_phases_are_named_and_rpm_is_on_a_log_axis() {
        let phase = |name: &str, rpm: f64| {
            json!({"phase": name, "start": 0.0, "down_bps": 1e6, "up_bps": 0.0,
                "responsiveness": {"rpm": rpm}})
        };
        let r = json!({"probes": [], "phases": [
            phase("idle", 204_794.0), phase("download", 1_020.0),
            phase("upload", 939.0), phase("both", 700.0)
        ]});
        let v = load(&r);
        let c = |t: &str| v.charts.iter().find(|c| c.title == t).unwrap();
        for t in ["Goodput per phase", "Responsiveness per phase (RPM)"] {
            assert_eq!(
                c(t).categories,
                ["idle", "download", "upload", "both"],
                "{t}"
            );
        }
        let rpm = c("Responsiveness per phase (RPM)");
        assert!(rpm.log_y && !c("Goodput per phase").log_y);
        assert!(rpm.caption.contains("log scale"), "{}", rpm.caption);
        assert_eq!(
            rpm.series[0].points,
            [(0.0, 204_794.0), (1.0, 1_020.0), (2.0, 939.0), (3.0, 700.0)]
        );
        // A phase without a name still gets a place.
        let r = json!({"probes": [], "phases": [{"down_bps": 1.0}]});
        assert_eq!(load(&r).charts[1].categories, ["phase 0"]);
    }

    #[test]
    fn rr_percentiles_are_named() {
        let r = json!({"runs": [{"latency": {"percentiles_us":
            [["p50", 10.0], ["p90", 20.0], ["p99", 30.0], ["p99.9", 40.0], ["max", 50.0]]}}]});
        let v = rr(&r, 1.0);
        let c = v
            .charts
            .iter()
            .find(|c| c.title == "Round-trip percentiles")
            .unwrap();
        assert_eq!(c.categories, ["p50", "p90", "p99", "p99.9", "max"]);
        assert_eq!(c.series[0].points[4], (4.0, 0.05));
    }
}

#[cfg(test)]
#[path = "kinds_tests.rs"]
mod view_tests;
