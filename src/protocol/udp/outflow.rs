//! The server's side of a UDP stream it sends (`udp -R`, the server's half
//! of `--bidir`) as a machine free of I/O, so that an event loop can hold
//! thousands of them: it takes the control connection's messages, the
//! session socket's datagrams (only the handshake's), the sender's end and
//! the time, and says what to write on the control connection, what
//! datagrams to send, when the sender starts and stops, and when it next
//! wants a look. The sending itself is the driver's (on the loop's timers,
//! or a thread of the sender pool), with [`crate::udp::send`]'s schedule.
//!
//! The order is the UDP session's: the shared [`Setup`](super::setup::Setup) (acceptance,
//! handshake, probes, nonce), then the go and the sender's start; its
//! account (`udp_done`) when it ends by its schedule, a stop or a limit;
//! and to the goodbye, after that account, the summary.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use uuid::Uuid;

use super::header::HEADER_LEN;
use super::sent::SenderReport;
use super::session::{Opening, acts, admitted, unexpected};
use crate::protocol::proto::{Message, ProtoError, SessionSummary};
use crate::protocol::refusal::Refusal;

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
}

/// Something for the driver to do, in order.
#[derive(Debug)]
pub enum Action {
    /// Write this on the control connection (boxed: a message is large
    /// beside the other actions).
    Send(Box<Message>),
    /// Connect the session socket to the proven client address.
    Connect(SocketAddr),
    /// Send this datagram to the proven address (a probe).
    Datagram([u8; HEADER_LEN]),
    /// Start the sender now (its schedule counts from here) and take the
    /// CPU clocks the summary reports the use of from here; once it ends,
    /// hand its account to [`Outflow::on_sent`].
    Start,
    /// Stop the sender: it ends as soon as it can, and its account comes
    /// to [`Outflow::on_sent`] all the same.
    StopSending,
    /// Write this summary, with the CPU used since [`Action::Start`] (if it
    /// came) filled in.
    Summary(Box<SessionSummary>),
    /// Write the refusal's message, log it, and close (a running sender is
    /// stopped).
    Refuse(Refusal),
    /// Close once what is written is out (a running sender is stopped).
    Close,
}

acts!(Action);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Accepted; the client's address is not known yet.
    Setup,
    /// Probes sent; waiting for the nonce.
    Proven,
    /// The sender runs, to this address.
    Sending(SocketAddr),
    /// The goodbye came while the sender ran: its account, then the
    /// summary.
    Closing,
    /// The sender's account is out: waiting for the goodbye.
    Sent,
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
    fn proven(_: SocketAddr) -> Self {
        Phase::Proven
    }
}

/// One sending session's server side.
#[derive(Debug)]
pub struct Outflow {
    /// The acceptance, handshake, probes and nonce, and the deadlines.
    open: Opening,
    phase: Phase,
    /// The client asked to stop (before the start, or the sender was told).
    stopped: bool,
    actions: VecDeque<Action>,
}

impl Outflow {
    /// A session accepted at `now`: its acceptance is the first action.
    pub fn new(t: Terms, now: Instant) -> Outflow {
        let mut actions = VecDeque::new();
        Outflow {
            open: Opening::new(admitted!(t), now, &mut actions),
            phase: Phase::Setup,
            stopped: false,
            actions,
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

    /// Whether the sender runs (started, its account not yet in).
    pub fn is_sending(&self) -> bool {
        matches!(self.phase, Phase::Sending(_) | Phase::Closing)
    }

    /// Whether the session socket is to be read now: only for the
    /// handshake.
    pub fn wants_datagrams(&self) -> bool {
        self.phase == Phase::Setup
    }

    /// When the session wants [`Outflow::on_timeout`]: the end of the
    /// handshake wait or of setup, then the session's deadline.
    pub fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Over => None,
            Phase::Setup | Phase::Proven => Some(self.open.setup_deadline()),
            Phase::Sending(_) | Phase::Closing | Phase::Sent => Some(self.open.ends()),
        }
    }

    /// Time has passed.
    pub fn on_timeout(&mut self, now: Instant) {
        let why = match self.phase {
            Phase::Over => None,
            Phase::Setup | Phase::Proven => self.open.setup_timeout(now),
            Phase::Sending(_) | Phase::Closing | Phase::Sent => self.open.timeout(now),
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

    fn send(&mut self, m: Message) {
        self.actions.push_back(Action::Send(Box::new(m)));
    }

    fn stop_sender(&mut self) {
        if !std::mem::replace(&mut self.stopped, true) {
            self.actions.push_back(Action::StopSending);
        }
    }

    /// A message from the client at `now` (`real_ns`: the server's
    /// CLOCK_REALTIME, for clock exchanges and probes).
    pub fn on_message(&mut self, m: Message, now: Instant, real_ns: u64) {
        let Some(m) = self
            .open
            .hear(&mut self.phase, m, now, real_ns, &mut self.actions)
        else {
            return;
        };
        match (self.phase, m) {
            (Phase::Setup | Phase::Proven, Message::UdpReady { nonce, .. }) => {
                match self.open.ready(nonce) {
                    Ok(peer) => {
                        self.phase = Phase::Sending(peer);
                        self.send(Message::UdpGo);
                        self.actions.push_back(Action::Start);
                        // Stopped before the start: the sender ends at once,
                        // with an empty account.
                        if self.stopped {
                            self.actions.push_back(Action::StopSending);
                        }
                    }
                    Err(why) => self.refuse(why),
                }
            }
            // The client's account of a stream it sent: none flows that
            // way in this session.
            (_, Message::UdpDone(_)) => {}
            (_, Message::Stop) => {
                self.send(Message::StopAck);
                match self.phase {
                    Phase::Sending(_) => self.stop_sender(),
                    _ => self.stopped = true,
                }
            }
            (phase, Message::Goodbye) => match phase {
                Phase::Sending(_) => {
                    self.phase = Phase::Closing;
                    self.stop_sender();
                }
                Phase::Closing => {}
                _ => self.finish(),
            },
            (_, other) => self.refuse(unexpected(&other)),
        }
    }

    fn finish(&mut self) {
        self.phase = Phase::Over;
        self.actions.push_back(Action::Summary(Box::default()));
        self.actions.push_back(Action::Close);
    }

    /// A datagram `d` from `from` (`real_ns`: the server's CLOCK_REALTIME).
    pub fn on_datagram(&mut self, d: &[u8], from: SocketAddr, real_ns: u64) {
        if self.phase == Phase::Setup
            && self
                .open
                .on_datagram(d, from, real_ns, &mut self.actions)
                .is_some()
        {
            self.phase = Phase::Proven;
        }
    }

    /// The sender ended with this account: it goes to the client, and
    /// after a goodbye the summary follows.
    pub fn on_sent(&mut self, rep: SenderReport) {
        match self.phase {
            Phase::Sending(_) => {
                self.phase = Phase::Sent;
                self.send(Message::UdpDone(rep));
            }
            Phase::Closing => {
                self.send(Message::UdpDone(rep));
                self.finish();
            }
            _ => {}
        }
    }
}

// The tests name these as the machine did before its shared part moved
// to `udp::session`.
#[cfg(test)]
use super::setup::PROBES;
#[cfg(test)]
use crate::protocol::refusal::Limit;

#[cfg(test)]
#[path = "outflow_tests.rs"]
mod tests;
