//! SCTP sockets for `rr --proto sctp` and `--proto sctp-seqpacket`: the
//! kernel-support probe, Nagle (`SCTP_NODELAY`), and the one-to-many
//! (SOCK_SEQPACKET) socket with multi-homed binding (`sctp_bindx`) and
//! whole-message receive.
//!
//! Nothing here works on a kernel without SCTP; [`support`] says so in the
//! words netrig prints. The address packing for `sctp_bindx` is pure and
//! tested everywhere.

use socket2::{Domain, MaybeUninitSlice, Protocol, SockAddr, Socket, Type};
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

/// `SOL_SCTP` (the socket option level, equal to `IPPROTO_SCTP`).
const SOL_SCTP: libc::c_int = libc::IPPROTO_SCTP;
/// `SCTP_NODELAY` from `<netinet/sctp.h>`.
const SCTP_NODELAY: libc::c_int = 3;
/// `SCTP_SOCKOPT_BINDX_ADD` from `<linux/sctp.h>`: what `sctp_bindx(…,
/// SCTP_BINDX_ADD_ADDR)` in libsctp calls.
const SCTP_SOCKOPT_BINDX_ADD: libc::c_int = 100;
/// Socket buffers for one-to-many sockets: a whole message must fit.
const SEQPACKET_BUFFER: usize = 4 << 20;

fn protocol() -> Protocol {
    Protocol::from(libc::IPPROTO_SCTP)
}

/// Checks whether this kernel offers SCTP sockets of the given kind
/// (one-to-many SOCK_SEQPACKET when `seqpacket`, else one-to-one).
pub fn support(seqpacket: bool) -> Result<(), crate::protocol::refusal::Unsupported> {
    let ty = if seqpacket {
        Type::SEQPACKET
    } else {
        Type::STREAM
    };
    match Socket::new(Domain::IPV4, ty, Some(protocol())) {
        Ok(_) => Ok(()),
        Err(source) => Err(crate::protocol::refusal::Unsupported { source }),
    }
}

/// Turns Nagle off (`nodelay`) or on for an SCTP socket.
pub fn set_nodelay(fd: RawFd, nodelay: bool) -> io::Result<()> {
    crate::net::sockopt::set_int(fd, SOL_SCTP, SCTP_NODELAY, nodelay.into())
}

/// Packs addresses the way `sctp_bindx` passes them to the kernel: `struct
/// sockaddr_in` and `struct sockaddr_in6` back to back, each at its own size.
pub fn bindx_buffer(addrs: &[SocketAddr]) -> Vec<u8> {
    let mut b = Vec::with_capacity(addrs.len() * 28);
    for a in addrs {
        match a {
            SocketAddr::V4(v4) => {
                b.extend_from_slice(&(libc::AF_INET as libc::sa_family_t).to_ne_bytes());
                b.extend_from_slice(&v4.port().to_be_bytes());
                b.extend_from_slice(&v4.ip().octets());
                b.extend_from_slice(&[0u8; 8]);
            }
            SocketAddr::V6(v6) => {
                b.extend_from_slice(&(libc::AF_INET6 as libc::sa_family_t).to_ne_bytes());
                b.extend_from_slice(&v6.port().to_be_bytes());
                // As std and socket2 store it: the raw field, no byte swap.
                b.extend_from_slice(&v6.flowinfo().to_ne_bytes());
                b.extend_from_slice(&v6.ip().octets());
                b.extend_from_slice(&v6.scope_id().to_ne_bytes());
            }
        }
    }
    b
}

/// Adds local addresses to a bound SCTP socket (`sctp_bindx` with
/// `SCTP_BINDX_ADD_ADDR`), which makes the socket's associations multi-homed.
pub fn bindx_add(socket: &Socket, addrs: &[SocketAddr]) -> io::Result<()> {
    if addrs.is_empty() {
        return Ok(());
    }
    let buf = bindx_buffer(addrs);
    // SAFETY: setsockopt on a live descriptor with a pointer to `buf` and its
    // length; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            SOL_SCTP,
            SCTP_SOCKOPT_BINDX_ADD,
            buf.as_ptr().cast(),
            buf.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn seqpacket(domain: Domain) -> io::Result<Socket> {
    let s = Socket::new(domain, Type::SEQPACKET, Some(protocol()))?;
    s.set_recv_buffer_size(SEQPACKET_BUFFER)?;
    s.set_send_buffer_size(SEQPACKET_BUFFER)?;
    Ok(s)
}

/// The port a bound socket got.
fn local_port(s: &Socket) -> io::Result<u16> {
    s.local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::other("SCTP socket has no port"))
}

