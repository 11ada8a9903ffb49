//! The data phase of one TCP connection as a state machine, with no socket
//! and no clock inside (the shape of quinn-proto): the I/O layer tells it what
//! was read, what was written and what time it is; it says what to write
//! next, how much to read, when it next needs the time, and finally the
//! verdict both ends agree on. One machine serves either end: it runs the
//! plan (send from the pattern, receive and verify against it, or both at
//! once for duplex), then sends its [`FinalReport`], reads the peer's and
//! combines them with [`agree`].
//!
//! Reads are never larger than what the plan still expects, so the peer's
//! final report is never consumed as data; pattern bytes where that report
//! should be mean the peer sent more than planned.
//!
//! A time-bounded connection (`-t`: [`TcpSpec::time_bound_ms`]) may end its
//! data before the plan does. Its data is a run of chunks of a size both
//! ends derive from the spec ([`chunk_of`]); once the sender's deadline has
//! passed it finishes the chunk in progress and sends a
//! [`Message::DataEnd`] frame where the next chunk would begin. The
//! receiver looks at the first bytes of every chunk: it knows which
//! pattern bytes belong there, so bytes that differ and start like a frame
//! are the end marker, and bytes that differ otherwise are corrupt data
//! (with count-only verification too). In the rare case that the marker's
//! first bytes equal the pattern at that offset, the sender sends one more
//! chunk instead. Both ends then exchange their reports as after a full
//! plan and agree on the bytes actually moved: a success, not a
//! cancellation, verified to the last byte.

use std::io;

pub use super::schedule::Now;
use super::schedule::{BurstLog, Bursts, Paced};
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::protocol::outcome::{ConnResult, NoReport, agree};
use crate::protocol::pattern::{Direction, Pattern, stream_start};
use crate::protocol::plan::{Plan, Role, Step};
use crate::protocol::proto::{
    self, FRAME_VERSION, FinalReport, HEADER_LEN, IoPattern, MAGIC, Message, TcpSpec, Verdict,
    VerifyLevel,
};

/// A time-bounded connection's chunk when nothing slows its sender: at
/// 1 Gbit/s about a millisecond past the deadline, at 10 Mbit/s a tenth
/// of a second; a multiple of the default 64 KiB buffer, so reads that
/// stop at each chunk's start cost no extra call.
pub const CHUNK: u64 = 128 << 10;

/// The chunk connection `id` of `spec` sends its data in, which both ends
/// derive alike; 0 when the connection is not time-bounded. With bursts a
/// chunk is a burst (the burst in progress is finished), with a rate limit
/// what one period allows (so the deadline is passed by about a period),
/// otherwise [`CHUNK`]; and at least a frame header, so the bytes that
/// tell data from the end marker lie in one chunk. Pushpull is never
/// time-bounded: its turns are its plan.
pub fn chunk_of(spec: &TcpSpec, id: Uuid) -> u64 {
    if spec.time_bound_ms == 0 || spec.pattern == IoPattern::Pushpull {
        return 0;
    }
    let base = match (spec.burst, spec.rate) {
        (Some(b), _) => b.size,
        (None, Some(r)) => r.for_connection(id).bytes_per_period().min(CHUNK),
        (None, None) => CHUNK,
    }
    .max(1);
    base * (HEADER_LEN as u64).div_ceil(base)
}

/// Whether `head`, the first bytes at a chunk's start that are not the
/// pattern's, can begin a frame (the end marker) rather than be corrupt data.
fn starts_a_frame(head: &[u8]) -> bool {
    let lead = [MAGIC[0], MAGIC[1], FRAME_VERSION];
    let n = head.len().min(lead.len());
    head[..n] == lead[..n]
        && head
            .first_chunk::<HEADER_LEN>()
            .is_none_or(|h| proto::parse_header(h).is_ok())
}

