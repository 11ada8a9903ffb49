//! An iperf3 run as netrig's own reports: the TCP run report and the UDP
//! report, so the console summary, the JSON envelope, `--html` and
//! `--json-iperf3` read it as any other run. The figures are the ones both
//! ends agree on: what the iperf3 server says it received (or sent) per
//! stream, from its results message; the intervals are this end's counts.

use std::net::SocketAddr;

use serde::Serialize;

use super::{Outcome, Tick};
use crate::protocol::iperf3::{Params, Results};
use crate::protocol::proto::SessionSummary;
use crate::protocol::stats::{IntervalRow, Snapshot};
use crate::protocol::udp::sent::{SenderReport, sender_limited};
use crate::protocol::udp::track::{UdpInterval, UdpTotals};
use crate::tcp::client::RunReport;
use crate::udp::client::UdpReport;

/// The peer's own account, kept in the result beside netrig's fields.
#[derive(Debug, Clone, Serialize)]
pub struct Iperf3Side {
    /// Always "iperf3": the server was an iperf3 server.
    pub peer: &'static str,
    /// Per stream: iperf3's stream number, whether this end sent on it,
    /// the bytes this end counted and the bytes the server reported.
    pub streams: Vec<StreamPair>,
    /// The server's CPU use, percent of one core, as it reported it.
    pub server_cpu_total_percent: f64,
    /// `--get-server-output`: the server's own text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_output_text: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamPair {
    pub id: u32,
    pub client_sends: bool,
    pub client_bytes: u64,
    pub server_bytes: Option<u64>,
    /// UDP: the receiving end's datagrams expected, lost and jitter (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_s: Option<f64>,
}

/// A netrig report with the iperf3 server's side beside it.
#[derive(Debug, Clone, Serialize)]
pub struct WithPeer<R> {
    #[serde(flatten)]
    pub report: R,
    pub iperf3: Iperf3Side,
}

/// Bytes the server counted on the streams this end sent on, and on those
/// it sent on: what it received and what it sent.
pub fn server_totals(o: &Outcome) -> (u64, u64) {
    let mut got = 0;
    let mut sent = 0;
    for s in &o.streams {
        let b = o.server_stream(s.id).map_or(0, |r| r.bytes);
        if s.sends {
            got += b;
        } else {
            sent += b;
        }
    }
    (got, sent)
}

/// The peer's side, stream by stream.
pub fn side(o: &Outcome, udp: bool) -> Iperf3Side {
    let streams = o
        .streams
        .iter()
        .map(|s| {
            let r = o.server_stream(s.id);
            // The receiving end's loss figures: the server's when this end
            // sent, this end's own otherwise.
            let (packets, lost, jitter) = match (udp, s.sends, r) {
                (false, _, _) => (None, None, None),
                (true, true, Some(r)) => (Some(r.packets), Some(r.errors), Some(r.jitter)),
                (true, true, None) => (None, None, None),
                (true, false, _) => (Some(s.rx.packets), Some(s.rx.lost), Some(s.rx.jitter)),
            };
            StreamPair {
                id: s.id,
                client_sends: s.sends,
                client_bytes: s.bytes,
                server_bytes: r.map(|r| r.bytes),
                packets,
                lost,
                jitter_s: jitter,
            }
        })
        .collect();
    Iperf3Side {
        peer: "iperf3",
        streams,
        server_cpu_total_percent: o.server.cpu_util_total,
        server_output_text: o.server.server_output_text.clone(),
    }
}

/// Rows of the status table from the client's cumulative counts.
fn tcp_rows(ticks: &[Tick], streams: i64) -> Vec<IntervalRow> {
    let mut prev = Tick {
        secs: 0.0,
        sent: 0,
        received: 0,
        packets_sent: 0,
        packets_received: 0,
    };
    let mut rows = Vec::new();
    for t in ticks {
        let span = t.secs - prev.secs;
        if span <= 0.0 {
            continue;
        }
        let rate = |a: u64, b: u64| ((a - b) as f64 / span).round() as u64;
        rows.push(IntervalRow {
            time_slice: t.secs,
            send_bps: rate(t.sent, prev.sent),
            recv_bps: rate(t.received, prev.received),
            in_flight: streams,
            completed: 0,
            net_errors: 0,
            data_errors: 0,
            retransmits: 0,
            rtt_us: None,
            cwnd: None,
            omitted: false,
            span_secs: span,
        });
        prev = *t;
    }
    rows
}

