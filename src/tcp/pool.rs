//! The TCP client's data connections on a fixed number of threads: each
//! thread runs one mio event loop (epoll) over its share of the concurrent
//! connections, whatever `--connections` is. A connection is one socket and
//! a few hundred bytes of state: connect (non-blocking), the data hello and
//! its acknowledgement, the data phase as a [`Conn`] state machine, then the
//! server's account of the bursts. Reads go into one buffer per thread, so
//! memory does not grow with the buffer size times the connections.

use crate::sockopts::ShutdownMode;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use super::config::BufferSpec;
use super::connect::{Local, connect};
use super::drive::{Env, Fin, Ran, Socket, run_until_blocked};
use super::machine::Conn;
use super::session::{ConnectionRecord, Shared, TRACKED};
use crate::net::ahead::ReadAhead;
use crate::net::out::Out;
use crate::net::timers::Timers;
use crate::outcome::{ConnResult, ResultKind, after_stop};
use crate::plan::Role;
use crate::proto::{self, DataHello, Message};
use crate::stats::{Progress, push_progress};
use ending::{Ended, Span, failed};

mod ending;

/// Longest sleep of an event loop: how soon it notices a stop.
const TICK: Duration = Duration::from_millis(20);
/// How long to wait for the server's account of the bursts.
const BURSTS_WAIT: Duration = Duration::from_secs(2);

/// Where one connection is.
enum Stage {
    /// The TCP handshake is in progress.
    Connecting,
    /// Sending the data hello, then reading the acknowledgement. The data
    /// does not wait for it: it follows the hello at once, in the same
    /// write when it is small (the server reads the hello and the data
    /// behind it together, and hands the data to the connection once it
    /// has admitted it), which saves a round trip per connection; only
    /// reading waits.
    Hello { out: Out, conn: Box<Conn> },
    /// The data phase, and what is queued to be written.
    Data { conn: Box<Conn>, out: Out },
    /// Reading the server's account of the bursts until `until`.
    Bursts { until: Instant },
}

struct Slot {
    stream: TcpStream,
    /// `--cport`: the local port, given back after `stream` is closed
    /// (fields drop in order).
    _port: Option<super::ports::PortLease>,
    /// Index of the control session (target) this connection belongs to.
    session: usize,
    stage: Stage,
    /// What was read past what the connection wanted yet (the server's
    /// reply and report behind its acknowledgement).
    ahead: ReadAhead,
    rec: ConnectionRecord,
    started: Instant,
    /// Holds one of the `--throttle` connects in progress.
    throttled: bool,
    last_progress: Instant,
    /// The agreed result once the data phase is over.
    result: Option<ConnResult>,
    /// Retransmissions already added to the run's count.
    retrans_counted: u32,
    /// In the worker's `moved` list (moved since its TCP_INFO was last read).
    listed: bool,
}

/// One event loop's connections and what they share.
struct Worker<'a> {
    sh: &'a Shared,
    poll: Poll,
    /// Boxed: a slot is taken out for each step and put back, and a
    /// connection's record makes it some 600 bytes to copy each way.
    slots: Vec<Option<Box<Slot>>>,
    free: Vec<usize>,
    live: usize,
    /// Concurrent connections this loop keeps.
    quota: usize,
    timers: Timers,
    /// Connections that used up their turn ([`Ran::Yielded`]) and could go
    /// on: run again after the next poll's events and timers, so that the
    /// other connections come first. Edge-triggered readiness reports
    /// nothing new for them; `queued` marks the slots in the list, each
    /// at most once.
    ready: Vec<usize>,
    queued: Vec<bool>,
    buf: Vec<u8>,
    tx: Sender<ConnectionRecord>,
    rng: SmallRng,
    /// Connection IDs: random version-4 UUIDs from a generator the OS
    /// seeded, without a getrandom call per connection.
    ids: SmallRng,
    no_more: bool,
    /// Connections ended but not yet finished ([`Worker::finish_ending`]).
    ending: Vec<(Box<Slot>, Span, Ended)>,
    /// When to next sample the live connections' TCP_INFO: the middle of
    /// each status interval, so every interval's row has its samples.
    next_sample: Option<Instant>,
    /// Connections that moved since their TCP_INFO was last read, by
    /// slot: the only ones a row samples (an idle connection's RTT and
    /// window have not changed, and reading them for 100,000 held
    /// connections cost the loops more than the connections did).
    moved: Vec<usize>,
    /// The slots of the connections whose bytes are charted ([`TRACKED`]).
    tracked: Vec<usize>,
}

