//! One step of a [`Conn`] state machine over its non-blocking socket, for
//! the event loops that drive many (the client's `tcp/pool.rs`, the
//! server's `server/core.rs`): at most one write and one read, with data
//! bytes counted as they move, the server's send limits applied, and
//! TCP_INFO read for each burst sent.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use super::machine::{Conn, ConnEvent, Now, Transmit};
use crate::guard::{Halt, SendGuard};
use crate::proto::Verdict;
use crate::stats::Counters;

/// What a driven connection may use besides its socket.
pub struct Env<'a> {
    /// Where data bytes are counted as they move.
    pub counters: &'a Counters,
    /// The server's limits on what this end sends (none on a client).
    pub guard: Option<&'a SendGuard>,
    /// Whether the run was stopped: a failure after that is a cancellation.
    pub stopped: &'a dyn Fn() -> bool,
    /// Whether the machine may read: a client that sent its data hello
    /// writes its first data at once, but reads nothing before the
    /// server's acknowledgement.
    pub may_read: bool,
}

/// A guarded send that gave up, as this end's verdict.
pub fn halt_verdict(h: Halt) -> Verdict {
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
        real_ns: crate::net::realtime_ns(),
    }
}

/// What one [`pump`] step did and what the connection now waits for.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pumped {
    /// Something was written, read or decided.
    pub moved: bool,
    /// Nothing to write before this time (the next burst).
    pub timer: Option<Instant>,
}

/// One step of a connection over a non-blocking socket: at most one write
/// and one read, with data bytes counted and TCP_INFO read for each burst
/// sent. Event loops call it until nothing moves.
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
    if conn.take_info_request()
        && let Some(i) = crate::net::tcpinfo::read(stream)
    {
        conn.set_final_tcp_info(i.summary());
    }
    let before = conn.progress();
    let data = conn.sending_data();
    let (mut w, mut r) = (stream, stream);
    match conn.transmit(now()) {
        Transmit::Bytes(b) => {
            // The final report is not data: only data counts against the limits.
            if let (Some(g), true) = (env.guard, data) {
                match g.try_admit(b.len() as u64) {
                    Ok(None) => {}
                    Ok(Some(at)) => {
                        p.timer = Some(at);
                        return p;
                    }
                    Err(h) => {
                        conn.abort(halt_verdict(h));
                        p.moved = true;
                        return p;
                    }
                }
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
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
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
    while let Some(ConnEvent::BurstSent(k)) = conn.poll_event() {
        if let Some(i) = crate::net::tcpinfo::raw(stream.as_raw_fd()) {
            conn.set_burst_info(k, i.tcpi_total_retrans, i.tcpi_snd_cwnd, i.tcpi_rtt);
        }
    }
    let want = match env.may_read {
        true => conn.want_read().min(buf.len()),
        false => 0,
    };
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
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
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
