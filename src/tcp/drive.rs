//! Runs one [`Conn`] state machine over one non-blocking TCP socket on the
//! calling thread, waiting in `poll(2)` for readiness or the next burst, so a
//! duplex connection needs no second thread. Counts data bytes as they move,
//! applies the server's send limits, reads TCP_INFO for each burst sent, and
//! ends a connection that makes no progress for the idle timeout.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::machine::{Conn, Event, Now, Transmit};
use crate::guard::{Halt, SendGuard};
use crate::proto::Verdict;
use crate::stats::Counters;

/// What a driven connection may use besides its socket.
pub struct Env<'a> {
    /// Where data bytes are counted as they move.
    pub counters: &'a Counters,
    /// The server's limits on what this end sends (none on a client).
    pub guard: Option<&'a SendGuard>,
    /// A connection making no progress for this long fails (None: never).
    pub idle: Option<Duration>,
    /// Whether the run was stopped: a failure after that is a cancellation.
    pub stopped: &'a dyn Fn() -> bool,
    /// Bytes per read call ([`drive`] only).
    pub buffer: usize,
}

/// A guarded send that gave up, as this end's verdict.
fn halt_verdict(h: Halt) -> Verdict {
    use crate::budget::Exceeded;
    match h {
        // The control connection tells the client why its session stopped.
        Halt::Stopped | Halt::Limit(Exceeded::Deadline) => Verdict::Cancelled,
        Halt::Limit(e) => Verdict::NetworkError {
            detail: e.to_string(),
        },
    }
}

fn now() -> Now {
    Now {
        mono: Instant::now(),
        real_ns: crate::udp::clock::realtime_ns(),
    }
}

/// Waits until `fd` is ready for `events` or `timeout` passes.
fn wait(fd: i32, events: i16, timeout: Option<Duration>) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = timeout.map_or(-1, |t| {
        i32::try_from(t.as_millis().max(u128::from(!t.is_zero()))).unwrap_or(i32::MAX)
    });
    // SAFETY: one valid pollfd, its count, and a timeout.
    match unsafe { libc::poll(&mut p, 1, ms) } {
        -1 => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
        n => Ok(n > 0),
    }
}

/// What one [`pump`] step did and what the connection now waits for.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pumped {
    /// Something was written, read or decided.
    pub moved: bool,
    /// A read would block.
    pub blocked_read: bool,
    /// A write would block.
    pub blocked_write: bool,
    /// Nothing to write before this time (the next burst).
    pub timer: Option<Instant>,
}

