//! Unit tests of how a `rr::stream_answer` session ends: at the deadline
//! (a cut reply is a network error; a goodbye still gets its summary), with
//! a reply held back by the limits, on garbage instead of the goodbye, on a
//! failed write, and what counts as activity while the goodbye is awaited.

use super::*;

#[test]
fn the_deadline_ends_the_requests_and_a_cut_reply_is_a_network_error() {
    let t0 = Instant::now();
    let t = terms(2, 100, 5, t0);
    let start = stream_start(t.session, Direction::ClientToServer);
    let mut m = StreamAnswerer::new(t.clone(), t0);
    let n = m.out().len();
    m.wrote(n, t0);
    // Idle by the deadline's measure earlier than the deadline: the idle
    // timeout comes first.
    assert_eq!(m.deadline(), Some(t0 + IDLE));
    m.on_bytes(&pattern(start, 0, 2), t0);
    m.admitted(t0);
    m.wrote(50, t0 + Duration::from_secs(31));
    assert_eq!(m.deadline(), Some(t.deadline));
    m.on_timeout(t.deadline - Duration::from_millis(1));
    assert!(matches!(m.phase, Phase::Requests), "not yet");
    m.on_timeout(t.deadline);
    assert_eq!(m.moved().network_errors, 1);
    assert!(m.out().is_empty(), "the rest of the reply is dropped");
    assert_eq!(m.deadline(), Some(t.deadline + IDLE));
    // The client goes on sending requests: not a goodbye.
    assert_eq!(m.on_bytes(&pattern(start, 2, 2), t.deadline), 2);
    assert_eq!(m.end(), Some(End::Unexpected));
    assert!(m.take_frames().is_empty(), "no summary");
}

#[test]
fn after_the_deadline_a_goodbye_still_gets_the_summary_and_silence_ends_it() {
    let t0 = Instant::now();
    let t = terms(2, 3, 5, t0);
    let start = stream_start(t.session, Direction::ClientToServer);
    let mut m = StreamAnswerer::new(t.clone(), t0);
    let n = m.out().len();
    m.wrote(n, t0);
    m.on_bytes(&pattern(start, 0, 2), t0);
    m.admitted(t0);
    m.wrote(3, t0);
    // Silent for the idle timeout (not a reply cut short: no error).
    let idle = t0 + IDLE;
    m.on_timeout(idle);
    assert_eq!(m.moved().network_errors, 0);
    assert_eq!(m.wants(), MAX_GOODBYE);
    let bye = encode(&Message::Goodbye);
    for b in &bye {
        assert_eq!(m.on_bytes(&[*b], idle), 1);
    }
    assert_eq!(m.end(), Some(End::Summarised));
    let frames = m.take_frames();
    let Ok(Some((Message::Summary(s), used))) = decode_frame(&frames) else {
        panic!("no summary")
    };
    assert_eq!((s.requests, s.data_errors, used), (1, 0, frames.len()));
    // And silence in the goodbye wait ends it, not sooner.
    let mut m = StreamAnswerer::new(t.clone(), t0);
    m.on_timeout(idle);
    m.on_timeout(idle + IDLE - Duration::from_nanos(1));
    assert_eq!(m.end(), None);
    m.on_timeout(idle + IDLE);
    assert_eq!(m.end(), Some(End::NoGoodbye));
}

#[test]
fn a_reply_held_back_by_the_limits_is_not_idleness_and_a_halt_ends_the_requests() {
    let t0 = Instant::now();
    let t = terms(1, 8, 3, t0);
    let start = stream_start(t.session, Direction::ClientToServer);
    let mut m = StreamAnswerer::new(t.clone(), t0);
    let n = m.out().len();
    m.wrote(n, t0);
    m.on_bytes(&pattern(start, 0, 1), t0);
    assert_eq!(m.deadline(), Some(t.deadline));
    m.on_timeout(t0 + IDLE);
    assert_eq!(m.admission(), Some(8), "still owed");
    let later = t0 + IDLE + Duration::from_secs(5);
    m.admitted(later);
    assert_eq!(m.deadline(), Some(t.deadline.min(later + IDLE)));
    m.wrote(8, later);
    m.on_bytes(&pattern(start, 1, 1), later);
    m.halt(later);
    assert_eq!((m.admission(), m.out().len()), (None, 0));
    assert_eq!(m.wants(), MAX_GOODBYE);
    m.on_bytes(&encode(&Message::Goodbye), later);
    let frames = m.take_frames();
    let Ok(Some((Message::Summary(s), _))) = decode_frame(&frames) else {
        panic!("no summary")
    };
    assert_eq!(s.requests, 1);
}

