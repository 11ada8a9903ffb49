//! The UDP console's lines and the files' rows as a user reads them.

use super::*;
use crate::protocol::proto::UdpSpec;
use crate::protocol::udp::track::{BurstReport, UdpInterval, UdpTotals};
use crate::udp::client::{UdpClientConfig, UdpObserver, UdpReport};
use crate::udp::receive::PacketRow;

pub(crate) fn config(spec: UdpSpec) -> UdpClientConfig {
    UdpClientConfig {
        target: "h".into(),
        port: 4794,
        key: None,
        spec,
        synced: false,
        bind: None,
        bind_dev: None,
        rcvbuf: None,
        sndbuf: None,
        per_packet: false,
        cport: None,
        start_at: None,
        connect_timeout: None,
    }
}

pub(crate) fn udp_report(totals: Option<UdpTotals>) -> UdpReport {
    UdpReport {
        start_unix: 0.0,
        offset: None,
        sender: None,
        totals,
        intervals: Vec::new(),
        interrupted: false,
        server_lost: false,
        duration_secs: 2.0,
        bursts: Vec::new(),
        bins: None,
        analysis: None,
        granted: Default::default(),
        local: Some("127.0.0.1:5000".parse().unwrap()),
        remote: "127.0.0.1:4794".parse().unwrap(),
        session: uuid::Uuid::nil(),
        cpu: None,
    }
}

fn reporter(verbosity: u8, media: bool) -> (UdpReporter, crate::report::Capture) {
    let mut r = UdpReporter::new(verbosity, media, None, None).unwrap();
    let c = r.console.capture();
    (r, c)
}

