//! An iperf2 client's TCP test (`serve --iperf2-port`) on the server's
//! event loops: once the iperf2 port's thread has read its client header,
//! the connection is handed to the least busy loop (or an added one, as a
//! lasting data connection is) and counted there until the client closes.
//! It costs its descriptor and its record, never a thread: it reads into its
//! loop's buffer, at most [`BYTES`] in [`CALLS`] reads a wake-up before the
//! loop's other connections get their turn, and its idle and duration
//! deadlines are its slot's timer.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use serde_json::json;

use super::account::{Charge, IPERF2_TCP_BYTES};
use super::limits::{Slot, take_slot};
use super::loop_turn::Turn;
use super::metrics::{Kind, Moved};
use super::sources::SourceSlot;
use super::{State, log};
use crate::protocol::iperf2::{Amount, ClientHeader};
use crate::protocol::proto::ErrorCode;
use crate::protocol::refusal::{Drawn, Limit, Share};

/// Most bytes one test reads per wake-up.
pub(super) const BYTES: usize = 1 << 20;
/// Most reads one test makes per wake-up: a client trickling tiny
/// segments costs a call each.
pub(super) const CALLS: usize = 16;

/// Why a test was not started: the code netrig's own clients would get,
/// and the reason for the log (iperf2 has no refusal message: the
/// connection is closed).
pub(super) type Refused = (ErrorCode, String);

/// What a test has received: counted apart from the test's slots and
/// record, so that one turn's reads can be tried on a socket alone.
struct Received {
    /// Bytes received, the header's included.
    got: u64,
    /// The last time bytes came.
    last: Instant,
}

/// Why one turn's reads stopped.
#[derive(Debug, PartialEq)]
enum Stop {
    /// The budget ran out, maybe with more to read.
    Budget,
    /// The socket ran dry.
    Dry,
    /// The test is over, with this outcome.
    Over(&'static str),
}

impl Received {
    /// Reads from `src` into `buf` until it runs dry, this turn at most
    /// [`CALLS`] reads and none more once [`BYTES`] bytes came; stops the
    /// test once it has received more than `max_bytes` in all (exactly
    /// `max_bytes` is allowed, as for netrig's own tests and iperf3's).
    fn read(&mut self, mut src: impl Read, buf: &mut [u8], max_bytes: u64, now: Instant) -> Stop {
        let (mut calls, mut moved) = (0, 0);
        loop {
            if calls == CALLS || moved >= BYTES {
                return Stop::Budget;
            }
            calls += 1;
            match src.read(buf) {
                Ok(0) => return Stop::Over("completed"),
                Ok(n) => {
                    self.got += n as u64;
                    moved += n;
                    self.last = now;
                    if self.got > max_bytes {
                        return Stop::Over("server limit: bytes");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Stop::Dry,
                Err(_) => return Stop::Over("connection reset"),
            }
        }
    }
}

/// One iperf2 TCP test on a loop.
pub(super) struct Iperf2Tcp<'a> {
    st: &'a State,
    peer: SocketAddr,
    /// What came, and when.
    rx: Received,
    began: Instant,
    /// The server's duration limit.
    end: Instant,
    /// How it ended; a test dropped unended was stopped with the server.
    outcome: Option<&'static str>,
    _slot: Slot<'a>,
    _mine: SourceSlot<'a>,
    _memory: Charge,
}

impl<'a> Iperf2Tcp<'a> {
    /// Admits the test whose header `hdr` came in the first `got` bytes:
    /// a test slot, one of its address's, its share of `--max-memory`, and
    /// a length within `--max-duration`.
    pub(super) fn start(
        st: &'a State,
        peer: SocketAddr,
        hdr: &ClientHeader,
        got: u64,
        now: Instant,
    ) -> Result<Iperf2Tcp<'a>, Refused> {
        let limits = st.cfg.limits;
        let refused = |l: Limit| (l.code(), format!("server limit: {l}"));
        let max = u64::from(limits.max_tests);
        let slot = take_slot(&st.tests, max).ok_or_else(|| {
            (
                ErrorCode::LimitTests,
                format!("server limit: max tests {max}"),
            )
        })?;
        let mine = super::take_source(
            &st.tests_per_client,
            peer.ip().to_canonical(),
            limits.max_tests_per_client,
            Share::Tests,
        )
        .map_err(refused)?;
        limits
            .check_memory(st.resident.load(SeqCst))
            .map_err(refused)?;
        let memory = st
            .memory
            .take(IPERF2_TCP_BYTES, limits.max_memory, Drawn::IperfTest)
            .map_err(refused)?;
        if let Amount::Centis(c) = hdr.amount {
            let asked = Duration::from_millis(u64::from(c) * 10);
            if asked > limits.max_duration {
                return Err(refused(Limit::Duration {
                    max: limits.max_duration,
                    asked,
                }));
            }
        }
        if st.cfg.verbosity >= 1 {
            log::event(
                st.cfg.log_format,
                "session_start",
                format_args!("iperf2 TCP test from {peer}: {}", hdr.describe()),
                || {
                    json!({"client": peer.to_string(), "kind": Kind::Iperf2.name(),
                        "session": format!("iperf2-tcp-{peer}")})
                },
            );
        }
        st.metrics.started(Kind::Iperf2);
        Ok(Iperf2Tcp {
            st,
            peer,
            rx: Received { got, last: now },
            began: now,
            end: now + limits.deadline(),
            outcome: None,
            _slot: slot,
            _mine: mine,
            _memory: memory,
        })
    }

