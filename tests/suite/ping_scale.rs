//! Issue 27's target for rr/ping over UDP: one server holds 5,000
//! concurrent ping sessions, each probing every 100 ms (irtt-style, from
//! five client addresses), on its loops alone — no thread per session — and
//! answers every probe exactly once, while a legit `netrig ping` from
//! another address passes. The sessions are spoken by hand from this
//! process, many per thread, so its own threads do not grow with them
//! either.

use crate::bin;
use crate::scale;

use bin::*;
use netrig::protocol::proto::{self, Message, RrProto, RrSpec, TestSpec};
use netrig::protocol::udp::header::{FLAG_HANDSHAKE, HEADER_LEN, Header, fill_payload};
use scale::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SESSIONS: usize = 5_000;
/// Client threads, each holding a share of the sessions.
const THREADS: usize = 4;
/// Source addresses (all of 127/8 is this host), a fifth of the sessions
/// each, in networks of their own (a network holds four addresses' worth).
const SOURCES: usize = 5;
const ROUNDS: u64 = 30;
const INTERVAL: Duration = Duration::from_millis(100);
const SIZE: u32 = 16;

fn source(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 3, 1 + (i % SOURCES) as u8, 1))
}

/// One session: its control connection, its data socket, and how many
/// replies came for each probe.
struct Sess {
    ctl: TcpStream,
    udp: UdpSocket,
    got: Vec<u32>,
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
        send_ns: 1,
        payload_len: payload as u32,
    }
    .write(&mut d);
    d
}

