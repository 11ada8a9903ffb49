//! A hostile user of a public `netrig serve`: requests built to crash it,
//! to make it allocate or send without bound, to hold its slots, or to ride
//! another client's session. Each test reproduces one finding of issue 12
//! against a real server process and checks the server's answer.

use crate::bin;
use crate::hand;

use bin::*;
use hand::{Logged, Raw};
use netrig::protocol::proto::{self, ErrorCode, Message, TestSpec};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A UDP test request as JSON, with `edit` applied to its spec.
fn udp_request(edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = serde_json::to_value(Message::TestRequest {
        test: TestSpec::Udp(udp_spec()),
    })
    .unwrap();
    edit(&mut v["test"]);
    v
}

fn step(at_ns: u64, rate_bps: u64, size: u64) -> Value {
    json!({"at_ns": at_ns, "rate_bps": rate_bps, "size": size, "hold": false})
}

#[test]
fn requests_that_would_allocate_without_bound_are_refused_before_allocating() {
    let (mut srv, addr) = serve(&["-q"]);
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "2^32-1 histogram bins",
            udp_request(|t| t["hist_bins"] = json!(u32::MAX)),
            "histogram bins 1..=100000",
        ),
        (
            "a profile step of 2^32-1 bytes",
            udp_request(
                |t| t["profile"] = json!({"steps": [step(0, 1000, 100), step(500_000_000, 1000, u64::from(u32::MAX))]}),
            ),
            "datagram sizes",
        ),
        (
            "an empty profile",
            udp_request(|t| t["profile"] = json!({"steps": []})),
            "at least two steps",
        ),
        (
            "a profile lasting an hour in a 1 s test",
            udp_request(|t| {
                t["profile"] =
                    json!({"steps": [step(0, 1000, 100), step(3_600_000_000_000, 1000, 100)]})
            }),
            "rate profile lasts 3600 s but the test 1 s",
        ),
        (
            "a profile whose steps go back in time",
            udp_request(|t| {
                t["profile"] = json!({"steps": [step(0, 1000, 100), step(500, 1000, 100), step(400, 1000, 100)]})
            }),
            "later than the previous",
        ),
        (
            "a playout buffer of u64::MAX ms",
            udp_request(|t| t["media"] = json!({"fps": 30, "buffer_depth_ms": u64::MAX})),
            "playout buffer",
        ),
        (
            "a million one-byte TCP bursts",
            json!({"type": "test_request", "test": {"kind": "tcp", "pattern": "pull",
                "transfer": 1_000_000, "push_bytes": 0, "pull_bytes": 0, "verify": "data",
                "connections": 1, "burst": {"size": 1, "period_ms": 1}}}),
            "bursts per connection",
        ),
        (
            "a burst train longer than the server's longest test",
            json!({"type": "test_request", "test": {"kind": "tcp", "pattern": "pull",
                "transfer": 2_000_000, "push_bytes": 0, "pull_bytes": 0, "verify": "data",
                "connections": 1, "burst": {"size": 1_000_000, "period_ms": u64::MAX / 2}}}),
            "server limit: max duration",
        ),
    ];
    for (what, request, expect) in cases {
        let why = Raw::hello(addr).refusal(&request);
        assert!(why.contains(expect), "{what}: refused with {why:?}");
        assert!(srv.0.try_wait().unwrap().is_none(), "{what}: server died");
    }
    alive(addr);
}

#[test]
fn a_fine_histogram_arrives_whole_with_every_datagram() {
    let (_srv, addr) = serve(&["-q"]);
    let (v, _) = run_json(
        &[
            "udp",
            &addr.to_string(),
            "-b",
            "1M",
            "-t",
            "0.3",
            "--hist-bins",
            "8000",
            "--hist-bin",
            "1us",
            "-q",
        ],
        0,
    );
    // The histogram lists the buckets that hold something, [lower µs,
    // upper µs, count], fine ones here (--hist-bin 1us), and every datagram
    // is in one. (Chunking a histogram too large for one frame is checked
    // in memory: proto_tests large_results_go_in_frames_that_fit_in_order.)
    let h = v["result"]["totals"]["histogram"].as_array().unwrap();
    assert!(h.len() > 1, "{h:?}");
    assert!(h.iter().all(|b| b[0].as_f64() < b[1].as_f64()), "{h:?}");
    let counted: u64 = h.iter().map(|b| b[2].as_u64().unwrap()).sum();
    assert_eq!(counted, v["result"]["totals"]["unique"].as_u64().unwrap());
}

