//! The server's side of request/response over a byte stream (`rr --proto
//! tcp`, SCTP one-to-one) as a machine free of I/O, so an event loop can
//! hold thousands of sessions: it takes the bytes the client sent (split
//! anywhere) and the time, and says which bytes to write, how many it will
//! take, and when it next wants a look.
//!
//! The wire is the worker's of old: the acceptance frame, then request `n`
//! is `size` bytes of the client's pattern at `n × size` and its reply
//! `reply` bytes of the server's pattern at `n × reply`, until the announced
//! number; then a goodbye frame, answered with the summary (requests
//! answered, corrupt ones). Requests are verified as they arrive and
//! replies are written from the pattern as the socket takes them, so a
//! session holds no request or reply, whatever their size. A reply is owed
//! only once its request is whole, and no byte of the next request is taken
//! before the reply is out: a client that sends without reading stalls
//! itself, not the server's memory. The bytes that make a request whole
//! are checked after the driver has had its turn to write the reply
//! ([`StreamAnswerer::on_bytes_then`]), so the check does not delay it.

use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::protocol::pattern::{Direction, Pattern, stream_start};
use crate::protocol::proto::{Message, SessionSummary, decode_frame, encode};

/// Most reply bytes handed out in one [`StreamAnswerer::out`].
pub const OUT_CHUNK: usize = 64 * 1024;
/// Most bytes held while waiting for the goodbye frame (one is a few
/// dozen bytes): more without a frame ends the session.
pub const MAX_GOODBYE: usize = 1024;

/// What a session was admitted with.
#[derive(Debug, Clone)]
pub struct Terms {
    /// The session's name (the acceptance; it seeds both patterns).
    pub session: Uuid,
    /// Bytes of each request.
    pub size: u32,
    /// Bytes of each reply.
    pub reply: u32,
    /// Requests to answer at most.
    pub iterations: u64,
    /// How long nothing may move before the session gives up; also how
    /// long the goodbye is waited for.
    pub idle: Duration,
    /// When the requests end, at the latest.
    pub deadline: Instant,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The goodbye came and the summary is the last thing to write.
    Summarised,
    /// The client closed, or the connection failed.
    Closed,
    /// No goodbye came within the idle timeout.
    NoGoodbye,
    /// Something other than a goodbye came where one belonged (a client
    /// still sending requests past the deadline, or garbage).
    Unexpected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading requests, writing replies.
    Requests,
    /// The requests are over: waiting for the goodbye until then.
    Goodbye(Instant),
    /// Ended.
    Over(End),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// None owed: the next request is read.
    None,
    /// A request is whole; its reply waits for the server's send limits.
    Unadmitted,
    /// Being written: this many of its bytes are out.
    Writing(u64),
}

/// One session's server side.
#[derive(Debug)]
pub struct StreamAnswerer {
    t: Terms,
    req_start: u64,
    rep_start: u64,
    phase: Phase,
    /// Request bytes taken in all: the next byte's place in the request
    /// stream.
    got: u64,
    /// The request being read had a wrong byte.
    bad: bool,
    reply: Reply,
    answered: u64,
    corrupt: u64,
    /// Frames to write (the acceptance, the summary) and how many of their
    /// bytes are out: they go before any reply byte.
    frames: Vec<u8>,
    frames_at: usize,
    /// What came after the requests, for the goodbye.
    tail: Vec<u8>,
    /// When a byte last moved either way.
    last: Instant,
    moved: SessionSummary,
}

impl StreamAnswerer {
    /// A session accepted at `now`: its acceptance is the first thing out.
    pub fn new(t: Terms, now: Instant) -> StreamAnswerer {
        let frames = encode(&Message::TestAccept { session: t.session });
        StreamAnswerer {
            req_start: stream_start(t.session, Direction::ClientToServer),
            rep_start: stream_start(t.session, Direction::ServerToClient),
            phase: match t.iterations {
                0 => Phase::Goodbye(now + t.idle),
                _ => Phase::Requests,
            },
            got: 0,
            bad: false,
            reply: Reply::None,
            answered: 0,
            corrupt: 0,
            frames,
            frames_at: 0,
            tail: Vec::new(),
            last: now,
            moved: SessionSummary::default(),
            t,
        }
    }

