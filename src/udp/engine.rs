//! The UDP sender and receiver loops: the only code here that touches sockets.
//!
//! Both batch system calls (`sendmmsg`/`recvmmsg`) when several datagrams are
//! due or waiting, which is what lets a 2-core machine pace hundreds of
//! thousands of datagrams per second.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use super::clock::realtime_ns;
use super::header::{FLAG_HANDSHAKE, HEADER_LEN, Header, fill_payload, verify_payload};
use super::pace::{Pacing, Schedule};
use super::track::{Arrival, ReceiverStats, UdpInterval};

/// Most datagrams per system call.
pub const BATCH: usize = 64;

/// What the sender did, reported to the receiving side at the end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderReport {
    /// Datagrams handed to the kernel.
    pub packets: u64,
    /// Bytes handed to the kernel (UDP payload).
    pub bytes: u64,
    /// Seconds from first to last send.
    pub duration_secs: f64,
    /// bytes × 8 / duration.
    pub achieved_bps: f64,
    /// Departure lateness versus the schedule, µs: p50.
    pub late_p50_us: f64,
    /// Departure lateness p99, µs.
    pub late_p99_us: f64,
    /// Departure lateness max, µs.
    pub late_max_us: f64,
    /// Mean |actual inter-departure − scheduled gap|, µs.
    pub gap_error_mean_us: f64,
    /// Times the schedule was re-anchored after a stall.
    pub slips: u64,
    /// Send calls that failed (e.g. ENOBUFS, ICMP-refused); the datagrams count as not sent.
    pub send_errors: u64,
    /// Bytes the schedule asked for up to when sending stopped.
    #[serde(default)]
    pub asked_bytes: u64,
    /// The schedule's rate over the same time, bit/s.
    #[serde(default)]
    pub asked_bps: f64,
    /// Less than 99% of the asked bytes left this sender: it could not keep
    /// up, and the path was never offered the asked rate.
    #[serde(default)]
    pub sender_limited: bool,
    /// Bytes sent in each interval of `interval_ms` from the first
    /// departure's schedule origin (empty when not kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sent_intervals: Vec<u64>,
    /// The length of those intervals, ms.
    #[serde(default)]
    pub interval_ms: u64,
}

/// Share of the asked bytes below which a sender counts as limited.
pub const SENDER_LIMITED_BELOW: f64 = 0.99;

/// What the sender needs.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Datagram size (UDP payload), header included.
    pub size: usize,
    /// Gap between datagrams, ps.
    pub gap_ps: u64,
    /// How long to send.
    pub duration: Duration,
    /// How to wait.
    pub pacing: Pacing,
    /// Burst to catch up after stalls.
    pub catch_up: bool,
    /// Stream ID stamped in every datagram.
    pub stream: u32,
    /// Time-varying rate and size instead of `size`/`gap_ps`.
    pub profile: Option<super::profile::Profile>,
    /// Compute the profile's whole schedule before the first send.
    pub precompute: bool,
    /// Bursts: (datagrams per burst, period ns); datagrams within a burst are `gap_ps` apart.
    pub burst: Option<(u64, u64)>,
    /// Tag every datagram with this session key.
    pub tag_key: Option<crate::auth::DatagramKey>,
    /// Count the bytes sent in each interval this long (0: none), for
    /// comparing what was offered with what arrived.
    pub interval_ns: u64,
    /// The server's limits on what this sender sends (none on a client).
    pub guard: Option<std::sync::Arc<crate::guard::SendGuard>>,
}

/// Most per-interval counts a sender reports (they travel in one control
/// frame); a longer series is dropped rather than cut.
pub const MAX_SENT_INTERVALS: usize = 4096;

/// Longest single sleep before a departure, ns.
const SLICE_NS: u64 = 100_000_000;

/// Most departures `precompute` holds in memory (16 bytes each); longer
/// profiles are scheduled on the fly instead.
pub const MAX_PRECOMPUTED: usize = 1_000_000;

/// Where departures come from: a fixed-gap schedule or a rate profile.
enum Plan {
    Fixed {
        sched: Schedule,
        size: usize,
    },
    Profile {
        deps: Box<dyn Iterator<Item = (u64, u32)> + Send>,
        next: Option<(u64, u32)>,
        catch_up: bool,
        slips: u64,
    },
}

