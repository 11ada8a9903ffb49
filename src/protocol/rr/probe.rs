//! The client's side of request/response over UDP (`rr --proto udp`,
//! `ping`) as a machine free of I/O: it takes the time and the datagrams
//! that arrive, and says when the next request is due, what it carries, and
//! what became of every request (a [`Probe`] each), so a driver only waits
//! on the socket until [`Prober::poll`]'s deadline.
//!
//! Requests leave on their own schedule whatever happens to earlier ones,
//! and every reply is matched to its request by sequence number. Without an
//! interval the next request leaves as soon as the previous one is answered
//! or has timed out (ACE's back-to-back test); with one, request *i* is due
//! at start + i × interval, so a lost reply never delays the probes after it
//! (ping's schedule). A reply after its timeout is counted late, a second
//! copy of a reply a duplicate, never another probe's answer nor a loss.

use serde::Serialize;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::echo::{Arrival, SeqWindow, UDP_REPLY_MIN, read_reply_words};
use crate::protocol::udp::header::{
    FLAG_HANDSHAKE, HEADER_LEN, Header, fill_payload, payload_slice,
};
use crate::protocol::udp::marks::{Marking, TosCounts};

/// How many timed-out requests are remembered so that a reply arriving after
/// its timeout is counted late (not ignored, and not lost twice).
const EXPIRED_MEMORY: usize = 65_536;

/// One request's outcome, for ping-style printing.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// Sequence number.
    pub seq: u64,
    /// Round trip, µs (None: lost).
    pub rtt_us: Option<f64>,
    /// Estimated client-to-server delay, µs (UDP).
    pub up_us: Option<f64>,
    /// Estimated server-to-client delay, µs (UDP).
    pub down_us: Option<f64>,
    /// The one-way split is right to within ± this, µs (the clock offset's
    /// bound); `None` when the clocks are trusted (`--synced`) or over TCP.
    pub split_error_us: Option<f64>,
    /// A reply that came after its request had timed out (and was reported lost).
    pub late: bool,
    /// A second (or later) reply to a request already answered: counted
    /// once, and not as another probe's reply.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// Part of the warm-up.
    pub warmup: bool,
}

impl Probe {
    /// Whether this is the probe's fate (answered in time, or lost when its
    /// timeout passed), told once per probe; a late or duplicate reply comes
    /// after that and is counted apart.
    pub fn is_fate(&self) -> bool {
        !self.late && !self.duplicate
    }
}

/// What a run of probes is asked to do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Request payload bytes.
    pub size: u32,
    /// Requests to send at most, warm-up included.
    pub total: u64,
    /// The first this many requests are the warm-up.
    pub warmup: u64,
    /// A reply later than this counts as lost (and then late).
    pub timeout: Duration,
    /// Requests on this schedule instead of back to back.
    pub interval: Option<Duration>,
    /// No request leaves this long after the first was allowed out.
    pub duration: Option<Duration>,
    /// The server's clock minus this end's, ns (one-way splits).
    pub offset_ns: i64,
    /// The splits' error bound, µs, told with every probe.
    pub split_error_us: Option<f64>,
}

/// One reply's arrival, as the driver saw it.
#[derive(Debug, Clone, Copy)]
pub struct Arrived {
    /// When the driver had it (monotonic).
    pub at: Instant,
    /// This end's CLOCK_REALTIME then, ns.
    pub real_ns: u64,
    /// The kernel's receive time (CLOCK_REALTIME ns), when the driver
    /// trusts it: it leaves out this process's wake-up.
    pub stamp: Option<u64>,
    /// The TOS byte the reply came with, if the kernel said.
    pub tos: Option<u8>,
}

/// One probe's outcome, and the round trip to record for it.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// As told to the user.
    pub probe: Probe,
    /// The round trip of a reply in time (the statistics' sample).
    pub rtt: Option<Duration>,
}

/// What the driver does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A request is due: take it from [`Prober::request`].
    Send,
    /// Wait for a datagram until this time, then poll again.
    Wait(Instant),
    /// Every probe's fate is known and the drain is over.
    Done,
}

/// What the run counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests sent (warm-up included), whether the socket took them or not.
    pub sent: u64,
    /// Replies in time.
    pub received: u64,
    /// First replies after their request's timeout.
    pub late: u64,
    /// Replies in time whose check word or pattern is wrong.
    pub corrupt: u64,
    /// Replies in time timed by their kernel receive stamp.
    pub rx_stamped: u64,
    /// Replies that arrived more than once (the copies after the first).
    pub duplicates_down: u64,
    /// Replies that arrived behind one the server sent after them.
    pub reordered_down: u64,
}

