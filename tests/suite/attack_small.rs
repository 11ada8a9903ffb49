//! The smaller findings of issue 27 against a real server process over
//! loopback: a status interval that made the server read TCP_INFO for every
//! connection every 20 ms, a replayed data hello that read another
//! connection's stream, bursts further apart than the idle timeout failing
//! as stalls, and refusals that reached the client as text only. Refusals
//! are told apart by their wire code, never by their text. And the
//! fixed-layout ack and report a crr client's data hello asks for, beside
//! an older client's JSON.

use crate::bin;

use bin::*;
use netrig::protocol::proto::{self, DataHello, ErrorCode, Message};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A control connection that has said hello (no key).
fn control(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    proto::write_message(&mut s, &Message::Hello(Message::hello())).unwrap();
    let ack = proto::read_message(&mut s);
    assert!(matches!(ack, Ok(Message::HelloAck(_))), "{ack:?}");
    s
}

/// Sends `v` as one frame, whatever it says.
fn send_json(s: &mut TcpStream, v: &Value) {
    let payload = serde_json::to_vec(v).unwrap();
    let mut b = vec![b'N', b'R', proto::FRAME_VERSION, 0];
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(&payload);
    s.write_all(&b).unwrap();
}

/// A TCP test request, with `edit` applied to its spec.
fn tcp_request(edit: impl FnOnce(&mut Value)) -> Value {
    let mut test = json!({"kind": "tcp", "pattern": "pull", "transfer": 1 << 20,
        "push_bytes": 0, "pull_bytes": 0, "verify": "data", "connections": 1,
        "burst": null});
    edit(&mut test);
    json!({"type": "test_request", "test": test})
}

/// The code of the error the server answers with, or what it answered.
fn code_of(m: Result<Message, proto::ReadError>) -> Result<ErrorCode, String> {
    match m {
        Ok(Message::Error { code, .. }) => Ok(code),
        other => Err(format!("{other:?}")),
    }
}

#[test]
fn a_server_interval_below_the_floor_is_refused_with_its_code() {
    let (_srv, addr) = serve(&["-q"]);
    for ms in [1, 20, 99] {
        let mut c = control(addr);
        send_json(
            &mut c,
            &tcp_request(|t| t["server_interval_ms"] = json!(ms)),
        );
        assert_eq!(
            code_of(proto::read_message(&mut c)),
            Ok(ErrorCode::Invalid),
            "server_interval_ms {ms}"
        );
    }
    // At the floor, the session is set up.
    let mut c = control(addr);
    send_json(
        &mut c,
        &tcp_request(|t| t["server_interval_ms"] = json!(100)),
    );
    let m = proto::read_message(&mut c);
    assert!(matches!(m, Ok(Message::TestAccept { .. })), "{m:?}");
}

#[test]
fn a_replayed_data_hello_is_refused_and_reads_nothing() {
    let (_srv, addr) = serve(&["-q"]);
    let mut c = control(addr);
    send_json(&mut c, &tcp_request(|_| {}));
    let Ok(Message::TestAccept { session }) = proto::read_message(&mut c) else {
        panic!("no session")
    };
    let hello = Message::DataHello(DataHello {
        session,
        connection: uuid::Uuid::new_v4(),
        buffer: 65536,
        compact: false,
        proof: None,
    });
    let attach = || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        proto::write_message(&mut s, &hello).unwrap();
        let first = proto::read_message(&mut s);
        (s, first)
    };
    let (mut victim, first) = attach();
    assert!(matches!(first, Ok(Message::DataAck { .. })), "{first:?}");
    // The same number again from the same host, while the first is live
    // and after it ended: refused each time, and no data follows.
    let (mut replay, first) = attach();
    assert_eq!(code_of(first), Ok(ErrorCode::ConnectionReused));
    let mut rest = Vec::new();
    let _ = replay.read_to_end(&mut rest);
    assert!(
        rest.len() < 1024,
        "{} bytes followed the refusal",
        rest.len()
    );
    let mut got = vec![0u8; 1 << 20];
    victim.read_exact(&mut got).unwrap();
    drop(victim);
    let (_, first) = attach();
    assert_eq!(code_of(first), Ok(ErrorCode::ConnectionReused));
}

