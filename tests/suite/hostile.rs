//! A `netrig serve` process under hostile input and abuse: thousands of random
//! and mutated control messages, a hundred clients killed mid-test, a server
//! killed under a UDP client. Afterwards the server must still serve, and its
//! descriptors and memory must be back where they were.

use crate::bin;

use bin::*;
use netrig::protocol::proto::{
    self, BurstSpec, DataHello, IoPattern, Message, RrProto, RrSpec, TcpSpec, TestSpec, UdpSpec,
    VerifyLevel,
};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn corpus() -> Vec<Message> {
    let id = uuid::Uuid::from_u128(7);
    let udp = UdpSpec {
        reverse: true,
        duration_ms: 200,
        ..udp_spec()
    };
    vec![
        Message::Hello(Message::hello()),
        Message::TestRequest {
            test: TestSpec::Tcp(TcpSpec {
                pattern: IoPattern::Pushpull,
                transfer: 1 << 20,
                push_bytes: 1000,
                pull_bytes: 1000,
                verify: VerifyLevel::Data,
                connections: 2,
                burst: Some(BurstSpec {
                    size: 1000,
                    period_ms: 10,
                }),
                time_bound_ms: 0,
                sock: Default::default(),
                rate: None,
                transfer_max: None,
                server_interval_ms: 0,
                duration_ms: 0,
            }),
        },
        Message::TestRequest {
            test: TestSpec::Udp(udp),
        },
        Message::TestRequest {
            test: TestSpec::Rr(RrSpec {
                proto: RrProto::Udp,
                size: 64,
                reply: 64,
                iterations: 10,
                nagle: false,
                until_stopped: false,
                sock: Default::default(),
                duration_ms: 0,
            }),
        },
        Message::TestRequest {
            test: TestSpec::Rr(RrSpec {
                proto: RrProto::SctpSeqpacket,
                size: 64,
                reply: 64,
                iterations: 10,
                nagle: false,
                until_stopped: false,
                sock: Default::default(),
                duration_ms: 0,
            }),
        },
        Message::DataHello(DataHello {
            session: id,
            connection: id,
            buffer: 65536,
            compact: false,
            proof: None,
        }),
        Message::UdpHandshake { token: 1 },
        Message::UdpReady {
            nonce: 2,
            offset_ns: -5,
        },
        Message::TimeRequest { t1: 3 },
        Message::Auth {
            proof: "00".repeat(32),
        },
        Message::Stop,
        Message::Goodbye,
    ]
}

/// Replaces one JSON number or string in a payload with something hostile.
fn splice(payload: &[u8], rng: &mut SmallRng) -> Vec<u8> {
    let text = String::from_utf8_lossy(payload).to_string();
    let spots: Vec<usize> = text
        .char_indices()
        .filter(|(_, c)| *c == ':')
        .map(|(i, _)| i + 1)
        .collect();
    let Some(&at) = spots.get(rng.random_range(0..spots.len().max(1))) else {
        return payload.to_vec();
    };
    let end = text[at..].find([',', '}']).map_or(text.len(), |e| at + e);
    let evil = [
        "-1",
        "1e308",
        "18446744073709551616",
        "null",
        "\"\"",
        "[]",
        "{}",
        "true",
        "0",
        "4294967295",
        "\"\\u0000\"",
    ];
    let pick = evil[rng.random_range(0..evil.len())].to_string();
    let long = "\"".to_string() + &"x".repeat(rng.random_range(0..70_000)) + "\"";
    let with = if rng.random_range(0..10) == 0 {
        long
    } else {
        pick
    };
    format!("{}{}{}", &text[..at], with, &text[end..]).into_bytes()
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut b = vec![b'N', b'R', proto::FRAME_VERSION, 0];
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    b
}

