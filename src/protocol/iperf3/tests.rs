//! The iperf3 machine and messages in memory: the order of a whole
//! conversation, and malformed or hostile bytes at every step.

use super::udp::{Header, Receiver};
use super::*;

const COOKIE: &[u8; 37] = b"abcdefghijklmnopqrstuvwxyz234567abcd\0";

fn params_json(extra: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"tcp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":1,"len":131072,"client_version":"3.12"{extra}}}"#
    );
    frame_json(body.as_bytes())
}

#[test]
fn a_cookie_is_36_base32_characters_and_a_nul() {
    assert!(Cookie::parse(COOKIE).is_ok());
    assert_eq!(Cookie::parse(COOKIE).unwrap().text().len(), 36);
    let mut upper = *COOKIE;
    upper[3] = b'A';
    assert_eq!(Cookie::parse(&upper), Err(Iperf3Error::BadCookie));
    let mut digit = *COOKIE;
    digit[0] = b'8';
    assert_eq!(Cookie::parse(&digit), Err(Iperf3Error::BadCookie));
    let mut no_nul = *COOKIE;
    no_nul[36] = b'a';
    assert_eq!(Cookie::parse(&no_nul), Err(Iperf3Error::BadCookie));
    assert_eq!(Cookie::parse(&COOKIE[..36]), Err(Iperf3Error::BadCookie));
}