impl Plan {
    fn new(cfg: &SenderConfig) -> Plan {
        if let Some((per_burst, period_ns)) = cfg.burst {
            let end = cfg.duration.as_nanos() as u64;
            let size = cfg.size.max(HEADER_LEN) as u32;
            let mut deps: Box<dyn Iterator<Item = (u64, u32)> + Send> =
                Box::new(super::profile::burst_departures(
                    size,
                    per_burst,
                    period_ns,
                    cfg.gap_ps / 1000,
                    end,
                ));
            let next = deps.next();
            // A burst's datagrams are due together: send them all, never skip.
            return Plan::Profile {
                deps,
                next,
                catch_up: true,
                slips: 0,
            };
        }
        match &cfg.profile {
            None => Plan::Fixed {
                sched: Schedule::new(0, cfg.gap_ps, cfg.catch_up),
                size: cfg.size.max(HEADER_LEN),
            },
            Some(p) => {
                let mut deps: Box<dyn Iterator<Item = (u64, u32)> + Send> = if cfg.precompute {
                    // FlowPing's precomputed mode: no schedule arithmetic while sending.
                    let all: Vec<_> = p.departures().take(MAX_PRECOMPUTED + 1).collect();
                    if all.len() <= MAX_PRECOMPUTED {
                        Box::new(all.into_iter())
                    } else {
                        Box::new(p.departures())
                    }
                } else {
                    Box::new(p.departures())
                };
                let next = deps.next();
                Plan::Profile {
                    deps,
                    next,
                    catch_up: cfg.catch_up,
                    slips: 0,
                }
            }
        }
    }

    fn next_due(&self) -> u64 {
        match self {
            Plan::Fixed { sched, .. } => sched.next_due(),
            Plan::Profile { next, .. } => next.map_or(u64::MAX, |n| n.0),
        }
    }

    /// Fills `out` with the (due, size) of the datagrams due at `now`, at most `max`.
    fn take_due(&mut self, now: u64, max: usize, out: &mut Vec<(u64, usize)>) {
        out.clear();
        match self {
            Plan::Fixed { sched, size } => {
                let (first, n) = sched.take_due(now, max as u64);
                out.extend((first..first + n).map(|i| (sched.due_of(i), *size)));
            }
            Plan::Profile {
                deps,
                next,
                catch_up,
                slips,
            } => {
                // After a stall, skip what is long overdue rather than burst it.
                let mut skipped = false;
                while let Some((t, _)) = *next {
                    if *catch_up || t + super::pace::STALL_NS > now {
                        break;
                    }
                    skipped = true;
                    *next = deps.next();
                }
                *slips += u64::from(skipped);
                while let Some((t, sz)) = *next {
                    if t > now || out.len() >= max {
                        break;
                    }
                    out.push((t, (sz as usize).max(HEADER_LEN)));
                    *next = deps.next();
                }
            }
        }
    }

    /// Bytes this plan asks for before `t_ns` on its original schedule
    /// (stalls re-anchor the live schedule; this one does not move).
    fn asked_bytes(&self, cfg: &SenderConfig, t_ns: u64) -> u64 {
        if let Some((per_burst, period_ns)) = cfg.burst {
            let size = cfg.size.max(HEADER_LEN) as u32;
            return super::profile::burst_departures(
                size,
                per_burst,
                period_ns,
                cfg.gap_ps / 1000,
                t_ns,
            )
            .map(|(_, s)| u64::from(s))
            .sum();
        }
        match (self, &cfg.profile) {
            (_, Some(p)) => p.bytes_until(t_ns).round() as u64,
            (Plan::Fixed { size, .. }, None) => {
                let due = (u128::from(t_ns) * 1000).div_ceil(u128::from(cfg.gap_ps.max(1)));
                (due as u64).saturating_mul(*size as u64)
            }
            (Plan::Profile { .. }, None) => 0,
        }
    }

    fn slips(&self) -> u64 {
        match self {
            Plan::Fixed { sched, .. } => sched.slips(),
            Plan::Profile { slips, .. } => *slips,
        }
    }
}

