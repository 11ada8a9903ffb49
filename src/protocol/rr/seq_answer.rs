//! The server's side of request/response over an SCTP one-to-many socket
//! (`rr --proto sctp-seqpacket`) as a machine free of I/O, so that an
//! event loop holds the session beside the others instead of a thread: it
//! takes the control connection's messages, the session socket's whole
//! messages and the time, and says what to write on the control connection,
//! which reply to send and when it next wants a look.
//!
//! The wire is the worker's of old: the acceptance names the session and
//! the socket's port; request `n` is one message of `size` bytes of the
//! client's pattern at `n × size`, answered with one message of `reply`
//! bytes of the server's pattern at `n × reply` to the association it came
//! from, until the announced number; then the client's goodbye on the
//! control connection is answered with the summary (requests answered,
//! corrupt ones). SCTP's cookie handshake means a peer proves it receives
//! at its address before it can send a request, so there is no probe
//! exchange as over UDP. A message of the wrong length or bytes counts as
//! corrupt and is still answered, so the client learns the total.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::protocol::pattern::{Direction, Pattern, stream_start};
use crate::protocol::proto::{Message, ProtoError, SessionSummary};
use crate::protocol::refusal::Refusal;
use crate::protocol::udp::header::HEADER_LEN;
use crate::protocol::udp::session::acts;

/// What a session was admitted with.
#[derive(Debug, Clone)]
pub struct Terms {
    /// The session's name (the acceptance; it seeds both patterns).
    pub session: Uuid,
    /// The session socket's port.
    pub port: u16,
    /// Bytes of each request.
    pub size: u32,
    /// Bytes of each reply.
    pub reply: u32,
    /// Requests to answer at most.
    pub iterations: u64,
    /// How long no request may come before the requests end; also how
    /// long the goodbye is waited for.
    pub idle: Duration,
    /// When the requests end, at the latest.
    pub deadline: Instant,
}

/// Something for the driver to do, in order. Only `Send` and `Close` are
/// asked; the others are the actions every loop session shares.
#[derive(Debug)]
pub enum Action {
    /// Write this on the control connection (boxed: a message is large
    /// beside the other actions).
    Send(Box<Message>),
    /// Never asked: an association is its own proof of address.
    Connect(SocketAddr),
    /// Never asked: there are no probes.
    Datagram([u8; HEADER_LEN]),
    /// Write the refusal's message, log it, and close.
    Refuse(Refusal),
    /// Close once what is written is out.
    Close,
}

acts!(Action);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading requests, sending replies.
    Requests,
    /// The requests are over: waiting for the goodbye until then.
    Goodbye(Instant),
    /// Ended.
    Over,
}

/// One session's server side.
#[derive(Debug)]
pub struct SeqAnswerer {
    t: Terms,
    req_start: u64,
    rep_start: u64,
    phase: Phase,
    /// The reply to the last request, until it left.
    owed: bool,
    reply: Vec<u8>,
    answered: u64,
    corrupt: u64,
    /// When a request last came or a reply left.
    last: Instant,
    moved: SessionSummary,
    actions: VecDeque<Action>,
}

