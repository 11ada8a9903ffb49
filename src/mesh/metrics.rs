//! What a mesh node's `/metrics` says, in the `serve --metrics` formats
//! (Prometheus text 0.0.4 or OpenMetrics 1.0): per probed peer (at most k,
//! label `peer`, the peer's address) probes sent and lost, loss by way,
//! duplicates, the round-trip histogram, the window's loss ratio, clock
//! offset and one-way delays with their bound, TCP connects; and per node
//! the probes answered and the probers heard in the window, so that every
//! node's in-degree can be checked.

use std::time::Duration;

use crate::protocol::mesh::node::Node;
use crate::protocol::mesh::peer::RTT_BUCKETS;
use crate::server::metrics::{Type, Writer};

/// Readings taken by the driver at scrape time.
#[derive(Debug, Clone, Copy)]
pub struct Readings {
    /// Now, on the node's monotonic clock.
    pub now: Duration,
    /// The probers gauge's window.
    pub window: Duration,
    pub refreshes: u64,
    pub refresh_errors: u64,
    /// Probes that could not be sent (the socket refused them).
    pub send_errors: u64,
}

/// The metrics text of `node`.
pub fn render(node: &Node, r: &Readings, openmetrics: bool) -> String {
    let mut w = Writer {
        out: String::with_capacity(8 << 10),
        om: openmetrics,
    };
    w.family(
        "netrig_build",
        Type::Info,
        "The netrig version running the mesh node.",
    );
    let labels = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    w.sample("netrig_build_info", &labels, 1);

    let node_gauges: [(&str, &str, u64); 3] = [
        (
            "netrig_mesh_peers",
            "Peers in the list (DNS or file), this node left out.",
            node.known() as u64,
        ),
        (
            "netrig_mesh_probed_peers",
            "Peers this node probes: k, or all peers when fewer.",
            node.probed().count() as u64,
        ),
        (
            "netrig_mesh_probers",
            "Distinct addresses that probed this node in the last window (--window); about k in a healthy mesh.",
            node.answerer.probers(r.now, r.window) as u64,
        ),
    ];
    for (name, help, v) in node_gauges {
        w.family(name, Type::Gauge, help);
        w.sample(name, "", v);
    }
    let node_counters: [(&str, &str, u64); 6] = [
        (
            "netrig_mesh_probes_answered",
            "Probes this node answered, duplicates included.",
            node.answerer.answered,
        ),
        (
            "netrig_mesh_malformed_datagrams",
            "Datagrams on the mesh port that were not mesh probes or replies.",
            node.malformed,
        ),
        (
            "netrig_mesh_stray_replies",
            "Replies from addresses this node does not probe (a peer just dropped).",
            node.stray,
        ),
        (
            "netrig_mesh_send_errors",
            "Probes and replies the socket refused to send.",
            r.send_errors,
        ),
        (
            "netrig_mesh_peer_refreshes",
            "Peer list reads (DNS or file) that succeeded.",
            r.refreshes,
        ),
        (
            "netrig_mesh_peer_refresh_errors",
            "Peer list reads (DNS or file) that failed; the last list stays.",
            r.refresh_errors,
        ),
    ];
    for (name, help, v) in node_counters {
        w.family(name, Type::Counter, help);
        w.sample(&format!("{name}_total"), "", v);
    }

    let peers: Vec<_> = node.probed().map(|(a, p)| (peer(*a), p)).collect();
    type Count = fn(&crate::protocol::mesh::peer::Counts) -> u64;
    let counters: [(&str, &str, Count); 5] = [
        (
            "netrig_mesh_probes_sent",
            "UDP probes sent to the peer.",
            |c| c.sent,
        ),
        (
            "netrig_mesh_probes_lost",
            "UDP probes with no reply within --timeout (a 100% loss when the peer is unreachable).",
            |c| c.lost,
        ),
        (
            "netrig_mesh_replies_late",
            "Replies that came after --timeout (their probe counted lost).",
            |c| c.late,
        ),
        (
            "netrig_mesh_tcp_connects",
            "TCP connect probes that succeeded (--tcp-connect).",
            |c| c.tcp_connects,
        ),
        (
            "netrig_mesh_tcp_connect_failures",
            "TCP connect probes that failed or took longer than --timeout (--tcp-connect).",
            |c| c.tcp_failures,
        ),
    ];
    for (name, help, f) in counters {
        w.family(name, Type::Counter, help);
        for (l, p) in &peers {
            w.sample(&format!("{name}_total"), l, f(&p.counts));
        }
    }
    let ways: [(&str, &str, Count, Count); 2] = [
        (
            "netrig_mesh_probes_lost_way",
            "Lost probes placed by a later reply: direction=up, the peer never got it; down, its reply was lost. Lost probes no reply placed are in neither.",
            |c| c.lost_up,
            |c| c.lost_down,
        ),
        (
            "netrig_mesh_duplicates",
            "Duplicated datagrams: direction=up, probes the peer got again; down, replies that came again.",
            |c| c.duplicates_up,
            |c| c.duplicates_down,
        ),
    ];
    for (name, help, up, down) in ways {
        w.family(name, Type::Counter, help);
        for (l, p) in &peers {
            w.sample(
                &format!("{name}_total"),
                &format!("{l},direction=\"up\""),
                up(&p.counts),
            );
            w.sample(
                &format!("{name}_total"),
                &format!("{l},direction=\"down\""),
                down(&p.counts),
            );
        }
    }

    w.family(
        "netrig_mesh_rtt_seconds",
        Type::Histogram,
        "Round trip of answered probes, the responder's hold time taken out.",
    );
    for (l, p) in &peers {
        let mut cumulative = 0;
        for (b, le) in RTT_BUCKETS.iter().enumerate() {
            cumulative += p.rtt.buckets[b];
            w.sample(
                "netrig_mesh_rtt_seconds_bucket",
                &format!("{l},le=\"{le:?}\""),
                cumulative,
            );
        }
        cumulative += p.rtt.buckets[RTT_BUCKETS.len()];
        w.sample(
            "netrig_mesh_rtt_seconds_bucket",
            &format!("{l},le=\"+Inf\""),
            cumulative,
        );
        w.sample("netrig_mesh_rtt_seconds_count", l, cumulative);
        w.sample_f64("netrig_mesh_rtt_seconds_sum", l, p.rtt.sum);
    }

    let windows: Vec<_> = peers.iter().map(|(l, p)| (l, p.window())).collect();
    w.family(
        "netrig_mesh_loss_ratio",
        Type::Gauge,
        "Of the peer's last 64 settled probes, the fraction lost (1 when unreachable).",
    );
    for (l, win) in &windows {
        w.sample_f64("netrig_mesh_loss_ratio", l, win.loss_ratio);
    }
    w.family(
        "netrig_mesh_clock_offset_seconds",
        Type::Gauge,
        "The peer's clock minus this node's, from the last 64 replies' shortest exchange.",
    );
    for (l, win) in &windows {
        if let Some(o) = win.offset {
            w.sample_f64(
                "netrig_mesh_clock_offset_seconds",
                l,
                o.server_minus_client_ns as f64 / 1e9,
            );
        }
    }
    w.family(
        "netrig_mesh_clock_offset_bound_seconds",
        Type::Gauge,
        "The offset, and so each one-way delay, is right to within plus or minus this (half the shortest round trip).",
    );
    for (l, win) in &windows {
        if let Some(o) = win.offset {
            w.sample_f64(
                "netrig_mesh_clock_offset_bound_seconds",
                l,
                o.uncertainty_ns as f64 / 1e9,
            );
        }
    }
    w.family(
        "netrig_mesh_one_way_delay_seconds",
        Type::Gauge,
        "Median one-way delay of the last 64 replies, direction=up (to the peer) or down, offset-corrected.",
    );
    for (l, win) in &windows {
        for (dir, v) in [("up", win.up), ("down", win.down)] {
            if let Some(v) = v {
                let labels = format!("{l},direction=\"{dir}\"");
                w.sample_f64("netrig_mesh_one_way_delay_seconds", &labels, v);
            }
        }
    }
    w.family(
        "netrig_mesh_tcp_connect_seconds",
        Type::Gauge,
        "The last successful TCP connect probe's handshake time (--tcp-connect).",
    );
    for (l, p) in &peers {
        if let Some(t) = p.tcp_last {
            w.sample_f64("netrig_mesh_tcp_connect_seconds", l, t.as_secs_f64());
        }
    }
    if openmetrics {
        w.out.push_str("# EOF\n");
    }
    w.out
}

