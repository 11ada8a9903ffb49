//! One admitted iperf3 test on its worker thread: parameters, limits, its
//! streams on one mio loop (their I/O in `streams.rs`), and the results
//! exchange.
//!
//! The order is iperf3's (`iperf_server_api.c`: `iperf_accept`,
//! `iperf_run_server`, `iperf_handle_message_server`): PARAM_EXCHANGE, the
//! client's parameters, CREATE_STREAMS, the streams (receiving ones first
//! for `--bidir`), TEST_START and TEST_RUNNING; the client's TEST_END, then
//! EXCHANGE_RESULTS, the client's results, the server's, DISPLAY_RESULTS,
//! and the client's IPERF_DONE. A refused test gets SERVER_ERROR and an
//! iperf3 error number (`iperf_api.h`: IETOTALRATE 27,
//! IEMAXSERVERTESTDURATIONEXCEEDED 37), which the client prints.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};

use super::streams::{Io, Stream, drain, gather, receive, send, totals};
use super::{Arrival, Registry};
use crate::protocol::cpu::{CpuSample, CpuUsage};
use crate::protocol::iperf3::{
    Control, Cookie, Event, Mode, Params, Proto, Results, State as Wire, StreamResult, frame_json,
};
use crate::protocol::proto::ErrorCode;
use crate::protocol::refusal::Drawn;
use crate::server::log;
use crate::server::metrics::{Kind, Moved};
use crate::server::{State, account};
use serde_json::json;

const CTRL: Token = Token(0);
/// iperf3's error numbers the client can print for a refusal.
const IE_TOTAL_RATE: u32 = 27;
const IE_MAX_DURATION: u32 = 37;
const IE_RECV_PARAMS: u32 = 114;

/// Removes a test's entries from the registry when it ends.
struct Listed<'a> {
    reg: &'a Registry,
    cookie: Cookie,
    udp: Option<IpAddr>,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        Registry::lock(&self.reg.tcp).remove(&self.cookie);
        if let Some(ip) = self.udp {
            Registry::lock(&self.reg.udp).remove(&ip);
        }
    }
}

pub(super) fn run(
    st: &Arc<State>,
    reg: &Registry,
    mut ctrl: std::net::TcpStream,
    peer: SocketAddr,
    cookie: Cookie,
    tx: Sender<Arrival>,
    rx: Receiver<Arrival>,
) {
    let ip = peer.ip().to_canonical();
    let limits = st.cfg.limits;
    let refuse = |ctrl: &mut std::net::TcpStream, l: crate::protocol::refusal::Limit| {
        let _ = ctrl.write_all(&[Wire::AccessDenied.byte()]);
        super::refuse_line(st, peer, l.code(), &format!("server limit: {l}"));
    };
    if let Err(l) = limits.check_memory(st.resident.load(SeqCst)) {
        return refuse(&mut ctrl, l);
    }
    let mut ctl = Control::new();
    if ctl.feed(&cookie.0).is_err() {
        return;
    }
    let _ = ctrl.set_nodelay(true);
    let setup_end = Instant::now() + st.cfg.handshake_timeout;
    if ctrl.write_all(&[Wire::ParamExchange.byte()]).is_err() {
        return;
    }
    let params = match read_params(&mut ctrl, &mut ctl, setup_end) {
        Ok(p) => p,
        Err(why) => {
            let _ = server_error(&mut ctrl, IE_RECV_PARAMS);
            return super::refuse_line(st, peer, ErrorCode::Malformed, &why.to_string());
        }
    };
    if let Err((code, ours, why)) = check(st, &params) {
        let _ = server_error(&mut ctrl, code);
        return super::refuse_line(st, peer, ours, &why);
    }
    // Its share of `--max-memory`, known once its block size and streams
    // are; iperf3 clients take ACCESS_DENIED at any state.
    let bytes = account::iperf3_bytes(params.len, params.streams());
    let _memory = match st.memory.take(bytes, limits.max_memory, Drawn::IperfTest) {
        Ok(charge) => charge,
        Err(l) => return refuse(&mut ctrl, l),
    };
    let _listed = Listed {
        reg,
        cookie,
        udp: (params.proto == Proto::Udp).then_some(ip),
    };
    Registry::lock(&reg.tcp).insert(cookie, (ip, tx.clone()));
    if params.proto == Proto::Udp {
        Registry::lock(&reg.udp).insert(ip, tx);
    }
    if ctrl.write_all(&[Wire::CreateStreams.byte()]).is_err() {
        return;
    }
    let (format, id) = (st.cfg.log_format, cookie.text());
    if st.cfg.verbosity >= 1 {
        log::event(
            format,
            "session_start",
            format_args!("iperf3 test {id} from {peer}: {}", describe(&params)),
            || json!({"client": peer.to_string(), "kind": Kind::Iperf3.name(), "session": id}),
        );
    }
    let Ok(poll) = Poll::new() else { return };
    let mut streams = match gather(&poll, &params, &rx, setup_end, &st.stop) {
        Some(s) => s,
        None => {
            return super::refuse_line(
                st,
                peer,
                ErrorCode::Stopped,
                "its streams did not all come in time",
            );
        }
    };
    let began = Instant::now();
    let cpu0 = crate::net::cpu::sample();
    if ctrl
        .write_all(&[Wire::TestStart.byte(), Wire::TestRunning.byte()])
        .is_err()
    {
        return;
    }
    st.metrics.started(Kind::Iperf3);
    let outcome = run_streams(
        st,
        poll,
        ctrl,
        &mut ctl,
        &params,
        &mut streams,
        (began, &cpu0),
    );
    st.finished.fetch_add(streams.len() as u64, SeqCst);
    let (got, sent) = totals(&streams);
    let took = began.elapsed();
    let moved = Moved {
        sent,
        received: got,
        ..Moved::default()
    };
    st.metrics.ended(Kind::Iperf3, took, moved);
    if st.cfg.verbosity >= 1 {
        log::event(
            format,
            "session_end",
            format_args!(
                "iperf3 test {id} from {peer}: {outcome}: received {got} bytes, sent {sent} bytes in {:.2} s",
                took.as_secs_f64()
            ),
            || {
                json!({"client": peer.to_string(), "kind": Kind::Iperf3.name(), "session": id,
                    "result": outcome.to_string(), "duration_s": took.as_secs_f64(),
                    "bytes_sent": sent, "bytes_received": got})
            },
        );
    }
}

