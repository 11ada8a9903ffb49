//! The server's side of one request/response session over UDP (`rr --proto
//! udp`, `ping`) as a machine free of I/O, so that an event loop can hold
//! thousands of them: it takes the control connection's messages, the
//! session socket's datagrams and the time, and says what to write on the
//! control connection, what datagrams to send and when it next wants a look.
//!
//! The order is the UDP session's (`udp::serve`): the acceptance names the
//! port and a token; the client's handshake datagram carrying the token
//! tells where it is, and the server sends nothing there but probes with a
//! nonce until the client echoes the nonce over the control connection;
//! then each request is answered once ([`SeqWindow`]), duplicates and
//! reordering counted, until the announced number is answered, the client
//! stops, or the session's deadline.
//!
//! A reply is its header and leading words, built here, and its pattern
//! bytes, which point into the pattern ([`Reply`]): nothing of a 16 KiB
//! reply is copied before the kernel copies it. Its request is checked
//! against the pattern once the reply has been handed to the driver's send,
//! off the round trip's critical path; the verdict, and what it counts, is
//! the same.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use uuid::Uuid;

use super::echo::{Arrival, SeqWindow, UDP_REPLY_MIN, reply_words};
use crate::protocol::proto::{Message, ProtoError, SessionSummary};
use crate::protocol::refusal::Refusal;
use crate::protocol::udp::header::{
    FLAG_HANDSHAKE, HEADER_LEN, Header, payload_slice, verify_payload,
};
use crate::protocol::udp::session::{Opening, acts, admitted, unexpected};

pub use crate::protocol::udp::setup::{HANDSHAKE_WAIT, PROBES};

/// What a session was admitted with.
#[derive(Debug, Clone)]
pub struct Terms {
    /// The session's name (logs, the acceptance).
    pub session: Uuid,
    /// The session socket's port.
    pub port: u16,
    /// What the client's handshake datagrams carry.
    pub token: u64,
    /// What the probes carry and the client must echo.
    pub nonce: u64,
    /// Reply payload bytes asked for (at least [`UDP_REPLY_MIN`] are sent).
    pub reply: u32,
    /// Requests to answer at most.
    pub iterations: u64,
    /// From the acceptance to the start of the requests, at most.
    pub setup: Duration,
    /// From the acceptance to the end, at most.
    pub deadline: Duration,
    /// The longest test the server runs, named when the deadline passes.
    pub max_duration: Duration,
}

/// Something for the driver to do, in order.
#[derive(Debug)]
pub enum Action {
    /// Write this on the control connection (boxed: a message is large
    /// beside the other actions).
    Send(Box<Message>),
    /// Connect the session socket to the proven client address: nothing
    /// from elsewhere is read from here on, and replies go there.
    Connect(SocketAddr),
    /// Send this datagram to the proven address.
    Datagram([u8; HEADER_LEN]),
    /// Write the refusal's message, log it, and close.
    Refuse(Refusal),
    /// Close once what is written is out (the summary, or nothing if the
    /// client left).
    Close,
}

acts!(Action);

/// Bytes of a reply built for each request: its header and leading words.
const HEAD: usize = HEADER_LEN + UDP_REPLY_MIN as usize;

/// A reply to send as one datagram: `head` then `tail` (a vectored send).
#[derive(Debug, Clone, Copy)]
pub struct Reply<'a> {
    /// The header and the leading words, built for this request.
    pub head: &'a [u8],
    /// The rest of the payload: the pattern's own bytes, not a copy.
    pub tail: &'static [u8],
}

