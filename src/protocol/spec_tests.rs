//! Unit tests of `spec`: a TCP spec's `check` names each fault, media frames
//! and warm-ups count in whole datagrams, transfer ranges and durations round
//! as the wire documents, and the transports keep their wire names.

use super::*;

#[test]
fn a_tcp_spec_either_end_could_run_passes_and_each_fault_is_named() {
    use IoPattern::{Duplex, Pull, Push, Pushpull};
    let ok = TcpSpec::plain(Push, 1, 0, 0);
    assert_eq!(ok.check(), Ok(()));
    let with = |f: &dyn Fn(&mut TcpSpec)| {
        let mut t = ok.clone();
        f(&mut t);
        t.check()
    };
    assert_eq!(with(&|t| t.transfer = 0), Err(TcpSpecError::ZeroTransfer));
    assert_eq!(with(&|t| t.transfer_max = Some(1)), Ok(()));
    assert_eq!(
        with(&|t| {
            t.transfer = 2;
            t.transfer_max = Some(1)
        }),
        Err(TcpSpecError::TransferRange)
    );
    let pp = |push, pull| TcpSpec::plain(Pushpull, 1, push, pull).check();
    assert_eq!(pp(1, 1), Ok(()));
    assert_eq!(pp(0, 1), Err(TcpSpecError::PushPullZero));
    assert_eq!(pp(1, 0), Err(TcpSpecError::PushPullZero));
    assert_eq!(TcpSpec::plain(Duplex, 1, 0, 0).check(), Ok(()));
    let burst = |pattern, size, period_ms| {
        let mut t = TcpSpec::plain(pattern, 1, 1, 1);
        t.burst = Some(BurstSpec { size, period_ms });
        t.check()
    };
    assert_eq!(burst(Push, 1, 1), Ok(()));
    assert_eq!(burst(Pull, 1, 1), Ok(()));
    assert_eq!(burst(Duplex, 1, 1), Err(TcpSpecError::BurstPattern));
    assert_eq!(burst(Pushpull, 1, 1), Err(TcpSpecError::BurstPattern));
    assert_eq!(burst(Push, 0, 1), Err(TcpSpecError::BurstZero));
    assert_eq!(burst(Push, 1, 0), Err(TcpSpecError::BurstZero));
    let rate = |bps, period_ms| {
        with(&|t| {
            t.rate = Some(RateLimit {
                bps,
                period_ms,
                bps_max: None,
            })
        })
    };
    assert_eq!(rate(1, 1), Ok(()));
    assert_eq!(rate(0, 1), Err(TcpSpecError::RateLimit));
    assert_eq!(rate(1, 0), Err(TcpSpecError::RateLimit));
    assert!(matches!(
        with(&|t| t.sock.mss = Some(1)),
        Err(TcpSpecError::Sock(_))
    ));
}

#[test]
fn a_media_frame_is_its_datagrams_and_its_slot() {
    let m = MediaSpec {
        fps: 60,
        buffer_depth_ms: 0,
        frame_bytes: 52_083,
        varying: None,
    };
    assert_eq!(m.datagrams_per_frame(1400), 38);
    assert_eq!(m.datagrams_per_frame(52_083), 1);
    assert_eq!(m.frame_ns(), 16_666_666);
    let whole = MediaSpec {
        frame_bytes: 0,
        ..m
    };
    assert_eq!(whole.datagrams_per_frame(1400), 1);
}