fn describe(p: &Params) -> String {
    let proto = match p.proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    };
    let mode = match p.mode {
        Mode::ClientSends => "client sends",
        Mode::Reverse => "reverse",
        Mode::Bidir => "bidir",
    };
    let bound = match (p.seconds(), p.send_limit()) {
        (Some(s), _) => format!("{s} s"),
        (None, Some(b)) => format!("{b} bytes"),
        (None, None) => "unbounded".into(),
    };
    format!(
        "{proto}, {} streams, {mode}, {bound}, {} bytes a write, client {}",
        p.parallel,
        p.len,
        p.client_version.as_deref().unwrap_or("?")
    )
}

/// SERVER_ERROR, then iperf3's error number and an errno of 0.
fn server_error(ctrl: &mut std::net::TcpStream, code: u32) -> io::Result<()> {
    let mut b = vec![Wire::ServerError.byte()];
    b.extend_from_slice(&code.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    ctrl.write_all(&b)
}

/// Why an iperf3 client's parameters were not read.
#[derive(Debug, thiserror::Error)]
enum ParamsError {
    #[error("no parameters in time")]
    Late,
    #[error("closed before its parameters")]
    Closed,
    #[error("reading parameters: {0}")]
    Read(#[source] io::Error),
    #[error(transparent)]
    Wire(#[from] crate::protocol::iperf3::Iperf3Error),
}

fn read_params(
    ctrl: &mut std::net::TcpStream,
    ctl: &mut Control,
    until: Instant,
) -> Result<Params, ParamsError> {
    let mut buf = vec![0u8; 4096];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ParamsError::Late);
        }
        let _ = ctrl.set_read_timeout(Some(left));
        let want = ctl.wants().min(buf.len());
        let n = match ctrl.read(&mut buf[..want]) {
            Ok(0) => return Err(ParamsError::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ParamsError::Read(e)),
        };
        match ctl.feed(&buf[..n]) {
            Err(e) => return Err(e.into()),
            Ok(ev) => {
                if let Some(Event::Params(p)) = ev.into_iter().next() {
                    return Ok(*p);
                }
            }
        }
    }
}