impl SeqAnswerer {
    /// A session accepted at `now`: its acceptance is the first action.
    pub fn new(t: Terms, now: Instant) -> SeqAnswerer {
        let mut actions = VecDeque::new();
        actions.push_back(Action::Send(Box::new(Message::SeqpacketAccept {
            session: t.session,
            port: t.port,
        })));
        SeqAnswerer {
            req_start: stream_start(t.session, Direction::ClientToServer),
            rep_start: stream_start(t.session, Direction::ServerToClient),
            phase: match t.iterations {
                0 => Phase::Goodbye(now + t.idle),
                _ => Phase::Requests,
            },
            owed: false,
            reply: Vec::with_capacity(t.reply as usize),
            answered: 0,
            corrupt: 0,
            last: now,
            moved: SessionSummary::default(),
            actions,
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

    /// Whether the session socket is to be read now: while requests run and
    /// no reply is owed. A client that sends without reading its replies
    /// fills its own association, not the server's memory.
    pub fn wants_requests(&self) -> bool {
        self.phase == Phase::Requests && !self.owed
    }

    /// The reply owed to the last request, until it left ([`Self::sent`]).
    pub fn owed(&self) -> Option<&[u8]> {
        (self.phase == Phase::Requests && self.owed).then_some(&self.reply[..])
    }

    /// A whole request message at `now`, `len` bytes long, of which `kept`
    /// are the first (a driver keeps at most one byte more than a request,
    /// so a longer one shows): its reply is owed from here on.
    pub fn on_request(&mut self, kept: &[u8], len: usize, now: Instant) {
        if !self.wants_requests() {
            return;
        }
        self.last = now;
        self.moved.bytes_received += len as u64;
        let size = u64::from(self.t.size);
        let good = len as u64 == size
            && kept.len() == len
            && Pattern::get()
                .verify(self.req_start, self.answered * size, kept)
                .is_ok();
        self.corrupt += u64::from(!good);
        self.reply.clear();
        let (len, at) = (
            self.t.reply as usize,
            self.answered * u64::from(self.t.reply),
        );
        while self.reply.len() < len {
            let done = self.reply.len();
            let s = Pattern::get().slice(self.rep_start, at + done as u64, len - done);
            self.reply.extend_from_slice(s);
        }
        self.owed = true;
    }

    /// The owed reply left at `now`: it is counted, and the last announced
    /// request ends the requests.
    pub fn sent(&mut self, now: Instant) {
        if self.owed().is_none() {
            return;
        }
        self.owed = false;
        self.last = now;
        self.answered += 1;
        self.moved.bytes_sent += self.reply.len() as u64;
        if self.answered >= self.t.iterations {
            self.phase = Phase::Goodbye(now + self.t.idle);
        }
    }

    /// The owed reply could not leave (the socket failed it): a network
    /// error, and the requests end.
    pub fn send_failed(&mut self, now: Instant) {
        if self.owed().is_some() {
            self.moved.network_errors += 1;
        }
        self.end_requests(now);
    }

    /// The session socket failed, or the server's limits allow no more
    /// replies: the requests end, and the goodbye is waited for.
    pub fn halt(&mut self, now: Instant) {
        self.end_requests(now);
    }

    fn end_requests(&mut self, now: Instant) {
        if self.phase == Phase::Requests {
            self.owed = false;
            self.phase = Phase::Goodbye(now + self.t.idle);
        }
    }

    /// When the session wants [`SeqAnswerer::on_timeout`]: the idle timeout
    /// or the deadline while requests run (only the deadline while a reply
    /// is owed: waiting for the limits or for room is not the client's
    /// idleness), the end of the wait for the goodbye.
    pub fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Requests if self.owed => Some(self.t.deadline),
            Phase::Requests => Some(self.t.deadline.min(self.last + self.t.idle)),
            Phase::Goodbye(until) => Some(until),
            Phase::Over => None,
        }
    }

    /// Time has passed. Past the deadline or idle, the requests end (a
    /// reply still owed is a network error, as a send that timed out was)
    /// and the goodbye is waited for; past that wait, the session closes.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.deadline().is_none_or(|d| now < d) {
            return;
        }
        match self.phase {
            Phase::Requests => self.send_failed(now),
            Phase::Goodbye(_) => self.close(),
            Phase::Over => {}
        }
    }

    fn close(&mut self) {
        if self.phase != Phase::Over {
            self.phase = Phase::Over;
            self.actions.push_back(Action::Close);
        }
    }

    fn refuse(&mut self, why: Refusal) {
        if self.phase != Phase::Over {
            self.phase = Phase::Over;
            self.actions.push_back(Action::Refuse(why));
        }
    }

    /// A message from the client on the control connection. A goodbye is
    /// answered with the summary whenever it comes (a client stops early
    /// by sending it); anything else is refused.
    pub fn on_message(&mut self, m: Message, _now: Instant, _real_ns: u64) {
        if self.phase == Phase::Over {
            return;
        }
        match m {
            Message::Goodbye => {
                let sum = self.summary();
                self.actions
                    .push_back(Action::Send(Box::new(Message::Summary(sum))));
                self.close();
            }
            other => self.refuse(Refusal::Unexpected {
                got: format!("{other:?}"),
                context: "in an SCTP request/response session",
            }),
        }
    }

    /// The control connection carried something that is not a message.
    pub fn on_malformed(&mut self, e: ProtoError) {
        self.refuse(e.into());
    }

    /// The control connection closed or failed: the client is gone.
    pub fn on_closed(&mut self) {
        self.close();
    }

    /// What the server answers a goodbye with.
    pub fn summary(&self) -> SessionSummary {
        SessionSummary {
            requests: self.answered,
            data_errors: self.corrupt,
            ..Default::default()
        }
    }

    /// What the session moved, for the server's metrics: bytes of requests
    /// read and of replies sent, replies that did not leave, corrupt
    /// requests.
    pub fn moved(&self) -> SessionSummary {
        SessionSummary {
            data_errors: self.corrupt,
            ..self.moved.clone()
        }
    }
}

#[cfg(test)]
#[path = "seq_answer_tests.rs"]
mod tests;
