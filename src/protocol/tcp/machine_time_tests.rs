//! Unit tests of time-bounded connections (`-t`): the two machines of a
//! [`Pair`] on a simulated clock, each sender given a deadline, end their
//! data at a chunk boundary with the end marker and agree on what moved.

use super::*;

/// Each read and write moves at most this much, and the pipes hold a
/// multiple of it: every count stays a multiple of it, so a test can stop
/// the clock exactly at a chunk boundary or inside a chunk.
const BUF: usize = 16 << 10;
const CAP: usize = 64 << 10;
const C2S: usize = 0;

fn bounded(pattern: IoPattern, transfer: u64, verify: VerifyLevel) -> TcpSpec {
    TcpSpec {
        time_bound_ms: 1000,
        verify,
        ..TcpSpec::plain(pattern, transfer, 1000, 1000)
    }
}

fn pair_for(spec: &TcpSpec, id: Uuid) -> Pair {
    let t0 = Instant::now();
    Pair {
        ends: [
            Conn::new(spec, id, Role::Client, BUF, t0),
            Conn::new(spec, id, Role::Server, BUF, t0),
        ],
        pipes: [Pipe::new(CAP), Pipe::new(CAP)],
        now: t0,
        t0,
        read_max: usize::MAX,
    }
}

fn pair(spec: &TcpSpec) -> Pair {
    pair_for(
        spec,
        Uuid::from_u128(0x1234_5678_9abc_def0_0fed_cba9_8765_4321),
    )
}

/// Bytes end `e` has sent.
fn sent(p: &Pair, e: usize) -> u64 {
    p.ends[e].progress().0
}

/// Runs until end `e` has sent at least `bytes` and `also` holds, then
/// gives it its deadline now; returns what it had sent then.
fn deadline_after(p: &mut Pair, e: usize, bytes: u64, also: fn(u64) -> bool) -> u64 {
    p.run_until(|p| sent(p, e) >= bytes && also(sent(p, e)));
    let at = sent(p, e);
    assert!(
        !p.ends[e].is_done(),
        "the transfer ended before the deadline"
    );
    let now = p.now;
    p.ends[e].set_deadline(now);
    at
}

/// Both ends succeeded and agree on each direction's count; returns
/// (client to server, server to client).
fn agreed(p: &Pair) -> (u64, u64) {
    let (rc, client, _) = p.result(0);
    let (rs, server, _) = p.result(1);
    assert_eq!(rc.kind, ResultKind::Success, "client: {rc:?}");
    assert_eq!(rs.kind, ResultKind::Success, "server: {rs:?}");
    assert_eq!((client.verdict, server.verdict), (Verdict::Ok, Verdict::Ok));
    assert_eq!(client.sent, server.received);
    assert_eq!(client.received, server.sent);
    (client.sent, client.received)
}

#[test]
fn chunks_are_a_burst_a_rate_period_or_128k_and_hold_a_frame_header() {
    let id = Uuid::from_u128(7);
    let plain = bounded(IoPattern::Push, 1 << 30, VerifyLevel::Data);
    assert_eq!(chunk_of(&plain, id), CHUNK);
    assert_eq!(CHUNK, 128 << 10);
    for pattern in [IoPattern::Pull, IoPattern::Duplex] {
        assert_eq!(
            chunk_of(
                &TcpSpec {
                    pattern,
                    ..plain.clone()
                },
                id
            ),
            CHUNK
        );
    }
    // Not time-bounded: no chunks.
    let untimed = TcpSpec {
        time_bound_ms: 0,
        ..plain.clone()
    };
    assert_eq!(chunk_of(&untimed, id), 0);
    let pushpull = TcpSpec {
        pattern: IoPattern::Pushpull,
        ..plain.clone()
    };
    assert_eq!(chunk_of(&pushpull, id), 0);
    let burst = |size| TcpSpec {
        burst: Some(BurstSpec {
            size,
            period_ms: 10,
        }),
        ..plain.clone()
    };
    assert_eq!(chunk_of(&burst(10_000), id), 10_000);
    assert_eq!(chunk_of(&burst(1 << 20), id), 1 << 20);
    assert_eq!(chunk_of(&burst(8), id), 8);
    // Smaller bursts: whole bursts of at least a frame header.
    assert_eq!(chunk_of(&burst(3), id), 9);
    assert_eq!(chunk_of(&burst(1), id), 8);
    let rate = |bps, bps_max| TcpSpec {
        rate: Some(RateLimit {
            bps,
            period_ms: 100,
            bps_max,
        }),
        ..plain.clone()
    };
    // 8 Mbit/s: 100,000 bytes a period.
    assert_eq!(chunk_of(&rate(8_000_000, None), id), 100_000);
    assert_eq!(chunk_of(&rate(100_000_000_000, None), id), CHUNK);
    // 80 bit/s: one byte a period.
    assert_eq!(chunk_of(&rate(80, None), id), 8);
    assert_eq!(chunk_of(&rate(240, None), id), 9);
    // A range: the connection's own rate, which the peer derives too.
    let ranged = rate(8_000_000, Some(16_000_000));
    let own = RateLimit::for_connection(&ranged.rate.unwrap(), id).bytes_per_period();
    assert_eq!(chunk_of(&ranged, id), own);
    // Bursts win over the rate.
    let both = TcpSpec {
        burst: burst(4000).burst,
        ..rate(8_000_000, None)
    };
    assert_eq!(chunk_of(&both, id), 4000);
}

