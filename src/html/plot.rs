//! The helpers every result kind's charts are built with: reading numbers
//! out of JSON, series and charts with empty series left out, and the
//! key-number formats. Pure.

use serde_json::Value;

use super::svg::{Chart, Series, Style, Unit};

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

pub(super) fn latency_bars(name: &str, l: &Value) -> Series {
    let points = arr(&l["percentiles_us"])
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i as f64, f(&p[1])? / 1e3)))
        .collect();
    series(name, Style::Bars, points)
}
