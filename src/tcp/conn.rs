//! The data phase of one TCP connection, identical for client and server:
//! run the plan (send from the pattern, receive and verify against it), then
//! exchange [`FinalReport`]s and agree on the result.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::outcome::{ConnResult, agree};
use crate::pattern::{Direction, Pattern, stream_start};
use crate::plan::{Plan, Role, Step};
use crate::proto::{
    BurstSpec, FinalReport, IoPattern, Message, ReadError, TcpBurst, TcpSpec, Verdict, VerifyLevel,
    read_message, write_message,
};
use crate::stats::Counters;

/// One end of one data connection, ready to move data.
pub struct Transfer<'a> {
    /// The connected socket.
    pub stream: &'a TcpStream,
    /// The connection ID both ends share.
    pub connection: Uuid,
    /// Which end this is.
    pub role: Role,
    /// Bytes per send/receive call.
    pub buffer: usize,
    /// The test spec (pattern, transfer, verification).
    pub spec: &'a TcpSpec,
    /// Where to count bytes as they move.
    pub counters: &'a Counters,
    /// The server's limits on what this end sends (none on a client).
    pub guard: Option<&'a crate::guard::SendGuard>,
}

/// Further than any burst period a test can use (a year).
const FAR: Duration = Duration::from_secs(365 * 86_400);

/// A guarded send or wait that gave up, as this end's verdict.
fn halt_verdict(h: crate::guard::Halt) -> Verdict {
    use crate::budget::Exceeded;
    use crate::guard::Halt;
    match h {
        // The control connection tells the client why its session stopped.
        Halt::Stopped | Halt::Limit(Exceeded::Deadline) => Verdict::Cancelled,
        Halt::Limit(e) => Verdict::NetworkError {
            detail: e.to_string(),
        },
    }
}

/// Turns a socket error into a verdict, naming timeouts for what they are.
fn net_verdict(e: &io::Error) -> Verdict {
    let detail = match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("no progress within the idle timeout ({e})")
        }
        _ => e.to_string(),
    };
    Verdict::NetworkError { detail }
}