/// Room taken at once for the peer's final report (a few hundred bytes
/// in JSON, well under this in the fixed layout); a larger one grows.
const REPORT_ROOM: usize = 1024;

/// What the machine wants written next.
#[derive(Debug, PartialEq, Eq)]
pub enum Transmit<'a> {
    /// Write (a prefix of) these bytes, then call [`Conn::on_written`].
    Bytes(&'a [u8]),
    /// Nothing to write before this time (the next burst is due).
    WaitUntil(Instant),
    /// Nothing to write now.
    Nothing,
}

/// Something the I/O layer may act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEvent {
    /// Burst `index` has been written in full: a good moment to read
    /// TCP_INFO for it ([`Conn::set_burst_info`]).
    BurstSent(usize),
}

/// Turns a socket error into a verdict, naming timeouts for what they are.
pub fn net_verdict(e: &io::Error) -> Verdict {
    let detail = match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("no progress within the idle timeout ({e})")
        }
        _ => e.to_string(),
    };
    Verdict::NetworkError { detail }
}

/// This end's verdict: corruption seen wins, then the I/O outcome.
fn verdict_of(failure: Option<Verdict>, corrupt: Option<u64>) -> Verdict {
    match (failure, corrupt) {
        (_, Some(offset)) => Verdict::Corrupt { offset },
        (Some(v), None) => v,
        (None, None) => Verdict::Ok,
    }
}

/// Where the connection is.
#[derive(Debug)]
enum Phase {
    /// Running the plan.
    Data,
    /// Exchanging final reports: this end's goes out (`at` bytes of `out`
    /// written) while the peer's comes in (`inbuf`, then `peer` once read);
    /// the two directions are independent, so neither waits on the other.
    Final {
        out: Vec<u8>,
        at: usize,
        inbuf: Vec<u8>,
        peer: Option<Result<FinalReport, NoReport>>,
    },
    /// Finished with this result.
    Done(ConnResult),
}

/// One end of one data connection.
#[derive(Debug)]
pub struct Conn {
    plan: Plan,
    verify: bool,
    buffer: usize,
    send_start: u64,
    recv_start: u64,
    /// Bytes of the current step still to send and to receive.
    send_left: u64,
    recv_left: u64,
    sent: u64,
    received: u64,
    corrupt: Option<u64>,
    failure: Option<Verdict>,
    mine: Option<FinalReport>,
    phase: Phase,
    bursts: Option<Bursts>,
    /// Index of the current burst and bytes of it left (burst mode).
    burst_at: u64,
    events: Vec<ConnEvent>,
    transfer: u64,
    paced: Option<Paced>,
    /// The report is about to go out: the I/O layer may add this end's
    /// TCP_INFO to it ([`Conn::take_info_request`]).
    info_wanted: bool,
    /// The TCP_INFO the peer reported.
    peer_info: Option<proto::TcpInfoSummary>,
    /// Whether this end's report carries its TCP_INFO: the server's does
    /// (the client sums it as `server_tcp_info`); the client's does not,
    /// since no server has used it ([`Conn::set_final_tcp_info`]).
    reports_info: bool,
    /// This end's `ok` report goes in the fixed layout
    /// ([`proto::compact`]): a server's when its client asked for it, a
    /// client's once the server's report came so (a server that writes
    /// the layout reads it).
    compact: bool,
    /// This end's final report has been written in full.
    report_out: bool,
    /// Time-bounded: the chunk size ([`chunk_of`]; 0: not time-bounded).
    chunk: u64,
    /// Time-bounded: when this end's data ends (at the next chunk start).
    deadline: Option<Instant>,
    /// The end marker going out, and how much of it is written.
    end_out: Option<(Vec<u8>, usize)>,
    /// The first bytes of a chunk, fewer than decide what they are.
    head: Vec<u8>,
    /// The peer's data ended: its end marker is coming in here, and what
    /// follows it (its report) waits here for the final exchange.
    tail: Vec<u8>,
    /// Whether the bytes at a chunk's start were a frame (`tail` collects it).
    ending_in: bool,
}

