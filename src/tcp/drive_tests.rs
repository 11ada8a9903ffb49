//! Unit tests of `tcp::drive`: machines stepped over a socket that records
//! each write and serves reads from a queue, so what one step reads and
//! writes, and how often, is seen exactly. How a turn ends is tested in
//! `drive_turn_tests.rs`, dropping count-only data in `drive_drop_tests.rs`.

use super::*;
use crate::net::ahead::ReadAhead;
use crate::protocol::pattern::{Direction, Pattern, stream_start};
use crate::protocol::plan::Role;
use crate::protocol::proto::{self, IoPattern, Message, TcpSpec};
use std::cell::RefCell;
use std::collections::VecDeque;
use uuid::Uuid;

/// [`pump`] at the time now, as an event loop's step reads it.
fn pump_now<S: Socket>(
    conn: &mut Conn,
    out: &mut Out,
    ahead: &mut ReadAhead,
    stream: &S,
    buf: &mut [u8],
    env: &Env,
) -> Pumped {
    let at = super::now(conn);
    pump(conn, out, ahead, stream, buf, env, at)
}

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
    /// Reads that dropped their bytes unread, and the bytes they dropped.
    discarded: std::cell::Cell<usize>,
    dropped: std::cell::Cell<usize>,
    /// What writes fail with, when set (before `broken`).
    write_error: Option<io::ErrorKind>,
    /// Send calls made, the ones that would block included.
    sends: std::cell::Cell<usize>,
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
        self.sends.set(self.sends.get() + 1);
        if let Some(kind) = self.write_error {
            return Err(kind.into());
        }
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

    fn discard(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.discarded.set(self.discarded.get() + 1);
        // As with MSG_TRUNC, `buf` is not written.
        let n = self.recv(&mut vec![0; buf.len()])?;
        self.dropped.set(self.dropped.get() + n);
        Ok(n)
    }

    fn close_write(&self) -> io::Result<()> {
        assert!(self.held.replace(false), "the FIN follows held bytes");
        *self.shut.borrow_mut() = true;
        Ok(())
    }
}