#[test]
fn a_media_warm_up_is_whole_frames_of_datagrams() {
    let s = UdpSpec {
        reverse: true,
        size: 1400,
        gap_ps: 1_000_000_000_000 / 50,
        rate_bps: None,
        duration_ms: 2000,
        pacing: crate::protocol::udp::pace::Pacing::Sleep,
        catch_up: false,
        verify: true,
        interval_ms: 1000,
        hist_bin_ns: 1000,
        hist_bins: 10,
        offset_comp_ns: 0,
        media: Some(MediaSpec {
            fps: 50,
            buffer_depth_ms: 0,
            frame_bytes: 10_000,
            varying: None,
        }),
        profile: None,
        precompute: false,
        burst: None,
        auth_datagrams: false,
        sock: Default::default(),
        omit_ms: 110,
        group: None,
    };
    // Frames at 0, 20, ..., 100 ms begin in 110 ms: 6 frames of 8.
    assert_eq!(s.omit_seq(), 48);
    // Without frame splitting, a datagram per 20 ms slot.
    let whole = UdpSpec {
        media: s.media.map(|m| MediaSpec {
            frame_bytes: 0,
            ..m
        }),
        ..s.clone()
    };
    assert_eq!(whole.omit_seq(), 6);
    // Varying frames: the warm-up ends where the 7th frame begins.
    let spread = crate::protocol::udp::iso::Varying {
        stdev_bytes: 3000,
        seed: 4,
    };
    let varying = UdpSpec {
        media: s.media.map(|m| MediaSpec {
            varying: Some(spread),
            ..m
        }),
        ..s.clone()
    };
    let bytes = crate::protocol::udp::iso::FrameBytes::Varying {
        mean: 10_000,
        spread,
    };
    let first6: u64 = (0..6).map(|k| bytes.datagrams(k, 1400)).sum();
    assert_ne!(first6, 48);
    assert_eq!(varying.omit_seq(), first6);
    // Left out of the wire form when zero, there when not.
    let wire = serde_json::to_value(&s).unwrap();
    assert_eq!(wire["omit_ms"], 110);
    let wire = serde_json::to_value(UdpSpec { omit_ms: 0, ..s }).unwrap();
    assert!(wire.get("omit_ms").is_none(), "{wire}");
}

#[test]
fn a_transfer_range_below_its_floor_is_the_floor() {
    let t = TcpSpec {
        pattern: IoPattern::Push,
        transfer: 1000,
        push_bytes: 0,
        pull_bytes: 0,
        verify: VerifyLevel::Data,
        connections: 1,
        burst: None,
        time_bound_ms: 0,
        sock: Default::default(),
        rate: None,
        transfer_max: Some(10),
        server_interval_ms: 0,
        duration_ms: 0,
    };
    assert_eq!(t.transfer_of(uuid::Uuid::from_u128(12_345)), 1000);
    assert_eq!(t.transfer_hi(), 1000);
}

#[test]
fn a_requests_duration_is_whole_ms_rounded_up_and_never_zero() {
    use std::time::Duration;
    assert_eq!(duration_ms(Duration::from_secs(20)), 20_000);
    assert_eq!(duration_ms(Duration::from_micros(5_000_001)), 5_001);
    assert_eq!(duration_ms(Duration::from_nanos(1)), 1);
    assert_eq!(duration_ms(Duration::ZERO), 1);
    assert_eq!(duration_ms(Duration::MAX), u64::MAX);
    let ms = Duration::from_millis(1);
    // Ten requests 500 ms apart: the last leaves at 4.5 s.
    assert_eq!(schedule_ms(Some(500 * ms), 10), 4_500);
    assert_eq!(schedule_ms(Some(Duration::from_micros(1500)), 3), 3);
    assert_eq!(schedule_ms(Some(Duration::from_micros(1500)), 2), 2);
    assert_eq!(schedule_ms(Some(Duration::from_nanos(1)), 2), 1);
    assert_eq!(schedule_ms(Some(ms), 1), 0);
    assert_eq!(schedule_ms(Some(ms), 0), 0);
    assert_eq!(schedule_ms(Some(Duration::ZERO), 100), 0);
    assert_eq!(schedule_ms(None, 1000), 0);
    assert_eq!(schedule_ms(Some(Duration::MAX), u64::MAX), u64::MAX);
}

#[test]
fn rr_transport_names_are_the_wire_names() {
    for p in [RrProto::Tcp, RrProto::Udp, RrProto::SctpSeqpacket] {
        let wire = serde_json::to_string(&p).unwrap();
        assert_eq!(wire, format!("\"{}\"", p.name()));
    }
}
