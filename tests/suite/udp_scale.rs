//! Issue 27 items 1–2 for UDP streams: one server receives 1,200
//! concurrent UDP streams (low rate each, from four client addresses) on
//! its loops alone — no thread per stream — and counts every datagram
//! exactly: each stream's totals from the server equal what its client
//! sent, with nothing lost, duplicated or reordered, and its intervals add
//! up to them; a legit `netrig udp -P 4` from another address passes
//! meanwhile. The streams are spoken by hand from this process, many per
//! thread, so its own threads do not grow with them either.

use crate::bin;
use crate::scale;

use bin::*;
use netrig::protocol::proto::{self, Message, TestSpec, UdpSpec};
use netrig::protocol::udp::header::{FLAG_HANDSHAKE, HEADER_LEN, Header, fill_payload};
use netrig::protocol::udp::sent::SenderReport;
use netrig::protocol::udp::track::UdpTotals;
use scale::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SESSIONS: usize = 1_200;
/// Client threads, each holding a share of the streams.
const THREADS: usize = 4;
/// Source addresses (all of 127/8 is this host), a share of the streams
/// each, in networks of their own.
const SOURCES: usize = 4;
/// Datagrams each stream sends, one every GAP.
const ROUNDS: u64 = 20;
const GAP: Duration = Duration::from_millis(100);
const SIZE: u32 = 200;

fn source(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 4, 1 + (i % SOURCES) as u8, 1))
}

/// One stream: its control connection and its data socket.
struct Stream {
    ctl: TcpStream,
    udp: UdpSocket,
}

fn call(ctl: &mut TcpStream, m: &Message) -> Message {
    proto::write_message(ctl, m).unwrap();
    proto::read_message(ctl).unwrap_or_else(|e| panic!("answer to {m:?}: {e}"))
}

fn datagram(flags: u8, seq: u64, payload: usize) -> Vec<u8> {
    let mut d = vec![0u8; HEADER_LEN + payload];
    fill_payload(1, seq, &mut d[HEADER_LEN..]);
    Header {
        flags,
        stream: u32::from(flags == 0),
        seq,
        send_ns: netrig::net::realtime_ns(),
        payload_len: payload as u32,
    }
    .write(&mut d);
    d
}

fn spec() -> UdpSpec {
    let gap_ps = GAP.as_nanos() as u64 * 1000;
    let mut s = UdpSpec::steady(SIZE, gap_ps, GAP.as_millis() as u64 * ROUNDS);
    s.interval_ms = 500;
    s
}

/// Opens stream `i` and takes it to its start.
fn open(i: usize, server: SocketAddr) -> Stream {
    open_from(source(i), i, server, spec())
}

/// Opens stream `i` of `spec` from `src` and takes it to its start.
fn open_from(src: IpAddr, i: usize, server: SocketAddr, spec: UdpSpec) -> Stream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    netrig::net::bind_local(&s, server, Some(src), None).unwrap();
    s.connect_timeout(&server.into(), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("stream {i}: connect: {e}"));
    let mut ctl: TcpStream = s.into();
    ctl.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    ctl.set_nodelay(true).unwrap();
    let ack = call(&mut ctl, &Message::Hello(Message::hello()));
    assert!(matches!(ack, Message::HelloAck(_)), "stream {i}: {ack:?}");
    let test = TestSpec::Udp(spec);
    let (port, token) = match call(&mut ctl, &Message::TestRequest { test }) {
        Message::UdpAccept { port, token, .. } => (port, token),
        m => panic!("stream {i}: {m:?}"),
    };
    let udp = UdpSocket::bind(SocketAddr::new(src, 0)).unwrap();
    udp.connect(SocketAddr::new(server.ip(), port)).unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    udp.send(&datagram(FLAG_HANDSHAKE, token, 0)).unwrap();
    let probed = call(&mut ctl, &Message::UdpHandshake { token });
    assert!(
        matches!(probed, Message::UdpProbed),
        "stream {i}: {probed:?}"
    );
    let mut b = [0u8; 256];
    let mut nonce = None;
    for _ in 0..50 {
        if let Ok(n) = udp.recv(&mut b)
            && let Ok(h) = Header::read(&b[..n])
            && h.flags & FLAG_HANDSHAKE != 0
        {
            nonce = Some(h.seq);
            break;
        }
    }
    let nonce = nonce.unwrap_or_else(|| panic!("stream {i}: no probe"));
    let ready = Message::UdpReady {
        nonce,
        offset_ns: 0,
    };
    let go = call(&mut ctl, &ready);
    assert!(matches!(go, Message::UdpGo), "stream {i}: {go:?}");
    Stream { ctl, udp }
}

