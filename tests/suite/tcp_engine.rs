//! TCP engine over real loopback sockets: every pattern verified end to end,
//! random buffers, connection churn, and injected faults that must never be
//! reported as success.

use crate::common;

use common::{TestRelay, TestServer, run_client};
use netrig::protocol::outcome::ResultKind;
use netrig::protocol::plan::expected_bytes;
use netrig::protocol::proto::{IoPattern, VerifyLevel};
use netrig::protocol::relay::impair::ImpairSpec;
use netrig::tcp::config::BufferSpec;
use std::collections::HashSet;
use std::time::{Duration, Instant};

#[test]
fn every_pattern_transfers_and_verifies() {
    let srv = TestServer::start();
    for pattern in [
        IoPattern::Push,
        IoPattern::Pull,
        IoPattern::Pushpull,
        IoPattern::Duplex,
    ] {
        let transfer = 3 * 1024 * 1024 + 17;
        let (rep, got) = run_client(srv.addr, |c| {
            c.pattern = pattern;
            c.transfer = transfer;
            c.push_bytes = 300_000;
            c.pull_bytes = 200_001;
            c.connections = 4;
            c.iterations = Some(2);
        });
        let (c2s, s2c) = expected_bytes(pattern, transfer, 300_000, 200_001);
        assert_eq!(rep.totals.completed, 8, "{pattern:?}: {:?}", got.conns);
        assert_eq!(
            rep.totals.net_errors + rep.totals.data_errors + rep.totals.cancelled,
            0
        );
        assert_eq!(rep.totals.sent, 8 * c2s, "{pattern:?}");
        assert_eq!(rep.totals.received, 8 * s2c, "{pattern:?}");
        let server = rep.servers[0].1.clone().expect("server summary");
        assert_eq!(server.success, 8);
        assert_eq!(server.bytes_received, 8 * c2s);
        assert_eq!(server.bytes_sent, 8 * s2c);
        assert_eq!(got.conns.len(), 8);
        let ids: HashSet<_> = got.conns.iter().map(|r| r.connection_id).collect();
        assert_eq!(ids.len(), 8, "connection IDs are unique");
    }
}

#[test]
fn random_buffer_range_is_used_per_connection() {
    let srv = TestServer::start();
    let (rep, got) = run_client(srv.addr, |c| {
        c.pattern = IoPattern::Duplex;
        c.transfer = 2 << 20;
        c.buffer = BufferSpec::Range(1024, 64 * 1024);
        c.connections = 4;
        c.iterations = Some(4);
        c.seed = Some(7);
    });
    assert_eq!(rep.totals.completed, 16);
    let sizes: HashSet<u32> = got.conns.iter().map(|r| r.buffer).collect();
    assert!(sizes.len() > 4, "buffer sizes should vary: {sizes:?}");
    assert!(sizes.iter().all(|b| (1024..=65536).contains(b)));
}

#[test]
fn thousands_of_short_connections_without_error() {
    let srv = TestServer::start();
    let (rep, got) = run_client(srv.addr, |c| {
        c.transfer = 64;
        c.connections = 100;
        c.iterations = Some(30);
    });
    let bad: Vec<_> = got
        .conns
        .iter()
        .filter(|r| r.result.kind != ResultKind::Success)
        .take(3)
        .collect();
    assert!(bad.is_empty(), "failures: {bad:?}");
    assert_eq!(rep.totals.completed, 3000);
    assert_eq!(rep.servers[0].1.as_ref().unwrap().success, 3000);
}

fn flip_every(n: u64) -> ImpairSpec {
    ImpairSpec {
        corrupt_every: n,
        ..Default::default()
    }
}

fn cut_after(n: u64) -> ImpairSpec {
    ImpairSpec {
        reset_after: Some(n),
        ..Default::default()
    }
}

#[test]
fn flipped_byte_client_to_server_is_a_data_error_at_the_offset() {
    let srv = TestServer::start();
    // One flip per MiB, at data offset 623,456.
    let relay = TestRelay::one_way(srv.addr, flip_every(623_457), true);
    let (rep, got) = run_client(relay.addr, |c| {
        c.transfer = 1 << 20;
        c.connections = 1;
        c.iterations = Some(1);
    });
    assert_eq!(rep.totals.data_errors, 1);
    assert_eq!(rep.totals.completed, 0);
    let ev = relay.events("corrupted");
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].offset, Some(623_456));
    // The server found it and told the client, which names the same offset.
    assert_eq!(
        got.conns[0].result.detail,
        "peer: corrupt data at offset 623456"
    );
    assert_eq!(rep.servers[0].1.as_ref().unwrap().data_errors, 1);
}

