//! The UDP sender loop: paced datagrams, batched with `sendmmsg` when several
//! are due, which is what lets a 2-core machine pace hundreds of thousands
//! of datagrams per second.

use hdrhistogram::Histogram;
use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use super::mmsg::{BATCH, Mmsg};
use crate::net::realtime_ns;
use crate::protocol::udp::header::{HEADER_LEN, Header, fill_payload};
use crate::protocol::udp::pace::{GROUP_NS, Pacing, Schedule, forgive_ns};
use crate::protocol::udp::sent::{MAX_SENT_INTERVALS, SenderReport, sender_limited};

/// What the sender needs.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Datagram size (UDP payload), header included.
    pub size: usize,
    /// Time between datagrams (the exact fraction of the rate asked for).
    pub gap: crate::protocol::udp::pace::Gap,
    /// How long to send.
    pub duration: Duration,
    /// How to wait.
    pub pacing: Pacing,
    /// Burst to catch up after stalls.
    pub catch_up: bool,
    /// Stream ID stamped in every datagram.
    pub stream: u32,
    /// Time-varying rate and size instead of `size`/`gap`.
    pub profile: Option<crate::protocol::udp::profile::Profile>,
    /// Compute the profile's whole schedule before the first send.
    pub precompute: bool,
    /// Bursts: (datagrams per burst, period ns); datagrams within a burst are `gap` apart.
    pub burst: Option<(u64, u64)>,
    /// Media frames: (each frame's size, frames per second); each frame
    /// leaves as datagrams of `size`, the last one shorter, back to back.
    pub frames: Option<(crate::protocol::udp::iso::FrameBytes, u32)>,
    /// Tag every datagram with this session key.
    pub tag_key: Option<crate::protocol::auth::DatagramKey>,
    /// Count the bytes sent in each interval this long (0: none), for
    /// comparing what was offered with what arrived.
    pub interval_ns: u64,
    /// The server's limits on what this sender sends (none on a client).
    pub guard: Option<std::sync::Arc<crate::guard::SendGuard>>,
    /// Hand datagrams due together to the kernel as `UDP_SEGMENT` (GSO)
    /// super-buffers; turned off for the rest of the run if the kernel
    /// refuses one.
    pub offload: bool,
}

/// Longest single sleep before a departure, ns.
const SLICE_NS: u64 = 100_000_000;

/// Most departures `precompute` holds in memory (16 bytes each); longer
/// profiles are scheduled on the fly instead.
pub const MAX_PRECOMPUTED: usize = 1_000_000;

/// Where departures come from: a fixed-gap schedule or a rate profile.
enum SendPlan {
    Fixed {
        sched: Schedule,
        size: usize,
    },
    Profile {
        deps: Box<dyn Iterator<Item = (u64, u32)> + Send>,
        next: Option<(u64, u32)>,
        forgive_ns: u64,
        slips: u64,
    },
}

impl SendPlan {
    fn new(cfg: &SenderConfig) -> SendPlan {
        let end = cfg.duration.as_nanos() as u64;
        let size = cfg.size.max(HEADER_LEN) as u32;
        let grouped: Option<Box<dyn Iterator<Item = (u64, u32)> + Send>> =
            match (cfg.frames, cfg.burst) {
                (Some((frame, fps)), _) => Some(Box::new(
                    crate::protocol::udp::profile::frame_departures(frame, size, fps, end),
                )),
                (None, Some((per_burst, period_ns))) => {
                    Some(Box::new(crate::protocol::udp::profile::burst_departures(
                        size,
                        per_burst,
                        period_ns,
                        cfg.gap.ps() / 1000,
                        end,
                    )))
                }
                (None, None) => None,
            };
        if let Some(mut deps) = grouped {
            let next = deps.next();
            // A frame's or a burst's datagrams are due together: send them
            // all, never skip.
            return SendPlan::Profile {
                deps,
                next,
                forgive_ns: u64::MAX,
                slips: 0,
            };
        }
        match &cfg.profile {
            None => SendPlan::Fixed {
                sched: Schedule::new(0, cfg.gap, forgive_ns(end, cfg.catch_up)),
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
                SendPlan::Profile {
                    deps,
                    next,
                    forgive_ns: forgive_ns(end, cfg.catch_up),
                    slips: 0,
                }
            }
        }
    }

