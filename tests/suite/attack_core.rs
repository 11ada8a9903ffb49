//! Issue 27's thread findings against a real server process: greetings
//! from many addresses once started a thread each (the server aborted at
//! ~16k), and UDP stream groups multiplied the per-test bounds. Threads may
//! now only start for an admitted test, and every one holds a test slot.

use crate::bin;
use crate::hand;

use bin::*;
use netrig::protocol::proto::{self, Message};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// The server's event loops (two per core) and its main thread.
fn base_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()) * 2 + 1
}

/// A connection from `src` that has said hello and been answered.
fn greeted(src: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    netrig::net::bind_local(&s, to, Some(src), None)?;
    s.connect_timeout(&to.into(), Duration::from_secs(10))?;
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    proto::write_message(&mut s, &Message::Hello(Message::hello()))?;
    match proto::read_message(&mut s) {
        Ok(Message::HelloAck(_)) => Ok(s),
        other => Err(std::io::Error::other(format!("{other:?}"))),
    }
}

/// Highest thread count of `pid` seen while `run` runs.
fn peak_threads_during(pid: u32, run: impl FnOnce()) -> usize {
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (done, peak) = (Arc::clone(&done), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !done.load(SeqCst) {
                peak.fetch_max(threads(pid), SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    run();
    done.store(true, SeqCst);
    sampler.join().unwrap();
    peak.load(SeqCst)
}

#[test]
fn twenty_thousand_greetings_from_a_hundred_addresses_start_no_thread() {
    let (srv, addr) = serve(&["-q"]);
    let pid = srv.0.id();
    // 100 source addresses in as many networks (all of 127/8 is this
    // host: 127.1.N.1), 200 greetings
    // each, in waves of 5,000 held at once: 4 workers of 25 addresses, each
    // holding 50 connections from each of its addresses per wave.
    const WORKERS: usize = 4;
    const WAVES: usize = 4;
    let answered = Arc::new(AtomicUsize::new(0));
    let peak = peak_threads_during(pid, || {
        let wave = Arc::new(Barrier::new(WORKERS));
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (wave, answered) = (Arc::clone(&wave), Arc::clone(&answered));
                std::thread::spawn(move || {
                    for _ in 0..WAVES {
                        let mut held = Vec::new();
                        for a in 0..25 {
                            let src = IpAddr::V4(Ipv4Addr::new(127, 1, (w * 25 + a + 1) as u8, 1));
                            for _ in 0..50 {
                                let s = greeted(src, addr)
                                    .unwrap_or_else(|e| panic!("greeting from {src}: {e}"));
                                held.push(s);
                            }
                        }
                        answered.fetch_add(held.len(), SeqCst);
                        // Every worker's connections are open at once.
                        wave.wait();
                        drop(held);
                        wave.wait();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    assert_eq!(answered.load(SeqCst), 20_000, "every greeting answered");
    assert!(
        peak <= base_threads() + 2,
        "the server ran {peak} threads for greetings alone (its loops and main: {})",
        base_threads()
    );
    assert!(srv.0.id() == pid && threads(pid) > 0, "the server is alive");
    // A legit test from another address is still served.
    alive(addr);
    run_expect(
        &["ping", &addr.to_string(), "-c", "3", "-i", "0.1", "-q"],
        0,
    );
}

#[test]
fn a_udp_groups_streams_each_hold_a_test_slot_and_one_address_holds_half() {
    // 8 tests: one address may run 4 UDP streams at once.
    let (srv, addr) = serve(&["-q", "--max-tests", "8", "--max-tests-per-client", "8"]);
    let pid = srv.0.id();
    let target = addr.to_string();
    let out = netrig(&["udp", &target, "-P", "5", "-t", "1", "-b", "1M"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("max 4 concurrent UDP streams per client address"),
        "{err}"
    );
    let peak = peak_threads_during(pid, || {
        run_expect(&["udp", &target, "-P", "4", "-t", "1", "-b", "1M", "-q"], 0);
    });
    // Each stream's session runs on a worker of its own (which may use a
    // thread or two for its sender and receiver), all of them bounded by
    // the test slots, not by the connections.
    assert!(peak > base_threads(), "the streams ran on workers");
}

/// A connection from `src` that says nothing.
fn silent(src: IpAddr, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    netrig::net::bind_local(&s, to, Some(src), None).unwrap();
    s.connect_timeout(&to.into(), Duration::from_secs(10))
        .unwrap();
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// What the server says to a silent connection (an error frame's text, or
/// how it ended).
fn told(s: &mut TcpStream) -> String {
    match proto::read_message(s) {
        Ok(Message::Error { message, .. }) => message,
        Ok(m) => format!("{m:?}"),
        Err(proto::ReadError::Eof) => "closed".into(),
        Err(e) => format!("{e}"),
    }
}

#[test]
fn silent_and_refused_connections_keep_no_identified_client_out() {
    // 200 identified connections; 64 silent ones held at most (an eighth,
    // at least 64); 50 per address, so 200 per /24.
    let (srv, addr) = serve(&[
        "-q",
        "--max-conns",
        "200",
        "--max-conns-per-client",
        "50",
        "--handshake-timeout",
        "60s",
    ]);
    let pid = srv.0.id();
    // Six addresses of one /24 open 300 connections and say nothing.
    let mut held = Vec::new();
    for a in 1..=6u8 {
        for _ in 0..50 {
            held.push(silent(IpAddr::V4(Ipv4Addr::new(127, 0, 2, a)), addr));
        }
    }
    // A connection silent for 2 s may be closed (a burst of real clients
    // gets that long to send its hellos): then each loop closes its oldest
    // down to its share of the 64, newcomer or not.
    let fds = settles_to(pid, 64 + 32, 10);
    assert!(
        fds <= 64 + 32,
        "{fds} descriptors held for silent connections"
    );
    assert_eq!(told(&mut held[0]), "closed", "the oldest silent one went");
    // Identified clients from elsewhere are served, while the silent ones
    // are still connected.
    run_expect(
        &[
            "tcp",
            &addr.to_string(),
            "-n",
            "1M",
            "-P",
            "4",
            "--iterations",
            "2",
            "-q",
        ],
        0,
    );
    run_expect(
        &["ping", &addr.to_string(), "-c", "3", "-i", "0.1", "-q"],
        0,
    );
    drop(held);
}

#[test]
fn one_network_holds_four_addresses_worth_of_connections() {
    let (_srv, addr) = serve(&["-q", "--max-conns-per-client", "20"]);
    // Five addresses of 127.0.3.0/24 greet 20 times each: the network's
    // share is 80, so the last address is refused by name.
    let mut held = Vec::new();
    for a in 1..=4u8 {
        for _ in 0..20 {
            let src = IpAddr::V4(Ipv4Addr::new(127, 0, 3, a));
            held.push(greeted(src, addr).unwrap());
        }
    }
    let mut s = silent(IpAddr::V4(Ipv4Addr::new(127, 0, 3, 5)), addr);
    let said = told(&mut s);
    assert!(
        said.contains("max 80 connections per client network (127.0.3.0/24 has 80)"),
        "{said}"
    );
    // Another network, and another address's own share, are untouched.
    assert!(greeted(IpAddr::V4(Ipv4Addr::new(127, 0, 4, 1)), addr).is_ok());
    drop(held.pop());
    // The freed place is taken once the server has seen the close.
    let src = IpAddr::V4(Ipv4Addr::new(127, 0, 3, 5));
    let t0 = std::time::Instant::now();
    while greeted(src, addr).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the place was not given back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn past_max_memory_new_tests_are_refused_by_name_and_code() {
    // Every process is past 1 MiB resident: the request is refused.
    let (_srv, addr) = serve(&["-q", "--max-memory", "1M"]);
    let target = addr.to_string();
    let (v, err) = run_json(&["tcp", &target, "-n", "1M", "--iterations", "1"], 5);
    assert_eq!(v["error_code"], serde_json::json!("limit_memory"), "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("server limit: max memory 1.00 MiB in use (")),
        "{v}\n{err}"
    );
    run_expect(&["ping", &target, "-c", "2", "-i", "0.1", "-q"], 5);
    // Under its limit the same server kind serves them.
    let (_srv, addr) = serve(&["-q", "--max-memory", "1G"]);
    run_expect(
        &[
            "tcp",
            &addr.to_string(),
            "-n",
            "1M",
            "--iterations",
            "1",
            "-q",
        ],
        0,
    );
}

#[test]
fn an_accepted_udp_session_that_goes_silent_gives_its_slot_back_at_the_setup_deadline() {
    // One test slot; setup (acceptance to the stream's start) within 1 s.
    let (_srv, addr) = serve(&["-q", "--max-tests", "1", "--handshake-timeout", "1s"]);
    let mut quiet = hand::Raw::hello(addr);
    quiet.send(&Message::TestRequest {
        test: proto::TestSpec::Udp(udp_spec()),
    });
    let accepted = quiet.recv();
    assert!(
        matches!(accepted, Ok(Message::UdpAccept { .. })),
        "{accepted:?}"
    );
    // It says nothing more: it holds the only slot, for a while.
    let t0 = std::time::Instant::now();
    let said = match quiet.recv() {
        Ok(Message::Error { message, .. }) => message,
        other => panic!("{other:?}"),
    };
    let waited = t0.elapsed();
    assert!(
        said.contains("not started within 1 s of the test's acceptance"),
        "{said}"
    );
    assert!(waited < Duration::from_secs(5), "held {waited:?}");
    // The slot is free again.
    run_expect(
        &["ping", &addr.to_string(), "-c", "2", "-i", "0.1", "-q"],
        0,
    );
}

/// Issue 27 item 6: one memory account. Every test is charged what its
/// session may hold before it is admitted (here a precomputed schedule the
/// server would send: a million departures, 16 MB); past `--max-memory` the
/// next is refused by name and code, however little resident memory the
/// server has yet, and a session that ends gives its share back.
#[test]
fn tests_draw_from_one_memory_account_and_give_their_share_back() {
    use netrig::protocol::proto::{ErrorCode, TestSpec};
    use netrig::protocol::udp::profile::{Profile, RateStep};
    let (_srv, addr) = serve(&["-q", "--max-memory", "24M"]);
    let step = |at_ns| RateStep {
        at_ns,
        rate_bps: 8_000_000_000,
        size: 1000,
        hold: false,
    };
    let mut spec = udp_spec();
    spec.reverse = true;
    spec.precompute = true;
    spec.profile = Some(Profile::new(vec![step(0), step(1_000_000_000)]).unwrap());
    let request = Message::TestRequest {
        test: TestSpec::Udp(spec),
    };
    let ask = |raw: &mut hand::Raw| {
        raw.send(&request);
        raw.recv()
    };
    // Accepted and held in setup: the server has allocated nothing for it yet.
    let mut first = hand::Raw::hello(addr);
    let got = ask(&mut first);
    assert!(matches!(got, Ok(Message::UdpAccept { .. })), "{got:?}");
    let mut second = hand::Raw::hello(addr);
    match ask(&mut second) {
        Ok(Message::Error { code, message }) => {
            assert_eq!(code, ErrorCode::LimitMemory, "{message}");
            assert!(
                message
                    .contains("server limit: max memory 24.00 MiB held by tests and connections"),
                "{message}"
            );
        }
        other => panic!("a second 16 MB test was let in: {other:?}"),
    }
    // The first session ends with its connection; its share comes back as
    // soon as the server has seen that (each try is a round trip).
    drop(first);
    let t0 = std::time::Instant::now();
    loop {
        let mut again = hand::Raw::hello(addr);
        match ask(&mut again) {
            Ok(Message::UdpAccept { .. }) => break,
            Ok(Message::Error {
                code: ErrorCode::LimitMemory,
                ..
            }) if t0.elapsed() < Duration::from_secs(10) => {}
            other => panic!("the ended test's share was not given back: {other:?}"),
        }
    }
}

/// Issue 27 item 6: connections draw from the same account. A control
/// connection that said hello may be reading a 64 KiB frame and have 64 KiB
/// of answers queued to it, so it is charged that much
/// (`account::CONTROL_BYTES`): a client holding idle control connections is
/// refused by name and code once they fill `--max-memory`, the refused
/// connection is closed, and one that closes gives its share back.
#[test]
fn control_connections_draw_from_the_memory_account_and_give_it_back() {
    use netrig::protocol::proto::ErrorCode;
    use netrig::server::account::CONTROL_BYTES;
    let (_srv, addr) = serve(&["-q", "--max-memory", "1M"]);
    let fit = (1 << 20) / CONTROL_BYTES;
    assert!(fit >= 2, "the test needs room for two control connections");
    let mut held: Vec<_> = (0..fit).map(|_| hand::Raw::hello(addr)).collect();
    let (mut over, said) = hand::Raw::try_hello(addr);
    match said {
        Ok(Message::Error { code, message }) => {
            assert_eq!(code, ErrorCode::LimitMemory, "{message}");
            assert!(
                message.contains("held by tests and connections")
                    && message.contains("this connection needs"),
                "{message}"
            );
        }
        other => panic!(
            "control connection {} of {fit} was let in: {other:?}",
            fit + 1
        ),
    }
    assert!(over.recv().is_err(), "the refused connection is closed");
    // One closes: its share comes back as soon as the server has seen that.
    drop(held.pop());
    let t0 = std::time::Instant::now();
    loop {
        match hand::Raw::try_hello(addr).1 {
            Ok(Message::HelloAck(_)) => break,
            Ok(Message::Error {
                code: ErrorCode::LimitMemory,
                ..
            }) if t0.elapsed() < Duration::from_secs(10) => {}
            other => panic!("the closed connection's share was not given back: {other:?}"),
        }
    }
}
