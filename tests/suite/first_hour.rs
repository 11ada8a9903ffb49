//! What a new user meets in the first hour, from the command line: talking to
//! something that is not a netrig server, output paths, signals, exit codes
//! and conflicting flags (issue 11's defects, each pinned by a test).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use crate::bin;
use bin::*;

/// How a fake server answers netrig's hello.
#[derive(Clone, Copy)]
enum Fake {
    /// Reads and never answers (an HTTP server waiting for a request line).
    Silent,
    /// Reads iperf3's 37-byte cookie and answers PARAM_EXCHANGE (9).
    Iperf3,
    /// Answers with an HTTP error, as a web server does to garbage.
    Http,
}

/// A loopback listener that answers every connection as `kind` does.
fn fake_server(kind: Fake) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().take(8) {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 37];
                let _ = s.read_exact(&mut buf);
                match kind {
                    Fake::Silent => std::thread::sleep(Duration::from_secs(20)),
                    Fake::Iperf3 => {
                        let _ = s.write_all(&[9]);
                        std::thread::sleep(Duration::from_secs(20));
                    }
                    Fake::Http => {
                        let _ = s.write_all(b"HTTP/1.0 400 Bad request\r\n\r\n");
                    }
                }
            });
        }
    });
    addr
}

/// Every client command says plainly, within a few seconds, that the target
/// is not a netrig server and what it looks like (it used to wait 10–30 s and
/// print EAGAIN or "bad magic").
#[test]
fn a_peer_that_is_not_netrig_is_named_within_seconds() {
    let cases = [
        (Fake::Silent, "no reply to hello within 3s"),
        (Fake::Iperf3, "it looks like an iperf3 server"),
        (Fake::Http, "it answered with HTTP"),
    ];
    for (kind, why) in cases {
        let addr = fake_server(kind).to_string();
        let t0 = Instant::now();
        // All five at once: each waits out the same 3 s.
        let runs: Vec<_> = [
            vec!["tcp", &addr, "--iterations", "1"],
            vec!["udp", &addr, "-d", "1"],
            vec!["rr", &addr, "-n", "10"],
            vec!["ping", &addr, "-c", "1"],
            vec!["crr", &addr, "-n", "10"],
        ]
        .into_iter()
        .map(|cmd| {
            let child = netrig(&cmd)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (cmd, child)
        })
        .collect();
        for (cmd, child) in runs {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(3), "{cmd:?}: {err}");
            assert!(
                err.contains("is not a netrig server") && err.contains(why),
                "{cmd:?}: {err}"
            );
        }
        let el = t0.elapsed();
        assert!(el < Duration::from_secs(9), "{why}: took {el:?}");
    }
}

/// Reads `child`'s stdout on a thread; returns a receiver of its lines.
fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line that satisfies `pred`, returning the lines seen.
fn wait_for_line(
    rx: &std::sync::mpsc::Receiver<String>,
    pred: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            let hit = pred(&l);
            seen.push(l);
            if hit {
                return seen;
            }
        }
    }
    panic!("no such line within 20 s: {seen:?}");
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: plain kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
}

/// Two SIGTERMs back to back (GNU `timeout` sends two) still leave a
/// complete JSON report and exit 130; only a third signal cuts the wait.
#[test]
fn two_quick_signals_still_write_every_file() {
    let (_srv, addr) = serve(&["-v", "0"]);
    let addr = addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<&str>); 3] = [
        ("tcp", vec!["tcp", &addr, "--interval", "100ms"]),
        ("udp", vec!["udp", &addr, "-d", "30", "--interval", "100ms"]),
        ("ping", vec!["ping", &addr, "-c", "100000", "-i", "10ms"]),
    ];
    for (name, args) in cases {
        for sig in [libc::SIGTERM, libc::SIGINT] {
            let js = dir.path().join(format!("{name}-{sig}.json"));
            let mut all = args.clone();
            all.extend(["--json", js.to_str().unwrap()]);
            let mut child = netrig(&all)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let rx = lines_of(&mut child);
            // Running: the first interval row (tcp, udp) or probe (ping).
            wait_for_line(&rx, |l| {
                l.trim_start().starts_with("0.")
                    || l.trim_start().starts_with("1.")
                    || l.contains("seq=")
            });
            let pid = child.id();
            signal(pid, sig);
            signal(pid, sig);
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(130), "{name} {sig}: {err}");
            let doc: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
            assert!(doc["result"].is_object(), "{doc}");
        }
    }
}

