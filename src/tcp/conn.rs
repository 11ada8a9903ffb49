//! The data phase of one TCP connection, identical for client and server:
//! run the plan (send from the pattern, receive and verify against it), then
//! exchange [`FinalReport`]s and agree on the result.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering::Relaxed;
use uuid::Uuid;

use crate::outcome::{ConnResult, agree};
use crate::pattern::{Direction, Pattern, stream_start};
use crate::plan::{Plan, Role, Step};
use crate::proto::{
    FinalReport, Message, ReadError, TcpSpec, Verdict, VerifyLevel, read_message, write_message,
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

    fn send(&self, n: u64, offset: &mut u64) -> Result<(), Verdict> {
        let pattern = Pattern::get();
        let start = stream_start(self.connection, self.directions().0);
        let end = *offset + n;
        let mut w = self.stream;
        while *offset < end {
            let want = ((end - *offset) as usize).min(self.buffer);
            match w.write(pattern.slice(start, *offset, want)) {
                Ok(0) => {
                    return Err(Verdict::NetworkError {
                        detail: "socket accepted no data".into(),
                    });
                }
                Ok(k) => {
                    *offset += k as u64;
                    self.counters.sent.fetch_add(k as u64, Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(net_verdict(&e)),
            }
        }
        Ok(())
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
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(net_verdict(&e)),
            }
        }
        Ok(())
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
                Step::Send(n) => self.send(n, &mut sent),
                Step::Recv(n) => self.recv(n, &mut received, &mut buf, &mut corrupt),
                Step::Both { send, recv } => std::thread::scope(|s| {
                    let sender = s.spawn(|| {
                        let mut off = 0;
                        let r = self.send(send, &mut off);
                        (r, off)
                    });
                    let r = self.recv(recv, &mut received, &mut buf, &mut corrupt);
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
        let verdict = match (outcome, corrupt) {
            (_, Some(offset)) => Verdict::Corrupt { offset },
            (Err(v), None) => v,
            (Ok(()), None) => Verdict::Ok,
        };
        FinalReport {
            sent,
            received,
            verdict,
        }
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
