//! Request/response latency over loopback: TCP and UDP, warm-up accounting,
//! loss up versus down and corruption through the impairment relay, and the
//! SCTP path on kernels without SCTP.

use crate::bin;
use crate::common;
use crate::udp_relay;

use common::TestServer;
use netrig::rr::client::{RrConfig, RrReport, Transport, run};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use udp_relay::{Impair, UdpRelay};

fn cfg(target: SocketAddr, transport: Transport) -> RrConfig {
    RrConfig {
        key: None,
        target: target.to_string(),
        port: 0,
        transport,
        size: 256,
        reply: 64,
        iterations: 2000,
        warmup: 50,
        nagle: false,
        busy_poll: false,
        rx_timestamps: false,
        timeout: Some(Duration::from_millis(50)),
        interval: None,
        hist_min_us: 0.0,
        hist_max_us: 1000.0,
        hist_bins: 100,
        outliers: 10,
        synced: false,
        bind: Vec::new(),
        sock: Default::default(),
        start_at: None,
        bind_dev: None,
        cport: None,
        duration: None,
        connect_timeout: None,
    }
}

fn go(c: &RrConfig) -> RrReport {
    run(c, Arc::new(AtomicBool::new(false)), &mut |_, _| {})
        .expect("rr run")
        .0
}

/// Transactions per second count wall-clock time, pauses between round trips
/// included (ACE's calls per second), not just the sum of round trips: paced
/// at one request per millisecond, a run does at most ~1000 per second.
#[test]
fn transactions_per_second_are_wall_clock() {
    let srv = TestServer::start();
    for t in [Transport::Tcp, Transport::Udp] {
        let mut c = cfg(srv.addr, t);
        (c.iterations, c.warmup, c.interval) = (300, 0, Some(Duration::from_millis(1)));
        let r = go(&c);
        let tps = r.transactions_per_sec;
        // The sum of ~20 us round trips would give ~50,000. 300 requests
        // paced 1 ms apart span at least 299 ms: at most 300/0.299 a second;
        // a sender that kept its schedule only roughly still does over half.
        assert!(tps > 500.0 && tps <= 300.0 / 0.299, "{t:?}: {tps}");
    }
}

/// The server puts a short UDP reply together in one buffer and has the
/// kernel gather a long one from its parts: either way every reply arrives
/// whole, at every size around the switch.
#[test]
fn udp_replies_arrive_whole_whether_put_together_or_gathered() {
    let srv = TestServer::start();
    for reply in [64, 1023, 1024, 1025, 9000] {
        let mut c = cfg(srv.addr, Transport::Udp);
        (c.iterations, c.warmup, c.reply) = (200, 0, reply);
        let r = go(&c);
        assert_eq!(
            (r.sent, r.received, r.corrupt, r.server_corrupt),
            (200, 200, 0, Some(0)),
            "{reply} B replies"
        );
    }
}

#[test]
fn tcp_and_udp_round_trips_with_warmup_apart() {
    let srv = TestServer::start();
    for t in [Transport::Tcp, Transport::Udp] {
        for busy in [false, true] {
            let mut c = cfg(srv.addr, t);
            c.busy_poll = busy;
            let r = go(&c);
            let l = r.latency.expect("latency");
            assert_eq!(l.count, 2000, "{t:?}");
            assert_eq!(r.warmup.expect("warm-up").count, 50);
            assert_eq!((r.sent, r.received, r.corrupt), (2050, 2050, 0));
            assert_eq!(
                r.server_requests,
                Some(2050),
                "server answered every request"
            );
            assert_eq!(r.server_corrupt, Some(0));
            assert!(l.min_us > 0.0 && l.min_us <= l.mean_us && l.mean_us <= l.max_us);
            let p: Vec<f64> = l.percentiles_us.iter().map(|x| x.1).collect();
            assert!(
                p.windows(2).all(|w| w[0] <= w[1]),
                "percentiles ascend: {p:?}"
            );
            // Round trips follow one another: they fill at most all of the
            // wall-clock time (and, with nothing else to do, most of it).
            let busy = r.transactions_per_sec * l.mean_us / 1e6;
            assert!(busy > 0.1 && busy <= 1.001, "{t:?}: {busy}");
            if t == Transport::Udp {
                assert_eq!((r.lost_up, r.lost_down), (Some(0), Some(0)));
            }
        }
    }
}

