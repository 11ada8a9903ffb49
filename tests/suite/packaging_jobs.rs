//! The Kubernetes load Job's contract, emulated on one machine: "nodes" are
//! network namespaces on one bridge; the server runs as the Deployment
//! says; each client runs the Job's own arguments (read from
//! deploy/kubernetes/jobs/load/job.yaml) with `$(VAR)` expanded as the
//! kubelet does, from the environment Kubernetes gives a pod of an Indexed
//! Job (JOB_COMPLETION_INDEX, the start time, the key), and the Service's
//! name resolving to the server's address (`ip netns exec` mounts
//! /etc/netns/NS/hosts over /etc/hosts). All clients wait for the one
//! start time and each writes its JSON, named by its index, to stdout.
//! The results are then merged as the README says (`netrig merge`),
//! and the merge checked against its parts: totals are the sums, and the
//! percentiles are those of one histogram built from all the inputs'.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bin;
use crate::fabric;
use bin::*;
use fabric::Fabric;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const CLIENTS: usize = 8;

/// The items of the YAML list under `key:` (one item a line, as the
/// manifests write them), unquoted.
fn yaml_list(text: &str, key: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != key).skip(1);
    let mut out = Vec::new();
    for l in lines.by_ref() {
        let Some(item) = l.trim().strip_prefix("- ") else {
            break;
        };
        out.push(item.trim_matches('"').to_string());
    }
    out
}

/// The kubelet's `$(VAR)` expansion of a container's args.
fn expand(arg: &str, env: &BTreeMap<&str, String>) -> String {
    let mut s = arg.to_string();
    for (k, v) in env {
        s = s.replace(&format!("$({k})"), v);
    }
    assert!(
        !s.contains("$("),
        "{arg}: a variable the pod would not have"
    );
    s
}

#[test]
#[cfg_attr(not(netns_root), ignore = "needs root and iproute2 (ip netns)")]
fn the_indexed_job_contract_on_namespaces() {
    let job = std::fs::read_to_string(Path::new(ROOT).join("deploy/kubernetes/jobs/load/job.yaml"))
        .unwrap();
    let deployment = std::fs::read_to_string(
        Path::new(ROOT).join("deploy/kubernetes/base/server-deployment.yaml"),
    )
    .unwrap();
    let server_args: Vec<String> = deployment
        .lines()
        .find_map(|l| l.trim().strip_prefix("args: "))
        .map(|a| serde_json::from_str(a).expect("args as a JSON list"))
        .expect("the Deployment's args");
    let client_args = yaml_list(&job, "args:");
    assert!(
        client_args.contains(&"--txstart-time".to_string()),
        "{client_args:?}"
    );
    let completions: usize = job
        .lines()
        .find_map(|l| l.trim().strip_prefix("completions: "))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert_eq!(
        completions, CLIENTS,
        "the emulation runs as many clients as the Job"
    );

    let fabric = Fabric::new('J', 77, CLIENTS + 1);
    let server_ns = fabric.nodes[0].clone();
    let key = format!("{:032x}", rand_u128());
    let mut server = Proc(
        Command::new("ip")
            .args(["netns", "exec", &server_ns, BIN])
            .args(&server_args)
            .env("NETRIG_KEY", &key)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while !String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "exec", &server_ns, "ss", "-Hltn", "sport = :4794"])
            .output()
            .unwrap()
            .stdout,
    )
    .contains("4794")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "server did not listen"
        );
        assert!(server.0.try_wait().unwrap().is_none(), "server exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    // One start time for all, far enough ahead for eight processes to set
    // up on a busy 2-core machine.
    let now = netrig::net::realtime_ns() as f64 / 1e9;
    let start = format!("{:.3}", now + 4.0);
    let start_at: f64 = start.parse().unwrap();
    let run_secs = 1.0;
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let ns = &fabric.nodes[i + 1];
        fabric.host(ns, "netrig-server", &["169.254.77.1"]);
        let env = BTreeMap::from([
            ("JOB_COMPLETION_INDEX", i.to_string()),
            ("NETRIG_TARGET", "netrig-server".to_string()),
            ("START_AT", start.clone()),
        ]);
        let mut args: Vec<String> = client_args.iter().map(|a| expand(a, &env)).collect();
        // Scaled down: a later flag overrides the Job's -t.
        args.extend(["-t".into(), format!("{run_secs}s")]);
        let child = Command::new("ip")
            .args(["netns", "exec", ns, BIN])
            .args(&args)
            .env("NETRIG_KEY", &key)
            .env("JOB_COMPLETION_INDEX", i.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        clients.push(child);
    }
    let mut finished = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut parts = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let end = netrig::net::realtime_ns() as f64 / 1e9;
        assert!(
            out.status.success(),
            "client {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("client {i}: stdout is not its JSON alone: {e}"));
        assert_eq!(v["title"], format!("client-{i}"));
        assert_eq!(
            v["config"]["txstart_time"].as_f64(),
            Some(start_at),
            "client {i}"
        );
        let t = &v["result"]["totals"];
        assert!(t["sent"].as_u64() > Some(0), "client {i} sent nothing: {t}");
        assert_eq!(t["data_errors"], 0, "client {i}: {t}");
        finished.push(end);
        let f = dir.path().join(format!("client-{i}.json"));
        std::fs::write(&f, &out.stdout).unwrap();
        files.push(f.display().to_string());
        parts.push(v);
    }
    check_merge(&files, &parts, dir.path());
    drop(server);
    // None started before the shared time: each ran its full time after it.
    for (i, end) in finished.iter().enumerate() {
        assert!(
            *end >= start_at + run_secs,
            "client {i} ended at {end}, before {start_at} + {run_secs}"
        );
    }
    drop(fabric);
}

