//! Socket plumbing shared by client and server: listening (dual-stack),
//! connecting from a chosen local address, name resolution and polling.

use socket2::{Domain, Protocol, SockAddr, Socket, TcpKeepalive, Type};
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

pub mod ahead;
pub mod cpu;
pub mod event_loop;
pub mod loops;
pub mod out;
pub mod sockopt;
pub mod tcpinfo;
mod timed;
pub mod timers;
pub use timed::Timed;

/// netrig's well-known port (control and data share it).
pub const DEFAULT_PORT: u16 = 4794;

/// Opens a TCP listening socket. `[::]` listens on IPv6 and IPv4 (dual-stack).
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    listen_on(addr, Stream::Tcp)
}

/// Opens a non-blocking, dual-stack listening socket of either stream kind.
/// One-to-one SCTP listeners are usable as a `TcpListener`: accepted
/// associations read and write like TCP connections.
pub fn listen_on(addr: SocketAddr, kind: Stream) -> io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(kind.protocol()),
    )?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The default listen addresses: dual-stack `[::]`, or `0.0.0.0` where the
/// machine has no IPv6.
pub fn default_listeners(port: u16) -> io::Result<Vec<TcpListener>> {
    match listen(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)) {
        Ok(l) => Ok(vec![l]),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(e),
        Err(_) => Ok(vec![listen(SocketAddr::from(([0, 0, 0, 0], port)))?]),
    }
}

/// A stream transport: TCP, or one-to-one SCTP (which reads and writes like TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stream {
    /// TCP.
    #[default]
    Tcp,
    /// SCTP, one-to-one style (SOCK_STREAM).
    Sctp,
}

impl Stream {
    fn protocol(self) -> Protocol {
        match self {
            Stream::Tcp => Protocol::TCP,
            Stream::Sctp => Protocol::from(libc::IPPROTO_SCTP),
        }
    }
}

/// Whether this kernel offers one-to-one SCTP sockets.
pub fn sctp_available() -> bool {
    Socket::new(Domain::IPV4, Type::STREAM, Some(Stream::Sctp.protocol())).is_ok()
}

/// Turns Nagle off (`on == false`) or on, for TCP or SCTP alike.
pub fn set_nodelay(stream: &TcpStream, nodelay: bool) -> io::Result<()> {
    match stream.set_nodelay(nodelay) {
        Ok(()) => Ok(()),
        Err(_) => crate::sctp::set_nodelay(stream.as_raw_fd(), nodelay),
    }
}

/// What a peer has done on a connection, seen without blocking or consuming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Nothing to read.
    Quiet,
    /// Bytes are waiting.
    Sent,
    /// Closed, reset, or otherwise unusable.
    Gone,
}

/// Peeks at `stream` without blocking. Used while the data of a test moves
/// elsewhere (UDP, SCTP one-to-many), to notice a peer that said goodbye or
/// died.
pub fn peer_state(stream: &TcpStream) -> PeerState {
    if stream.set_nonblocking(true).is_err() {
        return PeerState::Gone;
    }
    let mut b = [0u8; 1];
    let state = match stream.peek(&mut b) {
        Ok(0) => PeerState::Gone,
        Ok(_) => PeerState::Sent,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => PeerState::Quiet,
        Err(_) => PeerState::Gone,
    };
    let _ = stream.set_nonblocking(false);
    state
}

/// Connects to `to`, optionally from local address `from`, within `timeout`.
pub fn connect(to: SocketAddr, from: Option<IpAddr>, timeout: Duration) -> io::Result<TcpStream> {
    connect_stream(to, from, timeout, Via::default())
}

/// How a stream connection goes out: its transport, and the interface it
/// is bound to (SO_BINDTODEVICE), if any.
#[derive(Debug, Clone, Copy, Default)]
pub struct Via<'a> {
    /// TCP or SCTP.
    pub kind: Stream,
    /// `--bind-dev`.
    pub dev: Option<&'a str>,
    /// `--cport`: the local port.
    pub port: Option<u16>,
}

/// Binds a socket about to connect to `to` to the local address `ip`
/// (`-B`) and port (`--cport`) asked for, if any.
pub fn bind_local(
    socket: &Socket,
    to: SocketAddr,
    ip: Option<IpAddr>,
    port: Option<u16>,
) -> io::Result<()> {
    if let Some(port) = port {
        // SO_REUSEADDR lets a port whose last connection is in TIME_WAIT be
        // bound again (the kernel still refuses the same address pair).
        socket.set_reuse_address(true)?;
        let ip = ip.unwrap_or(if to.is_ipv4() {
            IpAddr::from([0, 0, 0, 0])
        } else {
            IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED)
        });
        socket.bind(&SockAddr::from(SocketAddr::new(ip, port)))
    } else if let Some(ip) = ip {
        // The port is chosen at connect, by the whole address pair, so many
        // connections from one address share ports across servers (a port
        // chosen at bind would be held from every other connect).
        let _ = sockopt::set_int(
            std::os::fd::AsRawFd::as_raw_fd(socket),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            1,
        );
        socket.bind(&SockAddr::from(SocketAddr::new(ip, 0)))
    } else {
        Ok(())
    }
}

