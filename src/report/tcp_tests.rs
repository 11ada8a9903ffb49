//! The TCP console's lines and cells as a user reads them.

use super::*;
use crate::protocol::outcome::ConnResult;
use crate::protocol::proto::{SessionSummary, TcpBurst};
use crate::protocol::stats::Snapshot;
use crate::tcp::client::Omitted;

fn addr(s: &str) -> std::net::SocketAddr {
    s.parse().unwrap()
}

fn report() -> RunReport {
    RunReport {
        start_unix: 0.0,
        duration_secs: 2.0,
        totals: Snapshot {
            sent: 3_000_000,
            received: 1_000_000,
            completed: 4,
            net_errors: 1,
            data_errors: 2,
            cancelled: 3,
            ..Snapshot::default()
        },
        intervals: Vec::new(),
        servers: Vec::new(),
        interrupted: false,
        lost_servers: Vec::new(),
        refusals: Vec::new(),
        server_errors: Vec::new(),
        granted: None,
        tcp_info: None,
        server_output: Vec::new(),
        server_tcp_info: None,
        connection_times: None,
        connection_histogram: Vec::new(),
        connection_progress: Vec::new(),
        omitted: None,
        cpu: crate::protocol::cpu::CpuBoth::new(Default::default(), []),
    }
}

fn record(kind: ResultKind, detail: &str) -> ConnectionRecord {
    ConnectionRecord {
        time_slice: 1.5,
        local: Some(addr("127.0.0.1:40000")),
        remote: addr("127.0.0.1:4794"),
        sent: 1000,
        received: 2000,
        time_ms: 12.5,
        connect_ms: 0.25,
        buffer: 65536,
        result: ConnResult {
            kind,
            detail: detail.into(),
        },
        connection_id: uuid::Uuid::nil(),
        bursts: Vec::new(),
        tcp_info: None,
        peer_tcp_info: None,
        refused: None,
        index: 0,
        progress: Vec::new(),
    }
}

fn reporter(verbosity: u8) -> (Reporter, crate::report::Capture) {
    let mut r = Reporter::new(verbosity, None, None).unwrap();
    let c = r.console.capture();
    (r, c)
}

#[test]
fn after_omit_counts_what_came_after_the_warm_up() {
    let mut rep = report();
    rep.duration_secs = 5.0;
    let o = Omitted {
        secs: 1.0,
        at: Snapshot {
            sent: 1_000_000,
            received: 400_000,
            ..Snapshot::default()
        },
    };
    assert_eq!(after_omit(&rep, &o), (2_000_000, 600_000, 4.0));
}

#[test]
fn the_summary_gives_counts_bytes_time_and_goodput_each_way() {
    let mut rep = report();
    // A server without a summary: client->server falls back to what the
    // client sent.
    rep.servers = vec![(addr("127.0.0.1:4794"), None)];
    let l = summary_lines(&rep);
    assert_eq!(l[0], "");
    assert_eq!(
        l[3],
        "SuccessfulConnections [4] NetworkErrors [1] DataErrors [2] Cancelled [3]"
    );
    assert!(l.contains(&"Total Time : 2000 ms.".to_string()), "{l:?}");
    assert!(
        l.contains(
            &"Goodput (received at the far end) : client->server 12.00 Mbit/s / server->client 4.00 Mbit/s"
                .to_string()
        ),
        "{l:?}"
    );
    assert!(
        l.contains(&"Server 127.0.0.1:4794: no summary (control connection lost)".to_string()),
        "{l:?}"
    );
    assert!(!l.iter().any(|l| l.contains("interrupted")), "{l:?}");
}