/// Checks that every one of `n` requests was answered exactly once and
/// its reply came back in time: none lost, late, duplicated or corrupt.
fn each_answered_once(r: &RrReport, n: u64) {
    assert_eq!(
        (r.sent, r.received, r.late, r.corrupt),
        (n, n, 0, 0),
        "{r:?}"
    );
    assert_eq!(r.server_requests, Some(n), "{r:?}");
    assert_eq!((r.lost_up, r.lost_down), (Some(0), Some(0)), "{r:?}");
    assert_eq!(
        (r.duplicates_up, r.duplicates_down),
        (Some(0), Some(0)),
        "{r:?}"
    );
}

/// Requests on a schedule far faster than a round trip arrive at the
/// server several at a time. Its session reads them in batches and stops
/// reading when a batch comes back short (the socket is drained: another
/// read would only say so, a system call per round trip); every request is
/// still answered exactly once.
#[test]
fn udp_requests_queued_together_are_each_answered_once() {
    let srv = TestServer::start();
    let mut c = cfg(srv.addr, Transport::Udp);
    (c.iterations, c.warmup, c.interval) = (300, 0, Some(Duration::from_micros(1)));
    c.timeout = Some(Duration::from_secs(5));
    each_answered_once(&go(&c), 300);
}

/// The same behind the server's rate limit: a request read in the same
/// batch as one whose reply the limit holds back waits for it, and is
/// answered after it, once.
#[test]
fn udp_requests_queued_behind_a_held_reply_are_each_answered_once() {
    let srv = TestServer::start_with(|s| s.limits.max_rate_bps = 4_000_000);
    let mut c = cfg(srv.addr, Transport::Udp);
    // 30 replies of 8,032 bytes at 4 Mbit/s, less what the bucket lets go
    // at once: about 0.45 s, so most replies are held.
    (c.size, c.reply) = (40, 8000);
    (c.iterations, c.warmup, c.interval) = (30, 0, Some(Duration::from_micros(1)));
    c.timeout = Some(Duration::from_secs(10));
    each_answered_once(&go(&c), 30);
}

#[test]
fn udp_loss_up_and_down_are_told_apart() {
    let srv = TestServer::start();
    for c2s in [true, false] {
        let relay = UdpRelay::start(
            srv.addr,
            Impair {
                drop_every: 10,
                ..Default::default()
            },
            c2s,
        );
        let mut c = cfg(relay.addr, Transport::Udp);
        c.iterations = 400;
        c.warmup = 0;
        let r = go(&c);
        let (_, dropped, ..) = relay.get();
        assert_eq!(dropped, 40);
        let (up, down) = (r.lost_up.unwrap(), r.lost_down.unwrap());
        if c2s {
            assert_eq!((up, down), (40, 0), "requests dropped");
        } else {
            assert_eq!((up, down), (0, 40), "replies dropped");
        }
        assert_eq!(r.received, 360);
    }
}

#[test]
fn udp_corruption_is_seen_by_the_end_that_receives_it() {
    let srv = TestServer::start();
    for c2s in [true, false] {
        let relay = UdpRelay::start(
            srv.addr,
            Impair {
                corrupt_every: 7,
                ..Default::default()
            },
            c2s,
        );
        let mut c = cfg(relay.addr, Transport::Udp);
        c.iterations = 700;
        c.warmup = 0;
        let r = go(&c);
        let (.., corrupted) = relay.get();
        assert_eq!(corrupted, 100);
        if c2s {
            assert_eq!((r.server_corrupt, r.corrupt), (Some(100), 0));
        } else {
            assert_eq!((r.server_corrupt, r.corrupt), (Some(0), 100));
        }
    }
}

#[test]
fn ping_paces_probes() {
    let srv = TestServer::start();
    let mut c = cfg(srv.addr, Transport::Udp);
    c.iterations = 20;
    c.warmup = 0;
    c.interval = Some(Duration::from_millis(10));
    let mut probes = Vec::new();
    let t0 = std::time::Instant::now();
    let r = run(&c, Arc::new(AtomicBool::new(false)), &mut |p, _| {
        probes.push(p.clone())
    })
    .unwrap()
    .0;
    let el = t0.elapsed();
    assert!(
        el >= Duration::from_millis(190),
        "20 probes 10 ms apart take >= 190 ms: {el:?}"
    );
    assert_eq!(probes.len(), 20);
    assert!(
        probes
            .iter()
            .all(|p| p.rtt_us.is_some() && p.up_us.is_some() && p.down_us.is_some())
    );
    assert_eq!(r.received, 20);
}