/// A request in flight.
#[derive(Debug)]
struct Pending {
    seq: u64,
    /// Monotonic send time (round trip start).
    t0: Instant,
    /// `t0` + the plan's timeout: when the request is lost unanswered. Kept
    /// so that each poll (twice a round trip) compares two instants rather
    /// than subtracting them.
    fate: Instant,
    /// Realtime send time, stamped into the header (one-way up).
    t1: u64,
    /// Realtime just before the send call (kernel receive stamps compare to it).
    t_send: u64,
}

/// When the next request may leave.
enum Due {
    At(Instant),
    /// Back to back: once the request in flight has its fate.
    AfterFate,
    /// No more requests.
    Never,
}

/// When request `seq` is due on an `interval` schedule starting at `start`.
pub(super) fn due(start: Instant, interval: Duration, seq: u64) -> Instant {
    let ns = interval.as_nanos().saturating_mul(u128::from(seq));
    start + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX / 2))
}

/// How long to listen once every probe's fate is known: three times the
/// longest round trip seen, at least a millisecond, at most the timeout.
pub(super) fn drain_time(max_rtt: Duration, timeout: Duration) -> Duration {
    (max_rtt * 3).max(Duration::from_millis(1)).min(timeout)
}

/// The client's side of one run of UDP round trips.
#[derive(Debug)]
pub struct Prober {
    plan: Plan,
    start: Instant,
    /// When the first request was allowed out: the duration counts from it.
    first_send: Option<Instant>,
    next: u64,
    /// The request handed out and not yet said sent: (seq, realtime stamp).
    out: Option<(u64, u64)>,
    req: Vec<u8>,
    pending: VecDeque<Pending>,
    expired: VecDeque<u64>,
    /// Replies by sequence number (each counted once).
    replies: SeqWindow,
    /// The highest place in the server's sending order seen (a reply behind
    /// it was reordered on the way down).
    top_place: Option<u64>,
    counts: Counts,
    marks: TosCounts,
    max_rtt: Duration,
    drain_until: Option<Instant>,
    events: VecDeque<Outcome>,
}

