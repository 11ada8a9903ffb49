//! `netrig serve --iperf2-port`: unmodified iperf2 clients (`iperf -c`,
//! TCP and UDP) against netrig's server, under its limits and in its log.
//!
//! iperf2 has no control connection: a TCP test is a connection that
//! starts with a client header and carries bytes until the client closes;
//! a UDP test is a flow of numbered datagrams from one address, ended by a
//! negative number, which the server answers with its report (see
//! `crate::protocol::iperf2`). So this server only receives: a header asking it to
//! connect back or send (`-d`, `-r`, `-R`, `--full-duplex`) is refused.
//!
//! One thread accepts TCP and reads every UDP datagram on the port. A TCP
//! connection whose whole header came goes on on the server's event loops
//! (`iperf2_tcp.rs`), which admit it under `--max-tests` and count its
//! bytes without a thread of its own; a UDP flow holds a test slot too, in
//! this thread's table, until its final datagram or `--idle-timeout` of
//! silence. Each TCP connection of `-P N` is a test of its own: nothing on
//! iperf2's wire ties them together.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::net::{TcpListener, UdpSocket};
use mio::{Events, Interest, Poll, Token};
use serde_json::json;

use super::core::Core;
use super::limits::{Slot, take_slot};
use super::metrics::{Kind, Moved};
use super::{State, log};
use crate::protocol::iperf2::{
    ClientHeader, DATAGRAM_LEN, Datagram, HeaderError, ServerReport, UdpCount,
};
use crate::protocol::proto::ErrorCode;

const LISTENER: Token = Token(0);
const DATAGRAMS: Token = Token(1);
/// Tokens from here are connections yet to send their whole header.
const FIRST: usize = 2;

/// A connection yet to send its whole client header: read on the accept
/// thread, holding no slot and no thread, as iperf3's cookies are.
struct Pending {
    stream: mio::net::TcpStream,
    peer: SocketAddr,
    got: Vec<u8>,
    since: Instant,
}
/// How long a finished UDP test's report is kept to answer the client's
/// repeated final datagrams (it sends up to ten, a quarter second apart:
/// iperf2's Client.cpp).
const REPORT_KEPT: Duration = Duration::from_secs(3);

/// Binds the iperf2 port (TCP and UDP, dual-stack where the host has IPv6)
/// and starts its thread. Returns the bound TCP address.
pub(super) fn start(st: &Arc<State>, port: u16, core: Core) -> io::Result<SocketAddr> {
    let any6 = SocketAddr::from(([0u16; 8], port));
    let l = match crate::net::listen(any6) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(e),
        Err(_) => crate::net::listen(SocketAddr::from(([0u8; 4], port)))?,
    };
    l.set_nonblocking(true)?;
    let local = l.local_addr()?;
    let udp = super::iperf3::bind_udp(local)?;
    let st = Arc::clone(st);
    std::thread::Builder::new()
        .name("iperf2-accept".into())
        .spawn(move || {
            run(
                &st,
                &core,
                TcpListener::from_std(l),
                UdpSocket::from_std(udp),
            )
        })?;
    Ok(local)
}

/// A UDP test in progress, or finished and keeping its report.
struct Flow<'a> {
    count: UdpCount,
    began: Instant,
    last: Instant,
    describe: String,
    _slot: Option<Slot<'a>>,
    /// The report, once the final datagram came.
    report: Option<[u8; crate::protocol::iperf2::REPORT_LEN]>,
    /// Refused: its datagrams are dropped unlogged until it falls silent.
    refused: bool,
}

impl Flow<'_> {
    fn refused() -> Self {
        let now = Instant::now();
        Flow {
            count: UdpCount::default(),
            began: now,
            last: now,
            describe: String::new(),
            _slot: None,
            report: None,
            refused: true,
        }
    }
}

