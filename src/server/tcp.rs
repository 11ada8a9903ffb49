//! The server's side of a TCP test: the session a control connection
//! sets up, and the data connections that attach to it.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Instant;
use uuid::Uuid;

use super::{State, reply_error};
use crate::outcome::ResultKind;
use crate::plan::Role;
use crate::proto::{DataHello, ErrorCode, Message, SessionSummary, TcpSpec, write_message};
use crate::stats::Counters;
use crate::tcp::config::MAX_BUFFER;
use crate::tcp::conn::{Transfer, cancel_if_stopped, exchange_finals};

pub(super) struct Session {
    pub(super) peer: SocketAddr,
    pub(super) spec: TcpSpec,
    /// Bytes promised to data connections so far (transfer each).
    pub(super) reserved: AtomicU64,
    pub(super) counters: Counters,
    pub(super) cancelled: AtomicBool,
    pub(super) live: Mutex<HashMap<Uuid, TcpStream>>,
    pub(super) started: Instant,
}

impl Session {
    pub(super) fn new(peer: SocketAddr, spec: TcpSpec) -> Session {
        Session {
            peer,
            spec,
            reserved: AtomicU64::new(0),
            counters: Counters::default(),
            cancelled: AtomicBool::new(false),
            live: Mutex::new(HashMap::new()),
            started: Instant::now(),
        }
    }

    pub(super) fn cancel(&self) {
        self.cancelled.store(true, SeqCst);
        for (_, s) in self.live.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Ends the session at once: data connections are reset, not wound
    /// down, so a client blocked in a write learns of it immediately.
    pub(super) fn abort(&self) {
        self.cancelled.store(true, SeqCst);
        for (_, s) in self.live.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            crate::net::reset(&s);
        }
    }

    pub(super) fn summary(&self) -> SessionSummary {
        let s = self.counters.snapshot();
        SessionSummary {
            connections: s.completed + s.net_errors + s.data_errors + s.cancelled,
            success: s.completed,
            network_errors: s.net_errors,
            data_errors: s.data_errors,
            cancelled: s.cancelled,
            bytes_sent: s.sent,
            bytes_received: s.received,
            requests: 0,
        }
    }
}

pub(super) fn validate(t: &TcpSpec) -> Result<TcpSpec, String> {
    if t.transfer == 0 {
        return Err("transfer must be greater than zero".into());
    }
    if t.pattern == crate::proto::IoPattern::Pushpull && (t.push_bytes == 0 || t.pull_bytes == 0) {
        return Err("pushpull needs non-zero push and pull bytes".into());
    }
    if let Some(b) = t.burst {
        if !matches!(
            t.pattern,
            crate::proto::IoPattern::Push | crate::proto::IoPattern::Pull
        ) {
            return Err("bursts need pattern push or pull".into());
        }
        if b.size == 0 || b.period_ms == 0 {
            return Err("burst size and period must be positive".into());
        }
    }
    Ok(t.clone())
}

pub(super) fn data(st: &State, stream: &TcpStream, peer: SocketAddr, hello: DataHello) {
    let sess = st
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&hello.session)
        .cloned();
    let Some(sess) = sess else {
        return reply_error(
            stream,
            ErrorCode::UnknownSession,
            format!("unknown session {}", hello.session),
        );
    };
    if hello.buffer == 0 || u64::from(hello.buffer) > MAX_BUFFER {
        return reply_error(
            stream,
            ErrorCode::Refused,
            format!("buffer size {} outside 1..={MAX_BUFFER}", hello.buffer),
        );
    }
    let promised = sess
        .reserved
        .fetch_add(sess.spec.transfer, SeqCst)
        .saturating_add(sess.spec.transfer);
    if promised > st.cfg.limits.max_bytes {
        return reply_error(
            stream,
            ErrorCode::Refused,
            format!(
                "server limit: max bytes per test {} reached",
                st.cfg.limits.max_bytes
            ),
        );
    }
    if let Some(n) = st.cfg.exit_after
        && st.admitted.fetch_add(1, SeqCst) >= n
    {
        return reply_error(
            stream,
            ErrorCode::Refused,
            format!("server exit limit of {n} connections reached"),
        );
    }
    // Counted before the ack so a Goodbye waits for this connection's result.
    sess.counters.in_flight.fetch_add(1, SeqCst);
    {
        let mut live = sess.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(c) = stream.try_clone() {
            live.insert(hello.connection, c);
        }
    }
    let idle = Some(st.cfg.idle_timeout);
    let _ = stream.set_read_timeout(idle);
    let _ = stream.set_write_timeout(idle);
    let mut s = stream;
    let kind = if sess.cancelled.load(SeqCst) {
        reply_error(stream, ErrorCode::Refused, "session stopped".into());
        ResultKind::Cancelled
    } else if write_message(
        &mut s,
        &Message::DataAck {
            connection: hello.connection,
        },
    )
    .is_err()
    {
        ResultKind::NetworkError
    } else {
        let (mut mine, bursts) = Transfer {
            stream,
            connection: hello.connection,
            role: Role::Server,
            buffer: hello.buffer as usize,
            spec: &sess.spec,
            counters: &sess.counters,
        }
        .run_with_bursts();
        cancel_if_stopped(&mut mine, sess.cancelled.load(SeqCst));
        let (mine, result) = exchange_finals(stream, mine);
        if sess.spec.burst.is_some()
            && matches!(result.kind, ResultKind::Success | ResultKind::DataError)
        {
            // Our account of each burst, for the client to print (it only reads).
            let mut s = stream;
            let mut chunks = bursts.chunks(100).peekable();
            if chunks.peek().is_none() {
                let _ = write_message(
                    &mut s,
                    &Message::TcpBursts {
                        bursts: Vec::new(),
                        last: true,
                    },
                );
            }
            while let Some(c) = chunks.next() {
                let last = chunks.peek().is_none();
                if write_message(
                    &mut s,
                    &Message::TcpBursts {
                        bursts: c.to_vec(),
                        last,
                    },
                )
                .is_err()
                {
                    break;
                }
            }
        }
        let show = match result.kind {
            ResultKind::Success | ResultKind::Cancelled => st.cfg.verbosity >= 3,
            _ => st.cfg.verbosity >= 2,
        };
        if show {
            crate::out!(
                "{} {peer} sent {} received {} {} {}",
                hello.connection,
                mine.sent,
                mine.received,
                result.kind,
                result.detail
            );
        }
        result.kind
    };
    sess.live
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&hello.connection);
    sess.counters.record(kind);
    sess.counters.in_flight.fetch_sub(1, SeqCst);
    st.finished.fetch_add(1, Relaxed);
}
