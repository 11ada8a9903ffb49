//! Unit tests of `udp::analyze`.

use super::*;

/// A sweep 0..20 Mbit/s over 20 s in 0.5 s intervals through a model path.
fn model(limit: f64, shaping: bool, burst_bytes: f64) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut bucket: f64 = burst_bytes;
    let mut queue_us: f64 = 0.0;
    for k in 0..40 {
        let (start, end) = (k as f64 * 0.5, k as f64 * 0.5 + 0.5);
        let offered = 20e6 * (start + end) / 2.0 / 20.0;
        let (got, loss, delay) = if shaping {
            if offered > limit {
                queue_us = (queue_us + 4000.0).min(40_000.0);
            }
            (
                offered.min(limit) * 0.5 / 8.0,
                if queue_us >= 40_000.0 { 0.05 } else { 0.0 },
                100.0 + queue_us,
            )
        } else {
            // A token bucket (rate `limit`, depth `burst_bytes`) in 1 ms steps.
            let (mut got, mut want) = (0.0, 0.0);
            for _ in 0..500 {
                bucket = (bucket + limit * 0.001 / 8.0).min(burst_bytes);
                let w = offered * 0.001 / 8.0;
                let g = w.min(bucket);
                bucket -= g;
                got += g;
                want += w;
            }
            (got, 1.0 - got / want.max(1.0), 100.0)
        };
        out.push(Sample {
            start,
            end,
            offered_bps: offered,
            asked_bps: offered,
            received_bps: got * 8.0 / 0.5,
            bytes: got as u64,
            loss,
            delay_avg_us: Some(delay),
            delay_min_us: Some(delay * 0.9),
            delay_max_us: Some(delay * 1.1),
            size: 1000.0,
        });
    }
    out
}

#[test]
fn the_headline_time_is_the_evidence_time_and_wire_rates_add_headers() {
    let a = analyze(&model(10e6, false, 400_000.0));
    let t = a.congestion_at.unwrap();
    assert!(
        a.evidence[0].contains(&format!("at t={t:.2}s")),
        "{t} {:?}",
        a.evidence
    );
    let (p, w) = (a.congestion_bps.unwrap(), a.congestion_wire_bps.unwrap());
    assert_eq!(w, p * 1042.0 / 1000.0);
    assert_eq!(
        wire_bps(47.97e6, 1000.0, FRAME_OVERHEAD_V4).round(),
        49_984_740.0
    );
    assert_eq!(wire_bps(1e6, 0.0, 42), 1e6);
}

/// What one synthetic series must yield.
struct Case {
    name: &'static str,
    samples: Vec<Sample>,
    limiter: Option<Limiter>,
    /// Congestion point, bit/s, within 10%.
    at_bps: Option<f64>,
    /// Committed burst, bytes, within 5%.
    burst: Option<f64>,
    /// Words one evidence line must contain.
    says: &'static str,
}

#[test]
fn samples_turn_intervals_into_exact_rates_and_loss() {
    // 0 → 8 Mbit/s over 2 s, in 1000-byte datagrams.
    let profile = Profile::sweep(0, 8_000_000, 2_000_000_000, 1000).unwrap();
    let iv = |time_slice, bytes, packets, drops, duplicates| UdpInterval {
        time_slice,
        bytes,
        packets,
        drops,
        duplicates,
        delay_avg_us: Some(150.0),
        delay_min_us: Some(100.0),
        delay_max_us: Some(200.0),
        ..Default::default()
    };
    let intervals = [
        iv(0.5, 50_000, 52, 2, 2),
        iv(1.0, 150_000, 150, 0, 0),
        iv(1.5, 200_000, 200, 50, 0),
        iv(2.0, 250_000, 250, 0, 0),
        // The drain after the stream ends is not a sample.
        iv(2.5, 0, 0, 0, 0),
    ];
    let got = samples(&profile, &intervals, None);
    assert_eq!(got.len(), 4);
    assert_eq!((got[3].start, got[3].end), (1.5, 2.0));
    assert_eq!(got[3].asked_bps, 7_000_000.0);
    let s0 = got[0];
    assert_eq!((s0.start, s0.end), (0.0, 0.5));
    // Mid-interval (0.25 s) the sweep asks 1 Mbit/s.
    assert_eq!(s0.asked_bps, 1_000_000.0);
    assert_eq!(s0.offered_bps, 1_000_000.0);
    assert_eq!(s0.received_bps, 800_000.0);
    assert_eq!(s0.bytes, 50_000);
    // 2 lost of (52 − 2 duplicates + 2 lost) expected.
    assert_eq!(s0.loss, 2.0 / 52.0);
    assert_eq!(s0.size, 1000.0);
    assert_eq!(s0.delay_avg_us, Some(150.0));
    assert_eq!((got[1].start, got[1].end), (0.5, 1.0));
    assert_eq!(got[1].asked_bps, 3_000_000.0);
    assert_eq!(got[1].loss, 0.0);
    assert_eq!(got[2].loss, 50.0 / 250.0);
    assert_eq!(got[2].received_bps, 200_000.0 * 8.0 / 0.5);
    // With the sender's own counts, the offered rate is what left it.
    let sent = [25_000u64, 25_000, 100_000, 100_000, 0, 0];
    let got = samples(&profile, &intervals, Some((&sent, 0.25)));
    assert_eq!(got[0].offered_bps, 50_000.0 * 8.0 / 0.5);
    assert_eq!(got[0].asked_bps, 1_000_000.0);
    assert_eq!(got[1].offered_bps, 200_000.0 * 8.0 / 0.5);
    assert_eq!(got[2].offered_bps, 0.0);
    // No intervals, no samples.
    assert!(samples(&profile, &[], None).is_empty());
}

