//! One direction of a relayed TCP connection, without a thread: bytes read
//! are framed (netrig's control and data connections) or passed as plain
//! bytes, impaired, and queued with the time each may leave (a shaper and a
//! delay line); the event loop in [`super::pumps`] reads and writes as the
//! sockets allow.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use uuid::Uuid;

use super::framer::{After, Framer, Piece};
use super::impair::{SharedBucket, StreamImpairer};
use super::udp_flow;
use super::{Dir, Event, Shared};
use crate::proto::{Message, RrProto, TestSpec};

/// Bytes one direction may hold waiting to leave; beyond it the relay stops
/// reading that direction, and TCP's flow control holds the sender back (as
/// a router's full queue would not: TCP never loses bytes in the relay).
const QUEUE_CAP: usize = 16 << 20;

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
fn on_frame(
    sh: &Arc<Shared>,
    c: &mut Meta,
    udp_stop: &Arc<AtomicBool>,
    dir: Dir,
    m: &mut Message,
) -> After {
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
                    crate::plan::expected_bytes(t.pattern, bytes, t.push_bytes, t.pull_bytes)
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
            match udp_flow(sh, *port, udp_stop) {
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
    queued: usize,
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
            queued: 0,
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
        udp_stop: &Arc<AtomicBool>,
        (from, to): (&S, &S),
        buf: &mut [u8],
    ) -> Turn
    where
        for<'a> &'a S: Read + Write,
        S: Shutdown,
    {
        let mut reads = 0;
        loop {
            self.flush(sh, meta, to);
            if self.ended || self.cut || self.broken || self.queued >= QUEUE_CAP {
                break;
            }
            if reads == READS_PER_TURN {
                // Come back at once: the socket may still hold more.
                return Turn::Going(Some(sh.now_ns()));
            }
            let mut r = from;
            match r.read(buf) {
                Ok(0) => self.ended = true,
                Ok(n) => {
                    reads += 1;
                    meta.last_ns = sh.now_ns();
                    self.take(sh, meta, udp_stop, &buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.ended = true,
            }
        }
        if !self.queue.is_empty() {
            let next = self.queue.front().map(|c| c.at_ns);
            return Turn::Going(next.filter(|_| self.delays));
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
            Turn::Going(None)
        }
    }

    /// Splits, impairs and queues bytes just read.
    fn take(&mut self, sh: &Arc<Shared>, meta: &mut Meta, udp_stop: &Arc<AtomicBool>, b: &[u8]) {
        let dir = self.dir;
        let pieces = self
            .framer
            .push(b, &mut |m| on_frame(sh, meta, udp_stop, dir, m));
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

    /// Queues bytes to leave after the shaper and the delay line.
    fn push(&mut self, sh: &Shared, bytes: Vec<u8>) {
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
        self.queued += bytes.len();
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
                        self.queued -= c.bytes.len();
                        self.queue.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => {
                    self.broken = true;
                    self.queue.clear();
                    self.queued = 0;
                    return;
                }
            }
        }
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
