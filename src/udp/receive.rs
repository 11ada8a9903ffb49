//! The UDP receiver loop: datagrams batched with `recvmmsg` when several are
//! waiting, each with the kernel's receive timestamp, handed to the tracker
//! and to a sink for intervals and per-datagram rows.

use serde::Serialize;
use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use super::header::{FLAG_HANDSHAKE, HEADER_LEN, Header, verify_payload};
use super::mmsg::{BATCH, Mmsg};
use super::track::{Arrival, ReceiverStats, UdpInterval};
use crate::net::nothing_yet;
use crate::net::realtime_ns;

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
    /// Media mode: frames later than their playout deadline count as late.
    pub media: Option<MediaPlan>,
    /// Verify payloads.
    pub verify: bool,
    /// Bursts: (datagrams per burst, period ns).
    pub burst: Option<(u64, u64)>,
    /// Accept only datagrams tagged with this session key.
    pub tag_key: Option<crate::auth::DatagramKey>,
    /// Take coalesced buffers (`UDP_GRO`) where the kernel offers them,
    /// split back into their datagrams before anything counts them.
    pub offload: bool,
}

/// A media stream's timing and shape, for playout deadlines and frames.
#[derive(Debug, Clone, Copy)]
pub struct MediaPlan {
    /// Time between frames, ns.
    pub frame_ns: u64,
    /// Playout buffer, ns.
    pub depth_ns: u64,
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
    let mut slots = Slots::for_datagrams(cfg.max_size.max(HEADER_LEN) + 1);
    if cfg.offload && enable_gro(sock) {
        slots = Slots::COALESCED;
    }
    let mut buf = vec![0u8; slots.size * slots.count];
    let mut got = Vec::with_capacity(BATCH);
    let Until {
        stop,
        deadline_ns,
        start,
    } = until;
    let mut next_tick = cfg.interval;
    let mut media_first: Option<(u64, i64)> = None;
    let mut control = vec![[0u8; CMSG_SPACE]; slots.count];
    enable_rx_timestamps(sock);
    enable_rx_tos(sock);
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
        match recv_batch(sock, &mut buf, slots, &mut control, &mut got) {
            Ok(()) => {}
            Err(e) if nothing_yet(&e) => continue,
            // ICMP errors from an earlier send on this socket are not fatal for a receiver.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
            Err(e) => return Err(e),
        };
        let batch_ns = realtime_ns();
        let batch_mono = start.elapsed().as_nanos() as u64;
        for &Received {
            at,
            len,
            anc: Ancillary { stamp, tos, .. },
        } in &got
        {
            // The kernel's receive time where available (exact per datagram, even
            // when a batch arrives at once; one time for all the datagrams of a
            // coalesced buffer), otherwise the batch's user-space time.
            let recv_ns = stamp.unwrap_or(batch_ns);
            // Receiver-relative time of this datagram, ns; signed, as a datagram
            // may carry a kernel stamp from just before the receiver started.
            let mono = batch_mono as i64 - (batch_ns as i64 - recv_ns as i64);
            let d = &buf[at..at + len];
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
                let (f0, t0) = *media_first.get_or_insert((frame, mono));
                let slot = frame.saturating_sub(f0).saturating_mul(m.frame_ns);
                let deadline = t0.saturating_add(slot.saturating_add(m.depth_ns) as i64);
                let late = arrival != Arrival::Duplicate && mono > deadline;
                if late {
                    late_count += 1;
                    stats.on_late(h.seq);
                }
                stats.on_frame(h.seq, arrival, corrupt, late);
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
    recv_from_stamped(sock, buf).map(|(n, _, a)| (n, a.stamp))
}

/// Receives one datagram with its sender and its kernel receive time
/// (CLOCK_REALTIME ns) and TOS byte, where [`enable_rx_timestamps`] and
/// [`enable_rx_tos`] are on.
pub fn recv_from_stamped(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, std::net::SocketAddr, Ancillary)> {
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
            Ok((n as usize, ancillary(&hdr)))
        })
    }?;
    let from = from
        .as_socket()
        .ok_or_else(|| io::Error::other("datagram from a non-IP address"))?;
    Ok((n, from, stamp))
}

/// Space for one message's ancillary data: a `timespec`, a TOS byte or
/// traffic class and a GRO segment size, each in a `cmsghdr`.
pub const CMSG_SPACE: usize = 96;

