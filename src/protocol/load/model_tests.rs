use super::*;

fn sample(t: f64, kind: ProbeKind, ms: Option<f64>) -> Sample {
    Sample {
        t,
        kind,
        ms,
        up_ms: None,
        down_ms: None,
    }
}

#[test]
fn the_trimmed_mean_drops_the_highest_five_percent() {
    // 1..=100: the lowest 95 average 48.
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(trimmed_mean(&v, TMP), Some(48.0));
    // Order does not matter; a lone outlier among 20 is dropped.
    let mut w = vec![10.0; 19];
    w.insert(3, 1000.0);
    assert_eq!(trimmed_mean(&w, TMP), Some(10.0));
    // Too few to trim keeps everything; nothing gives nothing.
    assert_eq!(trimmed_mean(&[4.0, 2.0], TMP), Some(3.0));
    assert_eq!(trimmed_mean(&[], TMP), None);
    assert_eq!(trimmed_mean(&[f64::NAN], TMP), None);
}

#[test]
fn percentiles_are_nearest_rank() {
    let v: Vec<f64> = (1..=10).map(f64::from).collect();
    assert_eq!(percentile(&v, 50.0), Some(5.0));
    assert_eq!(percentile(&v, 90.0), Some(9.0));
    assert_eq!(percentile(&v, 99.0), Some(10.0));
    assert_eq!(percentile(&v, 0.0), Some(1.0));
    assert_eq!(percentile(&[], 50.0), None);
}

#[test]
fn responsiveness_follows_the_drafts_tcp_only_formula() {
    // Foreign: (TM(tcp_f) + TM(http_f)) / 2 = (10 + 30) / 2 = 20 ms: 3000
    // RPM. Loaded: TM(http_l) = 60 ms: 1000 RPM. Responsiveness: 2000.
    let r = responsiveness(&[10.0; 20], &[30.0; 20], &[60.0; 20]).unwrap();
    assert_eq!(r.foreign_rpm, 3000.0);
    assert_eq!(r.loaded_rpm, Some(1000.0));
    assert_eq!(r.rpm, 2000.0);
    // Without self samples, foreign alone; without foreign ones, none.
    let f = responsiveness(&[10.0], &[30.0], &[]).unwrap();
    assert_eq!((f.loaded_rpm, f.rpm), (None, 3000.0));
    assert!(responsiveness(&[], &[30.0], &[60.0]).is_none());
    assert!(responsiveness(&[10.0], &[], &[60.0]).is_none());
}

#[test]
fn stability_needs_mad_averages_within_the_tolerance() {
    let mut s = Stability::default();
    // A ramp is never stable.
    for v in [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0] {
        assert!(!s.push(v));
    }
    // A plateau becomes stable once the moving averages settle.
    let mut s = Stability::default();
    let got: Vec<bool> = (0..8).map(|_| s.push(100.0)).collect();
    assert_eq!(got, [false, false, false, true, true, true, true, true]);
    // Within 5%: 100 +- 1 is stable; nothing moving is not.
    let mut s = Stability::default();
    let wobble: Vec<bool> = [99.0, 101.0, 99.0, 101.0, 99.0, 101.0, 99.0]
        .iter()
        .map(|&v| s.push(v))
        .collect();
    assert!(wobble[6]);
    let mut z = Stability::default();
    assert!((0..8).all(|_| !z.push(0.0)));
    // A slow ramp, 2% a step: its last four moving averages (103, 105,
    // 107, 109) spread by 2.2, within 5% of 109: stable, as the draft's
    // rule has it (the rule is about the spread, not the trend).
    let mut s = Stability::default();
    let ramp: Vec<bool> = (0..7).map(|k| s.push(100.0 + 2.0 * f64::from(k))).collect();
    assert_eq!(ramp, [false, false, false, true, true, true, true]);
    // A swing larger than the tolerance is not.
    let mut s = Stability::default();
    let swing: Vec<bool> = [10.0, 100.0, 10.0, 100.0, 10.0, 100.0, 500.0]
        .iter()
        .map(|&v| s.push(v))
        .collect();
    assert!(!swing[6]);
}

/// The rule, written out plainly: the moving average of the last (up to)
/// MAD values at each step; stable once MAD of them exist, the latest is
/// positive, and their standard deviation is under SDT of the latest.
fn stable_by_the_draft(v: &[f64]) -> Vec<bool> {
    let avgs: Vec<f64> = (0..v.len())
        .map(|i| {
            let w = &v[i.saturating_sub(MAD - 1)..=i];
            w.iter().sum::<f64>() / w.len() as f64
        })
        .collect();
    (0..v.len())
        .map(|i| {
            if i + 1 < MAD || avgs[i] <= 0.0 {
                return false;
            }
            let a = &avgs[i + 1 - MAD..=i];
            let m = a.iter().sum::<f64>() / MAD as f64;
            let sd = (a.iter().map(|x| (x - m).powi(2)).sum::<f64>() / MAD as f64).sqrt();
            sd < SDT * avgs[i]
        })
        .collect()
}