#[test]
fn the_summary_counts_client_to_server_goodput_at_the_servers() {
    let mut rep = report();
    rep.servers = vec![(
        addr("127.0.0.1:4794"),
        Some(SessionSummary {
            connections: 1,
            bytes_received: 500_000,
            ..SessionSummary::default()
        }),
    )];
    rep.omitted = Some(Omitted {
        secs: 1.0,
        at: Snapshot {
            sent: 1_000_000,
            received: 500_000,
            ..Snapshot::default()
        },
    });
    rep.interrupted = true;
    let l = summary_lines(&rep);
    assert!(
        l.iter()
            .any(|l| l.contains("client->server 2.00 Mbit/s / server->client 4.00 Mbit/s")),
        "{l:?}"
    );
    assert!(
        l.iter()
            .any(|l| l.contains("1.000 s warm-up (-O; counted at the client) : client->server 16.00 Mbit/s / server->client 4.00 Mbit/s")),
        "{l:?}"
    );
    assert!(
        l.iter()
            .any(|l| l.starts_with("Server 127.0.0.1:4794: 1 connection, 0 succeeded")),
        "{l:?}"
    );
    assert_eq!(
        l.last().unwrap(),
        "(interrupted: in-flight connections were cancelled)"
    );
}

#[test]
fn the_tcp_info_line_gives_retransmits_rtts_and_limits() {
    let i = TcpInfoTotals {
        connections: 2,
        retransmits: 7,
        bytes_retrans: 2048,
        rtt_mean_us: 1500.0,
        rtt_max_us: 3000,
        min_rtt_us: 250,
        cwnd_max: 40,
        snd_mss_min: 1448,
        rwnd_limited_us: 1_500_000,
        sndbuf_limited_us: 250_000,
        ..TcpInfoTotals::default()
    };
    assert_eq!(
        tcp_info_line("client", &i),
        "TCP_INFO (client ends, 2 connections): Retr 7 (2.00 KiB), RTT mean 1.500 ms max 3.000 ms min 0.250 ms, \
         Cwnd up to 40 segments, snd_mss (smallest) 1448; limited by receive window 1.500 s, by send buffer 0.250 s"
    );
}

#[test]
fn the_connection_file_row_gives_each_way_bytes_per_second() {
    let (mut r, _console) = reporter(0);
    let file = crate::report::Capture::default();
    r.connections = Some(RowWriter::console(Box::new(file.clone()), &[0; 13]));
    // 1000 and 2000 bytes over 12.5 ms.
    r.connection(&record(ResultKind::Success, ""));
    let mut idle = record(ResultKind::Cancelled, "stopped");
    idle.time_ms = 0.0;
    r.connection(&idle);
    let rows: Vec<Vec<String>> = file
        .text()
        .lines()
        .map(|l| l.split(' ').map(String::from).collect())
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        &rows[0][3..8],
        ["1000", "80000", "2000", "160000", "12.500"]
    );
    // No time, no rate (not a division by zero).
    assert_eq!((rows[1][4].as_str(), rows[1][6].as_str()), ("0", "0"));
}

#[test]
fn the_first_failure_is_the_first_network_or_data_error_not_a_refusal() {
    let (mut r, _c) = reporter(0);
    r.connection(&record(ResultKind::Success, ""));
    r.connection(&record(ResultKind::Cancelled, "stopped"));
    assert_eq!(r.first_failure(), None);
    let mut refused = record(ResultKind::NetworkError, "refused: busy");
    refused.refused = Some((
        crate::protocol::proto::ErrorCode::UnknownSession,
        "busy".into(),
    ));
    r.connection(&refused);
    assert_eq!(r.first_failure(), None);
    r.connection(&record(ResultKind::DataError, "byte 7 differs"));
    r.connection(&record(ResultKind::NetworkError, "reset"));
    assert_eq!(r.first_failure(), Some("byte 7 differs"));
}

#[test]
fn failed_connections_print_from_vv_and_all_from_vvv() {
    let shown = |verbosity, kind| {
        let (mut r, c) = reporter(verbosity);
        r.connection(&record(kind, "why"));
        c.text()
    };
    let line = "[1.500] 00000000-0000-0000-0000-000000000000 127.0.0.1:40000 -> 127.0.0.1:4794 sent 1000 recv 2000 in 12.500 ms: ";
    assert_eq!(shown(1, ResultKind::NetworkError), "");
    assert!(
        shown(2, ResultKind::NetworkError).starts_with(line),
        "{}",
        shown(2, ResultKind::NetworkError)
    );
    assert_eq!(shown(2, ResultKind::Success), "");
    assert_eq!(shown(2, ResultKind::Cancelled), "");
    assert!(shown(3, ResultKind::Success).starts_with(line));
    assert!(shown(3, ResultKind::Cancelled).starts_with(line));
}

