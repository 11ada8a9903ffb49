//! A connection's stages, run until it blocks or ends: the handshake, the
//! data hello with the first data behind it and the server's
//! acknowledgement, the data phase's machine, then the server's account of
//! the bursts.

use mio::net::TcpStream;
use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Instant;

use super::ending::{Ended, failed};
use super::{BURSTS_WAIT, Slot, Stage, Worker};
use crate::net::ahead::ReadAhead;
use crate::net::out::Out;
use crate::net::tcpinfo::TcpInfo;
use crate::protocol::outcome::{ResultKind, after_stop};
use crate::protocol::plan::Role;
use crate::protocol::proto::{self, DataHello, Message};
use crate::protocol::sockopts::ShutdownMode;
use crate::protocol::tcp::machine::Conn;
use crate::tcp::drive::{Env, Fin, Ran, Socket, run_until_blocked};

impl Worker<'_> {
    /// Runs `slot` until it blocks (Ok) or ends with its result (Err).
    pub(super) fn step(&mut self, slot: &mut Slot, k: usize) -> Result<(), Ended> {
        loop {
            match &mut slot.stage {
                Stage::Connecting => {
                    // Without bursts or a rate the machine's clock does not
                    // depend on when the handshake ended: the hello and the
                    // first data are queued at once, and the first write
                    // that goes through says the connection is up (one on a
                    // socket still connecting would block; one whose
                    // connect failed says why), which saves asking the
                    // socket (getpeername) first. A schedule starts once
                    // the connection is up, and the run's first connection
                    // reports its socket as granted at setup (the MSS
                    // grows once data moves), so those ask first.
                    let scheduled = self.sh.spec.burst.is_some()
                        || self.sh.spec.rate.is_some()
                        || self.sh.granted.get().is_none();
                    if scheduled {
                        // A peer address means connected; only without one
                        // is the socket asked why.
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
                        self.came_up(slot, Instant::now());
                    }
                    let session = &self.sh.sessions[slot.session];
                    let id = slot.rec.connection_id;
                    let hello = Message::DataHello(DataHello {
                        session: session.id,
                        connection: id,
                        buffer: slot.rec.buffer,
                        proof: session
                            .data_key
                            .map(|key| crate::protocol::auth::data_proof(&key, &session.id, &id)),
                        // Its ack and the server's report in the fixed
                        // layout, where the server knows it.
                        compact: true,
                    });
                    // In the fixed layout too, where the server said it
                    // reads it (its answer to the control hello).
                    let hello = proto::compact::encode_for(&hello, session.compact_data_hello);
                    if crate::tcp::connect::needs_nodelay(&self.sh.spec, hello.len()) {
                        let _ = slot.stream.set_nodelay(true);
                    }
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
                        out: Out::new(hello),
                        conn: Box::new(conn),
                        up: scheduled,
                    };
                    slot.last_progress = Instant::now();
                }
                Stage::Hello { out, conn, up } => {
                    // The hello goes out with the first data behind it, in
                    // one write when the data is small.
                    let at = Instant::now();
                    let last = &mut slot.last_progress;
                    let ahead = &mut slot.ahead;
                    let sock = Watched::new(&slot.stream);
                    let ran = self.run_conn(conn, out, ahead, &sock, last, false);
                    if let Some(i) = sock.info.take() {
                        slot.rec.tcp_info = Some(i);
                    }
                    self.wait_for(ran, k);
                    let was_up = *up;
                    let wrote = sock.wrote.get();
                    *up |= wrote;
                    let failed = conn.is_done();
                    let detail = conn.result().map(|r| r.0.detail.clone());
                    if !was_up && wrote {
                        self.came_up(slot, at);
                    }
                    let stream = &slot.stream;
                    if failed {
                        let e = detail.unwrap_or_default();
                        if !was_up && !wrote {
                            // No write went through: the connect failed.
                            let addr = slot.rec.remote;
                            return Err(Ended::Failed(format!("connect to {addr}: {e}")));
                        }
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
                        return Err(Ended::Failed(format!("data hello: {e}")));
                    }
                    // Nothing can have come before the connection is up, and
                    // before the socket is in the poll its first report says
                    // whether anything did; after a read that would block,
                    // only readiness brings more.
                    if !was_up && !wrote || !slot.polled || !slot.ahead.may_read() {
                        return Ok(());
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
                    // The `--throttle` place is held until the server
                    // acknowledges the data hello, not only through the
                    // handshake: a client then opens connections as fast as
                    // the server admits them, and on a CPU-starved machine
                    // at most --throttle hellos wait for their answer per
                    // client instead of every connection it holds (500,000
                    // connections over 30 + 30 processes: the ones queued
                    // last outwaited the idle timeout).
                    self.release(slot.session);
                    slot.throttled = false;
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
                    let sock = Watched::new(&slot.stream);
                    let ran = self.run_conn(conn, out, ahead, &sock, last, true);
                    if let Some(i) = sock.info.take() {
                        slot.rec.tcp_info = Some(i);
                    }
                    if !self.wait_for(ran, k) {
                        return Ok(());
                    }
                    self.sh.counters.in_flight.fetch_sub(1, Relaxed);
                    let Stage::Data { conn, .. } = std::mem::replace(
                        &mut slot.stage,
                        // From the run's last step: no clock read for a
                        // connection that has no account to wait for.
                        Stage::Bursts {
                            until: slot.last_progress + BURSTS_WAIT,
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
                    self.core.arm(k, Instant::now() + BURSTS_WAIT);
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
        stream: &Watched,
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
            // account follows it; a rude close resets instead. A settled
            // connection's socket is closed before the loop next polls
            // (`ending.rs`): that close sends the held report and the FIN.
            fin: match (&self.sh.spec.burst, self.sh.cfg.sock.shutdown) {
                (None, ShutdownMode::Graceful) => Fin::WithLastReport,
                _ => Fin::OnClose,
            },
            now: None,
        };
        run_until_blocked(conn, out, ahead, stream, &mut self.buf, &env, last)
    }

    /// The handshake of `slot` was found over at `at`: its time, and what
    /// the kernel granted the run's first connection.
    fn came_up(&self, slot: &mut Slot, at: Instant) {
        slot.rec.connect_ms = at.duration_since(slot.started).as_secs_f64() * 1e3;
        self.sh.granted.get_or_init(|| {
            crate::net::sockopt::granted(&slot.stream, slot.rec.remote.is_ipv6(), true)
        });
    }

    /// Whether connection `k`'s run ended settled; a blocked one's timer
    /// is set, and one that had its turn runs again on the next.
    fn wait_for(&mut self, ran: Ran, k: usize) -> bool {
        match ran {
            Ran::Settled => true,
            Ran::Blocked { timer } => {
                if let Some(at) = timer {
                    self.core.arm(k, at);
                }
                false
            }
            Ran::Yielded => {
                self.core.again(k, 0);
                false
            }
        }
    }
}

/// A client connection's socket as [`run_until_blocked`] sees it: it notes
/// that a write went through (the handshake is over), and keeps the
/// TCP_INFO read for the final report as the connection's record's, so
/// that the record costs no second read.
pub(super) struct Watched<'a> {
    stream: &'a TcpStream,
    wrote: Cell<bool>,
    info: Cell<Option<TcpInfo>>,
}

impl<'a> Watched<'a> {
    fn new(stream: &'a TcpStream) -> Self {
        Watched {
            stream,
            wrote: Cell::new(false),
            info: Cell::new(None),
        }
    }

    fn note(&self, r: io::Result<usize>) -> io::Result<usize> {
        if matches!(r, Ok(n) if n > 0) {
            self.wrote.set(true);
        }
        r
    }
}

impl AsRawFd for Watched<'_> {
    fn as_raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}

impl Socket for Watched<'_> {
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.recv(buf)
    }

    fn send(&self, b: &[u8]) -> io::Result<usize> {
        self.note(self.stream.send(b))
    }

    fn send_more(&self, b: &[u8]) -> io::Result<usize> {
        self.note(self.stream.send_more(b))
    }

    fn close_write(&self) -> io::Result<()> {
        self.stream.close_write()
    }

    fn discard(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.discard(buf)
    }

    fn final_tcp_info(&self) -> Option<TcpInfo> {
        let i = crate::net::tcpinfo::read(self.stream);
        self.info.set(i);
        i
    }
}