impl Mock {
    /// `b` arrives: the socket's readiness, which a loop stirs into the
    /// connection's read-ahead (a drained socket is read again only then).
    fn arrive(&self, ahead: &mut ReadAhead, b: Vec<u8>) {
        self.reads.borrow_mut().push_back(b);
        ahead.stir();
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
        fin: Fin::OnClose,
        now: None,
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

/// One end of a connection in a test: its machine, what it queued and
/// what it read ahead.
struct End {
    conn: Conn,
    out: Out,
    ahead: ReadAhead,
}

impl End {
    fn new(conn: Conn, queued: Vec<u8>) -> End {
        End {
            conn,
            out: Out::new(queued),
            ahead: ReadAhead::default(),
        }
    }

    /// One step over `s`, with a 1 KiB read buffer.
    fn step(&mut self, s: &Mock, e: &Env) -> Pumped {
        pump_now(
            &mut self.conn,
            &mut self.out,
            &mut self.ahead,
            s,
            &mut [0; 1024],
            e,
        )
    }

    fn settled(&self) -> bool {
        settled(&self.conn, &self.out)
    }

    /// Steps until settled or blocked, over `s`, with a 1 KiB read buffer.
    fn run(&mut self, s: &Mock, e: &Env, last: &mut Instant) -> Ran {
        let buf = &mut [0; 1024];
        run_until_blocked(
            &mut self.conn,
            &mut self.out,
            &mut self.ahead,
            s,
            buf,
            e,
            last,
        )
    }
}

#[test]
fn a_transaction_leaves_each_end_in_one_write() {
    let id = Uuid::from_u128(7);
    let now = Instant::now();
    let c = Counters::default();
    // The client: its hello, then its request behind it, in one write.
    let hello = proto::encode(&Message::DataAck { connection: id });
    let mut client = End::new(
        Conn::new(&crr_spec(), id, Role::Client, 64, now),
        hello.clone(),
    );
    assert!(!client.settled());
    let cs = mock(1 << 20);
    assert!(client.step(&cs, &env(&c, false)).moved);
    let w = cs.writes.take();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(&w[0][..hello.len()], &hello[..]);
    assert_eq!(
        &w[0][hello.len()..],
        &pattern(id, Direction::ClientToServer, 64)[..]
    );
    assert!(client.out.is_empty());

    // The server, its request already in: the ack, the reply and its
    // final report in one write.
    let ack = proto::encode(&Message::DataAck { connection: id });
    let mut server = End::new(Conn::new(&crr_spec(), id, Role::Server, 64, now), ack);
    let ss = mock(1 << 20);
    ss.reads
        .borrow_mut()
        .push_back(pattern(id, Direction::ClientToServer, 64));
    let half = Env {
        fin: Fin::WithReport,
        ..env(&c, true)
    };
    assert!(server.step(&ss, &half).moved);
    let w = ss.writes.take();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(parts(&w[0], &[2]), ["data_ack", "2 bytes", "final"]);
    // Its report was the last of it: held for the FIN, which followed.
    assert!(*ss.shut.borrow());
    assert!(!*ss.held.borrow());
    // Waiting for the client's report, it writes and shuts nothing more.
    assert!(!server.step(&ss, &half).moved);
    assert!(ss.writes.borrow().is_empty());
    assert!(
        !server.conn.is_done(),
        "the client's report is still to come"
    );

    // The client reads the reply and the server's report in one read,
    // then writes its own report, which finishes it.
    let mut from_server = w[0].clone();
    let ack_len = proto::encode(&Message::DataAck { connection: id }).len();
    from_server.drain(..ack_len);
    cs.reads.borrow_mut().push_back(from_server);
    let e = Env {
        fin: Fin::WithLastReport,
        ..env(&c, true)
    };
    let reads = cs.recvs.get();
    // The socket takes 10 bytes: done, but not settled before its
    // report is out.
    *cs.room.borrow_mut() = 10;
    assert!(client.step(&cs, &e).moved);
    assert!(client.conn.is_done() && !client.settled());
    assert!(cs.reads.borrow().is_empty());
    assert_eq!(
        cs.recvs.get() - reads,
        1,
        "the reply and the report in one read"
    );
    *cs.room.borrow_mut() = 1 << 20;
    assert!(client.step(&cs, &e).moved);
    assert!(client.settled());
    let w: Vec<u8> = cs.writes.take().concat();
    assert_eq!(w, final_frame(64, 2));
    // The server's report came first, with its FIN: the client's report
    // is held for the client's FIN, which its close sends (no shutdown
    // call).
    assert!(*cs.held.borrow());
    assert!(!*cs.shut.borrow());
    assert_eq!(
        client.conn.result().unwrap().0.kind,
        crate::protocol::outcome::ResultKind::Success
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
    let mut ahead_out = ReadAhead::default();
    let s = mock(0);
    assert!(pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut [0; 16], &e).moved);
    // Data joined the hello up to GATHER bytes in all, and no further.
    assert_eq!(out.pending(), GATHER);
    assert_eq!(conn.progress().0, g - 100);
    assert!(!pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut [0; 16], &e).moved);
    assert_eq!(out.pending(), GATHER);
    // The socket takes again: the queue goes out in one write...
    *s.room.borrow_mut() = 1 << 20;
    assert!(pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut [0; 16], &e).moved);
    assert_eq!(s.writes.borrow()[0].len(), GATHER);
    // ... then 2 × GATHER (the buffer) straight from the pattern, then
    // the last 100 bytes through the queue, with the final report.
    while !out.is_empty() || conn.progress().0 < 3 * g {
        assert!(pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut [0; 16], &e).moved);
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
    let mut ahead_out = ReadAhead::default();
    let s = mock(100);
    assert!(pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut [0; 16], &e).moved);
    assert_eq!(conn.progress().0, g);
    assert_eq!(out.pending(), GATHER - 100);
    // A large write the socket will not take yet moves nothing; one it
    // refuses ends the connection.
    let mut conn = Conn::new(&spec, id, Role::Client, 2 * GATHER, Instant::now());
    let mut out = Out::new(Vec::new());
    let mut ahead_out = ReadAhead::default();
    let s = mock(0);
    assert!(!pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut [0; 16], &e).moved);
    assert!(!conn.is_done());
    let s = Mock {
        broken: true,
        ..mock(1 << 20)
    };
    assert!(pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut [0; 16], &e).moved);
    assert_eq!(
        kind(&conn),
        Some(crate::protocol::outcome::ResultKind::NetworkError)
    );
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

/// A server waiting for 1000 bytes, nothing queued for it to write, and a
/// socket with nothing to read that takes whatever is written.
fn waiting_receiver() -> (Conn, Out, Mock) {
    (receiver(1000, 1000), Out::new(Vec::new()), mock(1 << 20))
}

