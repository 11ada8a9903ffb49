//! The data side of an iperf3 test: its streams as they arrive, and
//! reading, sending (paced, bounded per turn) and draining them on the
//! test's mio loop. The conversation that drives them is in `test.rs`.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};

use super::Arrival;
use crate::protocol::iperf3::udp::{self, Header};
use crate::protocol::iperf3::{Params, Proto, stream_id};

/// How long the receivers are drained after TEST_END: the control
/// connection is not ordered with the data ones, so the last bytes may
/// still be on their way. Ended by this much quiet.
const DRAIN_QUIET: Duration = Duration::from_millis(100);
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// A stream's socket.
pub(super) enum Io {
    Tcp(mio::net::TcpStream),
    Udp(mio::net::UdpSocket),
}

/// One of a test's streams and what it moved.
pub(super) struct Stream {
    pub(super) io: Io,
    pub(super) id: u32,
    pub(super) sends: bool,
    /// Bytes moved, and at the end of the omitted lead-in.
    pub(super) bytes: u64,
    pub(super) omit_bytes: u64,
    /// UDP datagrams sent.
    pub(super) sent_packets: u64,
    pub(super) omit_sent_packets: u64,
    pub(super) rx: udp::Receiver,
    pub(super) omit_rx: (u64, u64),
    pub(super) dead: bool,
}

/// Bytes received and sent over the streams, after the omitted lead-in.
pub(super) fn totals(streams: &[Stream]) -> (u64, u64) {
    let sum = |sends: bool| {
        streams
            .iter()
            .filter(|s| s.sends == sends)
            .map(|s| s.bytes - s.omit_bytes)
            .sum::<u64>()
    };
    (sum(false), sum(true))
}

/// Waits for the test's streams, as they announce themselves, until the
/// setup deadline.
pub(super) fn gather(
    poll: &Poll,
    p: &Params,
    rx: &Receiver<Arrival>,
    until: Instant,
    stop: &std::sync::atomic::AtomicBool,
) -> Option<Vec<Stream>> {
    let mut out = Vec::new();
    while out.len() < p.streams() as usize {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stop.load(SeqCst) {
            return None;
        }
        let a = match rx.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok(a) => a,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(_) => return None,
        };
        let index = out.len() as u32;
        let io = match (p.proto, a) {
            (Proto::Tcp, Arrival::Tcp(s)) => {
                let _ = s.set_nonblocking(true);
                window(&s, p.window);
                let r = socket2::SockRef::from(&s);
                if p.nodelay {
                    let _ = r.set_tcp_nodelay(true);
                }
                // As iperf3's server, an algorithm this kernel lacks is
                // not an error (`iperf_run_server`: ENOENT is a warning).
                if let Some(c) = &p.congestion {
                    let _ = r.set_tcp_congestion(c.as_bytes());
                }
                Io::Tcp(mio::net::TcpStream::from_std(s))
            }
            (Proto::Udp, Arrival::Udp(from, local)) => {
                let Ok(s) = super::bind_udp(local) else {
                    continue;
                };
                window(&s, p.window);
                if s.connect(from).is_err() || s.send(&udp::CONNECT_REPLY).is_err() {
                    continue;
                }
                Io::Udp(mio::net::UdpSocket::from_std(s))
            }
            _ => continue,
        };
        let mut s = Stream {
            io,
            id: stream_id(index),
            sends: p.server_sends(index),
            bytes: 0,
            omit_bytes: 0,
            sent_packets: 0,
            omit_sent_packets: 0,
            rx: udp::Receiver::default(),
            omit_rx: (0, 0),
            dead: false,
        };
        let t = Token(out.len() + 1);
        let interest = Interest::READABLE | Interest::WRITABLE;
        let r = match &mut s.io {
            Io::Tcp(x) => poll.registry().register(x, t, interest),
            Io::Udp(x) => poll.registry().register(x, t, interest),
        };
        r.ok()?;
        out.push(s);
    }
    Some(out)
}

/// `-w`: both buffers, as iperf3 sets them (`iperf_common_sockopts`).
fn window(s: &impl std::os::fd::AsFd, bytes: u32) {
    if bytes == 0 {
        return;
    }
    let s = socket2::SockRef::from(s);
    let _ = s.set_send_buffer_size(bytes as usize);
    let _ = s.set_recv_buffer_size(bytes as usize);
}

/// Reads what a receiving stream has, up to a bound a turn.
pub(super) fn receive(s: &mut Stream, buf: &mut [u8], wide: bool) -> bool {
    let mut moved = false;
    for _ in 0..64 {
        let r = match &mut s.io {
            Io::Tcp(t) => t.read(buf),
            Io::Udp(u) => u.recv(buf),
        };
        match r {
            Ok(0) if matches!(s.io, Io::Tcp(_)) => {
                s.dead = true;
                break;
            }
            Ok(n) => {
                moved = true;
                match &s.io {
                    Io::Tcp(_) => s.bytes += n as u64,
                    Io::Udp(_) => {
                        if let Some(h) = Header::read(wide, &buf[..n]) {
                            let now = crate::net::realtime_ns() as f64 / 1e9;
                            s.rx.on_datagram(n, h, now);
                            s.bytes = s.rx.bytes;
                        }
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => {
                s.dead = true;
                break;
            }
        }
    }
    moved
}

/// Sends on a stream what pacing (`allowed` bytes so far) and the test's
/// byte count (`limit`, over all streams, `total` so far) let it.
pub(super) fn send(
    s: &mut Stream,
    buf: &mut [u8],
    p: &Params,
    allowed: Option<u64>,
    limit: Option<u64>,
    total: &mut u64,
) {
    let len = p.len as usize;
    for _ in 0..64 {
        if allowed.is_some_and(|a| s.bytes + len as u64 > a.max(len as u64) && s.bytes > 0)
            || limit.is_some_and(|l| *total >= l)
        {
            return;
        }
        let r = match &mut s.io {
            Io::Tcp(t) => t.write(&buf[..len]),
            Io::Udp(u) => {
                let ns = crate::net::realtime_ns();
                Header {
                    sec: (ns / 1_000_000_000) as u32,
                    usec: ((ns % 1_000_000_000) / 1000) as u32,
                    count: s.sent_packets + 1,
                }
                .write(p.udp_counters_64bit, &mut buf[..len]);
                u.send(&buf[..len])
            }
        };
        match r {
            Ok(n) => {
                s.bytes += n as u64;
                *total += n as u64;
                if matches!(s.io, Io::Udp(_)) {
                    s.sent_packets += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            // A full UDP queue is not the end of the stream.
            Err(_) if matches!(s.io, Io::Udp(_)) => return,
            Err(_) => {
                s.dead = true;
                return;
            }
        }
    }
}

/// Reads the receivers until they have been quiet for [`DRAIN_QUIET`].
pub(super) fn drain(poll: &mut Poll, streams: &mut [Stream], buf: &mut [u8], wide: bool) {
    let until = Instant::now() + DRAIN_MAX;
    let mut quiet_since = Instant::now();
    let mut events = Events::with_capacity(64);
    while Instant::now() < until && quiet_since.elapsed() < DRAIN_QUIET {
        let mut moved = false;
        for s in streams.iter_mut().filter(|s| !s.sends && !s.dead) {
            moved |= receive(s, buf, wide);
        }
        if moved {
            quiet_since = Instant::now();
        }
        let _ = poll.poll(&mut events, Some(Duration::from_millis(10)));
    }
}