#[test]
fn congestion_table() {
    let mut stalled = model(100e6, false, 1e6);
    // The host stalled the receiver once: one interval short, queue and all.
    stalled[20].received_bps *= 0.5;
    stalled[20].delay_avg_us = Some(20_000.0);
    let mut behind = model(100e6, false, 1e6);
    // The sender left only 60% of what the profile asked from t = 15 s; the path
    // carried all of it, so there is no congestion, only a slow sender.
    for s in behind.iter_mut().filter(|s| s.start >= 15.0) {
        s.offered_bps = s.asked_bps * 0.6;
        s.received_bps = s.offered_bps;
    }
    let cases = vec![
        Case {
            name: "clean link",
            samples: model(100e6, false, 1e6),
            limiter: None,
            at_bps: None,
            burst: None,
            says: "followed the offered rate throughout",
        },
        Case {
            name: "shaper: delay grows, no loss at first",
            samples: model(10e6, true, 0.0),
            limiter: Some(Limiter::Shaping),
            at_bps: Some(10e6),
            burst: None,
            says: "",
        },
        // The FlowPing paper's own setting: CIR 5 Mbit/s, Bc 256 kB; its
        // estimate was 252,000 B.
        Case {
            name: "policer, FlowPing paper",
            samples: model(5e6, false, 256_000.0),
            limiter: Some(Limiter::Policing),
            at_bps: Some(5e6),
            burst: Some(256_000.0),
            says: "Bc =",
        },
        Case {
            name: "policer, 10 Mbit/s, 400 kB",
            samples: model(10e6, false, 400_000.0),
            limiter: Some(Limiter::Policing),
            at_bps: Some(10e6),
            burst: Some(400_000.0),
            says: "Bc =",
        },
        Case {
            name: "a lone host stall",
            samples: stalled,
            limiter: None,
            at_bps: None,
            burst: None,
            says: "followed the offered rate throughout",
        },
        Case {
            name: "a sender that fell behind",
            samples: behind,
            limiter: None,
            at_bps: None,
            burst: None,
            says: "the sender sent less than the profile asked in 10 of 40 intervals",
        },
        Case {
            name: "too few intervals",
            samples: model(5e6, false, 256_000.0)[..3].to_vec(),
            limiter: None,
            at_bps: None,
            burst: None,
            says: "only 3 intervals with traffic: too few to analyse",
        },
    ];
    for c in cases {
        let a = analyze(&c.samples);
        let ctx = format!("{}: {:?}", c.name, a.evidence);
        assert_eq!(a.limiter, c.limiter, "{ctx}");
        match (c.at_bps, a.congestion_bps) {
            (Some(want), Some(got)) => assert!((got / want - 1.0).abs() < 0.1, "{got} {ctx}"),
            (None, None) => {}
            (want, got) => panic!("congestion {got:?}, expected {want:?}: {ctx}"),
        }
        match (c.burst, a.burst_bytes) {
            (Some(want), Some(got)) => {
                assert!((got / want - 1.0).abs() < 0.05, "Bc {got} {ctx}")
            }
            (None, None) => {}
            (want, got) => panic!("burst {got:?}, expected {want:?}: {ctx}"),
        }
        assert!(a.evidence.iter().any(|e| e.contains(c.says)), "{ctx}");
    }
}

