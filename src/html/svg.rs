//! Charts as inline SVG, written by netrig (no script, no fetch): line,
//! point and bar series on linear axes with round ticks, a legend, markers
//! at given x values, and long series thinned to a min/max envelope per
//! pixel column so no outlier is dropped. Pure: data in, markup out.

use std::fmt::Write;

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
/// with `data-name` and `data-points` (points drawn) for tests and tools.
pub fn render(c: &Chart) -> String {
    let pts: Vec<(f64, f64)> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
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
        (y0, y1) = (0.0, 1.0);
    }
    // Rates, delays and counts read from zero.
    y0 = y0.min(0.0);
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // Bars stand on their x values, a step apart: half a step of room
    // each side.
    let bar_n = c
        .series
        .iter()
        .filter(|s| s.style == Style::Bars)
        .map(|s| s.points.len())
        .max()
        .unwrap_or(0);
    let step = if bar_n > 1 {
        (x1 - x0) / (bar_n - 1) as f64
    } else {
        1.0
    };
    if bars {
        (x0, x1) = (x0 - step / 2.0, x1 + step / 2.0);
    }
    let yt = ticks(y0, y1 * 1.05, 5);
    let y1 = yt.last().copied().unwrap_or(y1).max(y1);
    // Whole-number x (bursts, phases, percentile ranks) gets whole ticks.
    let whole = pts.iter().all(|p| p.0.fract() == 0.0);
    let xt: Vec<f64> = ticks(x0, x1, 8)
        .into_iter()
        .filter(|t| !whole || t.fract() == 0.0)
        .collect();
    let pw = W - LEFT - RIGHT;
    // The legend wraps into rows above the plot, which moves down for them.
    let legend = legend_layout(&c.series);
    let extra = legend
        .last()
        .map_or(0.0, |&(_, row)| row as f64 * LEGEND_ROW);
    let (top, h) = (TOP + extra, H + extra);
    let ph = h - top - BOTTOM;
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| top + ph - (y - y0) / (y1 - y0) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" role="img" aria-label="{}">"#,
        esc(&c.title)
    );
    let _ = write!(
        s,
        r##"<rect x="{LEFT}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#adb5bd"/>"##
    );
    for t in &yt {
        let y = sy(*t);
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e9ecef"/><text x="{}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            esc(&c.y.1.label(*t))
        );
    }
    for t in &xt {
        let x = sx(*t);
        let _ = write!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"#,
            top + ph + 16.0,
            esc(&c.x.1.label(*t))
        );
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis">{}</text><text x="14" y="{:.1}" text-anchor="middle" class="axis" transform="rotate(-90 14 {:.1})">{}</text>"#,
        LEFT + pw / 2.0,
        h - 8.0,
        esc(&c.x.0),
        top + ph / 2.0,
        top + ph / 2.0,
        esc(&c.y.0)
    );
    for m in &c.marks {
        let x = sx(m.x);
        // Labels right of the line, or left of it near the right edge.
        let (tx, anchor) = if x > LEFT + pw * 0.6 {
            (x - 3.0, "end")
        } else {
            (x + 3.0, "start")
        };
        let _ = write!(
            s,
            r##"<g class="mark" data-x="{}"><line x1="{x:.1}" x2="{x:.1}" y1="{top}" y2="{}" stroke="#e03131" stroke-dasharray="5 3"/><text x="{tx:.1}" y="{}" text-anchor="{anchor}" class="marklabel">{}</text></g>"##,
            m.x,
            top + ph,
            top + 12.0,
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
        let col = COLOURS[i % COLOURS.len()];
        let drawn = envelope(&ser.points);
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
                    r#"<polyline fill="none" stroke="{col}" stroke-width="1.6" points="{}"/>"#,
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
        let col = COLOURS[i % COLOURS.len()];
        let y = 8.0 + row as f64 * LEGEND_ROW;
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{y:.1}" width="10" height="10" fill="{col}"/><text x="{:.1}" y="{:.1}" class="legend">{}</text>"#,
            lx + 14.0,
            y + 9.0,
            esc(&ser.name)
        );
    }
    s.push_str("</svg>");
    s
}

/// Height of a row of the legend.
const LEGEND_ROW: f64 = 14.0;

