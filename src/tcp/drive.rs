//! One step of a [`Conn`] state machine over its non-blocking socket, for
//! the event loops that drive many (the client's `tcp/pool.rs`, the
//! server's `server/core.rs`): at most one read and one write, small writes
//! gathered so that one segment carries them, data bytes counted as they
//! move, the server's send limits applied, and TCP_INFO read for each burst
//! sent.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::guard::{Halt, SendGuard};
use crate::net::ahead::{AHEAD, ReadAhead};
use crate::net::out::Out;
use crate::protocol::proto::Verdict;
use crate::protocol::stats::Counters;
use crate::protocol::tcp::machine::{Conn, ConnEvent, Now, Transmit};

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
    /// When this end's FIN goes out.
    pub fin: Fin,
    /// The time the caller read just before (for a check of its own):
    /// the first step's, which then reads no clock of its own.
    pub now: Option<Instant>,
}

/// When a connection's FIN goes out. On loopback each segment costs a
/// trip through the peer's receive path and often a wake-up of its
/// thread, so a FIN that can ride with the final report should.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fin {
    /// When the socket is closed (something may follow the report: a
    /// server's burst account; or `--shutdown rude` resets instead).
    OnClose,
    /// With the report: this end writes nothing after it (a server
    /// without a burst account). The peer, which closes once it has the
    /// report, then always closes second and the TIME_WAIT is this end's:
    /// a churning client's port search is not slowed by its own (crr -P 8
    /// made 2.3 times the connections per second), as with a plain
    /// request/response server that closes first.
    WithReport,
    /// With the report if the peer's report, and with it the peer's FIN,
    /// came first (a client whose server sends [`Fin::WithReport`]): this
    /// end closes second either way, and its report and FIN take one
    /// segment instead of two. The report is held (MSG_MORE) and the
    /// socket's close sends it with the FIN, so the event loop must close
    /// the socket once the connection is settled, as a client's pool does
    /// in the same turn: no shutdown call, one system call fewer per
    /// connection (a churning client's per-connection calls are what
    /// `crr -P 8` is made of).
    WithLastReport,
}

/// What [`pump`] needs of a socket (the unit tests give it one that
/// records each write).
pub trait Socket: AsRawFd {
    /// Reads into `buf`, as `read` does.
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes from `b`, as `write` does.
    fn send(&self, b: &[u8]) -> io::Result<usize>;
    /// Writes from `b` with MSG_MORE: the kernel holds the bytes for what
    /// follows, here the FIN of [`Socket::close_write`] or of the close.
    fn send_more(&self, b: &[u8]) -> io::Result<usize>;
    /// Closes the sending side (shutdown(SHUT_WR)).
    fn close_write(&self) -> io::Result<()>;
    /// Drops up to `buf.len()` bytes of what arrived without copying them
    /// (`MSG_TRUNC`, which TCP takes as "discard"; `buf` is not written).
    fn discard(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// This end's TCP_INFO for its final report. A socket may keep the
    /// reading too: the client's record of the connection takes it rather
    /// than read it a second time (each read is a `getsockopt` that locks
    /// the socket, a few percent of a crr transaction's CPU).
    fn final_tcp_info(&self) -> Option<crate::net::tcpinfo::TcpInfo>
    where
        Self: Sized,
    {
        crate::net::tcpinfo::read(self)
    }
}

impl Socket for mio::net::TcpStream {
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&mut &*self).read(buf)
    }

    fn send(&self, b: &[u8]) -> io::Result<usize> {
        (&mut &*self).write(b)
    }

    fn send_more(&self, b: &[u8]) -> io::Result<usize> {
        socket2::SockRef::from(self).send_with_flags(b, libc::MSG_MORE)
    }

    fn close_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }

    fn discard(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for its length; with MSG_TRUNC a TCP
        // socket does not write to it at all.
        let r = unsafe {
            libc::recv(
                self.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
            )
        };
        match r {
            r if r < 0 => Err(io::Error::last_os_error()),
            r => Ok(r as usize),
        }
    }
}

/// A guarded send that gave up, as this end's verdict.
pub fn halt_verdict(h: Halt) -> Verdict {
    use crate::protocol::budget::Exceeded;
    match h {
        // The control connection tells the client why its session stopped.
        Halt::Stopped | Halt::Limit(Exceeded::Deadline) => Verdict::Cancelled,
        Halt::Limit(e) => Verdict::NetworkError {
            detail: e.to_string(),
        },
    }
}

