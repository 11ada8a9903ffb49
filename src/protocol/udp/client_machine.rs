//! The client's end of a UDP stream from the server's "go" to its summary,
//! as a machine without sockets, threads or clocks.
//!
//! It is fed what happens — the local sender or receiver reporting an
//! interval, a burst or its end, a message from the server, the control
//! connection failing — and the time since the stream's time zero, and says
//! what the driver does next: send a message, show a row, stop the local
//! worker, let the receiver drain until a deadline. The order of the end of
//! a test lives here: the sender's account goes to the server, the server's
//! totals (or the local receiver's) come back, then goodbye and the server's
//! summary. So do the bounds that keep a stuck or vanished server from
//! holding the results: the test's own length plus its drain and a margin,
//! then [`crate::control::STOP_GRACE`] to stop and as much again to give up
//! on a silent control connection, or nothing at all once the user insists.

use std::time::Duration;

use super::sent::SenderReport;
use super::track::{BurstReport, ReceiverStats, UdpInterval, UdpTotals};
use crate::protocol::cpu::CpuUsage;
use crate::protocol::proto::Message;

/// How long each stage of the end may take.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// From time zero, after which a stream that has not finished is
    /// stopped and the server taken for gone.
    pub limit: Duration,
    /// How long the local receiver keeps reading after the server said its
    /// sender is done (datagrams still on the way).
    pub drain: Duration,
    /// How long a stopping run waits for the server before it stops
    /// receiving; twice this, it ends without the control connection.
    pub grace: Duration,
}

/// What happened.
pub enum Input {
    /// The local receiver closed an interval.
    Interval(UdpInterval),
    /// The local receiver closed a burst.
    Burst(BurstReport),
    /// The server said this.
    Message(Message),
    /// Reading from or writing to the control connection failed.
    ControlLost,
    /// The local sender finished, with its account.
    SenderDone(SenderReport),
    /// The local receiver finished, with what it counted.
    ReceiverDone(Box<ReceiverStats>),
}

/// A row for the observer.
#[derive(Debug, Clone)]
pub enum Shown {
    /// A receiver interval, whichever end received.
    Interval(UdpInterval),
    /// A burst, whichever end received.
    Burst(BurstReport),
}

/// What the driver does, in order.
#[derive(Debug)]
pub enum Action {
    /// Write this message on the control connection (a failure comes back
    /// as [`Input::ControlLost`]).
    Send(Message),
    /// Show this row.
    Show(Shown),
    /// Stop the local sender or receiver.
    StopWorker,
    /// The local receiver ends this long after time zero.
    DrainUntil(Duration),
}

/// What the end of the stream leaves for the report.
#[derive(Debug, Default)]
pub struct Ending {
    /// The sender's account (the server's, when it sent).
    pub sender: Option<SenderReport>,
    /// The receiver's totals.
    pub totals: Option<UdpTotals>,
    /// Every receiver interval, in arrival order.
    pub intervals: Vec<UdpInterval>,
    /// Every burst, in arrival order.
    pub bursts: Vec<BurstReport>,
    /// The user stopped the run.
    pub interrupted: bool,
    /// The server vanished, or never finished in time.
    pub server_lost: bool,
    /// Time zero to the local worker's end, s (0 if it never ended).
    pub duration_secs: f64,
    /// The server's CPU use over its session, from its summary.
    pub server_cpu: Option<CpuUsage>,
}

/// The client's end of one UDP stream, once it runs.
pub struct ClientMachine {
    reverse: bool,
    bounds: Bounds,
    end: Ending,
    /// What the local receiver counted, for totals if the server sends none.
    stats: Option<Box<ReceiverStats>>,
    /// The server's delay histogram, arriving in chunks before its totals.
    histogram: Vec<super::hist::Bucket>,
    goodbye_sent: bool,
    /// The control connection failed or spoke out of turn.
    control_lost: bool,
    worker_stopped: bool,
    worker_done: bool,
    /// When this end began waiting for the server to finish.
    waiting_since: Option<Duration>,
    over: bool,
}

impl ClientMachine {
    /// A stream this client sends (`reverse` false) or receives.
    pub fn new(reverse: bool, bounds: Bounds) -> ClientMachine {
        ClientMachine {
            reverse,
            bounds,
            end: Ending::default(),
            stats: None,
            histogram: Vec::new(),
            goodbye_sent: false,
            control_lost: false,
            worker_stopped: false,
            worker_done: false,
            waiting_since: None,
            over: false,
        }
    }

    /// Whether the run is over: the driver stops feeding it and calls
    /// [`ClientMachine::finish`].
    pub fn is_over(&self) -> bool {
        self.over
    }