#[test]
fn a_whole_conversation_in_order_byte_by_byte() {
    let mut c = Control::new();
    let mut wire = COOKIE.to_vec();
    wire.extend(params_json(r#","reverse":true"#));
    wire.push(State::TestStart.byte());
    wire.push(State::TestEnd.byte());
    wire.extend(frame_json(
        br#"{"cpu_util_total":1,"cpu_util_user":0.5,"cpu_util_system":0.5,"sender_has_retransmits":-1,"streams":[{"id":1,"bytes":1000,"retransmits":-1,"jitter":0,"errors":0,"packets":0}]}"#,
    ));
    wire.push(State::IperfDone.byte());
    let mut events = Vec::new();
    for b in &wire {
        assert!(c.wants() >= 1, "phase {:?}", c.phase());
        events.extend(c.feed(std::slice::from_ref(b)).unwrap());
    }
    assert_eq!(c.phase(), Phase::Closed);
    assert_eq!(events.len(), 5, "{events:?}");
    assert!(matches!(events[0], Event::Cookie(_)));
    let Event::Params(p) = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(p.mode, Mode::Reverse);
    assert_eq!(events[2], Event::TestEnd);
    let Event::Results(r) = &events[3] else {
        panic!("{events:?}")
    };
    assert_eq!(r.streams[0].bytes, 1000);
    assert_eq!(r.sender_has_retransmits, -1);
    assert_eq!(events[4], Event::Done);
    assert!(c.feed(&[16]).is_err(), "bytes after the end");
}

#[test]
fn wants_never_reaches_past_the_current_message() {
    let mut c = Control::new();
    assert_eq!(c.wants(), 37);
    c.feed(&COOKIE[..10]).unwrap();
    assert_eq!(c.wants(), 27);
    c.feed(&COOKIE[10..]).unwrap();
    assert_eq!(c.wants(), 4);
    let p = params_json("");
    c.feed(&p[..4]).unwrap();
    assert_eq!(c.wants(), p.len() - 4);
    c.feed(&p[4..]).unwrap();
    assert_eq!(c.phase(), Phase::Running);
    assert_eq!(c.wants(), 1);
}

#[test]
fn all_at_once_gives_the_same_events() {
    let mut c = Control::new();
    let mut wire = COOKIE.to_vec();
    wire.extend(params_json(""));
    wire.push(State::ClientTerminate.byte());
    let events = c.feed(&wire).unwrap();
    assert_eq!(events.len(), 3);
    assert_eq!(events[2], Event::Terminated);
    assert_eq!(c.phase(), Phase::Closed);
}

#[test]
fn hostile_bytes_are_named_errors_not_panics() {
    // A netrig frame, an HTTP request: not a cookie.
    assert_eq!(
        Control::new().feed(&[b'G'; 37]).unwrap_err(),
        Iperf3Error::BadCookie
    );
    // An oversized parameter message is refused from its length alone.
    let mut c = Control::new();
    c.feed(COOKIE).unwrap();
    let err = c.feed(&(MAX_PARAMS_JSON + 1).to_be_bytes()).unwrap_err();
    assert!(matches!(err, Iperf3Error::TooLong { len, .. } if len == MAX_PARAMS_JSON + 1));
    assert!(c.feed(b"x").is_err(), "closed after an error");
    // The largest allowed length is taken.
    let mut c = Control::new();
    c.feed(COOKIE).unwrap();
    assert!(c.feed(&MAX_PARAMS_JSON.to_be_bytes()).is_ok());
    // Empty and invalid JSON.
    let mut c = Control::new();
    c.feed(COOKIE).unwrap();
    assert_eq!(
        c.feed(&[0, 0, 0, 0]).unwrap_err(),
        Iperf3Error::Empty("parameters")
    );
    for bad in [
        &b"{not json"[..],
        b"[1,2]",
        b"\xff\xfe",
        b"{\"parallel\":\"four\"}",
    ] {
        let mut c = Control::new();
        c.feed(COOKIE).unwrap();
        assert!(c.feed(&frame_json(bad)).is_err(), "{bad:?}");
    }
    // Deep nesting is refused by the parser's depth limit, not the stack.
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let mut c = Control::new();
    c.feed(COOKIE).unwrap();
    assert!(c.feed(&frame_json(deep.as_bytes())).is_err());
    // A state byte with no place while the test runs.
    for byte in [0u8, 2, 9, 13, 0x80, 0xff] {
        let mut c = Control::new();
        c.feed(COOKIE).unwrap();
        c.feed(&params_json("")).unwrap();
        assert!(
            matches!(
                c.feed(&[byte]).unwrap_err(),
                Iperf3Error::UnexpectedState { byte: b, .. } if b == byte as i8
            ),
            "{byte}"
        );
    }
    // Results: oversized, or missing what get_results requires.
    let mut c = Control::new();
    c.feed(COOKIE).unwrap();
    c.feed(&params_json("")).unwrap();
    c.feed(&[4]).unwrap();
    assert!(matches!(
        c.feed(&(MAX_RESULTS_JSON + 1).to_be_bytes()).unwrap_err(),
        Iperf3Error::TooLong { .. }
    ));
    assert!(Results::parse(br#"{"streams":[]}"#).is_err());
    assert!(
        Results::parse(
            br#"{"cpu_util_total":0,"cpu_util_user":0,"cpu_util_system":0,"sender_has_retransmits":0,"streams":[{"id":1}]}"#
        )
        .is_err()
    );
}

#[test]
fn parameters_are_read_and_bounded_as_iperf3_does() {
    let p = Params::parse(
        br#"{"udp":true,"time":3,"omit":1,"parallel":4,"len":1200,"bandwidth":2000000,"bidirectional":true,"get_server_output":1,"udp_counters_64bit":1,"window":65536,"congestion":"cubic"}"#,
    )
    .unwrap();
    assert_eq!(p.proto, Proto::Udp);
    assert_eq!(p.mode, Mode::Bidir);
    assert_eq!((p.parallel, p.time, p.omit, p.len), (4, 3, 1, 1200));
    assert_eq!((p.bandwidth, p.window), (2_000_000, 65536));
    assert!(p.get_server_output && p.udp_counters_64bit);
    assert_eq!(p.congestion.as_deref(), Some("cubic"));
    assert_eq!(p.streams(), 8);
    assert_eq!(p.seconds(), Some(4));
    // The first `parallel` streams are the server's receivers.
    assert!(!p.server_sends(3) && p.server_sends(4));
    // Defaults: TCP, client sends, 128 KiB blocks.
    let d = Params::parse(br#"{"time":10}"#).unwrap();
    assert_eq!(
        (d.proto, d.mode, d.len, d.parallel),
        (Proto::Tcp, Mode::ClientSends, 131072, 1)
    );
    assert!(!d.server_sends(0));
    assert_eq!(
        Params::parse(br#"{"time":1,"reverse":true}"#).unwrap().mode,
        Mode::Reverse
    );
    assert_eq!(
        Params::parse(br#"{"time":1,"udp":true}"#).unwrap().len,
        1460
    );
    // Bytes or blocks bound the sender.
    let n = Params::parse(br#"{"time":0,"num":5000,"len":1000}"#).unwrap();
    assert_eq!((n.seconds(), n.send_limit()), (None, Some(5000)));
    let k = Params::parse(br#"{"time":0,"blockcount":3,"len":1000}"#).unwrap();
    assert_eq!(k.send_limit(), Some(3000));
    assert_eq!(d.send_limit(), None);
    for bad in [
        &br#"{"time":10,"parallel":0}"#[..],
        br#"{"time":10,"parallel":129}"#,
        br#"{"time":86401}"#,
        br#"{"time":10,"omit":601}"#,
        br#"{"time":10,"len":1048577}"#,
        br#"{"time":10,"udp":true,"len":15}"#,
        br#"{"time":10,"udp":true,"len":65508}"#,
        br#"{"time":-1}"#,
        br#"{"time":0}"#,
        br#"{"time":10,"sctp":true}"#,
    ] {
        assert!(
            Params::parse(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // The edges that are allowed.
    assert!(Params::parse(br#"{"time":86400,"parallel":128,"len":1048576}"#).is_ok());
    assert!(Params::parse(br#"{"time":1,"udp":true,"len":16}"#).is_ok());
    assert!(Params::parse(br#"{"time":1,"udp":true,"len":65507}"#).is_ok());
}

#[test]
fn stream_ids_skip_two_as_iperf3s_do() {
    assert_eq!((0..4).map(stream_id).collect::<Vec<_>>(), [1, 3, 4, 5]);
}

#[test]
fn results_round_trip_and_carry_server_output() {
    let r = Results {
        cpu_util_total: 1.5,
        cpu_util_user: 1.0,
        cpu_util_system: 0.5,
        sender_has_retransmits: -1,
        streams: vec![StreamResult {
            id: 3,
            bytes: 123_456_789_012,
            retransmits: -1,
            jitter: 0.25,
            errors: 7,
            omitted_errors: 1,
            packets: 100,
            omitted_packets: 10,
            start_time: 0.0,
            end_time: 10.0,
        }],
        server_output_text: Some("hello\n".into()),
    };
    let text = r.to_json();
    let v: Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(v["server_output_text"], "hello\n");
    let back = Results::parse(&text).unwrap();
    assert_eq!(back.streams, r.streams);
    assert_eq!(back.sender_has_retransmits, -1);
    assert_eq!(
        frame_json(b"{}"),
        [0, 0, 0, 2, b'{', b'}'],
        "big-endian length, then the text"
    );
}

#[test]
fn udp_header_in_both_widths() {
    let h = Header {
        sec: 0x0102_0304,
        usec: 999_999,
        count: 0x1_0000_0005,
    };
    let mut b = [0u8; 16];
    h.write(true, &mut b);
    assert_eq!(&b[..4], &[1, 2, 3, 4]);
    assert_eq!(Header::read(true, &b), Some(h));
    let mut n = [0u8; 12];
    h.write(false, &mut n);
    assert_eq!(
        &n[8..12],
        &[0, 0, 0, 5],
        "32-bit counter keeps the low bits"
    );
    assert_eq!(Header::read(false, &n).unwrap().count, 5);
    assert_eq!(Header::read(false, &n[..11]), None);
    assert_eq!(Header::read(true, &n), None);
    assert_eq!((Header::len(false), Header::len(true)), (12, 16));
    assert!(udp::is_connect(b"9876") && !udp::is_connect(b"6789"));
    assert_eq!(&udp::CONNECT_REPLY, b"6789");
}

#[test]
fn udp_loss_order_and_jitter_as_iperf3_counts_them() {
    let at = |count: u64, sent: f64| Header {
        sec: sent as u32,
        usec: ((sent.fract()) * 1e6).round() as u32,
        count,
    };
    let mut r = Receiver::default();
    // 1, 2, then 5 (3 and 4 missing), then 3 late: 2 lost, then 1.
    r.on_datagram(100, at(1, 10.0), 10.010);
    r.on_datagram(100, at(2, 10.1), 10.110);
    assert_eq!(r.jitter, 0.0, "equal transit: no jitter");
    r.on_datagram(100, at(5, 10.4), 10.426);
    assert_eq!((r.packets, r.lost, r.out_of_order), (5, 2, 0));
    // Transit went from 10 ms to 26 ms: J = 16 ms / 16.
    assert!((r.jitter - 0.001).abs() < 1e-9, "{}", r.jitter);
    r.on_datagram(100, at(3, 10.2), 10.426);
    assert_eq!((r.packets, r.lost, r.out_of_order), (5, 1, 1));
    assert_eq!(r.bytes, 400);
    // Transit 226 ms after 26 ms: J += (0.2 - 0.001) / 16.
    assert!(
        (r.jitter - (0.001 + 0.199 / 16.0)).abs() < 1e-9,
        "{}",
        r.jitter
    );
    // A duplicate with nothing lost does not underflow.
    let mut d = Receiver::default();
    d.on_datagram(10, at(1, 1.0), 1.0);
    d.on_datagram(10, at(1, 1.0), 1.0);
    assert_eq!((d.lost, d.out_of_order), (0, 1));
}

#[test]
fn results_carry_the_cpu_count_in_percent_of_one_core() {
    let mut r = Results::default();
    r.set_cpu(&crate::protocol::cpu::CpuUsage {
        wall_us: 2_000_000,
        user_us: 300_000,
        system_us: 500_000,
        busiest_thread_us: 0,
        cores: 2,
    });
    assert_eq!(
        (r.cpu_util_total, r.cpu_util_user, r.cpu_util_system),
        (40.0, 15.0, 25.0)
    );
    let back = Results::parse(&r.to_json()).unwrap();
    assert_eq!(back.cpu_util_total, 40.0);
    assert_eq!(back.cpu_util_system, 25.0);
}

#[test]
fn a_cookies_first_bytes_are_told_from_netrigs_magic() {
    let c = b"abcdefghijklmnopqrstuvwxyz234567abcd\0";
    for n in 1..=COOKIE_LEN {
        assert!(Cookie::may_start(&c[..n]), "{n}");
    }
    assert!(Cookie::may_start(
        b"abcdefghijklmnopqrstuvwxyz234567abcd\0more"
    ));
    assert!(!Cookie::may_start(b""));
    assert!(!Cookie::may_start(&crate::protocol::proto::MAGIC));
    assert!(!Cookie::may_start(b"abcdefghijklmnopqrstuvwxyz234567abcdX"));
    assert!(!Cookie::may_start(b"ab1"));
    assert!(!Cookie::may_start(b"GET / HTTP/1.1"));
}

#[test]
fn the_bounds_are_iperf3s_and_ours() {
    // iperf3's MAX_PARAMS_JSON_STRING (iperf_api.h) is 8 * 1024; a client
    // writing a longer message is refused by iperf3's own server too.
    assert_eq!(MAX_PARAMS_JSON, 8192);
    assert_eq!(MAX_RESULTS_JSON, 262_144);
    assert_eq!(COOKIE_LEN, 37);
}

/// Edges of the parameter and results checks that the tests above leave
/// open: each pins a figure a client's test gets or a refusal it sees.
mod edges {
    use super::*;

    fn with(extra: &str) -> Result<Params, Iperf3Error> {
        Params::parse(format!(r#"{{"time":10{extra}}}"#).as_bytes())
    }

    #[test]
    fn counts_past_what_a_double_holds_exactly_are_refused() {
        // num up to 2^53 - 1 and blockcount up to 2^43 - 1 (2^53 bytes of
        // 1 KiB blocks), bandwidth up to 2^63 - 1 bit/s.
        assert_eq!(
            with(r#","num":9007199254740991"#).unwrap().num,
            (1 << 53) - 1
        );
        assert!(with(r#","num":9007199254740992"#).is_err());
        assert_eq!(
            with(r#","blockcount":8796093022207"#).unwrap().blockcount,
            (1 << 43) - 1
        );
        assert!(with(r#","blockcount":8796093022208"#).is_err());
        assert_eq!(
            with(r#","bandwidth":9223372036854775807"#)
                .unwrap()
                .bandwidth,
            (1 << 63) - 1
        );
        assert!(with(r#","bandwidth":9223372036854775808"#).is_err());
        // MSS: 0 to 32767.
        assert_eq!(with(r#","MSS":32767"#).unwrap().mss, 32767);
        assert!(with(r#","MSS":32768"#).is_err());
        // window: 0 to 512 MiB.
        assert_eq!(with(r#","window":536870912"#).unwrap().window, 512 << 20);
        assert!(with(r#","window":536870913"#).is_err());
    }

    #[test]
    fn fractions_are_truncated_and_negatives_refused() {
        // iperf3 reads numbers as C ints: 2.9 s is 2 s.
        let p = Params::parse(br#"{"time":2.9,"parallel":3.5}"#).unwrap();
        assert_eq!((p.time, p.parallel), (2, 3));
        for bad in [r#","omit":-1"#, r#","omit":-0.5"#, r#","num":-1.5"#] {
            assert_eq!(
                with(bad).unwrap_err().to_string().split(':').next(),
                Some(if bad.contains("omit") {
                    "iperf3 parameter omit"
                } else {
                    "iperf3 parameter num"
                }),
                "{bad}"
            );
        }
    }

    fn results_with(streams: &str) -> Result<Results, Iperf3Error> {
        Results::parse(
            format!(
                r#"{{"cpu_util_total":0,"cpu_util_user":0,"cpu_util_system":0,"sender_has_retransmits":1,"streams":[{streams}]}}"#
            )
            .as_bytes(),
        )
    }

    #[test]
    fn results_hold_at_most_two_streams_per_allowed_stream() {
        let one = r#"{"id":1,"bytes":10,"packets":0,"errors":0,"jitter":0}"#;
        let list = |n: usize| vec![one; n].join(",");
        assert_eq!(results_with(&list(256)).unwrap().streams.len(), 256);
        assert_eq!(
            results_with(&list(257)).unwrap_err(),
            Iperf3Error::Results("more streams than a test has")
        );
    }

    #[test]
    fn a_stream_without_retransmits_reports_minus_one_and_negatives_are_refused() {
        let r = results_with(r#"{"id":1,"bytes":10,"packets":2,"errors":0,"jitter":0.5}"#).unwrap();
        assert_eq!(r.streams[0].retransmits, -1, "iperf3's 'not known'");
        assert_eq!((r.streams[0].bytes, r.streams[0].packets), (10, 2));
        let r = results_with(
            r#"{"id":1,"bytes":10,"packets":2,"errors":0,"jitter":0,"retransmits":7}"#,
        )
        .unwrap();
        assert_eq!(r.streams[0].retransmits, 7);
        assert!(results_with(r#"{"id":1,"bytes":-5,"packets":2,"errors":0,"jitter":0}"#).is_err());
    }

    #[test]
    fn a_stray_state_byte_is_named_by_when_it_came() {
        let mut c = Control::new();
        c.feed(COOKIE).unwrap();
        c.feed(&params_json("")).unwrap();
        assert_eq!(
            c.feed(&[13]).unwrap_err().to_string(),
            "unexpected iperf3 state byte 13 while the test runs"
        );
        let mut c = Control::new();
        c.feed(COOKIE).unwrap();
        c.feed(&params_json("")).unwrap();
        c.feed(&[State::TestEnd.byte()]).unwrap();
        c.feed(&frame_json(
            br#"{"cpu_util_total":0,"cpu_util_user":0,"cpu_util_system":0,"sender_has_retransmits":1,"streams":[]}"#,
        ))
        .unwrap();
        assert_eq!(c.phase(), Phase::Display);
        assert_eq!(
            c.feed(&[1]).unwrap_err().to_string(),
            "unexpected iperf3 state byte 1 after the results"
        );
    }

    #[test]
    fn a_length_split_across_reads_is_still_checked() {
        let mut c = Control::new();
        c.feed(COOKIE).unwrap();
        let mut b = (MAX_PARAMS_JSON + 1).to_be_bytes().to_vec();
        b.extend_from_slice(br#"{"time":1}"#);
        assert!(c.feed(&b[..2]).unwrap().is_empty());
        assert!(matches!(
            c.feed(&b[2..]),
            Err(Iperf3Error::TooLong { len, .. }) if len == MAX_PARAMS_JSON + 1
        ));
    }
}
