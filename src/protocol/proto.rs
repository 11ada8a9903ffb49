//! The netrig wire protocol: framing and messages, free of I/O.
//!
//! Every TCP connection to a netrig server begins with one framed message that
//! says what the connection is for: [`Message::Hello`] opens a *control*
//! connection (one per client session), [`Message::DataHello`] attaches a *data*
//! connection to a session the control connection set up. After the data phase
//! both ends exchange a [`Message::Final`] on the data connection, so each end
//! learns the other's byte counts and verdict.
//!
//! A frame is an 8-byte header — magic `NR`, frame version, reserved byte,
//! payload length (u32, big endian) — followed by a JSON payload. JSON keeps
//! the messages self-describing and extensible (unknown fields are ignored), and
//! costs about a microsecond per message, which is nothing next to a TCP
//! handshake. Decoding is a pure function of the bytes so it can be unit-,
//! property- and fuzz-tested; [`read_message`] is the only function that touches
//! a reader.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use thiserror::Error;
use uuid::Uuid;

pub use crate::protocol::spec::*;

/// Protocol version spoken in [`Hello`]; bump on incompatible message changes.
pub const PROTOCOL_VERSION: u16 = 3;
/// Frame layout version carried in every frame header.
pub const FRAME_VERSION: u8 = 1;
/// The two bytes every frame starts with.
pub const MAGIC: [u8; 2] = *b"NR";
/// Size of the frame header in bytes.
pub const HEADER_LEN: usize = 8;
/// Largest payload accepted; anything bigger is an attack or a bug.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Largest payload a server reads before a connection says who it is (its
/// first frame: a hello, a data hello) and, with a key, before the proof:
/// an unidentified connection holds at most this much of a server's memory
/// (a hello is ~200 bytes). A larger one is refused on its header.
pub const MAX_FIRST_PAYLOAD: usize = 4096;

/// Status rows per [`Message::ServerIntervals`] frame (about 200 bytes each).
pub const SERVER_ROWS_CHUNK: usize = 200;

/// Most status rows a server keeps for one session.
pub const MAX_SERVER_ROWS: usize = 20_000;
/// Shortest `server_interval_ms` a server accepts: rows more often than
/// the clients' own status lines (`-i`, at least 100 ms) are not read,
/// and each row samples the session's connections.
pub const MIN_SERVER_INTERVAL_MS: u64 = 100;
/// Capabilities this build offers in its hello.
pub const CAPABILITIES: &[&str] = &["tcp", "udp", "rr", COMPACT_DATA_HELLO];

/// The capability of a peer that reads a data hello in the fixed layout
/// ([`compact`]). A client learns it from the server's hello, because a
/// data connection's hello is its first word: an older server does not
/// list it (and gets JSON), an older client never writes the layout.
pub const COMPACT_DATA_HELLO: &str = "compact_data_hello";

/// Why bytes could not be decoded as a frame.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
pub enum ProtoError {
    /// The first bytes are not `NR`: this is not netrig, or the stream is out of step.
    #[error("not a netrig frame (bad magic {0:02x?})")]
    BadMagic([u8; 2]),
    /// The frame layout version is not one this build understands.
    #[error("unsupported frame version {0} (this build speaks {FRAME_VERSION})")]
    UnsupportedFrameVersion(u8),
    /// The declared payload is larger than [`MAX_PAYLOAD`].
    #[error("frame payload of {0} bytes exceeds the {MAX_PAYLOAD}-byte limit")]
    Oversized(usize),
    /// The declared payload is larger than a connection may send yet (its
    /// first frame, or any before it proved the key).
    #[error(
        "frame payload of {len} bytes exceeds the {max}-byte limit before the client is admitted"
    )]
    OversizedHere { len: usize, max: usize },
    /// The payload is not a valid message.
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// Why a message could not be read from a stream.
#[derive(Debug, Error)]
pub enum ReadError {
    /// The stream ended cleanly before the first byte of a frame.
    #[error("connection closed by peer")]
    Eof,
    /// The stream ended or failed part-way, or another I/O error.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The bytes arrived but are not a valid frame.
    #[error("{0}")]
    Proto(#[from] ProtoError),
}

/// The first message of a control connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Protocol version the client speaks.
    pub protocol: u16,
    /// Free-form software name and version, for logs.
    pub software: String,
    /// Test kinds the client may request, and what this build reads
    /// ([`COMPACT_DATA_HELLO`]).
    pub capabilities: Vec<String>,
    /// Authentication nonce, hex: the client's in its hello; in the server's
    /// reply, present only when the server requires a pre-shared key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
}

