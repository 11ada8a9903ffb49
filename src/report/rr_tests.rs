//! Request/response, ping and crr output as a user reads it.

use super::*;
use crate::protocol::rr::hist::{LatencyStats, Summary};
use crate::rr::client::{Probe, RrConfig, RrReport, Transport, UNBOUNDED};

fn summary(count: u64) -> Summary {
    Summary {
        count,
        min_us: 10.0,
        max_us: 40.0,
        mean_us: 20.0,
        variance_us2: 25.0,
        stddev_us: 5.0,
        percentiles_us: vec![
            ("p50".into(), 19.5),
            ("p99".into(), 39.0),
            ("p99.9".into(), 39.9),
        ],
        hdr: String::new(),
    }
}

fn report() -> RrReport {
    RrReport {
        size: 64,
        reply: 128,
        transport: Transport::Udp,
        warmup: None,
        latency: Some(summary(90)),
        transactions_per_sec: 1234.4,
        sent: 100,
        received: 90,
        late: 1,
        lost_up: None,
        lost_down: None,
        duplicates_up: None,
        duplicates_down: None,
        reordered_up: None,
        reordered_down: None,
        offset: None,
        interrupted: false,
        corrupt: 0,
        server_requests: None,
        server_corrupt: None,
        rx_stamped: 0,
        reply_marking: None,
        histogram: Vec::new(),
        local: None,
        error: None,
    }
}

fn config() -> RrConfig {
    RrConfig {
        target: "h:4794".into(),
        port: 4794,
        key: None,
        transport: Transport::Tcp,
        size: 64,
        reply: 128,
        iterations: 1000,
        warmup: 10,
        nagle: false,
        busy_poll: false,
        rx_timestamps: false,
        timeout: None,
        interval: None,
        hist_min_us: 0.0,
        hist_max_us: 100.0,
        hist_bins: 10,
        outliers: 0,
        synced: false,
        bind: Vec::new(),
        sock: Default::default(),
        bind_dev: None,
        cport: None,
        start_at: None,
        duration: None,
        connect_timeout: None,
    }
}

#[test]
fn a_spectrum_row_gives_latency_rate_and_losses() {
    let mut r = report();
    assert_eq!(
        spectrum_cells(&r),
        [
            "64", "128", "90", "10.000", "20.000", "19.500", "39.000", "39.900", "40.000", "5.000",
            "1234", "10"
        ]
    );
    r.latency = None;
    r.received = 101;
    assert_eq!(
        spectrum_cells(&r)[2..],
        ["0", "-", "-", "-", "-", "-", "-", "-", "1234", "0"]
    );
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.csv");
    write_spectrum_csv(&p, &[report()]).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(text.starts_with("SizeBytes,ReplyBytes,"), "{text}");
    assert!(
        text.lines().nth(1).unwrap().starts_with("64,128,90,"),
        "{text}"
    );
}

#[test]
fn the_histogram_file_gives_each_bin_its_share_and_the_running_total() {
    let mut stats = LatencyStats::new(0.0, 20.0, 2, 0);
    for ns in [5_000, 5_000, 15_000, 25_000] {
        stats.record_ns(ns);
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("h.csv");
    write_hist_csv(&p, &stats).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "LowUs,HighUs,Count,Fraction,Cumulative",
            ",0.000,0,0.000000,0.000000",
            "0.000,10.000,2,0.500000,0.500000",
            "10.000,20.000,1,0.250000,0.750000",
            "20.000,,1,0.250000,1.000000",
        ]
    );
}

#[test]
fn the_rr_banner_says_how_long_it_runs() {
    let mut cfg = config();
    assert_eq!(
        rr_banner(&cfg),
        "Request/response over TCP: 64 B request, 128 B reply, 1000 measured + 10 warm-up iterations"
    );
    cfg.duration = Some(std::time::Duration::from_millis(1500));
    assert!(
        rr_banner(&cfg)
            .ends_with("1000 measured + 10 warm-up iterations or 1.500 s, whichever ends first")
    );
    cfg.iterations = UNBOUNDED;
    cfg.nagle = true;
    cfg.busy_poll = true;
    assert!(
        rr_banner(&cfg).ends_with("for 1.500 s after 10 warm-up iterations, Nagle on, busy-poll")
    );
    cfg.duration = None;
    assert!(
        rr_banner(&cfg).ends_with("until stopped after 10 warm-up iterations, Nagle on, busy-poll")
    );
    let names: Vec<&str> = [
        Transport::Tcp,
        Transport::Udp,
        Transport::Sctp,
        Transport::SctpSeqpacket,
    ]
    .into_iter()
    .map(transport_name)
    .collect();
    assert_eq!(names, ["TCP", "UDP", "SCTP", "SCTP one-to-many"]);
}

#[test]
fn rr_results_give_latency_rate_losses_each_way_and_the_title() {
    let mut r = report();
    r.warmup = Some(summary(10));
    r.lost_up = Some(4);
    r.lost_down = Some(6);
    r.duplicates_up = Some(1);
    r.duplicates_down = Some(2);
    r.reordered_up = Some(0);
    r.reordered_down = Some(3);
    r.corrupt = 2;
    r.rx_stamped = 85;
    r.interrupted = true;
    let l = rr_lines(&r);
    assert_eq!(
        l,
        [
            "Interrupted after 100 requests: the figures cover what was measured.",
            "Warm-up round trip: count 10 min 10.000 mean 20.000 max 40.000 stddev 5.000 variance 25.000 (us)",
            "Round trip: count 90 min 10.000 mean 20.000 max 40.000 stddev 5.000 variance 25.000 (us)",
            "Percentiles (us): p50 19.500, p99 39.000, p99.9 39.900",
            "Transactions per second: 1234",
            "Lost: 4 requests on the way up, 6 replies on the way down; 1 late replies",
            "Duplicates: 3 (up 1, down 2); reordered: 3 (up 0, down 3)",
            "Corrupt replies: 2",
            "Kernel receive timestamps timed 85 of 90 replies",
            "",
        ]
    );
    assert_eq!(
        rr_ace_title(&r),
        "netrig UDP Synchronous Latency Test (Message Size 64, Reply Size 128)"
    );
    // Nothing corrupt, nothing stamped: no lines for them.
    let mut r = report();
    r.corrupt = 0;
    r.rx_stamped = 0;
    let l = rr_lines(&r);
    assert_eq!(l.len(), 4, "{l:?}");
    r.latency = None;
    assert_eq!(rr_lines(&r), ["No measured round trips."]);
}

