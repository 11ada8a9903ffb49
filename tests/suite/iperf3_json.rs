//! `--json-iperf3`: real `iperf3 -J` output and netrig's, side by side,
//! through one small reader of the fields tools built on iperf3 read
//! (k8s-netperf: `end.sum_sent.retransmits`,
//! `end.sum_received.bits_per_second`, `end.sum.lost_percent`; scripts:
//! `start.test_start`, `intervals[].sum`). Both must parse, with sane values.

use serde_json::Value;
use std::process::{Command, Stdio};

use crate::bin;
use bin::*;

/// What a dashboard takes from an iperf3 document.
#[derive(Debug)]
struct Read {
    protocol: String,
    sent_bytes: u64,
    sent_bps: f64,
    retransmits: Option<u64>,
    received_bps: f64,
    lost_percent: Option<f64>,
    jitter_ms: Option<f64>,
    interval_bps: Vec<f64>,
    /// `--bidir`: the reverse direction's received rate and loss.
    reverse_received_bps: Option<f64>,
    reverse_lost_percent: Option<f64>,
    /// `end.streams`, and which of them the client sent.
    streams: usize,
    senders: usize,
}

fn read(doc: &Value) -> Result<Read, String> {
    let num = |p: &str| {
        doc.pointer(p)
            .and_then(Value::as_f64)
            .ok_or(format!("no {p}"))
    };
    let end = |p: &str| num(&format!("/end/{p}"));
    let udp = doc
        .pointer("/start/test_start/protocol")
        .and_then(Value::as_str)
        == Some("UDP");
    Ok(Read {
        protocol: doc
            .pointer("/start/test_start/protocol")
            .and_then(Value::as_str)
            .ok_or("no protocol")?
            .to_string(),
        sent_bytes: doc
            .pointer("/end/sum_sent/bytes")
            .and_then(Value::as_u64)
            .ok_or("no sum_sent.bytes")?,
        sent_bps: end("sum_sent/bits_per_second")?,
        retransmits: if udp {
            None
        } else {
            Some(
                doc.pointer("/end/sum_sent/retransmits")
                    .and_then(Value::as_u64)
                    .ok_or("no retransmits")?,
            )
        },
        received_bps: end("sum_received/bits_per_second")?,
        lost_percent: if udp {
            Some(end("sum/lost_percent")?)
        } else {
            None
        },
        jitter_ms: if udp {
            Some(end("sum/jitter_ms")?)
        } else {
            None
        },
        interval_bps: doc["intervals"]
            .as_array()
            .ok_or("no intervals")?
            .iter()
            .map(|i| {
                i.pointer("/sum/bits_per_second")
                    .and_then(Value::as_f64)
                    .ok_or("no interval rate".to_string())
            })
            .collect::<Result<_, _>>()?,
        reverse_received_bps: end("sum_received_bidir_reverse/bits_per_second").ok(),
        reverse_lost_percent: end("sum_bidir_reverse/lost_percent").ok(),
        streams: doc["end"]["streams"].as_array().map_or(0, Vec::len),
        senders: (doc["end"]["streams"].as_array().into_iter().flatten())
            .filter(|s| {
                s.pointer("/udp/sender").or(s.pointer("/sender/sender")) == Some(&true.into())
            })
            .count(),
    })
}

fn sane(r: &Read, protocol: &str, who: &str) {
    assert_eq!(r.protocol, protocol, "{who}");
    assert_eq!(r.retransmits.is_some(), protocol == "TCP", "{who}: {r:?}");
    assert!(
        r.sent_bytes > 0 && r.sent_bps > 0.0 && r.received_bps > 0.0,
        "{who}: {r:?}"
    );
    // Rate-limited runs: nowhere near a wrong unit (×8, ×1000).
    assert!(r.sent_bps < 1e9 && r.received_bps < 1e9, "{who}: {r:?}");
    assert!(r.received_bps <= r.sent_bps * 1.1, "{who}: {r:?}");
    if let Some(l) = r.lost_percent {
        assert!((0.0..=100.0).contains(&l), "{who}: {r:?}");
    }
    if let Some(j) = r.jitter_ms {
        assert!((0.0..1000.0).contains(&j), "{who}: {r:?}");
    }
    assert!(
        !r.interval_bps.is_empty() && r.interval_bps.iter().all(|b| *b >= 0.0),
        "{who}: {r:?}"
    );
}