impl Hello {
    /// The peer reads a data hello in the fixed layout.
    pub fn reads_compact_data_hello(&self) -> bool {
        self.capabilities.iter().any(|c| c == COMPACT_DATA_HELLO)
    }
}

/// The first message of a data connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataHello {
    /// Session the connection belongs to (from [`Message::TestAccept`]).
    pub session: Uuid,
    /// The connection's ID, shared by both ends and printed in both logs.
    pub connection: Uuid,
    /// Buffer size both ends use for each send/receive on this connection.
    pub buffer: u32,
    /// With a pre-shared key: [`crate::protocol::auth::data_proof`] of the IDs, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// The client reads the server's `data_ack` and `ok` final report in
    /// their fixed layout ([`compact`]). A server from before it ignores
    /// the field and answers in JSON, as it does a client from before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compact: bool,
}

/// How one end judged its side of a connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Everything expected arrived and verified.
    Ok,
    /// The peer closed before all bytes arrived.
    TooFew {
        /// Bytes expected.
        expected: u64,
        /// Bytes received. Named `got` on the wire: the verdict's fields sit
        /// beside the report's own, and a second `received` made the
        /// report undecodable.
        #[serde(rename = "got")]
        received: u64,
    },
    /// More bytes arrived than the test allows.
    TooMany {
        /// Bytes expected.
        expected: u64,
    },
    /// A received byte did not match the pattern.
    Corrupt {
        /// Offset of the first bad byte within that direction's data stream.
        offset: u64,
    },
    /// The connection failed (OS error text).
    NetworkError {
        /// The error as the OS reported it.
        detail: String,
    },
    /// The test was stopped (time limit, Ctrl-C) before the connection finished.
    Cancelled,
}

/// One end's account of a data connection, exchanged when its data phase
/// ends. On the wire the verdict's fields sit beside the report's own
/// (`final_wire.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "final_wire::FinalWire", try_from = "final_wire::FinalWire")]
pub struct FinalReport {
    /// Payload bytes this end sent.
    pub sent: u64,
    /// Payload bytes this end received.
    pub received: u64,
    /// This end's own judgement.
    pub verdict: Verdict,
    /// This end's TCP_INFO when its data phase ended: the sender's
    /// retransmissions are on the sending end, so a client pulling data
    /// learns them from the server's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_info: Option<TcpInfoSummary>,
}

/// The part of one end's TCP_INFO it reports to the other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpInfoSummary {
    /// Segments retransmitted (tcpi_total_retrans).
    pub retransmits: u32,
    /// Bytes retransmitted (tcpi_bytes_retrans).
    pub bytes_retrans: u64,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// Smallest RTT seen, µs.
    pub min_rtt_us: u32,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Segment size sent, bytes.
    pub snd_mss: u32,
    /// Time limited by the peer's receive window, µs.
    pub rwnd_limited_us: u64,
    /// Time limited by the send buffer, µs.
    pub sndbuf_limited_us: u64,
    /// Time with data in flight, µs.
    pub busy_us: u64,
}

/// Per-session tallies the server reports at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// Data connections attached.
    pub connections: u64,
    /// Connections that ended in agreed success.
    pub success: u64,
    /// Connections that ended in a network error.
    pub network_errors: u64,
    /// Connections that ended in a data error.
    pub data_errors: u64,
    /// Connections cancelled by a stop.
    pub cancelled: u64,
    /// Payload bytes the server sent.
    pub bytes_sent: u64,
    /// Payload bytes the server received (and verified, if asked).
    pub bytes_received: u64,
    /// Request/response tests: requests the server answered.
    #[serde(default)]
    pub requests: u64,
    /// Request/response over UDP: requests that arrived again (counted,
    /// never answered twice).
    #[serde(default)]
    pub duplicates: u64,
    /// Request/response over UDP: requests that arrived behind a later one.
    #[serde(default)]
    pub reordered: u64,
    /// What the kernel granted the server's first data connection, when
    /// the test asked for socket options (`-w`, `-M`, `-C`, `--dscp`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted: Option<crate::protocol::sockopts::Granted>,
    /// The server process's CPU over the session, from its start to this
    /// summary (iperf3's remote CPU utilization). Optional: older servers
    /// do not send it and older clients ignore it, so the protocol version
    /// stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<crate::protocol::cpu::CpuUsage>,
}

