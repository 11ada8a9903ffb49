//! Unit tests of `tcp::machine`: a client and a server machine run against
//! each other in memory (the `Pair` harness, as in quinn-proto's tests),
//! through pipes of bounded capacity that can corrupt, cut or add bytes.

use super::*;
use crate::protocol::outcome::ResultKind;
use crate::protocol::proto::{BurstSpec, RateLimit};
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

#[test]
fn a_rate_limit_allows_one_periods_bytes_per_period() {
    // 8 Mbit/s in 100 ms periods: 100,000 bytes each.
    let mut s = spec(IoPattern::Push, 1_000_000);
    s.rate = Some(RateLimit {
        bps: 8_000_000,
        period_ms: 100,
        bps_max: None,
    });
    let t0 = Instant::now();
    let mut c = Conn::new(&s, Uuid::nil(), Role::Client, 64 * 1024, t0);
    let at = |ms: u64| Now {
        mono: t0 + Duration::from_millis(ms),
        real_ns: 0,
    };
    // Writes in one period stop at its allowance, never more.
    let mut sent = 0;
    while let Transmit::Bytes(b) = c.transmit(at(0)) {
        let n = b.len();
        c.on_written(n, at(0));
        sent += n;
    }
    assert_eq!(sent, 100_000);
    assert_eq!(
        c.transmit(at(0)),
        Transmit::WaitUntil(t0 + Duration::from_millis(100))
    );
    assert_eq!(
        c.transmit(at(99)),
        Transmit::WaitUntil(t0 + Duration::from_millis(100))
    );
    // A late wake-up may catch up to the cumulative allowance (the average
    // stays the rate), but no further.
    while let Transmit::Bytes(b) = c.transmit(at(350)) {
        let n = b.len();
        c.on_written(n, at(350));
        sent += n;
    }
    assert_eq!(sent, 400_000);
    assert_eq!(
        c.transmit(at(350)),
        Transmit::WaitUntil(t0 + Duration::from_millis(400))
    );
}

#[test]
fn a_rate_limited_pair_takes_the_time_the_rate_implies_and_agrees() {
    // 80 kbit/s in 10 ms periods: 100 bytes each; 10,000 bytes pulled
    // (the server sends) take 100 periods, the last one begun at 990 ms.
    let mut s = spec(IoPattern::Pull, 10_000);
    s.rate = Some(RateLimit {
        bps: 80_000,
        period_ms: 10,
        bps_max: None,
    });
    let mut p = Pair::new(&s, 4096, 8192);
    p.run();
    let (rc, client, _) = p.result(0);
    assert_eq!(rc.kind, ResultKind::Success, "{rc:?}");
    assert_eq!(client.received, 10_000);
    let took = p.now.duration_since(p.t0);
    assert!(
        took >= Duration::from_millis(990) && took < Duration::from_millis(1010),
        "{took:?}"
    );
}

