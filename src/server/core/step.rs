//! A connection's stages, stepped until it blocks, ends or moves on: its
//! first frame (a hello, a data hello, or an iperf3 cookie), a data
//! connection's machine run to its agreed result and burst account, a
//! control conversation's turns, and a refusal written, then lingered on.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;

use super::{LINGER_CHECK, Loop, Next, REFUSAL_LINGER, REFUSAL_READ, Slot2, Stage, refuse};
use crate::net::out::Out;
use crate::net::sockopt::apply;
use crate::protocol::outcome::ResultKind;
use crate::protocol::proto::{DataHello, MAX_FIRST_PAYLOAD, Message, ReadError};
use crate::protocol::refusal::{Drawn, Limit, Refusal};
use crate::server::account::CONTROL_BYTES;
use crate::server::control::{Control, Turn};
use crate::server::limits::take_slot;
use crate::server::tcp::{ack, admit, burst_frames, machine};
use crate::tcp::drive::{Env, Fin, Ran, Socket, run_until_blocked};

impl<'a> Loop<'a> {
    /// A connection whose first bytes may be an iperf3 cookie
    /// (`--iperf3-detect`): reads the rest of the cookie, as netrig's first
    /// frame is read, within the setup deadline and in the queue of
    /// unnamed connections. A client says nothing past its cookie until
    /// asked (`iperf_connect`, `iperf_tcp_connect`), so more is refused.
    fn iperf3_first(&mut self, slot: &mut Slot2<'a>) -> Next {
        use crate::protocol::iperf3::{COOKIE_LEN, Cookie};
        let stream = &slot.stream;
        while slot.ahead.bytes().len() < COOKIE_LEN {
            match slot.ahead.fill(&mut self.buf, |b| (&*stream).read(b)) {
                Ok(0) => return Next::Close,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::Keep,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        let b = slot.ahead.bytes();
        let why = match Cookie::parse(&b[..COOKIE_LEN]) {
            Ok(c) if b.len() == COOKIE_LEN => return Next::Iperf3(c),
            Ok(_) => "bytes from an iperf3 client past its cookie, before the server asked".into(),
            Err(e) => e.to_string(),
        };
        let code = crate::protocol::proto::ErrorCode::Malformed;
        crate::server::iperf3::refuse_line(self.st, slot.peer, code, &why);
        Next::Close
    }

    /// Moves `slot` until it blocks, ends, or turns out to be a control
    /// connection.
    pub(super) fn step(&mut self, slot: &mut Slot2<'a>, k: usize) -> Next {
        let st = self.st;
        loop {
            match &mut slot.stage {
                Stage::First { .. } => {
                    if st.cfg.iperf3_detect
                        && crate::protocol::iperf3::Cookie::may_start(slot.ahead.bytes())
                    {
                        return self.iperf3_first(slot);
                    }
                    let stream = &slot.stream;
                    let ahead = &mut slot.ahead;
                    let hello =
                        match ahead
                            .read_frame_within(&mut self.buf, MAX_FIRST_PAYLOAD, |b| stream.recv(b))
                        {
                            Ok(None) => return Next::Keep,
                            Ok(Some(m)) => m,
                            // Not netrig's magic: iperf3's cookie, maybe.
                            Err(ReadError::Proto(_))
                                if st.cfg.iperf3_detect
                                    && crate::protocol::iperf3::Cookie::may_start(
                                        slot.ahead.bytes(),
                                    ) =>
                            {
                                continue;
                            }
                            Err(ReadError::Proto(e)) => {
                                slot.stage = refuse(st, slot.peer, &e.into());
                                continue;
                            }
                            Err(e) => {
                                if st.cfg.verbosity >= 2 {
                                    eprintln!("{}: no hello: {e}", slot.peer);
                                }
                                return Next::Close;
                            }
                        };
                    slot.last_progress = Instant::now();
                    // Accepted here: one that will last goes on on the least
                    // busy loop, which reads this frame again.
                    if slot.may_move
                        && let Some(to) = self.moves_to(&hello)
                    {
                        slot.ahead.unread(&crate::protocol::proto::encode(&hello));
                        return Next::Move(to);
                    }
                    // Said who it is: from here on it counts in
                    // `--max-conns`, which refused and silent connections
                    // never take.
                    if matches!(hello, Message::Hello(_) | Message::DataHello(_)) {
                        let max = st.cfg.limits.max_conns;
                        match take_slot(&st.open, u64::from(max)) {
                            Some(open) => slot.open = Some(open),
                            None => {
                                let why = Limit::OpenConnections { max };
                                slot.stage = refuse(st, slot.peer, &why.into());
                                continue;
                            }
                        }
                    }
                    // A control connection may now read frames of 64 KiB
                    // and have answers queued: drawn from the account (a
                    // data connection draws when its test admits it).
                    if matches!(hello, Message::Hello(_)) {
                        let max = st.cfg.limits.max_memory;
                        match st.memory.take(CONTROL_BYTES, max, Drawn::Connection) {
                            Ok(charge) => slot.memory = Some(charge),
                            Err(why) => {
                                slot.open = None;
                                slot.stage = refuse(st, slot.peer, &why.into());
                                continue;
                            }
                        }
                    }
                    match hello {
                        Message::Hello(h) => {
                            let setup = match slot.stage {
                                Stage::First { setup, .. } => setup,
                                _ => Instant::now(),
                            };
                            let _ = crate::net::keepalive(&slot.stream);
                            let c = Control::new(st, slot.peer, &h, setup);
                            slot.stage = Stage::Control(Box::new(c));
                        }
                        Message::DataHello(h) => {
                            slot.stage = self.data(slot.peer, &h);
                            if let Stage::Data { a, .. } = &slot.stage {
                                // A TCP connection (data connections are):
                                // a hello read short took all there was, so
                                // the machine does not read again before the
                                // socket's next readiness.
                                slot.ahead.took_all();
                                self.joined(&a.sess, k);
                                // The client's window, congestion control,
                                // marking and pacing, on this end too.
                                let v6 = slot.peer.is_ipv6();
                                let _ = apply(&slot.stream, &a.sess.spec.sock, v6, true);
                                a.sess.granted.get_or_init(|| {
                                    crate::net::sockopt::granted(&slot.stream, v6, true)
                                });
                            }
                        }
                        m => {
                            slot.stage = refuse(
                                st,
                                slot.peer,
                                &Refusal::Unexpected {
                                    got: m.type_name(),
                                    context: "where a hello or data hello belongs",
                                },
                            )
                        }
                    }
                }
                Stage::Refuse(out) => {
                    match out.flush(&slot.stream) {
                        Ok(true) => {}
                        Ok(false) => return Next::Keep,
                        Err(_) => return Next::Close,
                    }
                    // A client sends its first data right behind its hello,
                    // and closing with unread bytes resets the connection,
                    // which can destroy the refusal before it arrives: close
                    // this side, and linger briefly (not until the idle
                    // timeout, which let a sender of garbage be read from
                    // for 30 s).
                    let _ = slot.stream.shutdown(std::net::Shutdown::Write);
                    slot.stage = Stage::Linger {
                        until: Instant::now() + REFUSAL_LINGER,
                        read: 0,
                    };
                }
                Stage::Linger { until, read } => {
                    while *read < REFUSAL_READ {
                        let room = self.buf.len().min((REFUSAL_READ - *read) as usize);
                        match (&slot.stream).read(&mut self.buf[..room]) {
                            Ok(0) => return Next::Close,
                            Ok(n) => *read += n as u64,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => return Next::Close,
                        }
                    }
                    let now = Instant::now();
                    if now >= *until || (*read >= REFUSAL_READ && all_acked(&slot.stream)) {
                        return Next::Close;
                    }
                    // Reading wakes it while it reads, and its deadline's
                    // timer ends it at `until`; once reading is done, a
                    // timer looks for the acknowledgement.
                    if *read >= REFUSAL_READ {
                        self.core.arm(k, (now + LINGER_CHECK).min(*until));
                    }
                    return Next::Keep;
                }
                Stage::Data { a, conn, out } => {
                    // The ack waits in `out` for the first write, which
                    // carries the first answer too (drive::pump reads first).
                    // One clock read for the check and the first step.
                    let now = Instant::now();
                    if let Some(h) = a.sess.guard.halted_at(now) {
                        conn.abort(crate::tcp::drive::halt_verdict(h));
                    }
                    let sess = Arc::clone(&a.sess);
                    let stopped = || sess.cancelled();
                    let env = Env {
                        counters: &a.sess.counters,
                        guard: Some(&a.sess.guard),
                        stopped: &stopped,
                        may_read: true,
                        // A burst account follows the report otherwise.
                        fin: match a.sess.spec.burst {
                            None => Fin::WithReport,
                            Some(_) => Fin::OnClose,
                        },
                        now: Some(now),
                    };
                    let before = slot.last_progress;
                    let last = &mut slot.last_progress;
                    let ran = run_until_blocked(
                        conn,
                        out,
                        &mut slot.ahead,
                        &slot.stream,
                        &mut self.buf,
                        &env,
                        last,
                    );
                    // TCP_INFO for the session's status rows, from a
                    // connection that is moving: an idle one is not read.
                    if !matches!(ran, Ran::Blocked { .. }) || *last > before {
                        a.sess.sample(*last, slot.stream.as_raw_fd());
                    }
                    match ran {
                        Ran::Settled => {}
                        Ran::Blocked { timer } => {
                            if let Some(at) = timer {
                                self.core.arm(k, at.min(a.sess.guard.deadline()));
                            }
                            return Next::Keep;
                        }
                        Ran::Yielded => {
                            self.again(k);
                            return Next::Keep;
                        }
                    }
                    let Stage::Data { a, conn, .. } =
                        std::mem::replace(&mut slot.stage, Stage::Refuse(Out::new(Vec::new())))
                    else {
                        return Next::Close;
                    };
                    let (result, mine, bursts) = conn.into_result();
                    let show = match result.kind {
                        ResultKind::Success | ResultKind::Cancelled => st.cfg.verbosity >= 3,
                        _ => st.cfg.verbosity >= 2,
                    };
                    if show {
                        crate::out!(
                            "{} sent {} received {} {} {}",
                            slot.peer,
                            mine.sent,
                            mine.received,
                            result.kind,
                            result.detail
                        );
                    }
                    let out = Out::new(burst_frames(&a.sess.spec, result.kind, &bursts));
                    slot.stage = Stage::Tail {
                        a,
                        out,
                        kind: result.kind,
                    };
                }
                Stage::Tail { out, .. } => return keep_if_blocked(out.flush(&slot.stream)),
                Stage::Control(c) => {
                    let now = Instant::now();
                    match c.turn(&slot.stream, &mut slot.ahead, &mut self.buf, now) {
                        Turn::Wait(at) => {
                            if let Some(at) = at {
                                self.core.arm(k, at);
                            }
                            return Next::Keep;
                        }
                        // Dropping the conversation ends its session.
                        Turn::Last(out) => slot.stage = Stage::Refuse(out),
                        Turn::Gone => return Next::Close,
                        Turn::Run(job) => self.start_session(slot, k, *job, now),
                    }
                }
                Stage::UdpRecv(_)
                | Stage::UdpSend(_)
                | Stage::RrTcp(_)
                | Stage::RrUdp(_)
                | Stage::RrSctp(_)
                | Stage::Iperf2(_) => {
                    if let Some(next) = self.session_turn(slot, k) {
                        return next;
                    }
                }
            }
        }
    }

    /// The stage after a data hello: admitted (the ack is queued) or refused.
    fn data(&self, peer: SocketAddr, h: &DataHello) -> Stage<'a> {
        match admit(self.st, peer, h) {
            Err(why) => refuse(self.st, peer, &why),
            Ok(a) => {
                let conn = Box::new(machine(&a, h));
                let out = Out::new(ack(h));
                Stage::Data { a, conn, out }
            }
        }
    }
}

/// Whether the peer has acknowledged everything this end wrote (the
/// refusal, and the FIN behind it), so a reset on closing cannot destroy
/// it. A socket that cannot tell (SCTP) counts as acknowledged.
fn all_acked(s: &TcpStream) -> bool {
    let mut queued: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int: bytes written and not
    // yet acknowledged.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    r != 0 || queued == 0
}

/// Keep a connection whose output is still going out; close it once all
/// is out or the write failed.
fn keep_if_blocked(r: io::Result<bool>) -> Next {
    match r {
        Ok(false) => Next::Keep,
        _ => Next::Close,
    }
}
