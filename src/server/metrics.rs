//! What `serve --metrics` reports: counters the server bumps where it
//! already counts (a test admitted, a test ended, a refusal), and their
//! rendering as Prometheus text (format 0.0.4) or OpenMetrics 1.0.
//!
//! Every counter is an atomic with a fixed place: a scrape reads them
//! without a lock, and the data path only ever adds to them, so no scrape
//! can make a test wait. Label sets are fixed and small (test kinds, the
//! refusal codes of the wire protocol), never a client address.

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::Limits;
use crate::protocol::proto::{ErrorCode, PROTOCOL_VERSION};

/// The kinds of test a server runs, the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Tcp,
    Udp,
    RrTcp,
    RrUdp,
    RrSctp,
    /// An unmodified iperf3 client (`serve --iperf3-port`).
    Iperf3,
    /// An unmodified iperf2 client (`serve --iperf2-port`).
    Iperf2,
}

impl Kind {
    pub(crate) const ALL: [Kind; 7] = [
        Kind::Tcp,
        Kind::Udp,
        Kind::RrTcp,
        Kind::RrUdp,
        Kind::RrSctp,
        Kind::Iperf3,
        Kind::Iperf2,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Udp => "udp",
            Kind::RrTcp => "rr_tcp",
            Kind::RrUdp => "rr_udp",
            Kind::RrSctp => "rr_sctp",
            Kind::Iperf3 => "iperf3",
            Kind::Iperf2 => "iperf2",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Every code a server sends with a refusal, in the order they are shown.
const CODES: [ErrorCode; 25] = [
    ErrorCode::UnsupportedVersion,
    ErrorCode::Malformed,
    ErrorCode::UnexpectedMessage,
    ErrorCode::UnknownSession,
    ErrorCode::Refused,
    ErrorCode::LimitBytes,
    ErrorCode::LimitDuration,
    ErrorCode::LimitRate,
    ErrorCode::LimitBurstRecords,
    ErrorCode::LimitConnections,
    ErrorCode::LimitConnectionsPerClient,
    ErrorCode::LimitTests,
    ErrorCode::LimitTestsPerClient,
    ErrorCode::LimitStreamsPerClient,
    ErrorCode::LimitPerNetwork,
    ErrorCode::LimitMemory,
    ErrorCode::Invalid,
    ErrorCode::Auth,
    ErrorCode::ForeignHost,
    ErrorCode::ConnectionReused,
    ErrorCode::Stopped,
    ErrorCode::Unsupported,
    ErrorCode::Resource,
    ErrorCode::NoHandshake,
    ErrorCode::Other,
];

/// Where `code` counts in [`CODES`]; a match, so a new code cannot be
/// forgotten.
fn code_index(code: ErrorCode) -> usize {
    match code {
        ErrorCode::UnsupportedVersion => 0,
        ErrorCode::Malformed => 1,
        ErrorCode::UnexpectedMessage => 2,
        ErrorCode::UnknownSession => 3,
        ErrorCode::Refused => 4,
        ErrorCode::LimitBytes => 5,
        ErrorCode::LimitDuration => 6,
        ErrorCode::LimitRate => 7,
        ErrorCode::LimitBurstRecords => 8,
        ErrorCode::LimitConnections => 9,
        ErrorCode::LimitConnectionsPerClient => 10,
        ErrorCode::LimitTests => 11,
        ErrorCode::LimitTestsPerClient => 12,
        ErrorCode::LimitStreamsPerClient => 13,
        ErrorCode::LimitPerNetwork => 14,
        ErrorCode::LimitMemory => 15,
        ErrorCode::Invalid => 16,
        ErrorCode::Auth => 17,
        ErrorCode::ForeignHost => 18,
        ErrorCode::ConnectionReused => 19,
        ErrorCode::Stopped => 20,
        ErrorCode::Unsupported => 21,
        ErrorCode::Resource => 22,
        ErrorCode::NoHandshake => 23,
        ErrorCode::Other => 24,
    }
}

/// The code's name on the wire (`limit_tests`), the `reason` label.
pub(crate) fn code_name(code: ErrorCode) -> String {
    match serde_json::to_value(code) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "other".into(),
    }
}

/// Upper bounds of the duration histograms' buckets, seconds.
pub(crate) const DURATION_BUCKETS: [f64; 12] = [
    0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

const KINDS: usize = Kind::ALL.len();

/// One kind's test durations: a count per bucket (not cumulative), the
/// count beyond the last, and the sum in microseconds.
#[derive(Default)]
struct Durations {
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

/// The server's counters.
#[derive(Default)]
pub(crate) struct Metrics {
    started: [AtomicU64; KINDS],
    durations: [Durations; KINDS],
    refusals: [AtomicU64; CODES.len()],
    sent: [AtomicU64; KINDS],
    received: [AtomicU64; KINDS],
    network_errors: [AtomicU64; KINDS],
    data_errors: [AtomicU64; KINDS],
}

/// What one ended test moved, as far as the server counted it.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Moved {
    pub(crate) sent: u64,
    pub(crate) received: u64,
    pub(crate) network_errors: u64,
    pub(crate) data_errors: u64,
}

impl From<&crate::protocol::proto::SessionSummary> for Moved {
    fn from(s: &crate::protocol::proto::SessionSummary) -> Moved {
        Moved {
            sent: s.bytes_sent,
            received: s.bytes_received,
            network_errors: s.network_errors,
            data_errors: s.data_errors,
        }
    }
}

/// Readings taken at scrape time, beside the counters.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Gauges {
    /// Tests holding one of `--max-tests`.
    pub(crate) tests: u64,
    /// Connections that said who they are (`--max-conns`).
    pub(crate) connections: u64,
    pub(crate) resident_bytes: u64,
    pub(crate) threads: u64,
    pub(crate) limits: Limits,
}

impl Metrics {
    /// A test was admitted.
    pub(crate) fn started(&self, kind: Kind) {
        self.started[kind.index()].fetch_add(1, Relaxed);
    }

