//! The client machine against the server's, both in memory: what one
//! writes the other reads, in the order iperf3's ends keep.

use super::*;
use crate::protocol::iperf3::{Control, Event, StreamResult};

fn params(proto: Proto, mode: Mode) -> Params {
    Params {
        proto,
        mode,
        parallel: 4,
        time: 3,
        omit: 1,
        num: 0,
        blockcount: 0,
        len: 1000,
        window: 65536,
        bandwidth: 2_000_000,
        get_server_output: true,
        udp_counters_64bit: proto == Proto::Udp,
        nodelay: true,
        congestion: Some("reno".into()),
        mss: 1400,
        authtoken: false,
        client_version: Some("netrig".into()),
    }
}

fn cookie() -> Cookie {
    cookie_from([7; COOKIE_LEN - 1])
}

/// Feeds the server machine `b` one byte at a time; its events.
fn to_server(s: &mut Control, b: &[u8]) -> Vec<Event> {
    b.iter()
        .flat_map(|x| s.feed(std::slice::from_ref(x)).unwrap())
        .collect()
}

/// Feeds the client machine `b` one byte at a time, as a reader honouring
/// `wants` would.
fn to_client(c: &mut Client, b: &[u8]) -> Result<Vec<ClientEvent>, ClientError> {
    let mut out = Vec::new();
    for x in b {
        out.extend(c.feed(std::slice::from_ref(x))?);
    }
    Ok(out)
}

#[test]
fn a_whole_conversation_with_the_server_machine() {
    for (proto, mode) in [
        (Proto::Tcp, Mode::ClientSends),
        (Proto::Tcp, Mode::Reverse),
        (Proto::Tcp, Mode::Bidir),
        (Proto::Udp, Mode::ClientSends),
    ] {
        let p = params(proto, mode);
        let (mut c, first) = Client::new(&cookie(), &p);
        let mut s = Control::new();
        assert_eq!(to_server(&mut s, &first), vec![Event::Cookie(cookie())]);
        let ev = to_client(&mut c, &[State::ParamExchange.byte()]).unwrap();
        let [ClientEvent::Send(bytes)] = ev.as_slice() else {
            panic!("{ev:?}")
        };
        // What the server reads is what the client meant.
        let got = to_server(&mut s, bytes);
        assert_eq!(got, vec![Event::Params(Box::new(p.clone()))]);
        assert_eq!(c.phase(), ClientPhase::Create);
        let ev = to_client(
            &mut c,
            &[
                State::CreateStreams.byte(),
                State::TestStart.byte(),
                State::TestRunning.byte(),
            ],
        )
        .unwrap();
        assert_eq!(
            ev,
            vec![
                ClientEvent::CreateStreams,
                ClientEvent::TestStart,
                ClientEvent::TestRunning
            ]
        );
        let end = c.test_end().unwrap();
        assert_eq!(to_server(&mut s, &end), vec![Event::TestEnd]);
        let ev = to_client(&mut c, &[State::ExchangeResults.byte()]).unwrap();
        assert_eq!(ev, vec![ClientEvent::ExchangeResults]);
        assert_eq!(c.wants(), 0);
        let mine = Results {
            sender_has_retransmits: 1,
            streams: vec![StreamResult {
                id: 1,
                bytes: 123_456,
                packets: 0,
                ..StreamResult::default()
            }],
            ..Results::default()
        };
        let bytes = c.results(&mine).unwrap();
        let got = to_server(&mut s, &bytes);
        assert_eq!(got, vec![Event::Results(Box::new(mine.clone()))]);
        let theirs = Results {
            sender_has_retransmits: -1,
            streams: vec![StreamResult {
                id: 1,
                bytes: 123_456,
                errors: 3,
                packets: 99,
                jitter: 0.25,
                end_time: 3.0,
                ..StreamResult::default()
            }],
            server_output_text: Some("hello\n".into()),
            ..Results::default()
        };
        let mut answer = frame_json(&theirs.to_json());
        answer.push(State::DisplayResults.byte());
        let ev = to_client(&mut c, &answer).unwrap();
        assert_eq!(
            ev,
            vec![
                ClientEvent::ServerResults(Box::new(theirs.clone())),
                ClientEvent::Done(vec![State::IperfDone.byte()])
            ]
        );
        let ClientEvent::Done(done) = &ev[1] else {
            unreachable!()
        };
        assert_eq!(to_server(&mut s, done), vec![Event::Done]);
        assert_eq!(c.phase(), ClientPhase::Closed);
        assert!(c.feed(&[1]).is_err(), "nothing after the end");
    }
}

