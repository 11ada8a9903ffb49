//! The UDP tables' columns and cells: the receiver table (files and
//! console), ctsTraffic's media table, its jitter and connection files, and
//! netrig's per-datagram file; shared by the one-stream and many-stream
//! reports.

use super::opt_us;

/// Columns of the UDP receiver table.
pub const UDP_HEADERS: [&str; 13] = [
    "TimeSlice",
    "Bytes",
    "Packets",
    "Drops",
    "ConsecDrops",
    "Dups",
    "Reordered",
    "Corrupt",
    "Late",
    "DelayMinUs",
    "DelayAvgUs",
    "DelayMaxUs",
    "JitterUs",
];
pub(super) const UDP_WIDTHS: [usize; 13] = [10, 12, 9, 7, 11, 6, 9, 7, 6, 11, 11, 11, 9];
/// Columns of the media-stream table (ctsTraffic's).
pub const MEDIA_HEADERS: [&str; 7] = [
    "TimeSlice",
    "Bits/Sec",
    "Streams",
    "Completed",
    "Dropped",
    "Repeated",
    "Errors",
];
pub(super) const MEDIA_WIDTHS: [usize; 7] = [10, 12, 7, 10, 8, 9, 7];
/// Columns of the UDP connection file (ctsTraffic's `-ConnectionFilename`
/// for UDP): one row per stream.
pub const UDP_CONNECTION_HEADERS: [&str; 10] = [
    "TimeSlice",
    "LocalAddress",
    "RemoteAddress",
    "Bits/Sec",
    "Completed",
    "Dropped",
    "Repeated",
    "Errors",
    "Result",
    "ConnectionId",
];
pub(super) const UDP_CONNECTION_WIDTHS: [usize; 10] = [10, 47, 47, 12, 10, 8, 9, 7, 12, 36];
/// Columns of ctsTraffic's jitter file (`--jitter-format cts`): its
/// QueryPerformanceCounter stamps are nanoseconds here, at a frequency of
/// 1e9.
pub const CTS_JITTER_HEADERS: [&str; 7] = [
    "SequenceNumber",
    "SenderQpc",
    "SenderQpf",
    "ReceiverQpc",
    "ReceiverQpf",
    "RelativeInFlightTimeMs",
    "PrevToCurrentInFlightTimeJitter",
];
pub(super) const CTS_JITTER_WIDTHS: [usize; 7] = [14, 20, 10, 20, 10, 22, 31];

/// The per-datagram file's columns: netrig's or ctsTraffic's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterFormat {
    /// Sequence, SenderNs, ReceiverNs, FlightUs, Arrival, Corrupt.
    #[default]
    Netrig,
    /// ctsTraffic's `-JitterFilename` columns.
    Cts,
}

impl crate::protocol::names::Named for JitterFormat {
    const NAMES: &'static [(Self, &'static str, &'static str)] = &[
        (
            JitterFormat::Netrig,
            "netrig",
            "sequence, stamps, flight time, arrival, corrupt",
        ),
        (
            JitterFormat::Cts,
            "cts",
            "ctsTraffic's -JitterFilename columns",
        ),
    ];
}

/// ctsTraffic's jitter arithmetic: each datagram's time in flight relative
/// to the first one received (the clocks need not agree), and its change
/// from the previous datagram's, both ms.
#[derive(Debug, Default)]
pub(super) struct CtsJitter {
    base_ns: Option<i64>,
    prev_ms: Option<f64>,
}

impl CtsJitter {
    pub(super) fn cells(&mut self, p: &crate::udp::receive::PacketRow) -> Vec<String> {
        let transit = p.recv_ns as i64 - p.send_ns as i64;
        let base = *self.base_ns.get_or_insert(transit);
        let rel_ms = (transit - base) as f64 / 1e6;
        let jitter = rel_ms - self.prev_ms.unwrap_or(rel_ms);
        self.prev_ms = Some(rel_ms);
        vec![
            p.seq.to_string(),
            p.send_ns.to_string(),
            "1000000000".into(),
            p.recv_ns.to_string(),
            "1000000000".into(),
            format!("{rel_ms:.6}"),
            format!("{jitter:.6}"),
        ]
    }
}
/// Columns of the per-datagram (jitter) file.
pub const PACKET_HEADERS: [&str; 6] = [
    "Sequence",
    "SenderNs",
    "ReceiverNs",
    "FlightUs",
    "Arrival",
    "Corrupt",
];
pub(super) const PACKET_WIDTHS: [usize; 6] = [10, 20, 20, 12, 10, 7];

