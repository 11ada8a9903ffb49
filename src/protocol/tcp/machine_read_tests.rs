//! Unit tests of how much a receiving machine reads at a time: never past
//! the plan's end, a burst's end or a chunk's start, even with bytes held
//! from a short read at a chunk's start; what count-only verification lets
//! the I/O layer drop unread; and the receiver's own account of bursts.

use super::*;

const ID: u128 = 0x1234_5678_9abc_def0_0fed_cba9_8765_4321;

/// What the sending end of `spec`'s connection writes when each offer is
/// taken whole: its data, the end marker if its deadline (reached once
/// `deadline_at` bytes are out) ended the data early, and its report.
fn sender_stream(spec: &TcpSpec, sender: Role, deadline_at: Option<u64>) -> Vec<u8> {
    let t0 = Instant::now();
    let mut c = Conn::new(spec, Uuid::from_u128(ID), sender, 16 << 10, t0);
    write_all(&mut c, t0, deadline_at)
}

/// A lone receiver of `spec`'s connection with a `buffer`-byte buffer,
/// handed `stream` in reads of at most what it asks for and at most
/// `reads[i]` bytes for its i-th read (the last size repeating), and its
/// own writes taken whole. With `drop`, what [`Conn::skippable`] allows is
/// dropped unread and reads take [`Conn::read_room`], as the driver does.
/// Once `stream` is used up, a read finds the peer's close.
fn receive(
    spec: &TcpSpec,
    receiver: Role,
    buffer: usize,
    stream: &[u8],
    reads: &[usize],
    drop: bool,
) -> Conn {
    let t0 = Instant::now();
    let mut c = Conn::new(spec, Uuid::from_u128(ID), receiver, buffer, t0);
    let (mut at, mut i, mut now) = (0, 0, t0);
    for _ in 0..1_000_000 {
        if c.is_done() {
            return c;
        }
        let clock = Now {
            mono: now,
            real_ns: 0,
        };
        now += Duration::from_micros(10);
        if let Transmit::Bytes(b) = c.transmit(clock) {
            let n = b.len();
            c.on_written(n, clock);
            continue;
        }
        let left = stream.len() - at;
        let skip = if drop { c.skippable() } else { 0 };
        let want = match (drop, skip) {
            (_, 1..) => skip,
            (true, 0) => c.read_room(),
            (false, _) => c.want_read(),
        };
        let n = want.min(reads[i.min(reads.len() - 1)]).min(left);
        match (want, n) {
            (0, _) => panic!("the receiver wants nothing and is not done"),
            (_, 0) => c.on_eof(),
            _ if skip > 0 => c.on_skipped(n),
            _ => c.on_read(&stream[at..at + n], clock),
        }
        at += n;
        i += 1;
    }
    panic!("the receiver did not finish");
}

fn bounded(pattern: IoPattern, transfer: u64, verify: VerifyLevel) -> TcpSpec {
    TcpSpec {
        time_bound_ms: 1000,
        verify,
        ..spec(pattern, transfer)
    }
}

/// The receiver succeeded with `received` bytes.
fn succeeded(c: Conn, received: u64) {
    let (r, mine, _) = c.into_result();
    assert_eq!(r.kind, ResultKind::Success, "{r:?}");
    assert_eq!((mine.verdict, mine.received), (Verdict::Ok, received));
}

#[test]
fn bytes_held_from_a_short_read_are_not_asked_for_again() {
    // A time-bounded push of 10 bytes: the first read brings 5 of the 8
    // that tell data from the end marker, which are held; the next asks
    // for the 5 left, not for the first bytes of the peer's report too.
    let s = bounded(IoPattern::Push, 10, VerifyLevel::Data);
    let stream = sender_stream(&s, Role::Client, None);
    succeeded(
        receive(&s, Role::Server, 1 << 20, &stream, &[5, usize::MAX], false),
        10,
    );
}

#[test]
fn a_read_after_a_held_head_stops_at_the_next_chunk_start() {
    // The sender's data ends after its first chunk; the receiver, whose
    // buffer is larger than a chunk, holds 5 bytes of the first chunk's
    // head, then reads up to the second chunk's start and no further:
    // the end marker there is looked at, not taken for (corrupt) data.
    let s = bounded(IoPattern::Push, 1 << 30, VerifyLevel::Data);
    let stream = sender_stream(&s, Role::Client, Some(CHUNK));
    let marker = proto::encode(&Message::DataEnd);
    assert_eq!(stream[CHUNK as usize..][..marker.len()], marker[..]);
    let c = receive(&s, Role::Server, 1 << 20, &stream, &[5, usize::MAX], false);
    succeeded(c, CHUNK);
}

