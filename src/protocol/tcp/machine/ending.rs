//! How a connection ends when it does not end by its plan: the peer's EOF,
//! a socket error, a cancel or an abort, and the verdict each gives.

use super::*;

impl Conn {
    /// The peer closed its side (a read returned 0 bytes).
    pub fn on_eof(&mut self) {
        match &mut self.phase {
            Phase::Data if self.recv_left > 0 => {
                self.failure.get_or_insert(Verdict::TooFew {
                    expected: self.received + self.recv_left,
                    received: self.received,
                });
                self.abandon_data();
            }
            Phase::Final {
                inbuf,
                peer: slot @ None,
                ..
            } => {
                *slot = Some(Err(if inbuf.is_empty() {
                    NoReport::Closed
                } else {
                    NoReport::Truncated
                }));
                self.maybe_done();
            }
            _ => {}
        }
    }

    /// A read or write failed with `e`.
    pub fn on_error(&mut self, e: &io::Error) {
        match (&self.phase, &mut self.mine) {
            (Phase::Final { .. }, Some(mine)) if !self.report_out => {
                // This end's report could not go out.
                mine.verdict = net_verdict(e);
                self.phase = Phase::Done(agree(mine, Err(&NoReport::Failed)));
            }
            (Phase::Final { .. }, Some(mine)) => {
                self.phase = Phase::Done(agree(mine, Err(&NoReport::Io(clone_error(e)))));
            }
            _ => self.fail(net_verdict(e)),
        }
    }

    /// This end stops (the run was stopped): a cancellation, not a finding.
    pub fn cancel(&mut self) {
        self.fail(Verdict::Cancelled);
    }

    /// This end gives up with `v` (e.g. a server limit reached).
    pub fn abort(&mut self, v: Verdict) {
        self.fail(v);
    }

    /// Ends the connection with `v` as this end's verdict unless it has
    /// already ended (corruption seen before still wins).
    pub(super) fn fail(&mut self, v: Verdict) {
        match &self.phase {
            Phase::Data => {
                self.failure = Some(v);
                self.abandon_data();
            }
            Phase::Final { .. } => {
                let Some(mine) = &mut self.mine else {
                    return;
                };
                if !matches!(mine.verdict, Verdict::Corrupt { .. }) {
                    mine.verdict = v;
                }
                self.phase = Phase::Done(agree(mine, Err(&NoReport::Failed)));
            }
            Phase::Done(_) => {}
        }
    }

    /// Drops what is left of the plan after a failure.
    pub(super) fn abandon_data(&mut self) {
        self.send_left = 0;
        self.recv_left = 0;
        self.tail.clear();
        self.finish_data();
    }
}
