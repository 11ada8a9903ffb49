//! A request/response run's settings, what it reports, and the run in
//! progress that the TCP, SCTP and UDP exchanges record their round trips in.

use serde::Serialize;
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::protocol::proto::{RrProto, RrSpec};
use crate::protocol::rr::hist::{LatencyStats, Summary};
use crate::protocol::udp::clock::Offset;

/// Transport as the user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP one-to-one (SOCK_STREAM).
    Sctp,
    /// SCTP one-to-many (SOCK_SEQPACKET).
    SctpSeqpacket,
}

impl crate::protocol::names::Named for Transport {
    const NAMES: &'static [(Self, &'static str, &'static str)] = &[
        (Transport::Tcp, "tcp", "TCP"),
        (Transport::Udp, "udp", "UDP"),
        (Transport::Sctp, "sctp", "SCTP one-to-one (SOCK_STREAM)"),
        (
            Transport::SctpSeqpacket,
            "sctp-seqpacket",
            "SCTP one-to-many (SOCK_SEQPACKET)",
        ),
    ];
}

/// Everything a request/response run needs.
#[derive(Debug, Clone, Serialize)]
pub struct RrConfig {
    /// Server.
    pub target: String,
    /// Port if the target names none.
    pub port: u16,
    /// Pre-shared key for servers that require one (never written to files).
    #[serde(skip)]
    pub key: Option<crate::protocol::auth::Key>,
    /// Transport.
    pub transport: Transport,
    /// Request payload bytes.
    pub size: u32,
    /// Reply payload bytes.
    pub reply: u32,
    /// Measured iterations ([`UNBOUNDED`] = until Ctrl-C, written as null).
    #[serde(serialize_with = "count_or_null")]
    pub iterations: u64,
    /// Iterations before measuring, reported separately.
    pub warmup: u64,
    /// Enable Nagle.
    pub nagle: bool,
    /// Spin on non-blocking sockets instead of sleeping in the kernel.
    pub busy_poll: bool,
    /// UDP: end each round trip at the kernel's receive time of the reply
    /// (SO_TIMESTAMPNS), not when this process wakes up to read it.
    #[serde(default)]
    pub rx_timestamps: bool,
    /// UDP: a reply later than this counts as lost.
    #[serde(with = "crate::protocol::units::duration_ms")]
    pub timeout: Option<Duration>,
    /// Send requests on this schedule instead of back to back.
    #[serde(with = "crate::protocol::units::duration_ms")]
    pub interval: Option<Duration>,
    /// Histogram lower bound, µs.
    pub hist_min_us: f64,
    /// Histogram upper bound, µs.
    pub hist_max_us: f64,
    /// Histogram bins.
    pub hist_bins: usize,
    /// Largest outliers kept.
    pub outliers: usize,
    /// Trust clocks (no offset estimate) for one-way splits.
    pub synced: bool,
    /// Local addresses: the first for the connection (and UDP socket); all of
    /// them for an SCTP one-to-many association (multi-homed).
    pub bind: Vec<IpAddr>,
    /// IP-level options for both ends' sockets (`-w`, `--dscp`, ...).
    pub sock: crate::protocol::sockopts::SockOpts,
    /// The interface this end's sockets are bound to (SO_BINDTODEVICE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_dev: Option<String>,
    /// The local port of the test's socket (`--cport`): the connection
    /// (TCP, SCTP) or the data socket (UDP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cport: Option<u16>,
    /// Send the first request when the wall clock reads this (Unix
    /// seconds; iperf2 --txstart-time), after the setup exchanges.
    #[serde(rename = "txstart_time", skip_serializing_if = "Option::is_none")]
    pub start_at: Option<f64>,
    /// Stop sending requests this long after the first (`-t`); with
    /// [`UNBOUNDED`] iterations, this is what ends the run.
    #[serde(
        with = "crate::protocol::units::duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub duration: Option<Duration>,
    /// Give up on the control connection's TCP handshake after this
    /// (`--connect-timeout`); none: 10 s.
    #[serde(
        with = "crate::protocol::units::duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub connect_timeout: Option<Duration>,
}

/// Why a request/response configuration cannot run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RrConfigError {
    /// What the server would refuse: the spec check both ends make.
    #[error("{0}")]
    Spec(#[from] crate::protocol::refusal::Invalid),
    /// `--cport` with an SCTP one-to-many association, whose port the
    /// kernel picks.
    #[error(
        "--cport does not apply to --proto sctp-seqpacket: its association takes a port the kernel picks"
    )]
    CportSeqpacket,
    /// Several local addresses without a transport that uses them.
    #[error("several --bind addresses need --proto sctp-seqpacket (multi-homing)")]
    MultiHoming,
    /// Local addresses of both families.
    #[error("--bind addresses must all be IPv4 or all IPv6")]
    MixedFamilies,
    /// A schedule of no time between requests.
    #[error("the interval between requests must be positive")]
    Interval,
}

