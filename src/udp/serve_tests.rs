//! Unit tests of `udp::serve`.

use super::*;
use crate::protocol::udp::profile::{Profile, RateStep};
use std::time::Duration;

fn spec() -> UdpSpec {
    // 1000 B a millisecond: 8 Mbit/s.
    UdpSpec::steady(1000, 1_000_000_000, 1000)
}

fn ok(edit: impl FnOnce(&mut UdpSpec)) -> Result<(), Refusal> {
    let mut s = spec();
    edit(&mut s);
    validate(&s, Limits::default())
}

fn profile(steps: &[(u64, u64, u32)]) -> Option<Profile> {
    let steps = steps
        .iter()
        .map(|&(at_ns, rate_bps, size)| RateStep {
            at_ns,
            rate_bps,
            size,
            hold: false,
        })
        .collect();
    Some(Profile::new(steps).unwrap())
}

#[test]
fn every_bound_holds_at_its_edge() {
    assert!(ok(|_| {}).is_ok());
    for (what, good, bad) in [
        (
            "size low",
            ok(|s| s.size = HEADER_LEN as u32),
            ok(|s| s.size = HEADER_LEN as u32 - 1),
        ),
        (
            "size high",
            ok(|s| s.size = MAX_DATAGRAM as u32),
            ok(|s| s.size = MAX_DATAGRAM as u32 + 1),
        ),
        (
            "bins",
            ok(|s| s.hist_bins = MAX_HIST_BINS),
            ok(|s| s.hist_bins = MAX_HIST_BINS + 1),
        ),
        ("no bins", ok(|s| s.hist_bins = 1), ok(|s| s.hist_bins = 0)),
        (
            "bin width",
            ok(|s| s.hist_bin_ns = 1),
            ok(|s| s.hist_bin_ns = 0),
        ),
        (
            "interval",
            ok(|s| s.interval_ms = 1),
            ok(|s| s.interval_ms = 0),
        ),
        (
            "gap",
            ok(|s| s.gap_ps = 1_000_000_000),
            ok(|s| s.gap_ps = 0),
        ),
        (
            "rate and gap agree",
            // 1000 B at 8 Mbit/s is the spec's 1 ms gap; 9 Mbit/s is not.
            ok(|s| s.rate_bps = Some(8_000_000)),
            ok(|s| s.rate_bps = Some(9_000_000)),
        ),
        (
            "a rate is positive",
            ok(|s| s.rate_bps = None),
            ok(|s| s.rate_bps = Some(0)),
        ),
        (
            "duration",
            ok(|s| s.duration_ms = 1),
            ok(|s| s.duration_ms = 0),
        ),
        (
            "playout buffer",
            ok(|s| {
                s.media = Some(crate::protocol::proto::MediaSpec {
                    fps: 30,
                    buffer_depth_ms: MAX_BUFFER_DEPTH_MS,
                    frame_bytes: 0,
                    varying: None,
                })
            }),
            ok(|s| {
                s.media = Some(crate::protocol::proto::MediaSpec {
                    fps: 30,
                    buffer_depth_ms: MAX_BUFFER_DEPTH_MS + 1,
                    frame_bytes: 0,
                    varying: None,
                })
            }),
        ),
        (
            "fps",
            ok(|s| {
                s.media = Some(crate::protocol::proto::MediaSpec {
                    fps: 1,
                    buffer_depth_ms: 0,
                    frame_bytes: 0,
                    varying: None,
                })
            }),
            ok(|s| {
                s.media = Some(crate::protocol::proto::MediaSpec {
                    fps: 0,
                    buffer_depth_ms: 0,
                    frame_bytes: 0,
                    varying: None,
                })
            }),
        ),
        (
            "profile as long as the test",
            ok(|s| s.profile = profile(&[(0, 1000, 100), (1_000_000_000, 1000, 100)])),
            ok(|s| s.profile = profile(&[(0, 1000, 100), (1_000_000_001, 1000, 100)])),
        ),
        (
            "profile sizes low",
            ok(|s| s.profile = profile(&[(0, 1000, 32), (1000, 1000, 100)])),
            ok(|s| s.profile = profile(&[(0, 1000, 31), (1000, 1000, 100)])),
        ),
        (
            "profile sizes high",
            ok(|s| s.profile = profile(&[(0, 1000, 100), (1000, 1000, 65_507)])),
            ok(|s| s.profile = profile(&[(0, 1000, 100), (1000, 1000, 65_508)])),
        ),
    ] {
        assert!(good.is_ok(), "{what}: {good:?}");
        assert!(bad.is_err(), "{what}");
    }
}

#[test]
fn rates_and_burst_plans_are_exact() {
    let mut s = spec();
    assert_eq!(rate_bps(&s), 8_000_000.0);
    s.gap_ps = 250_000_000;
    assert_eq!(rate_bps(&s), 32_000_000.0);
    // 10 KB every 10 ms in 1000 B datagrams: 8 Mbit/s on average.
    s.burst = Some(crate::protocol::proto::BurstSpec {
        size: 10_000,
        period_ms: 10,
    });
    assert_eq!(burst_plan(&s), Some((10, 10_000_000)));
    assert_eq!(rate_bps(&s), 8_000_000.0);
    // A burst is whole datagrams, rounded up.
    s.burst = Some(crate::protocol::proto::BurstSpec {
        size: 10_001,
        period_ms: 20,
    });
    assert_eq!(burst_plan(&s), Some((11, 20_000_000)));
    assert_eq!(rate_bps(&s), 4_400_000.0);
    s.burst = None;
    s.profile = profile(&[(0, 3_000, 100), (10, 7_000, 100), (20, 5_000, 100)]);
    assert_eq!(rate_bps(&s), 7_000.0);
}