impl Conn {
    /// A machine for `role`'s end of `connection` under `spec`, moving at
    /// most `buffer` bytes per call, whose data phase starts `now`.
    pub fn new(spec: &TcpSpec, connection: Uuid, role: Role, buffer: usize, now: Instant) -> Conn {
        let transfer = spec.transfer_of(connection);
        let (mine, theirs) = match role {
            Role::Client => (Direction::ClientToServer, Direction::ServerToClient),
            Role::Server => (Direction::ServerToClient, Direction::ClientToServer),
        };
        let bursts = match (spec.burst, spec.pattern) {
            (Some(b), IoPattern::Push | IoPattern::Pull) => Some(Bursts {
                spec: b,
                sending: matches!(
                    (spec.pattern, role),
                    (IoPattern::Push, Role::Client) | (IoPattern::Pull, Role::Server)
                ),
                t0: now,
                log: BurstLog::default(),
            }),
            _ => None,
        };
        let mut c = Conn {
            plan: Plan::new(
                spec.pattern,
                transfer,
                spec.push_bytes,
                spec.pull_bytes,
                role,
            ),
            verify: spec.verify == VerifyLevel::Data,
            buffer: buffer.max(1),
            send_start: stream_start(connection, mine),
            recv_start: stream_start(connection, theirs),
            send_left: 0,
            recv_left: 0,
            sent: 0,
            received: 0,
            corrupt: None,
            failure: None,
            mine: None,
            phase: Phase::Data,
            bursts,
            burst_at: 0,
            events: Vec::new(),
            transfer,
            paced: spec
                .rate
                .map(|r| r.for_connection(connection))
                .map(|r| Paced {
                    per_period: r.bytes_per_period(),
                    period: Duration::from_millis(r.period_ms.max(1)),
                    t0: now,
                }),
            info_wanted: false,
            peer_info: None,
            reports_info: role == Role::Server,
            compact: false,
            report_out: false,
            chunk: chunk_of(spec, connection),
            deadline: None,
            end_out: None,
            head: Vec::new(),
            tail: Vec::new(),
            ending_in: false,
        };
        c.prefetch();
        c.advance();
        c
    }

    /// Asks the CPU for the pattern bytes this end sends and checks next,
    /// without waiting for them. They are at a random place in the
    /// pattern, cold in the cache when a connection starts or wakes up:
    /// asked for before the socket is read or written, they arrive while
    /// the system call runs instead of stalling the copy and the check
    /// after it (on a crr client, the 2-byte reply's check and the
    /// request's copy were a tenth of its user time). A hint only: nothing
    /// it reads changes.
    pub fn prefetch(&self) {
        let pattern = Pattern::get();
        pattern.prefetch(self.send_start + self.sent);
        if self.verify {
            pattern.prefetch(self.recv_start + self.received);
        }
    }

    /// A time-bounded connection's data ends at the first chunk start at
    /// or after `at` (each sending end has its own: the client's run and
    /// the server's session began at slightly different times). Nothing
    /// changes for a connection that is not time-bounded.
    pub fn set_deadline(&mut self, at: Instant) {
        self.deadline = Some(at);
    }

    /// Whether the end marker's first bytes, as many as the receiver will
    /// look at here, equal the pattern the next chunk would start with.
    fn end_looks_like_data(&self, marker: &[u8]) -> bool {
        let k = (HEADER_LEN as u64).min(self.send_left) as usize;
        marker[..k] == *Pattern::get().slice(self.send_start, self.sent, k)
    }

    /// The burst at `k` carries this many bytes (0: past the end).
    fn burst_bytes(&self, k: u64) -> u64 {
        let size = self.bursts.as_ref().map_or(0, |b| b.spec.size.max(1));
        self.transfer
            .saturating_sub(k.saturating_mul(size))
            .min(size)
    }

