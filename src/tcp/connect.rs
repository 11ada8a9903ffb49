//! Opening a data connection: a non-blocking socket bound where the user
//! asked (`-B` address, `--cport` port, `--bind-dev` interface), the test's
//! socket options set before connect (the SYN carries the MSS and window
//! scale), and a failure explained in terms of the flag that fixes it.

use mio::net::TcpStream;
use std::io;
use std::net::{IpAddr, SocketAddr};

use crate::net::sockopt::SockOptFailed;
use crate::protocol::proto::{IoPattern, TcpSpec};
use crate::protocol::sockopts::SockOpts;

/// Why a data connection could not be started.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
    /// The socket, its binding or the connect call failed.
    #[error("{}", explain(*to, *from, *port, dev.as_deref(), source))]
    Connect {
        to: SocketAddr,
        from: Option<IpAddr>,
        port: Option<u16>,
        dev: Option<String>,
        source: io::Error,
    },
    /// A socket option the test asked for was refused.
    #[error(transparent)]
    Options(#[from] SockOptFailed),
}

impl ConnectError {
    fn at(to: SocketAddr, local: &Local<'_>, source: io::Error) -> Self {
        ConnectError::Connect {
            to,
            from: local.ip,
            port: local.port,
            dev: local.dev.map(str::to_string),
            source,
        }
    }
}

/// A failed connect's detail; a used-up port range says what to do.
fn explain(
    to: SocketAddr,
    from: Option<IpAddr>,
    port: Option<u16>,
    dev: Option<&str>,
    e: &io::Error,
) -> String {
    match (e.raw_os_error(), from, port, dev) {
        (Some(libc::EADDRINUSE | libc::EADDRNOTAVAIL), _, Some(port), _) => format!(
            "connect to {to} from local port {port}: {e} (a connection of this test or another \
             holds it, or its address pair is still in TIME_WAIT; widen --cport or add \
             --shutdown rude)"
        ),
        (Some(libc::EADDRNOTAVAIL), Some(ip), None, _) => format!(
            "connect to {to} from {ip}: no free local port ({e}): each source address has one \
             ephemeral port range per server address; spread over more with -B A-B"
        ),
        (Some(libc::EADDRNOTAVAIL), None, None, _) => format!(
            "connect to {to}: no free local port ({e}): the ephemeral port range is used up; \
             spread over more source addresses with -B A-B"
        ),
        (Some(libc::ENODEV), _, _, Some(dev)) => format!("--bind-dev {dev}: {e}"),
        _ => format!("connect to {to}: {e}"),
    }
}

/// Where a data connection comes from.
pub(super) struct Local<'a> {
    /// Source address (`-B`).
    pub(super) ip: Option<IpAddr>,
    /// Source port (`--cport`).
    pub(super) port: Option<u16>,
    /// Interface (`--bind-dev`).
    pub(super) dev: Option<&'a str>,
}

/// Starts a non-blocking connect with the test's socket options set first
/// (the SYN carries the MSS and the window scale).
pub(super) fn connect(
    to: SocketAddr,
    local: &Local<'_>,
    opts: &SockOpts,
) -> Result<TcpStream, ConnectError> {
    let socket = new_socket(to, local).map_err(|e| ConnectError::at(to, local, e))?;
    crate::net::sockopt::apply(&socket, opts, to.is_ipv6(), true)?;
    match socket.connect(&to.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(ConnectError::at(to, local, e)),
    }
    Ok(TcpStream::from_std(socket.into()))
}

fn new_socket(to: SocketAddr, local: &Local<'_>) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(to), Type::STREAM.nonblocking(), None)?;
    if let Some(dev) = local.dev {
        socket.bind_device(Some(dev.as_bytes()))?;
    }
    crate::net::bind_local(&socket, to, local.ip, local.port)?;
    Ok(socket)
}

/// Bytes one segment carries on any path netrig meets unless `--mss` says
/// otherwise (IPv4's default MSS, RFC 1122 section 4.2.2.6; IPv6's
/// smallest is 1220).
const ONE_SEGMENT: u64 = 536;

/// Whether a client's data connection needs TCP_NODELAY, given the length
/// of its data hello. Nagle's algorithm holds back only a short segment
/// sent while earlier data is unacknowledged, so it changes nothing on a
/// push-pull connection (crr's) whose first write (the hello and the
/// first request) and every later request fit in one segment: each
/// request goes out after the reply to the one before, which acknowledges
/// it, and the final report follows the last reply or is held for the
/// FIN anyway. Such a connection is spared the setsockopt call (about one
/// in ten of a crr transaction's system calls); every other one sets it,
/// as do connections with `--no-delay` (set with the other options) or an
/// `--mss` that may make a segment smaller.
pub(super) fn needs_nodelay(spec: &TcpSpec, hello_len: usize) -> bool {
    let request = spec.push_bytes.min(spec.transfer);
    !(spec.pattern == IoPattern::Pushpull
        && spec.burst.is_none()
        && spec.rate.is_none()
        && spec.sock.mss.is_none()
        && request + hello_len as u64 <= ONE_SEGMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_push_pull_connection_of_one_segment_requests_goes_without_nodelay() {
        // crr's default: a 64-byte request behind a ~200-byte hello.
        let crr = TcpSpec::plain(IoPattern::Pushpull, 66, 64, 2);
        assert!(!needs_nodelay(&crr, 206));
        // A request that takes two segments: its tail would wait for the
        // first one's acknowledgement.
        let big = TcpSpec::plain(IoPattern::Pushpull, 2000, 1000, 1000);
        assert!(needs_nodelay(&big, 206));
        // A hello that, with the request, passes one segment.
        assert!(needs_nodelay(&crr, 500));
        // A segment smaller than assumed.
        let mut mss = crr.clone();
        mss.sock.mss = Some(88);
        assert!(needs_nodelay(&mss, 206));
        // Other patterns stream: a write may follow an unacknowledged one.
        for p in [IoPattern::Push, IoPattern::Pull, IoPattern::Duplex] {
            assert!(needs_nodelay(&TcpSpec::plain(p, 64, 0, 0), 206));
        }
        // A paced or bursty connection writes on its schedule, not after replies.
        let mut rate = crr.clone();
        rate.rate = Some(crate::protocol::proto::RateLimit {
            bps: 1_000_000,
            period_ms: 10,
            bps_max: None,
        });
        assert!(needs_nodelay(&rate, 206));
    }
}
