//! Unit tests of the memory account and of what each test is charged.

use super::*;
use crate::protocol::proto::{IoPattern, RrProto};
use crate::protocol::udp::profile::{Profile, RateStep};

#[test]
fn the_account_draws_within_its_max_and_gives_back_on_drop() {
    let a = Account::default();
    let one = a.take(600, 1000, Drawn::Test).unwrap();
    assert_eq!((one.bytes(), a.held()), (600, 600));
    // Exactly to the max is within it; one byte past is not.
    let two = a.take(400, 1000, Drawn::Test).unwrap();
    assert_eq!(a.held(), 1000);
    assert_eq!(
        a.take(1, 1000, Drawn::Test).unwrap_err(),
        Limit::MemoryBudget {
            max: 1000,
            held: 1000,
            asked: 1,
            what: Drawn::Test,
        }
    );
    assert_eq!(a.held(), 1000, "a refused draw holds nothing");
    // Nothing asked is always drawn, even when the account is full.
    let none = a.take(0, 1000, Drawn::Test).unwrap();
    assert_eq!(none.bytes(), 0);
    // Even past a smaller max (a data connection without burst records,
    // say, on a server whose tests hold the whole account).
    assert_eq!(a.take(0, 10, Drawn::Test).unwrap().bytes(), 0);
    drop(two);
    assert_eq!(a.held(), 600);
    let again = a.take(400, 1000, Drawn::Test).unwrap();
    drop((one, again, none));
    assert_eq!(a.held(), 0);
    // A clone is the same account.
    let b = a.clone();
    let _c = b.take(10, 1000, Drawn::Test).unwrap();
    assert_eq!(a.held(), 10);
}

#[test]
fn a_refusal_names_the_account_with_the_memory_code() {
    let why = Account::default()
        .take(3 << 20, 2 << 20, Drawn::Test)
        .unwrap_err();
    assert_eq!(
        why.code(),
        crate::protocol::proto::ErrorCode::LimitMemory,
        "{why}"
    );
    assert_eq!(
        why.to_string(),
        "max memory 2.00 MiB held by tests and connections (0 B held, this test needs 3.00 MiB); try again later"
    );
}

fn tcp() -> TcpSpec {
    TcpSpec::plain(IoPattern::Push, 1 << 20, 0, 0)
}

#[test]
fn a_tcp_test_is_charged_its_session_and_the_rows_it_keeps() {
    let row = size_of::<crate::protocol::stats::IntervalRow>() as u64;
    assert_eq!(test_bytes(&TestSpec::Tcp(tcp())), SESSION_BYTES);
    let rows = |interval_ms, duration_ms| {
        test_bytes(&TestSpec::Tcp(TcpSpec {
            server_interval_ms: interval_ms,
            duration_ms,
            ..tcp()
        })) - SESSION_BYTES
    };
    // 10 s of 1 s rows: ten, the first and the last partial ones.
    assert_eq!(rows(1000, 10_000), 12 * row);
    assert_eq!(rows(1000, 999), 2 * row);
    // Unbounded in time, or longer than the rows kept: all of them.
    assert_eq!(rows(1000, 0), MAX_SERVER_ROWS as u64 * row);
    assert_eq!(rows(100, 3_600_000), MAX_SERVER_ROWS as u64 * row);
    assert_eq!(rows(0, 10_000), 0);
    assert_eq!(burst_bytes(3), 3 * BURST_RECORD_BYTES);
    assert_eq!(burst_bytes(u64::MAX), u64::MAX);
}

#[test]
fn a_udp_stream_is_charged_what_its_end_on_the_server_holds() {
    let recv = UdpSpec {
        hist_bins: 1000,
        ..UdpSpec::steady(1000, 1_000_000_000, 1000)
    };
    assert_eq!(
        test_bytes(&TestSpec::Udp(recv.clone())),
        SESSION_BYTES + HDR_BYTES + 8000
    );
    let mut send = UdpSpec {
        reverse: true,
        ..recv.clone()
    };
    send.sock.no_offload = true;
    // 64 datagrams a batch without offload; with it, 256 KiB of them.
    let fixed = SESSION_BYTES + HDR_BYTES + 4096 * 8;
    assert_eq!(test_bytes(&TestSpec::Udp(send.clone())), fixed + 64 * 1000);
    send.sock.no_offload = false;
    assert_eq!(test_bytes(&TestSpec::Udp(send.clone())), fixed + 262 * 1000);
    // A profile's largest datagram sets the stride; precomputed, each of
    // its departures is held.
    let step = |at_ns, rate_bps, size| RateStep {
        at_ns,
        rate_bps,
        size,
        hold: false,
    };
    // 8 Mbit/s of 1000-byte datagrams for 1 s: 1,000 departures.
    let p = Profile::new(vec![
        step(0, 8_000_000, 1000),
        step(1_000_000_000, 8_000_000, 1000),
    ])
    .unwrap();
    send.profile = Some(p);
    assert_eq!(test_bytes(&TestSpec::Udp(send.clone())), fixed + 262 * 1000);
    send.precompute = true;
    assert_eq!(
        test_bytes(&TestSpec::Udp(send.clone())),
        fixed + 262 * 1000 + (1000 + 2) * 16
    );
    // However long, never more than the sender keeps.
    let long = Profile::new(vec![
        step(0, 8_000_000_000, 64),
        step(10_000_000_000, 8_000_000_000, 64),
    ])
    .unwrap();
    send.profile = Some(long);
    let stride = 64 * 4096;
    assert_eq!(
        test_bytes(&TestSpec::Udp(send)),
        fixed + stride + (crate::udp::send::MAX_PRECOMPUTED as u64 + 1) * 16
    );
    // Received, a precomputed profile is the sender's business.
    let recv = UdpSpec {
        precompute: true,
        ..recv
    };
    assert_eq!(
        test_bytes(&TestSpec::Udp(recv)),
        SESSION_BYTES + HDR_BYTES + 8000
    );
}