#[test]
fn the_rate_limit_allows_a_millionth_for_rounding() {
    let at = |gap_ps| {
        let mut s = spec();
        s.gap_ps = gap_ps;
        validate(
            &s,
            Limits {
                max_rate_bps: 8_000_000,
                ..Limits::default()
            },
        )
    };
    // 8,000,004 bit/s: half a millionth over, as rounding a gap can make it.
    assert!(at(999_999_500).is_ok());
    // 8,000,016 bit/s: two millionths over.
    assert!(matches!(
        at(999_998_000),
        Err(Refusal::Limit(Limit::Rate { .. }))
    ));
}

#[test]
fn duration_bytes_and_bursts_at_their_edges() {
    let at = |duration_ms, max_duration_ms, max_bytes| {
        let mut s = spec();
        s.duration_ms = duration_ms;
        validate(
            &s,
            Limits {
                max_duration: Duration::from_millis(max_duration_ms),
                max_bytes,
                ..Limits::default()
            },
        )
    };
    let day = MAX_DURATION_MS;
    assert!(at(day, 2 * day, u64::MAX).is_ok());
    assert!(at(day + 1, 2 * day, u64::MAX).is_err());
    assert!(at(5000, 5000, u64::MAX).is_ok());
    assert!(matches!(
        at(5001, 5000, u64::MAX),
        Err(Refusal::Limit(Limit::Duration { .. }))
    ));
    // 8 Mbit/s for 2 s: 2 MB.
    assert!(at(2000, 5000, 2_000_000).is_ok());
    assert!(matches!(
        at(2000, 5000, 1_999_999),
        Err(Refusal::Limit(Limit::Bytes { .. }))
    ));
    for (size, period_ms, good) in [(1000, 10, true), (0, 10, false), (1000, 0, false)] {
        let r = ok(|s| s.burst = Some(crate::protocol::proto::BurstSpec { size, period_ms }));
        assert_eq!(r.is_ok(), good, "burst {size} every {period_ms} ms: {r:?}");
    }
}

#[test]
fn a_profiles_own_bytes_and_rate_count_against_the_limits() {
    let mut s = spec();
    // 8 Mbit/s for 1 s: 1 MB.
    s.profile = profile(&[(0, 8_000_000, 1000), (1_000_000_000, 8_000_000, 1000)]);
    let at = |max_bytes, max_rate_bps| {
        validate(
            &s,
            Limits {
                max_bytes,
                max_rate_bps,
                ..Limits::default()
            },
        )
    };
    assert!(at(1_000_000, 8_000_000).is_ok());
    assert!(matches!(
        at(999_999, 8_000_000),
        Err(Refusal::Limit(Limit::Bytes { .. }))
    ));
    assert!(matches!(
        at(1_000_000, 7_999_000),
        Err(Refusal::Limit(Limit::Rate { .. }))
    ));
    let long = Limits {
        max_duration: Duration::from_millis(999),
        ..Limits::default()
    };
    assert!(matches!(
        validate(&s, long),
        Err(Refusal::Limit(Limit::Duration { .. }))
    ));
}

#[test]
fn the_omitted_warm_up_is_the_schedules_first_datagrams() {
    // 1000 B every 1 ms: 250 in the first 250 ms, 251 in 250.5 ms.
    let mut s = spec();
    assert_eq!(s.omit_seq(), 0);
    s.omit_ms = 250;
    assert_eq!(s.omit_seq(), 250);
    s.gap_ps = 999_000_000;
    assert_eq!(s.omit_seq(), 251);
    // Bursts of 2500 B (3 datagrams) every 100 ms: bursts begun in 250 ms.
    s.burst = Some(crate::protocol::proto::BurstSpec {
        size: 2500,
        period_ms: 100,
    });
    assert_eq!(s.omit_seq(), 9);
    s.omit_ms = 300;
    assert_eq!(s.omit_seq(), 9);
    s.omit_ms = 301;
    assert_eq!(s.omit_seq(), 12);
}

#[test]
fn an_omit_must_leave_some_stream_and_not_meet_a_profile() {
    assert!(ok(|s| s.omit_ms = 999).is_ok());
    assert!(ok(|s| s.omit_ms = 1000).is_err());
    assert!(
        ok(|s| {
            s.omit_ms = 10;
            s.profile = Some(
                crate::protocol::udp::profile::Profile::sweep(0, 1_000_000, 1_000_000_000, 1000)
                    .unwrap(),
            );
        })
        .is_err()
    );
}

#[test]
fn a_stream_asked_for_by_rate_is_limited_and_sent_at_that_rate() {
    // 1000 B at 3 Gbit/s: the gap is 2,666,666.6 ps, rounded down on the wire.
    let s = UdpSpec::at_rate(1000, 3_000_000_000, 1000);
    assert_eq!(s.gap_ps, 2_666_666);
    assert_eq!(rate_bps(&s), 3e9);
    assert_eq!(sender_config(&s, None).gap, s.gap());
    assert_eq!(s.gap().count_before(1_000_000_000), 375_000);
    let limits = Limits {
        max_rate_bps: 3_000_000_000,
        ..Limits::default()
    };
    assert!(validate(&s, limits).is_ok());
    let over = UdpSpec::at_rate(1000, 3_000_010_000, 1000);
    assert!(validate(&over, limits).is_err());
    // A spec from an older client, with no rate, goes by its gap.
    let old = UdpSpec {
        rate_bps: None,
        ..s.clone()
    };
    assert!((rate_bps(&old) - 3e9).abs() < 3e9 * 1e-6);
    assert_eq!(
        old.gap(),
        crate::protocol::udp::pace::Gap::from_ps(2_666_666)
    );
}
