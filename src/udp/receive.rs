//! The UDP receiver loop: datagrams batched with `recvmmsg` when several are
//! waiting, each with the kernel's receive timestamp, handed to the tracker
//! and to a sink for intervals and per-datagram rows.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Duration;

pub(crate) use super::mmsg::BATCH;
use super::mmsg::Mmsg;
use crate::net::nothing_yet;
use crate::net::realtime_ns;
use crate::protocol::udp::reception::Reception;
use crate::protocol::udp::track::ReceiverStats;

pub use crate::protocol::udp::reception::{MediaPlan, PacketRow, ReceiverConfig, ReceiverSink};

/// Batches of datagrams one [`Receiver::read`] takes at most before its
/// caller looks at its other work (the control connection, the clock).
pub const READ_BUDGET: usize = 16;

/// The client's UDP receiver on a non-blocking socket: datagrams batched
/// with `recvmmsg`, each with the kernel's receive timestamp, handed to the
/// one receiving core ([`Reception`]) with the intervals as they end. Its
/// caller waits for the socket (poll) and feeds the clock.
pub struct Receiver {
    r: Reception,
    buf: Vec<u8>,
    slots: Slots,
    control: Vec<[u8; CMSG_SPACE]>,
    got: Vec<Received>,
    /// Time zero of the intervals.
    start: std::time::Instant,
}

impl Receiver {
    /// Readies `sock` (non-blocking, receive times, TOS, coalescing where
    /// `cfg` allows it) for a stream whose intervals count from `start`.
    pub fn new(
        sock: &UdpSocket,
        cfg: &ReceiverConfig,
        stats: ReceiverStats,
        start: std::time::Instant,
    ) -> io::Result<Receiver> {
        sock.set_nonblocking(true)?;
        let mut slots = Slots::for_datagrams(cfg.slot());
        if cfg.offload && enable_gro(sock) {
            slots = Slots::COALESCED;
        }
        enable_rx_timestamps(sock);
        enable_rx_tos(sock);
        Ok(Receiver {
            r: Reception::new(cfg.clone(), stats),
            buf: vec![0u8; slots.size * slots.count],
            slots,
            control: vec![[0u8; CMSG_SPACE]; slots.count],
            got: Vec::with_capacity(BATCH),
            start,
        })
    }

    /// When the next interval ends, after time zero.
    pub fn next_tick(&self) -> Duration {
        self.r.next_tick()
    }