#[test]
fn flipped_bytes_server_to_client_are_found_by_the_client_in_every_connection() {
    let srv = TestServer::start();
    let relay = TestRelay::one_way(
        srv.addr,
        ImpairSpec {
            corrupt: 1e-6,
            ..Default::default()
        },
        false,
    );
    let (rep, got) = run_client(relay.addr, |c| {
        c.pattern = IoPattern::Pull;
        c.transfer = 4 << 20;
        c.connections = 2;
        c.iterations = Some(3);
    });
    // Each connection's first flipped byte is the one its client reports.
    let ev = relay.events("corrupted");
    let mut firsts: std::collections::BTreeMap<u64, u64> = Default::default();
    for e in &ev {
        firsts.entry(e.flow).or_insert(e.offset.unwrap());
    }
    assert_eq!(rep.totals.data_errors, firsts.len() as u64, "{ev:?}");
    assert_eq!(rep.totals.completed + rep.totals.data_errors, 6);
    let mut want: Vec<String> = firsts
        .values()
        .map(|o| format!("corrupt data at offset {o}"))
        .collect();
    let mut seen: Vec<String> = got
        .conns
        .iter()
        .filter(|c| c.result.kind == ResultKind::DataError)
        .map(|c| c.result.detail.clone())
        .collect();
    want.sort();
    seen.sort();
    assert_eq!(seen, want);
    assert_eq!(
        rep.servers[0].1.as_ref().unwrap().data_errors,
        rep.totals.data_errors,
        "both ends agree"
    );
}

#[test]
fn connection_level_verification_does_not_inspect_bytes() {
    let srv = TestServer::start();
    let relay = TestRelay::one_way(srv.addr, flip_every(200_000), true);
    let (rep, _) = run_client(relay.addr, |c| {
        c.transfer = 1 << 20;
        c.connections = 1;
        c.iterations = Some(1);
        c.verify = VerifyLevel::Connection;
    });
    assert_eq!(relay.events("corrupted").len(), 5);
    assert_eq!(rep.totals.completed, 1, "counts match, bytes not checked");
}

#[test]
fn cut_connection_is_a_network_error_never_success() {
    let srv = TestServer::start();
    let relay = TestRelay::one_way(srv.addr, cut_after(300_000), true);
    let (rep, got) = run_client(relay.addr, |c| {
        c.transfer = 4 << 20;
        c.connections = 2;
        c.iterations = Some(2);
    });
    assert_eq!(rep.totals.completed, 0, "{:?}", got.conns);
    assert_eq!(rep.totals.net_errors, 4, "{:?}", got.conns);
    assert!(got.conns.iter().all(|r| !r.result.detail.is_empty()));
    let cuts = relay.events("reset");
    assert_eq!(cuts.len(), 4);
    assert!(cuts.iter().all(|e| e.offset == Some(300_000)));
    assert_eq!(relay.counts().up.resets, 4);
}

#[test]
fn cut_while_pulling_is_a_network_error() {
    let srv = TestServer::start();
    let relay = TestRelay::one_way(srv.addr, cut_after(300_000), false);
    let (rep, _) = run_client(relay.addr, |c| {
        c.pattern = IoPattern::Pull;
        c.transfer = 4 << 20;
        c.connections = 1;
        c.iterations = Some(1);
    });
    assert_eq!(rep.totals.completed, 0);
    assert_eq!(rep.totals.net_errors, 1);
    assert_eq!(relay.counts().down.resets, 1);
}

#[test]
fn duplex_and_pushpull_data_is_impaired_but_the_protocol_is_not() {
    let srv = TestServer::start();
    for pattern in [IoPattern::Duplex, IoPattern::Pushpull] {
        let relay = TestRelay::start(srv.addr, flip_every(700_001), flip_every(900_001));
        let (rep, got) = run_client(relay.addr, |c| {
            c.pattern = pattern;
            c.transfer = 3 << 20;
            c.push_bytes = 100_000;
            c.pull_bytes = 70_000;
            c.connections = 1;
            c.iterations = Some(2);
        });
        // Every connection ends in an agreed data error, none in a protocol failure.
        assert_eq!(rep.totals.data_errors, 2, "{pattern:?}: {:?}", got.conns);
        let c = relay.counts();
        assert!(c.up.stream_corrupted >= 2 && c.down.stream_corrupted >= 2);
    }
}

#[test]
fn time_limit_cancels_in_flight_connections_on_both_ends() {
    let srv = TestServer::start();
    let t0 = Instant::now();
    let (rep, _) = run_client(srv.addr, |c| {
        c.transfer = 1 << 40;
        c.connections = 3;
        c.time_limit = Some(Duration::from_millis(600));
    });
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(rep.totals.cancelled, 3);
    assert_eq!(rep.totals.net_errors + rep.totals.data_errors, 0);
    let s = rep.servers[0].1.clone().unwrap();
    assert_eq!((s.cancelled, s.network_errors, s.data_errors), (3, 0, 0));
    assert!(rep.intervals.len() >= 3, "status rows every 200 ms");
}

