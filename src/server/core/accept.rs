//! How connections arrive on a loop: loop 0 accepts on the listeners (and
//! keeps a connection it accepted when it is the least busy loop, else hands
//! it on), pausing when out of descriptors; every loop takes a new
//! connection into a slot and gives it its first step before it joins the
//! poll.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

use mio::net::TcpStream;

use super::{Incoming, Loop, Slot2, Stage, refuse};
use crate::net::ahead::ReadAhead;

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
                    let k = self.loops.least_busy(self.index);
                    if k == self.index {
                        self.loops.arrived(k);
                        self.add(stream, peer);
                    } else {
                        self.loops.hand_to(k, Incoming::Conn { stream, peer });
                    }
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

    pub(super) fn add(&mut self, stream: std::net::TcpStream, peer: SocketAddr) {
        let st = self.st;
        let ip = peer.ip().to_canonical();
        let max = st.cfg.limits.max_conns_per_client;
        // Non-blocking and without Nagle already: accept4 and the
        // listener (Server::new) made TCP connections so on loop 0, and
        // Core::hand the SCTP associations accepted elsewhere.
        let (source, stage) = match crate::server::take_source(
            &st.per_client,
            ip,
            max,
            crate::protocol::refusal::Share::Connections,
        ) {
            Ok(source) => (Some(source), None),
            Err(why) => (None, Some(refuse(st, peer, &why.into()))),
        };
        let now = Instant::now();
        let stage = stage.unwrap_or(Stage::First {
            setup: now + st.cfg.handshake_timeout,
        });
        // Taken before the first step, which may arm its timer or ask
        // for another turn; filled as the step puts it back.
        let k = self.core.slots.vacant();
        let mut slot = Box::new(Slot2 {
            stream: TcpStream::from_std(stream),
            peer,
            stage,
            ahead: ReadAhead::default(),
            last_progress: now,
            born: now,
            open: None,
            _source: source,
            memory: None,
            writable: false,
        });
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