/// Every output path is checked before the test starts: a directory, a
/// missing directory or a path given twice is a usage error (exit 2) naming
/// the flag, at once, and nothing is left behind.
#[test]
fn bad_output_paths_are_usage_errors_before_the_test() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let missing = format!("{d}/no/such/x.csv");
    let same = format!("{d}/same.csv");
    let cases: Vec<Vec<&str>> = vec![
        vec!["tcp", "--json", &d],
        vec!["tcp", "--status-file", &missing],
        vec!["tcp", "--connection-file", &missing],
        vec!["udp", "--status-file", &same, "--json", &same],
        vec!["udp", "--jitter-file", &missing, "-R"],
        vec!["sweep", "--to", "10M", "--csv", &missing],
        vec!["rr", "--hist-file", &missing],
        vec!["rr", "--csv", &missing],
        vec!["ping", "-c", "1", "--json", &missing],
        vec!["crr", "--json", &missing],
        vec!["analyze", "x.json", "--csv", &missing],
        vec![
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--to",
            "127.0.0.1:9",
            "--log",
            &missing,
        ],
    ];
    for args in cases {
        let t0 = Instant::now();
        let out = netrig(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let flag = args.iter().rev().nth(1).unwrap();
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.contains(flag) || err.contains("two outputs"),
            "{args:?}: {err}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{args:?}: not at once"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `--json -` writes the report to standard output (the console moves to
/// standard error); `--json` through a symlink writes through it and keeps
/// the link.
#[test]
fn json_to_stdout_and_through_symlinks() {
    let out = netrig(&["ping", "-c", "3", "-i", "10ms", "--json", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(doc["test"], "ping");
    assert!(String::from_utf8_lossy(&out.stderr).contains("probes sent"));

    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.json");
    let link = dir.path().join("link.json");
    std::fs::write(&target, "").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    run_expect(&["rr", "-n", "10", "--json", link.to_str().unwrap()], 0);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&target).unwrap()).unwrap();
    assert_eq!(doc["test"], "rr");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 2, "no temporary files left: {names:?}");
}

/// A target with a bad port is a usage error (exit 2), not a network one.
#[test]
fn a_bad_target_is_a_usage_error() {
    for cmd in ["tcp", "udp", "rr", "ping", "crr"] {
        let out = netrig(&[cmd, "127.0.0.1:99999"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("99999"));
    }
}

/// An unbounded TCP run says so on its first line; a failure to connect is
/// the only thing printed.
#[test]
fn unbounded_tcp_says_so_first_and_errors_come_alone() {
    let (_srv, addr) = serve(&["-v", "0"]);
    let mut child = netrig(&["tcp", &addr.to_string(), "--transfer", "1M"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut child);
    let first = wait_for_line(&rx, |_| true);
    assert!(first[0].starts_with("Runs until Ctrl-C"), "{first:?}");
    signal(child.id(), libc::SIGINT);
    assert_eq!(child.wait().unwrap().code(), Some(130));

    let (_held, port) = refused_port();
    let target = format!("127.0.0.1:{port}");
    for cmd in ["tcp", "udp", "sweep", "rr", "ping", "crr"] {
        let mut args = vec![cmd, target.as_str()];
        if cmd == "sweep" {
            args.extend(["--to-rate", "1M"]);
        }
        let out = netrig(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(3), "{cmd}");
        assert!(
            out.stdout.is_empty(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).lines().count(),
            1,
            "{cmd}"
        );
    }
}

/// Flags that another flag makes meaningless are usage errors, never
/// silently ignored: a sweep makes its own profile, a media stream its own
/// rate, size and direction, and the profile-only flags need a profile.
#[test]
fn conflicting_flags_are_usage_errors() {
    let cases: [&[&str]; 9] = [
        &["sweep", "--to", "10M", "--rate", "5M"],
        &["sweep", "--to", "10M", "--gap", "5us"],
        &["sweep", "--to", "10M", "--profile", "x.txt"],
        &["sweep", "--to", "10M", "--media", "--bitrate", "1M"],
        &["udp", "--media", "--bitrate", "1M", "--gap", "5us"],
        &["udp", "--media", "--bitrate", "1M", "--size", "100"],
        &["udp", "--fps", "30"],
        &["udp", "--csv", "bins.csv"],
        &["udp", "--precompute"],
    ];
    for args in cases {
        let out = netrig(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: the test must not start");
    }
}

/// A FlowPing scenario file runs with FlowPing's meaning (rates in kbit/s,
/// the rate ramping between points, the file repeated to --duration): the
/// bytes sent are the profile's integral, 5.25 Mbit per 1.5 s pass, not a
/// thousandth of it.
#[test]
fn flowping_scenario_files_run_with_flowpings_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("scenario.txt");
    std::fs::write(&f, "0 1000 500\n0.5 5000 500\n1 5000 1000\n1.5 0 1000\n").unwrap();
    let f = f.to_str().unwrap();
    // The two runs (each with an embedded server of its own) side by side.
    std::thread::scope(|s| {
        for (duration, passes) in [(None, 1.0), (Some("3s"), 2.0)] {
            s.spawn(move || {
                let mut args = vec!["udp", "--profile", f, "--catch-up", "-v", "1"];
                if let Some(d) = duration {
                    args.extend(["-d", d]);
                }
                let (v, out) = run_json(&args, 0);
                assert!(out.contains("FlowPing format"), "{out}");
                let sent = v["result"]["sender"]["bytes"].as_f64().unwrap();
                let want = passes * 5.25e6 / 8.0;
                // Within two datagrams: the schedule tracks the integral to
                // half a datagram, and the last may fall just past the end.
                assert!(
                    (sent - want).abs() <= 2000.0,
                    "sent {sent}, FlowPing sends {want}"
                );
            });
        }
    });
}

/// A sender that cannot keep up with its schedule says so: a warning on
/// stderr and `sender_limited` with the asked and achieved rates in the JSON.
/// A schedule it can keep is not flagged.
#[test]
fn a_sender_that_falls_short_of_its_schedule_is_flagged() {
    // 20 Gbit/s of 64-byte datagrams is 39 M datagrams/s: no host keeps up.
    let out = netrig(&[
        "udp", "--rate", "20G", "--size", "64", "-d", "1", "-v", "0", "--json", "-",
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("warning: sender-limited"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["result"]["sender"];
    assert_eq!(s["sender_limited"], true, "{s}");
    let asked = s["asked_bps"].as_f64().unwrap();
    assert!((asked - 20e9).abs() < 0.05 * 20e9, "{s}");
    assert!(s["achieved_bps"].as_f64().unwrap() < 0.99 * asked, "{s}");

    // A schedule the host keeps is not flagged (tried a few times: a stall of
    // a busy host really does make a sender fall short).
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (v, _) = run_json(&["udp", "--rate", "2M", "-d", "1", "-v", "0"], 0);
        if v["result"]["sender"]["sender_limited"] == false {
            return;
        }
        seen.push(v["result"]["sender"].clone());
    }
    panic!("a 2 Mbit/s stream was flagged sender-limited three times: {seen:?}");
}

/// `relay --rate` limits each direction of the whole relay: two TCP
/// connections share 20 Mbit/s instead of getting 20 each; `--rate-per-flow`
/// gives each its own.
#[test]
fn relay_rate_limits_the_whole_relay_unless_per_flow() {
    let (_srv, server) = serve(&["-v", "0"]);
    let goodput = |extra: &[&str]| {
        let mut args = vec!["--rate", "20M"];
        args.extend_from_slice(extra);
        let (_relay, addr) = relay(server, &args);
        let (v, _) = run_json(
            &[
                "tcp",
                &addr.to_string(),
                "-c",
                "2",
                "--iterations",
                "1",
                "--transfer",
                "2500K",
                "-v",
                "0",
            ],
            0,
        );
        let r = &v["result"];
        let bytes = r["totals"]["sent"].as_f64().unwrap();
        bytes * 8.0 / r["duration_secs"].as_f64().unwrap()
    };
    let shared = goodput(&[]);
    // A token bucket passes no more than its rate (plus a 25 KB burst).
    assert!(
        shared < 20e6 * 1.15,
        "two connections through --rate 20M: {shared}"
    );
    // Each connection its own 20 Mbit/s: well above one bucket's rate
    // (tried a few times: a busy host can slow the senders).
    let mut seen = Vec::new();
    for _ in 0..3 {
        let per_flow = goodput(&["--rate-per-flow"]);
        seen.push(per_flow);
        if per_flow > 20e6 * 1.4 {
            return;
        }
    }
    panic!("--rate-per-flow never exceeded one bucket's rate: {seen:?}");
}

/// What a person reads: rates in bit/s with units on the console (files keep
/// ctsTraffic's bytes per second), UDP intervals with a rate and loss
/// percent, the delay histogram only with -v, nothing but errors with -q,
/// and -J for JSON on standard output, as iperf3.
#[test]
fn console_output_for_people_and_the_iperf3_flags() {
    let dir = tempfile::tempdir().unwrap();
    let status = dir.path().join("s.csv");
    let out = run_expect(
        &[
            "tcp",
            "-P",
            "2",
            "-n",
            "8M",
            "-i",
            "100ms",
            "--status-file",
            status.to_str().unwrap(),
        ],
        0,
    );
    assert!(out.contains(" Send ") && out.contains("bit/s"), "{out}");
    let csv = std::fs::read_to_string(&status).unwrap();
    assert!(csv.starts_with("TimeSlice,SendBps,RecvBps,"), "{csv}");
    assert!(!csv.contains("bit/s"), "{csv}");

    // The two udp runs (embedded servers of their own) side by side.
    let (out, verbose) = std::thread::scope(|s| {
        let verbose = s.spawn(|| run_expect(&["udp", "-t", "1", "-b", "8M", "-v"], 0));
        let out = run_expect(&["udp", "-t", "1", "-b", "8M"], 0);
        let verbose = verbose
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        (out, verbose)
    });
    assert!(
        out.contains("Rate") && out.contains("Loss%") && out.contains("Mbit/s"),
        "{out}"
    );
    assert!(!out.contains("Delay histogram"), "{out}");
    assert!(verbose.contains("Delay histogram"), "{verbose}");

    let out = netrig(&["rr", "-n", "100", "-q"]).output().unwrap();
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
    let out = netrig(&["rr", "-n", "100", "-J"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("-J: JSON on stdout");
    assert_eq!(
        (v["netrig"].as_u64(), v["test"].as_str()),
        (Some(1), Some("rr"))
    );
    // The console moved to stderr.
    assert!(String::from_utf8_lossy(&out.stderr).contains("Round trip"));
}

/// A server that stops answering (SIGSTOP) cannot keep a stopping client
/// from writing its results: after Ctrl-C the client waits a bounded grace
/// period, then exits with complete files.
#[test]
fn a_stuck_server_cannot_hold_up_the_results() {
    // The four at once: each waits out the same grace period.
    let runs: Vec<_> = [
        vec!["tcp", "-n", "1G"],
        vec!["udp", "-t", "30"],
        vec!["udp", "-t", "30", "-R"],
        vec!["ping", "-i", "10ms"],
    ]
    .into_iter()
    .map(|args| std::thread::spawn(move || stuck_server_run(&args)))
    .collect();
    for r in runs {
        r.join().unwrap();
    }
}

/// Runs `args` against a server, stops the server (SIGSTOP) once the run is
/// going, sends `sigints` SIGINTs 100 ms apart, and returns the exit code,
/// how long the client took to exit after the first, and its JSON report.
fn interrupt_with_a_stuck_server(
    args: &[&str],
    sigints: usize,
) -> (Option<i32>, Duration, serde_json::Value) {
    let (srv, addr) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("r.json");
    let addr = addr.to_string();
    let mut all = vec![args[0], addr.as_str()];
    all.extend(&args[1..]);
    all.extend(["--json", js.to_str().unwrap()]);
    let mut child = netrig(&all)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut child);
    wait_for_line(&rx, |l| {
        l.trim_start().starts_with("1.") || l.contains("seq=5 ")
    });
    signal(srv.0.id(), libc::SIGSTOP);
    let t0 = Instant::now();
    for _ in 0..sigints {
        signal(child.id(), libc::SIGINT);
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    let waited = t0.elapsed();
    signal(srv.0.id(), libc::SIGCONT);
    let doc = serde_json::from_slice(&std::fs::read(&js).unwrap_or_default()).unwrap_or_default();
    (status.code(), waited, doc)
}

fn stuck_server_run(args: &[&str]) {
    let (code, waited, doc) = interrupt_with_a_stuck_server(args, 1);
    assert!(
        waited < Duration::from_secs(15),
        "{args:?}: waited {waited:?}"
    );
    assert!(matches!(code, Some(0 | 3 | 130)), "{args:?}: {code:?}");
    assert!(doc["result"].is_object(), "{args:?}: {doc}");
}

/// A third signal cuts every remaining wait short, and the results are still
/// written: against a stuck server, Ctrl-C three times gives a complete JSON
/// report at once.
#[test]
fn a_third_signal_cuts_the_wait_but_keeps_the_results() {
    let runs: Vec<_> = [vec!["tcp", "-n", "1G"], vec!["udp", "-t", "30", "-R"]]
        .into_iter()
        .map(|args| {
            std::thread::spawn(move || {
                let (code, waited, doc) = interrupt_with_a_stuck_server(&args, 3);
                assert!(
                    waited < Duration::from_secs(3),
                    "{args:?}: waited {waited:?}"
                );
                assert_eq!(code, Some(130), "{args:?}");
                assert!(doc["result"].is_object(), "{args:?}: {doc}");
            })
        })
        .collect();
    for r in runs {
        r.join().unwrap();
    }
}
