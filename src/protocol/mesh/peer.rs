//! One probed peer's accounting, free of I/O: the probes in flight, which
//! were answered, lost (no reply within the timeout) and on which way,
//! duplicates each way, the round-trip histogram, and the statistics of
//! the last [`RING`] probes: loss ratio, clock offset with its bound, and
//! the one-way delays it splits the round trip into.

use std::collections::VecDeque;
use std::time::Duration;

use super::wire::{Probe, Reply};
use crate::protocol::udp::clock::{ClockSample, Offset, estimate};

/// Probes remembered per peer: the window of the statistics, and how far
/// back a reply can still be matched.
pub const RING: usize = 64;

/// Upper bounds of the round-trip histogram's buckets, seconds.
pub const RTT_BUCKETS: [f64; 13] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Answered,
    /// No reply in time; `placed` once a later reply said which way.
    Lost {
        placed: bool,
    },
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    seq: u64,
    sent: Duration,
    t1: u64,
    state: State,
}

/// Counters a scrape reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    /// Answered in time.
    pub answered: u64,
    /// Not answered within the timeout.
    pub lost: u64,
    /// Lost probes a later reply placed: the responder never saw them.
    pub lost_up: u64,
    /// ... the responder saw them, the reply did not come back.
    pub lost_down: u64,
    /// Probes the responder got more than once.
    pub duplicates_up: u64,
    /// Replies that came more than once.
    pub duplicates_down: u64,
    /// Replies after the timeout (their probe counted lost, and placed
    /// neither up nor down).
    pub late: u64,
    pub tcp_connects: u64,
    pub tcp_failures: u64,
}

/// The round-trip histogram: a count per bucket (not cumulative), beyond
/// the last, and the sum.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rtt {
    pub buckets: [u64; RTT_BUCKETS.len() + 1],
    pub sum: f64,
}

impl Rtt {
    fn add(&mut self, secs: f64) {
        let b = RTT_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(RTT_BUCKETS.len());
        self.buckets[b] += 1;
        self.sum += secs;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// The window's statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Lost of the probes settled (answered or lost) in the window.
    pub loss_ratio: f64,
    /// Peer's clock minus ours, and its bound, from the reply with the
    /// shortest round trip; None before a reply.
    pub offset: Option<Offset>,
    /// Median one-way delays up (to the peer) and down, seconds, each
    /// right to within the offset's bound.
    pub up: Option<f64>,
    pub down: Option<f64>,
}

/// A probed peer.
#[derive(Debug, Clone)]
pub struct Peer {
    epoch: u64,
    next_seq: u64,
    ring: Vec<Option<Slot>>,
    timeout: Duration,
    /// Settled outcomes of the newest probes, true for lost.
    outcomes: VecDeque<bool>,
    /// Clock samples of the newest replies.
    clocks: VecDeque<ClockSample>,
    pub counts: Counts,
    pub rtt: Rtt,
    /// The last TCP connect's time, when it succeeded.
    pub tcp_last: Option<Duration>,
}

impl Peer {
    /// A peer probed in run `epoch`; a probe unanswered after `timeout` is
    /// lost (at most [`RING`]/2 probe intervals, so it is settled before
    /// its slot is reused).
    pub fn new(epoch: u64, timeout: Duration) -> Peer {
        Peer {
            epoch,
            next_seq: 0,
            ring: vec![None; RING],
            timeout,
            outcomes: VecDeque::with_capacity(RING),
            clocks: VecDeque::with_capacity(RING),
            counts: Counts::default(),
            rtt: Rtt::default(),
            tcp_last: None,
        }
    }