/// Asks the kernel to stamp every received datagram (SO_TIMESTAMPNS).
pub fn enable_rx_timestamps(sock: &UdpSocket) -> bool {
    crate::net::sockopt::set_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
        .is_ok()
}

/// Asks the kernel for every received datagram's TOS byte (IP_RECVTOS) or
/// IPv6 traffic class (IPV6_RECVTCLASS); a socket of one family refuses
/// the other's option, which is why both are tried and either may fail.
pub fn enable_rx_tos(sock: &UdpSocket) {
    use crate::net::sockopt::set_int;
    let fd = sock.as_raw_fd();
    let _ = set_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
    let _ = set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1);
}

/// What the kernel said about one datagram besides its bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ancillary {
    /// Receive time, CLOCK_REALTIME ns.
    pub stamp: Option<u64>,
    /// TOS byte or traffic class.
    pub tos: Option<u8>,
    /// The segment size of a buffer the kernel coalesced (`UDP_GRO`).
    pub segment: Option<u16>,
}

/// The receive time and TOS byte carried in a message's ancillary data.
fn ancillary(hdr: &libc::msghdr) -> Ancillary {
    let mut a = Ancillary::default();
    // SAFETY: `hdr` was filled by recvmsg/recvmmsg; its control pointer and
    // length describe a live buffer, the CMSG_* macros stay within
    // `msg_controllen`, and each payload is read at the size its type has.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                    let ts: libc::timespec = std::ptr::read_unaligned(data.cast());
                    a.stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
                (libc::IPPROTO_IP, libc::IP_TOS) => a.tos = Some(*data),
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    let v: libc::c_int = std::ptr::read_unaligned(data.cast());
                    a.segment = u16::try_from(v).ok().filter(|&s| s > 0);
                }
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                    let v: libc::c_int = std::ptr::read_unaligned(data.cast());
                    a.tos = Some(v as u8);
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    a
}

/// Asks the kernel to hand over coalesced buffers (`UDP_GRO`): segments
/// that arrive together as one (from a GSO sender on this host, or from a
/// NIC that aggregates) come up in one receive, with their segment size.
pub fn enable_gro(sock: &UdpSocket) -> bool {
    crate::net::sockopt::set_int(sock.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
}

/// The receive buffer's layout: `count` slots of `size` bytes, one message each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// Bytes per slot.
    pub size: usize,
    /// Slots, so messages per `recvmmsg`.
    pub count: usize,
}

impl Slots {
    /// Room for a coalesced buffer in every slot: up to 64 KiB each. Fewer
    /// slots than [`BATCH`] keep a receiver's buffer at 1 MiB, and each
    /// still holds dozens of datagrams.
    pub const COALESCED: Slots = Slots {
        size: 65_536,
        count: 16,
    };

    /// [`BATCH`] slots of `size` bytes, one datagram each.
    pub fn for_datagrams(size: usize) -> Slots {
        Slots { size, count: BATCH }
    }
}

/// One datagram received: where it lies in the buffer, and what the
/// kernel said of the message that brought it.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Offset in the buffer.
    pub at: usize,
    /// Length.
    pub len: usize,
    /// Receive time and TOS of its message (shared by every datagram of a
    /// coalesced buffer).
    pub anc: Ancillary,
}

/// Receives up to `slots.count` messages into the slots of `buf` and puts
/// in `out` every datagram they hold, in order: a coalesced buffer
/// (`UDP_GRO`) is split back into its datagrams at its segment size, so
/// every datagram is counted on its own.
pub fn recv_batch(
    sock: &UdpSocket,
    buf: &mut [u8],
    slots: Slots,
    control: &mut [[u8; CMSG_SPACE]],
    out: &mut Vec<Received>,
) -> io::Result<()> {
    out.clear();
    let size = slots.size;
    let mut m = Mmsg::new(buf, size, slots.count);
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
            // c_int in glibc's prototype, unsigned in musl's (static builds).
            libc::MSG_WAITFORONE as _,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    for (k, m) in m.msgs[..r as usize].iter().enumerate() {
        let anc = ancillary(&m.msg_hdr);
        let len = (m.msg_len as usize).min(size);
        let seg = anc.segment.map_or(0, usize::from);
        out.extend(super::gro::split(len, seg).map(|(at, len)| Received {
            at: k * size + at,
            len,
            anc,
        }));
    }
    Ok(())
}