#[test]
fn garbage_or_an_endless_frame_instead_of_the_goodbye_ends_it() {
    let t0 = Instant::now();
    let t = terms(1, 1, 1, t0);
    let start = stream_start(t.session, Direction::ClientToServer);
    let to_goodbye = |m: &mut StreamAnswerer| {
        m.on_bytes(&pattern(start, 0, 1), t0);
        m.admitted(t0);
        drain(m, t0);
        assert_eq!(m.wants(), MAX_GOODBYE);
    };
    let mut m = StreamAnswerer::new(t.clone(), t0);
    to_goodbye(&mut m);
    m.on_bytes(b"GET / HTTP/1.1\r\n", t0);
    assert_eq!(m.end(), Some(End::Unexpected));
    // Another message is not the goodbye either.
    let mut m = StreamAnswerer::new(t.clone(), t0);
    to_goodbye(&mut m);
    m.on_bytes(&encode(&Message::Stop), t0);
    assert_eq!(m.end(), Some(End::Unexpected));
    // A frame announcing a large payload is held to MAX_GOODBYE bytes.
    let mut m = StreamAnswerer::new(t.clone(), t0);
    to_goodbye(&mut m);
    let mut big = encode(&Message::Goodbye)[..HEADER_LEN].to_vec();
    big[4..8].copy_from_slice(&(MAX_PAYLOAD as u32).to_be_bytes());
    assert_eq!(m.on_bytes(&big, t0), HEADER_LEN);
    let fill = vec![b' '; 4096];
    assert_eq!(m.on_bytes(&fill, t0), MAX_GOODBYE - HEADER_LEN);
    assert_eq!(m.end(), Some(End::Unexpected));
    assert_eq!(m.wants(), 0);
}

#[test]
fn a_write_failure_is_one_network_error_and_the_end() {
    let t0 = Instant::now();
    let t = terms(1, 4, 2, t0);
    let mut m = StreamAnswerer::new(t, t0);
    m.on_write_failed();
    m.on_write_failed();
    assert_eq!((m.end(), m.moved().network_errors), (Some(End::Closed), 1));
    m.on_timeout(t0 + Duration::from_secs(3600));
    assert_eq!(m.end(), Some(End::Closed));
}

#[test]
fn the_goodbye_is_waited_for_the_idle_time_after_the_last_reply_or_a_halt() {
    let t0 = Instant::now();
    let t = terms(1, 2, 1, t0);
    let start = stream_start(t.session, Direction::ClientToServer);
    let later = t0 + Duration::from_secs(7);
    // After the last reply.
    let mut m = StreamAnswerer::new(t.clone(), t0);
    drain(&mut m, t0);
    m.on_bytes(&pattern(start, 0, 1), t0);
    m.admitted(t0);
    m.wrote(2, later);
    assert_eq!(m.deadline(), Some(later + IDLE));
    m.on_timeout(later + IDLE - Duration::from_nanos(1));
    assert_eq!(m.end(), None);
    m.on_timeout(later + IDLE);
    assert_eq!(m.end(), Some(End::NoGoodbye));
    // After a halt.
    let mut m = StreamAnswerer::new(t.clone(), t0);
    drain(&mut m, t0);
    m.halt(later);
    assert_eq!(m.deadline(), Some(later + IDLE));
    m.on_timeout(later + IDLE - Duration::from_nanos(1));
    assert_eq!(m.end(), None);
    m.on_timeout(later + IDLE);
    assert_eq!(m.end(), Some(End::NoGoodbye));
}

#[test]
fn a_write_that_took_nothing_is_not_activity() {
    let t0 = Instant::now();
    let t = terms(1, 4, 2, t0);
    let start = stream_start(t.session, Direction::ClientToServer);
    let mut m = StreamAnswerer::new(t.clone(), t0);
    drain(&mut m, t0);
    m.on_bytes(&pattern(start, 0, 1), t0);
    m.admitted(t0);
    m.wrote(0, t0 + Duration::from_secs(20));
    assert_eq!(m.deadline(), Some(t0 + IDLE));
    m.on_timeout(t0 + IDLE);
    assert_eq!(m.moved().network_errors, 1, "the reply was cut short");
}

#[test]
fn a_write_failing_after_the_end_is_no_network_error() {
    let t0 = Instant::now();
    let t = terms(1, 4, 2, t0);
    // During the requests: one error.
    let mut m = StreamAnswerer::new(t.clone(), t0);
    m.on_write_failed();
    assert_eq!((m.end(), m.moved().network_errors), (Some(End::Closed), 1));
    // The summary's write failing (the client left after its goodbye) is
    // not one: the session was over.
    let t = terms(1, 4, 0, t0);
    let mut m = StreamAnswerer::new(t, t0);
    drain(&mut m, t0);
    m.on_bytes(&encode(&Message::Goodbye), t0);
    assert_eq!(m.end(), Some(End::Summarised));
    m.on_write_failed();
    assert_eq!(
        (m.end(), m.moved().network_errors),
        (Some(End::Summarised), 0)
    );
}

#[test]
fn a_written_frame_is_not_held() {
    // Thousands of sessions: once the acceptance (or the summary) is out,
    // a session keeps none of its bytes.
    let t0 = Instant::now();
    let t = terms(1, 4, 0, t0);
    let mut m = StreamAnswerer::new(t, t0);
    let n = m.out().len();
    m.wrote(n - 1, t0);
    assert!(m.frames.capacity() > 0);
    m.wrote(1, t0);
    assert_eq!(m.frames.capacity(), 0);
    m.on_bytes(&encode(&Message::Goodbye), t0);
    drain(&mut m, t0);
    assert_eq!(m.frames.capacity(), 0);
}