/// What the server said of one stream: its intervals' datagrams summed,
/// and its totals.
type Told = (u64, UdpTotals);

/// Sends every stream of `ss` one datagram every GAP for ROUNDS rounds,
/// tells the server how many, and reads what it counted.
fn stream(ss: &mut [Stream]) -> Vec<Told> {
    let reqs: Vec<Vec<u8>> = (0..ROUNDS)
        .map(|seq| datagram(0, seq, SIZE as usize - HEADER_LEN))
        .collect();
    let t0 = Instant::now();
    for (k, d) in reqs.iter().enumerate() {
        // Pacing the rounds, not waiting for anything.
        let due = t0 + GAP * k as u32;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        for s in ss.iter() {
            s.udp.send(d).expect("a datagram leaves");
        }
    }
    let done = Message::UdpDone(SenderReport {
        packets: ROUNDS,
        ..Default::default()
    });
    for s in ss.iter_mut() {
        proto::write_message(&mut s.ctl, &done).unwrap();
    }
    let mut told = Vec::new();
    for s in ss.iter_mut() {
        let mut counted = 0;
        let totals = loop {
            match proto::read_message(&mut s.ctl).unwrap() {
                Message::UdpInterval(iv) => counted += iv.packets,
                Message::UdpResult(t) => break t,
                m => panic!("{m:?}"),
            }
        };
        match call(&mut s.ctl, &Message::Goodbye) {
            Message::Summary(_) => {}
            m => panic!("{m:?}"),
        }
        told.push((counted, totals));
    }
    told
}

#[test]
fn twelve_hundred_udp_streams_are_received_on_the_servers_loops_and_counted_exactly() {
    // Two descriptors a stream on each side, and a few more.
    if !fds_or_skip(2 * SESSIONS as u64 + 512) {
        return;
    }
    let (srv, addr) = scale_server(SESSIONS, SESSIONS / SOURCES + 100);
    let pid = srv.0.id();
    let bound = loop_threads();
    let sampler = ThreadPeak::start(pid);
    let t0 = Instant::now();
    // Every worker says when its streams are open, and sends when told (a
    // worker that fails drops its word, and the others are let go).
    let (opened_tx, opened) = mpsc::channel::<()>();
    let mut go = Vec::new();
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            let opened = opened_tx.clone();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            go.push(go_tx);
            std::thread::spawn(move || {
                let mut ss: Vec<Stream> = (w..SESSIONS)
                    .step_by(THREADS)
                    .map(|i| open(i, addr))
                    .collect();
                let _ = opened.send(());
                if go_rx.recv().is_err() {
                    return Vec::new();
                }
                stream(&mut ss)
            })
        })
        .collect();
    drop(opened_tx);
    for _ in 0..THREADS {
        if opened.recv_timeout(Duration::from_secs(60)).is_err() {
            drop(go);
            for h in workers {
                if let Err(e) = h.join() {
                    std::panic::resume_unwind(e);
                }
            }
            panic!("the streams did not open within a minute");
        }
    }
    let setup = t0.elapsed();
    let held_fds = fd_count(pid);
    let held_threads = threads(pid);
    for g in go {
        let _ = g.send(());
    }
    let t1 = Instant::now();
    // A legit client from another address (127.0.0.1) meanwhile: four
    // streams of a group.
    let legit = netrig(&[
        "udp",
        &addr.to_string(),
        "-P",
        "4",
        "-b",
        "1M",
        "-t",
        "1",
        "-q",
    ])
    .output()
    .unwrap();
    let mut told = Vec::new();
    for h in workers {
        told.extend(h.join().unwrap());
    }
    let took = t1.elapsed();
    let peak = sampler.stop();
    eprintln!(
        "{SESSIONS} streams: set up in {setup:?}, {ROUNDS} rounds and totals in {took:?}; \
         server: {held_fds} descriptors, {held_threads} threads held, peak {peak} (bound {bound})"
    );
    assert_eq!(told.len(), SESSIONS);
    let inexact: Vec<_> = told
        .iter()
        .filter(|(counted, t)| {
            (t.sent, t.unique, t.packets, *counted) != (Some(ROUNDS), ROUNDS, ROUNDS, ROUNDS)
                || (t.lost, t.duplicates, t.reordered, t.corrupt) != (0, 0, 0, 0)
        })
        .collect();
    assert!(
        inexact.is_empty(),
        "{} streams not counted exactly, e.g. {:?}",
        inexact.len(),
        inexact.first()
    );
    assert!(
        held_fds >= 2 * SESSIONS,
        "every stream held its two descriptors ({held_fds})"
    );
    assert!(
        peak <= bound,
        "the server ran {peak} threads for {SESSIONS} UDP streams (its loops, main and signal threads: {bound})"
    );
    assert!(
        legit.status.success(),
        "a legit udp -P 4 failed: {}",
        String::from_utf8_lossy(&legit.stderr)
    );
    assert!(threads(pid) > 0, "the server is alive");
}

