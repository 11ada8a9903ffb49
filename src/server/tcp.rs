//! The server's side of a TCP test: the session a control connection
//! sets up, and the data connections that attach to it.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use uuid::Uuid;

use super::{Limits, State, reply_error};
use crate::guard::SendGuard;

/// Largest buffer the server uses for one data connection's reads and writes.
pub const SERVER_BUFFER: usize = 256 << 10;
/// Most bursts one connection may ask for.
pub const MAX_BURSTS: u64 = 10_000;
/// Most burst records a session's live connections may hold (a few hundred
/// bytes each).
pub const MAX_SESSION_BURSTS: u64 = 100_000;
use crate::outcome::ResultKind;
use crate::plan::Role;
use crate::proto::{DataHello, ErrorCode, Message, SessionSummary, TcpSpec, write_message};
use crate::stats::Counters;
use crate::tcp::config::MAX_BUFFER;
use crate::tcp::drive::{Env, drive};
use crate::tcp::machine::Conn;

pub(super) struct Session {
    pub(super) peer: SocketAddr,
    pub(super) spec: TcpSpec,
    /// Bytes promised to data connections so far (transfer each).
    pub(super) reserved: AtomicU64,
    /// Burst records held by this session's live data connections.
    burst_records: AtomicU64,
    pub(super) counters: Counters,
    /// What the server may still send, and the session's stop flag.
    pub(super) guard: SendGuard,
    /// Bound to the control connection's authentication (if any).
    pub(super) data_key: Option<crate::auth::DatagramKey>,
    pub(super) live: Mutex<HashMap<Uuid, TcpStream>>,
    pub(super) started: Instant,
}

impl Session {
    pub(super) fn new(
        peer: SocketAddr,
        spec: TcpSpec,
        limits: &Limits,
        data_key: Option<crate::auth::DatagramKey>,
    ) -> Session {
        Session {
            guard: SendGuard::new(
                limits.max_rate_bps,
                limits.max_bytes,
                limits.deadline(),
                Arc::new(AtomicBool::new(false)),
            ),
            data_key,
            peer,
            spec,
            reserved: AtomicU64::new(0),
            burst_records: AtomicU64::new(0),
            counters: Counters::default(),
            live: Mutex::new(HashMap::new()),
            started: Instant::now(),
        }
    }

    pub(super) fn cancelled(&self) -> bool {
        self.guard.stop_flag().load(SeqCst)
    }