fn peer(a: std::net::SocketAddr) -> String {
    format!("peer=\"{a}\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::mesh::node::Config;
    use std::net::SocketAddr;

    #[test]
    fn series_per_probed_peer_and_the_node() {
        let a: SocketAddr = "10.0.0.1:4795".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:4795".parse().unwrap();
        let cfg = Config {
            k: 3,
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(50),
            tcp: false,
        };
        let mut na = Node::new(cfg, a, 1);
        let mut nb = Node::new(cfg, b, 2);
        na.set_peers(&[a, b], Duration::ZERO);
        nb.set_peers(&[a, b], Duration::ZERO);
        let mut sent = 0;
        let mut t = 0u64;
        while sent < 3 {
            let now = Duration::from_millis(t);
            for (to, probe) in na.due(now, 0) {
                assert_eq!(to, b);
                sent += 1;
                // The first and third lost on the way up.
                if sent == 2 {
                    let reply = nb.datagram(a, &probe, now, 0).unwrap();
                    na.datagram(b, &reply, now + Duration::from_micros(300), 0);
                }
            }
            t += 1;
        }
        // The third's timeout, before a fourth is due.
        let end = Duration::from_millis(t + 60);
        assert!(na.due(end, 0).is_empty());
        let r = Readings {
            now: end,
            window: Duration::from_secs(60),
            refreshes: 4,
            refresh_errors: 1,
            send_errors: 0,
        };
        let text = render(&na, &r, false);
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        has("# TYPE netrig_mesh_probes_sent_total counter");
        has("netrig_mesh_peers 1");
        has("netrig_mesh_probed_peers 1");
        has("netrig_mesh_probers 0");
        has("netrig_mesh_peer_refreshes_total 4");
        has("netrig_mesh_peer_refresh_errors_total 1");
        has("netrig_mesh_probes_sent_total{peer=\"10.0.0.2:4795\"} 3");
        has("netrig_mesh_probes_lost_total{peer=\"10.0.0.2:4795\"} 2");
        has("netrig_mesh_probes_lost_way_total{peer=\"10.0.0.2:4795\",direction=\"up\"} 1");
        has("netrig_mesh_probes_lost_way_total{peer=\"10.0.0.2:4795\",direction=\"down\"} 0");
        has("netrig_mesh_rtt_seconds_bucket{peer=\"10.0.0.2:4795\",le=\"0.00025\"} 0");
        has("netrig_mesh_rtt_seconds_bucket{peer=\"10.0.0.2:4795\",le=\"0.0005\"} 1");
        has("netrig_mesh_rtt_seconds_bucket{peer=\"10.0.0.2:4795\",le=\"+Inf\"} 1");
        has("netrig_mesh_rtt_seconds_count{peer=\"10.0.0.2:4795\"} 1");
        has("netrig_mesh_loss_ratio{peer=\"10.0.0.2:4795\"} 0.6666666666666666");
        let text = render(&nb, &r, true);
        assert!(text.ends_with("# EOF\n"));
        assert!(text.contains("\nnetrig_mesh_probers 1\n"), "{text}");
        assert!(
            text.contains("\nnetrig_mesh_probes_answered_total 1\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE netrig_mesh_probes_sent counter\n"));
        assert!(text.contains("# UNIT netrig_mesh_rtt_seconds seconds\n"));
    }

    #[test]
    fn clock_offset_one_way_delays_and_round_trips_past_the_last_bucket() {
        let a: SocketAddr = "10.0.0.1:4795".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:4795".parse().unwrap();
        let cfg = Config {
            k: 1,
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(5),
            tcp: false,
        };
        let mut na = Node::new(cfg, a, 1);
        let mut nb = Node::new(cfg, b, 2);
        na.set_peers(&[a, b], Duration::ZERO);
        nb.set_peers(&[a, b], Duration::ZERO);
        // b's clock is 3 ms ahead of a's; each way takes 1 ms, but the
        // second reply comes back 1.5 s late (still within the timeout).
        let real_a = |ms: u64| 1_000_000_000_000 + ms * 1_000_000;
        let real_b = |ms: u64| real_a(ms) + 3_000_000;
        let mut replies: Vec<(u64, [u8; crate::protocol::mesh::wire::LEN])> = Vec::new();
        let (mut sent, mut back, mut t) = (0, 0, 0u64);
        while back < 2 {
            let now = Duration::from_millis(t);
            for (when, reply) in std::mem::take(&mut replies) {
                match when == t {
                    true => {
                        assert!(na.datagram(b, &reply, now, real_a(t)).is_none());
                        back += 1;
                    }
                    false => replies.push((when, reply)),
                }
            }
            for (_, probe) in na.due(now, real_a(t)) {
                sent += 1;
                if sent <= 2 {
                    let at = Duration::from_millis(t + 1);
                    let reply = nb.datagram(a, &probe, at, real_b(t + 1)).unwrap();
                    let down = if sent == 1 { 1 } else { 1500 };
                    replies.push((t + 1 + down, reply));
                }
            }
            t += 1;
        }
        let r = Readings {
            now: Duration::from_millis(t),
            window: Duration::from_secs(60),
            refreshes: 0,
            refresh_errors: 0,
            send_errors: 0,
        };
        let text = render(&na, &r, false);
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        let p = "peer=\"10.0.0.2:4795\"";
        // From the 2 ms exchange: offset 3 ms, right to within 1 ms; the
        // one-way medians (the lower of two) 1 ms each way.
        has(&format!("netrig_mesh_clock_offset_seconds{{{p}}} 0.003"));
        has(&format!(
            "netrig_mesh_clock_offset_bound_seconds{{{p}}} 0.001"
        ));
        has(&format!(
            "netrig_mesh_one_way_delay_seconds{{{p},direction=\"up\"}} 0.001"
        ));
        has(&format!(
            "netrig_mesh_one_way_delay_seconds{{{p},direction=\"down\"}} 0.001"
        ));
        // 2 ms and 1.502 s: one within the last bound, one past it.
        has(&format!(
            "netrig_mesh_rtt_seconds_bucket{{{p},le=\"0.0025\"}} 1"
        ));
        has(&format!(
            "netrig_mesh_rtt_seconds_bucket{{{p},le=\"1.0\"}} 1"
        ));
        has(&format!(
            "netrig_mesh_rtt_seconds_bucket{{{p},le=\"+Inf\"}} 2"
        ));
        has(&format!("netrig_mesh_rtt_seconds_count{{{p}}} 2"));
        has(&format!("netrig_mesh_probes_lost_total{{{p}}} 0"));
    }
}