#[test]
fn a_deadline_inside_a_chunk_ends_the_data_at_its_end_every_direction_and_verify_level() {
    for verify in [VerifyLevel::Data, VerifyLevel::Connection] {
        for (pattern, sender) in [(IoPattern::Push, 0), (IoPattern::Pull, 1)] {
            let s = bounded(pattern, 1 << 30, verify);
            let mut p = pair(&s);
            let at = deadline_after(&mut p, sender, CHUNK + 1, |n| n % CHUNK != 0);
            p.run();
            let moved = agreed(&p);
            let expected = at.next_multiple_of(CHUNK);
            assert_eq!(expected, 2 * CHUNK, "{pattern:?}");
            let want = if sender == 0 {
                (expected, 0)
            } else {
                (0, expected)
            };
            assert_eq!(moved, want, "{pattern:?} {verify:?}");
        }
    }
}

#[test]
fn a_deadline_at_a_chunk_boundary_ends_the_data_there() {
    for (pattern, sender) in [(IoPattern::Push, 0), (IoPattern::Pull, 1)] {
        let mut p = pair(&bounded(pattern, 1 << 30, VerifyLevel::Data));
        let at = deadline_after(&mut p, sender, 3 * CHUNK, |n| n % CHUNK == 0);
        assert_eq!(at, 3 * CHUNK);
        p.run();
        let moved = agreed(&p);
        assert_eq!(moved.0 + moved.1, 3 * CHUNK, "{pattern:?}");
    }
}

#[test]
fn a_deadline_before_the_first_byte_is_an_empty_success() {
    for pattern in [IoPattern::Push, IoPattern::Pull, IoPattern::Duplex] {
        let mut p = pair(&bounded(pattern, 1 << 30, VerifyLevel::Data));
        let t0 = p.t0;
        for e in &mut p.ends {
            e.set_deadline(t0);
        }
        p.run();
        assert_eq!(agreed(&p), (0, 0), "{pattern:?}");
    }
}

#[test]
fn a_transfer_that_ends_before_the_deadline_ends_as_planned() {
    let mut p = pair(&bounded(
        IoPattern::Duplex,
        5 * CHUNK + 3,
        VerifyLevel::Data,
    ));
    let late = p.t0 + Duration::from_secs(3600);
    for e in &mut p.ends {
        e.set_deadline(late);
    }
    p.run();
    assert_eq!(agreed(&p), (5 * CHUNK / 2 + 2, 5 * CHUNK / 2 + 1));
}

#[test]
fn duplex_directions_end_each_at_its_own_senders_deadline() {
    // The client's data ends inside its second chunk; the server's runs
    // to the plan's end, then its fourth chunk; both agree each time.
    let s = bounded(IoPattern::Duplex, 8 * CHUNK, VerifyLevel::Data);
    let mut p = pair(&s);
    deadline_after(&mut p, 0, CHUNK + BUF as u64, |_| true);
    p.run();
    assert_eq!(agreed(&p), (2 * CHUNK, 4 * CHUNK));

    let mut p = pair(&s);
    deadline_after(&mut p, 1, CHUNK + BUF as u64, |_| true);
    p.run();
    assert_eq!(agreed(&p), (4 * CHUNK, 2 * CHUNK));

    // Both, at different chunks.
    let mut p = pair(&bounded(
        IoPattern::Duplex,
        1 << 30,
        VerifyLevel::Connection,
    ));
    deadline_after(&mut p, 0, 2 * CHUNK + 1, |_| true);
    deadline_after(&mut p, 1, 2 * CHUNK + BUF as u64 + 1, |_| true);
    p.run();
    let (up, down) = agreed(&p);
    assert!(up >= 3 * CHUNK && up % CHUNK == 0, "{up}");
    assert!(down >= 3 * CHUNK && down % CHUNK == 0, "{down}");
}

