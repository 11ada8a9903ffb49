//! Why a server will not run a test, or stopped one, as values rather than
//! text: the server picks a [`Refusal`], sends its [`ErrorCode`] and its
//! text in a `Message::Error`, and code and tests that need to tell one
//! reason from another match variants instead of message prefixes.
//!
//! Protocol layer: no sockets; I/O failures arrive as `io::Error` values.

use std::io;
use std::net::IpAddr;
use std::time::Duration;

use thiserror::Error;
use uuid::Uuid;

use crate::protocol::proto::{ErrorCode, Message, ProtoError, ReadError};
use crate::protocol::units::format_bits_per_sec;

/// Every reason a server turns a test or a connection away.
#[derive(Debug, Error)]
pub enum Refusal {
    /// One of the server's configured limits (`netrig serve --max-*`).
    #[error("server limit: {0}")]
    Limit(#[from] Limit),
    /// The test asks for something no server runs.
    #[error("{0}")]
    Invalid(#[from] Invalid),
    /// The client failed, or did not attempt, the pre-shared-key exchange.
    #[error("{0}")]
    Auth(#[from] AuthFailure),
    /// A frame that does not decode.
    #[error(transparent)]
    Malformed(#[from] ProtoError),
    /// A message that has no place at this point of the conversation.
    #[error("unexpected {got} {context}")]
    Unexpected { got: String, context: &'static str },
    /// The client speaks another protocol version.
    #[error("client speaks protocol version {client}, this server speaks {server}")]
    Version { client: u16, server: u16 },
    /// A data connection names a session the server does not hold.
    #[error("unknown session {0}")]
    UnknownSession(Uuid),
    /// A data connection came from another host than its session's.
    #[error("data connection from {from} but session {session} belongs to {owner}")]
    ForeignHost {
        from: IpAddr,
        session: Uuid,
        owner: IpAddr,
    },
    /// A data connection's number its session has already used (a
    /// replayed data hello): each is admitted once.
    #[error("connection {connection} of session {session} was already used")]
    ConnectionReused { session: Uuid, connection: Uuid },
    /// `serve --exit-after N` has admitted its N connections.
    #[error("server exit limit of {0} connections reached")]
    ExitAfter(u64),
    /// The session was stopped or hit a limit before this connection came.
    #[error("session stopped")]
    Stopped,
    /// `serve --exit-after` is reached and the server is finishing.
    #[error("server is about to exit")]
    Exiting,
    /// The server could not set up what the test needs.
    #[error("cannot open {what}: {source}")]
    Resource {
        what: &'static str,
        source: io::Error,
    },
    /// This kernel lacks a transport the test asks for.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// The congestion control algorithm the test asks for is not in the
    /// server's kernel.
    #[error("congestion control {name} is not available on the server (it offers: {available})")]
    Congestion { name: String, available: String },
    /// The server's kernel refused a socket option the test asks for.
    #[error("the server cannot set {option} on its socket: {source}")]
    SockOptRefused {
        option: &'static str,
        source: io::Error,
    },
    /// The client's UDP handshake datagram never arrived.
    #[error("no handshake datagram arrived within {} s (is UDP blocked on the path?)", .0.as_secs())]
    NoHandshake(Duration),
    /// An accepted UDP or rr session whose client did not start its stream
    /// in time (a silent session holding a test slot).
    #[error("the stream was not started within {} s of the test's acceptance", .0.as_secs())]
    NotStarted(Duration),
}

impl Refusal {
    /// The machine-readable code sent with the refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            Refusal::Version { .. } => ErrorCode::UnsupportedVersion,
            Refusal::UnknownSession(_) => ErrorCode::UnknownSession,
            Refusal::Malformed(_) => ErrorCode::Malformed,
            Refusal::Unexpected { .. } => ErrorCode::UnexpectedMessage,
            Refusal::Limit(l) => l.code(),
            Refusal::Invalid(_) => ErrorCode::Invalid,
            Refusal::Auth(_) => ErrorCode::Auth,
            Refusal::ForeignHost { .. } => ErrorCode::ForeignHost,
            Refusal::ConnectionReused { .. } => ErrorCode::ConnectionReused,
            Refusal::ExitAfter(_) | Refusal::Stopped | Refusal::Exiting => ErrorCode::Stopped,
            Refusal::Resource { .. } => ErrorCode::Resource,
            Refusal::Unsupported(_)
            | Refusal::Congestion { .. }
            | Refusal::SockOptRefused { .. } => ErrorCode::Unsupported,
            Refusal::NoHandshake(_) => ErrorCode::NoHandshake,
            Refusal::NotStarted(_) => ErrorCode::Stopped,
        }
    }

    /// The error message that carries this refusal to the client.
    pub fn message(&self) -> Message {
        Message::error(self.code(), self.to_string())
    }
}

/// A server limit a test would break, or did reach.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Limit {
    #[error("max bytes per test {max} (asked for {asked})")]
    Bytes { max: u64, asked: u64 },
    #[error("max bytes per test {max} (one request and reply take {per})")]
    BytesPerRound { max: u64, per: u64 },
    #[error("max bytes per test {max} reached")]
    BytesReached { max: u64 },
    #[error("max duration {} s (asked for {} s)", .max.as_secs_f64(), .asked.as_secs_f64())]
    Duration { max: Duration, asked: Duration },
    #[error(
        "max duration {} s (a train of {bursts} bursts every {period_ms} ms lasts {} s)",
        .max.as_secs_f64(), (.bursts.saturating_sub(1)).saturating_mul(*.period_ms) as f64 / 1e3
    )]
    BurstTrain {
        max: Duration,
        bursts: u64,
        period_ms: u64,
    },
    #[error("max duration {} s reached; session stopped", .max.as_secs_f64())]
    DurationReached { max: Duration },
    #[error("max rate {} (asked for {})", format_bits_per_sec(*.max_bps as f64), format_bits_per_sec(*.asked_bps))]
    Rate { max_bps: u64, asked_bps: f64 },
    #[error("{max} burst records per session ({connections} connections of {bursts} bursts)")]
    BurstRecords {
        max: u64,
        connections: u64,
        bursts: u64,
    },
    #[error("max {max} open connections; try again later")]
    OpenConnections { max: u32 },
    #[error("max memory {} in use ({} now); try again later", crate::protocol::units::format_bytes(*.max), crate::protocol::units::format_bytes(*.used))]
    Memory { max: u64, used: u64 },
    /// The tests and connections the server holds fill the memory
    /// account: this one's share would pass it.
    #[error("max memory {} held by tests and connections ({} held, this {what} needs {}); try again later", crate::protocol::units::format_bytes(*.max), crate::protocol::units::format_bytes(*.held), crate::protocol::units::format_bytes(*.asked))]
    MemoryBudget {
        max: u64,
        held: u64,
        asked: u64,
        what: Drawn,
    },
    #[error("max {max} concurrent tests reached; try again later")]
    Tests { max: u32 },
    /// One address holds its share (tests, UDP streams, connections).
    #[error("max {max} {what} per client address ({ip} has {has})")]
    PerClient {
        what: Share,
        max: u32,
        ip: IpAddr,
        has: u32,
    },
    /// One network (IPv4 /24, IPv6 /64) holds four addresses' share.
    #[error("max {max} {what} per client network ({prefix}/{} has {has})", if .prefix.is_ipv4() { 24 } else { 64 })]
    PerPrefix {
        what: Share,
        max: u32,
        prefix: IpAddr,
        has: u32,
    },
}