/// The clocks `conn` needs, read once for a [`pump`] step: the wall clock
/// only for a machine that logs bursts ([`Conn::wants_real_time`]; 0
/// otherwise, which nothing reads).
pub(crate) fn now(conn: &Conn) -> Now {
    Now {
        mono: Instant::now(),
        real_ns: now_real(conn),
    }
}

/// The wall clock, for a machine that logs bursts; 0 otherwise.
fn now_real(conn: &Conn) -> u64 {
    match conn.wants_real_time() {
        true => crate::net::realtime_ns(),
        false => 0,
    }
}

/// What one [`pump`] step did and what the connection now waits for.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pumped {
    /// Something was written, read or decided.
    pub moved: bool,
    /// Nothing to write before this time (the next burst).
    pub timer: Option<Instant>,
    /// A read came back short or would block: the socket had nothing more
    /// to read, so its next arrival is a new readiness event.
    pub drained: bool,
    /// This step's writing ended for want of room in the socket (a short
    /// write or one that would block) or of anything to write; not
    /// because it had written its share ([`GATHER`], or one large write).
    pub write_idle: bool,
}

/// A connection's writes up to this size are gathered into its [`Out`], so
/// that a hello, a short request or reply and a final report leave in one
/// write; larger ones are written straight from the pattern.
pub const GATHER: usize = 8192;

/// Reads of at most [`GATHER`] bytes one step may make in a row.
const SHORT_READS: usize = 8;