fn words(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

#[test]
fn the_banner_gives_size_gap_rate_and_length() {
    let mut s = UdpSpec::steady(1000, 100_000_000, 2000);
    assert_eq!(
        udp_banner(&s),
        "UDP client -> server: 1000 B datagrams every 100.000 us (80.00 Mbit/s) for 2.000 s, pacing Sleep"
    );
    s.reverse = true;
    s.burst = Some(crate::protocol::proto::BurstSpec {
        size: 64_000,
        period_ms: 20,
    });
    assert_eq!(
        udp_banner(&s),
        "UDP server -> client: bursts of 64000 bytes (1000 B datagrams, 100.000 us apart) every 20 ms for 2.000 s"
    );
    s.gap_ps = 1;
    assert!(udp_banner(&s).contains("(1000 B datagrams, back to back)"));
    s.burst = None;
    s.media = Some(crate::protocol::proto::MediaSpec {
        fps: 30,
        frame_bytes: 5000,
        ..Default::default()
    });
    assert!(udp_banner(&s).ends_with(", media stream"));
    s.media = Some(crate::protocol::proto::MediaSpec {
        fps: 30,
        frame_bytes: 5000,
        varying: Some(crate::protocol::udp::iso::Varying {
            stdev_bytes: 700,
            seed: 1,
        }),
        ..Default::default()
    });
    assert_eq!(
        udp_banner(&s),
        "UDP server -> client: isochronous, 30 frames a second of 5000 B mean (1.20 Mbit/s), 700 B standard deviation, as 1000 B datagrams, for 2.000 s"
    );
}

#[test]
fn the_summary_rate_counts_the_senders_time_after_the_warm_up() {
    let mut spec = UdpSpec::steady(1000, 1_000_000, 3000);
    spec.omit_ms = 1000;
    let cfg = config(spec);
    let t = UdpTotals {
        sent: Some(200),
        unique: 150,
        packets: 160,
        bytes: 1_000_000,
        lost: 50,
        omitted: 7,
        ..Default::default()
    };
    let mut rep = udp_report(Some(t));
    rep.sender = Some(crate::protocol::udp::sent::SenderReport {
        duration_secs: 3.0,
        ..Default::default()
    });
    let l = udp_summary_lines(&cfg, &rep, false);
    // 1 MB over the sender's 3 s less the 1 s warm-up.
    let receiver = l.iter().find(|l| l.starts_with("Receiver:")).unwrap();
    assert!(
        receiver.starts_with(
            "Receiver: 160 datagrams (150 unique), 1000000 bytes, 4.00 Mbit/s; lost 50 (25.000%)"
        ),
        "{l:?}"
    );
    assert!(
        l.contains(
            &"Omitted: the first 1.000 s (7 datagrams received) are a warm-up, left out of everything below"
                .to_string()
        ),
        "{l:?}"
    );
    // Without the sender's account, the run's own time.
    rep.sender = None;
    rep.duration_secs = 5.0;
    let l = udp_summary_lines(&cfg, &rep, false);
    assert!(
        l.iter().any(|l| l.contains(" bytes, 2.00 Mbit/s;")),
        "{l:?}"
    );
    // No warm-up, no line about it.
    if let Some(t) = rep.totals.as_mut() {
        t.omitted = 0;
    }
    let l = udp_summary_lines(&cfg, &rep, false);
    assert!(!l.iter().any(|l| l.starts_with("Omitted")), "{l:?}");
}

#[test]
fn the_summary_lists_percentiles_and_with_v_the_histogram() {
    let mut cfg = config(UdpSpec::steady(1000, 1_000_000, 1000));
    let t = UdpTotals {
        percentiles_us: vec![("p50".into(), 12.34), ("p99".into(), 56.78)],
        histogram: vec![(10.0, 20.0, 5), (20.0, 30.0, 2)],
        ..Default::default()
    };
    let rep = udp_report(Some(t));
    let l = udp_summary_lines(&cfg, &rep, false);
    assert!(
        l.contains(&"Delay percentiles (us): p50 12.3, p99 56.8".to_string()),
        "{l:?}"
    );
    assert!(!l.iter().any(|l| l.starts_with("Delay histogram")), "{l:?}");
    assert!(!l.iter().any(|l| l.starts_with("Socket")), "{l:?}");
    assert!(
        !l.iter().any(|l| l.starts_with("Delay compensation")),
        "{l:?}"
    );
    let l = udp_summary_lines(&cfg, &rep, true);
    let at = l
        .iter()
        .position(|l| l.starts_with("Delay histogram"))
        .unwrap();
    assert_eq!(l[at + 1], "        10.0 - 20.0       5");
    assert_eq!(l[at + 2], "        20.0 - 30.0       2");
    // Nothing to list, no headings.
    let rep = udp_report(Some(UdpTotals::default()));
    let l = udp_summary_lines(&cfg, &rep, true);
    assert!(
        !l.iter()
            .any(|l| l.starts_with("Delay percentiles") || l.starts_with("Delay histogram")),
        "{l:?}"
    );
    // Socket options asked for: what was granted; a compensation: how much.
    cfg.spec.sock.window = Some(65536);
    cfg.spec.offset_comp_ns = -2500;
    let l = udp_summary_lines(&cfg, &rep, false);
    assert!(
        l.iter().any(|l| l.starts_with("Socket (as granted): ")),
        "{l:?}"
    );
    assert!(
        l.contains(&"Delay compensation: -2.5 us added".to_string()),
        "{l:?}"
    );
}

#[test]
fn early_arrivals_are_noted_with_how_early() {
    let mut t = UdpTotals {
        delays_below_zero: 3,
        below_zero_by_us: Some(12.5),
        ..Default::default()
    };
    let off = crate::protocol::udp::clock::Offset {
        server_minus_client_ns: 1000,
        uncertainty_ns: 4000,
    };
    assert_eq!(
        early_note(&t, Some(&off)).as_deref(),
        Some(
            "Early: 3 datagrams arrived up to 12.5 us before they were sent by these clocks: the clock offset estimate (+/- 4.0 us) is off by at least that, so the delays may read up to that much short; theirs count as 0"
        )
    );
    assert!(
        early_note(&t, None)
            .unwrap()
            .contains("not as synchronised as --synced trusts")
    );
    t.delays_below_zero = 0;
    assert_eq!(early_note(&t, Some(&off)), None);
    // The note reaches the summary.
    t.delays_below_zero = 1;
    let l = udp_summary_lines(
        &config(UdpSpec::steady(1000, 1_000_000, 1000)),
        &udp_report(Some(t)),
        false,
    );
    assert!(
        l.iter().any(|l| l.starts_with("Early: 1 datagrams")),
        "{l:?}"
    );
}

#[test]
fn the_marking_line_names_dscp_and_ecn() {
    let m = crate::protocol::udp::marks::Marking {
        sent_tos: 0xb8,
        seen: vec![crate::protocol::udp::marks::TosSeen {
            tos: 0xbb,
            dscp: 46,
            ecn: crate::protocol::udp::marks::Ecn::Ce,
            datagrams: 9,
        }],
        dscp_changed: 1,
        ecn_ce: 2,
        ecn_cleared: 3,
        ecn_other: 4,
    };
    assert_eq!(
        marking_line("Marking", &m),
        "Marking: sent 0xb8 (EF, Not-ECT); arrived 0xbb (EF, CE) x9; DSCP changed on 1, ECN CE-marked 2, ECN cleared 3, other ECN changes 4"
    );
    let t = UdpTotals {
        marking: Some(m),
        ..Default::default()
    };
    let l = udp_summary_lines(
        &config(UdpSpec::steady(1000, 1_000_000, 1000)),
        &udp_report(Some(t)),
        false,
    );
    assert!(
        l.iter().any(|l| l.starts_with("Marking: sent 0xb8")),
        "{l:?}"
    );
}

fn interval(time_slice: f64, bytes: u64) -> UdpInterval {
    UdpInterval {
        time_slice,
        bytes,
        packets: bytes / 1000,
        ..Default::default()
    }
}

#[test]
fn interval_rates_are_over_the_slice_since_the_last() {
    let (mut r, c) = reporter(1, false);
    let status = crate::report::Capture::default();
    r.status = Some(RowWriter::console(Box::new(status.clone()), &[0; 13]));
    r.interval(&interval(0.5, 125_000));
    let mut late = interval(1.0, 250_000);
    late.omitted = true;
    r.interval(&late);
    let rows = words(&c.text());
    assert_eq!(rows[0][..3], ["0.500", "2.00", "Mbit/s"]);
    assert_eq!(rows[1][..3], ["1.000", "4.00", "Mbit/s"]);
    assert_eq!(rows[1].last().unwrap(), "(omitted)");
    // By default the brief columns, with -v all of them.
    assert_eq!(rows[0].len(), 9 + 1, "{rows:?}");
    let (mut r, c) = reporter(2, false);
    r.interval(&interval(0.5, 125_000));
    assert_eq!(words(&c.text())[0].len(), 15 + 1);
    // Files keep the raw counts.
    assert_eq!(words(&status.text())[0][..3], ["0.500", "125000", "125"]);
    let (mut r, c) = reporter(0, false);
    r.interval(&interval(0.5, 125_000));
    assert_eq!(c.text(), "");
}

#[test]
fn the_media_table_counts_streams_running_until_the_stream_ends() {
    let (mut r, c) = reporter(1, true);
    r.stream_secs(1.0);
    r.interval(&interval(0.5, 125_000));
    r.interval(&interval(1.0, 250_000));
    r.interval(&interval(1.5, 0));
    let rows = words(&c.text());
    // TimeSlice, Bits/Sec over the slice, Streams.
    assert_eq!(rows[0][..3], ["0.500", "2000000", "1"]);
    assert_eq!(rows[1][..3], ["1.000", "4000000", "1"]);
    assert_eq!(rows[2][..3], ["1.500", "0", "0"]);
}

#[test]
fn the_banner_and_header_come_when_the_stream_starts() {
    let (mut r, c) = reporter(1, false);
    r.set_banner(vec!["first".into(), "second".into()]);
    r.started();
    let text = c.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..2], ["first", "second"]);
    assert!(lines[2].trim_start().starts_with("TimeSlice"), "{text}");
    let (mut r, c) = reporter(0, false);
    r.set_banner(vec!["first".into()]);
    r.started();
    assert_eq!(c.text(), "");
}

