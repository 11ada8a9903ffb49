//! One direction of a relayed TCP connection, without a thread: bytes read
//! are framed (netrig's control and data connections) or passed as plain
//! bytes, impaired, and queued with the time each may leave (a shaper and a
//! delay line); the event loop in [`super::pumps`] reads and writes as the
//! sockets allow.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use uuid::Uuid;

use super::datagram::Link;
use super::limits::{MemBudget, alloc_size, entry_cost};
use super::udp_flow;
use super::{Dir, Event, Shared};
use crate::protocol::proto::{Message, RrProto, TestSpec};
use crate::protocol::relay::framer::{After, Framer, Piece};
use crate::protocol::relay::impair::{SharedBucket, StreamImpairer};

/// Memory one direction may hold waiting to leave (counted as allocated,
/// with its partial frame); beyond it, or beyond what the relay's
/// `--max-queue` has left, the relay stops reading that direction, and TCP's
/// flow control holds the sender back (as a router's full queue would not:
/// TCP never loses bytes in the relay).
const QUEUE_CAP: u64 = 16 << 20;

/// Most bytes one read takes while frames are expected: a read of `n` bytes
/// may complete `n / MIN_FRAME` frames, each a queue entry of its own, so
/// reads there stay small to keep the worst case of one read small.
const FRAME_READ: usize = 1024;

/// The smallest frame: a header and a two-byte JSON value.
const MIN_FRAME: u64 = crate::protocol::proto::HEADER_LEN as u64 + 2;

/// How soon a direction held back by the relay's whole budget (not its own
/// queue, whose writes wake it) tries again.
const BUDGET_RETRY_NS: u64 = 5_000_000;

/// Reads of one direction per turn, so one busy connection cannot starve
/// the others on its loop.
const READS_PER_TURN: usize = 16;

/// What a connection's two directions share.
#[derive(Default)]
pub(super) struct Meta {
    /// The test requested on this control connection, until it is accepted.
    pending: Option<TestSpec>,
    /// Data bytes the server will send on this data connection.
    down_data: Option<u64>,
    /// The TCP session this control connection set up.
    pub(super) session: Option<Uuid>,
    /// When either direction last moved bytes (relay clock, ns).
    pub(super) last_ns: u64,
}

impl Meta {
    pub(super) fn new(now_ns: u64) -> Meta {
        Meta {
            last_ns: now_ns,
            ..Meta::default()
        }
    }
}

/// Looks at one frame going `dir` and says how much data follows it.
fn on_frame(sh: &Arc<Shared>, c: &mut Meta, link: &Arc<Link>, dir: Dir, m: &mut Message) -> After {
    let mut after = After::default();
    match (dir, m) {
        (Dir::Up, Message::TestRequest { test }) => {
            if let TestSpec::Rr(r) = test
                && r.proto == RrProto::Tcp
            {
                after.data = Some(u64::from(r.size) * r.iterations);
            }
            c.pending = Some(test.clone());
        }
        (Dir::Up, Message::DataHello(h)) => {
            let known = sh
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&h.session)
                .map(|t| {
                    let bytes = t.transfer_of(h.connection);
                    crate::protocol::plan::expected_bytes(
                        t.pattern,
                        bytes,
                        t.push_bytes,
                        t.pull_bytes,
                    )
                });
            if let Some((up, down)) = known {
                after.data = Some(up);
                c.down_data = Some(down);
            }
        }
        (Dir::Down, Message::TestAccept { session }) => match c.pending.take() {
            Some(TestSpec::Tcp(t)) => {
                sh.sessions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(*session, t);
                c.session = Some(*session);
            }
            Some(TestSpec::Rr(r)) if r.proto == RrProto::Tcp => {
                after.data = Some(u64::from(r.reply) * r.iterations);
            }
            _ => {}
        },
        (Dir::Down, Message::DataAck { .. }) => after.data = c.down_data,
        (Dir::Down, Message::UdpAccept { port, .. }) if sh.cfg.udp => {
            match udp_flow(sh, *port, link) {
                Ok(p) => {
                    *port = p;
                    after.rewritten = true;
                }
                Err(e) => eprintln!("relay: cannot relay UDP port {port}: {e}"),
            }
        }
        _ => {}
    }
    after
}

