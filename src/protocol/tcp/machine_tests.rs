//! Unit tests of `tcp::machine`: a client and a server machine run against
//! each other in memory (the `Pair` harness, as in quinn-proto's tests),
//! through pipes of bounded capacity that can corrupt, cut or add bytes.

use super::*;
use crate::protocol::outcome::ResultKind;
use crate::protocol::proto::{BurstSpec, RateLimit, TcpBurst};
use proptest::prelude::*;
use std::collections::VecDeque;

fn spec(pattern: IoPattern, transfer: u64) -> TcpSpec {
    TcpSpec::plain(pattern, transfer, 1000, 3000)
}

/// One direction of a connection: a byte queue with a capacity (the socket
/// buffers), which may flip one byte, end early, or carry extra bytes.
#[derive(Default)]
struct Pipe {
    q: VecDeque<u8>,
    cap: usize,
    /// Stream offset of the byte to flip.
    flip: Option<u64>,
    /// Close after this many bytes.
    cut: Option<u64>,
    /// Bytes pushed so far.
    pushed: u64,
    closed: bool,
}

impl Pipe {
    fn new(cap: usize) -> Pipe {
        Pipe {
            cap,
            ..Default::default()
        }
    }

    /// Takes what fits; returns how much.
    fn push(&mut self, b: &[u8]) -> usize {
        if self.closed {
            return 0;
        }
        let mut n = b.len().min(self.cap - self.q.len());
        if let Some(c) = self.cut {
            n = n.min((c - self.pushed) as usize);
        }
        for (i, &x) in b[..n].iter().enumerate() {
            let at = self.pushed + i as u64;
            self.q
                .push_back(if self.flip == Some(at) { x ^ 0x5a } else { x });
        }
        self.pushed += n as u64;
        if self.cut == Some(self.pushed) {
            self.closed = true;
        }
        n
    }
}

/// Both ends and the two directions between them, with a simulated clock.
struct Pair {
    ends: [Conn; 2],
    /// pipes[0]: client to server; pipes[1]: server to client.
    pipes: [Pipe; 2],
    now: Instant,
    t0: Instant,
    /// Read calls limited to this many bytes (the socket hands out less).
    read_max: usize,
}

impl Pair {
    fn new(spec: &TcpSpec, buffer: usize, cap: usize) -> Pair {
        let t0 = Instant::now();
        let id = Uuid::from_u128(0x1234_5678_9abc_def0_0fed_cba9_8765_4321);
        Pair {
            ends: [
                Conn::new(spec, id, Role::Client, buffer, t0),
                Conn::new(spec, id, Role::Server, buffer, t0),
            ],
            pipes: [Pipe::new(cap), Pipe::new(cap)],
            now: t0,
            t0,
            read_max: usize::MAX,
        }
    }

    fn clock(&self) -> Now {
        Now {
            mono: self.now,
            real_ns: self.now.duration_since(self.t0).as_nanos() as u64,
        }
    }

    /// Runs both ends until both are done (or nothing moves for good).
    fn run(&mut self) {
        self.run_until(|_| false);
    }

    /// Runs both ends until both are done, nothing moves for good, or
    /// `stop` says so (looked at before each round).
    fn run_until(&mut self, stop: impl Fn(&Pair) -> bool) {
        for _ in 0..10_000_000 {
            if self.ends.iter().all(Conn::is_done) || stop(self) {
                return;
            }
            let mut moved = false;
            let mut wake: Option<Instant> = None;
            for e in 0..2 {
                let now = self.clock();
                let to_send = self.ends[e].has_to_send();
                let offer = self.ends[e].transmit(now);
                // Whatever an end offers to write, it said it had to send
                // (an event loop watches for room to write only then).
                assert!(
                    to_send || offer == Transmit::Nothing,
                    "offered {offer:?} with nothing to send"
                );
                match offer {
                    Transmit::Bytes(_) if self.pipes[e].closed => {
                        self.ends[e].on_error(&io::Error::from(io::ErrorKind::BrokenPipe));
                        moved = true;
                    }
                    Transmit::Bytes(b) => {
                        let b = b.to_vec();
                        let n = self.pipes[e].push(&b);
                        if n > 0 {
                            self.ends[e].on_written(n, now);
                            moved = true;
                        }
                    }
                    Transmit::WaitUntil(t) => wake = Some(wake.map_or(t, |w| w.min(t))),
                    Transmit::Nothing => {}
                }
                while self.ends[e].poll_event().is_some() {}
                let from = 1 - e;
                let want = self.ends[e].want_read().min(self.read_max);
                if want > 0 {
                    let n = want.min(self.pipes[from].q.len());
                    if n > 0 {
                        let data: Vec<u8> = self.pipes[from].q.drain(..n).collect();
                        self.ends[e].on_read(&data, now);
                        moved = true;
                    } else if self.pipes[from].closed {
                        self.ends[e].on_eof();
                        moved = true;
                    }
                }
            }
            if !moved {
                match wake {
                    Some(t) => self.now = t,
                    None => return,
                }
            } else {
                // Time passes as bytes move, so bursts have a duration.
                self.now += Duration::from_micros(10);
            }
        }
        panic!("the pair did not finish");
    }

