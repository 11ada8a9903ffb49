//! Configuration of a TCP client run, independent of how it was given.

use serde::Serialize;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;
use thiserror::Error;

use crate::protocol::proto::{IoPattern, TcpSpec, VerifyLevel};
use crate::protocol::sockopts::{SockOptError, SockOpts};
use crate::protocol::units::{UnitError, parse_size};

/// Largest buffer accepted for one send/receive call (and by the server).
pub const MAX_BUFFER: u64 = 64 << 20;

impl From<crate::protocol::spec::TcpSpecError> for ConfigError {
    fn from(e: crate::protocol::spec::TcpSpecError) -> Self {
        use crate::protocol::spec::TcpSpecError as E;
        match e {
            E::ZeroTransfer => ConfigError::Zero("--transfer"),
            E::TransferRange => ConfigError::TransferRange,
            E::PushPullZero => ConfigError::Zero("--push-bytes and --pull-bytes"),
            E::BurstPattern => ConfigError::BurstPattern,
            E::BurstZero => ConfigError::Zero("--burst-size and --burst-period"),
            E::RateLimit => ConfigError::RateLimit,
            E::Sock(e) => ConfigError::SockOpt(e),
        }
    }
}

/// Why a client configuration is not usable.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A size did not parse.
    #[error("{0}")]
    Unit(#[from] UnitError),
    /// The buffer range is empty or out of bounds.
    #[error(
        "buffer {0}: sizes must be 1 byte to 64M, with the range's low end not above its high end"
    )]
    BadBuffer(String),
    /// A value that must be positive was zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// Bursts only make sense in one direction.
    #[error("bursts need --pattern push or pull")]
    BurstPattern,
    /// A socket option value is not usable.
    #[error("{0}")]
    SockOpt(#[from] SockOptError),
    /// A rate limit of nothing, or a period outside 1 ms to a minute.
    #[error("--bitrate must be positive and --rate-limit-period 1ms to 60s")]
    RateLimit,
    /// A transfer range whose upper end is below its lower.
    #[error("--transfer [lo,hi]: the upper end is below the lower")]
    TransferRange,
    /// A local port range that is empty or starts at port 0.
    #[error("--cport {0}-{1}: give a port 1-65535 or a range lo-hi with lo <= hi")]
    LocalPorts(u16, u16),
    /// Fewer local ports than connections open at once.
    #[error("--cport gives {ports} local ports for -P {connections} connections at once")]
    TooFewPorts { ports: u64, connections: u32 },
    /// No local address of the target's family was given.
    #[error("no --bind address of the same IP family as target {0}")]
    NoBindForFamily(String),
}

/// Buffer size per send/receive: fixed, or chosen at random per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BufferSpec {
    /// Every connection uses this size.
    Fixed(u32),
    /// Each connection picks a size uniformly in `[low, high]`.
    Range(u32, u32),
}

impl FromStr for BufferSpec {
    type Err = ConfigError;

    /// `64K`, or a range `[1K,1M]` (ctsTraffic's form) or `1K..1M`.
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let t = s.trim();
        let inner = t.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
        let parts: Option<(&str, &str)> = match inner {
            Some(i) => Some(
                i.split_once(',')
                    .ok_or_else(|| ConfigError::BadBuffer(s.into()))?,
            ),
            None => t.split_once(".."),
        };
        let check = |v: u64| {
            if v == 0 || v > MAX_BUFFER {
                Err(ConfigError::BadBuffer(s.into()))
            } else {
                Ok(v as u32)
            }
        };
        match parts {
            None => Ok(BufferSpec::Fixed(check(parse_size(t)?)?)),
            Some((a, b)) => {
                let (lo, hi) = (check(parse_size(a)?)?, check(parse_size(b)?)?);
                if lo > hi {
                    return Err(ConfigError::BadBuffer(s.into()));
                }
                Ok(BufferSpec::Range(lo, hi))
            }
        }
    }
}

