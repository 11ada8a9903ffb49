//! Rate profiles and congestion analysis against real limiters: a `tbf`
//! shaper between two network namespaces, and a user-space policing relay.

#[path = "common/bin.rs"]
mod bin;
mod common;
#[path = "common/netns.rs"]
mod netns;
#[path = "common/udp_relay.rs"]
mod udp_relay;
use netns::{Netns, one_at_a_time, until_one_passes};

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_netrig");

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// What a sweep result must hold whatever the timing: `intervals` samples of
/// the profile in the bins, interval counts summing to the totals, and the
/// sender's count as the receiver's `sent`.
fn counts_add_up(r: &serde_json::Value, intervals: u64) {
    let binned: u64 = r["bins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["intervals"].as_u64().unwrap())
        .sum();
    assert_eq!(binned, intervals, "bins: {}", r["bins"]);
    let per_interval: u64 = r["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["packets"].as_u64().unwrap())
        .sum();
    let t = &r["totals"];
    assert_eq!(per_interval, t["packets"].as_u64().unwrap(), "{t}");
    assert_eq!(t["sent"], r["sender"]["packets"], "{t}");
}

#[test]
#[cfg_attr(not(netns_root), ignore = "needs root and iproute2 (ip netns, tc)")]
fn sweep_finds_a_tbf_shaper_between_namespaces() {
    let _one = one_at_a_time();
    let ns = Netns::new('s', 201);
    // The shaper under test: 50 Mbit/s with a 50 ms queue on A's egress.
    ns.tbf(&["rate", "50mbit", "burst", "64kb", "latency", "50ms"]);
    let _srv = Proc(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.b,
                BIN,
                "serve",
                "--listen",
                "169.254.201.2:4794",
                "-v",
                "0",
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    ns.wait_listening(&ns.b, 4794);
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("sweep.json");
    until_one_passes(3, || {
        let t0 = Instant::now();
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.a,
                BIN,
                "sweep",
                "169.254.201.2",
                "--to",
                "100M",
                "-d",
                "6s",
                "--interval",
                "250ms",
                "--size",
                "1000",
                "-v",
                "0",
                "--json",
                js.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(30));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc = json(&js);
        counts_add_up(&doc["result"], 24);
        let a = &doc["result"]["analysis"];
        // The verdict holds on every attempt; only the rate's accuracy is timing.
        assert_eq!(a["limiter"], "shaping", "{a}");
        let c = a["congestion_bps"]
            .as_f64()
            .unwrap_or_else(|| panic!("no congestion point: {a}"));
        // tbf counts Ethernet+IP+UDP headers: 50 Mbit/s of 1042-byte frames is 48 Mbit/s of payload.
        if (c / 50e6 - 1.0).abs() >= 0.10 {
            return Err(format!("congestion at {c} bit/s, shaper at 50 Mbit/s: {a}"));
        }
        Ok(a.to_string())
    });
}

#[test]
fn sweep_through_a_policer_estimates_its_burst() {
    let _one = one_at_a_time();
    let srv = common::TestServer::start();
    // Eq. 1 comes out low by TRf x the time the sender stalls near t1 (the
    // bucket is full then, so the tokens it would have spent are wasted): ~125 kB
    // for a 100 ms stall at 10 Mbit/s. A 1 MB bucket keeps that within bounds on a
    // busy host.
    let burst = 1_000_000u64;
    until_one_passes(5, || {
        let relay = udp_relay::UdpRelay::start(
            srv.addr,
            udp_relay::Impair {
                police: Some((10_000_000, burst)),
                ..Default::default()
            },
            true,
        );
        let target = relay.addr.to_string();
        let (doc, _) = bin::run_json(
            &[
                "sweep",
                &target,
                "--to",
                "30M",
                "-d",
                "4s",
                "--interval",
                "100ms",
                "--size",
                "500",
                "-v",
                "0",
            ],
            0,
        );
        counts_add_up(&doc["result"], 40);
        // Every datagram the policer dropped is lost (the kernel may lose more).
        let (seen, dropped, ..) = relay.get();
        let t = &doc["result"]["totals"];
        assert!(
            t["lost"].as_u64().unwrap() >= dropped,
            "{dropped} dropped: {t}"
        );
        assert!(seen <= t["sent"].as_u64().unwrap(), "relay saw {seen}: {t}");
        if dropped <= 100 {
            // A starved sender may never offer much over the policer's rate.
            return Err(format!("the relay hardly dropped ({dropped}): {t}"));
        }
        let a = &doc["result"]["analysis"];
        // Unlike tbf's, this policer is a user-space relay: when this shared
        // host starves it, its own scheduling delay looks like a queue, so the
        // verdict here is timing too (the counts above are not).
        if a["limiter"] != "policing" {
            return Err(format!("classified {}: {a}", a["limiter"]));
        }
        let c = a["congestion_bps"].as_f64().unwrap_or(0.0);
        if (c / 10e6 - 1.0).abs() >= 0.10 {
            return Err(format!("policer at 10 Mbit/s, found {c}: {a}"));
        }
        let bc = a["burst_bytes"]
            .as_f64()
            .ok_or(format!("no burst estimate: {a}"))?;
        if (bc / burst as f64 - 1.0).abs() >= 0.35 {
            return Err(format!("configured burst {burst} B, estimated {bc}: {a}"));
        }
        Ok(a.to_string())
    });
}
