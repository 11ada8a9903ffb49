//! CPU utilization in the TCP and UDP reports, both ends (issue 28): the
//! client's own process and the server's over its session, as iperf3's
//! "CPU Utilization: local/..., remote/...", on the console and in the
//! JSON. Loopback runs with a separate server process; bounds are
//! one-sided (a shared machine makes every figure noisy).

use crate::bin;
use bin::*;

/// An end's `cpu` object is there and sane: a wall time, percentages that
/// agree with the microseconds, and no thread busier than the process.
fn sane(end: &serde_json::Value, what: &str) {
    let f = |k: &str| {
        end[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: no {k} in {end}"))
    };
    let wall = f("wall_us");
    assert!(
        wall > 100_000.0,
        "{what}: wall {wall} µs for a run of 300 ms or more"
    );
    let (user, sys, busiest) = (f("user_us"), f("system_us"), f("busiest_thread_us"));
    assert!(user + sys > 0.0, "{what}: moving data took some CPU: {end}");
    let total = f("total_percent");
    assert!(
        (total - 100.0 * (user + sys) / wall).abs() < 1e-6,
        "{what}: {end}"
    );
    assert!(
        (f("user_percent") - 100.0 * user / wall).abs() < 1e-6,
        "{what}: {end}"
    );
    assert!(
        (f("system_percent") - 100.0 * sys / wall).abs() < 1e-6,
        "{what}: {end}"
    );
    assert!(f("cores") >= 1.0, "{what}: {end}");
    // A process uses at most every core for the whole wall time (with a
    // clock tick of slack), and one thread at most one core.
    assert!(total <= 100.0 * f("cores") + 5.0, "{what}: {end}");
    assert!(busiest <= user + sys + 20_000.0, "{what}: {end}");
    assert!(f("busiest_thread_percent") <= 105.0, "{what}: {end}");
    assert!(end["cpu_bound"].is_boolean(), "{what}: {end}");
}

#[test]
fn tcp_reports_cpu_of_both_ends() {
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    let (v, out) = run_json(&["tcp", &a, "-P", "2", "-t", "500ms", "-n", "1T"], 0);
    let cpu = &v["result"]["cpu"];
    sane(&cpu["local"], "tcp local");
    sane(&cpu["remote"], "tcp remote");
    // The server's own summary carries what it measured.
    let srv = &v["result"]["servers"][0][1]["cpu"];
    assert_eq!(srv["wall_us"], cpu["remote"]["wall_us"], "{v}");
    assert!(
        out.contains("CPU Utilization: local/client ") && out.contains(", remote/server "),
        "{out}"
    );
    assert!(!out.contains("not reported"), "{out}");
}

#[test]
fn udp_reports_cpu_of_both_ends_either_way() {
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    for (extra, line) in [
        (None, "CPU Utilization: local/sender "),
        (Some("-R"), "CPU Utilization: local/receiver "),
    ] {
        let mut args = vec!["udp", a.as_str(), "-t", "400ms", "-b", "200M"];
        args.extend(extra);
        let (v, out) = run_json(&args, 0);
        let cpu = &v["result"]["cpu"];
        sane(&cpu["local"], &format!("udp {extra:?} local"));
        sane(&cpu["remote"], &format!("udp {extra:?} remote"));
        assert!(out.contains(line), "{out}");
    }
}

/// A client spinning one thread flat out is CPU-bound, and says so: a
/// single connection pushing as fast as loopback allows keeps one client
/// thread on a core (retried: a loaded machine may starve it).
#[test]
fn a_saturating_run_says_it_was_cpu_bound() {
    let (_srv, addr) = serve(&[]);
    let a = addr.to_string();
    let mut last = String::new();
    for _ in 0..3 {
        let (v, out) = run_json(&["tcp", &a, "-P", "1", "-t", "1s", "-n", "1T"], 0);
        let cpu = &v["result"]["cpu"];
        let bound = cpu["local"]["cpu_bound"] == true || cpu["remote"]["cpu_bound"] == true;
        if bound {
            assert!(out.contains("CPU-bound: "), "{out}");
            return;
        }
        assert!(!out.contains("CPU-bound: "), "{out}");
        last = cpu.to_string();
    }
    eprintln!("skipped: no end reached the CPU-bound share on this loaded machine: {last}");
}