impl Prober {
    /// A run whose schedule starts at `start`.
    pub fn new(plan: Plan, start: Instant) -> Prober {
        Prober {
            req: vec![0; HEADER_LEN + plan.size as usize],
            plan,
            start,
            first_send: None,
            next: 0,
            out: None,
            pending: VecDeque::new(),
            expired: VecDeque::new(),
            replies: SeqWindow::default(),
            top_place: None,
            counts: Counts::default(),
            marks: TosCounts::default(),
            max_rtt: Duration::ZERO,
            drain_until: None,
            events: VecDeque::new(),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// The replies' marking against `sent_tos`, if the kernel told any.
    pub fn marking(&self, sent_tos: u8) -> Option<Marking> {
        self.marks.marking(sent_tos)
    }

    /// The next outcome to tell, in order.
    pub fn poll_event(&mut self) -> Option<Outcome> {
        self.events.pop_front()
    }

    fn probe(&self, seq: u64) -> Probe {
        Probe {
            seq,
            rtt_us: None,
            up_us: None,
            down_us: None,
            split_error_us: self.plan.split_error_us,
            late: false,
            duplicate: false,
            warmup: seq < self.plan.warmup,
        }
    }

    fn lost(&mut self, seq: u64) {
        let probe = self.probe(seq);
        self.events.push_back(Outcome { probe, rtt: None });
    }

    /// Whether request `next` may still leave at `now`: within the count
    /// and, with a duration, before it has passed since the first request.
    fn may_send(&mut self, now: Instant) -> bool {
        if self.next >= self.plan.total {
            return false;
        }
        let Some(d) = self.plan.duration else {
            return true;
        };
        let first = *self.first_send.get_or_insert(now);
        now.saturating_duration_since(first) < d
    }

    fn next_due(&mut self, now: Instant) -> Due {
        if !self.may_send(now) {
            return Due::Never;
        }
        match self.plan.interval {
            Some(iv) => Due::At(due(self.start, iv, self.next)),
            None if self.pending.is_empty() => Due::At(now),
            None => Due::AfterFate,
        }
    }

    /// The time is `now`: requests whose timeout has passed are lost (until
    /// a reply proves them late); says what to do next.
    pub fn poll(&mut self, now: Instant) -> Next {
        while let Some(p) = self.pending.front()
            && now >= p.fate
        {
            let seq = p.seq;
            self.pending.pop_front();
            if self.expired.len() == EXPIRED_MEMORY {
                self.expired.pop_front();
            }
            self.expired.push_back(seq);
            self.lost(seq);
        }
        let fate = self.pending.front().map(|p| p.fate);
        match self.next_due(now) {
            Due::At(d) if d <= now => Next::Send,
            Due::At(d) => Next::Wait(fate.map_or(d, |f| f.min(d))),
            Due::AfterFate => Next::Wait(fate.unwrap_or(now)),
            Due::Never => match fate {
                Some(f) => Next::Wait(f),
                // Every probe's fate is known: listen a little longer for
                // duplicates and late replies still on their way (irtt
                // waits 3 × the longest round trip for the same reason).
                None => {
                    let end = *self
                        .drain_until
                        .get_or_insert_with(|| now + drain_time(self.max_rtt, self.plan.timeout));
                    if now >= end {
                        Next::Done
                    } else {
                        Next::Wait(end)
                    }
                }
            },
        }
    }

    /// The request [`Next::Send`] asked for, stamped with this end's
    /// CLOCK_REALTIME `real_ns`; the driver then says [`Prober::sent`] or
    /// [`Prober::send_failed`].
    pub fn request(&mut self, real_ns: u64) -> &[u8] {
        let seq = self.next;
        self.next += 1;
        self.counts.sent += 1;
        fill_payload(1, seq, &mut self.req[HEADER_LEN..]);
        Header {
            flags: 0,
            stream: 1,
            seq,
            send_ns: real_ns,
            payload_len: self.plan.size,
        }
        .write(&mut self.req);
        self.out = Some((seq, real_ns));
        &self.req
    }

    /// The last request left at `t0` (monotonic), `t_send` (CLOCK_REALTIME
    /// just before the send call).
    pub fn sent(&mut self, t0: Instant, t_send: u64) {
        if let Some((seq, t1)) = self.out.take() {
            self.pending.push_back(Pending {
                seq,
                t0,
                fate: t0 + self.plan.timeout,
                t1,
                t_send,
            });
        }
    }

    /// The socket refused the last request: it is lost now.
    pub fn send_failed(&mut self) {
        if let Some((seq, _)) = self.out.take() {
            self.lost(seq);
        }
    }

    /// A datagram `d` arrived as `r` says.
    pub fn on_datagram(&mut self, d: &[u8], r: Arrived) {
        let Ok(h) = Header::read(d) else {
            return;
        };
        if h.flags & FLAG_HANDSHAKE != 0 || d.len() < HEADER_LEN + UDP_REPLY_MIN as usize {
            return;
        }
        match self.replies.arrive(h.seq) {
            Arrival::Fresh { .. } => {}
            Arrival::Duplicate => {
                self.counts.duplicates_down += 1;
                let mut probe = self.probe(h.seq);
                probe.duplicate = true;
                self.events.push_back(Outcome { probe, rtt: None });
                return;
            }
            Arrival::Stale => return,
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&d[HEADER_LEN + at..HEADER_LEN + at + 8]);
            u64::from_be_bytes(b)
        };
        // The reply starts with the server's receive time and its place in
        // the server's sending order; the rest is the pattern for
        // (stream ^ 1, seq).
        let words = read_reply_words([word(0), word(8), word(16)]);
        if let Some((_, place)) = words {
            self.counts.reordered_down += u64::from(self.top_place.is_some_and(|t| place < t));
            self.top_place = Some(self.top_place.map_or(place, |t| t.max(place)));
        }
        let Some(i) = self.pending.iter().position(|p| p.seq == h.seq) else {
            // Not in flight: a reply after its timeout counts late.
            if let Some(j) = self.expired.iter().position(|&s| s == h.seq) {
                self.expired.remove(j);
                self.counts.late += 1;
                let mut probe = self.probe(h.seq);
                probe.late = true;
                self.events.push_back(Outcome { probe, rtt: None });
            }
            return;
        };
        let Some(p) = self.pending.remove(i) else {
            return;
        };
        let mut rtt = r.at.saturating_duration_since(p.t0);
        let mut t4 = r.real_ns;
        if let Some(tos) = r.tos {
            self.marks.on(tos);
        }
        if let Some(st) = r.stamp {
            rtt = Duration::from_nanos(st.saturating_sub(p.t_send)).min(rtt);
            t4 = st;
        }
        let t2 = word(0);
        let head = UDP_REPLY_MIN as usize;
        // Compared with the pattern in place, not a copy of it.
        let expect = payload_slice(h.stream ^ 1, h.seq, head, d.len() - HEADER_LEN - head);
        if words.is_none() || d[HEADER_LEN + head..] != *expect {
            self.counts.corrupt += 1;
        }
        self.counts.received += 1;
        self.max_rtt = self.max_rtt.max(rtt);
        self.counts.rx_stamped += u64::from(r.stamp.is_some());
        let theta = self.plan.offset_ns as f64;
        let mut probe = self.probe(p.seq);
        probe.rtt_us = Some(rtt.as_nanos() as f64 / 1e3);
        probe.up_us = Some((t2 as f64 - p.t1 as f64 - theta) / 1e3);
        probe.down_us = Some((t4 as f64 - h.send_ns as f64 + theta) / 1e3);
        self.events.push_back(Outcome {
            probe,
            rtt: Some(rtt),
        });
    }
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
