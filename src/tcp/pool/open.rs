//! Starting connections: a loop opens new ones while it holds fewer than
//! its quota, within `--throttle` (and each server's share of it), the
//! run's count and an `--open-cap`,
//! each with its record, its `--cport` lease and its first step taken
//! before it joins the poll.

use mio::Interest;
use rand::RngExt;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

use super::ending::{Ended, failed};
use super::{Slot, Stage, Worker};
use crate::net::ahead::ReadAhead;
use crate::protocol::stats::Progress;
use crate::tcp::config::BufferSpec;
use crate::tcp::connect::{Local, connect};
use crate::tcp::session::{ConnectionRecord, NoServer, TRACKED};

impl Worker<'_> {
    /// Opens connections until this loop holds its quota (or the run has
    /// started all it will, or the connects in progress are at `--throttle`
    /// or, for every server with connections left, at its share of it).
    pub(super) fn start_more(&mut self) {
        while self.core.slots.live() < self.quota && !self.no_more && !self.stopping() {
            if self.sh.data_deadline().is_some_and(|d| Instant::now() >= d) {
                // A time-bounded run's connections end now; none starts.
                self.no_more = true;
                return;
            }
            let session = match self.sh.claim_session(self.sh.next.load(SeqCst)) {
                Ok(s) => s,
                Err(NoServer::Full) => return,
                Err(NoServer::Done) => {
                    self.no_more = true;
                    return;
                }
            };
            if !self.sh.throttle_try_acquire() {
                self.sh.setup_done(session);
                return;
            }
            let cap = match &self.sh.cfg.open_cap {
                None => u64::MAX,
                Some(cap) => cap.load(SeqCst),
            };
            let started = self
                .sh
                .next
                .fetch_update(SeqCst, SeqCst, |n| (n < cap).then_some(n + 1));
            let index = started.ok().and_then(|_| self.sh.claim_index(session));
            let Some(index) = index else {
                self.release(session);
                if started.is_ok() {
                    // The server opened its last connection meanwhile:
                    // another may have some left.
                    self.sh.next.fetch_sub(1, SeqCst);
                    continue;
                }
                // --open-cap: not yet; the loop looks again every tick.
                return;
            };
            self.open(index, session);
        }
    }

    fn open(&mut self, index: u64, session: usize) {
        debug_assert_eq!(self.sh.session_for(index), session);
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
        if self.sh.ports.is_some() || self.core.slots.live() + self.ending.len() > self.quota {
            self.finish_ending();
        }
        let lease = self.sh.ports.as_ref().and_then(|p| p.take());
        if self.sh.ports.is_some() && lease.is_none() {
            self.release(session);
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
                self.release(session);
                let span = self.span(started);
                return self.finish_record(rec, span, Ended::Failed(e.to_string()));
            }
        };
        let k = self.core.slots.vacant();
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
            polled: false,
            writable: false,
        });
        if !slot.rec.progress.is_empty() {
            self.tracked.push(k);
        }
        // Over loopback the handshake is often over when connect returns:
        // the hello goes out now rather than after a turn of the loop, and
        // before the socket joins the poll, so that registering it is not
        // between connecting and the request. What happens meanwhile shows
        // in the registration's first readiness report.
        // It is watched for room to write only if it has something left to
        // write (a crr request and its hello are out in the first write).
        let outcome = self.step(&mut slot, k);
        let outcome = outcome.and_then(|()| {
            slot.writable = slot.wants_write();
            let interest = match slot.writable {
                true => Interest::READABLE | Interest::WRITABLE,
                false => Interest::READABLE,
            };
            slot.polled = true;
            (self.core)
                .register(&mut slot.stream, k, 0, interest)
                .map_err(|e| Ended::Failed(e.to_string()))
        });
        self.put_back(k, slot, outcome);
    }

    /// Gives back a connection's `--throttle` place and its server's share
    /// of it.
    pub(super) fn release(&self, session: usize) {
        self.sh.setup_done(session);
        self.sh.throttle_release();
    }
}
