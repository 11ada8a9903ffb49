//! The server's side of a UDP stream the client sends (`udp` without `-R`,
//! each stream of a `-P` group, the client's half of `--bidir`) as a machine
//! free of I/O, so that an event loop can hold thousands of them: it takes
//! the control connection's messages, the session socket's datagrams and
//! the time, and says what to write on the control connection, what
//! datagrams to send and when it next wants a look.
//!
//! The order is the UDP session's: the acceptance names the port and a
//! token; the client's handshake datagram carrying the token tells where it
//! is, and the server sends nothing there but probes with a nonce until the
//! client echoes the nonce over the control connection; then the stream
//! runs, each datagram counted by the receiving core ([`Reception`]) and
//! each interval reported as it ends, until the client's account of what
//! it sent plus the drain time, a stop, or a goodbye; then the totals, and
//! to the goodbye the summary.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use uuid::Uuid;

use super::header::HEADER_LEN;
use super::reception::{ReceiverConfig, ReceiverSink, Reception};
use super::session::{Opening, acts, admitted, unexpected};
use super::track::{BurstReport, ReceiverStats, UdpInterval};
use crate::protocol::proto::{Message, ProtoError, SessionSummary, udp_result_frames};
use crate::protocol::refusal::{AuthFailure, Refusal};

pub use super::setup::{HANDSHAKE_WAIT, PROBES};

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
    /// From the acceptance to the start of the stream, at most.
    pub setup: Duration,
    /// From the acceptance to the end, at most.
    pub deadline: Duration,
    /// The longest test the server runs, named when the deadline passes.
    pub max_duration: Duration,
    /// How long datagrams are still counted after the client's account of
    /// what it sent.
    pub drain: Duration,
}

/// Something for the driver to do, in order.
#[derive(Debug)]
pub enum Action {
    /// Write this on the control connection (boxed: a message is large
    /// beside the other actions).
    Send(Box<Message>),
    /// Connect the session socket to the proven client address: nothing
    /// from elsewhere is read from here on.
    Connect(SocketAddr),
    /// Send this datagram to the proven address.
    Datagram([u8; HEADER_LEN]),
    /// The stream starts now: the driver takes its CPU clocks, which the
    /// summary reports the use of from here.
    Started,
    /// Write this summary, with the CPU used since [`Action::Started`]
    /// (if it came) filled in.
    Summary(Box<SessionSummary>),
    /// Write the refusal's message, log it, and close.
    Refuse(Refusal),
    /// Close once what is written is out (the summary, or nothing if the
    /// client left).
    Close,
}

acts!(Action);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Accepted; the client's address is not known yet.
    Setup,
    /// Probes sent to this address; waiting for the nonce.
    Proven(SocketAddr),
    /// Counting the stream from this address, started at the instant.
    Running(SocketAddr, Instant),
    /// The totals are sent: waiting for the goodbye.
    Reported,
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
pub struct Intake {
    t: Terms,
    phase: Phase,
    /// The acceptance, handshake, probes and nonce, and the deadlines.
    open: Opening,
    /// Until the stream starts: the receiver's settings (its clock offset
    /// comes with the start) and its empty accounts.
    ready: Option<(ReceiverConfig, ReceiverStats)>,
    rx: Option<Reception>,
    /// Bytes and corrupt datagrams of the report, once made.
    reported: Option<(u64, u64)>,
    /// Datagrams the client says it sent, and until when the rest may
    /// still arrive.
    sent: Option<u64>,
    drain_until: Option<Instant>,
    /// The client asked to stop before the stream started.
    stopped: bool,
    slot: usize,
    actions: VecDeque<Action>,
}

/// The receiver's output, queued as control messages.
struct Queue<'a>(&'a mut VecDeque<Action>);