    fn result(&self, e: usize) -> (ConnResult, FinalReport, Vec<TcpBurst>) {
        let (r, mine, b) = self.ends[e].result().expect("done");
        (r.clone(), mine.clone(), b.to_vec())
    }
}

/// Runs a lone burst sender to the end of its data on a simulated clock
/// that jumps to each burst's time, writing whatever it offers; with
/// `refused_first` each offer is first refused (a write that would block)
/// and asked for again. Returns the events it raised.
fn drive_bursts(sender: &mut Conn, t0: Instant, refused_first: bool) -> Vec<ConnEvent> {
    let mut events = Vec::new();
    let mut now = t0;
    loop {
        let clock = Now {
            mono: now,
            real_ns: 0,
        };
        match sender.transmit(clock) {
            Transmit::Bytes(_) if refused_first => match sender.transmit(clock) {
                Transmit::Bytes(b) => {
                    let n = b.len();
                    sender.on_written(n, clock);
                }
                other => panic!("asked again, it wants {other:?}"),
            },
            Transmit::Bytes(b) => {
                let n = b.len();
                sender.on_written(n, clock);
            }
            Transmit::WaitUntil(t) => now = t,
            Transmit::Nothing => break,
        }
        while let Some(e) = sender.poll_event() {
            events.push(e);
        }
    }
    events
}

/// Writes all that `c` offers, each offer taken whole, on a simulated
/// clock from `t0` that jumps to each time it waits for; once it has sent
/// `deadline_at` bytes its deadline is now. Stops when it offers nothing
/// (its report is out, or it waits for the peer); returns the bytes.
fn write_all(c: &mut Conn, t0: Instant, deadline_at: Option<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut now = t0;
    let mut deadline = deadline_at;
    loop {
        let clock = Now {
            mono: now,
            real_ns: 0,
        };
        if deadline.is_some_and(|n| c.progress().0 >= n) {
            c.set_deadline(now);
            deadline = None;
        }
        match c.transmit(clock) {
            Transmit::Bytes(b) => {
                out.extend_from_slice(b);
                let n = b.len();
                c.on_written(n, clock);
            }
            Transmit::WaitUntil(t) => now = t,
            Transmit::Nothing => return out,
        }
    }
}

#[test]
fn every_pattern_succeeds_with_both_ends_agreeing_on_the_counts() {
    for (pattern, c2s, s2c) in [
        (IoPattern::Push, 100_000, 0),
        (IoPattern::Pull, 0, 100_000),
        (IoPattern::Duplex, 50_000, 50_000),
        // Turns of 1000 up and 3000 down: 25 turns of 4000 bytes.
        (IoPattern::Pushpull, 25_000, 75_000),
    ] {
        let mut p = Pair::new(&spec(pattern, 100_000), 4096, 8192);
        p.run();
        let (rc, client, _) = p.result(0);
        let (rs, server, _) = p.result(1);
        assert_eq!(rc.kind, ResultKind::Success, "{pattern:?}: {rc:?}");
        assert_eq!(rs.kind, ResultKind::Success, "{pattern:?}: {rs:?}");
        assert_eq!((client.sent, client.received), (c2s, s2c), "{pattern:?}");
        assert_eq!((server.sent, server.received), (s2c, c2s), "{pattern:?}");
        assert_eq!(client.verdict, Verdict::Ok);
    }
}

