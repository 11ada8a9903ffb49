//! Unit tests of `udp::profile` pinning what a user's scenario turns into:
//! departure times and sizes, the bytes asked for, and which profiles are
//! refused.

use super::*;

fn step(at_ns: u64, rate_bps: u64, size: u32, hold: bool) -> RateStep {
    RateStep {
        at_ns,
        rate_bps,
        size,
        hold,
    }
}

/// Asserts each departure is within 100 ns of the expected time and has the
/// expected size, and that there are no more and no fewer.
fn assert_departures(p: &Profile, want: &[(f64, u32)]) {
    let got: Vec<(u64, u32)> = p.departures().collect();
    assert_eq!(got.len(), want.len(), "count");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g.0 as f64 - w.0).abs() <= 100.0 && g.1 == w.1,
            "departure {k}: got {g:?}, want {w:?}"
        );
    }
}

#[test]
fn a_constant_rate_sends_each_datagram_mid_budget() {
    // 8 Mbit/s of 1000-byte datagrams: one per ms, each half a ms into its
    // own millisecond; the step at 0.75 ms carries the budget across.
    let p = Profile::new(vec![
        step(0, 8_000_000, 1000, true),
        step(750_000, 8_000_000, 1000, false),
        step(1_000_000_000, 8_000_000, 1000, false),
    ])
    .unwrap();
    let want: Vec<_> = (0..1000).map(|k| ((k as f64 + 0.5) * 1e6, 1000)).collect();
    assert_departures(&p, &want);
}

#[test]
fn ramps_up_and_down_follow_the_integral_of_the_rate() {
    // 0 -> 16 Mbit/s over 1 s: B(t) = 8e6 t² bits; datagram k (8000 bits)
    // leaves at B = 8000 (k + ½), t = √((k + ½)/1000). Then 16 -> 0 over
    // the next second, the mirror image: t = 2 - √(1 - (k + ½)/1000).
    let p = Profile::new(vec![
        step(0, 0, 1000, false),
        step(1_000_000_000, 16_000_000, 1000, false),
        step(2_000_000_000, 0, 1000, false),
    ])
    .unwrap();
    let mut want: Vec<_> = (0..1000)
        .map(|k| (((k as f64 + 0.5) / 1000.0).sqrt() * 1e9, 1000))
        .collect();
    want.extend((0..1000).map(|k| {
        let s = 1.0 - (1.0 - (k as f64 + 0.5) / 1000.0).sqrt();
        ((1.0 + s) * 1e9, 1000)
    }));
    assert_departures(&p, &want);
    assert_eq!(p.bytes(), 2e6);
}

#[test]
fn flowping_sizes_step_while_netrig_sizes_ramp() {
    let steps = vec![
        step(0, 8_000_000, 500, false),
        step(1_000_000_000, 8_000_000, 1000, false),
    ];
    let ramp = Profile::new(steps.clone()).unwrap();
    let d: Vec<_> = ramp.departures().collect();
    // Sizes grow from 500 to 1000 with the time they leave at.
    for &(t, s) in &d {
        let want = 500.0 + 500.0 * t as f64 / 1e9;
        assert!((s as f64 - want).abs() <= 1.0, "{t} {s}");
    }
    assert!(d.first().unwrap().1 == 500 && d.last().unwrap().1 >= 999);
    let stepped = Profile::new(steps).unwrap().with_size_steps();
    let d: Vec<_> = stepped.departures().collect();
    // 1 MB/s of 500-byte datagrams: 2000 of them, 0.5 ms apart.
    assert_eq!(d.len(), 2000);
    assert!(d.iter().all(|&(_, s)| s == 500));
}

#[test]
fn a_held_step_asks_for_its_own_rate_to_the_end() {
    let p = Profile::new(vec![
        step(0, 8_000_000, 100, true),
        step(1_000_000_000, 0, 100, false),
    ])
    .unwrap();
    assert_eq!(p.bytes(), 1e6);
    assert_eq!(p.bytes_until(1_000_000_000), 1e6);
    assert_eq!(p.at(999_999_999).0, 8e6);
}

#[test]
fn sizes_and_rates_of_a_profile() {
    let p = Profile::new(vec![
        step(0, 3_000_000, 700, false),
        step(1_000_000_000, 9_000_000, 200, false),
        step(2_000_000_000, 1_000_000, 1400, false),
    ])
    .unwrap();
    assert_eq!(
        (p.min_size(), p.max_size(), p.max_rate()),
        (200, 1400, 9_000_000)
    );
    let s = Profile::sweep(1_000, 5_000, 1_000_000_000, 64).unwrap();
    assert_eq!(
        s.steps(),
        &[
            step(0, 1_000, 64, false),
            step(1_000_000_000, 5_000, 64, false)
        ]
    );
}

#[test]
fn checks_name_the_step_and_bound_the_length() {
    // A profile that came over the wire is checked like a file.
    assert_eq!(
        Profile::new(vec![
            step(0, 1, 100, false),
            step(5, 1, 100, false),
            step(5, 1, 100, false),
        ]),
        Err(ProfileError::NotIncreasing { line: 3 })
    );
    assert_eq!(
        Profile::new(vec![step(0, 1, 100, false)]),
        Err(ProfileError::TooShort)
    );
    let many = |n: u64| (0..n).map(|i| step(i, 1, 100, false)).collect::<Vec<_>>();
    assert!(Profile::new(many(MAX_STEPS as u64)).is_ok());
    assert_eq!(
        Profile::new(many(MAX_STEPS as u64 + 1)),
        Err(ProfileError::TooLong { max: MAX_STEPS })
    );
}

#[test]
fn a_burst_train_stops_before_its_end() {
    // The third datagram of the second burst would leave at the end itself.
    let d: Vec<_> = burst_departures(100, 3, 1_000_000, 10, 1_000_020).collect();
    assert_eq!(
        d,
        vec![
            (0, 100),
            (10, 100),
            (20, 100),
            (1_000_000, 100),
            (1_000_010, 100)
        ]
    );
}

#[test]
fn a_slow_ramp_at_a_high_rate_leaves_as_its_constant_rate_does() {
    // 10 Gbit/s rising by 1 bit/s over a second and falling back over the
    // next: the bits asked for differ from a constant 10 Gbit/s by half a
    // bit, so every 9000-byte datagram must leave within a nanosecond of
    // the constant rate's. (The gap here is 7.2 µs, and r² = 1e20 leaves no
    // digits for a slope·need of 1.44e5 in √(r² + 2·slope·need) - r.)
    let ramp = Profile::new(vec![
        step(0, 10_000_000_000, 9000, false),
        step(1_000_000_000, 10_000_000_001, 9000, false),
        step(2_000_000_000, 10_000_000_000, 9000, false),
    ])
    .unwrap();
    let flat = Profile::new(vec![
        step(0, 10_000_000_000, 9000, true),
        step(2_000_000_000, 10_000_000_000, 9000, false),
    ])
    .unwrap();
    let want: Vec<(u64, u32)> = flat.departures().collect();
    assert_eq!(want.len(), 277_778);
    // Bounded: a gap computed as zero would repeat one departure forever.
    let got: Vec<(u64, u32)> = ramp.departures().take(want.len() + 1).collect();
    assert_eq!(got.len(), want.len(), "count");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g.0.abs_diff(w.0) <= 1 && g.1 == w.1,
            "departure {k}: got {g:?}, want {w:?}"
        );
    }
}