/// Everything a TCP client run needs.
#[derive(Debug, Clone, Serialize)]
pub struct TcpClientConfig {
    /// Servers, used round-robin (one session each).
    pub targets: Vec<String>,
    /// Port for targets that do not name one.
    pub port: u16,
    /// Pre-shared key for servers that require one (never written to files).
    #[serde(skip)]
    pub key: Option<crate::protocol::auth::Key>,
    /// Concurrent connections (`--connections`).
    pub connections: u32,
    /// Rounds of `connections`; `None` is unbounded.
    pub iterations: Option<u64>,
    /// Most connections being set up at once: from connect until the
    /// server acknowledges the data hello.
    pub throttle: u32,
    /// A ramp: at most this many connections are started, a number the
    /// caller raises as the run goes (`netrig load`); none: all at once.
    #[serde(skip)]
    pub open_cap: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Data flow pattern.
    pub pattern: IoPattern,
    /// Bytes per connection (the lower end, with a range).
    pub transfer: u64,
    /// With a range (`-n [1M,64M]`): its upper end; each connection moves
    /// a size in the range that both ends derive from its ID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer_max: Option<u64>,
    /// Pushpull: client bytes per turn.
    pub push_bytes: u64,
    /// Pushpull: server bytes per turn.
    pub pull_bytes: u64,
    /// Buffer per send/receive.
    pub buffer: BufferSpec,
    /// Verification level.
    pub verify: VerifyLevel,
    /// Stop after this long.
    #[serde(with = "crate::protocol::units::duration_ms")]
    pub time_limit: Option<Duration>,
    /// At the time limit, connections end their data at a chunk boundary
    /// and agree on what they moved (iperf's `-t`: a success) rather than
    /// being cancelled; push, pull and duplex (`netrig tcp`; `load` cuts
    /// its phases).
    pub time_bound: bool,
    /// `-O`: this long first is a warm-up, left out of the goodput.
    #[serde(
        with = "crate::protocol::units::duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub omit: Option<Duration>,
    /// Local addresses to connect from, round-robin per family.
    pub bind: Vec<IpAddr>,
    /// Status interval.
    #[serde(with = "crate::protocol::units::duration_ms")]
    pub interval: Option<Duration>,
    /// A connection making no progress for this long fails.
    #[serde(with = "crate::protocol::units::duration_ms")]
    pub idle_timeout: Option<Duration>,
    /// Give up on a connection (control or data) whose TCP handshake takes
    /// longer than this (`--connect-timeout`); none: the idle timeout.
    #[serde(
        with = "crate::protocol::units::duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub connect_timeout: Option<Duration>,
    /// Seed for random buffer sizes (random if absent).
    pub seed: Option<u64>,
    /// iperf2-style bursts (push or pull only).
    pub burst: Option<crate::protocol::proto::BurstSpec>,
    /// Socket and TCP options for every data connection (both ends).
    pub sock: SockOpts,
    /// Each connection's sending rate limit (whichever end sends).
    pub rate: Option<crate::protocol::proto::RateLimit>,
    /// Open the data connections when the wall clock reads this (Unix
    /// seconds; iperf2 --txstart-time), after the sessions are set up.
    #[serde(rename = "txstart_time", skip_serializing_if = "Option::is_none")]
    pub start_at: Option<f64>,
    /// Ask each server for its own status rows (iperf3 --get-server-output).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub server_output: bool,
    /// The interface data connections go out of (SO_BINDTODEVICE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_dev: Option<String>,
    /// Local ports for data connections, taken in turn (iperf3 --cport,
    /// ctsTraffic -LocalPort lo-hi); the kernel picks when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_ports: Option<(u16, u16)>,
    /// Whether each connection's record has its local address and port
    /// (a `getsockname` per connection; crr reports none).
    #[serde(skip)]
    pub local_addrs: bool,
}

impl TcpClientConfig {
    /// A configuration with ctsTraffic's defaults and the given targets.
    pub fn new(targets: Vec<String>) -> Self {
        TcpClientConfig {
            targets,
            port: crate::net::DEFAULT_PORT,
            connections: 8,
            iterations: None,
            throttle: 1000,
            open_cap: None,
            pattern: IoPattern::Push,
            transfer: 1 << 30,
            transfer_max: None,
            push_bytes: 1 << 20,
            pull_bytes: 1 << 20,
            buffer: BufferSpec::Fixed(65536),
            verify: VerifyLevel::Data,
            time_limit: None,
            time_bound: false,
            omit: None,
            bind: Vec::new(),
            interval: Some(Duration::from_secs(5)),
            idle_timeout: Some(Duration::from_secs(30)),
            connect_timeout: None,
            seed: None,
            key: None,
            burst: None,
            sock: SockOpts::default(),
            rate: None,
            start_at: None,
            bind_dev: None,
            local_ports: None,
            server_output: false,
            local_addrs: true,
        }
    }

