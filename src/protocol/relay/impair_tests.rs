//! Unit tests of `relay::impair` pinning the counts, offsets and departure
//! times the relay reports (and the integration tests compare netrig's
//! loss, duplicate and reorder counts against).

use super::*;

fn forward(a: Action) -> (u64, Option<usize>, bool, bool) {
    match a {
        Action::Forward {
            at_ns,
            corrupt,
            duplicate,
            hold,
        } => (at_ns, corrupt, duplicate, hold),
        a => panic!("{a:?}"),
    }
}

#[test]
fn sensible_specs_are_accepted() {
    assert_eq!(ImpairSpec::default().validate(), Ok(()));
    let edges = ImpairSpec {
        loss: 1.0,
        dup: 0.0,
        reorder: 1.0,
        corrupt: 0.0,
        rate_bps: 1,
        burst: 1,
        ..Default::default()
    };
    assert_eq!(edges.validate(), Ok(()));
    // A burst without a rate is harmless: there is no bucket.
    let burst_only = ImpairSpec {
        burst: 100,
        ..Default::default()
    };
    assert_eq!(burst_only.validate(), Ok(()));
}

#[test]
fn only_delay_jitter_or_shaping_make_traffic_wait() {
    let d = |s: ImpairSpec| s.delays();
    assert!(!d(ImpairSpec::default()));
    assert!(d(ImpairSpec {
        delay_ns: 1,
        ..Default::default()
    }));
    assert!(d(ImpairSpec {
        jitter_ns: 1,
        ..Default::default()
    }));
    assert!(d(ImpairSpec {
        rate_bps: 1,
        burst: 1,
        shape: true,
        ..Default::default()
    }));
    // Policing drops, it never holds anything back.
    assert!(!d(ImpairSpec {
        rate_bps: 1,
        burst: 1,
        ..Default::default()
    }));
    assert!(!d(ImpairSpec {
        shape: true,
        ..Default::default()
    }));
}

#[test]
fn seen_counts_the_datagrams_decided() {
    let spec = ImpairSpec {
        drop_every: 2,
        ..Default::default()
    };
    let mut im = DatagramImpairer::new(spec, 0, 0);
    assert_eq!(im.seen(), 0);
    for _ in 0..5 {
        im.decide(100, 0, 0);
    }
    // Dropped ones count too: the relay logs each by this index.
    assert_eq!(im.seen(), 5);
}

#[test]
fn every_nth_reorder_holds_exactly_those_datagrams() {
    let spec = ImpairSpec {
        reorder_every: 5,
        ..Default::default()
    };
    let mut im = DatagramImpairer::new(spec, 9, 0);
    let held: Vec<u64> = (0..1000u64)
        .filter(|_| forward(im.decide(100, 32, 0)).3)
        .collect();
    assert_eq!(held, (0..200).map(|k| 5 * k + 4).collect::<Vec<_>>());
}

#[test]
fn random_reorder_and_duplication_are_near_their_rates() {
    for (reorder, dup) in [(0.1, 0.0), (0.0, 0.1)] {
        let spec = ImpairSpec {
            reorder,
            dup,
            ..Default::default()
        };
        let mut im = DatagramImpairer::new(spec, 4, 0);
        let (mut held, mut dups) = (0, 0);
        for _ in 0..20_000 {
            let (_, _, d, h) = forward(im.decide(100, 32, 0));
            held += h as u32;
            dups += d as u32;
        }
        let (want, other) = if reorder > 0.0 {
            (held, dups)
        } else {
            (dups, held)
        };
        assert!((1800..2200).contains(&want), "{reorder} {dup}: {want}");
        assert_eq!(other, 0);
    }
}

#[test]
fn corruption_hits_every_payload_byte_and_never_the_header() {
    let spec = ImpairSpec {
        corrupt_every: 1,
        ..Default::default()
    };
    let mut im = DatagramImpairer::new(spec, 5, 0);
    let mut hit = [0u32; 40];
    for _ in 0..2000 {
        let c = forward(im.decide(40, 32, 0)).1.expect("every datagram");
        hit[c] += 1;
    }
    assert!(hit[..32].iter().all(|&n| n == 0), "{hit:?}");
    assert!(hit[32..].iter().all(|&n| n > 100), "{hit:?}");
    // A datagram that is all header is forwarded untouched.
    for _ in 0..10 {
        assert_eq!(forward(im.decide(32, 32, 0)), (0, None, false, false));
    }
}

#[test]
fn a_fixed_delay_does_not_change_which_datagrams_a_seed_impairs() {
    let base = ImpairSpec {
        loss: 0.3,
        dup: 0.2,
        ..Default::default()
    };
    let delayed = ImpairSpec {
        delay_ns: 5_000_000,
        ..base.clone()
    };
    let fates = |spec: ImpairSpec| {
        let mut im = DatagramImpairer::new(spec, 11, 0);
        (0..2000u64)
            .map(|i| match im.decide(100, 0, i * 1000) {
                Action::Forward {
                    at_ns, duplicate, ..
                } => Some((at_ns - i * 1000, duplicate)),
                Action::Drop(_) => None,
            })
            .collect::<Vec<_>>()
    };
    let (a, b) = (fates(base), fates(delayed));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        // Same fate; the delayed one leaves exactly 5 ms later.
        assert_eq!(x.map(|(t, d)| (t + 5_000_000, d)), *y);
    }
}

