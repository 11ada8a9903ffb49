//! Unit tests of `proto`.

use super::*;

/// An error message whose frame payload is exactly `len` bytes.
fn error_of_payload(len: usize) -> Message {
    let base = encoded_payload_len(&Message::error(ErrorCode::Malformed, ""));
    Message::error(ErrorCode::Malformed, "x".repeat(len - base))
}

#[test]
fn the_frame_limit_is_64_kib_exactly() {
    let header = |len: u32| {
        let mut h = [b'N', b'R', FRAME_VERSION, 0, 0, 0, 0, 0];
        h[4..8].copy_from_slice(&len.to_be_bytes());
        h
    };
    assert_eq!(parse_header(&header(0)), Ok(0));
    assert_eq!(parse_header(&header(65_536)), Ok(65_536));
    assert_eq!(
        parse_header(&header(65_537)),
        Err(ProtoError::Oversized(65_537))
    );
    assert_eq!(
        parse_header(&header(u32::MAX)),
        Err(ProtoError::Oversized(u32::MAX as usize))
    );
}

#[test]
fn frames_up_to_the_limit_are_written_and_larger_ones_never() {
    let mut out = Vec::new();
    write_message(&mut out, &error_of_payload(MAX_PAYLOAD)).unwrap();
    assert_eq!(out.len(), HEADER_LEN + MAX_PAYLOAD);
    assert!(matches!(decode_frame(&out), Ok(Some((_, n))) if n == out.len()));
    let mut out = Vec::new();
    let e = write_message(&mut out, &error_of_payload(MAX_PAYLOAD + 1)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("payload of 65537 bytes"), "{e}");
    assert!(out.is_empty(), "nothing of an oversized frame is written");
}

#[test]
fn a_chunk_that_fits_exactly_is_not_split_and_one_item_is_never_split() {
    let make = |v: Vec<String>, _last: bool| Message::error(ErrorCode::Malformed, v.concat());
    let base = encoded_payload_len(&make(Vec::new(), false));
    let fits = vec!["a".repeat(MAX_PAYLOAD - base - 1), "b".into()];
    assert_eq!(in_frames(&fits, 10, make).len(), 1);
    let over = vec!["a".repeat(MAX_PAYLOAD - base - 1), "bb".into()];
    assert_eq!(in_frames(&over, 10, make).len(), 2);
    // A single item too large for any frame stays one message (write_message refuses it).
    let huge = vec!["c".repeat(MAX_PAYLOAD + 10)];
    assert_eq!(in_frames(&huge, 10, make).len(), 1);
    // The UDP totals threshold is the frame limit, not less.
    let t = crate::protocol::udp::track::UdpTotals::default();
    let one = encoded_payload_len(&Message::UdpResult(t.clone()));
    assert!(one < MAX_PAYLOAD);
}

#[test]
fn large_results_go_in_frames_that_fit_in_order() {
    let bins: Vec<crate::protocol::udp::hist::Bucket> = (0..8000)
        .map(|i| (i as f64 * 50.5, (i + 1) as f64 * 50.5, u64::MAX - i))
        .collect();
    let t = crate::protocol::udp::track::UdpTotals {
        histogram: bins.clone(),
        ..Default::default()
    };
    let frames = udp_result_frames(t);
    let mut got = Vec::new();
    for m in &frames {
        assert!(encoded_payload_len(m) <= MAX_PAYLOAD);
        match m {
            Message::UdpHistogram { bins } => got.extend(bins.iter().copied()),
            Message::UdpResult(t) => assert!(t.histogram.is_empty()),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(frames.last(), Some(Message::UdpResult(_))));
    assert_eq!(got, bins);
    // A small histogram stays in the totals.
    let small = crate::protocol::udp::track::UdpTotals {
        histogram: bins[..10].to_vec(),
        ..Default::default()
    };
    assert_eq!(
        udp_result_frames(small.clone()),
        vec![Message::UdpResult(small)]
    );
    // Chunks too large for a frame are halved until they fit; `last` only on the last.
    let big: Vec<String> = (0..40).map(|i| format!("{i:04}").repeat(1000)).collect();
    let msgs = in_frames(&big, 100, |v, last| Message::Error {
        code: ErrorCode::Malformed,
        message: format!("{last}:{}", v.join(",")),
    });
    assert!(msgs.len() >= 3);
    let mut joined = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        assert!(encoded_payload_len(m) <= MAX_PAYLOAD);
        let Message::Error { message, .. } = m else {
            panic!()
        };
        let (last, rest) = message.split_once(':').unwrap();
        assert_eq!(last == "true", i + 1 == msgs.len());
        joined.extend(rest.split(',').map(String::from));
    }
    assert_eq!(joined, big);
    let none = in_frames::<u8>(&[], 10, |v, last| Message::Error {
        code: ErrorCode::Malformed,
        message: format!("{last}:{}", v.len()),
    });
    assert_eq!(none, vec![Message::error(ErrorCode::Malformed, "true:0")]);
}
use proptest::prelude::*;