    /// Reads what the client sent, within the budget: Gone once the test
    /// is over (the loop closes the connection), Again if the budget ran
    /// out with more to read, or Wait until its next deadline.
    pub(super) fn turn(&mut self, stream: &TcpStream, buf: &mut [u8], now: Instant) -> Turn {
        // Checked first: a client that never lets the socket run dry ends
        // every turn on the budget, never at the checks below.
        if now >= self.end {
            return self.ended("server limit: duration");
        }
        let max_bytes = self.st.cfg.limits.max_bytes;
        match self.rx.read(stream, buf, max_bytes, now) {
            Stop::Budget => return Turn::Again,
            Stop::Over(outcome) => return self.ended(outcome),
            Stop::Dry => {}
        }
        let idle = self.rx.last + self.st.cfg.idle_timeout;
        if now >= idle {
            return self.ended("idle");
        }
        Turn::Wait(Some(idle.min(self.end)))
    }

    fn ended(&mut self, outcome: &'static str) -> Turn {
        self.outcome = Some(outcome);
        Turn::Gone
    }
}

impl Drop for Iperf2Tcp<'_> {
    /// The test's record: counted, measured and logged however it ended.
    fn drop(&mut self) {
        let (st, peer, got) = (self.st, self.peer, self.rx.got);
        let outcome = self.outcome.unwrap_or("server stopping");
        let took = self.began.elapsed();
        st.finished.fetch_add(1, SeqCst);
        let moved = Moved {
            received: got,
            ..Moved::default()
        };
        st.metrics.ended(Kind::Iperf2, took, moved);
        if st.cfg.verbosity >= 1 {
            log::event(
                st.cfg.log_format,
                "session_end",
                format_args!(
                    "iperf2 TCP test from {peer}: {outcome}: received {got} bytes in {:.2} s",
                    took.as_secs_f64()
                ),
                || {
                    json!({"client": peer.to_string(), "kind": Kind::Iperf2.name(),
                        "session": format!("iperf2-tcp-{peer}"), "result": outcome,
                        "duration_s": took.as_secs_f64(), "bytes_sent": 0, "bytes_received": got})
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BYTES, CALLS, Received, Stop};
    use std::collections::VecDeque;
    use std::io::{self, Read, Write};
    use std::mem::MaybeUninit;
    use std::time::{Duration, Instant};

    use mio::{Events, Interest, Poll, Token};

    /// A loopback connection: the client's end, and the server's as the
    /// loop holds it (non-blocking, watched by `poll`), once `first`
    /// bytes the client sent are queued on it.
    fn pair(first: &[u8]) -> (std::net::TcpStream, mio::net::TcpStream, Poll) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.write_all(first).unwrap();
        // Waits until they are all there, without taking them (a bound,
        // should they never come; an empty wait would wait for a byte).
        if !first.is_empty() {
            b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut peek = vec![MaybeUninit::new(0u8); first.len()];
            let flags = libc::MSG_PEEK | libc::MSG_WAITALL;
            let queued = socket2::SockRef::from(&b).recv_with_flags(&mut peek, flags);
            assert_eq!(queued.unwrap(), first.len());
        }
        b.set_nonblocking(true).unwrap();
        let mut b = mio::net::TcpStream::from_std(b);
        let poll = Poll::new().unwrap();
        poll.registry()
            .register(&mut b, Token(0), Interest::READABLE)
            .unwrap();
        (a, b, poll)
    }

    /// Waits (at most 10 s) until the client's end is closed, by a FIN or
    /// a reset.
    fn closed(poll: &mut Poll) {
        let mut events = Events::with_capacity(4);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            poll.poll(&mut events, Some(Duration::from_secs(1)))
                .unwrap();
            if events.iter().any(|e| e.is_read_closed() || e.is_error()) {
                return;
            }
        }
        panic!("the client's close never came");
    }

    /// A test that has received `got` bytes, the last of them just now.
    fn received(got: u64) -> Received {
        Received {
            got,
            last: Instant::now(),
        }
    }

    /// One turn's reads: why they stopped and the count after them.
    fn read(rx: &mut Received, src: impl Read, buf: &mut [u8], max: u64) -> (Stop, u64) {
        (rx.read(src, buf, max, Instant::now()), rx.got)
    }

    #[test]
    fn a_turn_makes_at_most_calls_reads_then_reads_the_socket_dry() {
        let sent = 2 * CALLS * 100 + 50;
        let (mut a, b, mut poll) = pair(&vec![7u8; sent]);
        let t0 = Instant::now();
        let mut rx = Received { got: 0, last: t0 };
        // Reads of 100 bytes: the call bound ends each turn, far below
        // the byte bound.
        let mut buf = [0u8; 100];
        let turn = (CALLS * 100) as u64;
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(rx.read(&b, &mut buf, u64::MAX, t1), Stop::Budget);
        assert_eq!((rx.got, rx.last), (turn, t1), "the idle clock restarts");
        let more = read(&mut rx, &b, &mut buf, u64::MAX);
        assert_eq!(more, (Stop::Budget, 2 * turn));
        // The rest, then a read that would block: the turn ends there and
        // the test goes on (it is no reset).
        let rest = read(&mut rx, &b, &mut buf, u64::MAX);
        assert_eq!(rest, (Stop::Dry, sent as u64));
        let last = rx.last;
        let none = read(&mut rx, &b, &mut buf, u64::MAX);
        assert_eq!(none, (Stop::Dry, sent as u64));
        assert_eq!(rx.last, last, "no bytes came: the idle clock runs on");
        // The client's close ends the test, its last bytes counted.
        a.write_all(b"tail").unwrap();
        a.shutdown(std::net::Shutdown::Write).unwrap();
        closed(&mut poll);
        let end = read(&mut rx, &b, &mut buf, u64::MAX);
        assert_eq!(end, (Stop::Over("completed"), sent as u64 + 4));
    }

    #[test]
    fn a_reset_ends_the_test() {
        let (a, b, mut poll) = pair(b"");
        crate::net::sockopt::rude_close(&a);
        drop(a);
        closed(&mut poll);
        let mut rx = received(0);
        let mut buf = [0u8; 100];
        let end = read(&mut rx, &b, &mut buf, u64::MAX);
        assert_eq!(end, (Stop::Over("connection reset"), 0));
    }

    /// A client's socket, as scripted: each step a read's answer; once
    /// they are used up, reads would block.
    struct Script(VecDeque<io::Result<usize>>);

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let step = self.0.pop_front();
            step.unwrap_or_else(|| Err(io::ErrorKind::WouldBlock.into()))
                .map(|n| n.min(buf.len()))
        }
    }

    fn script(steps: impl IntoIterator<Item = io::Result<usize>>) -> Script {
        Script(steps.into_iter().collect())
    }

    #[test]
    fn a_turn_reads_about_bytes_at_most() {
        // Reads of 100 kB: the byte bound ends the turn before the call
        // bound, at the first read that reaches it.
        let mut rx = received(0);
        let mut buf = vec![0u8; 100_000];
        let mut src = script((0..2 * CALLS).map(|_| Ok(100_000)));
        let reads = BYTES.div_ceil(100_000);
        assert!(reads < CALLS);
        let turn = (reads * 100_000) as u64;
        let first = read(&mut rx, &mut src, &mut buf, u64::MAX);
        assert_eq!(first, (Stop::Budget, turn));
        assert_eq!(src.0.len(), 2 * CALLS - reads);
    }

    #[test]
    fn an_interrupted_read_is_tried_again() {
        let mut rx = received(0);
        let mut buf = [0u8; 100];
        let eintr = || Err(io::ErrorKind::Interrupted.into());
        let mut src = script([eintr(), Ok(10), eintr(), Ok(5)]);
        let got = read(&mut rx, &mut src, &mut buf, u64::MAX);
        assert_eq!(got, (Stop::Dry, 15));
    }

    #[test]
    fn max_bytes_allows_exactly_max_bytes() {
        // The header's bytes came before the first turn.
        let mut rx = received(100);
        let mut buf = [0u8; 1000];
        let mut src = script([Ok(600), Ok(300)]);
        assert_eq!(read(&mut rx, &mut src, &mut buf, 1000), (Stop::Dry, 1000));
        // One byte more ends the test at once, the rest unread.
        let mut src = script([Ok(1), Ok(1000)]);
        let over = read(&mut rx, &mut src, &mut buf, 1000);
        assert_eq!(over, (Stop::Over("server limit: bytes"), 1001));
        assert_eq!(src.0.len(), 1);
    }
}