/// The server's limits, as iperf3 error numbers and the log's words.
/// The limit a test's parameters pass, if any: iperf3's error number for
/// the client, the code netrig's own clients would get, and the reason.
fn check(st: &State, p: &Params) -> Result<(), (u32, ErrorCode, String)> {
    let l = st.cfg.limits;
    if let Some(s) = p.seconds() {
        l.check_duration(s.saturating_mul(1000))
            .map_err(|e| (IE_MAX_DURATION, e.code(), format!("server limit: {e}")))?;
    }
    if let Some(b) = p.send_limit() {
        l.check_bytes(b)
            .map_err(|e| (IE_TOTAL_RATE, e.code(), format!("server limit: {e}")))?;
    }
    if p.proto == Proto::Udp && p.bandwidth > l.max_rate_bps {
        return Err((
            IE_TOTAL_RATE,
            ErrorCode::LimitRate,
            format!(
                "server limit: max rate {} bit/s, asked {} bit/s",
                l.max_rate_bps, p.bandwidth
            ),
        ));
    }
    Ok(())
}

/// Moves the data until the client ends the test, and exchanges results.
/// Returns how the test ended, for the log.
fn run_streams(
    st: &State,
    mut poll: Poll,
    ctrl: std::net::TcpStream,
    ctl: &mut Control,
    p: &Params,
    streams: &mut [Stream],
    (began, cpu0): (Instant, &CpuSample),
) -> &'static str {
    let _ = ctrl.set_nonblocking(true);
    let mut ctrl = mio::net::TcpStream::from_std(ctrl);
    if poll
        .registry()
        .register(&mut ctrl, CTRL, Interest::READABLE)
        .is_err()
    {
        return "failed";
    }
    let limits = st.cfg.limits;
    let hard_stop = began + limits.deadline();
    let omit_end = began + Duration::from_secs(p.omit);
    let mut omitted = p.omit == 0;
    // UDP without a rate goes at the server's cap; TCP without one, freely.
    let rate = match (p.proto, p.bandwidth) {
        (Proto::Udp, 0) => limits.max_rate_bps,
        (_, b) => b.min(limits.max_rate_bps),
    };
    let send_limit = p.send_limit();
    let mut buf = vec![0u8; (p.len as usize).max(account::IPERF3_MIN_BUFFER)];
    let mut events = Events::with_capacity(64);
    let mut sending = true;
    let mut ended: Option<Instant> = None;
    let mut got = [0u8; 512];
    loop {
        let now = Instant::now();
        if st.stop.load(SeqCst) {
            return "stopped: server exiting";
        }
        if now > hard_stop {
            return "stopped: server limit: max duration";
        }
        if !omitted && now >= omit_end {
            omitted = true;
            for s in streams.iter_mut() {
                s.omit_bytes = s.bytes;
                s.omit_sent_packets = s.sent_packets;
                s.omit_rx = (s.rx.packets, s.rx.lost);
            }
        }
        let paced = sending && rate > 0 && streams.iter().any(|s| s.sends);
        let wait = if paced {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(50)
        };
        if let Err(e) = poll.poll(&mut events, Some(wait))
            && e.kind() != io::ErrorKind::Interrupted
        {
            return "failed";
        }
        // Receivers and senders are tried every turn: a read or write that
        // would block is cheap, and epoll is edge-triggered.
        for s in streams.iter_mut().filter(|s| !s.sends && !s.dead) {
            receive(s, &mut buf, p.udp_counters_64bit);
        }
        if sending {
            let elapsed = began.elapsed().as_secs_f64();
            let mut total: u64 = streams.iter().filter(|s| s.sends).map(|s| s.bytes).sum();
            for s in streams.iter_mut().filter(|s| s.sends && !s.dead) {
                let allowed = (rate > 0).then(|| (rate as f64 / 8.0 * elapsed) as u64);
                send(s, &mut buf, p, allowed, send_limit, &mut total);
            }
        }
        let moved: u64 = streams.iter().map(|s| s.bytes).sum();
        if moved > limits.max_bytes {
            return "stopped: server limit: max bytes";
        }
        // The control connection.
        loop {
            let want = ctl.wants().min(got.len());
            if want == 0 {
                return "done";
            }
            let n = match ctrl.read(&mut got[..want]) {
                Ok(0) => {
                    return if ended.is_some() {
                        "done"
                    } else {
                        "client closed early"
                    };
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return "client connection failed",
            };
            let evs = match ctl.feed(&got[..n]) {
                Ok(e) => e,
                Err(_) => return "refused: malformed iperf3 control bytes",
            };
            for ev in evs {
                match ev {
                    Event::TestEnd => {
                        sending = false;
                        drain(&mut poll, streams, &mut buf, p.udp_counters_64bit);
                        // iperf3's server closes every stream here
                        // (`iperf_handle_message_server`, TEST_END); its
                        // client waits for that before reading on.
                        for s in streams.iter_mut() {
                            if let Io::Tcp(t) = &s.io {
                                let _ = t.shutdown(std::net::Shutdown::Both);
                            }
                            s.dead = true;
                        }
                        ended = Some(Instant::now());
                        if write_ctrl(&mut ctrl, &[Wire::ExchangeResults.byte()]).is_err() {
                            return "client connection failed";
                        }
                    }
                    Event::Results(_client) => {
                        let end = ended.unwrap_or_else(Instant::now);
                        let from = if p.omit > 0 { omit_end.min(end) } else { began };
                        let secs = end.saturating_duration_since(from).as_secs_f64();
                        let mut mine = results(p, streams, secs);
                        // The whole process, as iperf3's server counts
                        // itself: other tests' work is in it too.
                        let now = crate::net::cpu::sample();
                        mine.set_cpu(&CpuUsage::between(cpu0, &now));
                        let mut out = frame_json(&mine.to_json());
                        out.push(Wire::DisplayResults.byte());
                        if write_ctrl(&mut ctrl, &out).is_err() {
                            return "client connection failed";
                        }
                    }
                    Event::Done => return "done",
                    Event::Terminated => return "client terminated",
                    Event::Cookie(_) | Event::Params(_) => {}
                }
            }
        }
    }
}