    fn next_due(&self) -> u64 {
        match self {
            SendPlan::Fixed { sched, .. } => sched.next_due(),
            SendPlan::Profile { next, .. } => next.map_or(u64::MAX, |n| n.0),
        }
    }

    /// Fills `out` with the (due, size) of the datagrams due at `now`, or
    /// less than `ahead` after it, at most `max`.
    fn take_due(&mut self, now: u64, ahead: u64, max: usize, out: &mut Vec<(u64, usize)>) {
        out.clear();
        match self {
            SendPlan::Fixed { sched, size } => {
                let (first, n) = sched.take_due_within(now, ahead, max as u64);
                out.extend((first..first + n).map(|i| (sched.due_of(i), *size)));
            }
            SendPlan::Profile {
                deps,
                next,
                forgive_ns,
                slips,
            } => {
                // After a stall, skip what is long overdue rather than burst it.
                let mut skipped = false;
                while let Some((t, _)) = *next {
                    if t.saturating_add(*forgive_ns) > now {
                        break;
                    }
                    skipped = true;
                    *next = deps.next();
                }
                *slips += u64::from(skipped);
                while let Some((t, sz)) = *next {
                    if t >= now.saturating_add(ahead.max(1)) || out.len() >= max {
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
            return crate::protocol::udp::profile::burst_departures(
                size,
                per_burst,
                period_ns,
                cfg.gap.ps() / 1000,
                t_ns,
            )
            .map(|(_, s)| u64::from(s))
            .sum();
        }
        match (self, &cfg.profile) {
            (_, Some(p)) => p.bytes_until(t_ns).round() as u64,
            (SendPlan::Fixed { size, .. }, None) => {
                cfg.gap.count_before(t_ns).saturating_mul(*size as u64)
            }
            (SendPlan::Profile { .. }, None) => 0,
        }
    }

    fn slips(&self) -> u64 {
        match self {
            SendPlan::Fixed { sched, .. } => sched.slips(),
            SendPlan::Profile { slips, .. } => *slips,
        }
    }
}

/// CLOCK_MONOTONIC now, ns: the clock the sender's absolute sleeps are on.
fn mono_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Sleeps until CLOCK_MONOTONIC reads `at_ns` (an absolute deadline, so a
/// late wake-up never pushes the next one later).
fn sleep_until_mono(at_ns: u64) {
    // The field's own type, not `libc::time_t` by name: on musl that alias
    // is deprecated (it is to become 64-bit) and the static build warned.
    let t = libc::timespec {
        tv_sec: (at_ns / 1_000_000_000) as _,
        tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `t` is a valid timespec; a signal's EINTR just ends the wait early,
    // and the caller checks the clock again.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &t,
            std::ptr::null_mut(),
        )
    };
}

/// How long before a departure a `hybrid` sender stops sleeping and spins:
/// a wake-up from `clock_nanosleep` with 1 ns of timer slack comes about
/// 5–10 µs late on a loaded VM, so this keeps the first datagram of a batch
/// near its time for a tenth of the spinning of sleeping to 100 µs before.
const SPIN_NS: u64 = 10_000;

fn wait_until(start_mono: u64, due_ns: u64, pacing: Pacing) {
    let due = start_mono + due_ns;
    let now = mono_ns();
    if due <= now {
        return;
    }
    match pacing {
        Pacing::Sleep => sleep_until_mono(due),
        Pacing::Hybrid | Pacing::Spin => {
            if pacing == Pacing::Hybrid && due - now > SPIN_NS {
                sleep_until_mono(due - SPIN_NS);
            }
            while mono_ns() < due {
                std::hint::spin_loop();
            }
        }
    }
}

/// Sets this thread's timer slack to 1 ns while it lives, so absolute
/// sleeps end when asked instead of up to 50 µs later (the default slack),
/// and puts the old slack back on drop.
struct TimerSlack(libc::c_int);

impl TimerSlack {
    fn tight() -> TimerSlack {
        // SAFETY: prctl(PR_GET/SET_TIMERSLACK) reads and sets only this thread's timer slack.
        unsafe {
            let old = libc::prctl(libc::PR_GET_TIMERSLACK);
            let one_ns: libc::c_ulong = 1;
            libc::prctl(libc::PR_SET_TIMERSLACK, one_ns);
            TimerSlack(old)
        }
    }
}

impl Drop for TimerSlack {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: as in `tight`.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, self.0 as libc::c_ulong) };
        }
    }
}