/// One hostile input: random bytes, or a valid message damaged one of several ways,
/// sometimes behind a valid hello so that later protocol states are reached.
fn hostile(rng: &mut SmallRng, corpus: &[Message]) -> Vec<u8> {
    let m = &corpus[rng.random_range(0..corpus.len())];
    let mut good = proto::encode(m);
    let bad = match rng.random_range(0..6) {
        0 => (0..rng.random_range(0..300))
            .map(|_| rng.random())
            .collect(),
        1 => {
            for _ in 0..rng.random_range(1..5) {
                let i = rng.random_range(0..good.len());
                good[i] ^= rng.random::<u8>() | 1;
            }
            good
        }
        2 => {
            let cut = rng.random_range(0..good.len());
            good.truncate(cut);
            good
        }
        3 => frame(&splice(&good[proto::HEADER_LEN..], rng)),
        4 => {
            let len: u32 = rng.random();
            good[4..8].copy_from_slice(&len.to_be_bytes());
            good
        }
        _ => good,
    };
    if rng.random_range(0..2) == 0 {
        let mut b = proto::encode(&Message::Hello(Message::hello()));
        b.extend(bad);
        b
    } else {
        bad
    }
}

/// Sends `bytes`, closes the sending side, and names what came back.
fn send_hostile(addr: SocketAddr, bytes: &[u8]) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return "connect failed".into();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut last = "closed silently".to_string();
    loop {
        match proto::read_message(&mut s) {
            Ok(Message::Error { code, .. }) => last = format!("error {code:?}"),
            Ok(m) => {
                last = format!("{m:?}")
                    .split([' ', '(', '{'])
                    .next()
                    .unwrap()
                    .into()
            }
            Err(_) => break,
        }
    }
    let _ = s.read(&mut [0u8; 1]);
    last
}

#[test]
fn ten_thousand_random_and_mutated_control_messages() {
    let (mut srv, addr) = serve(&["-v", "0", "--handshake-timeout", "500ms"]);
    let pid = srv.0.id();
    run_tcp_ok(addr);
    let (fds, rss) = (fd_count(pid), rss_kib(pid));
    let corpus = corpus();
    let outcomes: Vec<BTreeMap<String, u64>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let corpus = &corpus;
                sc.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(0xBAD5EED ^ t);
                    let mut seen = BTreeMap::new();
                    for _ in 0..2500 {
                        let b = hostile(&mut rng, corpus);
                        *seen.entry(send_hostile(addr, &b)).or_insert(0) += 1;
                    }
                    seen
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = BTreeMap::new();
    for o in outcomes {
        for (k, v) in o {
            *all.entry(k).or_insert(0u64) += v;
        }
    }
    eprintln!("outcomes of 10,000 hostile messages: {all:?}");
    assert_eq!(all.values().sum::<u64>(), 10_000);
    assert!(!all.contains_key("connect failed"), "{all:?}");
    assert!(
        all.get("error Malformed").copied().unwrap_or(0) > 1000,
        "{all:?}"
    );
    assert!(srv.0.try_wait().unwrap().is_none(), "server died");
    run_tcp_ok(addr);
    let after = settles_to(pid, fds, 15);
    assert!(after <= fds, "server fds {after} > baseline {fds}");
    let grown = rss_kib(pid).saturating_sub(rss);
    assert!(grown < 16 * 1024, "server RSS grew by {grown} KiB");
}

/// A legit client is served in full: 4 connections × 2 iterations of 1 MiB,
/// every one succeeded, every byte counted.
fn run_tcp_ok(addr: SocketAddr) {
    let (v, _) = run_json(
        &[
            "tcp",
            &addr.to_string(),
            "-n",
            "1M",
            "-c",
            "4",
            "--iterations",
            "2",
            "-v",
            "0",
        ],
        0,
    );
    let t = &v["result"]["totals"];
    assert_eq!(t["completed"], 8, "{t}");
    assert_eq!(t["sent"], 8 << 20, "{t}");
    for k in ["net_errors", "data_errors", "cancelled"] {
        assert_eq!(t[k], 0, "{k}: {t}");
    }
}

