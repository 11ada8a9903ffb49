//! What a client asks a server to run: the test specifications carried by
//! `Message::TestRequest` (TCP, UDP, request/response), with their patterns,
//! bursts, media frames and rate profiles. Wire types, free of I/O; `proto`
//! re-exports them.

use serde::{Deserialize, Serialize};

use crate::protocol::names::Named;
use crate::protocol::sockopts::SockOpts;

/// Direction of data flow in a TCP test, as in ctsTraffic's `-pattern`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoPattern {
    /// Client sends, server receives.
    Push,
    /// Server sends, client receives.
    Pull,
    /// Alternating: client pushes `push_bytes`, then pulls `pull_bytes`, repeatedly.
    Pushpull,
    /// Both ends send and receive at the same time, half the transfer each way.
    Duplex,
}

/// How much of the received data is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyLevel {
    /// Byte counts only (ctsTraffic `-verify:connection`).
    Connection,
    /// Byte counts and every byte against the pattern (the default).
    Data,
}

impl Named for IoPattern {
    const NAMES: &'static [(Self, &'static str, &'static str)] = &[
        (IoPattern::Push, "push", "client sends, server receives"),
        (IoPattern::Pull, "pull", "server sends, client receives"),
        (
            IoPattern::Pushpull,
            "pushpull",
            "the client pushes, then pulls, in turns",
        ),
        (IoPattern::Duplex, "duplex", "both ends send at once"),
    ];
}

impl Named for VerifyLevel {
    const NAMES: &'static [(Self, &'static str, &'static str)] = &[
        (VerifyLevel::Connection, "connection", "byte counts only"),
        (VerifyLevel::Data, "data", "byte counts and every byte"),
    ];
}

/// The server-side description of a TCP test session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSpec {
    /// Data flow pattern.
    pub pattern: IoPattern,
    /// Bytes per connection, both directions together.
    pub transfer: u64,
    /// For pushpull: bytes the client sends per turn.
    pub push_bytes: u64,
    /// For pushpull: bytes the server sends per turn.
    pub pull_bytes: u64,
    /// Verification level.
    pub verify: VerifyLevel,
    /// Concurrent connections the client intends to keep (informational; limits use it).
    pub connections: u32,
    /// iperf2-style bursts (push or pull only).
    #[serde(default)]
    pub burst: Option<BurstSpec>,
    /// A time-bounded test (`-t`; push, pull or duplex): once this many ms
    /// have passed since the data phase began (the client's run, the
    /// server session's first data connection), each sending end finishes
    /// the chunk in progress and marks the end of its data
    /// ([`crate::protocol::tcp::machine::chunk_of`]), so every connection still ends
    /// with both ends' counts and verdicts; 0: each connection moves its
    /// transfer or is cancelled.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub time_bound_ms: u64,
    /// Socket and TCP options the server applies to its end of each data
    /// connection (window, MSS, congestion control, marking, pacing).
    #[serde(default, skip_serializing_if = "SockOpts::is_default")]
    pub sock: SockOpts,
    /// Each end's sending rate limit per connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateLimit>,
    /// `--get-server-output`: the server keeps its own status rows every
    /// this many ms and sends them before its summary (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub server_interval_ms: u64,
    /// With a range of transfer sizes (ctsTraffic `-transfer:[lo,hi]`): its
    /// upper end, `transfer` being the lower. Both ends derive each
    /// connection's size from its ID ([`TcpSpec::transfer_of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_max: Option<u64>,
    /// How long the client will run the test (`-t`, warm-up included), ms;
    /// 0: not bounded by time (a transfer count, or until stopped). The
    /// server refuses up front a test longer than its `--max-duration`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duration_ms: u64,
}

impl TcpSpec {
    /// `transfer` bytes per connection in `pattern`, with `push` and `pull`
    /// bytes per turn (pushpull), verified, one connection, and nothing
    /// else set: what the unit tests start from.
    pub fn plain(pattern: IoPattern, transfer: u64, push: u64, pull: u64) -> TcpSpec {
        TcpSpec {
            pattern,
            transfer,
            push_bytes: push,
            pull_bytes: pull,
            verify: VerifyLevel::Data,
            connections: 1,
            burst: None,
            time_bound_ms: 0,
            sock: Default::default(),
            rate: None,
            transfer_max: None,
            server_interval_ms: 0,
            duration_ms: 0,
        }
    }