#[test]
fn foreign_servers_are_named_by_their_first_bytes() {
    assert_eq!(
        foreign_server(b"HTTP/1.0 400"),
        Some("it answered with HTTP")
    );
    assert_eq!(
        foreign_server(b"SSH-2.0"),
        Some("it looks like an SSH server")
    );
    assert_eq!(foreign_server(&[9]), Some("it looks like an iperf3 server"));
    assert_eq!(
        foreign_server(&[9, 0]),
        Some("it looks like an iperf3 server")
    );
    assert_eq!(
        foreign_server(&[0xff]),
        Some("it looks like an iperf3 server")
    );
    assert_eq!(foreign_server(&[9, 1]), None);
    assert_eq!(foreign_server(b"NR"), None);
    assert_eq!(foreign_server(&[]), None);
}

fn samples() -> Vec<Message> {
    let id = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    vec![
        Message::Hello(Message::hello()),
        Message::TestRequest {
            test: TestSpec::Tcp(TcpSpec {
                pattern: IoPattern::Pushpull,
                transfer: 1 << 30,
                push_bytes: 1 << 20,
                pull_bytes: 1 << 20,
                verify: VerifyLevel::Data,
                connections: 8,
                burst: None,
                time_bound_ms: 0,
                sock: Default::default(),
                rate: None,
                transfer_max: None,
                server_interval_ms: 0,
                duration_ms: 0,
            }),
        },
        Message::TestAccept { session: id },
        Message::DataHello(DataHello {
            session: id,
            connection: id,
            buffer: 65536,
            compact: false,
            proof: Some("ab".repeat(32)),
        }),
        Message::Final(FinalReport {
            sent: 1,
            received: 2,
            verdict: Verdict::Corrupt { offset: 77 },
            tcp_info: None,
        }),
        Message::Final(FinalReport {
            sent: 1,
            received: 2,
            verdict: Verdict::Ok,
            tcp_info: Some(crate::protocol::proto::TcpInfoSummary {
                retransmits: 3,
                bytes_retrans: 4000,
                rtt_us: 50,
                min_rtt_us: 9,
                cwnd: 10,
                snd_mss: 1448,
                rwnd_limited_us: 1,
                sndbuf_limited_us: 2,
                busy_us: 3,
            }),
        }),
        Message::Stop,
        Message::ServerIntervals {
            rows: Vec::new(),
            truncated: true,
        },
        Message::Summary(SessionSummary::default()),
        Message::error(ErrorCode::Refused, "no"),
        Message::TestRequest {
            test: TestSpec::Rr(RrSpec::plain(RrProto::SctpSeqpacket, 64, 2, 10)),
        },
        Message::SeqpacketAccept {
            session: id,
            port: 4795,
        },
    ]
}

#[test]
fn seqpacket_is_named_as_on_the_command_line() {
    let json = serde_json::to_string(&RrProto::SctpSeqpacket).unwrap();
    assert_eq!(json, "\"sctp-seqpacket\"");
}

#[test]
fn roundtrip_all_samples() {
    for m in samples() {
        let bytes = encode(&m);
        let (back, used) = decode_frame(&bytes).unwrap().unwrap();
        assert_eq!(back, m);
        assert_eq!(used, bytes.len());
        assert_eq!(read_message(&mut &bytes[..]).unwrap(), m);
    }
}

#[test]
fn partial_frames_need_more() {
    let bytes = encode(&Message::Goodbye);
    for cut in 0..bytes.len() {
        assert_eq!(decode_frame(&bytes[..cut]), Ok(None), "cut at {cut}");
    }
}

