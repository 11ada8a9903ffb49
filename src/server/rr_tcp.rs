//! rr over a byte stream (`rr --proto tcp`, SCTP one-to-one) on the
//! server's event loops: an admitted session stays on the loop that holds
//! its control connection, which carries the requests and replies, and the
//! [`StreamAnswerer`] machine is fed from it, so a session costs its
//! connection and a few hundred bytes, never a thread. Each wake-up moves
//! at most [`BYTES`] bytes in [`CALLS`] socket calls and answers at most
//! [`REQUESTS`] requests before the loop's other connections get their
//! turn, so neither 16 MiB requests nor a one-byte window hold the loop;
//! replies are written from the pattern as the socket takes them, so a
//! client that does not read costs no memory. The session's deadlines are
//! its control connection's timer, and it holds its test slots for as long
//! as it lives.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use mio::net::TcpStream;
use uuid::Uuid;

use super::State;
use super::control::TestSlots;
use super::loop_session::Who;
use super::loop_turn::Turn;
use super::metrics::{Kind, Moved};
use crate::guard::{Gate, SendGuard};
use crate::net::ahead::{AHEAD, ReadAhead};
use crate::net::out::Out;
use crate::protocol::proto::RrSpec;
use crate::protocol::refusal::Refusal;
use crate::protocol::rr::stream_answer::{StreamAnswerer, Terms};

/// Most bytes one session moves (read and written) per wake-up.
pub(super) const BYTES: usize = 256 * 1024;
/// Most socket calls one session makes per wake-up: a one-byte window
/// costs a call per byte.
pub(super) const CALLS: usize = 64;
/// Most requests one session answers per wake-up.
pub(super) const REQUESTS: u64 = 64;

/// One rr-over-TCP session on a loop.
pub(super) struct RrTcp<'a> {
    st: &'a State,
    peer: SocketAddr,
    m: StreamAnswerer,
    guard: SendGuard,
    /// Until when the rate limit holds the owed reply back.
    held: Option<Instant>,
    /// The timer set for the session, so each turn does not add one more.
    armed: Option<Instant>,
    /// The stream is TCP, whose short read takes all that is queued (an
    /// SCTP association reads a message at a time).
    tcp: bool,
    id: Uuid,
    began: Instant,
    _slots: TestSlots<'a>,
}