impl Reply<'_> {
    /// The datagram's length.
    pub fn size(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// The datagram as one buffer (a reply kept back by the rate limit).
    pub fn to_vec(&self) -> Vec<u8> {
        [self.head, self.tail].concat()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Accepted; the client's address is not known yet.
    Setup,
    /// Probes sent to this address; waiting for the nonce.
    Proven(SocketAddr),
    /// Answering requests from this address.
    Running(SocketAddr),
    /// Ended: nothing more is done.
    Over,
}

impl crate::protocol::udp::session::Phased for Phase {
    fn is_over(&self) -> bool {
        *self == Phase::Over
    }
    fn in_setup(&self) -> bool {
        *self == Phase::Setup
    }
    fn proven(to: SocketAddr) -> Self {
        Phase::Proven(to)
    }
}

/// One session's server side.
#[derive(Debug)]
pub struct Answerer {
    t: Terms,
    phase: Phase,
    /// The acceptance, handshake, probes and nonce, and the deadlines.
    open: Opening,
    /// Whether requests are still answered (not after a stop, a send limit,
    /// or the last announced request).
    answering: bool,
    seen: SeqWindow,
    /// The next reply's place in the order of replies sent.
    place: u64,
    sum: SessionSummary,
    actions: VecDeque<Action>,
    /// Payload bytes of each reply (at least [`UDP_REPLY_MIN`]).
    payload: usize,
    /// The last reply's header and leading words.
    head: [u8; HEAD],
    /// The last reply's length.
    last: usize,
}

impl Answerer {
    /// A session accepted at `now`: its acceptance is the first action.
    pub fn new(t: Terms, now: Instant) -> Answerer {
        let rl = t.reply.max(UDP_REPLY_MIN) as usize;
        let mut actions = VecDeque::new();
        Answerer {
            phase: Phase::Setup,
            open: Opening::new(admitted!(t), now, &mut actions),
            answering: t.iterations > 0,
            seen: SeqWindow::default(),
            place: 0,
            sum: SessionSummary::default(),
            actions,
            payload: rl,
            head: [0; HEAD],
            last: 0,
            t,
        }
    }

    /// The next thing to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Whether actions are queued.
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Whether the session has ended (its last actions may still be queued).
    pub fn is_over(&self) -> bool {
        self.phase == Phase::Over
    }

    /// Whether requests from the client are answered now: a driver need not
    /// read the session socket otherwise, except to find the handshake.
    pub fn is_answering(&self) -> bool {
        matches!(self.phase, Phase::Running(_)) && self.answering
    }

    /// Whether the session socket is to be read now: for the handshake, and
    /// while requests are answered. Between the probes and the start, and
    /// once nothing more is answered, datagrams wait in (or overflow) the
    /// socket's buffer, as they did for the blocking session.
    pub fn wants_datagrams(&self) -> bool {
        self.phase == Phase::Setup || self.is_answering()
    }

    /// What the server answers a goodbye with.
    pub fn summary(&self) -> SessionSummary {
        self.sum.clone()
    }

    /// When the session wants [`Answerer::on_timeout`]: the end of the
    /// handshake wait or of setup, then the session's deadline.
    pub fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Over => None,
            Phase::Running(_) => Some(self.open.ends()),
            Phase::Setup | Phase::Proven(_) => Some(self.open.setup_deadline()),
        }
    }

    /// Time has passed.
    pub fn on_timeout(&mut self, now: Instant) {
        let why = match self.phase {
            Phase::Over => None,
            Phase::Running(_) => self.open.timeout(now),
            Phase::Setup | Phase::Proven(_) => self.open.setup_timeout(now),
        };
        if let Some(why) = why {
            self.refuse(why);
        }
    }

    fn refuse(&mut self, why: Refusal) {
        self.phase = Phase::Over;
        self.actions.push_back(Action::Refuse(why));
    }

    /// The control connection carried something that is not a message.
    pub fn on_malformed(&mut self, e: ProtoError) {
        if self.phase != Phase::Over {
            self.refuse(e.into());
        }
    }

    /// The control connection closed or failed: the client is gone.
    pub fn on_closed(&mut self) {
        if self.phase != Phase::Over {
            self.phase = Phase::Over;
            self.actions.push_back(Action::Close);
        }
    }

    /// A message from the client at `now` (`real_ns`: the server's
    /// CLOCK_REALTIME, for clock exchanges).
    pub fn on_message(&mut self, m: Message, now: Instant, real_ns: u64) {
        let send = |s: &mut Self, m| s.actions.push_back(Action::Send(Box::new(m)));
        let Some(m) = self
            .open
            .hear(&mut self.phase, m, now, real_ns, &mut self.actions)
        else {
            return;
        };
        match (self.phase, m) {
            (Phase::Setup | Phase::Proven(_), Message::UdpReady { nonce, .. }) => {
                match self.open.ready(nonce) {
                    Ok(peer) => {
                        self.phase = Phase::Running(peer);
                        send(self, Message::UdpGo);
                    }
                    Err(why) => self.refuse(why),
                }
            }
            // The client's own account of what it sent: nothing to do.
            (_, Message::UdpDone(_)) => {}
            (_, Message::Stop) => {
                self.answering = false;
                send(self, Message::StopAck);
            }
            (_, Message::Goodbye) => {
                self.answering = false;
                send(self, Message::Summary(self.summary()));
                self.phase = Phase::Over;
                self.actions.push_back(Action::Close);
            }
            (_, other) => self.refuse(unexpected(&other)),
        }
    }

    /// A datagram `d` from `from`, received at `real_ns` (the server's
    /// CLOCK_REALTIME): if it is a request owed a reply, `send` is handed
    /// the reply and what it returns is returned; the request is checked
    /// after `send`, so that the check does not delay the reply. The
    /// driver then says [`Answerer::sent`] once the reply left,
    /// [`Answerer::send_failed`], or [`Answerer::halt`] if the server's
    /// limits keep it back.
    pub fn on_datagram<R>(
        &mut self,
        d: &[u8],
        from: SocketAddr,
        real_ns: u64,
        send: impl FnOnce(Reply<'_>) -> R,
    ) -> Option<R> {
        let h = Header::read(d).ok()?;
        if h.flags & FLAG_HANDSHAKE != 0 {
            if self.phase == Phase::Setup
                && let Some(to) = self.open.on_datagram(d, from, real_ns, &mut self.actions)
            {
                self.phase = Phase::Proven(to);
            }
            return None;
        }
        match self.phase {
            Phase::Running(peer) if peer == from && self.answering => {}
            _ => return None,
        }
        match self.seen.arrive(h.seq) {
            Arrival::Fresh { reordered } => {
                self.sum.reordered += u64::from(reordered);
                self.sum.bytes_received += d.len() as u64;
            }
            Arrival::Duplicate => {
                self.sum.duplicates += 1;
                return None;
            }
            // Too far behind to tell from a duplicate: unanswered, so the
            // client counts it lost on the way up.
            Arrival::Stale => return None,
        }
        // The payload is the pattern for (stream ^ 1, seq), its first
        // words overwritten: those are built, the rest is pointed at.
        let words = UDP_REPLY_MIN as usize;
        let tail = payload_slice(h.stream ^ 1, h.seq, words, self.payload - words);
        let out = &mut self.head;
        for (i, w) in reply_words(real_ns, self.place).into_iter().enumerate() {
            let at = HEADER_LEN + 8 * i;
            out[at..at + 8].copy_from_slice(&w.to_be_bytes());
        }
        Header {
            flags: 0,
            stream: h.stream,
            seq: h.seq,
            send_ns: real_ns,
            payload_len: (words + tail.len()) as u32,
        }
        .write(out);
        self.last = HEAD + tail.len();
        let r = send(Reply {
            head: &self.head,
            tail,
        });
        if verify_payload(h.stream, h.seq, &d[HEADER_LEN..]).is_err() {
            self.sum.data_errors += 1;
        }
        Some(r)
    }

    /// The last reply left: it is counted, and the last announced request
    /// ends the answering.
    pub fn sent(&mut self) {
        self.sum.requests += 1;
        self.sum.bytes_sent += self.last as u64;
        self.place += 1;
        if self.sum.requests >= self.t.iterations {
            self.answering = false;
        }
    }

    /// The last reply did not leave (the socket refused it): a network
    /// error; the request stays unanswered.
    pub fn send_failed(&mut self) {
        self.sum.network_errors += 1;
    }

    /// The server's limits allow no more replies.
    pub fn halt(&mut self) {
        self.answering = false;
    }
}

// The tests name these as the machine did before its shared part moved
// to `udp::session`.
#[cfg(test)]
use crate::protocol::refusal::Limit;

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