/// A TCP run as netrig's run report: the totals are this end's counts
/// (which the server's equal when both ends agree), the server's own
/// counts are its session summary.
pub fn tcp(o: &Outcome, server: SocketAddr) -> RunReport {
    let n = o.streams.len() as u64;
    let sent = o.streams.iter().filter(|s| s.sends).map(|s| s.bytes).sum();
    let received = o.streams.iter().filter(|s| !s.sends).map(|s| s.bytes).sum();
    let (srv_got, srv_sent) = server_totals(o);
    RunReport {
        start_unix: o.start_unix,
        duration_secs: o.duration_secs,
        totals: Snapshot {
            sent,
            received,
            completed: n,
            retransmits: o.streams.iter().map(|s| s.retransmits).sum(),
            ..Snapshot::default()
        },
        intervals: tcp_rows(&o.ticks, n as i64),
        servers: vec![(
            server,
            Some(SessionSummary {
                connections: n,
                success: n,
                bytes_sent: srv_sent,
                bytes_received: srv_got,
                ..SessionSummary::default()
            }),
        )],
        interrupted: o.interrupted,
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
        cpu: crate::protocol::cpu::CpuBoth::new(o.cpu, []),
    }
}

/// The receiving end's figures over every stream that moved data one way:
/// datagrams expected (iperf3's highest counter), lost, bytes, and the
/// streams' mean jitter (s).
fn received(o: &Outcome, client_sends: bool) -> (u64, u64, u64, f64) {
    let mut out = (0, 0, 0, 0.0);
    let mut k = 0;
    for s in o.streams.iter().filter(|s| s.sends == client_sends) {
        let (packets, lost, bytes, jitter) = if client_sends {
            let Some(r) = o.server_stream(s.id) else {
                continue;
            };
            (r.packets, r.errors, r.bytes, r.jitter)
        } else {
            (s.rx.packets, s.rx.lost, s.rx.bytes, s.rx.jitter)
        };
        out.0 += packets;
        out.1 += lost;
        out.2 += bytes;
        out.3 += jitter;
        k += 1;
    }
    if k > 0 {
        out.3 /= f64::from(k);
    }
    out
}