/// Goodput the client measured, bit/s, from a JSON report.
fn tcp_bps(v: &Value) -> f64 {
    let t = &v["result"]["totals"];
    let bytes = t["received"].as_f64().unwrap() + t["sent"].as_f64().unwrap();
    bytes * 8.0 / v["result"]["duration_secs"].as_f64().unwrap()
}

#[test]
fn max_rate_holds_for_bursts_sent_back_to_back() {
    let (_srv, addr) = serve(&["-q", "--max-rate", "10M", "--max-duration", "5s"]);
    let t0 = Instant::now();
    let (v, _) = run_json(
        &[
            "tcp",
            &addr.to_string(),
            "--pattern",
            "pull",
            "--burst-size",
            "1M",
            "--burst-period",
            "100ms",
            "-n",
            "2M",
            "-P",
            "1",
            "--iterations",
            "1",
            "-q",
        ],
        0,
    );
    // 2 MB at 10 Mbit/s is 1.6 s; unguarded, loopback moves it in milliseconds.
    let took = t0.elapsed();
    assert!(
        took > Duration::from_millis(1400),
        "took only {took:?}: {v}"
    );
    let _ = tcp_bps(&v);
}

#[test]
fn udp_replies_larger_than_requests_keep_to_max_rate() {
    let (_srv, addr) = serve(&["-q", "--max-rate", "2M"]);
    let t0 = Instant::now();
    // 40-byte requests for 8,000-byte replies: 200 times as much out as in.
    let (v, _) = run_json(
        &[
            "rr",
            &addr.to_string(),
            "--proto",
            "udp",
            "-l",
            "40",
            "--reply",
            "8000",
            "-n",
            "40",
            "--warmup",
            "0",
            "-q",
        ],
        0,
    );
    let secs = t0.elapsed().as_secs_f64();
    let run = &v["result"]["runs"][0];
    let answered = run["received"].as_u64().unwrap();
    assert_eq!(answered, 40, "{run}");
    // 40 replies of 8,032 bytes at 2 Mbit/s, less the 16 KiB the bucket
    // lets go at once: 1.2 s. Unlimited, loopback answers in milliseconds.
    let floor = (40.0 * 8032.0 - 16384.0) * 8.0 / 2e6;
    assert!(secs >= floor * 0.95, "{answered} replies in {secs} s");
}

