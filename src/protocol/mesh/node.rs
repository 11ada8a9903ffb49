//! A mesh node's whole state, free of I/O: the peer list, the k peers it
//! probes (see [`super::pick`]) with their accounting, when each is next
//! probed, and the probers it answers. The driver gives it the time
//! (monotonic since the start, and realtime ns) and the datagrams, and
//! sends what it returns.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::answer::Answerer;
use super::peer::Peer;
use super::pick::{choose, weight};
use super::wire::{Datagram, LEN, decode};

/// What a node runs with.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Peers probed.
    pub k: usize,
    /// Between two probes of one peer.
    pub interval: Duration,
    /// A probe unanswered this long is lost.
    pub timeout: Duration,
    /// TCP connect probes too.
    pub tcp: bool,
}

/// A probed peer and its schedule.
#[derive(Debug, Clone)]
pub struct Probed {
    pub peer: Peer,
    next: Duration,
    next_tcp: Duration,
}

/// A mesh node.
#[derive(Debug)]
pub struct Node {
    cfg: Config,
    me: SocketAddr,
    seed: u64,
    runs: u64,
    /// The peer list, without this node.
    known: Vec<SocketAddr>,
    probed: BTreeMap<SocketAddr, Probed>,
    pub answerer: Answerer,
    /// Datagrams that were not mesh datagrams.
    pub malformed: u64,
    /// Replies from an address not probed (a peer just dropped).
    pub stray: u64,
}

/// `base` moved by up to ±20%, by `r` in [0, 1): refreshes of many nodes
/// started together drift apart instead of hitting DNS at once.
pub fn jittered(base: Duration, r: f64) -> Duration {
    base.mul_f64(0.8 + 0.4 * r.clamp(0.0, 1.0))
}

impl Node {
    /// A node that is `me` to its peers; its probe runs are numbered from
    /// `seed` (random, so a restarted node is told from its past).
    pub fn new(cfg: Config, me: SocketAddr, seed: u64) -> Node {
        Node {
            cfg,
            me,
            seed,
            runs: 0,
            known: Vec::new(),
            probed: BTreeMap::new(),
            answerer: Answerer::default(),
            malformed: 0,
            stray: 0,
        }
    }

    pub fn me(&self) -> SocketAddr {
        self.me
    }

    /// Takes `me` as this node's address (found in the peer list later
    /// than the start): the choice depends on it, so probing starts over.
    pub fn set_me(&mut self, me: SocketAddr) {
        if me != self.me {
            self.me = me;
            self.probed.clear();
        }
    }

    /// Takes a new peer list at `now`: peers still chosen keep their
    /// accounting, peers no longer chosen are dropped (and their series
    /// with them), new ones start, spread over the interval.
    pub fn set_peers(&mut self, list: &[SocketAddr], now: Duration) {
        let mut known: Vec<SocketAddr> = list.iter().copied().filter(|&p| p != self.me).collect();
        known.sort_unstable();
        known.dedup();
        let chosen = choose(self.me, &known, self.cfg.k);
        self.known = known;
        self.probed.retain(|p, _| chosen.contains(p));
        for p in chosen {
            if self.probed.contains_key(&p) {
                continue;
            }
            self.runs += 1;
            // Each node's probes of a peer start at a fixed phase of the
            // interval, so k probes are spread, not sent in a burst.
            let phase = self
                .cfg
                .interval
                .mul_f64((weight(p, self.me) % 1024) as f64 / 1024.0);
            self.probed.insert(
                p,
                Probed {
                    peer: Peer::new(self.seed.wrapping_add(self.runs), self.cfg.timeout),
                    next: now + phase,
                    next_tcp: now + phase,
                },
            );
        }
    }

    /// Peers in the list, this node left out.
    pub fn known(&self) -> usize {
        self.known.len()
    }

    /// The peers probed, by address.
    pub fn probed(&self) -> impl Iterator<Item = (&SocketAddr, &Peer)> {
        self.probed.iter().map(|(a, p)| (a, &p.peer))
    }

    /// The probes due at `now` (monotonic; `real`, realtime ns), with
    /// their destinations; lost probes are counted first.
    pub fn due(&mut self, now: Duration, real: u64) -> Vec<(SocketAddr, [u8; LEN])> {
        let mut out = Vec::new();
        let interval = self.cfg.interval;
        for (addr, p) in &mut self.probed {
            p.peer.expire(now);
            if p.next <= now {
                out.push((*addr, p.peer.probe(now, real).encode()));
                p.next += interval;
                if p.next <= now {
                    // Fell behind (a stalled process): no burst to catch up.
                    p.next = now + interval;
                }
            }
        }
        out
    }

    /// The peers due a TCP connect probe at `now`.
    pub fn tcp_due(&mut self, now: Duration) -> Vec<SocketAddr> {
        if !self.cfg.tcp {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (addr, p) in &mut self.probed {
            if p.next_tcp <= now {
                out.push(*addr);
                p.next_tcp = (p.next_tcp + self.cfg.interval).max(now);
            }
        }
        out
    }

    /// A TCP connect to `peer` took `took`, or failed (None).
    pub fn tcp_done(&mut self, peer: SocketAddr, took: Option<Duration>) {
        if let Some(p) = self.probed.get_mut(&peer) {
            p.peer.tcp(took);
        }
    }

    /// When the node next has something to do: a probe, or a probe's
    /// timeout.
    pub fn next_wake(&self) -> Option<Duration> {
        (self.probed.values())
            .flat_map(|p| {
                let tcp = self.cfg.tcp.then_some(p.next_tcp);
                [Some(p.next), tcp, p.peer.deadline()]
            })
            .flatten()
            .min()
    }

    /// A datagram `b` from `from` at `now` (monotonic; `real`, realtime
    /// ns): the reply to send back, if it was a probe.
    pub fn datagram(
        &mut self,
        from: SocketAddr,
        b: &[u8],
        now: Duration,
        real: u64,
    ) -> Option<[u8; LEN]> {
        match decode(b) {
            Ok(Datagram::Probe(p)) => {
                Some(self.answerer.answer(from, &p, now, real, real).encode())
            }
            Ok(Datagram::Reply(r)) => {
                match self.probed.get_mut(&from) {
                    Some(p) => p.peer.reply(&r, now, real),
                    None => self.stray += 1,
                }
                None
            }
            Err(_) => {
                self.malformed += 1;
                None
            }
        }
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
