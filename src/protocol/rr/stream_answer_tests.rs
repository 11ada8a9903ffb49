//! Unit tests of `rr::stream_answer`: the server's machine against an
//! in-memory client that keeps the real client's order (request, whole
//! reply, next request; goodbye, summary), through two byte pipes that cut
//! the streams anywhere, on a simulated clock, with corruption, truncation
//! and the client leaving at every step.

use super::*;
use crate::protocol::proto::{HEADER_LEN, MAX_PAYLOAD};
use proptest::prelude::*;

const IDLE: Duration = Duration::from_secs(30);

fn terms(size: u32, reply: u32, iterations: u64, t0: Instant) -> Terms {
    Terms {
        session: Uuid::from_u128(0x1234_5678_9abc),
        size,
        reply,
        iterations,
        idle: IDLE,
        deadline: t0 + Duration::from_secs(60),
    }
}

fn pattern(start: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let s = Pattern::get().slice(start, offset + v.len() as u64, len - v.len());
        v.extend_from_slice(s);
    }
    v
}

/// The client of `rr --proto tcp`, in memory.
#[derive(Debug)]
struct Client {
    t: Terms,
    /// Bytes for the server, and the server's bytes not yet looked at.
    up: Vec<u8>,
    down: Vec<u8>,
    /// Bytes sent up in all (their place in the up stream, for corruption).
    sent_up: usize,
    accepted: bool,
    seq: u64,
    good_replies: u64,
    bad_replies: u64,
    summary: Option<SessionSummary>,
    /// Whether something other than a summary came at the end.
    garbage: bool,
}

impl Client {
    fn new(t: Terms) -> Client {
        Client {
            t,
            up: Vec::new(),
            down: Vec::new(),
            sent_up: 0,
            accepted: false,
            seq: 0,
            good_replies: 0,
            bad_replies: 0,
            summary: None,
            garbage: false,
        }
    }

    fn request(&mut self) {
        let start = stream_start(self.t.session, Direction::ClientToServer);
        let size = u64::from(self.t.size);
        let r = pattern(start, self.seq * size, self.t.size as usize);
        self.up.extend_from_slice(&r);
    }

    /// Looks at what came down, and sends what follows from it.
    fn step(&mut self) {
        if !self.accepted {
            match decode_frame(&self.down) {
                Ok(Some((Message::TestAccept { session }, used))) => {
                    assert_eq!(session, self.t.session);
                    self.down.drain(..used);
                    self.accepted = true;
                    self.request();
                }
                Ok(None) => return,
                other => panic!("not an acceptance: {other:?}"),
            }
        }
        let reply = self.t.reply as usize;
        while self.seq < self.t.iterations && self.down.len() >= reply {
            let start = stream_start(self.t.session, Direction::ServerToClient);
            let want = pattern(start, self.seq * u64::from(self.t.reply), reply);
            match self.down[..reply] == want[..] {
                true => self.good_replies += 1,
                false => self.bad_replies += 1,
            }
            self.down.drain(..reply);
            self.seq += 1;
            match self.seq < self.t.iterations {
                true => self.request(),
                false => self.up.extend_from_slice(&encode(&Message::Goodbye)),
            }
        }
        if self.seq == self.t.iterations && self.summary.is_none() && !self.garbage {
            match decode_frame(&self.down) {
                Ok(Some((Message::Summary(s), used))) => {
                    self.down.drain(..used);
                    self.summary = Some(s);
                }
                Ok(None) => {}
                _ => self.garbage = true,
            }
        }
    }
}

