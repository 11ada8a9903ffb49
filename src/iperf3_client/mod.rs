//! `netrig tcp --iperf3` / `netrig udp --iperf3`: a test against an
//! unmodified `iperf3 -s`. The conversation is `iperf3::client`'s machine;
//! this opens the sockets, moves the data and keeps the counts.
//!
//! The streams follow iperf3's client (`iperf_tcp.c`: a TCP stream starts
//! with the cookie; `iperf_udp.c`: a UDP stream is a connected socket that
//! sends the connect datagram and waits for the reply, then every datagram
//! starts with `iperf3::udp::Header`). Two things make both ends' counts
//! the same: before TEST_END the client waits until the server's kernel has
//! acknowledged every byte it sent and its reader has gone quiet (iperf3's
//! server stops counting at TEST_END, `iperf_handle_message_server`), and a
//! receiving stream is read to its end (the server closes it at TEST_END,
//! after its last byte).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use thiserror::Error;

pub mod report;
mod streams;

use streams::{drain, receive, send, settle, wait};

use crate::protocol::iperf3::client::{Client, ClientError, ClientEvent, cookie_from};
use crate::protocol::iperf3::udp;
use crate::protocol::iperf3::{Mode, Params, Proto, Results, StreamResult, stream_id};

/// How long the data may take to be acknowledged and read after the last
/// write, and the quiet that says the server's reader has caught up.
const SETTLE_MAX: Duration = Duration::from_secs(5);
const SETTLE_QUIET: Duration = Duration::from_millis(30);
/// How long receiving streams are read after TEST_END, at most.
const DRAIN_MAX: Duration = Duration::from_secs(5);
const UDP_DRAIN_QUIET: Duration = Duration::from_millis(200);
/// How long the server may take to answer a message.
const ANSWER: Duration = Duration::from_secs(10);

/// What a run needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: SocketAddr,
    pub params: Params,
    pub connect_timeout: Duration,
    /// Progress rows this often.
    pub interval: Duration,
}

/// Why a run stopped before the server's results.
#[derive(Debug, Error)]
pub enum RunError {
    #[error("cannot connect to iperf3 server {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("iperf3 server {addr}: {what}: {source}")]
    Io {
        addr: SocketAddr,
        what: &'static str,
        source: io::Error,
    },
    #[error("iperf3 server {addr}: {source}")]
    Protocol {
        addr: SocketAddr,
        source: ClientError,
    },
    #[error("iperf3 server {addr} closed the control connection {when}")]
    Closed {
        addr: SocketAddr,
        when: &'static str,
    },
    #[error("iperf3 server {addr} did not answer {what} within {secs} s")]
    Timeout {
        addr: SocketAddr,
        what: &'static str,
        secs: u64,
    },
}

/// One stream as this end counted it.
#[derive(Debug, Clone, Default)]
pub struct StreamCount {
    /// iperf3's stream number.
    pub id: u32,
    pub sends: bool,
    pub bytes: u64,
    /// UDP datagrams sent.
    pub packets: u64,
    /// UDP, receiving: loss, order and jitter as iperf3 counts them.
    pub rx: udp::Receiver,
    /// TCP, sending: segments retransmitted (TCP_INFO).
    pub retransmits: u64,
}

/// Cumulative bytes at a moment of the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// Seconds since TEST_RUNNING.
    pub secs: f64,
    pub sent: u64,
    pub received: u64,
    /// UDP datagrams sent and received so far.
    pub packets_sent: u64,
    pub packets_received: u64,
}

/// What a run measured and what the server said it measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub start_unix: f64,
    pub duration_secs: f64,
    pub streams: Vec<StreamCount>,
    /// The server's results message.
    pub server: Results,
    pub ticks: Vec<Tick>,
    pub interrupted: bool,
    pub cpu: crate::protocol::cpu::CpuUsage,
}

impl Outcome {
    /// The server's figure for the stream `id`.
    pub fn server_stream(&self, id: u32) -> Option<&StreamResult> {
        self.server.streams.iter().find(|s| s.id == id)
    }
}

