//! The sessions a loop runs on a control connection's slot once their test
//! is admitted — rr/ping over UDP, rr over TCP (and SCTP one-to-one), UDP
//! streams the server receives or sends: how each starts from its admitted
//! job, and what a turn of it means for the slot. A worker's job (rr over
//! SCTP one-to-many) is handed on.

use std::sync::Arc;
use std::time::Instant;

use super::{Loop, Next, Slot2, Stage, UDP, refuse};
use crate::net::out::Out;
use crate::server::control::{Job, Test, WorkerTest, run_job};
use crate::server::limits::Slot;
use crate::server::loop_turn::Turn;
use crate::server::rr_tcp::RrTcp;
use crate::server::rr_udp::RrUdp;
use crate::server::udp_recv::UdpRecv;
use crate::server::udp_send::UdpSend;

impl<'a> Loop<'a> {
    /// Starts on slot `k` the loop-side session its admitted `job` names;
    /// a worker's job is returned to be run (`Next::Run`).
    pub(super) fn start_session(
        &mut self,
        slot: &mut Slot2<'a>,
        k: usize,
        job: Job<'a, Test>,
        now: Instant,
    ) -> Option<Next<'a>> {
        let st = self.st;
        match job {
            // Answered here, on the loop, not by a worker.
            Job {
                test: Test::RrUdp(spec),
                slots,
            } => {
                let token = self.core.token(k, UDP);
                let reg = self.core.poll.registry();
                let peer = slot.peer;
                let s = RrUdp::start(st, peer, &slot.stream, &spec, slots, reg, token, now);
                slot.stage = match s {
                    Ok(s) => Stage::RrUdp(Box::new(s)),
                    Err(why) => refuse(st, peer, &why),
                };
            }
            Job {
                test: Test::RrTcp(spec),
                slots,
            } => {
                let peer = slot.peer;
                let s = RrTcp::start(st, peer, &slot.stream, &spec, slots, now);
                slot.stage = match s {
                    Ok(s) => Stage::RrTcp(Box::new(s)),
                    Err(why) => refuse(st, peer, &why),
                };
            }
            Job {
                test: Test::UdpRecv(spec, key),
                slots,
            } => {
                let token = self.core.token(k, UDP);
                let reg = self.core.poll.registry();
                let peer = slot.peer;
                let s =
                    UdpRecv::start(st, peer, &slot.stream, (&spec, key), slots, reg, token, now);
                slot.stage = match s {
                    Ok(s) => Stage::UdpRecv(Box::new(s)),
                    Err(why) => refuse(st, peer, &why),
                };
            }
            Job {
                test: Test::UdpSend(out, key),
                slots,
            } => {
                let token = self.core.token(k, UDP);
                let reg = self.core.poll.registry();
                let peer = slot.peer;
                let s = UdpSend::start(
                    st,
                    peer,
                    &slot.stream,
                    (out.spec(), key),
                    slots,
                    reg,
                    token,
                    now,
                );
                slot.stage = match s {
                    Ok(s) => Stage::UdpSend(Box::new(s)),
                    Err(why) => refuse(st, peer, &why),
                };
            }
            Job {
                test: Test::Worker(test),
                slots,
            } => return Some(Next::Run(Box::new(Job { test, slots }))),
        }
        None
    }

    /// A loop-side session's turn on slot `k`: what the loop does next, or
    /// None when the session left its last frames in the slot to write.
    pub(super) fn session_turn(&mut self, slot: &mut Slot2<'a>, k: usize) -> Option<Next<'a>> {
        let (stream, ahead, buf, now) =
            (&slot.stream, &mut slot.ahead, &mut self.buf, Instant::now());
        // Dropping a session gives its slots back.
        let t = match &mut slot.stage {
            Stage::UdpRecv(s) => s.turn(stream, ahead, buf, now),
            Stage::UdpSend(s) => s.turn(stream, ahead, buf, now),
            Stage::RrTcp(s) => s.turn(stream, ahead, buf, now),
            Stage::RrUdp(s) => s.turn(stream, ahead, buf, now),
            _ => return Some(Next::Keep),
        };
        match self.settle(t, k) {
            Ok(next) => Some(next),
            Err(out) => {
                slot.stage = Stage::Refuse(out);
                None
            }
        }
    }

    /// What a loop-side session's turn (rr or a received UDP stream) means
    /// for its slot `k`: kept (a timer set, or another turn after the
    /// others), closed, or (Err) its last frames to write.
    pub(super) fn settle(&mut self, t: Turn, k: usize) -> Result<Next<'static>, Out> {
        match t {
            Turn::Wait(at) => {
                if let Some(at) = at {
                    self.core.arm(k, at);
                }
                Ok(Next::Keep)
            }
            Turn::Again => {
                self.again(k);
                Ok(Next::Keep)
            }
            Turn::Last(out) => Err(out),
            Turn::Gone => Ok(Next::Close),
        }
    }

    /// An admitted UDP or request/response test goes to a worker thread of
    /// its own, with its test slots (which bound the workers) and its
    /// connection, counted in the open connections (and its client's) from
    /// then on.
    pub(super) fn spawn_worker(&mut self, slot: Slot2<'a>, job: Box<Job<'a, WorkerTest>>) {
        let Slot2 {
            stream,
            peer,
            open,
            _source,
            memory,
            ..
        } = slot;
        let stream = self.release(stream, true);
        let st = Arc::clone(&self.arc);
        let Job { test, slots } = *job;
        let ip = peer.ip().to_canonical();
        let held = slots.hand_over(ip);
        // A control connection was counted open when it said hello.
        std::mem::forget(open);
        let sourced = _source.is_some();
        std::mem::forget(_source);
        let r = std::thread::Builder::new()
            .name("serve-test".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let _open = Slot::adopt(&st.open);
                let _source = sourced.then(|| st.per_client.adopt(ip));
                let _slots = held.adopt(&st);
                let _memory = memory;
                run_job(&st, &stream, peer, test);
            });
        if let Err(e) = r {
            eprintln!("cannot start a thread for {peer}: {e}");
        }
    }
}