/// One connection of two bursts `period` apart, with both ends' idle
/// timeouts shorter than the period.
fn bursts_apart(pattern: &str, period: &str) {
    let (_srv, addr) = serve(&["-q", "--idle-timeout", "1s"]);
    let out = netrig(&[
        "tcp",
        &addr.to_string(),
        "--pattern",
        pattern,
        "-n",
        "64K",
        "--burst-size",
        "32K",
        "--burst-period",
        period,
        "--idle-timeout",
        "1s",
        "-P",
        "1",
        "--iterations",
        "1",
        "-q",
    ])
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{pattern}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn pull_bursts_further_apart_than_the_idle_timeout_complete() {
    bursts_apart("pull", "2500ms");
}

#[test]
fn push_bursts_further_apart_than_the_idle_timeout_complete() {
    bursts_apart("push", "2500ms");
}

#[test]
fn a_stalled_burst_connection_still_times_out() {
    // The schedule excuses only the wait for the next burst: a receiver
    // whose peer stops mid-burst (here: a data hello, then nothing read
    // or written by the client of a push test) still times out.
    let (_srv, addr) = serve(&["-q", "--idle-timeout", "1s"]);
    let mut c = control(addr);
    send_json(
        &mut c,
        &tcp_request(|t| {
            t["pattern"] = json!("push");
            t["burst"] = json!({"size": 1 << 19, "period_ms": 60_000});
        }),
    );
    let Ok(Message::TestAccept { session }) = proto::read_message(&mut c) else {
        panic!("no session")
    };
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let hello = Message::DataHello(DataHello {
        session,
        connection: uuid::Uuid::new_v4(),
        buffer: 65536,
        compact: false,
        proof: None,
    });
    proto::write_message(&mut s, &hello).unwrap();
    let m = proto::read_message(&mut s);
    assert!(matches!(m, Ok(Message::DataAck { .. })), "{m:?}");
    // Part of the first burst, then silence: the server ends the
    // connection after its idle timeout, long before the next burst.
    s.write_all(&[0u8; 1000]).unwrap();
    let t0 = std::time::Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "held for {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_refused_test_carries_its_code_to_the_json_report() {
    let (_srv, addr) = serve(&["-q", "--max-duration", "1s"]);
    // Refused at the request: the run measured nothing.
    let (v, _) = run_json(&["tcp", &addr.to_string(), "-t", "5s", "-q"], 5);
    assert_eq!(v["error_code"], json!("limit_duration"), "{v}");
    assert!(v["result"].is_null(), "{v}");
}

#[test]
fn a_refused_data_connection_carries_its_code_to_the_json_report() {
    let (_srv, addr) = serve(&["-q", "--max-bytes", "3M"]);
    // Admitted at the request (each connection fits), refused once the
    // session's connections have promised the test's bytes.
    let (v, _) = run_json(
        &[
            "tcp",
            &addr.to_string(),
            "-n",
            "1M",
            "-P",
            "1",
            "--iterations",
            "10",
            "-q",
        ],
        5,
    );
    assert_eq!(v["error_code"], json!("limit_bytes"), "{v}");
    let refusals = v["result"]["refusals"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(refusals.len(), 1, "{v}");
    assert_eq!(refusals[0]["code"], json!("limit_bytes"), "{v}");
}

/// One frame off `s`, as its bytes.
fn raw_frame(s: &mut TcpStream) -> Vec<u8> {
    let mut frame = vec![0u8; proto::HEADER_LEN];
    s.read_exact(&mut frame).unwrap();
    let len = u32::from_be_bytes(frame[4..8].try_into().unwrap()) as usize;
    frame.resize(proto::HEADER_LEN + len, 0);
    s.read_exact(&mut frame[proto::HEADER_LEN..]).unwrap();
    frame
}

#[test]
fn a_data_hello_gets_its_ack_and_report_in_the_layout_it_asked_for() {
    use netrig::protocol::pattern::{Direction, Pattern, stream_start};
    use proto::{FinalReport, Verdict, compact};
    let (_srv, addr) = serve(&["-q"]);
    // The server's answer to a control hello says it reads a data hello in
    // the fixed layout.
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    proto::write_message(&mut c, &Message::Hello(Message::hello())).unwrap();
    match proto::read_message(&mut c) {
        Ok(Message::HelloAck(h)) => assert!(h.reads_compact_data_hello(), "{h:?}"),
        other => panic!("{other:?}"),
    }
    // An older client (no `compact` in its hello) gets JSON; a newer one
    // the fixed layout. Either may answer with a JSON report. The hello
    // itself comes as JSON (an older client, or a server that did not say
    // it reads the layout) or in the layout, asking for either.
    for (layout, asked) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut c = control(addr);
        send_json(
            &mut c,
            &tcp_request(|t| {
                t["pattern"] = json!("pushpull");
                t["transfer"] = json!(66);
                t["push_bytes"] = json!(64);
                t["pull_bytes"] = json!(2);
            }),
        );
        let Ok(Message::TestAccept { session }) = proto::read_message(&mut c) else {
            panic!("no session")
        };
        let connection = uuid::Uuid::new_v4();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let hello = Message::DataHello(DataHello {
            session,
            connection,
            buffer: 65536,
            compact: asked,
            proof: None,
        });
        let frame = compact::encode_for(&hello, layout);
        assert_eq!(compact::is_compact(&frame[proto::HEADER_LEN..]), layout);
        s.write_all(&frame).unwrap();
        let up = stream_start(connection, Direction::ClientToServer);
        s.write_all(Pattern::get().slice(up, 0, 64)).unwrap();
        let ack = raw_frame(&mut s);
        assert_eq!(compact::is_compact(&ack[proto::HEADER_LEN..]), asked);
        let got = proto::decode_frame(&ack).unwrap().map(|(m, _)| m);
        assert_eq!(got, Some(Message::DataAck { connection }));
        let mut reply = [0u8; 2];
        s.read_exact(&mut reply).unwrap();
        let down = stream_start(connection, Direction::ServerToClient);
        assert_eq!(reply, Pattern::get().slice(down, 0, 2));
        let report = raw_frame(&mut s);
        assert_eq!(compact::is_compact(&report[proto::HEADER_LEN..]), asked);
        let Ok(Some((Message::Final(r), _))) = proto::decode_frame(&report) else {
            panic!("no report: {report:?}")
        };
        assert_eq!((r.sent, r.received, &r.verdict), (2, 64, &Verdict::Ok));
        assert!(r.tcp_info.is_some_and(|i| i.snd_mss > 0), "{r:?}");
        let mine = Message::Final(FinalReport {
            sent: 64,
            received: 2,
            verdict: Verdict::Ok,
            tcp_info: None,
        });
        proto::write_message(&mut s, &mine).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "{rest:?}");
        // The server agreed: a success in its summary.
        proto::write_message(&mut c, &Message::Goodbye).unwrap();
        let summary = loop {
            match proto::read_message(&mut c) {
                Ok(Message::Summary(s)) => break s,
                Ok(_) => {}
                Err(e) => panic!("no summary: {e}"),
            }
        };
        assert_eq!(
            (summary.success, summary.connections),
            (1, 1),
            "{summary:?}"
        );
    }
}