fn run(st: &Arc<State>, core: &Core, mut listener: TcpListener, mut udp: UdpSocket) {
    let Ok(mut poll) = Poll::new() else { return };
    if poll
        .registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .and_then(|()| {
            poll.registry()
                .register(&mut udp, DATAGRAMS, Interest::READABLE)
        })
        .is_err()
    {
        return;
    }
    let mut events = Events::with_capacity(64);
    let mut flows: HashMap<SocketAddr, Flow<'_>> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    let mut pending: HashMap<usize, Pending> = HashMap::new();
    let mut next = FIRST;
    let max_pending = st.cfg.limits.max_pending() as usize;
    while !st.stop.load(SeqCst) {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(100)))
            && e.kind() != io::ErrorKind::Interrupted
        {
            return;
        }
        for ev in &events {
            if ev.token().0 >= FIRST {
                read_header(st, core, &mut poll, &mut pending, ev.token().0);
            } else if ev.token() == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((mut stream, peer)) => {
                            if pending.len() >= max_pending {
                                let oldest =
                                    pending.iter().min_by_key(|(_, p)| p.since).map(|(k, _)| *k);
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
                                let got = Vec::with_capacity(crate::protocol::iperf2::EXT_LEN);
                                pending.insert(
                                    t,
                                    Pending {
                                        stream,
                                        peer,
                                        got,
                                        since: Instant::now(),
                                    },
                                );
                                // Bytes may already be there: edge-triggered.
                                read_header(st, core, &mut poll, &mut pending, t);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            std::thread::sleep(super::ACCEPT_BACKOFF);
                            break;
                        }
                    }
                }
            } else {
                while let Ok((n, from)) = udp.recv_from(&mut buf) {
                    datagram(st, &udp, &mut flows, from, &buf[..n]);
                }
            }
        }
        let timeout = st.cfg.handshake_timeout;
        pending.retain(|_, p| {
            let keep = p.since.elapsed() < timeout;
            if !keep {
                refuse_line(
                    st,
                    p.peer,
                    ErrorCode::Malformed,
                    "no whole client header within the handshake timeout",
                );
            }
            keep
        });
        let (idle, deadline) = (st.cfg.idle_timeout, st.cfg.limits.deadline());
        flows.retain(|peer, f| {
            if f.report.is_some() || f.refused {
                return f.last.elapsed() < REPORT_KEPT;
            }
            let why = if f.last.elapsed() >= idle {
                "no final datagram"
            } else if f.began.elapsed() >= deadline {
                "server limit: duration"
            } else {
                return true;
            };
            end_udp(st, *peer, f, why, None);
            false
        });
    }
}

/// Whether the key rule lets iperf2 clients in.
fn key_allows(st: &State) -> bool {
    st.cfg.key.is_none() || st.cfg.iperf2_allow_unauthenticated
}

const KEY_WHY: &str = "iperf2 clients cannot prove the pre-shared key (serve --iperf2-allow-unauthenticated lets them in)";

fn admit_tcp(
    st: &Arc<State>,
    core: &Core,
    s: mio::net::TcpStream,
    peer: SocketAddr,
    hdr: ClientHeader,
    got: u64,
) {
    if !key_allows(st) {
        return refuse_line(st, peer, ErrorCode::Auth, KEY_WHY);
    }
    let s = std::net::TcpStream::from(s);
    // The loop it goes to admits it under the server's limits, or refuses
    // it (the server stopping drops it with the message).
    core.hand_iperf2(st, s, peer, hdr, got);
}

/// Reads what is there of a pending connection's header; a whole one is
/// checked and, if served, starts a test.
fn read_header(
    st: &Arc<State>,
    core: &Core,
    poll: &mut Poll,
    pending: &mut HashMap<usize, Pending>,
    t: usize,
) {
    let Some(p) = pending.get_mut(&t) else { return };
    let mut buf = [0u8; crate::protocol::iperf2::EXT_LEN];
    let verdict = loop {
        let want = match p.got.get(..4) {
            None => 4,
            Some(w) => ClientHeader::wanted(u32::from_be_bytes([w[0], w[1], w[2], w[3]])),
        };
        if p.got.len() >= want {
            break ClientHeader::parse(&p.got).map_err(|e| (header_refusal(&e), e.to_string()));
        }
        if p.got.len() == 4 {
            // The first word alone can say it is not iperf2's.
            if let Err(e @ (HeaderError::NotIperf2(_) | HeaderError::Length(_))) =
                ClientHeader::parse(&p.got)
            {
                break Err((header_refusal(&e), e.to_string()));
            }
        }
        match p.stream.read(&mut buf[..want - p.got.len()]) {
            Ok(0) => break Err((ErrorCode::Malformed, "a short client header: closed".into())),
            Ok(n) => p.got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err((ErrorCode::Malformed, format!("a short client header: {e}"))),
        }
    };
    let Some(mut p) = pending.remove(&t) else {
        return;
    };
    let _ = poll.registry().deregister(&mut p.stream);
    match verdict {
        Ok(h) => admit_tcp(st, core, p.stream, p.peer, h, p.got.len() as u64),
        Err((code, why)) => refuse_line(st, p.peer, code, &why),
    }
}

fn header_refusal(e: &HeaderError) -> ErrorCode {
    match e {
        HeaderError::Unsupported(..) => ErrorCode::Invalid,
        _ => ErrorCode::Malformed,
    }
}