#[test]
fn the_end_marker_is_found_when_it_comes_in_pieces() {
    // Reads of 5 bytes: a chunk's first 8 bytes take two reads.
    let mut p = pair(&bounded(IoPattern::Push, 1 << 30, VerifyLevel::Data));
    p.read_max = 5;
    deadline_after(&mut p, 0, CHUNK + 1, |_| true);
    p.run();
    assert_eq!(agreed(&p), (2 * CHUNK, 0));
}

#[test]
fn a_marker_that_starts_like_the_pattern_gives_way_to_one_more_chunk() {
    // A connection whose pattern has the marker's first byte ('N') just
    // past the first chunk, with one byte left there: the receiver would
    // look at that one byte only, and take the marker's first byte for
    // data. The sender sends the last byte instead.
    let marker = proto::encode(&Message::DataEnd);
    let id = (0u128..100_000)
        .map(Uuid::from_u128)
        .find(|&id| {
            let start = stream_start(id, Direction::ClientToServer);
            Pattern::get().slice(start, CHUNK, 1)[0] == marker[0]
        })
        .expect("a connection whose pattern collides");
    let mut p = pair_for(&bounded(IoPattern::Push, CHUNK + 1, VerifyLevel::Data), id);
    deadline_after(&mut p, 0, BUF as u64, |_| true);
    p.run();
    assert_eq!(agreed(&p), (CHUNK + 1, 0));
    // The same connection with two bytes left there: no collision, and
    // the data ends at the chunk.
    let two = Pattern::get().slice(stream_start(id, Direction::ClientToServer), CHUNK, 2);
    assert_ne!(two, &marker[..2]);
    let mut p = pair_for(&bounded(IoPattern::Push, CHUNK + 2, VerifyLevel::Data), id);
    deadline_after(&mut p, 0, BUF as u64, |_| true);
    p.run();
    assert_eq!(agreed(&p), (CHUNK, 0));
}

#[test]
fn corrupt_bytes_at_a_chunk_start_are_corrupt_data_even_when_only_counts_are_verified() {
    for verify in [VerifyLevel::Data, VerifyLevel::Connection] {
        for offset in [CHUNK, CHUNK + 5, 3 * CHUNK] {
            let mut p = pair(&bounded(IoPattern::Push, 4 * CHUNK, verify));
            p.pipes[C2S].flip = Some(offset);
            p.run();
            let (r, mine, _) = p.result(1);
            assert_eq!(
                mine.verdict,
                Verdict::Corrupt { offset },
                "{verify:?} {offset}"
            );
            assert_eq!(r.kind, ResultKind::DataError);
            // The receiver drained the rest, so the sender heard of it.
            assert_eq!(mine.received, 4 * CHUNK);
            let (rs, _, _) = p.result(0);
            assert_eq!(rs.kind, ResultKind::DataError, "{rs:?}");
        }
    }
    // Past a chunk's first bytes only full verification looks.
    let mut p = pair(&bounded(
        IoPattern::Push,
        4 * CHUNK,
        VerifyLevel::Connection,
    ));
    p.pipes[C2S].flip = Some(CHUNK + 8);
    p.run();
    assert_eq!(agreed(&p), (4 * CHUNK, 0));
}

#[test]
fn a_corrupt_end_marker_is_corrupt_data_at_its_offset() {
    // A marker whose header is garbled is taken for corrupt data (the
    // receiver then waits for more, until its idle timeout); one whose
    // payload is garbled is a frame that is not the marker. Either way
    // the data went wrong at the chunk's start, and the server says so.
    for at in [0, 2, 12] {
        let mut p = pair(&bounded(IoPattern::Push, 1 << 30, VerifyLevel::Data));
        deadline_after(&mut p, 0, CHUNK + 1, |_| true);
        p.pipes[C2S].flip = Some(2 * CHUNK + at);
        p.run();
        if !p.ends[1].is_done() {
            p.ends[1].on_error(&io::Error::from(io::ErrorKind::TimedOut));
        }
        let Pair {
            ends: [_, server], ..
        } = p;
        let (r, mine, _) = server.into_result();
        let offset = 2 * CHUNK;
        assert_eq!(mine.verdict, Verdict::Corrupt { offset }, "flip at {at}");
        assert_eq!(r.kind, ResultKind::DataError, "flip at {at}");
    }
}

#[test]
fn bursts_end_whole_at_the_deadline_with_both_ends_accounts() {
    // Ten bursts of 10,000 bytes 10 ms apart; the deadline at 35 ms ends
    // the data after the fourth, without waiting for the fifth's time.
    let s = TcpSpec {
        burst: Some(BurstSpec {
            size: 10_000,
            period_ms: 10,
        }),
        ..bounded(IoPattern::Pull, 100_000, VerifyLevel::Data)
    };
    let mut p = pair(&s);
    let at = p.t0 + Duration::from_millis(35);
    p.ends[1].set_deadline(at);
    p.run();
    assert_eq!(agreed(&p), (0, 40_000));
    assert!(
        p.now < p.t0 + Duration::from_millis(40),
        "waited for the fifth burst"
    );
    let (_, _, recv) = p.result(0);
    let (_, _, send) = p.result(1);
    assert_eq!(recv.len(), 4);
    assert_eq!(send.len(), 4);
    assert!(recv.iter().chain(&send).all(|b| b.bytes == 10_000));
}