fn wait_until(start: Instant, due_ns: u64, pacing: Pacing) {
    let now = start.elapsed().as_nanos() as u64;
    if due_ns <= now {
        return;
    }
    let left = due_ns - now;
    match pacing {
        Pacing::Sleep => std::thread::sleep(Duration::from_nanos(left)),
        Pacing::Hybrid if left > 150_000 => {
            std::thread::sleep(Duration::from_nanos(left - 100_000))
        }
        Pacing::Hybrid | Pacing::Spin => {
            while (start.elapsed().as_nanos() as u64) < due_ns {
                std::hint::spin_loop();
            }
        }
    }
}

/// Message headers for `sendmmsg`/`recvmmsg`, one per `size`-byte slot of a
/// buffer. `msgs` point into `iov`'s heap storage, which never moves while
/// both live in this struct.
struct Mmsg {
    /// Only its lengths may change: `msgs` point at these entries.
    _iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Mmsg {
    fn new(buf: &mut [u8], size: usize, n: usize) -> Mmsg {
        let mut iov: Vec<libc::iovec> = buf
            .chunks_exact_mut(size)
            .take(n)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: size,
            })
            .collect();
        let msgs = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: mmsghdr is a plain C struct for which all-zero is a valid value.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        Mmsg { _iov: iov, msgs }
    }
}