/// Connects over TCP or SCTP.
pub fn connect_stream(
    to: SocketAddr,
    from: Option<IpAddr>,
    timeout: Duration,
    via: Via<'_>,
) -> io::Result<TcpStream> {
    let socket = Socket::new(
        Domain::for_address(to),
        Type::STREAM,
        Some(via.kind.protocol()),
    )?;
    if let Some(dev) = via.dev {
        socket.bind_device(Some(dev.as_bytes()))?;
    }
    bind_local(&socket, to, from, via.port)?;
    socket.connect_timeout(&to.into(), timeout)?;
    let stream: TcpStream = socket.into();
    set_nodelay(&stream, true)?;
    Ok(stream)
}

/// Enables TCP keepalive so a vanished peer on an idle control connection is noticed.
pub fn keepalive(stream: &impl std::os::fd::AsFd) -> io::Result<()> {
    let ka = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    socket2::SockRef::from(stream).set_tcp_keepalive(&ka)
}

/// What is wrong with a target's form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("empty target")]
    Empty,
    #[error("'{0}' is neither HOST:PORT nor an address ([V6]:PORT for IPv6)")]
    Form(String),
    #[error("port '{port}' in '{target}' is not a number from 1 to 65535")]
    Port { port: String, target: String },
}

/// CLOCK_REALTIME now, ns since the epoch: the clock datagram timestamps
/// and the kernel's receive stamps use, read here so the pure code takes
/// time as an argument.
pub fn realtime_ns() -> u64 {
    // Read straight from the clock: through SystemTime and Duration this
    // was a third of a round-trip client's time arithmetic (callgrind).
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) } != 0 {
        return 0;
    }
    // Before the epoch reads as 0, as SystemTime's did.
    u64::try_from(ts.tv_sec).map_or(0, |s| {
        s.saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64)
    })
}

/// Waits until the wall clock reads `at_s` (Unix seconds; iperf2's
/// `--txstart-time`), so clients on several hosts start together: sleeps
/// to within 2 ms of it, then yields until it passes. Returns early when
/// `stop` is set. Wall-clock steps during the wait (NTP) are followed, as
/// the point is to meet the other hosts' clocks.
pub fn wait_for_epoch(at_s: f64, stop: &std::sync::atomic::AtomicBool) {
    use std::sync::atomic::Ordering::SeqCst;
    let target_ns = (at_s * 1e9) as u64;
    loop {
        let now = realtime_ns();
        if now >= target_ns || stop.load(SeqCst) {
            return;
        }
        let left = Duration::from_nanos(target_ns - now);
        if left > Duration::from_millis(2) {
            std::thread::sleep((left - Duration::from_millis(2)).min(Duration::from_millis(50)));
        } else {
            std::thread::yield_now();
        }
    }
}

/// A receive that found nothing this time (timeout, a signal, or nothing
/// ready on a non-blocking socket): try again.
pub fn nothing_yet(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Checks a target's form (`HOST`, `HOST:PORT`, `IP`, `[V6]:PORT`) without
/// resolving it, so a bad port is a usage error rather than a network one.
pub fn check_target(target: &str) -> Result<(), TargetError> {
    let t = target.trim();
    if t.is_empty() {
        return Err(TargetError::Empty);
    }
    if t.parse::<SocketAddr>().is_ok()
        || t.trim_matches(|c| c == '[' || c == ']')
            .parse::<IpAddr>()
            .is_ok()
    {
        return Ok(());
    }
    let Some((host, port)) = t.rsplit_once(':') else {
        return Ok(());
    };
    if host.is_empty() || host.contains(':') && !host.starts_with('[') {
        return Err(TargetError::Form(t.to_string()));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(TargetError::Port {
            port: port.to_string(),
            target: t.to_string(),
        }),
    }
}

/// Resolves `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 address.
pub fn resolve(target: &str, default_port: u16) -> io::Result<Vec<SocketAddr>> {
    let t = target.trim();
    let addrs: Vec<SocketAddr> = if let Ok(sa) = t.parse::<SocketAddr>() {
        vec![sa]
    } else if let Ok(ip) = t.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
        vec![SocketAddr::new(ip, default_port)]
    } else if t.contains(':') {
        t.to_socket_addrs()?.collect()
    } else {
        (t, default_port).to_socket_addrs()?.collect()
    };
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("'{target}' resolves to no address"),
        ));
    }
    Ok(addrs)
}

/// Waits up to `timeout` for `fd` to have something to read (or to be
/// closed); false when the time ran out.
pub fn wait_readable(fd: &impl AsRawFd, timeout: Duration) -> bool {
    readable_among(&[fd.as_raw_fd()], timeout).is_ok_and(|r| r[0])
}