#[test]
fn shaping_is_found_at_the_shaper_rate() {
    let a = analyze(&model(10e6, true, 0.0));
    assert_eq!(a.limiter, Some(Limiter::Shaping), "{:?}", a.evidence);
    let c = a.congestion_bps.unwrap();
    assert!((c / 10e6 - 1.0).abs() < 0.1, "{c}");
}

#[test]
fn policing_is_found_and_its_burst_estimated() {
    let a = analyze(&model(10e6, false, 400_000.0));
    assert_eq!(a.limiter, Some(Limiter::Policing), "{:?}", a.evidence);
    let bc = a.burst_bytes.unwrap();
    assert!(
        (bc / 400_000.0 - 1.0).abs() < 0.3,
        "Bc {bc}: {:?}",
        a.evidence
    );
}

#[test]
fn a_lone_slow_interval_does_not_make_a_policer_a_shaper() {
    let mut samples = model(10e6, false, 400_000.0);
    // The host paused the receiver for 20 ms once, after congestion.
    samples[30].delay_avg_us = Some(20_000.0);
    let a = analyze(&samples);
    assert_eq!(a.limiter, Some(Limiter::Policing), "{:?}", a.evidence);
    assert!(a.burst_bytes.is_some(), "{:?}", a.evidence);
}

#[test]
fn a_sender_stall_at_the_burst_leaves_it_unestimated_rather_than_wrong() {
    let mut samples = model(10e6, false, 400_000.0);
    // Nothing left the sender from t=10 s (when the offered rate reached
    // the policer's) to t=12 s.
    for s in samples
        .iter_mut()
        .filter(|s| s.start >= 10.0 && s.end <= 12.0)
    {
        (s.bytes, s.received_bps, s.loss) = (0, 0.0, 0.0);
    }
    let a = analyze(&samples);
    assert_eq!(a.limiter, Some(Limiter::Policing), "{:?}", a.evidence);
    assert_eq!(a.burst_bytes, None, "{:?}", a.evidence);
    assert!(
        a.evidence
            .iter()
            .any(|e| e.contains("burst: not estimated")),
        "{:?}",
        a.evidence
    );
}

#[test]
fn a_late_or_limited_sender_is_flagged_and_lowers_confidence_once() {
    use crate::protocol::udp::sent::SenderReport;
    let sender = |late_max_us, sender_limited| SenderReport {
        late_max_us,
        sender_limited,
        asked_bps: 50e6,
        achieved_bps: 42.818e6,
        ..Default::default()
    };
    let base = analyze(&model(10e6, false, 400_000.0));
    let mut a = base.clone();
    note_sender(&mut a, &sender(500.0, false));
    assert_eq!(a, base, "a punctual sender that kept up changes nothing");
    note_sender(&mut a, &sender(150_000.0, false));
    assert_eq!(a.confidence, base.confidence / 2.0);
    assert!(a.evidence.last().unwrap().contains("up to 150 ms behind"));
    let mut b = base.clone();
    note_sender(&mut b, &sender(DISTURBED_LATE_US, true));
    assert_eq!(b.confidence, base.confidence / 2.0);
    assert_eq!(
        b.evidence.len(),
        base.evidence.len() + 1,
        "exactly at the bound is not late"
    );
    assert!(
        b.evidence
            .last()
            .unwrap()
            .contains("42.82 Mbit/s left the sender where the profile asked for 50.00")
    );
    let mut c = base.clone();
    note_sender(&mut c, &sender(150_000.0, true));
    assert_eq!(
        c.confidence,
        base.confidence / 2.0,
        "halved once, not twice"
    );
    assert_eq!(c.evidence.len(), base.evidence.len() + 2);
}

#[test]
fn an_unlimited_path_is_not_congested() {
    let a = analyze(&model(1e12, true, 0.0));
    assert_eq!(a.congestion_bps, None);
    assert!(a.evidence[0].contains("followed"));
}

