//! Where a chart's text goes so that no two labels overlap: widths
//! estimated from font size and length (the report ships no font, so there
//! are no metrics to ask), tick labels thinned until they stand apart, the
//! legend wrapped into rows, marker labels stacked into rows. Pure.

/// Average advance of a character in ems. DejaVu Sans and Liberation Sans
/// (what `sans-serif` is on Linux) draw digits 0.55–0.64 em wide and most
/// lower-case letters narrower, so this errs wide.
pub const CHAR_EM: f64 = 0.62;

/// Font sizes (px) of the chart's text classes, as the report's style sets them.
pub const TICK_PX: f64 = 10.0;
/// Axis titles.
pub const AXIS_PX: f64 = 11.0;
/// Legend entries.
pub const LEGEND_PX: f64 = 11.0;
/// Marker labels.
pub const MARK_PX: f64 = 10.0;

/// Least room between two labels side by side, px.
pub const GAP: f64 = 6.0;

/// Estimated width of `s` drawn at `px`.
pub fn text_width(s: &str, px: f64) -> f64 {
    s.chars().count() as f64 * CHAR_EM * px
}

/// Whether labels of `widths`, centred at `xs` (in order), keep [`GAP`]
/// apart.
pub fn apart(xs: &[f64], widths: &[f64]) -> bool {
    xs.windows(2)
        .zip(widths.windows(2))
        .all(|(x, w)| x[1] - x[0] >= (w[0] + w[1]) / 2.0 + GAP)
}

/// The smallest stride k such that every k-th label (from the first)
/// stands apart from the next one kept.
pub fn stride(xs: &[f64], widths: &[f64]) -> usize {
    (1..xs.len().max(1))
        .find(|&k| {
            let x: Vec<f64> = xs.iter().step_by(k).copied().collect();
            let w: Vec<f64> = widths.iter().step_by(k).copied().collect();
            apart(&x, &w)
        })
        .unwrap_or(xs.len().max(1))
}

/// Rows for labels spanning `spans` ((left, right) in px): each goes in
/// the first row where it clears every label already there by [`GAP`].
pub fn stack(spans: &[(f64, f64)]) -> Vec<usize> {
    let mut rows: Vec<Vec<(f64, f64)>> = Vec::new();
    spans
        .iter()
        .map(|&(a, b)| {
            let free =
                |row: &Vec<(f64, f64)>| row.iter().all(|&(c, d)| b + GAP <= c || d + GAP <= a);
            let r = rows.iter().position(free).unwrap_or(rows.len());
            if r == rows.len() {
                rows.push(Vec::new());
            }
            rows[r].push((a, b));
            r
        })
        .collect()
}

/// Width of a legend entry: swatch, space, name, room before the next.
pub fn legend_width(name: &str) -> f64 {
    14.0 + text_width(name, LEGEND_PX) + 12.0
}

/// Where each legend entry goes, (x, row): left to right from `left`, a
/// new row when the next entry would pass `right`.
pub fn legend(names: &[&str], left: f64, right: f64) -> Vec<(f64, usize)> {
    let mut out = Vec::with_capacity(names.len());
    let (mut x, mut row) = (left, 0);
    for name in names {
        let width = legend_width(name);
        if x > left && x + width - 12.0 > right {
            (x, row) = (left, row + 1);
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
    fn labels_stand_apart_or_are_thinned_until_they_do() {
        // Width 20 each, 6 apart needed: centres 26 apart just fit.
        assert!(apart(&[0.0, 26.0, 52.0], &[20.0; 3]));
        assert!(!apart(&[0.0, 25.9], &[20.0; 2]));
        // Uneven widths: half of each.
        assert!(apart(&[0.0, 34.0], &[10.0, 46.0]));
        assert!(!apart(&[0.0, 33.9], &[10.0, 46.0]));
        let xs: Vec<f64> = (0..10).map(|i| i as f64 * 10.0).collect();
        assert_eq!(stride(&xs, &[4.0; 10]), 1);
        assert_eq!(stride(&xs, &[20.0; 10]), 3);
        assert_eq!(stride(&xs, &[1000.0; 10]), 10);
        assert_eq!(stride(&[], &[]), 1);
        assert_eq!(text_width("p99.9", 10.0), 5.0 * 6.2);
    }

    #[test]
    fn overlapping_labels_go_to_rows_below() {
        // p99 and p99.9 at the same place; p50 well left of them.
        let spans = [(0.0, 40.0), (300.0, 340.0), (300.0, 350.0), (345.0, 400.0)];
        assert_eq!(stack(&spans), [0, 0, 1, 2]);
        // Back in the first row where it clears.
        let spans = [(0.0, 40.0), (300.0, 340.0), (300.0, 350.0), (346.0, 400.0)];
        assert_eq!(stack(&spans), [0, 0, 1, 0]);
        // Exactly GAP apart shares the row.
        assert_eq!(stack(&[(0.0, 10.0), (16.0, 20.0)]), [0, 0]);
        assert_eq!(stack(&[(0.0, 10.0), (15.9, 20.0)]), [0, 1]);
        assert_eq!(stack(&[(20.0, 30.0), (0.0, 14.0)]), [0, 0]);
        assert_eq!(stack(&[(20.0, 30.0), (0.0, 14.1)]), [0, 1]);
    }

    #[test]
    fn a_long_legend_wraps() {
        let names: Vec<String> = (0..14).map(|i| format!("connection {i:02}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // 13 characters: 14 + 88.66 + 12 = 114.66 a entry, 666 of room.
        let w = legend_width(names[0]);
        assert!((w - 114.66).abs() < 1e-9, "{w}");
        let rows: Vec<usize> = legend(&names, 78.0, 744.0).iter().map(|p| p.1).collect();
        assert_eq!(rows, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2]);
        assert_eq!(
            legend(&names[..2], 78.0, 744.0),
            vec![(78.0, 0), (78.0 + w, 0)]
        );
        // An entry may end exactly at the right edge (its trailing room
        // does not count); a hair more and it wraps.
        let one = |n: usize| "n".repeat(n);
        let fit = (666.0 - 14.0) / (CHAR_EM * LEGEND_PX);
        let n = fit.floor() as usize;
        assert_eq!(legend(&["", &one(n)], 78.0, 744.0 + 26.0)[1].1, 0);
        assert_eq!(legend(&["", &one(n + 3)], 78.0, 744.0 + 26.0)[1].1, 1);
        // Ending exactly at the edge, to the bit: an empty name is 26 wide.
        let edge = 78.0 + 26.0 + legend_width(&one(10)) - 12.0;
        assert_eq!(legend(&["", &one(10)], 78.0, edge)[1], (104.0, 0));
        // A name wider than the plot stays on the first row.
        assert_eq!(legend(&[&one(200)], 78.0, 744.0), vec![(78.0, 0)]);
    }
}