impl Transfer<'_> {
    fn directions(&self) -> (Direction, Direction) {
        match self.role {
            Role::Client => (Direction::ClientToServer, Direction::ServerToClient),
            Role::Server => (Direction::ServerToClient, Direction::ClientToServer),
        }
    }

    fn send(&self, n: u64, offset: &mut u64) -> Result<u64, Verdict> {
        let mut writes = 0;
        let pattern = Pattern::get();
        let start = stream_start(self.connection, self.directions().0);
        let end = *offset + n;
        let mut w = self.stream;
        while *offset < end {
            let want = ((end - *offset) as usize).min(self.buffer);
            if let Some(g) = self.guard {
                g.admit(want as u64).map_err(halt_verdict)?;
            }
            match w.write(pattern.slice(start, *offset, want)) {
                Ok(0) => {
                    return Err(Verdict::NetworkError {
                        detail: "socket accepted no data".into(),
                    });
                }
                Ok(k) => {
                    writes += 1;
                    *offset += k as u64;
                    self.counters.sent.fetch_add(k as u64, Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(net_verdict(&e)),
            }
        }
        Ok(writes)
    }

    /// Receives exactly `n` bytes (never reading past them, so the peer's final
    /// report stays in the socket). After the first corrupt byte it keeps
    /// draining so both ends still reach the report exchange.
    fn recv(
        &self,
        n: u64,
        offset: &mut u64,
        buf: &mut [u8],
        corrupt: &mut Option<u64>,
        mut log: Option<&mut ReadLog>,
    ) -> Result<(), Verdict> {
        let pattern = Pattern::get();
        let start = stream_start(self.connection, self.directions().1);
        let end = *offset + n;
        let verify = self.spec.verify == VerifyLevel::Data;
        let mut r = self.stream;
        while *offset < end {
            let want = ((end - *offset) as usize).min(buf.len());
            match r.read(&mut buf[..want]) {
                Ok(0) => {
                    return Err(Verdict::TooFew {
                        expected: end,
                        received: *offset,
                    });
                }
                Ok(k) => {
                    if verify
                        && corrupt.is_none()
                        && let Err(at) = pattern.verify(start, *offset, &buf[..k])
                    {
                        *corrupt = Some(at);
                    }
                    *offset += k as u64;
                    self.counters.received.fetch_add(k as u64, Relaxed);
                    if let Some(l) = log.as_deref_mut() {
                        l.read(k);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(net_verdict(&e)),
            }
        }
        Ok(())
    }

    /// Runs a burst train (push or pull): the sender starts a burst every
    /// period; the receiver times each burst by its byte offsets.
    fn run_bursts(&self, b: BurstSpec) -> (FinalReport, Vec<TcpBurst>) {
        let sending = matches!(
            (self.spec.pattern, self.role),
            (IoPattern::Push, Role::Client) | (IoPattern::Pull, Role::Server)
        );
        let t0 = Instant::now();
        let period = Duration::from_millis(b.period_ms);
        let (mut sent, mut received, mut corrupt) = (0u64, 0u64, None);
        let mut buf = vec![0u8; self.buffer];
        let mut bursts = Vec::new();
        let mut outcome = Ok(());
        let mut k = 0u64;
        while k * b.size < self.spec.transfer {
            let n = b.size.min(self.spec.transfer - k * b.size);
            let mut rec = TcpBurst {
                index: k,
                side: if sending { "send" } else { "recv" }.into(),
                bytes: n,
                ..Default::default()
            };
            if sending {
                // Far periods saturate rather than overflow; a server's
                // guard ends the wait at the session's deadline.
                let due = t0
                    .checked_add(period.saturating_mul(u32::try_from(k).unwrap_or(u32::MAX)))
                    .unwrap_or_else(|| t0 + FAR);
                let waited = match self.guard {
                    Some(g) => g.sleep_until(due).map_err(halt_verdict),
                    None => {
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                        Ok(())
                    }
                };
                if let Err(v) = waited {
                    outcome = Err(v);
                    break;
                }
                rec.start_s = t0.elapsed().as_secs_f64();
                rec.start_rt_ns = crate::udp::clock::realtime_ns();
                let r = self.send(n, &mut sent);
                rec.end_s = t0.elapsed().as_secs_f64();
                rec.end_rt_ns = crate::udp::clock::realtime_ns();
                match &r {
                    Ok(w) => rec.calls = *w,
                    Err(_) => rec.errors = 1,
                }
                if let Some(info) = tcp_info(self.stream) {
                    rec.retransmits = Some(info.tcpi_total_retrans);
                    rec.cwnd = Some(info.tcpi_snd_cwnd);
                    rec.rtt_us = Some(info.tcpi_rtt);
                }
                outcome = r.map(|_| ());
            } else {
                let mut log = ReadLog::new(t0);
                outcome = self.recv(n, &mut received, &mut buf, &mut corrupt, Some(&mut log));
                (
                    rec.start_s,
                    rec.end_s,
                    rec.calls,
                    rec.read_sizes,
                    rec.start_rt_ns,
                    rec.end_rt_ns,
                ) = log.finish();
            }
            rec.transfer_ms = (rec.end_s - rec.start_s) * 1e3;
            let secs = rec.end_s - rec.start_s;
            rec.rate_bps = if secs > 0.0 {
                n as f64 * 8.0 / secs
            } else {
                0.0
            };
            rec.duty_pct = 100.0 * secs / period.as_secs_f64();
            bursts.push(rec);
            if outcome.is_err() {
                break;
            }
            k += 1;
        }
        let verdict = verdict_of(outcome, corrupt);
        (
            FinalReport {
                sent,
                received,
                verdict,
            },
            bursts,
        )
    }

    /// Runs the whole plan and returns this end's report, with its account of
    /// each burst in burst mode.
    pub fn run_with_bursts(&self) -> (FinalReport, Vec<TcpBurst>) {
        match self.spec.burst {
            Some(b) if matches!(self.spec.pattern, IoPattern::Push | IoPattern::Pull) => {
                self.run_bursts(b)
            }
            _ => (self.run(), Vec::new()),
        }
    }

    /// Runs the whole plan and returns this end's report.
    pub fn run(&self) -> FinalReport {
        let plan = Plan::new(
            self.spec.pattern,
            self.spec.transfer,
            self.spec.push_bytes,
            self.spec.pull_bytes,
            self.role,
        );
        let mut sent = 0u64;
        let mut received = 0u64;
        let mut corrupt = None;
        let mut buf = vec![0u8; self.buffer];
        let mut outcome = Ok(());
        for step in plan {
            outcome = match step {
                Step::Send(n) => self.send(n, &mut sent).map(|_| ()),
                Step::Recv(n) => self.recv(n, &mut received, &mut buf, &mut corrupt, None),
                Step::Both { send, recv } => std::thread::scope(|s| {
                    let sender = s.spawn(|| {
                        let mut off = 0;
                        let r = self.send(send, &mut off).map(|_| ());
                        (r, off)
                    });
                    let r = self.recv(recv, &mut received, &mut buf, &mut corrupt, None);
                    let (sr, off) = sender.join().unwrap_or_else(|_| {
                        (
                            Err(Verdict::NetworkError {
                                detail: "sender thread panicked".into(),
                            }),
                            0,
                        )
                    });
                    sent = off;
                    // A failed receive usually makes the send fail too; report the receive's cause.
                    r.and(sr)
                }),
            };
            if outcome.is_err() {
                break;
            }
        }
        let verdict = verdict_of(outcome, corrupt);
        FinalReport {
            sent,
            received,
            verdict,
        }
    }
}

/// This end's verdict: corruption seen wins, then the I/O outcome.
fn verdict_of(outcome: Result<(), Verdict>, corrupt: Option<u64>) -> Verdict {
    match (outcome, corrupt) {
        (_, Some(offset)) => Verdict::Corrupt { offset },
        (Err(v), None) => v,
        (Ok(()), None) => Verdict::Ok,
    }
}

/// When each read of a burst happened and how big it was.
struct ReadLog {
    t0: Instant,
    first: Option<(f64, u64)>,
    last: (f64, u64),
    reads: u64,
    bins: Vec<(u64, u64)>,
}

impl ReadLog {
    fn new(t0: Instant) -> Self {
        ReadLog {
            t0,
            first: None,
            last: (0.0, 0),
            reads: 0,
            bins: Vec::new(),
        }
    }

    fn read(&mut self, n: usize) {
        let at = (
            self.t0.elapsed().as_secs_f64(),
            crate::udp::clock::realtime_ns(),
        );
        self.first.get_or_insert(at);
        self.last = at;
        self.reads += 1;
        // Power-of-two bins: 1, 2, 4, ... bytes.
        let edge = if n == 0 {
            0
        } else {
            1u64 << (63 - (n as u64).leading_zeros())
        };
        match self.bins.iter_mut().find(|(e, _)| *e == edge) {
            Some((_, c)) => *c += 1,
            None => self.bins.push((edge, 1)),
        }
    }

    /// (first s, last s, reads, size bins, first realtime ns, last realtime ns).
    fn finish(mut self) -> (f64, f64, u64, Vec<(u64, u64)>, u64, u64) {
        self.bins.sort_unstable();
        let first = self.first.unwrap_or((0.0, 0));
        (
            first.0,
            self.last.0,
            self.reads,
            self.bins,
            first.1,
            self.last.1,
        )
    }
}

/// The kernel's TCP_INFO for a connection.
fn tcp_info(stream: &TcpStream) -> Option<libc::tcp_info> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is a plain C struct; all-zero is valid. getsockopt writes at
    // most `len` bytes into it and updates `len`.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let r = libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        (r == 0).then_some(info)
    }
}

/// After a stop, a failure caused by the stop's own socket shutdown (an error,
/// or an early end of stream) is a cancellation, not a finding. Corruption
/// seen before the stop still counts.
pub fn cancel_if_stopped(report: &mut FinalReport, stopped: bool) {
    if stopped
        && matches!(
            report.verdict,
            Verdict::NetworkError { .. } | Verdict::TooFew { .. }
        )
    {
        report.verdict = Verdict::Cancelled;
    }
}

/// Sends this end's report, reads the peer's and agrees on the result. Skips
/// the exchange when this end already knows the socket is broken.
pub fn exchange_finals(stream: &TcpStream, mut mine: FinalReport) -> (FinalReport, ConnResult) {
    if matches!(
        mine.verdict,
        Verdict::NetworkError { .. } | Verdict::Cancelled
    ) {
        let r = agree(&mine, Err("connection failed"));
        return (mine, r);
    }
    let mut s = stream;
    if let Err(e) = write_message(&mut s, &Message::Final(mine.clone())) {
        mine.verdict = net_verdict(&e);
        let r = agree(&mine, Err("connection failed"));
        return (mine, r);
    }
    let peer = match read_message(&mut s) {
        Ok(Message::Final(p)) => Ok(p),
        Ok(other) => Err(format!(
            "unexpected message instead of final report: {other:?}"
        )),
        Err(ReadError::Proto(_)) if mine.verdict == Verdict::Ok => {
            // Pattern bytes where the report should be: the peer sent more than planned.
            mine.verdict = Verdict::TooMany {
                expected: mine.received,
            };
            Err("peer sent extra data".to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    let r = agree(&mine, peer.as_ref().map_err(String::as_str));
    (mine, r)
}
