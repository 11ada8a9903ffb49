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
use mio::{Registry, Token};
use uuid::Uuid;

use super::State;
use super::control::TestSlots;
use super::limits::GRACE;
use super::loop_turn::{BUDGET, Budget, Cpu, Part, Session};
use super::metrics::{Kind, Moved};
use crate::net::out::Out;
use crate::net::realtime_ns;
use crate::protocol::auth::DatagramKey;
use crate::protocol::proto::UdpSpec;
use crate::protocol::refusal::Refusal;
use crate::protocol::udp::intake::{Action, Arrived, Intake, Terms};
use crate::udp::receive::{BATCH, CMSG_SPACE, Received, Slots, recv_batch};

/// Control frames queued, while the stream runs, to a client that does
/// not read them at all (its intervals and bursts pile up), past which it
/// is taken as gone: a thousand intervals or more. The totals, which may
/// be larger (a wide histogram), are queued once and not held to it.
const OUT_MAX: usize = 1 << 20;

/// One receiving UDP stream on a loop.
pub(super) type UdpRecv<'a> = Session<'a, Receives>;

/// What a receiving stream keeps of its own: its socket and where the
/// proven client sends from.
pub(super) struct Receives {
    sock: UdpSocket,
    /// The kernel hands over coalesced buffers (`UDP_GRO`, unless the
    /// client said `--no-offload`): read into 64 KiB slots and split.
    gro: bool,
    /// Where the proven client sends from (the socket is connected there).
    from: Option<SocketAddr>,
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
        let mut gro = false;
        let prepared = |sock: &std::net::UdpSocket| {
            crate::udp::receive::enable_rx_timestamps(sock);
            crate::udp::receive::enable_rx_tos(sock);
            gro = !spec.sock.no_offload && crate::udp::receive::enable_gro(sock);
        };
        let (sock, port) =
            super::loop_session::join(stream, &spec.sock, prepared, registry, token)?;
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
        let part = Receives {
            sock: UdpSocket::from_std(sock),
            gro,
            from: None,
        };
        Ok(Session::new(
            st,
            (Kind::Udp, id, peer),
            slots,
            Intake::new(terms, cfg, stats, now),
            part,
            now,
            format_args!("{}", crate::udp::serve::label(spec)),
        ))
    }
}

impl Part for Receives {
    type M = Intake;

    fn sock(&self) -> socket2::SockRef<'_> {
        socket2::SockRef::from(&self.sock)
    }

    fn connected(&mut self, to: SocketAddr) {
        self.from = Some(to);
    }

    fn act(&mut self, a: Action, _: &mut Intake, cpu: &mut Cpu, out: &mut Out) {
        match a {
            Action::Started => cpu.start(),
            Action::Summary(sum) => cpu.summary(*sum, out),
            _ => {}
        }
    }

    fn swamped(&self, m: &Intake, pending: usize) -> bool {
        m.is_running() && pending > OUT_MAX
    }

    fn datagrams(&mut self, m: &mut Intake, buf: &mut [u8], _: Instant, b: &mut Budget) -> bool {
        match b.datagrams < BUDGET && m.wants_datagrams() {
            true => self.read(m, buf, &mut b.datagrams),
            // Budget used: perhaps more waiting.
            false => b.datagrams >= BUDGET && m.wants_datagrams(),
        }
    }

    fn moved(&self, m: &Intake) -> Moved {
        let (received, data_errors) = m.received();
        Moved {
            received,
            data_errors,
            ..Moved::default()
        }
    }
}

impl Receives {
    /// Reads datagrams into the machine, counting them in `taken` up to
    /// [`BUDGET`]: true when the budget ran out with more perhaps waiting.
    fn read(&mut self, m: &mut Intake, buf: &mut [u8], taken: &mut usize) -> bool {
        if !m.is_running() {
            // The handshake: from anywhere, one at a time.
            while *taken < BUDGET && m.wants_datagrams() && !m.has_actions() {
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
                m.on_datagram(&buf[..n.min(m.slot())], from, at);
            }
            return *taken >= BUDGET;
        }
        let size = m.slot();
        let mut control = [[0u8; CMSG_SPACE]; BATCH];
        // One datagram a slot, or with GRO a coalesced buffer of up to
        // 64 KiB a slot (the loop's 256 KiB buffer holds four), split into
        // its datagrams before the machine counts them.
        let mut lens: Vec<Received> = Vec::with_capacity(BATCH);
        while *taken < BUDGET && m.is_running() {
            // No more than the budget left, in the loop's buffer.
            let (room, slots) = if self.gro {
                (buf.len(), Slots::COALESCED)
            } else {
                (
                    ((BUDGET - *taken) * size).min(buf.len()),
                    Slots::for_datagrams(size),
                )
            };
            let (came, asked) =
                match recv_batch(&self.sock, &mut buf[..room], slots, &mut control, &mut lens) {
                    Ok(r) => r,
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
                };
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
                m.on_datagram(&buf[off..off + len], peer, at);
            }
            if came < asked {
                // The socket had no more: the next datagram brings a new
                // edge, so no read is spent to hear it would block.
                return false;
            }
        }
        *taken >= BUDGET
    }
}
