//! What to plot for connection-oriented results: tcp (goodput in total
//! and per connection, outcomes, TCP_INFO, durations) and crr. Pure.

use serde_json::Value;

use super::plot::{View, arr, chart, f, ms_fact, percentile, percentile_bars, pts, series};
use super::svg::{Chart, Style, Unit};

pub(super) fn tcp(r: &Value) -> View {
    let rows = arr(&r["intervals"]);
    let bits = |k: &'static str| move |row: &Value| f(&row[k]).map(|b| b * 8.0);
    let t = &r["totals"];
    let secs = f(&r["duration_secs"]).unwrap_or(0.0);
    // A direction that moved nothing (push sends only, pull receives
    // only) gets no line: a flat zero would read as "nothing arrived".
    let ways: Vec<(&str, &str)> = [("sent", "SendBps"), ("received", "RecvBps")]
        .into_iter()
        .filter(|(k, col)| match f(&t[*k]) {
            Some(total) => total > 0.0,
            None => rows.iter().any(|r| f(&r[*col]).is_some_and(|v| v > 0.0)),
        })
        .collect();
    let mut charts = vec![
        chart(
            "Goodput over time",
            "Steady lines are a healthy path; dips are stalls, steps are connections starting or ending. A direction that moved nothing has no line (push only sends, pull only receives).",
            ("time", Unit::Secs),
            ("goodput", Unit::Bps),
            ways.iter()
                .map(|(k, col)| series(k, Style::Line, pts(rows, "TimeSlice", bits(col))))
                .collect(),
        ),
        chart(
            "Connection outcomes",
            "Connections that ended, so far: anything but Completed growing is a failure to look into.",
            ("time", Unit::Secs),
            ("connections", Unit::Plain),
            ["Completed", "NetError", "DataError"]
                .iter()
                .map(|k| series(k, Style::Line, pts(rows, "TimeSlice", |row| f(&row[*k]))))
                .collect(),
        ),
    ];
    let rtt = pts(rows, "TimeSlice", |row| f(&row["RttUs"]).map(|u| u / 1e3));
    if !rtt.is_empty() {
        charts.push(chart(
            "TCP_INFO: smoothed RTT and retransmits",
            "RTT rising with goodput flat is a queue filling; retransmits mark losses.",
            ("time", Unit::Secs),
            ("RTT (ms) / retransmits", Unit::Plain),
            vec![
                series("RTT ms", Style::Line, rtt),
                series(
                    "retransmits",
                    Style::Bars,
                    pts(rows, "TimeSlice", |row| f(&row["Retransmits"])),
                ),
            ],
        ));
    }
    charts.extend(per_connection(arr(&r["connection_progress"])));
    let bins = arr(&r["connection_histogram"]);
    if !bins.is_empty() {
        charts.push(chart(
            "Connection duration histogram",
            "Connections by how long they took, connect to agreed result, in bins that double: one hump is a uniform run; a second, later hump is connections that stalled.",
            ("duration (each bar: up to the time under it)", Unit::Log2Us),
            ("connections", Unit::Plain),
            vec![series(
                "connections",
                Style::Bars,
                bins.iter()
                    .filter_map(|b| Some((f(&b["hi_us"])?.log2(), f(&b["count"])?)))
                    .collect(),
            )],
        ));
    }
    if r["connection_times"].is_object() {
        charts.push(percentile_bars(
            "Connection durations",
            "Connect to agreed result, by percentile: a tall tail is connections that stalled.",
            "duration",
            &[("duration", &r["connection_times"])],
        ));
    }
    let goodput = if secs > 0.0 {
        let moved = f(&t["received"])
            .unwrap_or(0.0)
            .max(f(&t["sent"]).unwrap_or(0.0));
        crate::protocol::units::format_bits_per_sec(moved * 8.0 / secs)
    } else {
        "-".into()
    };
    View {
        facts: vec![
            ("goodput".into(), goodput),
            ("completed".into(), t["completed"].to_string()),
            ("network errors".into(), t["net_errors"].to_string()),
            ("data errors".into(), t["data_errors"].to_string()),
            ("duration".into(), format!("{secs:.2} s")),
        ],
        charts,
    }
}

