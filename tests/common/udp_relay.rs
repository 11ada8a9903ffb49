//! A UDP impairment relay for tests: relays one netrig UDP test (control over
//! TCP, stream over UDP), rewriting the server's UDP port in the control
//! messages so the stream passes through it, and drops, duplicates, swaps or
//! corrupts test datagrams at fixed intervals, counting exactly what it did.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netrig::proto::{Message, read_message, write_message};
use netrig::udp::header::{FLAG_HANDSHAKE, HEADER_LEN, Header};

/// Every `n`th test datagram (1-based; 0 = never) gets the action.
#[derive(Clone, Copy, Debug, Default)]
pub struct Impair {
    pub drop_every: u64,
    pub dup_every: u64,
    pub swap_every: u64,
    pub corrupt_every: u64,
    /// Police with a token bucket: (rate bit/s, depth bytes); datagrams without tokens are dropped.
    pub police: Option<(u64, u64)>,
}

/// What the relay did.
#[derive(Debug, Default)]
pub struct Counts {
    pub seen: AtomicU64,
    pub dropped: AtomicU64,
    pub duplicated: AtomicU64,
    pub swapped: AtomicU64,
    pub corrupted: AtomicU64,
}

pub struct UdpRelay {
    pub addr: SocketAddr,
    pub counts: Arc<Counts>,
}

impl UdpRelay {
    /// Relays to the netrig server at `server`; impairs the data direction given by `c2s`.
    pub fn start(server: SocketAddr, impair: Impair, c2s: bool) -> UdpRelay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let counts = Arc::new(Counts::default());
        let cnt = Arc::clone(&counts);
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(client) = c else { continue };
                let cnt = Arc::clone(&cnt);
                std::thread::spawn(move || relay_session(client, server, impair, c2s, cnt));
            }
        });
        UdpRelay { addr, counts }
    }

    pub fn get(&self) -> (u64, u64, u64, u64, u64) {
        let c = &self.counts;
        (
            c.seen.load(SeqCst),
            c.dropped.load(SeqCst),
            c.duplicated.load(SeqCst),
            c.swapped.load(SeqCst),
            c.corrupted.load(SeqCst),
        )
    }
}

fn relay_session(
    client: TcpStream,
    server: SocketAddr,
    impair: Impair,
    c2s: bool,
    cnt: Arc<Counts>,
) {
    let Ok(up) = TcpStream::connect(server) else {
        return;
    };
    let client_side = UdpSocket::bind("127.0.0.1:0").unwrap();
    let my_port = client_side.local_addr().unwrap().port();
    let server_side = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Client -> server control: pass through.
    let (mut cr, mut uw) = (client.try_clone().unwrap(), up.try_clone().unwrap());
    std::thread::spawn(move || {
        while let Ok(m) = read_message(&mut cr) {
            if write_message(&mut uw, &m).is_err() {
                break;
            }
        }
        let _ = uw.shutdown(std::net::Shutdown::Write);
    });
    // Server -> client control: rewrite the UDP port, then start the UDP pumps.
    let (mut ur, mut cw) = (up, client);
    while let Ok(mut m) = read_message(&mut ur) {
        if let Message::UdpAccept { port, .. } = &mut m {
            server_side
                .connect(SocketAddr::new(server.ip(), *port))
                .unwrap();
            *port = my_port;
            let peer: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
            let (a, b) = (
                client_side.try_clone().unwrap(),
                server_side.try_clone().unwrap(),
            );
            let (p1, p2) = (Arc::clone(&peer), Arc::clone(&peer));
            let (k1, k2) = (Arc::clone(&cnt), Arc::clone(&cnt));
            std::thread::spawn(move || {
                pump(
                    &a,
                    |d| {
                        let _ = b.send(d);
                    },
                    Some(p1),
                    if c2s { Some(impair) } else { None },
                    &k1,
                )
            });
            let (a, b) = (
                client_side.try_clone().unwrap(),
                server_side.try_clone().unwrap(),
            );
            std::thread::spawn(move || {
                pump(
                    &b,
                    |d| {
                        if let Some(to) = *p2.lock().unwrap() {
                            let _ = a.send_to(d, to);
                        }
                    },
                    None,
                    if c2s { None } else { Some(impair) },
                    &k2,
                )
            });
        }
        if write_message(&mut cw, &m).is_err() {
            break;
        }
    }
}

fn every(n: u64, i: u64) -> bool {
    n > 0 && i % n == n - 1
}

/// Reads datagrams from `from` and forwards them with `out`, impairing test datagrams.
fn pump(
    from: &UdpSocket,
    out: impl Fn(&[u8]),
    learn: Option<Arc<Mutex<Option<SocketAddr>>>>,
    impair: Option<Impair>,
    cnt: &Counts,
) {
    from.set_read_timeout(Some(Duration::from_millis(30)))
        .unwrap();
    let mut buf = vec![0u8; 65536];
    let mut held: Option<Vec<u8>> = None;
    let mut idle = 0;
    let mut tokens = impair
        .and_then(|i| i.police)
        .map_or(0.0, |(_, depth)| depth as f64);
    let mut refilled = std::time::Instant::now();
    loop {
        let (n, src) = match from.recv_from(&mut buf) {
            Ok(x) => {
                idle = 0;
                x
            }
            Err(_) => {
                // Nothing followed a held datagram: release it in order (not a swap).
                if let Some(h) = held.take() {
                    out(&h);
                }
                idle += 1;
                if idle > 400 {
                    return; // 12 s of silence: the test is over.
                }
                continue;
            }
        };
        if let Some(l) = &learn {
            *l.lock().unwrap() = Some(src);
        }
        let d = &mut buf[..n];
        let test_datagram = Header::read(d).is_ok_and(|h| h.flags & FLAG_HANDSHAKE == 0);
        let Some(im) = impair.filter(|_| test_datagram) else {
            out(d);
            continue;
        };
        let i = cnt.seen.fetch_add(1, SeqCst);
        if let Some((rate, depth)) = im.police {
            tokens =
                (tokens + rate as f64 / 8.0 * refilled.elapsed().as_secs_f64()).min(depth as f64);
            refilled = std::time::Instant::now();
            if tokens < n as f64 {
                cnt.dropped.fetch_add(1, SeqCst);
                continue;
            }
            tokens -= n as f64;
        }
        // One action per datagram, so every count is exact.
        let mut dup = false;
        if every(im.drop_every, i) {
            cnt.dropped.fetch_add(1, SeqCst);
            continue;
        } else if every(im.corrupt_every, i) && n > HEADER_LEN {
            d[HEADER_LEN + (i as usize % (n - HEADER_LEN))] ^= 0x10;
            cnt.corrupted.fetch_add(1, SeqCst);
        } else if held.is_none() && every(im.swap_every, i) {
            held = Some(d.to_vec());
            continue;
        } else if every(im.dup_every, i) {
            dup = true;
        }
        out(d);
        if let Some(h) = held.take() {
            out(&h);
            cnt.swapped.fetch_add(1, SeqCst);
        }
        if dup {
            out(d);
            cnt.duplicated.fetch_add(1, SeqCst);
        }
    }
}