    fn settle(&mut self, lost: bool) {
        if self.outcomes.len() == RING {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back(lost);
    }

    /// The next probe, sent at `now` (monotonic) and `t1` (realtime ns).
    pub fn probe(&mut self, now: Duration, t1: u64) -> Probe {
        self.expire(now);
        let seq = self.next_seq;
        self.next_seq += 1;
        let i = (seq % RING as u64) as usize;
        if let Some(old) = self.ring[i]
            && old.state == State::Pending
        {
            // Only with a timeout longer than the ring: lost all the same.
            self.counts.lost += 1;
            self.settle(true);
        }
        self.ring[i] = Some(Slot {
            seq,
            sent: now,
            t1,
            state: State::Pending,
        });
        self.counts.sent += 1;
        Probe {
            epoch: self.epoch,
            seq,
            t1,
        }
    }

    /// Counts the probes unanswered for the timeout as lost.
    pub fn expire(&mut self, now: Duration) {
        let mut lost = 0;
        for s in self.ring.iter_mut().flatten() {
            if s.state == State::Pending && now.saturating_sub(s.sent) >= self.timeout {
                s.state = State::Lost { placed: false };
                lost += 1;
            }
        }
        for _ in 0..lost {
            self.counts.lost += 1;
            self.settle(true);
        }
    }

    /// A reply received at `now` (monotonic) and `t4` (realtime ns).
    pub fn reply(&mut self, r: &Reply, now: Duration, t4: u64) {
        if r.epoch != self.epoch {
            return;
        }
        // A reply after its probe's timeout is late, even when no tick
        // came between.
        self.expire(now);
        let i = (r.seq % RING as u64) as usize;
        let Some(slot) = self.ring[i].filter(|s| s.seq == r.seq && s.t1 == r.t1) else {
            // Never sent, or too old to match.
            return;
        };
        if r.duplicate {
            self.counts.duplicates_up += 1;
            return;
        }
        match slot.state {
            State::Answered => {
                self.counts.duplicates_down += 1;
                return;
            }
            State::Lost { placed } => {
                self.counts.late += 1;
                if !placed && let Some(s) = self.ring[i].as_mut() {
                    // Neither way: it came, too late.
                    s.state = State::Lost { placed: true };
                }
            }
            State::Pending => {
                let held = r.t3.saturating_sub(r.t2);
                let rtt = now
                    .saturating_sub(slot.sent)
                    .saturating_sub(Duration::from_nanos(held));
                self.rtt.add(rtt.as_secs_f64());
                self.counts.answered += 1;
                self.settle(false);
                if let Some(s) = self.ring[i].as_mut() {
                    s.state = State::Answered;
                }
                if self.clocks.len() == RING {
                    self.clocks.pop_front();
                }
                self.clocks.push_back(ClockSample {
                    t1: slot.t1,
                    t2: r.t2,
                    t3: r.t3,
                    t4,
                });
            }
        }
        // Which way the lost probes before this one went.
        for b in 0..64u64 {
            let Some(seq) = r.seq.checked_sub(b + 1) else {
                break;
            };
            let j = (seq % RING as u64) as usize;
            if let Some(s) = self.ring[j].as_mut()
                && s.seq == seq
                && s.state == (State::Lost { placed: false })
            {
                s.state = State::Lost { placed: true };
                match r.before & (1 << b) != 0 {
                    true => self.counts.lost_down += 1,
                    false => self.counts.lost_up += 1,
                }
            }
        }
    }

    /// When the oldest probe in flight times out.
    pub fn deadline(&self) -> Option<Duration> {
        (self.ring.iter().flatten())
            .filter(|s| s.state == State::Pending)
            .map(|s| s.sent + self.timeout)
            .min()
    }

    /// A TCP connect to the peer took `took`, or failed.
    pub fn tcp(&mut self, took: Option<Duration>) {
        match took {
            Some(t) => {
                self.counts.tcp_connects += 1;
                self.tcp_last = Some(t);
            }
            None => self.counts.tcp_failures += 1,
        }
    }

    /// The statistics of the newest probes.
    pub fn window(&self) -> Window {
        let lost = self.outcomes.iter().filter(|&&l| l).count();
        let loss_ratio = match self.outcomes.len() {
            0 => 0.0,
            n => lost as f64 / n as f64,
        };
        let samples: Vec<ClockSample> = self.clocks.iter().copied().collect();
        let offset = estimate(&samples);
        let (mut up, mut down) = (None, None);
        if let Some(o) = offset {
            let off = i128::from(o.server_minus_client_ns);
            let mut ups: Vec<i128> = (samples.iter())
                .map(|s| i128::from(s.t2) - i128::from(s.t1) - off)
                .collect();
            let mut downs: Vec<i128> = (samples.iter())
                .map(|s| i128::from(s.t4) - i128::from(s.t3) + off)
                .collect();
            up = median(&mut ups);
            down = median(&mut downs);
        }
        Window {
            loss_ratio,
            offset,
            up,
            down,
        }
    }
}

/// The median of `v`, ns, as seconds (the lower middle of an even count).
fn median(v: &mut [i128]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[(v.len() - 1) / 2] as f64 / 1e9)
}

#[cfg(test)]
#[path = "peer_tests.rs"]
mod tests;
