//! Charts as inline SVG, written by netrig (no script, no fetch): line,
//! point and bar series on linear, log or categorical axes with round
//! ticks, a legend, markers at given x values, and long series thinned to
//! a min/max envelope per pixel column so no outlier is dropped. Text is
//! placed by [`super::layout`] so no two labels overlap. Pure: data in,
//! markup out.

use std::fmt::Write;

use super::layout::{self, MARK_PX, TICK_PX, stack, stride, text_width};

/// Most points a series is drawn with; longer ones become an envelope.
pub const MAX_POINTS: usize = 2000;

const W: f64 = 760.0;
const H: f64 = 300.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 46.0;

/// Series colours, in order (print-safe, distinct in grey too).
const COLOURS: [&str; 8] = [
    "#1f6fb4", "#d9480f", "#2b8a3e", "#862e9c", "#495057", "#c2255c", "#0b7285", "#e67700",
];

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Points joined by a line.
    Line,
    /// Separate points.
    Points,
    /// Bars from zero.
    Bars,
}

/// What the numbers on an axis are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bits per second, with k/M/G.
    Bps,
    /// Milliseconds.
    Ms,
    /// Seconds.
    Secs,
    /// Bytes, with K/M/G.
    Bytes,
    /// A plain number.
    Plain,
    /// A duration given as log2 of microseconds (log-2 bins), labelled as
    /// the duration.
    Log2Us,
}

impl Unit {
    /// A tick label.
    pub fn label(self, v: f64) -> String {
        let si = |v: f64, suffix: &str| {
            let a = v.abs();
            let (d, p) = if a >= 1e9 {
                (1e9, "G")
            } else if a >= 1e6 {
                (1e6, "M")
            } else if a >= 1e3 {
                (1e3, "k")
            } else {
                (1.0, "")
            };
            format!("{}{p}{suffix}", trim(v / d))
        };
        match self {
            Unit::Bps => si(v, "bit/s"),
            Unit::Bytes => si(v, "B"),
            Unit::Ms => format!("{} ms", trim(v)),
            Unit::Secs => format!("{} s", trim(v)),
            Unit::Plain => si(v, ""),
            Unit::Log2Us => {
                let us = v.exp2();
                if us >= 1e6 {
                    format!("{} s", trim(round3(us / 1e6)))
                } else if us >= 1e3 {
                    format!("{} ms", trim(round3(us / 1e3)))
                } else {
                    format!("{} µs", trim(round3(us)))
                }
            }
        }
    }
}

/// `v` to 3 significant digits (tick labels of doubling bins).
fn round3(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let m = 10f64.powi(2 - v.abs().log10().floor() as i32);
    (v * m).round() / m
}

/// A number with at most 3 significant decimals and no trailing zeros.
fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// One named data series.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// (x, y) points, in x order for lines.
    pub points: Vec<(f64, f64)>,
    /// How it is drawn.
    pub style: Style,
}

/// A vertical marker with a label (a congestion point, a phase start).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Where, in x units.
    pub x: f64,
    /// What it marks.
    pub label: String,
}

/// A chart: title, a caption saying what to look for, axes and series.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// One line under it: what to look for.
    pub caption: String,
    /// X axis name and unit.
    pub x: (String, Unit),
    /// Y axis name and unit.
    pub y: (String, Unit),
    /// The data.
    pub series: Vec<Series>,
    /// Vertical markers.
    pub marks: Vec<Mark>,
    /// Names of the x positions 0, 1, 2, … of a categorical axis
    /// (percentiles, phases), each labelled by name; empty: numeric x.
    pub categories: Vec<String>,
    /// Y on a log scale, for values decades apart (RPM).
    pub log_y: bool,
}

/// Round tick positions covering `lo..=hi`, about `n` of them.
pub fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() * step;
    (0..)
        .map(|i| first + i as f64 * step)
        .take_while(|t| *t <= hi + step * 1e-9)
        .take(50)
        .collect()
}

type Point = (f64, f64);