#[test]
fn a_flipped_byte_is_a_data_error_at_its_offset_on_both_ends() {
    for (dir, pattern) in [
        (0, IoPattern::Push),
        (1, IoPattern::Pull),
        (0, IoPattern::Duplex),
    ] {
        let mut p = Pair::new(&spec(pattern, 100_000), 4096, 8192);
        p.pipes[dir].flip = Some(12_345);
        p.run();
        let receiver = 1 - dir;
        let (r, mine, _) = p.result(receiver);
        assert_eq!(
            mine.verdict,
            Verdict::Corrupt { offset: 12_345 },
            "{pattern:?}"
        );
        assert_eq!(r.kind, ResultKind::DataError);
        // The receiver kept draining, so the sender heard about it.
        let (rs, _, _) = p.result(dir);
        assert_eq!(rs.kind, ResultKind::DataError, "{pattern:?}: {rs:?}");
        assert!(rs.detail.starts_with("peer: "), "{rs:?}");
    }
}

#[test]
fn a_stream_cut_short_is_too_few_bytes_for_the_receiver() {
    let mut p = Pair::new(&spec(IoPattern::Push, 100_000), 4096, 8192);
    p.pipes[0].cut = Some(60_000);
    p.run();
    let (r, mine, _) = p.result(1);
    assert_eq!(
        mine.verdict,
        Verdict::TooFew {
            expected: 100_000,
            received: 60_000
        }
    );
    // ctsTraffic counts a short stream as a data error.
    assert_eq!(r.kind, ResultKind::DataError, "{r:?}");
}

/// Writes the client's `planned` bytes of a push into its pipe, then
/// `extra` pattern bytes past the plan, where its report should come.
fn push_past_the_plan(p: &mut Pair, planned: u64, extra: u64) {
    let id = Uuid::from_u128(0x1234_5678_9abc_def0_0fed_cba9_8765_4321);
    let extra = Pattern::get()
        .slice(
            stream_start(id, Direction::ClientToServer),
            planned,
            extra as usize,
        )
        .to_vec();
    let now = p.clock();
    while let Transmit::Bytes(b) = p.ends[0].transmit(now) {
        let b = b.to_vec();
        if p.pipes[0].pushed >= planned {
            break;
        }
        let n = p.pipes[0].push(&b);
        p.ends[0].on_written(n, now);
    }
    assert_eq!(p.pipes[0].pushed, planned);
    p.pipes[0].push(&extra);
}

#[test]
fn extra_bytes_where_the_report_should_be_are_too_many() {
    let mut p = Pair::new(&spec(IoPattern::Push, 10_000), 4096, 1 << 20);
    push_past_the_plan(&mut p, 10_000, 100);
    p.run();
    let (r, mine, _) = p.result(1);
    assert_eq!(mine.verdict, Verdict::TooMany { expected: 10_000 });
    assert_eq!(r.kind, ResultKind::DataError, "{r:?}");
}

#[test]
fn a_failure_or_a_stop_ends_the_connection_at_once() {
    let mut p = Pair::new(&spec(IoPattern::Push, 100_000), 4096, 8192);
    p.ends[0].on_error(&io::Error::from(io::ErrorKind::ConnectionReset));
    assert!(p.ends[0].is_done());
    let (r, mine, _) = p.result(0);
    assert_eq!(r.kind, ResultKind::NetworkError);
    assert!(matches!(mine.verdict, Verdict::NetworkError { .. }));
    // No report is sent after a failure.
    assert_eq!(p.ends[0].transmit(p.clock()), Transmit::Nothing);
    p.ends[1].cancel();
    assert_eq!(p.result(1).0.kind, ResultKind::Cancelled);
    // A timeout is named as such.
    let mut q = Pair::new(&spec(IoPattern::Pull, 1000), 4096, 8192);
    q.ends[0].on_error(&io::Error::from(io::ErrorKind::WouldBlock));
    assert!(
        q.result(0)
            .0
            .detail
            .contains("no progress within the idle timeout")
    );
}