#[test]
fn a_session_ends_by_its_deadline_whatever_the_client_sends() {
    let (_srv, addr) = serve(&["-q", "--max-duration", "1s"]);
    let mut r = Raw::hello(addr);
    r.send(&Message::TestRequest {
        test: TestSpec::Udp(udp_spec()),
    });
    assert!(matches!(r.recv(), Ok(Message::UdpAccept { .. })));
    // Clock requests every 200 ms would keep a per-read timeout alive forever.
    let t0 = Instant::now();
    let mut w = r.0.try_clone().unwrap();
    let pinger = std::thread::spawn(move || {
        while t0.elapsed() < Duration::from_secs(15) {
            if proto::write_message(&mut w, &Message::TimeRequest { t1: 1 }).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let mut last = None;
    while let Ok(m) = r.recv() {
        last = Some(m);
    }
    let took = t0.elapsed();
    // 1 s max duration + 5 s grace.
    assert!(took < Duration::from_secs(9), "session lasted {took:?}");
    assert!(
        took >= Duration::from_secs(5),
        "session ended early: {took:?}"
    );
    match last {
        Some(Message::Error { code, message }) => {
            assert_eq!(code, ErrorCode::LimitDuration, "{message}");
            assert!(message.contains("max duration"), "{message}")
        }
        other => panic!("expected a max duration error, got {other:?}"),
    }
    drop(r);
    pinger.join().unwrap();
}

#[test]
fn a_trickled_handshake_is_cut_at_the_handshake_deadline() {
    let (_srv, addr) = serve(&["-q", "--handshake-timeout", "1s"]);
    let hello = proto::encode(&Message::Hello(Message::hello()));
    let mut s = TcpStream::connect(addr).unwrap();
    let t0 = Instant::now();
    let mut closed_at = None;
    for b in hello.iter().cycle().take(60) {
        // One byte every 200 ms: each read well within the 1 s timeout.
        if s.write_all(&[*b]).is_err() {
            closed_at = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        s.set_nonblocking(true).unwrap();
        let eof = matches!(s.read(&mut [0u8; 256]), Ok(0));
        s.set_nonblocking(false).unwrap();
        if eof {
            closed_at = Some(t0.elapsed());
            break;
        }
    }
    let at = closed_at.expect("the server kept a trickling connection for 12 s");
    assert!(at < Duration::from_secs(4), "closed only after {at:?}");
}

#[test]
fn a_client_that_stops_reading_frees_its_slot_by_the_deadline() {
    let (mut srv, addr) = serve(&["-q", "--max-duration", "1s", "--max-tests", "1"]);
    let pid = srv.0.id();
    let fds = fd_count(pid);
    let mut r = Raw::hello(addr);
    r.send(&Message::TestRequest {
        test: TestSpec::Rr(proto::RrSpec {
            proto: proto::RrProto::Tcp,
            size: 1,
            reply: 16 << 20,
            iterations: 1000,
            nagle: false,
            until_stopped: false,
            sock: Default::default(),
            duration_ms: 0,
        }),
    });
    assert!(matches!(r.recv(), Ok(Message::TestAccept { .. })));
    // Ask for 16 MB replies and never read one.
    r.0.write_all(&[0u8; 4]).unwrap();
    let t0 = Instant::now();
    // The only test slot comes back once the server gives up on this client.
    loop {
        let out = netrig(&["rr", &addr.to_string(), "-n", "10", "--warmup", "0", "-q"])
            .output()
            .unwrap();
        if out.status.code() == Some(0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(12),
            "slot still held after {:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    drop(r);
    assert!(settles_to(pid, fds, 10) <= fds);
    assert!(srv.0.try_wait().unwrap().is_none());
}

#[test]
fn one_address_cannot_take_every_test_slot() {
    let (_srv, addr) = serve(&["-q", "--max-tests-per-client", "2"]);
    let tcp = json!({"type": "test_request", "test": {"kind": "tcp", "pattern": "push",
        "transfer": 1000, "push_bytes": 0, "pull_bytes": 0, "verify": "data",
        "connections": 1, "burst": null}});
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut r = Raw::hello(addr);
        r.send_json(&tcp);
        assert!(matches!(r.recv(), Ok(Message::TestAccept { .. })));
        held.push(r);
    }
    let why = Raw::hello(addr).refusal(&tcp);
    assert!(
        why.contains("max 2 concurrent tests per client address"),
        "{why}"
    );
    drop(held);
    // Slots come back when their sessions end.
    let t0 = Instant::now();
    loop {
        let mut r = Raw::hello(addr);
        r.send_json(&tcp);
        if matches!(r.recv(), Ok(Message::TestAccept { .. })) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "slots not returned");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// CPU time a process has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn out_of_descriptors_the_server_backs_off_and_recovers() {
    let mut cmd = std::process::Command::new("prlimit");
    cmd.args([
        "--nofile=64:64",
        BIN,
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--max-conns",
        "1000",
    ])
    .stderr(std::process::Stdio::piped());
    let (mut child, addr) = serve_cmd(cmd);
    let pid = child.0.id();
    // prlimit execs the server in place: the pid is the server's.
    let idle: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - before;
    // A spinning accept loop burns ~200 ticks in 2 s.
    assert!(
        used < 60,
        "server used {used} ticks in 2 s with no descriptors left"
    );
    drop(idle);
    std::thread::sleep(Duration::from_millis(200));
    alive(addr);
    sigint(pid);
    let mut err = String::new();
    let _ = wait_exit(&mut child, 10);
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let lines = err.lines().filter(|l| l.contains("accept:")).count();
    assert!(lines <= 2, "{lines} accept lines:\n{err}");
}

#[test]
fn data_connections_must_come_from_their_session_and_carry_its_proof() {
    let (_srv, addr) = serve(&["-q"]);
    let tcp = json!({"type": "test_request", "test": {"kind": "tcp", "pattern": "pull",
        "transfer": 1 << 20, "push_bytes": 0, "pull_bytes": 0, "verify": "data",
        "connections": 1, "burst": null}});
    let mut r = Raw::hello(addr);
    r.send_json(&tcp);
    let Ok(Message::TestAccept { session }) = r.recv() else {
        panic!("no session")
    };
    // Another host (127.0.0.2 is another source address on loopback).
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from(([127, 0, 0, 2], 0)).into())
        .unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut thief: TcpStream = sock.into();
    thief
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let hello = Message::DataHello(proto::DataHello {
        session,
        connection: uuid::Uuid::new_v4(),
        buffer: 65536,
        compact: false,
        proof: None,
    });
    proto::write_message(&mut thief, &hello).unwrap();
    match proto::read_message(&mut thief) {
        Ok(Message::Error { code, message }) => {
            assert_eq!(code, ErrorCode::ForeignHost, "{message}");
            assert!(message.contains("belongs to 127.0.0.1"), "{message}")
        }
        other => panic!("a foreign data connection was not refused: {other:?}"),
    }
}

#[test]
fn with_a_key_data_connections_need_the_sessions_proof() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "a shared secret of some length\n").unwrap();
    let (_srv, addr) = serve(&["-q", "--key", key.to_str().unwrap()]);
    // The real client proves every data connection.
    let out = netrig(&[
        "tcp",
        &addr.to_string(),
        "--key",
        key.to_str().unwrap(),
        "-n",
        "1M",
        "-P",
        "3",
        "--iterations",
        "1",
        "-q",
    ])
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A data connection from the right host that knows the session ID but
    // not the key is refused; with the session's proof it is accepted.
    let k = netrig::keyfile::load(&key).unwrap();
    let mut c = netrig::control::Control::connect(
        &addr.to_string(),
        0,
        |_| Ok(None),
        Duration::from_secs(5),
        Some(&k),
    )
    .unwrap();
    let spec: netrig::protocol::proto::TcpSpec = serde_json::from_value(json!({"pattern": "pull",
        "transfer": 1 << 20, "push_bytes": 0, "pull_bytes": 0, "verify": "data",
        "connections": 1, "burst": null}))
    .unwrap();
    let Ok(netrig::protocol::asking::Accept::Session(session)) = c.request(TestSpec::Tcp(spec))
    else {
        panic!("no session")
    };
    let dk = c.datagram_key.unwrap();
    assert!(c.compact_data_hello);
    // Each hello as JSON and in the fixed layout, whose proof is its bytes.
    let attach = |proof: Option<String>, layout: bool| {
        let connection = uuid::Uuid::new_v4();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let proof = proof.map(|p| {
            if p.is_empty() {
                netrig::protocol::auth::data_proof(&dk, &session, &connection)
            } else {
                p
            }
        });
        let hello = Message::DataHello(proto::DataHello {
            session,
            connection,
            buffer: 65536,
            compact: false,
            proof,
        });
        let frame = proto::compact::encode_for(&hello, layout);
        assert_eq!(frame[proto::HEADER_LEN] != b'{', layout);
        s.write_all(&frame).unwrap();
        proto::read_message(&mut s)
    };
    for layout in [false, true] {
        for bad in [None, Some("00".repeat(32))] {
            match attach(bad.clone(), layout) {
                Ok(Message::Error { code, message }) => {
                    assert_eq!(code, ErrorCode::Auth, "{message}");
                    assert!(message.contains("without a valid proof"), "{message}")
                }
                other => panic!("{bad:?} was not refused: {other:?}"),
            }
        }
        assert!(matches!(
            attach(Some(String::new()), layout),
            Ok(Message::DataAck { .. })
        ));
    }
}

#[test]
fn empty_and_weak_keys_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let weak = dir.path().join("weak");
    let mut abc = b"abc".to_vec();
    abc.extend([0u8; 15]);
    std::fs::write(&weak, abc).unwrap();
    let out = netrig(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--key",
        weak.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("control character"));
    let out = netrig(&["serve", "--listen", "127.0.0.1:0"])
        .env("NETRIG_KEY", "")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NETRIG_KEY is set but empty"));
}

#[test]
fn serve_exits_130_on_sigterm_as_documented() {
    let (mut srv, _addr) = serve(&["-q"]);
    let pid = srv.0.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert_eq!(wait_exit(&mut srv, 10).code(), Some(130));
}

/// How many of `conns` the far end has reset (looked at without blocking).
fn resets_seen(conns: &[TcpStream]) -> usize {
    conns
        .iter()
        .filter(|c| {
            c.set_nonblocking(true).unwrap();
            let r = c.peek(&mut [0u8; 1]);
            c.set_nonblocking(false).unwrap();
            matches!(r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
        })
        .count()
}

#[test]
fn a_far_future_departure_does_not_outlive_its_client() {
    let (srv, addr) = serve(&["-q"]);
    let pid = srv.0.id();
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("far.txt");
    // Nothing for 50 minutes, then a stream: the server's sender waits.
    std::fs::write(&profile, "0 0 100 hold\n3000 1M 100\n3600 1M 100\n").unwrap();
    // The readiness probe's thread may still be winding down.
    let mut base = threads(pid);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = threads(pid);
        if now == base {
            break;
        }
        base = now;
    }
    let p = &profile.to_str().unwrap();
    let mut c = Proc(
        netrig(&[
            "udp",
            &addr.to_string(),
            "-R",
            "--profile",
            p,
            "-t",
            "3600",
            "--pacing",
            "spin",
            "-q",
        ])
        .spawn()
        .unwrap(),
    );
    // The stream (1 Mbit/s of 100-byte datagrams: faster than the loop's
    // timers pace) takes a thread of the sender pool at its go.
    let t0 = Instant::now();
    while threads(pid) <= base {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the test did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.0.kill();
    let _ = c.0.wait();
    let t0 = Instant::now();
    while threads(pid) > base {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{} threads left after the client died",
            threads(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops a relay and returns its final counts from its JSON report.
fn relay_counts(p: Proc, json: &std::path::Path) -> Value {
    let (code, _) = interrupt(p);
    assert_eq!(code, Some(130));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    v["result"].clone()
}

#[test]
fn the_relay_caps_connections_and_closes_idle_ones() {
    let (_srv, to) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("relay.json");
    let (rl, addr) = relay(
        to,
        &[
            "--tcp-only",
            "--max-conns",
            "20",
            "--idle-timeout",
            "1s",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let pid = rl.0.id();
    // The relay's loops start after its listener is bound, so a count taken
    // now can miss them: the bound is fixed instead (two loops per core, the
    // accepting thread, the signal and report threads), whatever the count of
    // connections; the thread-per-connection relay had two pumps each.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bound = 2 * cores + 4;
    let t0 = Instant::now();
    let idle: Vec<TcpStream> = (0..60)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    // Every one is accepted (relayed or refused) before counting threads.
    let probe_until = Instant::now() + Duration::from_secs(5);
    while resets_seen(&idle) < 40 && Instant::now() < probe_until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(threads(pid) <= bound, "{} threads > {bound}", threads(pid));
    // Every connection ends: refused at once, or closed after a second idle.
    for mut c in idle {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.read(&mut [0u8; 1]);
    }
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    assert!(threads(pid) <= bound, "{} threads > {bound}", threads(pid));
    // A real test still goes through.
    let out = netrig(&[
        "tcp",
        &addr.to_string(),
        "-n",
        "1M",
        "--iterations",
        "1",
        "-q",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let c = relay_counts(rl, &json);
    // The relay's own readiness probe is one more connection.
    let (refused, idled) = (
        c["tcp_refused"].as_u64().unwrap(),
        c["idle_closed"].as_u64().unwrap(),
    );
    assert!(refused >= 40, "{c}");
    assert!(idled >= 19, "{c}");
}

#[test]
fn the_relay_caps_udp_flows_and_bounds_its_delay_line() {
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("relay.json");
    let log = dir.path().join("relay.csv");
    // The relay picks its port and names it: a port chosen here could be
    // handed to another test's socket before the relay binds it.
    let (rl, addr) = relay(
        to,
        &[
            "--udp-only",
            "--delay",
            "20s",
            "--max-flows",
            "10",
            "--max-queue",
            "1M",
            "--log",
            log.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let port = addr.port();
    let pid = rl.0.id();
    udp_drained(pid, port, "relay");
    let base_threads = threads(pid);
    let base_rss = rss_kib(pid);
    // 8 MB from one flow into a 20 s delay line that holds 1 MB, in batches
    // the relay has read before the next (so the kernel drops none).
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let chunk = [7u8; 8000];
    for i in 0..1000 {
        s.send_to(&chunk, addr).unwrap();
        if i % 10 == 9 {
            udp_drained(pid, port, "relay");
        }
    }
    // 100 one-byte datagrams, each from a new port: the sockets are kept
    // open until the counts are read, or the kernel may hand a closed one's
    // port to a later one, whose datagram then belongs to an admitted flow
    // (CI saw 90 refused instead of 91).
    let mut small = Vec::new();
    for _ in 0..100 {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(&[1], addr).unwrap();
        small.push(s);
    }
    udp_drained(pid, port, "relay");
    let grown = rss_kib(pid).saturating_sub(base_rss);
    assert!(grown < 5 * 1024, "relay RSS grew by {grown} KiB");
    // Per flow: a receiving thread each way and a delay thread each way.
    assert!(
        threads(pid) <= base_threads + 4 * 10,
        "{} threads",
        threads(pid)
    );
    let c = relay_counts(rl, &json);
    drop(small);
    // The big flow and 9 of the 100 new ones fit --max-flows 10.
    assert_eq!(c["udp_flows"], 10, "{c}");
    assert_eq!(c["udp_refused"], 91, "{c}");
    // All 1000 big datagrams and one byte from each of the 9 other flows
    // admitted reached the relay; the 1 MiB budget holds 129 of the big ones
    // at their memory (8,016 bytes of malloc and 80 of queue entry each).
    let up = &c["up"];
    assert_eq!(up["datagrams"], 1009, "{c}");
    let dropped = up["queue_dropped"].as_u64().unwrap();
    assert_eq!(dropped, 1000 - (1 << 20) / 8096, "{c}");
    assert_eq!(up["forwarded"], 1009 - dropped, "{c}");
    let logged = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(",queue_dropped,"))
        .count() as u64;
    assert_eq!(logged, dropped);
}

#[test]
fn burst_records_held_by_one_session_are_bounded() {
    let (_srv, addr) = serve(&["-q"]);
    // 10,000 one-byte bursts a connection: the most one connection may ask.
    let tcp = json!({"type": "test_request", "test": {"kind": "tcp", "pattern": "pull",
        "transfer": 10_000, "push_bytes": 0, "pull_bytes": 0, "verify": "data",
        "connections": 11, "burst": {"size": 1, "period_ms": 300}}});
    let mut r = Raw::hello(addr);
    r.send_json(&tcp);
    let reply = r.recv();
    let Ok(Message::TestAccept { session }) = reply else {
        panic!("no session: {reply:?}")
    };
    let attach = || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let hello = Message::DataHello(proto::DataHello {
            session,
            connection: uuid::Uuid::new_v4(),
            buffer: 65536,
            compact: false,
            proof: None,
        });
        proto::write_message(&mut s, &hello).unwrap();
        let reply = proto::read_message(&mut s);
        (s, reply)
    };
    // Ten live connections hold 100,000 records; the eleventh would pass the cap.
    let mut live = Vec::new();
    for i in 0..10 {
        let (s, reply) = attach();
        assert!(
            matches!(reply, Ok(Message::DataAck { .. })),
            "connection {i}: {reply:?}"
        );
        live.push(s);
    }
    match attach().1 {
        Ok(Message::Error { code, message }) => {
            assert_eq!(code, ErrorCode::LimitBurstRecords, "{message}");
            assert!(message.contains("burst records per session"), "{message}")
        }
        other => panic!("an eleventh connection was not refused: {other:?}"),
    }
    // Records are given back when connections end.
    drop(live.pop());
    let t0 = Instant::now();
    loop {
        if let (s, Ok(Message::DataAck { .. })) = attach() {
            live.push(s);
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "records not returned"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends zeros as fast as the connection takes them and reads what comes
/// back, until the server ends the connection or `limit` passes. Returns
/// the bytes sent (an upper bound on what the server read), what came back,
/// and whether the server ended the connection.
fn send_zeros(addr: SocketAddr, limit: Duration) -> (u64, Vec<u8>, bool) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nonblocking(true).unwrap();
    let zeros = vec![0u8; 64 << 10];
    let (mut sent, mut back, mut buf) = (0u64, Vec::new(), [0u8; 4096]);
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        match (&s).write(&zeros) {
            Ok(n) => sent += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // Reset or broken pipe: the server closed with bytes unread.
            // What it wrote before may still wait in the receive queue,
            // unread if the failed write comes first.
            Err(_) => {
                while let Ok(n @ 1..) = (&s).read(&mut buf) {
                    back.extend_from_slice(&buf[..n]);
                }
                return (sent, back, true);
            }
        }
        match (&s).read(&mut buf) {
            Ok(0) => {}
            Ok(n) => back.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return (sent, back, true),
        }
    }
    (sent, back, false)
}

#[test]
fn a_sender_of_zeros_gets_the_error_and_a_close_not_a_sink() {
    // Issue 26, item 4: the server read garbage for 30 s after its error
    // frame (12-19 GB in 12 s). Now it lingers at most 1 s and reads at most
    // 1 MiB before closing. One-sided bounds, tried three times.
    let srv = Logged::start(&[]);
    let mut tries = Vec::new();
    for _ in 0..3 {
        let t0 = Instant::now();
        let (sent, back, closed) = send_zeros(srv.addr, Duration::from_secs(8));
        let took = t0.elapsed();
        // The error frame came first, whole, naming the problem.
        let frame = proto::read_message(&mut &back[..]);
        assert!(
            matches!(&frame, Ok(Message::Error { code: ErrorCode::Malformed, message }) if message.contains("not a netrig frame")),
            "{frame:?}"
        );
        assert!(closed, "still open after {took:?}, {sent} bytes sent");
        // What was sent bounds what the server read: its 1 MiB plus the
        // kernel buffers between the two ends.
        assert!(sent < 64 << 20, "{sent} bytes sent before the close");
        tries.push(took);
        if took < Duration::from_secs(3) {
            // One line in the log, naming the client.
            srv.wait_for(&["refused: not a netrig frame"], 1);
            return;
        }
    }
    panic!("the close took {tries:?}");
}

/// Runs `cmd` to its end, or kills it after `limit`; returns how long it
/// ran, whether it ended by itself, and its output.
fn run_for(mut cmd: std::process::Command, limit: Duration) -> (Duration, bool, String) {
    let t0 = Instant::now();
    let mut p = Proc(
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let ended = loop {
        if p.0.try_wait().unwrap().is_some() {
            break true;
        }
        if t0.elapsed() > limit {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t0.elapsed();
    let _ = p.0.kill();
    let mut out = String::new();
    let _ = p.0.stdout.take().unwrap().read_to_string(&mut out);
    let _ = p.0.stderr.take().unwrap().read_to_string(&mut out);
    (took, ended, out)
}

fn installed(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok()
}

#[test]
fn iperf2_and_iperf3_clients_fail_at_once_and_are_logged() {
    // Issue 26, item 4: `iperf -c HOST -p 4794 -t 13` "succeeded" against
    // netrig serve at 23.6 Gbit/s. Each client must fail within 3 s
    // (one-sided, three tries) and leave one line in the log.
    let srv = Logged::start(&[]);
    let port = srv.addr.port().to_string();
    let mut ran = 0;
    for tool in ["iperf", "iperf3"] {
        if !installed(tool) {
            eprintln!("SKIPPED {tool}: not installed (apt-get install {tool}; .ci/run does)");
            continue;
        }
        ran += 1;
        let mut tries = Vec::new();
        loop {
            let mut cmd = std::process::Command::new(tool);
            cmd.args(["-c", "127.0.0.1", "-p", &port, "-t", "10"]);
            let (took, ended, out) = run_for(cmd, Duration::from_secs(12));
            assert!(ended, "{tool} ran {took:?} against netrig serve: {out}");
            // iperf2 exits 0 whatever happened: its words say it failed.
            let failed =
                out.to_lowercase().contains("failed") || out.to_lowercase().contains("error");
            assert!(failed, "{tool} did not fail: {out}");
            tries.push(took);
            if took < Duration::from_secs(3) {
                break;
            }
            assert!(tries.len() < 3, "{tool} took {tries:?} to fail");
        }
    }
    if ran > 0 {
        srv.wait_for(&["127.0.0.1:", "refused: not a netrig frame"], ran);
    }
}

#[test]
fn every_refusal_is_one_log_line_naming_the_client_and_the_limit() {
    // Issue 26, item 11: only "wrong key" reached the log.
    let dir = tempfile::tempdir().unwrap();
    let keyfile = dir.path().join("key");
    std::fs::write(&keyfile, "a shared secret of some length\n").unwrap();
    let srv = Logged::start(&[
        "--max-rate",
        "1M",
        "--max-duration",
        "2s",
        "--max-tests-per-client",
        "1",
    ]);
    let t = srv.addr.to_string();
    let refused = |args: &[&str]| {
        let out = netrig(args).env_remove("NETRIG_KEY").output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{args:?}: {out:?}");
    };
    refused(&["udp", &t, "-b", "10M", "-t", "1", "-q"]);
    srv.wait_for(&["127.0.0.1:", "refused: server limit: max rate"], 1);
    refused(&["udp", &t, "-b", "100k", "-t", "5", "-q"]);
    srv.wait_for(
        &["127.0.0.1:", "refused: server limit: max duration 2 s"],
        1,
    );
    // One test from this address runs; the second is over the per-client cap.
    let _busy = spawn_ready(
        &["udp", &t, "--rate", "100k", "-d", "2"],
        |l| l.starts_with("UDP client -> server"),
        10,
    );
    refused(&["rr", &t, "--iterations", "10", "-q"]);
    srv.wait_for(
        &[
            "127.0.0.1:",
            "refused: server limit: max 1 concurrent tests per client",
        ],
        1,
    );
    // A server with a key: a client without one.
    let keyed = Logged::start(&["--key", keyfile.to_str().unwrap()]);
    let k = keyed.addr.to_string();
    refused(&["tcp", &k, "-n", "64K", "-q"]);
    keyed.wait_for(&["127.0.0.1:", "refused: authentication required"], 1);
    // Each refusal once: one line each, no more (a line is written before
    // its refusal is sent).
    let refusals = |l: &Logged| {
        let lines = l.lines.lock().unwrap();
        lines.iter().filter(|l| l.contains(": refused: ")).count()
    };
    assert_eq!(refusals(&srv), 3, "{:?}", srv.lines.lock().unwrap());
    assert_eq!(refusals(&keyed), 1, "{:?}", keyed.lines.lock().unwrap());
}