fn iperf3_installed() -> bool {
    let ok = Command::new("iperf3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install iperf3 (.ci/run does)"
        );
        eprintln!("skipped: iperf3 is not installed");
    }
    ok
}

/// A real iperf3 server on loopback (it serves one test at a time, so the
/// tests' clients take turns).
fn iperf3_server() -> (Proc, String) {
    let (server, port) = peer_listening("iperf3 -s", |port| {
        let mut c = Command::new("iperf3");
        c.args(["-s", "-B", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    });
    (server, port.to_string())
}

/// A real `iperf3 -J` client run of one second.
fn iperf3(port: &str, args: &[&str]) -> Value {
    // A loaded host once gave a document without `start.test_start` (the
    // iperf3 server still busy with the previous client's test): that is
    // iperf3's, not what is tested here, so such a run is tried again, and
    // the document shown if it stays so.
    let mut last = Value::Null;
    for _ in 0..3 {
        let out = Command::new("iperf3")
            .args(["-c", "127.0.0.1", "-p", port, "-J", "-t", "1"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        last = serde_json::from_slice(&out.stdout).unwrap();
        if last.pointer("/start/test_start").is_some() && last.get("error").is_none() {
            return last;
        }
        eprintln!("iperf3 {args:?} ran no test, tried again: {last}");
    }
    panic!("iperf3 {args:?} ran no test in 3 tries: {last}")
}

fn netrig_iperf3(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("i.json");
    let mut a = args.to_vec();
    a.extend(["-q", "--json-iperf3", p.to_str().unwrap()]);
    run_expect(&a, 0);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// iperf3's run against its server and netrig's against its own, side by
/// side (they share nothing): (iperf3's document, netrig's).
fn side_by_side(port: &str, theirs: &[&str], ours: &[&str]) -> (Value, Value) {
    std::thread::scope(|s| {
        let n = s.spawn(|| netrig_iperf3(ours));
        let i = iperf3(port, theirs);
        let n = n.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        (i, n)
    })
}

#[test]
fn iperf3_and_netrig_documents_read_alike() {
    if !iperf3_installed() {
        return;
    }
    let (_server, addr) = serve(&[]);
    let (_iperf3, port) = iperf3_server();
    let t = addr.to_string();
    for (theirs, ours, protocol) in [
        (
            vec!["-b", "50M", "-P", "2"],
            vec!["tcp", t.as_str(), "-t", "1", "-b", "25M", "-P", "2"],
            "TCP",
        ),
        (
            vec!["-b", "50M", "-R"],
            vec!["tcp", t.as_str(), "-t", "1", "-b", "50M", "-R"],
            "TCP",
        ),
        (
            vec!["-u", "-b", "10M"],
            vec!["udp", t.as_str(), "-t", "1", "-b", "10M"],
            "UDP",
        ),
    ] {
        let (i, n) = side_by_side(&port, &theirs, &ours);
        sane(
            &read(&i).unwrap_or_else(|e| panic!("iperf3 {theirs:?}: {e}")),
            protocol,
            "iperf3",
        );
        sane(
            &read(&n).unwrap_or_else(|e| panic!("netrig {ours:?}: {e}\n{n}")),
            protocol,
            "netrig",
        );
    }
}

#[test]
fn udp_streams_and_bidir_read_as_real_iperf3_writes_them() {
    if !iperf3_installed() {
        return;
    }
    let (_server, addr) = serve(&[]);
    let (_iperf3, port) = iperf3_server();
    let t = addr.to_string();
    for (theirs, ours, streams, senders) in [
        (
            vec!["-u", "-b", "2M", "-P", "2"],
            vec!["udp", t.as_str(), "-t", "1", "-b", "2M", "-P", "2"],
            2,
            2,
        ),
        (
            vec!["-u", "-b", "2M", "-P", "2", "-R"],
            vec!["udp", t.as_str(), "-t", "1", "-b", "2M", "-P", "2", "-R"],
            2,
            0,
        ),
        (
            vec!["-u", "-b", "2M", "--bidir"],
            vec!["udp", t.as_str(), "-t", "1", "-b", "2M", "--bidir"],
            2,
            1,
        ),
    ] {
        let (i, n) = side_by_side(&port, &theirs, &ours);
        let i = read(&i).unwrap_or_else(|e| panic!("iperf3 {theirs:?}: {e}"));
        let n = read(&n).unwrap_or_else(|e| panic!("netrig {ours:?}: {e}\n{n}"));
        for (r, who) in [(&i, "iperf3"), (&n, "netrig")] {
            sane(r, "UDP", who);
            assert_eq!(
                (r.streams, r.senders),
                (streams, senders),
                "{who}: {theirs:?}"
            );
            let bidir = theirs.contains(&"--bidir");
            assert_eq!(r.reverse_received_bps.is_some(), bidir, "{who}: {r:?}");
            assert_eq!(r.reverse_lost_percent.is_some(), bidir, "{who}: {r:?}");
            if let Some(bps) = r.reverse_received_bps {
                assert!(bps > 0.0 && bps < 1e9, "{who}: {r:?}");
            }
        }
    }
}

/// The field names of the object at `pointer` in `doc`.
fn keys(doc: &Value, pointer: &str) -> Vec<String> {
    let mut k: Vec<String> = doc
        .pointer(pointer)
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("no object at {pointer}: {doc}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

#[test]
fn udp_bidir_intervals_and_cpu_have_real_iperf3s_fields() {
    if !iperf3_installed() {
        return;
    }
    let (_server, addr) = serve(&[]);
    let (_iperf3, port) = iperf3_server();
    let t = addr.to_string();
    let (theirs, ours) = side_by_side(
        &port,
        &["-u", "-b", "2M", "--bidir"],
        &["udp", t.as_str(), "-t", "1", "-b", "2M", "--bidir"],
    );
    for pointer in [
        "/intervals/0/sum",
        "/intervals/0/sum_bidir_reverse",
        "/end/cpu_utilization_percent",
    ] {
        assert_eq!(keys(&ours, pointer), keys(&theirs, pointer), "{pointer}");
    }
    // The receiving stream's interval row, as iperf3's (not its `sender`).
    let receiving = |doc: &Value| {
        let streams = doc["intervals"][0]["streams"].as_array().unwrap();
        let i = streams.iter().position(|s| s["sender"] == false).unwrap();
        keys(doc, &format!("/intervals/0/streams/{i}"))
    };
    assert_eq!(receiving(&ours), receiving(&theirs));
    let jitter = ours["intervals"][0]["sum_bidir_reverse"]["jitter_ms"].as_f64();
    assert!(jitter.is_some_and(|j| j >= 0.0), "{ours}");
    // The client receiving every stream (-R): its interval sums are a receiver's too.
    let (theirs, ours) = side_by_side(
        &port,
        &["-u", "-b", "2M", "-P", "2", "-R"],
        &["udp", t.as_str(), "-t", "1", "-b", "2M", "-P", "2", "-R"],
    );
    for pointer in ["/intervals/0/sum", "/intervals/0/streams/0"] {
        assert_eq!(keys(&ours, pointer), keys(&theirs, pointer), "-R {pointer}");
    }
    let ours = netrig_iperf3(&["udp", t.as_str(), "-t", "1", "-b", "2M", "-P", "2"]);
    let host = ours["end"]["cpu_utilization_percent"]["host_total"].as_f64();
    assert!(host.is_some_and(|c| c > 0.0), "{}", ours["end"]);
}

#[test]
fn iperf3_json_is_for_steady_tcp_and_udp_only() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("i.json");
    let o = netrig(&[
        "udp",
        "--profile",
        "p.csv",
        "--json-iperf3",
        p.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--json-iperf3 covers steady UDP streams"));
    let o = netrig(&["ping", "--json-iperf3", "x"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "ping has no such flag");
}