fn burst(index: u64, side: &str) -> TcpBurst {
    TcpBurst {
        index,
        side: side.into(),
        start_s: 0.5,
        end_s: 0.75,
        bytes: 4096,
        calls: 3,
        transfer_ms: 250.0,
        rate_bps: 131_072.0,
        duty_pct: 25.0,
        read_sizes: vec![(1024, 2), (2048, 1)],
        errors: 1,
        retransmits: Some(2),
        cwnd: Some(10),
        rtt_us: None,
        start_rt_ns: 1_000_000,
        end_rt_ns: 4_500_000,
    }
}

#[test]
fn bursts_print_a_line_each_with_both_ends_and_the_trip() {
    let mut rec = record(ResultKind::Success, "");
    rec.bursts = vec![burst(0, "send"), burst(0, "recv"), burst(1, "recv")];
    // Each end's clock stamps differ, so the trip shows which pair it used.
    rec.bursts[0].end_rt_ns = 2_000_000;
    rec.bursts[1].start_rt_ns = 1_200_000;
    rec.bursts[2].end_rt_ns = 9_000_000;
    let id = rec.connection_id;
    let send = " send 3 writes, 1 errors, retransmits 2, cwnd 10, rtt - us;";
    let recv = " recv 0.500000-0.750000 s, 4096 bytes in 3 reads, transfer 250.000 ms, 131.07 kbit/s, duty 25.0%, reads 1024+B x2 2048+B x1";
    assert_eq!(
        burst_lines(&rec, false),
        [
            format!("{id} burst    0:{send}{recv}"),
            format!("{id} burst    1:{recv}"),
        ]
    );
    // The trip runs from the sender's first byte to the receiver's last.
    assert_eq!(
        burst_lines(&rec, true),
        [
            format!("{id} burst    0:{send}{recv}; trip 3.500 ms"),
            format!("{id} burst    1:{recv}"),
        ]
    );
    // Bursts are printed from -v on.
    let (mut r, c) = reporter(1);
    r.connection(&rec);
    assert_eq!(c.text().lines().count(), 2, "{}", c.text());
    let (mut r, c) = reporter(0);
    r.connection(&rec);
    assert_eq!(c.text(), "");
}

#[test]
fn interval_rows_show_rates_with_units_and_mark_the_warm_up() {
    let a = Snapshot::default();
    let b = Snapshot {
        sent: 125_000,
        received: 250_000,
        in_flight: 2,
        ..Snapshot::default()
    };
    let mut row = IntervalRow::between(&a, 0.0, &b, 1.0);
    let (mut r, c) = reporter(1);
    let status = crate::report::Capture::default();
    r.status = Some(RowWriter::console(Box::new(status.clone()), &[0; 7]));
    r.interval(&row);
    row.omitted = true;
    r.interval(&row);
    let lines: Vec<Vec<String>> = c
        .text()
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    assert_eq!(lines[0][..5], ["1.000", "1.00", "Mbit/s", "2.00", "Mbit/s"]);
    assert_eq!(lines[1].last().unwrap(), "(omitted)");
    assert_eq!(lines[0].len() + 1, lines[1].len());
    // The status file keeps bytes per second.
    assert_eq!(
        status.text().lines().next(),
        Some("1.000 125000 250000 2 0 0 0")
    );
    let (mut r, c) = reporter(0);
    r.interval(&row);
    assert_eq!(c.text(), "");
}

/// A writer whose every write fails, like a full disk.
struct Full;