fn running() -> Client {
    let (mut c, _) = Client::new(&cookie(), &params(Proto::Tcp, Mode::ClientSends));
    to_client(&mut c, &[9, 10, 1, 2]).unwrap();
    assert_eq!(c.phase(), ClientPhase::Running);
    c
}

#[test]
fn a_busy_server_is_told_apart() {
    let (mut c, _) = Client::new(&cookie(), &params(Proto::Tcp, Mode::ClientSends));
    assert_eq!(
        to_client(&mut c, &[State::AccessDenied.byte()]),
        Err(ClientError::Busy)
    );
    assert_eq!(c.phase(), ClientPhase::Closed);
}

#[test]
fn a_server_error_carries_iperf3s_numbers() {
    let (mut c, _) = Client::new(&cookie(), &params(Proto::Tcp, Mode::ClientSends));
    let mut b = vec![9, State::ServerError.byte()];
    b.extend_from_slice(&37i32.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    let e = to_client(&mut c, &b).unwrap_err();
    assert_eq!(e, ClientError::ServerError { code: 37, errno: 0 });
    assert!(e.to_string().contains("duration"), "{e}");
    let e = ClientError::ServerError { code: 5, errno: 2 };
    assert_eq!(
        e.to_string(),
        "the iperf3 server refused the test: iperf3 error number 5 (iperf_api.h), errno 2"
    );
    assert!(
        !ClientError::ServerError { code: 27, errno: 0 }
            .to_string()
            .contains("errno")
    );
}

#[test]
fn garbage_is_not_iperf3() {
    let (mut c, _) = Client::new(&cookie(), &params(Proto::Tcp, Mode::ClientSends));
    let e = c.feed(b"HTTP/1.1 400 Bad Request\r\n").unwrap_err();
    assert_eq!(
        e,
        ClientError::NotIperf3 {
            byte: b'H',
            context: "where iperf3 sends PARAM_EXCHANGE (9)"
        }
    );
    // Every state byte out of its turn is an error too, never skipped.
    for (phase_bytes, bad) in [
        (&[][..], 10u8),
        (&[9][..], 1),
        (&[9, 10][..], 2),
        (&[9, 10, 1][..], 13),
    ] {
        let (mut c, _) = Client::new(&cookie(), &params(Proto::Tcp, Mode::ClientSends));
        to_client(&mut c, phase_bytes).unwrap();
        assert!(
            matches!(c.feed(&[bad]), Err(ClientError::NotIperf3 { .. })),
            "{bad}"
        );
    }
    let mut c = running();
    assert!(matches!(c.feed(&[13]), Err(ClientError::NotIperf3 { .. })));
}

#[test]
fn the_server_ending_the_test_is_an_error() {
    let mut c = running();
    assert_eq!(c.feed(&[11]), Err(ClientError::Terminated));
}

#[test]
fn results_are_bounded_and_must_be_json() {
    let end = |c: &mut Client| {
        c.test_end().unwrap();
        to_client(c, &[13]).unwrap();
        c.results(&Results::default()).unwrap();
    };
    let mut c = running();
    end(&mut c);
    let e = c.feed(&(MAX_RESULTS_JSON + 1).to_be_bytes()).unwrap_err();
    assert!(
        matches!(e, ClientError::Wire(Iperf3Error::TooLong { .. })),
        "{e:?}"
    );
    let mut c = running();
    end(&mut c);
    assert_eq!(
        c.feed(&0u32.to_be_bytes()),
        Err(ClientError::Wire(Iperf3Error::Empty("results")))
    );
    let mut c = running();
    end(&mut c);
    assert!(matches!(
        c.feed(&frame_json(b"[1]")),
        Err(ClientError::Wire(Iperf3Error::Json { .. }))
    ));
    // A length at the bound is read whole before it is judged.
    let mut c = running();
    end(&mut c);
    assert!(c.feed(&MAX_RESULTS_JSON.to_be_bytes()).unwrap().is_empty());
    assert_eq!(c.wants(), MAX_RESULTS_JSON as usize);
}

#[test]
fn turns_are_kept() {
    let (mut c, first) = Client::new(&cookie(), &params(Proto::Tcp, Mode::ClientSends));
    assert_eq!(first, cookie().0);
    assert!(c.test_end().is_err());
    assert!(c.results(&Results::default()).is_err());
    let mut c = running();
    assert!(c.results(&Results::default()).is_err());
    c.test_end().unwrap();
    assert!(c.test_end().is_err());
    assert_eq!(c.wants(), 1);
}

#[test]
fn cookies_are_what_make_cookie_gives() {
    let mut r = [0u8; COOKIE_LEN - 1];
    for (i, b) in r.iter_mut().enumerate() {
        *b = (i * 7 + 200) as u8;
    }
    let c = cookie_from(r);
    assert_eq!(Cookie::parse(&c.0), Ok(c));
    assert_eq!(cookie_from([0; 36]).text(), "a".repeat(36));
    assert_eq!(cookie_from([31; 36]).text(), "7".repeat(36));
    assert_eq!(cookie_from([26 + 32; 36]).text(), "2".repeat(36));
}

#[test]
fn parameters_leave_out_what_is_unset() {
    let mut p = params(Proto::Tcp, Mode::ClientSends);
    p.window = 0;
    p.bandwidth = 0;
    p.mss = 0;
    p.nodelay = false;
    p.congestion = None;
    p.get_server_output = false;
    let v: Value = serde_json::from_slice(&params_json(&p)).unwrap();
    for k in [
        "window",
        "bandwidth",
        "MSS",
        "nodelay",
        "congestion",
        "get_server_output",
        "udp_counters_64bit",
        "reverse",
        "bidirectional",
        "udp",
    ] {
        assert!(v.get(k).is_none(), "{k}");
    }
    assert_eq!(v["tcp"], json!(true));
    assert_eq!(v["pacing_timer"], json!(1000));
    assert_eq!(Params::parse(&params_json(&p)).unwrap(), p);
}

proptest::proptest! {
    /// Whatever a server sends, in whatever pieces, the machine answers
    /// with events or an error (then it is closed), never a panic, and
    /// never asks a reader for more than a results message's bound.
    #[test]
    fn any_bytes_from_a_server_are_handled(
        lead in proptest::collection::vec(proptest::sample::select(vec![9u8, 10, 1, 2]), 0..5),
        end in proptest::bool::ANY,
        junk in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..64), 0..8),
    ) {
        let (mut c, _) = Client::new(&cookie(), &params(Proto::Udp, Mode::Bidir));
        let mut ok = to_client(&mut c, &lead).is_ok();
        if ok && end && c.phase() == ClientPhase::Running {
            c.test_end().unwrap();
        }
        for piece in &junk {
            if !ok {
                break;
            }
            match c.feed(piece) {
                Ok(evs) => {
                    for e in evs {
                        if e == ClientEvent::ExchangeResults {
                            c.results(&Results::default()).unwrap();
                        }
                    }
                }
                Err(_) => {
                    ok = false;
                    proptest::prop_assert_eq!(c.phase(), ClientPhase::Closed);
                }
            }
            proptest::prop_assert!(c.wants() <= 4 + MAX_RESULTS_JSON as usize);
        }
    }
}