impl RrConfig {
    /// Whether this configuration can run: local addresses and ports the
    /// transport can use, a schedule, and the spec the server would accept
    /// (`rr::serve::validate`, the check the server makes: sizes within what
    /// the transport carries, a count, socket options in range). The engine checks it before it connects; the
    /// command line checks it before it starts an embedded server.
    pub fn validate(&self) -> Result<(), RrConfigError> {
        if self.cport.is_some() && self.transport == Transport::SctpSeqpacket {
            return Err(RrConfigError::CportSeqpacket);
        }
        if self.bind.len() > 1 && self.transport != Transport::SctpSeqpacket {
            return Err(RrConfigError::MultiHoming);
        }
        if self
            .bind
            .iter()
            .any(|b| b.is_ipv4() != self.bind[0].is_ipv4())
        {
            return Err(RrConfigError::MixedFamilies);
        }
        if self.interval.is_some_and(|i| i.is_zero()) {
            return Err(RrConfigError::Interval);
        }
        crate::rr::serve::validate(&self.spec())?;
        Ok(())
    }

    /// The spec the server is sent for this run: the transport's protocol,
    /// sizes, the count with the warm-up, and how long the run may last.
    pub fn spec(&self) -> RrSpec {
        let proto = match self.transport {
            Transport::Tcp | Transport::Sctp => RrProto::Tcp,
            Transport::Udp => RrProto::Udp,
            Transport::SctpSeqpacket => RrProto::SctpSeqpacket,
        };
        let total = self.warmup.saturating_add(self.iterations);
        // The shorter of what the count on its schedule takes and `-t`;
        // 0 (not known) for a count back to back with no `-t`.
        let by_count = match self.iterations {
            UNBOUNDED => 0,
            _ => crate::protocol::spec::schedule_ms(self.interval, total),
        };
        let duration_ms = match (
            self.duration.map(crate::protocol::spec::duration_ms),
            by_count,
        ) {
            (Some(t), 0) => t,
            (Some(t), c) => t.min(c),
            (None, c) => c,
        };
        RrSpec {
            proto,
            size: self.size,
            reply: self.reply,
            iterations: total,
            nagle: self.nagle,
            until_stopped: self.iterations == UNBOUNDED,
            sock: self.sock.clone(),
            duration_ms,
        }
    }
}

/// `RrConfig::iterations` for a run that goes on until it is interrupted.
pub const UNBOUNDED: u64 = u64::MAX;

/// A count, or null for [`UNBOUNDED`] (a run until stopped has no count).
fn count_or_null<S: serde::Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
    (*n != UNBOUNDED).then_some(*n).serialize(s)
}

pub use crate::protocol::rr::probe::Probe;

/// What a request/response run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RrReport {
    /// Request bytes.
    pub size: u32,
    /// Reply bytes.
    pub reply: u32,
    /// Transport.
    pub transport: Transport,
    /// Warm-up round trips.
    pub warmup: Option<Summary>,
    /// Measured round trips.
    pub latency: Option<Summary>,
    /// Measured transactions per second.
    pub transactions_per_sec: f64,
    /// Requests sent (warm-up included).
    pub sent: u64,
    /// Replies received in time.
    pub received: u64,
    /// Replies that came after their timeout.
    pub late: u64,
    /// Requests that never reached the server (UDP).
    pub lost_up: Option<u64>,
    /// Replies the server sent that never arrived (UDP).
    pub lost_down: Option<u64>,
    /// Requests that reached the server more than once (UDP; the server
    /// answers each once).
    pub duplicates_up: Option<u64>,
    /// Replies that arrived more than once (UDP).
    pub duplicates_down: Option<u64>,
    /// Requests that reached the server behind a later request (UDP).
    pub reordered_up: Option<u64>,
    /// Replies that arrived behind a reply the server sent after them (UDP;
    /// the server numbers its replies in the order it sends them).
    pub reordered_down: Option<u64>,
    /// Clock offset used for one-way splits (UDP).
    pub offset: Option<Offset>,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
    /// Corrupt replies.
    pub corrupt: u64,
    /// Requests the server says it answered.
    pub server_requests: Option<u64>,
    /// Corrupt requests the server saw.
    pub server_corrupt: Option<u64>,
    /// Replies timed by their kernel receive timestamp (`rx_timestamps`).
    pub rx_stamped: u64,
    /// UDP: the marking the replies arrived with, against what the server
    /// set (the test's `--dscp`/`--tos`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_marking: Option<crate::protocol::udp::marks::Marking>,
    /// ACE's histogram of the measured round trips, its non-empty bins
    /// within `--hist-min`..`--hist-max`: (low µs, high µs, count).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<(f64, f64, u64)>,
    /// This end of the test's socket: the connection (TCP, SCTP) or the
    /// data socket (UDP), as iperf3's `local_host`/`local_port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<std::net::SocketAddr>,
    /// The network error that ended the run early, if one did; everything
    /// above counts what was measured before it.
    pub error: Option<String>,
}

