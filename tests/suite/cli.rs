//! The `netrig` binary as a user runs it: default run, a separate server that
//! survives hostile input and killed clients, output files under Ctrl-C, exit
//! codes and usage errors.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netrig::protocol::proto::{self, ErrorCode, Message};

use crate::bin;
use bin::*;

fn reply_to(addr: SocketAddr, bytes: &[u8]) -> Option<Message> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(bytes);
    proto::read_message(&mut s).ok()
}

fn code_of(m: Option<Message>) -> Option<ErrorCode> {
    match m {
        Some(Message::Error { code, .. }) => Some(code),
        _ => None,
    }
}

/// What a server owes a client that sent `bytes` as its first frame.
#[derive(Debug, PartialEq)]
enum Answer {
    /// An error frame with this code.
    Error(ErrorCode),
    /// The hello is acknowledged.
    HelloAck,
    /// Nothing: the frame is incomplete, so the server closes at its
    /// handshake timeout.
    Close,
}

fn expected_answer(bytes: &[u8]) -> Answer {
    // A first frame longer than a server reads from a stranger is refused
    // on its header.
    if let Some(h) = bytes.first_chunk::<{ proto::HEADER_LEN }>()
        && proto::parse_header(h).is_ok_and(|len| len > proto::MAX_FIRST_PAYLOAD)
    {
        return Answer::Error(ErrorCode::Malformed);
    }
    match proto::decode_frame(bytes) {
        Err(_) => Answer::Error(ErrorCode::Malformed),
        Ok(None) => Answer::Close,
        Ok(Some((Message::Hello(h), _))) if h.protocol == proto::PROTOCOL_VERSION => {
            Answer::HelloAck
        }
        Ok(Some((Message::Hello(_), _))) => Answer::Error(ErrorCode::UnsupportedVersion),
        Ok(Some((Message::DataHello(_), _))) => Answer::Error(ErrorCode::UnknownSession),
        Ok(Some(_)) => Answer::Error(ErrorCode::UnexpectedMessage),
    }
}

fn answer_to(addr: SocketAddr, bytes: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(bytes);
    match proto::read_message(&mut s) {
        Ok(Message::Error { code, .. }) => Answer::Error(code),
        Ok(Message::HelloAck(_)) => Answer::HelloAck,
        Err(proto::ReadError::Eof) => Answer::Close,
        other => panic!("unexpected answer {other:?}"),
    }
}

