//! A control connection on the server's event loops: the [`Conversation`]
//! machine fed from the connection's read-ahead and driven by its own
//! deadline timer, without a thread. An admitted test's session stays on
//! the same loop (`rr_udp.rs`, `rr_tcp.rs`, `rr_sctp.rs`, `udp_recv.rs`,
//! `udp_send.rs`, whose fast senders borrow a thread from a bounded pool),
//! so no number of greetings, proofs, idle control connections or tests
//! can make the server start threads.
//!
//! A TCP test's control connection stays here for the whole test: it waits
//! for the client's stop or goodbye (or the session's deadline) and then
//! answers with the server's rows and summary.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use uuid::Uuid;

use super::limits::{OUT_HIGH, Slot};
use super::log;
use super::metrics::{Kind, Moved};
use super::sources::SourceSlot;
use super::tcp::Session;
use super::{Admission, State, admit_test, log_refusal, take_test_slots};
use crate::net::ahead::ReadAhead;
use crate::net::out::Out;
use crate::protocol::auth::DatagramKey;
use crate::protocol::conversation::{Conversation, Step};
use crate::protocol::proto::{Message, ReadError, RrSpec, TestSpec, UdpSpec, encode};
use crate::protocol::refusal::Refusal;
use crate::tcp::drive::Socket;
use crate::udp::serve::Outbound;
use serde_json::json;

/// Longest the summary waits for the session's last connections to be
/// counted after the client's goodbye.
const FINISH_WAIT: Duration = Duration::from_secs(5);
/// How often it looks meanwhile.
const FINISH_CHECK: Duration = Duration::from_millis(2);

/// What the loop does with a control connection after a turn.
pub(super) enum Turn<'a> {
    /// It waits for its socket, or until this time (None: a timer is set
    /// for it already).
    Wait(Option<Instant>),
    /// Its last frames (a refusal, or the answers to a goodbye) go out,
    /// then it closes.
    Last(Out),
    /// The connection failed or the client left.
    Gone,
    /// The admitted test's session takes over the connection, on the loop.
    Run(Box<Job<'a>>),
}

/// A UDP or request/response test admitted to leave the conversation, and
/// the test slots it holds until it ends.
pub(super) struct Job<'a> {
    pub(super) test: Test,
    pub(super) slots: TestSlots<'a>,
}

/// The tests that leave the conversation.
pub(super) enum Test {
    /// rr/ping over UDP: the session stays on the loop (`rr_udp.rs`).
    RrUdp(RrSpec),
    /// rr over TCP (or SCTP one-to-one): on the loop too (`rr_tcp.rs`).
    RrTcp(RrSpec),
    /// A UDP stream the client sends: received on the loop (`udp_recv.rs`).
    UdpRecv(Box<UdpSpec>, Option<DatagramKey>),
    /// A UDP stream the server sends (`-R`): on the loop (`udp_send.rs`).
    UdpSend(Outbound, Option<DatagramKey>),
    /// rr over an SCTP one-to-many socket: on the loop too (`rr_sctp.rs`).
    RrSctp(RrSpec),
}

/// The counts a test holds: the server's tests, its address's tests (the
/// first stream of a group, or a lone test) and its address's streams (every
/// UDP stream). Held, never read: dropping the session gives them back.
pub(super) struct TestSlots<'a> {
    pub(super) _test: Slot<'a>,
    pub(super) _client: Option<SourceSlot<'a>>,
    pub(super) _streams: Option<SourceSlot<'a>>,
    /// Its share of the memory account.
    pub(super) _memory: super::account::Charge,
}

/// A control conversation, server side, on a loop.
pub(super) struct Control<'a> {
    st: &'a State,
    peer: SocketAddr,
    conv: Conversation,
    steps: VecDeque<Step>,
    session: Option<(Uuid, Arc<Session>)>,
    /// A TCP session's slots, held as long as the conversation.
    slots: Option<TestSlots<'a>>,
    out: Out,
    /// The setup deadline before a test, the session's during one.
    deadline: Instant,
    /// Since when the summary waits for the last connections.
    finishing: Option<Instant>,
    /// The loop's timer set for this connection, so that each turn does not
    /// add one more.
    armed: Option<Instant>,
}