/// Seconds since the epoch, for transit times against the client's stamps.
fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One datagram on the iperf2 port: counted in its flow, starting one if
/// it is new, or, if final, answered with the flow's report.
fn datagram<'a>(
    st: &'a State,
    udp: &UdpSocket,
    flows: &mut HashMap<SocketAddr, Flow<'a>>,
    from: SocketAddr,
    d: &[u8],
) {
    let Some(g) = Datagram::read(d) else {
        if !flows.contains_key(&from) && flows.len() < st.cfg.limits.max_pending() as usize {
            refuse_line(
                st,
                from,
                ErrorCode::Malformed,
                "a datagram too short for iperf2's header",
            );
            flows.insert(from, Flow::refused());
        }
        return;
    };
    if !flows.contains_key(&from) {
        // Refusals are remembered (up to the bound on unnamed connections)
        // so a refused flow's datagrams make one log line, not one each.
        if flows.len() >= st.cfg.limits.max_pending() as usize {
            return;
        }
        let mut refuse = |code: ErrorCode, why: &str| {
            refuse_line(st, from, code, why);
            flows.insert(from, Flow::refused());
        };
        if g.seq < 0 {
            // A final datagram for a flow this server does not know (it
            // restarted, or the flow timed out): nothing to report.
            return;
        }
        let hdr = match ClientHeader::parse(&d[DATAGRAM_LEN..]) {
            Ok(h) => h,
            Err(e) => return refuse(header_refusal(&e), &e.to_string()),
        };
        if !key_allows(st) {
            return refuse(ErrorCode::Auth, KEY_WHY);
        }
        let max = u64::from(st.cfg.limits.max_tests);
        let Some(slot) = take_slot(&st.tests, max) else {
            return refuse(
                ErrorCode::LimitTests,
                &format!("server limit: max tests {max}"),
            );
        };
        let describe = hdr.describe();
        if st.cfg.verbosity >= 1 {
            log::event(
                st.cfg.log_format,
                "session_start",
                format_args!("iperf2 UDP test from {from}: {describe}"),
                || json!({"client": from.to_string(), "kind": Kind::Iperf2.name(), "session": format!("iperf2-udp-{from}")}),
            );
        }
        st.metrics.started(Kind::Iperf2);
        let now = Instant::now();
        flows.insert(
            from,
            Flow {
                count: UdpCount::default(),
                began: now,
                last: now,
                describe,
                _slot: Some(slot),
                report: None,
                refused: false,
            },
        );
    }
    let Some(f) = flows.get_mut(&from) else {
        return;
    };
    f.last = Instant::now();
    if f.refused {
        return;
    }
    if let Some(r) = &f.report {
        // The client did not get the report: again.
        let _ = udp.send_to(r, from);
        return;
    }
    if g.seq < 0 {
        let fin = g.seq.unsigned_abs();
        let report = ServerReport::of(&f.count, Some(fin), f.began.elapsed().as_secs_f64());
        let bytes = report.encode();
        let _ = udp.send_to(&bytes, from);
        end_udp(st, from, f, "completed", Some(fin));
        f.report = Some(bytes);
        f._slot = None;
    } else if g.seq > 0 {
        f.count
            .datagram(g.seq.unsigned_abs(), d.len(), now_secs() - g.sent());
    }
}

/// Logs and meters a UDP test's end.
fn end_udp(st: &State, peer: SocketAddr, f: &Flow<'_>, outcome: &str, fin: Option<u64>) {
    let took = f.began.elapsed();
    let c = &f.count;
    st.finished.fetch_add(1, SeqCst);
    let moved = Moved {
        received: c.bytes,
        ..Moved::default()
    };
    st.metrics.ended(Kind::Iperf2, took, moved);
    if st.cfg.verbosity >= 1 {
        let (total, lost) = (c.total(fin), c.lost(fin));
        log::event(
            st.cfg.log_format,
            "session_end",
            format_args!(
                "iperf2 UDP test from {peer} ({}): {outcome}: received {} bytes in {:.2} s, {} datagrams, lost {lost}/{total}, out of order {}, duplicates {}, jitter {:.3} ms",
                f.describe,
                c.bytes,
                took.as_secs_f64(),
                c.received,
                c.out_of_order,
                c.duplicates,
                c.jitter * 1e3
            ),
            || {
                json!({"client": peer.to_string(), "kind": Kind::Iperf2.name(),
                    "session": format!("iperf2-udp-{peer}"), "result": outcome,
                    "duration_s": took.as_secs_f64(), "bytes_sent": 0, "bytes_received": c.bytes,
                    "datagrams": c.received, "datagrams_total": total, "lost": lost,
                    "out_of_order": c.out_of_order, "duplicates": c.duplicates,
                    "jitter_ms": c.jitter * 1e3})
            },
        );
    }
}

/// Counts the refusal under the code netrig's own clients would get for
/// it, and logs it like theirs. iperf2 has no refusal message: the
/// connection is closed, the datagram dropped.
pub(super) fn refuse_line(st: &State, peer: SocketAddr, code: ErrorCode, why: &str) {
    st.metrics.refused(code);
    if st.cfg.verbosity >= 1 {
        log::foreign_refusal(st.cfg.log_format, peer, code, &format!("iperf2: {why}"));
    }
}