    /// A test admitted earlier ended after `took`, having moved `moved`.
    pub(crate) fn ended(&self, kind: Kind, took: Duration, moved: Moved) {
        let i = kind.index();
        let secs = took.as_secs_f64();
        let b = DURATION_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(DURATION_BUCKETS.len());
        let d = &self.durations[i];
        d.buckets[b].fetch_add(1, Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        d.sum_us.fetch_add(us, Relaxed);
        self.sent[i].fetch_add(moved.sent, Relaxed);
        self.received[i].fetch_add(moved.received, Relaxed);
        self.network_errors[i].fetch_add(moved.network_errors, Relaxed);
        self.data_errors[i].fetch_add(moved.data_errors, Relaxed);
    }

    /// The server refused a connection or a test, or stopped one, with `code`.
    pub(crate) fn refused(&self, code: ErrorCode) {
        self.refusals[code_index(code)].fetch_add(1, Relaxed);
    }

    /// The text a scraper gets: OpenMetrics 1.0 when `openmetrics`, else
    /// Prometheus text format 0.0.4.
    pub(crate) fn render(&self, g: &Gauges, openmetrics: bool) -> String {
        let mut w = Writer {
            out: String::with_capacity(16 << 10),
            om: openmetrics,
        };
        w.family(
            "netrig_build",
            Type::Info,
            "The netrig version serving and its protocol version.",
        );
        let labels = format!(
            "version=\"{}\",protocol=\"{PROTOCOL_VERSION}\"",
            env!("CARGO_PKG_VERSION")
        );
        w.sample("netrig_build_info", &labels, 1);

        w.family(
            "netrig_tests_started",
            Type::Counter,
            "Tests the server admitted, by kind.",
        );
        for k in Kind::ALL {
            let n = self.started[k.index()].load(Relaxed);
            w.sample("netrig_tests_started_total", &kind(k), n);
        }
        w.family(
            "netrig_refusals",
            Type::Counter,
            "Connections and tests the server refused or stopped, by the code it sent (reason).",
        );
        for c in CODES {
            if c == ErrorCode::Other {
                continue;
            }
            let n = self.refusals[code_index(c)].load(Relaxed);
            let l = format!("reason=\"{}\"", code_name(c));
            w.sample("netrig_refusals_total", &l, n);
        }
        let per_kind = [
            (
                "netrig_sent_bytes",
                "Bytes the server sent in ended tests, by kind (UDP: datagrams as sent, netrig's header included).",
                &self.sent,
            ),
            (
                "netrig_received_bytes",
                "Bytes the server received and verified in ended tests, by kind (UDP: datagrams as received, netrig's header included; a stream's --omit warm-up left out).",
                &self.received,
            ),
            (
                "netrig_network_errors",
                "Network errors of ended tests, by kind: TCP data connections that failed on the network, UDP datagrams and rr replies that failed to leave.",
                &self.network_errors,
            ),
            (
                "netrig_data_errors",
                "Data errors of ended tests, by kind: TCP data connections whose bytes failed verification, corrupt UDP datagrams and rr requests.",
                &self.data_errors,
            ),
        ];
        for (name, help, counts) in per_kind {
            w.family(name, Type::Counter, help);
            for k in Kind::ALL {
                let n = counts[k.index()].load(Relaxed);
                w.sample(&format!("{name}_total"), &kind(k), n);
            }
        }

        w.family(
            "netrig_test_duration_seconds",
            Type::Histogram,
            "How long ended tests took on the server, from admission to end, by kind.",
        );
        for k in Kind::ALL {
            let d = &self.durations[k.index()];
            let mut cumulative = 0;
            for (b, le) in DURATION_BUCKETS.iter().enumerate() {
                cumulative += d.buckets[b].load(Relaxed);
                let l = format!("{},le=\"{le:?}\"", kind(k));
                w.sample("netrig_test_duration_seconds_bucket", &l, cumulative);
            }
            cumulative += d.buckets[DURATION_BUCKETS.len()].load(Relaxed);
            let l = format!("{},le=\"+Inf\"", kind(k));
            w.sample("netrig_test_duration_seconds_bucket", &l, cumulative);
            w.sample("netrig_test_duration_seconds_count", &kind(k), cumulative);
            let sum = d.sum_us.load(Relaxed) as f64 / 1e6;
            w.sample_f64("netrig_test_duration_seconds_sum", &kind(k), sum);
        }

        w.family(
            "netrig_active_tests",
            Type::Gauge,
            "Tests running now, each holding one of --max-tests (a UDP stream of a group counts once each).",
        );
        w.sample("netrig_active_tests", "", g.tests);
        w.family(
            "netrig_active_tests_by_kind",
            Type::Gauge,
            "Tests admitted and not yet ended, by kind.",
        );
        for k in Kind::ALL {
            let i = k.index();
            let started = self.started[i].load(Relaxed);
            let ended: u64 = (self.durations[i].buckets.iter())
                .map(|b| b.load(Relaxed))
                .sum();
            let l = kind(k);
            w.sample(
                "netrig_active_tests_by_kind",
                &l,
                started.saturating_sub(ended),
            );
        }
        w.family(
            "netrig_open_connections",
            Type::Gauge,
            "Connections open that said who they are (counted in --max-conns).",
        );
        w.sample("netrig_open_connections", "", g.connections);

        let lim = &g.limits;
        let limits: [(&str, &str, f64); 8] = [
            (
                "netrig_limit_rate_bytes_per_second",
                "--max-rate, bytes per second",
                lim.max_rate_bps as f64 / 8.0,
            ),
            (
                "netrig_limit_duration_seconds",
                "--max-duration",
                lim.max_duration.as_secs_f64(),
            ),
            ("netrig_limit_bytes", "--max-bytes", lim.max_bytes as f64),
            (
                "netrig_limit_tests",
                "--max-tests",
                f64::from(lim.max_tests),
            ),
            (
                "netrig_limit_tests_per_client",
                "--max-tests-per-client",
                f64::from(lim.max_tests_per_client),
            ),
            (
                "netrig_limit_connections",
                "--max-conns",
                f64::from(lim.max_conns),
            ),
            (
                "netrig_limit_connections_per_client",
                "--max-conns-per-client",
                f64::from(lim.max_conns_per_client),
            ),
            (
                "netrig_limit_memory_bytes",
                "--max-memory",
                lim.max_memory as f64,
            ),
        ];
        for (name, flag, v) in limits {
            w.family(name, Type::Gauge, &format!("The limit in force: {flag}."));
            w.sample_f64(name, "", v);
        }

        w.family(
            "netrig_process_resident_memory_bytes",
            Type::Gauge,
            "The server's resident memory.",
        );
        w.sample("netrig_process_resident_memory_bytes", "", g.resident_bytes);
        w.family(
            "netrig_process_threads",
            Type::Gauge,
            "The server's threads.",
        );
        w.sample("netrig_process_threads", "", g.threads);
        if openmetrics {
            w.out.push_str("# EOF\n");
        }
        w.out
    }
}

/// What a scrape asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// The metrics (`GET` or `HEAD /metrics`), as OpenMetrics when the
    /// client accepts it; `head`: headers only.
    Metrics {
        openmetrics: bool,
        head: bool,
    },
    NotFound,
    BadMethod,
    Bad,
}

/// Reads a request's head (request line and headers).
pub(crate) fn parse_request(head: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(head) else {
        return Request::Bad;
    };
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version)) = (first.next(), first.next(), first.next())
    else {
        return Request::Bad;
    };
    if !version.starts_with("HTTP/") {
        return Request::Bad;
    }
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Request::BadMethod,
    };
    let path = target.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return Request::NotFound;
    }
    let openmetrics = lines.any(|l| {
        l.split_once(':').is_some_and(|(name, v)| {
            name.trim().eq_ignore_ascii_case("accept")
                && v.to_ascii_lowercase()
                    .contains("application/openmetrics-text")
        })
    });
    Request::Metrics { openmetrics, head }
}

