//! What every UDP session's machine on the server (a stream the client
//! sends, `udp::intake`; one the server sends, `udp::outflow`; rr/ping,
//! `rr::answer`) does alike around its own work, free of I/O: the
//! acceptance, the shared [`Setup`] turned into actions (connect, probes,
//! `udp_probed`), clock exchanges, the setup and session deadlines and
//! their refusals, and a message no phase expects. Each machine holds one
//! [`Opening`] and keeps its own phases; the actions all of them ask alike
//! are [`Common`], which each machine's `Action` names too ([`Act`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::header::HEADER_LEN;
use super::setup::{HANDSHAKE_WAIT, PROBES, Probe, Setup};
use crate::protocol::proto::Message;
use crate::protocol::refusal::{Limit, Refusal};

/// What every UDP session's machine asks of its driver alike.
#[derive(Debug)]
pub enum Common {
    /// Write this on the control connection (boxed: a message is large
    /// beside the other actions).
    Send(Box<Message>),
    /// Connect the session socket to the proven client address.
    Connect(SocketAddr),
    /// Send this datagram (a probe) to the proven address.
    Datagram([u8; HEADER_LEN]),
    /// Write the refusal's message, log it, and close.
    Refuse(Refusal),
    /// Close once what is written is out.
    Close,
}

/// A machine's `Action`, which has the [`Common`] ones under the same names
/// besides its own.
pub trait Act: Sized {
    /// The machine's action for `c`.
    fn from_common(c: Common) -> Self;
    /// `self` as a [`Common`] one, or back if it is the machine's own.
    fn into_common(self) -> Result<Common, Self>;
}

/// Implements [`Act`] for an `Action` enum with the [`Common`] variants.
macro_rules! acts {
    ($action:ident) => {
        impl $crate::protocol::udp::session::Act for $action {
            fn from_common(c: $crate::protocol::udp::session::Common) -> Self {
                use $crate::protocol::udp::session::Common as C;
                match c {
                    C::Send(m) => $action::Send(m),
                    C::Connect(to) => $action::Connect(to),
                    C::Datagram(d) => $action::Datagram(d),
                    C::Refuse(why) => $action::Refuse(why),
                    C::Close => $action::Close,
                }
            }
            fn into_common(self) -> Result<$crate::protocol::udp::session::Common, Self> {
                use $crate::protocol::udp::session::Common as C;
                Ok(match self {
                    $action::Send(m) => C::Send(m),
                    $action::Connect(to) => C::Connect(to),
                    $action::Datagram(d) => C::Datagram(d),
                    $action::Refuse(why) => C::Refuse(why),
                    $action::Close => C::Close,
                    #[allow(unreachable_patterns)]
                    own => return Err(own),
                })
            }
        }
    };
}
pub(crate) use acts;

/// What a session was admitted with, as every kind has it.
#[derive(Debug, Clone, Copy)]
pub struct Admitted {
    /// The session's name (the acceptance).
    pub session: Uuid,
    /// The session socket's port.
    pub port: u16,
    /// What the client's handshake datagrams carry.
    pub token: u64,
    /// What the probes carry and the client must echo.
    pub nonce: u64,
    /// From the acceptance to the start, at most.
    pub setup: Duration,
    /// From the acceptance to the end, at most.
    pub deadline: Duration,
    /// The longest test the server runs, named when the deadline passes.
    pub max_duration: Duration,
}

/// The [`Admitted`] of a machine's terms `$t`, which name its fields alike.
macro_rules! admitted {
    ($t:expr) => {
        $crate::protocol::udp::session::Admitted {
            session: $t.session,
            port: $t.port,
            token: $t.token,
            nonce: $t.nonce,
            setup: $t.setup,
            deadline: $t.deadline,
            max_duration: $t.max_duration,
        }
    };
}
pub(crate) use admitted;

/// What a message did to the session, besides the actions queued.
// Returned and unpacked at once, never kept: boxing would only add an
// allocation a message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub enum Heard {
    /// Answered here (a clock exchange, a handshake still waited for).
    Done,
    /// The probes went to this address.
    Proven(SocketAddr),
    /// The machine's own to handle.
    Other(Message),
}

/// What [`Opening::hear`] needs of a machine's own phases.
pub trait Phased {
    /// Over: nothing more is heard.
    fn is_over(&self) -> bool;
    /// Still in its setup (the handshake may come).
    fn in_setup(&self) -> bool;
    /// The phase once the probes went to `to`.
    fn proven(to: SocketAddr) -> Self;
}

/// The part of a session every kind shares: its setup and its deadlines.
#[derive(Debug, Clone)]
pub struct Opening {
    setup: Setup,
    setup_time: Duration,
    max_duration: Duration,
    setup_ends: Instant,
    ends: Instant,
}

