//! `netrig load`: latency under load against real limiters. A `tbf` between
//! two namespaces with a deep and a shallow queue (the loaded latency
//! increase lands on the queue delay tbf allows, and the deep queue's RPM
//! is far lower), exact probe accounting through a lossy relay, and no
//! bufferbloat on loopback.

#[path = "common/bin.rs"]
mod bin;
#[path = "common/netns.rs"]
mod netns;
use bin::*;
use netns::{Netns, one_at_a_time, until_one_passes};

use std::process::Stdio;

/// Phase `name` of a load result.
fn phase<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["result"]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == name)
        .unwrap_or_else(|| panic!("no {name} phase: {v}"))
}

/// On loopback nothing queues: the verdict says so, every probe kind ran
/// in every phase, the JSON lists every probe, and the console gives a line
/// a second and the table.
#[test]
fn loopback_has_no_bufferbloat_and_every_probe_is_kept() {
    let _one = one_at_a_time();
    let (_srv, addr) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let stream = dir.path().join("stream.jsonl");
    let (v, out) = run_json(
        &[
            "load",
            &addr.to_string(),
            "--idle",
            "2s",
            "--phase-time",
            "4s",
            "--phases",
            "download,upload",
            "-P",
            "4",
            "--bind-dev",
            "lo",
            "--json-stream",
            stream.to_str().unwrap(),
        ],
        0,
    );
    // The JSON stream: the start, a line a second, the end with the result.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&stream)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["event"], "start");
    let seconds = lines.iter().filter(|l| l["event"] == "second").count();
    assert!((8..=11).contains(&seconds), "{seconds} second lines");
    let end = lines.last().unwrap();
    assert_eq!(
        (&end["event"], &end["result"]["verdict"]),
        (&"end".into(), &v["result"]["verdict"])
    );
    assert_eq!(v["config"]["bind_dev"], "lo");
    let r = &v["result"];
    let verdict = r["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("no bufferbloat"), "{verdict}");
    assert!(out.contains(&format!("Verdict: {verdict}")), "{out}");
    for name in ["idle", "download", "upload"] {
        let p = phase(&v, name);
        assert!(p["udp"]["count"].as_u64().unwrap() >= 15, "{name}: {p}");
        assert!(
            p["tcp_connect"]["count"].as_u64().unwrap() >= 15,
            "{name}: {p}"
        );
        assert!(
            p["tcp_request"]["count"].as_u64().unwrap() >= 15,
            "{name}: {p}"
        );
    }
    for name in ["download", "upload"] {
        let p = phase(&v, name);
        // The load connections' own RTT: the server's end when it sends.
        assert!(
            p["self_rtt"]["count"].as_u64().unwrap() >= 10,
            "{name}: {p}"
        );
        assert!(p["connections"].as_u64().unwrap() >= 1, "{name}: {p}");
        let rpm = &p["responsiveness"];
        assert!(rpm["rpm"].as_f64().unwrap() > 0.0, "{name}: {p}");
        assert!(rpm["loaded_rpm"].as_f64().is_some(), "{name}: {p}");
    }
    assert!(phase(&v, "download")["down_bps"].as_f64().unwrap() > 1e8);
    assert!(phase(&v, "upload")["up_bps"].as_f64().unwrap() > 1e8);
    // Every probe is in the JSON, in time order, for plotting.
    let probes = r["probes"].as_array().unwrap();
    let times: Vec<f64> = probes.iter().map(|p| p["t"].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    let udp = probes.iter().filter(|p| p["kind"] == "udp").count() as u64;
    let counted: u64 = ["idle", "download", "upload"]
        .iter()
        .map(|n| {
            let u = &phase(&v, n)["udp"];
            u["count"].as_u64().unwrap() + u["lost"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(udp, counted);
    // One line a second.
    let live = out.lines().filter(|l| l.contains(" download ")).count();
    assert!(live >= 3, "{out}");
    for bad in [
        vec!["load", "--phase-time", "2s"],
        vec!["load", "--idle", "500ms"],
        vec!["load", "--probe-interval", "5ms"],
        vec!["load", "-P", "0"],
        vec!["load", "--phases", "sideways"],
        vec!["load", "--cport", "5000"],
    ] {
        let out = netrig(&bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
}

/// UDP probes are accounted exactly: through a relay that drops 5% of the
/// datagrams each way, the probes lost on the way up and down are the
/// relay's drops in each direction, and the phases' losses add up to them.
#[test]
fn probe_losses_through_a_lossy_relay_are_exact() {
    let _one = one_at_a_time();
    let (_srv, to) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("relay.csv");
    let (rl, via) = relay(
        to,
        &[
            "--loss",
            "5%",
            "--seed",
            "7",
            "--log",
            log.to_str().unwrap(),
        ],
    );
    let (v, _) = run_json(
        &[
            "load",
            &via.to_string(),
            "--idle",
            "2s",
            "--phase-time",
            "4s",
            "--phases",
            "upload",
            "-P",
            "2",
            "--probe-interval",
            "20ms",
        ],
        0,
    );
    let _ = interrupt(rl);
    let text = std::fs::read_to_string(&log).unwrap();
    let drops = |dir: &str| {
        text.lines()
            .filter(|l| l.contains(",udp,") && l.contains(&format!(",{dir},lost,")))
            .count() as u64
    };
    let r = &v["result"];
    let (up, down) = (drops("up"), drops("down"));
    assert!(up > 5 && down > 5, "{up} {down}");
    assert_eq!(r["udp_lost_up"].as_u64(), Some(up), "{text}");
    assert_eq!(r["udp_lost_down"].as_u64(), Some(down));
    let lost: u64 = ["idle", "upload"]
        .iter()
        .map(|n| phase(&v, n)["udp"]["lost"].as_u64().unwrap())
        .sum();
    assert_eq!(lost, up + down);
}

/// What a deep and a shallow tbf queue do to latency under an upload: the
/// increase lands within 20% (or 3 ms) of the delay tbf allows (its
/// latency plus a burst's time at the rate), and the deep queue's RPM is
/// far lower. Loss-based congestion control (cubic) fills the queue, as
/// the draft's load does; BBR would keep it short.
#[test]
#[cfg_attr(not(netns_root), ignore = "needs root and iproute2 (ip netns, tc)")]
fn a_deep_tbf_queue_shows_as_bufferbloat_and_a_shallow_one_does_not() {
    let _one = one_at_a_time();
    // The two queues each in namespaces of their own, side by side: at
    // 20 Mbit/s the runs hardly load the CPU, and they share no queue.
    // 20 Mbit/s with a 32 KiB burst: a burst drains in 13.1 ms.
    let (deep, shallow) = std::thread::scope(|s| {
        let deep = s.spawn(|| loaded_rpm_behind_tbf('l', 202, "200ms", 213.1));
        let shallow = loaded_rpm_behind_tbf('m', 203, "5ms", 18.1);
        let deep = deep.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        (deep, shallow)
    });
    assert!(
        deep * 4.0 < shallow,
        "deep {deep} RPM, shallow {shallow} RPM"
    );
}

/// An upload through a 20 Mbit/s tbf of `latency` (in a router between
/// two namespaces, `tag` and subnet `net` theirs alone): its latency
/// increase is within 20% (or 3 ms) of `queue_ms`, up to three runs; the
/// passing run's RPM.
fn loaded_rpm_behind_tbf(tag: char, net: u8, latency: &str, queue_ms: f64) -> f64 {
    let ns = Netns::routed(tag, net);
    let bin = env!("CARGO_BIN_EXE_netrig");
    let listen = format!("{}:4795", ns.b_addr());
    let _srv = Proc(
        ns.exec(&ns.b, bin)
            .args(["serve", "--listen", &listen, "-q"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    ns.wait_listening(&ns.b, 4795);
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("load.json");
    let mut rpm = None;
    ns.tbf(&["rate", "20mbit", "burst", "32kb", "latency", latency]);
    until_one_passes(3, || {
        let out = ns
            .exec(&ns.a, bin)
            .args(["load", &listen, "--idle", "2s", "--phase-time", "6s"])
            .args(["--phases", "upload", "-C", "cubic", "-q", "--json"])
            .arg(&js)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
        let p = phase(&v, "upload");
        let inc = p["increase_ms"].as_f64().unwrap();
        let r = p["responsiveness"]["rpm"].as_f64().unwrap();
        let what = format!(
            "tbf latency {latency}: +{inc:.1} ms (queue {queue_ms} ms), {r:.0} RPM, \
             up {:.1} Mbit/s, UDP one-way up p50 {} ms; verdict: {}",
            p["up_bps"].as_f64().unwrap() / 1e6,
            p["udp_up_p50_ms"],
            v["result"]["verdict"]
        );
        eprintln!("{what}");
        if (inc - queue_ms).abs() > (0.2 * queue_ms).max(3.0) {
            return Err(what);
        }
        rpm = Some(r);
        Ok(what)
    });
    rpm.expect("a passing run")
}