    /// The time passed: `now` since time zero, whether the user asked to
    /// stop (Ctrl-C) and whether they insist (skip every wait left).
    pub fn tick(&mut self, now: Duration, interrupted: bool, hurried: bool, out: &mut Vec<Action>) {
        if self.over {
            return;
        }
        let done = self.end.totals.is_some() || self.end.server_lost;
        if done && !self.goodbye_sent {
            self.goodbye_sent = true;
            // With the server gone, go on until the local worker has
            // stopped and handed over what it measured.
            if !self.end.server_lost {
                out.push(Action::Send(Message::Goodbye));
            }
        }
        if interrupted && !self.end.interrupted {
            self.end.interrupted = true;
            self.waiting_since.get_or_insert(now);
            if self.reverse {
                // The local receiver keeps reading: what the server sent
                // before it stopped is still arriving, and its `udp_done`
                // sets the drain deadline.
                out.push(Action::Send(Message::Stop));
            } else {
                self.stop_worker(out);
            }
        }
        if now > self.bounds.limit && !self.worker_stopped {
            // The far end never finished: stop with what was measured.
            self.stop_worker(out);
            self.end.server_lost = true;
            self.waiting_since.get_or_insert(now);
        }
        let Some(since) = self.waiting_since else {
            return;
        };
        if hurried || (self.control_lost && self.worker_done) {
            self.over = true;
            return;
        }
        let waited = now.saturating_sub(since);
        if waited > self.bounds.grace {
            if self.end.totals.is_none() {
                self.end.server_lost = true;
            }
            // A server that never said it stopped: stop receiving anyway.
            self.stop_worker(out);
            // The control connection may be silent for good: end once the
            // local worker has handed over, or after a second grace.
            if self.worker_done || waited > 2 * self.bounds.grace {
                self.over = true;
            }
        }
    }

    /// Something happened at `now` (since time zero).
    pub fn on(&mut self, now: Duration, input: Input, out: &mut Vec<Action>) {
        if self.over {
            return;
        }
        match input {
            Input::Interval(iv) | Input::Message(Message::UdpInterval(iv)) => {
                out.push(Action::Show(Shown::Interval(iv.clone())));
                self.end.intervals.push(iv);
            }
            Input::Burst(b) | Input::Message(Message::UdpBurst(b)) => {
                out.push(Action::Show(Shown::Burst(b.clone())));
                self.end.bursts.push(b);
            }
            Input::SenderDone(s) => {
                self.worker_done = true;
                self.end.duration_secs = now.as_secs_f64();
                out.push(Action::Send(Message::UdpDone(s.clone())));
                self.end.sender = Some(s);
            }
            Input::ReceiverDone(s) => {
                self.worker_done = true;
                self.end.duration_secs = now.as_secs_f64();
                self.end.totals = Some(s.totals(self.end.sender.as_ref().map(|r| r.packets)));
                self.stats = Some(s);
            }
            Input::Message(Message::UdpHistogram { bins }) => {
                // Never more than a histogram can hold, whatever the server sends.
                let room = super::hist::MAX_BUCKETS.saturating_sub(self.histogram.len());
                self.histogram.extend(bins.into_iter().take(room));
            }
            Input::Message(Message::UdpResult(mut t)) => {
                if t.histogram.is_empty() {
                    t.histogram = std::mem::take(&mut self.histogram);
                }
                self.end.totals = Some(t);
            }
            Input::Message(Message::UdpDone(s)) => {
                self.end.sender = Some(s);
                out.push(Action::DrainUntil(now + self.bounds.drain));
            }
            Input::Message(Message::Summary(s)) => {
                self.end.server_cpu = s.cpu;
                self.over = true;
            }
            Input::Message(Message::StopAck) => {}
            Input::Message(_) | Input::ControlLost => {
                if self.goodbye_sent {
                    self.over = true;
                } else {
                    // Nothing more will come from the server: the run ends
                    // once the local worker has handed over, and a worker
                    // that does not is given the same graces as a stop.
                    self.end.server_lost = true;
                    self.control_lost = true;
                    self.stop_worker(out);
                    self.waiting_since.get_or_insert(now);
                }
            }
        }
    }

    /// The local worker is gone without a word (its channel closed): the
    /// run can learn nothing more.
    pub fn worker_gone(&mut self) {
        self.over = true;
    }

    /// What the run measured; the local receiver's totals stand in for the
    /// server's when it sent none.
    pub fn finish(mut self) -> Ending {
        if self.end.totals.is_none()
            && let Some(s) = self.stats
        {
            self.end.totals = Some(s.totals(self.end.sender.as_ref().map(|r| r.packets)));
        }
        self.end
    }

    fn stop_worker(&mut self, out: &mut Vec<Action>) {
        if !self.worker_stopped {
            self.worker_stopped = true;
            out.push(Action::StopWorker);
        }
    }
}

#[cfg(test)]
#[path = "client_machine_tests.rs"]
mod tests;
