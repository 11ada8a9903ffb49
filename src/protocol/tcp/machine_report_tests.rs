//! Unit tests of each end's final report as the I/O layer sees it: the
//! TCP_INFO it carries (a server's only), the fixed layout a client may ask
//! for, when it counts as sent, and a crr client with nothing to write
//! between its request and its report.

use super::*;

#[test]
fn an_ends_tcp_info_rides_in_its_report_to_the_peer() {
    let mut p = Pair::new(&spec(IoPattern::Pull, 10_000), 4096, 8192);
    let info = crate::protocol::proto::TcpInfoSummary {
        retransmits: 7,
        snd_mss: 1448,
        ..Default::default()
    };
    // Run until the server's report is ready, add its TCP_INFO then, as
    // the I/O layer does, and finish.
    for _ in 0..10_000 {
        if p.ends[1].take_info_request() {
            p.ends[1].set_final_tcp_info(info);
            break;
        }
        let now = p.clock();
        if let Transmit::Bytes(b) = p.ends[1].transmit(now) {
            let b = b.to_vec();
            let n = p.pipes[1].push(&b);
            p.ends[1].on_written(n, now);
        }
        let want = p.ends[0].want_read().min(p.pipes[1].q.len());
        if want > 0 {
            let d: Vec<u8> = p.pipes[1].q.drain(..want).collect();
            p.ends[0].on_read(&d, now);
        }
    }
    // A second request is not made, and a late setting changes nothing.
    assert!(!p.ends[1].take_info_request());
    p.run();
    assert_eq!(p.result(0).0.kind, ResultKind::Success);
    assert_eq!(p.ends[0].peer_tcp_info(), Some(info));
    assert_eq!(p.result(1).1.tcp_info, Some(info));
    // The client set none: the server learns none.
    assert_eq!(p.ends[1].peer_tcp_info(), None);
}

#[test]
fn a_clients_report_goes_without_its_tcp_info() {
    let mut p = Pair::new(&spec(IoPattern::Push, 10_000), 4096, 8192);
    let info = crate::protocol::proto::TcpInfoSummary {
        retransmits: 3,
        ..Default::default()
    };
    // Its report is ready, none of it written: offered its TCP_INFO then,
    // as the I/O layer does.
    p.run_until(|p| p.ends[0].info_wanted);
    assert!(p.ends[0].take_info_request());
    p.ends[0].set_final_tcp_info(info);
    p.run();
    assert_eq!(p.result(0).0.kind, ResultKind::Success);
    // The client keeps its reading (its I/O layer does); its report and
    // so the server know none.
    assert_eq!(p.result(0).1.tcp_info, None);
    assert_eq!(p.ends[1].peer_tcp_info(), None);
}

#[test]
fn a_server_asked_for_the_fixed_layout_reports_in_it_and_its_client_answers_so() {
    for asked in [false, true] {
        let mut p = Pair::new(&spec(IoPattern::Pushpull, 4000), 4096, 8192);
        p.ends[1].set_compact(asked);
        let info = crate::protocol::proto::TcpInfoSummary {
            rtt_us: 9,
            ..Default::default()
        };
        p.run_until(|p| p.ends[1].info_wanted);
        assert!(p.ends[1].take_info_request());
        p.ends[1].set_final_tcp_info(info);
        // The server's report, as it goes out.
        let Transmit::Bytes(b) = p.ends[1].transmit(p.clock()) else {
            panic!("no report")
        };
        assert_eq!(proto::compact::is_compact(&b[HEADER_LEN..]), asked, "{b:?}");
        p.run();
        assert_eq!(p.result(0).0.kind, ResultKind::Success, "asked {asked}");
        assert_eq!(p.ends[0].peer_tcp_info(), Some(info));
        // The client answers in the layout the server wrote.
        assert_eq!(p.ends[0].compact, asked);
    }
}

#[test]
fn the_report_counts_as_sent_once_its_last_byte_is_written() {
    let t = Instant::now();
    let now = Now {
        mono: t,
        real_ns: 0,
    };
    let mut s = spec(IoPattern::Push, 10);
    s.push_bytes = 10;
    let id = Uuid::from_u128(3);
    let mut server = Conn::new(&s, id, Role::Server, 64, t);
    let data = Pattern::get()
        .slice(stream_start(id, Direction::ClientToServer), 0, 10)
        .to_vec();
    server.on_read(&data, now);
    let len = match server.transmit(now) {
        Transmit::Bytes(b) => b.len(),
        other => panic!("{other:?}"),
    };
    server.on_written(len - 1, now);
    assert!(!server.report_sent());
    server.on_written(1, now);
    assert!(server.report_sent());
    assert!(!server.is_done(), "the client's report is still to come");
}

#[test]
fn a_crr_client_has_nothing_to_send_between_its_request_and_its_report() {
    // crr: a 64-byte request, a 2-byte reply.
    let mut s = spec(IoPattern::Pushpull, 66);
    (s.push_bytes, s.pull_bytes) = (64, 2);
    let mut p = Pair::new(&s, 64, 1 << 16);
    assert!(p.ends[0].has_to_send(), "the request");
    assert!(!p.ends[1].has_to_send(), "the server waits for it");
    p.run_until(|p| p.pipes[0].pushed == 64);
    assert!(!p.ends[0].has_to_send(), "the request is out: it waits");
    p.run_until(|p| p.ends[0].progress().1 == 2);
    assert!(p.ends[0].has_to_send(), "the reply is in: its report");
    p.run();
    assert!(!p.ends[0].has_to_send() && !p.ends[1].has_to_send());
    assert_eq!(p.result(0).0.kind, ResultKind::Success);
}