impl Opening {
    /// A session admitted at `now` with `a`; its acceptance is queued on
    /// `q` as the first action.
    pub fn new<A: Act>(a: Admitted, now: Instant, q: &mut VecDeque<A>) -> Opening {
        let ends = now + a.deadline;
        q.push_back(A::from_common(Common::Send(Box::new(Message::UdpAccept {
            session: a.session,
            port: a.port,
            token: a.token,
        }))));
        Opening {
            setup: Setup::new(a.token, a.nonce),
            setup_time: a.setup,
            max_duration: a.max_duration,
            setup_ends: (now + a.setup).min(ends),
            ends,
        }
    }

    /// The end of the session's time.
    pub fn ends(&self) -> Instant {
        self.ends
    }

    /// When a session still in its setup wants a look: the end of the
    /// handshake wait or of the setup time.
    pub fn setup_deadline(&self) -> Instant {
        self.setup.deadline(self.setup_ends)
    }

    /// Why a session still in its setup ends at `now`, if it does: no
    /// handshake datagram within the wait, not started within the setup
    /// time, or the session's time is up.
    pub fn setup_timeout(&self, now: Instant) -> Option<Refusal> {
        if self.setup.handshake_missed(now) {
            Some(Refusal::NoHandshake(HANDSHAKE_WAIT))
        } else if now >= self.setup_ends {
            Some(match self.setup_ends < self.ends {
                true => Refusal::NotStarted(self.setup_time),
                false => self.duration_reached(),
            })
        } else {
            None
        }
    }

    /// Why a started session ends at `now`, if its time is up.
    pub fn timeout(&self, now: Instant) -> Option<Refusal> {
        (now >= self.ends).then(|| self.duration_reached())
    }

    /// The refusal a session whose time is up ends with.
    pub fn duration_reached(&self) -> Refusal {
        let max = self.max_duration;
        Limit::DurationReached { max }.into()
    }

    /// A message from the client at `now` (`real_ns`: the server's
    /// CLOCK_REALTIME) to a session not over, `in_setup` or not: clock
    /// exchanges and the handshake are answered here, on `q`.
    pub fn on_message<A: Act>(
        &mut self,
        m: Message,
        in_setup: bool,
        now: Instant,
        real_ns: u64,
        q: &mut VecDeque<A>,
    ) -> Heard {
        match m {
            Message::TimeRequest { t1 } => {
                let reply = Message::TimeReply {
                    t1,
                    t2: real_ns,
                    t3: real_ns,
                };
                q.push_back(A::from_common(Common::Send(Box::new(reply))));
                Heard::Done
            }
            Message::UdpHandshake { token } if in_setup && self.setup.expects(token) => {
                match self.setup.on_handshake_message(now, real_ns) {
                    Some(p) => Heard::Proven(prove(p, q)),
                    None => Heard::Done,
                }
            }
            other => Heard::Other(other),
        }
    }

    /// A message from the client to a machine in `phase`: nothing when the
    /// session is over or the message was answered here (the phase moved
    /// on when it proved the client), else the machine's own to handle.
    pub fn hear<P: Phased, A: Act>(
        &mut self,
        phase: &mut P,
        m: Message,
        now: Instant,
        real_ns: u64,
        q: &mut VecDeque<A>,
    ) -> Option<Message> {
        if phase.is_over() {
            return None;
        }
        match self.on_message(m, phase.in_setup(), now, real_ns, q) {
            Heard::Done => None,
            Heard::Proven(to) => {
                *phase = P::proven(to);
                None
            }
            Heard::Other(m) => Some(m),
        }
    }

    /// A datagram `d` from `from` to a session in its setup (`real_ns`:
    /// the server's CLOCK_REALTIME): the address the probes went to, if
    /// it proved the client.
    pub fn on_datagram<A: Act>(
        &mut self,
        d: &[u8],
        from: SocketAddr,
        real_ns: u64,
        q: &mut VecDeque<A>,
    ) -> Option<SocketAddr> {
        let p = self.setup.on_datagram(d, from, real_ns)?;
        Some(prove(p, q))
    }

    /// The client's `udp_ready` echoing `nonce`: the proven address, or
    /// the refusal.
    pub fn ready(&self, nonce: u64) -> Result<SocketAddr, Refusal> {
        self.setup.ready(nonce)
    }
}

/// The client is found: connect, the probes, then `udp_probed`.
fn prove<A: Act>(p: Probe, q: &mut VecDeque<A>) -> SocketAddr {
    q.push_back(A::from_common(Common::Connect(p.to)));
    for _ in 0..PROBES {
        q.push_back(A::from_common(Common::Datagram(p.datagram)));
    }
    q.push_back(A::from_common(Common::Send(Box::new(Message::UdpProbed))));
    p.to
}

/// A message no phase of the session expects: refused, named.
pub fn unexpected(m: &Message) -> Refusal {
    Refusal::Unexpected {
        got: format!("{m:?}"),
        context: "in a UDP session",
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
