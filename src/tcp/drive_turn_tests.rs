//! Unit tests of `tcp::drive`: how a run of steps ends its turn — settled,
//! blocked with a timer, or yielding when its socket never blocks — after a
//! short read or a write of all it had, and an interrupted read or write
//! tried again rather than taken for a failure.

use super::*;

#[test]
fn a_run_of_steps_ends_settled_or_blocked() {
    let c = Counters::default();
    let e = env(&c, true);
    // Nothing to read: blocked on the socket, with no progress to note.
    let (conn, out, s) = waiting_receiver();
    let mut r = End {
        conn,
        out,
        ahead: ReadAhead::default(),
    };
    let t0 = Instant::now() - std::time::Duration::from_secs(5);
    let mut last = t0;
    let ran = r.run(&s, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!(last, t0);
    // The data arrives: read, the report written, progress noted, and it
    // waits for the client's report.
    s.arrive(&mut r.ahead, sent(1000));
    let ran = r.run(&s, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert!(last > t0);
    // With the client's report it is settled.
    s.arrive(&mut r.ahead, final_frame(1000, 0));
    let ran = r.run(&s, &e, &mut last);
    assert_eq!(ran, Ran::Settled);
    assert_eq!(
        kind(&r.conn),
        Some(crate::protocol::outcome::ResultKind::Success)
    );
}

/// A client pushing `transfer` bytes in calls of `buffer`.
fn pusher(transfer: u64, buffer: usize) -> Conn {
    let spec = TcpSpec::plain(IoPattern::Push, transfer, 0, 0);
    Conn::new(
        &spec,
        Uuid::from_u128(5),
        Role::Client,
        buffer,
        Instant::now(),
    )
}

#[test]
fn a_connection_whose_socket_never_blocks_yields_after_its_turn() {
    let c = Counters::default();
    let e = env(&c, true);
    let mut last = Instant::now();
    let mut turn = |conn: &mut Conn, s: &Mock, buf: &mut [u8]| {
        let (mut out, mut ahead) = (Out::new(Vec::new()), ReadAhead::default());
        run_until_blocked(conn, &mut out, &mut ahead, s, buf, &e, &mut last)
    };
    // One-byte calls, gathered: a turn is TURN_STEPS writes of GATHER bytes
    // (a buffer of 1 once held a loop for its whole transfer).
    let mut conn = pusher(1 << 30, 1);
    let s = mock(usize::MAX);
    for k in 1..=2 {
        assert_eq!(turn(&mut conn, &s, &mut [0; 1024]), Ran::Yielded);
        assert_eq!(s.writes.borrow().len(), k * TURN_STEPS);
        assert_eq!(conn.progress().0, (k * TURN_STEPS * GATHER) as u64);
    }
    // Large calls (cut short where the pattern wraps): a turn ends with
    // the write that reaches TURN_BYTES.
    let call = 256 << 10;
    let mut conn = pusher(1 << 30, call);
    let s = mock(usize::MAX);
    for _ in 0..2 {
        let (before, n) = (conn.progress().0, s.writes.borrow().len());
        assert_eq!(turn(&mut conn, &s, &mut [0; 1024]), Ran::Yielded);
        let w = s.writes.borrow();
        let lens: Vec<u64> = w[n..].iter().map(|w| w.len() as u64).collect();
        let all: u64 = lens.iter().sum();
        assert_eq!(conn.progress().0 - before, all);
        assert!(all >= TURN_BYTES && all - lens[lens.len() - 1] < TURN_BYTES);
    }
    // Bytes read count as well: a receiver whose peer always has more.
    let mut conn = receiver(1 << 30, call);
    let s = mock(usize::MAX);
    let (start, mut data) = (
        stream_start(Uuid::from_u128(5), Direction::ClientToServer),
        vec![],
    );
    while data.len() < 5 * TURN_BYTES as usize / 2 {
        let more = 5 * TURN_BYTES as usize / 2 - data.len();
        data.extend_from_slice(Pattern::get().slice(start, data.len() as u64, more));
    }
    s.reads.borrow_mut().push_back(data);
    let mut buf = vec![0; call];
    for k in 1..=2 {
        assert_eq!(turn(&mut conn, &s, &mut buf), Ran::Yielded);
        assert_eq!(s.recvs.get() * call, k * TURN_BYTES as usize);
        assert_eq!(conn.progress().1, k as u64 * TURN_BYTES);
    }
    // What is left is less than a turn: it is read, then the socket blocks.
    let ran = turn(&mut conn, &s, &mut buf);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!(conn.progress().1, 5 * TURN_BYTES / 2);
}

#[test]
fn a_short_read_ends_the_turn_without_a_read_that_would_block() {
    let c = Counters::default();
    let e = env(&c, true);
    let mut last = Instant::now();
    // Less than the buffer arrived: one read takes it all, and the turn
    // ends there (the next arrival is a new readiness event); a read that
    // would block was a second call per wake-up.
    let mut conn = receiver(1 << 20, 4096);
    let (mut out, mut ahead) = (Out::new(Vec::new()), ReadAhead::default());
    let s = mock(1 << 20);
    s.reads.borrow_mut().push_back(sent(3000));
    let mut buf = vec![0; 4096];
    let ran = run_until_blocked(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!((s.recvs.get(), conn.progress().1), (1, 3000));
    // A full read may have left more: the turn reads on until a short one.
    s.arrive(&mut ahead, sent(3000 + 4096 + 10)[3000..].to_vec());
    let ran = run_until_blocked(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!((s.recvs.get(), conn.progress().1), (3, 3000 + 4096 + 10));
    // A short write ends it too: the socket's buffer is full.
    let mut conn = pusher(1 << 20, 16384);
    let s = mock(20000);
    let ran = run_until_blocked(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!(s.writes.borrow().len(), 2);
    assert_eq!(s.sends.get(), 2, "no send after the short one");
    assert_eq!(conn.progress().0, 20000);
}

#[test]
fn a_drained_socket_is_not_read_again_until_its_readiness_stirs_it() {
    // A crr server's first step reads the request and writes its answer
    // and report; the client's acknowledgement of them (a readiness to
    // write, not to read) or a second step made no read that would block.
    let c = Counters::default();
    let e = env(&c, true);
    let mut last = Instant::now();
    let (mut conn, mut out, s) = waiting_receiver();
    let mut ahead = ReadAhead::default();
    let mut buf = vec![0; 4096];
    // Would block: the one read until readiness.
    let p = pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e);
    assert!(p.drained && !ahead.may_read());
    assert_eq!(s.recvs.get(), 1);
    let p = pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e);
    assert!(p.drained && !p.moved);
    let ran = run_until_blocked(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!(s.recvs.get(), 1, "no read before readiness");
    // Bytes queued without a readiness seen yet wait for it.
    s.reads.borrow_mut().push_back(sent(300));
    pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e);
    assert_eq!((s.recvs.get(), conn.progress().1), (1, 0));
    // Readiness: one read takes them; it came back short, so the socket
    // is drained again without a read that would block.
    ahead.stir();
    let ran = run_until_blocked(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!((s.recvs.get(), conn.progress().1), (2, 300));
    assert!(!ahead.may_read());
    // Bytes read ahead are handed over whatever the socket said.
    ahead.stash(&sent(1000)[300..700]);
    pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e);
    assert_eq!((s.recvs.get(), conn.progress().1), (2, 700));
}

#[test]
fn an_interrupted_read_is_tried_again_not_taken_for_a_failure() {
    let c = Counters::default();
    let e = env(&c, true);
    let (mut conn, mut out, _) = waiting_receiver();
    let mut ahead = ReadAhead::default();
    let s = Mock {
        read_error: Some(io::ErrorKind::Interrupted),
        ..mock(1 << 20)
    };
    let mut buf = vec![0; 1024];
    assert!(pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e).moved);
    assert_eq!(kind(&conn), None);
    assert_eq!(s.recvs.get(), SHORT_READS);
    // What then arrives is read.
    s.reads.borrow_mut().push_back(sent(1000));
    assert!(pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e).moved);
    assert_eq!(conn.progress().1, 1000);
}

#[test]
fn a_turn_that_wrote_all_it_had_and_found_nothing_to_read_ends() {
    // A crr server reads the request (a short read: nothing more is
    // there) and writes its ack, reply and report in one write: the turn
    // ends without another read that would block.
    let id = Uuid::from_u128(7);
    let c = Counters::default();
    let ack = proto::encode(&Message::DataAck { connection: id });
    let mut server = End::new(
        Conn::new(&crr_spec(), id, Role::Server, 64, Instant::now()),
        ack,
    );
    let s = mock(1 << 20);
    s.reads
        .borrow_mut()
        .push_back(pattern(id, Direction::ClientToServer, 64));
    let mut last = Instant::now();
    let ran = server.run(&s, &env(&c, true), &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!((s.recvs.get(), s.writes.borrow().len()), (1, 1));
}

#[test]
fn an_interrupted_large_write_is_tried_again_not_taken_for_a_failure() {
    let c = Counters::default();
    let e = env(&c, false);
    let mut conn = pusher(1 << 20, 2 * GATHER);
    let (mut out, mut ahead) = (Out::new(Vec::new()), ReadAhead::default());
    let s = Mock {
        write_error: Some(io::ErrorKind::Interrupted),
        ..mock(1 << 20)
    };
    assert!(pump_now(&mut conn, &mut out, &mut ahead, &s, &mut [0; 16], &e).moved);
    assert_eq!(kind(&conn), None);
    // Tried again, the write goes out.
    let s = mock(1 << 20);
    assert!(pump_now(&mut conn, &mut out, &mut ahead, &s, &mut [0; 16], &e).moved);
    assert_eq!(conn.progress().0, 2 * GATHER as u64);
}
