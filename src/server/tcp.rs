//! The server's side of a TCP test: the session a control connection
//! sets up, and the data connections that attach to it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Instant;

use super::{Limits, State};
use crate::guard::SendGuard;

/// Largest buffer the server uses for one data connection's reads and writes.
pub const SERVER_BUFFER: usize = 256 << 10;
/// Smallest: writes below it are gathered into one of this size anyway
/// ([`crate::tcp::drive::GATHER`]), and a client asking for one-byte calls
/// made the server step its machine once per byte (a full core for
/// 19 MB/s, issue 27).
pub const SERVER_MIN_BUFFER: usize = crate::tcp::drive::GATHER;
/// Most bursts one connection may ask for.
pub const MAX_BURSTS: u64 = 10_000;
/// Most burst records a session's live connections may hold (a few hundred
/// bytes each).
pub const MAX_SESSION_BURSTS: u64 = 100_000;
use crate::protocol::outcome::ResultKind;
use crate::protocol::plan::Role;
use crate::protocol::proto::{DataHello, Message, SessionSummary, TcpBurst, TcpSpec};
use crate::protocol::refusal::{AuthFailure, Drawn, Invalid, Limit, Refusal};
use crate::protocol::stats::Counters;
use crate::protocol::tcp::machine::Conn;
use crate::tcp::config::MAX_BUFFER;

/// A session's claimed connection numbers and their share of the memory
/// account.
#[derive(Default)]
struct Claimed {
    ids: std::collections::HashSet<u128>,
    charge: Option<super::account::Charge>,
}

pub(super) struct Session {
    pub(super) peer: SocketAddr,
    pub(super) spec: TcpSpec,
    /// Bytes promised to data connections so far (transfer each).
    pub(super) reserved: AtomicU64,
    /// Burst records held by this session's live data connections.
    burst_records: AtomicU64,
    /// Every connection number a data hello has claimed: each is admitted
    /// once, so a replayed hello cannot read another connection's stream.
    /// The set lives as long as the session, so it is charged to the
    /// memory account in blocks as it grows.
    used: std::sync::Mutex<Claimed>,
    pub(super) counters: Counters,
    /// What the server may still send, and the session's stop flag.
    pub(super) guard: SendGuard,
    /// Bound to the control connection's authentication (if any).
    pub(super) data_key: Option<crate::protocol::auth::DatagramKey>,
    /// Set with the stop flag when the session ends at once: its data
    /// connections are reset, not wound down.
    aborted: AtomicBool,
    pub(super) started: Instant,
    /// When the session's first data connection came: a time-bounded
    /// test's data phase began then (the client's, about then too).
    data_start: std::sync::OnceLock<Instant>,
    /// `--get-server-output`: this end's own status rows, and when its
    /// connections' TCP_INFO is read for them.
    log: Option<
        std::sync::Mutex<(
            crate::protocol::stats::IntervalLog,
            crate::protocol::stats::SampleBudget,
        )>,
    >,
    /// What the kernel granted the first data connection, for the summary.
    pub(super) granted: std::sync::OnceLock<crate::protocol::sockopts::Granted>,
    /// The process's CPU clocks when the session began: the summary
    /// reports the CPU used since.
    cpu_start: crate::protocol::cpu::CpuSample,
}

