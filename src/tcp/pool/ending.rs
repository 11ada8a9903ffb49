//! How a client connection ends: its slot freed at once, and what is left
//! (its TCP_INFO, its record, closing its socket) once the loop has started
//! the next connections.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Instant;

use super::{Slot, Stage, Worker};
use crate::protocol::outcome::{ConnResult, ResultKind};
use crate::protocol::sockopts::ShutdownMode;
use crate::protocol::stats::{Progress, push_progress};
use crate::tcp::session::ConnectionRecord;

/// When a connection started and ended, and whether the run was stopping
/// by then.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) start: Instant,
    pub(super) end: Instant,
    pub(super) stopped: bool,
}

/// How a connection ended; failures become cancellations if the run was
/// stopping.
pub(super) enum Ended {
    /// With the result both ends agreed on.
    Agreed(ConnResult),
    /// At this end (connect, data hello, I/O), for this reason.
    Failed(String),
    /// The server refused the data connection, with this code and reason.
    Refused(crate::protocol::proto::ErrorCode, String),
}

pub(super) fn failed(detail: String) -> ConnResult {
    ConnResult {
        kind: ResultKind::NetworkError,
        detail,
    }
}

impl Worker<'_> {
    /// Ends connection `k` with `result` and frees its slot.
    pub(super) fn close(&mut self, k: usize, mut slot: Box<Slot>, result: Ended) {
        if slot.throttled {
            self.release(slot.session);
        }
        if matches!(slot.stage, Stage::Data { .. }) {
            self.sh.counters.in_flight.fetch_sub(1, Relaxed);
        }
        // Ended before its data phase did (the loop failed): what it moved
        // still counts.
        if let Stage::Data { conn, .. } | Stage::Hello { conn, .. } = &slot.stage {
            (slot.rec.sent, slot.rec.received) = conn.progress();
        }
        self.core.close(k);
        self.tracked.retain(|&t| t != k);
        let span = self.span(slot.started);
        self.ending.push((slot, span, result));
    }

    /// The times of a connection that started at `start` and ends now.
    pub(super) fn span(&self, start: Instant) -> Span {
        Span {
            start,
            end: Instant::now(),
            stopped: self.sh.stop.load(SeqCst),
        }
    }

    /// Finishes the connections [`Worker::close`] ended: their TCP_INFO,
    /// their records, and closing their sockets. The loop calls it once it
    /// has started the next connections (unless they need a `--cport` port
    /// that a closing socket holds, or more than one ended): closing costs a trip through both
    /// ends' stacks (the FIN, the server's TIME_WAIT), and a churning run's
    /// next request need not wait behind it (tcp -n 64 -P 1 made about 8 %
    /// more connections a second).
    pub(super) fn finish_ending(&mut self) {
        for (mut slot, span, result) in std::mem::take(&mut self.ending) {
            // Only a connection that came up has an address and TCP_INFO
            // worth reporting (both asked for here, off the way from one
            // connection to the next; one that sent its final report has
            // the reading that report carries, see `step::Watched`).
            let up = !matches!(
                slot.stage,
                Stage::Connecting | Stage::Hello { up: false, .. }
            );
            if up {
                if self.sh.cfg.local_addrs {
                    slot.rec.local = slot.stream.local_addr().ok();
                }
                if slot.rec.tcp_info.is_none() {
                    slot.rec.tcp_info = crate::net::tcpinfo::read(&slot.stream);
                }
                if let Some(i) = &slot.rec.tcp_info {
                    let more = i.retransmits.saturating_sub(slot.retrans_counted);
                    self.sh
                        .counters
                        .retransmits
                        .fetch_add(u64::from(more), Relaxed);
                }
            }
            if self.sh.cfg.sock.shutdown == ShutdownMode::Rude {
                crate::net::sockopt::rude_close(&slot.stream);
            }
            slot.rec
                .bursts
                .sort_by(|a, b| (a.index, &a.side).cmp(&(b.index, &b.side)));
            let Slot {
                stream, _port, rec, ..
            } = *slot;
            self.finish_record(rec, span, result);
            // Closing the socket takes it out of the poll (its descriptor
            // is not shared), so there is no deregistering call to make; a
            // --cport port goes back after it. A connection that ended
            // with its report held for the FIN (`Fin::WithLastReport`)
            // sends both now.
            drop(stream);
            drop(_port);
        }
    }

    pub(super) fn finish_record(&mut self, mut rec: ConnectionRecord, span: Span, result: Ended) {
        rec.result = match result {
            Ended::Agreed(r) => r,
            _ if span.stopped => ConnResult {
                kind: ResultKind::Cancelled,
                detail: "stopped before completion".into(),
            },
            Ended::Failed(detail) => failed(detail),
            Ended::Refused(code, why) => {
                let r = failed(format!("server refused: {why}"));
                rec.refused = Some((code, why));
                r
            }
        };
        rec.time_ms = span.end.duration_since(span.start).as_secs_f64() * 1e3;
        rec.time_slice = span.end.duration_since(self.sh.start).as_secs_f64();
        if !rec.progress.is_empty() {
            let end = Progress {
                secs: rec.time_slice,
                sent: rec.sent,
                received: rec.received,
            };
            push_progress(&mut rec.progress, end);
        }
        rec.result.kind.count_in(&self.sh.counters);
        let _ = self.tx.send(rec);
    }
}