#[test]
fn stream_departures_add_the_delay_and_keep_order() {
    let spec = ImpairSpec {
        delay_ns: 10_000_000,
        ..Default::default()
    };
    let mut im = StreamImpairer::new(spec, 0);
    assert_eq!(im.departure(0), 10_000_000);
    assert_eq!(im.departure(5_000_000), 15_000_000);
    let spec = ImpairSpec {
        delay_ns: 10_000_000,
        jitter_ns: 5_000_000,
        ..Default::default()
    };
    let mut im = StreamImpairer::new(spec, 2);
    let mut last = 0;
    let mut spread = (u64::MAX, 0);
    for i in 0..500u64 {
        let now = i * 1_000_000;
        let at = im.departure(now);
        assert!(at >= last && at >= now + 5_000_000 && at <= now + 15_000_000);
        spread = (spread.0.min(at - now), spread.1.max(at - now));
        last = at;
    }
    assert!(spread.1 - spread.0 > 5_000_000, "{spread:?}");
}

#[test]
fn stream_corruption_per_byte_is_near_its_rate() {
    let spec = ImpairSpec {
        corrupt: 0.01,
        ..Default::default()
    };
    let mut im = StreamImpairer::new(spec, 6);
    let mut data = vec![0u8; 1_000_000];
    let e = im.apply(&mut data);
    let n = e.corrupted.len();
    assert!((9_500..10_500).contains(&n), "{n}");
    assert_eq!(data.iter().filter(|&&b| b == 1).count(), n);
    // Probability 1: every byte.
    let spec = ImpairSpec {
        corrupt: 1.0,
        ..Default::default()
    };
    let mut data = vec![0u8; 100];
    let e = StreamImpairer::new(spec, 6).apply(&mut data);
    assert_eq!(e.corrupted, (0..100).collect::<Vec<u64>>());
}

#[test]
fn stream_corruption_every_byte_flips_one_bit_of_each() {
    let spec = ImpairSpec {
        corrupt_every: 1,
        ..Default::default()
    };
    let mut im = StreamImpairer::new(spec, 0);
    let mut data = vec![0xFFu8; 10];
    let e = im.apply(&mut data);
    assert_eq!(e.corrupted, (0..10).collect::<Vec<u64>>());
    assert_eq!(data, vec![0xFEu8; 10]);
}

#[test]
fn a_corrupted_offset_at_a_chunk_boundary_goes_to_the_next_chunk() {
    let spec = ImpairSpec {
        corrupt_every: 1000,
        ..Default::default()
    };
    let mut im = StreamImpairer::new(spec, 0);
    let mut a = vec![0u8; 999];
    assert_eq!(im.apply(&mut a).corrupted, Vec::<u64>::new());
    assert!(a.iter().all(|&b| b == 0));
    let mut b = vec![0u8; 2];
    assert_eq!(im.apply(&mut b).corrupted, vec![999]);
    assert_eq!(b, vec![1, 0]);
    assert_eq!(im.offset(), 1001);
}

#[test]
fn a_reset_cuts_at_exactly_reset_after_bytes() {
    let spec = ImpairSpec {
        reset_after: Some(2500),
        ..Default::default()
    };
    // Cut inside the first chunk.
    let mut im = StreamImpairer::new(spec.clone(), 0);
    assert_eq!(im.offset(), 0);
    let e = im.apply(&mut [0u8; 3000]);
    assert_eq!(e.cut, Some(2500));
    assert_eq!(im.offset(), 2500);
    // A stream of exactly 2500 bytes passes whole; the cut comes with the
    // next byte, of which none is forwarded.
    let mut im = StreamImpairer::new(spec, 0);
    assert_eq!(im.apply(&mut [0u8; 1000]).cut, None);
    assert_eq!(im.apply(&mut [0u8; 1500]).cut, None);
    assert_eq!(im.offset(), 2500);
    assert_eq!(im.apply(&mut [0u8; 10]).cut, Some(0));
    assert_eq!(im.offset(), 2500);
}

#[test]
fn policing_drops_do_not_change_which_datagrams_a_seed_loses_or_doubles() {
    let base = ImpairSpec {
        loss: 0.3,
        dup: 0.2,
        ..Default::default()
    };
    // 1 byte/µs with 1000-byte datagrams every 500 µs: about half policed.
    let policed = ImpairSpec {
        rate_bps: 8_000_000,
        burst: 1000,
        ..base.clone()
    };
    let run = |spec: ImpairSpec| {
        let mut im = DatagramImpairer::new(spec, 13, 0);
        (0..2000u64)
            .map(|i| im.decide(1000, 0, i * 500_000))
            .collect::<Vec<_>>()
    };
    let (a, b) = (run(base), run(policed));
    let mut compared = 0;
    for (x, y) in a.iter().zip(&b) {
        if *y != Action::Drop(DropCause::Police) {
            assert_eq!(x, y);
            compared += 1;
        }
    }
    assert!((900..1100).contains(&compared), "{compared}");
}