#[test]
fn a_request_response_test_is_charged_its_buffers_and_histograms() {
    let spec = RrSpec {
        proto: RrProto::Tcp,
        size: 100,
        reply: 70_000,
        iterations: 10,
        nagle: false,
        until_stopped: false,
        sock: Default::default(),
        duration_ms: 0,
    };
    assert_eq!(
        test_bytes(&TestSpec::Rr(spec)),
        SESSION_BYTES + 70_100 + 2 * HDR_BYTES
    );
}

#[test]
fn the_fixed_charges_cover_what_they_stand_for() {
    use crate::protocol::proto::{HEADER_LEN, MAX_PAYLOAD};
    // A control connection reads a frame of up to 64 KiB, one read past
    // it, and queues 64 KiB of answers and one frame more, beside its state.
    let frame = (MAX_PAYLOAD + HEADER_LEN) as u64;
    let reading = frame + crate::net::ahead::AHEAD as u64;
    let queued = crate::server::limits::OUT_HIGH as u64 + frame;
    let state = size_of::<crate::server::control::Control<'static>>() as u64;
    assert!(CONTROL_BYTES >= reading + queued + state, "{CONTROL_BYTES}");
    assert!(
        CONTROL_BYTES < reading + queued + (16 << 10),
        "{CONTROL_BYTES}"
    );
    // A session's state, the first of its records, and room for what
    // they point to (names, the connection numbers it saw at the start).
    let session = size_of::<crate::server::tcp::Session>() as u64;
    assert!(
        SESSION_BYTES >= 4 * session,
        "{session} against {SESSION_BYTES}"
    );
    // Each session on the loops (its machine, its own part, its queue),
    // with as much again for what they point to, beside the buffers and
    // histograms its kind is charged for.
    let loop_sessions = [
        ("rr udp", size_of::<crate::server::rr_udp::RrUdp<'static>>()),
        ("rr tcp", size_of::<crate::server::rr_tcp::RrTcp<'static>>()),
        (
            "rr sctp",
            size_of::<crate::server::rr_sctp::RrSctp<'static>>(),
        ),
        (
            "udp recv",
            size_of::<crate::server::udp_recv::UdpRecv<'static>>(),
        ),
        (
            "udp send",
            size_of::<crate::server::udp_send::UdpSend<'static>>(),
        ),
    ];
    for (what, size) in loop_sessions {
        assert!(
            size as u64 <= SESSION_BYTES / 2,
            "{what}: {size} against {SESSION_BYTES}"
        );
    }
    // An hdrhistogram of three significant digits grown to its widest.
    let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    h.record(1).unwrap();
    h.record(u64::MAX / 2).unwrap();
    let counts = h.distinct_values() as u64 * 8;
    assert!(
        counts <= HDR_BYTES && counts * 5 / 4 > HDR_BYTES,
        "{counts} bytes of counts against {HDR_BYTES}"
    );
}

#[test]
fn an_iperf_test_is_charged_its_thread_buffer_streams_and_results() {
    let results = 2 * u64::from(crate::protocol::iperf3::MAX_RESULTS_JSON);
    let fixed = SESSION_BYTES + THREAD_BYTES + results;
    // A block under 64 KiB still reads into 64 KiB; a larger one is its size.
    assert_eq!(
        iperf3_bytes(1000, 1),
        fixed + (64 << 10) + IPERF3_STREAM_BYTES
    );
    assert_eq!(
        iperf3_bytes(1 << 20, 256),
        fixed + (1 << 20) + 256 * IPERF3_STREAM_BYTES
    );
    assert_eq!(IPERF2_TCP_BYTES, SESSION_BYTES + DATA_CONN_BYTES);
}

#[test]
fn a_connection_refused_by_the_account_says_it_is_a_connection() {
    let a = Account::default();
    let _t = a.take(900, 1000, Drawn::Test).unwrap();
    let why = a.take(200, 1000, Drawn::Connection).unwrap_err();
    assert!(
        why.to_string()
            .contains("(900 B held, this connection needs 200 B)"),
        "{why}"
    );
    let why = a.take(200, 1000, Drawn::IperfTest).unwrap_err();
    assert!(why.to_string().contains("this iperf test needs"), "{why}");
}