pub(super) fn udp_cells(iv: &crate::protocol::udp::track::UdpInterval) -> Vec<String> {
    vec![
        format!("{:.3}", iv.time_slice),
        iv.bytes.to_string(),
        iv.packets.to_string(),
        iv.drops.to_string(),
        iv.max_consecutive_drops.to_string(),
        iv.duplicates.to_string(),
        iv.reordered.to_string(),
        iv.corrupt.to_string(),
        iv.late.to_string(),
        opt_us(iv.delay_min_us),
        opt_us(iv.delay_avg_us),
        opt_us(iv.delay_max_us),
        format!("{:.1}", iv.jitter_us),
    ]
}

/// Columns of the UDP table on the console: the file's ([`UDP_HEADERS`]),
/// plus the rate (bit/s with units) after `TimeSlice` and the loss percent
/// after `Drops`, as iperf3 users expect.
pub(super) fn udp_console_headers() -> Vec<&'static str> {
    let mut h = UDP_HEADERS.to_vec();
    h.insert(1, "Rate");
    h.insert(5, "Loss%");
    h
}
pub(super) const UDP_CONSOLE_WIDTHS: [usize; 15] =
    [10, 14, 12, 9, 7, 7, 11, 6, 9, 7, 6, 11, 11, 11, 9];

/// The console columns shown by default, as places in the full list: time,
/// rate, loss, duplicates, reordering, corruption, mean delay and jitter,
/// under 100 characters even with `--bidir`'s `Dir` (all 15 were ~155,
/// ~160 with it). `-v` shows them all.
const UDP_CONSOLE_BRIEF: [usize; 9] = [0, 1, 4, 5, 7, 8, 9, 12, 14];

/// The console's share of a full console row (headers, widths or cells):
/// all of it with `all`, else the [`UDP_CONSOLE_BRIEF`] columns.
pub(super) fn udp_console_pick<T: Clone>(full: &[T], all: bool) -> Vec<T> {
    if all {
        full.to_vec()
    } else {
        UDP_CONSOLE_BRIEF.iter().map(|&i| full[i].clone()).collect()
    }
}

/// Loss in an interval, percent: gaps opened (net of late arrivals) over the
/// datagrams the interval accounts for.
pub fn interval_loss_pct(iv: &crate::protocol::udp::track::UdpInterval) -> f64 {
    let drops = iv.drops.max(0) as f64;
    let expected = iv.packets.saturating_sub(iv.duplicates) as f64 + drops;
    if expected > 0.0 {
        100.0 * drops / expected
    } else {
        0.0
    }
}

pub(super) fn udp_console_cells(
    iv: &crate::protocol::udp::track::UdpInterval,
    interval_secs: f64,
) -> Vec<String> {
    let mut c = udp_cells(iv);
    c.insert(
        1,
        crate::protocol::stats::console_rate(
            iv.bytes as f64 * 8.0 / interval_secs.max(1e-9),
            interval_secs,
        ),
    );
    c.insert(5, format!("{:.2}", interval_loss_pct(iv)));
    c
}

