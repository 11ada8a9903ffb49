//! Tests of the SVG charts: axes, ticks, legend, markers, layout.

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

fn chart_of(series: Vec<Series>) -> Chart {
    Chart {
        title: String::new(),
        caption: String::new(),
        x: ("x".into(), Unit::Plain),
        y: ("y".into(), Unit::Plain),
        series,
        marks: Vec::new(),
        categories: Vec::new(),
        log_y: false,
    }
}

/// The text of every `<text class="CLASS">` in `svg`, in order.
fn texts(svg: &str, class: &str) -> Vec<String> {
    svg.split("<text ")
        .skip(1)
        .filter(|t| t.contains(&format!(r#"class="{class}""#)))
        .map(|t| {
            t.split_once('>')
                .unwrap()
                .1
                .split('<')
                .next()
                .unwrap()
                .into()
        })
        .collect()
}

/// The y of each `<text class="CLASS">`.
fn text_ys(svg: &str, class: &str) -> Vec<f64> {
    svg.split("<text ")
        .skip(1)
        .filter(|t| t.contains(&format!(r#"class="{class}""#)))
        .map(|t| {
            t.split(r#" y=""#)
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn a_long_legend_moves_the_plot_down() {
    let named = |n: usize| -> Vec<Series> {
        (0..n)
            .map(|i| Series {
                name: format!("connection {i:02}"),
                points: vec![(0.0, 1.0)],
                style: Style::Line,
            })
            .collect()
    };
    assert!(render(&chart_of(named(1))).contains(r#"viewBox="0 0 760 300""#));
    // Fourteen entries of 114.66 px in 666: three rows.
    let tall = render(&chart_of(named(14)));
    assert!(tall.contains(r#"viewBox="0 0 760 328""#), "{tall}");
    // The plot's frame starts below the third row.
    assert!(tall.contains(r#"<rect x="78" y="56" "#), "{tall}");
}

#[test]
fn a_categorical_axis_names_each_position() {
    let mut c = chart_of(vec![Series {
        name: "round trip".into(),
        points: vec![(0.0, 1.0), (1.0, 2.0), (2.0, 9.0)],
        style: Style::Bars,
    }]);
    c.categories = vec!["p50".into(), "p90".into(), "p99.9".into()];
    let svg = render(&c);
    let y = texts(&svg, "tick");
    assert_eq!(&y[y.len() - 3..], ["p50", "p90", "p99.9"], "{svg}");
    // Three slots of 222 px: bars centred at 189, 411 and 633.
    let xs: Vec<&str> = svg
        .split(r#"text-anchor="middle" class="tick""#)
        .map(|t| {
            t.rsplit(r#"x=""#)
                .next()
                .unwrap()
                .split('"')
                .next()
                .unwrap()
        })
        .take(3)
        .collect();
    assert_eq!(xs, ["189.0", "411.0", "633.0"]);
    // Many long names: every other one, from the first.
    c.categories = (0..40).map(|i| format!("phase number {i}")).collect();
    let t = texts(&render(&c), "tick");
    let names: Vec<&String> = t.iter().filter(|l| l.starts_with("phase")).collect();
    assert!(names.len() < 40 && names.len() >= 4, "{names:?}");
    assert_eq!(names[0], "phase number 0");
    // Numeric axes never show category names.
    c.categories.clear();
    assert!(!render(&c).contains(">p50<"));
}

#[test]
fn a_log_axis_shows_values_decades_apart() {
    // Idle RPM far above loaded: on a linear axis 1,020 of 204,794
    // would be a 1 px bar.
    let mut c = chart_of(vec![Series {
        name: "RPM".into(),
        points: vec![(0.0, 204_794.0), (1.0, 1_020.0), (2.0, 939.0), (3.0, 0.0)],
        style: Style::Bars,
    }]);
    c.log_y = true;
    let svg = render(&c);
    assert!(svg.contains(r#"data-y-scale="log""#));
    assert_eq!(texts(&svg, "tick")[..4], ["100", "1k", "10k", "100k"]);
    assert_eq!(texts(&svg, "tick")[4], "1M");
    // Zero cannot be drawn on it.
    assert!(svg.contains(r#"data-name="RPM" data-points="3""#), "{svg}");
    let bars = svg.split(r#"data-name="RPM""#).nth(1).unwrap();
    let heights: Vec<f64> = bars
        .split("</g>")
        .next()
        .unwrap()
        .split(r#"height=""#)
        .skip(1)
        .map(|t| t.split('"').next().unwrap().parse().unwrap())
        .collect();
    // Plot 226 px high over 4 decades (100 to 1M).
    let want = |v: f64| (v.log10() - 2.0) / 4.0 * 226.0;
    assert_eq!(heights.len(), 3, "{heights:?}");
    for (h, v) in heights.iter().zip([204_794.0, 1_020.0, 939.0]) {
        assert!((h - want(v)).abs() < 0.06, "{h} for {v}");
    }
    // Within two decades, 1-2-5 ticks.
    assert_eq!(
        log_ticks(10.0, 1000.0),
        [10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
    );
    assert_eq!(log_ticks(1.0, 10.0), [1.0, 2.0, 5.0, 10.0]);
    // Twelve decades: every second one.
    let t = log_ticks(1.0, 1e12);
    assert_eq!(t.len(), 7);
    assert_eq!(t[1], 100.0);
    // Linear otherwise.
    c.log_y = false;
    assert!(render(&c).contains(r#"data-y-scale="linear""#));
}

#[test]
fn counts_get_whole_ticks_up_to_the_highest_and_repeated_colours_get_dashes() {
    let line = |name: &str, points: Vec<(f64, f64)>| Series {
        name: name.into(),
        points,
        style: Style::Line,
    };
    // Counts 0 and 1: no "0.5 connections".
    let svg = render(&chart_of(vec![line(
        "Completed",
        vec![(0.0, 0.0), (1.0, 1.0)],
    )]));
    assert_eq!(texts(&svg, "tick")[..2], ["0", "1"], "{svg}");
    assert!(!svg.contains(">0.5<"));
    // Fractions keep their ticks.
    let svg = render(&chart_of(vec![line("ms", vec![(0.0, 0.0), (1.0, 1.5)])]));
    assert!(svg.contains(">0.5<"), "{svg}");
    // 3.6 over ticks of 1: the top tick is 4, labelled above the point.
    let svg = render(&chart_of(vec![line("ms", vec![(0.0, 0.1), (1.0, 3.6)])]));
    let y: Vec<String> = texts(&svg, "tick").into_iter().take(5).collect();
    assert_eq!(y, ["0", "1", "2", "3", "4"], "{svg}");
    // Nine lines: the ninth has the first's colour, dashed, in the
    // legend too.
    let nine: Vec<Series> = (0..9)
        .map(|i| line(&format!("#{i}"), vec![(0.0, 1.0)]))
        .collect();
    let svg = render(&chart_of(nine));
    assert_eq!(svg.matches(r#"stroke-dasharray="6 3""#).count(), 2, "{svg}");
    assert_eq!(paint(0), (COLOURS[0], ""));
    assert_eq!(paint(8).0, COLOURS[0]);
    assert_ne!(paint(8).1, paint(16).1);
    assert_eq!(paint(32), paint(0));
}

#[test]
fn marker_labels_that_would_overlap_go_to_rows_below() {
    let mut c = chart_of(vec![Series {
        name: "at or under".into(),
        points: vec![(0.0, 0.0), (10.0, 100.0)],
        style: Style::Line,
    }]);
    let mark = |x: f64, label: &str| Mark {
        x,
        label: label.into(),
    };
    c.marks = vec![
        mark(1.0, "p50 1 ms"),
        mark(7.26, "p99 7.262 ms"),
        mark(7.26, "p99.9 7.262 ms"),
    ];
    let svg = render(&c);
    assert_eq!(text_ys(&svg, "marklabel"), [40.0, 40.0, 52.0]);
    // Far apart, one row.
    c.marks[2].x = 3.0;
    assert_eq!(text_ys(&render(&c), "marklabel"), [40.0, 40.0, 40.0]);
}

#[test]
fn tick_labels_are_thinned_until_they_stand_apart_and_make_room_left() {
    // Y ticks 0, 500M and 1G: "500Mbit/s" is 9 characters.
    let c = Chart {
        x: ("offered".into(), Unit::Bps),
        y: ("rate".into(), Unit::Bps),
        ..chart_of(vec![Series {
            name: "r".into(),
            points: vec![(1.0e9, 1.0e9), (1.5e9, 0.9e9)],
            style: Style::Line,
        }])
    };
    let svg = render(&c);
    // 9 × 6.2 px + 30: the plot starts at 85.8, not 78.
    assert!(svg.contains(r#"<rect x="85.8" "#), "{svg}");
    let pieces: Vec<&str> = svg.split(r#"text-anchor="middle" class="tick""#).collect();
    let xs: Vec<f64> = pieces[..pieces.len() - 1]
        .iter()
        .map(|t| {
            t.rsplit(r#"x=""#)
                .next()
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(xs.len() >= 3, "{svg}");
    // The last tick, 1.5G at the plot's right edge (744), would end past
    // the picture (760): left out.
    assert!(xs.last().is_some_and(|x| *x < 700.0), "{xs:?}");
    assert!(!svg.contains(">1.5Gbit/s<"), "{svg}");
    assert!(
        xs.windows(2).all(|w| w[1] - w[0] >= 10.0 * 6.2 + 6.0),
        "{xs:?}"
    );
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
        categories: Vec::new(),
        log_y: false,
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

#[test]
fn axis_ranges_pad_bars_and_categories_and_never_collapse() {
    let chart = |style: Style, points: Vec<(f64, f64)>| {
        chart_of(vec![Series {
            name: "s".into(),
            points,
            style,
        }])
    };
    let frame_left = |svg: &str| -> String {
        svg.split(r#"<rect x=""#)
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string()
    };
    // A line without categories starts at the frame: no half step of room.
    let svg = render(&chart(Style::Line, vec![(0.0, 1.0), (10.0, 2.0)]));
    let left: f64 = frame_left(&svg).parse().unwrap();
    assert!(
        svg.contains(&format!(
            r#"<text x="{left:.1}" y="270.0" text-anchor="middle" class="tick">0<"#
        )),
        "{svg}"
    );
    // Points on categories get the same slots as bars: 189, 411, 633.
    let mut c = chart(Style::Points, vec![(0.0, 1.0), (1.0, 2.0), (2.0, 9.0)]);
    c.categories = vec!["a".into(), "b".into(), "c".into()];
    let svg = render(&c);
    for x in ["189.0", "411.0", "633.0"] {
        assert!(svg.contains(&format!(r#"<text x="{x}" "#)), "{x}: {svg}");
    }
    // Every value one power of ten on a log axis: one decade above it.
    let mut c = chart(Style::Line, vec![(0.0, 100.0), (1.0, 100.0)]);
    c.log_y = true;
    let t = texts(&render(&c), "tick");
    assert_eq!(t[..4], ["100", "200", "500", "1k"], "{t:?}");
    // Every value zero on a linear axis: 0 to 1.
    let t = texts(
        &render(&chart(Style::Line, vec![(0.0, 0.0), (1.0, 0.0)])),
        "tick",
    );
    assert_eq!(t[..2], ["0", "1"], "{t:?}");
    assert!(!t.contains(&"-1".to_string()), "{t:?}");
    // Ticks are chosen for 5% above the highest value (0-10.29: steps of
    // 5, not of 2), and stop at the first tick at or above it.
    let t = texts(
        &render(&chart(Style::Line, vec![(0.0, 0.5), (1.0, 9.8)])),
        "tick",
    );
    assert_eq!(t[..3], ["0", "5", "10"], "{t:?}");
    let t = texts(
        &render(&chart(Style::Line, vec![(0.0, 0.5), (1.0, 2.0)])),
        "tick",
    );
    assert_eq!(t[..5], ["0", "0.5", "1", "1.5", "2"], "{t:?}");
    assert!(!t.contains(&"2.5".to_string()), "{t:?}");
}

/// The labels of the x axis's ticks (centred under the plot).
fn x_ticks(svg: &str) -> Vec<String> {
    svg.split(r#"text-anchor="middle" class="tick">"#)
        .skip(1)
        .map(|t| t.split('<').next().unwrap().to_string())
        .collect()
}

#[test]
fn values_land_where_the_axes_say_and_x_ticks_fit() {
    let chart = |style: Style, points: Vec<(f64, f64)>| {
        chart_of(vec![Series {
            name: "s".into(),
            points,
            style,
        }])
    };
    // Plot 78..744 across, 28..254 down; -10..10 on a linear axis.
    let svg = render(&chart(
        Style::Line,
        vec![(0.0, -10.0), (5.0, 0.0), (10.0, 10.0)],
    ));
    assert!(
        svg.contains(r#"points="78.0,254.0 411.0,141.0 744.0,28.0""#),
        "{svg}"
    );
    // The last whole tick is kept where its label still fits the picture.
    assert_eq!(x_ticks(&svg), ["0", "2", "4", "6", "8", "10"], "{svg}");
    // 100..10,000 on a log axis: a decade is half the height.
    let mut c = chart(
        Style::Points,
        vec![(0.0, 100.0), (1.0, 1_000.0), (2.0, 10_000.0)],
    );
    c.log_y = true;
    let svg = render(&c);
    for cy in ["254.0", "141.0", "28.0"] {
        assert!(svg.contains(&format!(r#"cy="{cy}""#)), "{cy}: {svg}");
    }
    // Whole x values get whole ticks only; fractional ones keep theirs.
    let svg = render(&chart(Style::Line, vec![(0.0, 1.0), (3.0, 2.0)]));
    assert_eq!(x_ticks(&svg), ["0", "1", "2", "3"], "{svg}");
    let svg = render(&chart(Style::Line, vec![(0.0, 1.0), (0.5, 2.0)]));
    assert!(x_ticks(&svg).contains(&"0.5".to_string()), "{svg}");
    assert!(x_ticks(&svg).len() > 2, "{svg}");
}

#[test]
fn the_legend_wraps_at_the_plots_right_edge() {
    // Six entries of 114.66 px: five fit in 666 px, the sixth wraps.
    let six: Vec<Series> = (0..6)
        .map(|i| Series {
            name: format!("connection {i:02}"),
            points: vec![(0.0, 1.0)],
            style: Style::Line,
        })
        .collect();
    let svg = render(&chart_of(six));
    assert!(svg.contains(r#"viewBox="0 0 760 314""#), "{svg}");
}

#[test]
fn marker_labels_sit_beside_their_lines_and_their_spans_decide_rows() {
    let mut c = chart_of(vec![Series {
        name: "s".into(),
        points: vec![(0.0, 0.0), (10.0, 100.0)],
        style: Style::Line,
    }]);
    let mark = |x: f64, label: &str| Mark {
        x,
        label: label.into(),
    };
    // Left of 60% of the plot: the label starts 3 px right of its line;
    // beyond it, it ends 3 px left of it (plot 78..744).
    c.marks = vec![mark(1.0, "a"), mark(6.0, "b"), mark(9.0, "c")];
    let svg = render(&c);
    for (x, anchor) in [("147.6", "start"), ("480.6", "start"), ("674.4", "end")] {
        assert!(
            svg.contains(&format!(
                r#"<text x="{x}" y="40" text-anchor="{anchor}" class="marklabel">"#
            )),
            "{x} {anchor}: {svg}"
        );
    }
    // A long label ending at x = 9 reaches back over one starting at 5.
    let long = "the ninety-ninth percentile of the round trips, 7.262 ms";
    c.marks = vec![mark(5.0, "p50"), mark(9.0, long)];
    assert_eq!(text_ys(&render(&c), "marklabel"), [40.0, 52.0]);
    // A long label starting at 1 reaches over one starting at 2.
    c.marks = vec![mark(1.0, long), mark(2.0, "p90")];
    assert_eq!(text_ys(&render(&c), "marklabel"), [40.0, 52.0]);
    // Short ones there stand side by side.
    c.marks = vec![mark(1.0, "p50"), mark(2.0, "p90")];
    assert_eq!(text_ys(&render(&c), "marklabel"), [40.0, 40.0]);
}

#[test]
fn wide_x_labels_get_fewer_ticks() {
    // Ten-million-ms labels a tenth apart: nine ticks of 12-13 characters
    // would touch, so every other one is kept.
    let mut c = chart_of(vec![Series {
        name: "s".into(),
        points: vec![(1e7, 1.0), (1e7 + 0.8, 2.0)],
        style: Style::Line,
    }]);
    c.x.1 = Unit::Ms;
    let t = x_ticks(&render(&c));
    assert_eq!(
        t,
        [
            "10000000 ms",
            "10000000.2 ms",
            "10000000.4 ms",
            "10000000.6 ms"
        ]
    );
    // Over 1.6 ms, eight ticks would be 0.2 apart: 83 px for labels of
    // 81 px, too close; fewer are drawn.
    c.series[0].points = vec![(1e7, 1.0), (1e7 + 1.6, 2.0)];
    let t = x_ticks(&render(&c));
    assert_eq!(
        t,
        [
            "10000000 ms",
            "10000000.5 ms",
            "10000001 ms",
            "10000001.5 ms"
        ]
    );
    // Narrow labels over the same plot: as many as eight fit.
    c.x.1 = Unit::Plain;
    c.series[0].points = vec![(0.0, 1.0), (7.0, 2.0)];
    assert_eq!(x_ticks(&render(&c)).len(), 8);
}
