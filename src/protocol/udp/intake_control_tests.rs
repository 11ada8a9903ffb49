//! Unit tests of `udp::intake`: the handshake and the session's control —
//! a wrong nonce, token or order refused, the setup wait and the session
//! deadline enforced, a stop reported at once, time requests answered,
//! unexpected messages refused.

use super::*;

#[test]
fn a_wrong_nonce_or_a_start_before_the_proof_is_refused() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    let ready = |nonce| Message::UdpReady {
        nonce,
        offset_ns: 0,
    };
    a.on_message(ready(NONCE), t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(
        s.refused,
        Some(Refusal::Auth(AuthFailure::ProbeNonce))
    ));
    assert!(a.is_over() && !s.started);

    let mut a = intake(t0);
    let mut s = Said::default();
    // The datagram first, then the message: the address heard is proven.
    a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
    a.on_datagram(&handshake(TOKEN), "127.0.0.3:1".parse().unwrap(), at(t0, 1));
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    drain(&mut a, &mut s);
    assert_eq!(s.connect, Some(client()), "the first address heard");
    a.on_message(ready(NONCE ^ 1), t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(
        s.refused,
        Some(Refusal::Auth(AuthFailure::ProbeNonce))
    ));
    assert!(!s.started);
}

#[test]
fn a_wrong_token_proves_nothing_and_the_handshake_wait_ends() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    a.on_datagram(&handshake(TOKEN ^ 1), client(), at(t0, 1));
    a.on_datagram(&datagram(0, 0), client(), at(t0, 1));
    drain(&mut a, &mut s);
    assert_eq!((s.connect, s.probes.len()), (None, 0));
    assert_eq!(a.deadline(), Some(t0 + HANDSHAKE_WAIT));
    a.on_timeout(t0 + HANDSHAKE_WAIT - Duration::from_nanos(1));
    drain(&mut a, &mut s);
    assert!(s.refused.is_none());
    a.on_timeout(t0 + HANDSHAKE_WAIT);
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::NoHandshake(_))));
}

#[test]
fn setup_and_the_session_deadline_are_enforced() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(10)));
    a.on_timeout(t0 + Duration::from_secs(10));
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::NotStarted(_))));

    // Running: the interval ends, then the deadline, even when the
    // client never says it is done.
    let (mut a, mut s) = started(t0);
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(64));
    assert!(s.refused.is_none());
    assert_eq!(s.intervals().len(), 64);
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(66));
    assert!(matches!(
        s.refused,
        Some(Refusal::Limit(Limit::DurationReached { max })) if max == Duration::from_secs(60)
    ));
    assert!(s.totals().is_empty(), "the refusal ends it");

    // Reported, and no goodbye: the deadline still ends it.
    let (mut a, mut s) = started(t0);
    a.on_message(done(0), t0, 1);
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(1));
    assert_eq!(s.totals().len(), 1);
    assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(65)));
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(65));
    assert!(matches!(
        s.refused,
        Some(Refusal::Limit(Limit::DurationReached { .. }))
    ));
}

#[test]
fn a_stop_reports_at_once_and_time_requests_are_answered_throughout() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    a.on_message(Message::TimeRequest { t1: 3 }, t0, 44);
    drain(&mut a, &mut s);
    assert!(matches!(
        s.sent.last(),
        Some(Message::TimeReply {
            t1: 3,
            t2: 44,
            t3: 44
        })
    ));
    let (mut a, mut s) = started(t0);
    a.on_datagram(&datagram(0, 0), client(), at(t0, 1));
    a.on_message(Message::Stop, t0 + Duration::from_millis(300), 1);
    drain(&mut a, &mut s);
    assert!(matches!(s.sent[0], Message::StopAck));
    assert_eq!(s.totals().len(), 1);
    assert_eq!(s.totals()[0].packets, 1);
    // Nothing is counted after the totals.
    assert!(!a.wants_datagrams());
    a.on_datagram(&datagram(1, 0), client(), at(t0, 1));
    a.on_message(Message::TimeRequest { t1: 4 }, t0, 45);
    a.on_message(Message::Goodbye, t0, 1);
    drain(&mut a, &mut s);
    assert_eq!(s.totals().len(), 1, "the totals once");
    assert!(s.summary.is_some() && s.closed);

    // A stop before the start: the totals follow the start at once.
    let mut a = intake(t0);
    let mut s = Said::default();
    a.on_message(Message::Stop, t0, 1);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
    a.on_message(
        Message::UdpReady {
            nonce: NONCE,
            offset_ns: 0,
        },
        t0,
        1,
    );
    drain(&mut a, &mut s);
    assert!(s.started && !a.is_running());
    assert_eq!(s.totals().len(), 1);
}

#[test]
fn unexpected_and_malformed_messages_are_refused() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::Unexpected { .. })));
    let (mut a, mut s) = started(t0);
    a.on_malformed(ProtoError::Oversized(1 << 30));
    drain(&mut a, &mut s);
    assert!(s.refused.is_some() && a.is_over());
    a.on_closed();
    a.on_message(Message::Goodbye, t0, 1);
    assert!(!a.has_actions());
}

#[test]
fn once_reported_only_the_deadline_ends_the_session() {
    let t0 = Instant::now();
    let (mut a, mut s) = started(t0);
    a.on_message(done(0), t0, 1);
    run_clock(&mut a, &mut s, t0 + Duration::from_secs(1));
    assert_eq!(s.totals().len(), 1);
    // A look before the deadline (another session's timer) ends nothing.
    a.on_timeout(t0 + Duration::from_secs(30));
    drain(&mut a, &mut s);
    assert!(s.refused.is_none() && !a.is_over());
    a.on_message(Message::Goodbye, t0 + Duration::from_secs(31), 1);
    drain(&mut a, &mut s);
    assert!(s.summary.is_some() && s.closed);
}

#[test]
fn a_setup_as_long_as_the_deadline_ends_as_the_duration_limit() {
    // Setup may last to the session's deadline: past it the duration limit
    // is what was reached, not the setup's.
    let t0 = Instant::now();
    for setup in [65, 70] {
        let t = Terms {
            setup: Duration::from_secs(setup),
            ..terms()
        };
        let mut a = Intake::new(t, config(), ReceiverStats::new(1000, 100), t0);
        let mut s = Said::default();
        a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
        a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
        drain(&mut a, &mut s);
        assert_eq!(a.deadline(), Some(t0 + Duration::from_secs(65)));
        a.on_timeout(t0 + Duration::from_secs(65));
        drain(&mut a, &mut s);
        assert!(
            matches!(
                s.refused,
                Some(Refusal::Limit(Limit::DurationReached { .. }))
            ),
            "setup {setup} s: {:?}",
            s.refused
        );
    }
}

#[test]
fn a_handshake_message_with_another_token_is_refused() {
    let t0 = Instant::now();
    let mut a = intake(t0);
    let mut s = Said::default();
    a.on_datagram(&handshake(TOKEN), client(), at(t0, 1));
    a.on_message(Message::UdpHandshake { token: TOKEN ^ 1 }, t0, 1);
    drain(&mut a, &mut s);
    assert!(matches!(s.refused, Some(Refusal::Unexpected { .. })));
    assert_eq!((s.connect, s.probes.len()), (None, 0), "nothing is proven");
}