impl RrReport {
    /// A report with nothing measured yet.
    pub(crate) fn empty(cfg: &RrConfig) -> RrReport {
        RrReport {
            size: cfg.size,
            reply: cfg.reply,
            transport: cfg.transport,
            local: None,
            histogram: Vec::new(),
            warmup: None,
            latency: None,
            transactions_per_sec: 0.0,
            sent: 0,
            received: 0,
            late: 0,
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
            error: None,
        }
    }
}

/// How often a UDP run checks that the server is still there.
pub(super) const LIVENESS_CHECK: Duration = Duration::from_millis(250);

/// One run in progress: its settings, its samples so far, and its stop flag.
pub(super) struct Run<'a> {
    pub(super) cfg: &'a RrConfig,
    /// Requests to send, warm-up included.
    pub(super) total: u64,
    pub(super) interrupt: &'a AtomicBool,
    warm: LatencyStats,
    main: LatencyStats,
    pub(super) rep: RrReport,
    /// Wall-clock span of the measured round trips: from the start of the
    /// first to the end of the last (transactions per second, as ACE counts
    /// them, include everything between round trips).
    main_span: Option<(Instant, Instant)>,
    /// When the first request was allowed out: `duration` counts from it.
    first_send: Option<Instant>,
}

impl<'a> Run<'a> {
    pub(super) fn new(
        cfg: &'a RrConfig,
        total: u64,
        interrupt: &'a AtomicBool,
        stats: impl Fn() -> LatencyStats,
    ) -> Run<'a> {
        Run {
            cfg,
            total,
            interrupt,
            warm: stats(),
            main: stats(),
            rep: RrReport::empty(cfg),
            main_span: None,
            first_send: None,
        }
    }

    /// Whether request `seq` may still leave at `now`: within the count
    /// and, with a duration, before it has passed since the first request.
    pub(super) fn may_send(&mut self, seq: u64, now: Instant) -> bool {
        if seq >= self.total {
            return false;
        }
        let Some(d) = self.cfg.duration else {
            return true;
        };
        let first = *self.first_send.get_or_insert(now);
        now.saturating_duration_since(first) < d
    }

    /// Fills `rep`'s latency figures from the samples; returns the measured
    /// round trips' statistics.
    pub(super) fn summarise(self, rep: &mut RrReport) -> LatencyStats {
        rep.warmup = self.warm.summary();
        rep.latency = self.main.summary();
        if let Some((first, last)) = self.main_span
            && last > first
        {
            rep.transactions_per_sec = self.main.count() as f64 / (last - first).as_secs_f64();
        }
        self.main
    }

    /// Records round trip `seq`, which ended at `now`: a warm-up one apart,
    /// a measured one also in the span transactions per second count over.
    pub(super) fn record_at(&mut self, seq: u64, rtt: Duration, now: Instant) {
        let ns = rtt.as_nanos() as u64;
        if seq < self.cfg.warmup {
            self.warm.record_ns(ns);
        } else {
            self.main.record_ns(ns);
            let first = self
                .main_span
                .map_or(now.checked_sub(rtt).unwrap_or(now), |s| s.0);
            self.main_span = Some((first, now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RrConfig {
        RrConfig {
            target: "h".into(),
            port: 4794,
            key: None,
            transport: Transport::Udp,
            size: 64,
            reply: 128,
            iterations: 4,
            warmup: 2,
            nagle: false,
            busy_poll: false,
            rx_timestamps: false,
            timeout: None,
            interval: None,
            hist_min_us: 0.0,
            hist_max_us: 1000.0,
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

    fn stats() -> LatencyStats {
        LatencyStats::new(0.0, 1000.0, 10, 0)
    }

    #[test]
    fn a_config_is_checked_as_the_server_checks_its_spec() {
        use crate::protocol::refusal::Invalid;
        let udp_max = (crate::protocol::udp::header::MAX_DATAGRAM
            - crate::protocol::udp::header::HEADER_LEN) as u32;
        let check = |f: &dyn Fn(&mut RrConfig)| {
            let mut c = config();
            f(&mut c);
            c.validate()
        };
        assert_eq!(check(&|_| {}), Ok(()));
        let too_big = Err(RrConfigError::Spec(Invalid::RequestSize {
            max: udp_max,
            proto: "udp",
        }));
        assert_eq!(check(&|c| c.size = 0), too_big);
        assert_eq!(check(&|c| c.size = udp_max), Ok(()));
        assert_eq!(check(&|c| c.reply = udp_max), Ok(()));
        assert_eq!(check(&|c| c.size = udp_max + 1), too_big);
        assert_eq!(check(&|c| c.reply = udp_max + 1), too_big);
        // Over TCP, what one message may hold.
        let tcp_max = crate::rr::serve::MAX_TCP_MESSAGE;
        let tcp = |c: &mut RrConfig| c.transport = Transport::Tcp;
        assert_eq!(
            check(&|c| {
                tcp(c);
                c.size = tcp_max;
            }),
            Ok(())
        );
        assert_eq!(
            check(&|c| {
                tcp(c);
                c.size = tcp_max + 1;
            }),
            Err(RrConfigError::Spec(Invalid::RequestSize {
                max: tcp_max,
                proto: "tcp"
            }))
        );
        assert_eq!(
            check(&|c| {
                c.iterations = 0;
                c.warmup = 0;
            }),
            Err(RrConfigError::Spec(Invalid::ZeroIterations))
        );
    }

    #[test]
    fn the_spec_carries_the_count_with_its_warm_up_and_the_shorter_limit() {
        let mut c = config();
        c.transport = Transport::Sctp;
        let s = c.spec();
        assert_eq!(
            s.proto,
            RrProto::Tcp,
            "SCTP one-to-one speaks the stream protocol"
        );
        assert_eq!((s.size, s.reply, s.iterations), (64, 128, 6));
        assert!(!s.until_stopped);
        assert_eq!(s.duration_ms, 0, "a count back to back has no known length");
        c.interval = Some(Duration::from_millis(10));
        assert_eq!(
            c.spec().duration_ms,
            crate::protocol::spec::schedule_ms(c.interval, 6)
        );
        c.duration = Some(Duration::from_millis(20));
        assert_eq!(c.spec().duration_ms, 20, "-t shorter than the schedule");
        c.duration = Some(Duration::from_secs(20));
        assert_eq!(
            c.spec().duration_ms,
            crate::protocol::spec::schedule_ms(c.interval, 6)
        );
        c.iterations = UNBOUNDED;
        let s = c.spec();
        assert!(s.until_stopped);
        assert_eq!(s.duration_ms, 20_000, "until stopped: -t alone");
        c.transport = Transport::Udp;
        assert_eq!(c.spec().proto, RrProto::Udp);
        c.transport = Transport::SctpSeqpacket;
        assert_eq!(c.spec().proto, RrProto::SctpSeqpacket);
    }

    #[test]
    fn local_addresses_and_ports_must_suit_the_transport() {
        let v4: IpAddr = "127.0.0.1".parse().unwrap();
        let v4b: IpAddr = "127.0.0.2".parse().unwrap();
        let v6: IpAddr = "::1".parse().unwrap();
        let with = |t: Transport, bind: Vec<IpAddr>, cport: Option<u16>| {
            let mut c = config();
            c.transport = t;
            c.bind = bind;
            c.cport = cport;
            c.validate()
        };
        assert_eq!(with(Transport::Udp, vec![v4], Some(5000)), Ok(()));
        assert_eq!(
            with(Transport::Tcp, vec![v4, v4b], None),
            Err(RrConfigError::MultiHoming)
        );
        assert_eq!(with(Transport::SctpSeqpacket, vec![v4, v4b], None), Ok(()));
        assert_eq!(
            with(Transport::SctpSeqpacket, vec![v4, v6], None),
            Err(RrConfigError::MixedFamilies)
        );
        assert_eq!(
            with(Transport::SctpSeqpacket, vec![v4], Some(5000)),
            Err(RrConfigError::CportSeqpacket)
        );
        assert_eq!(with(Transport::Sctp, vec![v4], Some(5000)), Ok(()));
    }

    #[test]
    fn a_schedule_needs_time_between_requests_and_options_in_range() {
        let mut c = config();
        c.interval = Some(Duration::ZERO);
        assert_eq!(c.validate(), Err(RrConfigError::Interval));
        c.interval = Some(Duration::from_nanos(1));
        assert_eq!(c.validate(), Ok(()));
        c.sock.mss = Some(1);
        assert!(matches!(
            c.validate(),
            Err(RrConfigError::Spec(
                crate::protocol::refusal::Invalid::SockOpt(_)
            ))
        ));
    }

    #[test]
    fn a_run_until_stopped_writes_its_count_as_null() {
        let mut cfg = config();
        let json = |c: &RrConfig| serde_json::to_value(c).unwrap()["iterations"].clone();
        assert_eq!(json(&cfg), 4);
        cfg.iterations = UNBOUNDED;
        assert_eq!(json(&cfg), serde_json::Value::Null);
    }

    #[test]
    fn an_empty_report_has_the_runs_sizes_and_nothing_measured() {
        let r = RrReport::empty(&config());
        assert_eq!((r.size, r.reply, r.transport), (64, 128, Transport::Udp));
        assert_eq!((r.sent, r.received, r.transactions_per_sec), (0, 0, 0.0));
        assert!(r.latency.is_none() && r.error.is_none() && !r.interrupted);
    }

    #[test]
    fn requests_stop_at_the_count_or_the_duration_after_the_first() {
        let stop = AtomicBool::new(false);
        let cfg = config();
        let mut run = Run::new(&cfg, 3, &stop, stats);
        let t = Instant::now();
        assert!(run.may_send(0, t) && run.may_send(2, t + Duration::from_secs(9)));
        assert!(!run.may_send(3, t));
        let mut cfg = config();
        cfg.duration = Some(Duration::from_secs(2));
        let mut run = Run::new(&cfg, UNBOUNDED, &stop, stats);
        // The duration counts from the first request allowed out.
        assert!(run.may_send(0, t + Duration::from_secs(5)));
        assert!(run.may_send(1, t + Duration::from_millis(6999)));
        assert!(!run.may_send(2, t + Duration::from_secs(7)));
        assert!(!run.may_send(3, t + Duration::from_secs(8)));
    }

    #[test]
    fn warm_up_is_apart_and_the_rate_is_over_the_measured_span() {
        let stop = AtomicBool::new(false);
        let cfg = config();
        let mut run = Run::new(&cfg, 6, &stop, stats);
        let t = Instant::now() + Duration::from_secs(10);
        let ms = Duration::from_millis;
        run.record_at(0, ms(1), t);
        run.record_at(1, ms(3), t + ms(5));
        // Measured: the first began 100 ms before it ended at t + 1 s; the
        // last ended at t + 2 s: 4 round trips in 1.1 s.
        run.record_at(2, ms(100), t + ms(1000));
        run.record_at(3, ms(50), t + ms(1500));
        run.record_at(4, ms(50), t + ms(1900));
        run.record_at(5, ms(50), t + ms(2000));
        let mut rep = RrReport::empty(&cfg);
        let main = run.summarise(&mut rep);
        let warm = rep.warmup.unwrap();
        assert_eq!((warm.count, warm.min_us, warm.max_us), (2, 1000.0, 3000.0));
        let lat = rep.latency.unwrap();
        assert_eq!(
            (lat.count, lat.min_us, lat.max_us),
            (4, 50_000.0, 100_000.0)
        );
        assert_eq!(main.count(), 4);
        assert!(
            (rep.transactions_per_sec - 4.0 / 1.1).abs() < 1e-9,
            "{}",
            rep.transactions_per_sec
        );
    }

    #[test]
    fn round_trips_are_recorded_as_they_end() {
        let stop = AtomicBool::new(false);
        let cfg = config();
        let mut run = Run::new(&cfg, 3, &stop, stats);
        for seq in 0..3 {
            run.record_at(seq, Duration::from_micros(500), Instant::now());
        }
        let mut rep = RrReport::empty(&cfg);
        run.summarise(&mut rep);
        assert_eq!(rep.warmup.unwrap().count, 2);
        assert_eq!(rep.latency.unwrap().count, 1);
    }

    #[test]
    fn a_rate_needs_a_span() {
        let stop = AtomicBool::new(false);
        let mut cfg = config();
        cfg.warmup = 0;
        let mut run = Run::new(&cfg, 1, &stop, stats);
        // One round trip of zero length: no time to count over.
        run.record_at(0, Duration::ZERO, Instant::now());
        let mut rep = RrReport::empty(&cfg);
        run.summarise(&mut rep);
        assert_eq!(rep.latency.unwrap().count, 1);
        assert_eq!(rep.transactions_per_sec, 0.0);
    }
}
