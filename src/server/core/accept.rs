//! How connections arrive on a loop: loop 0 accepts on the listeners,
//! pausing when out of descriptors, and starts every connection itself;
//! once its first frame says what it is, a connection that will last moves
//! to the least busy loop and a short one stays ([`Loop::moves_to`]). Every
//! loop takes a new connection into a slot and gives it its first step
//! before it joins the poll.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

use mio::net::TcpStream;

use super::{Incoming, Iperf2Tcp, Loop, Moved, Slot2, Stage, refuse};
use crate::net::ahead::ReadAhead;
use crate::protocol::proto::Message;

/// Most connections loop 0 accepts from one listener per turn: a flood of
/// connections waits in the listen queue while the loop's connections
/// (each with its first step on arrival) get their turn, rather than the
/// loop accepting until the queue is empty.
const ACCEPT_BUDGET: usize = 64;

impl<'a> Loop<'a> {
    /// Accepts what is pending on listener `i` (loop 0), at most
    /// [`ACCEPT_BUDGET`] connections a turn.
    pub(super) fn accept(&mut self, i: usize) {
        let now = Instant::now();
        if self.st.stop.load(SeqCst) || self.paused.is_some_and(|t| now < t) {
            return;
        }
        self.paused = None;
        for _ in 0..ACCEPT_BUDGET {
            let Some(l) = self.listeners.get(i) else {
                return;
            };
            match l.accept() {
                Ok((s, peer)) => {
                    // SAFETY: the descriptor was just accepted and is owned
                    // by `s`, which gives it up here.
                    let stream = unsafe { std::net::TcpStream::from_raw_fd(s.into_raw_fd()) };
                    // It starts here: where it goes is decided once its
                    // first frame says what it is (`moves_to`).
                    self.loops.arrived(self.index);
                    self.add(stream, peer, None, true);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Per-connection failures (ECONNABORTED) must not stop
                    // the server. Out of descriptors, the pending connection
                    // stays queued: pause, and try again when the timer is due.
                    self.accept_log.note(&e, self.st.cfg.verbosity);
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        // The loop's sleep ends by then (`on_turn`).
                        self.paused = Some(now + crate::server::ACCEPT_BACKOFF);
                    }
                    return;
                }
            }
        }
        // More may wait (edge-triggered: no new event says so): the
        // listener goes on after the loop's other connections had a turn.
        self.core.again_token(mio::Token(super::LISTEN - i));
    }

    /// Loop 0 stops accepting once the server stops.
    pub(super) fn stop_listening(&mut self) {
        for mut l in std::mem::take(&mut self.listeners) {
            self.core.deregister(&mut l);
        }
    }

    /// Where a connection this loop accepted goes on once its first frame
    /// says what it is: a control connection to the least busy of the
    /// loops the server started with; a data connection whose test lasts
    /// to the least busy running loop, or to a loop started for it when
    /// each holds one already ([`Loops::for_data`](super::loops::Loops::for_data)),
    /// so that long tests spread over the cores; a data connection of a
    /// test whose connections are short ([`short`]) stays here (None), as
    /// does anything else (a refusal, an unknown session). A short
    /// connection is over within a step or two, and handing it on cost an
    /// eventfd write and a thread wake-up per connection, as much as its
    /// whole work.
    pub(super) fn moves_to(&self, first: &Message) -> Option<usize> {
        let k = match first {
            Message::Hello(_) => self.loops.for_control(self.index),
            Message::DataHello(h) => {
                let sessions = self.st.sessions.lock().unwrap_or_else(|e| e.into_inner());
                if sessions.get(&h.session).is_none_or(|s| short(&s.spec)) {
                    return None;
                }
                drop(sessions);
                self.loops.for_data(self.index, &self.arc)
            }
            _ => return None,
        };
        (k != self.index).then_some(k)
    }

    /// Moves slot `k` (its first frame put back in its read-ahead) to loop
    /// `to`: out of this loop's poll (unless it never joined it, `new`) and
    /// slots, and counted there instead of here.
    pub(super) fn move_to(&mut self, to: usize, k: usize, slot: Box<Slot2<'a>>, new: bool) {
        self.core.close(k);
        self.loops.left(self.index);
        let Slot2 {
            stream,
            peer,
            stage,
            mut ahead,
            _source,
            ..
        } = *slot;
        let stream = self.release(stream, !new);
        // The readiness this loop's poll reported is not seen there:
        // its first step reads (registering there reports what arrives
        // after).
        ahead.stir();
        let setup = match stage {
            Stage::First { setup } => setup,
            _ => Instant::now() + self.st.cfg.handshake_timeout,
        };
        let sourced = _source.is_some();
        std::mem::forget(_source);
        let moved = Moved {
            ahead,
            setup,
            sourced,
        };
        let m = Incoming::Conn {
            stream,
            peer,
            moved: Some(moved),
        };
        if !self.loops.hand_to(to, m) && sourced {
            // That loop is gone (the server stops): the connection was
            // dropped with the message, and its place is given back.
            drop(self.st.per_client.adopt(peer.ip()));
        }
    }

    /// Takes an iperf2 client's TCP test into a slot, if the server's
    /// limits admit it (a refused one is logged and closed), and reads what
    /// it sent behind its header.
    pub(super) fn add_iperf2(&mut self, c: super::Iperf2Conn) {
        let now = Instant::now();
        let test = match Iperf2Tcp::start(self.st, c.peer, &c.hdr, c.got, now) {
            Ok(t) => t,
            Err((code, why)) => {
                crate::server::iperf2::refuse_line(self.st, c.peer, code, &why);
                return self.loops.left(self.index);
            }
        };
        let k = self.core.slots.vacant();
        let stream = TcpStream::from_std(c.stream);
        let stage = Stage::Iperf2(Box::new(test));
        let mut slot = Slot2::new(stream, c.peer, stage, ReadAhead::default(), now);
        let next = self.step(&mut slot, k);
        self.put_back(k, slot, next, true);
    }

    /// Takes a new connection into a slot and gives it its first step:
    /// `moved` from the loop that accepted it (with what was read there),
    /// or new here, where it `may_move` on when this loop accepted it.
    pub(super) fn add(
        &mut self,
        stream: std::net::TcpStream,
        peer: SocketAddr,
        moved: Option<Moved>,
        may_move: bool,
    ) {
        let st = self.st;
        let ip = peer.ip().to_canonical();
        let max = st.cfg.limits.max_conns_per_client;
        let now = Instant::now();
        let (ahead, setup, sourced) = match moved {
            Some(m) => (m.ahead, m.setup, m.sourced),
            None => (ReadAhead::default(), now + st.cfg.handshake_timeout, false),
        };
        // Non-blocking and without Nagle already: accept4 and the
        // listener (Server::new) made TCP connections so on loop 0, and
        // Core::hand the SCTP associations accepted elsewhere.
        let taken = match sourced {
            true => Ok(st.per_client.adopt(ip)),
            false => crate::server::take_source(
                &st.per_client,
                ip,
                max,
                crate::protocol::refusal::Share::Connections,
            ),
        };
        let (source, stage) = match taken {
            Ok(source) => (Some(source), None),
            Err(why) => (None, Some(refuse(st, peer, &why.into()))),
        };
        let stage = stage.unwrap_or(Stage::First { setup });
        // Taken before the first step, which may arm its timer or ask
        // for another turn; filled as the step puts it back.
        let k = self.core.slots.vacant();
        let mut slot = Slot2::new(TcpStream::from_std(stream), peer, stage, ahead, now);
        slot._source = source;
        slot.may_move = may_move;
        // A client sends its hello (and its first data) right behind the
        // handshake: the answer goes out before the socket joins the poll,
        // so that registering it is not between the request and the
        // reply. What arrives meanwhile shows in the registration's first
        // readiness report.
        let next = self.step(&mut slot, k);
        let unnamed = matches!(slot.stage, Stage::First { .. });
        self.put_back(k, slot, next, true);
        if unnamed && self.core.slots.get(k).is_some() {
            self.evict_unnamed(now);
            self.unnamed.push_back((k, now));
        }
    }
}

