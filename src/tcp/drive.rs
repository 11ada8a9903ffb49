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

use super::machine::{Conn, ConnEvent, Now, Transmit};
use crate::guard::{Halt, SendGuard};
use crate::net::out::Out;
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
    /// This end closes its sending side once its final report is out: it
    /// writes nothing after it (a server without a burst account to send).
    /// The report and the FIN then leave in one segment, so the peer, which
    /// closes once it has the report, always closes second and the
    /// TIME_WAIT is this end's: a churning client's port search is not
    /// slowed by its own (crr -P 8 made 2.3 times the connections per
    /// second), as with a plain request/response server that closes first.
    pub half_close: bool,
}

/// What [`pump`] needs of a socket (the unit tests give it one that
/// records each write).
pub trait Socket: AsRawFd {
    /// Reads into `buf`, as `read` does.
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes from `b`, as `write` does.
    fn send(&self, b: &[u8]) -> io::Result<usize>;
    /// Writes from `b` with MSG_MORE: the kernel holds the bytes for what
    /// follows, here the FIN of [`Socket::close_write`].
    fn send_more(&self, b: &[u8]) -> io::Result<usize>;
    /// Closes the sending side (shutdown(SHUT_WR)).
    fn close_write(&self) -> io::Result<()>;
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

/// A connection's writes up to this size are gathered into its [`Out`], so
/// that a hello, a short request or reply and a final report leave in one
/// write; larger ones are written straight from the pattern.
pub const GATHER: usize = 8192;

/// Reads of at most [`GATHER`] bytes one step may make in a row.
const SHORT_READS: usize = 8;

/// One step of a connection over a non-blocking socket: one read (or a
/// few short ones in a row), then one write of what is queued in `out` (a
/// hello or acknowledgement first) with the machine's small writes
/// gathered behind it, or one large write straight from the machine; data
/// bytes counted, TCP_INFO read for each burst sent. Reading first lets
/// what arrived (a request) produce its answer in the same write. Event
/// loops call it until nothing moves and [`settled`] says the connection
/// is over.
pub fn pump<S: Socket>(
    conn: &mut Conn,
    out: &mut Out,
    stream: &S,
    buf: &mut [u8],
    env: &Env,
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
    // Short reads follow one another (a reply, then the peer's report
    // header and body) so that what they complete is answered in this
    // step's write, and a machine finished by them is known to be before
    // its last write goes out; a large read is one per step, as a write.
    for _ in 0..SHORT_READS {
        let want = match env.may_read {
            true => conn.want_read().min(buf.len()),
            false => 0,
        };
        if want == 0 || conn.is_done() {
            break;
        }
        match stream.recv(&mut buf[..want]) {
            Ok(0) => {
                if (env.stopped)() {
                    conn.cancel();
                } else {
                    conn.on_eof();
                }
                p.moved = true;
                break;
            }
            Ok(n) => {
                conn.on_read(&buf[..n], now());
                p.moved = true;
                if n < want || want > GATHER {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => p.moved = true,
            Err(e) => {
                fail(conn, &e);
                p.moved = true;
                break;
            }
        }
    }
    let written = match gather(conn, out, stream, env, &mut p) {
        Some(direct) => direct,
        None if out.is_empty() => Ok(0),
        None => {
            let left = out.pending();
            // All of the machine's bytes are in `out` once its report is.
            let last = env.half_close && conn.report_sent();
            let r = match last {
                true => out.flush_with(|b| stream.send_more(b)),
                false => out.flush_with(|b| stream.send(b)),
            };
            if last && matches!(r, Ok(true)) {
                // The FIN joins the held bytes; a failure shows on a read.
                let _ = stream.close_write();
            }
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
) -> Option<io::Result<usize>> {
    loop {
        if conn.take_info_request()
            && let Some(i) = crate::net::tcpinfo::read(stream)
        {
            // This end's report is next: its TCP_INFO as the data phase ended.
            conn.set_final_tcp_info(i.summary());
        }
        let room = GATHER - out.pending().min(GATHER);
        let data = conn.sending_data();
        let b = match conn.transmit(now()) {
            Transmit::Bytes(b) => b,
            Transmit::WaitUntil(at) => {
                p.timer = Some(at);
                return None;
            }
            Transmit::Nothing => return None,
        };
        let big = out.is_empty() && b.len() > GATHER;
        let n = if big { b.len() } else { b.len().min(room) };
        if n == 0 {
            return None;
        }
        // The final report is not data: only data counts against the limits.
        if let (Some(g), true) = (env.guard, data) {
            match g.try_admit(n as u64) {
                Ok(None) => {}
                Ok(Some(at)) => {
                    p.timer = Some(at);
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
                Ok(k) => conn.on_written(k, now()),
                Err(ref e) if e.kind() == io::ErrorKind::WouldBlock => return Some(Ok(0)),
                Err(_) => {}
            }
            return Some(r);
        }
        out.push(&b[..n]);
        conn.on_written(n, now());
        p.moved = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::{Direction, Pattern, stream_start};
    use crate::plan::Role;
    use crate::proto::{self, IoPattern, Message, TcpSpec};
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use uuid::Uuid;

    /// A socket whose reads come from a queue of chunks and whose writes
    /// are recorded one by one; it takes at most
    /// `room` bytes in all (then would block) and fails writes when `broken`.
    #[derive(Default)]
    struct Mock {
        reads: RefCell<VecDeque<Vec<u8>>>,
        writes: RefCell<Vec<Vec<u8>>>,
        room: RefCell<usize>,
        broken: bool,
        /// The last write asked the kernel to hold its bytes.
        held: RefCell<bool>,
        /// The sending side was closed.
        shut: RefCell<bool>,
        /// Reads made, and what a read of nothing queued gives (would
        /// block unless set).
        recvs: std::cell::Cell<usize>,
        read_error: Option<io::ErrorKind>,
    }

    impl AsRawFd for Mock {
        fn as_raw_fd(&self) -> std::os::fd::RawFd {
            -1
        }
    }

    impl Socket for Mock {
        fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
            self.recvs.set(self.recvs.get() + 1);
            if buf.is_empty() {
                return Ok(0);
            }
            let mut q = self.reads.borrow_mut();
            let Some(chunk) = q.front_mut() else {
                let kind = self.read_error.unwrap_or(io::ErrorKind::WouldBlock);
                return Err(kind.into());
            };
            let n = chunk.len().min(buf.len());
            buf[..n].copy_from_slice(&chunk[..n]);
            chunk.drain(..n);
            if chunk.is_empty() {
                q.pop_front();
            }
            Ok(n)
        }

        fn send(&self, b: &[u8]) -> io::Result<usize> {
            if self.broken {
                return Err(io::ErrorKind::ConnectionReset.into());
            }
            let mut room = self.room.borrow_mut();
            if *room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = b.len().min(*room);
            *room -= n;
            self.writes.borrow_mut().push(b[..n].to_vec());
            Ok(n)
        }

        fn send_more(&self, b: &[u8]) -> io::Result<usize> {
            *self.held.borrow_mut() = true;
            self.send(b)
        }

        fn close_write(&self) -> io::Result<()> {
            assert!(self.held.replace(false), "the FIN follows held bytes");
            *self.shut.borrow_mut() = true;
            Ok(())
        }
    }

    fn mock(room: usize) -> Mock {
        Mock {
            room: RefCell::new(room),
            ..Default::default()
        }
    }

    /// A crr transaction: 64 bytes of request, 2 of reply.
    fn crr_spec() -> TcpSpec {
        TcpSpec::plain(IoPattern::Pushpull, 66, 64, 2)
    }

    fn env(c: &Counters, may_read: bool) -> Env<'_> {
        Env {
            counters: c,
            guard: None,
            stopped: &|| false,
            may_read,
            half_close: false,
        }
    }

    /// The frames and data in `b`: each frame's type, and data as its length.
    fn parts(mut b: &[u8], data: &[usize]) -> Vec<String> {
        let mut out = Vec::new();
        let mut data = data.iter();
        while !b.is_empty() {
            match proto::decode_frame(b) {
                Ok(Some((m, used))) => {
                    out.push(m.type_name().to_string());
                    b = &b[used..];
                }
                _ => {
                    let n = *data.next().expect("more data than expected");
                    out.push(format!("{n} bytes"));
                    b = &b[n..];
                }
            }
        }
        out
    }

    fn pattern(id: Uuid, d: Direction, n: usize) -> Vec<u8> {
        Pattern::get().slice(stream_start(id, d), 0, n).to_vec()
    }

    fn final_frame(sent: u64, received: u64) -> Vec<u8> {
        proto::encode(&Message::Final(proto::FinalReport {
            sent,
            received,
            verdict: proto::Verdict::Ok,
            tcp_info: None,
        }))
    }

    #[test]
    fn a_transaction_leaves_each_end_in_one_write() {
        let id = Uuid::from_u128(7);
        let now = Instant::now();
        let c = Counters::default();
        // The client: its hello, then its request behind it, in one write.
        let mut client = Conn::new(&crr_spec(), id, Role::Client, 64, now);
        let hello = proto::encode(&Message::DataAck { connection: id });
        let mut cout = Out::new(hello.clone());
        assert!(!settled(&client, &cout));
        let cs = mock(1 << 20);
        let p = pump(&mut client, &mut cout, &cs, &mut [0; 1024], &env(&c, false));
        assert!(p.moved);
        let w = cs.writes.take();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(&w[0][..hello.len()], &hello[..]);
        assert_eq!(
            &w[0][hello.len()..],
            &pattern(id, Direction::ClientToServer, 64)[..]
        );
        assert!(cout.is_empty());

        // The server, its request already in: the ack, the reply and its
        // final report in one write.
        let mut server = Conn::new(&crr_spec(), id, Role::Server, 64, now);
        let ack = proto::encode(&Message::DataAck { connection: id });
        let mut sout = Out::new(ack);
        let ss = mock(1 << 20);
        ss.reads
            .borrow_mut()
            .push_back(pattern(id, Direction::ClientToServer, 64));
        let half = Env {
            half_close: true,
            ..env(&c, true)
        };
        let p = pump(&mut server, &mut sout, &ss, &mut [0; 1024], &half);
        assert!(p.moved);
        let w = ss.writes.take();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(parts(&w[0], &[2]), ["data_ack", "2 bytes", "final"]);
        // Its report was the last of it: held for the FIN, which followed.
        assert!(*ss.shut.borrow());
        assert!(!*ss.held.borrow());
        // Waiting for the client's report, it writes and shuts nothing more.
        let p = pump(&mut server, &mut sout, &ss, &mut [0; 1024], &half);
        assert!(!p.moved);
        assert!(ss.writes.borrow().is_empty());
        assert!(!server.is_done(), "the client's report is still to come");

        // The client reads the reply and the server's report in one step,
        // then writes its own report, which finishes it.
        let mut from_server = w[0].clone();
        let ack_len = proto::encode(&Message::DataAck { connection: id }).len();
        from_server.drain(..ack_len);
        cs.reads.borrow_mut().push_back(from_server);
        let e = env(&c, true);
        // The socket takes 10 bytes: done, but not settled before its
        // report is out.
        *cs.room.borrow_mut() = 10;
        assert!(pump(&mut client, &mut cout, &cs, &mut [0; 1024], &e).moved);
        assert!(client.is_done() && !settled(&client, &cout));
        assert!(cs.reads.borrow().is_empty());
        *cs.room.borrow_mut() = 1 << 20;
        assert!(pump(&mut client, &mut cout, &cs, &mut [0; 1024], &e).moved);
        assert!(settled(&client, &cout));
        let w: Vec<u8> = cs.writes.take().concat();
        assert_eq!(w, final_frame(64, 2));
        // The client does not close its side: it closes when it is done.
        assert!(!*cs.shut.borrow());
        assert_eq!(
            client.result().unwrap().0.kind,
            crate::outcome::ResultKind::Success
        );
        // The client's request and the server's reply, each way.
        assert_eq!(c.sent.load(Relaxed), 64 + 2);
        assert_eq!(c.received.load(Relaxed), 64 + 2);
    }

    #[test]
    fn small_writes_queue_up_to_gather_and_large_ones_go_straight() {
        let id = Uuid::from_u128(9);
        let c = Counters::default();
        let e = env(&c, true);
        let g = GATHER as u64;
        let mut spec = crr_spec();
        spec.pattern = IoPattern::Push;
        spec.transfer = 3 * g;
        let mut conn = Conn::new(&spec, id, Role::Client, 2 * GATHER, Instant::now());
        // 100 bytes of a hello wait; the socket takes nothing.
        let mut out = Out::new(vec![0; 100]);
        let s = mock(0);
        assert!(pump(&mut conn, &mut out, &s, &mut [0; 16], &e).moved);
        // Data joined the hello up to GATHER bytes in all, and no further.
        assert_eq!(out.pending(), GATHER);
        assert_eq!(conn.progress().0, g - 100);
        assert!(!pump(&mut conn, &mut out, &s, &mut [0; 16], &e).moved);
        assert_eq!(out.pending(), GATHER);
        // The socket takes again: the queue goes out in one write...
        *s.room.borrow_mut() = 1 << 20;
        assert!(pump(&mut conn, &mut out, &s, &mut [0; 16], &e).moved);
        assert_eq!(s.writes.borrow()[0].len(), GATHER);
        // ... then 2 × GATHER (the buffer) straight from the pattern, then
        // the last 100 bytes through the queue, with the final report.
        while !out.is_empty() || conn.progress().0 < 3 * g {
            assert!(pump(&mut conn, &mut out, &s, &mut [0; 16], &e).moved);
        }
        let report = final_frame(3 * g, 0);
        let lens: Vec<usize> = s.writes.borrow().iter().map(|w| w.len()).collect();
        assert_eq!(lens, [GATHER, 2 * GATHER, 100 + report.len()]);
        let all: Vec<u8> = s.writes.take().into_iter().flatten().collect();
        let data = &all[100..100 + 3 * GATHER];
        assert_eq!(
            data,
            &pattern(id, Direction::ClientToServer, 3 * GATHER)[..]
        );
        assert_eq!(&all[100 + 3 * GATHER..], &report[..]);
        assert_eq!(c.sent.load(Relaxed), 3 * g);

        // Exactly GATHER bytes offered are queued, not written straight:
        // the machine counts them all as the socket takes 100.
        let mut conn = Conn::new(&spec, id, Role::Client, GATHER, Instant::now());
        let mut out = Out::new(Vec::new());
        let s = mock(100);
        assert!(pump(&mut conn, &mut out, &s, &mut [0; 16], &e).moved);
        assert_eq!(conn.progress().0, g);
        assert_eq!(out.pending(), GATHER - 100);
        // A large write the socket will not take yet moves nothing; one it
        // refuses ends the connection.
        let mut conn = Conn::new(&spec, id, Role::Client, 2 * GATHER, Instant::now());
        let mut out = Out::new(Vec::new());
        let s = mock(0);
        assert!(!pump(&mut conn, &mut out, &s, &mut [0; 16], &e).moved);
        assert!(!conn.is_done());
        let s = Mock {
            broken: true,
            ..mock(1 << 20)
        };
        assert!(pump(&mut conn, &mut out, &s, &mut [0; 16], &e).moved);
        let kind = conn.result().map(|r| r.0.kind);
        assert_eq!(kind, Some(crate::outcome::ResultKind::NetworkError));
    }

    /// A server receiving `transfer` bytes in reads of `buffer`.
    fn receiver(transfer: u64, buffer: usize) -> Conn {
        let spec = TcpSpec::plain(IoPattern::Push, transfer, 0, 0);
        Conn::new(
            &spec,
            Uuid::from_u128(5),
            Role::Server,
            buffer,
            Instant::now(),
        )
    }

    fn sent(transfer: usize) -> Vec<u8> {
        pattern(Uuid::from_u128(5), Direction::ClientToServer, transfer)
    }

    #[test]
    fn short_reads_follow_one_another_and_large_ones_do_not() {
        let c = Counters::default();
        let e = env(&c, true);
        let mut buf = vec![0; 4 * GATHER];
        // Reads of GATHER bytes, each full: one step reads all three, then
        // finds the peer's report not there yet.
        let mut conn = receiver(3 * GATHER as u64, GATHER);
        let mut out = Out::new(Vec::new());
        let s = mock(1 << 20);
        s.reads.borrow_mut().push_back(sent(3 * GATHER));
        assert!(pump(&mut conn, &mut out, &s, &mut buf, &e).moved);
        assert_eq!((s.recvs.get(), conn.progress().1), (4, 3 * GATHER as u64));
        assert_eq!(c.received.load(Relaxed), 3 * GATHER as u64);
        // Reads past GATHER: one a step.
        let mut conn = receiver(3 * GATHER as u64, GATHER + 1);
        let s = mock(1 << 20);
        s.reads.borrow_mut().push_back(sent(3 * GATHER));
        pump(&mut conn, &mut out, &s, &mut buf, &e);
        assert_eq!((s.recvs.get(), conn.progress().1), (1, GATHER as u64 + 1));
        // A read short of what was asked drained the socket: no other.
        let mut conn = receiver(1000, 1000);
        let s = mock(1 << 20);
        let data = sent(1000);
        s.reads.borrow_mut().push_back(data[..300].to_vec());
        s.reads.borrow_mut().push_back(data[300..].to_vec());
        pump(&mut conn, &mut out, &s, &mut buf, &e);
        assert_eq!((s.recvs.get(), conn.progress().1), (1, 300));
    }

    #[test]
    fn a_read_that_would_block_waits_and_one_that_fails_ends_it() {
        let c = Counters::default();
        let e = env(&c, true);
        let mut buf = vec![0; 1024];
        let mut out = Out::new(Vec::new());
        let mut conn = receiver(1000, 1000);
        let s = mock(1 << 20);
        assert!(!pump(&mut conn, &mut out, &s, &mut buf, &e).moved);
        assert!(!conn.is_done());
        assert_eq!(s.recvs.get(), 1);
        let s = Mock {
            read_error: Some(io::ErrorKind::ConnectionReset),
            ..mock(1 << 20)
        };
        assert!(pump(&mut conn, &mut out, &s, &mut buf, &e).moved);
        let kind = conn.result().map(|r| r.0.kind);
        assert_eq!(kind, Some(crate::outcome::ResultKind::NetworkError));
        // A machine with nothing to read makes no read, whatever is there
        // (a read of nothing would say the peer closed).
        let mut spec = crr_spec();
        spec.pattern = IoPattern::Push;
        let mut conn = Conn::new(&spec, Uuid::from_u128(6), Role::Client, 64, Instant::now());
        let s = mock(1 << 20);
        s.reads.borrow_mut().push_back(vec![1, 2, 3]);
        assert!(pump(&mut conn, &mut out, &s, &mut buf, &e).moved);
        assert_eq!(s.recvs.get(), 0);
        assert!(!conn.is_done());
    }

    #[test]
    fn a_failed_write_drops_what_was_queued_and_ends_the_connection() {
        let id = Uuid::from_u128(11);
        let c = Counters::default();
        let mut conn = Conn::new(&crr_spec(), id, Role::Client, 64, Instant::now());
        let mut out = Out::new(vec![1, 2, 3]);
        let s = Mock {
            broken: true,
            ..mock(1 << 20)
        };
        let p = pump(&mut conn, &mut out, &s, &mut [0; 16], &env(&c, false));
        assert!(p.moved);
        assert!(out.is_empty());
        assert!(settled(&conn, &out));
        let (r, _, _) = conn.into_result();
        assert_eq!(r.kind, crate::outcome::ResultKind::NetworkError);
    }
}