impl SessionSummary {
    /// Both tallies together (one server's sessions from several addresses).
    pub fn plus(&self, o: &SessionSummary) -> SessionSummary {
        SessionSummary {
            connections: self.connections + o.connections,
            success: self.success + o.success,
            network_errors: self.network_errors + o.network_errors,
            data_errors: self.data_errors + o.data_errors,
            cancelled: self.cancelled + o.cancelled,
            bytes_sent: self.bytes_sent + o.bytes_sent,
            bytes_received: self.bytes_received + o.bytes_received,
            requests: self.requests + o.requests,
            duplicates: self.duplicates + o.duplicates,
            reordered: self.reordered + o.reordered,
            granted: self.granted.clone().or_else(|| o.granted.clone()),
            // One process served both: the longer window holds the other.
            cpu: match (self.cpu, o.cpu) {
                (Some(a), Some(b)) => Some(if b.wall_us > a.wall_us { b } else { a }),
                (a, b) => a.or(b),
            },
        }
    }
}

/// Machine-readable reason carried by [`Message::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The peer speaks a protocol version we do not.
    UnsupportedVersion,
    /// A frame or message could not be decoded.
    Malformed,
    /// A message arrived that is not valid at this point.
    UnexpectedMessage,
    /// The data connection names a session the server does not know.
    UnknownSession,
    /// The request is valid but the server will not run it (a reason
    /// without a code of its own).
    Refused,
    /// A server limit on bytes (`serve --max-bytes`).
    LimitBytes,
    /// A server limit on time (`serve --max-duration`, a burst train).
    LimitDuration,
    /// A server limit on rate (`serve --max-rate`).
    LimitRate,
    /// A session's burst records.
    LimitBurstRecords,
    /// `serve --max-conns`.
    LimitConnections,
    /// `serve --max-conns-per-client`.
    LimitConnectionsPerClient,
    /// `serve --max-tests`.
    LimitTests,
    /// `serve --max-tests-per-client`.
    LimitTestsPerClient,
    /// UDP streams from one address (half of `serve --max-tests`).
    LimitStreamsPerClient,
    /// One network's share (an IPv4 /24, an IPv6 /64: four addresses').
    LimitPerNetwork,
    /// `serve --max-memory`.
    LimitMemory,
    /// The request asks for something no server runs.
    Invalid,
    /// The pre-shared-key exchange failed or was not attempted.
    Auth,
    /// A data connection from another host than its session's.
    ForeignHost,
    /// A data connection whose number its session has already used.
    ConnectionReused,
    /// The session stopped, or the server is finishing (`--exit-after`).
    Stopped,
    /// The server's kernel lacks what the test asks for (a transport, a
    /// congestion control, a socket option).
    Unsupported,
    /// The server could not set up what the test needs.
    Resource,
    /// The client's UDP handshake datagram never arrived.
    NoHandshake,
    /// A code this build does not know (a newer server's).
    #[serde(other)]
    Other,
}