fn kind(k: Kind) -> String {
    format!("kind=\"{}\"", k.name())
}

#[derive(Clone, Copy)]
pub(crate) enum Type {
    Counter,
    Gauge,
    Histogram,
    /// OpenMetrics' info; a gauge of 1 in the Prometheus format.
    Info,
}

/// Writes families in either format.
pub(crate) struct Writer {
    pub(crate) out: String,
    pub(crate) om: bool,
}

impl Writer {
    /// A family's HELP, TYPE and (OpenMetrics) UNIT lines. `name` is the
    /// family's name without `_total` or `_info`.
    pub(crate) fn family(&mut self, name: &str, ty: Type, help: &str) {
        // Prometheus 0.0.4 names a counter's family with its `_total`.
        let name = match (ty, self.om) {
            (Type::Counter, false) => format!("{name}_total"),
            (Type::Info, false) => format!("{name}_info"),
            _ => name.to_string(),
        };
        let ty = match (ty, self.om) {
            (Type::Counter, _) => "counter",
            (Type::Gauge, _) | (Type::Info, false) => "gauge",
            (Type::Histogram, _) => "histogram",
            (Type::Info, true) => "info",
        };
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {ty}");
        if self.om {
            for unit in ["seconds", "bytes"] {
                if name.ends_with(&format!("_{unit}")) {
                    let _ = writeln!(self.out, "# UNIT {name} {unit}");
                }
            }
        }
    }

    pub(crate) fn sample(&mut self, name: &str, labels: &str, v: u64) {
        match labels.is_empty() {
            true => writeln!(self.out, "{name} {v}"),
            false => writeln!(self.out, "{name}{{{labels}}} {v}"),
        }
        .unwrap_or(());
    }

    pub(crate) fn sample_f64(&mut self, name: &str, labels: &str, v: f64) {
        match labels.is_empty() {
            true => writeln!(self.out, "{name} {v:?}"),
            false => writeln!(self.out, "{name}{{{labels}}} {v:?}"),
        }
        .unwrap_or(());
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