/// Thins a series to at most [`MAX_POINTS`]: each of `MAX_POINTS / 2`
/// equal x slices keeps its lowest and highest point, in x order, so peaks
/// and dips survive (an envelope, never a sample).
pub fn envelope(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points.to_vec();
    }
    let (x0, x1) = points
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
    let slices = MAX_POINTS / 2;
    let width = ((x1 - x0) / slices as f64).max(f64::MIN_POSITIVE);
    let mut best: Vec<Option<(Point, Point)>> = vec![None; slices];
    for &p in points {
        let i = (((p.0 - x0) / width) as usize).min(slices - 1);
        best[i] = Some(match best[i] {
            None => (p, p),
            Some((lo, hi)) => (
                if p.1 < lo.1 { p } else { lo },
                if p.1 > hi.1 { p } else { hi },
            ),
        });
    }
    let mut out = Vec::with_capacity(MAX_POINTS);
    for (lo, hi) in best.into_iter().flatten() {
        if lo.0 <= hi.0 {
            out.push(lo);
            if hi != lo {
                out.push(hi);
            }
        } else {
            out.push(hi);
            out.push(lo);
        }
    }
    out
}

/// Escapes text for HTML and SVG.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Renders `c` as an `<svg>` element. Each series is a `<g class="series">`
/// with `data-name` and `data-points` (points drawn) for tests and tools;
/// the frame carries `data-y-scale` (`linear` or `log`).
pub fn render(c: &Chart) -> String {
    let log = c.log_y;
    let pts: Vec<(f64, f64)> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|p| p.0.is_finite() && p.1.is_finite() && (!log || p.1 > 0.0))
        .collect();
    let cats = &c.categories;
    let xs = pts.iter().map(|p| p.0).chain(c.marks.iter().map(|m| m.x));
    let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let bars = c.series.iter().any(|s| s.style == Style::Bars);
    let (mut y0, mut y1) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.1), b.max(p.1))
        });
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if !y0.is_finite() {
        (y0, y1) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // Bars stand on their x values, a step apart: half a step of room
    // each side. Categories are bars (or points) at 0, 1, 2, ….
    let bar_n = c
        .series
        .iter()
        .filter(|s| s.style == Style::Bars)
        .map(|s| s.points.len())
        .max()
        .unwrap_or(0);
    let step = if !cats.is_empty() {
        (x0, x1) = (0.0, (cats.len() - 1) as f64);
        1.0
    } else if bar_n > 1 {
        (x1 - x0) / (bar_n - 1) as f64
    } else {
        1.0
    };
    if bars || !cats.is_empty() {
        (x0, x1) = (x0 - step / 2.0, x1 + step / 2.0);
    }
    let yt = if log {
        // Whole decades around the data, so values decades apart (an idle
        // RPM over loaded ones) all stand clear of the axis.
        (y0, y1) = (
            10f64.powf(y0.log10().floor()),
            10f64.powf(y1.log10().ceil()),
        );
        if y1 <= y0 {
            y1 = y0 * 10.0;
        }
        log_ticks(y0, y1)
    } else {
        // Rates, delays and counts read from zero.
        y0 = y0.min(0.0);
        if y1 <= y0 {
            y1 = y0 + 1.0;
        }
        let mut yt = ticks(y0, y1 * 1.05, 5);
        // The top tick at or above the highest value, so it is labelled.
        if let [.., a, b] = yt[..] {
            while yt.last().is_some_and(|t| *t < y1) && yt.len() < 50 {
                let next = yt[yt.len() - 1] + (b - a);
                yt.push(next);
            }
        }
        // Counts (every value whole) get whole ticks, where two are left.
        if pts.iter().all(|p| p.1.fract() == 0.0) {
            let whole: Vec<f64> = yt.iter().copied().filter(|t| t.fract() == 0.0).collect();
            if whole.len() >= 2 {
                yt = whole;
            }
        }
        y1 = yt.last().copied().unwrap_or(y1).max(y1);
        yt
    };
    let ylabels: Vec<String> = yt.iter().map(|t| c.y.1.label(*t)).collect();
    // Room left of the plot for the widest tick label and the axis title.
    let widest = ylabels
        .iter()
        .map(|l| text_width(l, TICK_PX))
        .fold(0.0, f64::max);
    let left = LEFT.max(widest + 30.0);
    let pw = W - left - RIGHT;
    let sx = |x: f64| left + (x - x0) / (x1 - x0) * pw;
    // X ticks: each category, or round numbers, thinned until their labels
    // stand apart.
    let (xt, xlabels): (Vec<f64>, Vec<String>) = if cats.is_empty() {
        // Whole-number x (bursts, ranks) gets whole ticks.
        let whole = pts.iter().all(|p| p.0.fract() == 0.0);
        (2..=8)
            .rev()
            .map(|n| {
                // A label that would pass the picture's right edge is left
                // out (its neighbours still place the scale).
                let t: Vec<f64> = ticks(x0, x1, n)
                    .into_iter()
                    .filter(|t| !whole || t.fract() == 0.0)
                    .filter(|t| sx(*t) + text_width(&c.x.1.label(*t), TICK_PX) / 2.0 <= W)
                    .collect();
                let l: Vec<String> = t.iter().map(|t| c.x.1.label(*t)).collect();
                (t, l)
            })
            .find(|(t, l)| fits(&t.iter().map(|t| sx(*t)).collect::<Vec<_>>(), l))
            .unwrap_or_default()
    } else {
        let t: Vec<f64> = (0..cats.len()).map(|i| i as f64).collect();
        let w: Vec<f64> = cats.iter().map(|l| text_width(l, TICK_PX)).collect();
        let k = stride(&t.iter().map(|t| sx(*t)).collect::<Vec<_>>(), &w);
        t.into_iter().zip(cats.iter().cloned()).step_by(k).unzip()
    };
    // The legend wraps into rows above the plot, which moves down for them.
    let names: Vec<&str> = c.series.iter().map(|s| s.name.as_str()).collect();
    let legend = layout::legend(&names, left, W - RIGHT);
    let extra = legend
        .last()
        .map_or(0.0, |&(_, row)| row as f64 * LEGEND_ROW);
    let (top, h) = (TOP + extra, H + extra);
    let ph = h - top - BOTTOM;
    let sy = |y: f64| {
        let f = if log {
            (y.log10() - y0.log10()) / (y1.log10() - y0.log10())
        } else {
            (y - y0) / (y1 - y0)
        };
        top + ph - f * ph
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" role="img" aria-label="{}">"#,
        esc(&c.title)
    );
    let _ = write!(
        s,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#adb5bd" data-y-scale="{}"/>"##,
        if log { "log" } else { "linear" }
    );
    for (t, l) in yt.iter().zip(&ylabels) {
        let y = sy(*t);
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e9ecef"/><text x="{}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
            left + pw,
            left - 6.0,
            y + 4.0,
            esc(l)
        );
    }
    for (t, l) in xt.iter().zip(&xlabels) {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"#,
            sx(*t),
            top + ph + 16.0,
            esc(l)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis">{}</text><text x="14" y="{:.1}" text-anchor="middle" class="axis" transform="rotate(-90 14 {:.1})">{}</text>"#,
        left + pw / 2.0,
        h - 8.0,
        esc(&c.x.0),
        top + ph / 2.0,
        top + ph / 2.0,
        esc(&c.y.0)
    );
    // Marker labels right of their line, or left of it near the right
    // edge; labels that would overlap go a row lower.
    let placed: Vec<(f64, f64, &str)> = c
        .marks
        .iter()
        .map(|m| {
            let x = sx(m.x);
            if x > left + pw * 0.6 {
                (x, x - 3.0, "end")
            } else {
                (x, x + 3.0, "start")
            }
        })
        .collect();
    let spans: Vec<(f64, f64)> = c
        .marks
        .iter()
        .zip(&placed)
        .map(|(m, &(_, tx, anchor))| {
            let w = text_width(&m.label, MARK_PX);
            if anchor == "end" {
                (tx - w, tx)
            } else {
                (tx, tx + w)
            }
        })
        .collect();
    for ((m, &(x, tx, anchor)), row) in c.marks.iter().zip(&placed).zip(stack(&spans)) {
        let _ = write!(
            s,
            r##"<g class="mark" data-x="{}"><line x1="{x:.1}" x2="{x:.1}" y1="{top}" y2="{}" stroke="#e03131" stroke-dasharray="5 3"/><text x="{tx:.1}" y="{}" text-anchor="{anchor}" class="marklabel">{}</text></g>"##,
            m.x,
            top + ph,
            top + 12.0 + row as f64 * MARK_ROW,
            esc(&m.label)
        );
    }
    let nbars = c
        .series
        .iter()
        .filter(|s| s.style == Style::Bars)
        .count()
        .max(1);
    let mut bar_i = 0;
    for (i, ser) in c.series.iter().enumerate() {
        let (col, dash) = paint(i);
        let mut drawn = envelope(&ser.points);
        if log {
            // Zero and below have no place on a log axis.
            drawn.retain(|p| p.1 > 0.0);
        }
        let _ = write!(
            s,
            r#"<g class="series" data-name="{}" data-points="{}">"#,
            esc(&ser.name),
            drawn.len()
        );
        match ser.style {
            Style::Line => {
                let path: Vec<String> = drawn
                    .iter()
                    .map(|p| format!("{:.1},{:.1}", sx(p.0), sy(p.1)))
                    .collect();
                let _ = write!(
                    s,
                    r#"<polyline fill="none" stroke="{col}" stroke-width="1.6"{dash} points="{}"/>"#,
                    path.join(" ")
                );
            }
            Style::Points => {
                for p in &drawn {
                    let _ = write!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="1.8" fill="{col}"/>"#,
                        sx(p.0),
                        sy(p.1)
                    );
                }
            }
            Style::Bars => {
                let slot = (sx(x0 + step) - sx(x0)) * 0.8;
                let w = (slot / nbars as f64).max(1.0);
                for p in &drawn {
                    let x = sx(p.0) - slot / 2.0 + w * bar_i as f64;
                    let (top, bottom) = (sy(p.1.max(y0)), sy(y0));
                    let _ = write!(
                        s,
                        r#"<rect x="{x:.1}" y="{top:.1}" width="{w:.1}" height="{:.1}" fill="{col}"/>"#,
                        (bottom - top).max(0.0)
                    );
                }
                bar_i += 1;
            }
        }
        s.push_str("</g>");
    }
    for (i, (ser, &(lx, row))) in c.series.iter().zip(&legend).enumerate() {
        let (col, dash) = paint(i);
        let y = 8.0 + row as f64 * LEGEND_ROW;
        // A line's swatch is a stretch of its line, dashes and all.
        if ser.style == Style::Line {
            let _ = write!(
                s,
                r#"<line x1="{lx:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{col}" stroke-width="2.5"{dash}/>"#,
                lx + 11.0,
                y + 5.0,
                y + 5.0
            );
        } else {
            let _ = write!(
                s,
                r#"<rect x="{lx:.1}" y="{y:.1}" width="10" height="10" fill="{col}"/>"#
            );
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" class="legend">{}</text>"#,
            lx + 14.0,
            y + 9.0,
            esc(&ser.name)
        );
    }
    s.push_str("</svg>");
    s
}

