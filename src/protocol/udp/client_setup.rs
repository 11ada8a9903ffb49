//! The client's half of a UDP session's setup (a stream either way, rr and
//! ping over UDP), from the server's acceptance to its go, free of I/O: the
//! clock exchanges that estimate the offset, the handshake datagrams that
//! prove the server can reach this socket, and the ready/go that starts the
//! session. The server's half is [`crate::protocol::udp::session`]
//! ([`super::setup::Setup`]); `udp/setup.rs` runs this one over the control
//! connection and the data socket.
//!
//! Fed each control message, each datagram and the time (monotonic, and the
//! wall clock the exchanges are stamped with), it queues what to send and
//! says when it next wants a look. The probe datagram and the server's
//! `udp_probed` are taken in either order: the server sends the probes
//! first, so on a fast path the datagram is often here before the message.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::clock::{ClockSample, Offset, estimate};
use super::header::{FLAG_HANDSHAKE, HEADER_LEN, Header};
use crate::protocol::proto::Message;

/// Clock exchanges for one offset estimate: the one with the smallest
/// round trip wins, so a few are enough to catch a quiet moment.
pub const CLOCK_SAMPLES: usize = 8;
/// How often a handshake datagram is sent until the server's probe comes.
pub const HANDSHAKE_EVERY: Duration = Duration::from_millis(50);
/// How long handshake datagrams are sent at most (a path that loses a
/// hundred in a row is not one to measure).
pub const HANDSHAKE_FOR: Duration = Duration::from_secs(5);
/// How long the probe datagram may take after the server said it sent it.
pub const PROBE_WAIT: Duration = Duration::from_secs(3);

/// Something to send.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// On the control connection.
    Send(Box<Message>),
    /// On the data socket: a handshake datagram.
    Datagram([u8; HEADER_LEN]),
}

/// Why the setup failed.
#[derive(Debug, Error, PartialEq)]
pub enum SetupError {
    /// A message this step does not expect (the driver names the target).
    #[error("unexpected reply {0:?}")]
    Unexpected(Box<Message>),
    /// The clock exchanges gave nothing to estimate from.
    #[error("no clock samples")]
    NoSamples,
    /// The server did not say it saw a handshake datagram in time.
    #[error("the server never said it saw a handshake datagram")]
    NeverProbed,
    /// The server said it probed, and no probe came.
    #[error("the server's probe datagram never arrived (is UDP blocked towards this host?)")]
    ProbeLost,
    /// The server did not answer within the control connection's reply
    /// time.
    #[error("no {what} from the server within {}s", within.as_secs_f64())]
    Silent {
        /// What was waited for.
        what: &'static str,
        /// For how long.
        within: Duration,
    },
}

/// How the clock offset is had.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    /// Estimated here, over the control connection.
    Estimate,
    /// Known already (another stream of the same test measured it).
    Known(Offset),
    /// Clocks trusted (PTP, `--synced`): no offset.
    Trusted,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Waiting since `asked` for the reply to the clock request stamped
    /// `t1`.
    Clock { t1: u64, asked: Instant },
    /// Handshake datagrams go out from `t0`, the next at `next`; `probed`
    /// once the server said so (and when), `nonce` once its probe came.
    Handshake {
        t0: Instant,
        next: Instant,
        probed: Option<Instant>,
        nonce: Option<u64>,
    },
    /// Proven: the driver says when to start.
    Proven { nonce: u64 },
    /// `udp_ready` sent at `asked`; waiting for the go.
    Ready { asked: Instant },
    /// Gone: the session runs.
    Started,
    /// Given up; nothing more is heard.
    Failed,
}

/// The client's setup of one accepted UDP session.
#[derive(Debug, Clone)]
pub struct ClientSetup {
    token: u64,
    phase: Phase,
    samples: Vec<ClockSample>,
    offset: Option<Offset>,
    reply_within: Duration,
    out: VecDeque<Out>,
}

