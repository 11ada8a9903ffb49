//! rr/ping over UDP on the server's event loops: an admitted session's
//! socket joins the loop that holds its control connection, and the
//! [`Answerer`] machine is fed from both there, so a ping session costs two
//! descriptors and a few hundred bytes, never a thread. Each wake-up reads
//! at most [`BUDGET`] datagrams before the loop's other connections get
//! their turn, and the session's deadlines are its control connection's
//! timer. The session holds its test slots for as long as it lives.

use std::io::{self, IoSlice};
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
use crate::guard::{Gate, SendGuard};
use crate::net::realtime_ns;
use crate::protocol::proto::RrSpec;
use crate::protocol::refusal::Refusal;
use crate::protocol::rr::answer::{Answerer, Reply, Terms};

/// One rr-over-UDP session on a loop.
pub(super) type RrUdp<'a> = Session<'a, Answers>;

/// What an rr-over-UDP session keeps of its own: its socket, and the
/// server's limits on its replies.
pub(super) struct Answers {
    sock: UdpSocket,
    guard: SendGuard,
    /// A reply the rate limit keeps back, and until when.
    held: Option<Vec<u8>>,
    held_until: Option<Instant>,
    /// Where a short reply's two parts are put together ([`GATHER`]).
    gather: Vec<u8>,
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
            held_until: None,
            gather: Vec::with_capacity(GATHER),
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
        if let Some(reply) = self.held.take() {
            match self
                .guard
                .gate(reply.len() as u64, &mut self.held_until, now)
            {
                Gate::Go => match self.sock.send(&reply) {
                    Ok(_) => m.sent(),
                    Err(_) => m.send_failed(),
                },
                Gate::Hold => {
                    self.held = Some(reply);
                    return false;
                }
                Gate::Halt => m.halt(),
            }
        }
        while b.datagrams < BUDGET {
            if !m.wants_datagrams() {
                return false;
            }
            // One datagram a read, until the socket says it would block.
            // recvmmsg would batch, but a ping-pong client has one request
            // in flight, and here recvmmsg of two (the second read telling
            // that the socket is drained) costs a round trip about 1.1 us
            // more than recvfrom and a recvfrom that would block (a C echo
            // server written each way, pinned with its client on one CPU,
            // 64 B).
            b.datagrams += 1;
            let (n, from) = match self.sock.recv_from(buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                // ICMP errors (the client's port closed) and signals: the
                // next datagram may still come.
                Err(_) => continue,
            };
            // A reply the rate limit holds back holds the requests behind
            // it in the socket: they are read once it has gone.
            if !self.answer(m, &buf[..n], from, now) {
                return false;
            }
        }
        true
    }

    fn wake(&self) -> Option<Instant> {
        self.held.as_ref().and(self.held_until)
    }

    fn moved(&self, m: &Answerer) -> Moved {
        Moved::from(&m.summary())
    }
}

impl Answers {
    /// Answers datagram `d` from `from`, at `now`, if it is a request owed
    /// a reply: false when the rate limit holds the reply back.
    fn answer(&mut self, m: &mut Answerer, d: &[u8], from: SocketAddr, now: Instant) -> bool {
        // The machine checks the request after this send: the reply does
        // not wait for it.
        let gate = m.on_datagram(d, from, realtime_ns(), |reply| {
            // Replies may be larger than requests: the server's rate and
            // byte limits hold for what it sends, whatever arrives.
            match self
                .guard
                .gate(reply.size() as u64, &mut self.held_until, now)
            {
                // A reply the socket cannot take now is lost, as a
                // blocking send that failed was. A long one's pattern
                // bytes go from the pattern itself, uncopied.
                Gate::Go => match send_reply(&self.sock, reply, &mut self.gather) {
                    Ok(_) => Sent::Yes,
                    Err(_) => Sent::Failed,
                },
                Gate::Hold => {
                    self.held = Some(reply.to_vec());
                    Sent::Held
                }
                Gate::Halt => Sent::Halted,
            }
        });
        match gate {
            None => true,
            Some(Sent::Yes) => {
                m.sent();
                true
            }
            Some(Sent::Failed) => {
                m.send_failed();
                true
            }
            Some(Sent::Held) => false,
            Some(Sent::Halted) => {
                m.halt();
                true
            }
        }
    }
}

/// What became of a reply handed to the send.
enum Sent {
    Yes,
    Failed,
    /// The rate limit keeps it back.
    Held,
    /// The server's limits allow no more replies.
    Halted,
}

/// Replies up to this long are put together in one buffer before they are
/// sent: the kernel takes one buffer for less than two (a C echo server
/// pinned with its client on one CPU, 64 B: sendto a round trip about
/// 0.17 us cheaper than sendmsg of two iovecs), and copying them costs less
/// than that; longer ones are gathered by the kernel from the pattern.
const GATHER: usize = 1024;

/// Sends `r` on the connected socket as one datagram: a short one from
/// `gather`, a longer one from its two parts.
fn send_reply(sock: &UdpSocket, r: Reply<'_>, gather: &mut Vec<u8>) -> io::Result<usize> {
    if r.size() <= GATHER {
        gather.clear();
        gather.extend_from_slice(r.head);
        gather.extend_from_slice(r.tail);
        return sock.send(gather);
    }
    socket2::SockRef::from(sock).send_vectored(&[IoSlice::new(r.head), IoSlice::new(r.tail)])
}

// The loop's buffer takes any datagram whole: a read never truncates one.
const _: () = assert!(super::tcp::SERVER_BUFFER >= crate::protocol::udp::header::MAX_DATAGRAM);