#[test]
fn a_sender_that_falls_behind_is_not_congestion() {
    // An unlimited path, but the sender stalls for three intervals early on:
    // fewer datagrams arrive, none are lost and no queue builds.
    let mut s = model(1e12, true, 0.0);
    for x in &mut s[4..7] {
        x.received_bps *= 0.5;
    }
    let a = analyze(&s);
    assert_eq!(a.congestion_bps, None, "{:?}", a.evidence);
}

#[test]
fn sent_counts_are_spread_over_the_intervals_they_overlap() {
    let sent = [1000, 2000, 3000];
    assert_eq!(sent_between(&sent, 1.0, 0.0, 1.0), 1000.0);
    assert_eq!(sent_between(&sent, 1.0, 0.5, 1.5), 500.0 + 1000.0);
    assert_eq!(sent_between(&sent, 1.0, 1.0, 3.0), 5000.0);
    assert_eq!(sent_between(&sent, 1.0, 2.5, 10.0), 1500.0);
    assert_eq!(sent_between(&sent, 1.0, 3.0, 4.0), 0.0);
    assert_eq!(sent_between(&sent, 0.0, 0.0, 4.0), 0.0);
    assert_eq!(sent_between(&sent, 1.0, 2.0, 1.0), 0.0);
    // Half-second intervals: each count belongs to its own half second.
    assert_eq!(sent_between(&sent, 0.5, 0.0, 0.5), 1000.0);
    assert_eq!(sent_between(&sent, 0.5, 0.25, 0.75), 500.0 + 1000.0);
    assert_eq!(sent_between(&sent, 0.5, 1.0, 1.5), 3000.0);
    assert_eq!(sent_between(&sent, 0.5, 1.5, 9.0), 0.0);
    assert_eq!(sent_between(&sent, 2.0, 0.0, 1.0), 500.0);
    assert_eq!(sent_between(&sent, 2.0, 2.5, 4.0), 1500.0);
}

#[test]
fn offered_is_what_left_the_sender() {
    use crate::protocol::udp::profile::{Profile, RateStep};
    let p = Profile::new(vec![
        RateStep {
            at_ns: 0,
            rate_bps: 8_000_000,
            size: 1000,
            hold: true,
        },
        RateStep {
            at_ns: 4_000_000_000,
            rate_bps: 8_000_000,
            size: 1000,
            hold: false,
        },
    ])
    .unwrap();
    // The profile asks 8 Mbit/s (1 MB/s); the sender managed 0.5 MB/s in
    // its second second, and the path delivered all of it.
    let sent = [1_000_000, 500_000, 1_000_000, 1_000_000];
    let ivs: Vec<UdpInterval> = sent
        .iter()
        .enumerate()
        .map(|(k, &b)| UdpInterval {
            time_slice: (k + 1) as f64,
            bytes: b,
            packets: b / 1000,
            ..Default::default()
        })
        .collect();
    let with = samples(&p, &ivs, Some((&sent, 1.0)));
    assert_eq!(with[1].asked_bps, 8e6);
    assert_eq!(with[1].offered_bps, 4e6);
    assert_eq!(with[1].received_bps, 4e6);
    let without = samples(&p, &ivs, None);
    assert_eq!(without[1].offered_bps, 8e6);
    let a = analyze(&with);
    assert_eq!(a.congestion_bps, None);
    assert!(
        a.evidence
            .iter()
            .any(|e| e.contains("less than the profile asked in 1 of 4")),
        "{:?}",
        a.evidence
    );
    let b = bins(&with, 1e6);
    assert_eq!(b.len(), 1, "binned by the asked rate");
    assert_eq!((b[0].asked_bps, b[0].offered_bps), (8e6, 7e6));
}

#[test]
fn bins_group_by_offered_rate() {
    let s = model(10e6, true, 0.0);
    let b = bins(&s, 5e6);
    assert_eq!(b.len(), 4);
    assert_eq!(b.iter().map(|x| x.intervals).sum::<usize>(), 40);
    assert!(b[3].received_bps < b[3].offered_bps * 0.7);
}

/// One 1-s interval of a hand-computed series: rates in Mbit/s, delays in µs.
fn at(k: usize, offered: f64, received: f64, loss: f64, delay: f64, floor: f64) -> Sample {
    Sample {
        start: k as f64,
        end: k as f64 + 1.0,
        offered_bps: offered * 1e6,
        asked_bps: offered * 1e6,
        received_bps: received * 1e6,
        bytes: (received * 1e6 / 8.0) as u64,
        loss,
        delay_avg_us: Some(delay),
        delay_min_us: Some(floor),
        delay_max_us: Some(delay),
        size: 1000.0,
    }
}