fn burst() -> BurstReport {
    BurstReport {
        index: 3,
        start_s: 1.0,
        end_s: 1.25,
        bytes: 64_000,
        datagrams: 64,
        lost: 2,
        transfer_ms: 250.0,
        rate_bps: 2_048_000.0,
        duty_pct: 12.5,
        trip_ms: 1.5,
        read_sizes: vec![(1000, 64)],
    }
}

#[test]
fn a_burst_line_gives_bytes_loss_rate_and_with_trip_times_the_trip() {
    let (mut r, c) = reporter(1, false);
    r.burst(&burst());
    r.show_trip_times();
    r.burst(&burst());
    let head = "burst    3: 1.000000-1.250000 s, 64000 bytes in 64 datagrams (2 lost), transfer 250.000 ms, 2.05 Mbit/s, duty 12.5%";
    assert_eq!(
        c.text(),
        format!("{head}; reads 1000B x64\n{head}, trip 1.500 ms; reads 1000B x64\n")
    );
    let (mut r, c) = reporter(0, false);
    r.burst(&burst());
    assert_eq!(c.text(), "");
}

fn packet(seq: u64) -> PacketRow {
    PacketRow {
        seq,
        send_ns: 1_000,
        recv_ns: 3_500,
        flight_us: 2.5,
        arrival: "new",
        corrupt: false,
    }
}