#[test]
fn garbage_is_rejected_early() {
    assert_eq!(decode_frame(b"GE"), Err(ProtoError::BadMagic(*b"GE")));
    assert!(matches!(
        read_message(&mut &b"GET / HTTP/1.1\r\n"[..]),
        Err(ReadError::Proto(ProtoError::BadMagic(_)))
    ));
}

#[test]
fn bad_version_and_size() {
    let mut b = encode(&Message::Goodbye);
    b[2] = 9;
    assert_eq!(
        decode_frame(&b),
        Err(ProtoError::UnsupportedFrameVersion(9))
    );
    let mut b = encode(&Message::Goodbye);
    b[4..8].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_be_bytes());
    assert_eq!(
        decode_frame(&b),
        Err(ProtoError::Oversized(MAX_PAYLOAD + 1))
    );
}

/// A header alone is judged as soon as its eighth byte is in: a bad
/// version, and an empty payload (no message is empty), are errors then.
#[test]
fn a_complete_header_is_checked_in_full() {
    let mut b = encode(&Message::Goodbye);
    b[2] = 9;
    assert_eq!(
        decode_frame(&b[..HEADER_LEN]),
        Err(ProtoError::UnsupportedFrameVersion(9))
    );
    let empty = [b'N', b'R', FRAME_VERSION, 0, 0, 0, 0, 0];
    assert!(matches!(
        decode_frame(&empty),
        Err(ProtoError::Malformed(_))
    ));
}

#[test]
fn frame_remaining_counts_to_the_end_of_the_first_frame() {
    let b = encode(&Message::Goodbye);
    for cut in 0..=b.len() {
        // Until the header is in, the payload's length is not known.
        let want = if cut < HEADER_LEN {
            HEADER_LEN - cut
        } else {
            b.len() - cut
        };
        assert_eq!(frame_remaining(&b[..cut]), want, "cut at {cut}");
    }
    let mut two = b.clone();
    two.extend_from_slice(&b);
    assert_eq!(frame_remaining(&two), 0);
    assert_eq!(frame_remaining(b"GET / HT"), 0);
}

#[test]
fn malformed_payload() {
    let payload = br#"{"type":"no_such_message"}"#;
    let mut b = vec![b'N', b'R', FRAME_VERSION, 0];
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    assert!(matches!(decode_frame(&b), Err(ProtoError::Malformed(_))));
}

#[test]
fn eof_cases() {
    assert!(matches!(read_message(&mut &b""[..]), Err(ReadError::Eof)));
    assert!(matches!(
        read_message(&mut &b"NR\x01"[..]),
        Err(ReadError::Io(_))
    ));
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_frame(&bytes);
        let _ = read_message(&mut &bytes[..]);
    }

    #[test]
    fn mutated_frames_never_panic(idx in 0usize..200, val in any::<u8>(), which in 0usize..9) {
        let mut b = encode(&samples()[which]);
        let i = idx % b.len();
        b[i] = val;
        let _ = decode_frame(&b);
    }

    #[test]
    fn final_roundtrip(sent in any::<u64>(), received in any::<u64>(), off in any::<u64>()) {
        let m = Message::Final(FinalReport { sent, received, verdict: Verdict::Corrupt { offset: off }, tcp_info: None });
        prop_assert_eq!(decode_frame(&encode(&m)).unwrap().unwrap().0, m);
    }
}

/// A result whose frame is exactly the largest allowed goes whole; one byte
/// more and its histogram travels in chunks.
#[test]
fn a_result_of_exactly_max_payload_is_one_frame() {
    let payload = |t: &crate::protocol::udp::track::UdpTotals| {
        encode(&Message::UdpResult(t.clone())).len() - HEADER_LEN
    };
    let mut t = crate::protocol::udp::track::UdpTotals::default();
    while payload(&t) + 40 < MAX_PAYLOAD {
        let edge = t.histogram.len() as f64 * 50.0;
        t.histogram.push((edge, edge + 50.0, 0));
    }
    // Counts of 10 instead of 0 add one character each.
    let mut k = 0;
    while payload(&t) < MAX_PAYLOAD {
        t.histogram[k].2 = 10;
        k += 1;
    }
    assert_eq!(payload(&t), MAX_PAYLOAD);
    assert_eq!(udp_result_frames(t.clone()).len(), 1);
    t.histogram[k].2 = 10;
    assert!(udp_result_frames(t).len() > 1);
}

