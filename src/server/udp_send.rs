//! A UDP stream the server sends (`udp -R`, the server's half of `--bidir`)
//! on the server's event loops: an admitted session's socket joins the loop
//! that holds its control connection, and the [`Outflow`] machine is fed
//! from both there. Its datagrams leave one of two ways:
//!
//! - at most [`LOOP_MAX_PPS`] datagrams a second (most tests: a probe
//!   stream, a voice or video call, a few Mbit/s): on the loop's timers,
//!   each wake-up sending what is due ([`Departures`]), so such a stream
//!   costs a descriptor pair and its buffers, never a thread;
//! - faster: on a thread of the sender pool, which paces it as the
//!   client's own sender does. The pool holds at most [`pool_size`]
//!   threads, `min(--max-tests, 2 × cores)`: a paced sender at a high rate
//!   is where owning a core is the point, and there are no more cores to
//!   own. A fast stream admitted while the pool is full is sent on the
//!   loop's timers too, in bursts as coarse as those (about 1 ms): paced
//!   less finely, never refused for it; a thread is started only when the
//!   client's go comes.
//!
//! A pool sender's end is looked for on the session's timer (at the
//! stream's end, then every [`POOL_LOOK`]), not signalled, which keeps the
//! loop free of per-session wake-up descriptors.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Registry, Token};
use uuid::Uuid;

use super::State;
use super::control::TestSlots;
use super::limits::GRACE;
use super::loop_turn::{BUDGET, Budget, Cpu, Part, Session};
use super::metrics::{Kind, Moved};
use crate::guard::SendGuard;
use crate::net::out::Out;
use crate::net::realtime_ns;
use crate::protocol::auth::DatagramKey;
use crate::protocol::proto::UdpSpec;
use crate::protocol::refusal::Refusal;
use crate::protocol::udp::outflow::{Action, Outflow, Terms};
use crate::protocol::udp::sent::SenderReport;
use crate::udp::send::{Departures, SenderConfig, run_sender};

/// Fastest stream sent on the loop's timers, datagrams a second: the
/// loop's timers are as fine as a millisecond (epoll), so a faster stream
/// would leave in clumps.
pub(super) const LOOP_MAX_PPS: f64 = 1000.0;
/// How often a pool sender that should have ended is looked for.
const POOL_LOOK: Duration = Duration::from_millis(10);
/// Batches one turn sends at most before the loop's other connections.
const SEND_TURNS: usize = 4;

/// Threads the sender pool holds at most: `min(max_tests, 2 × cores)`.
pub(super) fn pool_size(max_tests: u32) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (max_tests as usize).min(2 * cores)
}

/// Datagrams a second a spec asks for at its peak: its rate over its
/// smallest datagram, and within a burst the burst's own spacing.
pub(super) fn peak_pps(s: &UdpSpec) -> f64 {
    let least = s
        .profile
        .as_ref()
        .map_or(s.size, |p| p.min_size().min(s.size))
        .max(1);
    let frames = s.media.map_or(0.0, |m| f64::from(m.fps));
    let mean = crate::udp::serve::rate_bps(s) / 8.0 / f64::from(least) + frames;
    let within = match s.burst {
        Some(_) => 1e12 / s.gap_ps.max(1) as f64,
        None => 0.0,
    };
    mean.max(within)
}

/// A place in the sender pool, given back when dropped (by the session,
/// or by the thread once it started one).
struct PoolSlot(Arc<AtomicUsize>);

impl PoolSlot {
    fn take(pool: &Arc<AtomicUsize>, max: usize) -> Option<PoolSlot> {
        pool.fetch_update(SeqCst, SeqCst, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| PoolSlot(Arc::clone(pool)))
    }
}

impl Drop for PoolSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

/// Where the stream's datagrams come from.
enum Sender {
    /// Not started, or its account is in.
    Idle,
    /// On the loop's timers: the schedule from `epoch`, and a batch the
    /// rate limit holds until `hold`.
    Loop {
        d: Box<Departures>,
        epoch: Instant,
        guard: SendGuard,
        hold: Option<Instant>,
    },
    /// On a pool thread, looked for at `look`.
    Pool {
        stop: Arc<AtomicBool>,
        handle: JoinHandle<()>,
        report: Arc<Mutex<Option<SenderReport>>>,
        look: Instant,
    },
}

/// One sending UDP stream on a loop.
pub(super) type UdpSend<'a> = Session<'a, Sends>;