/// Starts `threads` event loops sharing `sh.cfg.connections` concurrent
/// connections between them; each sends every finished connection's record
/// to `tx` and returns when no connection is left to run.
pub(super) fn spawn(
    sh: &Arc<Shared>,
    threads: usize,
    seed: u64,
    tx: &Sender<ConnectionRecord>,
) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
    let total = (sh.cfg.connections as u64).min(sh.cfg.total_connections()) as usize;
    let threads = threads.clamp(1, total.max(1));
    let mut handles = Vec::new();
    for w in 0..threads {
        let quota = total / threads + usize::from(w < total % threads);
        let sh = Arc::clone(sh);
        let tx = tx.clone();
        let poll = Poll::new()?;
        let h = std::thread::Builder::new()
            .name(format!("conns-{w}"))
            .spawn(move || {
                // The report's busiest thread counts this one whole.
                let _cpu = crate::net::cpu::EndNote;
                let buf_len = match sh.cfg.buffer {
                    BufferSpec::Fixed(b) => b,
                    BufferSpec::Range(_, hi) => hi,
                } as usize;
                let mut wk = Worker {
                    sh: &sh,
                    poll,
                    slots: Vec::new(),
                    free: Vec::new(),
                    live: 0,
                    quota,
                    timers: Timers::default(),
                    ready: Vec::new(),
                    queued: Vec::new(),
                    // At least a frame's worth, so a peer's report is read
                    // whole (the machine reads data in its own buffer's steps).
                    buf: vec![0u8; buf_len.max(crate::net::ahead::AHEAD)],
                    tx,
                    rng: SmallRng::seed_from_u64(seed ^ (w as u64).wrapping_mul(0x9E37)),
                    ids: rand::make_rng(),
                    no_more: false,
                    ending: Vec::new(),
                    next_sample: sh.cfg.interval.map(|i| sh.start + i / 2),
                    moved: Vec::new(),
                    tracked: Vec::new(),
                };
                wk.run();
            })?;
        handles.push(h);
    }
    Ok(handles)
}

