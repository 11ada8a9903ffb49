//! The one turn every UDP session on the server's loops takes, whichever
//! way its datagrams go (a stream the client sends, `udp_recv`; one the
//! server sends, `udp_send`; rr/ping, `rr_udp`): the session's machine says
//! what to do and is fed the control connection's frames, its socket's
//! datagrams and the time, within a budget a wake-up, so that no session
//! holds its loop. What the three share — the record a session leaves, the
//! control connection's queue, the actions all machines ask alike, the
//! budget and the timer — is here once; what each kind does of its own (its
//! datagrams, a sender) is its [`Part`].

use std::fmt;
use std::net::SocketAddr;
use std::time::Instant;

use mio::net::TcpStream;
use uuid::Uuid;

use super::control::TestSlots;
use super::limits::OUT_HIGH;
use super::loop_session::Who;
use super::metrics::{Kind, Moved};
use super::{State, log_refusal};
use crate::net::ahead::ReadAhead;
use crate::net::out::Out;
use crate::net::realtime_ns;
use crate::protocol::cpu::{CpuSample, CpuUsage};
use crate::protocol::proto::{ErrorCode, Message, ProtoError, ReadError, SessionSummary, encode};
use crate::protocol::rr::answer::{self, Answerer};
use crate::protocol::rr::seq_answer::{self, SeqAnswerer};
use crate::protocol::udp::intake::{self, Intake};
use crate::protocol::udp::outflow::{self, Outflow};
use crate::protocol::udp::session::{Act, Common};
use crate::tcp::drive::Socket;

/// Most datagrams, and most control frames, one session takes per wake-up.
pub(super) const BUDGET: usize = 64;

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

/// A UDP session's machine as the turn drives it: the same calls on
/// [`Intake`], [`Outflow`] and [`Answerer`].
pub(super) trait Machine {
    /// Everything it asks for: the [`Common`] actions and its own.
    type Action: Act;
    fn poll_action(&mut self) -> Option<Self::Action>;
    fn has_actions(&self) -> bool;
    fn deadline(&self) -> Option<Instant>;
    fn on_timeout(&mut self, now: Instant);
    fn on_message(&mut self, m: Message, now: Instant, real_ns: u64);
    fn on_malformed(&mut self, e: ProtoError);
    fn on_closed(&mut self);
}

/// Implements [`Machine`] for `$ty`, whose module `$module` names its
/// actions `Action`.
macro_rules! machine {
    ($ty:ident, $module:ident) => {
        impl Machine for $ty {
            type Action = $module::Action;
            fn poll_action(&mut self) -> Option<Self::Action> {
                <$ty>::poll_action(self)
            }
            fn has_actions(&self) -> bool {
                <$ty>::has_actions(self)
            }
            fn deadline(&self) -> Option<Instant> {
                <$ty>::deadline(self)
            }
            fn on_timeout(&mut self, now: Instant) {
                <$ty>::on_timeout(self, now)
            }
            fn on_message(&mut self, m: Message, now: Instant, real_ns: u64) {
                <$ty>::on_message(self, m, now, real_ns)
            }
            fn on_malformed(&mut self, e: ProtoError) {
                <$ty>::on_malformed(self, e)
            }
            fn on_closed(&mut self) {
                <$ty>::on_closed(self)
            }
        }
    };
}

machine!(Answerer, answer);
machine!(Outflow, outflow);
machine!(Intake, intake);
machine!(SeqAnswerer, seq_answer);

/// What one turn has used of its wake-up's budget.
#[derive(Debug, Default)]
pub(super) struct Budget {
    /// Control frames read.
    pub(super) frames: usize,
    /// Datagrams read (and socket calls that read none).
    pub(super) datagrams: usize,
    /// A sender's batches sent.
    pub(super) batches: usize,
}

/// What one kind of UDP session does of its own around its machine `M`.
pub(super) trait Part {
    type M: Machine;
    /// The session socket.
    fn sock(&self) -> socket2::SockRef<'_>;
    /// The session socket is connected to `to`.
    fn connected(&mut self, _to: SocketAddr) {}
    /// Does an action only this kind's machine asks (a stream's start and
    /// summary), with the session's CPU clocks and its control queue.
    fn act(
        &mut self,
        _a: <Self::M as Machine>::Action,
        _m: &mut Self::M,
        _cpu: &mut Cpu,
        _out: &mut Out,
    ) {
    }
    /// Whether a client that does not read its control frames, with
    /// `pending` bytes queued, is taken as gone.
    fn swamped(&self, _m: &Self::M, _pending: usize) -> bool {
        false
    }
    /// Work of its own before the control frames (a sender's due
    /// datagrams): true when the machine was told something.
    fn work(&mut self, _m: &mut Self::M, _b: &mut Budget) -> bool {
        false
    }
    /// Reads the session socket into the machine, within `b`: true when
    /// the budget ran out with more perhaps waiting.
    fn datagrams(&mut self, m: &mut Self::M, buf: &mut [u8], now: Instant, b: &mut Budget) -> bool;
    /// Whether its own work used its share of the wake-up.
    fn spent(&self, _b: &Budget) -> bool {
        false
    }
    /// When its own work wants a look next.
    fn wake(&self) -> Option<Instant> {
        None
    }
    /// What the session moved, for its record.
    fn moved(&self, m: &Self::M) -> Moved;
}

