//! The command line as people type it from other tools (issue 26, items 6,
//! 8 and 9): iperf3's `-c HOST`, `-R`, `--bidir`, `-s`, `-u`; durations and
//! interval lines on every test; `--connect-timeout` against a black hole;
//! and errors that name the flag, the port and the address.

use crate::bin;
use crate::netns;

use bin::*;
use std::time::{Duration, Instant};

/// Runs netrig, expects exit `code`, returns (stdout, stderr).
fn out(args: &[&str], code: i32) -> (String, String) {
    let o = netrig(args).output().unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    );
    assert_eq!(o.status.code(), Some(code), "{args:?}\n{so}\n{se}");
    (so, se)
}

#[test]
fn c_host_names_the_server_as_in_iperf3() {
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    let (v, _) = run_json(
        &["tcp", "-c", &a, "-n", "1M", "--iterations", "1", "-P", "1"],
        0,
    );
    assert_eq!(v["config"]["targets"][0], a.as_str());
    assert_eq!(v["config"]["connections"], 1);
    let (v, _) = run_json(&["udp", "-c", &a, "-t", "300ms", "-q"], 0);
    assert_eq!(v["config"]["target"], a.as_str());
    let (v, _) = run_json(&["rr", "-c", &a, "-n", "200", "-q"], 0);
    assert_eq!(v["config"]["target"], a.as_str());
    let (v, _) = run_json(&["crr", "-c", &a, "-n", "20", "-q"], 0);
    assert_eq!(v["config"]["targets"][0], a.as_str());
    // tcp's -c with a number is -P as in earlier releases, for one more;
    // where -c never counted connections, a number gets a hint.
    let (v, _) = run_json(
        &["tcp", &a, "-c", "2", "-n", "1M", "--iterations", "1", "-q"],
        0,
    );
    assert_eq!(v["config"]["connections"], 2);
    let (_, err) = out(&["udp", "-c", "8"], 2);
    assert!(err.contains("-P 8"), "{err}");
    // A target and -c both: which one is meant?
    out(&["udp", &a, "-c", &a], 2);
}

#[test]
fn tcp_takes_r_and_bidir_as_patterns() {
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    let once = ["-n", "1M", "--iterations", "1", "-P", "1", "-q"];
    for (flag, pattern) in [("-R", "pull"), ("--reverse", "pull"), ("--bidir", "duplex")] {
        let mut args = vec!["tcp", a.as_str(), flag];
        args.extend_from_slice(&once);
        let (v, _) = run_json(&args, 0);
        assert_eq!(v["config"]["pattern"], pattern, "{flag}");
    }
    out(&["tcp", &a, "-R", "--pattern", "push"], 2);
    out(&["tcp", &a, "-R", "--bidir"], 2);
    // udp is UDP already: iperf3's -u is accepted there.
    run_json(&["udp", &a, "-u", "-t", "200ms", "-q"], 0);
}

