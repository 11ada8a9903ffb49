//! Unit tests of a connection's rate limit: one period's bytes per period,
//! the time a limited pair takes, a rate range giving each connection its
//! own rate that both ends keep, and how rates round and are checked.

use super::*;

#[test]
fn a_rate_limit_allows_one_periods_bytes_per_period() {
    // 8 Mbit/s in 100 ms periods: 100,000 bytes each.
    let mut s = spec(IoPattern::Push, 1_000_000);
    s.rate = Some(RateLimit {
        bps: 8_000_000,
        period_ms: 100,
        bps_max: None,
    });
    let t0 = Instant::now();
    let mut c = Conn::new(&s, Uuid::nil(), Role::Client, 64 * 1024, t0);
    let at = |ms: u64| Now {
        mono: t0 + Duration::from_millis(ms),
        real_ns: 0,
    };
    // Writes in one period stop at its allowance, never more.
    let mut sent = 0;
    while let Transmit::Bytes(b) = c.transmit(at(0)) {
        let n = b.len();
        c.on_written(n, at(0));
        sent += n;
    }
    assert_eq!(sent, 100_000);
    assert_eq!(
        c.transmit(at(0)),
        Transmit::WaitUntil(t0 + Duration::from_millis(100))
    );
    assert_eq!(
        c.transmit(at(99)),
        Transmit::WaitUntil(t0 + Duration::from_millis(100))
    );
    // A late wake-up may catch up to the cumulative allowance (the average
    // stays the rate), but no further.
    while let Transmit::Bytes(b) = c.transmit(at(350)) {
        let n = b.len();
        c.on_written(n, at(350));
        sent += n;
    }
    assert_eq!(sent, 400_000);
    assert_eq!(
        c.transmit(at(350)),
        Transmit::WaitUntil(t0 + Duration::from_millis(400))
    );
}

#[test]
fn a_rate_limited_pair_takes_the_time_the_rate_implies_and_agrees() {
    // 80 kbit/s in 10 ms periods: 100 bytes each; 10,000 bytes pulled
    // (the server sends) take 100 periods, the last one begun at 990 ms.
    let mut s = spec(IoPattern::Pull, 10_000);
    s.rate = Some(RateLimit {
        bps: 80_000,
        period_ms: 10,
        bps_max: None,
    });
    let mut p = Pair::new(&s, 4096, 8192);
    p.run();
    let (rc, client, _) = p.result(0);
    assert_eq!(rc.kind, ResultKind::Success, "{rc:?}");
    assert_eq!(client.received, 10_000);
    let took = p.now.duration_since(p.t0);
    assert!(
        took >= Duration::from_millis(990) && took < Duration::from_millis(1010),
        "{took:?}"
    );
}

#[test]
fn a_rate_range_gives_each_connection_its_own_rate_both_ends_keep() {
    let range = RateLimit {
        bps: 1_000_000,
        period_ms: 10,
        bps_max: Some(1_000_999),
    };
    let rates: Vec<u64> = (0..200u128)
        .map(|i| Uuid::from_u128(i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)))
        .map(|id| range.for_connection(id))
        .inspect(|r| assert_eq!((r.period_ms, r.bps_max), (10, None)))
        .map(|r| r.bps)
        .collect();
    assert!(rates.iter().all(|b| (1_000_000..=1_000_999).contains(b)));
    let distinct: std::collections::BTreeSet<_> = rates.iter().collect();
    assert!(distinct.len() > 100, "{}", distinct.len());
    // The ends are reachable, from the ID's upper half.
    assert_eq!(range.for_connection(Uuid::from_u128(0)).bps, 1_000_000);
    assert_eq!(
        range.for_connection(Uuid::from_u128(999 << 64)).bps,
        1_000_999
    );
    // The rate comes from the upper half alone: ID 999 (the top of a
    // 1000-wide size range) takes the bottom rate.
    assert_eq!(range.for_connection(Uuid::from_u128(999)).bps, 1_000_000);
    // No range, or one of one rate: that rate.
    for hi in [None, Some(1_000_000)] {
        let one = RateLimit {
            bps_max: hi,
            ..range
        };
        assert_eq!(one.for_connection(Uuid::from_u128(7 << 64)).bps, 1_000_000);
    }
    // In a pair, the sender (the server, pulling) keeps its connection's
    // rate: 100 bytes per 10 ms period at the range's floor, 200 at its top.
    let mut s = spec(IoPattern::Pull, 10_000);
    let id = Uuid::from_u128(0x1234_5678_9abc_def0_0fed_cba9_8765_4321);
    for (lo, hi) in [(80_000, 80_000), (80_000, 160_000)] {
        s.rate = Some(RateLimit {
            bps: lo,
            period_ms: 10,
            bps_max: Some(hi),
        });
        let bps = s.rate.unwrap().for_connection(id).bps;
        assert!((lo..=hi).contains(&bps));
        let mut p = Pair::new(&s, 4096, 8192);
        p.run();
        let (rc, client, _) = p.result(0);
        assert_eq!((rc.kind, client.received), (ResultKind::Success, 10_000));
        let per_period = bps * 10 / 8000;
        let periods = 10_000u64.div_ceil(per_period);
        let took = p.now.duration_since(p.t0).as_millis() as u64;
        assert!(
            took >= (periods - 1) * 10 && took < periods * 10 + 10,
            "{bps} bit/s: {took} ms"
        );
    }
}

#[test]
fn rate_limits_round_and_validate() {
    let r = |bps, period_ms| RateLimit {
        bps,
        period_ms,
        bps_max: None,
    };
    assert_eq!(r(8_000_000, 100).bytes_per_period(), 100_000);
    assert_eq!(r(1, 1).bytes_per_period(), 1);
    assert_eq!(r(u64::MAX, 60_000).bytes_per_period(), u64::MAX);
    assert!(r(1, 1).is_valid());
    assert!(r(1, 60_000).is_valid());
    assert!(!r(0, 100).is_valid());
    assert!(!r(1, 0).is_valid());
    assert!(!r(1, 60_001).is_valid());
    let range = |lo, hi| RateLimit {
        bps_max: Some(hi),
        ..r(lo, 100)
    };
    assert!(range(5, 5).is_valid());
    assert!(range(5, 6).is_valid());
    assert!(!range(6, 5).is_valid());
}