impl Session {
    pub(super) fn new(
        peer: SocketAddr,
        spec: TcpSpec,
        limits: &Limits,
        data_key: Option<crate::protocol::auth::DatagramKey>,
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
            reserved: AtomicU64::new(0),
            burst_records: AtomicU64::new(0),
            used: Default::default(),
            counters: Counters::default(),
            aborted: AtomicBool::new(false),
            started: Instant::now(),
            data_start: std::sync::OnceLock::new(),
            granted: std::sync::OnceLock::new(),
            cpu_start: crate::net::cpu::sample(),
            log: (spec.server_interval_ms > 0).then(|| {
                let every = std::time::Duration::from_millis(spec.server_interval_ms);
                let now = Instant::now();
                std::sync::Mutex::new((
                    crate::protocol::stats::IntervalLog::new(
                        every,
                        now,
                        crate::protocol::proto::MAX_SERVER_ROWS,
                    ),
                    crate::protocol::stats::SampleBudget::new(every, now),
                ))
            }),
            spec,
        }
    }

    /// Takes a status row if one is due (each event loop holding the
    /// session's data connections calls it every tick, whatever their
    /// number).
    pub(super) fn rows(&self, now: Instant) {
        let Some(l) = &self.log else {
            return;
        };
        let mut l = l.lock().unwrap_or_else(|e| e.into_inner());
        let (log, budget) = &mut *l;
        if log.due(now) {
            log.take(now, self.counters.snapshot());
            budget.row_taken(now);
        }
    }

    /// A data connection of the session moved at `now`: its TCP_INFO, so
    /// the rows carry this end's RTT and window, is read only from the
    /// middle of a row and for at most a row's share of
    /// [`crate::protocol::stats::TCP_INFO_PER_SEC`] connections: a session without
    /// rows reads none, one with many connections no more than a few, and
    /// an idle connection (which does not move) none.
    pub(super) fn sample(&self, now: Instant, fd: std::os::fd::RawFd) {
        let Some(l) = &self.log else {
            return;
        };
        let sample = {
            let mut l = l.lock().unwrap_or_else(|e| e.into_inner());
            l.1.take(now)
        };
        if sample && let Some(i) = crate::net::tcpinfo::raw(fd) {
            self.counters.sample(i.tcpi_rtt, i.tcpi_snd_cwnd);
        }
    }

    /// Claims connection number `id` for a data connection: false when a
    /// data hello has claimed it before; the memory limit when the set
    /// would grow past `memory`'s `max`.
    pub(super) fn claim(
        &self,
        id: uuid::Uuid,
        memory: &super::account::Account,
        max: u64,
    ) -> Result<bool, Limit> {
        use super::account::{CLAIM_BLOCK, CLAIMED_ID_BYTES};
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        // One look-up for the number, not one to ask and one to add (the
        // set holds every number of the session, and a look-up is a keyed
        // hash and, in a large set, a cache miss); a number that starts a
        // block the account refuses is taken out again.
        if !used.ids.insert(id.as_u128()) {
            return Ok(false);
        }
        if (used.ids.len() as u64 - 1).is_multiple_of(CLAIM_BLOCK) {
            match memory.take(CLAIM_BLOCK * CLAIMED_ID_BYTES, max, Drawn::Connection) {
                Ok(more) => match &mut used.charge {
                    Some(c) => c.absorb(more),
                    None => used.charge = Some(more),
                },
                Err(why) => {
                    used.ids.remove(&id.as_u128());
                    return Err(why);
                }
            }
        }
        Ok(true)
    }

    /// The last row, then every row, in frames for the client.
    pub(super) fn rows_frames(&self) -> Vec<Message> {
        let Some(l) = &self.log else {
            return Vec::new();
        };
        let mut l = l.lock().unwrap_or_else(|e| e.into_inner());
        let (log, _) = &mut *l;
        log.take(Instant::now(), self.counters.snapshot());
        let (rows, truncated) = log.finish();
        let n = rows
            .len()
            .div_ceil(crate::protocol::proto::SERVER_ROWS_CHUNK)
            .max(1);
        let mut chunks = rows.chunks(crate::protocol::proto::SERVER_ROWS_CHUNK);
        (0..n)
            .map(|_| Message::ServerIntervals {
                rows: chunks.next().unwrap_or_default().to_vec(),
                truncated,
            })
            .collect()
    }

    pub(super) fn cancelled(&self) -> bool {
        self.guard.stop_flag().load(SeqCst)
    }

    /// Stops the session: its data connections end as cancelled (the
    /// event loops look every 20 ms).
    pub(super) fn cancel(&self) {
        self.guard.stop_flag().store(true, SeqCst);
    }

    /// Ends the session at once: data connections are reset, not wound
    /// down, so a client blocked in a write learns of it immediately.
    pub(super) fn abort(&self) {
        self.aborted.store(true, SeqCst);
        self.cancel();
    }

    pub(super) fn aborted(&self) -> bool {
        self.aborted.load(SeqCst)
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
            granted: self.granted.get().cloned(),
            cpu: Some(crate::protocol::cpu::CpuUsage::between(
                &self.cpu_start,
                &crate::net::cpu::sample(),
            )),
            ..Default::default()
        }
    }
}