impl ClientSetup {
    /// The setup of the session accepted with `token`, starting at `now`
    /// (`real_ns`: this host's CLOCK_REALTIME); `reply_within` is how long
    /// the server may take to say it saw a handshake datagram (the control
    /// connection's reply timeout).
    pub fn new(
        token: u64,
        clock: Clock,
        reply_within: Duration,
        now: Instant,
        real_ns: u64,
    ) -> ClientSetup {
        let mut s = ClientSetup {
            token,
            phase: Phase::Failed,
            samples: Vec::with_capacity(CLOCK_SAMPLES),
            offset: None,
            reply_within,
            out: VecDeque::new(),
        };
        match clock {
            Clock::Estimate => s.ask_time(now, real_ns),
            Clock::Known(o) => {
                s.offset = Some(o);
                s.handshake(now, real_ns);
            }
            Clock::Trusted => s.handshake(now, real_ns),
        }
        s
    }

    /// What to send next, in order.
    pub fn poll_out(&mut self) -> Option<Out> {
        self.out.pop_front()
    }

    /// The offset estimate (or the one given); none with trusted clocks or
    /// before the exchanges are done.
    pub fn offset(&self) -> Option<Offset> {
        self.offset
    }

    /// The nonce to echo, once the server's probe and its `udp_probed`
    /// both came; the driver then says [`ClientSetup::ready`].
    pub fn proven(&self) -> Option<u64> {
        match self.phase {
            Phase::Proven { nonce } => Some(nonce),
            _ => None,
        }
    }

    /// Whether the data socket is to be read for the setup: only while the
    /// probe is awaited. Past it, what arrives is the session's own (a
    /// server that sends starts at its go, and its first datagrams can be
    /// here before the go is read).
    pub fn wants_datagrams(&self) -> bool {
        matches!(self.phase, Phase::Handshake { nonce: None, .. })
    }

    /// The server said go.
    pub fn is_started(&self) -> bool {
        self.phase == Phase::Started
    }

    /// When the setup next wants [`ClientSetup::on_time`]: the next
    /// handshake datagram or the end of a wait; none once it is over or
    /// proven (the driver's to start).
    pub fn deadline(&self) -> Option<Instant> {
        let (t0, next, probed, nonce) = match self.phase {
            Phase::Handshake {
                t0,
                next,
                probed,
                nonce,
            } => (t0, next, probed, nonce),
            Phase::Clock { asked, .. } | Phase::Ready { asked } => {
                return Some(asked + self.reply_within);
            }
            Phase::Proven { .. } | Phase::Started | Phase::Failed => return None,
        };
        let (gives_up, _) = gives_up(t0, probed, self.reply_within);
        // No more handshakes once the probe came or their time is over.
        Some(match nonce.is_none() && next < t0 + HANDSHAKE_FOR {
            true => next.min(gives_up),
            false => gives_up,
        })
    }

    /// A message from the server.
    pub fn on_message(&mut self, m: Message, now: Instant, real_ns: u64) -> Result<(), SetupError> {
        match (&mut self.phase, m) {
            (&mut Phase::Clock { t1, .. }, Message::TimeReply { t1: echo, t2, t3 })
                if echo == t1 =>
            {
                self.samples.push(ClockSample {
                    t1,
                    t2,
                    t3,
                    t4: real_ns,
                });
                if self.samples.len() < CLOCK_SAMPLES {
                    self.ask_time(now, real_ns);
                    return Ok(());
                }
                self.offset = estimate(&self.samples);
                if self.offset.is_none() {
                    return self.fail(SetupError::NoSamples);
                }
                self.handshake(now, real_ns);
                Ok(())
            }
            (
                Phase::Handshake {
                    probed: probed @ None,
                    nonce,
                    ..
                },
                Message::UdpProbed,
            ) => {
                *probed = Some(now);
                if let Some(nonce) = *nonce {
                    self.phase = Phase::Proven { nonce };
                }
                Ok(())
            }
            (Phase::Ready { .. }, Message::UdpGo) => {
                self.phase = Phase::Started;
                Ok(())
            }
            (_, m) => self.fail(SetupError::Unexpected(Box::new(m))),
        }
    }

    /// A datagram on the data socket: the server's probe, if it is one;
    /// anything else is not this setup's.
    pub fn on_datagram(&mut self, d: &[u8]) {
        let Phase::Handshake { probed, nonce, .. } = &mut self.phase else {
            return;
        };
        let Ok(h) = Header::read(d) else {
            return;
        };
        if h.flags & FLAG_HANDSHAKE == 0 || nonce.is_some() {
            return;
        }
        *nonce = Some(h.seq);
        if probed.is_some() {
            self.phase = Phase::Proven { nonce: h.seq };
        }
    }

