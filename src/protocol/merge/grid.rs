//! The common wall-clock grid: each input's intervals laid on slices of
//! one step from the earliest start, in proportion to their overlap.

use super::Slice;

/// An input's time zero on the wall clock (if it has one) and its
/// intervals as (start s, end s, bytes) from it.
pub type Timed = (Option<f64>, Vec<(f64, f64, f64)>);

/// Lays each input's slices (absolute start, slices) on a grid of
/// `step` s from the earliest start (an input without a start adds
/// nothing but keeps its place in `per_input`); a slice's bytes go to the grid slices
/// it overlaps in proportion to the overlap (the rate within a slice is
/// taken as even).
pub fn align(inputs: &[Timed], step: f64) -> Vec<Slice> {
    let Some(t0) = inputs.iter().filter_map(|i| i.0).reduce(f64::min) else {
        return Vec::new();
    };
    let end = inputs
        .iter()
        .filter_map(|(s, sl)| Some(s.as_ref()? + sl.last()?.1))
        .fold(t0, f64::max);
    if step <= 0.0 || end <= t0 {
        return Vec::new();
    }
    let bins = ((end - t0) / step).ceil().max(1.0) as usize;
    let mut per: Vec<Vec<f64>> = vec![vec![0.0; inputs.len()]; bins];
    for (i, (start, sl)) in inputs.iter().enumerate() {
        let Some(start) = start else {
            continue;
        };
        for &(a, b, bytes) in sl {
            let (a, b) = (start + a - t0, start + b - t0);
            if b <= a {
                let k = ((a / step) as usize).min(bins - 1);
                per[k][i] += bytes;
                continue;
            }
            let first = ((a / step) as usize).min(bins - 1);
            let last = ((b / step).ceil() as usize).clamp(first + 1, bins);
            for (k, cell) in per.iter_mut().enumerate().take(last).skip(first) {
                let lo = a.max(k as f64 * step);
                let hi = b.min((k + 1) as f64 * step);
                if hi > lo {
                    cell[i] += bytes * (hi - lo) / (b - a);
                }
            }
        }
    }
    per.into_iter()
        .enumerate()
        .map(|(k, cells)| {
            let start = k as f64 * step;
            let stop = ((k + 1) as f64 * step).min(end - t0);
            let total: f64 = cells.iter().sum();
            Slice {
                start_secs: start,
                end_secs: stop,
                bytes: total.round() as u64,
                per_input: cells.iter().map(|c| c.round() as u64).collect(),
                goodput_bps: if stop > start {
                    total * 8.0 / (stop - start)
                } else {
                    0.0
                },
                transactions: None,
                per_input_transactions: None,
                transactions_per_sec: None,
            }
        })
        .collect()
}

/// A slice laid out with a column per entry of `owner`, with a column per
/// input (of `n`) instead: an input's entries added.
pub(super) fn by_owner(s: Slice, owner: &[usize], n: usize) -> Slice {
    let mut per_input = vec![0; n];
    for (&i, v) in owner.iter().zip(&s.per_input) {
        per_input[i] += v;
    }
    Slice { per_input, ..s }
}

/// A slice [`align`] counted transactions in, as such: its byte fields 0.
pub(super) fn as_transactions(s: Slice) -> Slice {
    Slice {
        transactions: Some(s.bytes),
        transactions_per_sec: Some(s.goodput_bps / 8.0),
        per_input_transactions: Some(s.per_input.clone()),
        bytes: 0,
        per_input: vec![0; s.per_input.len()],
        goodput_bps: 0.0,
        ..s
    }
}

#[cfg(test)]
#[path = "grid_tests.rs"]
mod tests;