pub(super) fn validate(t: &TcpSpec, limits: &Limits) -> Result<TcpSpec, Refusal> {
    t.check().map_err(Invalid::from)?;
    if t.server_interval_ms > 0
        && t.server_interval_ms < crate::protocol::proto::MIN_SERVER_INTERVAL_MS
    {
        return Err(Invalid::ServerInterval {
            ms: t.server_interval_ms,
            min_ms: crate::protocol::proto::MIN_SERVER_INTERVAL_MS,
        }
        .into());
    }
    if let Some(name) = &t.sock.congestion
        && crate::net::sockopt::check_congestion(name).is_err()
    {
        return Err(Refusal::Congestion {
            name: name.clone(),
            available: crate::net::sockopt::available_congestion(),
        });
    }
    if let Some(b) = t.burst {
        // Each burst costs a record on both ends, and the whole train must
        // fit the longest test this server runs.
        let bursts = t.transfer_hi().div_ceil(b.size);
        if bursts > MAX_BURSTS {
            return Err(Invalid::TooManyBursts {
                bursts,
                max: MAX_BURSTS,
            }
            .into());
        }
        let train_ms = (bursts - 1).saturating_mul(b.period_ms);
        if train_ms > limits.max_duration.as_millis() as u64 {
            return Err(Limit::BurstTrain {
                max: limits.max_duration,
                bursts,
                period_ms: b.period_ms,
            }
            .into());
        }
    }
    Ok(t.clone())
}

/// A data connection the server accepted: its session, and the burst
/// records it holds in the session's count (give them back with
/// [`Admitted::release`]).
pub(super) struct Admitted {
    pub(super) sess: Arc<Session>,
    bursts: u64,
    /// The connection's and its records' share of the memory account,
    /// held as long as the connection (and its queued records) is.
    _memory: super::account::Charge,
}

impl Admitted {
    /// Gives back the connection's burst records.
    pub(super) fn release(&self) {
        self.sess.burst_records.fetch_sub(self.bursts, SeqCst);
    }
}

/// Checks a data connection's hello against its session and the server's
/// limits, and counts it in; or says why not, as the error to send.
pub(super) fn admit(st: &State, peer: SocketAddr, hello: &DataHello) -> Result<Admitted, Refusal> {
    let sess = st
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&hello.session)
        .cloned();
    let Some(sess) = sess else {
        return Err(Refusal::UnknownSession(hello.session));
    };
    st.cfg.limits.check_memory(st.resident.load(SeqCst))?;
    // The session ID travels only over the control connection, but a data
    // connection must also come from the same host and, with a key, prove
    // it knows the session's key.
    if peer.ip().to_canonical() != sess.peer.ip().to_canonical() {
        return Err(Refusal::ForeignHost {
            from: peer.ip(),
            session: hello.session,
            owner: sess.peer.ip(),
        });
    }
    if let Some(k) = &sess.data_key {
        let proven = hello.proof.as_deref().is_some_and(|p| {
            crate::protocol::auth::verify_data_proof(k, &hello.session, &hello.connection, p)
        });
        if !proven {
            return Err(AuthFailure::DataProof.into());
        }
    }
    // Behind the proof: with a key, a forged hello cannot use up a number
    // the client will send.
    if !sess.claim(hello.connection, &st.memory, st.cfg.limits.max_memory)? {
        return Err(Refusal::ConnectionReused {
            session: hello.session,
            connection: hello.connection,
        });
    }
    if hello.buffer == 0 || u64::from(hello.buffer) > MAX_BUFFER {
        return Err(Invalid::Buffer {
            size: hello.buffer,
            max: MAX_BUFFER,
        }
        .into());
    }
    let transfer = sess.spec.transfer_of(hello.connection);
    let promised = sess
        .reserved
        .fetch_add(transfer, SeqCst)
        .saturating_add(transfer);
    if promised > st.cfg.limits.max_bytes {
        return Err(Limit::BytesReached {
            max: st.cfg.limits.max_bytes,
        }
        .into());
    }
    let bursts = sess
        .spec
        .burst
        .map_or(0, |b| transfer.div_ceil(b.size.max(1)));
    let memory = st.memory.take(
        super::account::DATA_CONN_BYTES.saturating_add(super::account::burst_bytes(bursts)),
        st.cfg.limits.max_memory,
        Drawn::Connection,
    )?;
    let admitted = Admitted {
        bursts,
        sess: Arc::clone(&sess),
        _memory: memory,
    };
    if sess.burst_records.fetch_add(bursts, SeqCst) + bursts > MAX_SESSION_BURSTS {
        admitted.release();
        return Err(Limit::BurstRecords {
            max: MAX_SESSION_BURSTS,
            connections: sess.burst_records.load(SeqCst) / bursts.max(1) + 1,
            bursts,
        }
        .into());
    }
    if let Some(n) = st.cfg.exit_after
        && st.admitted.fetch_add(1, SeqCst) >= n
    {
        admitted.release();
        return Err(Refusal::ExitAfter(n));
    }
    if sess.cancelled() || sess.guard.halted().is_some() {
        admitted.release();
        return Err(Refusal::Stopped);
    }
    // Counted before the ack so a Goodbye waits for this connection's result.
    sess.counters.in_flight.fetch_add(1, SeqCst);
    Ok(admitted)
}

