//! Unit tests of `rr::seq_answer`: the server's machine against an
//! in-memory client that keeps the real client's order (acceptance; a
//! request message, its reply, the next; goodbye, summary), on a simulated
//! clock, with corrupt, short and long requests, the server's limits, the
//! client going silent and the client leaving at every step.

use super::*;
use proptest::prelude::*;

const IDLE: Duration = Duration::from_secs(30);

fn terms(size: u32, reply: u32, iterations: u64, t0: Instant) -> Terms {
    Terms {
        session: Uuid::from_u128(0x5eed_0000_1234),
        port: 40_000,
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

/// Request `n` as the client sends it.
fn request(t: &Terms, n: u64) -> Vec<u8> {
    let start = stream_start(t.session, Direction::ClientToServer);
    pattern(start, n * u64::from(t.size), t.size as usize)
}

/// Whether `got` is reply `n` as the client checks it.
fn is_reply(t: &Terms, n: u64, got: &[u8]) -> bool {
    let start = stream_start(t.session, Direction::ServerToClient);
    got == pattern(start, n * u64::from(t.reply), t.reply as usize)
}

/// Everything the machine asks, in order.
fn drain(m: &mut SeqAnswerer) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

/// The acceptance, checked.
fn accepted(m: &mut SeqAnswerer, t: &Terms) {
    match drain(m).as_slice() {
        [Action::Send(b)] => match &**b {
            Message::SeqpacketAccept { session, port } => {
                assert_eq!((*session, *port), (t.session, t.port));
            }
            other => panic!("not an acceptance: {other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// Sends request `n` (as `msg`), and takes the owed reply: whether it is
/// reply `n`.
fn round(m: &mut SeqAnswerer, t: &Terms, n: u64, msg: &[u8], now: Instant) -> bool {
    assert!(m.wants_requests());
    // The driver keeps at most one byte past a request.
    let kept = &msg[..msg.len().min(t.size as usize + 1)];
    m.on_request(kept, msg.len(), now);
    assert!(!m.wants_requests(), "nothing is read while a reply is owed");
    let good = is_reply(t, n, m.owed().expect("a reply is owed"));
    m.sent(now);
    good
}

/// The goodbye, and the summary it is answered with, closing.
fn goodbye(m: &mut SeqAnswerer, now: Instant) -> SessionSummary {
    m.on_message(Message::Goodbye, now, 0);
    match drain(m).as_slice() {
        [Action::Send(b), Action::Close] => match &**b {
            Message::Summary(s) => s.clone(),
            other => panic!("not a summary: {other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_request_is_answered_once_with_its_own_reply_then_the_goodbye_gets_the_count() {
    let t0 = Instant::now();
    let t = terms(64, 300, 5, t0);
    let mut m = SeqAnswerer::new(t.clone(), t0);
    assert!(m.has_actions(), "the acceptance waits");
    accepted(&mut m, &t);
    assert!(!m.has_actions() && !m.is_over());
    let t1 = t0 + Duration::from_secs(3);
    for n in 0..5 {
        assert!(round(&mut m, &t, n, &request(&t, n), t1), "reply {n}");
        assert!(!m.is_over() && !m.has_actions());
    }
    assert!(!m.wants_requests(), "the announced number is answered");
    assert_eq!(
        m.deadline(),
        Some(t1 + IDLE),
        "the goodbye is waited for from the last reply"
    );
    m.on_request(&request(&t, 5), 64, t0);
    assert!(m.owed().is_none(), "a sixth request is not answered");
    let s = goodbye(&mut m, t0);
    assert_eq!((s.requests, s.data_errors), (5, 0));
    let moved = m.moved();
    assert_eq!((moved.bytes_received, moved.bytes_sent), (5 * 64, 5 * 300));
    assert!(m.is_over());
    m.on_message(Message::Goodbye, t0, 0);
    assert!(
        drain(&mut m).is_empty(),
        "an ended session says nothing more"
    );
}

#[test]
fn corrupt_short_and_long_requests_are_counted_and_still_answered_in_step() {
    let t0 = Instant::now();
    let t = terms(32, 8, 4, t0);
    let mut m = SeqAnswerer::new(t.clone(), t0);
    accepted(&mut m, &t);
    let mut flipped = request(&t, 0);
    flipped[31] ^= 1;
    assert!(round(&mut m, &t, 0, &flipped, t0));
    // Request 0's bytes where request 1's belong: right length, wrong place.
    assert!(round(&mut m, &t, 1, &request(&t, 0), t0));
    let short = &request(&t, 2)[..31];
    assert!(round(&mut m, &t, 2, short, t0));
    let mut long = request(&t, 3);
    long.extend_from_slice(&[0; 100]);
    assert!(round(&mut m, &t, 3, &long, t0));
    let s = goodbye(&mut m, t0);
    assert_eq!((s.requests, s.data_errors), (4, 4));
    assert_eq!(m.moved().bytes_received, 32 + 32 + 31 + 132);
    assert_eq!(m.moved().data_errors, 4, "the metrics count them too");
}

#[test]
fn replies_longer_than_one_slice_of_the_pattern_are_the_pattern_throughout() {
    let t0 = Instant::now();
    let reply = 2 * crate::protocol::pattern::PERIOD as u32 + 1000;
    let t = terms(10, reply, 3, t0);
    let mut m = SeqAnswerer::new(t.clone(), t0);
    accepted(&mut m, &t);
    for n in 0..3 {
        assert!(round(&mut m, &t, n, &request(&t, n), t0), "reply {n}");
    }
    assert_eq!(m.moved().bytes_sent, 3 * u64::from(reply));
}

#[test]
fn a_good_request_after_a_corrupt_one_is_good() {
    let t0 = Instant::now();
    let t = terms(16, 16, 3, t0);
    let mut m = SeqAnswerer::new(t.clone(), t0);
    accepted(&mut m, &t);
    let mut bad = request(&t, 0);
    bad[0] ^= 0x80;
    round(&mut m, &t, 0, &bad, t0);
    round(&mut m, &t, 1, &request(&t, 1), t0);
    round(&mut m, &t, 2, &request(&t, 2), t0);
    assert_eq!(goodbye(&mut m, t0).data_errors, 1);
}

#[test]
fn a_silent_client_ends_the_requests_after_idle_and_the_session_after_the_goodbye_wait() {
    let t0 = Instant::now();
    let t = terms(8, 8, 10, t0);
    let mut m = SeqAnswerer::new(t.clone(), t0);
    accepted(&mut m, &t);
    let t1 = t0 + Duration::from_secs(5);
    round(&mut m, &t, 0, &request(&t, 0), t1);
    assert_eq!(
        m.deadline(),
        Some(t1 + IDLE),
        "idle counts from the last request"
    );
    m.on_timeout(t1 + IDLE - Duration::from_millis(1));
    assert!(m.wants_requests(), "not before the idle timeout");
    m.on_timeout(t1 + IDLE);
    assert!(!m.wants_requests(), "the requests end");
    assert!(drain(&mut m).is_empty(), "the goodbye is still waited for");
    assert_eq!(m.deadline(), Some(t1 + IDLE + IDLE));
    m.on_timeout(t1 + IDLE + IDLE);
    assert!(matches!(drain(&mut m).as_slice(), [Action::Close]));
    assert!(m.is_over());
    assert_eq!(m.deadline(), None);
}

#[test]
fn a_goodbye_after_the_requests_ended_by_idleness_still_gets_the_summary() {
    let t0 = Instant::now();
    let t = terms(8, 8, 10, t0);
    let mut m = SeqAnswerer::new(t.clone(), t0);
    accepted(&mut m, &t);
    round(&mut m, &t, 0, &request(&t, 0), t0);
    m.on_timeout(t0 + IDLE);
    assert_eq!(goodbye(&mut m, t0 + IDLE).requests, 1);
}

#[test]
fn the_deadline_ends_the_requests_and_an_owed_reply_is_a_network_error() {
    let t0 = Instant::now();
    let mut t = terms(8, 8, 10, t0);
    t.deadline = t0 + Duration::from_secs(2);
    let mut m = SeqAnswerer::new(t.clone(), t0);
    accepted(&mut m, &t);
    m.on_request(&request(&t, 0), 8, t0);
    assert!(m.owed().is_some());
    assert_eq!(
        m.deadline(),
        Some(t.deadline),
        "an owed reply waits only for the deadline"
    );
    m.on_timeout(t.deadline);
    assert!(m.owed().is_none() && !m.wants_requests());
    m.sent(t.deadline);
    let s = goodbye(&mut m, t.deadline);
    assert_eq!(s.requests, 0, "the late reply never counted");
    assert_eq!(m.moved().network_errors, 1);
}

#[test]
fn halted_by_the_limits_or_a_failed_send_the_session_waits_for_the_goodbye() {
    let t0 = Instant::now();
    let t = terms(8, 8, 10, t0);
    for failed in [false, true] {
        let mut m = SeqAnswerer::new(t.clone(), t0);
        accepted(&mut m, &t);
        round(&mut m, &t, 0, &request(&t, 0), t0);
        m.on_request(&request(&t, 1), 8, t0);
        assert_eq!(
            m.deadline(),
            Some(t.deadline),
            "waiting for the limits or for room is not idleness"
        );
        match failed {
            true => m.send_failed(t0),
            false => m.halt(t0),
        }
        assert!(!m.wants_requests() && m.owed().is_none());
        let s = goodbye(&mut m, t0);
        assert_eq!(s.requests, 1);
        assert_eq!(m.moved().network_errors, u64::from(failed));
    }
}

#[test]
fn zero_iterations_wait_only_for_the_goodbye() {
    let t0 = Instant::now();
    let t = terms(8, 8, 0, t0);
    let mut m = SeqAnswerer::new(t.clone(), t0);
    accepted(&mut m, &t);
    assert!(!m.wants_requests());
    assert_eq!(m.deadline(), Some(t0 + IDLE));
    assert_eq!(goodbye(&mut m, t0).requests, 0);
}

#[test]
fn anything_but_a_goodbye_is_refused_and_garbage_too() {
    let t0 = Instant::now();
    let t = terms(8, 8, 3, t0);
    let mut m = SeqAnswerer::new(t.clone(), t0);
    accepted(&mut m, &t);
    m.on_message(Message::Stop, t0, 0);
    assert!(matches!(
        drain(&mut m).as_slice(),
        [Action::Refuse(Refusal::Unexpected { .. })]
    ));
    assert!(m.is_over() && !m.wants_requests() && m.deadline().is_none());
    let mut m = SeqAnswerer::new(t.clone(), t0);
    accepted(&mut m, &t);
    m.on_malformed(ProtoError::Oversized(1 << 30));
    assert!(matches!(drain(&mut m).as_slice(), [Action::Refuse(_)]));
    m.on_closed();
    assert!(drain(&mut m).is_empty(), "one end only");
}

#[test]
fn a_client_gone_at_any_step_closes_the_session_once() {
    let t0 = Instant::now();
    let t = terms(16, 4, 3, t0);
    // Steps: 0 before any request, 1 with a reply owed, 2 between requests,
    // 3 after the last, waiting for the goodbye.
    for leave_at in 0..4 {
        let mut m = SeqAnswerer::new(t.clone(), t0);
        accepted(&mut m, &t);
        if leave_at >= 1 {
            m.on_request(&request(&t, 0), 16, t0);
        }
        if leave_at >= 2 {
            m.sent(t0);
        }
        if leave_at >= 3 {
            for n in 1..3 {
                round(&mut m, &t, n, &request(&t, n), t0);
            }
        }
        m.on_closed();
        assert!(
            matches!(drain(&mut m).as_slice(), [Action::Close]),
            "step {leave_at}"
        );
        assert!(m.is_over() && m.owed().is_none() && !m.wants_requests());
        m.on_closed();
        m.on_timeout(t0 + Duration::from_secs(3600));
        assert!(drain(&mut m).is_empty(), "step {leave_at}: closed once");
    }
}

proptest! {
    /// Whatever sizes and whichever requests are damaged, every request up
    /// to the announced number gets exactly its own reply, and the summary
    /// counts the damaged ones.
    #[test]
    fn replies_and_counts_hold_for_any_sizes_and_damage(
        size in 1u32..2000,
        reply in 0u32..3000,
        iterations in 1u64..20,
        damage in proptest::collection::vec(0u8..4, 20),
    ) {
        let t0 = Instant::now();
        let t = terms(size, reply, iterations, t0);
        let mut m = SeqAnswerer::new(t.clone(), t0);
        accepted(&mut m, &t);
        let mut bad = 0;
        for n in 0..iterations {
            let mut msg = request(&t, n);
            match damage[n as usize] {
                1 => { let i = msg.len() / 2; msg[i] ^= 0x55; }
                2 => { msg.pop(); }
                3 => msg.push(7),
                _ => {}
            }
            bad += u64::from(damage[n as usize] != 0);
            prop_assert!(round(&mut m, &t, n, &msg, t0));
        }
        prop_assert!(!m.wants_requests());
        let s = goodbye(&mut m, t0);
        prop_assert_eq!((s.requests, s.data_errors), (iterations, bad));
        prop_assert_eq!(m.moved().bytes_sent, iterations * u64::from(reply));
    }
}
