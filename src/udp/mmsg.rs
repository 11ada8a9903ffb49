//! What the UDP sender and receivers share: `sendmmsg`/`recvmmsg` message
//! headers over one buffer, the batch size, and a short `recvmmsg` that
//! names each datagram's sender (the server's rr/ping answerer).

/// Most datagrams per system call.
pub const BATCH: usize = 64;

/// Message headers for `sendmmsg`/`recvmmsg`, one per `size`-byte slot of a
/// buffer. `msgs` point into `iov`'s heap storage, which never moves while
/// both live in this struct.
pub(super) struct Mmsg {
    /// Only its lengths may change: `msgs` point at these entries.
    pub(super) iov: Vec<libc::iovec>,
    pub(super) msgs: Vec<libc::mmsghdr>,
}

impl Mmsg {
    pub(super) fn new(buf: &mut [u8], size: usize, n: usize) -> Mmsg {
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
        Mmsg { iov, msgs }
    }
}

/// Room for one message's `UDP_SEGMENT` control message (a `u16` in a
/// `cmsghdr`), 8-byte aligned as `cmsghdr` needs.
type SegControl = [u64; 4];

/// Sends the datagrams in `stride`-byte slots of `buf` (lengths `lens`)
/// as the super-buffers `groups` describes, in one `sendmmsg`: each group
/// is one message whose iovecs are its datagrams' slots, with a
/// `UDP_SEGMENT` of its segment size when it holds more than one, so the
/// kernel cuts it back into exactly these datagrams. Returns how many
/// datagrams went (whole groups only).
pub(super) fn send_segmented(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    stride: usize,
    lens: &[usize],
    groups: &[crate::protocol::udp::gro::Group],
) -> std::io::Result<usize> {
    let mut m = Mmsg::new(buf, stride, lens.len());
    for (v, &len) in m.iov.iter_mut().zip(lens) {
        v.iov_len = len.min(stride);
    }
    let mut control: Vec<SegControl> = vec![[0; 4]; groups.len()];
    // SAFETY: CMSG_SPACE and CMSG_LEN are pure arithmetic on a size.
    let (space, clen) = unsafe {
        (
            libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) as usize,
            libc::CMSG_LEN(std::mem::size_of::<u16>() as u32),
        )
    };
    debug_assert!(space <= std::mem::size_of::<SegControl>());
    let iov = m.iov.as_mut_ptr();
    let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(groups.len());
    for (g, c) in groups.iter().zip(control.iter_mut()) {
        // SAFETY: mmsghdr is a plain C struct for which all-zero is a valid value.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        // SAFETY: `groups` tile `0..lens.len()`, so `start` is within `iov`.
        h.msg_hdr.msg_iov = unsafe { iov.add(g.start) };
        h.msg_hdr.msg_iovlen = g.count as _;
        if g.count > 1 {
            h.msg_hdr.msg_control = c.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = space as _;
            // SAFETY: the control buffer is `space` bytes, enough for one
            // cmsghdr and a u16, aligned for cmsghdr; FIRSTHDR is non-null
            // because msg_controllen covers a header.
            unsafe {
                let cm = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                (*cm).cmsg_level = libc::SOL_UDP;
                (*cm).cmsg_type = libc::UDP_SEGMENT;
                (*cm).cmsg_len = clen as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<u16>(), g.seg as u16);
            }
        }
        msgs.push(h);
    }
    // SAFETY: every message's iovecs point into `buf` and its control into
    // `control`, all outliving the call; the socket is connected.
    let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), msgs.len() as u32, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(groups[..r as usize].iter().map(|g| g.count).sum())
}