/// Bytes waiting to leave, and when they may.
struct Chunk {
    at_ns: u64,
    bytes: Vec<u8>,
    sent: usize,
}

/// The most one read of `n` bytes can add to a direction's memory, with a
/// partial frame of `framer_cap` bytes held before it; `data` when the
/// framer says all `n` are data (one queue entry).
fn worst_case(n: usize, framer_cap: usize, data: bool) -> u64 {
    if data {
        return entry_cost::<Chunk>(n);
    }
    // Every byte held before and read now may leave in frames of the
    // smallest size, then the rest as one data entry; what stays partial
    // may grow the frame buffer to twice its size plus the read.
    let bytes = (framer_cap + n) as u64;
    let entries = bytes / MIN_FRAME + 2;
    bytes + entries * entry_cost::<Chunk>(0) + entries * 32 + alloc_size(2 * framer_cap + n + 8)
}

/// Where one direction stands after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    /// More to do: at this relay time (ns) at the latest, or when a socket
    /// is ready.
    Going(Option<u64>),
    /// Both its reading and its writing are over.
    Done,
    /// An impairment cut the connection here: reset both ends.
    Reset,
}

/// One direction of a relayed connection.
pub(super) struct Half {
    dir: Dir,
    flow: u64,
    framer: Framer,
    imp: StreamImpairer,
    bucket: Option<SharedBucket>,
    /// Whether chunks wait for their departure time (a delay, jitter or a
    /// shaper); without, they leave as soon as the socket takes them.
    delays: bool,
    queue: VecDeque<Chunk>,
    /// What `queue` holds, as allocated.
    held: u64,
    /// What the framer's partial frame holds, as allocated.
    framer_held: u64,
    /// The relay's memory, which `held` and `framer_held` are taken from.
    budget: Arc<MemBudget>,
    /// Reading is over (end of stream, or an error).
    ended: bool,
    /// The far end's writing side is shut.
    shut: bool,
    /// A reset is due once the bytes before it are out.
    cut: bool,
    /// Writing failed: what is left is thrown away.
    broken: bool,
}

impl Half {
    pub(super) fn new(sh: &Shared, flow: u64, dir: Dir) -> Half {
        let spec = sh.spec(dir).clone();
        Half {
            dir,
            flow,
            framer: Framer::default(),
            delays: spec.delays(),
            imp: StreamImpairer::new(spec, sh.seed(flow, dir)),
            bucket: sh.bucket(dir),
            queue: VecDeque::new(),
            held: 0,
            framer_held: 0,
            budget: Arc::clone(&sh.budget),
            ended: false,
            shut: false,
            cut: false,
            broken: false,
        }
    }