/// Goodput of each tracked connection over time, a chart per direction
/// that moved data: the rate between its consecutive byte counts.
fn per_connection(conns: &[Value]) -> Vec<Chart> {
    let rate = |c: &Value, key: &str| -> Vec<(f64, f64)> {
        arr(&c["points"])
            .windows(2)
            .filter_map(|w| {
                let (t0, t1) = (f(&w[0]["secs"])?, f(&w[1]["secs"])?);
                let (b0, b1) = (f(&w[0][key])?, f(&w[1][key])?);
                (t1 > t0).then(|| (t1, (b1 - b0) * 8.0 / (t1 - t0)))
            })
            .collect()
    };
    let mut charts = Vec::new();
    for key in ["sent", "received"] {
        let moved = conns.iter().any(|c| {
            arr(&c["points"])
                .last()
                .and_then(|p| f(&p[key]))
                .is_some_and(|b| b > 0.0)
        });
        if !moved {
            continue;
        }
        let lines = conns
            .iter()
            .map(|c| {
                let mut name = format!("#{}", c["index"]);
                if let Some(k) = c["result"].as_str().filter(|k| *k != "success") {
                    name = format!("{name} ({k})");
                }
                series(&name, Style::Line, rate(c, key))
            })
            .collect();
        charts.push(chart(
            &format!("Goodput per connection, {key}"),
            &format!(
                "The first {} connections by opening, sampled with TCP_INFO mid-interval: even lines share the path fairly; one low line is a connection starved or stuck behind losses.",
                conns.len()
            ),
            ("time", Unit::Secs),
            ("goodput", Unit::Bps),
            lines,
        ));
    }
    charts
}