/// Whether a test's data connections are short: each moves a bounded
/// transfer that fits one turn of its loop, without bursts, a time bound or
/// a rate limit (crr, short `tcp -n` connections).
fn short(spec: &crate::protocol::spec::TcpSpec) -> bool {
    spec.burst.is_none()
        && spec.time_bound_ms == 0
        && spec.rate.is_none()
        && spec.transfer_hi() <= crate::tcp::drive::TURN_BYTES
}

#[cfg(test)]
mod tests {
    use super::short;
    use crate::protocol::spec::{IoPattern, TcpSpec};
    use crate::tcp::drive::TURN_BYTES;

    #[test]
    fn churn_connections_are_short_and_lasting_tests_are_not() {
        // crr: a 64-byte request and a 2-byte reply.
        assert!(short(&TcpSpec::plain(IoPattern::Pushpull, 66, 64, 2)));
        assert!(short(&TcpSpec::plain(IoPattern::Push, TURN_BYTES, 0, 0)));
        let big = TcpSpec::plain(IoPattern::Push, TURN_BYTES + 1, 0, 0);
        assert!(!short(&big));
        let mut timed = TcpSpec::plain(IoPattern::Push, 66, 0, 0);
        timed.time_bound_ms = 1000;
        assert!(!short(&timed));
        // A range of sizes counts by its largest.
        let mut range = TcpSpec::plain(IoPattern::Pull, 66, 0, 0);
        range.transfer_max = Some(TURN_BYTES * 4);
        assert!(!short(&range));
        // Bursts come on a schedule: the connection lasts.
        let mut bursts = TcpSpec::plain(IoPattern::Push, 66, 0, 0);
        bursts.burst = Some(crate::protocol::spec::BurstSpec {
            size: 32,
            period_ms: 100,
        });
        assert!(!short(&bursts));
    }
}
