//! Opening a data connection: a non-blocking socket bound where the user
//! asked (`-B` address, `--cport` port, `--bind-dev` interface), the test's
//! socket options set before connect (the SYN carries the MSS and window
//! scale), and a failure explained in terms of the flag that fixes it.

use mio::net::TcpStream;
use std::io;
use std::net::{IpAddr, SocketAddr};

use crate::net::sockopt::SockOptFailed;
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
