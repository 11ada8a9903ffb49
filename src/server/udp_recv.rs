//! A UDP stream the client sends, on the server's event loops: an admitted
//! session's socket joins the loop that holds its control connection, and
//! the [`Intake`] machine is fed from both there, so a receiving stream
//! (each of a `-P` group too) costs two descriptors and its accounts, never
//! a thread. Datagrams are read with `recvmmsg`, each with the kernel's
//! receive time, at most [`BUDGET`] a wake-up, and as many control frames,
//! before the loop's other connections get their turn; the interval ends,
//! the drain and the session's deadlines are its control connection's one
//! timer. The session holds its test slots for as long as it lives.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use mio::net::{TcpStream, UdpSocket};
use mio::{Interest, Registry, Token};
use uuid::Uuid;

use super::control::TestSlots;
use super::limits::GRACE;
use super::loop_session::Who;
use super::metrics::{Kind, Moved};
use super::rr_udp::Turn;
use super::{State, log_refusal};
use crate::auth::DatagramKey;
use crate::cpu::{CpuSample, CpuUsage};
use crate::net::ahead::ReadAhead;
use crate::net::out::Out;
use crate::net::realtime_ns;
use crate::proto::{Message, ReadError, UdpSpec, encode};
use crate::refusal::Refusal;
use crate::tcp::drive::Socket;
use crate::udp::intake::{Action, Arrived, Intake, Terms};
use crate::udp::receive::{BATCH, CMSG_SPACE, Received, Slots, recv_batch};

/// Most datagrams, and most control frames, one session takes per wake-up.
pub(super) const BUDGET: usize = 64;
/// Control frames queued to a client that does not read them, past which
/// its messages are not read either.
const OUT_HIGH: usize = 64 * 1024;
/// Control frames queued, while the stream runs, to a client that does
/// not read them at all (its intervals and bursts pile up), past which it
/// is taken as gone: a thousand intervals or more. The totals, which may
/// be larger (a wide histogram), are queued once and not held to it.
const OUT_MAX: usize = 1 << 20;

/// One receiving UDP stream on a loop.
pub(super) struct UdpRecv<'a> {
    st: &'a State,
    peer: SocketAddr,
    sock: UdpSocket,
    /// The kernel hands over coalesced buffers (`UDP_GRO`, unless the
    /// client said `--no-offload`): read into 64 KiB slots and split.
    gro: bool,
    m: Intake,
    out: Out,
    /// The process's CPU clocks when the stream started: the summary
    /// reports the CPU used from then to the goodbye.
    cpu_start: Option<CpuSample>,
    /// Where the proven client sends from (the socket is connected there).
    from: Option<SocketAddr>,
    /// The timer set for the session, so each turn does not add one more.
    armed: Option<Instant>,
    id: Uuid,
    /// When it was admitted, and how it ended (None: as asked).
    began: Instant,
    ended: Option<crate::proto::ErrorCode>,
    _slots: TestSlots<'a>,
}

