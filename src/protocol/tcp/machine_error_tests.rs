//! Unit tests of the verdict's error paths: a failure before or after this
//! end's report went out, the peer's close while this end only sends,
//! corruption followed by bytes that are no report, and a machine taken
//! before it is done.

use super::*;

/// A push client of 10,000 bytes that has written its data and its
/// report and waits for the server's.
fn client_waiting_for_report() -> Conn {
    let t0 = Instant::now();
    let s = spec(IoPattern::Push, 10_000);
    let mut c = Conn::new(&s, Uuid::from_u128(3), Role::Client, 4096, t0);
    write_all(&mut c, t0, None);
    assert!(c.report_sent() && !c.is_done());
    c
}

#[test]
fn a_failure_after_the_report_went_out_keeps_this_ends_verdict() {
    // All this end had to say is out: its verdict stays what it saw (all
    // well), and the result is the peer's report lost to the failure.
    let mut c = client_waiting_for_report();
    let e = io::Error::from(io::ErrorKind::ConnectionReset);
    c.on_error(&e);
    assert!(c.is_done());
    let (r, mine, _) = c.into_result();
    assert_eq!((mine.verdict, mine.sent), (Verdict::Ok, 10_000));
    assert_eq!(r.kind, ResultKind::NetworkError);
    assert_eq!(r.detail, format!("no result from peer: {e}"));
}

#[test]
fn a_failure_while_the_report_goes_out_is_this_ends_network_error() {
    let t0 = Instant::now();
    let now = Now {
        mono: t0,
        real_ns: 0,
    };
    let s = spec(IoPattern::Push, 10_000);
    let mut c = Conn::new(&s, Uuid::from_u128(3), Role::Client, 4096, t0);
    while c.progress().0 < 10_000 {
        let Transmit::Bytes(b) = c.transmit(now) else {
            panic!("data left to send");
        };
        let n = b.len();
        c.on_written(n, now);
    }
    // One byte of the report written, then the write fails.
    assert!(matches!(c.transmit(now), Transmit::Bytes(_)));
    c.on_written(1, now);
    let e = io::Error::from(io::ErrorKind::BrokenPipe);
    c.on_error(&e);
    assert!(c.is_done() && !c.report_sent());
    let (r, mine, _) = c.into_result();
    assert_eq!(mine.verdict, net_verdict(&e));
    assert_eq!(r.kind, ResultKind::NetworkError);
    assert_eq!(r.detail, mine.verdict.to_string());
}

#[test]
fn the_peers_close_while_this_end_only_sends_is_no_short_stream() {
    // A push client expects nothing from the server but its report: the
    // server closing mid-transfer does not end the data; the report then
    // found missing does.
    let t0 = Instant::now();
    let now = Now {
        mono: t0,
        real_ns: 0,
    };
    let s = spec(IoPattern::Push, 10_000);
    let mut c = Conn::new(&s, Uuid::from_u128(3), Role::Client, 4096, t0);
    let Transmit::Bytes(b) = c.transmit(now) else {
        panic!("data to send");
    };
    let n = b.len();
    c.on_written(n, now);
    c.on_eof();
    assert!(!c.is_done() && c.sending_data());
    write_all(&mut c, t0, None);
    assert!(c.report_sent());
    assert_eq!(c.progress(), (10_000, 0));
    c.on_eof();
    let (r, mine, _) = c.into_result();
    assert_eq!(mine.verdict, Verdict::Ok);
    assert_eq!(r.kind, ResultKind::NetworkError);
    assert_eq!(r.detail, "no result from peer: connection closed by peer");
}

#[test]
fn corruption_stays_the_verdict_when_no_report_follows_the_data() {
    // Pattern bytes past the plan would be "too many", but the data was
    // already corrupt: that is the finding.
    let mut p = Pair::new(&spec(IoPattern::Push, 10_000), 4096, 1 << 20);
    p.pipes[0].flip = Some(5_000);
    push_past_the_plan(&mut p, 10_000, 100);
    p.run();
    let (r, mine, _) = p.result(1);
    assert_eq!(mine.verdict, Verdict::Corrupt { offset: 5_000 });
    assert_eq!(r.kind, ResultKind::DataError, "{r:?}");
}

#[test]
fn a_finished_connection_is_taken_with_its_result() {
    let mut p = Pair::new(&spec(IoPattern::Duplex, 20_000), 4096, 8192);
    p.run();
    let Pair { ends, .. } = p;
    for c in ends {
        let (r, mine, _) = c.into_result();
        assert_eq!(r.kind, ResultKind::Success, "{r:?}");
        assert_eq!(
            (mine.verdict, mine.sent, mine.received),
            (Verdict::Ok, 10_000, 10_000)
        );
    }
}

#[test]
fn a_connection_taken_before_it_is_done_is_cancelled_unless_corrupt() {
    // Stopped while waiting for the peer's report: a cancellation.
    let (r, mine, _) = client_waiting_for_report().into_result();
    assert_eq!(r.kind, ResultKind::Cancelled, "{r:?}");
    assert_eq!((mine.verdict, mine.sent), (Verdict::Cancelled, 10_000));
    // Stopped mid-data after corruption was seen: the corruption.
    let mut p = Pair::new(&spec(IoPattern::Push, 100_000), 4096, 8192);
    p.pipes[0].flip = Some(100);
    p.run_until(|p| p.ends[1].progress().1 >= 50_000);
    let Pair {
        ends: [_, server], ..
    } = p;
    let (r, mine, _) = server.into_result();
    assert_eq!(mine.verdict, Verdict::Corrupt { offset: 100 });
    assert_eq!(r.kind, ResultKind::DataError, "{r:?}");
}
