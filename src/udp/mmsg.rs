//! What the UDP sender and receiver share: `sendmmsg`/`recvmmsg` message
//! headers over one buffer, and the batch size.

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
