//! The client's UDP stream from the server's go to its summary, on the
//! run's own thread: the control connection's frames, the local receiver's
//! datagrams (`recvmmsg` on a non-blocking socket, [`Receiver`]) and the
//! clock are waited for together with poll(2) and fed to the
//! [`ClientMachine`], which says what to do next. A receiving stream is
//! one thread, the run's; a sending stream adds its paced sender, on a
//! thread of its own because owning a core is what makes its pacing fine
//! (`--pacing spin`). The sender's end is looked for every [`LOOK`], not
//! signalled.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::receive::{PacketRow, Receiver, ReceiverSink};
use crate::control::Control;
use crate::net::ahead::{AHEAD, ReadAhead};
use crate::protocol::proto::Message;
use crate::protocol::udp::client_machine::{Action, ClientMachine, Input, Shown};
use crate::protocol::udp::clock::Offset;
use crate::protocol::udp::sent::SenderReport;
use crate::protocol::udp::track::{BurstReport, UdpInterval};

/// Longest wait with nothing to wake it: the machine's graces and the
/// user's Ctrl-C are looked at at least this often.
const TICK: Duration = Duration::from_millis(50);
/// How often a running sender's end is looked for.
const LOOK: Duration = Duration::from_millis(10);

/// Receives the run's output as it happens.
pub trait UdpObserver {
    /// The server has accepted the test and the clock offset is known
    /// (`None`: clocks trusted); the stream starts now.
    fn started(&mut self) {}
    /// The clock offset the delays are corrected with, told just before
    /// [`UdpObserver::started`].
    fn clock(&mut self, _offset: Option<Offset>) {}
    /// A receiver interval ended (whichever end received).
    fn interval(&mut self, iv: &UdpInterval);
    /// A datagram arrived at the client (only with `per_packet`).
    fn packet(&mut self, row: &PacketRow);
    /// A burst ended (burst mode).
    fn burst(&mut self, _b: &BurstReport) {}
}

/// The stream's local worker.
pub(crate) enum Worker {
    /// Receiving on this thread; `deadline` (after time zero) once the
    /// server's sender is done and the drain is set, `stop` once told to.
    Receives {
        rx: Box<Receiver>,
        deadline: Option<Duration>,
        stop: bool,
    },
    /// The paced sender, on its own thread.
    Sends {
        stop: Arc<AtomicBool>,
        handle: JoinHandle<SenderReport>,
    },
    /// Handed over its account.
    Done,
}

/// What the stream's end is fed from and shown to.
pub(crate) struct Ends<'a> {
    /// The control connection (blocking for writes; read here without
    /// waiting).
    pub c: &'a mut Control,
    /// The data socket.
    pub sock: &'a UdpSocket,
    /// Ctrl-C.
    pub interrupt: &'a AtomicBool,
    /// Rows as they are made.
    pub obs: &'a mut dyn UdpObserver,
    /// Hand every received datagram to the observer.
    pub per_packet: bool,
}

/// Runs the stream's end on this thread until `machine` is over.
pub(crate) fn drive(
    ends: Ends<'_>,
    mut worker: Worker,
    machine: &mut ClientMachine,
    epoch: Instant,
) {
    let Ends {
        c,
        sock,
        interrupt,
        obs,
        per_packet,
    } = ends;
    let ctl = c.stream.as_raw_fd();
    let mut ahead = ReadAhead::default();
    let mut scratch = vec![0u8; AHEAD];
    let mut control_open = true;
    let mut actions = Vec::new();
    // What the last wait said is ready; at first, look at both.
    let (mut ctl_ready, mut data_ready) = (true, true);
    loop {
        // What the last input asked for is carried out with what the time
        // asks for, in that order.
        machine.tick(
            epoch.elapsed(),
            interrupt.load(SeqCst),
            crate::control::hurried(),
            &mut actions,
        );
        perform(c, obs, &mut actions, machine, &mut worker, epoch);
        if machine.is_over() {
            return;
        }
        if control_open && ctl_ready {
            control_open =
                read_control(ctl, &mut ahead, &mut scratch, machine, epoch, &mut actions);
        }
        let mut sink = Sink {
            machine,
            actions: &mut actions,
            obs,
            per_packet,
            epoch,
        };
        let more = match step(&mut worker, sock, data_ready, &mut sink) {
            Ok(more) => more,
            Err(()) => {
                machine.worker_gone();
                return;
            }
        };
        perform(c, obs, &mut actions, machine, &mut worker, epoch);
        if more {
            // The receiver's budget ran out with datagrams perhaps waiting:
            // look at the control connection too, and go on without waiting.
            (ctl_ready, data_ready) = (true, true);
            continue;
        }
        let now = epoch.elapsed();
        let mut wait = TICK;
        let data = match &worker {
            Worker::Receives { rx, deadline, .. } => {
                wait = wait.min(rx.next_tick().saturating_sub(now));
                if let Some(d) = deadline {
                    wait = wait.min(d.saturating_sub(now));
                }
                Some(sock.as_raw_fd())
            }
            Worker::Sends { .. } => {
                wait = wait.min(LOOK);
                None
            }
            Worker::Done => None,
        };
        // A descriptor not to wait for is passed as -1, which poll skips;
        // a failed or interrupted wait looks at both again.
        let fds = [if control_open { ctl } else { -1 }, data.unwrap_or(-1)];
        (ctl_ready, data_ready) = match crate::net::readable_among(&fds, wait) {
            Ok(r) => (r[0], r[1]),
            Err(_) => (true, true),
        };
    }
}