    /// Bytes connection `id` moves: `transfer`, or with a range a size in
    /// it that both ends compute alike from the ID (random IDs make it
    /// uniform), so no message has to carry it.
    pub fn transfer_of(&self, id: uuid::Uuid) -> u64 {
        match self.transfer_max {
            Some(hi) if hi > self.transfer => {
                let span = u128::from(hi - self.transfer) + 1;
                self.transfer + (id.as_u128() % span) as u64
            }
            _ => self.transfer,
        }
    }

    /// The most any one connection moves.
    pub fn transfer_hi(&self) -> u64 {
        self.transfer_max
            .unwrap_or(self.transfer)
            .max(self.transfer)
    }

    /// What no end could run, whatever its limits: the one check both the
    /// client (before it asks) and the server (before it admits) make.
    pub fn check(&self) -> Result<(), TcpSpecError> {
        use IoPattern::{Pull, Push, Pushpull};
        if self.transfer == 0 {
            return Err(TcpSpecError::ZeroTransfer);
        }
        if self.transfer_max.is_some_and(|hi| hi < self.transfer) {
            return Err(TcpSpecError::TransferRange);
        }
        if self.pattern == Pushpull && (self.push_bytes == 0 || self.pull_bytes == 0) {
            return Err(TcpSpecError::PushPullZero);
        }
        if self.burst.is_some() && !matches!(self.pattern, Push | Pull) {
            return Err(TcpSpecError::BurstPattern);
        }
        if self.burst.is_some_and(|b| b.size == 0 || b.period_ms == 0) {
            return Err(TcpSpecError::BurstZero);
        }
        self.sock.validate()?;
        if self.rate.is_some_and(|r| !r.is_valid()) {
            return Err(TcpSpecError::RateLimit);
        }
        Ok(())
    }
}

/// What is wrong with a TCP spec in itself; each end words it its own way
/// (the client names its flags, the server its refusal codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TcpSpecError {
    #[error("transfer must be greater than zero")]
    ZeroTransfer,
    #[error("transfer range's upper end is below its lower end")]
    TransferRange,
    #[error("pushpull needs non-zero push and pull bytes")]
    PushPullZero,
    #[error("bursts need pattern push or pull")]
    BurstPattern,
    #[error("burst size and period must be positive")]
    BurstZero,
    #[error("rate limit must be positive, with a valid period")]
    RateLimit,
    #[error(transparent)]
    Sock(#[from] crate::protocol::sockopts::SockOptError),
}

/// One TCP burst as one end saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpBurst {
    /// Burst number, from 0.
    pub index: u64,
    /// "send" or "recv": which end's account this is.
    pub side: String,
    /// First byte written or read, s since the data phase began (that end's clock).
    pub start_s: f64,
    /// Last byte written or read, s.
    pub end_s: f64,
    /// Bytes in the burst.
    pub bytes: u64,
    /// write() or read() calls.
    pub calls: u64,
    /// First to last byte, ms (µs resolution).
    pub transfer_ms: f64,
    /// Bytes × 8 over the transfer time, bit/s.
    pub rate_bps: f64,
    /// Transfer time as a share of the period, percent.
    pub duty_pct: f64,
    /// Receiver: read sizes in power-of-two bins (lower edge bytes, count).
    pub read_sizes: Vec<(u64, u64)>,
    /// Sender: failed writes.
    pub errors: u64,
    /// Sender: TCP_INFO total retransmits after the burst.
    pub retransmits: Option<u32>,
    /// Sender: TCP_INFO congestion window (segments) after the burst.
    pub cwnd: Option<u32>,
    /// Sender: TCP_INFO smoothed RTT, µs, after the burst.
    pub rtt_us: Option<u32>,
    /// First byte, CLOCK_REALTIME ns (for end-to-end trip times with synchronised clocks).
    #[serde(default)]
    pub start_rt_ns: u64,
    /// Last byte, CLOCK_REALTIME ns.
    #[serde(default)]
    pub end_rt_ns: u64,
}

/// Media-stream parameters (ctsTraffic's UDP media stream).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaSpec {
    /// Frames per second.
    pub fps: u32,
    /// Playout buffer: a frame later than its slot plus this is late, ms.
    pub buffer_depth_ms: u64,
    /// Bytes per frame, sent as datagrams of the stream's size (the last
    /// one shorter) and reassembled (ctsTraffic -DatagramByteSize); 0: one
    /// datagram of the stream's size per frame.
    #[serde(default)]
    pub frame_bytes: u64,
    /// iperf2 `--isochronous`: frame sizes vary around `frame_bytes` (the
    /// mean), log-normally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub varying: Option<crate::protocol::udp::iso::Varying>,
}

