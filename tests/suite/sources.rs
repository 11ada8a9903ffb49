//! Spreading connections over several source addresses (`-B A-B`), as
//! ctsTraffic users do to get past the ephemeral port range of one address,
//! and the error when a port range is used up.

use crate::bin;
use bin::*;
use std::collections::BTreeMap;

fn csv_locals(path: &std::path::Path) -> BTreeMap<String, usize> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let h = r.headers().unwrap().clone();
    let local = h.iter().position(|c| c == "LocalAddress").unwrap();
    let result = h.iter().position(|c| c == "Result").unwrap();
    let mut by_ip = BTreeMap::new();
    for row in r.records() {
        let row = row.unwrap();
        assert_eq!(&row[result], "Succeeded", "{row:?}");
        let ip = row[local].rsplit_once(':').unwrap().0.to_string();
        *by_ip.entry(ip).or_insert(0) += 1;
    }
    by_ip
}

#[test]
fn a_range_of_source_addresses_shares_the_connections() {
    let (_srv, addr) = serve(&[]);
    let dir = tempfile::tempdir().unwrap();
    let conns = dir.path().join("conns.csv");
    let target = addr.to_string();
    for (tool, count) in [("tcp", "-n"), ("crr", "-n")] {
        let amount = if tool == "tcp" { "64K" } else { "9" };
        let mut args = vec![
            tool,
            &target,
            "-B",
            "127.0.0.2-127.0.0.4",
            "-P",
            "3",
            count,
            amount,
        ];
        if tool == "tcp" {
            // Nine connection slots, each used once.
            args.extend_from_slice(&["-P", "9", "--iterations", "1"]);
            args.extend_from_slice(&["--connection-file", conns.to_str().unwrap()]);
        }
        let (v, out) = run_json(&args, 0);
        if tool == "crr" {
            assert!(out.contains("9 succeeded, 0 failed"), "{out}");
            continue;
        }
        // Three sessions, one per address; nine connections, three from each.
        let want: BTreeMap<String, usize> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
            .iter()
            .map(|ip| (ip.to_string(), 3))
            .collect();
        assert_eq!(csv_locals(&conns), want);
        // The server's accounts of the three sessions, summed into one entry.
        let servers = v["result"]["servers"].as_array().unwrap();
        assert_eq!(servers.len(), 1, "{servers:?}");
        assert_eq!(servers[0][1]["connections"], 9, "{servers:?}");
        assert_eq!(servers[0][1]["success"], 9, "{servers:?}");
        assert_eq!(servers[0][1]["bytes_received"], 9 * 65536, "{servers:?}");
    }
}

#[test]
fn bad_source_ranges_are_usage_errors() {
    for (range, why) in [
        ("127.0.0.9-127.0.0.1", "ends before it starts"),
        ("127.0.0.1-::1", "mixes IPv4 and IPv6"),
        (
            "10.0.0.0-10.0.255.255",
            "names 65536 addresses; at most 1024",
        ),
        ("127.0.0.1-foo", "'foo' is not an IP address"),
    ] {
        let out = netrig(&["tcp", "-B", range, "-n", "1K"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{range}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{range}: {err}");
    }
}

/// Runs `cmd` in network namespace `ns`.
fn in_ns(ns: &str, cmd: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", ns]).args(cmd);
    c
}

struct Ns(String);
impl Drop for Ns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

#[test]
fn a_used_up_port_range_says_so() {
    let ns = format!("nrports{}", std::process::id() % 100_000);
    let made = std::process::Command::new("ip")
        .args(["netns", "add", &ns])
        .status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: cannot create a network namespace (needs root and iproute2)");
        return;
    }
    let _ns = Ns(ns.clone());
    let ok = |c: &mut std::process::Command| assert!(c.status().unwrap().success(), "{c:?}");
    ok(&mut in_ns(&ns, &["ip", "link", "set", "lo", "up"]));
    // Eight local ports in this namespace: the control connection takes one.
    ok(&mut in_ns(
        &ns,
        &["sysctl", "-q", "net.ipv4.ip_local_port_range=40000 40007"],
    ));
    let port = "5299";
    let _srv = Proc(
        in_ns(&ns, &[BIN, "serve", "--listen", "127.0.0.1:5299"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Listening is readiness: a probe from inside the namespace.
    let t0 = std::time::Instant::now();
    while !in_ns(
        &ns,
        &[BIN, "ping", "127.0.0.1", "-p", port, "-c", "1", "-q"],
    )
    .output()
    .unwrap()
    .status
    .success()
    {
        assert!(t0.elapsed().as_secs() < 10, "server did not start");
    }
    for bind in [None, Some("127.0.0.1")] {
        // Twelve long connections at once need more than the seven ports left.
        let mut args = vec![BIN, "tcp", "127.0.0.1", "-p", port, "-P", "12", "-n", "1G"];
        args.extend_from_slice(&["-t", "2s", "-q"]);
        if let Some(b) = bind {
            args.extend_from_slice(&["-B", b]);
        }
        let out = in_ns(&ns, &args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{bind:?}: {err}");
        assert!(err.contains("no free local port"), "{bind:?}: {err}");
        assert!(err.contains("-B A-B"), "{bind:?}: {err}");
    }
}