/// Every message of the protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Client opens a control connection.
    Hello(Hello),
    /// Server accepts the control connection.
    HelloAck(Hello),
    /// Client proves it knows the pre-shared key (see `crate::protocol::auth`).
    Auth {
        /// HMAC proof, hex.
        proof: String,
    },
    /// Server accepted the client's proof and proves it knows the key too.
    AuthOk {
        /// HMAC proof, hex.
        proof: String,
    },
    /// Client asks for a test.
    TestRequest {
        /// The test to run.
        test: TestSpec,
    },
    /// Server accepted the test; data connections attach with this session ID.
    TestAccept {
        /// Session ID for [`DataHello::session`].
        session: Uuid,
    },
    /// Client attaches a data connection.
    DataHello(DataHello),
    /// Server accepted the data connection; the data phase starts.
    DataAck {
        /// Echo of the connection ID.
        connection: Uuid,
    },
    /// One end's account of a data connection.
    Final(FinalReport),
    /// A time-bounded connection's sender has no more data for this
    /// direction: it comes at a chunk boundary, where pattern bytes would
    /// otherwise be (`tcp::machine`).
    DataEnd,
    /// Client asks the server to cancel in-flight connections (time limit, Ctrl-C).
    Stop,
    /// Server has marked the session cancelled.
    StopAck,
    /// Client is done; server answers with its session summary and closes.
    Goodbye,
    /// Server's tallies for the session.
    Summary(SessionSummary),
    /// UDP test accepted: the server's UDP port and the token the client's
    /// handshake datagrams must carry.
    UdpAccept {
        /// Session ID (for logs).
        session: Uuid,
        /// Server's UDP port (same address as the control connection).
        port: u16,
        /// Token for the handshake datagrams.
        token: u64,
    },
    /// SCTP one-to-many request/response accepted: requests go to this port on
    /// the control connection's server address.
    SeqpacketAccept {
        /// Session ID (for the pattern streams).
        session: Uuid,
        /// Server's SCTP port.
        port: u16,
    },
    /// Clock exchange: client's send time.
    TimeRequest {
        /// Client CLOCK_REALTIME at send, ns.
        t1: u64,
    },
    /// Clock exchange reply.
    TimeReply {
        /// Echo of the client's t1.
        t1: u64,
        /// Server receive time, ns.
        t2: u64,
        /// Server send time, ns.
        t3: u64,
    },
    /// Client has started sending handshake datagrams carrying `token`; the
    /// server waits for one, then sends probe datagrams with a nonce back to
    /// the datagram's source.
    UdpHandshake {
        /// The token from [`Message::UdpAccept`].
        token: u64,
    },
    /// Server sent its probe datagrams.
    UdpProbed,
    /// Client proves it received a probe (so it receives at that address) and
    /// gives the clock offset estimate.
    UdpReady {
        /// The nonce from the probe datagram.
        nonce: u64,
        /// Server clock minus client clock, ns (0 when clocks are trusted).
        offset_ns: i64,
    },
    /// Proof accepted: the stream starts.
    UdpGo,
    /// Receiver (server) interval, for the client to print.
    UdpInterval(crate::protocol::udp::track::UdpInterval),
    /// Sender's final report; the receiver drains and finishes.
    UdpDone(crate::protocol::udp::sent::SenderReport),
    /// Receiver (server) totals. A histogram too large for one frame goes
    /// ahead in [`Message::UdpHistogram`] chunks and this one's is empty.
    UdpResult(crate::protocol::udp::track::UdpTotals),
    /// Part of the receiver's delay histogram, in order.
    UdpHistogram {
        /// (lower edge µs, upper edge µs, count), at most
        /// [`HISTOGRAM_CHUNK`] of them.
        bins: Vec<crate::protocol::udp::hist::Bucket>,
    },
    /// Receiver (server) report of one burst.
    UdpBurst(crate::protocol::udp::track::BurstReport),
    /// The server's account of a TCP connection's bursts, sent after the final
    /// reports in chunks; `last` marks the final chunk.
    TcpBursts {
        /// Up to 100 bursts.
        bursts: Vec<TcpBurst>,
        /// No more chunks follow.
        last: bool,
    },
    /// The server's own status rows of a TCP session (`--get-server-output`),
    /// sent in chunks before its summary.
    ServerIntervals {
        /// Up to [`SERVER_ROWS_CHUNK`] rows.
        rows: Vec<crate::protocol::stats::IntervalRow>,
        /// Rows were left out: the session ran past the cap.
        truncated: bool,
    },
    /// Either end reports a problem; the sender closes the connection after it.
    Error {
        /// Machine-readable reason.
        code: ErrorCode,
        /// Human-readable explanation.
        message: String,
    },
}

impl Message {
    /// Builds an [`Message::Error`].
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Message::Error {
            code,
            message: message.into(),
        }
    }

    /// The message's type as it is named on the wire (`test_request`, …).
    pub fn type_name(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_str().map(String::from)))
            .unwrap_or_else(|| "unknown".into())
    }

    /// Our own hello, for either end.
    pub fn hello() -> Hello {
        Hello {
            protocol: PROTOCOL_VERSION,
            software: concat!("netrig ", env!("CARGO_PKG_VERSION")).to_string(),
            capabilities: CAPABILITIES.iter().map(|s| s.to_string()).collect(),
            nonce: None,
        }
    }
}

/// What a peer that answered a hello with something other than a netrig
/// frame probably is, from its first bytes (`None`: no idea).
///
/// iperf3's server reads the client's 37-byte cookie and answers with one
/// state byte: `PARAM_EXCHANGE` (9) or `ACCESS_DENIED` (-1) when busy
/// (iperf3 `src/iperf_api.h`). HTTP and SSH servers open with their names.
pub fn foreign_server(first: &[u8]) -> Option<&'static str> {
    match first {
        [b'H', b'T', ..] | [b'<', ..] => Some("it answered with HTTP"),
        [b'S', b'S', ..] => Some("it looks like an SSH server"),
        [9] | [9, 0, ..] | [0xff] | [0xff, 0, ..] => Some("it looks like an iperf3 server"),
        _ => None,
    }
}

#[path = "frame.rs"]
mod frame;
pub use frame::*;
#[cfg(test)]
use frame::{decode_data_message, encoded_payload_len};

#[path = "final_wire.rs"]
mod final_wire;

#[path = "compact.rs"]
pub mod compact;

#[cfg(test)]
#[path = "proto_tests.rs"]
mod tests;