    /// Total connections the run will make (`u64::MAX` when unbounded).
    pub fn total_connections(&self) -> u64 {
        self.iterations
            .map_or(u64::MAX, |i| i.saturating_mul(self.connections as u64))
    }

    /// Checks values a user can get wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.connections == 0 {
            return Err(ConfigError::Zero("--connections"));
        }
        if self.throttle == 0 {
            return Err(ConfigError::Zero("--throttle"));
        }
        if self.iterations == Some(0) {
            return Err(ConfigError::Zero("--iterations"));
        }
        // The client's own socket options (the spec carries the server's).
        self.sock.validate()?;
        self.spec().check()?;
        if let Some((lo, hi)) = self.local_ports {
            if lo == 0 || lo > hi {
                return Err(ConfigError::LocalPorts(lo, hi));
            }
            // Each connection open at once needs a port of its own (per
            // source address and server, but counting those is the kernel's
            // job; this catches the plain mistake).
            let ports = u64::from(hi - lo) + 1;
            let targets = (self.targets.len().max(1) * self.bind.len().max(1)) as u64;
            if u64::from(self.connections) > ports * targets {
                return Err(ConfigError::TooFewPorts {
                    ports,
                    connections: self.connections,
                });
            }
        }
        Ok(())
    }

    /// The spec sent to the server.
    pub fn spec(&self) -> TcpSpec {
        TcpSpec {
            pattern: self.pattern,
            transfer: self.transfer,
            push_bytes: self.push_bytes,
            pull_bytes: self.pull_bytes,
            verify: self.verify,
            connections: self.connections,
            burst: self.burst,
            time_bound_ms: match self.time_limit {
                Some(t) if self.time_bound && self.pattern != IoPattern::Pushpull => {
                    u64::try_from(t.as_nanos().div_ceil(1_000_000))
                        .unwrap_or(u64::MAX)
                        .max(1)
                }
                _ => 0,
            },
            sock: self.sock.for_server(),
            rate: self.rate,
            transfer_max: self.transfer_max,
            server_interval_ms: match (self.server_output, self.interval) {
                (true, Some(i)) => i.as_millis().clamp(
                    u128::from(crate::protocol::proto::MIN_SERVER_INTERVAL_MS),
                    u128::from(u32::MAX),
                ) as u64,
                (true, None) => 1000,
                (false, _) => 0,
            },
            duration_ms: self
                .time_limit
                .map_or(0, crate::protocol::spec::duration_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_forms() {
        assert_eq!("64K".parse(), Ok(BufferSpec::Fixed(65536)));
        assert_eq!("[1K,1M]".parse(), Ok(BufferSpec::Range(1024, 1 << 20)));
        assert_eq!(
            "[1024,1048576]".parse(),
            Ok(BufferSpec::Range(1024, 1 << 20))
        );
        assert_eq!("1K..2K".parse(), Ok(BufferSpec::Range(1024, 2048)));
        assert!("[2K,1K]".parse::<BufferSpec>().is_err());
        assert!("0".parse::<BufferSpec>().is_err());
        assert!("[1K]".parse::<BufferSpec>().is_err());
        assert!("1G".parse::<BufferSpec>().is_err());
    }

    #[test]
    fn totals_and_validation() {
        let mut c = TcpClientConfig::new(vec![]);
        assert_eq!(c.total_connections(), u64::MAX);
        c.iterations = Some(10);
        c.connections = 100;
        assert_eq!(c.total_connections(), 1000);
        assert!(c.validate().is_ok());
        c.transfer = 0;
        assert_eq!(c.validate(), Err(ConfigError::Zero("--transfer")));
    }
}
