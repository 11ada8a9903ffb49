//! `netrig serve --iperf3-port`: unmodified iperf3 clients against netrig's
//! server, under its limits and in its log.
//!
//! One thread accepts on the iperf3 port (TCP, and UDP for UDP tests'
//! connect datagrams) and reads each new connection's 37-byte cookie on a
//! mio loop, so a silent connection costs no thread; connections yet to
//! send their cookie are capped (`Limits::max_pending`, the oldest closed
//! first) and closed after `--handshake-timeout`. A cookie that names a
//! running test is that test's data stream (iperf3's `iperf_tcp_accept`:
//! streams announce themselves with the control connection's cookie); any
//! other is a new test, which runs on a worker thread (`test.rs`) only once
//! it holds one of `--max-tests` and one of its address's
//! `--max-tests-per-client` — so threads are bounded by `--max-tests` (and
//! one address's by its share), never by clients.
//!
//! The protocol itself (`crate::protocol::iperf3`) is pure; this is its I/O.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token};

use super::State;
use super::limits::{Slot, take_slot};
use crate::protocol::iperf3::{COOKIE_LEN, Cookie, State as Wire, udp};
use crate::protocol::proto::ErrorCode;
use crate::protocol::refusal::Share;

mod streams;
mod test;

/// Where a running test's streams arrive: by cookie for TCP; for UDP, by
/// the client's address (a connect datagram carries no cookie; iperf3's own
/// server runs one test at a time).
#[derive(Default)]
pub(super) struct Registry {
    tcp: Mutex<HashMap<Cookie, (IpAddr, Sender<Arrival>)>>,
    udp: Mutex<HashMap<IpAddr, Sender<Arrival>>>,
}

/// A stream for a running test.
pub(super) enum Arrival {
    Tcp(std::net::TcpStream),
    /// A connect datagram from this address, to this local address.
    Udp(SocketAddr, SocketAddr),
}

impl Registry {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
}

const LISTENER: Token = Token(0);
const DATAGRAMS: Token = Token(1);
/// Tokens from here are connections; below, from [`DATAGRAMS`], UDP sockets.
const FIRST: usize = 2;

/// A connection yet to send its whole cookie.
struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    got: Vec<u8>,
    since: Instant,
}

/// Binds the iperf3 port (TCP and UDP, dual-stack where the host has IPv6)
/// and starts its thread. Returns the bound TCP address.
pub(super) fn start(st: &Arc<State>, port: u16) -> io::Result<SocketAddr> {
    let (listener, local) = match bind_tcp(SocketAddr::from(([0u16; 8], port))) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(e),
        Err(_) => bind_tcp(SocketAddr::from(([0u8; 4], port)))?,
    };
    let datagrams = bind_udp(SocketAddr::new(local.ip(), local.port()))?;
    let st = Arc::clone(st);
    std::thread::Builder::new()
        .name("iperf3-accept".into())
        .spawn(move || accept_loop(&st, Some(listener), vec![datagrams]))?;
    Ok(local)
}

/// `--iperf3-detect`: the main port's event loops find iperf3's TCP
/// connections by their cookie ([`route`]); UDP tests' connect datagrams
/// come to the main port's UDP, bound here (beside nothing: netrig's own
/// UDP tests use ports of their own) and read on a thread of their own.
pub(super) fn start_detect(st: &Arc<State>, addrs: &[SocketAddr]) -> io::Result<()> {
    let socks = addrs
        .iter()
        .map(|a| bind_udp(*a))
        .collect::<io::Result<Vec<_>>>()?;
    let st = Arc::clone(st);
    std::thread::Builder::new()
        .name("iperf3-udp".into())
        .spawn(move || accept_loop(&st, None, socks))?;
    Ok(())
}

fn bind_tcp(a: SocketAddr) -> io::Result<(TcpListener, SocketAddr)> {
    let l = crate::net::listen(a)?;
    l.set_nonblocking(true)?;
    let local = l.local_addr()?;
    Ok((TcpListener::from_std(l), local))
}