/// The CPU clocks when the stream started: the summary reports the CPU
/// used from then to the goodbye.
#[derive(Default)]
pub(super) struct Cpu(Option<CpuSample>);

impl Cpu {
    /// The stream starts now.
    pub(super) fn start(&mut self) {
        self.0 = Some(crate::net::cpu::sample());
    }

    /// Queues the summary `sum` on `out`, with the CPU used since the
    /// start (if it came) filled in.
    pub(super) fn summary(&self, mut sum: SessionSummary, out: &mut Out) {
        let end = crate::net::cpu::sample();
        sum.cpu = self.0.as_ref().map(|a| CpuUsage::between(a, &end));
        out.push(&encode(&Message::Summary(sum)));
    }
}

/// One UDP session on a loop: its machine, its own part, and what every
/// kind keeps.
pub(super) struct Session<'a, P: Part> {
    st: &'a State,
    who: Who,
    /// When it was admitted, and how it ended (None: as asked).
    began: Instant,
    ended: Option<ErrorCode>,
    m: P::M,
    p: P,
    out: Out,
    cpu: Cpu,
    /// The timer set for the session, so each turn does not add one more.
    armed: Option<Instant>,
    _slots: TestSlots<'a>,
}

impl<'a, P: Part> Session<'a, P> {
    /// A session admitted at `now` with `slots`, named `id` and counted as
    /// started (logged with `what`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        st: &'a State,
        (kind, id, peer): (Kind, Uuid, SocketAddr),
        slots: TestSlots<'a>,
        m: P::M,
        p: P,
        now: Instant,
        what: fmt::Arguments<'_>,
    ) -> Session<'a, P> {
        let who = Who { kind, id, peer };
        super::loop_session::started(st, who, what);
        Session {
            st,
            who,
            began: now,
            ended: None,
            m,
            p,
            out: Out::new(Vec::new()),
            cpu: Cpu::default(),
            armed: None,
            _slots: slots,
        }
    }

    /// Does what the machine asks, writes what is queued, does the kind's
    /// own work, and feeds the machine the control connection's frames
    /// and the socket's datagrams, within the budget, until all would
    /// wait or the session ends.
    pub(super) fn turn(
        &mut self,
        stream: &TcpStream,
        ahead: &mut ReadAhead,
        buf: &mut [u8],
        now: Instant,
    ) -> Turn {
        let mut b = Budget::default();
        // Whether the control connection had no more frames this turn.
        let mut ctl_blocked = false;
        loop {
            while let Some(a) = self.m.poll_action() {
                let a = match a.into_common() {
                    Ok(a) => a,
                    Err(own) => {
                        self.p.act(own, &mut self.m, &mut self.cpu, &mut self.out);
                        continue;
                    }
                };
                match a {
                    Common::Send(m) => self.out.push(&encode(&m)),
                    // Failing, the probes fail too; the client says its
                    // probe never arrived.
                    Common::Connect(to) => {
                        let _ = self.p.sock().connect(&to.into());
                        self.p.connected(to);
                    }
                    Common::Datagram(d) => {
                        let _ = self.p.sock().send(&d);
                    }
                    Common::Refuse(why) => {
                        self.ended = Some(why.code());
                        log_refusal(self.st, self.who.peer, &why);
                        self.out.push(&encode(&why.message()));
                        return Turn::Last(self.take_out());
                    }
                    Common::Close => return Turn::Last(self.take_out()),
                }
            }
            if self.out.flush(stream).is_err() || self.p.swamped(&self.m, self.out.pending()) {
                return Turn::Gone;
            }
            if self.m.deadline().is_some_and(|d| now >= d) {
                self.m.on_timeout(now);
                continue;
            }
            if self.p.work(&mut self.m, &mut b) {
                continue;
            }
            if self.out.pending() >= OUT_HIGH {
                // Its messages wait for it to read its answers.
                ctl_blocked = true;
            }
            if !ahead.may_read() {
                ctl_blocked = true;
            }
            if b.frames < BUDGET && !ctl_blocked {
                let max = crate::protocol::proto::MAX_PAYLOAD;
                let read = ahead.read_frame_within(buf, max, |b| stream.recv(b));
                b.frames += 1;
                match read {
                    Ok(None) => {
                        b.frames = BUDGET;
                        ctl_blocked = true;
                    }
                    Ok(Some(m)) => self.m.on_message(m, now, realtime_ns()),
                    Err(ReadError::Proto(e)) => self.m.on_malformed(e),
                    Err(_) => self.m.on_closed(),
                }
                continue;
            }
            let more = self.p.datagrams(&mut self.m, buf, now, &mut b);
            // A handshake datagram has the probes to send; a stream its
            // intervals and bursts.
            if self.m.has_actions() {
                continue;
            }
            if more || self.p.spent(&b) || !ctl_blocked {
                return Turn::Again;
            }
            return self.wait();
        }
    }

    fn wait(&mut self) -> Turn {
        let at = [self.m.deadline(), self.p.wake()]
            .into_iter()
            .flatten()
            .min();
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

impl<P: Part> Drop for Session<'_, P> {
    fn drop(&mut self) {
        let took = self.began.elapsed();
        let moved = self.p.moved(&self.m);
        super::loop_session::ended(self.st, self.who, took, self.ended, moved, format_args!(""));
    }
}