impl<'a> Control<'a> {
    /// Starts from the client's hello, which came before `setup`.
    pub(super) fn new(
        st: &'a State,
        peer: SocketAddr,
        hello: &crate::protocol::proto::Hello,
        setup: Instant,
    ) -> Control<'a> {
        let exiting = st
            .cfg
            .exit_after
            .is_some_and(|n| st.admitted.load(SeqCst) >= n);
        let (conv, steps) = Conversation::new(
            hello,
            exiting,
            st.cfg.key.clone(),
            crate::protocol::auth::nonce_bytes(),
            st.cfg.limits.max_duration,
        );
        Control {
            st,
            peer,
            conv,
            steps: steps.into(),
            session: None,
            slots: None,
            out: Out::new(Vec::new()),
            deadline: setup,
            finishing: None,
            armed: None,
        }
    }

    /// Takes the steps due, writes what is queued and reads what came,
    /// until the connection would block, its conversation ends or its test
    /// leaves for a worker.
    pub(super) fn turn(
        &mut self,
        stream: &TcpStream,
        ahead: &mut ReadAhead,
        buf: &mut [u8],
        now: Instant,
    ) -> Turn<'a> {
        loop {
            while let Some(step) = self.steps.pop_front() {
                match step {
                    Step::Send(m) => self.out.push(&encode(&m)),
                    Step::Refuse(why) => return self.refuse(&why),
                    Step::Close => return Turn::Last(self.take_out()),
                    Step::Cancel => self.each_session(|s| s.cancel()),
                    Step::Abort => self.each_session(|s| s.abort()),
                    Step::Finish => {
                        if let Some(at) = self.finish(now) {
                            self.steps.push_front(Step::Finish);
                            return self.wait(at);
                        }
                    }
                    Step::Admit(test) => {
                        let unread = !ahead.is_empty();
                        if let Some(turn) = self.admit(test, unread) {
                            return turn;
                        }
                    }
                }
            }
            if self.conv.is_done() {
                return Turn::Last(self.take_out());
            }
            match self.out.flush(stream) {
                Ok(true) => {}
                // Answers wait for a client that does not read; past the
                // mark, its messages wait too.
                Ok(false) if self.out.pending() >= OUT_HIGH => return self.wait(self.deadline),
                Ok(false) => {}
                Err(_) => return Turn::Gone,
            }
            if now >= self.deadline {
                let steps = self.conv.on_timeout();
                self.steps.extend(steps);
                continue;
            }
            // Until the client proves the key, its frames are held to the
            // first frame's size.
            let max = match self.st.cfg.key.is_some() && self.conv.datagram_key().is_none() {
                true => crate::protocol::proto::MAX_FIRST_PAYLOAD,
                false => crate::protocol::proto::MAX_PAYLOAD,
            };
            let steps = match ahead.read_frame_within(buf, max, |b| stream.recv(b)) {
                Ok(None) => return self.wait(self.deadline),
                Ok(Some(m)) => self.conv.on_message(m),
                Err(ReadError::Proto(e)) => self.conv.on_malformed(e),
                Err(_) => self.conv.on_closed(),
            };
            self.steps.extend(steps);
        }
    }

    fn wait(&mut self, at: Instant) -> Turn<'a> {
        if self.armed == Some(at) {
            return Turn::Wait(None);
        }
        self.armed = Some(at);
        Turn::Wait(Some(at))
    }

    fn take_out(&mut self) -> Out {
        std::mem::replace(&mut self.out, Out::new(Vec::new()))
    }

    fn refuse(&mut self, why: &Refusal) -> Turn<'a> {
        log_refusal(self.st, self.peer, why);
        self.out.push(&encode(&why.message()));
        Turn::Last(self.take_out())
    }

    fn each_session(&self, f: impl FnOnce(&Session)) {
        if let Some((_, s)) = &self.session {
            f(s);
        }
    }

    /// Queues the session's rows and summary once its connections are
    /// counted, or says when to look again.
    fn finish(&mut self, now: Instant) -> Option<Instant> {
        let Some((_, sess)) = &self.session else {
            return None;
        };
        // The client may say goodbye while this end of its last
        // connections is still being counted.
        let since = *self.finishing.get_or_insert(now);
        if sess.counters.in_flight.load(SeqCst) > 0 && now < since + FINISH_WAIT {
            return Some(now + FINISH_CHECK);
        }
        let mut frames = Vec::new();
        for m in sess.rows_frames() {
            frames.extend_from_slice(&encode(&m));
        }
        frames.extend_from_slice(&encode(&Message::Summary(sess.summary())));
        self.out.push(&frames);
        None
    }

    /// Decides on a test request: refused (a turn that says so), a TCP
    /// session registered here (None: the conversation goes on), or a test
    /// for a worker.
    fn admit(&mut self, test: TestSpec, unread: bool) -> Option<Turn<'a>> {
        let st = self.st;
        let ip = self.peer.ip().to_canonical();
        let slots = match take_test_slots(st, ip, &test, Instant::now()) {
            Ok(slots) => slots,
            Err(why) => {
                let steps = self.conv.refused(why);
                self.steps.extend(steps);
                return None;
            }
        };
        let key = self.conv.datagram_key();
        match admit_test(st, self.peer, test, key) {
            Admission::Refused(why) => {
                let steps = self.conv.refused(why);
                self.steps.extend(steps);
                None
            }
            Admission::Tcp(id, sess) => {
                self.deadline = sess.guard.deadline();
                self.session = Some((id, sess));
                self.slots = Some(slots);
                let steps = self.conv.accepted(id);
                self.steps.extend(steps);
                None
            }
            // The session reads the connection from the answer on: bytes
            // ahead of the answer have no place in its order.
            Admission::Session(_) if unread => {
                let why = Refusal::Unexpected {
                    got: "bytes".into(),
                    context: "behind a test request, before its answer",
                };
                let steps = self.conv.refused(why);
                self.steps.extend(steps);
                None
            }
            Admission::Session(test) => {
                self.conv.handed_off();
                if !self.out.is_empty() {
                    // Everything before the request was answered and
                    // written before it was read; this cannot happen, but
                    // a session must not start behind unwritten answers.
                    return Some(Turn::Gone);
                }
                Some(Turn::Run(Box::new(Job { test, slots })))
            }
        }
    }
}