    /// Moves to the next step when the current one is done, and to the
    /// final exchange when the plan is.
    fn advance(&mut self) {
        while matches!(self.phase, Phase::Data) && self.send_left == 0 && self.recv_left == 0 {
            if self.failure.is_some() {
                return self.finish_data();
            }
            match self.plan.next() {
                Some(Step::Send(n)) => self.send_left = n,
                Some(Step::Recv(n)) => self.recv_left = n,
                Some(Step::Both { send, recv }) => (self.send_left, self.recv_left) = (send, recv),
                None => return self.finish_data(),
            }
        }
    }

    /// The plan is over (done or failed): this end's report goes out,
    /// unless the connection is already known to be broken.
    fn finish_data(&mut self) {
        let mine = FinalReport {
            sent: self.sent,
            received: self.received,
            verdict: verdict_of(self.failure.take(), self.corrupt),
            tcp_info: None,
        };
        self.info_wanted = true;
        if let Some(b) = &mut self.bursts
            && b.log.done.len() as u64 > self.burst_at
        {
            // A burst cut short by the failure is reported as far as it got.
            b.close(true);
        }
        self.end_out = None;
        self.phase = if matches!(
            mine.verdict,
            Verdict::NetworkError { .. } | Verdict::Cancelled
        ) {
            Phase::Done(agree(&mine, Err(&NoReport::Failed)))
        } else {
            Phase::Final {
                // Encoded when first offered: its TCP_INFO is set before.
                out: Vec::new(),
                at: 0,
                // What came behind the peer's end marker: its report.
                inbuf: std::mem::take(&mut self.tail),
                peer: None,
            }
        };
        self.mine = Some(mine);
        self.parse_final();
    }