/// What a sending stream keeps of its own: its socket and its sender.
pub(super) struct Sends {
    /// The server's limits, which the sender's rate and bytes keep to.
    limits: super::limits::Limits,
    peer: SocketAddr,
    sock: Arc<std::net::UdpSocket>,
    cfg: SenderConfig,
    duration: Duration,
    sender: Sender,
    /// Its place in the pool, while it may start a thread.
    pool: Option<PoolSlot>,
    /// What the sender moved: bytes and failed sends.
    moved: (u64, u64),
}

impl<'a> UdpSend<'a> {
    /// Opens the session's socket on the control connection's address,
    /// joins it to the loop as `token`, takes a place in the sender pool if
    /// the stream is too fast for the loop, and queues the acceptance.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        st: &'a State,
        peer: SocketAddr,
        stream: &TcpStream,
        (spec, key): (&UdpSpec, Option<DatagramKey>),
        slots: TestSlots<'a>,
        registry: &Registry,
        token: Token,
        now: Instant,
    ) -> Result<UdpSend<'a>, Refusal> {
        let limits = st.cfg.limits;
        // A fast stream with no place free in the pool is sent on the loop
        // all the same, in bursts as coarse as the loop's timers (its
        // sender's lateness says so), rather than refused.
        let pool = match peak_pps(spec) <= LOOP_MAX_PPS {
            true => None,
            false => PoolSlot::take(&st.senders, pool_size(limits.max_tests)),
        };
        let (sock, port) = super::loop_session::join(stream, &spec.sock, |_| {}, registry, token)?;
        let id = Uuid::new_v4();
        let terms = Terms {
            session: id,
            port,
            token: rand::random(),
            nonce: rand::random(),
            setup: limits.setup,
            deadline: limits.deadline(),
            max_duration: limits.deadline().saturating_sub(GRACE),
        };
        let mut cfg = crate::udp::serve::sender_config(spec, key);
        cfg.pacing = cfg.pacing.on_server();
        let part = Sends {
            limits,
            peer,
            sock: Arc::new(sock),
            duration: cfg.duration,
            cfg,
            sender: Sender::Idle,
            pool,
            moved: (0, 0),
        };
        Ok(Session::new(
            st,
            (Kind::Udp, id, peer),
            slots,
            Outflow::new(terms, now),
            part,
            now,
            format_args!("{}", crate::udp::serve::label(spec)),
        ))
    }
}

impl Part for Sends {
    type M = Outflow;

    fn sock(&self) -> socket2::SockRef<'_> {
        socket2::SockRef::from(&*self.sock)
    }

    fn act(&mut self, a: Action, m: &mut Outflow, cpu: &mut Cpu, out: &mut Out) {
        match a {
            Action::Summary(sum) => cpu.summary(*sum, out),
            Action::Start => {
                cpu.start();
                self.start_sender(m);
            }
            Action::StopSending => self.stop_sender(m),
            _ => {}
        }
    }

    fn work(&mut self, m: &mut Outflow, b: &mut Budget) -> bool {
        match self.sender_turn(&mut b.batches) {
            Some(rep) => {
                m.on_sent(rep);
                true
            }
            None => false,
        }
    }

    fn datagrams(&mut self, m: &mut Outflow, buf: &mut [u8], _: Instant, b: &mut Budget) -> bool {
        self.handshakes(m, buf, &mut b.datagrams)
    }

    fn spent(&self, b: &Budget) -> bool {
        b.batches >= SEND_TURNS
    }

    fn wake(&self) -> Option<Instant> {
        self.sender_wake()
    }

    fn moved(&self, _: &Outflow) -> Moved {
        let (sent, network_errors) = match &self.sender {
            Sender::Loop { d, .. } => d.moved(),
            _ => self.moved,
        };
        Moved {
            sent,
            network_errors,
            ..Moved::default()
        }
    }
}

impl Sends {
    /// Reads handshake datagrams into the machine while it wants them:
    /// true when the budget ran out with more perhaps waiting.
    fn handshakes(&mut self, m: &mut Outflow, buf: &mut [u8], taken: &mut usize) -> bool {
        while *taken < BUDGET && m.wants_datagrams() && !m.has_actions() {
            let (n, from) = match self.sock.recv_from(buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(_) => {
                    *taken += 1;
                    continue;
                }
            };
            *taken += 1;
            m.on_datagram(&buf[..n], from, realtime_ns());
        }
        *taken >= BUDGET && m.wants_datagrams()
    }