#[test]
fn a_rate_range_gives_each_connection_its_own_rate_both_ends_keep() {
    let range = RateLimit {
        bps: 1_000_000,
        period_ms: 10,
        bps_max: Some(1_000_999),
    };
    let rates: Vec<u64> = (0..200u128)
        .map(|i| Uuid::from_u128(i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)))
        .map(|id| range.for_connection(id))
        .inspect(|r| assert_eq!((r.period_ms, r.bps_max), (10, None)))
        .map(|r| r.bps)
        .collect();
    assert!(rates.iter().all(|b| (1_000_000..=1_000_999).contains(b)));
    let distinct: std::collections::BTreeSet<_> = rates.iter().collect();
    assert!(distinct.len() > 100, "{}", distinct.len());
    // The ends are reachable, from the ID's upper half.
    assert_eq!(range.for_connection(Uuid::from_u128(0)).bps, 1_000_000);
    assert_eq!(
        range.for_connection(Uuid::from_u128(999 << 64)).bps,
        1_000_999
    );
    // The rate comes from the upper half alone: ID 999 (the top of a
    // 1000-wide size range) takes the bottom rate.
    assert_eq!(range.for_connection(Uuid::from_u128(999)).bps, 1_000_000);
    // No range, or one of one rate: that rate.
    for hi in [None, Some(1_000_000)] {
        let one = RateLimit {
            bps_max: hi,
            ..range
        };
        assert_eq!(one.for_connection(Uuid::from_u128(7 << 64)).bps, 1_000_000);
    }
    // In a pair, the sender (the server, pulling) keeps its connection's
    // rate: 100 bytes per 10 ms period at the range's floor, 200 at its top.
    let mut s = spec(IoPattern::Pull, 10_000);
    let id = Uuid::from_u128(0x1234_5678_9abc_def0_0fed_cba9_8765_4321);
    for (lo, hi) in [(80_000, 80_000), (80_000, 160_000)] {
        s.rate = Some(RateLimit {
            bps: lo,
            period_ms: 10,
            bps_max: Some(hi),
        });
        let bps = s.rate.unwrap().for_connection(id).bps;
        assert!((lo..=hi).contains(&bps));
        let mut p = Pair::new(&s, 4096, 8192);
        p.run();
        let (rc, client, _) = p.result(0);
        assert_eq!((rc.kind, client.received), (ResultKind::Success, 10_000));
        let per_period = bps * 10 / 8000;
        let periods = 10_000u64.div_ceil(per_period);
        let took = p.now.duration_since(p.t0).as_millis() as u64;
        assert!(
            took >= (periods - 1) * 10 && took < periods * 10 + 10,
            "{bps} bit/s: {took} ms"
        );
    }
}

#[test]
fn rate_limits_round_and_validate() {
    let r = |bps, period_ms| RateLimit {
        bps,
        period_ms,
        bps_max: None,
    };
    assert_eq!(r(8_000_000, 100).bytes_per_period(), 100_000);
    assert_eq!(r(1, 1).bytes_per_period(), 1);
    assert_eq!(r(u64::MAX, 60_000).bytes_per_period(), u64::MAX);
    assert!(r(1, 1).is_valid());
    assert!(r(1, 60_000).is_valid());
    assert!(!r(0, 100).is_valid());
    assert!(!r(1, 0).is_valid());
    assert!(!r(1, 60_001).is_valid());
    let range = |lo, hi| RateLimit {
        bps_max: Some(hi),
        ..r(lo, 100)
    };
    assert!(range(5, 5).is_valid());
    assert!(range(5, 6).is_valid());
    assert!(!range(6, 5).is_valid());
}

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

#[test]
fn an_ends_tcp_info_rides_in_its_report_to_the_peer() {
    let mut p = Pair::new(&spec(IoPattern::Pull, 10_000), 4096, 8192);
    let info = crate::protocol::proto::TcpInfoSummary {
        retransmits: 7,
        snd_mss: 1448,
        ..Default::default()
    };
    // Run until the server's report is ready, add its TCP_INFO then, as
    // the I/O layer does, and finish.
    for _ in 0..10_000 {
        if p.ends[1].take_info_request() {
            p.ends[1].set_final_tcp_info(info);
            break;
        }
        let now = p.clock();
        if let Transmit::Bytes(b) = p.ends[1].transmit(now) {
            let b = b.to_vec();
            let n = p.pipes[1].push(&b);
            p.ends[1].on_written(n, now);
        }
        let want = p.ends[0].want_read().min(p.pipes[1].q.len());
        if want > 0 {
            let d: Vec<u8> = p.pipes[1].q.drain(..want).collect();
            p.ends[0].on_read(&d, now);
        }
    }
    // A second request is not made, and a late setting changes nothing.
    assert!(!p.ends[1].take_info_request());
    p.run();
    assert_eq!(p.result(0).0.kind, ResultKind::Success);
    assert_eq!(p.ends[0].peer_tcp_info(), Some(info));
    assert_eq!(p.result(1).1.tcp_info, Some(info));
    // The client set none: the server learns none.
    assert_eq!(p.ends[1].peer_tcp_info(), None);
}