#[test]
fn a_policed_series_yields_the_hand_computed_figures() {
    let s: Vec<Sample> = [
        (1.0, 1.0, 0.0, 100.0),
        (2.0, 2.0, 0.0, 110.0),
        (3.0, 3.0, 0.0, 120.0),
        (4.0, 4.0, 0.0, 130.0),
        // Loss from here: the congestion point.
        (5.0, 4.5, 0.1, 100.0),
        (6.0, 4.0, 0.33, 140.0),
        (7.0, 4.2, 0.4, 100.0),
        (8.0, 3.9, 0.5, 100.0),
    ]
    .iter()
    .enumerate()
    .map(|(k, &(o, r, l, d))| at(k, o, r, l, d, 90.0))
    .collect();
    let a = analyze(&s);
    let ctx = format!("{:?}", a.evidence);
    assert_eq!(a.limiter, Some(Limiter::Policing), "{ctx}");
    assert_eq!(a.congestion_at, Some(4.0), "{ctx}");
    // Median of the received rates after: 3.9, 4.0, [4.2], 4.5.
    assert_eq!(a.settled_bps, Some(4.2e6), "{ctx}");
    // The offered rate reached it (4 Mbit/s ≤ 4.2 × 1.02) before: the point is the path's rate.
    assert_eq!(a.congestion_bps, Some(4.2e6), "{ctx}");
    assert_eq!(a.congestion_size, Some(1000.0));
    // Mean loss after: (0.1 + 0.33 + 0.4 + 0.5) / 4.
    let loss = (0.1 + 0.33 + 0.4 + 0.5) / 4.0;
    assert!((a.confidence - loss / (loss + 0.05)).abs() < 1e-12, "{ctx}");
    // Medians of the delays: before 100, 110, [120], 130; after 100, 100, [100], 140.
    assert!(
        a.evidence.iter().any(|e| e
            .contains("median one-way delay 120 us before congestion, 100 us after (peak 140 us)")),
        "{ctx}"
    );
    // Eq. 1: t1 = 4 (offered 5 ≥ 4.2), t2 = 5 (received 4.0 ≤ 4.2 × 1.05):
    // 562,500 B received − 4.2 Mbit/s × 1 s / 8.
    assert_eq!(a.burst_bytes, Some(562_500.0 - 525_000.0), "{ctx}");
}

#[test]
fn where_the_offered_rate_never_sat_at_the_path_rate_the_point_is_the_offered_rate() {
    // Before congestion the sender offered 4.25 Mbit/s: above the settled 4.2
    // but within 2% of it, so the offered rate did reach the path's.
    let series = |before: f64| -> Vec<Sample> {
        [
            (before, before, 0.0),
            (before, before, 0.0),
            (5.0, 4.2, 0.2),
            (6.0, 4.2, 0.3),
            (7.0, 4.2, 0.4),
        ]
        .iter()
        .enumerate()
        .map(|(k, &(o, r, l))| at(k, o, r, l, 100.0, 90.0))
        .collect()
    };
    let a = analyze(&series(4.25));
    assert_eq!(a.congestion_bps, Some(4.2e6), "{:?}", a.evidence);
    // 4.3 Mbit/s is over 2% above: the point is the first congested interval's offer.
    let b = analyze(&series(4.3));
    assert_eq!(b.congestion_bps, Some(5e6), "{:?}", b.evidence);
}

#[test]
fn a_shortfall_counts_only_past_its_threshold_and_with_a_queue() {
    // Floor 1000 µs, so a queue shows above 1000 + max(1000, 3 × 1000) = 4000 µs.
    let edge = 5.0 * (1.0 - RATE_SHORTFALL);
    let s: Vec<Sample> = [
        (1.0, 1.0, 1000.0),
        // Short, but the delay is exactly at the queue threshold: no queue.
        (2.0, 1.5, 4000.0),
        (3.0, 2.5, 5000.0),
        (4.0, 4.0, 1000.0),
        // A queue, but received is exactly at the shortfall threshold.
        (5.0, edge, 5000.0),
        (6.0, 3.0, 40_000.0),
        (7.0, 3.0, 50_000.0),
        (8.0, 3.0, 50_000.0),
    ]
    .iter()
    .enumerate()
    .map(|(k, &(o, r, d))| at(k, o, r, 0.0, d, 1000.0))
    .collect();
    let a = analyze(&s);
    let ctx = format!("{:?}", a.evidence);
    assert_eq!(a.congestion_at, Some(5.0), "{ctx}");
    assert_eq!(a.settled_bps, Some(3e6), "{ctx}");
    assert_eq!(a.limiter, Some(Limiter::Shaping), "{ctx}");
    // Growth: median after (50,000) − median before (1000, 1000, [4000], 5000, 5000).
    let growth = 50_000.0 - 4000.0;
    assert!(
        (a.confidence - growth / (growth + 5000.0)).abs() < 1e-12,
        "{ctx}"
    );
}

