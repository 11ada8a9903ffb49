//! Unit tests of `tcp::drive`: count-only data is dropped unread but for
//! each chunk's first bytes, one step drops every waiting chunk and a short
//! drop ends the turn; and a real TcpStream reads, drops, writes and shuts
//! as the pump expects.

use super::*;

/// A time-bounded receiver (`-t`) of connection 5, with `verify`.
fn bounded_receiver(verify: proto::VerifyLevel, buffer: usize) -> Conn {
    let spec = TcpSpec {
        time_bound_ms: 1000,
        verify,
        ..TcpSpec::plain(IoPattern::Push, 1 << 30, 0, 0)
    };
    Conn::new(
        &spec,
        Uuid::from_u128(5),
        Role::Server,
        buffer,
        Instant::now(),
    )
}

#[test]
fn count_only_data_is_dropped_unread_but_each_chunk_start_is_read() {
    let c = Counters::default();
    let e = env(&c, true);
    let chunk = crate::protocol::tcp::machine::CHUNK as usize;
    let mut conn = bounded_receiver(proto::VerifyLevel::Connection, 2 * chunk);
    // At a chunk's start only the bytes that tell data from the end
    // marker are read; the rest of the chunk may be dropped.
    assert_eq!(conn.skippable(), 0);
    assert_eq!(conn.read_room(), proto::HEADER_LEN);
    let (mut out, mut ahead) = (Out::new(Vec::new()), ReadAhead::default());
    let s = mock(1 << 20);
    let start = stream_start(Uuid::from_u128(5), Direction::ClientToServer);
    let mut data = Vec::new();
    while data.len() < 2 * chunk {
        let more = 2 * chunk - data.len();
        data.extend_from_slice(Pattern::get().slice(start, data.len() as u64, more));
    }
    // Count-only does not look past a chunk's first bytes.
    data[500] ^= 1;
    s.reads.borrow_mut().push_back(data);
    let mut buf = vec![0; 2 * chunk];
    let mut last = Instant::now();
    let ran = run_until_blocked(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!(conn.progress().1, 2 * chunk as u64);
    // Head, rest of chunk, head, rest of chunk; then nothing is there.
    assert_eq!((s.recvs.get(), s.discarded.get()), (5, 2));
    // The end marker at the next chunk's start is seen: the data is over,
    // and with the peer's report behind it the connection succeeds (the
    // flipped byte was not looked at).
    let mut end = proto::encode(&Message::DataEnd);
    end.extend(final_frame(2 * chunk as u64, 0));
    s.arrive(&mut ahead, end);
    while !settled(&conn, &out) {
        assert!(pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e).moved);
    }
    assert_eq!(
        kind(&conn),
        Some(crate::protocol::outcome::ResultKind::Success)
    );
    // Verified data is never dropped.
    let conn = bounded_receiver(proto::VerifyLevel::Data, 2 * chunk);
    assert_eq!(conn.skippable(), 0);
    assert_eq!(conn.read_room(), chunk);
}

#[test]
fn a_tcp_stream_reads_drops_writes_and_shuts_as_pump_expects() {
    // The real socket's calls over loopback: what each moves, and how each
    // tells an empty queue and the peer's close apart.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    // A bound on the blocking reads below, should a FIN never come.
    b.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    b.set_nonblocking(true).unwrap();
    let (a, b) = (
        mio::net::TcpStream::from_std(a),
        mio::net::TcpStream::from_std(b),
    );
    let mut buf = [0u8; 64];
    // Nothing arrived: a read and a drop both would block (neither is
    // the peer's close, nor a count of bytes).
    let kind = |r: io::Result<usize>| r.map_err(|e| e.kind());
    assert_eq!(kind(b.recv(&mut buf)), Err(io::ErrorKind::WouldBlock));
    assert_eq!(kind(b.discard(&mut buf)), Err(io::ErrorKind::WouldBlock));
    // Each write says how much it took; the held bytes leave with the FIN.
    assert_eq!(a.send(b"hello").unwrap(), 5);
    assert_eq!(a.send_more(b", world").unwrap(), 7);
    a.close_write().unwrap();
    // Blocking from here: each call waits for what the peer sent.
    socket2::SockRef::from(&b).set_nonblocking(false).unwrap();
    let mut got = Vec::new();
    while got.len() < 5 {
        let n = b.recv(&mut buf[..5 - got.len()]).unwrap();
        assert!(n > 0, "the peer's close before its bytes");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"hello");
    // The rest is dropped unread, counted; then the close reads as 0.
    buf.fill(0);
    let mut dropped = 0;
    while dropped < 7 {
        let n = b.discard(&mut buf).unwrap();
        assert!(n > 0, "the peer's close before its bytes");
        dropped += n;
    }
    assert_eq!(dropped, 7);
    assert_eq!(buf, [0; 64], "dropped bytes are not copied");
    assert_eq!(kind(b.discard(&mut buf)), Ok(0));
    assert_eq!(kind(b.recv(&mut buf)), Ok(0));
}