impl<'a> RrTcp<'a> {
    /// Starts the session on its control connection: the client's socket
    /// options on this end too, and the acceptance queued.
    pub(super) fn start(
        st: &'a State,
        peer: SocketAddr,
        stream: &TcpStream,
        spec: &RrSpec,
        slots: TestSlots<'a>,
        now: Instant,
    ) -> Result<RrTcp<'a>, Refusal> {
        crate::rr::serve::validate(spec)?;
        // The client's marking, window and pacing cap on the replies too,
        // as the worker did (best effort).
        let _ = crate::net::sockopt::apply(stream, &spec.sock.for_server(), peer.is_ipv6(), false);
        // SCTP one-to-one associations have their own Nagle switch.
        if stream.set_nodelay(!spec.nagle).is_err() {
            let fd = std::os::fd::AsRawFd::as_raw_fd(stream);
            let _ = crate::sctp::set_nodelay(fd, !spec.nagle);
        }
        let tcp = socket2::SockRef::from(stream).protocol().ok().flatten()
            == Some(socket2::Protocol::TCP);
        let limits = st.cfg.limits;
        let guard = limits.guard(&Arc::new(AtomicBool::new(false)));
        let id = Uuid::new_v4();
        let terms = Terms {
            session: id,
            size: spec.size,
            reply: spec.reply,
            iterations: spec.iterations,
            idle: st.cfg.idle_timeout,
            deadline: guard.deadline(),
        };
        super::loop_session::started(
            st,
            Who {
                kind: Kind::RrTcp,
                id,
                peer,
            },
            format_args!(
                "rr tcp {} B request / {} B reply, {} iterations",
                spec.size, spec.reply, spec.iterations
            ),
        );
        Ok(RrTcp {
            st,
            peer,
            m: StreamAnswerer::new(terms, now),
            guard,
            held: None,
            armed: None,
            tcp,
            id,
            began: now,
            _slots: slots,
        })
    }

    /// Writes what the machine has to write and reads what it takes,
    /// within the budget, until the socket would block both ways or the
    /// session ends.
    pub(super) fn turn(
        &mut self,
        stream: &TcpStream,
        ahead: &mut ReadAhead,
        buf: &mut [u8],
        now: Instant,
    ) -> Turn {
        let (mut spent, first) = (Spent::default(), self.m.answered());
        loop {
            self.m.on_timeout(now);
            admit(&mut self.m, &mut self.guard, &mut self.held, now);
            if self.m.is_over() {
                return self.last();
            }
            if !spent.left() || self.m.answered() - first >= REQUESTS {
                return Turn::Again;
            }
            let mut progressed = false;
            if !self.m.out().is_empty() {
                progressed = write(&mut self.m, stream, &mut spent, now);
                if self.m.is_over() {
                    return self.last();
                }
            }
            // Bytes read ahead go to the machine before the socket is read
            // again, so that they keep their order.
            if !ahead.is_empty() {
                let n = self.m.on_bytes(ahead.bytes(), now);
                ahead.consume(n);
                progressed |= n > 0;
            }
            let want = self.m.wants();
            // A read needs bytes left in the budget: one asking for none
            // would read as the client's end. (A write spent them, and
            // the turn ends at the top of the loop.)
            if want > 0 && ahead.is_empty() && ahead.may_read() && spent.moved < BYTES {
                // Asking for more than the machine wants lets a short read
                // show the socket drained (below); what it does not take
                // waits in `ahead`, at most [`AHEAD`] bytes, and no read is
                // made while any wait there.
                let ask = (want + AHEAD).min(buf.len()).min(BYTES - spent.moved);
                spent.calls += 1;
                match (&*stream).read(&mut buf[..ask]) {
                    Ok(0) => self.m.on_eof(),
                    Ok(n) => {
                        spent.moved += n;
                        let (guard, held) = (&mut self.guard, &mut self.held);
                        // A request made whole here has its reply written
                        // at once, before its last bytes are checked.
                        let took = self.m.on_bytes_then(&buf[..n], now, |m| {
                            admit(m, guard, held, now);
                            if spent.left() && !m.out().is_empty() {
                                write(m, stream, &mut spent, now);
                            }
                        });
                        ahead.stash(&buf[took..n]);
                        progressed = true;
                        // A TCP read shorter than asked took all that was
                        // queued: the next read would only say it would
                        // block, a system call on every round trip. The
                        // socket is read again after its next readiness
                        // (edge-triggered: every arrival is reported).
                        if self.tcp && n < ask {
                            ahead.drain();
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => ahead.drain(),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => progressed = true,
                    Err(_) => self.m.on_eof(),
                }
            }
            if self.m.is_over() {
                return self.last();
            }
            if !progressed {
                return self.wait(now);
            }
        }
    }

    /// The session is over: its last frame (the summary) goes out, then the
    /// connection closes; a client that left is closed at once.
    fn last(&mut self) -> Turn {
        use crate::protocol::rr::stream_answer::End;
        match self.m.end() {
            Some(End::Closed) => Turn::Gone,
            _ => Turn::Last(Out::new(self.m.take_frames())),
        }
    }

    /// Waits for the socket, the machine's next deadline or the rate
    /// limit's: a timer is added only when none is set for that time or
    /// earlier, so a session answering thousands of requests a second (each
    /// moving its idle deadline) keeps one timer, not one per request.
    fn wait(&mut self, now: Instant) -> Turn {
        let at = match (self.m.deadline(), self.held) {
            (Some(d), Some(h)) => Some(d.min(h)),
            (d, h) => d.or(h),
        };
        match at {
            Some(at) if self.armed.is_none_or(|a| a <= now || at < a) => {
                self.armed = Some(at);
                Turn::Wait(Some(at))
            }
            _ => Turn::Wait(None),
        }
    }
}

/// What one turn has spent of its budget.
#[derive(Default)]
struct Spent {
    /// Bytes read and written.
    moved: usize,
    /// Socket calls.
    calls: usize,
}

impl Spent {
    /// Whether another socket call fits.
    fn left(&self) -> bool {
        self.moved < BYTES && self.calls < CALLS
    }
}

/// Lets an owed reply go if the server's limits allow: replies may be
/// larger than requests, and the rate and byte limits hold for what the
/// server sends.
fn admit(m: &mut StreamAnswerer, guard: &mut SendGuard, held: &mut Option<Instant>, now: Instant) {
    if let Some(n) = m.admission() {
        match guard.gate(n, held, now) {
            Gate::Go => m.admitted(now),
            Gate::Hold => {}
            Gate::Halt => m.halt(now),
        }
    }
}

/// Writes once what the machine has to write, within what is left of the
/// budget: whether anything moved.
fn write(m: &mut StreamAnswerer, stream: &TcpStream, spent: &mut Spent, now: Instant) -> bool {
    let out = m.out();
    spent.calls += 1;
    let room = out.len().min(BYTES - spent.moved);
    match (&*stream).write(&out[..room]) {
        Ok(0) => m.on_write_failed(),
        Ok(n) => {
            m.wrote(n, now);
            spent.moved += n;
            return true;
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
        Err(_) => m.on_write_failed(),
    }
    false
}

impl Drop for RrTcp<'_> {
    fn drop(&mut self) {
        let took = self.began.elapsed();
        let sum = self.m.summary();
        super::loop_session::ended(
            self.st,
            Who {
                kind: Kind::RrTcp,
                id: self.id,
                peer: self.peer,
            },
            took,
            None,
            Moved::from(&self.m.moved()),
            format_args!(
                ": {} requests answered, {} corrupt",
                sum.requests, sum.data_errors
            ),
        );
    }
}