    /// The time is `now` (`real_ns` on the wall clock): a handshake
    /// datagram if one is due, or the end of a wait.
    pub fn on_time(&mut self, now: Instant, real_ns: u64) -> Result<(), SetupError> {
        let (t0, next, probed, nonce) = match &mut self.phase {
            Phase::Handshake {
                t0,
                next,
                probed,
                nonce,
            } => (t0, next, probed, nonce),
            &mut Phase::Clock { asked, .. } => return self.silent(now, asked, "clock reply"),
            &mut Phase::Ready { asked } => return self.silent(now, asked, "go"),
            Phase::Proven { .. } | Phase::Started | Phase::Failed => return Ok(()),
        };
        let (ends, why) = gives_up(*t0, *probed, self.reply_within);
        if now >= ends {
            return self.fail(why);
        }
        // Once the probe came, the server has what it needed.
        if nonce.is_none() && now >= *next && now < *t0 + HANDSHAKE_FOR {
            *next = now + HANDSHAKE_EVERY;
            let d = handshake_datagram(self.token, real_ns);
            self.out.push_back(Out::Datagram(d));
        }
        Ok(())
    }

    /// Proven, and the driver's moment to start has come: say ready,
    /// with the offset the server is to correct its stamps by.
    pub fn ready(&mut self, offset_ns: i64, now: Instant) {
        if let Phase::Proven { nonce } = self.phase {
            self.phase = Phase::Ready { asked: now };
            self.send(Message::UdpReady { nonce, offset_ns });
        }
    }

    /// Gives up on a reply asked for at `asked`, if its time is over.
    fn silent(
        &mut self,
        now: Instant,
        asked: Instant,
        what: &'static str,
    ) -> Result<(), SetupError> {
        let within = self.reply_within;
        match now >= asked + within {
            true => self.fail(SetupError::Silent { what, within }),
            false => Ok(()),
        }
    }

    fn ask_time(&mut self, now: Instant, real_ns: u64) {
        self.phase = Phase::Clock {
            t1: real_ns,
            asked: now,
        };
        self.send(Message::TimeRequest { t1: real_ns });
    }

    /// The first handshake datagram, then the word that they are coming.
    fn handshake(&mut self, now: Instant, real_ns: u64) {
        self.phase = Phase::Handshake {
            t0: now,
            next: now + HANDSHAKE_EVERY,
            probed: None,
            nonce: None,
        };
        let d = handshake_datagram(self.token, real_ns);
        self.out.push_back(Out::Datagram(d));
        self.send(Message::UdpHandshake { token: self.token });
    }

    fn send(&mut self, m: Message) {
        self.out.push_back(Out::Send(Box::new(m)));
    }

    fn fail(&mut self, e: SetupError) -> Result<(), SetupError> {
        self.phase = Phase::Failed;
        self.out.clear();
        Err(e)
    }
}

/// When a handshake begun at `t0` is given up, and why: 3 s after the
/// server said it probed, or the reply time after the start while it has
/// not. [`ClientSetup::deadline`] and [`ClientSetup::on_time`] both ask
/// here, so the time the driver wakes at is the time the wait ends (a
/// wake-up before it would spin).
fn gives_up(t0: Instant, probed: Option<Instant>, reply_within: Duration) -> (Instant, SetupError) {
    match probed {
        Some(at) => (at + PROBE_WAIT, SetupError::ProbeLost),
        None => (t0 + reply_within, SetupError::NeverProbed),
    }
}

/// A handshake datagram carrying `token`, stamped `real_ns`.
fn handshake_datagram(token: u64, real_ns: u64) -> [u8; HEADER_LEN] {
    let mut d = [0u8; HEADER_LEN];
    Header {
        flags: FLAG_HANDSHAKE,
        stream: 0,
        seq: token,
        send_ns: real_ns,
        payload_len: 0,
    }
    .write(&mut d);
    d
}

#[cfg(test)]
#[path = "client_setup_tests.rs"]
mod tests;