/// Waits until any of `listeners` is readable or `timeout` passes; returns
/// which are readable.
pub fn poll_readable(listeners: &[TcpListener], timeout: Duration) -> io::Result<Vec<bool>> {
    let fds: Vec<RawFd> = listeners.iter().map(AsRawFd::as_raw_fd).collect();
    readable_among(&fds, timeout)
}

/// Waits up to `timeout` until any of `fds` has something to read (or is
/// closed); returns which have. A negative descriptor is passed over, and a
/// signal ends the wait early with none ready. The wait is rounded up to
/// whole milliseconds: cut down to 0 before its time, a caller waiting for
/// a deadline would spin.
pub fn readable_among(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut fds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()` pollfd
    // structs that outlives the call; poll only writes their `revents` fields.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(fds.iter().map(|p| p.revents != 0).collect())
}

/// Resets a TCP connection (the peer sees ECONNRESET, not a clean close),
/// even while other threads hold clones of it.
pub fn reset<S: std::os::fd::AsFd + AsRawFd>(stream: &S) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
    // connect() with AF_UNSPEC disconnects a TCP socket; Linux sends a RST.
    // SAFETY: a zeroed sockaddr with only the family set, with its size.
    let r = unsafe {
        let mut sa: libc::sockaddr = std::mem::zeroed();
        sa.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
        libc::connect(
            stream.as_raw_fd(),
            &sa,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    };
    if r != 0 {
        let _ = socket2::SockRef::from(stream).shutdown(std::net::Shutdown::Both);
    }
}

/// Event loops of the relay, and those the server starts with: two per
/// core. With one, a few busy connections sharing a loop lost 10-20% of
/// their goodput to the thread-per-connection design on this 2-core VM;
/// with two they gained 5-18% (bench/tcp.sh, -P 4).
pub fn event_loops() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()) * 2
}

/// Most event loops for TCP data: four per core. The client runs that
/// many, and never more than it has connections (`tcp::pool::spawn`); the
/// server starts with [`event_loops`] and adds loops up to this many, one
/// at a time, for lasting data connections (`server::core::loops`). So up
/// to that many busy connections each run on a loop of their own, as
/// iperf2's thread per stream. With two per core, two sending connections
/// shared a loop at `-P 8` on 2 cores, and the loop slept and was woken
/// across the cores more often (client context switches per GiB 1,150
/// against 780, the server's 1,680 against 790): a client loop per
/// connection gave 1.31–1.40× the verified goodput (medians of three runs;
/// 13 of 14 alternating pairs won, 0.94–1.54×) at 0.71–0.87× the CPU per
/// GiB, and the server's eight loops on top of it 1.17× (5 of 6 pairs) at
/// 0.86×.
pub fn data_loops() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()) * 4
}

/// This process's resident memory, bytes (0 if it cannot be read).
pub fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages.saturating_mul(u64::try_from(page).unwrap_or(4096))
}

/// The machine's memory, bytes (None if it cannot be read).
pub fn total_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Raises this process's soft limit on open files to its hard limit and
/// returns the limit now in force.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read or write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return Err(io::Error::last_os_error());
        }
        if r.rlim_cur < r.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                r = raised;
            }
        }
    }
    Ok(r.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_realtime_clock_reads_as_the_system_time_does() {
        let ns = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        };
        let before = ns(std::time::SystemTime::now());
        let read = realtime_ns();
        let after = ns(std::time::SystemTime::now());
        assert!(before <= read && read <= after, "{before} {read} {after}");
    }

    #[test]
    fn only_timeouts_signals_and_would_block_mean_try_again() {
        for k in [
            io::ErrorKind::WouldBlock,
            io::ErrorKind::TimedOut,
            io::ErrorKind::Interrupted,
        ] {
            assert!(nothing_yet(&io::Error::from(k)), "{k:?}");
        }
        for k in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::InvalidData,
            io::ErrorKind::Other,
        ] {
            assert!(!nothing_yet(&io::Error::from(k)), "{k:?}");
        }
    }

    #[test]
    fn target_forms() {
        for ok in [
            "host",
            "host:80",
            "10.0.0.1",
            "10.0.0.1:5",
            "::1",
            "[::1]",
            "[::1]:9",
            "fe80::1",
        ] {
            assert_eq!(check_target(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "host:99999",
            "host:0",
            "host:",
            "1.2.3.4:x",
            ":80",
            "a:b:80",
        ] {
            assert!(check_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resolve_forms() {
        assert_eq!(
            resolve("127.0.0.1", 9).unwrap(),
            vec![SocketAddr::from(([127, 0, 0, 1], 9))]
        );
        assert_eq!(
            resolve("127.0.0.1:5", 9).unwrap(),
            vec![SocketAddr::from(([127, 0, 0, 1], 5))]
        );
        assert_eq!(resolve("::1", 9).unwrap()[0].port(), 9);
        assert_eq!(resolve("[::1]:7", 9).unwrap()[0].port(), 7);
        assert!(
            resolve("localhost", 9)
                .unwrap()
                .iter()
                .all(|a| a.port() == 9)
        );
        assert!(resolve("no-such-host.invalid", 9).is_err());
    }
}