impl ReceiverSink for Queue<'_> {
    fn interval(&mut self, iv: UdpInterval) {
        self.0
            .push_back(Action::Send(Box::new(Message::UdpInterval(iv))));
    }
    fn burst(&mut self, b: BurstReport) {
        self.0
            .push_back(Action::Send(Box::new(Message::UdpBurst(b))));
    }
}

impl Intake {
    /// A session accepted at `now`, to receive with `cfg` into `stats`:
    /// its acceptance is the first action.
    pub fn new(t: Terms, cfg: ReceiverConfig, stats: ReceiverStats, now: Instant) -> Intake {
        let mut actions = VecDeque::new();
        let slot = cfg.slot();
        Intake {
            phase: Phase::Setup,
            open: Opening::new(admitted!(t), now, &mut actions),
            ready: Some((cfg, stats)),
            rx: None,
            reported: None,
            sent: None,
            drain_until: None,
            stopped: false,
            slot,
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

    /// Whether the stream is being counted: its datagrams come from the
    /// proven address (the socket is connected to it).
    pub fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running(..))
    }

    /// Whether the session socket is to be read now: for the handshake, and
    /// while the stream is counted. Between the probes and the start, and
    /// once the totals are out, datagrams wait in (or overflow) the
    /// socket's buffer, as they did for the blocking session.
    pub fn wants_datagrams(&self) -> bool {
        self.phase == Phase::Setup || self.is_running()
    }

