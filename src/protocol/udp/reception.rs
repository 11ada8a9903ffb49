//! What a UDP stream's receiver does with each datagram and each interval,
//! free of I/O: the one core both the client's receiving thread
//! (`udp::receive`) and the server's loop-side session (`udp::intake`)
//! feed, so the two ends count loss, duplicates, reordering, delay, late
//! frames and bursts the same way.

use serde::Serialize;
use std::time::Duration;

use super::header::{FLAG_HANDSHAKE, HEADER_LEN, Header, verify_payload};
use super::track::{Arrival, BurstReport, BurstTracker, ReceiverStats, UdpInterval};

/// One received datagram, for the jitter (per-datagram) file.
#[derive(Debug, Clone, Serialize)]
pub struct PacketRow {
    /// Sequence number.
    pub seq: u64,
    /// Sender's timestamp, ns (sender's clock).
    pub send_ns: u64,
    /// Receiver's timestamp, ns (receiver's clock).
    pub recv_ns: u64,
    /// Estimated time in flight, µs (after clock correction).
    pub flight_us: f64,
    /// What the arrival was: new, reordered, duplicate.
    pub arrival: &'static str,
    /// Payload failed verification.
    pub corrupt: bool,
}

/// Where a receiver's output goes.
pub trait ReceiverSink {
    /// An interval ended.
    fn interval(&mut self, iv: UdpInterval);
    /// A datagram arrived (for the per-datagram file).
    fn packet(&mut self, _row: &PacketRow) {}
    /// A burst ended.
    fn burst(&mut self, _b: BurstReport) {}
}

/// What the receiver needs.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Only datagrams of this stream count.
    pub stream: u32,
    /// Largest datagram expected.
    pub max_size: usize,
    /// Subtracted from receive−send to get one-way delay (receiver clock − sender clock), ns.
    pub offset_ns: i64,
    /// Added to every delay (known compensation), ns.
    pub comp_ns: i64,
    /// Status interval.
    pub interval: Duration,
    /// Media mode: frames later than their playout deadline count as late.
    pub media: Option<MediaPlan>,
    /// Verify payloads.
    pub verify: bool,
    /// Bursts: (datagrams per burst, period ns).
    pub burst: Option<(u64, u64)>,
    /// Accept only datagrams tagged with this session key.
    pub tag_key: Option<crate::protocol::auth::DatagramKey>,
    /// Take coalesced buffers (`UDP_GRO`) where the kernel offers them,
    /// split back into their datagrams before anything counts them.
    pub offload: bool,
}

impl ReceiverConfig {
    /// Bytes a receive buffer slot needs: one more than the largest
    /// datagram expected, so that a longer one shows as longer.
    pub fn slot(&self) -> usize {
        self.max_size.max(HEADER_LEN) + 1
    }
}

/// A media stream's timing and shape, for playout deadlines and frames.
#[derive(Debug, Clone, Copy)]
pub struct MediaPlan {
    /// Time between frames, ns.
    pub frame_ns: u64,
    /// Playout buffer, ns.
    pub depth_ns: u64,
}

/// One stream's receiving end: its accounts, its next interval, its burst
/// in progress and its media deadlines.
pub struct Reception {
    cfg: ReceiverConfig,
    stats: ReceiverStats,
    next_tick: Duration,
    media_first: Option<(u64, i64)>,
    bursts: Option<BurstTracker>,
    late_count: u64,
}

impl Reception {
    /// Receiving starts (time zero of the intervals).
    pub fn new(cfg: ReceiverConfig, stats: ReceiverStats) -> Reception {
        let bursts = cfg
            .burst
            .map(|(n, period)| BurstTracker::new(n, period as f64 / 1e9));
        Reception {
            next_tick: cfg.interval,
            cfg,
            stats,
            media_first: None,
            bursts,
            late_count: 0,
        }
    }

    /// When the next interval ends, after time zero.
    pub fn next_tick(&self) -> Duration {
        self.next_tick
    }

