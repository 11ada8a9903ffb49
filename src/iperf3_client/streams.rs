//! The data streams of an iperf3 test, client side: sending (paced, with
//! iperf3's UDP header), receiving (TCP bytes, UDP loss/order/jitter), and
//! the two waits at the end that make both ends' counts the same.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::{DRAIN_MAX, Io, SETTLE_MAX, SETTLE_QUIET, Stream, UDP_DRAIN_QUIET};
use crate::protocol::iperf3::udp::Header;

/// Waits until a stream is ready or `t` passes.
pub(super) fn wait(streams: &[Stream], t: Duration) {
    let mut fds: Vec<libc::pollfd> = streams
        .iter()
        .filter(|s| !s.done)
        .map(|s| libc::pollfd {
            fd: match &s.io {
                Io::Tcp(x) => x.as_raw_fd(),
                Io::Udp(x) => x.as_raw_fd(),
            },
            events: if s.count.sends && matches!(s.io, Io::Tcp(_)) {
                libc::POLLOUT
            } else {
                libc::POLLIN
            },
            revents: 0,
        })
        .collect();
    let ms = t.as_millis().min(1000) as i32;
    // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

/// Sends what pacing (`allowed` bytes so far on this stream) and the
/// test's bound (`limit` over all streams, `total` so far) let it.
pub(super) fn send(
    s: &mut Stream,
    buf: &mut [u8],
    wide: bool,
    allowed: Option<u64>,
    limit: Option<u64>,
    total: &mut u64,
) -> bool {
    let len = buf.len() as u64;
    let mut moved = false;
    for _ in 0..64 {
        if allowed.is_some_and(|a| s.count.bytes + len > a && s.count.bytes > 0) {
            break;
        }
        // A byte count ends with a whole last block, as iperf3's does.
        if limit.is_some_and(|l| *total >= l) {
            break;
        }
        let r = match &mut s.io {
            Io::Tcp(t) => t.write(buf),
            Io::Udp(u) => {
                let ns = crate::net::realtime_ns();
                Header {
                    sec: (ns / 1_000_000_000) as u32,
                    usec: ((ns % 1_000_000_000) / 1000) as u32,
                    count: s.count.packets + 1,
                }
                .write(wide, buf);
                u.send(buf)
            }
        };
        match r {
            Ok(n) => {
                moved = true;
                s.count.bytes += n as u64;
                *total += n as u64;
                if matches!(s.io, Io::Udp(_)) {
                    s.count.packets += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            // A full UDP queue (ENOBUFS) does not end the stream.
            Err(_) if matches!(s.io, Io::Udp(_)) => break,
            Err(_) => {
                s.done = true;
                break;
            }
        }
    }
    moved
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
                s.done = true;
                break;
            }
            Ok(n) => {
                moved = true;
                match &s.io {
                    Io::Tcp(_) => s.count.bytes += n as u64,
                    Io::Udp(_) => {
                        if let Some(h) = Header::read(wide, &buf[..n]) {
                            let now = crate::net::realtime_ns() as f64 / 1e9;
                            s.count.rx.on_datagram(n, h, now);
                            s.count.bytes = s.count.rx.bytes;
                        }
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => {
                s.done = true;
                break;
            }
        }
    }
    moved
}

/// Bytes a TCP socket holds that the peer has not acknowledged (SIOCOUTQ).
fn unacked(t: &TcpStream) -> Option<i32> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int.
    let r = unsafe { libc::ioctl(t.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    (r == 0).then_some(n)
}

/// After the last write: waits until the server's kernel holds every byte
/// sent (none unacknowledged), and then a little longer for its reader to
/// take them from its socket (nothing on the wire says when it has: the
/// kernel acknowledges bytes as they are queued, not as they are read), so
/// the server's count at TEST_END is the client's. Receiving streams are read
/// meanwhile.
pub(super) fn settle(streams: &mut [Stream], wide: bool) {
    let until = Instant::now() + SETTLE_MAX;
    let mut quiet_since = Instant::now();

    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < until {
        let pending = streams
            .iter()
            .any(|s| match (&s.io, s.count.sends, s.done) {
                (Io::Tcp(t), true, false) => unacked(t).unwrap_or(0) > 0,
                _ => false,
            });
        if pending {
            quiet_since = Instant::now();
        }
        if !pending && quiet_since.elapsed() >= SETTLE_QUIET {
            return;
        }
        for s in streams.iter_mut().filter(|s| !s.count.sends && !s.done) {
            receive(s, &mut buf, wide);
        }
        wait(&[], Duration::from_millis(2));
    }
}

/// After TEST_END: reads the receiving streams to their end (TCP: the
/// server closes them; UDP: until they go quiet).
pub(super) fn drain(streams: &mut [Stream], wide: bool) {
    let until = Instant::now() + DRAIN_MAX;
    let mut quiet_since = Instant::now();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let open: Vec<usize> = (0..streams.len())
            .filter(|&i| !streams[i].count.sends && !streams[i].done)
            .collect();
        if open.is_empty() || Instant::now() >= until {
            return;
        }
        let mut moved = false;
        for &i in &open {
            moved |= receive(&mut streams[i], &mut buf, wide);
        }
        if moved {
            quiet_since = Instant::now();
        }
        let udp_only = open.iter().all(|&i| matches!(streams[i].io, Io::Udp(_)));
        if udp_only && quiet_since.elapsed() >= UDP_DRAIN_QUIET {
            return;
        }
        if !moved {
            wait(streams, Duration::from_millis(10));
        }
    }
}
