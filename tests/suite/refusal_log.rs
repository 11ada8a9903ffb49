//! The server's log of refusals (issue 26, item 11): a test the server
//! agreed to and then ended with an error the client gets is logged like a
//! refusal at the door, once, naming the client; and a flood of refused
//! connections leaves a bounded log that still accounts for every one.

use crate::bin;
use crate::hand;

use bin::*;
use hand::{Logged, Raw};
use netrig::protocol::proto::{Message, RrProto, RrSpec, TestSpec};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The server's refusal lines per second of a flood (`src/server/log.rs`).
const LINES_PER_SECOND: usize = 20;

/// Reads what is left of a control connection until the server closes it:
/// by then the server has written every log line about it.
fn until_closed(r: &mut Raw) {
    let mut rest = Vec::new();
    let _ = r.0.read_to_end(&mut rest);
}

/// Lines of `srv`'s log that refuse the client at `peer`.
fn refusals_of(srv: &Logged, peer: SocketAddr) -> Vec<String> {
    let who = format!("{peer}: ");
    let lines = srv.lines.lock().unwrap();
    (lines.iter())
        .filter(|l| l.starts_with(&who) && l.contains(": refused: "))
        .cloned()
        .collect()
}

/// Asks for `test`, and returns the token of the UDP session it opened.
fn udp_session(r: &mut Raw, test: TestSpec) -> u64 {
    r.send(&Message::TestRequest { test });
    match r.recv() {
        Ok(Message::UdpAccept { token, .. }) => token,
        other => panic!("expected a UDP accept, got {other:?}"),
    }
}

fn error_message(r: &mut Raw) -> String {
    match r.recv() {
        Ok(Message::Error { message, .. }) => message,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn a_udp_handshake_datagram_that_never_comes_is_logged_once() {
    let srv = Logged::start(&[]);
    let mut r = Raw::hello(srv.addr);
    let me = r.0.local_addr().unwrap();
    let token = udp_session(&mut r, TestSpec::Udp(udp_spec()));
    // The client says it sent its handshake datagram, and never does.
    r.send(&Message::UdpHandshake { token });
    let told = error_message(&mut r);
    assert!(told.contains("no handshake datagram"), "{told}");
    until_closed(&mut r);
    let logged = srv.wait_for(&[&format!("{me}: refused: no handshake datagram")], 1);
    assert_eq!(refusals_of(&srv, me), logged, "logged once, nothing else");
}

#[test]
fn an_unexpected_message_in_a_udp_rr_session_is_logged_once() {
    let srv = Logged::start(&[]);
    let mut r = Raw::hello(srv.addr);
    let me = r.0.local_addr().unwrap();
    let rr = RrSpec {
        proto: RrProto::Udp,
        size: 64,
        reply: 64,
        iterations: 10,
        nagle: false,
        until_stopped: false,
        sock: Default::default(),
        duration_ms: 0,
    };
    udp_session(&mut r, TestSpec::Rr(rr.clone()));
    // A second test request where the session expects its handshake.
    r.send(&Message::TestRequest {
        test: TestSpec::Rr(rr),
    });
    let told = error_message(&mut r);
    assert!(told.contains("in a UDP session"), "{told}");
    until_closed(&mut r);
    let logged = srv.wait_for(&[&format!("{me}: refused: unexpected")], 1);
    assert_eq!(refusals_of(&srv, me), logged, "logged once, nothing else");
}

/// Opens `n` connections to `addr` one after another, each sending bytes
/// that are no netrig frame and reading the refusal to its end.
fn garbage(addr: SocketAddr, n: usize) {
    for _ in 0..n {
        let Ok(mut s) = TcpStream::connect(addr) else {
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = s.write_all(&[0u8; 16]);
        let mut back = Vec::new();
        let _ = s.read_to_end(&mut back);
    }
}

/// The number a "refusals: N more not logged" line gives.
fn suppressed(line: &str) -> Option<usize> {
    let rest = line.strip_prefix("refusals: ")?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn a_flood_of_refusals_is_logged_at_a_bounded_rate_with_the_rest_counted() {
    const FLOOD: usize = 2000;
    const SENDERS: usize = 8;
    let srv = Logged::start(&[]);
    let t0 = Instant::now();
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let addr = srv.addr;
            std::thread::spawn(move || garbage(addr, FLOOD / SENDERS))
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    // Every refusal is a line or part of a count; the last count is due a
    // window after the flood ends.
    let (written, counted, counts) = loop {
        let (mut written, mut counted, mut counts) = (0, 0, 0);
        for l in srv.lines.lock().unwrap().iter() {
            if l.contains(": refused: ") {
                written += 1;
            } else if let Some(n) = suppressed(l) {
                counted += n;
                counts += 1;
            }
        }
        if written + counted >= FLOOD || t0.elapsed() > Duration::from_secs(60) {
            break (written, counted, counts);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = t0.elapsed();
    assert_eq!(
        written + counted,
        FLOOD,
        "{written} refusals logged and {counted} counted after {took:?}"
    );
    // A window's budget per second that passed, and one more for a window
    // begun in the last part of a second.
    let windows = took.as_secs() as usize + 2;
    assert!(
        written <= LINES_PER_SECOND * windows,
        "{written} refusal lines in {took:?}"
    );
    assert!((1..=2 * windows).contains(&counts), "{counts} count lines");
}