/// Sends one datagram per `stride`-byte slot of `buf`, of the lengths in `lens`.
fn send_batch(
    sock: &UdpSocket,
    buf: &mut [u8],
    stride: usize,
    lens: &[usize],
) -> io::Result<usize> {
    if lens.len() == 1 {
        return sock.send(&buf[..lens[0]]).map(|_| 1);
    }
    let mut m = Mmsg::new(buf, stride, lens.len());
    for (v, &len) in m._iov.iter_mut().zip(lens) {
        v.iov_len = len.min(stride);
    }
    // SAFETY: `msgs` holds one initialised header per length, whose iovecs point into `buf`,
    // which outlives the call; the socket is connected, so no addresses are needed.
    let r = unsafe {
        libc::sendmmsg(
            sock.as_raw_fd(),
            m.msgs.as_mut_ptr(),
            m.msgs.len() as u32,
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Runs the sender until the duration ends or `stop` is set.
pub fn run_sender(sock: &UdpSocket, cfg: &SenderConfig, stop: &AtomicBool) -> SenderReport {
    let stride = cfg
        .profile
        .as_ref()
        .map_or(cfg.size, |p| p.max_size() as usize)
        .max(HEADER_LEN);
    let mut buf = vec![0u8; stride * BATCH];
    let mut plan = Plan::new(cfg);
    let mut batch = Vec::with_capacity(BATCH);
    let mut lens = Vec::with_capacity(BATCH);
    let mut late = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let mut rep = SenderReport::default();
    let mut gap_err_sum = 0f64;
    let mut gap_err_n = 0u64;
    let mut last: Option<(u64, u64)> = None; // (actual, scheduled) of the previous departure
    // A profile ends the stream when it ends, but never after the duration.
    let duration_ns = u64::try_from(cfg.duration.as_nanos()).unwrap_or(u64::MAX);
    let end_ns = cfg
        .profile
        .as_ref()
        .map_or(duration_ns, |p| p.duration_ns().min(duration_ns));
    let start = Instant::now();
    let mut first_ns = None;
    let mut last_ns = 0;
    let mut last_gap_ns = cfg.gap_ps as f64 / 1000.0;
    loop {
        if stop.load(SeqCst) {
            break;
        }
        let due = plan.next_due();
        if due >= end_ns {
            break;
        }
        // A far departure is waited for in slices, so a stop ends the wait.
        if due > (start.elapsed().as_nanos() as u64).saturating_add(SLICE_NS) {
            std::thread::sleep(crate::guard::SLICE);
            continue;
        }
        wait_until(start, due, cfg.pacing);
        let now = start.elapsed().as_nanos() as u64;
        // After a stall across the end, send only what was due before the end.
        plan.take_due(now.min(end_ns - 1), BATCH, &mut batch);
        if batch.is_empty() {
            continue;
        }
        let ts = realtime_ns();
        lens.clear();
        for (k, &(_, size)) in batch.iter().enumerate() {
            let d = &mut buf[k * stride..k * stride + size];
            // Sequence numbers count datagrams actually sent, so nothing unsent looks lost.
            let seq = rep.packets + k as u64;
            Header {
                flags: 0,
                stream: cfg.stream,
                seq,
                send_ns: ts,
                payload_len: (size - HEADER_LEN) as u32,
            }
            .write(d);
            fill_payload(cfg.stream, seq, &mut d[HEADER_LEN..]);
            if let Some(k) = &cfg.tag_key {
                crate::auth::sign_datagram(k, d);
            }
            lens.push(size);
        }
        if let Some(g) = &cfg.guard
            && g.admit(lens.iter().sum::<usize>() as u64).is_err()
        {
            break;
        }
        let sent = match send_batch(sock, &mut buf, stride, &lens) {
            Ok(k) => k,
            Err(_) => {
                rep.send_errors += 1;
                0
            }
        };
        if cfg.interval_ns > 0 && sent > 0 {
            let k = (now / cfg.interval_ns) as usize;
            if k < MAX_SENT_INTERVALS {
                if rep.sent_intervals.len() <= k {
                    rep.sent_intervals.resize(k + 1, 0);
                }
                rep.sent_intervals[k] += lens[..sent].iter().sum::<usize>() as u64;
            }
        }
        for &(sched_at, size) in &batch[..sent] {
            let _ = late.record(now.saturating_sub(sched_at).max(1));
            if let Some((prev_actual, prev_sched)) = last {
                let gap = sched_at.saturating_sub(prev_sched) as f64;
                gap_err_sum += ((now - prev_actual) as f64 - gap).abs();
                gap_err_n += 1;
                last_gap_ns = gap;
            }
            last = Some((now, sched_at));
            rep.bytes += size as u64;
        }
        if sent > 0 {
            first_ns.get_or_insert(now);
            last_ns = now;
        }
        rep.packets += sent as u64;
    }
    rep.slips = plan.slips();
    let stopped_ns = (start.elapsed().as_nanos() as u64).min(end_ns);
    rep.asked_bytes = plan.asked_bytes(cfg, stopped_ns);
    if stopped_ns > 0 {
        rep.asked_bps = rep.asked_bytes as f64 * 8e9 / stopped_ns as f64;
    }
    rep.sender_limited = sender_limited(rep.bytes, rep.asked_bytes);
    if cfg.interval_ns > 0 && (stopped_ns / cfg.interval_ns) as usize >= MAX_SENT_INTERVALS {
        rep.sent_intervals.clear();
    } else {
        rep.interval_ms = cfg.interval_ns / 1_000_000;
    }
    rep.duration_secs = first_ns.map_or(0.0, |f| (last_ns - f) as f64 / 1e9 + last_gap_ns / 1e9);
    if rep.duration_secs > 0.0 {
        rep.achieved_bps = rep.bytes as f64 * 8.0 / rep.duration_secs;
    }
    if !late.is_empty() {
        rep.late_p50_us = late.value_at_percentile(50.0) as f64 / 1e3;
        rep.late_p99_us = late.value_at_percentile(99.0) as f64 / 1e3;
        rep.late_max_us = late.max() as f64 / 1e3;
    }
    if gap_err_n > 0 {
        rep.gap_error_mean_us = gap_err_sum / gap_err_n as f64 / 1e3;
    }
    rep
}

/// A receive that found nothing this time (timeout, a signal, or nothing
/// ready on a non-blocking socket): try again.
pub fn nothing_yet(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Whether a sender that sent `sent` of `asked` bytes fell short of its
/// schedule by more than 1%.
pub fn sender_limited(sent: u64, asked: u64) -> bool {
    (sent as f64) < asked as f64 * SENDER_LIMITED_BELOW
}

#[cfg(test)]
mod limited_tests {
    use super::{nothing_yet, sender_limited};
    use std::io::{Error, ErrorKind};

    #[test]
    fn only_timeouts_signals_and_would_block_mean_try_again() {
        for k in [
            ErrorKind::WouldBlock,
            ErrorKind::TimedOut,
            ErrorKind::Interrupted,
        ] {
            assert!(nothing_yet(&Error::from(k)), "{k:?}");
        }
        for k in [
            ErrorKind::ConnectionRefused,
            ErrorKind::InvalidData,
            ErrorKind::Other,
        ] {
            assert!(!nothing_yet(&Error::from(k)), "{k:?}");
        }
    }

    #[test]
    fn more_than_one_percent_short_is_sender_limited() {
        assert!(!sender_limited(990, 1000));
        assert!(sender_limited(989, 1000));
        assert!(!sender_limited(1000, 1000));
        assert!(!sender_limited(1200, 1000));
        assert!(!sender_limited(0, 0));
    }
}

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
    fn burst(&mut self, _b: super::track::BurstReport) {}
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
    /// Media mode: (frame gap ns, buffer depth ns); frames later than their
    /// playout deadline count as late.
    pub media: Option<(u64, u64)>,
    /// Verify payloads.
    pub verify: bool,
    /// Bursts: (datagrams per burst, period ns).
    pub burst: Option<(u64, u64)>,
    /// Accept only datagrams tagged with this session key.
    pub tag_key: Option<crate::auth::DatagramKey>,
}

/// When a receiver stops, and the time base its intervals use.
#[derive(Clone, Copy)]
pub struct Until<'a> {
    /// Stop now.
    pub stop: &'a AtomicBool,
    /// Stop once the clock passes this many ns after `start` (0 = no deadline yet).
    pub deadline_ns: &'a AtomicU64,
    /// Time zero of the receiver's intervals.
    pub start: Instant,
}

/// Receives until `until` says stop. Calls `on_interval` every interval and
/// `on_packet` for every datagram.
pub fn run_receiver(
    sock: &UdpSocket,
    cfg: &ReceiverConfig,
    stats: &mut ReceiverStats,
    until: Until<'_>,
    sink: &mut dyn ReceiverSink,
) -> io::Result<()> {
    sock.set_read_timeout(Some(Duration::from_millis(20)))?;
    let size = cfg.max_size.max(HEADER_LEN) + 1;
    let mut buf = vec![0u8; size * BATCH];
    let Until {
        stop,
        deadline_ns,
        start,
    } = until;
    let mut next_tick = cfg.interval;
    let mut media_first: Option<(u64, i64)> = None;
    let mut control = vec![[0u8; CMSG_SPACE]; BATCH];
    enable_rx_timestamps(sock);
    let mut bursts = cfg
        .burst
        .map(|(n, period)| super::track::BurstTracker::new(n, period as f64 / 1e9));
    let mut late_count = 0u64;
    loop {
        let el = start.elapsed();
        if el >= next_tick {
            let mut iv = stats.take_interval(next_tick.as_secs_f64());
            iv.late = std::mem::take(&mut late_count);
            sink.interval(iv);
            next_tick += cfg.interval;
        }
        let dl = deadline_ns.load(SeqCst);
        if stop.load(SeqCst) || (dl > 0 && el.as_nanos() as u64 >= dl) {
            if let Some(b) = bursts.as_mut().and_then(|b| b.finish()) {
                sink.burst(b);
            }
            let mut iv = stats.take_interval(el.as_secs_f64());
            iv.late = late_count;
            sink.interval(iv);
            return Ok(());
        }
        let lens = match recv_batch(sock, &mut buf, size, &mut control) {
            Ok(l) => l,
            Err(e) if nothing_yet(&e) => continue,
            // ICMP errors from an earlier send on this socket are not fatal for a receiver.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
            Err(e) => return Err(e),
        };
        let batch_ns = realtime_ns();
        let batch_mono = start.elapsed().as_nanos() as u64;
        for (k, &(len, stamp)) in lens.iter().enumerate() {
            // The kernel's receive time where available (exact per datagram, even
            // when a batch arrives at once), otherwise the batch's user-space time.
            let recv_ns = stamp.unwrap_or(batch_ns);
            // Receiver-relative time of this datagram, ns; signed, as a datagram
            // may carry a kernel stamp from just before the receiver started.
            let mono = batch_mono as i64 - (batch_ns as i64 - recv_ns as i64);
            let d = &buf[k * size..k * size + len];
            let Ok(h) = Header::read(d) else {
                stats.on_invalid(len);
                continue;
            };
            if h.stream != cfg.stream || h.flags & FLAG_HANDSHAKE != 0 {
                continue;
            }
            let mut payload = &d[HEADER_LEN..];
            if let Some(k) = &cfg.tag_key {
                // Nothing of an unauthenticated datagram is trusted, not even its sequence.
                if !crate::auth::datagram_is_authentic(k, d) {
                    stats.on_invalid(len);
                    continue;
                }
                payload = &payload[..payload.len().saturating_sub(crate::auth::TAG_LEN)];
            }
            let corrupt = cfg.verify && verify_payload(h.stream, h.seq, payload).is_err();
            let transit = recv_ns as i64 - h.send_ns as i64;
            let delay = transit - cfg.offset_ns + cfg.comp_ns;
            let arrival = stats.on_datagram(h.seq, len, delay, transit, corrupt);
            if let Some((gap, depth)) = cfg.media {
                let (s0, t0) = *media_first.get_or_insert((h.seq, mono));
                let deadline = t0 + (h.seq.saturating_sub(s0) * gap + depth) as i64;
                if arrival != Arrival::Duplicate && mono > deadline {
                    late_count += 1;
                    stats.on_late();
                }
            }
            if let (Some(b), false) = (bursts.as_mut(), arrival == Arrival::Duplicate)
                && let Some(done) = b.on_datagram(h.seq, len, mono as f64 / 1e9, h.send_ns, recv_ns)
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
    }
}

/// Receives one datagram with its kernel receive time (CLOCK_REALTIME ns),
/// where [`enable_rx_timestamps`] is on.
pub fn recv_stamped(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    recv_from_stamped(sock, buf).map(|(n, _, stamp)| (n, stamp))
}

/// Receives one datagram with its sender and its kernel receive time
/// (CLOCK_REALTIME ns), where [`enable_rx_timestamps`] is on.
pub fn recv_from_stamped(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, std::net::SocketAddr, Option<u64>)> {
    let mut control = [0u8; CMSG_SPACE];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `try_init` hands over zeroed address storage and its size;
    // recvmsg writes at most that much there and reports the length it used.
    // The msghdr points at `iov` and `control`, which outlive the call.
    let ((n, stamp), from) = unsafe {
        socket2::SockAddr::try_init(|storage, len| {
            let mut hdr: libc::msghdr = std::mem::zeroed();
            hdr.msg_name = storage.cast();
            hdr.msg_namelen = *len;
            hdr.msg_iov = &mut iov;
            hdr.msg_iovlen = 1;
            hdr.msg_control = control.as_mut_ptr().cast();
            hdr.msg_controllen = control.len() as _;
            let n = libc::recvmsg(sock.as_raw_fd(), &mut hdr, 0);
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            *len = hdr.msg_namelen;
            Ok((n as usize, rx_timestamp(&hdr)))
        })
    }?;
    let from = from
        .as_socket()
        .ok_or_else(|| io::Error::other("datagram from a non-IP address"))?;
    Ok((n, from, stamp))
}

/// Space for one message's ancillary data (a `timespec` in a `cmsghdr`).
const CMSG_SPACE: usize = 64;

/// Asks the kernel to stamp every received datagram (SO_TIMESTAMPNS).
pub fn enable_rx_timestamps(sock: &UdpSocket) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt on a valid descriptor with a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// The kernel receive time (CLOCK_REALTIME ns) carried in a message's ancillary data.
fn rx_timestamp(hdr: &libc::msghdr) -> Option<u64> {
    // SAFETY: `hdr` was filled by recvmmsg; its control pointer and length describe
    // a live buffer, and the CMSG_* macros stay within `msg_controllen`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    None
}

/// Receives up to [`BATCH`] datagrams into `size`-byte slots of `buf`; returns
/// their lengths and, where the kernel stamped them, their receive times.
fn recv_batch(
    sock: &UdpSocket,
    buf: &mut [u8],
    size: usize,
    control: &mut [[u8; CMSG_SPACE]],
) -> io::Result<Vec<(usize, Option<u64>)>> {
    let mut m = Mmsg::new(buf, size, BATCH);
    for (msg, c) in m.msgs.iter_mut().zip(control.iter_mut()) {
        msg.msg_hdr.msg_control = c.as_mut_ptr().cast();
        msg.msg_hdr.msg_controllen = CMSG_SPACE as _;
    }
    // SAFETY: each header's single iovec points at a distinct `size`-byte slot of
    // `buf`, and its control buffer at a distinct CMSG_SPACE-byte slot of `control`,
    // both outliving the call; the kernel writes within those bounds and fills
    // `msg_len`/`msg_controllen`. MSG_WAITFORONE blocks (up to SO_RCVTIMEO) for the first only.
    let r = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            m.msgs.as_mut_ptr(),
            m.msgs.len() as u32,
            libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(m.msgs[..r as usize]
        .iter()
        .map(|m| ((m.msg_len as usize).min(size), rx_timestamp(&m.msg_hdr)))
        .collect())
}