    fn start_sender(&mut self, m: &mut Outflow) {
        let epoch = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let guard = self.limits.guard(&stop);
        let Some(slot) = self.pool.take() else {
            self.sender = Sender::Loop {
                d: Box::new(Departures::new(self.cfg.clone())),
                epoch,
                guard,
                hold: None,
            };
            return;
        };
        let mut cfg = self.cfg.clone();
        cfg.guard = Some(Arc::new(guard));
        let report = Arc::new(Mutex::new(None));
        let (sock, flag, into) = (
            Arc::clone(&self.sock),
            Arc::clone(&stop),
            Arc::clone(&report),
        );
        // The loop reads nothing from the socket any more: the thread's
        // sends wait for room rather than fail.
        let _ = sock.set_nonblocking(false);
        let r = std::thread::Builder::new()
            .name("serve-send".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let _slot = slot;
                // The session's summary sees this thread whole.
                let _cpu = crate::net::cpu::EndNote;
                let rep = run_sender(&sock, &cfg, &flag);
                *into.lock().unwrap_or_else(|e| e.into_inner()) = Some(rep);
            });
        match r {
            Ok(handle) => {
                self.sender = Sender::Pool {
                    stop,
                    handle,
                    report,
                    look: epoch + self.duration,
                }
            }
            // No thread: nothing was sent, and the account says so.
            Err(e) => {
                eprintln!("cannot start a sender thread for {}: {e}", self.peer);
                let empty = Departures::new(self.cfg.clone()).finish(0);
                m.on_sent(empty);
            }
        }
    }

    fn stop_sender(&mut self, m: &mut Outflow) {
        match std::mem::replace(&mut self.sender, Sender::Idle) {
            Sender::Idle => {}
            Sender::Loop { d, epoch, .. } => {
                let rep = d.finish(epoch.elapsed().as_nanos() as u64);
                self.moved = (rep.bytes, rep.send_errors);
                m.on_sent(rep);
            }
            Sender::Pool {
                stop,
                handle,
                report,
                ..
            } => {
                stop.store(true, SeqCst);
                self.sender = Sender::Pool {
                    stop,
                    handle,
                    report,
                    look: Instant::now() + POOL_LOOK,
                };
            }
        }
    }

    /// Sends what is due (a loop sender, at most [`SEND_TURNS`] batches a
    /// turn) or looks whether the pool sender ended: its account, once
    /// it ended.
    fn sender_turn(&mut self, batches: &mut usize) -> Option<SenderReport> {
        let now = Instant::now();
        match &mut self.sender {
            Sender::Idle => None,
            Sender::Loop {
                d,
                epoch,
                guard,
                hold,
            } => {
                if hold.is_some_and(|h| now < h) {
                    return None;
                }
                *hold = None;
                let el = now.saturating_duration_since(*epoch).as_nanos() as u64;
                loop {
                    match d.next_due() {
                        None => break,
                        Some(due) if due > el || *batches >= SEND_TURNS => return None,
                        Some(_) => {}
                    }
                    *batches += 1;
                    let gate = |n| guard.gate(n, hold, now);
                    if !d.send_due(&self.sock, el, gate) {
                        break;
                    }
                    if hold.is_some() {
                        return None;
                    }
                }
                let Sender::Loop { d, epoch, .. } =
                    std::mem::replace(&mut self.sender, Sender::Idle)
                else {
                    return None;
                };
                let rep = d.finish(now.saturating_duration_since(epoch).as_nanos() as u64);
                self.moved = (rep.bytes, rep.send_errors);
                Some(rep)
            }
            Sender::Pool { handle, look, .. } => {
                if now < *look {
                    return None;
                }
                if !handle.is_finished() {
                    *look = now + POOL_LOOK;
                    return None;
                }
                let Sender::Pool { handle, report, .. } =
                    std::mem::replace(&mut self.sender, Sender::Idle)
                else {
                    return None;
                };
                let _ = handle.join();
                let rep = report.lock().unwrap_or_else(|e| e.into_inner()).take();
                let rep = rep.unwrap_or_default();
                self.moved = (rep.bytes, rep.send_errors);
                Some(rep)
            }
        }
    }

    /// When the sender wants a look next.
    fn sender_wake(&self) -> Option<Instant> {
        match &self.sender {
            Sender::Idle => None,
            Sender::Loop { d, epoch, hold, .. } => {
                hold.or_else(|| d.next_due().map(|ns| *epoch + Duration::from_nanos(ns)))
            }
            Sender::Pool { look, .. } => Some(*look),
        }
    }
}

impl Drop for Sends {
    fn drop(&mut self) {
        // A pool thread ends within its wait's slice; it gives its place
        // in the pool back itself.
        if let Sender::Pool { stop, .. } = &self.sender {
            stop.store(true, SeqCst);
        }
    }
}