fn run_ok(target: &str, extra: &[&str]) -> String {
    let mut args = vec!["tcp", target, "--interval", "100ms"];
    args.extend_from_slice(extra);
    let out = netrig(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every connection asked for succeeded.
    let flag = |name: &str| {
        extra
            .iter()
            .position(|a| *a == name)
            .map_or(1, |i| extra[i + 1].parse::<u64>().unwrap())
    };
    let want = format!(
        "SuccessfulConnections [{}] NetworkErrors [0] DataErrors [0]",
        flag("-c") * flag("--iterations")
    );
    assert!(stdout.contains(&want), "{args:?}: {stdout}");
    stdout
}

#[test]
fn default_run_needs_no_setup() {
    // Exactly the README's first command: embedded loopback server, defaults.
    let out = netrig(&["tcp"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(
        "TimeSlice           Send           Recv In-Flight Completed NetError DataError"
    ));
    assert!(
        stdout.contains("SuccessfulConnections [8] NetworkErrors [0] DataErrors [0]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("received and verified 8589934592 bytes"),
        "{stdout}"
    );
}

#[test]
fn server_survives_garbage_and_answers_with_reasons() {
    let (srv, addr) = serve(&["--handshake-timeout", "300ms", "-v", "0"]);
    let pid = srv.0.id();
    // One good test first so lazily created state is in the baseline.
    run_ok(
        &addr.to_string(),
        &["--transfer", "64K", "-c", "2", "--iterations", "1"],
    );
    let baseline = fd_count(pid);

    assert_eq!(
        code_of(reply_to(addr, b"GET / HTTP/1.1\r\n\r\n")),
        Some(ErrorCode::Malformed)
    );
    let mut big = b"NR\x01\x00".to_vec();
    big.extend_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(code_of(reply_to(addr, &big)), Some(ErrorCode::Malformed));
    let mut hello = proto::Message::hello();
    hello.protocol = 99;
    let m = reply_to(addr, &proto::encode(&Message::Hello(hello)));
    assert_eq!(
        code_of(m.clone()),
        Some(ErrorCode::UnsupportedVersion),
        "{m:?}"
    );
    let stray = Message::DataHello(proto::DataHello {
        session: uuid::Uuid::new_v4(),
        connection: uuid::Uuid::new_v4(),
        buffer: 1024,
        compact: false,
        proof: None,
    });
    assert_eq!(
        code_of(reply_to(addr, &proto::encode(&stray))),
        Some(ErrorCode::UnknownSession)
    );
    assert_eq!(
        code_of(reply_to(addr, &proto::encode(&Message::Goodbye))),
        Some(ErrorCode::UnexpectedMessage)
    );

    // A client that connects and says nothing is dropped after the handshake timeout.
    let mut silent = TcpStream::connect(addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let t0 = Instant::now();
    assert_eq!(silent.read(&mut [0u8; 16]).unwrap_or(0), 0);
    assert!(t0.elapsed() < Duration::from_secs(4));

    // Random and mutated frames: each gets exactly the answer its bytes call
    // for, as the protocol's own decoder reads them.
    let mut seed = 0x1234_5678_u64;
    let valid = proto::encode(&Message::Hello(proto::Message::hello()));
    let mut seen = std::collections::BTreeMap::<String, u32>::new();
    // A hello that says it is longer than it is waits for the rest (and is
    // closed at the deadline); one longer than a stranger may send is
    // refused on its header.
    let declared = |len: usize| {
        let mut b = valid.clone();
        b[4..8].copy_from_slice(&(len as u32).to_be_bytes());
        b
    };
    let payload = valid.len() - proto::HEADER_LEN;
    for b in [
        declared(payload + 1),
        declared(proto::MAX_FIRST_PAYLOAD + 1),
    ] {
        let want = expected_answer(&b);
        assert_eq!(answer_to(addr, &b), want, "{b:?}");
        *seen.entry(format!("{want:?}")).or_default() += 1;
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    for i in 0..300 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut b = if i % 2 == 0 {
            valid.clone()
        } else {
            seed.to_le_bytes().repeat(3)
        };
        let at = (seed as usize) % b.len();
        b[at] ^= (seed >> 8) as u8 | 1;
        let want = expected_answer(&b);
        let got = answer_to(addr, &b);
        assert_eq!(got, want, "frame {i}: {b:?}");
        *seen.entry(format!("{want:?}")).or_default() += 1;
    }
    // The mutations reach every kind of answer, so each branch was checked.
    assert!(seen.len() >= 3, "{seen:?}");
    run_ok(
        &addr.to_string(),
        &["--transfer", "1M", "-c", "4", "--iterations", "2"],
    );
    let after = settles_to(pid, baseline, 10);
    assert!(
        after <= baseline,
        "server fds {after} > baseline {baseline}"
    );
}

#[test]
fn killed_clients_leave_the_server_serving() {
    let (srv, addr) = serve(&["-v", "0"]);
    let pid = srv.0.id();
    run_ok(
        &addr.to_string(),
        &["--transfer", "64K", "-c", "2", "--iterations", "1"],
    );
    let baseline = fd_count(pid);
    for pattern in ["push", "pull", "duplex"] {
        // Killed once data is flowing (a status row is out).
        let t = addr.to_string();
        let args = ["tcp", &t, "--pattern", pattern, "--interval", "100ms"];
        let (mut p, _) = spawn_after_rows(&args, 1, 10);
        p.0.kill().unwrap(); // SIGKILL: no goodbye, no stop.
        let _ = p.0.wait();
    }
    let out = run_ok(
        &addr.to_string(),
        &["--transfer", "4M", "-c", "4", "--iterations", "2"],
    );
    assert!(out.contains("SuccessfulConnections [8]"), "{out}");
    let after = settles_to(pid, baseline, 10);
    assert!(
        after <= baseline,
        "server fds {after} > baseline {baseline}"
    );
}

fn csv_rows(path: &std::path::Path) -> Vec<csv::StringRecord> {
    let mut r = csv::Reader::from_path(path).unwrap();
    r.records()
        .map(|x| x.expect("every CSV row parses"))
        .collect()
}

#[test]
fn sigint_stops_gracefully_with_complete_files() {
    let (_srv, addr) = serve(&["-v", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let (st, cn, js) = (
        dir.path().join("s.csv"),
        dir.path().join("c.csv"),
        dir.path().join("r.json"),
    );
    let t = addr.to_string();
    // Interrupted once five status rows are out.
    let (mut p, _) = spawn_after_rows(
        &[
            "tcp",
            &t,
            "-c",
            "3",
            "--transfer",
            "1T",
            "--interval",
            "100ms",
            "--status-file",
            st.to_str().unwrap(),
            "--connection-file",
            cn.to_str().unwrap(),
            "--json",
            js.to_str().unwrap(),
        ],
        5,
        20,
    );
    let pid = p.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = p.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "interrupted exit code");

    let rows = csv_rows(&st);
    assert!(rows.len() >= 5, "status rows: {}", rows.len());
    assert!(rows.iter().all(|r| r.len() == 7));
    let conns = csv_rows(&cn);
    assert_eq!(conns.len(), 3);
    assert!(
        conns.iter().all(|r| r.len() == 13 && &r[9] == "Cancelled"),
        "{conns:?}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    assert_eq!(doc["result"]["totals"]["cancelled"], 3);
    assert_eq!(doc["result"]["interrupted"], true);
    assert_eq!(doc["config"]["connections"], 3);
    assert!(doc["result"]["intervals"].as_array().unwrap().len() >= 5);
}

#[test]
fn text_files_are_aligned_tables() {
    let dir = tempfile::tempdir().unwrap();
    let cn = dir.path().join("conns.txt");
    let out = netrig(&[
        "tcp",
        "--transfer",
        "1M",
        "-c",
        "2",
        "-v",
        "0",
        "--connection-file",
        cn.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(out.status.success());
    let text = std::fs::read_to_string(&cn).unwrap();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].trim_start().starts_with("TimeSlice"));
    assert!(lines[1..].iter().all(|l| l.contains("Succeeded")));
}

#[test]
fn exit_after_stops_the_server() {
    let (mut srv, addr) = serve(&["--exit-after", "4", "-v", "0"]);
    run_ok(
        &addr.to_string(),
        &["--transfer", "1M", "-c", "2", "--iterations", "2"],
    );
    let t0 = Instant::now();
    loop {
        if let Some(st) = srv.0.try_wait().unwrap() {
            assert!(st.success());
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn server_killed_mid_test_is_a_network_error_with_complete_json() {
    let (mut srv, addr) = serve(&["-v", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("r.json");
    let t = addr.to_string();
    // The server dies once data is flowing.
    let (mut c, _) = spawn_after_rows(
        &[
            "tcp",
            &t,
            "-c",
            "2",
            "--interval",
            "100ms",
            "--json",
            js.to_str().unwrap(),
        ],
        1,
        20,
    );
    srv.0.kill().unwrap();
    let status = wait_exit(&mut c, 20);
    assert_eq!(status.code(), Some(3), "network error exit code");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    assert!(doc["result"]["totals"]["net_errors"].as_u64().unwrap() >= 2);
}

#[test]
fn bad_usage_is_explained() {
    for (args, needle) in [
        (vec!["tcp", "--buffer", "[2K,1K]"], "buffer"),
        (vec!["tcp", "--transfer", "5X"], "unknown unit"),
        (vec!["tcp", "--pattern", "sideways"], "sideways"),
        (vec!["tcp", "--interval", "0"], "at least 100ms"),
        (vec!["tcp", "-P", "0"], "--parallel"),
        (
            vec![
                "tcp",
                "--pattern",
                "duplex",
                "--burst-size",
                "1M",
                "--burst-period",
                "1s",
            ],
            "bursts need --pattern push or pull",
        ),
    ] {
        let out = netrig(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let out = netrig(&["tcp", "127.0.0.1:1", "-v", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "unreachable server");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach 127.0.0.1:1"));
}

#[test]
fn a_request_no_server_would_run_is_a_usage_error_before_connecting() {
    // The server's own spec check, made by the client: exit 2 naming the
    // bound, not "cannot reach" (exit 3) or a server's refusal (exit 5).
    for (args, needle) in [
        (
            vec!["rr", "127.0.0.1:1", "--size", "20000000"],
            "1..=16777216 bytes for tcp",
        ),
        (
            vec!["rr", "127.0.0.1:1", "--proto", "udp", "--size", "70000"],
            "1..=65475 bytes for udp",
        ),
    ] {
        let out = netrig(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("cannot reach"), "{args:?}: {err}");
    }
}

#[test]
fn closed_stdout_neither_panics_nor_loses_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("r.json");
    for sub in [
        vec!["tcp", "--transfer", "4M", "--interval", "100ms"],
        vec!["udp", "-d", "500ms", "--interval", "100ms"],
    ] {
        let mut args = sub.clone();
        args.extend(["--json", js.to_str().unwrap()]);
        let mut child = netrig(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // like `netrig ... | head -0`
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{sub:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{sub:?}: {err}");
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
        assert_eq!(doc["test"], sub[0]);
    }
}

#[test]
fn udp_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (st, jf, js) = (
        dir.path().join("s.csv"),
        dir.path().join("j.csv"),
        dir.path().join("u.json"),
    );
    let out = netrig(&[
        "udp",
        "--json",
        js.to_str().unwrap(),
        "-R",
        "--rate",
        "20M",
        "--size",
        "1200",
        "-d",
        "1s",
        "--interval",
        "250ms",
        "--status-file",
        st.to_str().unwrap(),
        "--jitter-file",
        jf.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("lost 0 (0.000%)"), "{stdout}");
    assert!(stdout.contains("offset estimated in band"), "{stdout}");
    assert!(stdout.contains("Delay percentiles (us): p50"), "{stdout}");
    let rows = csv_rows(&st);
    assert!(rows.len() >= 4 && rows.iter().all(|r| r.len() == 13));
    // One row per datagram received, and on loopback every datagram sent is
    // received. (How many were sent depends on how often this shared host
    // stalled the sender: missed slots are skipped, not burst; the sender
    // says how many it skipped against what was asked.)
    let packets = csv_rows(&jf);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    let received = doc["result"]["totals"]["packets"].as_u64().unwrap();
    assert_eq!(packets.len() as u64, received);
    let sender = &doc["result"]["sender"];
    assert_eq!(sender["packets"].as_u64(), Some(received), "{sender}");
    assert_eq!(sender["bytes"].as_u64(), Some(received * 1200), "{sender}");
    // The rate travels as asked, beside the gap it gives (480 µs).
    let spec = &doc["config"]["spec"];
    assert_eq!(
        (spec["rate_bps"].as_u64(), spec["gap_ps"].as_u64()),
        (Some(20_000_000), Some(480_000_000)),
        "{spec}"
    );
    // 20 Mbit/s of 1200-byte datagrams for 1 s asks for 2083.
    let asked = sender["asked_bytes"].as_u64().unwrap() / 1200;
    assert!((2083..=2085).contains(&asked), "{sender}");
    // Fewer only if this host stalled the sender, and then it says so.
    let short = ((received * 1200) as f64) < sender["asked_bytes"].as_f64().unwrap() * 0.99;
    assert_eq!(sender["sender_limited"], short, "{sender}");
    assert!(
        received * 2 >= asked,
        "{received} of {asked} datagrams: {sender}"
    );
    for (args, needle) in [
        (vec!["udp", "--size", "10"], "-l/--length must be"),
        (
            vec!["udp", "--jitter-file", "x.csv"],
            "needs --reverse or --media",
        ),
        (vec!["udp", "--rate", "0"], "greater than zero"),
        (vec!["udp", "--media", "--bitrate", "1k"], "media frame"),
        (
            vec!["udp", "--rate", "1M", "--gap", "1ms"],
            "cannot be used with",
        ),
    ] {
        let out = netrig(&args).output().unwrap();
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn udp_sigint_keeps_what_was_measured() {
    let (_srv, addr) = serve(&["-v", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("u.json");
    for reverse in [false, true] {
        let mut args = vec![
            "udp",
            "--rate",
            "10M",
            "-d",
            "30s",
            "--interval",
            "250ms",
            "--json",
            js.to_str().unwrap(),
        ];
        let target = addr.to_string();
        args.insert(1, &target);
        if reverse {
            args.push("-R");
        }
        // Interrupted after four 250 ms rows: at least 1 s of the stream.
        let (mut p, _) = spawn_after_rows(&args, 4, 20);
        sigint(p.0.id());
        let t0 = Instant::now();
        let status = p.0.wait().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "stopped promptly");
        assert_eq!(status.code(), Some(130));
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
        let unique = doc["result"]["totals"]["unique"].as_u64().unwrap();
        let sender = &doc["result"]["sender"];
        let sent = sender["packets"].as_u64().unwrap();
        // 10 Mbit/s of 1000-byte datagrams is 1250 a second. A paced sender
        // never sends ahead of its schedule; on a busy host it may fall
        // behind, and then it must say so (sender-limited: over 1% short).
        let secs = sender["duration_secs"].as_f64().unwrap();
        assert!(secs >= 1.0, "reverse={reverse}: {sender}");
        let asked = sender["asked_bytes"].as_u64().unwrap() / 1000;
        assert!(
            (asked as f64 - 1250.0 * secs).abs() <= 1250.0 * 0.01 + 2.0,
            "reverse={reverse}: {asked} asked in {secs} s: {sender}"
        );
        assert!(sent <= asked + 1, "reverse={reverse}: {sender}");
        let asked_bytes = sender["asked_bytes"].as_u64().unwrap();
        let short = ((sent * 1000) as f64) < asked_bytes as f64 * 0.99;
        assert_eq!(
            sender["sender_limited"], short,
            "reverse={reverse}: {sender}"
        );
        assert!(sent * 2 >= asked, "reverse={reverse}: {sender}");
        assert_eq!(sender["bytes"].as_u64(), Some(sent * 1000));
        assert_eq!(unique, sent, "reverse={reverse}: every datagram arrived");
        assert_eq!(doc["result"]["interrupted"], true);
    }
}

#[test]
fn server_limits_refuse_with_the_reason() {
    let (_srv, addr) = serve(&["-v", "0", "--max-rate", "10M", "--max-duration", "5s"]);
    let target = addr.to_string();
    for (args, needle) in [
        (
            vec!["udp", &target, "--rate", "100M", "-d", "1s"],
            "server limit: max rate 10.00 Mbit/s",
        ),
        (
            vec!["udp", &target, "--rate", "1M", "-d", "1m"],
            "server limit: max duration 5 s",
        ),
    ] {
        let out = netrig(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{args:?}: refused exit code");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Within the limits the same server runs the test.
    let out = netrig(&["udp", &target, "--rate", "5M", "-d", "500ms", "-v", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn udp_bind_dev() {
    let out = netrig(&["udp", "--bind-dev", "nosuchdev0", "-d", "200ms"])
        .output()
        .unwrap();
    // An interface the host lacks is a usage error before anything starts.
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--bind-dev") && err.contains("nosuchdev0"),
        "{err}"
    );
    let (v, _) = run_json(&["udp", "--bind-dev", "lo", "-d", "300ms", "-v", "0"], 0);
    assert_eq!(v["config"]["bind_dev"], "lo");
    let (t, sender) = (&v["result"]["totals"], &v["result"]["sender"]);
    assert!(t["unique"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(
        t["unique"], sender["packets"],
        "every datagram arrived: {t}"
    );
    assert_eq!(t["lost"], 0, "{t}");
}

#[test]
fn udp_profile_files() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "# t rate size\n0 1M 500\n1s fast 500\n").unwrap();
    let out = netrig(&["udp", "--profile", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.txt: line 3: rate"), "{err}");
    let good = dir.path().join("ramp.txt");
    std::fs::write(&good, "0; 1M; 200\n600ms, 5M, 800\n").unwrap();
    // Catch-up: a stall on this shared machine delays datagrams instead of dropping them from the schedule.
    let (doc, _) = run_json(
        &[
            "udp",
            "--profile",
            good.to_str().unwrap(),
            "--catch-up",
            "-v",
            "0",
        ],
        0,
    );
    // Ramp 1 -> 5 Mbit/s over 0.6 s: 225,000 bytes.
    let bytes = doc["result"]["sender"]["bytes"].as_f64().unwrap();
    assert!((bytes - 225_000.0).abs() < 2_500.0, "{bytes}");
    assert_eq!(doc["result"]["totals"]["lost"], 0);
    // Precomputed, server to client, per-datagram rows held in memory and written at the end.
    let jf = dir.path().join("rows.csv");
    let (doc, _) = run_json(
        &[
            "udp",
            "-R",
            "--precompute",
            "--profile",
            good.to_str().unwrap(),
            "-v",
            "0",
            "--jitter-file",
            jf.to_str().unwrap(),
        ],
        0,
    );
    let packets = doc["result"]["totals"]["packets"].as_u64().unwrap();
    assert_eq!(csv_rows(&jf).len() as u64, packets);
}

#[test]
fn relay_binary_random_impairments_match_udp_reports_both_ways() {
    let (_srv, srv_addr) = serve(&["-v", "0"]);
    let dir = tempfile::tempdir().unwrap();
    for reverse in [false, true] {
        let (js, log) = (dir.path().join("relay.json"), dir.path().join("events.csv"));
        let (p, addr) = relay(
            srv_addr,
            &[
                "--loss",
                "3%",
                "--dup",
                "2%",
                "--reorder",
                "2%",
                "--corrupt",
                "2%",
                "--seed",
                "7",
                "--json",
                js.to_str().unwrap(),
                "--log",
                log.to_str().unwrap(),
            ],
        );
        let port = addr.port().to_string();
        let mut args = vec![
            "udp",
            "127.0.0.1",
            "-p",
            &port,
            "--rate",
            "8Mbit",
            "--size",
            "500",
            "-d",
            "1",
            "-v",
            "0",
        ];
        if reverse {
            args.push("-R");
        }
        // Corrupt datagrams make it a data error (exit 4).
        let (doc, _) = run_json(&args, 4);
        let (code, _) = interrupt(p);
        assert_eq!(code, Some(130));
        let relay: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&js).unwrap()).unwrap();
        let c = &relay["result"][if reverse { "down" } else { "up" }];
        let t = &doc["result"]["totals"];
        for (ours, theirs) in [
            ("lost", "lost"),
            ("duplicated", "duplicates"),
            ("reordered", "reordered"),
            ("corrupted", "corrupt"),
        ] {
            assert!(c[ours].as_u64().unwrap() > 5, "{ours}: {c}");
            assert_eq!(
                c[ours], t[theirs],
                "reverse={reverse} {ours}: relay {c} netrig {t}"
            );
        }
        // The log has one row per impairment.
        let rows = csv_rows(&log);
        let dir_name = if reverse { "down" } else { "up" };
        let n = |e: &str| {
            rows.iter()
                .filter(|r| &r[3] == dir_name && &r[4] == e)
                .count() as u64
        };
        assert_eq!(n("lost"), c["lost"].as_u64().unwrap());
        assert_eq!(n("corrupted"), c["corrupted"].as_u64().unwrap());
    }
}

#[test]
fn relay_binary_corruption_is_a_tcp_data_error_at_the_logged_offset() {
    let (_srv, srv_addr) = serve(&["-v", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.csv");
    let (p, addr) = relay(
        srv_addr,
        &[
            "--corrupt-every",
            "700001",
            "--dir",
            "up",
            "--log",
            log.to_str().unwrap(),
        ],
    );
    let conns = dir.path().join("conns.csv");
    let target = addr.to_string();
    let (doc, _) = run_json(
        &[
            "tcp",
            &target,
            "-c",
            "2",
            "--iterations",
            "1",
            "-n",
            "1M",
            "--connection-file",
            conns.to_str().unwrap(),
        ],
        4,
    );
    let _ = interrupt(p);
    assert_eq!(doc["result"]["totals"]["data_errors"], 2, "{doc}");
    let rows = csv_rows(&log);
    assert_eq!(rows.len(), 2, "one flip per 1 MiB connection");
    assert!(rows.iter().all(|r| r[5].is_empty() && &r[7] == "700000"));
    let details = std::fs::read_to_string(&conns).unwrap();
    assert_eq!(
        details.matches("corrupt data at offset 700000").count(),
        2,
        "{details}"
    );
}

#[test]
fn every_server_limit_refuses_with_its_name() {
    let (_srv, addr) = serve(&[
        "-v",
        "0",
        "--max-bytes",
        "1M",
        "--max-tests",
        "1",
        "--max-conns-per-client",
        "3",
    ]);
    let t = addr.to_string();
    let refused = |args: &[&str], needle: &str| {
        let out = netrig(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    };
    refused(
        &["tcp", &t, "-n", "2M", "-v", "0"],
        "server limit: max bytes per test 1048576 (asked for 2097152)",
    );
    refused(
        &[
            "tcp",
            &t,
            "-n",
            "900K",
            "-c",
            "1",
            "--iterations",
            "3",
            "-v",
            "0",
        ],
        "connection(s): server limit: max bytes per test 1048576 reached",
    );
    refused(
        &[
            "tcp",
            &t,
            "-n",
            "100K",
            "-c",
            "8",
            "--iterations",
            "1",
            // Each connection lasts at least one burst period, so the eight
            // are open at once however fast the path (fast connections
            // could otherwise end before the next ones arrive).
            "--burst-size",
            "50K",
            "--burst-period",
            "300ms",
            "-v",
            "0",
        ],
        "server limit: max 3 connections per client address",
    );
    refused(
        &[
            "rr",
            &t,
            "--size",
            "1000",
            "--iterations",
            "10000",
            "-v",
            "0",
        ],
        "server limit: max bytes per test",
    );
    // Busy once the server has accepted its test (its banner is out).
    let _busy = spawn_ready(
        &["udp", &t, "--rate", "100k", "-d", "5"],
        |l| l.starts_with("UDP client -> server"),
        10,
    );
    refused(
        &["udp", &t, "--rate", "100k", "-d", "1", "-v", "0"],
        "server limit: max 1 concurrent tests reached",
    );
}

#[test]
fn a_tcp_session_past_the_max_duration_is_stopped_at_once() {
    let (_srv, addr) = serve(&["-v", "0", "--max-duration", "1s"]);
    // The session's deadline is --max-duration plus the 5 s grace
    // (server::limits::GRACE). Reset, not wound down: the client learns of
    // it within moments of that. A one-sided bound, tried three times: a
    // busy machine may slow one run, not the stop itself.
    let mut took = Vec::new();
    for _ in 0..3 {
        let t0 = Instant::now();
        let out = netrig(&["tcp", &addr.to_string(), "-n", "1T", "-c", "2", "-v", "0"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{err}");
        assert!(
            err.contains("stopped the test: server limit: max duration 1 s reached"),
            "{err}"
        );
        took.push(t0.elapsed());
        if took[took.len() - 1] < Duration::from_secs(8) {
            return;
        }
    }
    panic!("the client took {took:?} to learn of the stop");
}

#[test]
fn a_server_with_a_key_admits_only_clients_that_prove_it() {
    let dir = tempfile::tempdir().unwrap();
    let keyfile = dir.path().join("key");
    std::fs::write(&keyfile, "a shared secret of some length\n").unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "another secret, not the same one").unwrap();
    let (_srv, addr) = serve(&["-v", "0", "--key", keyfile.to_str().unwrap()]);
    let t = addr.to_string();
    let quick = |extra: &[&str], env: Option<&str>| {
        let mut args = vec![
            "tcp",
            &t,
            "-n",
            "64K",
            "-c",
            "2",
            "--iterations",
            "1",
            "-v",
            "0",
        ];
        args.extend_from_slice(extra);
        let mut c = netrig(&args);
        c.env_remove("NETRIG_KEY");
        if let Some(k) = env {
            c.env("NETRIG_KEY", k);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = quick(&[], None);
    assert_eq!(code, Some(5), "{err}");
    assert!(
        err.contains("server requires authentication: give --key FILE or set NETRIG_KEY"),
        "{err}"
    );
    let (code, err) = quick(&["--key", wrong.to_str().unwrap()], None);
    assert_eq!(code, Some(5), "{err}");
    assert!(err.contains("authentication failed: wrong key"), "{err}");
    assert_eq!(
        quick(&["--key", keyfile.to_str().unwrap()], None).0,
        Some(0)
    );
    assert_eq!(
        quick(&[], Some("a shared secret of some length")).0,
        Some(0)
    );
    // Every kind of test authenticates the same way.
    for args in [
        vec!["udp", &t, "--rate", "1M", "-d", "300ms", "-v", "0"],
        vec!["rr", &t, "--iterations", "100", "-v", "0"],
        vec!["rr", &t, "--proto", "udp", "--iterations", "100", "-v", "0"],
    ] {
        let mut full = args.clone();
        full.extend_from_slice(&["--key", keyfile.to_str().unwrap()]);
        let out = netrig(&full).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{full:?}");
    }
    // Tagged datagrams through a corrupting relay: every altered datagram is
    // rejected (counted corrupt, never received), in both directions.
    let (p, relayed) = relay(addr, &["--corrupt-every", "20", "--drop-every", "50"]);
    let port = relayed.port().to_string();
    for reverse in [false, true] {
        let mut args = vec![
            "udp",
            "127.0.0.1",
            "-p",
            &port,
            "--rate",
            "4M",
            "--size",
            "500",
            "-d",
            "1",
            "-v",
            "0",
            "--auth-datagrams",
            "--key",
            keyfile.to_str().unwrap(),
        ];
        if reverse {
            args.push("-R");
        }
        let (doc, _) = run_json(&args, 4);
        let t = &doc["result"]["totals"];
        let sent = doc["result"]["sender"]["packets"].as_u64().unwrap();
        // The relay drops every 50th datagram and corrupts every 20th of the
        // rest (the 100th, 200th, … are dropped, not corrupted).
        let corrupted = sent / 20 - sent / 100;
        assert_eq!(t["corrupt"].as_u64().unwrap(), corrupted, "{t}");
        assert_eq!(
            t["lost"].as_u64().unwrap(),
            sent / 50 + corrupted,
            "dropped and rejected: {t}"
        );
    }
    let _ = interrupt(p);
    // A client that does not even try gets the reason in the protocol.
    assert!(matches!(
        reply_to(addr, &proto::encode(&Message::Hello(Message::hello()))),
        Some(Message::Error {
            code: ErrorCode::Auth,
            ..
        })
    ));
    // A key too short to mean anything is a usage error.
    let short = dir.path().join("short");
    std::fs::write(&short, "abc").unwrap();
    let out = netrig(&["tcp", &t, "--key", short.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 16 are needed"));
}

/// iperf3's console decorations: `--title` and `--timestamps` before every
/// console line (and the title in the JSON), `--logfile` instead of the
/// terminal, checked like every other output path.
#[test]
fn title_timestamps_and_logfile_decorate_the_console() {
    let (_srv, addr) = serve(&["-q"]);
    let a = addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = run_expect(
        &[
            "udp",
            &a,
            "-t",
            "300ms",
            "--title",
            "lab 1",
            "--timestamps=%Y-%m-%d ",
            "--json",
            json.to_str().unwrap(),
        ],
        0,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() > 5, "{out}");
    for l in &lines {
        let (date, rest) = l.split_at(11);
        assert!(
            date.len() == 11 && date.as_bytes()[4] == b'-' && date.ends_with(' '),
            "{l}"
        );
        assert!(rest.starts_with("lab 1:  "), "{l}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["title"], "lab 1");

    // --logfile: the console goes to the file, appended; stdout stays empty.
    let log = dir.path().join("console.log");
    std::fs::write(&log, "earlier\n").unwrap();
    let args = ["rr", &a, "-n", "100", "--title", "t", "--logfile"];
    let out = run_expect(&[&args[..], &[log.to_str().unwrap()]].concat(), 0);
    assert_eq!(out, "");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.starts_with("earlier\nt:  "), "{text}");
    assert!(text.contains("t:  Round trip: count 100"), "{text}");

    let out = netrig(&["tcp", &a, "--logfile", "/nonexistent/dir/x.log"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--logfile"), "{err}");
}

/// iperf2's `--txstart-time`: the stream's first datagram leaves at the
/// wall-clock time given, not before (the server's send stamps say so), and
/// a TCP client started at the same moment waits for it too. Absolute and
/// relative (`+D`) forms; a time too far ahead is a usage error.
#[test]
fn txstart_time_starts_the_traffic_on_the_wall_clock() {
    let (_srv, addr) = serve(&["-q"]);
    let a = addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let jitter = dir.path().join("j.csv");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let at = now + 1.5;
    let at_s = format!("{at:.6}");
    let t0 = Instant::now();
    let tcp = netrig(&[
        "tcp",
        &a,
        "-n",
        "1M",
        "-P",
        "1",
        "--iterations",
        "1",
        "-q",
        "--txstart-time",
        &at_s,
    ])
    .spawn()
    .unwrap();
    let out = run_expect(
        &[
            "udp",
            &a,
            "-R",
            "-t",
            "200ms",
            "-q",
            "--txstart-time",
            &at_s,
            "--jitter-file",
            jitter.to_str().unwrap(),
        ],
        0,
    );
    let mut tcp = Proc(tcp);
    assert!(wait_exit(&mut tcp, 20).success());
    // Both waited: neither could finish before the start time.
    assert!(t0.elapsed() >= Duration::from_millis(1400), "{out}");
    let rows = csv_rows(&jitter);
    let first_send = rows
        .iter()
        .filter_map(|r| r.get(1)?.parse::<u64>().ok())
        .min()
        .expect("datagrams");
    let at_ns = (at * 1e9) as u64;
    assert!(
        first_send >= at_ns,
        "first send {first_send} before {at_ns}"
    );
    assert!(
        first_send < at_ns + 1_000_000_000,
        "first send {} ms late",
        (first_send - at_ns) / 1_000_000
    );
    // Relative: +1s from now.
    let t0 = Instant::now();
    run_expect(&["rr", &a, "-n", "10", "-q", "--txstart-time", "+1s"], 0);
    assert!(t0.elapsed() >= Duration::from_millis(950));
    for bad in ["+2h", "soon", "-5"] {
        let out = netrig(&["ping", &a, "--txstart-time", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
}

fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `--json-stream`: JSON lines while the run happens (an interval line is
/// there before the run ends), start and end lines in the envelope's shape,
/// the end line's result the same as the final report's.
#[test]
fn json_stream_writes_lines_as_the_run_goes() {
    let (_srv, addr) = serve(&["-q"]);
    let a = addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let lines_path = dir.path().join("udp.jsonl");
    let json = dir.path().join("udp.json");
    let mut p = Proc(
        netrig(&[
            "udp",
            &a,
            "-t",
            "3s",
            "-i",
            "200ms",
            "-q",
            "--json-stream",
            lines_path.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .spawn()
        .unwrap(),
    );
    let t0 = Instant::now();
    while !json_lines(&lines_path)
        .iter()
        .any(|l| l["event"] == "interval")
    {
        assert!(t0.elapsed() < Duration::from_secs(10), "no interval line");
        assert!(p.0.try_wait().unwrap().is_none(), "ended before any line");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The run is still going when its first interval is in the file.
    assert!(p.0.try_wait().unwrap().is_none());
    assert!(wait_exit(&mut p, 20).success());
    let lines = json_lines(&lines_path);
    assert_eq!(lines[0]["event"], "start");
    assert_eq!(lines[0]["test"], "udp");
    assert!(lines[0]["config"]["spec"]["duration_ms"] == 3000);
    let end = lines.last().unwrap();
    assert_eq!(end["event"], "end");
    let intervals: Vec<f64> = lines
        .iter()
        .filter(|l| l["event"] == "interval")
        .map(|l| l["data"]["time_slice"].as_f64().unwrap())
        .collect();
    assert!(intervals.len() >= 10, "{intervals:?}");
    assert!(intervals.windows(2).all(|w| w[0] < w[1]), "{intervals:?}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(end["result"]["totals"], report["result"]["totals"]);

    // On standard output, with the console on stderr: nothing but lines.
    let out = run_expect(
        &[
            "tcp",
            &a,
            "-n",
            "1M",
            "-P",
            "2",
            "--iterations",
            "1",
            "--json-stream",
            "-",
        ],
        0,
    );
    let events: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].to_string())
        .collect();
    assert_eq!(events.first().map(String::as_str), Some("\"start\""));
    assert_eq!(events.last().map(String::as_str), Some("\"end\""));
    assert_eq!(events.iter().filter(|e| *e == "\"connection\"").count(), 2);
    // ping: a line per probe.
    let pl = dir.path().join("ping.jsonl");
    run_expect(
        &[
            "ping",
            &a,
            "-n",
            "5",
            "-i",
            "10ms",
            "-q",
            "--json-stream",
            pl.to_str().unwrap(),
        ],
        0,
    );
    let probes = json_lines(&pl)
        .iter()
        .filter(|l| l["event"] == "probe" && l["data"]["rtt_us"].is_number())
        .count();
    assert_eq!(probes, 5);
}

/// `-O`: the warm-up's datagrams are shown in marked intervals and left out
/// of every total, exactly: through a relay that drops every 7th datagram
/// and logs each drop's sequence number, the loss counted is the drops at
/// or past the first post-warm-up number, and the warm-up received is the
/// rest of what was sent before it.
#[test]
fn omit_leaves_the_warm_up_out_exactly() {
    let (_srv, to) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.csv");
    let (rl, via) = relay(to, &["--drop-every", "7", "--log", log.to_str().unwrap()]);
    // 1000 B at 4 Mbit/s: one every 2 ms, so 250 in the 500 ms warm-up.
    let (v, out) = run_json(
        &[
            "udp",
            &via.to_string(),
            "-b",
            "4M",
            "-t",
            "1s",
            "-O",
            "500ms",
            "-i",
            "250ms",
        ],
        0,
    );
    let _ = interrupt(rl);
    let t = &v["result"]["totals"];
    let sent = v["result"]["sender"]["packets"].as_u64().unwrap();
    // A loaded host's pacer sends late departures late rather than skip
    // them, so the run sends exactly what its rate implies.
    assert_eq!(sent, 750, "{v}");
    let counted = sent - 250;
    let drops: Vec<u64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(",lost,"))
        .filter_map(|l| l.split(',').nth(6)?.parse().ok())
        .collect();
    let before = drops.iter().filter(|&&s| s < 250).count() as u64;
    let after = drops.len() as u64 - before;
    assert!(after > 50, "{drops:?}");
    assert_eq!(t["sent"], counted, "{t}");
    assert_eq!(t["lost"].as_u64().unwrap(), after, "{t}");
    assert_eq!(t["unique"].as_u64().unwrap(), counted - after, "{t}");
    assert_eq!(t["omitted"].as_u64().unwrap(), 250 - before, "{t}");
    let omitted: Vec<bool> = v["result"]["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["omitted"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(&omitted[..3], &[true, true, false], "{omitted:?}");
    assert!(out.contains("(omitted)"), "{out}");
}

/// `tcp -O`: the run lasts the warm-up longer, the warm-up's rows are
/// marked, and the report keeps the counters at its end so the goodput
/// without it can be given; the verdicts still cover every connection.
#[test]
fn tcp_omit_marks_the_warm_up_and_keeps_its_counters() {
    let (_srv, addr) = serve(&["-q"]);
    let (v, out) = run_json(
        &[
            "tcp",
            &addr.to_string(),
            "-P",
            "1",
            "-b",
            "16M",
            "-t",
            "1s",
            "-O",
            "500ms",
            "-i",
            "250ms",
        ],
        0,
    );
    let r = &v["result"];
    let o = &r["omitted"];
    assert!(o["secs"].as_f64().unwrap() >= 0.5, "{o}");
    assert!(r["duration_secs"].as_f64().unwrap() >= 1.5, "{r}");
    let marked: Vec<(f64, bool)> = r["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["TimeSlice"].as_f64().unwrap(),
                i["Omitted"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    // Rows end on the 250 ms grid (a little after each tick).
    for (t, m) in &marked {
        assert_eq!(*m, *t > 0.1 && *t < 0.6, "{marked:?}");
    }
    let sent = r["totals"]["sent"].as_u64().unwrap();
    let before = o["at"]["sent"].as_u64().unwrap();
    assert!(before > 0 && sent > before, "{before} of {sent}");
    // 16 Mbit/s in 100 ms periods: at most 200,000 bytes a period begun.
    assert!(sent <= 17 * 200_000, "{sent}");
    assert!(out.contains("Goodput after the"), "{out}");
    assert_eq!(out.matches("(omitted)").count(), 2, "{out}");
}

/// ctsTraffic's UDP files: the media status table with its `Streams`
/// column (1 while the stream runs, 0 in the drain after it), the jitter
/// file in its columns (nanosecond counters at 1e9, in-flight time relative
/// to the first datagram, jitter as its change), and the connection file's
/// one row per stream, which agrees with the JSON.
#[test]
fn ctstraffic_udp_files() {
    let (_srv, addr) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let (st, jf, cf) = (
        dir.path().join("s.csv"),
        dir.path().join("j.csv"),
        dir.path().join("c.csv"),
    );
    let (v, _) = run_json(
        &[
            "udp",
            &addr.to_string(),
            "--media",
            "-b",
            "2M",
            "--fps",
            "50",
            "-t",
            "1s",
            "-i",
            "250ms",
            "-q",
            "--status-file",
            st.to_str().unwrap(),
            "--jitter-file",
            jf.to_str().unwrap(),
            "--jitter-format",
            "cts",
            "--connection-file",
            cf.to_str().unwrap(),
        ],
        0,
    );
    let status = std::fs::read_to_string(&st).unwrap();
    let mut lines = status.lines();
    assert_eq!(
        lines.next(),
        Some("TimeSlice,Bits/Sec,Streams,Completed,Dropped,Repeated,Errors")
    );
    for l in lines {
        let c: Vec<&str> = l.split(',').collect();
        let t: f64 = c[0].parse().unwrap();
        assert_eq!(c[2], if t <= 1.0 + 1e-3 { "1" } else { "0" }, "{status}");
    }
    let rows = csv_rows(&jf);
    let t = &v["result"]["totals"];
    assert_eq!(rows.len() as u64, t["packets"].as_u64().unwrap());
    let ms = |r: &csv::StringRecord, i: usize| r[i].parse::<f64>().unwrap();
    assert_eq!(ms(&rows[0], 5), 0.0);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!((&r[2], &r[4]), ("1000000000", "1000000000"));
        let transit =
            |r: &csv::StringRecord| r[3].parse::<i64>().unwrap() - r[1].parse::<i64>().unwrap();
        let rel = (transit(r) - transit(&rows[0])) as f64 / 1e6;
        assert!((ms(r, 5) - rel).abs() < 1e-5, "{r:?}");
        if i > 0 {
            assert!(
                (ms(r, 6) - (ms(r, 5) - ms(&rows[i - 1], 5))).abs() < 1e-5,
                "{r:?}"
            );
        }
    }
    let conns = csv_rows(&cf);
    assert_eq!(conns.len(), 1);
    // --cport: the data socket's local port, as the connection file shows.
    let port = free_port();
    let cf2 = dir.path().join("c2.csv");
    let p = port.to_string();
    run_expect(
        &[
            "udp",
            &addr.to_string(),
            "-t",
            "200ms",
            "-q",
            "--cport",
            &p,
            "--connection-file",
            cf2.to_str().unwrap(),
        ],
        0,
    );
    let local = csv_rows(&cf2)[0][1].to_string();
    assert!(local.ends_with(&format!(":{port}")), "{local}");
    let c = &conns[0];
    assert_eq!(&c[8], "Succeeded");
    // A media stream's row counts frames.
    let f = &t["frames"];
    assert_eq!(
        c[4].parse::<u64>().unwrap(),
        f["completed"].as_u64().unwrap()
    );
    assert_eq!(c[5].parse::<u64>().unwrap(), f["dropped"].as_u64().unwrap());
    assert_eq!(
        &c[2],
        format!("{}", v["result"]["remote"].as_str().unwrap())
    );
    assert_eq!(c[9].len(), 36);
}

/// Media frames leave as `--datagram-size` datagrams (no IP fragmentation
/// of 10 kB frames) and are judged whole: through a relay that drops every
/// 37th datagram and logs each one's number, exactly the frames holding a
/// dropped datagram are dropped, and every other frame is completed.
#[test]
fn media_frames_are_split_into_datagrams_and_judged_whole() {
    let (_srv, to) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.csv");
    let (rl, via) = relay(
        to,
        &[
            "--drop-every",
            "37",
            "--dir",
            "down",
            "--log",
            log.to_str().unwrap(),
        ],
    );
    // 4 Mbit/s at 50 frames/s: 10,000-byte frames of ten 1000-byte datagrams.
    let (v, out) = run_json(
        &[
            "udp",
            &via.to_string(),
            "--media",
            "-b",
            "4M",
            "--fps",
            "50",
            "-t",
            "1s",
            "--datagram-size",
            "1000",
        ],
        0,
    );
    let _ = interrupt(rl);
    let t = &v["result"]["totals"];
    let s = &v["result"]["sender"];
    assert_eq!(s["packets"], 500, "{s}");
    assert_eq!(s["bytes"], 500_000, "{s}");
    let drops: std::collections::BTreeSet<u64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(",lost,"))
        .filter_map(|l| l.split(',').nth(6)?.parse().ok())
        .collect();
    assert!(drops.len() >= 10, "{drops:?}");
    let frames_hit: std::collections::BTreeSet<u64> = drops.iter().map(|s| s / 10).collect();
    let f = &t["frames"];
    assert_eq!(t["lost"].as_u64().unwrap(), drops.len() as u64, "{t}");
    assert_eq!(
        f["dropped"].as_u64().unwrap(),
        frames_hit.len() as u64,
        "{t}"
    );
    assert_eq!(
        f["completed"].as_u64().unwrap(),
        50 - frames_hit.len() as u64,
        "{t}"
    );
    assert_eq!(
        (f["repeated"].as_u64(), f["errors"].as_u64()),
        (Some(0), Some(0))
    );
    // No datagram larger than asked.
    assert_eq!(v["config"]["spec"]["size"], 1000);
    assert!(out.contains("Frames: "), "{out}");
}

/// `--get-server-output`: the server keeps its own status rows of the
/// session and sends them before its summary; they account for what it
/// received, and the last one's counts are its summary's.
#[test]
fn the_servers_own_rows_come_back_with_get_server_output() {
    let (_srv, addr) = serve(&["-q"]);
    let (v, _) = run_json(
        &[
            "tcp",
            &addr.to_string(),
            "-P",
            "2",
            "-n",
            "2M",
            "-b",
            "16M",
            "--iterations",
            "2",
            "-i",
            "250ms",
            "--get-server-output",
        ],
        0,
    );
    let r = &v["result"];
    let so = &r["server_output"][0];
    assert_eq!(so["truncated"], false);
    let rows = so["rows"].as_array().unwrap();
    assert!(rows.len() >= 3, "{so}");
    let mut prev = 0.0;
    let mut bytes = 0.0;
    for row in rows {
        let t = row["TimeSlice"].as_f64().unwrap();
        assert!(t > prev, "{so}");
        bytes += row["RecvBps"].as_f64().unwrap() * (t - prev);
        prev = t;
    }
    let summary = &r["servers"][0][1];
    let received = summary["bytes_received"].as_f64().unwrap();
    assert_eq!(received, 8.0 * 1024.0 * 1024.0);
    // Rates are whole bytes per second: the rows add up to within rounding.
    assert!(
        (bytes - received).abs() < received * 0.01,
        "{bytes} of {received}"
    );
    let last = rows.last().unwrap();
    assert_eq!(last["Completed"], summary["success"]);
    // Without the flag, no rows.
    let (v, _) = run_json(
        &["tcp", &addr.to_string(), "-n", "1M", "--iterations", "1"],
        0,
    );
    assert!(v["result"]["server_output"].is_null());
    // crr too: the server's rows count the transactions it completed, the
    // last one all of them.
    let (v, _) = run_json(
        &[
            "crr",
            &addr.to_string(),
            "-n",
            "500",
            "-P",
            "2",
            "-i",
            "100ms",
            "--get-server-output",
        ],
        0,
    );
    let rows = v["result"]["server_output"][0]["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{v}");
    assert_eq!(rows.last().unwrap()["Completed"], 500, "{rows:?}");
    // udp takes the flag for iperf3 scripts: with -R the server is the
    // sender, and its report (per interval too) is the result's `sender`.
    let (v, _) = run_json(
        &[
            "udp",
            &addr.to_string(),
            "-R",
            "-b",
            "8M",
            "-t",
            "1s",
            "-i",
            "250ms",
            "--get-server-output",
        ],
        0,
    );
    let s = &v["result"]["sender"];
    let per: Vec<u64> = s["sent_intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert!(per.len() >= 4, "{s}");
    assert_eq!(per.iter().sum::<u64>(), s["bytes"].as_u64().unwrap(), "{s}");
    assert_eq!(s["interval_ms"], 250);
}

/// `udp -P N --bidir`: streams each way, each its own session and data
/// socket (its own port), counted by the server as one test (a default
/// server allows a client 4 tests at once; this is 12 streams), summed per
/// direction exactly, with a connection-file row per stream.
#[test]
fn parallel_and_bidirectional_udp_streams_are_one_test() {
    let (_srv, addr) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let cf = dir.path().join("c.csv");
    let (v, out) = run_json(
        &[
            "udp",
            &addr.to_string(),
            "-P",
            "6",
            "--bidir",
            "-t",
            "500ms",
            "-b",
            "1M",
            "-i",
            "250ms",
            "--connection-file",
            cf.to_str().unwrap(),
        ],
        0,
    );
    let r = &v["result"];
    let streams = r["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 12);
    for (rev, key) in [(false, "sum_up"), (true, "sum_down")] {
        let mine: Vec<&serde_json::Value> =
            streams.iter().filter(|s| s["reverse"] == rev).collect();
        assert_eq!(mine.len(), 6);
        let add = |k: &str| -> u64 {
            mine.iter()
                .map(|s| s["report"]["totals"][k].as_u64().unwrap())
                .sum()
        };
        let sum = &r[key];
        for k in ["sent", "unique", "packets", "bytes", "lost"] {
            assert_eq!(sum[k].as_u64().unwrap(), add(k), "{key} {k}");
        }
        assert!(add("unique") > 0);
    }
    let ports: std::collections::BTreeSet<String> = streams
        .iter()
        .map(|s| s["report"]["local"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ports.len(), 12, "{ports:?}");
    assert_eq!(csv_rows(&cf).len(), 12);
    assert!(
        out.contains("SUM   up (6 streams)") && out.contains("SUM down (6 streams)"),
        "{out}"
    );
    for bad in [
        vec!["udp", "-P", "2", "--jitter-file", "j.csv", "-R"],
        vec!["udp", "-P", "0"],
        vec!["udp", "-P", "129"],
        vec!["udp", "--media", "-b", "1M", "--bidir"],
    ] {
        let o = netrig(&bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
    }
}

#[test]
fn every_test_kind_past_max_duration_is_refused_up_front_naming_the_limit() {
    // Issue 26, item 10: `udp -t 10` was refused under --max-duration 5s,
    // but `tcp -t 20` was accepted and cut at the session's deadline.
    let (_srv, addr) = serve(&["-v", "0", "--max-duration", "2s"]);
    let t = addr.to_string();
    for (args, asked) in [
        (vec!["tcp", &t, "-t", "5"], "5 s"),
        // The warm-up is part of the run.
        (vec!["tcp", &t, "-t", "1.5", "-O", "1"], "2.5 s"),
        (vec!["crr", &t, "-t", "3"], "3 s"),
        // Ten requests 500 ms apart: the last leaves at 4.5 s.
        (vec!["ping", &t, "-i", "500ms", "-n", "10"], "4.5 s"),
        // A time on a count with no schedule: the time is the length.
        (vec!["rr", &t, "-t", "3"], "3 s"),
        (
            vec!["ping", &t, "-i", "500ms", "-n", "10", "-t", "3"],
            "3 s",
        ),
        (vec!["udp", &t, "-b", "1M", "-t", "5"], "5 s"),
        (
            vec![
                "load",
                &t,
                "--idle",
                "1s",
                "--phase-time",
                "4s",
                "--phases",
                "download",
            ],
            "5 s",
        ),
    ] {
        // Up front: refused before the limit itself could have passed
        // (one-sided, three tries for a busy machine).
        let mut took = Vec::new();
        loop {
            let t0 = Instant::now();
            let out = netrig(&args).output().unwrap();
            took.push(t0.elapsed());
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(5), "{args:?}: {err}");
            let want =
                format!("refused the test: server limit: max duration 2 s (asked for {asked})");
            assert!(err.contains(&want), "{args:?}: {err}");
            if took[took.len() - 1] < Duration::from_secs(2) {
                break;
            }
            assert!(took.len() < 3, "{args:?} took {took:?} to be refused");
        }
    }
    // Within the limit, each kind runs (the three at once: three tests of
    // one address are within the server's default four).
    let runs: Vec<_> = [
        vec!["tcp", &t, "-t", "1", "-q"],
        vec!["ping", &t, "-i", "100ms", "-n", "5", "-q"],
        vec!["udp", &t, "-b", "1M", "-t", "1", "-q"],
    ]
    .into_iter()
    .map(|args| {
        let child = netrig(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        (args, child)
    })
    .collect();
    for (args, child) in runs {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// A fake server that asks for the key's proof and answers with the
/// client's own proof: it does not know the key.
fn reflecting_server() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            if !matches!(proto::read_message(&mut s), Ok(Message::Hello(_))) {
                continue;
            }
            let mut ack = Message::hello();
            ack.nonce = Some(netrig::protocol::auth::nonce());
            let _ = proto::write_message(&mut s, &Message::HelloAck(ack));
            if let Ok(Message::Auth { proof }) = proto::read_message(&mut s) {
                let _ = proto::write_message(&mut s, &Message::AuthOk { proof });
                let _ = proto::read_message(&mut s);
            }
        }
    });
    addr
}

#[test]
fn a_client_with_a_key_requires_the_server_to_prove_it() {
    // Issue 26, item 12: `ping HOST --key k1.key` against a server without
    // a key exited 0 with no warning.
    let dir = tempfile::tempdir().unwrap();
    let keyfile = dir.path().join("k1.key");
    std::fs::write(&keyfile, "a shared secret of some length\n").unwrap();
    let key = keyfile.to_str().unwrap();
    let (_open, addr) = serve(&["-v", "0"]);
    let fake = reflecting_server();
    for (target, why) in [
        (addr, "it asks for no key"),
        (fake, "its proof does not match our key"),
    ] {
        let t = target.to_string();
        for args in [
            vec!["ping", &t, "-n", "2", "-i", "10ms", "--key", key],
            vec!["tcp", &t, "-n", "64K", "--key", key],
            vec!["udp", &t, "-b", "1M", "-t", "0.3", "--key", key],
            vec!["rr", &t, "--iterations", "10", "--key", key],
        ] {
            let out = netrig(&args).env_remove("NETRIG_KEY").output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(5), "{args:?}: {err}");
            let want = format!("server {t} did not prove it knows the key: {why}");
            assert!(err.contains(&want), "{args:?}: {err}");
        }
        // The key in the environment is a key given too.
        let out = netrig(&["ping", &t, "-n", "2", "-i", "10ms"])
            .env("NETRIG_KEY", "a shared secret of some length")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(5), "{out:?}");
    }
    // Without a key, a server without one serves as before.
    let out = netrig(&["ping", &addr.to_string(), "-n", "2", "-i", "10ms"])
        .env_remove("NETRIG_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn a_refused_connection_pushing_behind_its_hello_learns_the_reason() {
    // Issue 26, item 4: the server now resets a refused connection once its
    // error frame is delivered and 1 MiB is read, rather than read all a
    // client sends; a client writing a large first flight behind its data
    // hello meets the reset, and must still report the refusal (exit 5),
    // not a network error.
    let (_srv, addr) = serve(&["-v", "0", "--max-conns-per-client", "3"]);
    let out = netrig(&[
        "tcp",
        &addr.to_string(),
        "-n",
        "200M",
        "-c",
        "8",
        "--iterations",
        "1",
        "-q",
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("server limit: max 3 connections per client address"),
        "{err}"
    );
    assert!(!err.contains("data hello"), "{err}");
}