/// Payload bytes one wake-up of a segmenting sender prepares at most: a
/// few super-buffers, so a maximum-rate sender crosses into the kernel once
/// for several hundred datagrams while the batch stays in cache.
const GSO_WAKE_BYTES: usize = 256 * 1024;

/// Most datagrams one wake-up sends: [`BATCH`], or with GSO as many as
/// [`GSO_WAKE_BYTES`] of `stride`-byte datagrams, up to [`BATCH`] full
/// super-buffers.
fn per_wake(stride: usize, gso: bool) -> usize {
    if gso {
        (GSO_WAKE_BYTES / stride.max(1))
            .clamp(BATCH, BATCH * crate::protocol::udp::gro::MAX_SEGMENTS)
    } else {
        BATCH
    }
}

/// The batch buffer a sender of `stride`-byte datagrams allocates, bytes
/// (what the server's memory account charges for it).
pub(crate) fn buffer_bytes(stride: usize, gso: bool) -> usize {
    stride.saturating_mul(per_wake(stride, gso))
}

/// Whether an error from a segmented send means this path or kernel will
/// not segment (EIO: no checksum offload; EMSGSIZE or EINVAL, by kernel
/// version: a segment larger than the path MTU; the others: a kernel
/// without GSO), so the datagrams should go one by one instead, where IP
/// may still fragment them.
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::EMSGSIZE | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
    )
}

