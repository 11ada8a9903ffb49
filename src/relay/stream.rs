//! The relay's TCP path: a connection's two directions, each read, framed
//! (netrig's control and data connections) or passed as plain bytes,
//! impaired and written on, with idle and limit handling.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use uuid::Uuid;

use super::framer::{After, Framer, Piece};
use super::impair::{SharedBucket, StreamImpairer};
use super::udp_flow;
use super::{Dir, Event, Shared};
use crate::proto::{Message, RrProto, TestSpec};

/// Per-connection state shared by its two directions.
#[derive(Default)]
struct Conn {
    /// The test requested on this control connection, until it is accepted.
    pending: Option<TestSpec>,
    /// Data bytes the server will send on this data connection.
    down_data: Option<u64>,
    /// The TCP session this control connection set up.
    session: Option<Uuid>,
    /// When either direction last carried bytes (relay clock, ns).
    last_ns: u64,
    /// An idle connection was already counted and reset.
    idle_closed: bool,
}

pub(super) fn tcp_connection(sh: Arc<Shared>, client: TcpStream) {
    let flow = sh.next_flow.fetch_add(1, SeqCst);
    let _ = client.set_nonblocking(false);
    let Ok(server) = TcpStream::connect_timeout(&sh.cfg.to, Duration::from_secs(5)) else {
        crate::net::reset(&client);
        return;
    };
    sh.tcp_connections.fetch_add(1, SeqCst);
    if sh.cfg.verbosity >= 1 {
        crate::out!(
            "tcp {flow}: {} -> {}",
            client.peer_addr().map_or("?".into(), |a| a.to_string()),
            sh.cfg.to
        );
    }
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // A peer that stops reading cannot hold a pump in a write for ever.
    let _ = client.set_write_timeout(Some(sh.cfg.limits.idle_timeout));
    let _ = server.set_write_timeout(Some(sh.cfg.limits.idle_timeout));
    let conn = Arc::new(Mutex::new(Conn {
        last_ns: sh.now_ns(),
        ..Conn::default()
    }));
    let udp_stop = Arc::new(AtomicBool::new(false));
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = {
        let (sh, conn, udp_stop) = (Arc::clone(&sh), Arc::clone(&conn), Arc::clone(&udp_stop));
        let (c3, s3) = (client.try_clone(), server.try_clone());
        std::thread::spawn(move || {
            if let (Ok(c3), Ok(s3)) = (c3, s3) {
                pump(&sh, &conn, &udp_stop, flow, Dir::Up, c2, s2, (&c3, &s3));
            }
        })
    };
    let (c4, s4) = (client.try_clone(), server.try_clone());
    if let (Ok(c4), Ok(s4)) = (c4, s4) {
        pump(
            &sh,
            &conn,
            &udp_stop,
            flow,
            Dir::Down,
            server,
            client,
            (&c4, &s4),
        );
    }
    let _ = up.join();
    udp_stop.store(true, SeqCst);
    let session = conn.lock().unwrap_or_else(|p| p.into_inner()).session;
    if let Some(id) = session {
        sh.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

/// Looks at one frame going `dir` and says how much data follows it.
fn on_frame(
    sh: &Arc<Shared>,
    conn: &Mutex<Conn>,
    udp_stop: &Arc<AtomicBool>,
    dir: Dir,
    m: &mut Message,
) -> After {
    let mut c = conn.lock().unwrap_or_else(|p| p.into_inner());
    let mut after = After::default();
    match (dir, m) {
        (Dir::Up, Message::TestRequest { test }) => {
            if let TestSpec::Rr(r) = test
                && r.proto == RrProto::Tcp
            {
                after.data = Some(u64::from(r.size) * r.iterations);
            }
            c.pending = Some(test.clone());
        }
        (Dir::Up, Message::DataHello(h)) => {
            let known = sh
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&h.session)
                .copied();
            if let Some((up, down)) = known {
                after.data = Some(up);
                c.down_data = Some(down);
            }
        }
        (Dir::Down, Message::TestAccept { session }) => match c.pending.take() {
            Some(TestSpec::Tcp(t)) => {
                let bytes =
                    crate::plan::expected_bytes(t.pattern, t.transfer, t.push_bytes, t.pull_bytes);
                sh.sessions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(*session, bytes);
                c.session = Some(*session);
            }
            Some(TestSpec::Rr(r)) if r.proto == RrProto::Tcp => {
                after.data = Some(u64::from(r.reply) * r.iterations);
            }
            _ => {}
        },
        (Dir::Down, Message::DataAck { .. }) => after.data = c.down_data,
        (Dir::Down, Message::UdpAccept { port, .. }) if sh.cfg.udp => {
            match udp_flow(sh, *port, udp_stop) {
                Ok(p) => {
                    *port = p;
                    after.rewritten = true;
                }
                Err(e) => eprintln!("relay: cannot relay UDP port {port}: {e}"),
            }
        }
        _ => {}
    }
    after
}

/// Sends chunks after their departure time, in order, from its own thread.
struct Delayed {
    tx: Option<mpsc::SyncSender<(u64, Vec<u8>)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Delayed {
    fn start(sh: &Arc<Shared>, mut to: TcpStream) -> Delayed {
        let (tx, rx) = mpsc::sync_channel::<(u64, Vec<u8>)>(256);
        let sh = Arc::clone(sh);
        let thread = std::thread::spawn(move || {
            for (at, bytes) in rx {
                sleep_until(&sh, at);
                if to.write_all(&bytes).is_err() {
                    break;
                }
            }
        });
        Delayed {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    fn finish(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub(super) fn sleep_until(sh: &Shared, at_ns: u64) {
    let now = sh.now_ns();
    if at_ns > now {
        std::thread::sleep(Duration::from_nanos(at_ns - now));
    }
}

/// Relays one direction of a TCP connection.
#[allow(clippy::too_many_arguments)]
fn pump(
    sh: &Arc<Shared>,
    conn: &Mutex<Conn>,
    udp_stop: &Arc<AtomicBool>,
    flow: u64,
    dir: Dir,
    mut from: TcpStream,
    mut to: TcpStream,
    both: (&TcpStream, &TcpStream),
) {
    let spec = sh.spec(dir).clone();
    let mut framer = Framer::default();
    let mut imp = StreamImpairer::new(spec.clone(), sh.seed(flow, dir));
    let delayed = if spec.delays() {
        to.try_clone().ok().map(|t| Delayed::start(sh, t))
    } else {
        None
    };
    let mut out = StreamOut {
        to: &mut to,
        bucket: sh.bucket(dir),
        delayed,
    };
    let counts = sh.counts(dir);
    let mut buf = vec![0u8; 64 * 1024];
    let idle = sh.cfg.limits.idle_timeout;
    let _ = from.set_read_timeout(Some(idle.min(Duration::from_secs(1))));
    'outer: loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Err(e) if crate::net::nothing_yet(&e) => {
                if idle_out(sh, conn, idle) {
                    crate::net::reset(both.0);
                    crate::net::reset(both.1);
                    break;
                }
                continue;
            }
            Err(_) => break,
            Ok(n) => n,
        };
        conn.lock().unwrap_or_else(|p| p.into_inner()).last_ns = sh.now_ns();
        let pieces = framer.push(&buf[..n], &mut |m| on_frame(sh, conn, udp_stop, dir, m));
        for piece in pieces {
            let bytes = match piece {
                Piece::Frame(f) => f,
                Piece::Data(mut d) => {
                    let off = imp.offset();
                    let e = imp.apply(&mut d);
                    counts
                        .stream_bytes
                        .fetch_add(e.cut.map_or(d.len(), |k| k) as u64, Relaxed);
                    for at in &e.corrupted {
                        counts.stream_corrupted.fetch_add(1, SeqCst);
                        sh.event(Event {
                            t_s: sh.t_s(),
                            proto: "tcp",
                            flow,
                            dir,
                            event: "corrupted",
                            index: None,
                            seq: None,
                            offset: Some(*at),
                        });
                    }
                    if let Some(keep) = e.cut {
                        d.truncate(keep);
                        let at = imp.departure(out.ready(sh, d.len()));
                        let _ = out.send(at, d);
                        out.finish();
                        counts.resets.fetch_add(1, SeqCst);
                        sh.event(Event {
                            t_s: sh.t_s(),
                            proto: "tcp",
                            flow,
                            dir,
                            event: "reset",
                            index: None,
                            seq: None,
                            offset: Some(off + keep as u64),
                        });
                        crate::net::reset(both.0);
                        crate::net::reset(both.1);
                        return;
                    }
                    d
                }
            };
            let at = imp.departure(out.ready(sh, bytes.len()));
            if !out.send(at, bytes) {
                break 'outer;
            }
        }
    }
    out.finish();
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// Whether a connection has been idle both ways for `idle`; counts it once.
fn idle_out(sh: &Shared, conn: &Mutex<Conn>, idle: Duration) -> bool {
    let mut c = conn.lock().unwrap_or_else(|p| p.into_inner());
    let quiet = Duration::from_nanos(sh.now_ns().saturating_sub(c.last_ns));
    if quiet < idle {
        return false;
    }
    if !c.idle_closed {
        c.idle_closed = true;
        sh.idle_closed.fetch_add(1, SeqCst);
    }
    true
}

/// Where one direction of a TCP connection goes: straight out, or through a
/// shaper and a delay line.
struct StreamOut<'a> {
    to: &'a mut TcpStream,
    bucket: Option<SharedBucket>,
    delayed: Option<Delayed>,
}

impl StreamOut<'_> {
    /// When `len` bytes arriving now may leave the shaper.
    fn ready(&mut self, sh: &Shared, len: usize) -> u64 {
        let now = sh.now_ns();
        match &self.bucket {
            // TCP's own flow control bounds the queue: no limit here.
            Some(b) => b
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .shape(len, now, u64::MAX)
                .unwrap_or(now),
            None => now,
        }
    }

    fn send(&mut self, at: u64, bytes: Vec<u8>) -> bool {
        match self.delayed.as_ref().and_then(|d| d.tx.as_ref()) {
            Some(tx) => tx.send((at, bytes)).is_ok(),
            None => self.to.write_all(&bytes).is_ok(),
        }
    }

    fn finish(&mut self) {
        if let Some(d) = &mut self.delayed {
            d.finish();
        }
    }
}