impl MediaSpec {
    /// Datagrams per frame, for datagrams of `size` bytes (the mean
    /// frame's, when sizes vary).
    pub fn datagrams_per_frame(&self, size: u32) -> u64 {
        match self.frame_bytes {
            0 => 1,
            f => f.div_ceil(u64::from(size.max(1))).max(1),
        }
    }

    /// Each frame's size, when frames are split into datagrams (none: one
    /// datagram of the stream's size per frame).
    pub fn frame_sizes(&self) -> Option<crate::protocol::udp::iso::FrameBytes> {
        use crate::protocol::udp::iso::FrameBytes;
        match (self.frame_bytes, self.varying) {
            (0, _) => None,
            (mean, Some(spread)) => Some(FrameBytes::Varying { mean, spread }),
            (b, None) => Some(FrameBytes::Fixed(b)),
        }
    }

    /// Which frame each datagram of `size` bytes belongs to.
    pub fn frame_index(&self, size: u32) -> crate::protocol::udp::iso::FrameIndex {
        match self.frame_sizes() {
            Some(b) => crate::protocol::udp::iso::FrameIndex::new(b, size),
            None => crate::protocol::udp::iso::FrameIndex::fixed(1),
        }
    }

    /// Nanoseconds between frames.
    pub fn frame_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.fps.max(1))
    }
}

/// iperf2-style bursts: `size` bytes every `period_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BurstSpec {
    /// Bytes per burst (rounded up to whole datagrams for UDP).
    pub size: u64,
    /// Time from one burst's start to the next's, ms.
    pub period_ms: u64,
}

/// A sending rate limit per connection (iperf3 `-b` for TCP, ctsTraffic
/// `-RateLimit` with `-RateLimitPeriod`): at most `bps` × `period_ms` worth
/// of bytes in each period from the connection's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    /// Bits per second.
    pub bps: u64,
    /// The granularity the rate is enforced at, ms.
    pub period_ms: u64,
    /// With a range of rates (ctsTraffic `-RateLimit:[low,high]`): its
    /// upper end, `bps` being the lower; each connection takes one rate in
    /// it ([`RateLimit::for_connection`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bps_max: Option<u64>,
}

/// The longest `-RateLimitPeriod` (a minute).
pub const MAX_RATE_PERIOD_MS: u64 = 60_000;

impl RateLimit {
    /// Bytes each period allows (at least one).
    pub fn bytes_per_period(&self) -> u64 {
        let b = u128::from(self.bps) * u128::from(self.period_ms) / 8_000;
        u64::try_from(b).unwrap_or(u64::MAX).max(1)
    }

    /// Whether a server can run it: a positive rate (a range not upside
    /// down) and a period of 1 ms to a minute.
    pub fn is_valid(&self) -> bool {
        self.bps > 0
            && self.bps_max.is_none_or(|hi| hi >= self.bps)
            && (1..=MAX_RATE_PERIOD_MS).contains(&self.period_ms)
    }

    /// The limit connection `id` runs at: with a range, a rate in it that
    /// both ends compute alike from the ID's upper half. The size
    /// ([`TcpSpec::transfer_of`]) takes the whole ID, so the two are not
    /// tied: a connection may be large and slow.
    pub fn for_connection(&self, id: uuid::Uuid) -> RateLimit {
        let bps = match self.bps_max {
            Some(hi) if hi > self.bps => {
                let span = u128::from(hi - self.bps) + 1;
                self.bps + ((id.as_u128() >> 64) % span) as u64
            }
            _ => self.bps,
        };
        RateLimit {
            bps,
            bps_max: None,
            ..*self
        }
    }
}