impl Drop for Control<'_> {
    /// A session lives exactly as long as its control connection.
    fn drop(&mut self) {
        let Some((id, sess)) = self.session.take() else {
            return;
        };
        sess.cancel();
        let st = self.st;
        st.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        let sum = sess.summary();
        let took = sess.started.elapsed();
        let moved = Moved {
            sent: sum.bytes_sent,
            received: sum.bytes_received,
            network_errors: sum.network_errors,
            data_errors: sum.data_errors,
        };
        st.metrics.ended(Kind::Tcp, took, moved);
        if st.cfg.verbosity >= 1 {
            let result = match (sum.data_errors, sum.network_errors) {
                (0, 0) => "ok",
                (0, _) => "network_errors",
                _ => "data_errors",
            };
            log::event(
                st.cfg.log_format,
                "session_end",
                format_args!(
                    "session {id} from {} ended after {:.3}s: {} connections, {} succeeded, {} network errors, {} data errors, {} cancelled; {} bytes sent, {} bytes received",
                    sess.peer,
                    took.as_secs_f64(),
                    sum.connections,
                    sum.success,
                    sum.network_errors,
                    sum.data_errors,
                    sum.cancelled,
                    sum.bytes_sent,
                    sum.bytes_received
                ),
                || {
                    json!({
                        "session": id.to_string(),
                        "client": sess.peer.to_string(),
                        "kind": Kind::Tcp.name(),
                        "result": result,
                        "duration_s": took.as_secs_f64(),
                        "connections": sum.connections,
                        "succeeded": sum.success,
                        "network_errors": sum.network_errors,
                        "data_errors": sum.data_errors,
                        "cancelled": sum.cancelled,
                        "bytes_sent": sum.bytes_sent,
                        "bytes_received": sum.bytes_received,
                    })
                },
            );
        }
    }
}