#[test]
fn each_bursts_reads_are_counted_with_a_head_held_across_two_reads() {
    // Bursts of 10 bytes, time-bounded (a chunk is a burst). The second
    // burst's first read brings 5 bytes, held until its first 8 are in;
    // the next read takes the rest of that burst: two reads of 5 bytes.
    let mut s = bounded(IoPattern::Pull, 30, VerifyLevel::Data);
    s.burst = Some(BurstSpec {
        size: 10,
        period_ms: 1,
    });
    assert_eq!(chunk_of(&s, Uuid::from_u128(ID)), 10);
    let stream = sender_stream(&s, Role::Server, None);
    let c = receive(
        &s,
        Role::Client,
        1 << 20,
        &stream,
        &[10, 5, usize::MAX],
        false,
    );
    let (r, mine, bursts) = c.into_result();
    assert_eq!((r.kind, mine.received), (ResultKind::Success, 30), "{r:?}");
    let reads: Vec<(u64, &[(u64, u64)])> = bursts
        .iter()
        .map(|b| (b.calls, &b.read_sizes[..]))
        .collect();
    assert_eq!(
        reads,
        [(1, &[(8, 1)][..]), (2, &[(4, 2)][..]), (1, &[(8, 1)][..])]
    );
}

#[test]
fn the_receivers_last_burst_carries_the_remainder_too() {
    let mut s = spec(IoPattern::Pull, 25_000);
    s.burst = Some(BurstSpec {
        size: 10_000,
        period_ms: 10,
    });
    let mut p = Pair::new(&s, 4096, 1 << 20);
    p.run();
    for e in 0..2 {
        let (r, _, bursts) = p.result(e);
        assert_eq!(r.kind, ResultKind::Success, "{r:?}");
        let sizes: Vec<(u64, u64)> = bursts.iter().map(|b| (b.index, b.bytes)).collect();
        assert_eq!(sizes, [(0, 10_000), (1, 10_000), (2, 5_000)], "end {e}");
    }
}

#[test]
fn count_only_data_without_a_time_bound_may_all_be_dropped_unread() {
    // No chunks: every data byte may go unread, in reads as large as the
    // buffer; the report behind them is read, and the counts agree.
    let s = TcpSpec {
        verify: VerifyLevel::Connection,
        ..spec(IoPattern::Push, 100_000)
    };
    let t0 = Instant::now();
    let fresh = Conn::new(&s, Uuid::from_u128(ID), Role::Server, 4096, t0);
    assert_eq!(
        (fresh.want_read(), fresh.skippable(), fresh.read_room()),
        (4096, 4096, 4096)
    );
    let stream = sender_stream(&s, Role::Client, None);
    succeeded(
        receive(&s, Role::Server, 4096, &stream, &[usize::MAX], true),
        100_000,
    );
    // Verified data is read, whole buffers at a time.
    let verified = Conn::new(
        &spec(IoPattern::Push, 100_000),
        Uuid::from_u128(ID),
        Role::Server,
        4096,
        t0,
    );
    assert_eq!((verified.skippable(), verified.read_room()), (0, 4096));
}

#[test]
fn a_senders_bytes_are_data_until_its_end_marker_or_report() {
    // What the driver counts against a server's limits: the data, not the
    // end marker once offered, nor the report.
    let s = bounded(IoPattern::Push, 1 << 30, VerifyLevel::Data);
    let t0 = Instant::now();
    let now = Now {
        mono: t0,
        real_ns: 0,
    };
    let mut c = Conn::new(&s, Uuid::from_u128(ID), Role::Client, 16 << 10, t0);
    let mut data = 0;
    while c.progress().0 < CHUNK {
        assert!(c.sending_data());
        let Transmit::Bytes(b) = c.transmit(now) else {
            panic!("a sender without a deadline offers data");
        };
        let n = b.len();
        c.on_written(n, now);
        data += n as u64;
    }
    assert_eq!(data, CHUNK);
    c.set_deadline(t0);
    let marker = proto::encode(&Message::DataEnd);
    assert_eq!(c.transmit(now), Transmit::Bytes(&marker[..]));
    assert!(!c.sending_data(), "the end marker offered");
    c.on_written(marker.len(), now);
    assert!(matches!(c.transmit(now), Transmit::Bytes(_)));
    assert!(!c.sending_data(), "the report offered");
}