#[test]
fn a_rate_limited_sender_ends_at_the_end_of_a_periods_bytes() {
    // 8 Mbit/s in 100 ms periods: chunks of 100,000 bytes.
    let s = TcpSpec {
        rate: Some(RateLimit {
            bps: 8_000_000,
            period_ms: 100,
            bps_max: None,
        }),
        ..bounded(IoPattern::Push, 1 << 30, VerifyLevel::Data)
    };
    let mut p = pair(&s);
    let at = p.t0 + Duration::from_millis(250);
    p.ends[0].set_deadline(at);
    p.run();
    assert_eq!(agreed(&p), (300_000, 0));
    assert!(
        p.now < p.t0 + Duration::from_millis(300),
        "{:?}",
        p.now - p.t0
    );
}

#[test]
fn without_a_time_bound_a_deadline_changes_nothing() {
    let mut p = pair(&spec(IoPattern::Push, 3 * CHUNK));
    let t0 = p.t0;
    p.ends[0].set_deadline(t0);
    p.run();
    assert_eq!(agreed(&p), (3 * CHUNK, 0));
}

#[test]
fn pushpull_is_never_time_bounded() {
    let mut p = pair(&bounded(IoPattern::Pushpull, 3 * CHUNK, VerifyLevel::Data));
    let t0 = p.t0;
    for e in &mut p.ends {
        e.set_deadline(t0);
    }
    p.run();
    let (up, down) = agreed(&p);
    assert_eq!(up + down, 3 * CHUNK);
}

#[test]
fn bursts_smaller_than_a_frame_header_still_end_at_a_chunk() {
    // Bursts of 3 bytes every millisecond: a chunk is three of them, and a
    // chunk's first 8 bytes span three bursts.
    let s = TcpSpec {
        burst: Some(BurstSpec {
            size: 3,
            period_ms: 1,
        }),
        ..bounded(IoPattern::Pull, 300, VerifyLevel::Data)
    };
    let mut p = pair(&s);
    let at = p.t0 + Duration::from_micros(10_500);
    p.ends[1].set_deadline(at);
    p.run();
    // Bursts at 0..=11 ms: the twelfth ends the fourth chunk.
    assert_eq!(agreed(&p), (0, 36));
    let (_, _, recv) = p.result(0);
    assert_eq!(recv.len(), 12);
}

#[test]
fn between_bursts_each_end_is_quiet_until_the_next_burst_starts() {
    // Three bursts of 10,000 bytes a second apart, the server sending.
    let s = TcpSpec {
        burst: Some(BurstSpec {
            size: 10_000,
            period_ms: 1000,
        }),
        ..TcpSpec::plain(IoPattern::Pull, 30_000, 0, 0)
    };
    let sec = Duration::from_secs(1);
    let mut p = pair(&s);
    p.read_max = 4000;
    // Nothing moved yet: the first burst is due at once.
    assert_eq!(p.ends[0].quiet_until(), Some(p.t0));
    assert_eq!(p.ends[1].quiet_until(), Some(p.t0));
    // The first burst is in: both ends wait for the second's time.
    p.run_until(|p| p.ends[0].progress().1 >= 10_000);
    assert_eq!(p.ends[0].progress().1, 10_000);
    assert_eq!(p.ends[1].progress().0, 10_000);
    assert_eq!(p.ends[0].quiet_until(), Some(p.t0 + sec));
    assert_eq!(p.ends[1].quiet_until(), Some(p.t0 + sec));
    // Inside the second burst, the receiver is not between bursts.
    p.run_until(|p| p.ends[0].progress().1 > 10_000);
    assert_eq!(p.ends[0].progress().1, 14_000);
    assert_eq!(p.ends[0].quiet_until(), None);
    // After the last burst nothing is scheduled: no excuse for silence.
    p.run_until(|p| p.ends[0].progress().1 >= 30_000);
    assert_eq!(p.ends[0].quiet_until(), None);
    assert_eq!(p.ends[1].quiet_until(), None);
    p.run();
    assert_eq!(agreed(&p), (0, 30_000));
    assert_eq!(p.ends[0].quiet_until(), None);
    // Without bursts, never quiet.
    let plain = pair(&TcpSpec::plain(IoPattern::Pull, 30_000, 0, 0));
    assert_eq!(plain.ends[0].quiet_until(), None);
}
