//! What both ends derive from a UDP spec (checks, limits, sender and
//! receiver settings). The server's sessions run on its loops: a stream it
//! receives as `udp::intake` (`server::udp_recv`), one it sends as
//! `udp::outflow` (`server::udp_send`).
//!
//! The server never sends a datagram to an address until the client has
//! shown it receives there (`udp::setup`): the client's handshake datagram
//! (carrying the session token) tells the server where the client is, the
//! server answers with a probe carrying a random nonce, and only when the
//! client echoes that nonce over the authenticated control connection does
//! the stream start.

use std::time::Duration;

use super::receive::ReceiverConfig;
use super::send::SenderConfig;
use crate::protocol::auth::DatagramKey;
use crate::protocol::proto::UdpSpec;
use crate::protocol::refusal::{Invalid, Limit, Refusal};
use crate::protocol::udp::header::{HEADER_LEN, MAX_DATAGRAM};
use crate::protocol::udp::track::ReceiverStats;
use crate::server::limits::Limits;

/// Longest stream a client may ask for.
pub const MAX_DURATION_MS: u64 = 24 * 3600 * 1000;
/// How long the receiver keeps listening after the sender's last datagram.
pub const DRAIN: Duration = Duration::from_millis(500);

/// The stream's rate in bit/s that server limits apply to: the peak of a
/// profile, the average of a burst train.
pub fn rate_bps(s: &UdpSpec) -> f64 {
    if let Some((per_burst, period_ns)) = burst_plan(s) {
        // Bursts leave back to back by design: cap the train's average rate.
        return (per_burst * u64::from(s.size)) as f64 * 8.0 * 1e9 / period_ns.max(1) as f64;
    }
    if let Some(m) = s.media.filter(|m| m.frame_bytes > 0) {
        return m.frame_bytes as f64 * 8.0 * f64::from(m.fps);
    }
    match &s.profile {
        Some(p) => p.max_rate() as f64,
        None => s.steady_rate_bps(),
    }
}

/// Most fixed-width histogram bins a test may ask for (8 bytes each in
/// memory, about 20 on the wire).
pub const MAX_HIST_BINS: u32 = 100_000;
/// Longest media playout buffer, ms.
pub const MAX_BUFFER_DEPTH_MS: u64 = 60_000;

/// Checks a UDP spec against sanity and the server's limits before anything
/// is allocated for it; the error names the problem.
pub fn validate(s: &UdpSpec, limits: Limits) -> Result<(), Refusal> {
    sane(s)?;
    // A group's streams share the limit: each carries the group's size.
    let streams = f64::from(s.group.map_or(1, |g| g.streams.max(1)));
    if rate_bps(s) * streams > limits.max_rate_bps as f64 * 1.000_001 {
        return Err(Limit::Rate {
            max_bps: limits.max_rate_bps,
            asked_bps: rate_bps(s) * streams,
        }
        .into());
    }
    limits.check_duration(s.duration_ms)?;
    let bytes = match &s.profile {
        Some(p) => p.bytes_until(p.duration_ns()),
        None => rate_bps(s) / 8.0 * s.duration_ms as f64 / 1e3,
    };
    Ok(limits.check_bytes(bytes as u64)?)
}

/// What no server would run whatever its limits: the one check the client
/// makes before it asks and the server before it admits.
pub fn sane(s: &UdpSpec) -> Result<(), Invalid> {
    let sizes = HEADER_LEN..=MAX_DATAGRAM;
    if !sizes.contains(&(s.size as usize)) {
        return Err(Invalid::DatagramSize {
            size: s.size,
            min: HEADER_LEN,
            max: MAX_DATAGRAM,
        });
    }
    if s.duration_ms == 0 || s.duration_ms > MAX_DURATION_MS {
        return Err(Invalid::Duration {
            ms: s.duration_ms,
            max_ms: MAX_DURATION_MS,
        });
    }
    if s.gap_ps == 0 {
        return Err(Invalid::ZeroGap);
    }
    // Both ends must read the same schedule from the spec: a rate and a
    // gap that disagree would have the sender go by one and a report by
    // the other.
    if let Some(rate_bps) = s.rate_bps
        && (rate_bps == 0 || crate::protocol::udp::pace::gap_for_rate(s.size, rate_bps) != s.gap_ps)
    {
        return Err(Invalid::RateGap {
            rate_bps,
            gap_ps: s.gap_ps,
            size: s.size,
        });
    }
    if s.interval_ms == 0 || s.hist_bin_ns == 0 || !(1..=MAX_HIST_BINS).contains(&s.hist_bins) {
        return Err(Invalid::Histogram {
            max_bins: MAX_HIST_BINS,
        });
    }
    if s.burst.is_some_and(|b| b.size == 0 || b.period_ms == 0) {
        return Err(Invalid::BurstZero);
    }
    if s.omit_ms > 0 && (s.omit_ms >= s.duration_ms || s.profile.is_some()) {
        return Err(Invalid::Omit);
    }
    if s.group.is_some_and(|g| {
        g.streams == 0 || g.streams > crate::protocol::spec::MAX_STREAMS || g.index >= g.streams
    }) {
        return Err(Invalid::Streams {
            max: crate::protocol::spec::MAX_STREAMS,
        });
    }
    if s.media
        .is_some_and(|m| m.fps == 0 || m.buffer_depth_ms > MAX_BUFFER_DEPTH_MS)
    {
        return Err(Invalid::Media {
            max_buffer_ms: MAX_BUFFER_DEPTH_MS,
        });
    }
    if let Some(p) = &s.profile {
        p.check().map_err(Invalid::Profile)?;
        if !sizes.contains(&(p.min_size() as usize)) || !sizes.contains(&(p.max_size() as usize)) {
            return Err(Invalid::ProfileSizes {
                lo: p.min_size(),
                hi: p.max_size(),
                min: HEADER_LEN,
                max: MAX_DATAGRAM,
            });
        }
        if p.duration_ns() > s.duration_ms.saturating_mul(1_000_000) {
            return Err(Invalid::ProfileLonger {
                profile: Duration::from_nanos(p.duration_ns()),
                test: Duration::from_millis(s.duration_ms),
            });
        }
    }
    s.sock.validate()?;
    if s.auth_datagrams && (s.size as usize) < HEADER_LEN + crate::protocol::auth::TAG_LEN {
        return Err(Invalid::DatagramAuthSize {
            min: HEADER_LEN + crate::protocol::auth::TAG_LEN,
        });
    }
    Ok(())
}

