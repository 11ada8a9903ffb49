//! Unit tests of `merge::grid`: slices laid on the wall-clock grid keep
//! their bytes, land in the grid slice of their time whatever floats round
//! to, and the last grid slice ends where the last input does.

use super::*;
use proptest::prelude::*;

#[test]
fn a_grid_slice_ends_where_the_last_input_does() {
    let slices = align(
        &[
            (Some(10.0), vec![(0.0, 0.5, 100.0), (0.5, 1.5, 300.0)]),
            (None, vec![(0.0, 9.0, 1e9)]),
            (Some(10.25), vec![(0.0, 0.0, 7.0)]),
        ],
        1.0,
    );
    assert_eq!(slices.len(), 2);
    assert_eq!(slices[0].per_input, vec![250, 0, 7]);
    assert_eq!(slices[1].per_input, vec![150, 0, 0]);
    assert_eq!((slices[1].start_secs, slices[1].end_secs), (1.0, 1.5));
    assert_eq!(slices[1].goodput_bps, 150.0 * 8.0 / 0.5);
    assert_eq!(slices[0].bytes, 257);
    assert!(align(&[], 1.0).is_empty());
    assert!(align(&[(Some(1.0), vec![(0.0, 1.0, 5.0)])], 0.0).is_empty());
}

proptest! {
    #[test]
    fn aligned_bytes_add_up_to_the_inputs(
        inputs in proptest::collection::vec(
            (0.0f64..5.0, proptest::collection::vec((0.01f64..2.0, 0u32..1_000_000), 1..10)),
            1..6),
        step in 0.1f64..3.0,
    ) {
        let timed: Vec<Timed> = inputs
            .iter()
            .map(|(start, rows)| {
                let mut t = 0.0;
                let sl = rows.iter().map(|&(d, b)| { let a = t; t += d; (a, t, f64::from(b)) }).collect();
                (Some(*start), sl)
            })
            .collect();
        let slices = align(&timed, step);
        let want: f64 = timed.iter().flat_map(|t| t.1.iter().map(|s| s.2)).sum();
        let got: u64 = slices.iter().map(|s| s.bytes).sum();
        prop_assert!((got as f64 - want).abs() <= slices.len() as f64, "{} vs {}", got, want);
        for (i, t) in timed.iter().enumerate() {
            let own: f64 = t.1.iter().map(|s| s.2).sum();
            let got: u64 = slices.iter().map(|s| s.per_input[i]).sum();
            prop_assert!((got as f64 - own).abs() <= slices.len() as f64);
        }
    }
}

#[test]
fn a_slice_of_no_length_lands_in_the_grid_slice_of_its_time() {
    let step = 0.5;
    let slices = align(
        &[(
            Some(0.0),
            vec![(0.0, 2.0, 400.0), (1.0, 1.0, 7.0), (2.0, 2.0, 9.0)],
        )],
        step,
    );
    let even = 400 / 4;
    let got: Vec<u64> = slices.iter().map(|s| s.per_input[0]).collect();
    // At 1.0 s: the grid slice from 1.0 s; at the very end: the last one.
    assert_eq!(got, [even, even, even + 7, even + 9]);
}

#[test]
fn a_grid_slice_of_no_width_has_a_rate_of_zero() {
    // 0.1 + 0.2 is a hair above 0.3: ceil gives a fourth grid slice that
    // starts where the input ends (3 × 0.1 is that same hair above 0.3).
    let end = 0.1 + 0.2;
    let slices = align(&[(Some(0.0), vec![(0.0, end, 300.0)])], 0.1);
    let last = slices.last().unwrap();
    assert_eq!((last.start_secs, last.end_secs), (end, end));
    assert!(slices.iter().all(|s| s.goodput_bps.is_finite()));
    assert_eq!(last.goodput_bps, 0.0);
}

#[test]
fn a_slice_ending_at_the_grid_end_whose_start_rounds_onto_it_stays_in_the_last_grid_slice() {
    // 3.4999999999999996 is the float just below 3.5, yet divided by 0.7
    // it rounds up to 5.0, the number of grid slices (3.5 / 0.7 is 5.0):
    // its grid slice must still be the last one, 4.
    let (step, end) = (0.7, 3.5);
    let a = 3.499_999_999_999_999_6;
    assert!(a < end && a / step == 5.0 && end / step == 5.0);
    let slices = align(&[(Some(0.0), vec![(0.0, a, 500.0), (a, end, 7.0)])], step);
    let got: Vec<u64> = slices.iter().map(|s| s.per_input[0]).collect();
    assert_eq!(got, [100, 100, 100, 100, 107]);
}

#[test]
fn a_slice_narrower_than_a_float_step_keeps_its_bytes() {
    // 0.9 and the next float up, 0.9000000000000001, both divide by 0.1
    // to exactly 9.0: the slice from one to the other starts and ends on
    // grid line 9, and its bytes belong to grid slice 9.
    let step = 0.1;
    let (a, b) = (0.9, 0.900_000_000_000_000_1);
    assert!(b > a && a / step == 9.0 && b / step == 9.0);
    let slices = align(
        &[(
            Some(0.0),
            vec![(0.0, a, 900.0), (a, b, 5.0), (b, 1.0, 100.0)],
        )],
        step,
    );
    let got: Vec<u64> = slices.iter().map(|s| s.per_input[0]).collect();
    assert_eq!(got, [100, 100, 100, 100, 100, 100, 100, 100, 100, 105]);
}

#[test]
fn a_grid_of_half_seconds_has_half_second_slices() {
    let slices = align(&[(Some(4.0), vec![(0.0, 1.5, 300.0)])], 0.5);
    let got: Vec<(f64, f64, u64, f64)> = slices
        .iter()
        .map(|s| (s.start_secs, s.end_secs, s.bytes, s.goodput_bps))
        .collect();
    assert_eq!(
        got,
        [
            (0.0, 0.5, 100, 1600.0),
            (0.5, 1.0, 100, 1600.0),
            (1.0, 1.5, 100, 1600.0)
        ]
    );
}