#[test]
fn iperf3_flags_netrig_spells_otherwise_get_a_one_line_hint() {
    for (args, needle) in [
        (vec!["-s"], "`netrig serve`"),
        (vec!["tcp", "-s"], "`netrig serve`"),
        (vec!["-c", "host.example"], "`netrig tcp HOST`"),
        (vec!["tcp", "127.0.0.1", "-u"], "`netrig udp HOST`"),
        (vec!["rr", "-u"], "--proto udp"),
        (vec!["rr", "--bidir"], "--pattern duplex"),
        (vec!["ping", "--bidir"], "--pattern duplex"),
        (vec!["crr", "-R"], "--pattern pull"),
    ] {
        let (_, err) = out(&args, 2);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("--bind"), "{args:?}: clap's guess: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn rr_and_ping_run_for_their_time() {
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    for proto in ["tcp", "udp"] {
        let t0 = Instant::now();
        let (v, _) = run_json(&["rr", &a, "--proto", proto, "-t", "1s", "-q"], 0);
        let took = t0.elapsed();
        assert!(took >= Duration::from_secs(1), "{proto}: {took:?}");
        assert_eq!(v["config"]["duration"], 1000);
        let run = &v["result"]["runs"][0];
        assert!(run["latency"]["count"].as_u64().unwrap() > 0, "{run}");
        assert_eq!(run["interrupted"], false);
    }
    // With -n too, whichever ends first.
    let (v, _) = run_json(&["rr", &a, "-t", "60s", "-n", "300", "-q"], 0);
    assert_eq!(v["result"]["runs"][0]["latency"]["count"], 300);
    // ping: at most one probe per interval until the time is up.
    for flag in ["-t", "-d", "--duration"] {
        let t0 = Instant::now();
        let (v, _) = run_json(&["ping", &a, flag, "1s", "-i", "100ms", "-q"], 0);
        assert!(t0.elapsed() >= Duration::from_millis(900), "{flag}");
        let sent = v["result"]["runs"][0]["sent"].as_u64().unwrap();
        assert!((1..=11).contains(&sent), "{flag}: {sent} probes");
    }
    let (v, _) = run_json(&["ping", &a, "-t", "60s", "-n", "3", "-i", "10ms"], 0);
    assert_eq!(v["result"]["runs"][0]["sent"], 3);
}

#[test]
fn crr_time_alone_runs_for_the_time_not_the_default_count() {
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    let (v, _) = run_json(&["crr", &a, "-t", "2s", "-q"], 0);
    // No count bounds it: the deadline does.
    assert!(v["config"]["iterations"].is_null(), "{}", v["config"]);
    let secs = v["result"]["duration_secs"].as_f64().unwrap();
    assert!(secs >= 1.9, "stopped after {secs} s");
    assert_eq!(v["result"]["failed"], 0);
    // -n still bounds a run without -t.
    let (v, _) = run_json(&["crr", &a, "-n", "50", "-q"], 0);
    assert_eq!(v["result"]["transactions"], 50);
}

/// The rows of an interval table, split at blanks: lines that start
/// `a-b s` (so the count is the third cell).
fn interval_rows(console: &str) -> Vec<Vec<String>> {
    console
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|c| c.len() >= 8 && c[1] == "s" && c[0].contains('-'))
        .collect()
}