    /// Bytes a receive slot needs: one more than the largest datagram
    /// expected.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// When the session wants [`Intake::on_timeout`]: the end of the
    /// handshake wait or of setup; while running the next interval's end,
    /// the drain's end and the deadline; then the deadline.
    pub fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Over => None,
            Phase::Reported => Some(self.open.ends()),
            Phase::Running(_, epoch) => {
                let tick = self.rx.as_ref().map(|r| epoch + r.next_tick());
                let at = [Some(self.open.ends()), tick, self.drain_until];
                at.into_iter().flatten().min()
            }
            Phase::Setup | Phase::Proven(_) => Some(self.open.setup_deadline()),
        }
    }

    /// Time has passed.
    pub fn on_timeout(&mut self, now: Instant) {
        let why = match self.phase {
            Phase::Over => None,
            Phase::Reported | Phase::Running(..) => self.open.timeout(now),
            Phase::Setup | Phase::Proven(_) => self.open.setup_timeout(now),
        };
        if let Some(why) = why {
            self.refuse(why);
        } else if let Phase::Running(_, epoch) = self.phase {
            if let Some(rx) = self.rx.as_mut() {
                rx.on_time(
                    now.saturating_duration_since(epoch),
                    &mut Queue(&mut self.actions),
                );
            }
            if self.drain_until.is_some_and(|d| now >= d) {
                self.report(now);
            }
        }
    }

    fn refuse(&mut self, why: Refusal) {
        self.phase = Phase::Over;
        self.rx = None;
        self.actions.push_back(Action::Refuse(why));
    }

    /// Receiving ends at `now`: the last interval and burst, then the
    /// totals, go out.
    fn report(&mut self, now: Instant) {
        let Phase::Running(_, epoch) = self.phase else {
            return;
        };
        self.phase = Phase::Reported;
        self.drain_until = None;
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        rx.finish(
            now.saturating_duration_since(epoch),
            &mut Queue(&mut self.actions),
        );
        let totals = rx.into_stats().totals(self.sent);
        self.reported = Some((totals.bytes, totals.corrupt));
        for m in udp_result_frames(totals) {
            self.actions.push_back(Action::Send(Box::new(m)));
        }
    }

    /// What the session received, for the server's metrics: the bytes its
    /// result counts and its corrupt datagrams (those of the report once
    /// made, else so far).
    pub fn received(&self) -> (u64, u64) {
        self.reported.unwrap_or_else(|| {
            self.rx.as_ref().map_or((0, 0), |rx| {
                let t = rx.stats().totals(None);
                (t.bytes, t.corrupt)
            })
        })
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
            self.rx = None;
            self.actions.push_back(Action::Close);
        }
    }

    /// A message from the client at `now` (`real_ns`: the server's
    /// CLOCK_REALTIME, for clock exchanges and probes).
    pub fn on_message(&mut self, m: Message, now: Instant, real_ns: u64) {
        let send = |s: &mut Self, m| s.actions.push_back(Action::Send(Box::new(m)));
        let Some(m) = self
            .open
            .hear(&mut self.phase, m, now, real_ns, &mut self.actions)
        else {
            return;
        };
        match (self.phase, m) {
            (Phase::Setup | Phase::Proven(_), Message::UdpReady { nonce, offset_ns }) => {
                match (self.open.ready(nonce), self.ready.take()) {
                    (Ok(peer), Some((mut cfg, stats))) => {
                        // Intervals and the drain count from here, taken
                        // before the client may start sending.
                        self.phase = Phase::Running(peer, now);
                        cfg.offset_ns = offset_ns;
                        self.rx = Some(Reception::new(cfg, stats));
                        send(self, Message::UdpGo);
                        self.actions.push_back(Action::Started);
                        if self.stopped {
                            self.report(now);
                        }
                    }
                    (Err(why), _) => self.refuse(why),
                    (Ok(_), None) => self.refuse(AuthFailure::ProbeNonce.into()),
                }
            }
            (_, Message::UdpDone(rep)) => {
                self.sent = Some(rep.packets);
                if matches!(
                    self.phase,
                    Phase::Running(..) | Phase::Setup | Phase::Proven(_)
                ) {
                    self.drain_until = Some(now + self.t.drain);
                }
            }
            (_, Message::Stop) => {
                send(self, Message::StopAck);
                match self.phase {
                    Phase::Running(..) => self.report(now),
                    _ => self.stopped = true,
                }
            }
            (_, Message::Goodbye) => {
                self.report(now);
                self.phase = Phase::Over;
                self.actions.push_back(Action::Summary(Box::default()));
                self.actions.push_back(Action::Close);
            }
            (_, other) => self.refuse(unexpected(&other)),
        }
    }

    /// A datagram `d` (as received, up to [`Intake::slot`] bytes) from
    /// `from`, arrived as `at` says.
    pub fn on_datagram(&mut self, d: &[u8], from: SocketAddr, at: Arrived) {
        match self.phase {
            Phase::Setup => {
                if let Some(to) = self
                    .open
                    .on_datagram(d, from, at.batch_ns, &mut self.actions)
                {
                    self.phase = Phase::Proven(to);
                }
            }
            Phase::Running(peer, epoch) if from == peer => {
                let Some(rx) = self.rx.as_mut() else {
                    return;
                };
                let q = &mut Queue(&mut self.actions);
                let el = at.now.saturating_duration_since(epoch);
                // Intervals that ended before this batch first, as a
                // receiver looking at its clock before each read would.
                rx.on_time(el, q);
                let mono = el.as_nanos() as i64 - (at.batch_ns as i64 - at.recv_ns as i64);
                rx.on_datagram(d, at.recv_ns, mono, at.tos, q);
            }
            _ => {}
        }
    }
}

/// When and how a datagram arrived.
#[derive(Debug, Clone, Copy)]
pub struct Arrived {
    /// The instant its batch was read.
    pub now: Instant,
    /// The server's CLOCK_REALTIME when its batch was read, ns.
    pub batch_ns: u64,
    /// Its receive time, CLOCK_REALTIME ns: the kernel's stamp where there
    /// is one, else `batch_ns`.
    pub recv_ns: u64,
    /// Its TOS byte or traffic class, where the kernel told it.
    pub tos: Option<u8>,
}

// The tests name these as the machine did before its shared part moved
// to `udp::session`.
#[cfg(test)]
use crate::protocol::refusal::Limit;

#[cfg(test)]
#[path = "intake_tests.rs"]
mod tests;