#[test]
fn loss_counts_only_past_its_onset() {
    let s: Vec<Sample> = (0..6)
        .map(|k| at(k, 1.0 + k as f64, 1.0 + k as f64, LOSS_ONSET, 100.0, 90.0))
        .collect();
    let a = analyze(&s);
    assert_eq!(a.congestion_bps, None, "{:?}", a.evidence);
}

#[test]
fn four_intervals_with_traffic_are_enough_and_idle_ones_do_not_count() {
    let mut s: Vec<Sample> = (0..4).map(|k| at(k, 1.0, 1.0, 0.0, 100.0, 90.0)).collect();
    // Offered exactly 95% of the asked rate is not short.
    s[1].offered_bps = s[1].asked_bps * SENDER_SHORT;
    let a = analyze(&s);
    assert_eq!(
        a.evidence,
        vec!["received rate followed the offered rate throughout, with no loss onset".to_string()]
    );
    assert_eq!(a.confidence, 0.8);
    s[3].offered_bps = 0.0;
    let b = analyze(&s);
    assert!(
        b.evidence
            .iter()
            .any(|e| e == "only 3 intervals with traffic: too few to analyse"),
        "{:?}",
        b.evidence
    );
}

#[test]
fn bins_average_each_field_and_keep_delay_extremes() {
    let mut s = vec![
        at(0, 1.0, 1.0, 0.1, 100.0, 90.0),
        at(1, 1.5, 1.0, 0.3, 300.0, 80.0),
        at(2, 2.5, 2.0, 0.0, 200.0, 150.0),
    ];
    s[2].delay_avg_us = None;
    s[2].delay_min_us = None;
    s[2].delay_max_us = None;
    let b = bins(&s, 2e6);
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].from_bps, 0.0);
    assert_eq!(b[1].from_bps, 2e6);
    assert_eq!(b[0].asked_bps, 1.25e6);
    assert_eq!(b[0].offered_bps, 1.25e6);
    assert_eq!(b[0].received_bps, 1e6);
    assert!((b[0].loss_pct - 20.0).abs() < 1e-12, "{}", b[0].loss_pct);
    assert_eq!(b[0].delay_min_us, Some(80.0));
    assert_eq!(b[0].delay_avg_us, Some(200.0));
    assert_eq!(b[0].delay_max_us, Some(300.0));
    assert_eq!(b[0].intervals, 2);
    // A bin without delay measurements has none, not zero.
    assert_eq!(
        (b[1].delay_min_us, b[1].delay_avg_us, b[1].delay_max_us),
        (None, None, None)
    );
    assert_eq!(b[1].loss_pct, 0.0);
}

#[test]
fn samples_edges_an_empty_sender_account_and_an_empty_interval() {
    let profile = Profile::sweep(0, 8_000_000, 2_000_000_000, 1000).unwrap();
    let intervals = [
        UdpInterval {
            time_slice: 1.0,
            ..Default::default()
        },
        UdpInterval {
            time_slice: 2.0,
            bytes: 1000,
            packets: 1,
            ..Default::default()
        },
    ];
    // An empty account says nothing: the offered rate is the profile's.
    let got = samples(&profile, &intervals, Some((&[], 0.5)));
    assert_eq!(got[0].offered_bps, 2_000_000.0);
    // Nothing expected, nothing lost (not 0/0).
    assert_eq!(got[0].loss, 0.0);
    // A count straddling the start of the window: half of [0, 2) lies in [1.5, 2).
    assert_eq!(sent_between(&[1000, 2000], 2.0, 1.5, 2.0), 250.0);
}
