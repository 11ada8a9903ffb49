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
use mio::{Interest, Registry, Token};
use uuid::Uuid;

use super::control::TestSlots;
use super::limits::GRACE;
use super::loop_session::Who;
use super::metrics::{Kind, Moved};
use super::{State, log_refusal};
use crate::guard::SendGuard;
use crate::net::ahead::ReadAhead;
use crate::net::out::Out;
use crate::net::realtime_ns;
use crate::proto::{ReadError, RrSpec, encode};
use crate::refusal::Refusal;
use crate::rr::answer::{Action, Answerer, Terms};
use crate::tcp::drive::Socket;

/// Most datagrams, and most control frames, one session takes per wake-up.
pub(super) const BUDGET: usize = 64;
/// Control frames queued to a client that does not read them, past which
/// its messages are not read either.
const OUT_HIGH: usize = 64 * 1024;

/// What the loop does with the session after a turn.
pub(super) enum Turn {
    /// It waits for its sockets, or until this time (None: a timer is set
    /// for it already).
    Wait(Option<Instant>),
    /// It used its budget and may have more: again after the others.
    Again,
    /// Its last frames go out, then the control connection closes.
    Last(Out),
    /// The control connection failed.
    Gone,
}

/// One rr-over-UDP session on a loop.
pub(super) struct RrUdp<'a> {
    st: &'a State,
    peer: SocketAddr,
    sock: UdpSocket,
    m: Answerer,
    guard: SendGuard,
    out: Out,
    /// A reply the rate limit keeps back until then.
    held: Option<(Instant, Vec<u8>)>,
    /// The timer set for the session, so each turn does not add one more.
    armed: Option<Instant>,
    id: Uuid,
    /// When it was admitted, and how it ended (None: as asked).
    began: Instant,
    ended: Option<crate::proto::ErrorCode>,
    _slots: TestSlots<'a>,
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
        let (sock, port) = super::loop_session::open(stream, &spec.sock)?;
        let udp = super::loop_session::unusable;
        sock.set_nonblocking(true).map_err(udp)?;
        let mut sock = UdpSocket::from_std(sock);
        registry
            .register(&mut sock, token, Interest::READABLE)
            .map_err(udp)?;
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
        super::loop_session::started(
            st,
            Who {
                kind: Kind::RrUdp,
                id,
                peer,
            },
            format_args!(
                "rr udp {} B request / {} B reply, {} iterations",
                spec.size, spec.reply, spec.iterations
            ),
        );
        Ok(RrUdp {
            st,
            peer,
            sock,
            m: Answerer::new(terms, now),
            guard: limits.guard(&Arc::new(AtomicBool::new(false))),
            out: Out::new(Vec::new()),
            held: None,
            armed: None,
            id,
            began: now,
            ended: None,
            _slots: slots,
        })
    }

    /// Does what the machine asks, writes what is queued, and feeds it the
    /// control connection's frames and the socket's datagrams, within the
    /// budget, until both would block or the session ends.
    pub(super) fn turn(
        &mut self,
        stream: &TcpStream,
        ahead: &mut ReadAhead,
        buf: &mut [u8],
        now: Instant,
    ) -> Turn {
        let mut frames = 0;
        // Whether the control connection had no more frames this turn.
        let mut ctl_blocked = false;
        loop {
            while let Some(a) = self.m.poll_action() {
                match a {
                    Action::Send(m) => self.out.push(&encode(&m)),
                    // Failing, the replies fail too; the client sees no
                    // answers and says so.
                    Action::Connect(to) => {
                        let _ = self.sock.connect(to);
                    }
                    Action::Datagram(d) => {
                        let _ = self.sock.send(&d);
                    }
                    Action::Refuse(why) => {
                        self.ended = Some(why.code());
                        log_refusal(self.st, self.peer, &why);
                        self.out.push(&encode(&why.message()));
                        return Turn::Last(self.take_out());
                    }
                    Action::Close => return Turn::Last(self.take_out()),
                }
            }
            if self.out.flush(stream).is_err() {
                return Turn::Gone;
            }
            if self.m.deadline().is_some_and(|d| now >= d) {
                self.m.on_timeout(now);
                continue;
            }
            if self.out.pending() >= OUT_HIGH {
                // Its messages wait for it to read its answers.
                ctl_blocked = true;
            }
            if frames < BUDGET && !ctl_blocked {
                let max = crate::proto::MAX_PAYLOAD;
                let read = ahead.read_frame_within(buf, max, |b| stream.recv(b));
                frames += 1;
                match read {
                    Ok(None) => {
                        frames = BUDGET;
                        ctl_blocked = true;
                    }
                    Ok(Some(m)) => self.m.on_message(m, now, realtime_ns()),
                    Err(ReadError::Proto(e)) => self.m.on_malformed(e),
                    Err(_) => self.m.on_closed(),
                }
                continue;
            }
            let more = self.datagrams(buf, now);
            // A handshake datagram has the probes to send.
            if self.m.has_actions() {
                continue;
            }
            if more || !ctl_blocked {
                return Turn::Again;
            }
            return self.wait();
        }
    }

    /// Reads and answers datagrams: true when the budget ran out with
    /// more perhaps waiting.
    fn datagrams(&mut self, buf: &mut [u8], now: Instant) -> bool {
        if let Some((at, reply)) = self.held.take() {
            if now < at {
                self.held = Some((at, reply));
                return false;
            }
            match self.guard.try_admit(reply.len() as u64) {
                Ok(None) => match self.sock.send(&reply) {
                    Ok(_) => self.m.sent(),
                    Err(_) => self.m.send_failed(),
                },
                Ok(Some(at)) => {
                    self.held = Some((at, reply));
                    return false;
                }
                Err(_) => self.m.halt(),
            }
        }
        for _ in 0..BUDGET {
            if !self.m.wants_datagrams() {
                return false;
            }
            let (n, from) = match self.sock.recv_from(buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                // ICMP errors (the client's port closed) and signals: the
                // next datagram may still come.
                Err(_) => continue,
            };
            let Some(reply) = self.m.on_datagram(&buf[..n], from, realtime_ns()) else {
                continue;
            };
            // Replies may be larger than requests: the server's rate and
            // byte limits hold for what it sends, whatever arrives.
            match self.guard.try_admit(reply.len() as u64) {
                Ok(None) => {
                    // A reply the socket cannot take now is lost, as a
                    // blocking send that failed was.
                    match self.sock.send(reply) {
                        Ok(_) => self.m.sent(),
                        Err(_) => self.m.send_failed(),
                    }
                }
                Ok(Some(at)) => {
                    self.held = Some((at, reply.to_vec()));
                    return false;
                }
                Err(_) => self.m.halt(),
            }
        }
        true
    }

    fn wait(&mut self) -> Turn {
        let at = match (self.m.deadline(), &self.held) {
            (Some(d), Some((h, _))) => Some(d.min(*h)),
            (d, h) => d.or(h.as_ref().map(|(h, _)| *h)),
        };
        match at {
            Some(at) if self.armed != Some(at) => {
                self.armed = Some(at);
                Turn::Wait(Some(at))
            }
            _ => Turn::Wait(None),
        }
    }

    fn take_out(&mut self) -> Out {
        std::mem::replace(&mut self.out, Out::new(Vec::new()))
    }
}

impl Drop for RrUdp<'_> {
    fn drop(&mut self) {
        let took = self.began.elapsed();
        super::loop_session::ended(
            self.st,
            Who {
                kind: Kind::RrUdp,
                id: self.id,
                peer: self.peer,
            },
            took,
            self.ended,
            Moved::from(&self.m.summary()),
            format_args!(""),
        );
    }
}