#[test]
fn held_datagram_rows_are_written_at_the_end() {
    let (mut r, _c) = reporter(0, false);
    let file = crate::report::Capture::default();
    r.packets = Some(RowWriter::console(Box::new(file.clone()), &[0; 6]));
    r.packet(&packet(1));
    assert_eq!(file.text(), "1 1000 3500 2.500 new false\n");
    r.hold_packets();
    r.packet(&packet(2));
    assert_eq!(file.text().lines().count(), 1);
    r.finish();
    assert_eq!(
        file.text().lines().nth(1),
        Some("2 1000 3500 2.500 new false")
    );
}

#[test]
fn the_cts_jitter_and_connection_files_get_their_headers_and_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (mut r, _c) = reporter(0, false);
    let jitter = dir.path().join("j.csv");
    r.cts_jitter_file(&jitter).unwrap();
    r.packet(&packet(1));
    let conn = dir.path().join("c.csv");
    r.connection_file(&conn).unwrap();
    r.connection(&udp_report(Some(UdpTotals::default())));
    assert!(r.take_errors().is_empty());
    drop(r);
    let j = std::fs::read_to_string(&jitter).unwrap();
    assert!(j.starts_with("SequenceNumber,SenderQpc,"), "{j}");
    assert!(j.lines().nth(1).unwrap().starts_with("1,1000,"), "{j}");
    let c = std::fs::read_to_string(&conn).unwrap();
    assert!(c.starts_with("TimeSlice,LocalAddress,"), "{c}");
    assert!(
        c.lines()
            .nth(1)
            .unwrap()
            .starts_with("2.000,127.0.0.1:5000,"),
        "{c}"
    );
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
fn write_errors_are_kept_for_the_end() {
    let (mut r, _c) = reporter(0, false);
    r.status = Some(RowWriter::console(Box::new(Full), &[0; 13]));
    r.interval(&interval(0.5, 1000));
    r.interval(&interval(1.0, 1000));
    let e = r.take_errors();
    assert_eq!(e.len(), 2);
    assert_eq!(e[1].to_string(), "disk full");
}