/// Moves bytes both ways, `up` and `down` bytes per move at most (cycling
/// through the sizes given), flipping the up-stream bytes at `flip`, until
/// nothing moves. The server takes at most what it wants, as a driver
/// reading at most that much would, and as the driver does, admits and
/// writes a reply as soon as its request is whole, before the request's
/// last bytes are checked.
fn run(
    m: &mut StreamAnswerer,
    c: &mut Client,
    up: &[usize],
    down: &[usize],
    flip: &[usize],
    now: Instant,
) {
    let (mut u, mut d) = (0, 0);
    loop {
        let mut moved = false;
        let out = m.out();
        if !out.is_empty() {
            let n = out.len().min(down[d % down.len()]);
            d += 1;
            c.down.extend_from_slice(&out[..n]);
            m.wrote(n, now);
            moved = true;
        }
        c.step();
        let n = c.up.len().min(m.wants()).min(up[u % up.len()]);
        if n > 0 {
            u += 1;
            let mut chunk: Vec<u8> = c.up.drain(..n).collect();
            for &f in flip {
                if (c.sent_up..c.sent_up + n).contains(&f) {
                    chunk[f - c.sent_up] ^= 0x40;
                }
            }
            c.sent_up += n;
            let took = m.on_bytes_then(&chunk, now, |m| {
                assert_eq!(m.admission(), Some(u64::from(c.t.reply)));
                m.admitted(now);
                let out = m.out();
                let n = out.len().min(down[d % down.len()]);
                d += 1;
                c.down.extend_from_slice(&out[..n]);
                m.wrote(n, now);
            });
            assert_eq!(took, n);
            assert_eq!(m.admission(), None, "admitted once whole");
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

/// Writes everything the machine has to write, as a socket that takes it all.
fn drain(m: &mut StreamAnswerer, now: Instant) {
    loop {
        let n = m.out().len();
        if n == 0 {
            return;
        }
        m.wrote(n, now);
    }
}

/// Bytes the client sends in a whole session.
fn up_len(t: &Terms) -> usize {
    t.size as usize * t.iterations as usize + encode(&Message::Goodbye).len()
}

#[test]
fn a_session_cut_at_every_size_is_answered_exactly() {
    let t0 = Instant::now();
    let t = terms(5, 7, 3, t0);
    for up in 1..=up_len(&t) + 1 {
        for down in [1, 2, 3, 7, 64, 1 << 20] {
            let mut m = StreamAnswerer::new(t.clone(), t0);
            let mut c = Client::new(t.clone());
            run(&mut m, &mut c, &[up], &[down], &[], t0);
            assert_eq!(
                (c.good_replies, c.bad_replies),
                (3, 0),
                "up {up} down {down}"
            );
            let s = c.summary.expect("a summary");
            assert_eq!((s.requests, s.data_errors), (3, 0));
            assert_eq!(m.end(), Some(End::Summarised));
            // Everything is written; the summary was the last of it.
            assert!(m.out().is_empty());
            let moved = m.moved();
            assert_eq!((moved.bytes_received, moved.bytes_sent), (15, 21));
            assert_eq!(moved.network_errors, 0);
        }
    }
}

#[test]
fn the_bytes_that_make_a_request_whole_are_checked_after_its_reply_is_written() {
    let t0 = Instant::now();
    let start = |t: &Terms| stream_start(t.session, Direction::ClientToServer);
    // The one request of 4 bytes in two pieces, a byte flipped in the
    // first or in the last, or in one piece: its reply is written whole
    // (ending the requests) before the flip is found, and it still counts.
    for (flip, pieces) in [(1usize, [2usize, 2]), (3, [2, 2]), (3, [4, 0])] {
        let t = terms(4, 10, 1, t0);
        let mut m = StreamAnswerer::new(t.clone(), t0);
        drain(&mut m, t0);
        let mut req = pattern(start(&t), 0, 4);
        req[flip] ^= 1;
        let mut at = 0;
        let mut called = 0;
        for len in pieces.into_iter().filter(|&l| l > 0) {
            let took = m.on_bytes_then(&req[at..at + len], t0, |m| {
                called += 1;
                assert_eq!(m.admission(), Some(10), "the reply is owed");
                assert_eq!(m.summary().data_errors, 0, "not yet checked");
                m.admitted(t0);
                let n = m.out().len();
                m.wrote(n, t0);
                assert_eq!(m.answered(), 1);
            });
            assert_eq!(took, len);
            at += len;
        }
        assert_eq!(called, 1, "once, for the whole request");
        assert_eq!(m.summary().data_errors, 1, "flip {flip} {pieces:?}");
        assert_eq!(m.moved().data_errors, 1);
        // The goodbye gets the verdict.
        let bye = encode(&Message::Goodbye);
        assert_eq!(m.on_bytes(&bye, t0), bye.len());
        assert_eq!(m.end(), Some(End::Summarised));
        match decode_frame(m.out()) {
            Ok(Some((Message::Summary(s), _))) => assert_eq!((s.requests, s.data_errors), (1, 1)),
            other => panic!("{other:?}"),
        }
    }
    // A clean request is clean whatever the answer did.
    let t = terms(4, 10, 2, t0);
    let mut m = StreamAnswerer::new(t.clone(), t0);
    drain(&mut m, t0);
    m.on_bytes_then(&pattern(start(&t), 0, 4), t0, |_| {});
    assert_eq!(m.summary().data_errors, 0);
    assert_eq!(
        m.admission(),
        Some(10),
        "owed still, if the answer did not admit it"
    );
}

#[test]
fn a_session_cut_at_every_byte_boundary_is_answered_exactly() {
    let t0 = Instant::now();
    let t = terms(6, 4, 4, t0);
    let total = up_len(&t);
    for cut in 0..=total {
        // Everything before the cut in one piece, everything after it in
        // another, replies likewise.
        let mut m = StreamAnswerer::new(t.clone(), t0);
        let mut c = Client::new(t.clone());
        run(
            &mut m,
            &mut c,
            &[cut.max(1), total],
            &[cut.max(1), 1 << 20],
            &[],
            t0,
        );
        assert_eq!(c.good_replies, 4, "cut {cut}");
        assert_eq!(c.summary.map(|s| s.requests), Some(4));
    }
}

#[test]
fn each_corrupt_request_counts_once_and_is_still_answered() {
    let t0 = Instant::now();
    let t = terms(5, 3, 4, t0);
    let requests = 5 * 4;
    for at in 0..requests {
        let mut m = StreamAnswerer::new(t.clone(), t0);
        let mut c = Client::new(t.clone());
        run(&mut m, &mut c, &[2], &[2], &[at], t0);
        assert_eq!(c.good_replies, 4, "flip {at}");
        let s = c.summary.unwrap();
        assert_eq!((s.requests, s.data_errors), (4, 1), "flip {at}");
        assert_eq!(m.moved().data_errors, 1);
    }
    // Two flips in one request count once; in two requests twice.
    for (flips, want) in [
        (&[0usize, 4][..], 1),
        (&[4, 5][..], 2),
        (&[1, 6, 19][..], 3),
    ] {
        let mut m = StreamAnswerer::new(t.clone(), t0);
        let mut c = Client::new(t.clone());
        run(&mut m, &mut c, &[3], &[64], flips, t0);
        assert_eq!(c.summary.unwrap().data_errors, want, "{flips:?}");
    }
}

#[test]
fn a_client_gone_at_every_step_ends_it_with_what_was_whole() {
    let t0 = Instant::now();
    let t = terms(5, 7, 3, t0);
    let total = up_len(&t);
    // The bytes a whole session sends up, in order.
    let start = stream_start(t.session, Direction::ClientToServer);
    let whole_stream = [pattern(start, 0, 15), encode(&Message::Goodbye)].concat();
    assert_eq!(whole_stream.len(), total);
    for sent in 0..total {
        // The client sends `sent` bytes, reading every reply, then closes.
        let mut m = StreamAnswerer::new(t.clone(), t0);
        let mut fed = 0;
        while fed < sent {
            let n = m.wants().min(sent - fed);
            if n == 0 {
                let out = m.out().len();
                assert!(out > 0, "stuck at {fed}");
                m.wrote(out, t0);
                continue;
            }
            assert_eq!(m.on_bytes(&whole_stream[fed..fed + n], t0), n);
            if m.admission().is_some() {
                m.admitted(t0);
            }
            fed += n;
        }
        drain(&mut m, t0);
        m.on_eof();
        assert_eq!(m.end(), Some(End::Closed), "sent {sent}");
        let whole = (sent / 5).min(3) as u64;
        assert_eq!(m.answered(), whole, "sent {sent}");
        assert_eq!(m.moved().bytes_received, whole * 5);
        assert_eq!(m.moved().bytes_sent, whole * 7);
        // Nothing more is taken or written.
        assert_eq!(m.wants(), 0);
        assert!(m.out().is_empty());
        assert_eq!(m.deadline(), None);
    }
}

#[test]
fn a_reply_is_owed_only_for_a_whole_request_and_blocks_the_next() {
    let t0 = Instant::now();
    let mut m = StreamAnswerer::new(terms(4, 10, 2, t0), t0);
    let accept = m.out().len();
    m.wrote(accept, t0);
    let start = stream_start(m.t.session, Direction::ClientToServer);
    let two = pattern(start, 0, 8);
    // Both requests at once: only the first is taken.
    assert_eq!(m.wants(), 4);
    assert_eq!(m.on_bytes(&two[..3], t0), 3);
    assert_eq!(m.admission(), None);
    assert!(m.out().is_empty());
    assert_eq!(m.on_bytes(&two[3..], t0), 1);
    assert_eq!(m.admission(), Some(10));
    assert_eq!(m.wants(), 0);
    assert!(m.out().is_empty(), "nothing before the limits let it go");
    m.admitted(t0);
    assert_eq!(
        m.wants(),
        0,
        "nothing more is read while the reply goes out"
    );
    assert_eq!(m.on_bytes(&two[4..], t0), 0);
    assert_eq!(m.out().len(), 10);
    m.wrote(9, t0);
    assert_eq!((m.out().len(), m.wants(), m.answered()), (1, 0, 0));
    m.wrote(1, t0);
    assert_eq!((m.answered(), m.wants()), (1, 4));
}

#[test]
fn a_huge_reply_goes_out_in_bounded_slices() {
    let t0 = Instant::now();
    let reply = 16 << 20;
    let t = terms(1, reply, 1, t0);
    let mut m = StreamAnswerer::new(t.clone(), t0);
    let accept = m.out().len();
    m.wrote(accept, t0);
    let start = stream_start(t.session, Direction::ClientToServer);
    m.on_bytes(&pattern(start, 0, 1), t0);
    m.admitted(t0);
    let rep = stream_start(t.session, Direction::ServerToClient);
    let mut at = 0u64;
    while at < u64::from(reply) {
        let out = m.out();
        assert!(!out.is_empty() && out.len() <= OUT_CHUNK);
        // A window that takes an odd amount each time.
        let n = out.len().min(40_001);
        assert_eq!(out[..n], pattern(rep, at, n)[..], "at {at}");
        m.wrote(n, t0);
        at += n as u64;
    }
    assert_eq!(m.answered(), 1);
    assert!(m.out().is_empty());
    assert_eq!(m.wants(), MAX_GOODBYE, "waiting for the goodbye");
}

#[path = "stream_answer_end_tests.rs"]
mod ending;

proptest! {
    #[test]
    fn any_cuts_and_flips_are_answered_and_counted_exactly(
        size in 1u32..40,
        reply in 0u32..40,
        iterations in 1u64..6,
        up in proptest::collection::vec(1usize..50, 1..6),
        down in proptest::collection::vec(1usize..50, 1..6),
        flips in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let t0 = Instant::now();
        let t = terms(size, reply, iterations, t0);
        let body = size as usize * iterations as usize;
        let mut flips: Vec<usize> = flips.iter().map(|i| i.index(body)).collect();
        // A byte flipped twice is whole again.
        flips.sort_unstable();
        flips.dedup();
        let mut bad: Vec<usize> = flips.iter().map(|f| f / size as usize).collect();
        bad.sort_unstable();
        bad.dedup();
        let mut m = StreamAnswerer::new(t.clone(), t0);
        let mut c = Client::new(t.clone());
        run(&mut m, &mut c, &up, &down, &flips, t0);
        prop_assert_eq!((c.good_replies, c.bad_replies), (iterations, 0));
        let s = c.summary.clone().expect("a summary");
        prop_assert_eq!((s.requests, s.data_errors), (iterations, bad.len() as u64));
        prop_assert_eq!(m.end(), Some(End::Summarised));
        prop_assert!(c.down.is_empty() && c.up.is_empty());
        let moved = m.moved();
        prop_assert_eq!(moved.bytes_received, body as u64);
        prop_assert_eq!(moved.bytes_sent, u64::from(reply) * iterations);
    }
}

#[test]
fn a_huge_reply_goes_out_in_slices_of_a_socket_buffer() {
    // A socket that takes everything gets 64 KiB a write: few system calls
    // for a large reply, and a bounded slice of the pattern.
    let t0 = Instant::now();
    let reply = 1 << 20;
    let t = terms(1, reply, 1, t0);
    let mut m = StreamAnswerer::new(t.clone(), t0);
    let accept = m.out().len();
    m.wrote(accept, t0);
    let start = stream_start(t.session, Direction::ClientToServer);
    m.on_bytes(&pattern(start, 0, 1), t0);
    m.admitted(t0);
    let mut writes = 0;
    loop {
        let n = m.out().len();
        if n == 0 {
            break;
        }
        assert_eq!(n, (64 << 10).min(reply as usize - writes * (64 << 10)));
        m.wrote(n, t0);
        writes += 1;
    }
    assert_eq!((writes, m.answered()), (16, 1));
}

#[test]
fn a_request_before_the_acceptance_is_written_gets_its_whole_reply() {
    // A client that sends before it has read the acceptance: the frame's
    // bytes, written after the reply is owed, are not the reply's.
    let t0 = Instant::now();
    let t = terms(3, 10, 2, t0);
    let start = stream_start(t.session, Direction::ClientToServer);
    let rep = stream_start(t.session, Direction::ServerToClient);
    let mut m = StreamAnswerer::new(t.clone(), t0);
    let accept = m.out().len();
    assert_eq!(m.on_bytes(&pattern(start, 0, 3), t0), 3);
    m.admitted(t0);
    // The acceptance first, in two writes, then the reply.
    m.wrote(2, t0);
    assert_eq!(m.out().len(), accept - 2);
    m.wrote(accept - 2, t0);
    assert_eq!(m.out(), &pattern(rep, 0, 10)[..]);
    assert_eq!(m.answered(), 0);
    m.wrote(10, t0);
    assert_eq!((m.answered(), m.moved().bytes_sent, m.wants()), (1, 10, 3));
}
