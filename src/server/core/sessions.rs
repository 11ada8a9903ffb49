//! The sessions a loop runs on a control connection's slot once their test
//! is admitted — rr/ping over UDP, rr over TCP (and SCTP one-to-one) and
//! over SCTP one-to-many, UDP streams the server receives or sends: how
//! each starts from its admitted job, and what a turn of it means for the
//! slot. No test leaves the loops for a thread of its own.

use std::time::Instant;

use super::{Loop, Next, Slot2, Stage, UDP, refuse};
use crate::net::out::Out;
use crate::server::control::{Job, Test};
use crate::server::loop_turn::Turn;
use crate::server::rr_sctp::RrSctp;
use crate::server::rr_tcp::RrTcp;
use crate::server::rr_udp::RrUdp;
use crate::server::udp_recv::UdpRecv;
use crate::server::udp_send::UdpSend;

impl<'a> Loop<'a> {
    /// Starts on slot `k` the loop-side session its admitted `job` names
    /// (or the refusal it ends with).
    pub(super) fn start_session(
        &mut self,
        slot: &mut Slot2<'a>,
        k: usize,
        job: Job<'a>,
        now: Instant,
    ) {
        let st = self.st;
        match job {
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
                test: Test::RrSctp(spec),
                slots,
            } => {
                let token = self.core.token(k, UDP);
                let reg = self.core.poll.registry();
                let peer = slot.peer;
                let s = RrSctp::start(st, peer, &slot.stream, &spec, slots, reg, token, now);
                slot.stage = match s {
                    Ok(s) => Stage::RrSctp(Box::new(s)),
                    Err(why) => refuse(st, peer, &why),
                };
            }
        }
    }

    /// A loop-side session's turn on slot `k`: what the loop does next, or
    /// None when the session left its last frames in the slot to write.
    pub(super) fn session_turn(&mut self, slot: &mut Slot2<'a>, k: usize) -> Option<Next> {
        // The loop's wake-up time: a turn that reads the clock anew for
        // what it times (a stream's arrivals, a sender's pace) does so.
        let (stream, ahead, buf, now) = (
            &slot.stream,
            &mut slot.ahead,
            &mut self.buf,
            self.core.woke(),
        );
        // Dropping a session gives its slots back.
        let t = match &mut slot.stage {
            Stage::UdpRecv(s) => s.turn(stream, ahead, buf, now),
            Stage::UdpSend(s) => s.turn(stream, ahead, buf, now),
            Stage::RrTcp(s) => s.turn(stream, ahead, buf, now),
            Stage::RrUdp(s) => s.turn(stream, ahead, buf, now),
            Stage::RrSctp(s) => s.turn(stream, ahead, buf, now),
            Stage::Iperf2(s) => s.turn(stream, buf, now),
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
    pub(super) fn settle(&mut self, t: Turn, k: usize) -> Result<Next, Out> {
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
}