/// A one-to-many socket listening on every address of `family`'s kind
/// (IPv6 also takes IPv4) on an ephemeral port. Binding the wildcard lets the
/// kernel offer all the host's addresses, so associations are multi-homed.
pub fn seqpacket_listener(family: SocketAddr) -> io::Result<(Socket, u16)> {
    let s = seqpacket(Domain::for_address(family))?;
    let any = if family.is_ipv4() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    } else {
        s.set_only_v6(false)?;
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    };
    s.bind(&any.into())?;
    s.listen(16)?;
    let port = local_port(&s)?;
    Ok((s, port))
}

/// A one-to-many socket for talking to `server`, bound to the `bind`
/// addresses when there are any: the first by `bind`, the rest added with
/// `sctp_bindx` on the same port (ACE's multi-homed client).
pub fn seqpacket_client(server: SocketAddr, bind: &[IpAddr]) -> io::Result<Socket> {
    let s = seqpacket(Domain::for_address(server))?;
    if server.is_ipv6() {
        s.set_only_v6(false)?;
    }
    if let Some((first, rest)) = bind.split_first() {
        s.bind(&SocketAddr::new(*first, 0).into())?;
        let port = local_port(&s)?;
        let more: Vec<SocketAddr> = rest.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
        bindx_add(&s, &more)?;
    }
    Ok(s)
}

/// Receives one whole message into `buf` and returns its full length and
/// sender. A message longer than `buf` is drained to its end (only the first
/// `buf.len()` bytes are kept), so the next call starts at a message boundary.
pub fn recv_message(socket: &Socket, buf: &mut [u8]) -> io::Result<(usize, SockAddr)> {
    let mut total = 0;
    let mut scratch = [0u8; 4096];
    let mut first_from = None;
    loop {
        let space: &mut [u8] = if total < buf.len() {
            &mut buf[total..]
        } else {
            &mut scratch
        };
        let (n, end, from) = recv_piece(socket, space)?;
        total += n;
        let from = first_from.get_or_insert(from);
        if end {
            return Ok((total, from.clone()));
        }
    }
}

/// Receives the next piece of a message into `space`: its length, whether
/// it ends the message, and its sender. A message larger than the kernel's
/// partial delivery point comes in pieces; on a non-blocking socket a
/// message may stop between two of them (`WouldBlock`) and go on later.
pub fn recv_piece(socket: &Socket, space: &mut [u8]) -> io::Result<(usize, bool, SockAddr)> {
    // SAFETY: viewing initialised bytes as possibly-uninitialised ones is
    // sound; the kernel only writes into them.
    let space = unsafe { &mut *(space as *mut [u8] as *mut [MaybeUninit<u8>]) };
    let (n, flags, from) = socket.recv_from_vectored(&mut [MaybeUninitSlice::new(space)])?;
    if n == 0 && !flags.is_end_of_record() {
        // Zero bytes without a record end: the association is shut down.
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok((n, flags.is_end_of_record(), from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The bytes of a socket address as the C library lays it out.
    fn c_bytes(a: SocketAddr) -> Vec<u8> {
        let sa = SockAddr::from(a);
        // SAFETY: `as_ptr` points at storage at least `len` bytes long.
        unsafe { std::slice::from_raw_parts(sa.as_ptr().cast::<u8>(), sa.len() as usize) }.to_vec()
    }

    #[test]
    fn bindx_packs_v4_then_v6_at_their_own_sizes() {
        let a: SocketAddr = "10.1.2.3:5000".parse().unwrap();
        let b: SocketAddr = "[fe80::1%3]:5000".parse().unwrap();
        let buf = bindx_buffer(&[a, b]);
        assert_eq!(buf.len(), 16 + 28);
        assert_eq!(&buf[..16], c_bytes(a).as_slice());
        assert_eq!(&buf[16..], c_bytes(b).as_slice());
    }

    proptest! {
        #[test]
        fn bindx_matches_the_c_layout(
            v4 in any::<[u8; 4]>(), v6 in any::<[u8; 16]>(), port in any::<u16>(),
            flow in any::<u32>(), scope in any::<u32>(), order in any::<bool>(),
        ) {
            let a = SocketAddr::from((v4, port));
            let b = SocketAddr::V6(std::net::SocketAddrV6::new(v6.into(), port, flow, scope));
            let list = if order { vec![a, b] } else { vec![b, a] };
            let want: Vec<u8> = list.iter().flat_map(|x| c_bytes(*x)).collect();
            prop_assert_eq!(bindx_buffer(&list), want);
        }
    }

    #[test]
    fn support_agrees_with_the_kernel() {
        let have = Socket::new(Domain::IPV4, Type::SEQPACKET, Some(protocol())).is_ok();
        match support(true) {
            Ok(()) => assert!(have),
            Err(e) => {
                assert!(!have);
                assert!(
                    e.to_string()
                        .starts_with("SCTP is not supported by this kernel"),
                    "{e}"
                );
            }
        }
    }
}