#[test]
fn a_peer_gone_before_its_report_is_a_network_error_naming_it() {
    let mut p = Pair::new(&spec(IoPattern::Push, 10_000), 4096, 1 << 20);
    // The server's direction closes right away: no report ever comes.
    p.pipes[1].cut = Some(0);
    p.pipes[1].closed = true;
    p.run();
    let (r, mine, _) = p.result(0);
    assert_eq!(mine.verdict, Verdict::Ok);
    assert_eq!(r.kind, ResultKind::NetworkError);
    assert_eq!(r.detail, "no result from peer: connection closed by peer");
}

#[test]
fn bursts_start_on_their_period_and_are_timed_by_each_end() {
    let mut s = spec(IoPattern::Push, 4 * 10_000);
    s.burst = Some(BurstSpec {
        size: 10_000,
        period_ms: 150,
    });
    let mut p = Pair::new(&s, 4096, 1 << 20);
    p.run();
    let (rc, _, sent) = p.result(0);
    let (_, _, got) = p.result(1);
    assert_eq!(rc.kind, ResultKind::Success, "{rc:?}");
    assert_eq!(sent.len(), 4);
    assert_eq!(got.len(), 4);
    for k in 0..4 {
        let (s, r) = (&sent[k], &got[k]);
        assert_eq!((s.index, r.index), (k as u64, k as u64));
        assert_eq!((s.side.as_str(), r.side.as_str()), ("send", "recv"));
        assert_eq!((s.bytes, r.bytes), (10_000, 10_000));
        // Due at k × 150 ms on the simulated clock, written at once.
        assert!((s.start_s - 0.15 * k as f64).abs() < 1e-9, "{s:?}");
        // 10,000 bytes in 4096-byte writes: three calls.
        assert_eq!(s.calls, 3, "{s:?}");
        assert_eq!(r.read_sizes.iter().map(|x| x.1).sum::<u64>(), r.calls);
        assert!(r.end_s > r.start_s && r.start_s >= s.start_s, "{r:?}");
        let secs = r.end_s - r.start_s;
        assert!((r.rate_bps - 80_000.0 / secs).abs() < 1e-6 * r.rate_bps);
        assert!((r.duty_pct - 100.0 * secs / 0.15).abs() < 1e-9);
    }
}

#[test]
fn the_last_burst_carries_the_remainder_and_events_name_each_burst() {
    let mut s = spec(IoPattern::Pull, 25_000);
    s.burst = Some(BurstSpec {
        size: 10_000,
        period_ms: 10,
    });
    let t0 = Instant::now();
    let id = Uuid::from_u128(7);
    let mut server = Conn::new(&s, id, Role::Server, 1 << 20, t0);
    let events = drive_bursts(&mut server, t0, false);
    assert_eq!(
        events,
        [
            ConnEvent::BurstSent(0),
            ConnEvent::BurstSent(1),
            ConnEvent::BurstSent(2)
        ]
    );
    server.set_burst_info(2, 1, 10, 20);
    let sizes: Vec<u64> = server
        .bursts
        .as_ref()
        .unwrap()
        .log
        .done
        .iter()
        .map(|b| b.bytes)
        .collect();
    assert_eq!(sizes, [10_000, 10_000, 5_000]);
    let last = &server.bursts.as_ref().unwrap().log.done[2];
    assert_eq!(
        (last.retransmits, last.cwnd, last.rtt_us),
        (Some(1), Some(10), Some(20))
    );
    assert_eq!(server.progress(), (25_000, 0));
}

proptest! {
    /// Whatever the buffer sizes, socket capacities and read sizes, both
    /// ends of every pattern agree and count every byte.
    #[test]
    fn any_buffers_and_capacities_agree(
        pattern in prop_oneof![
            Just(IoPattern::Push), Just(IoPattern::Pull),
            Just(IoPattern::Duplex), Just(IoPattern::Pushpull)
        ],
        transfer in 1u64..50_000,
        buffer in 1usize..10_000,
        cap in 1usize..10_000,
        read_max in 1usize..10_000,
    ) {
        let mut p = Pair::new(&spec(pattern, transfer), buffer, cap);
        p.read_max = read_max;
        p.run();
        let (rc, c, _) = p.result(0);
        let (rs, s, _) = p.result(1);
        prop_assert_eq!(rc.kind, ResultKind::Success);
        prop_assert_eq!(rs.kind, ResultKind::Success);
        prop_assert_eq!(c.sent, s.received);
        prop_assert_eq!(c.received, s.sent);
        prop_assert_eq!(c.sent + c.received, transfer);
    }
}