/// Where each series' legend entry goes: (x, row), left to right, a new
/// row when the next entry would pass the plot's right edge.
fn legend_layout(series: &[Series]) -> Vec<(f64, usize)> {
    let mut out = Vec::with_capacity(series.len());
    let (mut x, mut row) = (LEFT, 0);
    for ser in series {
        let width = 24.0 + 6.5 * ser.name.chars().count() as f64;
        if x > LEFT && x + width > W - RIGHT {
            (x, row) = (LEFT, row + 1);
        }
        out.push((x, row));
        x += width;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.0, 1e9, 4), vec![0.0, 5e8, 1e9]);
        let t = ticks(0.13, 0.91, 4);
        assert_eq!(t.first().copied(), Some(0.2));
        assert!(t.windows(2).all(|w| ((w[1] - w[0]) - 0.2).abs() < 1e-12));
        assert_eq!(ticks(3.0, 3.0, 5), vec![3.0]);
        assert_eq!(ticks(f64::NAN, 1.0, 5).len(), 1);
    }

    #[test]
    fn labels_carry_units() {
        assert_eq!(Unit::Bps.label(2.5e9), "2.5Gbit/s");
        assert_eq!(Unit::Bps.label(0.0), "0bit/s");
        assert_eq!(Unit::Ms.label(12.25), "12.25 ms");
        assert_eq!(Unit::Bytes.label(1500.0), "1.5kB");
        assert_eq!(Unit::Plain.label(-0.0001), "0");
        assert_eq!(Unit::Secs.label(3.0), "3 s");
        assert_eq!(Unit::Log2Us.label(0.0), "1 µs");
        assert_eq!(Unit::Log2Us.label(9.0), "512 µs");
        assert_eq!(Unit::Log2Us.label(10.0), "1.02 ms");
        assert_eq!(Unit::Log2Us.label(17.0), "131 ms");
        assert_eq!(Unit::Log2Us.label(21.0), "2.1 s");
        assert_eq!(Unit::Log2Us.label(-1.0), "0.5 µs");
        // No digits to keep: zero and non-finite values pass through.
        assert_eq!(round3(0.0), 0.0);
        assert_eq!(round3(f64::INFINITY), f64::INFINITY);
        assert!(round3(f64::NAN).is_nan());
        assert_eq!(round3(-1234.5), -1230.0);
    }

    #[test]
    fn a_long_series_keeps_every_slice_extreme() {
        // 100,000 points of a flat line with one spike and one dip.
        let mut p: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, 5.0)).collect();
        p[31_337].1 = 900.0;
        p[77_777].1 = -40.0;
        let e = envelope(&p);
        assert!(e.len() <= MAX_POINTS, "{}", e.len());
        assert!(e.contains(&(31_337.0, 900.0)));
        assert!(e.contains(&(77_777.0, -40.0)));
        assert!(e.windows(2).all(|w| w[0].0 <= w[1].0));
        // Short series are drawn whole.
        assert_eq!(envelope(&p[..10]), p[..10].to_vec());
    }

    #[test]
    fn a_long_legend_wraps_and_the_plot_moves_down_for_it() {
        let named = |n: usize| -> Vec<Series> {
            (0..n)
                .map(|i| Series {
                    name: format!("connection {i:02}"),
                    points: vec![(0.0, 1.0)],
                    style: Style::Line,
                })
                .collect()
        };
        // Each entry is 24 + 6.5 * 13 = 108.5 wide; the plot is 666 wide.
        let rows: Vec<usize> = legend_layout(&named(14)).iter().map(|p| p.1).collect();
        assert_eq!(rows, [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2]);
        assert_eq!(legend_layout(&named(2)), vec![(LEFT, 0), (LEFT + 108.5, 0)]);
        let chart = |n| Chart {
            title: String::new(),
            caption: String::new(),
            x: ("x".into(), Unit::Plain),
            y: ("y".into(), Unit::Plain),
            series: named(n),
            marks: Vec::new(),
        };
        assert!(render(&chart(1)).contains(r#"viewBox="0 0 760 300""#));
        let tall = render(&chart(14));
        assert!(tall.contains(r#"viewBox="0 0 760 328""#), "{tall}");
        // The plot's frame starts below the third row.
        assert!(tall.contains(r#"<rect x="78" y="56" "#), "{tall}");
        // Five entries of 84 characters in all end exactly at the plot's
        // right edge (78 + 5 × 24 + 6.5 × 84 = 744): one row. A character
        // more and the fifth wraps.
        let sized = |lens: &[usize]| -> Vec<Series> {
            lens.iter()
                .map(|&n| Series {
                    name: "n".repeat(n),
                    points: Vec::new(),
                    style: Style::Line,
                })
                .collect()
        };
        let rows = |s: &[Series]| -> Vec<usize> { legend_layout(s).iter().map(|p| p.1).collect() };
        assert_eq!(rows(&sized(&[17, 17, 17, 17, 16])), [0, 0, 0, 0, 0]);
        assert_eq!(rows(&sized(&[17, 17, 17, 17, 17])), [0, 0, 0, 0, 1]);
        // One name that is wider than the plot stays on the first row.
        let wide = vec![Series {
            name: "w".repeat(200),
            points: Vec::new(),
            style: Style::Line,
        }];
        assert_eq!(legend_layout(&wide), vec![(LEFT, 0)]);
    }

    #[test]
    fn a_chart_names_its_series_marks_and_escapes_text() {
        let c = Chart {
            title: "a <b> & c".into(),
            caption: String::new(),
            x: ("time".into(), Unit::Secs),
            y: ("rate".into(), Unit::Bps),
            series: vec![
                Series {
                    name: "up".into(),
                    points: vec![(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)],
                    style: Style::Line,
                },
                Series {
                    name: "\"q\"".into(),
                    points: vec![(0.0, 1.0)],
                    style: Style::Bars,
                },
            ],
            marks: vec![Mark {
                x: 1.5,
                label: "knee".into(),
            }],
        };
        let svg = render(&c);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains(r#"data-name="up" data-points="3""#));
        assert!(svg.contains(r#"data-name="&quot;q&quot;" data-points="1""#));
        assert!(svg.contains(r#"class="mark" data-x="1.5""#));
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        // Empty charts still draw axes.
        let empty = Chart {
            series: Vec::new(),
            marks: Vec::new(),
            ..c
        };
        assert!(render(&empty).contains("<rect"));
    }
}