    /// How many bytes the machine takes now ([`StreamAnswerer::on_bytes`]):
    /// the rest of the request being read, none while a reply is owed, and
    /// room for the goodbye after the requests. A driver reading at most
    /// this much never holds bytes the machine did not take.
    pub fn wants(&self) -> usize {
        match self.phase {
            Phase::Requests if self.reply == Reply::None => {
                let size = u64::from(self.t.size);
                (size - self.got % size) as usize
            }
            Phase::Goodbye(_) => MAX_GOODBYE - self.tail.len(),
            _ => 0,
        }
    }

    /// Bytes from the client at `now`: how many were taken (at most
    /// [`StreamAnswerer::wants`]; the rest are the driver's to keep).
    pub fn on_bytes(&mut self, b: &[u8], now: Instant) -> usize {
        self.on_bytes_then(b, now, |_| {})
    }

    /// [`StreamAnswerer::on_bytes`], and when they make a request whole,
    /// `answer` is called with the reply owed, before those bytes are
    /// checked: a driver admits and writes the reply there, and the check
    /// (its verdict counted as ever) comes after it, off the round trip.
    pub fn on_bytes_then(
        &mut self,
        b: &[u8],
        now: Instant,
        answer: impl FnOnce(&mut Self),
    ) -> usize {
        let n = b.len().min(self.wants());
        if n == 0 {
            return 0;
        }
        self.last = now;
        let b = &b[..n];
        match self.phase {
            Phase::Requests => {
                let at = self.got;
                let check = |s: &Self| Pattern::get().verify(s.req_start, at, b).is_err();
                self.got += n as u64;
                if !self.got.is_multiple_of(u64::from(self.t.size)) {
                    self.bad |= check(self);
                    return n;
                }
                self.moved.bytes_received += u64::from(self.t.size);
                self.reply = Reply::Unadmitted;
                answer(self);
                // A flipped byte does not put a byte stream out of step:
                // count it and go on, so the client learns the total.
                let bad = std::mem::take(&mut self.bad) | check(self);
                self.corrupt += u64::from(bad);
            }
            Phase::Goodbye(_) => {
                self.tail.extend_from_slice(b);
                self.goodbye();
            }
            Phase::Over(_) => {}
        }
        n
    }

    fn goodbye(&mut self) {
        let end = match decode_frame(&self.tail) {
            Ok(Some((Message::Goodbye, _))) => {
                self.frames
                    .extend_from_slice(&encode(&Message::Summary(self.summary())));
                End::Summarised
            }
            Ok(None) if self.tail.len() < MAX_GOODBYE => return,
            _ => End::Unexpected,
        };
        self.tail = Vec::new();
        self.phase = Phase::Over(end);
    }

    /// The client closed its side, or reading failed.
    pub fn on_eof(&mut self) {
        self.over(End::Closed);
    }

    /// Writing failed: a network error, and the end.
    pub fn on_write_failed(&mut self) {
        if !self.is_over() {
            self.moved.network_errors += 1;
        }
        self.over(End::Closed);
    }

    fn over(&mut self, end: End) {
        if !self.is_over() {
            self.phase = Phase::Over(end);
        }
    }

    /// The reply's length, while the server's send limits have yet to let
    /// it go ([`StreamAnswerer::admitted`], [`StreamAnswerer::halt`]).
    pub fn admission(&self) -> Option<u64> {
        (self.phase == Phase::Requests && self.reply == Reply::Unadmitted)
            .then_some(u64::from(self.t.reply))
    }

    /// The owed reply may go: it is written from here on.
    pub fn admitted(&mut self, now: Instant) {
        if self.admission().is_some() {
            // Waiting for the limits was not the client's idleness.
            self.last = now;
            self.reply = Reply::Writing(0);
            self.wrote(0, now);
        }
    }

    /// The server's limits allow no more replies: the requests are over.
    pub fn halt(&mut self, now: Instant) {
        if self.phase == Phase::Requests {
            self.reply = Reply::None;
            self.phase = Phase::Goodbye(now + self.t.idle);
        }
    }