impl io::Write for Full {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::Error::other("disk full"))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_file_that_cannot_be_written_is_reported_and_the_run_goes_on() {
    let (mut r, _c) = reporter(0);
    r.status = Some(RowWriter::console(Box::new(Full), &[0; 7]));
    let row = IntervalRow::between(&Snapshot::default(), 0.0, &Snapshot::default(), 1.0);
    r.interval(&row);
    r.interval(&row);
    let e = r.take_errors();
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].to_string(), "disk full");
    assert!(r.take_errors().is_empty());
}

#[test]
fn the_tcp_info_file_is_created_with_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("info.csv");
    let (mut r, _c) = reporter(0);
    r.tcp_info_file(&p).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.starts_with("TimeSlice,"), "{text}");
    assert!(
        r.tcp_info_file(&dir.path().join("no/such/dir.csv"))
            .is_err()
    );
}

#[test]
fn the_banner_says_what_runs_and_for_how_long() {
    let mut cfg = TcpClientConfig::new(vec!["h1".into(), "h2".into()]);
    let targets = cfg.targets.clone();
    let l = banner_lines(&cfg, &targets, 1);
    assert_eq!(
        l[0],
        "Runs until Ctrl-C: no --iterations or --time (ctsTraffic's default)."
    );
    assert_eq!(l.len(), 2, "{l:?}");
    assert!(
        l[1].starts_with("TCP Push to h1, h2: 8 at a time x 1.00 GiB each, "),
        "{l:?}"
    );
    assert!(l[1].ends_with("; until Ctrl-C"), "{l:?}");
    cfg.iterations = Some(3);
    let l = banner_lines(&cfg, &targets, 1);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].ends_with("; 24 connections in all"), "{l:?}");
    cfg.iterations = None;
    cfg.time_limit = Some(std::time::Duration::from_millis(2500));
    let l = banner_lines(&cfg, &targets, 1);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].ends_with("; for 2.500 s"), "{l:?}");
    // -vv adds ctsTraffic's settings block and legend.
    let l = banner_lines(&cfg, &targets, 2);
    assert_eq!(l[1], "Configured Settings");
    assert_eq!(
        l.last().unwrap(),
        "* DataError - cumulative count of failed IO patterns due to data errors"
    );
    // The console: nothing at verbosity 0, the banner and the header at 1.
    let (mut r, c) = reporter(0);
    r.started(&cfg);
    assert_eq!(c.text(), "");
    let (mut r, c) = reporter(1);
    r.started(&cfg);
    let text = c.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("TCP Push to h1, h2"), "{text}");
    assert!(lines[1].trim_start().starts_with("TimeSlice"), "{text}");
}

#[test]
fn the_tcp_info_row_maps_linux_fields_to_cts_columns_and_leaves_the_rest_empty() {
    use crate::report::tcp_info_file::cells;
    let mut r = record(ResultKind::Success, "");
    assert_eq!(cells(&r), None, "never connected: no row");
    r.tcp_info = Some(crate::net::tcpinfo::TcpInfo {
        retransmits: 1,
        bytes_retrans: 2,
        rtt_us: 3,
        rttvar_us: 4,
        min_rtt_us: 5,
        cwnd: 6,
        snd_mss: 7,
        reord_seen: 8,
        dsack_dups: 9,
        delivery_rate: 10,
        busy_us: 11,
        rwnd_limited_us: 12,
        sndbuf_limited_us: 13,
        ..Default::default()
    });
    let c = cells(&r).unwrap();
    assert_eq!(c[..13], crate::report::connection_row::connection_cells(&r));
    assert_eq!(
        c[13..],
        [
            "", "2", "", "", "5", "7", "", "", "", "", "", // ctsTraffic's
            "1", "3", "4", "6", "8", "9", "80", "11", "12", "13", // Linux's
        ]
    );
    assert_eq!(c.len(), crate::report::tcp_info_file::headers().len());
    // A delivery rate too large to be bits per second in a u64 stays at the top.
    r.tcp_info.as_mut().unwrap().delivery_rate = u64::MAX / 4;
    assert_eq!(cells(&r).unwrap()[13 + 11 + 6], u64::MAX.to_string());
}