#[test]
fn rr_prints_a_line_per_interval() {
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    for proto in ["tcp", "udp"] {
        let o = run_expect(&["rr", &a, "--proto", proto, "-t", "1s", "-i", "200ms"], 0);
        assert!(o.contains("Interval") && o.contains("P50Us"), "{o}");
        let rows = interval_rows(&o);
        assert!(rows.len() >= 3, "{proto}: {o}");
        // Every measured round trip is in exactly one interval.
        let sum: u64 = rows.iter().map(|r| r[2].parse::<u64>().unwrap()).sum();
        let total = o
            .lines()
            .find_map(|l| l.strip_prefix("Round trip: count "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .expect("the summary's count");
        assert_eq!(sum, total, "{proto}: {o}");
        for r in &rows {
            let per_sec: f64 = r[4].parse().unwrap();
            assert!(per_sec > 0.0, "{r:?}");
            let (p50, p99): (f64, f64) = (r[5].parse().unwrap(), r[7].parse().unwrap());
            assert!(p50 > 0.0 && p50 <= p99, "{r:?}");
        }
    }
}

#[test]
fn load_prints_a_line_per_interval() {
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    let args = [
        "load",
        &a,
        "--idle",
        "2s",
        "--phase-time",
        "4s",
        "--phases",
        "download",
        "-i",
        "2s",
    ];
    let o = run_expect(&args, 0);
    let live: Vec<&str> = o
        .lines()
        .filter(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() >= 2 && c[0].parse::<f64>().is_ok() && ["idle", "download"].contains(&c[1])
        })
        .collect();
    // Six seconds in lines of two: three, not six.
    assert!((2..=4).contains(&live.len()), "{o}");
    out(&["load", &a, "-i", "1500ms"], 2);
}

#[test]
fn intervals_below_a_tenth_of_a_second_are_refused() {
    for args in [
        vec!["tcp", "-i", "1us"],
        vec!["udp", "--interval", "10ms"],
        vec!["rr", "-i", "50ms"],
        vec!["crr", "--get-server-output", "-i", "99ms"],
    ] {
        let (_, err) = out(&args, 2);
        assert!(err.contains("100ms"), "{args:?}: {err}");
    }
}

#[test]
#[cfg_attr(not(netns_root), ignore = "needs root and iproute2 (ip netns)")]
fn connect_timeout_gives_up_on_a_black_hole() {
    // A's route to 10.99.0.0/24 goes to B, which forwards it into a
    // blackhole route: the SYNs vanish and nothing answers, not even ICMP.
    let ns = netns::Netns::new('h', 219);
    for (n, args) in [
        (
            &ns.a,
            vec!["route", "add", "10.99.0.0/24", "via", "169.254.219.2"],
        ),
        (&ns.b, vec!["route", "add", "blackhole", "10.99.0.0/24"]),
    ] {
        let mut cmd = std::process::Command::new("ip");
        cmd.arg("-n").arg(n).args(&args);
        assert!(cmd.status().unwrap().success(), "{args:?}");
    }
    let st = ns
        .exec(&ns.b, "sysctl")
        .args(["-qw", "net.ipv4.ip_forward=1"])
        .status()
        .unwrap();
    assert!(st.success());
    for sub in [
        vec!["tcp"],
        vec!["udp"],
        vec!["sweep", "--to-rate", "10M"],
        vec!["rr"],
        vec!["ping"],
        vec!["crr"],
        vec!["load"],
    ] {
        let mut args = sub.clone();
        args.extend(["10.99.0.1", "--connect-timeout", "500ms", "-q"]);
        let t0 = Instant::now();
        let o = ns.exec(&ns.a, BIN).args(&args).output().unwrap();
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{sub:?}: {err}");
        assert!(
            err.contains("cannot reach 10.99.0.1:4794")
                && err.contains("500ms")
                && err.contains("--connect-timeout"),
            "{sub:?}: {err}"
        );
        // Well within the old 10 s (ping) and 30 s (tcp) waits.
        assert!(took < Duration::from_secs(5), "{sub:?} took {took:?}");
    }
}

#[test]
fn errors_name_the_flag_typed() {
    for (args, name, not) in [
        (vec!["udp", "-l", "10"], "-l/--length", "--size"),
        (vec!["udp", "--size", "10"], "-l/--length", "--size must"),
        (vec!["tcp", "-P", "0"], "--parallel", "--connections"),
        (vec!["tcp", "-n", "0"], "--bytes", "--transfer"),
        (vec!["ping", "-n", "0"], "--count", "refused"),
        (vec!["rr", "-n", "0"], "--count", "refused"),
        (vec!["crr", "-n", "0"], "--count", "refused"),
    ] {
        // A usage error, before any server is asked.
        let (_, err) = out(&args, 2);
        assert!(err.contains(name) && !err.contains(not), "{args:?}: {err}");
    }
}

#[test]
fn errors_name_the_port_and_the_address() {
    let (_held, port) = refused_port();
    let port = port.to_string();
    for sub in ["tcp", "udp", "rr", "crr"] {
        let (_, err) = out(&[sub, "127.0.0.1", "-p", &port, "-q"], 3);
        let want = format!("cannot reach 127.0.0.1:{port}: Connection refused");
        assert!(err.contains(&want), "{sub}: {err}");
    }
    // A port taken: which address could not be listened on, and why, once.
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    let (_, err) = out(&["serve", "--listen", &a], 1);
    assert!(
        err.contains(&format!("cannot listen on {a}")) && err.contains("in use"),
        "{err}"
    );
    let (_, err) = out(&["relay", "--listen", &a, "--to", "127.0.0.1:9"], 1);
    assert!(err.contains(&a), "{err}");
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
    // An unreadable input is bad input (2), for analyze as for report.
    let (_, err) = out(&["analyze", "/nonexistent/missing.json"], 2);
    assert!(err.contains("missing.json"), "{err}");
}