    /// Reads what waits, at most [`READ_BUDGET`] batches: Ok(true) when
    /// the budget ran out with more perhaps waiting, Ok(false) once the
    /// socket is empty (a batch came back short, or nothing came). An
    /// error other than "nothing yet" ends receiving.
    pub fn read(&mut self, sock: &UdpSocket, sink: &mut dyn ReceiverSink) -> io::Result<bool> {
        for _ in 0..READ_BUDGET {
            self.r.on_time(self.start.elapsed(), sink);
            let (buf, control, got) = (&mut self.buf, &mut self.control, &mut self.got);
            let (came, room) = match recv_batch(sock, buf, self.slots, control, got) {
                Ok(r) => r,
                Err(e) if nothing_yet(&e) => return Ok(false),
                // ICMP errors from an earlier send on this socket are not
                // fatal for a receiver.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            };
            let batch_ns = realtime_ns();
            let batch_mono = self.start.elapsed().as_nanos() as u64;
            // A coalesced buffer's datagrams share its message's receive time.
            for &Received { at, len, anc } in got.iter() {
                let (recv_ns, mono) = anc.times(batch_ns, batch_mono);
                self.r
                    .on_datagram(&buf[at..at + len], recv_ns, mono, anc.tos, sink);
            }
            if came < room {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// It is `el` after time zero: the intervals that ended by then.
    pub fn on_time(&mut self, el: Duration, sink: &mut dyn ReceiverSink) {
        self.r.on_time(el, sink);
    }

    /// Receiving ends `el` after time zero: the last intervals and bursts
    /// go to `sink`, and the accounts are handed over.
    pub fn finish(mut self, el: Duration, sink: &mut dyn ReceiverSink) -> ReceiverStats {
        self.r.on_time(el, sink);
        self.r.finish(el, sink);
        self.r.into_stats()
    }
}

/// Receives one datagram on a connected socket (whose peer is the only
/// sender) with its kernel receive time and TOS byte, as
/// [`recv_from_stamped`] does but without asking for the sender's address.
pub fn recv_connected(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, Ancillary)> {
    let mut namelen = 0;
    // SAFETY: no address is asked for: a null name of length 0.
    unsafe { recv_msg(sock, buf, std::ptr::null_mut(), &mut namelen) }
}

/// Receives one datagram with its sender and its kernel receive time
/// (CLOCK_REALTIME ns) and TOS byte, where [`enable_rx_timestamps`] and
/// [`enable_rx_tos`] are on.
pub fn recv_from_stamped(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, std::net::SocketAddr, Ancillary)> {
    // SAFETY: `try_init` hands over zeroed address storage and its size;
    // recvmsg writes at most that much there and reports the length it used.
    let ((n, stamp), from) = unsafe {
        socket2::SockAddr::try_init(|storage, len| recv_msg(sock, buf, storage.cast(), &mut *len))
    }?;
    let from = from
        .as_socket()
        .ok_or_else(|| io::Error::other("datagram from a non-IP address"))?;
    Ok((n, from, stamp))
}

/// One `recvmsg` into `buf` with room for the ancillary data, the sender's
/// address written to `name` (`len` bytes of room; the length used comes
/// back there).
///
/// # Safety
/// `name` must be null with `len` 0, or point at `len` writable bytes.
unsafe fn recv_msg(
    sock: &UdpSocket,
    buf: &mut [u8],
    name: *mut libc::c_void,
    len: &mut libc::socklen_t,
) -> io::Result<(usize, Ancillary)> {
    let mut control = [0u8; CMSG_SPACE];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: the msghdr points at `iov` and `control`, which outlive the
    // call, and at `name` as the caller vouches; recvmsg writes within
    // their sizes.
    unsafe {
        let mut hdr: libc::msghdr = std::mem::zeroed();
        hdr.msg_name = name;
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
    }
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

impl Ancillary {
    /// The datagram's receive time (the kernel's where it stamped it,
    /// exact per datagram even when a batch arrives at once; otherwise the
    /// batch's user-space time `batch_ns`) and, from the batch's time
    /// `batch_mono` ns after time zero, its own time after time zero
    /// (signed: a kernel stamp may be from just before time zero).
    pub fn times(&self, batch_ns: u64, batch_mono: u64) -> (u64, i64) {
        let recv_ns = self.stamp.unwrap_or(batch_ns);
        (
            recv_ns,
            batch_mono as i64 - (batch_ns as i64 - recv_ns as i64),
        )
    }
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
    /// slots than `BATCH` keep a receiver's buffer at 1 MiB, and each
    /// still holds dozens of datagrams.
    pub const COALESCED: Slots = Slots {
        size: 65_536,
        count: 16,
    };

    /// `BATCH` slots of `size` bytes, one datagram each.
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

/// Receives up to `slots.count` messages (as many as `buf` has `slots.size`
/// slots for, and `control` has room for) into the slots of `buf` and puts
/// in `out` every datagram they hold, in order, without waiting for more
/// than the first: a coalesced buffer (`UDP_GRO`) is split back into its
/// datagrams at its segment size, so every datagram is counted on its own.
/// Returns how many messages came, out of how many there was room for:
/// fewer means the socket had no more.
pub fn recv_batch(
    sock: &impl AsRawFd,
    buf: &mut [u8],
    slots: Slots,
    control: &mut [[u8; CMSG_SPACE]],
    out: &mut Vec<Received>,
) -> io::Result<(usize, usize)> {
    out.clear();
    let size = slots.size.max(1);
    let count = slots.count.min(buf.len() / size).min(control.len());
    if count == 0 {
        return Ok((0, 0));
    }
    let mut m = Mmsg::new(buf, size, count);
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
        out.extend(
            crate::protocol::udp::gro::split(len, seg).map(|(at, len)| Received {
                at: k * size + at,
                len,
                anc,
            }),
        );
    }
    Ok((r as usize, count))
}