    /// What to write now.
    pub fn transmit(&mut self, now: Now) -> Transmit<'_> {
        if let (Phase::Final { out, .. }, Some(mine)) = (&mut self.phase, &self.mine)
            && out.is_empty()
        {
            *out = proto::compact::encode_for(&Message::Final(mine.clone()), self.compact);
        }
        match &self.phase {
            Phase::Final { out, at, .. } if !self.report_out => {
                return Transmit::Bytes(&out[*at..]);
            }
            Phase::Data if self.send_left > 0 => {}
            _ => return Transmit::Nothing,
        }
        let mut want = self.send_left;
        // Time-bounded: past the deadline, the data ends at the next chunk start.
        let deadline = self.deadline.filter(|_| self.chunk > 0);
        if deadline.is_some_and(|d| now.mono >= d) && self.end_out.is_none() {
            let into = self.sent % self.chunk;
            let marker = (into == 0).then(|| proto::encode(&Message::DataEnd));
            match marker {
                Some(m) if !self.end_looks_like_data(&m) => self.end_out = Some((m, 0)),
                // One more chunk, and no write past its end.
                _ => want = want.min(self.chunk - into),
            }
        }
        if let Some((marker, at)) = &self.end_out {
            return Transmit::Bytes(&marker[*at..]);
        }
        // A wait for a burst or the rate ends early at the deadline.
        let wake = |t: Instant| match deadline {
            Some(d) if d > now.mono => t.min(d),
            _ => t,
        };
        let burst_bytes = self.burst_bytes(self.burst_at);
        if let Some(b) = &mut self.bursts {
            let due = b.due(self.burst_at);
            if now.mono < due {
                return Transmit::WaitUntil(wake(due));
            }
            let into = self.sent - self.burst_at * b.spec.size.max(1);
            if into == 0 && b.log.done.len() as u64 == self.burst_at {
                b.open(self.burst_at, burst_bytes, now);
            }
            want = want.min(burst_bytes - into);
        }
        if let Some(p) = &self.paced {
            let (allowed, next) = p.allowance(now.mono);
            if self.sent >= allowed {
                return Transmit::WaitUntil(wake(next));
            }
            want = want.min(allowed - self.sent);
        }
        let n = (want as usize).min(self.buffer);
        Transmit::Bytes(Pattern::get().slice(self.send_start, self.sent, n))
    }

    /// `n` bytes of what [`Conn::transmit`] offered were written at `now`.
    pub fn on_written(&mut self, n: usize, now: Now) {
        if let Phase::Final { out, at, .. } = &mut self.phase {
            *at = (*at + n).min(out.len());
            self.report_out = !out.is_empty() && *at == out.len();
            return self.maybe_done();
        }
        if !matches!(self.phase, Phase::Data) || n == 0 {
            return;
        }
        if let Some((marker, at)) = &mut self.end_out {
            *at = (*at + n).min(marker.len());
            if *at == marker.len() {
                // This direction's data is over.
                self.end_out = None;
                self.send_left = 0;
                self.advance();
            }
            return;
        }
        let n64 = (n as u64).min(self.send_left);
        self.sent += n64;
        self.send_left -= n64;
        let size = self.bursts.as_ref().map(|b| b.spec.size.max(1));
        if let (Some(b), Some(size)) = (&mut self.bursts, size) {
            b.call(n, now);
            if self.sent == (self.burst_at * size + size).min(self.transfer) {
                b.close(false);
                self.events
                    .push(ConnEvent::BurstSent(b.log.done.len().saturating_sub(1)));
                self.burst_at += 1;
            }
        }
        self.advance();
    }

    /// `data` arrived at `now` (never more than [`Conn::want_read`] said).
    pub fn on_read(&mut self, data: &[u8], now: Now) {
        match &mut self.phase {
            Phase::Data => {}
            Phase::Final {
                inbuf, peer: None, ..
            } => {
                if inbuf.is_empty() {
                    // The report comes header first (`want_read`), and
                    // its header says how long it is: room for all of it
                    // at once, up to a report's usual size (growing it
                    // byte run by byte run cost an allocation and a copy
                    // per connection).
                    let whole = data.len() + proto::frame_remaining(data);
                    inbuf.reserve_exact(whole.min(REPORT_ROOM));
                }
                inbuf.extend_from_slice(data);
                self.parse_final();
                return self.maybe_done();
            }
            _ => return,
        }
        if self.chunk == 0 {
            return self.take_data(data, now);
        }
        if self.ending_in {
            self.tail.extend_from_slice(data);
            return self.parse_end();
        }
        if self.received.is_multiple_of(self.chunk) && self.recv_left > 0 {
            // A chunk's start: data, or the peer's end marker?
            let k = (HEADER_LEN as u64).min(self.recv_left) as usize;
            let mut held = std::mem::take(&mut self.head);
            let need = k - held.len().min(k);
            if data.len() < need {
                held.extend_from_slice(data);
                self.head = held;
                return;
            }
            let expected = Pattern::get().slice(self.recv_start, self.received, k);
            let (before, now_in) = expected.split_at(held.len());
            if held != before || data[..need] != *now_in {
                let mut head = held.clone();
                head.extend_from_slice(&data[..need]);
                if starts_a_frame(&head) {
                    self.ending_in = true;
                    held.extend_from_slice(data);
                    self.tail = held;
                    return self.parse_end();
                }
                // Count-only verification sees it here too.
                let at = head.iter().zip(expected).position(|(a, b)| a != b);
                self.corrupt
                    .get_or_insert(self.received + at.unwrap_or(0) as u64);
            }
            // Bytes held from an earlier read are taken as that read's.
            self.take_data(&held, now);
        }
        self.take_data(data, now)
    }

    /// The peer's end marker, once it is all in: the data this way is over.
    /// Any other frame, or none, where data or the marker belongs is data
    /// gone wrong at this offset.
    fn parse_end(&mut self) {
        let used = match proto::decode_frame(&self.tail) {
            Ok(None) => return,
            Ok(Some((Message::DataEnd, used))) => used,
            Ok(Some(_)) | Err(_) => {
                self.corrupt.get_or_insert(self.received);
                self.tail.len()
            }
        };
        self.tail.drain(..used);
        self.ending_in = false;
        self.recv_left = 0;
        self.advance();
    }

    /// Takes `data` as this direction's next bytes: verified, counted and
    /// timed burst by burst.
    fn take_data(&mut self, mut data: &[u8], now: Now) {
        while !data.is_empty() && matches!(self.phase, Phase::Data) && self.recv_left > 0 {
            let mut k = (data.len() as u64).min(self.recv_left);
            if let Some(b) = &self.bursts {
                let size = b.spec.size.max(1);
                let end = (self.burst_at * size + size).min(self.transfer);
                k = k.min(end - self.received).max(1);
            }
            let (piece, rest) = data.split_at(k as usize);
            self.take_piece(piece, now);
            data = rest;
        }
    }

    /// Takes `data`, within one burst and the plan's step.
    fn take_piece(&mut self, data: &[u8], now: Now) {
        let k = data.len();
        if let Some(b) = &mut self.bursts {
            let size = b.spec.size.max(1);
            let into = self.received - self.burst_at * size;
            if into == 0 {
                let bytes = self.transfer.saturating_sub(self.burst_at * size).min(size);
                b.open(self.burst_at, bytes, now);
            }
        }
        if self.verify
            && self.corrupt.is_none()
            && let Err(at) = Pattern::get().verify(self.recv_start, self.received, data)
        {
            self.corrupt = Some(at);
        }
        self.received += k as u64;
        self.recv_left -= k as u64;
        let size = self.bursts.as_ref().map(|b| b.spec.size.max(1));
        if let (Some(b), Some(size)) = (&mut self.bursts, size) {
            b.call(k, now);
            if self.received == (self.burst_at * size + size).min(self.transfer) {
                b.close(false);
                self.burst_at += 1;
            }
        }
        self.advance();
    }

    fn parse_final(&mut self) {
        let (
            Phase::Final {
                inbuf,
                peer: slot @ None,
                ..
            },
            Some(mine),
        ) = (&mut self.phase, &mut self.mine)
        else {
            return;
        };
        // A peer whose report is in the fixed layout reads it too.
        self.compact |= inbuf
            .get(HEADER_LEN..)
            .is_some_and(proto::compact::is_compact);
        let peer = match proto::decode_frame(inbuf) {
            Ok(None) => return,
            Ok(Some((Message::Final(p), _))) => Ok(p),
            Ok(Some((other, _))) => Err(NoReport::Unexpected(format!("{other:?}"))),
            Err(_) if mine.verdict == Verdict::Ok => {
                // Pattern bytes where the report should be: the peer sent more than planned.
                mine.verdict = Verdict::TooMany {
                    expected: mine.received,
                };
                Err(NoReport::ExtraData)
            }
            Err(e) => Err(NoReport::Malformed(e)),
        };
        *slot = Some(peer);
    }

    /// Done once this end's report is out and the peer's is in.
    fn maybe_done(&mut self) {
        if let (
            Phase::Final {
                peer: Some(peer), ..
            },
            Some(mine),
        ) = (&self.phase, &self.mine)
            && self.report_out
        {
            self.peer_info = peer.as_ref().ok().and_then(|p| p.tcp_info);
            let r = agree(mine, peer.as_ref());
            self.phase = Phase::Done(r);
        }
    }
}

/// A copy of `e` for the result's detail (io::Error is not Clone).
fn clone_error(e: &io::Error) -> io::Error {
    e.raw_os_error().map_or_else(
        || io::Error::new(e.kind(), e.to_string()),
        io::Error::from_raw_os_error,
    )
}

mod ending;
mod read_plan;
mod state;

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