/// Reads every control frame that waits and feeds it to the machine:
/// false once the connection is done (its end, a failure, or the server's
/// summary or error, after which nothing more is read).
fn read_control(
    ctl: RawFd,
    ahead: &mut ReadAhead,
    scratch: &mut [u8],
    machine: &mut ClientMachine,
    epoch: Instant,
    actions: &mut Vec<Action>,
) -> bool {
    loop {
        match ahead.read_frame(scratch, |b| recv_now(ctl, b)) {
            Ok(Some(m)) => {
                let last = matches!(m, Message::Summary(_) | Message::Error { .. });
                machine.on(epoch.elapsed(), Input::Message(m), actions);
                if last {
                    return false;
                }
            }
            Ok(None) => return true,
            Err(_) => {
                machine.on(epoch.elapsed(), Input::ControlLost, actions);
                return false;
            }
        }
    }
}

/// Gives the worker its turn: the receiver reads what waits (when `ready`)
/// and closes the intervals that ended, or hands over its account once
/// stopped or drained; a sender that ended hands over its account. Ok(true)
/// when the receiver may have more waiting; Err when the sender died.
fn step(
    worker: &mut Worker,
    sock: &UdpSocket,
    ready: bool,
    sink: &mut Sink<'_>,
) -> Result<bool, ()> {
    let now = sink.epoch.elapsed();
    match worker {
        Worker::Receives { rx, deadline, stop } => {
            let due = *stop || deadline.is_some_and(|d| now >= d);
            let mut more = false;
            let mut failed = false;
            if !due && ready {
                match rx.read(sock, sink) {
                    Ok(m) => more = m,
                    // The socket failed for good: the receiver ends with
                    // what it counted.
                    Err(_) => failed = true,
                }
            }
            if !(due || failed) {
                rx.on_time(sink.epoch.elapsed(), sink);
                return Ok(more);
            }
            let Worker::Receives { rx, .. } = std::mem::replace(worker, Worker::Done) else {
                return Ok(false);
            };
            let rx = *rx;
            let stats = rx.finish(sink.epoch.elapsed(), sink);
            sink.machine.on(
                sink.epoch.elapsed(),
                Input::ReceiverDone(Box::new(stats)),
                sink.actions,
            );
            Ok(false)
        }
        Worker::Sends { handle, .. } if handle.is_finished() => {
            let Worker::Sends { handle, .. } = std::mem::replace(worker, Worker::Done) else {
                return Ok(false);
            };
            let report = handle.join().map_err(|_| ())?;
            sink.machine.on(
                sink.epoch.elapsed(),
                Input::SenderDone(report),
                sink.actions,
            );
            Ok(false)
        }
        Worker::Sends { .. } | Worker::Done => Ok(false),
    }
}

/// Carries out what the machine asked for; a control write that fails is
/// fed back to it.
fn perform(
    c: &mut Control,
    obs: &mut dyn UdpObserver,
    actions: &mut Vec<Action>,
    machine: &mut ClientMachine,
    worker: &mut Worker,
    epoch: Instant,
) {
    while !actions.is_empty() {
        for a in std::mem::take(actions) {
            match a {
                Action::Send(m) => {
                    if c.send(&m).is_err() {
                        machine.on(epoch.elapsed(), Input::ControlLost, actions);
                    }
                }
                Action::Show(Shown::Interval(iv)) => obs.interval(&iv),
                Action::Show(Shown::Burst(b)) => obs.burst(&b),
                Action::StopWorker => match worker {
                    Worker::Receives { stop, .. } => *stop = true,
                    Worker::Sends { stop, .. } => stop.store(true, SeqCst),
                    Worker::Done => {}
                },
                Action::DrainUntil(at) => {
                    if let Worker::Receives { deadline, .. } = worker {
                        *deadline = Some(at);
                    }
                }
            }
        }
    }
}

/// Takes the receiver's output to the machine (intervals and bursts) and
/// to the observer (every datagram, when asked).
struct Sink<'a> {
    machine: &'a mut ClientMachine,
    actions: &'a mut Vec<Action>,
    obs: &'a mut dyn UdpObserver,
    per_packet: bool,
    epoch: Instant,
}

impl ReceiverSink for Sink<'_> {
    fn interval(&mut self, iv: UdpInterval) {
        self.machine
            .on(self.epoch.elapsed(), Input::Interval(iv), self.actions);
    }
    fn packet(&mut self, p: &PacketRow) {
        if self.per_packet {
            self.obs.packet(p);
        }
    }
    fn burst(&mut self, b: BurstReport) {
        self.machine
            .on(self.epoch.elapsed(), Input::Burst(b), self.actions);
    }
}

/// One read of what waits on `fd` (a stream's bytes, or one datagram),
/// without waiting for more.
pub(crate) fn recv_now(fd: RawFd, b: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `b` is a valid, exclusively borrowed buffer of `b.len()`
    // bytes for the duration of the call; recv writes at most that many.
    let n = unsafe { libc::recv(fd, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}