/// The agreed result's kind, once there is one.
fn kind(conn: &Conn) -> Option<crate::protocol::outcome::ResultKind> {
    conn.result().map(|r| r.0.kind)
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
    let mut ahead_out = ReadAhead::default();
    let s = mock(1 << 20);
    s.reads.borrow_mut().push_back(sent(3 * GATHER));
    assert!(pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut buf, &e).moved);
    assert_eq!((s.recvs.get(), conn.progress().1), (4, 3 * GATHER as u64));
    assert_eq!(c.received.load(Relaxed), 3 * GATHER as u64);
    // Reads past GATHER: one a step.
    let mut conn = receiver(3 * GATHER as u64, GATHER + 1);
    let mut ahead_out = ReadAhead::default();
    let s = mock(1 << 20);
    s.reads.borrow_mut().push_back(sent(3 * GATHER));
    pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut buf, &e);
    assert_eq!((s.recvs.get(), conn.progress().1), (1, GATHER as u64 + 1));
    // A read short of what was asked drained the socket: no other.
    let mut conn = receiver(1000, 1000);
    let mut ahead_out = ReadAhead::default();
    let s = mock(1 << 20);
    let data = sent(1000);
    s.reads.borrow_mut().push_back(data[..300].to_vec());
    s.reads.borrow_mut().push_back(data[300..].to_vec());
    pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut buf, &e);
    assert_eq!((s.recvs.get(), conn.progress().1), (1, 300));
}

#[test]
fn a_read_that_would_block_waits_and_one_that_fails_ends_it() {
    let c = Counters::default();
    let e = env(&c, true);
    let mut buf = vec![0; 1024];
    let (mut conn, mut out, s) = waiting_receiver();
    let mut ahead_out = ReadAhead::default();
    assert!(!pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut buf, &e).moved);
    assert!(!conn.is_done());
    assert_eq!(s.recvs.get(), 1);
    let s = Mock {
        read_error: Some(io::ErrorKind::ConnectionReset),
        ..mock(1 << 20)
    };
    // The error's readiness (EPOLLERR) stirs the drained socket.
    ahead_out.stir();
    assert!(pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut buf, &e).moved);
    assert_eq!(
        kind(&conn),
        Some(crate::protocol::outcome::ResultKind::NetworkError)
    );
    // A machine with nothing to read makes no read, whatever is there
    // (a read of nothing would say the peer closed).
    let mut spec = crr_spec();
    spec.pattern = IoPattern::Push;
    let mut conn = Conn::new(&spec, Uuid::from_u128(6), Role::Client, 64, Instant::now());
    let s = mock(1 << 20);
    s.reads.borrow_mut().push_back(vec![1, 2, 3]);
    assert!(pump_now(&mut conn, &mut out, &mut ahead_out, &s, &mut buf, &e).moved);
    assert_eq!(s.recvs.get(), 0);
    assert!(!conn.is_done());
}

#[test]
fn a_failed_write_drops_what_was_queued_and_ends_the_connection() {
    let id = Uuid::from_u128(11);
    let c = Counters::default();
    let mut conn = Conn::new(&crr_spec(), id, Role::Client, 64, Instant::now());
    let mut out = Out::new(vec![1, 2, 3]);
    let mut ahead_out = ReadAhead::default();
    let s = Mock {
        broken: true,
        ..mock(1 << 20)
    };
    let p = pump_now(
        &mut conn,
        &mut out,
        &mut ahead_out,
        &s,
        &mut [0; 16],
        &env(&c, false),
    );
    assert!(p.moved);
    assert!(out.is_empty());
    assert!(settled(&conn, &out));
    let (r, _, _) = conn.into_result();
    assert_eq!(r.kind, crate::protocol::outcome::ResultKind::NetworkError);
}

#[test]
fn a_client_sends_its_fin_with_its_report_only_when_the_server_closed_first() {
    let c = Counters::default();
    let e = Env {
        fin: Fin::WithLastReport,
        ..env(&c, true)
    };
    // Pushing 64 bytes, the client's report follows its data at once,
    // before the server's: its FIN waits for the close.
    let id = Uuid::from_u128(12);
    let spec = TcpSpec::plain(IoPattern::Push, 64, 0, 0);
    let mut client = End::new(
        Conn::new(&spec, id, Role::Client, 64, Instant::now()),
        vec![],
    );
    let s = mock(1 << 20);
    assert!(client.step(&s, &e).moved);
    assert!(client.conn.report_sent() && !client.conn.is_done());
    assert!(!*s.shut.borrow() && !*s.held.borrow());
    // The server's report then settles it, and nothing more is written.
    s.reads.borrow_mut().push_back(final_frame(0, 64));
    assert!(client.step(&s, &e).moved);
    assert!(client.settled());
    assert!(!*s.shut.borrow());
    assert_eq!(
        kind(&client.conn),
        Some(crate::protocol::outcome::ResultKind::Success)
    );
    // Fin::OnClose never shuts, even as the second to report.
    let conn = Conn::new(&crr_spec(), id, Role::Client, 64, Instant::now());
    let mut client = End::new(conn, vec![]);
    let s = mock(1 << 20);
    let on_close = env(&c, true);
    client.step(&s, &on_close);
    let mut reply = pattern(id, Direction::ServerToClient, 2);
    reply.extend(final_frame(2, 64));
    s.reads.borrow_mut().push_back(reply);
    while !client.settled() {
        assert!(client.step(&s, &on_close).moved);
    }
    assert!(!*s.shut.borrow());
}