/// A data connection ended with `kind`: counted, and its records given back.
pub(super) fn finished(st: &State, a: &Admitted, kind: ResultKind) {
    a.release();
    kind.count_in(&a.sess.counters);
    a.sess.counters.in_flight.fetch_sub(1, SeqCst);
    st.finished.fetch_add(1, Relaxed);
}

/// The server's half of one TCP data connection: this end's machine.
pub(super) fn machine(a: &Admitted, hello: &DataHello) -> Conn {
    // The server's buffer only sets its call sizes; capping it bounds a
    // session's memory whatever the client asked for, and the floor the
    // work per byte.
    let buffer = (hello.buffer as usize).clamp(SERVER_MIN_BUFFER, SERVER_BUFFER);
    let now = Instant::now();
    let mut conn = Conn::new(&a.sess.spec, hello.connection, Role::Server, buffer, now);
    conn.set_compact(hello.compact);
    let bound = a.sess.spec.time_bound_ms;
    if bound > 0 {
        // What this end sends ends the test's time after its data phase began.
        // (A bound past what the clock can hold is none.)
        let start = *a.sess.data_start.get_or_init(|| now);
        if let Some(at) = start.checked_add(std::time::Duration::from_millis(bound)) {
            conn.set_deadline(at);
        }
    }
    conn
}

/// The acknowledgement of an admitted data hello: in the fixed layout
/// when the client asked for it ([`crate::protocol::proto::compact`]).
pub(super) fn ack(hello: &DataHello) -> Vec<u8> {
    crate::protocol::proto::compact::encode_for(
        &Message::DataAck {
            connection: hello.connection,
        },
        hello.compact,
    )
}