/// The server-side description of a UDP stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpSpec {
    /// Server sends to client (otherwise client to server).
    pub reverse: bool,
    /// Datagram size (UDP payload, netrig header included).
    pub size: u32,
    /// Gap between datagrams, picoseconds (rounded down when `rate_bps`
    /// gives the stream's rate: the rate is then what both ends go by).
    pub gap_ps: u64,
    /// The rate asked for, bit/s, when the stream was asked for by rate
    /// (`-b`): the sender's schedule is the exact fraction
    /// `size × 8 / rate`, not a sum of rounded gaps. Absent with `--gap`,
    /// frames, bursts and profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bps: Option<u64>,
    /// How long to send, ms.
    pub duration_ms: u64,
    /// Sender pacing mode.
    pub pacing: crate::protocol::udp::pace::Pacing,
    /// Burst to catch up after stalls.
    pub catch_up: bool,
    /// Verify every payload.
    pub verify: bool,
    /// Receiver status interval, ms.
    pub interval_ms: u64,
    /// Fixed histogram bin width, ns.
    pub hist_bin_ns: u64,
    /// Fixed histogram bin count.
    pub hist_bins: u32,
    /// Known delay compensation added to every one-way delay, ns.
    pub offset_comp_ns: i64,
    /// Media-stream mode.
    pub media: Option<MediaSpec>,
    /// Time-varying rate and size (FlowPing scenario); overrides size/gap.
    #[serde(default)]
    pub profile: Option<crate::protocol::udp::profile::Profile>,
    /// Compute the profile's schedule before the stream starts.
    #[serde(default)]
    pub precompute: bool,
    /// Send in bursts instead of a steady stream; datagrams within a burst are
    /// `gap_ps` apart (a tiny gap means back to back).
    #[serde(default)]
    pub burst: Option<BurstSpec>,
    /// End every datagram with an HMAC tag under the session's key (needs a
    /// server and client with a pre-shared key); untagged or altered
    /// datagrams are counted corrupt and never as received.
    #[serde(default)]
    pub auth_datagrams: bool,
    /// Options for both ends' data sockets (window, marking, don't
    /// fragment, pacing cap); the receiver compares the marking it sees
    /// with `sock.tos`.
    #[serde(default)]
    pub sock: crate::protocol::sockopts::SockOpts,
    /// `--omit`: the first this many ms of the sender's schedule are a
    /// warm-up, shown in the intervals and left out of every total.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omit_ms: u64,
    /// One of several streams of one test (`-P`, `--bidir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<StreamGroup>,
}

/// Where a stream stands in its test's group of streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamGroup {
    /// The test's ID, the same for every stream.
    pub id: uuid::Uuid,
    /// Streams in the test.
    pub streams: u32,
    /// This stream's place, from 0 (which opens the group).
    pub index: u32,
}

/// Most streams one UDP test may have.
pub const MAX_STREAMS: u32 = 128;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl UdpSpec {
    /// A steady, verified stream client to server: `size`-byte datagrams
    /// `gap_ps` apart for `duration_ms`, sleep-paced, 100 ms intervals, a
    /// delay histogram of 100 bins of 50 µs, and nothing else set; the
    /// CLI and the tests change what they need from here.
    pub fn steady(size: u32, gap_ps: u64, duration_ms: u64) -> UdpSpec {
        UdpSpec {
            reverse: false,
            size,
            gap_ps,
            rate_bps: None,
            duration_ms,
            pacing: crate::protocol::udp::pace::Pacing::Sleep,
            catch_up: false,
            verify: true,
            interval_ms: 100,
            hist_bin_ns: 50_000,
            hist_bins: 100,
            offset_comp_ns: 0,
            media: None,
            profile: None,
            precompute: false,
            burst: None,
            auth_datagrams: false,
            sock: crate::protocol::sockopts::SockOpts::default(),
            omit_ms: 0,
            group: None,
        }
    }

    /// A steady stream of `size`-byte datagrams at `rate_bps` bit/s: its
    /// gap is the exact fraction of the rate (a zero rate: no rate, and
    /// [`gap_for_rate`](crate::protocol::udp::pace::gap_for_rate)'s "never").
    pub fn at_rate(size: u32, rate_bps: u64, duration_ms: u64) -> UdpSpec {
        UdpSpec {
            rate_bps: Some(rate_bps).filter(|r| *r > 0),
            ..UdpSpec::steady(
                size,
                crate::protocol::udp::pace::gap_for_rate(size, rate_bps),
                duration_ms,
            )
        }
    }

    /// The time between departures the sender keeps: the rate's exact
    /// fraction when the stream was asked for by rate, else `gap_ps`.
    pub fn gap(&self) -> crate::protocol::udp::pace::Gap {
        use crate::protocol::udp::pace::Gap;
        match self.rate_bps {
            Some(r) if r > 0 => Gap::for_rate(self.size, r),
            _ => Gap::from_ps(self.gap_ps),
        }
    }

    /// The steady rate, bit/s: the rate asked for, or the gap's.
    pub fn steady_rate_bps(&self) -> f64 {
        match self.rate_bps {
            Some(r) if r > 0 => r as f64,
            _ => f64::from(self.size) * 8.0 * 1e12 / self.gap_ps.max(1) as f64,
        }
    }

    /// The first sequence number past the `--omit` warm-up: how many
    /// datagrams the schedule sends in its first `omit_ms` (whole bursts
    /// begun in it, with bursts). Rate profiles have no fixed schedule
    /// here and are refused an omit.
    pub fn omit_seq(&self) -> u64 {
        if self.omit_ms == 0 {
            return 0;
        }
        let omit_ns = u128::from(self.omit_ms) * 1_000_000;
        let n = match self.burst {
            _ if self.media.is_some_and(|m| m.frame_bytes > 0) => {
                let m = self.media.unwrap_or_default();
                let frames = omit_ns.div_ceil(u128::from(m.frame_ns().max(1)));
                let frames = u64::try_from(frames).unwrap_or(u64::MAX);
                u128::from(m.frame_index(self.size).start_of(frames))
            }
            Some(b) => {
                let per = b.size.div_ceil(u64::from(self.size.max(1))).max(1);
                let period_ns = u128::from(b.period_ms.max(1)) * 1_000_000;
                omit_ns.div_ceil(period_ns) * u128::from(per)
            }
            None => u128::from(
                self.gap()
                    .count_before(omit_ns.try_into().unwrap_or(u64::MAX)),
            ),
        };
        u64::try_from(n).unwrap_or(u64::MAX)
    }
}

