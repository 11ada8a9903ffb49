//! The client's side of request/response tests (`rr`, `ping`): time each
//! request until its whole reply is back, on a monotonic clock, keeping
//! warm-up samples apart; over UDP also split the round trip into one-way
//! estimates and tell loss on the way up from loss on the way down.

use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use super::run::Run;
pub use super::run::{Probe, RrConfig, RrConfigError, RrReport, Transport, UNBOUNDED};
use super::serve::write_pattern;
use crate::control::{ClientError, Control};
use crate::protocol::asking::Accept;
use crate::protocol::pattern::{Direction, Pattern, stream_start};
use crate::protocol::proto::{RrProto, TestSpec};
use crate::protocol::rr::hist::LatencyStats;

fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match retrying(true, || s.read(&mut buf[got..]))? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    Ok(())
}

fn spin_write(s: &mut TcpStream, buf: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        done += retrying(true, || s.write(&buf[done..]))?;
    }
    Ok(())
}

/// Runs one socket call until it completes: again after a signal, and, when
/// busy-polling a non-blocking socket, again (spinning) while it would block.
fn retrying<T>(busy: bool, mut call: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match call() {
            Err(e) if busy && e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// Waits for the next slot of an `--interval` schedule.
fn pace(start: Instant, seq: u64, interval: Option<Duration>, busy: bool, interrupt: &AtomicBool) {
    let Some(iv) = interval else { return };
    let due = start + iv.saturating_mul(seq.min(u32::MAX as u64) as u32);
    while Instant::now() < due && !interrupt.load(SeqCst) {
        let left = due - Instant::now();
        if busy || left < Duration::from_micros(200) {
            std::hint::spin_loop();
        } else {
            std::thread::sleep((left - Duration::from_micros(100)).min(Duration::from_millis(50)));
        }
    }
}

/// Runs a request/response test. `on_probe` sees every request as it completes.
pub fn run(
    cfg: &RrConfig,
    interrupt: Arc<AtomicBool>,
    on_probe: &mut dyn FnMut(&Probe, Instant),
) -> Result<(RrReport, LatencyStats), ClientError> {
    cfg.validate()?;
    if matches!(cfg.transport, Transport::Sctp | Transport::SctpSeqpacket) {
        crate::sctp::support(cfg.transport == Transport::SctpSeqpacket)?;
    }
    let stream_kind = match cfg.transport {
        // SCTP one-to-one runs the stream protocol over its own socket.
        Transport::Sctp => crate::net::Stream::Sctp,
        // UDP and one-to-many SCTP: control over TCP, messages apart.
        Transport::Tcp | Transport::Udp | Transport::SctpSeqpacket => crate::net::Stream::Tcp,
    };
    let spec = cfg.spec();
    let proto = spec.proto;
    let total = spec.iterations;
    let bind = |a: std::net::SocketAddr| {
        Ok(cfg
            .bind
            .iter()
            .copied()
            .find(|b| b.is_ipv4() == a.is_ipv4()))
    };
    let via = crate::net::Via {
        kind: stream_kind,
        dev: cfg.bind_dev.as_deref(),
        // TCP and SCTP run over the control connection itself.
        port: cfg.cport.filter(|_| proto == RrProto::Tcp),
    };
    let mut c = Control::connect_within(
        &cfg.target,
        cfg.port,
        bind,
        cfg.connect_timeout.unwrap_or(Duration::from_secs(10)),
        Duration::from_secs(10),
        via,
        cfg.key.as_ref(),
    )?;
    let accept = c.request(TestSpec::Rr(spec))?;
    let new_stats = || {
        LatencyStats::new(
            cfg.hist_min_us,
            cfg.hist_max_us,
            cfg.hist_bins,
            cfg.outliers,
        )
    };
    let mut run = Run::new(cfg, total, &interrupt, new_stats);
    // The conversation takes only the acceptance the test's transport
    // calls for.
    let result = match accept {
        Accept::Session(session) => tcp(&mut c, session, &mut run, on_probe),
        Accept::Udp { port, token, .. } => super::udp::run(&mut c, port, token, &mut run, on_probe),
        Accept::Seqpacket { session, port } => seqpacket(&mut c, session, port, &mut run, on_probe),
    };
    // Once round trips have begun, a failure ends the run but keeps what was
    // measured: the caller reports it and still writes its files.
    let failed = result.err().map(|e| e.to_string());
    let _ = c.stream.set_nonblocking(false);
    let _ = c.stream.set_read_timeout(Some(Duration::from_secs(5)));
    // A TCP server that still expects raw requests would read a goodbye frame
    // as request bytes: after an early stop, closing is the goodbye.
    let finished = failed.is_none()
        && (proto != RrProto::Tcp || run.rep.sent == total)
        && !crate::control::hurried();
    let server = finished
        .then(|| c.goodbye(crate::control::STOP_GRACE))
        .flatten();
    let mut rep = std::mem::replace(&mut run.rep, RrReport::empty(cfg));
    rep.error = failed;
    rep.interrupted = interrupt.load(SeqCst);
    rep.server_requests = server.as_ref().map(|s| s.requests);
    rep.server_corrupt = server.as_ref().map(|s| s.data_errors);
    let main = run.summarise(&mut rep);
    rep.histogram = main
        .rows()
        .into_iter()
        .filter_map(|(lo, hi, n)| Some((lo?, hi?, n)).filter(|b| b.2 > 0))
        .collect();
    if proto == RrProto::Udp
        && let Some(s) = server
    {
        rep.lost_up = Some(rep.sent.saturating_sub(s.requests));
        rep.lost_down = Some(s.requests.saturating_sub(rep.received + rep.late));
        rep.duplicates_up = Some(s.duplicates);
        rep.reordered_up = Some(s.reordered);
    }
    Ok((rep, main))
}

/// Request/response on the control connection itself (TCP, SCTP one-to-one).
fn tcp(
    c: &mut Control,
    session: uuid::Uuid,
    run: &mut Run,
    on_probe: &mut dyn FnMut(&Probe, Instant),
) -> Result<(), ClientError> {
    let cfg = run.cfg;
    let s = &mut c.stream;
    run.rep.local = s.local_addr().ok();
    let v6 = c.addr.is_ipv6();
    crate::net::sockopt::apply(s, &cfg.sock, v6, false)?;
    let _ = crate::net::set_nodelay(s, !cfg.nagle);
    let _ = s.set_read_timeout(Some(cfg.timeout.unwrap_or(Duration::from_secs(30))));
    if cfg.busy_poll {
        let _ = s.set_nonblocking(true);
    }
    let busy = cfg.busy_poll;
    let r = exchanges(run, session, on_probe, |req, rep| {
        if busy {
            spin_write(s, req)?;
            spin_read(s, rep)?;
        } else {
            s.write_all(req)?;
            s.read_exact(rep)?;
        }
        Ok(rep.len())
    });
    r.map_err(|(done, e)| {
        c.failed(format!(
            "request/response failed after {done} requests: {e}"
        ))
    })
}

/// Request/response as messages on an SCTP one-to-many association from a
/// socket bound to every `--bind` address (multi-homed).
fn seqpacket(
    c: &mut Control,
    session: uuid::Uuid,
    port: u16,
    run: &mut Run,
    on_probe: &mut dyn FnMut(&Probe, Instant),
) -> Result<(), ClientError> {
    let cfg = run.cfg;
    let server = std::net::SocketAddr::new(c.addr.ip(), port);
    let bind: Vec<IpAddr> = cfg
        .bind
        .iter()
        .copied()
        .filter(|b| b.is_ipv4() == server.is_ipv4())
        .collect();
    let sock = crate::sctp::seqpacket_client(server, &bind)
        .map_err(|e| c.failed(format!("SCTP one-to-many socket bound to {bind:?}: {e}")))?;
    if let Some(dev) = &cfg.bind_dev {
        socket2::SockRef::from(&sock)
            .bind_device(Some(dev.as_bytes()))
            .map_err(|e| c.failed(format!("--bind-dev {dev}: {e}")))?;
    }
    crate::net::sockopt::apply(&sock, &cfg.sock, server.is_ipv6(), false)?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    let _ = crate::sctp::set_nodelay(fd, !cfg.nagle);
    let _ = sock.set_read_timeout(Some(cfg.timeout.unwrap_or(Duration::from_secs(30))));
    if cfg.busy_poll {
        let _ = sock.set_nonblocking(true);
    }
    let to = socket2::SockAddr::from(server);
    let busy = cfg.busy_poll;
    let r = exchanges(run, session, on_probe, |req, rep| {
        retrying(busy, || sock.send_to(req, &to))?;
        retrying(busy, || crate::sctp::recv_message(&sock, rep)).map(|(n, _)| n)
    });
    r.map_err(|(done, e)| {
        c.failed(format!(
            "SCTP one-to-many request/response failed after {done} requests: {e}"
        ))
    })
}

/// The loop shared by the transports whose every byte arrives or the run
/// fails: build request `seq` as pattern, time `exchange` (which sends it and
/// receives the reply, returning the reply's length), check the reply against
/// the pattern. A failure returns the replies received before it.
fn exchanges(
    run: &mut Run,
    session: uuid::Uuid,
    on_probe: &mut dyn FnMut(&Probe, Instant),
    mut exchange: impl FnMut(&[u8], &mut [u8]) -> io::Result<usize>,
) -> Result<(), (u64, io::Error)> {
    let (cfg, total, interrupt) = (run.cfg, run.total, run.interrupt);
    let (req_start, rep_start) = (
        stream_start(session, Direction::ClientToServer),
        stream_start(session, Direction::ServerToClient),
    );
    let mut req = Vec::with_capacity(cfg.size as usize);
    // One byte more than a reply, so a message transport shows a longer one.
    let mut rep = vec![0u8; cfg.reply as usize + 1];
    let reply = cfg.reply as usize;
    let message = cfg.transport == Transport::SctpSeqpacket;
    if let Some(at) = cfg.start_at {
        crate::net::wait_for_epoch(at, interrupt);
    }
    let start = Instant::now();
    // The end of one round trip is the time the next one is looked at from:
    // one clock read a round trip besides its start.
    let mut now = start;
    for seq in 0..total {
        if interrupt.load(SeqCst) || !run.may_send(seq, now) {
            break;
        }
        pace(start, seq, cfg.interval, cfg.busy_poll, interrupt);
        req.clear();
        // Build the request outside the timed section.
        let _ = write_pattern(
            &mut req,
            req_start,
            seq * cfg.size as u64,
            cfg.size as usize,
        );
        let t0 = Instant::now();
        let r = exchange(&req, if message { &mut rep } else { &mut rep[..reply] });
        now = Instant::now();
        let rtt = now.saturating_duration_since(t0);
        run.rep.sent += 1;
        let n = r.map_err(|e| {
            let e = match e.kind() {
                // A read timeout shows as EAGAIN; say what it means.
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no reply within {:?} (--timeout)",
                        cfg.timeout.unwrap_or_default()
                    ),
                ),
                _ => e,
            };
            (run.rep.received, e)
        })?;
        run.rep.received += 1;
        if n != reply
            || Pattern::get()
                .verify(rep_start, seq * cfg.reply as u64, &rep[..reply])
                .is_err()
        {
            run.rep.corrupt += 1;
        }
        run.record_at(seq, rtt, now);
        on_probe(
            &Probe {
                seq,
                rtt_us: Some(rtt.as_nanos() as f64 / 1e3),
                up_us: None,
                down_us: None,
                split_error_us: None,
                late: false,
                duplicate: false,
                warmup: seq < cfg.warmup,
            },
            now,
        );
    }
    Ok(())
}
