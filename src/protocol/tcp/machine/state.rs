//! What the I/O layer reads from and sets on a connection's machine
//! between its steps: the TCP_INFO and layout of this end's report, the
//! events, the result once agreed, the progress and the burst schedule's
//! quiet gaps. The steps themselves (what to write, what was read, the
//! reports' exchange) are in `machine.rs`.

use std::time::Instant;

use super::{Conn, ConnEvent, Phase};
use crate::protocol::outcome::{ConnResult, NoReport, agree};
use crate::protocol::proto::{self, FinalReport, TcpBurst, Verdict};

impl Conn {
    /// Whether this end's report is ready and not yet started: the moment
    /// to read TCP_INFO for it. True once.
    pub fn take_info_request(&mut self) -> bool {
        std::mem::take(&mut self.info_wanted)
    }

    /// Adds this end's TCP_INFO to its report, if none of it is written
    /// yet; a server's only. The client keeps its reading for its own
    /// record, and its report goes without it: the server has never used
    /// the client's, and encoding nine figures at the client and decoding
    /// them at the server was about a microsecond of each crr transaction.
    pub fn set_final_tcp_info(&mut self, info: proto::TcpInfoSummary) {
        if !self.reports_info {
            return;
        }
        if let (Phase::Final { out, at: 0, .. }, Some(mine)) = (&mut self.phase, &mut self.mine) {
            mine.tcp_info = Some(info);
            // Encoded again when next offered.
            out.clear();
        }
    }

    /// This end's `ok` report goes in the fixed layout
    /// ([`proto::compact`]): for a server whose client's data hello asked
    /// for it.
    pub fn set_compact(&mut self, compact: bool) {
        self.compact = compact;
    }

    /// Whether this end's final report has been written in full: nothing
    /// more of the machine's is to go out on this connection.
    pub fn report_sent(&self) -> bool {
        self.report_out
    }

    /// The TCP_INFO the peer put in its report.
    pub fn peer_tcp_info(&self) -> Option<proto::TcpInfoSummary> {
        self.peer_info
    }

    /// Whether the machine reads the wall clock ([`Now::real_ns`]): only
    /// its burst log does, so the I/O layer reads it for no other
    /// connection (a second clock read per step otherwise).
    pub fn wants_real_time(&self) -> bool {
        self.bursts.is_some()
    }

    /// Whether what [`Conn::transmit`] offers is data (not the final
    /// report, nor an end marker already offered).
    pub fn sending_data(&self) -> bool {
        matches!(self.phase, Phase::Data) && self.end_out.is_none()
    }

    /// Whether this end still has bytes to write: data of the plan's
    /// current step (perhaps not due yet: a burst or the rate limit waits),
    /// its end marker, or its final report. An event loop that watches a
    /// socket for room to write only while this holds is not woken by every
    /// acknowledgement of what it sent (a crr client, which writes its
    /// request and its report each in one go, never needs to be).
    pub fn has_to_send(&self) -> bool {
        match &self.phase {
            Phase::Data => self.send_left > 0 || self.end_out.is_some(),
            Phase::Final { .. } => !self.report_out,
            Phase::Done(_) => false,
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<ConnEvent> {
        (!self.events.is_empty()).then(|| self.events.remove(0))
    }

    /// Adds TCP_INFO readings to a burst this end sent.
    pub fn set_burst_info(&mut self, index: usize, retransmits: u32, cwnd: u32, rtt_us: u32) {
        if let Some(b) = self.bursts.as_mut().and_then(|b| b.log.done.get_mut(index)) {
            (b.retransmits, b.cwnd, b.rtt_us) = (Some(retransmits), Some(cwnd), Some(rtt_us));
        }
    }

    /// Whether the connection has its result.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done(_))
    }

    /// The agreed result, this end's report and its account of each burst,
    /// once done.
    pub fn result(&self) -> Option<(&ConnResult, &FinalReport, &[TcpBurst])> {
        match (&self.phase, &self.mine) {
            (Phase::Done(r), Some(mine)) => Some((
                r,
                mine,
                self.bursts.as_ref().map_or(&[][..], |b| &b.log.done[..]),
            )),
            _ => None,
        }
    }

    /// The agreed result, this end's report and its bursts; a machine not
    /// yet done is cancelled first, so there always is one.
    pub fn into_result(mut self) -> (ConnResult, FinalReport, Vec<TcpBurst>) {
        if !self.is_done() {
            self.cancel();
        }
        let bursts = self.bursts.map(|b| b.log.done).unwrap_or_default();
        let mine = self.mine.unwrap_or(FinalReport {
            sent: self.sent,
            received: self.received,
            verdict: Verdict::Cancelled,
            tcp_info: None,
        });
        match self.phase {
            Phase::Done(r) => (r, mine, bursts),
            _ => (agree(&mine, Err(&NoReport::Failed)), mine, bursts),
        }
    }

    /// Bytes of the plan sent and received so far.
    pub fn progress(&self) -> (u64, u64) {
        (self.sent, self.received)
    }

    /// Until when the burst schedule says nothing moves on this
    /// connection: between two bursts, the next one's start on this end's
    /// clock (the sender waits for it, the receiver for its first bytes).
    /// An idle clock counts from there, so a period longer than the idle
    /// timeout is not taken for a stall. `None` outside a gap.
    pub fn quiet_until(&self) -> Option<Instant> {
        let b = self.bursts.as_ref()?;
        if !matches!(self.phase, Phase::Data) {
            return None;
        }
        let next = self.burst_at.saturating_mul(b.spec.size.max(1));
        let moved = if b.sending { self.sent } else { self.received };
        (next < self.transfer && moved == next).then(|| b.due(self.burst_at))
    }
}