#[path = "machine_rate_tests.rs"]
mod rates;

#[test]
fn a_transfer_range_gives_each_connection_its_own_size_both_ends_agree_on() {
    let mut s = spec(IoPattern::Push, 1000);
    s.transfer_max = Some(1999);
    let sizes: Vec<u64> = (0..200u128)
        .map(|i| s.transfer_of(Uuid::from_u128(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i)))
        .collect();
    assert!(sizes.iter().all(|&n| (1000..=1999).contains(&n)));
    let distinct: std::collections::BTreeSet<_> = sizes.iter().collect();
    assert!(distinct.len() > 100, "{}", distinct.len());
    // The ends of the range are reachable.
    assert_eq!(s.transfer_of(Uuid::from_u128(0)), 1000);
    assert_eq!(s.transfer_of(Uuid::from_u128(999)), 1999);
    // No range, or a degenerate one: the one size.
    s.transfer_max = Some(1000);
    assert_eq!(s.transfer_of(Uuid::from_u128(5)), 1000);
    s.transfer_max = None;
    assert_eq!(s.transfer_of(Uuid::from_u128(5)), 1000);
    assert_eq!(s.transfer_hi(), 1000);
    // A pair moves exactly its connection's size.
    s.transfer_max = Some(5000);
    let mut p = Pair::new(&s, 512, 4096);
    p.run();
    let (rc, client, _) = p.result(0);
    let (_, server, _) = p.result(1);
    let want = s.transfer_of(Uuid::from_u128(0x1234_5678_9abc_def0_0fed_cba9_8765_4321));
    assert_eq!(rc.kind, ResultKind::Success);
    assert_eq!((client.sent, server.received), (want, want));
}

#[path = "machine_report_tests.rs"]
mod reports;

#[path = "machine_time_tests.rs"]
mod time_bounded;

#[path = "machine_read_tests.rs"]
mod reads;

#[path = "machine_error_tests.rs"]
mod errors;

#[test]
fn only_the_frame_lead_with_a_readable_header_can_end_a_chunk() {
    // A chunk's first bytes that are not the pattern's are the end marker
    // only if they begin like a frame and, once a whole header is there,
    // it parses; anything else is corrupt data.
    let mut good = [0u8; proto::HEADER_LEN];
    good[..2].copy_from_slice(&proto::MAGIC);
    good[2] = proto::FRAME_VERSION;
    assert!(super::starts_a_frame(&good));
    assert!(
        super::starts_a_frame(&good[..2]),
        "a short head that may still be a frame"
    );
    assert!(!super::starts_a_frame(b"NQ"), "a short head that cannot be");
    assert!(!super::starts_a_frame(&[0u8; 3]));
    let mut oversized = good;
    oversized[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(
        !super::starts_a_frame(&oversized),
        "the lead, but no header"
    );
}

#[test]
fn a_burst_whose_first_write_would_block_is_opened_once() {
    // The socket takes nothing at a burst's start (the driver asks again
    // once it is writable): still one record per burst.
    let mut s = spec(IoPattern::Pull, 25_000);
    s.burst = Some(BurstSpec {
        size: 10_000,
        period_ms: 10,
    });
    let t0 = Instant::now();
    let mut server = Conn::new(&s, Uuid::from_u128(7), Role::Server, 1 << 20, t0);
    drive_bursts(&mut server, t0, true);
    let log = &server.bursts.as_ref().unwrap().log.done;
    let sizes: Vec<(u64, u64)> = log.iter().map(|b| (b.index, b.bytes)).collect();
    assert_eq!(sizes, [(0, 10_000), (1, 10_000), (2, 5_000)]);
}

#[test]
fn an_end_that_gives_up_reports_the_verdict_it_gave_up_with() {
    // A server limit reached mid-transfer: this end's report carries the
    // limit's verdict, not "cancelled", and the connection is over.
    let t0 = Instant::now();
    let mut c = Conn::new(
        &spec(IoPattern::Push, 1 << 20),
        Uuid::from_u128(9),
        Role::Client,
        1 << 16,
        t0,
    );
    let v = Verdict::NetworkError {
        detail: "limit reached".into(),
    };
    c.abort(v.clone());
    let (_, mine, _) = c.into_result();
    assert_eq!(mine.verdict, v);
}