impl Limit {
    /// The machine-readable code of the limit.
    pub fn code(&self) -> ErrorCode {
        match self {
            Limit::Bytes { .. } | Limit::BytesPerRound { .. } | Limit::BytesReached { .. } => {
                ErrorCode::LimitBytes
            }
            Limit::Duration { .. } | Limit::BurstTrain { .. } | Limit::DurationReached { .. } => {
                ErrorCode::LimitDuration
            }
            Limit::Rate { .. } => ErrorCode::LimitRate,
            Limit::BurstRecords { .. } => ErrorCode::LimitBurstRecords,
            Limit::OpenConnections { .. } => ErrorCode::LimitConnections,
            Limit::Memory { .. } | Limit::MemoryBudget { .. } => ErrorCode::LimitMemory,
            Limit::Tests { .. } => ErrorCode::LimitTests,
            Limit::PerClient { what, .. } => match what {
                Share::Connections => ErrorCode::LimitConnectionsPerClient,
                Share::Tests => ErrorCode::LimitTestsPerClient,
                Share::UdpStreams => ErrorCode::LimitStreamsPerClient,
            },
            Limit::PerPrefix { .. } => ErrorCode::LimitPerNetwork,
        }
    }
}

/// What draws from the server's memory account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drawn {
    /// A test's session, charged when it is admitted.
    Test,
    /// A connection that said who it is: a control connection at its
    /// hello, a data connection when it is admitted.
    Connection,
    /// A test of iperf2's or iperf3's protocol.
    IperfTest,
}