enum Io {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

struct Stream {
    io: Io,
    count: StreamCount,
    done: bool,
}

/// Runs one test. `interrupt` (Ctrl-C) ends it early, with results.
pub fn run(
    cfg: &Config,
    interrupt: &AtomicBool,
    on_tick: &mut dyn FnMut(&Tick),
) -> Result<Outcome, RunError> {
    let addr = cfg.server;
    let p = &cfg.params;
    let io = |what: &'static str| move |source| RunError::Io { addr, what, source };
    let proto = |source| RunError::Protocol { addr, source };
    let mut ctrl = TcpStream::connect_timeout(&addr, cfg.connect_timeout)
        .map_err(|source| RunError::Connect { addr, source })?;
    let _ = ctrl.set_nodelay(true);
    let cookie = cookie_from(rand::random());
    let (mut machine, first) = Client::new(&cookie, p);
    ctrl.write_all(&first).map_err(io("writing the cookie"))?;
    let mut streams: Vec<Stream> = Vec::new();
    // The setup: parameters, streams, TEST_START, TEST_RUNNING.
    'setup: loop {
        for ev in read_events(&mut ctrl, &mut machine, addr, "during the test's setup")? {
            match ev {
                ClientEvent::Send(b) => ctrl.write_all(&b).map_err(io("sending parameters"))?,
                ClientEvent::CreateStreams => {
                    for i in 0..streams_of(p) {
                        let sends = client_sends(p, i);
                        let s =
                            open_stream(cfg, &cookie.0, sends).map_err(io("opening a stream"))?;
                        streams.push(Stream {
                            io: s,
                            count: StreamCount {
                                id: stream_id(i),
                                sends,
                                ..StreamCount::default()
                            },
                            done: false,
                        });
                    }
                }
                ClientEvent::TestStart => {}
                ClientEvent::TestRunning => break 'setup,
                _ => return Err(proto(ClientError::Unexpected("out of turn in the setup"))),
            }
        }
    }
    let cpu_start = crate::net::cpu::sample();
    let start_unix = crate::net::realtime_ns() as f64 / 1e9;
    let began = Instant::now();
    let mut ticks = Vec::new();
    let interrupted = move_data(
        cfg,
        &mut ctrl,
        &mut machine,
        &mut streams,
        interrupt,
        began,
        &mut |t| {
            on_tick(&t);
            ticks.push(t);
        },
    )?;
    let duration_secs = began.elapsed().as_secs_f64();
    let cpu = crate::protocol::cpu::CpuUsage::between(&cpu_start, &crate::net::cpu::sample());
    let end = machine.test_end().map_err(proto)?;
    ctrl.write_all(&end).map_err(io("sending TEST_END"))?;
    drain(&mut streams, p.udp_counters_64bit);
    for s in &mut streams {
        if let (Io::Tcp(t), true) = (&s.io, s.count.sends) {
            s.count.retransmits = crate::net::tcpinfo::raw(t.as_raw_fd())
                .map_or(0, |i| u64::from(i.tcpi_total_retrans));
        }
    }
    let mut server = None;
    loop {
        for ev in read_events(&mut ctrl, &mut machine, addr, "during the results exchange")? {
            match ev {
                ClientEvent::ExchangeResults => {
                    let mine = own_results(p, &streams, duration_secs);
                    let b = machine.results(&mine).map_err(proto)?;
                    ctrl.write_all(&b).map_err(io("sending results"))?;
                }
                ClientEvent::ServerResults(r) => server = Some(*r),
                ClientEvent::Done(b) => {
                    let _ = ctrl.write_all(&b);
                    let Some(server) = server else {
                        return Err(proto(ClientError::Unexpected(
                            "DISPLAY_RESULTS before results",
                        )));
                    };
                    return Ok(Outcome {
                        start_unix,
                        duration_secs,
                        streams: streams.into_iter().map(|s| s.count).collect(),
                        server,
                        ticks,
                        interrupted,
                        cpu,
                    });
                }
                _ => return Err(proto(ClientError::Unexpected("out of turn in the results"))),
            }
        }
    }
}

/// Streams the client opens: `-P`, twice that for `--bidir`.
fn streams_of(p: &Params) -> u32 {
    p.streams()
}

