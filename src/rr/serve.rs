//! The server's side of request/response tests: answer exactly the requests
//! the client announced, verifying each request's bytes.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use uuid::Uuid;

use crate::guard::SendGuard;
use crate::protocol::pattern::{Direction, Pattern, stream_start};
use crate::protocol::proto::{
    Message, RrProto, RrSpec, SessionSummary, read_message, write_message,
};
use crate::protocol::refusal::{Invalid, Refusal};
use crate::protocol::udp::header::{HEADER_LEN, MAX_DATAGRAM};
use crate::server::limits::Limits;

/// Largest TCP request or reply.
pub const MAX_TCP_MESSAGE: u32 = 16 << 20;
/// Largest SCTP one-to-many request or reply: one message, which must fit the
/// socket buffers.
pub const MAX_SEQPACKET_MESSAGE: u32 = 1 << 20;
/// How often a one-to-many session looks at its control connection.
const CONTROL_CHECK: Duration = Duration::from_millis(100);

/// Checks a request/response spec; the error names the problem.
pub fn validate(s: &RrSpec) -> Result<(), Invalid> {
    let max = match s.proto {
        RrProto::Tcp => MAX_TCP_MESSAGE,
        RrProto::Udp => (MAX_DATAGRAM - HEADER_LEN) as u32,
        RrProto::SctpSeqpacket => MAX_SEQPACKET_MESSAGE,
    };
    if s.size == 0 || s.size > max || s.reply > max {
        return Err(Invalid::RequestSize {
            max,
            proto: s.proto.name(),
        });
    }
    if s.iterations == 0 {
        return Err(Invalid::ZeroIterations);
    }
    s.sock.validate()?;
    Ok(())
}

/// Writes `len` pattern bytes of stream `start` from `offset`.
pub fn write_pattern(
    w: &mut impl Write,
    start: u64,
    offset: u64,
    len: usize,
) -> std::io::Result<()> {
    let p = Pattern::get();
    let mut done = 0;
    while done < len {
        let s = p.slice(start, offset + done as u64, len - done);
        w.write_all(s)?;
        done += s.len();
    }
    Ok(())
}

/// A request/response spec a worker thread serves: rr over an SCTP
/// one-to-many socket of the session's own. rr over TCP (on its control
/// connection) and over UDP run on the server's loops (`server::rr_tcp`,
/// `rr::answer`). Made only by [`StreamRr::new`], so no other spec can
/// reach [`serve`].
#[derive(Debug, Clone)]
pub struct StreamRr {
    spec: RrSpec,
}

impl StreamRr {
    /// The spec, if a worker serves its transport; any other comes back.
    pub fn new(spec: RrSpec) -> Result<StreamRr, RrSpec> {
        match spec.proto {
            RrProto::SctpSeqpacket => Ok(StreamRr { spec }),
            RrProto::Tcp | RrProto::Udp => Err(spec),
        }
    }

    /// The spec.
    pub fn spec(&self) -> &RrSpec {
        &self.spec
    }
}

/// Serves one request/response test on an accepted control connection. An
/// error the client was sent, which ended the test, is returned for the log,
/// beside what the test moved (bytes of requests read and replies sent,
/// replies that failed to leave, corrupt requests).
pub fn serve(
    stream: &TcpStream,
    peer: SocketAddr,
    rr: StreamRr,
    verbosity: u8,
    idle: Duration,
    limits: Limits,
) -> (SessionSummary, Result<(), Refusal>) {
    let stop = Arc::new(AtomicBool::new(false));
    let StreamRr { spec } = rr;
    if let Err(why) = validate(&spec) {
        return (SessionSummary::default(), refuse(stream, why.into()));
    }
    let guard = limits.guard(&stop);
    let mut moved = SessionSummary::default();
    let ended = seqpacket(stream, peer, &spec, verbosity, idle, &guard, &mut moved);
    (moved, ended)
}

/// Sends `why` to the client (best effort: it may be gone) and returns it.
fn refuse(stream: &TcpStream, why: Refusal) -> Result<(), Refusal> {
    let mut s = stream;
    let _ = write_message(&mut s, &why.message());
    Err(why)
}

