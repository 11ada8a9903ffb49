//! rr/ping over UDP on the server's event loops: an admitted session's
//! socket joins the loop that holds its control connection, and the
//! [`Answerer`] machine is fed from both there, so a ping session costs two
//! descriptors and a few hundred bytes, never a thread. Each wake-up reads
//! at most [`BUDGET`] datagrams before the loop's other connections get
//! their turn, and the session's deadlines are its control connection's
//! timer. The session holds its test slots for as long as it lives.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use mio::net::{TcpStream, UdpSocket};
use mio::{Registry, Token};
use uuid::Uuid;

use super::State;
use super::control::TestSlots;
use super::limits::GRACE;
use super::loop_turn::{BUDGET, Budget, Part, Session};
use super::metrics::{Kind, Moved};
use crate::guard::SendGuard;
use crate::net::realtime_ns;
use crate::protocol::proto::RrSpec;
use crate::protocol::refusal::Refusal;
use crate::protocol::rr::answer::{Answerer, Terms};

/// One rr-over-UDP session on a loop.
pub(super) type RrUdp<'a> = Session<'a, Answers>;

/// What an rr-over-UDP session keeps of its own: its socket, and the
/// server's limits on its replies.
pub(super) struct Answers {
    sock: UdpSocket,
    guard: SendGuard,
    /// A reply the rate limit keeps back until then.
    held: Option<(Instant, Vec<u8>)>,
}

impl<'a> RrUdp<'a> {
    /// Opens the session's socket on the control connection's address,
    /// joins it to the loop as `token`, and queues the acceptance.
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
    ) -> Result<RrUdp<'a>, Refusal> {
        crate::rr::serve::validate(spec)?;
        let (sock, port) = super::loop_session::join(stream, &spec.sock, |_| {}, registry, token)?;
        let limits = st.cfg.limits;
        let id = Uuid::new_v4();
        let terms = Terms {
            session: id,
            port,
            token: rand::random(),
            nonce: rand::random(),
            reply: spec.reply,
            iterations: spec.iterations,
            setup: limits.setup,
            deadline: limits.deadline(),
            max_duration: limits.deadline().saturating_sub(GRACE),
        };
        let part = Answers {
            sock: UdpSocket::from_std(sock),
            guard: limits.guard(&Arc::new(AtomicBool::new(false))),
            held: None,
        };
        Ok(Session::new(
            st,
            (Kind::RrUdp, id, peer),
            slots,
            Answerer::new(terms, now),
            part,
            now,
            format_args!(
                "rr udp {} B request / {} B reply, {} iterations",
                spec.size, spec.reply, spec.iterations
            ),
        ))
    }
}

impl Part for Answers {
    type M = Answerer;

    fn sock(&self) -> socket2::SockRef<'_> {
        socket2::SockRef::from(&self.sock)
    }

    /// Reads and answers datagrams: true when the budget ran out with
    /// more perhaps waiting.
    fn datagrams(
        &mut self,
        m: &mut Answerer,
        buf: &mut [u8],
        now: Instant,
        b: &mut Budget,
    ) -> bool {
        if let Some((at, reply)) = self.held.take() {
            if now < at {
                self.held = Some((at, reply));
                return false;
            }
            match self.guard.try_admit(reply.len() as u64) {
                Ok(None) => match self.sock.send(&reply) {
                    Ok(_) => m.sent(),
                    Err(_) => m.send_failed(),
                },
                Ok(Some(at)) => {
                    self.held = Some((at, reply));
                    return false;
                }
                Err(_) => m.halt(),
            }
        }
        while b.datagrams < BUDGET {
            b.datagrams += 1;
            if !m.wants_datagrams() {
                return false;
            }
            let (n, from) = match self.sock.recv_from(buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                // ICMP errors (the client's port closed) and signals: the
                // next datagram may still come.
                Err(_) => continue,
            };
            let Some(reply) = m.on_datagram(&buf[..n], from, realtime_ns()) else {
                continue;
            };
            // Replies may be larger than requests: the server's rate and
            // byte limits hold for what it sends, whatever arrives.
            match self.guard.try_admit(reply.len() as u64) {
                Ok(None) => {
                    // A reply the socket cannot take now is lost, as a
                    // blocking send that failed was.
                    match self.sock.send(reply) {
                        Ok(_) => m.sent(),
                        Err(_) => m.send_failed(),
                    }
                }
                Ok(Some(at)) => {
                    self.held = Some((at, reply.to_vec()));
                    return false;
                }
                Err(_) => m.halt(),
            }
        }
        true
    }

    fn wake(&self) -> Option<Instant> {
        self.held.as_ref().map(|(at, _)| *at)
    }

    fn moved(&self, m: &Answerer) -> Moved {
        Moved::from(&m.summary())
    }
}