#[test]
fn a_hundred_clients_killed_mid_test_leave_no_trace() {
    let (mut srv, addr) = serve(&["-v", "0"]);
    let pid = srv.0.id();
    let t = addr.to_string();
    let kinds: [&[&str]; 5] = [
        &["tcp", &t, "-c", "4", "-v", "0"],
        &["tcp", &t, "--pattern", "pull", "-c", "2", "-v", "0"],
        &["udp", &t, "--rate", "50M", "-d", "30", "-v", "0"],
        &["udp", &t, "-R", "--rate", "50M", "-d", "30", "-v", "0"],
        &["rr", &t, "--iterations", "100000000", "-v", "0"],
    ];
    let idle = fd_count(pid);
    // Warm up every kind once so lazily made state is in the baseline.
    for k in kinds {
        kill_after(k, 300);
    }
    run_tcp_ok(addr);
    // The killed warm-up sessions wind down (their descriptors close).
    let fds = settles_to(pid, idle, 15);
    let rss = rss_kib(pid);
    for i in 0..100 {
        kill_after(kinds[i % kinds.len()], 40 + (i as u64 % 4) * 30);
    }
    assert!(srv.0.try_wait().unwrap().is_none(), "server died");
    run_tcp_ok(addr);
    let after = settles_to(pid, fds, 15);
    assert!(after <= fds, "server fds {after} > baseline {fds}");
    let grown = rss_kib(pid).saturating_sub(rss);
    eprintln!("server RSS {rss} KiB before, grew by {grown} KiB after 100 kills");
    assert!(grown < 16 * 1024, "server RSS grew by {grown} KiB");
}

/// Starts a client, lets it run `ms`, and SIGKILLs it. The delay is not a
/// synchronisation: varying it is how the kills land in every phase of a
/// session (connecting, handshake, setup, transfer), ready or not.
fn kill_after(args: &[&str], ms: u64) {
    let mut p = Proc(
        netrig(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(ms));
    p.0.kill().unwrap();
    let _ = p.0.wait();
}

#[test]
fn a_server_killed_under_a_udp_client_is_a_network_error_with_complete_json() {
    for reverse in [false, true] {
        let (mut srv, addr) = serve(&["-v", "0"]);
        let dir = tempfile::tempdir().unwrap();
        let js = dir.path().join("u.json");
        let t = addr.to_string();
        let mut args = vec![
            "udp",
            &t,
            "--rate",
            "10M",
            "-d",
            "30",
            "--interval",
            "250ms",
            "--json",
            js.to_str().unwrap(),
        ];
        if reverse {
            args.push("-R");
        }
        // The server dies once two intervals have been reported.
        let (mut c, _) = spawn_after_rows(&args, 2, 20);
        srv.0.kill().unwrap();
        let _ = srv.0.wait();
        let status = wait_exit(&mut c, 20);
        assert_eq!(status.code(), Some(3), "reverse={reverse}");
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&js).expect("JSON written")).unwrap();
        let r = &doc["result"];
        assert_eq!(doc["test"], "udp");
        assert_eq!(doc["error"], "the server was lost mid-test", "{doc}");
        assert_eq!(r["server_lost"], true);
        // What was measured before the server died is kept: the intervals
        // printed, with every datagram they count accounted for.
        let ivs = r["intervals"].as_array().unwrap();
        assert!(ivs.len() >= 2, "reverse={reverse}: {r}");
        let sum = |k: &str| -> u64 { ivs.iter().map(|i| i[k].as_u64().unwrap()).sum() };
        let (got, dropped) = (sum("packets"), sum("drops"));
        assert!(got > 0, "reverse={reverse}: {r}");
        // The local end's own count covers at least what the intervals saw.
        if reverse {
            let unique = r["totals"]["unique"].as_u64().unwrap();
            assert!(unique >= got, "reverse={reverse}: {unique} < {got}: {r}");
        } else {
            let sent = r["sender"]["packets"].as_u64().unwrap();
            assert!(sent >= got + dropped, "{sent} < {got} + {dropped}: {r}");
        }
    }
}