/// The colour of series `i`, and past the eighth a dash pattern (as an
/// attribute), so overlaid runs' lines differ even where colours repeat.
fn paint(i: usize) -> (&'static str, &'static str) {
    const DASHES: [&str; 4] = [
        "",
        r#" stroke-dasharray="6 3""#,
        r#" stroke-dasharray="2 2""#,
        r#" stroke-dasharray="9 3 2 3""#,
    ];
    (
        COLOURS[i % COLOURS.len()],
        DASHES[(i / COLOURS.len()) % DASHES.len()],
    )
}

/// Height of a row of the legend.
const LEGEND_ROW: f64 = 14.0;

/// Height of a row of marker labels.
const MARK_ROW: f64 = 12.0;

/// Whether tick labels `l` centred at `xs` stand apart.
fn fits(xs: &[f64], l: &[String]) -> bool {
    let w: Vec<f64> = l.iter().map(|l| text_width(l, TICK_PX)).collect();
    layout::apart(xs, &w)
}

/// Ticks of a log axis from `lo` to `hi` (whole decades): 1, 2 and 5 of
/// each decade over at most two decades, else every decade, or every
/// k-th so there are at most 7.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let d0 = lo.log10().round() as i32;
    let decades = (hi.log10().round() as i32 - d0).max(1);
    if decades <= 2 {
        let mut t: Vec<f64> = (0..decades)
            .flat_map(|d| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(d0 + d)))
            .collect();
        t.push(hi);
        return t;
    }
    let k = (decades + 5) / 6;
    (0..=decades)
        .step_by(k as usize)
        .map(|d| 10f64.powi(d0 + d))
        .collect()
}

#[cfg(test)]
#[path = "svg_tests.rs"]
mod tests;