/// Datagrams and bytes the sending end sent: this end's count, or the
/// server's from its results.
fn sent(o: &Outcome, client_sends: bool) -> (u64, u64) {
    o.streams
        .iter()
        .filter(|s| s.sends == client_sends)
        .map(|s| match (client_sends, o.server_stream(s.id)) {
            (true, _) => (s.packets, s.bytes),
            (false, Some(r)) => (r.packets, r.bytes),
            (false, None) => (0, 0),
        })
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// A UDP run (one direction) as netrig's UDP report: loss and jitter are
/// the receiving end's (the server's results when this end sent).
pub fn udp(o: &Outcome, p: &Params, server: SocketAddr) -> UdpReport {
    let client_sends = o.streams.iter().any(|s| s.sends);
    let (expected, lost, bytes, jitter) = received(o, client_sends);
    let (sent_packets, sent_bytes) = sent(o, client_sends);
    let unique = expected.saturating_sub(lost);
    let asked_bps = (p.bandwidth * u64::from(p.parallel)) as f64;
    let asked_bytes = (asked_bps / 8.0 * o.duration_secs) as u64;
    let mut prev = (0.0, 0u64, 0u64);
    let mut intervals = Vec::new();
    for t in &o.ticks {
        if t.secs <= prev.0 {
            continue;
        }
        let (b, k) = if client_sends {
            (t.sent, t.packets_sent)
        } else {
            (t.received, t.packets_received)
        };
        intervals.push(UdpInterval {
            time_slice: t.secs,
            bytes: b - prev.1,
            packets: k - prev.2,
            ..UdpInterval::default()
        });
        prev = (t.secs, b, k);
    }
    UdpReport {
        start_unix: o.start_unix,
        offset: None,
        sender: Some(SenderReport {
            packets: sent_packets,
            bytes: sent_bytes,
            duration_secs: o.duration_secs,
            achieved_bps: if o.duration_secs > 0.0 {
                sent_bytes as f64 * 8.0 / o.duration_secs
            } else {
                0.0
            },
            asked_bytes,
            asked_bps,
            sender_limited: sender_limited(sent_bytes, asked_bytes),
            ..SenderReport::default()
        }),
        totals: Some(UdpTotals {
            sent: Some(expected),
            unique,
            packets: unique,
            bytes,
            lost,
            jitter_us: jitter * 1e6,
            ..UdpTotals::default()
        }),
        intervals,
        interrupted: o.interrupted,
        server_lost: false,
        duration_secs: o.duration_secs,
        bursts: Vec::new(),
        bins: None,
        analysis: None,
        granted: Default::default(),
        local: None,
        remote: server,
        session: uuid::Uuid::nil(),
        cpu: Some(crate::protocol::cpu::CpuBoth::new(o.cpu, [])),
    }
}

/// Whether the server's results hold a figure for every stream.
pub fn complete(r: &Results, o: &Outcome) -> bool {
    o.streams
        .iter()
        .all(|s| r.streams.iter().any(|x| x.id == s.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iperf3_client::StreamCount;
    use crate::protocol::iperf3::{Mode, Proto, StreamResult};

    fn stream(id: u32, sends: bool, bytes: u64) -> StreamCount {
        StreamCount {
            id,
            sends,
            bytes,
            packets: bytes / 100,
            retransmits: u64::from(id),
            ..StreamCount::default()
        }
    }

    fn theirs(id: u32, bytes: u64, packets: u64, errors: u64, jitter: f64) -> StreamResult {
        StreamResult {
            id,
            bytes,
            packets,
            errors,
            jitter,
            ..StreamResult::default()
        }
    }

    fn tick(secs: f64, sent: u64, received: u64, ps: u64, pr: u64) -> Tick {
        Tick {
            secs,
            sent,
            received,
            packets_sent: ps,
            packets_received: pr,
        }
    }

    fn outcome(streams: Vec<StreamCount>, server: Vec<StreamResult>) -> Outcome {
        Outcome {
            start_unix: 1000.5,
            duration_secs: 2.0,
            streams,
            server: Results {
                cpu_util_total: 12.5,
                streams: server,
                ..Results::default()
            },
            ticks: vec![
                tick(1.0, 1000, 300, 10, 3),
                tick(1.0, 1000, 300, 10, 3),
                tick(2.0, 3000, 700, 30, 7),
            ],
            interrupted: false,
            cpu: crate::protocol::cpu::CpuUsage::default(),
        }
    }

    fn addr() -> SocketAddr {
        "127.0.0.1:5201".parse().unwrap()
    }

    #[test]
    fn tcp_totals_are_each_ends_by_direction() {
        // Bidir: streams 1 and 3 sent by this end, 4 by the server.
        let o = outcome(
            vec![
                stream(1, true, 1000),
                stream(3, true, 2000),
                stream(4, false, 700),
            ],
            vec![
                theirs(1, 1000, 0, 0, 0.0),
                theirs(3, 1900, 0, 0, 0.0),
                theirs(4, 700, 0, 0, 0.0),
            ],
        );
        assert_eq!(server_totals(&o), (2900, 700));
        let r = tcp(&o, addr());
        assert_eq!((r.totals.sent, r.totals.received), (3000, 700));
        assert_eq!(r.totals.completed, 3);
        assert_eq!(r.totals.retransmits, 1 + 3 + 4);
        let s = r.servers[0].1.as_ref().unwrap();
        assert_eq!((s.bytes_received, s.bytes_sent), (2900, 700));
        assert_eq!((s.connections, s.success), (3, 3));
        assert_eq!(r.start_unix, 1000.5);
        assert_eq!(r.duration_secs, 2.0);
        // One row a tick, a repeated instant left out, rates per second.
        assert_eq!(r.intervals.len(), 2);
        assert_eq!(
            (r.intervals[0].send_bps, r.intervals[0].recv_bps),
            (1000, 300)
        );
        assert_eq!(
            (r.intervals[1].send_bps, r.intervals[1].recv_bps),
            (2000, 400)
        );
        assert_eq!(r.intervals[1].span_secs, 1.0);
        assert_eq!(r.intervals[1].in_flight, 3);
        let side = side(&o, false);
        assert_eq!(side.peer, "iperf3");
        assert_eq!(side.server_cpu_total_percent, 12.5);
        assert_eq!(side.streams[1].server_bytes, Some(1900));
        assert_eq!(side.streams[1].client_bytes, 2000);
        assert_eq!(side.streams[1].packets, None);
        assert!(complete(&o.server, &o));
        let mut short = o.clone();
        short.server.streams.pop();
        assert!(!complete(&short.server, &short));
        assert_eq!(server_totals(&short), (2900, 0));
    }

    #[test]
    fn udp_loss_is_the_servers_when_this_end_sends() {
        let o = outcome(
            vec![stream(1, true, 12_000), stream(3, true, 8_000)],
            vec![
                theirs(1, 11_800, 120, 2, 0.001),
                theirs(3, 8_000, 80, 0, 0.003),
            ],
        );
        let p = Params {
            bandwidth: 4_000,
            parallel: 2,
            ..params()
        };
        let r = udp(&o, &p, addr());
        let t = r.totals.as_ref().unwrap();
        assert_eq!(t.sent, Some(200));
        assert_eq!((t.lost, t.unique, t.packets), (2, 198, 198));
        assert_eq!(t.bytes, 19_800);
        assert!((t.jitter_us - 2000.0).abs() < 1e-6, "{}", t.jitter_us);
        let s = r.sender.as_ref().unwrap();
        assert_eq!((s.packets, s.bytes), (120 + 80, 20_000));
        assert_eq!(s.achieved_bps, 80_000.0);
        assert_eq!(s.asked_bps, 8_000.0);
        assert_eq!(s.asked_bytes, 2_000);
        assert!(!s.sender_limited);
        // The client's sent counts, per tick.
        assert_eq!(r.intervals.len(), 2);
        assert_eq!((r.intervals[1].bytes, r.intervals[1].packets), (2000, 20));
        let side = side(&o, true);
        assert_eq!(side.streams[0].packets, Some(120));
        assert_eq!(side.streams[0].lost, Some(2));
        assert_eq!(side.streams[0].jitter_s, Some(0.001));
    }

    #[test]
    fn udp_reverse_counts_this_ends_receiver() {
        let mut mine = stream(1, false, 0);
        let h = |count| crate::protocol::iperf3::udp::Header {
            sec: 10,
            usec: 0,
            count,
        };
        for (i, c) in [1u64, 2, 5, 4].into_iter().enumerate() {
            mine.rx.on_datagram(100, h(c), 10.0 + 0.001 * i as f64);
        }
        mine.bytes = mine.rx.bytes;
        let o = outcome(vec![mine], vec![theirs(1, 600, 6, 0, 0.0)]);
        let r = udp(&o, &params(), addr());
        let t = r.totals.as_ref().unwrap();
        // Highest counter 5, 2 lost less one late arrival: 1 lost.
        assert_eq!(t.sent, Some(5));
        assert_eq!((t.lost, t.unique, t.bytes), (1, 4, 400));
        let s = r.sender.as_ref().unwrap();
        assert_eq!((s.packets, s.bytes), (6, 600));
        assert_eq!((r.intervals[0].bytes, r.intervals[0].packets), (300, 3));
        assert_eq!(side(&o, true).streams[0].packets, Some(5));
    }

    #[test]
    fn tcp_rates_are_per_second_over_ticks_of_any_length() {
        let mut o = outcome(
            vec![stream(1, true, 3000)],
            vec![theirs(1, 3000, 0, 0, 0.0)],
        );
        o.ticks = vec![tick(0.5, 1000, 0, 0, 0), tick(2.0, 4000, 600, 0, 0)];
        let r = tcp(&o, addr());
        let rates: Vec<_> = r
            .intervals
            .iter()
            .map(|i| (i.time_slice, i.span_secs, i.send_bps, i.recv_bps))
            .collect();
        assert_eq!(rates, [(0.5, 0.5, 2000, 0), (2.0, 1.5, 2000, 400)]);
    }

    #[test]
    fn udp_intervals_and_sender_figures_are_reported_whole() {
        let o = outcome(
            vec![stream(1, true, 12_000), stream(3, true, 8_000)],
            vec![theirs(1, 12_000, 120, 0, 0.0), theirs(3, 8_000, 80, 0, 0.0)],
        );
        // 1 Mbit/s a stream for 2 s asked, 20 kB sent: the sender fell short.
        let p = Params {
            bandwidth: 1_000_000,
            parallel: 2,
            ..params()
        };
        let r = udp(&o, &p, addr());
        let slices: Vec<_> = r.intervals.iter().map(|i| i.time_slice).collect();
        assert_eq!(slices, [1.0, 2.0]);
        let s = r.sender.as_ref().unwrap();
        assert_eq!(s.duration_secs, 2.0);
        assert_eq!(s.asked_bytes, 500_000);
        assert!(s.sender_limited);
        assert_eq!(r.duration_secs, 2.0);
    }

    #[test]
    fn udp_without_the_servers_figures_or_time_reports_zeros_not_nan() {
        // This end sent, the server's results name no stream, and the run
        // ended before any time passed.
        let mut o = outcome(vec![stream(1, true, 5_000)], vec![]);
        o.duration_secs = 0.0;
        let r = udp(&o, &params(), addr());
        let t = r.totals.as_ref().unwrap();
        assert_eq!((t.sent, t.lost, t.bytes), (Some(0), 0, 0));
        assert_eq!(t.jitter_us, 0.0);
        let s = r.sender.as_ref().unwrap();
        assert_eq!((s.packets, s.bytes), (50, 5_000));
        assert_eq!(s.achieved_bps, 0.0);
    }

    fn params() -> Params {
        Params {
            proto: Proto::Udp,
            mode: Mode::ClientSends,
            parallel: 1,
            time: 2,
            omit: 0,
            num: 0,
            blockcount: 0,
            len: 100,
            window: 0,
            bandwidth: 0,
            get_server_output: false,
            udp_counters_64bit: true,
            nodelay: false,
            congestion: None,
            mss: 0,
            authtoken: false,
            client_version: None,
        }
    }
}