/// Streams the server sends (`-R`), and their sources (127.5.x.1).
const SENT: usize = 300;

/// Reads what the server says of stream `s` it sends, to its account
/// (`udp_done`), then every datagram that arrived, and says goodbye: the
/// datagrams the server says it sent, and the distinct intact ones
/// received.
fn receive(s: &mut Stream) -> (u64, u64) {
    // The server sends nothing else on the way.
    let sent = match proto::read_message(&mut s.ctl).unwrap() {
        Message::UdpDone(rep) => rep.packets,
        m => panic!("{m:?}"),
    };
    // The datagrams left before the account did, on loopback: they wait in
    // the socket's buffer.
    s.udp.set_nonblocking(true).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut b = [0u8; 2048];
    while let Ok(n) = s.udp.recv(&mut b) {
        let Ok(h) = Header::read(&b[..n]) else {
            continue;
        };
        if h.flags == 0
            && n == SIZE as usize
            && netrig::protocol::udp::header::verify_payload(h.stream, h.seq, &b[HEADER_LEN..n])
                .is_ok()
        {
            seen.insert(h.seq);
        }
    }
    match call(&mut s.ctl, &Message::Goodbye) {
        Message::Summary(_) => {}
        m => panic!("{m:?}"),
    }
    (sent, seen.len() as u64)
}