impl<'a> UdpRecv<'a> {
    /// Opens the session's socket on the control connection's address,
    /// joins it to the loop as `token`, and queues the acceptance.
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
    ) -> Result<UdpRecv<'a>, Refusal> {
        let (sock, port) = super::loop_session::open(stream, &spec.sock)?;
        let udp = super::loop_session::unusable;
        crate::udp::receive::enable_rx_timestamps(&sock);
        crate::udp::receive::enable_rx_tos(&sock);
        let gro = !spec.sock.no_offload && crate::udp::receive::enable_gro(&sock);
        sock.set_nonblocking(true).map_err(udp)?;
        let mut sock = UdpSocket::from_std(sock);
        registry
            .register(&mut sock, token, Interest::READABLE)
            .map_err(udp)?;
        let limits = st.cfg.limits;
        let id = Uuid::new_v4();
        let terms = Terms {
            session: id,
            port,
            token: rand::random(),
            nonce: rand::random(),
            setup: limits.setup,
            deadline: limits.deadline(),
            max_duration: limits.deadline().saturating_sub(GRACE),
            drain: crate::udp::serve::drain_for(spec),
        };
        let cfg = crate::udp::serve::receiver_config(spec, 0, key);
        let stats = crate::udp::serve::receiver_stats(spec);
        super::loop_session::started(
            st,
            Who {
                kind: Kind::Udp,
                id,
                peer,
            },
            format_args!("{}", crate::udp::serve::label(spec)),
        );
        Ok(UdpRecv {
            st,
            peer,
            sock,
            gro,
            m: Intake::new(terms, cfg, stats, now),
            out: Out::new(Vec::new()),
            cpu_start: None,
            from: None,
            armed: None,
            id,
            began: now,
            ended: None,
            _slots: slots,
        })
    }

    /// Does what the machine asks, writes what is queued, and feeds it the
    /// control connection's frames and the socket's datagrams, within the
    /// budget, until both would block or the session ends.
    pub(super) fn turn(
        &mut self,
        stream: &TcpStream,
        ahead: &mut ReadAhead,
        buf: &mut [u8],
        now: Instant,
    ) -> Turn {
        let mut frames = 0;
        let mut datagrams = 0;
        // Whether the control connection had no more frames this turn.
        let mut ctl_blocked = false;
        loop {
            while let Some(a) = self.m.poll_action() {
                match a {
                    Action::Send(m) => self.out.push(&encode(&m)),
                    // Failing, the probes fail too; the client says its
                    // probe never arrived.
                    Action::Connect(to) => {
                        let _ = self.sock.connect(to);
                        self.from = Some(to);
                    }
                    Action::Datagram(d) => {
                        let _ = self.sock.send(&d);
                    }
                    Action::Started => self.cpu_start = Some(crate::net::cpu::sample()),
                    Action::Summary(mut sum) => {
                        let end = crate::net::cpu::sample();
                        sum.cpu = self.cpu_start.as_ref().map(|a| CpuUsage::between(a, &end));
                        self.out.push(&encode(&Message::Summary(*sum)));
                    }
                    Action::Refuse(why) => {
                        self.ended = Some(why.code());
                        log_refusal(self.st, self.peer, &why);
                        self.out.push(&encode(&why.message()));
                        return Turn::Last(self.take_out());
                    }
                    Action::Close => return Turn::Last(self.take_out()),
                }
            }
            if self.out.flush(stream).is_err()
                || (self.m.is_running() && self.out.pending() > OUT_MAX)
            {
                return Turn::Gone;
            }
            if self.m.deadline().is_some_and(|d| now >= d) {
                self.m.on_timeout(now);
                continue;
            }
            if self.out.pending() >= OUT_HIGH {
                // Its messages wait for it to read its answers.
                ctl_blocked = true;
            }
            if frames < BUDGET && !ctl_blocked {
                let max = crate::proto::MAX_PAYLOAD;
                let read = ahead.read_frame_within(buf, max, |b| stream.recv(b));
                frames += 1;
                match read {
                    Ok(None) => {
                        frames = BUDGET;
                        ctl_blocked = true;
                    }
                    Ok(Some(m)) => self.m.on_message(m, now, realtime_ns()),
                    Err(ReadError::Proto(e)) => self.m.on_malformed(e),
                    Err(_) => self.m.on_closed(),
                }
                continue;
            }
            let more = match datagrams < BUDGET && self.m.wants_datagrams() {
                true => self.datagrams(buf, &mut datagrams),
                // Budget used: perhaps more waiting.
                false => datagrams >= BUDGET && self.m.wants_datagrams(),
            };
            // Intervals, bursts and probes to send.
            if self.m.has_actions() {
                continue;
            }
            if more || !ctl_blocked {
                return Turn::Again;
            }
            return self.wait();
        }
    }

    /// Reads datagrams into the machine, counting them in `taken` up to
    /// [`BUDGET`]: true when the budget ran out with more perhaps waiting.
    fn datagrams(&mut self, buf: &mut [u8], taken: &mut usize) -> bool {
        if !self.m.is_running() {
            // The handshake: from anywhere, one at a time.
            while *taken < BUDGET && self.m.wants_datagrams() && !self.m.has_actions() {
                let (n, from) = match self.sock.recv_from(buf) {
                    Ok(r) => r,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                    Err(_) => {
                        *taken += 1;
                        continue;
                    }
                };
                *taken += 1;
                let now = Instant::now();
                let real = realtime_ns();
                let at = Arrived {
                    now,
                    batch_ns: real,
                    recv_ns: real,
                    tos: None,
                };
                self.m.on_datagram(&buf[..n.min(self.m.slot())], from, at);
            }
            return *taken >= BUDGET;
        }
        let size = self.m.slot();
        let mut control = [[0u8; CMSG_SPACE]; BATCH];
        // One datagram a slot, or with GRO a coalesced buffer of up to
        // 64 KiB a slot (the loop's 256 KiB buffer holds four), split into
        // its datagrams before the machine counts them.
        let mut lens: Vec<Received> = Vec::with_capacity(BATCH);
        while *taken < BUDGET && self.m.is_running() {
            // No more than the budget left, in the loop's buffer.
            let (room, slots) = if self.gro {
                (buf.len(), Slots::COALESCED)
            } else {
                (
                    ((BUDGET - *taken) * size).min(buf.len()),
                    Slots::for_datagrams(size),
                )
            };
            match recv_batch(&self.sock, &mut buf[..room], slots, &mut control, &mut lens) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                // ICMP errors (the client's port closed) and signals: the
                // next datagram may still come.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::Interrupted
                    ) =>
                {
                    *taken += 1;
                    continue;
                }
                Err(_) => return false,
            }
            if lens.is_empty() {
                return false;
            }
            *taken += lens.len();
            let now = Instant::now();
            let batch_ns = realtime_ns();
            let Some(peer) = self.from else {
                return false;
            };
            for &Received { at: off, len, anc } in &lens {
                let at = Arrived {
                    now,
                    batch_ns,
                    recv_ns: anc.stamp.unwrap_or(batch_ns),
                    tos: anc.tos,
                };
                self.m.on_datagram(&buf[off..off + len], peer, at);
            }
        }
        *taken >= BUDGET
    }

    fn wait(&mut self) -> Turn {
        match self.m.deadline() {
            Some(at) if self.armed != Some(at) => {
                self.armed = Some(at);
                Turn::Wait(Some(at))
            }
            _ => Turn::Wait(None),
        }
    }

    fn take_out(&mut self) -> Out {
        std::mem::replace(&mut self.out, Out::new(Vec::new()))
    }
}

impl Drop for UdpRecv<'_> {
    fn drop(&mut self) {
        let took = self.began.elapsed();
        let (received, data_errors) = self.m.received();
        super::loop_session::ended(
            self.st,
            Who {
                kind: Kind::Udp,
                id: self.id,
                peer: self.peer,
            },
            took,
            self.ended,
            Moved {
                received,
                data_errors,
                ..Moved::default()
            },
            format_args!(""),
        );
    }
}