    pub(super) fn cancel(&self) {
        self.guard.stop_flag().store(true, SeqCst);
        for (_, s) in self.live.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Ends the session at once: data connections are reset, not wound
    /// down, so a client blocked in a write learns of it immediately.
    pub(super) fn abort(&self) {
        self.guard.stop_flag().store(true, SeqCst);
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

pub(super) fn validate(t: &TcpSpec, limits: &Limits) -> Result<TcpSpec, String> {
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
        // Each burst costs a record on both ends, and the whole train must
        // fit the longest test this server runs.
        let bursts = t.transfer.div_ceil(b.size);
        if bursts > MAX_BURSTS {
            return Err(format!(
                "{bursts} bursts per connection (transfer / burst size); at most {MAX_BURSTS}"
            ));
        }
        let train_ms = (bursts - 1).saturating_mul(b.period_ms);
        if train_ms > limits.max_duration.as_millis() as u64 {
            return Err(format!(
                "server limit: max duration {} s (a train of {bursts} bursts every {} ms lasts {} s)",
                limits.max_duration.as_secs_f64(),
                b.period_ms,
                train_ms as f64 / 1e3
            ));
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
    // The session ID travels only over the control connection, but a data
    // connection must also come from the same host and, with a key, prove
    // it knows the session's key.
    if peer.ip().to_canonical() != sess.peer.ip().to_canonical() {
        return reply_error(
            stream,
            ErrorCode::Refused,
            format!(
                "data connection from {} but session {} belongs to {}",
                peer.ip(),
                hello.session,
                sess.peer.ip()
            ),
        );
    }
    if let Some(k) = &sess.data_key {
        let proven = hello.proof.as_deref().is_some_and(|p| {
            crate::auth::verify_data_proof(k, &hello.session, &hello.connection, p)
        });
        if !proven {
            return reply_error(
                stream,
                ErrorCode::Refused,
                "authentication failed: data connection without a valid proof".to_string(),
            );
        }
    }
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
    let bursts = sess
        .spec
        .burst
        .map_or(0, |b| sess.spec.transfer.div_ceil(b.size.max(1)));
    let _records = super::limits::Slot::hold(&sess.burst_records, bursts);
    if sess.burst_records.load(SeqCst) > MAX_SESSION_BURSTS {
        return reply_error(
            stream,
            ErrorCode::Refused,
            format!(
                "server limit: {MAX_SESSION_BURSTS} burst records per session ({} connections of {bursts} bursts)",
                sess.burst_records.load(SeqCst) / bursts.max(1)
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
    let kind = if sess.cancelled() || sess.guard.halted().is_some() {
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
        // The server's buffer only sets its call sizes; capping it bounds
        // a session's memory whatever the client asked for.
        let buffer = (hello.buffer as usize).min(SERVER_BUFFER);
        let mut conn = Conn::new(
            &sess.spec,
            hello.connection,
            Role::Server,
            buffer,
            Instant::now(),
        );
        let stopped = || sess.cancelled();
        drive(
            &mut conn,
            stream,
            &Env {
                counters: &sess.counters,
                guard: Some(&sess.guard),
                idle: Some(st.cfg.idle_timeout),
                stopped: &stopped,
                buffer,
            },
        );
        let (result, mine, bursts) = conn.into_result();
        if sess.spec.burst.is_some()
            && matches!(result.kind, ResultKind::Success | ResultKind::DataError)
        {
            // Our account of each burst, for the client to print (it only reads),
            // in frames that fit.
            let _ = stream.set_nonblocking(false);
            let mut s = stream;
            let frames = crate::proto::in_frames(&bursts, 100, |bursts, last| Message::TcpBursts {
                bursts,
                last,
            });
            for m in frames {
                if write_message(&mut s, &m).is_err() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{BurstSpec, IoPattern, VerifyLevel};
    use std::time::Duration;

    fn bursty(transfer: u64, size: u64, period_ms: u64) -> TcpSpec {
        TcpSpec {
            pattern: IoPattern::Pull,
            transfer,
            push_bytes: 0,
            pull_bytes: 0,
            verify: VerifyLevel::Data,
            connections: 1,
            burst: Some(BurstSpec { size, period_ms }),
        }
    }

    #[test]
    fn burst_counts_and_trains_are_bounded_at_their_edges() {
        let l = Limits {
            max_duration: Duration::from_secs(10),
            ..Limits::default()
        };
        assert!(validate(&bursty(MAX_BURSTS, 1, 1), &l).is_ok());
        let why = validate(&bursty(MAX_BURSTS + 1, 1, 1), &l).unwrap_err();
        assert!(why.contains("10001 bursts"), "{why}");
        // 11 bursts 1 s apart: the last starts at 10 s, within the limit.
        assert!(validate(&bursty(11, 1, 1000), &l).is_ok());
        let why = validate(&bursty(11, 1, 1001), &l).unwrap_err();
        assert!(why.contains("max duration"), "{why}");
        // One burst never waits, whatever its period.
        assert!(validate(&bursty(5, 5, u64::MAX), &l).is_ok());
        assert!(validate(&bursty(6, 5, u64::MAX), &l).is_err());
        assert!(validate(&bursty(10, 0, 1), &l).is_err());
        assert!(validate(&bursty(10, 1, 0), &l).is_err());
    }

    #[test]
    fn pushpull_needs_both_amounts() {
        let l = Limits::default();
        let pp = |push_bytes, pull_bytes| TcpSpec {
            pattern: IoPattern::Pushpull,
            push_bytes,
            pull_bytes,
            burst: None,
            ..bursty(1 << 20, 1, 1)
        };
        assert!(validate(&pp(1000, 1000), &l).is_ok());
        assert!(validate(&pp(0, 1000), &l).is_err());
        assert!(validate(&pp(1000, 0), &l).is_err());
        // Other patterns ignore the amounts.
        let push = TcpSpec {
            pattern: IoPattern::Push,
            burst: None,
            ..pp(0, 0)
        };
        assert!(validate(&push, &l).is_ok());
    }
}