/// Whether the client's `i`th stream sends: for `--bidir` the client opens
/// its sending streams first (`iperf_handle_message_client`,
/// CREATE_STREAMS), the server counts them as its receiving ones.
fn client_sends(p: &Params, i: u32) -> bool {
    match p.mode {
        Mode::ClientSends => true,
        Mode::Reverse => false,
        Mode::Bidir => i < p.parallel,
    }
}

/// Reads the control connection (blocking, bounded) until the machine
/// says something.
fn read_events(
    ctrl: &mut TcpStream,
    m: &mut Client,
    addr: SocketAddr,
    when: &'static str,
) -> Result<Vec<ClientEvent>, RunError> {
    let _ = ctrl.set_nonblocking(false);
    let _ = ctrl.set_read_timeout(Some(ANSWER));
    let mut buf = [0u8; 4096];
    loop {
        let want = m.wants().min(buf.len());
        if want == 0 {
            return Err(RunError::Protocol {
                addr,
                source: ClientError::Unexpected("when nothing was due"),
            });
        }
        let n = match ctrl.read(&mut buf[..want]) {
            Ok(0) => return Err(RunError::Closed { addr, when }),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(RunError::Timeout {
                    addr,
                    what: when,
                    secs: ANSWER.as_secs(),
                });
            }
            Err(source) => {
                return Err(RunError::Io {
                    addr,
                    what: "reading the control connection",
                    source,
                });
            }
        };
        let ev = m
            .feed(&buf[..n])
            .map_err(|source| RunError::Protocol { addr, source })?;
        if !ev.is_empty() {
            return Ok(ev);
        }
    }
}

/// Opens one data stream as iperf3's client does.
fn open_stream(cfg: &Config, cookie: &[u8], sends: bool) -> io::Result<Io> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let p = &cfg.params;
    let domain = Domain::for_address(cfg.server);
    match p.proto {
        Proto::Tcp => {
            let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
            window(&s, p.window);
            if p.mss > 0 {
                s.set_tcp_mss(p.mss)?;
            }
            if p.nodelay {
                s.set_tcp_nodelay(true)?;
            }
            if let Some(c) = &p.congestion {
                s.set_tcp_congestion(c.as_bytes())?;
            }
            s.connect_timeout(&SockAddr::from(cfg.server), cfg.connect_timeout)?;
            let mut t: TcpStream = s.into();
            t.write_all(cookie)?;
            let _ = sends;
            t.set_nonblocking(true)?;
            Ok(Io::Tcp(t))
        }
        Proto::Udp => {
            let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
            window(&s, p.window);
            let any: SocketAddr = if cfg.server.is_ipv4() {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            s.bind(&any.into())?;
            let u: UdpSocket = s.into();
            u.connect(cfg.server)?;
            u.set_read_timeout(Some(cfg.connect_timeout))?;
            u.send(&udp::CONNECT_MSG)?;
            let mut b = [0u8; 16];
            let n = u.recv(&mut b)?;
            if b[..n] != udp::CONNECT_REPLY {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the UDP connect reply was not iperf3's",
                ));
            }
            u.set_nonblocking(true)?;
            Ok(Io::Udp(u))
        }
    }
}

/// `-w`: both buffers, as iperf3 sets them.
fn window(s: &socket2::Socket, bytes: u32) {
    if bytes > 0 {
        let _ = s.set_send_buffer_size(bytes as usize);
        let _ = s.set_recv_buffer_size(bytes as usize);
    }
}