const BIN: &str = env!("CARGO_BIN_EXE_netrig");

#[test]
#[cfg_attr(sctp_kernel, ignore = "this kernel has SCTP; see sctp_round_trips")]
fn sctp_without_kernel_support_says_so() {
    for proto in ["sctp", "sctp-seqpacket"] {
        let out = std::process::Command::new(BIN)
            .args(["rr", "--proto", proto])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(6), "{proto}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("SCTP is not supported by this kernel"),
            "{err}"
        );
    }
}

#[test]
#[cfg_attr(not(sctp_kernel), ignore = "SCTP is not supported by this kernel")]
fn sctp_round_trips() {
    served_in_full(&["rr", "--proto", "sctp", "-n", "100"], 100);
}

/// Runs `args` (a single rr run of `n` round trips and the default 100
/// warm-up ones) and checks both ends counted every one, uncorrupted.
fn served_in_full(args: &[&str], n: u64) {
    let (v, _) = bin::run_json(args, 0);
    let r = &v["result"]["runs"][0];
    assert_eq!(r["error"], serde_json::Value::Null, "{r}");
    for k in ["sent", "received", "server_requests"] {
        assert_eq!(r[k], n + 100, "{k}: {r}");
    }
    assert_eq!(
        (&r["corrupt"], &r["server_corrupt"]),
        (&0.into(), &0.into()),
        "{r}"
    );
    assert_eq!(r["latency"]["count"], n, "{r}");
    assert_eq!(r["warmup"]["count"], 100, "{r}");
}

/// ACE's one-to-many test, multi-homed on two loopback addresses: every
/// request answered and verified by both ends.
#[test]
#[cfg_attr(not(sctp_kernel), ignore = "SCTP is not supported by this kernel")]
fn sctp_seqpacket_multihomed_round_trips() {
    let server = TestServer::start();
    let mut c = cfg(server.addr, Transport::SctpSeqpacket);
    c.bind = vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()];
    let r = go(&c);
    assert_eq!(r.error, None);
    assert_eq!(r.received, 2050);
    assert_eq!(r.corrupt, 0);
    assert_eq!(r.server_requests, Some(2050));
    assert_eq!(r.server_corrupt, Some(0));
    assert_eq!(r.latency.as_ref().map(|l| l.count), Some(2000));
}

