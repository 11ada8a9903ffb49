//! Applies [`SockOpts`] to a socket and reads back what the kernel granted
//! (it doubles buffer sizes and caps them, clamps the MSS, and may lack a
//! congestion control module), so a report says what a test really ran with.

use socket2::{SockRef, TcpKeepalive};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use crate::protocol::sockopts::SockOpts;

/// Why an option could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum SockOptFailed {
    /// The congestion control algorithm is not in this kernel.
    #[error("--congestion {name}: not available here; this kernel offers: {available}")]
    Congestion {
        /// What was asked for.
        name: String,
        /// What /proc/sys/net/ipv4/tcp_available_congestion_control lists.
        available: String,
    },
    /// The kernel refused an option.
    #[error("{option}: {source}")]
    Refused {
        /// The option's flag.
        option: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
}

pub use crate::protocol::sockopts::Granted;

fn refused(option: &'static str) -> impl FnOnce(io::Error) -> SockOptFailed {
    move |source| SockOptFailed::Refused { option, source }
}

/// The congestion control algorithms this kernel offers, as listed.
pub fn available_congestion() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map_or_else(|_| "(unknown)".into(), |s| s.trim().to_string())
}

/// Checks that `name` can be used, on a socket of its own, so a test fails
/// before it starts rather than on its first connection. Root may load a
/// module the list does not show yet, so the kernel decides, not the list.
pub fn check_congestion(name: &str) -> Result<(), SockOptFailed> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(refused("--congestion"))?;
    s.set_tcp_congestion(name.as_bytes())
        .map_err(|_| SockOptFailed::Congestion {
            name: name.into(),
            available: available_congestion(),
        })
}

/// Sets an int-valued socket option (the ones socket2 does not wrap).
pub fn set_int(fd: RawFd, level: i32, name: i32, v: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid descriptor, and an int-sized value with its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Applies `o` to a TCP socket (`tcp`) or a UDP one of family `v6`. The
/// window, MSS and congestion control belong before connect (the SYN
/// carries the MSS and the window scale); the rest may come at any time.
pub fn apply<S: AsFd + AsRawFd>(
    s: &S,
    o: &SockOpts,
    v6: bool,
    tcp: bool,
) -> Result<(), SockOptFailed> {
    let r = SockRef::from(s);
    let fd = s.as_raw_fd();
    if let Some(w) = o.window {
        r.set_send_buffer_size(w as usize)
            .map_err(refused("--window"))?;
        r.set_recv_buffer_size(w as usize)
            .map_err(refused("--window"))?;
    }
    if let Some(tos) = o.tos {
        if v6 {
            r.set_tclass_v6(u32::from(tos)).map_err(refused("--tos"))?;
        } else {
            r.set_tos_v4(u32::from(tos)).map_err(refused("--tos"))?;
        }
    }
    if o.dont_fragment {
        let (level, name) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER)
        } else {
            (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)
        };
        set_int(fd, level, name, libc::IP_PMTUDISC_DO).map_err(refused("--dont-fragment"))?;
    }
    if let Some(bps) = o.fq_rate_bps {
        // The option takes bytes per second; u32 saturates at ~34 Gbit/s,
        // where the kernel reads it as "unlimited".
        let bytes = (bps / 8).min(u64::from(u32::MAX)) as libc::c_int;
        set_int(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, bytes)
            .map_err(refused("--fq-rate"))?;
    }
    if !tcp {
        return Ok(());
    }
    if let Some(m) = o.mss {
        r.set_tcp_mss(m).map_err(refused("--mss"))?;
    }
    if let Some(c) = &o.congestion {
        r.set_tcp_congestion(c.as_bytes())
            .map_err(|_| SockOptFailed::Congestion {
                name: c.clone(),
                available: available_congestion(),
            })?;
    }
    if o.no_delay {
        r.set_tcp_nodelay(true).map_err(refused("--no-delay"))?;
    }
    if let Some(b) = o.notsent_lowat {
        let b = b.min(i32::MAX as u32) as libc::c_int;
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, b)
            .map_err(refused("--notsent-lowat"))?;
    }
    if let Some(ms) = o.keepalive_ms {
        let idle = Duration::from_millis(ms.max(1000));
        r.set_tcp_keepalive(&TcpKeepalive::new().with_time(idle))
            .map_err(refused("--keepalive"))?;
    }
    Ok(())
}