/// Moves data until the test's bound (time, bytes, blocks) or an
/// interrupt; then lets the server's reader catch up. Returns whether it
/// was interrupted.
fn move_data(
    cfg: &Config,
    ctrl: &mut TcpStream,
    m: &mut Client,
    streams: &mut [Stream],
    interrupt: &AtomicBool,
    began: Instant,
    tick: &mut dyn FnMut(Tick),
) -> Result<bool, RunError> {
    let p = &cfg.params;
    let addr = cfg.server;
    ctrl.set_nonblocking(true).map_err(|source| RunError::Io {
        addr,
        what: "control connection",
        source,
    })?;
    let until = (p.time > 0).then(|| began + Duration::from_secs(p.time));
    let limit = p.send_limit();
    let len = p.len as usize;
    let mut buf = vec![0u8; len.max(64 * 1024)];
    // iperf3 fills its buffer with random bytes (`iperf_new_stream`); a
    // fixed pattern is as good for throughput, and compresses no better
    // on a path that does not compress.
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i * 131 + 7) as u8;
    }
    let mut next_tick = began + cfg.interval;
    let mut cbuf = [0u8; 64];
    let mut interrupted = false;
    loop {
        let now = Instant::now();
        if interrupt.load(Relaxed) {
            interrupted = true;
            break;
        }
        if until.is_some_and(|u| now >= u) {
            break;
        }
        let (sent, received) = totals(streams);
        if limit.is_some_and(|l| sent >= l || received >= l) {
            break;
        }
        if now >= next_tick {
            tick(tick_of(streams, began));
            next_tick += cfg.interval;
        }
        // The server says nothing while the test runs; anything it says
        // ends it (SERVER_TERMINATE, SERVER_ERROR).
        match ctrl.read(&mut cbuf[..m.wants().clamp(1, 64)]) {
            Ok(0) => {
                return Err(RunError::Closed {
                    addr,
                    when: "mid-test",
                });
            }
            Ok(n) => {
                m.feed(&cbuf[..n])
                    .map_err(|source| RunError::Protocol { addr, source })?;
            }
            Err(_) => {}
        }
        let elapsed = began.elapsed().as_secs_f64();
        let mut moved = false;
        let mut total = sent;
        for s in streams.iter_mut().filter(|s| !s.done) {
            if s.count.sends {
                let allowed =
                    (p.bandwidth > 0).then(|| (p.bandwidth as f64 / 8.0 * elapsed) as u64);
                moved |= send(
                    s,
                    &mut buf[..len],
                    p.udp_counters_64bit,
                    allowed,
                    limit,
                    &mut total,
                );
            } else {
                moved |= receive(s, &mut buf, p.udp_counters_64bit);
            }
        }
        if !moved {
            wait(streams, Duration::from_millis(1));
        }
    }
    settle(streams, p.udp_counters_64bit);
    tick(tick_of(streams, began));
    Ok(interrupted)
}

fn totals(streams: &[Stream]) -> (u64, u64) {
    let sum = |sends: bool| {
        streams
            .iter()
            .filter(|s| s.count.sends == sends)
            .map(|s| s.count.bytes)
            .sum::<u64>()
    };
    (sum(true), sum(false))
}

fn tick_of(streams: &[Stream], began: Instant) -> Tick {
    let (sent, received) = totals(streams);
    let packets = |sends: bool| {
        streams
            .iter()
            .filter(|s| s.count.sends == sends)
            .map(|s| {
                if sends {
                    s.count.packets
                } else {
                    s.count.rx.packets
                }
            })
            .sum::<u64>()
    };
    Tick {
        secs: began.elapsed().as_secs_f64(),
        sent,
        received,
        packets_sent: packets(true),
        packets_received: packets(false),
    }
}

/// The client's results message (`send_results`): this end's figures.
fn own_results(p: &Params, streams: &[Stream], secs: f64) -> Results {
    let sends = streams.iter().any(|s| s.count.sends);
    Results {
        sender_has_retransmits: match (sends, p.proto) {
            (false, _) => -1,
            (true, Proto::Tcp) => 1,
            (true, Proto::Udp) => 0,
        },
        streams: streams
            .iter()
            .map(|s| {
                let c = &s.count;
                let (packets, errors, jitter) = if c.sends {
                    (c.packets, 0, 0.0)
                } else {
                    (c.rx.packets, c.rx.lost, c.rx.jitter)
                };
                StreamResult {
                    id: c.id,
                    bytes: c.bytes,
                    retransmits: if c.sends && p.proto == Proto::Tcp {
                        c.retransmits as i64
                    } else {
                        -1
                    },
                    jitter,
                    errors,
                    packets,
                    end_time: secs,
                    ..StreamResult::default()
                }
            })
            .collect(),
        ..Results::default()
    }
}