proptest::proptest! {
    #[test]
    fn stability_is_the_drafts_rule(
        v in proptest::collection::vec(
            proptest::prop_oneof![0.0..1000.0f64, 95.0..105.0f64, proptest::strategy::Just(100.0)],
            1..20,
        )
    ) {
        let mut s = Stability::default();
        let got: Vec<bool> = v.iter().map(|&x| s.push(x)).collect();
        proptest::prop_assert_eq!(got, stable_by_the_draft(&v));
    }
}

#[test]
fn the_schedule_places_every_time_in_one_phase() {
    let s = Schedule::new(2.0, &[Phase::Download, Phase::Upload], 3.0);
    assert_eq!(s.end(), 8.0);
    assert_eq!(s.phase_at(0.0), Some(Phase::Idle));
    assert_eq!(s.phase_at(1.999), Some(Phase::Idle));
    assert_eq!(s.phase_at(2.0), Some(Phase::Download));
    assert_eq!(s.phase_at(5.0), Some(Phase::Upload));
    assert_eq!(s.phase_at(8.0), Some(Phase::Upload));
    assert_eq!(s.phase_at(8.1), None);
    assert_eq!(s.phase_at(-1.0), None);
}

/// Five seconds idle at 1 ms, then five uploading at 41 ms with slow
/// foreign and self probes early in the phase.
fn upload_run() -> (Schedule, Vec<Sample>, [PhaseLoad; 2]) {
    let s = Schedule::new(5.0, &[Phase::Upload], 5.0);
    let mut v = Vec::new();
    for k in 0..50 {
        let t = k as f64 * 0.1;
        v.push(Sample {
            up_ms: Some(0.4),
            down_ms: Some(0.6),
            ..sample(t, ProbeKind::Udp, Some(1.0))
        });
        v.push(sample(5.0 + t, ProbeKind::Udp, Some(41.0)));
        v.push(sample(5.0 + t, ProbeKind::TcpConnect, Some(40.0)));
        v.push(sample(5.0 + t, ProbeKind::TcpRequest, Some(40.0)));
        v.push(sample(5.0 + t, ProbeKind::SelfRtt, Some(60.0)));
    }
    v.push(sample(9.5, ProbeKind::Udp, None));
    // Early in the phase, before its last four seconds: kept in the
    // percentiles, left out of the responsiveness.
    for kind in [
        ProbeKind::TcpConnect,
        ProbeKind::TcpRequest,
        ProbeKind::SelfRtt,
    ] {
        // Ten, more than the trimmed mean's 5% would drop.
        for k in 0..10 {
            v.push(sample(5.0 + f64::from(k) * 0.1, kind, Some(4000.0)));
        }
    }
    let load = [
        PhaseLoad::default(),
        PhaseLoad {
            up_bytes: 5_000_000,
            down_bytes: 2_500_000,
            connections: 4,
            saturated: true,
        },
    ];
    (s, v, load)
}

#[test]
fn phases_summarise_their_own_probes_against_idle() {
    let (s, v, load) = upload_run();
    let r = summarize(&s, &v, &load, false);
    assert_eq!(r.len(), 2);
    let (idle, up) = (&r[0], &r[1]);
    assert_eq!((idle.udp.count, idle.udp.p50_ms), (50, Some(1.0)));
    assert_eq!(
        (idle.udp_up_p50_ms, idle.udp_down_p50_ms),
        (Some(0.4), Some(0.6))
    );
    assert_eq!(idle.increase_ms, None);
    assert!(idle.responsiveness.is_none());
    assert_eq!((up.udp.count, up.udp.lost), (50, 1));
    assert_eq!(up.increase_ms, Some(40.0));
    assert_eq!((up.up_bps, up.down_bps), (8_000_000.0, 4_000_000.0));
    assert_eq!((up.connections, up.saturated), (4, true));
    assert_eq!(up.tcp_connect.count, 60);
    assert_eq!(up.tcp_connect.p99_ms, Some(4000.0));
    // The last four seconds: 40 ms foreign (1500 RPM), 60 ms self (1000).
    let rpm = up.responsiveness.unwrap();
    assert_eq!(
        (rpm.foreign_rpm, rpm.loaded_rpm, rpm.rpm),
        (1500.0, Some(1000.0), 1250.0)
    );
    // ... and the console shows what they are made from.
    assert_eq!(
        rpm.from_ms,
        RpmInputs {
            connect: 40.0,
            request: 40.0,
            load: Some(60.0)
        }
    );
    assert_eq!(
        verdict(&r),
        "bufferbloat: latency under load +40 ms while uploading; games and calls will lag"
    );
}