pub(super) fn crr(r: &Value) -> View {
    View {
        facts: vec![
            (
                "per second".into(),
                f(&r["per_sec"]).map_or("-".into(), |v| format!("{v:.0}")),
            ),
            ("succeeded".into(), r["transactions"].to_string()),
            ("failed".into(), r["failed"].to_string()),
            (
                "handshake p50".into(),
                ms_fact(&percentile(&r["handshake"]["percentiles_us"], "p50")),
            ),
        ],
        charts: vec![percentile_bars(
            "Handshake and transaction percentiles",
            "A transaction far above its handshake is server time.",
            "time",
            &[
                ("handshake", &r["handshake"]),
                ("transaction", &r["transaction"]),
            ],
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_direction_that_moved_nothing_has_no_goodput_line() {
        let run = |sent: u64, received: u64| {
            json!({"duration_secs": 1.0, "totals": {"sent": sent, "received": received},
            "intervals": [
                {"TimeSlice": 0.5, "SendBps": sent / 2, "RecvBps": received / 2},
                {"TimeSlice": 1.0, "SendBps": sent / 2, "RecvBps": received / 2}
            ]})
        };
        let lines = |r: &Value| -> Vec<String> {
            let c = &tcp(r).charts[0];
            assert_eq!(c.title, "Goodput over time");
            c.series.iter().map(|s| s.name.clone()).collect()
        };
        assert_eq!(lines(&run(1000, 0)), ["sent"]);
        assert_eq!(lines(&run(0, 1000)), ["received"]);
        assert_eq!(lines(&run(1000, 1000)), ["sent", "received"]);
        assert!(lines(&run(0, 0)).is_empty());
        // The rates in bits: 500 B/s each half second.
        assert_eq!(
            tcp(&run(1000, 0)).charts[0].series[0].points,
            [(0.5, 4000.0), (1.0, 4000.0)]
        );
        // Without totals (an interrupted run's partial file), the rows say.
        let mut partial = run(1000, 0);
        partial["totals"] = json!({});
        assert_eq!(lines(&partial), ["sent"]);
    }

    #[test]
    fn each_connection_is_a_line_of_its_rates_each_way_that_moved() {
        let conns = [
            json!({"index": 0, "result": "success", "points": [
                {"secs": 0.0, "sent": 0, "received": 0},
                {"secs": 0.5, "sent": 1000, "received": 0},
                {"secs": 0.5, "sent": 1000, "received": 0},
                {"secs": 2.5, "sent": 6000, "received": 0}
            ]}),
            json!({"index": 7, "result": "cancelled", "points": [
                {"secs": 1.0, "sent": 0, "received": 0},
                {"secs": 1.25, "sent": 250, "received": 0}
            ]}),
        ];
        let charts = per_connection(&conns);
        // Nothing was received: one chart, for what was sent.
        assert_eq!(charts.len(), 1);
        let c = &charts[0];
        assert_eq!(c.title, "Goodput per connection, sent");
        assert!(
            c.caption.starts_with("The first 2 connections"),
            "{}",
            c.caption
        );
        let names: Vec<&str> = c.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["#0", "#7 (cancelled)"]);
        // 1000 B in 0.5 s, then (a repeated instant skipped) 5000 B in 2 s.
        assert_eq!(c.series[0].points, vec![(0.5, 16_000.0), (2.5, 20_000.0)]);
        assert_eq!(c.series[1].points, vec![(1.25, 8_000.0)]);
        // A connection that moved nothing either way charts nothing.
        let idle = [json!({"index": 0, "result": "success", "points": [
            {"secs": 0.0, "sent": 0, "received": 0},
            {"secs": 1.0, "sent": 0, "received": 0}
        ]})];
        assert!(per_connection(&idle).is_empty());
        let both = [json!({"index": 3, "result": "success", "points": [
            {"secs": 0.0, "sent": 0, "received": 0},
            {"secs": 1.0, "sent": 2, "received": 1}
        ]})];
        let titles: Vec<String> = per_connection(&both).into_iter().map(|c| c.title).collect();
        assert_eq!(
            titles,
            [
                "Goodput per connection, sent",
                "Goodput per connection, received"
            ]
        );
    }

    #[test]
    fn rtt_durations_and_goodput_fact_come_from_the_run_or_are_left_out() {
        let titles =
            |v: &View| -> Vec<String> { v.charts.iter().map(|c| c.title.clone()).collect() };
        let full = json!({"duration_secs": 2.0,
            "totals": {"sent": 1000, "received": 250_000, "completed": 3, "net_errors": 1, "data_errors": 0},
            "intervals": [
                {"TimeSlice": 1.0, "RecvBps": 1, "RttUs": 1500.0, "Retransmits": 2},
                {"TimeSlice": 2.0, "RecvBps": 1, "RttUs": 250.0, "Retransmits": 0}
            ],
            "connection_histogram": [{"hi_us": 1024.0, "count": 3}, {"hi_us": 4096.0, "count": 1}]});
        let v = tcp(&full);
        let rtt = v
            .charts
            .iter()
            .find(|c| c.title.starts_with("TCP_INFO"))
            .expect("rtt chart");
        // Microseconds drawn as milliseconds.
        assert_eq!(rtt.series[0].points, [(1.0, 1.5), (2.0, 0.25)]);
        assert_eq!(rtt.series[1].points, [(1.0, 2.0), (2.0, 0.0)]);
        let hist = v
            .charts
            .iter()
            .find(|c| c.title == "Connection duration histogram")
            .expect("histogram");
        assert_eq!(hist.series[0].points, [(10.0, 3.0), (12.0, 1.0)]);
        // The larger direction over the run's duration: 250,000 B in 2 s.
        assert_eq!(
            v.facts[0],
            (
                "goodput".into(),
                crate::protocol::units::format_bits_per_sec(1e6)
            )
        );
        assert_eq!(v.facts[2], ("network errors".into(), "1".into()));
        assert_eq!(v.facts[4], ("duration".into(), "2.00 s".into()));
        // No RTT samples, no histogram, no duration: no such charts and no rate.
        let bare = json!({"duration_secs": 0.0, "totals": {"sent": 10, "received": 0},
            "intervals": [{"TimeSlice": 1.0, "SendBps": 10}]});
        let v = tcp(&bare);
        assert_eq!(titles(&v), ["Goodput over time", "Connection outcomes"]);
        assert_eq!(v.facts[0].1, "-");
        let no_time = json!({"totals": {"sent": 10}, "intervals": []});
        assert_eq!(tcp(&no_time).facts[0].1, "-");
        let negative = json!({"duration_secs": -1.0, "totals": {"sent": 10}, "intervals": []});
        assert_eq!(tcp(&negative).facts[0].1, "-");
    }
}
