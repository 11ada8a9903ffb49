//! rr over an SCTP one-to-many socket (`rr --proto sctp-seqpacket`) on the
//! server's event loops: an admitted session's socket joins the loop that
//! holds its control connection, and the [`SeqAnswerer`] machine is fed
//! from both there, so the session costs its two descriptors and its
//! request and reply buffers (charged to `--max-memory` at admission),
//! never a thread. Each wake-up sends and reads at most [`BUDGET`] times
//! (a message piece, a reply) before the loop's other connections get their
//! turn; a message the kernel delivers in pieces may stop between two of
//! them and go on at the next wake-up. The session's deadlines are its
//! control connection's timer.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use socket2::{SockAddr, Socket};
use uuid::Uuid;

use super::State;
use super::control::TestSlots;
use super::loop_session::unusable;
use super::loop_turn::{BUDGET, Budget, Part, Session};
use super::metrics::{Kind, Moved};
use crate::guard::{Gate, SendGuard};
use crate::protocol::proto::RrSpec;
use crate::protocol::refusal::Refusal;
use crate::protocol::rr::seq_answer::{SeqAnswerer, Terms};

/// One rr-over-SCTP one-to-many session on a loop.
pub(super) type RrSctp<'a> = Session<'a, Messages>;

/// What such a session keeps of its own: its socket, the message being
/// read, and the server's limits on its replies.
pub(super) struct Messages {
    sock: Socket,
    guard: SendGuard,
    /// The request being read: its first bytes (one more than a request,
    /// so a longer one shows), its length so far and its sender.
    req: Vec<u8>,
    got: usize,
    from: Option<SockAddr>,
    /// Where the owed reply goes: the association its request came from.
    to: Option<SockAddr>,
    /// The owed reply was let go by the limits (it waits only for room).
    admitted: bool,
    /// Until when the rate limit holds the owed reply back.
    held: Option<Instant>,
}

impl<'a> RrSctp<'a> {
    /// Opens the session's one-to-many socket on every address of the
    /// control connection's family, joins it to the loop as `token`, and
    /// queues the acceptance.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        st: &'a State,
        peer: SocketAddr,
        stream: &TcpStream,
        spec: &RrSpec,
        slots: TestSlots<'a>,
        registry: &Registry,
        token: Token,
        now: Instant,
    ) -> Result<RrSctp<'a>, Refusal> {
        crate::rr::serve::validate(spec)?;
        crate::sctp::support(true)?;
        let family = stream.local_addr().unwrap_or(peer);
        let (sock, port) =
            crate::sctp::seqpacket_listener(family).map_err(|source| Refusal::Resource {
                what: "an SCTP one-to-many socket",
                source,
            })?;
        // The client's marking, buffers and Nagle switch on the replies
        // too, as the worker did (best effort).
        let _ = crate::net::sockopt::apply(&sock, &spec.sock.for_server(), peer.is_ipv6(), false);
        let _ = crate::sctp::set_nodelay(sock.as_raw_fd(), !spec.nagle);
        sock.set_nonblocking(true).map_err(unusable)?;
        // Edge-triggered: room to write wakes the session only after a
        // reply found none.
        let interest = Interest::READABLE | Interest::WRITABLE;
        registry
            .register(&mut SourceFd(&sock.as_raw_fd()), token, interest)
            .map_err(unusable)?;
        let limits = st.cfg.limits;
        let guard = limits.guard(&Arc::new(AtomicBool::new(false)));
        let id = Uuid::new_v4();
        let terms = Terms {
            session: id,
            port,
            size: spec.size,
            reply: spec.reply,
            iterations: spec.iterations,
            idle: st.cfg.idle_timeout,
            deadline: guard.deadline(),
        };
        let part = Messages {
            sock,
            guard,
            req: vec![0; spec.size as usize + 1],
            got: 0,
            from: None,
            to: None,
            admitted: false,
            held: None,
        };
        Ok(Session::new(
            st,
            (Kind::RrSctp, id, peer),
            slots,
            SeqAnswerer::new(terms, now),
            part,
            now,
            format_args!(
                "rr sctp-seqpacket {} B request / {} B reply, {} iterations, port {port}",
                spec.size, spec.reply, spec.iterations
            ),
        ))
    }
}

/// What became of the owed reply.
enum Owed {
    /// None is owed (any more): requests may be read.
    Clear,
    /// It waits for the rate limit's time or for room in the socket.
    Waits,
    /// The send was interrupted: try again.
    Again,
}

impl Messages {
    /// Sends the owed reply once the limits let it go.
    fn reply(&mut self, m: &mut SeqAnswerer, now: Instant) -> Owed {
        let Some(reply) = m.owed() else {
            return Owed::Clear;
        };
        if !self.admitted {
            // Replies may be larger than requests: the server's rate and
            // byte limits hold for what it sends, whatever arrives.
            match self.guard.gate(reply.len() as u64, &mut self.held, now) {
                Gate::Go => self.admitted = true,
                Gate::Hold => return Owed::Waits,
                Gate::Halt => {
                    m.halt(now);
                    return Owed::Clear;
                }
            }
        }
        let Some(to) = &self.to else {
            m.send_failed(now);
            return Owed::Clear;
        };
        match self.sock.send_to(reply, to) {
            Ok(_) => m.sent(now),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Owed::Waits,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Owed::Again,
            // The association is gone, or the socket failed.
            Err(_) => m.send_failed(now),
        }
        self.admitted = false;
        Owed::Clear
    }
}

impl Part for Messages {
    type M = SeqAnswerer;

    fn sock(&self) -> socket2::SockRef<'_> {
        socket2::SockRef::from(&self.sock)
    }

    /// Sends the owed reply, then reads request pieces into the machine,
    /// a reply after each whole request: true when the budget ran out with
    /// more perhaps waiting.
    fn datagrams(
        &mut self,
        m: &mut SeqAnswerer,
        buf: &mut [u8],
        now: Instant,
        b: &mut Budget,
    ) -> bool {
        while b.datagrams < BUDGET {
            // Each pass, a send or a read, counts against the budget.
            b.datagrams += 1;
            match self.reply(m, now) {
                Owed::Clear => {}
                Owed::Waits => return false,
                Owed::Again => continue,
            }
            if !m.wants_requests() {
                return false;
            }
            // Past the kept bytes, the rest of a long message is read into
            // the loop's buffer and dropped.
            let space = match self.req.get_mut(self.got..) {
                Some(s) if !s.is_empty() => s,
                _ => &mut buf[..],
            };
            let (n, end, from) = match crate::sctp::recv_piece(&self.sock, space) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The socket failed or shut down: no more requests.
                Err(_) => {
                    m.halt(now);
                    return false;
                }
            };
            self.got += n;
            self.from.get_or_insert(from);
            if end {
                let len = std::mem::take(&mut self.got);
                let kept = &self.req[..len.min(self.req.len())];
                self.to = self.from.take();
                m.on_request(kept, len, now);
            }
        }
        true
    }

    fn wake(&self) -> Option<Instant> {
        self.held
    }

    fn moved(&self, m: &SeqAnswerer) -> Moved {
        Moved::from(&m.moved())
    }
}