    /// What to write now: frames first, then the owed reply's next bytes
    /// (at most [`OUT_CHUNK`]). Empty when nothing is to be written.
    pub fn out(&self) -> &[u8] {
        if self.frames_at < self.frames.len() {
            return &self.frames[self.frames_at..];
        }
        match (self.phase, self.reply) {
            (Phase::Requests, Reply::Writing(done)) => {
                let reply = u64::from(self.t.reply);
                let left = (reply - done).min(OUT_CHUNK as u64) as usize;
                let at = self.answered * reply + done;
                Pattern::get().slice(self.rep_start, at, left)
            }
            _ => &[],
        }
    }

    /// `n` bytes of [`StreamAnswerer::out`] were written at `now`.
    pub fn wrote(&mut self, n: usize, now: Instant) {
        if n > 0 {
            self.last = now;
        }
        let in_frames = (self.frames.len() - self.frames_at).min(n);
        self.frames_at += in_frames;
        if self.frames_at == self.frames.len() && self.frames_at > 0 {
            self.frames = Vec::new();
            self.frames_at = 0;
        }
        let Reply::Writing(done) = self.reply else {
            return;
        };
        let done = done + (n - in_frames) as u64;
        if done < u64::from(self.t.reply) {
            self.reply = Reply::Writing(done);
            return;
        }
        self.reply = Reply::None;
        self.answered += 1;
        self.moved.bytes_sent += u64::from(self.t.reply);
        if self.answered >= self.t.iterations {
            self.phase = Phase::Goodbye(now + self.t.idle);
        }
    }

    /// When the session wants [`StreamAnswerer::on_timeout`]: the idle
    /// timeout or the deadline while requests run (only the deadline while
    /// the limits hold a reply back), the end of the wait for the goodbye.
    pub fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Requests if self.reply == Reply::Unadmitted => Some(self.t.deadline),
            Phase::Requests => Some(self.t.deadline.min(self.last + self.t.idle)),
            Phase::Goodbye(until) => Some(until),
            Phase::Over(_) => None,
        }
    }

    /// Time has passed. Past the deadline or idle, the requests end (a
    /// reply cut short is a network error, as a write that timed out
    /// was), and the goodbye is waited for; past that wait, the session
    /// ends.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.deadline().is_none_or(|d| now < d) {
            return;
        }
        match self.phase {
            Phase::Requests => {
                if matches!(self.reply, Reply::Writing(_)) {
                    self.moved.network_errors += 1;
                }
                self.reply = Reply::None;
                self.phase = Phase::Goodbye(now + self.t.idle);
            }
            Phase::Goodbye(_) => self.over(End::NoGoodbye),
            Phase::Over(_) => {}
        }
    }

    /// Whether the session has ended ([`StreamAnswerer::out`] may still
    /// hold its summary).
    pub fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Over(_))
    }

    /// How it ended, once it has.
    pub fn end(&self) -> Option<End> {
        match self.phase {
            Phase::Over(e) => Some(e),
            _ => None,
        }
    }

    /// Requests answered so far (their replies wholly written).
    pub fn answered(&self) -> u64 {
        self.answered
    }

    /// What the server answers a goodbye with.
    pub fn summary(&self) -> SessionSummary {
        SessionSummary {
            requests: self.answered,
            data_errors: self.corrupt,
            ..Default::default()
        }
    }

    /// What the session moved, for the server's metrics: bytes of whole
    /// requests read and of whole replies written, replies cut short,
    /// corrupt requests.
    pub fn moved(&self) -> SessionSummary {
        SessionSummary {
            data_errors: self.corrupt,
            ..self.moved.clone()
        }
    }

    /// The frame bytes not yet written (the summary, at the end).
    pub fn take_frames(&mut self) -> Vec<u8> {
        let rest = self.frames.split_off(self.frames_at);
        self.frames = Vec::new();
        self.frames_at = 0;
        rest
    }
}

#[cfg(test)]
#[path = "stream_answer_tests.rs"]
mod tests;