#[test]
fn the_verdict_grades_the_worst_phase() {
    let report = |phase, inc| PhaseReport {
        phase,
        start: 0.0,
        end: 1.0,
        down_bps: 0.0,
        up_bps: 0.0,
        connections: 0,
        saturated: false,
        udp: KindStats::of([].iter()),
        udp_up_p50_ms: None,
        udp_down_p50_ms: None,
        tcp_connect: KindStats::of([].iter()),
        tcp_request: KindStats::of([].iter()),
        self_rtt: KindStats::of([].iter()),
        increase_ms: inc,
        interrupted: false,
        responsiveness: None,
    };
    let v = |a, b| {
        verdict(&[
            report(Phase::Idle, None),
            report(Phase::Download, a),
            report(Phase::Upload, b),
        ])
    };
    assert!(v(Some(0.2), Some(4.9)).starts_with("no bufferbloat: latency under load +4.9 ms"));
    assert!(
        v(Some(5.0), Some(1.0))
            .starts_with("mild bufferbloat: latency under load +5 ms while downloading")
    );
    assert!(
        v(Some(30.0), None).starts_with("bufferbloat: latency under load +30 ms while downloading")
    );
    assert!(
        v(Some(3.0), Some(180.0))
            .starts_with("severe bufferbloat: latency under load +180 ms while uploading")
    );
    assert!(v(Some(100.0), None).starts_with("severe bufferbloat: latency under load +100 ms"));
    assert!(v(Some(99.9), None).starts_with("bufferbloat: latency under load +100 ms"));
    assert!(v(None, None).starts_with("no verdict"));
    // Less latency under load than idle is no "+-0.0".
    assert!(v(Some(-0.04), None).starts_with("no bufferbloat: latency under load +0.0 ms"));
    assert!(v(Some(-0.3), None).starts_with("no bufferbloat: latency under load -0.3 ms"));
}

#[test]
fn changes_print_signed_and_never_minus_zero() {
    assert_eq!(signed_ms(0.0), "+0.0");
    assert_eq!(signed_ms(-0.0497), "+0.0");
    assert_eq!(signed_ms(0.0497), "+0.0");
    assert_eq!(signed_ms(0.05), "+0.1");
    assert_eq!(signed_ms(-0.05), "-0.1");
    assert_eq!(signed_ms(12.34), "+12.3");
}

#[test]
fn a_stop_cuts_the_schedule_and_the_cut_phase_has_no_responsiveness() {
    let (mut s, v, load) = upload_run();
    let mut whole = s.clone();
    assert_eq!(whole.cut(10.0), None, "a stop at the end cuts nothing");
    assert_eq!(whole, s);
    assert_eq!(s.cut(7.5), Some(Phase::Upload));
    assert_eq!(
        s.phases,
        vec![(Phase::Idle, 0.0, 5.0), (Phase::Upload, 5.0, 7.5)]
    );
    let r = summarize(&s, &v, &load, true);
    assert!(!r[0].interrupted && r[1].interrupted);
    assert!(r[1].responsiveness.is_none(), "{:?}", r[1].responsiveness);
    assert!(r[1].udp.count > 0);
    // A stop during idle leaves idle alone.
    let (mut s, ..) = upload_run();
    assert_eq!(s.cut(2.0), Some(Phase::Idle));
    assert_eq!(s.phases, vec![(Phase::Idle, 0.0, 2.0)]);
    let (mut s, ..) = upload_run();
    assert_eq!(s.cut(5.0), None, "a stop right at a phase's start");
    assert_eq!(s.phases, vec![(Phase::Idle, 0.0, 5.0)]);
}

#[test]
fn a_kinds_histogram_holds_every_result_in_ns_and_phases_add_up_exactly() {
    let k = ProbeKind::Udp;
    let first = [
        sample(0.1, k, Some(1.5)),
        sample(0.2, k, None),
        sample(0.3, k, Some(2.0)),
        sample(0.4, k, Some(-0.25)),
    ];
    let second = [sample(1.1, k, Some(1.5)), sample(1.2, k, Some(40.0004))];
    let a = KindStats::of(first.iter());
    let h = crate::protocol::hdr::decode(a.hdr.as_deref().unwrap()).unwrap();
    assert_eq!((h.len(), a.count, a.lost), (3, 3, 1));
    assert_eq!(h.count_at(1_500_000), 1);
    assert_eq!(h.count_at(2_000_000), 1);
    assert_eq!(h.count_at(0), 1, "a negative time counts as 0");
    let b = KindStats::of(second.iter());
    let hb = crate::protocol::hdr::decode(b.hdr.as_deref().unwrap()).unwrap();
    assert!(hb.equivalent(hb.min(), 1_500_000), "{}", hb.min());
    assert!(hb.equivalent(hb.max(), 40_000_400), "{}", hb.max());
    // Two phases' histograms added are the histogram of both phases' probes.
    let all: Vec<Sample> = first.iter().chain(&second).cloned().collect();
    let whole = KindStats::of(all.iter());
    let summed = crate::protocol::hdr::sum([&h, &hb]).unwrap();
    assert_eq!(whole.hdr, Some(crate::protocol::hdr::encode(&summed)));
    assert_eq!(KindStats::of([].iter()).hdr, None);
    assert_eq!(KindStats::of([sample(0.0, k, None)].iter()).hdr, None);
}
