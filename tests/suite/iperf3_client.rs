//! netrig's client against the real `iperf3 -s` (issue 31 item 3): TCP
//! with 1 and 4 streams, reverse and bidir, UDP at a fixed rate — the bytes
//! (and datagrams, loss, jitter) netrig reports equal what iperf3's server
//! writes in its own `-J` output —, a busy server, a server refusing a
//! test, a fake server writing junk, and options iperf3 cannot be given.
//! Without iperf3 installed the tests that need it say they skipped.

use crate::bin;

use bin::{Proc, have_iperf3, netrig, peer_listening, run_json};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `iperf3 -s -1` on a free loopback port with `extra`, once it listens.
fn iperf3_server(extra: &[&str]) -> (Proc, u16) {
    peer_listening("iperf3 -s", |port| {
        let mut c = Command::new("iperf3");
        c.args(["-s", "-1", "-B", "127.0.0.1", "-p", &port.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    })
}

/// The server's own `-J` document, once its one test is over.
fn server_json(mut p: Proc) -> Value {
    let t0 = Instant::now();
    while p.0.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "iperf3 -s -1 did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = String::new();
    p.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3 -J: {e}: {out}"))
}

/// Checks `doc` against netrig's JSON schema (Python's jsonschema, as
/// tests/suite/schema.rs); says it skipped without it.
fn matches_schema(doc: &Value) {
    let ok = Command::new("python3")
        .args(["-c", "import jsonschema"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped the schema check: Python's jsonschema is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("doc.json");
    std::fs::write(&f, doc.to_string()).unwrap();
    let script = "import json, sys, jsonschema\n\
        v = jsonschema.Draft202012Validator(json.load(open(sys.argv[1])))\n\
        print('\\n'.join(e.message[:200] for e in v.iter_errors(json.load(open(sys.argv[2])))))";
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/netrig.schema.json");
    let out = Command::new("python3")
        .args(["-c", script, schema, f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = String::from_utf8_lossy(&out.stdout);
    assert!(bad.trim().is_empty(), "not netrig's schema: {bad}");
}

fn n(v: &Value) -> u64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) as u64
}

/// Runs `netrig tcp|udp --iperf3` against a fresh `iperf3 -s -1 -J`;
/// netrig's JSON and the server's.
fn against(cmd: &str, args: &[&str], server_extra: &[&str]) -> (Value, Value, String) {
    let mut extra = vec!["-J"];
    extra.extend_from_slice(server_extra);
    let (srv, port) = iperf3_server(&extra);
    let target = format!("127.0.0.1:{port}");
    let mut all = vec![cmd, "--iperf3", &target];
    all.extend_from_slice(args);
    let (mine, console) = run_json(&all, 0);
    (mine, server_json(srv), console)
}

#[test]
fn tcp_one_and_four_streams_bytes_equal_on_both_ends() {
    if !have_iperf3("tcp_one_and_four_streams_bytes_equal_on_both_ends") {
        return;
    }
    for streams in ["1", "4"] {
        let (mine, theirs, console) = against("tcp", &["-t", "1", "-P", streams], &[]);
        let r = &mine["result"];
        let sent = n(&r["totals"]["sent"]);
        assert!(sent > 0, "{r}");
        assert_eq!(
            sent,
            n(&theirs["end"]["sum_received"]["bytes"]),
            "-P {streams}"
        );
        assert_eq!(n(&r["totals"]["received"]), 0);
        // Stream by stream too, in iperf3's numbering.
        let ours = r["iperf3"]["streams"].as_array().unwrap();
        assert_eq!(ours.len(), streams.parse::<usize>().unwrap());
        let per: Vec<u64> = theirs["end"]["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| n(&s["receiver"]["bytes"]))
            .collect();
        let mut a: Vec<u64> = ours.iter().map(|s| n(&s["client_bytes"])).collect();
        let mut b = per.clone();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
        assert_eq!(mine["config"]["peer"], "iperf3");
        assert_eq!(r["iperf3"]["peer"], "iperf3");
        assert_eq!(n(&r["servers"][0][1]["bytes_received"]), sent);
        assert!(
            console.contains(&format!("received {sent} bytes")),
            "{console}"
        );
    }
}

#[test]
fn tcp_reverse_and_bidir_bytes_equal_on_both_ends() {
    if !have_iperf3("tcp_reverse_and_bidir_bytes_equal_on_both_ends") {
        return;
    }
    let (mine, theirs, _) = against("tcp", &["-t", "1", "-R", "-P", "2"], &[]);
    let got = n(&mine["result"]["totals"]["received"]);
    assert!(got > 0);
    assert_eq!(got, n(&theirs["end"]["sum_sent"]["bytes"]));
    assert_eq!(n(&mine["result"]["totals"]["sent"]), 0);
    let (mine, theirs, _) = against("tcp", &["-t", "1", "--bidir"], &[]);
    let r = &mine["result"]["totals"];
    let e = &theirs["end"];
    assert!(n(&r["sent"]) > 0 && n(&r["received"]) > 0, "{r}");
    assert_eq!(n(&r["sent"]), n(&e["sum_received"]["bytes"]));
    assert_eq!(n(&r["received"]), n(&e["sum_sent_bidir_reverse"]["bytes"]));
}

#[test]
fn tcp_byte_count_and_reports() {
    if !have_iperf3("tcp_byte_count_and_reports") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let i3 = dir.path().join("i3.json");
    let (mine, theirs, _) = against(
        "tcp",
        &[
            "-n",
            "3M",
            "-l",
            "16K",
            "--html",
            html.to_str().unwrap(),
            "--json-iperf3",
            i3.to_str().unwrap(),
        ],
        &[],
    );
    let sent = n(&mine["result"]["totals"]["sent"]);
    assert!(sent >= 3 << 20, "{sent}");
    assert_eq!(sent, n(&theirs["end"]["sum_received"]["bytes"]));
    assert_eq!(mine["config"]["iperf3_parameters"]["num"], 3 << 20);
    assert_eq!(mine["config"]["iperf3_parameters"]["len"], 16 << 10);
    matches_schema(&mine);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<html") && page.contains("svg"),
        "no report page"
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&i3).unwrap()).unwrap();
    assert_eq!(n(&doc["end"]["sum_received"]["bytes"]), sent);
}

#[test]
fn udp_at_a_fixed_rate_reports_the_servers_figures() {
    if !have_iperf3("udp_at_a_fixed_rate_reports_the_servers_figures") {
        return;
    }
    let (mine, theirs, console) = against("udp", &["-t", "1", "-b", "20M", "-l", "1200"], &[]);
    let r = &mine["result"];
    let sum = &theirs["end"]["sum"];
    let packets = n(&r["sender"]["packets"]);
    assert!(packets > 1000, "{r}");
    // 20 Mbit/s of 1200-byte datagrams for 1 s: the server saw them all
    // (loopback), and netrig reports its expected, lost and jitter.
    assert_eq!(n(&sum["packets"]), packets);
    assert_eq!(n(&r["totals"]["sent"]), n(&sum["packets"]));
    assert_eq!(n(&r["totals"]["lost"]), n(&sum["lost_packets"]));
    let jitter_ms = sum["jitter_ms"].as_f64().unwrap();
    let ours = r["totals"]["jitter_us"].as_f64().unwrap() / 1e3;
    assert!((jitter_ms - ours).abs() < 1e-9, "{jitter_ms} {ours}");
    assert_eq!(n(&r["totals"]["bytes"]), packets * 1200);
    assert_eq!(r["iperf3"]["streams"][0]["server_bytes"], packets * 1200);
    assert_eq!(mine["config"]["iperf3_parameters"]["udp_counters_64bit"], 1);
    assert!(
        console.contains("Received at the iperf3 server"),
        "{console}"
    );
}

#[test]
fn udp_reverse_counts_what_the_server_sent() {
    if !have_iperf3("udp_reverse_counts_what_the_server_sent") {
        return;
    }
    let (mine, theirs, _) = against("udp", &["-t", "1", "-b", "10M", "-R"], &[]);
    let r = &mine["result"];
    let sent = n(&theirs["end"]["sum"]["packets"]);
    assert!(sent > 500);
    assert_eq!(n(&r["sender"]["packets"]), sent);
    // What arrived plus what was lost is what the server sent, and every
    // datagram counted as arrived is in the bytes (1000 each): a header
    // misread would count a datagram's bytes but call it lost.
    let unique = n(&r["totals"]["unique"]);
    assert_eq!(unique + n(&r["totals"]["lost"]), sent);
    assert_eq!(n(&r["totals"]["bytes"]), unique * 1000);
}

#[test]
fn a_busy_iperf3_server_is_a_refusal() {
    if !have_iperf3("a_busy_iperf3_server_is_a_refusal") {
        return;
    }
    let (mut srv, port) = peer_listening("iperf3 -s", |port| {
        let mut c = Command::new("iperf3");
        c.args(["-s", "--forceflush", "-B", "127.0.0.1"])
            .args(["-p", &port.to_string()])
            .stdout(Stdio::piped());
        c
    });
    let p = port.to_string();
    let _first = Proc(
        Command::new("iperf3")
            .args(["-c", "127.0.0.1", "-p", &p, "-t", "5", "-b", "1M"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The server says so once the first test is in.
    let mut lines = BufReader::new(srv.0.stdout.take().unwrap()).lines();
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("Accepted connection")),
        "iperf3 -s never accepted the first client"
    );
    let target = format!("127.0.0.1:{port}");
    let out = netrig(&["tcp", "--iperf3", &target, "-t", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("busy"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// iperf3 3.12 ends a test over its `--server-bitrate-limit` by closing
/// the control connection (no SERVER_ERROR): a network error, said so.
#[test]
fn an_iperf3_server_ending_the_test_early_is_a_clear_error() {
    if !have_iperf3("an_iperf3_server_ending_the_test_early_is_a_clear_error") {
        return;
    }
    let (srv, port) = iperf3_server(&["--server-bitrate-limit", "1M"]);
    let target = format!("127.0.0.1:{port}");
    let out = netrig(&["udp", "--iperf3", &target, "-t", "1", "-b", "50M"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("closed the control connection"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    drop(srv);
}

#[test]
fn junk_from_a_fake_server_is_a_clear_error() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut cookie = [0u8; 37];
        s.read_exact(&mut cookie).unwrap();
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        cookie
    });
    let target = addr.to_string();
    let out = netrig(&["tcp", "--iperf3", &target, "-t", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("not an iperf3 server"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // What it sent first was a cookie iperf3's server would take.
    let cookie = fake.join().unwrap();
    assert!(netrig::protocol::iperf3::Cookie::parse(&cookie).is_ok());
}

#[test]
fn options_iperf3_cannot_be_given_are_refused() {
    for (args, flag) in [
        (&["tcp", "--verify", "data"][..], "--verify data"),
        (&["tcp", "--pattern", "pushpull"][..], "--pattern pushpull"),
        (&["tcp", "--iterations", "2"][..], "--iterations"),
        (&["tcp", "-t", "1500ms"][..], "-t with a fraction"),
        (&["udp", "--synced"][..], "--synced"),
        (&["udp", "--gap", "1ms"][..], "--gap"),
        (&["udp", "--bidir"][..], "--bidir"),
        // What both commands refuse alike.
        (&["tcp", "-O", "1"][..], "-O"),
        (&["udp", "-O", "1"][..], "-O"),
        (&["udp", "-t", "1500ms"][..], "-t with a fraction"),
        (&["udp", "--json-stream", "x.jsonl"][..], "--json-stream"),
    ] {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--iperf3", "127.0.0.1:9"]);
        let out = netrig(&all).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains("--iperf3"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// Both ends netrig: the client's iperf3 side against the server's
/// (`serve --iperf3-port`), counts equal in the client's report and the
/// server's log.
#[test]
fn netrig_client_against_netrig_serve_iperf3_port() {
    let mut proc = Proc(
        netrig(&["serve", "--listen", "127.0.0.1:0", "--iperf3-port", "0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(proc.0.stdout.take().unwrap());
    let mut port = None;
    for _ in 0..4 {
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        if let Some(r) = l.split("iperf3 clients served on ").nth(1) {
            let a: std::net::SocketAddr = r.split_whitespace().next().unwrap().parse().unwrap();
            port = Some(a.port());
            break;
        }
    }
    let target = format!(
        "127.0.0.1:{}",
        port.expect("the server names its iperf3 port")
    );
    let (tcp, _) = run_json(&["tcp", "--iperf3", &target, "-t", "1", "-P", "2", "-R"], 0);
    let got = n(&tcp["result"]["totals"]["received"]);
    assert!(got > 0);
    assert_eq!(got, n(&tcp["result"]["servers"][0][1]["bytes_sent"]));
    let (udp, _) = run_json(&["udp", "--iperf3", &target, "-t", "1", "-b", "8M"], 0);
    let r = &udp["result"];
    assert_eq!(n(&r["totals"]["sent"]), n(&r["sender"]["packets"]));
    assert_eq!(n(&r["totals"]["bytes"]), n(&r["sender"]["bytes"]));
    // The server's log says what it sent and received, as the client does.
    let want = [
        format!("sent {got} bytes"),
        format!("received {} bytes", n(&r["sender"]["bytes"])),
    ];
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    while !want
        .iter()
        .all(|w| seen.iter().any(|l: &String| l.contains(w.as_str())))
    {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) => seen.push(l),
            Err(_) => panic!("the server's log lacks {want:?}: {seen:?}"),
        }
    }
}