#[test]
fn what_a_read_brings_past_the_machines_want_waits_and_goes_first() {
    let c = Counters::default();
    let e = env(&c, true);
    // 1000 bytes of data, the peer's report, and 5 bytes past it, in
    // one chunk: a read of what the data wants takes it all.
    let (mut conn, mut out, s) = waiting_receiver();
    let mut ahead = ReadAhead::default();
    let mut chunk = sent(1000);
    chunk.extend(final_frame(1000, 0));
    chunk.extend([1, 2, 3, 4, 5]);
    s.reads.borrow_mut().push_back(chunk);
    let mut buf = vec![0; 8192];
    assert!(pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e).moved);
    assert_eq!(s.recvs.get(), 1);
    // Its report went out and the peer's was taken: done, and what is
    // past the report is not the machine's.
    assert!(conn.is_done());
    assert_eq!(
        kind(&conn),
        Some(crate::protocol::outcome::ResultKind::Success)
    );
    assert_eq!(ahead.bytes(), [1, 2, 3, 4, 5]);
    assert_eq!(c.received.load(Relaxed), 1000);
    // The data's end and the report's first bytes in one read, the rest
    // in the next: the part waits in the machine for the rest.
    let (mut conn, mut out, s) = waiting_receiver();
    let mut ahead = ReadAhead::default();
    let report = final_frame(1000, 0);
    let mut chunk = sent(1000);
    chunk.extend(&report[..5]);
    s.reads.borrow_mut().push_back(chunk);
    pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e);
    assert!(!conn.is_done() && ahead.is_empty());
    s.arrive(&mut ahead, report[5..].to_vec());
    pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e);
    assert_eq!(
        kind(&conn),
        Some(crate::protocol::outcome::ResultKind::Success)
    );
    // Bytes that wait are handed over before the socket is read; the
    // read's size does not depend on them.
    let (mut conn, mut out, s) = waiting_receiver();
    let mut ahead = ReadAhead::default();
    ahead.stash(&sent(1000)[..400]);
    s.reads.borrow_mut().push_back(sent(1000)[400..].to_vec());
    pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e);
    assert_eq!((s.recvs.get(), conn.progress().1), (1, 1000));
    assert!(ahead.is_empty());
    // A large want reads exactly it: nothing is read ahead.
    let mut conn = receiver(3 * AHEAD as u64, GATHER + 1);
    let mut ahead = ReadAhead::default();
    let s = mock(1 << 20);
    s.reads.borrow_mut().push_back(sent(3 * AHEAD));
    let mut big = vec![0; 4 * AHEAD];
    pump_now(&mut conn, &mut out, &mut ahead, &s, &mut big, &e);
    assert_eq!((s.recvs.get(), conn.progress().1), (1, GATHER as u64 + 1));
    assert!(ahead.is_empty());
}

/// A step reads the wall clock only for a machine that logs bursts (their
/// records carry it, for one-way times across hosts); another's is 0.
#[test]
fn only_a_connection_with_bursts_reads_the_wall_clock() {
    let t0 = Instant::now();
    let plain = Conn::new(&crr_spec(), Uuid::from_u128(3), Role::Client, 64, t0);
    assert_eq!(now(&plain).real_ns, 0);
    let bursty = TcpSpec {
        burst: Some(proto::BurstSpec {
            size: 100,
            period_ms: 10,
        }),
        ..TcpSpec::plain(IoPattern::Push, 1000, 0, 0)
    };
    let conn = Conn::new(&bursty, Uuid::from_u128(3), Role::Client, 64, t0);
    let before = crate::net::realtime_ns();
    let at = now(&conn);
    assert!(at.real_ns >= before && at.real_ns <= crate::net::realtime_ns());
    assert!(at.mono >= t0);
}

#[path = "drive_turn_tests.rs"]
mod turns;

#[path = "drive_drop_tests.rs"]
mod drops;
