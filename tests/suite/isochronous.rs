//! iperf2's `--isochronous=fps:mean,stdev`: frames of log-normal sizes,
//! each split into `--length` datagrams, judged whole by the receiver,
//! which derives every frame's size from the seed in the spec.

use crate::bin;
use bin::*;

use netrig::protocol::udp::iso::{FrameBytes, FrameIndex, Varying};
use std::collections::BTreeSet;

/// The frame sizes a run used, from its echoed spec.
fn sizes(v: &serde_json::Value) -> (FrameBytes, u32) {
    let spec = &v["config"]["spec"];
    let m = &spec["media"];
    let bytes = FrameBytes::Varying {
        mean: m["frame_bytes"].as_u64().unwrap(),
        spread: Varying {
            stdev_bytes: m["varying"]["stdev_bytes"].as_u64().unwrap(),
            seed: m["varying"]["seed"].as_u64().unwrap(),
        },
    };
    (bytes, spec["size"].as_u64().unwrap() as u32)
}

/// What the sender puts on the wire for `frames` frames: datagrams and
/// bytes (a last datagram shorter than a header is sent as a header).
fn wire(bytes: FrameBytes, size: u32, frames: u64) -> (u64, u64) {
    (0..frames).fold((0, 0), |(n, b), k| {
        let d = bytes.datagrams(k, size);
        let rest = bytes.bytes(k) - (d - 1) * u64::from(size);
        (
            n + d,
            b + (d - 1) * u64::from(size) + rest.clamp(32, u64::from(size)),
        )
    })
}

/// Through a relay that drops every 23rd datagram and logs each one's
/// number, in either direction: the sender sends exactly the datagrams and
/// bytes the frame sizes imply (so no datagram is over `--length`), sizes
/// vary as asked, and exactly the frames holding a dropped datagram are
/// dropped while every other frame is completed.
#[test]
fn varying_frames_are_split_sent_and_judged_whole() {
    let (_srv, to) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    for reverse in [false, true] {
        let log = dir.path().join(format!("events-{reverse}.csv"));
        let (rl, via) = relay(
            to,
            &[
                "--drop-every",
                "23",
                "--dir",
                if reverse { "down" } else { "up" },
                "--log",
                log.to_str().unwrap(),
            ],
        );
        // 50 frames a second, 4 Mbit/s mean (10,000 B), 1 Mbit/s spread
        // (2,500 B), as 1200 B datagrams.
        let via = via.to_string();
        let mut args = vec![
            "udp",
            &via,
            "--isochronous=50:4m,1m",
            "-l",
            "1200",
            "-t",
            "1s",
        ];
        if reverse {
            args.push("-R");
        }
        let (v, out) = run_json(&args, 0);
        let _ = interrupt(rl);
        assert!(out.contains("isochronous, 50 frames a second"), "{out}");
        let (bytes, size) = sizes(&v);
        assert_eq!(size, 1200);
        assert_eq!(
            bytes,
            FrameBytes::Varying {
                mean: 10_000,
                spread: Varying {
                    stdev_bytes: 2_500,
                    seed: v["config"]["spec"]["media"]["varying"]["seed"]
                        .as_u64()
                        .unwrap()
                }
            }
        );
        let counts: BTreeSet<u64> = (0..50).map(|k| bytes.datagrams(k, size)).collect();
        assert!(counts.len() >= 3, "frame sizes do not vary: {counts:?}");
        let s = &v["result"]["sender"];
        let (datagrams, sent_bytes) = wire(bytes, size, 50);
        assert_eq!(s["packets"].as_u64().unwrap(), datagrams, "{s}");
        assert_eq!(s["bytes"].as_u64().unwrap(), sent_bytes, "{s}");
        let drops: BTreeSet<u64> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .filter(|l| l.contains(",lost,"))
            .filter_map(|l| l.split(',').nth(6)?.parse().ok())
            .collect();
        assert!(drops.len() >= 10, "{drops:?}");
        let mut index = FrameIndex::new(bytes, size);
        let hit: BTreeSet<u64> = drops.iter().map(|&s| index.frame_of(s)).collect();
        let t = &v["result"]["totals"];
        let f = &t["frames"];
        assert_eq!(t["lost"].as_u64().unwrap(), drops.len() as u64, "{t}");
        assert_eq!(f["dropped"].as_u64().unwrap(), hit.len() as u64, "{t}");
        assert_eq!(
            f["completed"].as_u64().unwrap(),
            50 - hit.len() as u64,
            "{t}"
        );
        assert_eq!(
            (f["repeated"].as_u64(), f["errors"].as_u64()),
            (Some(0), Some(0))
        );
    }
}

/// The defaults are iperf2's (60 frames a second, 20 Mbit/s, no spread),
/// `p` gives datagrams per frame, and malformed values are usage errors.
#[test]
fn isochronous_spellings_and_mistakes() {
    let (_srv, to) = serve(&["-q"]);
    let a = to.to_string();
    let (v, _) = run_json(
        &["udp", &a, "--isochronous", "-t", "200ms", "-l", "1400"],
        0,
    );
    let m = &v["config"]["spec"]["media"];
    assert_eq!(m["fps"], 60);
    assert_eq!(m["frame_bytes"], 20_000_000 / 8 / 60);
    assert_eq!(m["varying"]["stdev_bytes"], 0);
    let (v, _) = run_json(
        &[
            "udp",
            &a,
            "--isochronous=2:25p,5p",
            "-t",
            "1s",
            "-l",
            "1000",
        ],
        0,
    );
    let m = &v["config"]["spec"]["media"];
    assert_eq!(
        (m["fps"].as_u64(), m["frame_bytes"].as_u64()),
        (Some(2), Some(25_000))
    );
    assert_eq!(m["varying"]["stdev_bytes"], 5_000);
    assert_eq!(v["result"]["totals"]["frames"]["completed"], 2);
    // Streams of one test (-P, --bidir) each draw their own sizes, and each
    // judges its own frames.
    let (v, _) = run_json(
        &[
            "udp",
            &a,
            "--isochronous=30:2m,1m",
            "-P",
            "2",
            "--bidir",
            "-t",
            "1s",
            "-l",
            "1200",
        ],
        0,
    );
    let streams = v["result"]["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 4);
    let packets: BTreeSet<u64> = streams
        .iter()
        .map(|s| {
            let r = &s["report"];
            assert_eq!(r["totals"]["frames"]["completed"], 30, "{s}");
            r["sender"]["packets"].as_u64().unwrap()
        })
        .collect();
    assert!(
        packets.len() > 1,
        "every stream drew the same sizes: {packets:?}"
    );
    for bad in [
        "--isochronous=60",
        "--isochronous=0:20m,0",
        "--isochronous=60:0,0",
        "--isochronous=60:x,0",
        "--isochronous=60:2.5p,0",
    ] {
        let out = netrig(&["udp", &a, bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
    let out = netrig(&["udp", &a, "--isochronous", "--media", "-b", "1M"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