/// A UDP socket on the iperf3 port that others may bind too: each UDP
/// stream gets a socket of its own on the same port, connected to its
/// client, which the kernel prefers for that client's datagrams (as
/// iperf3's `iperf_udp_accept` does with its listener).
pub(super) fn bind_udp(a: SocketAddr) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(a), Type::DGRAM, Some(Protocol::UDP))?;
    if a.is_ipv6() {
        let _ = s.set_only_v6(false);
    }
    s.set_reuse_address(true)?;
    s.bind(&a.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

fn accept_loop(
    st: &Arc<State>,
    mut listener: Option<TcpListener>,
    datagrams: Vec<std::net::UdpSocket>,
) {
    let reg = Arc::clone(&st.iperf3);
    let Ok(mut poll) = Poll::new() else {
        return;
    };
    let mut datagrams: Vec<UdpSocket> = datagrams.into_iter().map(UdpSocket::from_std).collect();
    let mut registered = listener.as_mut().map_or(Ok(()), |l| {
        poll.registry().register(l, LISTENER, Interest::READABLE)
    });
    for (i, d) in datagrams.iter_mut().enumerate() {
        registered = registered.and_then(|()| {
            poll.registry()
                .register(d, Token(DATAGRAMS.0 + i), Interest::READABLE)
        });
    }
    if registered.is_err() {
        return;
    }
    let first = FIRST + datagrams.len();
    let mut events = Events::with_capacity(256);
    let mut pending: HashMap<usize, Pending> = HashMap::new();
    let mut next = first;
    let max_pending = st.cfg.limits.max_pending() as usize;
    while !st.stop.load(SeqCst) {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(100)))
            && e.kind() != io::ErrorKind::Interrupted
        {
            return;
        }
        for ev in &events {
            match ev.token() {
                LISTENER => {
                    while let Some(listener) = &listener {
                        match listener.accept() {
                            Ok((mut stream, peer)) => {
                                if pending.len() >= max_pending {
                                    let oldest = pending
                                        .iter()
                                        .min_by_key(|(_, p)| p.since)
                                        .map(|(k, _)| *k);
                                    if let Some(k) = oldest {
                                        pending.remove(&k);
                                    }
                                }
                                let t = next;
                                next += 1;
                                if poll
                                    .registry()
                                    .register(&mut stream, Token(t), Interest::READABLE)
                                    .is_ok()
                                {
                                    pending.insert(
                                        t,
                                        Pending {
                                            stream,
                                            peer,
                                            got: Vec::with_capacity(COOKIE_LEN),
                                            since: Instant::now(),
                                        },
                                    );
                                    // Bytes may already be there: edge-triggered.
                                    read_cookie(st, &mut poll, &mut pending, t);
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(_) => {
                                std::thread::sleep(super::ACCEPT_BACKOFF);
                                break;
                            }
                        }
                    }
                }
                Token(t) if t < first => {
                    if let Some(d) = datagrams.get(t - DATAGRAMS.0) {
                        connect_datagrams(d, &reg);
                    }
                }
                Token(t) => read_cookie(st, &mut poll, &mut pending, t),
            }
        }
        let timeout = st.cfg.handshake_timeout;
        pending.retain(|_, p| p.since.elapsed() < timeout);
    }
}

/// Hands connect datagrams to the test waiting for UDP streams from their
/// sender's address; others are dropped.
fn connect_datagrams(sock: &UdpSocket, reg: &Registry) {
    let mut buf = [0u8; 64];
    let local = sock.local_addr().ok();
    while let Ok((n, from)) = sock.recv_from(&mut buf) {
        if !udp::is_connect(&buf[..n]) {
            continue;
        }
        let tx = Registry::lock(&reg.udp)
            .get(&from.ip().to_canonical())
            .cloned();
        if let (Some(tx), Some(local)) = (tx, local) {
            let _ = tx.send(Arrival::Udp(from, local));
        }
    }
}

/// Reads what is there of a pending connection's cookie; a whole one is
/// routed to its test or starts one.
fn read_cookie(st: &Arc<State>, poll: &mut Poll, pending: &mut HashMap<usize, Pending>, t: usize) {
    let Some(p) = pending.get_mut(&t) else {
        return;
    };
    let mut buf = [0u8; COOKIE_LEN];
    loop {
        let want = COOKIE_LEN - p.got.len();
        match p.stream.read(&mut buf[..want]) {
            Ok(0) => {
                pending.remove(&t);
                return;
            }
            Ok(n) => {
                p.got.extend_from_slice(&buf[..n]);
                if p.got.len() == COOKIE_LEN {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                pending.remove(&t);
                return;
            }
        }
    }
    let Some(mut p) = pending.remove(&t) else {
        return;
    };
    let _ = poll.registry().deregister(&mut p.stream);
    let std_stream = into_blocking(p.stream);
    let Some(stream) = std_stream else {
        return;
    };
    let cookie = match Cookie::parse(&p.got) {
        Ok(c) => c,
        Err(e) => {
            refuse_line(st, p.peer, ErrorCode::Malformed, &e.to_string());
            return;
        }
    };
    route(st, stream, p.peer, cookie);
}

/// A connection that sent a whole cookie (on the iperf3 port, or on the
/// main port with `--iperf3-detect`): the data stream of the running test
/// it names, or a new test.
pub(super) fn route(
    st: &Arc<State>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    cookie: Cookie,
) {
    let reg = &st.iperf3;
    let known = Registry::lock(&reg.tcp).get(&cookie).cloned();
    match known {
        Some((ip, tx)) if ip == peer.ip().to_canonical() => {
            let _ = tx.send(Arrival::Tcp(stream));
        }
        Some(_) => refuse(
            st,
            stream,
            peer,
            ErrorCode::ForeignHost,
            "a stream for another host's test",
        ),
        None => admit(st, reg, stream, peer, cookie),
    }
}

fn into_blocking(s: TcpStream) -> Option<std::net::TcpStream> {
    let s = std::net::TcpStream::from(s);
    s.set_nonblocking(false).ok()?;
    Some(s)
}

/// Starts a test for a new control connection once it holds one of
/// `--max-tests`; otherwise answers ACCESS_DENIED, as a busy iperf3 server
/// does (`iperf_accept`).
fn admit(
    st: &Arc<State>,
    reg: &Arc<Registry>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    cookie: Cookie,
) {
    if st.cfg.key.is_some() && !st.cfg.iperf3_allow_unauthenticated {
        refuse(
            st,
            stream,
            peer,
            ErrorCode::Auth,
            "iperf3 clients cannot prove the pre-shared key (serve --iperf3-allow-unauthenticated lets them in)",
        );
        return;
    }
    let max = u64::from(st.cfg.limits.max_tests);
    let Some(slot) = take_slot(&st.tests, max) else {
        refuse(
            st,
            stream,
            peer,
            ErrorCode::LimitTests,
            &format!("server limit: max tests {max}"),
        );
        return;
    };
    // One of its address's tests too, before a thread starts: an address
    // holds at most --max-tests-per-client of them, however many it opens.
    let ip = peer.ip().to_canonical();
    let mine = match super::take_source(
        &st.tests_per_client,
        ip,
        st.cfg.limits.max_tests_per_client,
        Share::Tests,
    ) {
        Ok(m) => m,
        Err(l) => {
            drop(slot);
            return refuse(st, stream, peer, l.code(), &format!("server limit: {l}"));
        }
    };
    // Both places move to the worker, which gives them back when it ends.
    std::mem::forget(slot);
    std::mem::forget(mine);
    let (tx, rx) = channel();
    let (st2, reg2) = (Arc::clone(st), Arc::clone(reg));
    let spawned = std::thread::Builder::new()
        .name("iperf3-test".into())
        .spawn(move || {
            let _slot = Slot::adopt(&st2.tests);
            let _mine = st2.tests_per_client.adopt(ip);
            test::run(&st2, &reg2, stream, peer, cookie, tx, rx);
        });
    if spawned.is_err() {
        // Both places come back, as the worker would have given them.
        drop(Slot::adopt(&st.tests));
        drop(st.tests_per_client.adopt(ip));
    }
}

/// Answers ACCESS_DENIED and logs why.
fn refuse(
    st: &State,
    mut stream: std::net::TcpStream,
    peer: SocketAddr,
    code: ErrorCode,
    why: &str,
) {
    use std::io::Write;
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = stream.write_all(&[Wire::AccessDenied.byte()]);
    refuse_line(st, peer, code, why);
}

/// Counts the refusal under the code netrig's own clients would get for
/// it, and logs it like theirs.
pub(super) fn refuse_line(st: &State, peer: SocketAddr, code: ErrorCode, why: &str) {
    st.metrics.refused(code);
    if st.cfg.verbosity >= 1 {
        super::log::foreign_refusal(st.cfg.log_format, peer, code, &format!("iperf3: {why}"));
    }
}