/// Writes all of `b` on the non-blocking control connection (a few bytes
/// and one results message: waits for room rather than queueing).
fn write_ctrl(ctrl: &mut mio::net::TcpStream, mut b: &[u8]) -> io::Result<()> {
    let until = Instant::now() + Duration::from_secs(5);
    while !b.is_empty() {
        match ctrl.write(b) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < until => {
                wait_writable(ctrl, Duration::from_millis(10));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Waits up to `timeout` for room to write on `fd`.
fn wait_writable(fd: &impl AsRawFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// The server's results message (`send_results`' fields).
fn results(p: &Params, streams: &[Stream], secs: f64) -> Results {
    let server_sends = p.mode != Mode::ClientSends;
    let mut r = Results {
        sender_has_retransmits: match (server_sends, p.proto) {
            (false, _) => -1,
            (true, Proto::Tcp) => 1,
            (true, Proto::Udp) => 0,
        },
        ..Results::default()
    };
    for s in streams {
        let retransmits = match (&s.io, s.sends) {
            (Io::Tcp(t), true) => crate::net::tcpinfo::raw(t.as_raw_fd())
                .map_or(0, |i| i64::from(i.tcpi_total_retrans)),
            _ => -1,
        };
        let (packets, omitted_packets, errors, omitted_errors, jitter) = if s.sends {
            (s.sent_packets, s.omit_sent_packets, 0, 0, 0.0)
        } else {
            (
                s.rx.packets,
                s.omit_rx.0,
                s.rx.lost,
                s.omit_rx.1,
                s.rx.jitter,
            )
        };
        r.streams.push(StreamResult {
            id: s.id,
            bytes: s.bytes - s.omit_bytes,
            retransmits,
            jitter,
            errors,
            omitted_errors,
            packets,
            omitted_packets,
            start_time: 0.0,
            end_time: secs,
        });
    }
    if p.get_server_output {
        r.server_output_text = Some(server_text(p, streams, &r, secs));
    }
    r
}

/// What `--get-server-output` shows: netrig's own count, a line a stream.
fn server_text(p: &Params, streams: &[Stream], r: &Results, secs: f64) -> String {
    let mut t = format!("netrig serve (iperf3 protocol): {}\n", describe(p));
    for (mine, s) in streams.iter().zip(&r.streams) {
        let dir = if mine.sends { "sent" } else { "received" };
        let bps = if secs > 0.0 {
            s.bytes as f64 * 8.0 / secs
        } else {
            0.0
        };
        t.push_str(&format!(
            "[{:3}] {dir} {} bytes in {secs:.2} s, {}",
            s.id,
            s.bytes,
            crate::protocol::units::format_bits_per_sec(bps)
        ));
        if p.proto == Proto::Udp && dir == "received" {
            t.push_str(&format!(
                ", lost {}/{} datagrams, jitter {:.3} ms",
                s.errors - s.omitted_errors,
                s.packets - s.omitted_packets,
                s.jitter * 1000.0
            ));
        }
        t.push('\n');
    }
    t
}