/// `netrig merge` of the clients' results against the results themselves.
fn check_merge(files: &[String], parts: &[serde_json::Value], dir: &Path) {
    let out = dir.join("all.json");
    let mut args = vec!["merge"];
    args.extend(files.iter().map(String::as_str));
    args.extend(["-o", out.to_str().unwrap()]);
    run_expect(&args, 0);
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let r = &m["result"];
    assert_eq!(r["inputs"].as_array().unwrap().len(), CLIENTS);
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    for (merged, part) in [
        ("sent_bytes", "sent"),
        ("received_bytes", "received"),
        ("completed", "completed"),
        ("data_errors", "data_errors"),
        ("net_errors", "net_errors"),
    ] {
        let sum: u64 = parts.iter().map(|p| u(&p["result"]["totals"][part])).sum();
        assert_eq!(u(&r["totals"][merged]), sum, "{merged}");
    }
    assert!(u(&r["totals"]["sent_bytes"]) > 0);
    // One histogram of every client's connection times, built here.
    let hs: Vec<_> = parts
        .iter()
        .map(|p| {
            let h = p["result"]["connection_times"]["hdr"]
                .as_str()
                .expect("an hdr");
            netrig::protocol::hdr::decode(h).unwrap()
        })
        .collect();
    let all = netrig::protocol::hdr::sum(&hs).unwrap();
    let ct = &r["latency"]["connection_times"];
    assert_eq!(u(&ct["count"]), all.len());
    assert_eq!(all.len(), 4 * CLIENTS as u64, "-P 4 each");
    let got: Vec<(String, f64)> = serde_json::from_value(ct["percentiles_us"].clone()).unwrap();
    let which: Vec<(&str, f64)> = got
        .iter()
        .map(|(n, _)| (n.as_str(), netrig::protocol::hdr::quantile_of(n).unwrap()))
        .collect();
    assert!(!which.is_empty());
    assert_eq!(got, netrig::protocol::hdr::percentiles_us(&all, &which));
    assert_eq!(
        ct["hdr"].as_str(),
        Some(netrig::protocol::hdr::encode(&all).as_str())
    );
    assert!(
        r["warnings"].as_array().unwrap().is_empty(),
        "{}",
        r["warnings"]
    );
}

fn rand_u128() -> u128 {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    u128::from_le_bytes(b)
}