    /// Moves this direction from `from` to `to` as far as the sockets and
    /// the departure times allow.
    pub(super) fn turn<S>(
        &mut self,
        sh: &Arc<Shared>,
        meta: &mut Meta,
        link: &Arc<Link>,
        (from, to): (&S, &S),
        buf: &mut [u8],
    ) -> Turn
    where
        for<'a> &'a S: Read + Write,
        S: Shutdown,
    {
        let mut reads = 0;
        let mut starved = false;
        loop {
            self.flush(sh, meta, to);
            if self.ended || self.cut || self.broken {
                break;
            }
            if reads == READS_PER_TURN {
                // Come back at once: the socket may still hold more.
                return Turn::Going(Some(sh.now_ns()));
            }
            let Some((n, reserved)) = self.room(buf.len()) else {
                // Its own queue full: its writes wake it. The relay's budget
                // spent elsewhere: nothing here will, so look again soon.
                starved =
                    self.budget.free() < QUEUE_CAP.saturating_sub(self.held + self.framer_held);
                break;
            };
            let mut r = from;
            match r.read(&mut buf[..n]) {
                Ok(0) => {
                    self.budget.give(reserved);
                    self.ended = true;
                }
                Ok(n) => {
                    reads += 1;
                    meta.last_ns = sh.now_ns();
                    let before = self.held + self.framer_held;
                    self.take(sh, meta, link, &buf[..n]);
                    self.settle(before, reserved);
                }
                Err(e) => {
                    self.budget.give(reserved);
                    match e.kind() {
                        io::ErrorKind::WouldBlock => break,
                        io::ErrorKind::Interrupted => {}
                        _ => self.ended = true,
                    }
                }
            }
        }
        let retry = starved.then(|| sh.now_ns() + BUDGET_RETRY_NS);
        if !self.queue.is_empty() {
            let next = self.queue.front().map(|c| c.at_ns);
            let next = next.filter(|_| self.delays);
            return Turn::Going(match (next, retry) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            });
        }
        if self.cut {
            return Turn::Reset;
        }
        if (self.ended || self.broken) && !self.shut {
            to.shut_write();
            self.shut = true;
        }
        if self.shut {
            Turn::Done
        } else {
            Turn::Going(retry)
        }
    }

    /// How many bytes the next read may take, and the memory taken from the
    /// relay's budget for its worst case; `None` when not even one byte fits.
    fn room(&self, buf_len: usize) -> Option<(usize, u64)> {
        let own = QUEUE_CAP.saturating_sub(self.held + self.framer_held);
        let free = self.budget.free().min(own);
        let framer_cap = self.framer.capacity();
        let (data, most) = match self.framer.data_left() {
            Some(left) => (
                true,
                buf_len.min(usize::try_from(left).unwrap_or(usize::MAX)),
            ),
            None => (false, buf_len.min(FRAME_READ)),
        };
        // The largest read whose worst case fits (the cost grows with n).
        let mut n = most;
        while n > 0 && worst_case(n, framer_cap, data) > free {
            n = if n > 64 { n / 2 } else { n - 1 };
        }
        if n == 0 {
            return None;
        }
        let reserved = worst_case(n, framer_cap, data);
        self.budget.try_take(reserved).then_some((n, reserved))
    }

    /// After a read that reserved `reserved` while the direction held
    /// `before`: keeps what it now holds, gives the rest back.
    fn settle(&mut self, before: u64, reserved: u64) {
        self.framer_held = alloc_size(self.framer.capacity());
        let after = self.held + self.framer_held;
        let added = after.saturating_sub(before);
        debug_assert!(added <= reserved, "{added} > {reserved}");
        if added <= reserved {
            self.budget
                .give(reserved - added + before.saturating_sub(after));
        } else {
            // Cannot happen (worst_case bounds it); stay counted if it does.
            self.budget.give(before.saturating_sub(after));
            let _ = self.budget.try_take(added - reserved);
        }
    }

    /// Splits, impairs and queues bytes just read.
    fn take(&mut self, sh: &Arc<Shared>, meta: &mut Meta, link: &Arc<Link>, b: &[u8]) {
        let dir = self.dir;
        let pieces = self
            .framer
            .push(b, &mut |m| on_frame(sh, meta, link, dir, m));
        for piece in pieces {
            let bytes = match piece {
                Piece::Frame(f) => f,
                Piece::Data(d) => match self.impair(sh, d) {
                    Some(d) => d,
                    None => return,
                },
            };
            self.push(sh, bytes);
        }
    }

    /// Impairs data bytes; `None` once a cut ends the connection (what came
    /// before the cut is queued).
    fn impair(&mut self, sh: &Arc<Shared>, mut d: Vec<u8>) -> Option<Vec<u8>> {
        let counts = sh.counts(self.dir);
        let off = self.imp.offset();
        let e = self.imp.apply(&mut d);
        counts
            .stream_bytes
            .fetch_add(e.cut.map_or(d.len(), |k| k) as u64, Relaxed);
        for at in &e.corrupted {
            counts.stream_corrupted.fetch_add(1, SeqCst);
            self.event(sh, "corrupted", *at);
        }
        let Some(keep) = e.cut else {
            return Some(d);
        };
        d.truncate(keep);
        self.push(sh, d);
        self.cut = true;
        counts.resets.fetch_add(1, SeqCst);
        self.event(sh, "reset", off + keep as u64);
        None
    }

    fn event(&self, sh: &Shared, event: &'static str, offset: u64) {
        sh.event(Event {
            t_s: sh.t_s(),
            proto: "tcp",
            flow: self.flow,
            dir: self.dir,
            event,
            index: None,
            seq: None,
            offset: Some(offset),
        });
    }

    /// Queues bytes to leave after the shaper and the delay line (their
    /// memory was taken from the budget before the read).
    fn push(&mut self, sh: &Shared, mut bytes: Vec<u8>) {
        bytes.shrink_to_fit();
        let now = sh.now_ns();
        let ready = match &self.bucket {
            // TCP's own flow control bounds the queue: no limit here.
            Some(b) => b
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .shape(bytes.len(), now, u64::MAX)
                .unwrap_or(now),
            None => now,
        };
        let at_ns = self.imp.departure(ready);
        self.held += entry_cost::<Chunk>(bytes.capacity());
        self.queue.push_back(Chunk {
            at_ns,
            bytes,
            sent: 0,
        });
    }

    /// Writes what is due and what the socket takes.
    fn flush<S>(&mut self, sh: &Shared, meta: &mut Meta, to: &S)
    where
        for<'a> &'a S: Write,
    {
        let now = sh.now_ns();
        while let Some(c) = self.queue.front_mut() {
            if self.delays && c.at_ns > now {
                return;
            }
            let mut w = to;
            match w.write(&c.bytes[c.sent..]) {
                Ok(n) if n > 0 => {
                    c.sent += n;
                    meta.last_ns = now;
                    if c.sent == c.bytes.len() {
                        let cost = entry_cost::<Chunk>(c.bytes.capacity());
                        self.queue.pop_front();
                        self.release(cost);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => {
                    self.broken = true;
                    self.queue.clear();
                    self.release(self.held);
                    return;
                }
            }
        }
    }
}

impl Half {
    /// Gives back `cost` of the queue's memory; an emptied queue gives back
    /// its ring too (a `VecDeque` never shrinks by itself).
    fn release(&mut self, cost: u64) {
        self.held -= cost;
        self.budget.give(cost);
        if self.queue.is_empty() && self.queue.capacity() > 16 {
            self.queue = VecDeque::new();
        }
    }
}

impl Drop for Half {
    fn drop(&mut self) {
        self.budget.give(self.held + self.framer_held);
    }
}

/// Shutting a stream's writing side (so the half is testable in memory).
pub(super) trait Shutdown {
    fn shut_write(&self);
}

impl Shutdown for mio::net::TcpStream {
    fn shut_write(&self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::proto::{Message, encode};

    /// What the pieces of one push and the framer's partial frame cost.
    fn held(pieces: &[Piece], f: &Framer) -> u64 {
        let queued: u64 = pieces
            .iter()
            .map(|p| match p {
                Piece::Frame(b) | Piece::Data(b) => entry_cost::<Chunk>(b.len()),
            })
            .sum();
        queued + alloc_size(f.capacity())
    }

    #[test]
    fn one_read_never_costs_more_than_its_worst_case() {
        // Reads of every size of the smallest frames, after a partial one.
        let mut stream = Vec::new();
        for _ in 0..400 {
            stream.extend(encode(&Message::Stop));
        }
        for first in [0usize, 3, 11] {
            for n in [1usize, 7, 64, 333, FRAME_READ] {
                let mut f = Framer::default();
                let mut at = 0;
                let mut before = 0;
                if first > 0 {
                    f.push(&stream[..first], &mut |_| After::default());
                    at = first;
                    before = alloc_size(f.capacity());
                }
                while at + n <= stream.len() {
                    let cap = f.capacity();
                    let pieces = f.push(&stream[at..at + n], &mut |_| After::default());
                    let after = held(&pieces, &f);
                    let added = after.saturating_sub(before);
                    assert!(
                        added <= worst_case(n, cap, false),
                        "read {n} at {at}: {added} > {}",
                        worst_case(n, cap, false)
                    );
                    before = alloc_size(f.capacity());
                    at += n;
                }
            }
        }
    }

    #[test]
    fn a_data_read_costs_one_entry() {
        let mut f = Framer::default();
        let p = f.push(b"GET / HTTP/1.1\r\n", &mut |_| After::default());
        assert_eq!(f.data_left(), Some(u64::MAX));
        assert_eq!(held(&p, &f), worst_case(16, 0, true));
        assert_eq!(
            worst_case(16, 0, true),
            32 + 2 * std::mem::size_of::<Chunk>() as u64
        );
    }
}