/// Serves request/response over an SCTP one-to-many socket of its own: each
/// request is one message, verified as the pattern at `n × size`, and answered
/// with one message of the pattern at `n × reply` to the association it came
/// from. SCTP's cookie handshake means a peer proves it receives at its
/// address before it can send a request, and the server answers at most the
/// announced number of requests. What it moved is added to `moved`.
fn seqpacket(
    stream: &TcpStream,
    peer: SocketAddr,
    spec: &RrSpec,
    verbosity: u8,
    idle: Duration,
    guard: &SendGuard,
    moved: &mut SessionSummary,
) -> Result<(), Refusal> {
    let mut s = stream;
    if let Err(why) = crate::sctp::support(true) {
        return refuse(stream, why.into());
    }
    let family = stream.local_addr().unwrap_or(peer);
    let (sock, port) = match crate::sctp::seqpacket_listener(family) {
        Ok(x) => x,
        Err(source) => {
            let what = "an SCTP one-to-many socket";
            return refuse(stream, Refusal::Resource { what, source });
        }
    };
    let id = Uuid::new_v4();
    if write_message(&mut s, &Message::SeqpacketAccept { session: id, port }).is_err() {
        return Ok(());
    }
    if verbosity >= 1 {
        crate::out!(
            "session {id} from {peer}: rr sctp-seqpacket {} B request / {} B reply, {} iterations, port {port}",
            spec.size,
            spec.reply,
            spec.iterations
        );
    }
    let _ = crate::net::sockopt::apply(&sock, &spec.sock.for_server(), peer.is_ipv6(), false);
    let _ = crate::sctp::set_nodelay(std::os::fd::AsRawFd::as_raw_fd(&sock), !spec.nagle);
    let _ = sock.set_read_timeout(Some(CONTROL_CHECK));
    let (req_start, rep_start) = (
        stream_start(id, Direction::ClientToServer),
        stream_start(id, Direction::ServerToClient),
    );
    // One byte more than a request, so a longer message shows as corrupt.
    let mut buf = vec![0u8; spec.size as usize + 1];
    let mut out = Vec::with_capacity(spec.reply as usize);
    let (mut answered, mut corrupt) = (0u64, 0u64);
    let mut last = std::time::Instant::now();
    while answered < spec.iterations && guard.halted().is_none() {
        match crate::sctp::recv_message(&sock, &mut buf) {
            Ok((n, from)) => {
                last = std::time::Instant::now();
                moved.bytes_received += n as u64;
                if n != spec.size as usize
                    || Pattern::get()
                        .verify(req_start, answered * spec.size as u64, &buf[..n])
                        .is_err()
                {
                    corrupt += 1;
                }
                out.clear();
                let _ = write_pattern(
                    &mut out,
                    rep_start,
                    answered * spec.reply as u64,
                    spec.reply as usize,
                );
                if guard.admit(out.len() as u64).is_err() {
                    break;
                }
                if sock.send_to(&out, &from).is_err() {
                    moved.network_errors += 1;
                    break;
                }
                moved.bytes_sent += out.len() as u64;
                answered += 1;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                // A goodbye (early stop), a vanished client or a silent one ends it.
                if crate::net::peer_state(stream) != crate::net::PeerState::Quiet
                    || last.elapsed() > idle
                {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let _ = stream.set_read_timeout(Some(idle));
    moved.data_errors = corrupt;
    goodbye(stream, id, peer, (answered, corrupt), verbosity);
    Ok(())
}

/// Ends a stream or one-to-many session: answers the client's goodbye with
/// the requests answered and the corrupt ones, and logs the end.
fn goodbye(
    stream: &TcpStream,
    id: Uuid,
    peer: SocketAddr,
    (answered, corrupt): (u64, u64),
    verbosity: u8,
) {
    let mut s = stream;
    if let Ok(Message::Goodbye) = read_message(&mut s) {
        let sum = SessionSummary {
            requests: answered,
            data_errors: corrupt,
            ..Default::default()
        };
        let _ = write_message(&mut s, &Message::Summary(sum));
    }
    if verbosity >= 1 {
        crate::out!(
            "session {id} from {peer} ended: {answered} requests answered, {corrupt} corrupt"
        );
    }
}