/// One step of a connection over a non-blocking socket: at most one write
/// and one read, with data bytes counted and TCP_INFO read for each burst
/// sent. Event loops call it until nothing moves; [`drive`] waits in
/// `poll(2)` between steps.
pub fn pump<S>(conn: &mut Conn, stream: &S, buf: &mut [u8], env: &Env) -> Pumped
where
    S: AsRawFd,
    for<'a> &'a S: Read + Write,
{
    let fail = |conn: &mut Conn, e: &io::Error| {
        if (env.stopped)() {
            conn.cancel();
        } else {
            conn.on_error(e);
        }
    };
    let mut p = Pumped::default();
    let before = conn.progress();
    let data = conn.sending_data();
    let (mut w, mut r) = (stream, stream);
    match conn.transmit(now()) {
        Transmit::Bytes(b) => {
            // The final report is not data: only data counts against the limits.
            if let (Some(g), true) = (env.guard, data)
                && let Err(h) = g.admit(b.len() as u64)
            {
                conn.abort(halt_verdict(h));
                p.moved = true;
                return p;
            }
            match w.write(b) {
                Ok(0) => {
                    let e = io::Error::new(io::ErrorKind::WriteZero, "socket accepted no data");
                    fail(conn, &e);
                    p.moved = true;
                    return p;
                }
                Ok(n) => {
                    conn.on_written(n, now());
                    p.moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => p.blocked_write = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => p.moved = true,
                Err(e) => {
                    fail(conn, &e);
                    p.moved = true;
                    return p;
                }
            }
        }
        Transmit::WaitUntil(at) => p.timer = Some(at),
        Transmit::Nothing => {}
    }
    while let Some(Event::BurstSent(k)) = conn.poll_event() {
        if let Some(i) = tcp_info(stream.as_raw_fd()) {
            conn.set_burst_info(k, i.tcpi_total_retrans, i.tcpi_snd_cwnd, i.tcpi_rtt);
        }
    }
    let want = conn.want_read().min(buf.len());
    if want > 0 && !conn.is_done() {
        match r.read(&mut buf[..want]) {
            Ok(0) => {
                if (env.stopped)() {
                    conn.cancel();
                } else {
                    conn.on_eof();
                }
                p.moved = true;
            }
            Ok(n) => {
                conn.on_read(&buf[..n], now());
                p.moved = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => p.blocked_read = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => p.moved = true,
            Err(e) => {
                fail(conn, &e);
                p.moved = true;
            }
        }
    }
    let after = conn.progress();
    env.counters.sent.fetch_add(after.0 - before.0, Relaxed);
    env.counters.received.fetch_add(after.1 - before.1, Relaxed);
    p
}

/// Runs `conn` to its result over `stream`, which is left non-blocking.
pub fn drive(conn: &mut Conn, stream: &TcpStream, env: &Env) {
    let fail = |conn: &mut Conn, e: &io::Error| {
        if (env.stopped)() {
            conn.cancel();
        } else {
            conn.on_error(e);
        }
    };
    if let Err(e) = stream.set_nonblocking(true) {
        return fail(conn, &e);
    }
    let mut buf = vec![0u8; env.buffer.max(1)];
    let mut last_progress = Instant::now();
    while !conn.is_done() {
        let p = pump(conn, stream, &mut buf, env);
        if p.moved || conn.is_done() {
            last_progress = Instant::now();
            continue;
        }
        // Nothing moved: sleep until the socket is ready, the burst is due,
        // or the idle timeout runs out.
        let mut events = 0;
        if p.blocked_read {
            events |= libc::POLLIN;
        }
        if p.blocked_write {
            events |= libc::POLLOUT;
        }
        if events == 0 && p.timer.is_none() {
            // Nothing to write, read or wait for, yet not done: a defect in
            // the machine. End the connection rather than spin.
            conn.abort(Verdict::NetworkError {
                detail: "internal error: the connection stalled".into(),
            });
            continue;
        }
        if let Some(at) = p.timer {
            // Waiting for a burst is not idleness.
            last_progress = Instant::now();
            if let Some(g) = env.guard {
                // A server's wait also ends on its session's stop or deadline.
                if let Err(h) = g.sleep_until(at) {
                    conn.abort(halt_verdict(h));
                }
                continue;
            }
        }
        let idle_left = env.idle.map(|i| i.saturating_sub(last_progress.elapsed()));
        if idle_left.is_some_and(|l| l.is_zero()) {
            let e = io::Error::new(io::ErrorKind::TimedOut, "no progress");
            fail(conn, &e);
            continue;
        }
        let until_timer = p
            .timer
            .map(|at| at.saturating_duration_since(Instant::now()));
        let timeout = match (idle_left, until_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match wait(stream.as_raw_fd(), events, timeout) {
            // Woken with nothing asked for: the socket failed or was shut down.
            Ok(true) if events == 0 => {
                let e = stream.take_error().ok().flatten().unwrap_or_else(|| {
                    io::Error::new(io::ErrorKind::ConnectionAborted, "connection shut down")
                });
                fail(conn, &e);
            }
            Ok(_) => {}
            Err(e) => fail(conn, &e),
        }
    }
}

/// The kernel's TCP_INFO for a connection.
fn tcp_info(fd: std::os::fd::RawFd) -> Option<libc::tcp_info> {
    // SAFETY: tcp_info is a plain C struct; all-zero is valid. getsockopt writes at
    // most `len` bytes into it and updates `len`.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let r = libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        (r == 0).then_some(info)
    }
}