/// A read interrupted by a signal is retried, not an error.
#[test]
fn an_interrupted_read_is_retried() {
    struct Flaky(Vec<u8>, bool);
    impl std::io::Read for Flaky {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.1 = !self.1;
            if self.1 {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(self.0.len()).min(3);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }
    let mut r = Flaky(encode(&Message::Goodbye), false);
    assert_eq!(read_message(&mut r).unwrap(), Message::Goodbye);
}

/// The payload of `m`'s frame.
fn payload_of(m: &Message) -> Vec<u8> {
    encode(m)[HEADER_LEN..].to_vec()
}

#[test]
fn data_messages_decode_straight_and_agree_with_the_general_decoder() {
    let id = Uuid::from_u128(42);
    let mut data = vec![
        Message::DataAck { connection: id },
        Message::DataHello(DataHello {
            session: id,
            connection: Uuid::from_u128(7),
            buffer: 4096,
            compact: false,
            proof: None,
        }),
    ];
    data.extend(
        samples()
            .into_iter()
            .filter(|m| matches!(m, Message::DataHello(_) | Message::Final(_))),
    );
    assert_eq!(data.len(), 5);
    for m in data {
        let p = payload_of(&m);
        assert_eq!(decode_data_message(&p).as_ref(), Some(&m));
        assert_eq!(serde_json::from_slice::<Message>(&p).unwrap(), m);
    }
    // Other messages go to the general decoder.
    for m in [Message::Stop, Message::TestAccept { session: id }] {
        assert_eq!(decode_data_message(&payload_of(&m)), None);
        assert_eq!(decode_payload(&payload_of(&m)).unwrap(), m);
    }
    // The tag elsewhere than first, or a body that is not the tag's: the
    // general decoder decides, and words the error.
    let late = format!(r#"{{"connection":"{id}","type":"data_ack"}}"#);
    assert_eq!(decode_data_message(late.as_bytes()), None);
    assert_eq!(
        decode_payload(late.as_bytes()).unwrap(),
        Message::DataAck { connection: id }
    );
    let bad = br#"{"type":"final","sent":"many"}"#;
    assert_eq!(decode_data_message(bad), None);
    let general = serde_json::from_slice::<Message>(bad)
        .unwrap_err()
        .to_string();
    assert_eq!(decode_payload(bad), Err(ProtoError::Malformed(general)));
    assert_eq!(decode_data_message(br#"{"type":"final"#), None);
}

proptest! {
    #[test]
    fn every_final_report_decodes_straight(
        sent in any::<u64>(),
        received in any::<u64>(),
        n in any::<u64>(),
        which in 0usize..6,
        info in any::<bool>(),
    ) {
        let verdict = match which {
            0 => Verdict::Ok,
            1 => Verdict::TooFew { expected: n, received: sent },
            2 => Verdict::TooMany { expected: n },
            3 => Verdict::Corrupt { offset: n },
            4 => Verdict::NetworkError { detail: format!("e{n}") },
            _ => Verdict::Cancelled,
        };
        let tcp_info = info.then(|| crate::protocol::proto::TcpInfoSummary {
            retransmits: n as u32,
            rtt_us: (n >> 7) as u32,
            ..Default::default()
        });
        let m = Message::Final(FinalReport { sent, received, verdict, tcp_info });
        let p = payload_of(&m);
        prop_assert_eq!(decode_payload(&p), Ok(m.clone()));
        prop_assert_eq!(decode_data_message(&p), Some(m));
    }
}

#[test]
fn error_codes_travel_by_name_and_an_unknown_one_is_other() {
    let m = Message::error(ErrorCode::ConnectionReused, "again");
    let wire = serde_json::to_value(&m).unwrap();
    assert_eq!(wire["code"], "connection_reused");
    assert_eq!(serde_json::from_value::<Message>(wire).unwrap(), m);
    let later = serde_json::json!({"type": "error", "code": "a_code_from_later", "message": "x"});
    assert_eq!(
        serde_json::from_value::<Message>(later).unwrap(),
        Message::error(ErrorCode::Other, "x")
    );
}