/// The frames that carry this end's account of each burst to the client,
/// after an agreed result (it only reads them).
pub(super) fn burst_frames(spec: &TcpSpec, kind: ResultKind, bursts: &[TcpBurst]) -> Vec<u8> {
    if spec.burst.is_none() || !matches!(kind, ResultKind::Success | ResultKind::DataError) {
        return Vec::new();
    }
    crate::protocol::proto::in_frames(bursts, 100, |bursts, last| Message::TcpBursts {
        bursts,
        last,
    })
    .iter()
    .flat_map(crate::protocol::proto::encode)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::proto::{BurstSpec, IoPattern};
    use std::time::Duration;

    fn bursty(transfer: u64, size: u64, period_ms: u64) -> TcpSpec {
        TcpSpec {
            burst: Some(BurstSpec { size, period_ms }),
            ..TcpSpec::plain(IoPattern::Pull, transfer, 0, 0)
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
        assert!(
            matches!(
                why,
                Refusal::Invalid(Invalid::TooManyBursts { bursts: 10_001, .. })
            ),
            "{why}"
        );
        // 11 bursts 1 s apart: the last starts at 10 s, within the limit.
        assert!(validate(&bursty(11, 1, 1000), &l).is_ok());
        let why = validate(&bursty(11, 1, 1001), &l).unwrap_err();
        assert!(
            matches!(
                why,
                Refusal::Limit(Limit::BurstTrain {
                    bursts: 11,
                    period_ms: 1001,
                    ..
                })
            ),
            "{why}"
        );
        // One burst never waits, whatever its period.
        assert!(validate(&bursty(5, 5, u64::MAX), &l).is_ok());
        assert!(validate(&bursty(6, 5, u64::MAX), &l).is_err());
        assert!(validate(&bursty(10, 0, 1), &l).is_err());
        assert!(validate(&bursty(10, 1, 0), &l).is_err());
    }

    #[test]
    fn a_server_interval_below_the_floor_is_refused_by_name() {
        let l = Limits::default();
        let every = |ms| TcpSpec {
            server_interval_ms: ms,
            ..TcpSpec::plain(IoPattern::Push, 1000, 0, 0)
        };
        assert!(validate(&every(0), &l).is_ok());
        assert!(validate(&every(100), &l).is_ok());
        let why = validate(&every(99), &l).unwrap_err();
        assert_eq!(why.code(), crate::protocol::proto::ErrorCode::Invalid);
        assert!(
            matches!(
                why,
                Refusal::Invalid(Invalid::ServerInterval {
                    ms: 99,
                    min_ms: 100
                })
            ),
            "{why}"
        );
        assert!(validate(&every(1), &l).is_err());
    }

    #[test]
    fn a_connection_number_is_claimed_once() {
        let s = Session::new(
            "127.0.0.1:1".parse().unwrap(),
            TcpSpec::plain(IoPattern::Push, 1000, 0, 0),
            &Limits::default(),
            None,
        );
        let (a, b) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
        let m = super::super::account::Account::default();
        let claim = |id| s.claim(id, &m, u64::MAX).unwrap();
        assert!(claim(a));
        assert!(claim(b));
        assert!(!claim(a));
        assert!(!claim(b));
    }

    /// The claimed numbers draw from the memory account a block at a time,
    /// are refused past its limit, and are given back with the session.
    #[test]
    fn claimed_numbers_are_charged_in_blocks_and_bounded_by_the_account() {
        use super::super::account::{Account, CLAIM_BLOCK, CLAIMED_ID_BYTES};
        let block = CLAIM_BLOCK * CLAIMED_ID_BYTES;
        let m = Account::default();
        let s = Session::new(
            "127.0.0.1:1".parse().unwrap(),
            TcpSpec::plain(IoPattern::Push, 1000, 0, 0),
            &Limits::default(),
            None,
        );
        let id = |n: u64| uuid::Uuid::from_u128(n.into());
        // Room for two blocks.
        let max = 2 * block;
        assert_eq!(s.claim(id(0), &m, max), Ok(true));
        assert_eq!(m.held(), block);
        for n in 1..CLAIM_BLOCK {
            assert_eq!(s.claim(id(n), &m, max), Ok(true));
        }
        assert_eq!(m.held(), block, "one draw for the block");
        // A number claimed before costs nothing more.
        assert_eq!(s.claim(id(7), &m, max), Ok(false));
        assert_eq!(s.claim(id(CLAIM_BLOCK), &m, max), Ok(true));
        assert_eq!(m.held(), 2 * block);
        for n in CLAIM_BLOCK + 1..2 * CLAIM_BLOCK {
            assert_eq!(s.claim(id(n), &m, max), Ok(true));
        }
        // The third block is past the limit: refused, nothing drawn, the
        // number not taken.
        let past = s.claim(id(2 * CLAIM_BLOCK), &m, max);
        assert!(matches!(past, Err(Limit::MemoryBudget { .. })), "{past:?}");
        assert_eq!(m.held(), 2 * block);
        assert_eq!(s.claim(id(2 * CLAIM_BLOCK), &m, 3 * block), Ok(true));
        drop(s);
        assert_eq!(m.held(), 0, "given back with the session");
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