#[test]
fn a_server_killed_under_rr_is_a_network_error_with_what_was_measured() {
    for proto in ["tcp", "udp"] {
        let (mut srv, addr) = serve(&["-v", "0"]);
        let dir = tempfile::tempdir().unwrap();
        let js = dir.path().join("r.json");
        let t = addr.to_string();
        // A spectrum of sizes, 2000 round trips each: the server dies once
        // the first size is done (its row is out).
        let mut cmd = netrig(&[
            "rr",
            &t,
            "--proto",
            proto,
            "--spectrum",
            "0..20",
            "-n",
            "2000",
            "--warmup",
            "0",
            "--json",
            js.to_str().unwrap(),
        ]);
        cmd.stderr(std::process::Stdio::piped());
        let (mut c, _) = spawn_ready_cmd(cmd, is_row, 20);
        srv.0.kill().unwrap();
        let _ = srv.0.wait();
        let status = wait_exit(&mut c, 20);
        let mut err = String::new();
        let _ = c.0.stderr.take().unwrap().read_to_string(&mut err);
        assert_eq!(status.code(), Some(3), "{proto}: {err}");
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&js).expect("JSON written")).unwrap();
        let runs = doc["result"]["runs"]
            .as_array()
            .unwrap_or_else(|| panic!("{proto}: {doc}"));
        // Round trips measured before the kill are kept: the first size in
        // full, and whatever the interrupted one had.
        let first = &runs[0];
        assert_eq!(first["error"], serde_json::Value::Null, "{proto}: {first}");
        assert_eq!(first["received"], 2000, "{proto}: {first}");
        assert_eq!(first["latency"]["count"], 2000, "{proto}: {first}");
        let error = doc["error"].as_str().expect("the failure is in the JSON");
        assert!(
            err.contains(error),
            "{proto}: stderr {err:?} names {error:?}"
        );
        // The server died during a size (that run carries the error and its
        // round trips) or as the next one was being set up.
        let last = runs.last().unwrap();
        if runs.len() >= 2 {
            assert_eq!(last["error"], error, "{proto}: {last}");
            let received = last["received"].as_u64().unwrap();
            let counted = last["latency"]["count"].as_u64().unwrap_or(0);
            assert_eq!(counted, received, "{proto}: {last}");
        }
    }
}

#[test]
fn sigterm_like_sigint_leaves_complete_files() {
    let (_srv, addr) = serve(&["-v", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let (js, st) = (dir.path().join("t.json"), dir.path().join("s.csv"));
    let p = Proc(
        netrig(&[
            "tcp",
            &addr.to_string(),
            "-c",
            "2",
            "-v",
            "0",
            "--interval",
            "100ms",
            "--json",
            js.to_str().unwrap(),
            "--status-file",
            st.to_str().unwrap(),
        ])
        .spawn()
        .unwrap(),
    );
    // Signalled once the run has written two status rows (100 ms apart).
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&st).map_or(0, |t| t.lines().count()) < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no status rows after 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &p.0.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let mut p = p;
    let status = p.0.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    assert_eq!(doc["result"]["interrupted"], true);
    assert!(
        !doc["result"]["intervals"].as_array().unwrap().is_empty(),
        "{doc}"
    );
    let mut r = csv::Reader::from_path(&st).unwrap();
    let rows: Vec<_> = r.records().collect::<Result<_, _>>().unwrap();
    assert!(rows.len() >= 2, "{} status rows", rows.len());
}

/// The server reads a connection's first frame with what follows it, and a
/// control connection's conversation then goes to a thread that reads the
/// socket itself: a client that sends more before the answer to its hello
/// is refused with a reason rather than having those bytes lost.
#[test]
fn a_control_hello_with_bytes_behind_it_is_refused() {
    let (_srv, addr) = serve(&["-v", "0"]);
    let hello = proto::encode(&Message::Hello(Message::hello()));
    assert_eq!(send_hostile(addr, &hello), "HelloAck");
    let mut piped = hello.clone();
    piped.extend_from_slice(&proto::encode(&Message::Goodbye));
    assert_eq!(send_hostile(addr, &piped), "error UnexpectedMessage");
}

#[test]
fn a_server_sigtermed_mid_test_is_one_line_on_stderr_and_the_measurements_kept() {
    // Issue 26, item 14: tcp exited 3 with an empty stderr.
    let (srv, addr) = serve(&["-v", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("t.json");
    let mut cmd = netrig(&[
        "tcp",
        &addr.to_string(),
        "-t",
        "30",
        "-P",
        "2",
        "--interval",
        "100ms",
        "--json",
        js.to_str().unwrap(),
    ]);
    cmd.stderr(std::process::Stdio::piped());
    // The server is stopped once data is flowing (a row is out).
    let (mut c, _) = spawn_ready_cmd(cmd, is_row, 20);
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &srv.0.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = wait_exit(&mut c, 20);
    let mut err = String::new();
    c.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(3), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("netrig: server ")
            && lines[0].contains("was lost mid-test (it closed the control connection)"),
        "{err}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    assert!(
        doc["error"].as_str().unwrap().contains("was lost mid-test"),
        "{doc}"
    );
    assert!(
        doc["result"]["totals"]["sent"].as_u64().unwrap() > 0,
        "{doc}"
    );
}