pub(super) fn media_cells(
    iv: &crate::protocol::udp::track::UdpInterval,
    interval_secs: f64,
    streams: u32,
) -> Vec<String> {
    // Frames judged in the slice; a peer without frame accounting sends
    // datagram counts, one datagram per frame.
    let f = iv
        .frames
        .unwrap_or(crate::protocol::udp::frames::FrameCounts {
            completed: iv
                .packets
                .saturating_sub(iv.duplicates + iv.corrupt + iv.late),
            dropped: iv.drops.max(0) as u64 + iv.late,
            repeated: iv.duplicates,
            errors: iv.corrupt,
        });
    vec![
        format!("{:.3}", iv.time_slice),
        ((iv.bytes as f64 * 8.0 / interval_secs.max(1e-9)).round() as u64).to_string(),
        streams.to_string(),
        f.completed.to_string(),
        f.dropped.to_string(),
        f.repeated.to_string(),
        f.errors.to_string(),
    ]
}

/// The UDP connection file's row for a stream that ended.
pub(super) fn connection_cells(rep: &crate::udp::client::UdpReport) -> Vec<String> {
    let t = rep.totals.clone().unwrap_or_default();
    let secs = rep
        .sender
        .as_ref()
        .map_or(rep.duration_secs, |s| s.duration_secs)
        .max(1e-9);
    let result = if rep.server_lost {
        "NetworkError"
    } else if rep.interrupted {
        "Cancelled"
    } else if t.corrupt > 0 {
        "DataError"
    } else {
        "Succeeded"
    };
    // Frames for a media stream; datagrams, one per "frame", otherwise.
    let f = t
        .frames
        .unwrap_or(crate::protocol::udp::frames::FrameCounts {
            completed: t.packets.saturating_sub(t.duplicates + t.corrupt + t.late),
            dropped: t.lost + t.late,
            repeated: t.duplicates,
            errors: t.corrupt,
        });
    vec![
        format!("{:.3}", rep.duration_secs),
        rep.local.map_or_else(|| "-".into(), |a| a.to_string()),
        rep.remote.to_string(),
        ((t.bytes as f64 * 8.0 / secs).round() as u64).to_string(),
        f.completed.to_string(),
        f.dropped.to_string(),
        f.repeated.to_string(),
        f.errors.to_string(),
        result.to_string(),
        rep.session.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::udp::track::UdpInterval;

    #[test]
    fn the_default_console_columns_fit_100_characters_with_the_direction() {
        let brief = udp_console_pick(&UDP_CONSOLE_WIDTHS, false);
        // Each column its width, one space between, and --bidir's 4-wide Dir.
        let line = brief.iter().sum::<usize>() + brief.len() - 1 + 5;
        assert!(line <= 100, "{line}");
        assert_eq!(
            udp_console_pick(&udp_console_headers(), false),
            vec![
                "TimeSlice",
                "Rate",
                "Drops",
                "Loss%",
                "Dups",
                "Reordered",
                "Corrupt",
                "DelayAvgUs",
                "JitterUs"
            ]
        );
        assert_eq!(
            udp_console_pick(&udp_console_headers(), true),
            udp_console_headers()
        );
        let iv = UdpInterval {
            time_slice: 1.0,
            bytes: 125_000,
            drops: 3,
            packets: 97,
            duplicates: 2,
            reordered: 4,
            corrupt: 5,
            delay_avg_us: Some(12.5),
            jitter_us: 0.5,
            ..Default::default()
        };
        assert_eq!(
            udp_console_pick(&udp_console_cells(&iv, 1.0), false),
            vec![
                "1.000",
                "1.00 Mbit/s",
                "3",
                "3.06",
                "2",
                "4",
                "5",
                "12.5",
                "0.5"
            ]
        );
        // A slice too short for a rate has none.
        assert_eq!(udp_console_cells(&iv, 0.01)[1], "-");
    }

    #[test]
    fn the_file_row_has_every_count_and_delay() {
        let iv = UdpInterval {
            time_slice: 2.25,
            bytes: 1000,
            packets: 9,
            drops: -1,
            max_consecutive_drops: 3,
            duplicates: 2,
            reordered: 4,
            corrupt: 5,
            late: 6,
            delay_min_us: Some(1.26),
            delay_avg_us: None,
            delay_max_us: Some(30.0),
            jitter_us: 0.26,
            ..Default::default()
        };
        assert_eq!(
            udp_cells(&iv),
            vec![
                "2.250", "1000", "9", "-1", "3", "2", "4", "5", "6", "1.3", "-", "30.0", "0.3"
            ]
        );
    }

    #[test]
    fn ctstraffic_jitter_is_each_flight_against_the_first_and_the_last() {
        let row = |seq, send_ns, recv_ns| crate::udp::receive::PacketRow {
            seq,
            send_ns,
            recv_ns,
            flight_us: 0.0,
            arrival: "new",
            corrupt: false,
        };
        let mut j = CtsJitter::default();
        assert_eq!(
            j.cells(&row(7, 1_000_000, 3_000_000)),
            vec![
                "7",
                "1000000",
                "1000000000",
                "3000000",
                "1000000000",
                "0.000000",
                "0.000000"
            ]
        );
        // 0.5 ms longer in flight than the first, then 0.25 ms shorter than that.
        let c = j.cells(&row(8, 2_000_000, 4_500_000));
        assert_eq!((c[5].as_str(), c[6].as_str()), ("0.500000", "0.500000"));
        let c = j.cells(&row(9, 3_000_000, 5_250_000));
        assert_eq!((c[5].as_str(), c[6].as_str()), ("0.250000", "-0.250000"));
    }

    #[test]
    fn media_rows_count_frames_or_else_datagrams() {
        use crate::protocol::udp::frames::FrameCounts;
        let mut iv = UdpInterval {
            time_slice: 1.5,
            bytes: 62_500,
            packets: 20,
            drops: 3,
            duplicates: 2,
            corrupt: 1,
            late: 4,
            ..Default::default()
        };
        // Datagrams: completed 20 - (2 + 1 + 4), dropped 3 + 4.
        assert_eq!(
            media_cells(&iv, 0.5, 1),
            vec!["1.500", "1000000", "1", "13", "7", "2", "1"]
        );
        iv.drops = -2;
        assert_eq!(media_cells(&iv, 0.5, 0)[4], "4");
        iv.frames = Some(FrameCounts {
            completed: 11,
            dropped: 12,
            repeated: 13,
            errors: 14,
        });
        assert_eq!(
            media_cells(&iv, 0.25, 3),
            vec!["1.500", "2000000", "3", "11", "12", "13", "14"]
        );
    }

    #[test]
    fn a_connection_row_has_the_streams_rate_counts_and_result() {
        use crate::protocol::udp::track::UdpTotals;
        use crate::udp::client::UdpReport;
        let totals = UdpTotals {
            bytes: 250_000,
            packets: 30,
            duplicates: 2,
            corrupt: 0,
            late: 3,
            lost: 5,
            ..Default::default()
        };
        let mut rep = UdpReport {
            start_unix: 0.0,
            offset: None,
            sender: None,
            totals: Some(totals),
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
        };
        let nil = uuid::Uuid::nil().to_string();
        assert_eq!(
            connection_cells(&rep),
            vec![
                "2.000",
                "127.0.0.1:5000",
                "127.0.0.1:4794",
                "1000000",
                "25",
                "8",
                "2",
                "0",
                "Succeeded",
                nil.as_str()
            ]
        );
        // The sender's own time is the stream's length when it is known.
        rep.sender = Some(crate::protocol::udp::sent::SenderReport {
            duration_secs: 0.5,
            ..Default::default()
        });
        assert_eq!(connection_cells(&rep)[3], "4000000");
        let result = |rep: &UdpReport| connection_cells(rep)[8].clone();
        if let Some(t) = rep.totals.as_mut() {
            t.corrupt = 1;
        }
        assert_eq!(result(&rep), "DataError");
        // Completed: 30 received less 2 duplicates, 1 corrupt and 3 late.
        assert_eq!(connection_cells(&rep)[4], "24");
        assert_eq!(connection_cells(&rep)[7], "1");
        rep.interrupted = true;
        assert_eq!(result(&rep), "Cancelled");
        rep.server_lost = true;
        assert_eq!(result(&rep), "NetworkError");
        rep.local = None;
        assert_eq!(connection_cells(&rep)[1], "-");
    }
}