/// Receiver configuration both ends derive from the spec.
pub fn receiver_config(
    s: &UdpSpec,
    offset_ns: i64,
    tag_key: Option<DatagramKey>,
) -> ReceiverConfig {
    ReceiverConfig {
        tag_key: tag_key.filter(|_| s.auth_datagrams),
        stream: 1,
        max_size: s
            .profile
            .as_ref()
            .map_or(s.size, |p| p.max_size().max(s.size)) as usize,
        offset_ns,
        comp_ns: s.offset_comp_ns,
        interval: Duration::from_millis(s.interval_ms),
        media: s.media.map(|m| super::receive::MediaPlan {
            frame_ns: m.frame_ns(),
            depth_ns: m.buffer_depth_ms.saturating_mul(1_000_000),
        }),
        verify: s.verify,
        burst: burst_plan(s),
        offload: !s.sock.no_offload,
    }
}

/// The receiver's accounts for the spec, empty, as both ends start them.
pub fn receiver_stats(s: &UdpSpec) -> ReceiverStats {
    let mut stats = ReceiverStats::new(s.hist_bin_ns, s.hist_bins as usize);
    stats.expect_tos(s.sock.tos.unwrap_or(0));
    stats.omit(s.omit_seq(), s.omit_ms.saturating_mul(1_000_000));
    if let Some(m) = s.media {
        stats.media_frames(m.frame_index(s.size));
    }
    stats
}

/// Sender configuration both ends derive from the spec.
pub fn sender_config(s: &UdpSpec, tag_key: Option<DatagramKey>) -> SenderConfig {
    SenderConfig {
        tag_key: tag_key.filter(|_| s.auth_datagrams),
        size: s.size as usize,
        gap: s.gap(),
        duration: Duration::from_millis(s.duration_ms),
        pacing: s.pacing,
        catch_up: s.catch_up,
        stream: 1,
        profile: s.profile.clone(),
        precompute: s.precompute,
        burst: burst_plan(s),
        frames: s.media.and_then(|m| Some((m.frame_sizes()?, m.fps))),
        interval_ns: s.interval_ms.saturating_mul(1_000_000),
        guard: None,
        offload: !s.sock.no_offload,
    }
}

/// Bursts as (datagrams per burst, period ns), rounding a burst up to whole datagrams.
pub fn burst_plan(s: &UdpSpec) -> Option<(u64, u64)> {
    s.burst.map(|b| {
        (
            b.size.div_ceil(u64::from(s.size.max(1))).max(1),
            b.period_ms.saturating_mul(1_000_000),
        )
    })
}

/// How long the receiver drains after the sender is done.
pub fn drain_for(s: &UdpSpec) -> Duration {
    DRAIN + Duration::from_millis(s.media.map_or(0, |m| m.buffer_depth_ms))
}

/// A stream the server sends (`-R`, the server's half of `--bidir`): made
/// only by [`Outbound::new`], so a stream the server receives
/// (`udp::intake`) cannot reach the sending side (`udp::outflow`).
#[derive(Debug, Clone)]
pub struct Outbound(Box<UdpSpec>);

impl Outbound {
    /// The spec, if the server sends its stream; any other comes back.
    pub fn new(spec: Box<UdpSpec>) -> Result<Outbound, Box<UdpSpec>> {
        match spec.reverse {
            true => Ok(Outbound(spec)),
            false => Err(spec),
        }
    }

    /// The spec of the stream the server sends.
    pub fn spec(&self) -> &UdpSpec {
        &self.0
    }
}

/// Whether the server runs `spec`: within its limits, and with what it
/// needs (a key for tagged datagrams).
pub fn check(spec: &UdpSpec, limits: Limits, tag_key: Option<DatagramKey>) -> Result<(), Refusal> {
    validate(spec, limits)?;
    if spec.auth_datagrams && tag_key.is_none() {
        return Err(Invalid::DatagramAuthWithoutKey.into());
    }
    Ok(())
}

/// How the server's log names a stream.
pub fn label(spec: &UdpSpec) -> String {
    format!(
        "udp {} {} B every {:.3} us for {} ms{}",
        if spec.reverse {
            "server->client"
        } else {
            "client->server"
        },
        spec.size,
        spec.gap_ps as f64 / 1e6,
        spec.duration_ms,
        if spec.media.is_some() { " (media)" } else { "" }
    )
}

#[cfg(test)]
#[path = "serve_tests.rs"]
mod tests;
