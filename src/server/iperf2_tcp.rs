//! An iperf2 client's TCP test (`serve --iperf2-port`) on the server's
//! event loops: once the iperf2 port's thread has read its client header,
//! the connection is handed to the least busy loop (or an added one, as a
//! lasting data connection is) and counted there until the client closes.
//! It costs its descriptor and its record, never a thread: it reads into its
//! loop's buffer, at most [`BYTES`] in [`CALLS`] reads a wake-up before the
//! loop's other connections get their turn, and its idle and duration
//! deadlines are its slot's timer.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use serde_json::json;

use super::account::{Charge, IPERF2_TCP_BYTES};
use super::limits::{Slot, take_slot};
use super::loop_turn::Turn;
use super::metrics::{Kind, Moved};
use super::sources::SourceSlot;
use super::{State, log};
use crate::protocol::iperf2::{Amount, ClientHeader};
use crate::protocol::proto::ErrorCode;
use crate::protocol::refusal::{Drawn, Limit, Share};

/// Most bytes one test reads per wake-up.
pub(super) const BYTES: usize = 1 << 20;
/// Most reads one test makes per wake-up: a client trickling tiny
/// segments costs a call each.
pub(super) const CALLS: usize = 16;

/// Why a test was not started: the code netrig's own clients would get,
/// and the reason for the log (iperf2 has no refusal message: the
/// connection is closed).
pub(super) type Refused = (ErrorCode, String);

/// One iperf2 TCP test on a loop.
pub(super) struct Iperf2Tcp<'a> {
    st: &'a State,
    peer: SocketAddr,
    /// Bytes received, the header's included.
    got: u64,
    began: Instant,
    /// The server's duration limit.
    end: Instant,
    /// The last time bytes came.
    last: Instant,
    /// How it ended; a test dropped unended was stopped with the server.
    outcome: Option<&'static str>,
    _slot: Slot<'a>,
    _mine: SourceSlot<'a>,
    _memory: Charge,
}

impl<'a> Iperf2Tcp<'a> {
    /// Admits the test whose header `hdr` came in the first `got` bytes:
    /// a test slot, one of its address's, its share of `--max-memory`, and
    /// a length within `--max-duration`.
    pub(super) fn start(
        st: &'a State,
        peer: SocketAddr,
        hdr: &ClientHeader,
        got: u64,
        now: Instant,
    ) -> Result<Iperf2Tcp<'a>, Refused> {
        let limits = st.cfg.limits;
        let refused = |l: Limit| (l.code(), format!("server limit: {l}"));
        let max = u64::from(limits.max_tests);
        let slot = take_slot(&st.tests, max).ok_or_else(|| {
            (
                ErrorCode::LimitTests,
                format!("server limit: max tests {max}"),
            )
        })?;
        let mine = super::take_source(
            &st.tests_per_client,
            peer.ip().to_canonical(),
            limits.max_tests_per_client,
            Share::Tests,
        )
        .map_err(refused)?;
        limits
            .check_memory(st.resident.load(SeqCst))
            .map_err(refused)?;
        let memory = st
            .memory
            .take(IPERF2_TCP_BYTES, limits.max_memory, Drawn::IperfTest)
            .map_err(refused)?;
        if let Amount::Centis(c) = hdr.amount {
            let asked = Duration::from_millis(u64::from(c) * 10);
            if asked > limits.max_duration {
                return Err(refused(Limit::Duration {
                    max: limits.max_duration,
                    asked,
                }));
            }
        }
        if st.cfg.verbosity >= 1 {
            log::event(
                st.cfg.log_format,
                "session_start",
                format_args!("iperf2 TCP test from {peer}: {}", hdr.describe()),
                || {
                    json!({"client": peer.to_string(), "kind": Kind::Iperf2.name(),
                        "session": format!("iperf2-tcp-{peer}")})
                },
            );
        }
        st.metrics.started(Kind::Iperf2);
        Ok(Iperf2Tcp {
            st,
            peer,
            got,
            began: now,
            end: now + limits.deadline(),
            last: now,
            outcome: None,
            _slot: slot,
            _mine: mine,
            _memory: memory,
        })
    }

    /// Reads what the client sent, within the budget: Gone once the test
    /// is over (the loop closes the connection), Again if the budget ran
    /// out with more to read, or Wait until its next deadline.
    pub(super) fn turn(&mut self, stream: &TcpStream, buf: &mut [u8], now: Instant) -> Turn {
        // Checked first: a client that never lets the socket run dry ends
        // every turn on the budget, never at the checks below.
        if now >= self.end {
            return self.ended("server limit: duration");
        }
        let max_bytes = self.st.cfg.limits.max_bytes;
        let (mut calls, mut moved) = (0, 0);
        loop {
            if calls == CALLS || moved >= BYTES {
                return Turn::Again;
            }
            calls += 1;
            match (&mut &*stream).read(buf) {
                Ok(0) => return self.ended("completed"),
                Ok(n) => {
                    self.got += n as u64;
                    moved += n;
                    self.last = now;
                    if self.got > max_bytes {
                        return self.ended("server limit: bytes");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return self.ended("connection reset"),
            }
        }
        let idle = self.last + self.st.cfg.idle_timeout;
        if now >= idle {
            return self.ended("idle");
        }
        Turn::Wait(Some(idle.min(self.end)))
    }

    fn ended(&mut self, outcome: &'static str) -> Turn {
        self.outcome = Some(outcome);
        Turn::Gone
    }
}

impl Drop for Iperf2Tcp<'_> {
    /// The test's record: counted, measured and logged however it ended.
    fn drop(&mut self) {
        let (st, peer, got) = (self.st, self.peer, self.got);
        let outcome = self.outcome.unwrap_or("server stopping");
        let took = self.began.elapsed();
        st.finished.fetch_add(1, SeqCst);
        let moved = Moved {
            received: got,
            ..Moved::default()
        };
        st.metrics.ended(Kind::Iperf2, took, moved);
        if st.cfg.verbosity >= 1 {
            log::event(
                st.cfg.log_format,
                "session_end",
                format_args!(
                    "iperf2 TCP test from {peer}: {outcome}: received {got} bytes in {:.2} s",
                    took.as_secs_f64()
                ),
                || {
                    json!({"client": peer.to_string(), "kind": Kind::Iperf2.name(),
                        "session": format!("iperf2-tcp-{peer}"), "result": outcome,
                        "duration_s": took.as_secs_f64(), "bytes_sent": 0, "bytes_received": got})
                },
            );
        }
    }
}
