//! `netrig relay` under attack, over loopback against the binary: its queues
//! stay inside `--max-queue` (memory as allocated, TCP and UDP together), no
//! address takes every connection, UDP flows cost no threads, and a silent
//! control connection lives as long as its UDP test moves.

use crate::bin;
use bin::*;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Whether any of `socks` becomes writable within `wait`.
fn any_writable(socks: &[TcpStream], wait: Duration) -> bool {
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a valid array of pollfd for the length given.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as _, wait.as_millis() as _) };
    n > 0
}

/// RSS the relay may grow by beyond its `--max-queue`: loops' read buffers
/// touched, thread stacks, the allocator's slack.
const SLACK_KIB: u64 = 24 * 1024;

#[test]
fn tcp_delay_lines_with_stalled_receivers_stay_inside_max_queue() {
    // An upstream that accepts and never reads.
    let up = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = up.local_addr().unwrap();
    let held = std::thread::spawn(move || {
        let mut v = Vec::new();
        for c in up.incoming().take(16) {
            v.push(c);
        }
        v
    });
    let (rl, addr) = relay(to, &["--tcp-only", "--max-queue", "8M"]);
    let pid = rl.0.id();
    let base = rss_kib(pid);
    let bound = base + 8 * 1024 + SLACK_KIB;
    let conns: Vec<TcpStream> = (0..16)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            socket2::SockRef::from(&s)
                .set_send_buffer_size(64 * 1024)
                .unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let chunk = vec![0x5au8; 256 * 1024];
    let mut sent = 0u64;
    let t0 = Instant::now();
    // Push until no connection takes a byte for a second: the relay then
    // holds all it will.
    loop {
        let mut moved = false;
        for mut c in &conns {
            loop {
                match c.write(&chunk) {
                    Ok(n) => {
                        sent += n as u64;
                        moved = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("client write: {e}"),
                }
            }
        }
        let rss = rss_kib(pid);
        assert!(
            rss <= bound,
            "relay RSS {rss} KiB > {bound} KiB after {sent} bytes (base {base} KiB)"
        );
        if !moved && !any_writable(&conns, Duration::from_secs(1)) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "never stalled");
    }
    // The relay read beyond the kernel's buffers: it holds (about) its budget.
    assert!(sent > 8 << 20, "only {sent} bytes went in");
    drop(conns);
    drop(rl);
    drop(held.join());
}