impl std::fmt::Display for Drawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Drawn::Test => "test",
            Drawn::Connection => "connection",
            Drawn::IperfTest => "iperf test",
        })
    }
}

/// What one client address (or network) holds a share of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    Connections,
    Tests,
    UdpStreams,
}

impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Share::Connections => "connections",
            Share::Tests => "concurrent tests",
            Share::UdpStreams => "concurrent UDP streams",
        })
    }
}

impl From<crate::protocol::spec::TcpSpecError> for Invalid {
    fn from(e: crate::protocol::spec::TcpSpecError) -> Self {
        use crate::protocol::spec::TcpSpecError as E;
        match e {
            E::ZeroTransfer => Invalid::ZeroTransfer,
            E::TransferRange => Invalid::TransferRange,
            E::PushPullZero => Invalid::PushPullZero,
            E::BurstPattern => Invalid::BurstPattern,
            E::BurstZero => Invalid::BurstZero,
            E::RateLimit => Invalid::RateLimit,
            E::Sock(e) => Invalid::SockOpt(e),
        }
    }
}

/// A test no server would run as asked: the request itself is wrong.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Invalid {
    #[error("transfer must be greater than zero")]
    ZeroTransfer,
    #[error("pushpull needs non-zero push and pull bytes")]
    PushPullZero,
    #[error("bursts need pattern push or pull")]
    BurstPattern,
    #[error("burst size and period must be positive")]
    BurstZero,
    #[error("rate limit must be positive, with a period of 1 ms to {} s", crate::protocol::spec::MAX_RATE_PERIOD_MS / 1000)]
    RateLimit,
    #[error("transfer range's upper end is below its lower end")]
    TransferRange,
    #[error("omit must be shorter than the stream, and rate profiles take none")]
    Omit,
    #[error("a test has 1 to {max} streams")]
    Streams { max: u32 },
    #[error("{bursts} bursts per connection (transfer / burst size); at most {max}")]
    TooManyBursts { bursts: u64, max: u64 },
    #[error("buffer size {size} outside 1..={max}")]
    Buffer { size: u32, max: u64 },
    #[error("datagram size {size} outside {min}..={max}")]
    DatagramSize { size: u32, min: usize, max: usize },
    #[error("duration {ms} ms outside 1..={max_ms}")]
    Duration { ms: u64, max_ms: u64 },
    #[error("gap between datagrams must be positive")]
    ZeroGap,
    #[error(
        "rate {rate_bps} bit/s does not give the gap of {gap_ps} ps asked for {size}-byte datagrams"
    )]
    RateGap {
        rate_bps: u64,
        gap_ps: u64,
        size: u32,
    },
    #[error("interval and histogram bin width must be positive, and histogram bins 1..={max_bins}")]
    Histogram { max_bins: u32 },
    #[error("media frame rate must be positive and the playout buffer at most {max_buffer_ms} ms")]
    Media { max_buffer_ms: u64 },
    #[error("rate profile: {0}")]
    Profile(#[from] crate::protocol::udp::profile::ProfileError),
    #[error("rate profile: datagram sizes {lo}..={hi} outside {min}..={max}")]
    ProfileSizes {
        lo: u32,
        hi: u32,
        min: usize,
        max: usize,
    },
    #[error("rate profile lasts {} s but the test {} s", .profile.as_secs_f64(), .test.as_secs_f64())]
    ProfileLonger { profile: Duration, test: Duration },
    #[error("authenticated datagrams need a server with a pre-shared key (serve --key)")]
    DatagramAuthWithoutKey,
    #[error("authenticated datagrams need at least {min} bytes")]
    DatagramAuthSize { min: usize },
    #[error("request and reply sizes must be 1..={max} bytes for {proto}")]
    RequestSize { max: u32, proto: &'static str },
    #[error("{0}")]
    SockOpt(#[from] crate::protocol::sockopts::SockOptError),
    #[error("iterations must be greater than zero")]
    ZeroIterations,
    /// TCP_INFO is sampled for every connection once per row: a floor on
    /// the row interval bounds what that costs the server.
    #[error("server status interval {ms} ms is below the server's floor of {min_ms} ms")]
    ServerInterval { ms: u64, min_ms: u64 },
}

/// Why the pre-shared-key exchange failed.
#[derive(Debug, Error)]
pub enum AuthFailure {
    #[error(
        "authentication required: this server needs a pre-shared key (--key FILE or NETRIG_KEY)"
    )]
    Required,
    #[error("authentication failed: wrong key")]
    WrongKey,
    #[error("authentication failed: data connection without a valid proof")]
    DataProof,
    #[error("proof of receipt failed: wrong or missing probe nonce")]
    ProbeNonce,
    #[error("authentication: {0}")]
    Nonce(#[from] crate::protocol::auth::AuthError),
    #[error("authentication: {0}")]
    Read(#[from] ReadError),
    #[error("authentication: {0}")]
    Write(#[from] io::Error),
}

/// A transport this kernel does not offer.
#[derive(Debug, Error)]
#[error(
    "SCTP is not supported by this kernel ({source}); load the sctp module or use --proto tcp|udp"
)]
pub struct Unsupported {
    pub source: io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_reason() {
        let v = Refusal::Version {
            client: 9,
            server: 1,
        };
        assert_eq!(v.code(), ErrorCode::UnsupportedVersion);
        assert_eq!(
            Refusal::UnknownSession(Uuid::nil()).code(),
            ErrorCode::UnknownSession
        );
        assert_eq!(
            Refusal::from(Limit::Tests { max: 3 }).code(),
            ErrorCode::LimitTests
        );
        assert_eq!(
            Refusal::from(ProtoError::Oversized(1)).code(),
            ErrorCode::Malformed
        );
        let unexpected = Refusal::Unexpected {
            got: "stop".into(),
            context: "here",
        };
        assert_eq!(unexpected.code(), ErrorCode::UnexpectedMessage);
        assert_eq!(unexpected.to_string(), "unexpected stop here");
        match Refusal::from(Invalid::ZeroGap).message() {
            Message::Error { code, message } => {
                assert_eq!(code, ErrorCode::Invalid);
                assert_eq!(message, "gap between datagrams must be positive");
            }
            m => panic!("{m:?}"),
        }
    }

    #[test]
    fn limits_name_themselves_and_the_figures() {
        let r = Refusal::from(Limit::Bytes {
            max: 1000,
            asked: 2000,
        });
        assert_eq!(
            r.to_string(),
            "server limit: max bytes per test 1000 (asked for 2000)"
        );
        let train = Limit::BurstTrain {
            max: Duration::from_secs(1),
            bursts: 11,
            period_ms: 101,
        };
        assert_eq!(
            train.to_string(),
            "max duration 1 s (a train of 11 bursts every 101 ms lasts 1.01 s)"
        );
        let d = Limit::Duration {
            max: Duration::from_millis(1500),
            asked: Duration::from_secs(2),
        };
        assert_eq!(d.to_string(), "max duration 1.5 s (asked for 2 s)");
    }
}