    /// It is `el` after time zero: the intervals that ended by then.
    pub fn on_time(&mut self, el: Duration, sink: &mut dyn ReceiverSink) {
        while el >= self.next_tick {
            let mut iv = self.stats.take_interval(self.next_tick.as_secs_f64());
            iv.late = std::mem::take(&mut self.late_count);
            sink.interval(iv);
            self.next_tick += self.cfg.interval;
        }
    }

    /// Datagram `d` (as received, up to [`ReceiverConfig::slot`] bytes)
    /// arrived at `recv_ns` (the receiver's CLOCK_REALTIME), `mono_ns`
    /// after time zero (signed: a kernel stamp may be from just before it),
    /// with TOS byte `tos` where the kernel told it.
    pub fn on_datagram(
        &mut self,
        d: &[u8],
        recv_ns: u64,
        mono_ns: i64,
        tos: Option<u8>,
        sink: &mut dyn ReceiverSink,
    ) {
        let len = d.len();
        let Ok(h) = Header::read(d) else {
            self.stats.on_invalid(len);
            return;
        };
        let cfg = &self.cfg;
        if h.stream != cfg.stream || h.flags & FLAG_HANDSHAKE != 0 {
            return;
        }
        let mut payload = &d[HEADER_LEN..];
        if let Some(k) = &cfg.tag_key {
            // Nothing of an unauthenticated datagram is trusted, not even its sequence.
            if !crate::protocol::auth::datagram_is_authentic(k, d) {
                self.stats.on_invalid(len);
                return;
            }
            payload = &payload[..payload.len().saturating_sub(crate::protocol::auth::TAG_LEN)];
        }
        let stats = &mut self.stats;
        if let Some(tos) = tos {
            stats.on_tos(h.seq, tos);
        }
        let corrupt = cfg.verify && verify_payload(h.stream, h.seq, payload).is_err();
        let transit = recv_ns as i64 - h.send_ns as i64;
        let delay = transit - cfg.offset_ns + cfg.comp_ns;
        let arrival = stats.on_datagram(h.seq, len, delay, transit, corrupt);
        if let Some(m) = cfg.media {
            // A frame's deadline: its slot after the first frame seen,
            // plus the playout buffer.
            let frame = stats.frame_of(h.seq).unwrap_or(h.seq);
            let (f0, t0) = *self.media_first.get_or_insert((frame, mono_ns));
            let slot = frame.saturating_sub(f0).saturating_mul(m.frame_ns);
            let deadline = t0.saturating_add(slot.saturating_add(m.depth_ns) as i64);
            let late = arrival != Arrival::Duplicate && mono_ns > deadline;
            if late {
                self.late_count += 1;
                stats.on_late(h.seq);
            }
            stats.on_frame(h.seq, arrival, corrupt, late);
        }
        if let (Some(b), false) = (self.bursts.as_mut(), arrival == Arrival::Duplicate)
            && let Some(done) = b.on_datagram(h.seq, len, mono_ns as f64 / 1e9, h.send_ns, recv_ns)
        {
            sink.burst(done);
        }
        sink.packet(&PacketRow {
            seq: h.seq,
            send_ns: h.send_ns,
            recv_ns,
            flight_us: delay as f64 / 1e3,
            arrival: match arrival {
                Arrival::New { .. } => "new",
                Arrival::Reordered => "reordered",
                Arrival::Duplicate => "duplicate",
            },
            corrupt,
        });
    }

    /// Receiving ends `el` after time zero: the burst in progress and the
    /// last (partial) interval.
    pub fn finish(&mut self, el: Duration, sink: &mut dyn ReceiverSink) {
        if let Some(b) = self.bursts.as_mut().and_then(BurstTracker::finish) {
            sink.burst(b);
        }
        let mut iv = self.stats.take_interval(el.as_secs_f64());
        iv.late = self.late_count;
        sink.interval(iv);
    }

    /// The accounts so far.
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }

    /// The accounts, receiving over.
    pub fn into_stats(self) -> ReceiverStats {
        self.stats
    }
}

#[cfg(test)]
#[path = "reception_tests.rs"]
mod tests;