/// One-to-many sessions run on the server's loops, not a thread each: twelve
/// at once leave the server's thread count where it was (a worker per
/// session would add twelve), and each is answered in full. Then requests
/// and replies of hundreds of KiB, near the socket buffers' default cap
/// (where the kernel may hand a message over in pieces), arrive whole and
/// verified at both ends.
#[test]
#[cfg_attr(not(sctp_kernel), ignore = "SCTP is not supported by this kernel")]
fn sctp_seqpacket_sessions_share_the_loops_and_large_messages_arrive_whole() {
    let (srv, addr) = bin::serve(&["--max-tests-per-client", "16"]);
    let pid = srv.0.id();
    let before = bin::threads(pid);
    let target = addr.to_string();
    let mut clients: Vec<_> = (0..12)
        .map(|_| {
            bin::netrig(&["rr", &target, "--proto", "sctp-seqpacket", "-t", "2s"])
                .args(["-q", "-J"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut most = before;
    while clients.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        most = most.max(bin::threads(pid));
        std::thread::sleep(Duration::from_millis(5));
    }
    for c in clients {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let r = &v["result"]["runs"][0];
        // Under emulation (the VM) a loaded run may make only a few dozen.
        assert!(r["sent"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["server_requests"], r["sent"], "{r}");
        assert_eq!(
            (&r["corrupt"], &r["server_corrupt"]),
            (&0.into(), &0.into()),
            "{r}"
        );
    }
    assert!(
        most <= before,
        "server threads went from {before} to {most} with 12 sessions"
    );
    let big = [
        "rr",
        &target,
        "--proto",
        "sctp-seqpacket",
        "-n",
        "10",
        "--warmup",
        "2",
    ];
    let (v, _) = bin::run_json(&[&big[..], &["-l", "150K", "--reply", "200K"]].concat(), 0);
    let r = &v["result"]["runs"][0];
    assert_eq!(r["error"], serde_json::Value::Null, "{r}");
    for k in ["sent", "received", "server_requests"] {
        assert_eq!(r[k], 12, "{k}: {r}");
    }
    assert_eq!(
        (&r["corrupt"], &r["server_corrupt"]),
        (&0.into(), &0.into()),
        "{r}"
    );
}

/// A server on a kernel without SCTP refuses a one-to-many request with the
/// reason, rather than accepting and leaving the client waiting.
#[test]
#[cfg_attr(
    sctp_kernel,
    ignore = "this kernel has SCTP; see sctp_seqpacket_multihomed_round_trips"
)]
fn a_server_without_sctp_refuses_seqpacket_with_the_reason() {
    use netrig::control::{ClientError, Control};
    use netrig::protocol::proto::{ErrorCode, RrProto, RrSpec, TestSpec};
    let server = TestServer::start();
    let mut c = Control::connect(
        &server.addr.to_string(),
        0,
        |_| Ok(None),
        Duration::from_secs(5),
        None,
    )
    .unwrap();
    let r = c.request(TestSpec::Rr(RrSpec::plain(
        RrProto::SctpSeqpacket,
        64,
        2,
        10,
    )));
    match r {
        Err(ClientError::Refused { code, message, .. }) => {
            assert_eq!(code, ErrorCode::Unsupported, "{message}");
            assert!(message.contains("SCTP is not supported"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn several_bind_addresses_need_sctp_seqpacket() {
    let out = std::process::Command::new(BIN)
        .args(["rr", "--bind", "127.0.0.1,127.0.0.2", "-n", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("need --proto sctp-seqpacket"), "{err}");
    // One address is the local address of an ordinary TCP run.
    served_in_full(&["rr", "--bind", "127.0.0.1", "-n", "50"], 50);
}

#[test]
fn rr_cli_spectrum_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let (csv_path, hist) = (dir.path().join("spec.csv"), dir.path().join("hist.csv"));
    let out = std::process::Command::new(BIN)
        .args([
            "rr",
            "--spectrum",
            "0..4",
            "-n",
            "200",
            "--csv",
            csv_path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let rows: Vec<_> = csv::Reader::from_path(&csv_path)
        .unwrap()
        .records()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(rows.len(), 5);
    assert_eq!(
        rows.iter().map(|r| r[0].to_string()).collect::<Vec<_>>(),
        ["1", "2", "4", "8", "16"]
    );
    let out = std::process::Command::new(BIN)
        .args([
            "rr",
            "-n",
            "500",
            "--hist-bins",
            "10",
            "--hist-max",
            "1ms",
            "--outliers",
            "3",
            "--hist-file",
            hist.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout.contains("Percentiles (us): p50")
            && stdout.contains("p99.999")
            && stdout.contains("outliers:"),
        "{stdout}"
    );
    let rows: Vec<_> = csv::Reader::from_path(&hist)
        .unwrap()
        .records()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(rows.len(), 12, "below + 10 bins + above");
    assert_eq!(
        rows.iter()
            .map(|r| r[2].parse::<u64>().unwrap())
            .sum::<u64>(),
        500
    );
    let out = std::process::Command::new(BIN)
        .args(["rr", "--spectrum", "5..2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn crr_counts_transactions_and_handshakes() {
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("crr.json");
    let out = std::process::Command::new(BIN)
        .args([
            "crr",
            "-n",
            "600",
            "-c",
            "3",
            "--size",
            "100",
            "--reply",
            "7",
            "--json",
            js.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("600 succeeded, 0 failed"), "{stdout}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    assert_eq!(doc["result"]["transactions"], 600);
    assert_eq!(doc["result"]["handshake"]["count"], 600);
    let hs = doc["result"]["handshake"]["mean_us"].as_f64().unwrap();
    let tx = doc["result"]["transaction"]["mean_us"].as_f64().unwrap();
    assert!(
        hs > 0.0 && tx > hs,
        "a transaction includes its handshake: {hs} < {tx}"
    );
    // Each transaction's TCP_INFO, from both ends (the server's in its
    // final report), summed as for tcp.
    for end in ["tcp_info", "server_tcp_info"] {
        let i = &doc["result"][end];
        assert_eq!(i["connections"], 600, "{end}: {i}");
        assert!(i["rtt_max_us"].as_u64().unwrap() > 0, "{end}: {i}");
    }
    assert!(
        stdout.contains("TCP_INFO (server ends, 600 connections)"),
        "{stdout}"
    );
}

#[test]
fn tcp_corruption_each_way_is_counted_per_reply_and_per_request() {
    use common::TestRelay;
    use netrig::protocol::relay::impair::ImpairSpec;
    let srv = TestServer::start();
    for up in [true, false] {
        // 100-byte requests and replies, one flipped byte every 1000 data bytes:
        // exactly one request (or reply) in ten is corrupt.
        let relay = TestRelay::one_way(
            srv.addr,
            ImpairSpec {
                corrupt_every: 1000,
                ..Default::default()
            },
            up,
        );
        let mut c = cfg(relay.addr, Transport::Tcp);
        (c.size, c.reply, c.iterations, c.warmup) = (100, 100, 1000, 0);
        let r = go(&c);
        let counts = relay.counts();
        let flipped = if up {
            counts.up.stream_corrupted
        } else {
            counts.down.stream_corrupted
        };
        assert_eq!(flipped, 100);
        if up {
            assert_eq!((r.server_corrupt, r.corrupt), (Some(100), 0));
        } else {
            assert_eq!((r.server_corrupt, r.corrupt), (Some(0), 100));
        }
        assert_eq!(
            r.server_requests,
            Some(1000),
            "a flip does not stop the test"
        );
    }
}

#[test]
fn tcp_reset_is_a_failed_run_that_keeps_what_was_measured() {
    use common::TestRelay;
    use netrig::protocol::relay::impair::ImpairSpec;
    let srv = TestServer::start();
    for up in [true, false] {
        let relay = TestRelay::one_way(
            srv.addr,
            ImpairSpec {
                reset_after: Some(5000),
                ..Default::default()
            },
            up,
        );
        let mut c = cfg(relay.addr, Transport::Tcp);
        (c.size, c.reply, c.iterations, c.warmup) = (100, 100, 1000, 0);
        let (r, stats) = run(&c, Arc::new(AtomicBool::new(false)), &mut |_, _| {}).unwrap();
        let e = r.error.expect("a reset connection cannot succeed");
        assert!(e.contains("failed after"), "up={up}: {e}");
        assert_eq!(relay.events("reset").len(), 1);
        // What was measured before the reset is kept: the relay resets after
        // 5000 bytes one way, i.e. within the 50th request or reply.
        assert!(
            r.received > 0 && r.received <= 50,
            "up={up}: {}",
            r.received
        );
        assert_eq!(stats.count(), r.received);
        assert_eq!(r.server_requests, None, "no summary after a reset");
    }
}

#[test]
fn udp_random_loss_each_way_and_delay_through_the_relay() {
    use common::TestRelay;
    use netrig::protocol::relay::impair::ImpairSpec;
    let srv = TestServer::start();
    let spec = ImpairSpec {
        loss: 0.05,
        delay_ns: 2_000_000,
        ..Default::default()
    };
    let relay = TestRelay::start(srv.addr, spec.clone(), spec);
    let mut c = cfg(relay.addr, Transport::Udp);
    (c.iterations, c.warmup) = (400, 0);
    c.timeout = Some(Duration::from_millis(60));
    let r = go(&c);
    let k = relay.counts();
    assert!(k.up.lost > 5 && k.down.lost > 5, "{k:?}");
    assert_eq!(r.lost_up, Some(k.up.lost));
    assert_eq!(r.lost_down, Some(k.down.lost));
    assert_eq!(r.received, 400 - k.up.lost - k.down.lost);
    let l = r.latency.expect("latency");
    // 2 ms each way: no round trip can be shorter than 4 ms.
    assert!(l.min_us >= 4000.0, "{l:?}");
}

#[test]
fn udp_sessions_outlive_the_handshake_timeout() {
    // A server whose handshake timeout is far shorter than the test: the
    // silent control connection of a running UDP test must not be dropped.
    let srv = TestServer::start_with(|c| c.handshake_timeout = Duration::from_millis(200));
    let mut c = cfg(srv.addr, Transport::Udp);
    (c.iterations, c.warmup) = (100, 0);
    c.interval = Some(Duration::from_millis(10));
    let r = go(&c);
    assert_eq!(r.received, 100);
    assert_eq!(
        r.server_requests,
        Some(100),
        "the session lived to say goodbye"
    );
}

#[test]
fn udp_round_trips_can_end_at_the_kernel_receive_time() {
    let srv = TestServer::start();
    let mut c = cfg(srv.addr, Transport::Udp);
    c.rx_timestamps = true;
    let r = go(&c);
    assert_eq!(r.received, 2050);
    // Every reply carried a kernel timestamp and was timed by it.
    assert_eq!(r.rx_stamped, r.received);
    let l = r.latency.expect("latency");
    assert!(l.min_us > 0.0 && l.min_us <= l.mean_us);
    // Without the option nothing is kernel-timed.
    c.rx_timestamps = false;
    assert_eq!(go(&c).rx_stamped, 0);
}

/// Probes keep their absolute schedule whatever is lost: with every 5th
/// request dropped and a 1 s timeout, 20 probes 50 ms apart still all leave
/// within ~1 s (waiting for each lost reply would take 4 s longer), and a
/// lost probe never delays the next.
#[test]
fn ping_schedule_does_not_wait_for_lost_replies() {
    let srv = TestServer::start();
    let relay = UdpRelay::start(
        srv.addr,
        Impair {
            drop_every: 5,
            ..Default::default()
        },
        true,
    );
    let mut c = cfg(relay.addr, Transport::Udp);
    (c.iterations, c.warmup) = (20, 0);
    c.interval = Some(Duration::from_millis(50));
    c.timeout = Some(Duration::from_secs(1));
    let t0 = std::time::Instant::now();
    let mut seen = Vec::new();
    let r = run(&c, Arc::new(AtomicBool::new(false)), &mut |p, _| {
        seen.push((p.seq, p.rtt_us.is_some(), t0.elapsed()))
    })
    .unwrap()
    .0;
    assert_eq!((r.sent, r.received, r.lost_up), (20, 16, Some(4)));
    // The reply to probe 19 comes ~950 ms after the start; a schedule held up
    // by each lost reply would put it past 4.9 s.
    let last_ok = seen.iter().filter(|s| s.1).map(|s| s.2).max().unwrap();
    assert!(last_ok < Duration::from_millis(2500), "{seen:?}");
    // Probe 5 (after the first loss, probe 4) is answered well before probe
    // 4's timeout would have let a waiting sender go on.
    let p5 = seen.iter().find(|s| s.0 == 5).unwrap();
    assert!(p5.1 && p5.2 < Duration::from_millis(900), "{seen:?}");
}

/// A reply that comes after its timeout is matched to its probe and counted
/// late, once: not received, and not lost a second time in the down count.
#[test]
fn late_replies_are_counted_late_not_lost_twice() {
    use common::TestRelay;
    use netrig::protocol::relay::impair::ImpairSpec;
    let srv = TestServer::start();
    let down = ImpairSpec {
        delay_ns: 150_000_000,
        ..Default::default()
    };
    let relay = TestRelay::start(srv.addr, ImpairSpec::default(), down);
    let mut c = cfg(relay.addr, Transport::Udp);
    (c.iterations, c.warmup) = (10, 0);
    // Probe i leaves at 40i ms, times out at 40i + 50 and is answered at
    // 40i + 150; the run ends at probe 9's timeout (410 ms), after the late
    // replies to probes 0..=6.
    c.interval = Some(Duration::from_millis(40));
    c.timeout = Some(Duration::from_millis(50));
    let mut lines = Vec::new();
    let r = run(&c, Arc::new(AtomicBool::new(false)), &mut |p, _| {
        lines.push(netrig::report::ping_line(64, "x", p))
    })
    .unwrap()
    .0;
    // The run waits for each probe's timeout, not for late replies: the
    // last replies may still be in flight when it ends.
    assert_eq!(r.received, 0, "{lines:?}");
    assert!(r.late >= 5, "{r:?} {lines:?}");
    assert_eq!(r.lost_up, Some(0));
    assert_eq!(r.lost_down, Some(10 - r.late), "{r:?}");
    assert_eq!(lines.iter().filter(|l| l.contains("lost")).count(), 10);
    assert_eq!(
        lines.iter().filter(|l| l.contains("late reply")).count() as u64,
        r.late
    );
}

/// Unsynchronised clocks: each probe's one-way split carries the offset's ±
/// bound; with --synced it is given as measured.
#[test]
fn ping_split_carries_its_bound_unless_clocks_are_synced() {
    let srv = TestServer::start();
    for synced in [false, true] {
        let mut c = cfg(srv.addr, Transport::Udp);
        (c.iterations, c.warmup, c.synced) = (3, 0, synced);
        c.interval = Some(Duration::from_millis(5));
        let mut lines = Vec::new();
        run(&c, Arc::new(AtomicBool::new(false)), &mut |p, _| {
            lines.push(netrig::report::ping_line(64, "x", p))
        })
        .unwrap();
        assert_eq!(lines.len(), 3);
        for l in &lines {
            assert!(l.contains(" up=") && l.contains(" down="), "{l}");
            assert_eq!(l.contains('\u{b1}'), !synced, "{l}");
        }
    }
}

/// `ping` without a count runs until interrupted, against a default server
/// (it used to ask for 2^64 requests and be refused by --max-bytes).
#[test]
fn unbounded_ping_is_accepted_and_runs_until_interrupted() {
    let srv = TestServer::start();
    let mut c = cfg(srv.addr, Transport::Udp);
    (c.iterations, c.warmup) = (netrig::rr::client::UNBOUNDED, 0);
    c.interval = Some(Duration::from_millis(5));
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let mut n = 0;
    let r = run(&c, Arc::clone(&stop), &mut |_, _| {
        n += 1;
        if n == 20 {
            s.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    })
    .expect("a default server accepts an unbounded ping")
    .0;
    assert!(r.interrupted && r.received >= 20, "{r:?}");
}

/// The relay's TCP delay line runs on its event loops: every round trip
/// through `--delay 10ms` up and `5ms` down takes at least 15 ms, and no
/// more than a loop tick or two beyond it (a generous one-sided bound: a
/// loaded host can only add time).
#[test]
fn tcp_delay_each_way_through_the_relay_adds_to_every_round_trip() {
    use common::TestRelay;
    use netrig::protocol::relay::impair::ImpairSpec;
    let srv = TestServer::start();
    let ms = |n: u64| n * 1_000_000;
    let relay = TestRelay::start(
        srv.addr,
        ImpairSpec {
            delay_ns: ms(10),
            ..Default::default()
        },
        ImpairSpec {
            delay_ns: ms(5),
            ..Default::default()
        },
    );
    let mut c = cfg(relay.addr, Transport::Tcp);
    (c.size, c.reply, c.iterations, c.warmup) = (100, 1000, 40, 0);
    let r = go(&c);
    let lat = r.latency.expect("latency");
    assert_eq!((r.received, r.corrupt), (40, 0));
    assert!(lat.min_us >= 15_000.0, "{lat:?}");
    let p50 = lat.percentiles_us[0].1;
    assert!(p50 < 15_000.0 + 50_000.0, "{lat:?}");
}

/// Loss, duplication and reordering together, each way, through the relay:
/// every count the UDP round trips report equals the relay's. A duplicated
/// request is answered once (it used to take a later probe's reply, which
/// then showed as loss), and reordering on the way up is not mistaken for
/// reordering on the way down.
#[test]
fn udp_loss_duplicates_and_reordering_each_way_equal_the_relays() {
    use common::TestRelay;
    use netrig::protocol::relay::impair::ImpairSpec;
    let srv = TestServer::start();
    let spec = ImpairSpec {
        loss: 0.04,
        dup: 0.06,
        reorder: 0.05,
        ..Default::default()
    };
    let relay = TestRelay::start(srv.addr, spec.clone(), spec);
    let mut c = cfg(relay.addr, Transport::Udp);
    (c.iterations, c.warmup) = (1000, 0);
    // Paced, so a held datagram is released by the next one, not by the
    // relay's idle timer.
    c.interval = Some(Duration::from_millis(1));
    c.timeout = Some(Duration::from_millis(500));
    let mut dup_probes = 0u64;
    let r = run(&c, Arc::new(AtomicBool::new(false)), &mut |p, _| {
        dup_probes += u64::from(p.duplicate)
    })
    .expect("rr run")
    .0;
    let k = relay.counts();
    for (what, n) in [
        ("lost up", k.up.lost),
        ("lost down", k.down.lost),
        ("dup up", k.up.duplicated),
        ("dup down", k.down.duplicated),
        ("reordered up", k.up.reordered),
        ("reordered down", k.down.reordered),
    ] {
        assert!(n >= 10, "{what}: {k:?}");
    }
    assert_eq!(r.lost_up, Some(k.up.lost), "{r:?}\n{k:?}");
    assert_eq!(r.lost_down, Some(k.down.lost), "{r:?}\n{k:?}");
    assert_eq!(r.duplicates_up, Some(k.up.duplicated), "{k:?}");
    assert_eq!(r.duplicates_down, Some(k.down.duplicated), "{k:?}");
    assert_eq!(r.reordered_up, Some(k.up.reordered), "{k:?}");
    assert_eq!(r.reordered_down, Some(k.down.reordered), "{k:?}");
    assert_eq!(dup_probes, k.down.duplicated);
    assert_eq!(r.late, 0, "{r:?}");
    assert_eq!(r.received, 1000 - k.up.lost - k.down.lost);
    assert_eq!(r.server_requests, Some(1000 - k.up.lost));
}

/// `netrig ping` through `netrig relay --dup 10% --dir up` (the issue's
/// reproduction): nothing is lost, so ping says so, and the duplicates it
/// reports are the relay's, as its event log lists them.
#[test]
fn ping_through_a_duplicating_relay_reports_duplicates_not_loss() {
    let (_srv, srv_addr) = bin::serve(&["-v", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.csv");
    let (p, addr) = bin::relay(
        srv_addr,
        &[
            "--dup",
            "10%",
            "--dir",
            "up",
            "--seed",
            "3",
            "--log",
            log.to_str().unwrap(),
        ],
    );
    let target = addr.to_string();
    let (doc, out) = bin::run_json(&["ping", &target, "-i", "5ms", "-n", "200"], 0);
    let _ = bin::interrupt(p);
    let dups = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(",up,duplicated,"))
        .count() as u64;
    assert!(dups >= 5, "{dups}");
    let run = &doc["result"]["runs"][0];
    assert_eq!(run["received"], 200, "{run}");
    assert_eq!(run["lost_up"], 0, "{run}");
    assert_eq!(run["lost_down"], 0, "{run}");
    assert_eq!(run["duplicates_up"], dups, "{run}");
    assert_eq!(run["duplicates_down"], 0, "{run}");
    assert!(
        out.contains("200 probes sent, 200 received, 0.0% loss"),
        "{out}"
    );
    assert!(
        out.contains(&format!("Duplicates: {dups} (up {dups}, down 0)")),
        "{out}"
    );
}

/// Runs netrig with `args` until a line starting with `banner` is printed,
/// interrupts it, and returns its exit code and whole console output.
fn interrupted_after(args: &[&str], banner: &str) -> (Option<i32>, String) {
    use std::io::{BufRead, Read};
    let mut p = bin::Proc(
        bin::netrig(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = std::io::BufReader::new(p.0.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.lines().any(|l| l.starts_with(banner)) {
        let n = out.read_line(&mut seen).unwrap();
        assert!(n > 0, "{args:?} ended before {banner:?}: {seen}");
    }
    bin::sigint(p.0.id());
    out.read_to_string(&mut seen).unwrap();
    (p.0.wait().unwrap().code(), seen)
}

/// rr and crr name their run as it starts (not only once it ends), and a
/// Ctrl-C is said on the console and recorded in the JSON, not only in the
/// exit code.
#[test]
fn rr_and_crr_say_they_were_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("rr.json");
    let (code, out) = interrupted_after(
        &["rr", "-n", "100000000", "--json", js.to_str().unwrap()],
        "Request/response over TCP: 64 B request",
    );
    assert_eq!(code, Some(130), "{out}");
    assert!(out.contains("Interrupted after "), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&js).unwrap()).unwrap();
    assert_eq!(doc["result"]["runs"][0]["interrupted"], true, "{doc}");

    let js = dir.path().join("crr.json");
    let (code, out) = interrupted_after(
        &["crr", "-n", "100000000", "--json", js.to_str().unwrap()],
        "Connect/request/response/close over TCP",
    );
    assert_eq!(code, Some(130), "{out}");
    assert!(out.contains("Interrupted: stopped before"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&js).unwrap()).unwrap();
    assert_eq!(doc["result"]["interrupted"], true, "{doc}");
    assert!(doc["result"]["cancelled"].is_u64(), "{doc}");
}

/// `ping -q` prints the summary (as ping(8) -q does), and a ping without a
/// count says so in its JSON with a null count, not 2^64 - 1.
#[test]
fn quiet_ping_keeps_its_summary_and_an_unbounded_one_has_no_count() {
    let out = bin::run_expect(&["ping", "-q", "-n", "3", "-i", "5ms"], 0);
    assert!(out.contains("3 probes sent, 3 received"), "{out}");
    assert!(!out.contains("seq="), "no probe lines: {out}");
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("ping.json");
    let (code, out) = interrupted_after(
        &["ping", "-i", "5ms", "-v", "--json", js.to_str().unwrap()],
        "64 bytes from",
    );
    assert_eq!(code, Some(0), "Ctrl-C is how an unbounded ping ends: {out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&js).unwrap()).unwrap();
    assert!(doc["config"]["iterations"].is_null(), "{}", doc["config"]);
}