#[test]
fn a_flood_of_tiny_datagrams_stays_inside_max_queue() {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("relay.json");
    // The relay picks its port and names it: a port chosen here could be
    // handed to another test's socket before the relay binds it.
    let (rl, addr) = relay(
        to,
        &[
            "--udp-only",
            "--delay",
            "30s",
            "--max-queue",
            "4M",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let port = addr.port();
    let pid = rl.0.id();
    udp_drained(pid, port, "relay");
    let base = rss_kib(pid);
    let bound = base + 4 * 1024 + SLACK_KIB;
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    // 600,000 one-byte datagrams, in batches the relay has read before the
    // next (so the kernel drops none): 4 MB of payload is 150,000 of them,
    // the memory of a queued one is over 100 bytes.
    let total = 600_000u64;
    for i in 0..total {
        s.send_to(&[1], addr).unwrap();
        if i % 2000 == 1999 {
            udp_drained(pid, port, "relay");
            let rss = rss_kib(pid);
            assert!(
                rss <= bound,
                "relay RSS {rss} KiB > {bound} KiB after {i} datagrams"
            );
        }
    }
    udp_drained(pid, port, "relay");
    let (code, _) = interrupt(rl);
    assert_eq!(code, Some(130));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let up = &v["result"]["up"];
    assert_eq!(up["datagrams"], total, "{v}");
    let dropped = up["queue_dropped"].as_u64().unwrap();
    // What the queue took fits 4 MiB at its memory, not its payload.
    let kept = total - dropped;
    assert!(kept > 0 && kept <= (4 << 20) / 100, "{kept} kept: {v}");
    assert_eq!(up["forwarded"], kept, "{v}");
}

#[test]
fn one_address_cannot_take_every_relay_connection() {
    // An upstream that echoes.
    let up = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = up.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut c in up.incoming().flatten() {
            std::thread::spawn(move || {
                let mut b = [0u8; 1024];
                while let Ok(n) = c.read(&mut b) {
                    if n == 0 || c.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let (_rl, addr) = relay(to, &["--tcp-only", "--max-conns", "200"]);
    let echo = |c: &mut TcpStream| -> bool {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 2];
        c.write_all(b"hi").is_ok() && c.read_exact(&mut b).is_ok() && &b == b"hi"
    };
    // The documented default: 64 connections from one address.
    let mut mine = Vec::new();
    for i in 0..64 {
        let mut c = TcpStream::connect(addr).unwrap();
        assert!(echo(&mut c), "connection {i} was not relayed");
        mine.push(c);
    }
    let mut extra = TcpStream::connect(addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let t0 = Instant::now();
    let _ = extra.write_all(b"hi");
    let mut b = [0u8; 2];
    let got = extra.read(&mut b);
    assert!(
        matches!(got, Ok(0) | Err(_)) && t0.elapsed() < Duration::from_secs(4),
        "the 65th connection from one address was served: {got:?} after {:?}",
        t0.elapsed()
    );
    // Another address still gets through.
    let other = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    other
        .bind(&"127.0.0.2:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    other.connect(&addr.into()).unwrap();
    let mut other: TcpStream = other.into();
    assert!(echo(&mut other), "a connection from 127.0.0.2 was refused");
    // A place given back is a place to take again.
    drop(mine.pop());
    let t0 = Instant::now();
    loop {
        let mut c = TcpStream::connect(addr).unwrap();
        if echo(&mut c) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the place never came back"
        );
    }
}

#[test]
fn udp_flows_cost_no_threads() {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let to = sink.local_addr().unwrap();
    let (rl, addr) = relay(to, &["--udp-only", "--delay", "10ms", "--jitter", "5ms"]);
    let pid = rl.0.id();
    // Loops, the signal and report threads: fixed, whatever the flows.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bound = 2 * cores + 5;
    let flows: Vec<UdpSocket> = (0..40)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for s in &flows {
        s.send_to(b"ping", addr).unwrap();
    }
    // Every datagram comes through its delay (so every flow is set up).
    let mut b = [0u8; 16];
    let mut upstream = Vec::new();
    for i in 0..flows.len() {
        let (n, from) = sink
            .recv_from(&mut b)
            .unwrap_or_else(|e| panic!("datagram {i}: {e}"));
        assert_eq!(&b[..n], b"ping");
        upstream.push(from);
    }
    let n = threads(pid);
    assert!(n <= bound, "{n} threads for 40 UDP flows > {bound}");
    // And the replies find their way back to each flow.
    for from in upstream {
        sink.send_to(b"pong", from).unwrap();
    }
    for (i, s) in flows.iter().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let n = s
            .recv(&mut b)
            .unwrap_or_else(|e| panic!("reply to flow {i}: {e}"));
        assert_eq!(&b[..n], b"pong");
    }
    assert!(threads(pid) <= bound);
}

#[test]
fn a_udp_rr_run_longer_than_the_idle_timeout_completes() {
    let (_srv, to) = serve(&["-q"]);
    let (_rl, addr) = relay(to, &["--idle-timeout", "1s"]);
    let out = netrig(&["rr", &addr.to_string(), "--proto", "udp", "-t", "3s", "-q"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A netrig UDP test's flow ends when its control connection closes, not
/// at the idle timeout (the UDP loop is told, it does not scan for it):
/// with room for one flow, tests one after another all pass through the
/// relay (a refused flow would leave the port unrewritten, counted).
#[test]
fn a_udp_tests_flow_ends_with_its_control_connection() {
    let (_srv, to) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("relay.json");
    let json_arg = json.to_str().unwrap();
    let (rl, addr) = relay(
        to,
        &[
            "--max-flows",
            "1",
            "--idle-timeout",
            "300s",
            "--json",
            json_arg,
        ],
    );
    let t = addr.to_string();
    for i in 0..3 {
        let out = netrig(&["udp", &t, "-b", "1M", "-t", "1", "-q"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "test {i}: {err}");
    }
    let (code, _) = interrupt(rl);
    assert_eq!(code, Some(130));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["result"]["udp_refused"], 0, "{v}");
    assert_eq!(v["result"]["udp_flows"], 3, "{v}");
}