#[test]
fn reply_marking_is_shown_when_any_was_set_or_seen() {
    let mut r = report();
    r.reply_marking = Some(crate::protocol::udp::marks::Marking {
        sent_tos: 0,
        seen: Vec::new(),
        dscp_changed: 0,
        ecn_ce: 0,
        ecn_cleared: 0,
        ecn_other: 0,
    });
    assert_eq!(reply_marking_line(&r), None);
    if let Some(m) = r.reply_marking.as_mut() {
        m.sent_tos = 0xb8;
    }
    let line = reply_marking_line(&r).unwrap();
    assert!(
        line.starts_with("Reply marking: sent 0xb8 (EF, Not-ECT)"),
        "{line}"
    );
    assert!(rr_lines(&r).contains(&line));
    assert!(ping_summary_lines(&config(), &r).contains(&line));
}

fn probe(seq: u64) -> Probe {
    Probe {
        seq,
        rtt_us: Some(1500.0),
        up_us: None,
        down_us: None,
        split_error_us: None,
        late: false,
        duplicate: false,
        warmup: false,
    }
}

#[test]
fn a_ping_line_gives_the_round_trip_and_the_split_with_its_error() {
    let mut p = probe(7);
    assert_eq!(
        ping_line(64, "h", &p),
        "64 bytes from h: seq=7 rtt=1.500 ms"
    );
    p.up_us = Some(1000.0);
    p.down_us = Some(500.0);
    assert_eq!(
        ping_line(64, "h", &p),
        "64 bytes from h: seq=7 rtt=1.500 ms up=1.000 ms down=0.500 ms"
    );
    p.split_error_us = Some(250.0);
    assert_eq!(
        ping_line(64, "h", &p),
        "64 bytes from h: seq=7 rtt=1.500 ms up=1.000\u{b1}0.250 ms down=0.500\u{b1}0.250 ms"
    );
}

#[test]
fn the_ping_summary_gives_loss_each_way_and_the_rtts() {
    let mut cfg = config();
    let mut r = report();
    r.lost_up = Some(3);
    r.lost_down = Some(7);
    r.duplicates_up = Some(1);
    r.duplicates_down = Some(0);
    r.offset = Some(crate::protocol::udp::clock::Offset {
        server_minus_client_ns: -2500,
        uncertainty_ns: 700,
    });
    let l = ping_summary_lines(&cfg, &r);
    assert_eq!(
        l,
        [
            "",
            "--- h:4794 netrig ping statistics ---",
            "100 probes sent, 90 received, 10.0% loss (up 3, down 7), 1 late",
            "Duplicates: 1 (up 1, down 0); reordered: ? (up ?, down ?)",
            "rtt min/avg/max/mdev = 0.010/0.020/0.040/0.005 ms",
            "one-way split uses a clock offset of -2.5 us +/- 0.7 us (estimated in band)",
        ]
    );
    // Cut short: said only when a count was asked for.
    r.interrupted = true;
    assert!(
        ping_summary_lines(&cfg, &r).contains(&"interrupted before its 1000 probes".to_string())
    );
    cfg.iterations = UNBOUNDED;
    assert!(
        !ping_summary_lines(&cfg, &r)
            .iter()
            .any(|l| l.starts_with("interrupted"))
    );
    r.interrupted = false;
    cfg.iterations = 1000;
    assert!(
        !ping_summary_lines(&cfg, &r)
            .iter()
            .any(|l| l.starts_with("interrupted"))
    );
}

#[test]
fn crr_results_give_the_rate_both_latencies_and_why_it_failed() {
    let r = crate::rr::crr::CrrReport {
        transactions: 500,
        failed: 2,
        cancelled: 3,
        interrupted: true,
        start_unix: None,
        duration_secs: 2.0,
        per_sec: 250.0,
        handshake: Some(summary(500)),
        transaction: None,
        tcp_info: Some(Default::default()),
        server_tcp_info: None,
        server_output: Vec::new(),
    };
    let l = crr_lines(&r, Some("reset"));
    assert_eq!(
        l[0],
        "Transactions: 500 succeeded, 2 failed in 2.000 s = 250 connections/s"
    );
    assert!(
        l[1].starts_with("Handshake (connect): count 500 min 10.000"),
        "{l:?}"
    );
    assert_eq!(
        l[2],
        "  percentiles (us): p50 19.500, p99 39.000, p99.9 39.900"
    );
    assert!(
        l[3].starts_with("TCP_INFO (client ends, 0 connections)"),
        "{l:?}"
    );
    assert_eq!(l[4], "First failure: reset");
    assert_eq!(
        l[5],
        "Interrupted: stopped before its count or time; 3 transactions in flight were cancelled"
    );
    assert_eq!(l.len(), 6);
    assert_eq!(
        crr_banner(10, 20, 4),
        "Connect/request/response/close over TCP: 10 B request, 20 B reply, 4 in flight"
    );
}
