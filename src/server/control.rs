//! A control connection on the server's event loops: the [`Conversation`]
//! machine fed from the connection's read-ahead and driven by its own
//! deadline timer, without a thread. A connection costs a thread only once
//! its test is admitted — a UDP stream the server sends or a TCP/SCTP
//! request/response test runs on a worker thread of its own, and those are
//! bounded by `--max-tests`, as every worker holds a test slot; rr/ping
//! over UDP and a UDP stream the server receives stay on the loop
//! (`rr_udp.rs`, `udp_recv.rs`) — so no number of greetings, proofs or idle
//! control connections can make the server start threads.
//!
//! A TCP test's control connection stays here for the whole test: it waits
//! for the client's stop or goodbye (or the session's deadline) and then
//! answers with the server's rows and summary.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use uuid::Uuid;

use super::limits::{OUT_HIGH, Slot};
use super::log::{self, LogFormat};
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
use crate::rr::serve::StreamRr;
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
    /// The test runs on a worker thread, which takes the connection (rr
    /// over UDP and a received UDP stream: on the loop, which keeps it).
    Run(Box<Job<'a>>),
}

/// A UDP or request/response test admitted to leave the conversation, and
/// the test slots it holds until it ends.
pub(super) struct Job<'a, T = Test> {
    pub(super) test: T,
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
    /// A test on a worker thread of its own.
    Worker(WorkerTest),
}

/// The tests that run on a worker thread.
pub(super) enum WorkerTest {
    /// rr/crr over TCP, rr over SCTP.
    Rr(StreamRr),
}

/// The counts a test holds: the server's tests, its address's tests (the
/// first stream of a group, or a lone test) and its address's streams (every
/// UDP stream).
pub(super) struct TestSlots<'a> {
    pub(super) test: Slot<'a>,
    pub(super) client: Option<SourceSlot<'a>>,
    pub(super) streams: Option<SourceSlot<'a>>,
    /// Its share of the memory account.
    pub(super) memory: super::account::Charge,
}

impl TestSlots<'_> {
    /// What to count again on a worker thread ([`Held::adopt`]), as these
    /// counts are handed over there without being given back.
    pub(super) fn hand_over(self, ip: IpAddr) -> Held {
        let held = Held {
            client: self.client.as_ref().map(|_| ip),
            streams: self.streams.as_ref().map(|_| ip),
            memory: self.memory,
        };
        std::mem::forget(self.test);
        std::mem::forget(self.client);
        std::mem::forget(self.streams);
        held
    }
}

/// Test slots handed from a loop to a worker thread.
pub(super) struct Held {
    client: Option<IpAddr>,
    streams: Option<IpAddr>,
    memory: super::account::Charge,
}

impl Held {
    /// The slots again, borrowing the worker's reference to the state.
    pub(super) fn adopt(self, st: &State) -> TestSlots<'_> {
        TestSlots {
            test: Slot::adopt(&st.tests),
            client: self.client.map(|ip| st.tests_per_client.adopt(ip)),
            streams: self.streams.map(|ip| st.streams_per_client.adopt(ip)),
            memory: self.memory,
        }
    }
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
            // A worker reads the connection itself: bytes read ahead of
            // the answer would be lost to it.
            Admission::Worker(_) if unread => {
                let why = Refusal::Unexpected {
                    got: "bytes".into(),
                    context: "behind a test request, before its answer",
                };
                let steps = self.conv.refused(why);
                self.steps.extend(steps);
                None
            }
            Admission::Worker(test) => {
                self.conv.handed_off();
                if !self.out.is_empty() {
                    // Everything before the request was answered and
                    // written before it was read; this cannot happen, but
                    // a worker must not start behind unwritten answers.
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

/// Runs a worker's test on its (blocking) connection, to its end.
pub(super) fn run_job(
    st: &State,
    stream: &std::net::TcpStream,
    peer: SocketAddr,
    test: WorkerTest,
) {
    let ready = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_write_timeout(Some(st.cfg.handshake_timeout)));
    if ready.is_err() {
        return;
    }
    let _ = crate::net::keepalive(stream);
    let limits = st.cfg.limits;
    let kind = match &test {
        WorkerTest::Rr(rr) => Kind::rr(rr.spec().proto),
    };
    st.metrics.started(kind);
    let started = Instant::now();
    let json = st.cfg.log_format == LogFormat::Json && st.cfg.verbosity >= 1;
    // The tests' own text lines; in JSON, this writes their events.
    let verbosity = if json { 0 } else { st.cfg.verbosity };
    let client = || json!({ "client": peer.to_string(), "kind": kind.name() });
    if json {
        log::event(LogFormat::Json, "session_start", format_args!(""), client);
    }
    let (moved, ran) = match test {
        WorkerTest::Rr(rr) => {
            let idle = st.cfg.idle_timeout;
            crate::rr::serve::serve(stream, peer, rr, verbosity, idle, limits)
        }
    };
    let took = started.elapsed();
    st.metrics.ended(kind, took, Moved::from(&moved));
    // The error the client was sent, logged once with the other refusals.
    if let Err(why) = &ran {
        log_refusal(st, peer, why);
    }
    if json {
        let result = match &ran {
            Ok(()) => "ok".to_string(),
            Err(why) => super::metrics::code_name(why.code()),
        };
        log::event(LogFormat::Json, "session_end", format_args!(""), || {
            let mut v = client();
            v["result"] = result.into();
            v["duration_s"] = took.as_secs_f64().into();
            v["bytes_sent"] = moved.bytes_sent.into();
            v["bytes_received"] = moved.bytes_received.into();
            v
        });
    }
}