/// Sends one datagram with TOS byte `tos` on it alone (an IP_TOS or
/// IPV6_TCLASS control message, as the socket's family needs), to `to` or
/// to the connected peer; a relay keeps each datagram's own marking so.
pub fn send_marked(
    sock: &std::net::UdpSocket,
    d: &[u8],
    to: Option<std::net::SocketAddr>,
    tos: u8,
) -> io::Result<usize> {
    let v6 = sock.local_addr()?.is_ipv6();
    let (level, kind) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TOS)
    };
    let addr = to.map(socket2::SockAddr::from);
    // u64s keep the control buffer aligned for a cmsghdr.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: d.as_ptr() as *mut libc::c_void,
        iov_len: d.len(),
    };
    // SAFETY: the msghdr points at `iov`, `control` and `addr`, which
    // outlive the call; CMSG_SPACE(4) (24 bytes) fits the 32-byte control
    // buffer, so CMSG_FIRSTHDR is non-null and the int written after its
    // header stays inside it; sendmsg only reads these buffers.
    let r = unsafe {
        let mut hdr: libc::msghdr = std::mem::zeroed();
        if let Some(a) = &addr {
            hdr.msg_name = a.as_ptr() as *mut libc::c_void;
            hdr.msg_namelen = a.len();
        }
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = control.as_mut_ptr().cast();
        hdr.msg_controllen = libc::CMSG_SPACE(4) as _;
        let c = libc::CMSG_FIRSTHDR(&hdr);
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(
            libc::CMSG_DATA(c).cast::<libc::c_int>(),
            libc::c_int::from(tos),
        );
        libc::sendmsg(sock.as_raw_fd(), &hdr, 0)
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Ends a connection with a reset rather than a FIN (ctsTraffic's "rude"
/// shutdown): SO_LINGER with a zero timeout makes close() send RST.
pub fn rude_close<S: AsFd>(s: &S) {
    let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// What the kernel granted on `s`.
pub fn granted<S: AsFd>(s: &S, v6: bool, tcp: bool) -> Granted {
    let r = SockRef::from(s);
    let tos = if v6 { r.tclass_v6() } else { r.tos_v4() };
    Granted {
        sndbuf: r.send_buffer_size().ok().map(|v| v as u64),
        rcvbuf: r.recv_buffer_size().ok().map(|v| v as u64),
        mss: tcp.then(|| r.tcp_mss().ok()).flatten(),
        congestion: tcp.then(|| r.tcp_congestion().ok()).flatten().map(|b| {
            String::from_utf8_lossy(&b)
                .trim_end_matches('\0')
                .to_string()
        }),
        tos: tos.ok().map(|t| t as u8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::sockopts::ShutdownMode;

    #[test]
    fn options_reach_the_socket_and_are_read_back() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let o = SockOpts {
            window: Some(300_000),
            mss: Some(1000),
            congestion: Some("reno".into()),
            no_delay: true,
            keepalive_ms: Some(5000),
            shutdown: ShutdownMode::Rude,
            dont_fragment: true,
            fq_rate_bps: Some(80_000_000),
            tos: Some(0xb8),
            notsent_lowat: Some(131_072),
            no_offload: false,
        };
        apply(&s, &o, false, true).unwrap();
        s.connect(&l.local_addr().unwrap().into()).unwrap();
        let g = granted(&s, false, true);
        // Linux doubles the asked size for its bookkeeping.
        assert_eq!(g.sndbuf, Some(600_000));
        assert_eq!(g.rcvbuf, Some(600_000));
        assert!(g.mss.is_some_and(|m| (900..=1000).contains(&m)), "{g:?}");
        assert_eq!(g.congestion.as_deref(), Some("reno"));
        assert_eq!(g.tos, Some(0xb8));
        assert!(s.tcp_nodelay().unwrap());
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap(), Duration::from_secs(5));
        let mut lowat: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid descriptor and an int-sized buffer with its size.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
                (&mut lowat as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!((r, lowat), (0, 131_072));
    }

    #[test]
    fn an_unknown_congestion_control_names_what_there_is() {
        let e = check_congestion("no_such_cc").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("no_such_cc") && msg.contains("offers"),
            "{msg}"
        );
        assert!(check_congestion("reno").is_ok());
    }
}