/// Transport of a request/response test (SCTP is checked on the client and
/// never reaches a server that cannot run it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RrProto {
    /// Over the control connection itself.
    Tcp,
    /// Datagrams, after the UDP proof of receipt.
    Udp,
    /// Messages on an SCTP one-to-many (SOCK_SEQPACKET) association to the
    /// port in [`Message::SeqpacketAccept`](crate::protocol::proto::Message::SeqpacketAccept); the control connection stays TCP.
    #[serde(rename = "sctp-seqpacket")]
    SctpSeqpacket,
}

impl RrProto {
    /// The name on the wire and in messages.
    pub fn name(self) -> &'static str {
        match self {
            RrProto::Tcp => "tcp",
            RrProto::Udp => "udp",
            RrProto::SctpSeqpacket => "sctp-seqpacket",
        }
    }
}

/// The server-side description of a request/response test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RrSpec {
    /// Transport.
    pub proto: RrProto,
    /// Request payload bytes.
    pub size: u32,
    /// Reply payload bytes.
    pub reply: u32,
    /// Requests the server answers at most (warm-up included).
    pub iterations: u64,
    /// Enable Nagle (off by default, as in ACE).
    pub nagle: bool,
    /// Run until the client stops (an unbounded `ping`): `iterations` is then
    /// no bound, and the server answers as many requests as its `--max-bytes`
    /// allows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub until_stopped: bool,
    /// IP-level options for both ends' sockets (window, marking, don't
    /// fragment, pacing cap).
    #[serde(
        default,
        skip_serializing_if = "crate::protocol::sockopts::SockOpts::is_default"
    )]
    pub sock: crate::protocol::sockopts::SockOpts,
    /// How long the client will run the test, ms, when it knows (a
    /// duration, or requests on a schedule: the last one's departure); 0:
    /// not known (back to back, or until stopped). The server refuses up
    /// front a test longer than its `--max-duration`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duration_ms: u64,
}

impl RrSpec {
    /// `iterations` requests of `size` bytes answered with `reply` bytes
    /// over `proto`, back to back, Nagle off, and nothing else set: what the
    /// tests start from.
    pub fn plain(proto: RrProto, size: u32, reply: u32, iterations: u64) -> RrSpec {
        RrSpec {
            proto,
            size,
            reply,
            iterations,
            nagle: false,
            until_stopped: false,
            sock: Default::default(),
            duration_ms: 0,
        }
    }
}

/// A test's length as a request carries it (`duration_ms`): whole ms,
/// rounded up so that no fraction slips past a server's limit, and never
/// 0, which says "not bounded by time".
pub fn duration_ms(t: std::time::Duration) -> u64 {
    u64::try_from(t.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// How long `total` requests `interval` apart run, as a request carries it:
/// until the last one leaves, `interval` × (`total` − 1), as a train of
/// bursts is counted; 0 (not known) for requests back to back.
pub fn schedule_ms(interval: Option<std::time::Duration>, total: u64) -> u64 {
    let Some(i) = interval else { return 0 };
    let ns = i
        .as_nanos()
        .saturating_mul(u128::from(total.saturating_sub(1)));
    u64::try_from(ns.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// What a client asks the server to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TestSpec {
    /// A TCP goodput/reliability test.
    Tcp(TcpSpec),
    /// A paced UDP stream.
    Udp(UdpSpec),
    /// Request/response latency.
    Rr(RrSpec),
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