/// Edges the tests above leave open: what a user reads when a server
/// misbehaves, and reads split where the wire splits them.
mod edges {
    use super::*;

    #[test]
    fn a_byte_out_of_turn_names_what_iperf3_sends_there() {
        // Bytes that bring the client to each phase, then a byte (0) no
        // iperf3 server sends.
        let expect = [
            (&[][..], "where iperf3 sends PARAM_EXCHANGE (9)"),
            (&[9][..], "where iperf3 sends CREATE_STREAMS (10)"),
            (&[9, 10][..], "where iperf3 sends TEST_START (1)"),
            (&[9, 10, 1][..], "where iperf3 sends TEST_RUNNING (2)"),
            (&[9, 10, 1, 2][..], "while the test ran"),
        ];
        for (lead, context) in expect {
            let (mut c, _) = Client::new(&cookie(), &params(Proto::Tcp, Mode::ClientSends));
            to_client(&mut c, lead).unwrap();
            assert_eq!(
                c.feed(&[0]),
                Err(ClientError::NotIperf3 { byte: 0, context }),
                "{lead:?}"
            );
        }
        let mut c = running();
        c.test_end().unwrap();
        assert_eq!(
            c.feed(&[0]).unwrap_err().to_string(),
            "not an iperf3 server: it sent byte 0 where iperf3 sends EXCHANGE_RESULTS (13)"
        );
        let mut c = running();
        c.test_end().unwrap();
        to_client(&mut c, &[13]).unwrap();
        c.results(&Results::default()).unwrap();
        let mut b = frame_json(&Results::default().to_json());
        b.push(0);
        assert_eq!(
            to_client(&mut c, &b).unwrap_err().to_string(),
            "not an iperf3 server: it sent byte 0 where iperf3 sends DISPLAY_RESULTS (14)"
        );
    }

