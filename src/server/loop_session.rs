//! What every session run on the server's loops (rr over UDP or TCP, a UDP
//! stream received or sent) shares besides its machine: the UDP socket it
//! opens beside its control connection, and its record in the metrics and
//! the log when it starts and ends.

use std::fmt;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use std::os::fd::AsRawFd;

use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use uuid::Uuid;

use super::State;
use super::log;
use super::metrics::{Kind, Moved};
use crate::net::sockopt::SockOptFailed;
use crate::protocol::proto::ErrorCode;
use crate::protocol::refusal::Refusal;
use crate::protocol::sockopts::SockOpts;

/// Socket buffers each way: a burst at the highest rates a session may ask
/// for waits here rather than being dropped by the kernel.
const BUFFER: usize = 4 << 20;

/// Opens the session's socket and names its port: bound to the address the
/// client reached, on a port the kernel picks, with `opts` as a server
/// applies the client's options ([`SockOpts::for_server`]). Blocking.
fn open(control: &TcpStream, opts: &SockOpts) -> Result<(UdpSocket, u16), Refusal> {
    let local = control.local_addr().map_err(|source| Refusal::Resource {
        what: "a descriptor for the control connection",
        source,
    })?;
    let sock = UdpSocket::bind(SocketAddr::new(local.ip(), 0)).map_err(unusable)?;
    let port = sock.local_addr().map_err(unusable)?.port();
    let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(BUFFER);
    let _ = socket2::SockRef::from(&sock).set_send_buffer_size(BUFFER);
    crate::net::sockopt::apply(&sock, &opts.for_server(), local.is_ipv6(), false).map_err(|e| {
        match e {
            SockOptFailed::Congestion { name, available } => {
                Refusal::Congestion { name, available }
            }
            SockOptFailed::Refused { option, source } => Refusal::SockOptRefused { option, source },
        }
    })?;
    Ok((sock, port))
}

/// Opens the session's socket as [`open`] does, `prepared` as its kind
/// needs (stamps, GRO), non-blocking and joined to the loop's `registry`
/// as `token`, readable.
pub(super) fn join(
    control: &TcpStream,
    opts: &SockOpts,
    prepared: impl FnOnce(&UdpSocket),
    registry: &Registry,
    token: Token,
) -> Result<(UdpSocket, u16), Refusal> {
    let (sock, port) = open(control, opts)?;
    prepared(&sock);
    sock.set_nonblocking(true).map_err(unusable)?;
    registry
        .register(&mut SourceFd(&sock.as_raw_fd()), token, Interest::READABLE)
        .map_err(unusable)?;
    Ok((sock, port))
}

/// A UDP socket the session could not have.
pub(super) fn unusable(source: std::io::Error) -> Refusal {
    Refusal::Resource {
        what: "a UDP socket",
        source,
    }
}

/// Whose session: its kind, id and client.
#[derive(Debug, Clone, Copy)]
pub(super) struct Who {
    pub(super) kind: Kind,
    pub(super) id: Uuid,
    pub(super) peer: SocketAddr,
}

/// A session began: counted, and with `-v` logged with `what` it runs.
pub(super) fn started(st: &State, who: Who, what: fmt::Arguments<'_>) {
    st.metrics.started(who.kind);
    if st.cfg.verbosity >= 1 {
        let Who { kind, id, peer } = who;
        log::event(
            st.cfg.log_format,
            "session_start",
            format_args!("session {id} from {peer}: {what}"),
            || {
                serde_json::json!({"client": peer.to_string(), "kind": kind.name(),
                    "session": id.to_string()})
            },
        );
    }
}

/// A session ended after `took`, refused with `code` or not, having moved
/// `moved`: counted, and with `-v` logged (`what` follows "ended").
pub(super) fn ended(
    st: &State,
    who: Who,
    took: Duration,
    code: Option<ErrorCode>,
    moved: Moved,
    what: fmt::Arguments<'_>,
) {
    st.metrics.ended(who.kind, took, moved);
    if st.cfg.verbosity >= 1 {
        let Who { kind, id, peer } = who;
        let result = code.map_or_else(|| "ok".to_string(), super::metrics::code_name);
        log::event(
            st.cfg.log_format,
            "session_end",
            format_args!("session {id} from {peer} ended{what}"),
            || {
                serde_json::json!({"client": peer.to_string(), "kind": kind.name(),
                    "session": id.to_string(), "result": result, "duration_s": took.as_secs_f64(),
                    "bytes_sent": moved.sent, "bytes_received": moved.received})
            },
        );
    }
}