/// One step of a connection over a non-blocking socket: one read (or a
/// few short ones in a row; a read for less than [`AHEAD`] takes up to
/// that, and what the machine does not want yet waits in `ahead`, to be
/// handed to it before the socket is read again), then one write of what
/// is queued in `out` (a hello or acknowledgement first) with the
/// machine's small writes gathered behind it, or one large write straight
/// from the machine; data bytes counted, TCP_INFO read for each burst
/// sent. Reading first lets what arrived (a request) produce its answer in
/// the same write. Event loops call it until nothing moves and [`settled`]
/// says the connection is over.
///
/// `at` is the step's time, read once for all it hands the machine (what
/// it reads, what it gathers): a step's system calls take microseconds,
/// and the clocks were read two or three times a step (1.5 % of a crr
/// server's samples). Only a large write straight from the machine reads
/// them again after it, as its rate is reckoned from the write's end.
pub fn pump<S: Socket>(
    conn: &mut Conn,
    out: &mut Out,
    ahead: &mut ReadAhead,
    stream: &S,
    buf: &mut [u8],
    env: &Env,
    at: Now,
) -> Pumped {
    let fail = |conn: &mut Conn, e: &io::Error| {
        if (env.stopped)() {
            conn.cancel();
        } else {
            conn.on_error(e);
        }
    };
    let mut p = Pumped::default();
    let before = conn.progress();
    conn.prefetch();
    // Short reads follow one another (a reply, then the peer's report
    // header and body) so that what they complete is answered in this
    // step's write, and a machine finished by them is known to be before
    // its last write goes out; a large read is one per step, as a write.
    for _ in 0..SHORT_READS {
        let want = match env.may_read {
            true => conn.want_read(),
            false => 0,
        };
        if want == 0 || conn.is_done() {
            break;
        }
        if !ahead.is_empty() {
            let used = feed(conn, ahead.bytes(), at);
            ahead.consume(used);
            p.moved = true;
            continue;
        }
        // A read since the socket's last readiness found it drained: only
        // its next readiness (which the loop stirs into `ahead`) brings
        // more, so a read now would only say it would block.
        if !ahead.may_read() {
            p.drained = true;
            break;
        }
        // A small want reads ahead, so that what the peer sent behind it
        // (its report after a reply) comes in the same read.
        // Count-only data goes unread (MSG_TRUNC: no copy to user space);
        // what is read may span chunk starts.
        let room = conn.read_room();
        let drop = conn.skippable().min(buf.len());
        let cap = match drop {
            // A chunk's first bytes only, before the rest is dropped.
            0 if room < want => room,
            0 => room.max(AHEAD).min(buf.len()),
            _ => drop,
        };
        let r = match drop {
            0 => stream.recv(&mut buf[..cap]),
            _ => stream.discard(&mut buf[..cap]),
        };
        match r {
            Ok(0) => {
                if (env.stopped)() {
                    conn.cancel();
                } else {
                    conn.on_eof();
                }
                p.moved = true;
                break;
            }
            Ok(n) if drop > 0 => {
                conn.on_skipped(n);
                p.moved = true;
                p.drained = n < cap;
                if n < cap {
                    ahead.drain();
                    break;
                }
            }
            Ok(n) => {
                let used = feed(conn, &buf[..n], at);
                ahead.stash(&buf[used..n]);
                p.moved = true;
                p.drained = n < cap;
                if n < cap {
                    ahead.drain();
                }
                if n < cap || cap > GATHER {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                p.drained = true;
                ahead.drain();
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => p.moved = true,
            Err(e) => {
                fail(conn, &e);
                p.moved = true;
                break;
            }
        }
    }
    let written = match gather(conn, out, stream, env, &mut p, at) {
        Some(direct) => direct,
        None if out.is_empty() => Ok(0),
        None => {
            // Gathering stopped for want of room in `out`: more may follow.
            let full = out.pending() >= GATHER;
            let left = out.pending();
            // All of the machine's bytes are in `out` once its report is.
            let last = conn.report_sent()
                && match env.fin {
                    Fin::OnClose => false,
                    Fin::WithReport => true,
                    Fin::WithLastReport => conn.is_done(),
                };
            let r = match last {
                true => out.flush_with(|b| stream.send_more(b)),
                false => out.flush_with(|b| stream.send(b)),
            };
            if last && env.fin == Fin::WithReport && matches!(r, Ok(true)) {
                // The FIN joins the held bytes; a failure shows on a read.
                // (With the last report, the close that follows sends it.)
                let _ = stream.close_write();
            }
            p.write_idle = match r {
                Ok(all) => !all || !full,
                Err(_) => false,
            };
            r.map(|_| left - out.pending())
        }
    };
    match written {
        Ok(n) => p.moved |= n > 0,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => p.moved = true,
        Err(e) => {
            // What was queued cannot go out any more.
            out.clear();
            fail(conn, &e);
            p.moved = true;
        }
    }
    while let Some(ConnEvent::BurstSent(k)) = conn.poll_event() {
        if let Some(i) = crate::net::tcpinfo::raw(stream.as_raw_fd()) {
            conn.set_burst_info(k, i.tcpi_total_retrans, i.tcpi_snd_cwnd, i.tcpi_rtt);
        }
    }
    let after = conn.progress();
    env.counters.sent.fetch_add(after.0 - before.0, Relaxed);
    env.counters.received.fetch_add(after.1 - before.1, Relaxed);
    p
}

/// Hands `data` to the machine for as long as it wants more; returns how
/// much it took.
fn feed(conn: &mut Conn, data: &[u8], at: Now) -> usize {
    let mut used = 0;
    loop {
        // A finished machine wants nothing.
        let k = conn.want_read().min(data.len() - used);
        if k == 0 {
            return used;
        }
        conn.on_read(&data[used..used + k], at);
        used += k;
    }
}

/// How a run of [`pump`] steps ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// The connection is over ([`settled`]).
    Settled,
    /// It waits for its socket, or until `timer` (a burst's start or the
    /// rate limit).
    Blocked { timer: Option<Instant> },
    /// It used up its [`TURN_BYTES`] or [`TURN_STEPS`] and could go on:
    /// the loop runs it again on a later turn, after the others (the
    /// socket gives no new readiness event for what it already reported).
    Yielded,
}

/// Most data bytes (both directions) one connection moves in one turn of
/// its loop. With [`TURN_STEPS`] this bounds how long one connection holds
/// its loop, whatever its buffer size and however fast its peer reads or
/// writes: a bulk connection moves 1 MiB (four of the server's largest
/// calls), a fraction of a millisecond, before the next connection's turn.
pub const TURN_BYTES: u64 = 1 << 20;

/// Most [`pump`] steps one connection takes in one turn of its loop: what
/// bounds a turn when steps move few bytes each (a small buffer, short
/// requests and replies). A step does at most `SHORT_READS` reads, one
/// write and [`GATHER`] bytes' worth of the machine's small writes.
pub const TURN_STEPS: usize = 16;

/// Steps `conn` until it is settled or blocks, or has had its turn
/// ([`TURN_STEPS`] steps or [`TURN_BYTES`] bytes, then [`Ran::Yielded`]),
/// for both ends' event loops. `last_progress` moves whenever something
/// did, and when a timer is what the connection waits for: waiting for a
/// burst is not idleness.
pub fn run_until_blocked<S: Socket>(
    conn: &mut Conn,
    out: &mut Out,
    ahead: &mut ReadAhead,
    stream: &S,
    buf: &mut [u8],
    env: &Env,
    last_progress: &mut Instant,
) -> Ran {
    let start = conn.progress();
    let mut first = env.now;
    for _ in 0..TURN_STEPS {
        // The caller's time for the first step, a fresh one after it.
        let at = Now {
            mono: first.take().unwrap_or_else(Instant::now),
            real_ns: now_real(conn),
        };
        let p = pump(conn, out, ahead, stream, buf, env, at);
        if settled(conn, out) {
            return Ran::Settled;
        }
        if p.moved || p.timer.is_some() {
            *last_progress = at.mono;
        }
        if !p.moved || idle(conn, ahead, env, &p) {
            return Ran::Blocked { timer: p.timer };
        }
        let now = conn.progress();
        if (now.0 - start.0) + (now.1 - start.1) >= TURN_BYTES {
            return Ran::Yielded;
        }
    }
    Ran::Yielded
}

/// Whether step `p` left `conn` with nothing to do until its socket's next
/// readiness event (or its timer): its reads found the socket drained, or
/// it wants none, and its writing stopped for want of room or of anything
/// to write. Another step would only make the calls that say so (a read
/// and a write that would block), one or two system calls per wake-up.
/// Edge-triggered readiness reports whatever arrives after a read that
/// came back short, as after one that would block (what tokio's readiness
/// relies on too). This holds for TCP, whose read takes all that is
/// queued; an SCTP association (rr's, never a data connection's) reads a
/// message at a time.
fn idle(conn: &Conn, ahead: &ReadAhead, env: &Env, p: &Pumped) -> bool {
    let want = match env.may_read {
        true => conn.want_read(),
        false => 0,
    };
    let read_idle = want == 0 || (p.drained && ahead.is_empty());
    read_idle && p.write_idle
}

/// Whether the connection is over: its machine is done and nothing it
/// queued is still to be written.
pub fn settled(conn: &Conn, out: &Out) -> bool {
    conn.is_done() && out.is_empty()
}

/// Moves the machine's small writes into `out` (counted against the
/// server's limits as they are taken). When `out` is empty and the machine
/// offers more than [`GATHER`], writes that straight from the machine
/// instead and returns what the write did.
fn gather<S: Socket>(
    conn: &mut Conn,
    out: &mut Out,
    stream: &S,
    env: &Env,
    p: &mut Pumped,
    at: Now,
) -> Option<io::Result<usize>> {
    // Gathering takes no time worth a clock read per piece; a write to the
    // socket does.
    loop {
        if conn.take_info_request()
            && let Some(i) = stream.final_tcp_info()
        {
            // This end's report is next: its TCP_INFO as the data phase
            // ended (a server's report carries it; a client keeps it for
            // its record).
            conn.set_final_tcp_info(i.summary());
        }
        let room = GATHER - out.pending().min(GATHER);
        let data = conn.sending_data();
        let b = match conn.transmit(at) {
            Transmit::Bytes(b) => b,
            Transmit::WaitUntil(at) => {
                p.timer = Some(at);
                p.write_idle = true;
                return None;
            }
            Transmit::Nothing => {
                p.write_idle = true;
                return None;
            }
        };
        let big = out.is_empty() && b.len() > GATHER;
        let n = if big { b.len() } else { b.len().min(room) };
        if n == 0 {
            return None;
        }
        // The final report is not data: only data counts against the limits.
        if let (Some(g), true) = (env.guard, data) {
            // The step's time: it is a few microseconds old at most.
            match g.try_admit_at(n as u64, at.mono) {
                Ok(None) => {}
                Ok(Some(at)) => {
                    p.timer = Some(at);
                    p.write_idle = true;
                    return None;
                }
                Err(h) => {
                    conn.abort(halt_verdict(h));
                    p.moved = true;
                    return None;
                }
            }
        }
        if big {
            let r = stream.send(b);
            match r {
                Ok(0) => {
                    return Some(Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "socket accepted no data",
                    )));
                }
                Ok(k) => {
                    // A short write: the socket's buffer is full.
                    p.write_idle = k < b.len();
                    conn.on_written(k, now(conn));
                }
                Err(ref e) if e.kind() == io::ErrorKind::WouldBlock => {
                    p.write_idle = true;
                    return Some(Ok(0));
                }
                Err(_) => {}
            }
            return Some(r);
        }
        out.push(&b[..n]);
        conn.on_written(n, at);
        p.moved = true;
    }
}

#[cfg(test)]
#[path = "drive_tests.rs"]
mod tests;