impl Worker<'_> {
    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            self.start_more();
            self.finish_ending();
            if self.live == 0 && (self.no_more || self.stopping()) {
                return;
            }
            let timeout = match self.ready.is_empty() {
                true => self.timers.timeout(Instant::now(), TICK),
                false => Duration::ZERO,
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                self.fail_all(&e.to_string());
                self.finish_ending();
                return;
            }
            for ev in &events {
                self.advance(ev.token().0);
            }
            let now = Instant::now();
            for k in self.timers.due(now) {
                self.expire(k, now);
            }
            // Last, the connections that had their turn: one more turn each.
            for k in std::mem::take(&mut self.ready) {
                self.queued[k] = false;
                self.advance(k);
            }
            if self.sh.abort.load(SeqCst) {
                self.cancel_all();
            }
            if let (Some(at), Some(iv)) = (self.next_sample, self.sh.cfg.interval)
                && now >= at
            {
                self.sample(iv);
                self.next_sample = Some(at + iv);
            }
        }
    }

    fn stopping(&self) -> bool {
        self.sh.stop.load(SeqCst) || self.sh.halt.load(SeqCst)
    }

    /// Opens connections until this loop holds its quota (or the run has
    /// started all it will, or the connects in progress are at `--throttle`).
    fn start_more(&mut self) {
        while self.live < self.quota && !self.no_more && !self.stopping() {
            if self.sh.data_deadline().is_some_and(|d| Instant::now() >= d) {
                // A time-bounded run's connections end now; none starts.
                self.no_more = true;
                return;
            }
            if !self.sh.throttle_try_acquire() {
                return;
            }
            let index = match &self.sh.cfg.open_cap {
                None => self.sh.next.fetch_add(1, SeqCst),
                Some(cap) => {
                    let cap = cap.load(SeqCst);
                    match self
                        .sh
                        .next
                        .fetch_update(SeqCst, SeqCst, |n| (n < cap).then_some(n + 1))
                    {
                        Ok(n) => n,
                        Err(_) => {
                            // Not yet: the loop looks again every tick.
                            self.sh.throttle_release();
                            return;
                        }
                    }
                }
            };
            if index >= self.sh.cfg.total_connections() {
                self.sh.throttle_release();
                self.no_more = true;
                return;
            }
            self.open(index);
        }
    }

    fn open(&mut self, index: u64) {
        let session = self.sh.session_for(index);
        let addr = self.sh.sessions[session].addr;
        let buffer = match self.sh.cfg.buffer {
            BufferSpec::Fixed(b) => b,
            BufferSpec::Range(lo, hi) => self.rng.random_range(lo..=hi),
        };
        let rec = ConnectionRecord {
            time_slice: 0.0,
            local: None,
            remote: addr,
            sent: 0,
            received: 0,
            time_ms: 0.0,
            connect_ms: 0.0,
            buffer,
            result: failed(String::new()),
            connection_id: uuid::Builder::from_random_bytes(self.ids.random()).into_uuid(),
            bursts: Vec::new(),
            tcp_info: None,
            peer_tcp_info: None,
            refused: None,
            index,
            // Charted from its opening, when the run has intervals to sample.
            progress: match self.sh.cfg.interval {
                Some(_) if index < TRACKED => vec![Progress {
                    secs: self.sh.elapsed(),
                    sent: 0,
                    received: 0,
                }],
                _ => Vec::new(),
            },
        };
        let started = Instant::now();
        // At most -P connections are open and --cport gives at least -P
        // ports, each back once its socket is closed: one is free.
        // Ended connections whose sockets still wait to be closed: a loop
        // holds at most its quota and one descriptor (the fd check's
        // margin) even when connections end within their first step, and a
        // --cport port comes back only once its socket is closed.
        if self.sh.ports.is_some() || self.live + self.ending.len() > self.quota {
            self.finish_ending();
        }
        let lease = self.sh.ports.as_ref().and_then(|p| p.take());
        if self.sh.ports.is_some() && lease.is_none() {
            self.sh.throttle_release();
            let why = "no --cport port is free: every one is held by an open connection";
            let span = self.span(Instant::now());
            return self.finish_record(rec, span, Ended::Failed(why.into()));
        }
        let local = Local {
            ip: self.sh.sessions[session].bind,
            port: lease.as_ref().map(|l| l.port),
            dev: self.sh.cfg.bind_dev.as_deref(),
        };
        let stream = match connect(addr, &local, &self.sh.cfg.sock) {
            Ok(s) => s,
            Err(e) => {
                self.sh.throttle_release();
                let span = self.span(started);
                return self.finish_record(rec, span, Ended::Failed(e.to_string()));
            }
        };
        let k = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let mut slot = Box::new(Slot {
            stream,
            _port: lease,
            session,
            stage: Stage::Connecting,
            ahead: ReadAhead::default(),
            rec,
            started,
            throttled: true,
            last_progress: started,
            result: None,
            retrans_counted: 0,
            listed: false,
        });
        self.live += 1;
        if !slot.rec.progress.is_empty() {
            self.tracked.push(k);
        }
        // Over loopback the handshake is often over when connect returns:
        // the hello goes out now rather than after a turn of the loop, and
        // before the socket joins the poll, so that registering it is not
        // between connecting and the request. What happens meanwhile shows
        // in the registration's first readiness report.
        let outcome = self.step(&mut slot, k);
        let outcome = outcome.and_then(|()| {
            let both = Interest::READABLE | Interest::WRITABLE;
            (self.poll.registry())
                .register(&mut slot.stream, Token(k), both)
                .map_err(|e| Ended::Failed(e.to_string()))
        });
        self.put_back(k, slot, outcome);
    }

    /// Moves connection `k` as far as it can go without blocking.
    fn advance(&mut self, k: usize) {
        let Some(mut slot) = self.slots.get_mut(k).and_then(Option::take) else {
            return;
        };
        let outcome = self.step(&mut slot, k);
        self.put_back(k, slot, outcome);
    }

    /// Keeps connection `k` when its step blocked (its deadline armed, and
    /// listed for TCP_INFO if it moved), or closes it with its result.
    fn put_back(&mut self, k: usize, mut slot: Box<Slot>, outcome: Result<(), Ended>) {
        match outcome {
            Ok(()) => {
                if let Some(at) = self.deadline(&slot) {
                    self.timers.push(at, k);
                }
                if !slot.listed && self.next_sample.is_some() {
                    slot.listed = true;
                    self.moved.push(k);
                }
                self.slots[k] = Some(slot)
            }
            Err(result) => self.close(k, slot, result),
        }
    }

    /// Runs `slot` until it blocks (Ok) or ends with its result (Err).
    fn step(&mut self, slot: &mut Slot, k: usize) -> Result<(), Ended> {
        loop {
            match &mut slot.stage {
                Stage::Connecting => {
                    // A peer address means connected; only without one is
                    // the socket asked why.
                    match slot.stream.peer_addr() {
                        Ok(_) => {}
                        Err(e)
                            if e.kind() == io::ErrorKind::NotConnected
                                || e.raw_os_error() == Some(libc::EINPROGRESS) =>
                        {
                            if let Ok(Some(e)) | Err(e) = slot.stream.take_error() {
                                let addr = slot.rec.remote;
                                return Err(Ended::Failed(format!("connect to {addr}: {e}")));
                            }
                            return Ok(());
                        }
                        Err(e) => {
                            return Err(Ended::Failed(format!(
                                "connect to {}: {e}",
                                slot.rec.remote
                            )));
                        }
                    }
                    self.sh.throttle_release();
                    slot.throttled = false;
                    slot.rec.connect_ms = slot.started.elapsed().as_secs_f64() * 1e3;
                    let _ = slot.stream.set_nodelay(true);
                    self.sh.granted.get_or_init(|| {
                        crate::net::sockopt::granted(&slot.stream, slot.rec.remote.is_ipv6(), true)
                    });
                    let session = &self.sh.sessions[slot.session];
                    let id = slot.rec.connection_id;
                    let hello = Message::DataHello(DataHello {
                        session: session.id,
                        connection: id,
                        buffer: slot.rec.buffer,
                        proof: session
                            .data_key
                            .map(|key| crate::auth::data_proof(&key, &session.id, &id)),
                    });
                    let mut conn = Conn::new(
                        &self.sh.spec,
                        slot.rec.connection_id,
                        Role::Client,
                        slot.rec.buffer as usize,
                        Instant::now(),
                    );
                    if let Some(at) = self.sh.data_deadline() {
                        conn.set_deadline(at);
                    }
                    slot.stage = Stage::Hello {
                        out: Out::new(proto::encode(&hello)),
                        conn: Box::new(conn),
                    };
                    slot.last_progress = Instant::now();
                }
                Stage::Hello { out, conn } => {
                    // The hello goes out with the first data behind it, in
                    // one write when the data is small.
                    let last = &mut slot.last_progress;
                    let ahead = &mut slot.ahead;
                    let ran = self.run_conn(conn, out, ahead, &slot.stream, last, false);
                    self.wait_for(ran, k);
                    let stream = &slot.stream;
                    if conn.is_done() {
                        // Nothing is read before the ack: only a write failed.
                        // A server that refused the connection closes it once
                        // its refusal is delivered and a little of what
                        // follows is read, so the refusal may wait unread:
                        // it is the reason, not the broken pipe.
                        if let Ok(Some(Message::Error { code, message })) =
                            slot.ahead.read_frame(&mut self.buf, |b| stream.recv(b))
                        {
                            return Err(Ended::Refused(code, message));
                        }
                        let detail = conn.result().map(|r| r.0.detail.clone());
                        let e = detail.unwrap_or_default();
                        return Err(Ended::Failed(format!("data hello: {e}")));
                    }
                    match slot.ahead.read_frame(&mut self.buf, |b| stream.recv(b)) {
                        Ok(None) => return Ok(()),
                        Err(e) => return Err(Ended::Failed(format!("data hello: {e}"))),
                        Ok(Some(Message::DataAck { connection }))
                            if connection == slot.rec.connection_id => {}
                        Ok(Some(Message::Error { code, message })) => {
                            return Err(Ended::Refused(code, message));
                        }
                        Ok(Some(m)) => {
                            return Err(Ended::Failed(format!(
                                "unexpected reply to data hello: {m:?}"
                            )));
                        }
                    }
                    self.sh.counters.in_flight.fetch_add(1, Relaxed);
                    if let Stage::Hello { conn, out, .. } =
                        std::mem::replace(&mut slot.stage, Stage::Connecting)
                    {
                        slot.stage = Stage::Data { conn, out };
                    }
                    slot.last_progress = Instant::now();
                }
                Stage::Data { conn, out } => {
                    let last = &mut slot.last_progress;
                    let ahead = &mut slot.ahead;
                    let ran = self.run_conn(conn, out, ahead, &slot.stream, last, true);
                    if !self.wait_for(ran, k) {
                        return Ok(());
                    }
                    self.sh.counters.in_flight.fetch_sub(1, Relaxed);
                    let Stage::Data { conn, .. } = std::mem::replace(
                        &mut slot.stage,
                        Stage::Bursts {
                            until: Instant::now() + BURSTS_WAIT,
                        },
                    ) else {
                        return Ok(());
                    };
                    slot.rec.peer_tcp_info = conn.peer_tcp_info();
                    let (result, mine, bursts) = conn.into_result();
                    let result = after_stop(result, self.sh.stop.load(SeqCst));
                    (slot.rec.sent, slot.rec.received) = (mine.sent, mine.received);
                    slot.rec.bursts = bursts;
                    let wants_bursts = self.sh.spec.burst.is_some()
                        && matches!(result.kind, ResultKind::Success | ResultKind::DataError);
                    if !wants_bursts {
                        return Err(Ended::Agreed(result));
                    }
                    slot.result = Some(result);
                    self.timers.push(Instant::now() + BURSTS_WAIT, k);
                }
                Stage::Bursts { until } => {
                    let finished = if Instant::now() >= *until {
                        true
                    } else {
                        let stream = &slot.stream;
                        match slot.ahead.read_frame(&mut self.buf, |b| stream.recv(b)) {
                            Ok(None) => return Ok(()),
                            Ok(Some(Message::TcpBursts { bursts, last })) => {
                                slot.rec.bursts.extend(bursts);
                                last
                            }
                            // The server's account is optional: whatever came is kept.
                            Ok(Some(_)) | Err(_) => true,
                        }
                    };
                    if finished {
                        let r = slot.result.take().unwrap_or_else(|| failed(String::new()));
                        return Err(Ended::Agreed(r));
                    }
                }
            }
        }
    }

    /// Runs a connection's machine until it is settled or blocks; before
    /// the server's acknowledgement it may write but not read.
    fn run_conn(
        &mut self,
        conn: &mut Conn,
        out: &mut Out,
        ahead: &mut ReadAhead,
        stream: &TcpStream,
        last: &mut Instant,
        may_read: bool,
    ) -> Ran {
        let stop = || self.sh.stop.load(SeqCst);
        let env = Env {
            counters: &self.sh.counters,
            guard: None,
            stopped: &stop,
            may_read,
            // The server's FIN comes with its report unless a burst
            // account follows it; a rude close resets instead.
            fin: match (&self.sh.spec.burst, self.sh.cfg.sock.shutdown) {
                (None, ShutdownMode::Graceful) => Fin::WithLastReport,
                _ => Fin::OnClose,
            },
        };
        run_until_blocked(conn, out, ahead, stream, &mut self.buf, &env, last)
    }

    /// Whether connection `k`'s run ended settled; a blocked one's timer
    /// is set, and one that had its turn runs again on the next.
    fn wait_for(&mut self, ran: Ran, k: usize) -> bool {
        match ran {
            Ran::Settled => true,
            Ran::Blocked { timer } => {
                if let Some(at) = timer {
                    self.timers.push(at, k);
                }
                false
            }
            Ran::Yielded => {
                if self.queued.len() <= k {
                    self.queued.resize(k + 1, false);
                }
                if !std::mem::replace(&mut self.queued[k], true) {
                    self.ready.push(k);
                }
                false
            }
        }
    }

    /// When connection `s` fails if nothing happens first: the connect
    /// timeout while connecting, the idle timeout after (a wait for the next
    /// burst is not idleness); none while reading the burst account, which
    /// has its own timer.
    fn deadline(&self, s: &Slot) -> Option<Instant> {
        let idle = self.sh.cfg.idle_timeout;
        match &s.stage {
            Stage::Connecting => {
                let connect = self.sh.cfg.connect_timeout.or(idle);
                Some(s.started + connect.unwrap_or(Duration::from_secs(30)))
            }
            Stage::Bursts { .. } => None,
            Stage::Hello { .. } => Some(s.last_progress + idle?),
            Stage::Data { conn, .. } => {
                let from = conn
                    .quiet_until()
                    .map_or(s.last_progress, |q| q.max(s.last_progress));
                Some(from + idle?)
            }
        }
    }

    /// Connection `k`'s timer came due at `now`: failed if past its
    /// deadline (connect or idle), stepped otherwise. Its one timer entry
    /// is its deadline unless something earlier was asked for, so an idle
    /// connection costs its loop one look per deadline, not one per tick.
    fn expire(&mut self, k: usize, now: Instant) {
        let Some(slot) = self.slots.get(k).and_then(Option::as_ref) else {
            return;
        };
        if self.deadline(slot).is_none_or(|d| now < d) {
            return self.advance(k);
        }
        let Some(mut slot) = self.slots[k].take() else {
            return;
        };
        let e = io::Error::new(io::ErrorKind::TimedOut, "timed out");
        match &mut slot.stage {
            Stage::Data { conn, out } => {
                conn.on_error(&e);
                // What is queued will not go out either.
                out.clear();
                self.slots[k] = Some(slot);
                self.advance(k);
            }
            Stage::Connecting => {
                let why = format!("connect to {}: {e}", slot.rec.remote);
                self.close(k, slot, Ended::Failed(why));
            }
            _ => self.close(k, slot, Ended::Failed(format!("data hello: {e}"))),
        }
    }

    /// Samples the TCP_INFO (RTT and window, and the retransmissions
    /// since a socket's last sample) of connections that moved since their
    /// last sample, at most a row's share of
    /// [`crate::stats::TCP_INFO_PER_SEC`], oldest first (one not sampled
    /// in a row waits for a later one; its retransmissions count then or
    /// when it ends); and the tracked connections' bytes so far. An idle
    /// connection is not read at all.
    fn sample(&mut self, every: Duration) {
        let secs = self.sh.elapsed();
        for &k in &self.tracked {
            let Some(slot) = self.slots.get_mut(k).and_then(Option::as_mut) else {
                continue;
            };
            if let Stage::Data { conn, .. } | Stage::Hello { conn, .. } = &slot.stage {
                let (sent, received) = conn.progress();
                let now = Progress {
                    secs,
                    sent,
                    received,
                };
                push_progress(&mut slot.rec.progress, now);
            }
        }
        let left = crate::stats::samples_per_row(every);
        let moved = std::mem::take(&mut self.moved);
        let mut taken = 0;
        for (i, &k) in moved.iter().enumerate() {
            if taken == left {
                // The rest wait for the next row, first in line.
                self.moved.extend(moved[i..].iter().copied().filter(|&k| {
                    self.slots
                        .get(k)
                        .is_some_and(|s| s.as_ref().is_some_and(|s| s.listed))
                }));
                break;
            }
            let Some(slot) = self.slots.get_mut(k).and_then(Option::as_mut) else {
                continue;
            };
            if !slot.listed {
                continue;
            }
            slot.listed = false;
            if matches!(slot.stage, Stage::Connecting) {
                continue;
            }
            taken += 1;
            if let Some(i) = crate::net::tcpinfo::raw(std::os::fd::AsRawFd::as_raw_fd(&slot.stream))
            {
                self.sh.counters.sample(i.tcpi_rtt, i.tcpi_snd_cwnd);
                let more = i.tcpi_total_retrans.saturating_sub(slot.retrans_counted);
                self.sh
                    .counters
                    .retransmits
                    .fetch_add(u64::from(more), Relaxed);
                slot.retrans_counted = i.tcpi_total_retrans;
            }
        }
    }

    /// The run was stopped: every connection ends now, cancelled.
    fn cancel_all(&mut self) {
        for k in 0..self.slots.len() {
            let Some(mut slot) = self.slots[k].take() else {
                continue;
            };
            if let Stage::Data { conn, out } = &mut slot.stage {
                conn.cancel();
                out.clear();
                self.slots[k] = Some(slot);
                self.advance(k);
            } else {
                self.close(k, slot, Ended::Failed("stopped".into()));
            }
        }
    }

    /// The event loop failed: every connection ends with `why`.
    fn fail_all(&mut self, why: &str) {
        for k in 0..self.slots.len() {
            if let Some(s) = self.slots[k].take() {
                self.close(k, s, Ended::Failed(why.to_string()));
            }
        }
    }
}