/// Opens session `i` and takes it to the start of its probes.
fn open(i: usize, server: SocketAddr) -> Sess {
    let src = source(i);
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    netrig::net::bind_local(&s, server, Some(src), None).unwrap();
    s.connect_timeout(&server.into(), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("session {i}: connect: {e}"));
    let mut ctl: TcpStream = s.into();
    ctl.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    ctl.set_nodelay(true).unwrap();
    let ack = call(&mut ctl, &Message::Hello(Message::hello()));
    assert!(matches!(ack, Message::HelloAck(_)), "session {i}: {ack:?}");
    let spec = RrSpec {
        proto: RrProto::Udp,
        size: SIZE,
        reply: 0,
        iterations: ROUNDS,
        nagle: false,
        until_stopped: false,
        sock: Default::default(),
        duration_ms: 0,
    };
    let (port, token) = match call(
        &mut ctl,
        &Message::TestRequest {
            test: TestSpec::Rr(spec),
        },
    ) {
        Message::UdpAccept { port, token, .. } => (port, token),
        m => panic!("session {i}: {m:?}"),
    };
    let udp = UdpSocket::bind(SocketAddr::new(src, 0)).unwrap();
    udp.connect(SocketAddr::new(server.ip(), port)).unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let hs = datagram(FLAG_HANDSHAKE, token, 0);
    udp.send(&hs).unwrap();
    let probed = call(&mut ctl, &Message::UdpHandshake { token });
    assert!(
        matches!(probed, Message::UdpProbed),
        "session {i}: {probed:?}"
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
    let nonce = nonce.unwrap_or_else(|| panic!("session {i}: no probe"));
    let go = call(
        &mut ctl,
        &Message::UdpReady {
            nonce,
            offset_ns: 0,
        },
    );
    assert!(matches!(go, Message::UdpGo), "session {i}: {go:?}");
    udp.set_nonblocking(true).unwrap();
    Sess {
        ctl,
        udp,
        got: vec![0; ROUNDS as usize],
    }
}

/// Probes every session of `ss` every INTERVAL for ROUNDS rounds, counting
/// replies, until all are answered (and a little longer, for copies) or
/// the stragglers' time is up.
fn probe(ss: &mut [Sess]) {
    let mut poll = mio::Poll::new().unwrap();
    for (j, s) in ss.iter().enumerate() {
        let fd = s.udp.as_raw_fd();
        poll.registry()
            .register(
                &mut mio::unix::SourceFd(&fd),
                mio::Token(j),
                mio::Interest::READABLE,
            )
            .unwrap();
    }
    let mut events = mio::Events::with_capacity(1024);
    let reqs: Vec<Vec<u8>> = (0..ROUNDS)
        .map(|seq| datagram(0, seq, SIZE as usize))
        .collect();
    let want = ss.len() as u64 * ROUNDS;
    let mut answered = 0u64;
    let t0 = Instant::now();
    let give_up = t0 + INTERVAL * ROUNDS as u32 + Duration::from_secs(5);
    let mut next = 0u64;
    let mut done_at: Option<Instant> = None;
    let mut b = [0u8; 2048];
    loop {
        let now = Instant::now();
        let due = t0 + INTERVAL * next as u32;
        if next < ROUNDS && now >= due {
            for s in ss.iter() {
                s.udp.send(&reqs[next as usize]).expect("a probe leaves");
            }
            next += 1;
            continue;
        }
        if answered == want && done_at.is_none() {
            done_at = Some(now);
        }
        // Once all are answered, a further 300 ms for copies.
        let end = done_at.map_or(give_up, |d| d + Duration::from_millis(300));
        if now >= end {
            return;
        }
        let wake = if next < ROUNDS { due.min(end) } else { end };
        let _ = poll.poll(&mut events, Some(wake.saturating_duration_since(now)));
        for ev in &events {
            let s = &mut ss[ev.token().0];
            while let Ok(n) = s.udp.recv(&mut b) {
                let Ok(h) = Header::read(&b[..n]) else {
                    continue;
                };
                if let Some(c) = s.got.get_mut(h.seq as usize) {
                    *c += 1;
                    answered += u64::from(*c == 1);
                }
            }
        }
    }
}

#[test]
fn five_thousand_ping_sessions_run_on_the_servers_loops_and_every_probe_is_answered_once() {
    // Two descriptors a session on each side, and a few more.
    if !fds_or_skip(2 * SESSIONS as u64 + 512) {
        return;
    }
    let (srv, addr) = scale_server(SESSIONS, SESSIONS / SOURCES + 100);
    let pid = srv.0.id();
    let bound = loop_threads();
    let sampler = ThreadPeak::start(pid);
    let t0 = Instant::now();
    // Every worker says when its sessions are open, and probes when told
    // (a worker that fails drops its word, and the others are let go).
    let (opened_tx, opened) = mpsc::channel::<()>();
    let mut go = Vec::new();
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            let opened = opened_tx.clone();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            go.push(go_tx);
            std::thread::spawn(move || {
                let mut ss: Vec<Sess> = (w..SESSIONS)
                    .step_by(THREADS)
                    .map(|i| open(i, addr))
                    .collect();
                let _ = opened.send(());
                if go_rx.recv().is_err() {
                    return (Vec::new(), Vec::new());
                }
                probe(&mut ss);
                // Each session's own account: every probe answered once.
                let mut summaries = Vec::new();
                for s in &mut ss {
                    match call(&mut s.ctl, &Message::Goodbye) {
                        Message::Summary(sum) => summaries.push(sum),
                        m => panic!("{m:?}"),
                    }
                }
                (ss.into_iter().map(|s| s.got).collect::<Vec<_>>(), summaries)
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
            panic!("the sessions did not open within a minute");
        }
    }
    let setup = t0.elapsed();
    let held_fds = fd_count(pid);
    let held_threads = threads(pid);
    for g in go {
        let _ = g.send(());
    }
    let t1 = Instant::now();
    // A legit ping from another address (127.0.0.1) meanwhile.
    let legit = netrig(&["ping", &addr.to_string(), "-c", "10", "-i", "0.1", "-q"])
        .output()
        .unwrap();
    let mut got = Vec::new();
    let mut sums = Vec::new();
    for h in workers {
        let (g, s) = h.join().unwrap();
        got.extend(g);
        sums.extend(s);
    }
    let probing_took = t1.elapsed();
    let peak = sampler.stop();
    eprintln!(
        "{SESSIONS} sessions: set up in {setup:?}, {ROUNDS} rounds of probes in {probing_took:?}; \
         server: {held_fds} descriptors, {held_threads} threads held, peak {peak} (bound {bound})"
    );
    assert_eq!(got.len(), SESSIONS);
    let missing: usize = got.iter().flatten().filter(|&&c| c == 0).count();
    let twice: usize = got.iter().flatten().filter(|&&c| c > 1).count();
    assert_eq!(
        (missing, twice),
        (0, 0),
        "probes unanswered, and answered more than once"
    );
    assert!(
        sums.iter()
            .all(|s| s.requests == ROUNDS && s.duplicates == 0 && s.reordered == 0),
        "each server session answered its {ROUNDS} probes once"
    );
    assert!(
        held_fds >= 2 * SESSIONS,
        "every session held its two descriptors ({held_fds})"
    );
    assert!(
        peak <= bound,
        "the server ran {peak} threads for {SESSIONS} ping sessions (its loops, main and signal threads: {bound})"
    );
    assert!(
        legit.status.success(),
        "a legit ping failed: {}",
        String::from_utf8_lossy(&legit.stderr)
    );
    assert!(threads(pid) > 0, "the server is alive");
}