#[test]
fn a_clients_report_goes_without_its_tcp_info() {
    let mut p = Pair::new(&spec(IoPattern::Push, 10_000), 4096, 8192);
    let info = crate::protocol::proto::TcpInfoSummary {
        retransmits: 3,
        ..Default::default()
    };
    // Its report is ready, none of it written: offered its TCP_INFO then,
    // as the I/O layer does.
    p.run_until(|p| p.ends[0].info_wanted);
    assert!(p.ends[0].take_info_request());
    p.ends[0].set_final_tcp_info(info);
    p.run();
    assert_eq!(p.result(0).0.kind, ResultKind::Success);
    // The client keeps its reading (its I/O layer does); its report and
    // so the server know none.
    assert_eq!(p.result(0).1.tcp_info, None);
    assert_eq!(p.ends[1].peer_tcp_info(), None);
}

#[test]
fn a_server_asked_for_the_fixed_layout_reports_in_it_and_its_client_answers_so() {
    for asked in [false, true] {
        let mut p = Pair::new(&spec(IoPattern::Pushpull, 4000), 4096, 8192);
        p.ends[1].set_compact(asked);
        let info = crate::protocol::proto::TcpInfoSummary {
            rtt_us: 9,
            ..Default::default()
        };
        p.run_until(|p| p.ends[1].info_wanted);
        assert!(p.ends[1].take_info_request());
        p.ends[1].set_final_tcp_info(info);
        // The server's report, as it goes out.
        let Transmit::Bytes(b) = p.ends[1].transmit(p.clock()) else {
            panic!("no report")
        };
        assert_eq!(proto::compact::is_compact(&b[HEADER_LEN..]), asked, "{b:?}");
        p.run();
        assert_eq!(p.result(0).0.kind, ResultKind::Success, "asked {asked}");
        assert_eq!(p.ends[0].peer_tcp_info(), Some(info));
        // The client answers in the layout the server wrote.
        assert_eq!(p.ends[0].compact, asked);
    }
}

#[test]
fn the_report_counts_as_sent_once_its_last_byte_is_written() {
    let t = Instant::now();
    let now = Now {
        mono: t,
        real_ns: 0,
    };
    let mut s = spec(IoPattern::Push, 10);
    s.push_bytes = 10;
    let id = Uuid::from_u128(3);
    let mut server = Conn::new(&s, id, Role::Server, 64, t);
    let data = Pattern::get()
        .slice(stream_start(id, Direction::ClientToServer), 0, 10)
        .to_vec();
    server.on_read(&data, now);
    let len = match server.transmit(now) {
        Transmit::Bytes(b) => b.len(),
        other => panic!("{other:?}"),
    };
    server.on_written(len - 1, now);
    assert!(!server.report_sent());
    server.on_written(1, now);
    assert!(server.report_sent());
    assert!(!server.is_done(), "the client's report is still to come");
}

#[test]
fn a_crr_client_has_nothing_to_send_between_its_request_and_its_report() {
    // crr: a 64-byte request, a 2-byte reply.
    let mut s = spec(IoPattern::Pushpull, 66);
    (s.push_bytes, s.pull_bytes) = (64, 2);
    let mut p = Pair::new(&s, 64, 1 << 16);
    assert!(p.ends[0].has_to_send(), "the request");
    assert!(!p.ends[1].has_to_send(), "the server waits for it");
    p.run_until(|p| p.pipes[0].pushed == 64);
    assert!(!p.ends[0].has_to_send(), "the request is out: it waits");
    p.run_until(|p| p.ends[0].progress().1 == 2);
    assert!(p.ends[0].has_to_send(), "the reply is in: its report");
    p.run();
    assert!(!p.ends[0].has_to_send() && !p.ends[1].has_to_send());
    assert_eq!(p.result(0).0.kind, ResultKind::Success);
}

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