/// Sends one datagram per `stride`-byte slot of `buf`, of the lengths in
/// `lens`: as GSO super-buffers while `gso` holds, where datagrams group,
/// and otherwise one message each. A refused segmented send turns `gso`
/// off and sends the same batch again without it.
fn send_batch(
    sock: &UdpSocket,
    buf: &mut [u8],
    stride: usize,
    lens: &[usize],
    gso: &mut bool,
    groups: &mut Vec<crate::protocol::udp::gro::Group>,
) -> io::Result<usize> {
    if *gso {
        crate::protocol::udp::gro::groups(lens, groups);
        if groups.len() < lens.len() {
            match super::mmsg::send_segmented(sock.as_raw_fd(), buf, stride, lens, groups) {
                Err(e) if gso_refused(&e) => *gso = false,
                r => return r,
            }
        }
    }
    if lens.len() == 1 {
        return sock.send(&buf[..lens[0]]).map(|_| 1);
    }
    let mut m = Mmsg::new(buf, stride, lens.len());
    for (v, &len) in m.iov.iter_mut().zip(lens) {
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

/// What a sender's owner lets a batch do (held: the same batch is
/// offered again next time).
pub use crate::guard::Gate;

/// A sender's schedule, buffers and accounts, without its waiting: the
/// blocking sender ([`run_sender`]) sleeps or spins to each departure, an
/// event loop sets a timer for it. Times are ns from the stream's start.
pub struct Departures {
    cfg: SenderConfig,
    stride: usize,
    gso: bool,
    groups: Vec<crate::protocol::udp::gro::Group>,
    buf: Vec<u8>,
    plan: SendPlan,
    /// The batch taken from the plan and not yet sent (kept while held).
    batch: Vec<(u64, usize)>,
    /// When the batch was taken.
    taken_at: u64,
    lens: Vec<usize>,
    late: Histogram<u64>,
    rep: SenderReport,
    gap_err_sum: f64,
    gap_err_n: u64,
    /// (actual, scheduled) of the previous departure.
    last: Option<(u64, u64)>,
    end_ns: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    last_gap_ns: f64,
}

impl Departures {
    /// A sender for `cfg`, nothing sent yet.
    pub fn new(cfg: SenderConfig) -> Departures {
        let stride = cfg
            .profile
            .as_ref()
            .map_or(cfg.size, |p| p.max_size() as usize)
            .max(HEADER_LEN);
        let gso = cfg.offload;
        let most = per_wake(stride, gso);
        // A profile ends the stream when it ends, but never after the duration.
        let duration_ns = u64::try_from(cfg.duration.as_nanos()).unwrap_or(u64::MAX);
        let end_ns = cfg
            .profile
            .as_ref()
            .map_or(duration_ns, |p| p.duration_ns().min(duration_ns));
        Departures {
            stride,
            gso,
            groups: Vec::new(),
            buf: vec![0u8; stride * most],
            plan: SendPlan::new(&cfg),
            batch: Vec::with_capacity(most),
            taken_at: 0,
            lens: Vec::with_capacity(most),
            late: Histogram::<u64>::new(3).expect("3 significant digits is valid"),
            rep: SenderReport::default(),
            gap_err_sum: 0.0,
            gap_err_n: 0,
            last: None,
            end_ns,
            first_ns: None,
            last_ns: 0,
            last_gap_ns: cfg.gap.ps() as f64 / 1000.0,
            cfg,
        }
    }

    /// When the next datagram is due, or None once the schedule is over.
    pub fn next_due(&self) -> Option<u64> {
        if !self.batch.is_empty() {
            return Some(self.taken_at);
        }
        let due = self.plan.next_due();
        (due < self.end_ns).then_some(due)
    }

    /// Sends, at `now`, up to a wake-up's worth of the datagrams due, as
    /// `gate` allows their bytes: false if it halted the sender.
    pub fn send_due(&mut self, sock: &UdpSocket, now: u64, gate: impl FnOnce(u64) -> Gate) -> bool {
        if self.batch.is_empty() {
            // After a stall across the end, send only what was due before the end.
            let most = per_wake(self.stride, self.gso);
            let at = now.min(self.end_ns.saturating_sub(1));
            // Under hybrid pacing, what is due within GROUP_NS leaves now, so a
            // fast stream wakes once per group instead of once per datagram.
            let ahead = match self.cfg.pacing {
                Pacing::Hybrid => GROUP_NS.min(self.end_ns - at),
                _ => 0,
            };
            self.plan.take_due(at, ahead, most, &mut self.batch);
            if self.batch.is_empty() {
                return true;
            }
            self.taken_at = now;
            let stride = self.stride;
            for (k, &(_, size)) in self.batch.iter().enumerate() {
                let seq = self.rep.packets + k as u64;
                fill_payload(
                    self.cfg.stream,
                    seq,
                    &mut self.buf[k * stride + HEADER_LEN..k * stride + size],
                );
            }
        }
        let stride = self.stride;
        // Stamped once the payloads are written, so the stamp is as close
        // to the kernel's hand-over as a stamp written into the datagram
        // can be: every datagram of the batch (each segment of a GSO
        // super-buffer too) carries the time its batch went to the kernel.
        let ts = realtime_ns();
        self.lens.clear();
        for (k, &(_, size)) in self.batch.iter().enumerate() {
            let d = &mut self.buf[k * stride..k * stride + size];
            // Sequence numbers count datagrams actually sent, so nothing unsent looks lost.
            let seq = self.rep.packets + k as u64;
            Header {
                flags: 0,
                stream: self.cfg.stream,
                seq,
                send_ns: ts,
                payload_len: (size - HEADER_LEN) as u32,
            }
            .write(d);
            if let Some(k) = &self.cfg.tag_key {
                crate::protocol::auth::sign_datagram(k, d);
            }
            self.lens.push(size);
        }
        match gate(self.lens.iter().sum::<usize>() as u64) {
            Gate::Go => {}
            Gate::Hold => return true,
            Gate::Halt => {
                self.batch.clear();
                return false;
            }
        }
        let (buf, lens) = (&mut self.buf, &self.lens);
        let sent = match send_batch(sock, buf, stride, lens, &mut self.gso, &mut self.groups) {
            Ok(k) => k,
            Err(_) => {
                self.rep.send_errors += 1;
                0
            }
        };
        let interval_ns = self.cfg.interval_ns;
        if interval_ns > 0 && sent > 0 {
            let k = (now / interval_ns) as usize;
            if k < MAX_SENT_INTERVALS {
                if self.rep.sent_intervals.len() <= k {
                    self.rep.sent_intervals.resize(k + 1, 0);
                }
                self.rep.sent_intervals[k] += self.lens[..sent].iter().sum::<usize>() as u64;
            }
        }
        for &(sched_at, size) in &self.batch[..sent] {
            let _ = self.late.record(now.saturating_sub(sched_at).max(1));
            if let Some((prev_actual, prev_sched)) = self.last {
                let gap = sched_at.saturating_sub(prev_sched) as f64;
                self.gap_err_sum += (now.saturating_sub(prev_actual) as f64 - gap).abs();
                self.gap_err_n += 1;
                self.last_gap_ns = gap;
            }
            self.last = Some((now, sched_at));
            self.rep.bytes += size as u64;
        }
        if sent > 0 {
            self.first_ns.get_or_insert(now);
            self.last_ns = now;
        }
        self.rep.packets += sent as u64;
        self.batch.clear();
        true
    }

    /// Bytes and failed sends so far.
    pub fn moved(&self) -> (u64, u64) {
        (self.rep.bytes, self.rep.send_errors)
    }

    /// The sender's account, sending having stopped at `elapsed` ns.
    pub fn finish(self, elapsed: u64) -> SenderReport {
        let Departures {
            cfg,
            plan,
            late,
            mut rep,
            gap_err_sum,
            gap_err_n,
            end_ns,
            first_ns,
            last_ns,
            last_gap_ns,
            ..
        } = self;
        rep.slips = plan.slips();
        let stopped_ns = elapsed.min(end_ns);
        rep.asked_bytes = plan.asked_bytes(&cfg, stopped_ns);
        if stopped_ns > 0 {
            rep.asked_bps = rep.asked_bytes as f64 * 8e9 / stopped_ns as f64;
        }
        rep.sender_limited = sender_limited(rep.bytes, rep.asked_bytes);
        if cfg.interval_ns > 0 && (stopped_ns / cfg.interval_ns) as usize >= MAX_SENT_INTERVALS {
            rep.sent_intervals.clear();
        } else {
            rep.interval_ms = cfg.interval_ns / 1_000_000;
        }
        rep.duration_secs =
            first_ns.map_or(0.0, |f| (last_ns - f) as f64 / 1e9 + last_gap_ns / 1e9);
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
}

/// Runs the sender until the duration ends or `stop` is set.
pub fn run_sender(sock: &UdpSocket, cfg: &SenderConfig, stop: &AtomicBool) -> SenderReport {
    let guard = cfg.guard.clone();
    let pacing = cfg.pacing;
    let mut d = Departures::new(cfg.clone());
    let _slack = TimerSlack::tight();
    let start = mono_ns();
    loop {
        if stop.load(SeqCst) {
            break;
        }
        let Some(due) = d.next_due() else {
            break;
        };
        // A far departure is waited for in slices, so a stop ends the wait.
        if due > (mono_ns() - start).saturating_add(SLICE_NS) {
            std::thread::sleep(crate::guard::SLICE);
            continue;
        }
        wait_until(start, due, pacing);
        let now = mono_ns() - start;
        let gate = |n| match &guard {
            Some(g) if g.admit(n).is_err() => Gate::Halt,
            _ => Gate::Go,
        };
        if !d.send_due(sock, now, gate) {
            break;
        }
    }
    d.finish(mono_ns() - start)
}