#[test]
fn one_step_drops_every_waiting_chunk_but_its_first_bytes() {
    let c = Counters::default();
    let e = env(&c, true);
    let chunk = crate::protocol::tcp::machine::CHUNK as usize;
    let mut conn = bounded_receiver(proto::VerifyLevel::Connection, 2 * chunk);
    let (mut out, mut ahead) = (Out::new(Vec::new()), ReadAhead::default());
    let s = mock(1 << 20);
    let start = stream_start(Uuid::from_u128(5), Direction::ClientToServer);
    let mut data = Vec::new();
    while data.len() < 2 * chunk {
        let more = 2 * chunk - data.len();
        data.extend_from_slice(Pattern::get().slice(start, data.len() as u64, more));
    }
    s.reads.borrow_mut().push_back(data);
    let mut buf = vec![0; 2 * chunk];
    assert!(pump_now(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e).moved);
    // Both chunks in one step, each read as far as its header and the
    // rest dropped, all counted received.
    assert_eq!(conn.progress().1, 2 * chunk as u64);
    assert_eq!(c.received.load(Relaxed), 2 * chunk as u64);
    let unread = 2 * (chunk - proto::HEADER_LEN);
    assert_eq!((s.discarded.get(), s.dropped.get()), (2, unread));
    assert!(ahead.is_empty() && !conn.is_done());
}

/// `n` chunks of connection 5's data.
fn chunks(n: usize) -> Vec<u8> {
    let len = n * crate::protocol::tcp::machine::CHUNK as usize;
    let start = stream_start(Uuid::from_u128(5), Direction::ClientToServer);
    let mut data = Vec::new();
    while data.len() < len {
        let more = len - data.len();
        data.extend_from_slice(Pattern::get().slice(start, data.len() as u64, more));
    }
    data
}

#[test]
fn a_short_drop_ends_the_turn_and_a_full_one_does_not() {
    let c = Counters::default();
    let e = env(&c, true);
    let chunk = crate::protocol::tcp::machine::CHUNK as usize;
    let mut last = Instant::now();
    let mut buf = vec![0; 2 * chunk];
    // A chunk and 1000 bytes of the next: the drop of the rest of that
    // one comes back short, so the socket is drained: no read that would
    // block follows.
    let mut conn = bounded_receiver(proto::VerifyLevel::Connection, 2 * chunk);
    let (mut out, mut ahead) = (Out::new(Vec::new()), ReadAhead::default());
    let s = mock(1 << 20);
    s.reads
        .borrow_mut()
        .push_back(chunks(2)[..chunk + 1000].to_vec());
    let ran = run_until_blocked(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!(conn.progress().1, chunk as u64 + 1000);
    assert_eq!((s.recvs.get(), s.discarded.get()), (4, 2));
    // Five chunks: a step's reads (a head and a drop per chunk) end with
    // a full drop after four, and the turn goes on to the fifth.
    let mut conn = bounded_receiver(proto::VerifyLevel::Connection, 2 * chunk);
    let mut ahead = ReadAhead::default();
    let s = mock(1 << 20);
    s.reads.borrow_mut().push_back(chunks(5));
    let ran = run_until_blocked(&mut conn, &mut out, &mut ahead, &s, &mut buf, &e, &mut last);
    assert_eq!(ran, Ran::Blocked { timer: None });
    assert_eq!(conn.progress().1, 5 * chunk as u64);
    assert_eq!((s.recvs.get(), s.discarded.get()), (11, 5));
}