#[test]
fn three_hundred_udp_streams_the_server_sends_run_on_its_loops_and_arrive_whole() {
    if !fds_or_skip(2 * SENT as u64 + 512) {
        return;
    }
    let (srv, addr) = scale_server(SENT, SENT / SOURCES + 20);
    let pid = srv.0.id();
    // The loops and the main and signal threads, and the sender pool,
    // min(--max-tests, 2 x cores) (README: "Running a public server"),
    // which only the legit fast -R below draws from.
    let pool = (SENT + 16).min(2 * cores());
    let bound = loop_threads() + pool;
    let sampler = ThreadPeak::start(pid);
    let mut reverse = spec();
    reverse.reverse = true;
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            let reverse = reverse.clone();
            std::thread::spawn(move || {
                let src = |i: usize| IpAddr::V4(Ipv4Addr::new(127, 5, 1 + (i % SOURCES) as u8, 1));
                let mut ss: Vec<Stream> = (w..SENT)
                    .step_by(THREADS)
                    .map(|i| open_from(src(i), i, addr, reverse.clone()))
                    .collect();
                ss.iter_mut().map(receive).collect::<Vec<_>>()
            })
        })
        .collect();
    // Legit clients from another address (127.0.0.1) meanwhile: a fast
    // -R (a pool thread's) and a --bidir.
    let fast = netrig(&["udp", &addr.to_string(), "-R", "-b", "20M", "-t", "1", "-q"])
        .output()
        .unwrap();
    let bidir = netrig(&["udp", &addr.to_string(), "--bidir", "-t", "1", "-q"])
        .output()
        .unwrap();
    let mut told = Vec::new();
    for h in workers {
        told.extend(h.join().unwrap());
    }
    let peak = sampler.stop();
    eprintln!("{SENT} streams the server sends: peak {peak} server threads (bound {bound})");
    assert_eq!(told.len(), SENT);
    let inexact: Vec<_> = told.iter().filter(|t| **t != (ROUNDS, ROUNDS)).collect();
    assert!(
        inexact.is_empty(),
        "{} streams not whole (sent, received), e.g. {:?}",
        inexact.len(),
        inexact.first()
    );
    assert!(
        peak <= bound,
        "the server ran {peak} threads for {SENT} UDP streams it sends (bound {bound})"
    );
    for (what, o) in [("udp -R -b 20M", &fast), ("udp --bidir", &bidir)] {
        assert!(
            o.status.success(),
            "a legit {what} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert!(threads(pid) > 0, "the server is alive");
}

/// Asks for a UDP test from `src` and returns the connection and the answer.
fn ask(src: IpAddr, server: SocketAddr, spec: UdpSpec) -> (TcpStream, Message) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    netrig::net::bind_local(&s, server, Some(src), None).unwrap();
    s.connect_timeout(&server.into(), Duration::from_secs(10))
        .unwrap();
    let mut ctl: TcpStream = s.into();
    ctl.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let ack = call(&mut ctl, &Message::Hello(Message::hello()));
    assert!(matches!(ack, Message::HelloAck(_)), "{ack:?}");
    let answer = call(
        &mut ctl,
        &Message::TestRequest {
            test: TestSpec::Udp(spec),
        },
    );
    (ctl, answer)
}

#[test]
fn a_fast_stream_past_the_sender_pool_is_sent_on_the_loop_whole() {
    let (srv, addr) = serve(&["-q", "--max-tests", "64", "--max-tests-per-client", "64"]);
    let pid = srv.0.id();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = 64usize.min(2 * cores);
    // 10,000 datagrams a second: past what the loops pace, so each
    // admitted stream holds a place in the pool from its acceptance.
    let mut fast = UdpSpec::steady(1000, 100_000_000, 5_000);
    fast.reverse = true;
    let src = |i: u8| IpAddr::V4(Ipv4Addr::new(127, 6, 1, i));
    let held: Vec<TcpStream> = (0..pool)
        .map(|i| match ask(src(1 + i as u8), addr, fast.clone()) {
            (ctl, Message::UdpAccept { .. }) => ctl,
            (_, m) => panic!("fast stream {i} of {pool}: {m:?}"),
        })
        .collect();
    let base = threads(pid);
    // The pool is full: a real fast -R (2,500 datagrams a second) is still
    // admitted, sent on its loop, and arrives whole.
    let (v, _) = run_json(
        &[
            "udp",
            &addr.to_string(),
            "-R",
            "-b",
            "20M",
            "-l",
            "1000",
            "-t",
            "1",
        ],
        0,
    );
    let t = &v["result"]["totals"];
    let sent = t["sent"].as_u64().unwrap();
    assert!(sent > 1000, "{t}");
    assert_eq!(t["unique"].as_u64(), Some(sent), "{t}");
    assert_eq!(t["lost"].as_u64(), Some(0), "{t}");
    assert!(
        threads(pid) <= base,
        "a stream past the pool started a thread: {} > {base}",
        threads(pid)
    );
    drop(held);
}
