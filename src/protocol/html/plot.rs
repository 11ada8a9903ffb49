//! The helpers every result kind's charts are built with: reading numbers
//! out of JSON, series and charts with empty series left out, and the
//! key-number formats, cumulative distributions. Pure.

use serde_json::Value;

use super::svg::{Chart, Mark, Series, Style, Unit};

/// Key numbers and charts of one result.
pub struct View {
    /// (name, value) pairs shown large.
    pub facts: Vec<(String, String)>,
    /// The charts, in order.
    pub charts: Vec<Chart>,
}

pub(super) fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

pub(super) fn arr(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

pub(super) fn series(name: &str, style: Style, points: Vec<(f64, f64)>) -> Series {
    Series {
        name: name.into(),
        points,
        style,
    }
}

pub(super) fn chart(
    title: &str,
    caption: &str,
    x: (&str, Unit),
    y: (&str, Unit),
    series: Vec<Series>,
) -> Chart {
    Chart {
        title: title.into(),
        caption: caption.into(),
        x: (x.0.into(), x.1),
        y: (y.0.into(), y.1),
        series: series
            .into_iter()
            .filter(|s| !s.points.is_empty())
            .collect(),
        marks: Vec::new(),
        categories: Vec::new(),
        log_y: false,
    }
}

/// Points of `rows` with x from `xk` and y from `y` (rows lacking either
/// are left out).
pub(super) fn pts(rows: &[Value], xk: &str, y: impl Fn(&Value) -> Option<f64>) -> Vec<(f64, f64)> {
    rows.iter()
        .filter_map(|r| Some((f(&r[xk])?, y(r)?)))
        .collect()
}

pub(super) fn ms_fact(v: &Value) -> String {
    f(v).map_or("-".into(), |us| format!("{:.3} ms", us / 1e3))
}

pub(super) fn percentile(p: &Value, name: &str) -> Value {
    arr(p)
        .iter()
        .find(|e| e[0] == name)
        .map_or(Value::Null, |e| e[1].clone())
}

/// A bar chart of percentiles, one series per `(name, latency)` (each
/// latency has a `percentiles_us` list), the x axis naming them (p50,
/// p90, …, max) in the order they first appear.
pub(super) fn percentile_bars(
    title: &str,
    caption: &str,
    y: &str,
    latencies: &[(&str, &Value)],
) -> Chart {
    let mut names: Vec<String> = Vec::new();
    for (_, l) in latencies {
        for p in arr(&l["percentiles_us"]) {
            if let Some(n) = p[0].as_str().filter(|n| !names.iter().any(|m| m == n)) {
                names.push(n.to_string());
            }
        }
    }
    let bars = latencies
        .iter()
        .map(|(name, l)| {
            let points = arr(&l["percentiles_us"])
                .iter()
                .filter_map(|p| {
                    let at = names.iter().position(|n| p[0] == n.as_str())?;
                    Some((at as f64, f(&p[1])? / 1e3))
                })
                .collect();
            series(name, Style::Bars, points)
        })
        .collect();
    let mut c = chart(
        title,
        caption,
        ("percentile", Unit::Plain),
        (y, Unit::Ms),
        bars,
    );
    c.categories = names;
    c
}

/// The cumulative share (%) of `bins` ((upper edge, count), in edge order)
/// at each upper edge, up to the first edge that holds every sample (the
/// empty bins after it would only stretch the axis).
pub(super) fn cdf(bins: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let total: f64 = bins.iter().map(|b| b.1).sum();
    if total <= 0.0 {
        return Vec::new();
    }
    let mut acc = 0.0;
    let mut out = Vec::new();
    for &(edge, n) in bins {
        acc += n;
        out.push((edge, 100.0 * acc / total));
        if acc >= total {
            break;
        }
    }
    out
}

/// Markers at the named percentiles of `p` (a `percentiles_us` list), in
/// milliseconds, labelled with their values.
pub(super) fn percentile_marks(p: &Value, names: &[&str]) -> Vec<Mark> {
    names
        .iter()
        .filter_map(|name| {
            let ms = f(&percentile(p, name))? / 1e3;
            Some(Mark {
                x: ms,
                label: format!("{name} {}", Unit::Ms.label(ms)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cdf_climbs_to_100_and_stops_where_it_gets_there() {
        let bins = [(1.0, 1.0), (2.0, 0.0), (3.0, 3.0), (4.0, 0.0), (5.0, 0.0)];
        assert_eq!(cdf(&bins), vec![(1.0, 25.0), (2.0, 25.0), (3.0, 100.0)]);
        assert!(cdf(&[(1.0, 0.0)]).is_empty());
        assert!(cdf(&[]).is_empty());
    }

    #[test]
    fn percentile_bars_are_named_by_their_percentiles() {
        let a = json!({"percentiles_us": [["p50", 1000.0], ["p99", 4000.0], ["max", 9000.0]]});
        let b = json!({"percentiles_us": [["p50", 2000.0], ["p99.9", 5000.0], ["max", 8000.0]]});
        let c = percentile_bars("t", "c", "time", &[("a", &a), ("b", &b)]);
        assert_eq!(c.categories, ["p50", "p99", "max", "p99.9"]);
        assert_eq!(c.series[0].points, [(0.0, 1.0), (1.0, 4.0), (2.0, 9.0)]);
        assert_eq!(c.series[1].points, [(0.0, 2.0), (3.0, 5.0), (2.0, 8.0)]);
        assert_eq!((c.x.0.as_str(), c.y.1), ("percentile", Unit::Ms));
        // No latency: no bars, no names.
        let none = percentile_bars("t", "c", "time", &[("a", &Value::Null)]);
        assert!(none.series.is_empty() && none.categories.is_empty());
    }

    #[test]
    fn percentile_marks_sit_at_their_values_in_ms() {
        let p = json!([["p50", 1500.0], ["p99", 25000.0], ["max", 90000.0]]);
        let m = percentile_marks(&p, &["p50", "p99", "p99.9"]);
        assert_eq!(
            m,
            vec![
                Mark {
                    x: 1.5,
                    label: "p50 1.5 ms".into()
                },
                Mark {
                    x: 25.0,
                    label: "p99 25 ms".into()
                },
            ]
        );
    }

    #[test]
    fn a_fact_in_microseconds_reads_in_milliseconds_to_the_microsecond() {
        assert_eq!(ms_fact(&json!(1234.0)), "1.234 ms");
        assert_eq!(ms_fact(&json!(0.4)), "0.000 ms");
        // No figure (a direction that moved nothing): a dash, not zero.
        assert_eq!(ms_fact(&Value::Null), "-");
    }
}