    #[test]
    fn a_server_errors_numbers_are_whole_32_bit_big_endian() {
        let mut b = 123_456i32.to_be_bytes().to_vec();
        b.extend_from_slice(&70_000i32.to_be_bytes());
        b.extend_from_slice(b"trailing");
        let want = || ClientError::ServerError {
            code: 123_456,
            errno: 70_000,
        };
        // In one read after the state byte, with whatever the server wrote
        // after them: a reader is told to read the 8 bytes at once.
        let (mut c, _) = Client::new(&cookie(), &params(Proto::Tcp, Mode::ClientSends));
        c.feed(&[State::ServerError.byte()]).unwrap();
        assert_eq!(c.wants(), 8);
        assert_eq!(c.feed(&b), Err(want()));
        assert_eq!(c.phase(), ClientPhase::Closed);
        // Split where the network split them: the first byte, then the rest.
        let (mut c, _) = Client::new(&cookie(), &params(Proto::Tcp, Mode::ClientSends));
        c.feed(&[State::ServerError.byte(), b[0]]).unwrap();
        assert_eq!(c.wants(), 7);
        assert_eq!(c.feed(&b[1..]), Err(want()));
    }

    #[test]
    fn a_results_length_split_across_reads_is_still_checked() {
        let mut c = running();
        c.test_end().unwrap();
        to_client(&mut c, &[13]).unwrap();
        c.results(&Results::default()).unwrap();
        let mut b = (MAX_RESULTS_JSON + 1).to_be_bytes().to_vec();
        b.extend_from_slice(b"{\"cpu\":1}");
        assert!(c.feed(&b[..2]).unwrap().is_empty());
        assert!(
            matches!(
                c.feed(&b[2..]),
                Err(ClientError::Wire(Iperf3Error::TooLong { len, .. })) if len == MAX_RESULTS_JSON + 1
            ),
            "the length is judged before any text is taken"
        );
    }
}