#[test]
fn dual_stack_server_multiple_targets_and_bind() {
    use netrig::server::{Server, ServerConfig};
    use std::net::{IpAddr, SocketAddr};
    let server = match Server::bind(ServerConfig {
        listen: vec!["[::]:0".parse().unwrap()],
        verbosity: 0,
        ..ServerConfig::default()
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED: no IPv6 on this machine ({e})");
            return;
        }
    };
    let port = server.local_addrs()[0].port();
    let stop = server.stop_handle();
    let h = std::thread::spawn(move || server.run());
    let v4: SocketAddr = ([127, 0, 0, 1], port).into();
    let v6: SocketAddr = format!("[::1]:{port}").parse().unwrap();
    let (rep, got) = run_client(v4, |c| {
        c.targets = vec![v4.to_string(), v6.to_string()];
        c.bind = vec!["127.0.0.2".parse().unwrap(), "::1".parse().unwrap()];
        c.transfer = 256 * 1024;
        c.connections = 4;
        c.iterations = Some(2);
    });
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = h.join();
    assert_eq!(rep.totals.completed, 8);
    assert_eq!(rep.servers.len(), 2, "one session per target");
    assert!(
        rep.servers
            .iter()
            .all(|(_, s)| s.as_ref().unwrap().success == 4)
    );
    let v4_local: Vec<IpAddr> = got
        .conns
        .iter()
        .filter(|r| r.remote == v4)
        .map(|r| r.local.unwrap().ip())
        .collect();
    assert_eq!(v4_local.len(), 4, "round-robin over targets");
    assert!(
        v4_local
            .iter()
            .all(|ip| *ip == "127.0.0.2".parse::<IpAddr>().unwrap())
    );
    assert_eq!(got.conns.iter().filter(|r| r.remote == v6).count(), 4);
}

#[test]
fn tcp_bursts_are_timed_by_the_receiver_and_described_by_the_sender() {
    use netrig::protocol::proto::BurstSpec;
    let srv = TestServer::start();
    for pattern in [IoPattern::Push, IoPattern::Pull] {
        let (rep, got) = run_client(srv.addr, |c| {
            c.pattern = pattern;
            c.transfer = 4 << 20;
            c.connections = 1;
            c.iterations = Some(1);
            c.burst = Some(BurstSpec {
                size: 1 << 20,
                period_ms: 150,
            });
        });
        assert_eq!(rep.totals.completed, 1, "{pattern:?}");
        let b = &got.conns[0].bursts;
        assert_eq!(
            b.len(),
            8,
            "{pattern:?}: a send and a recv account of 4 bursts: {b:?}"
        );
        for k in 0..4u64 {
            let recv = b
                .iter()
                .find(|x| x.index == k && x.side == "recv")
                .expect("recv side");
            let send = b
                .iter()
                .find(|x| x.index == k && x.side == "send")
                .expect("send side");
            assert_eq!((recv.bytes, send.bytes), (1 << 20, 1 << 20));
            assert!(recv.calls >= 1 && send.calls >= 1 && send.errors == 0);
            assert!(
                send.cwnd.is_some() && send.rtt_us.is_some(),
                "TCP_INFO: {send:?}"
            );
            let secs = recv.end_s - recv.start_s;
            assert!(secs > 0.0 && recv.duty_pct < 100.0, "{recv:?}");
            // As computed from the times (to the last bits lost in transit).
            let rate = (1u64 << 20) as f64 * 8.0 / secs;
            assert!((recv.rate_bps / rate - 1.0).abs() < 1e-9, "{recv:?}");
            assert!((recv.duty_pct / (100.0 * secs / 0.15) - 1.0).abs() < 1e-9);
            assert_eq!(recv.read_sizes.iter().map(|r| r.1).sum::<u64>(), recv.calls);
            // The sender starts each burst on its period.
            let late = send.start_s - 0.15 * k as f64;
            assert!(
                (0.0..0.05).contains(&late),
                "{pattern:?} burst {k} started {late} s late"
            );
        }
    }
}

/// Eight connections move verified data both ways through a relay that
/// delays each way by 5 ms: the event-loop relay keeps every byte in order
/// across its delay line and ends each connection cleanly.
#[test]
fn bulk_data_both_ways_through_a_delaying_relay_is_verified() {
    let srv = TestServer::start();
    let delay = ImpairSpec {
        delay_ns: 5_000_000,
        ..Default::default()
    };
    let relay = TestRelay::start(srv.addr, delay.clone(), delay);
    let (rep, _) = run_client(relay.addr, |c| {
        c.connections = 8;
        c.iterations = Some(1);
        c.transfer = 2 << 20;
        c.pattern = IoPattern::Duplex;
    });
    assert_eq!(rep.totals.completed, 8, "{:?}", rep.totals);
    // Duplex splits each connection's transfer between the two ways.
    assert_eq!(rep.totals.sent, 8 << 20);
    assert_eq!(rep.totals.received, 8 << 20);
    assert_eq!(
        relay.counts().tcp_connections,
        9,
        "8 data connections and control"
    );
}
