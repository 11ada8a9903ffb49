//! The relay's UDP path: flows keyed by client address, each with its own
//! upstream socket, datagrams impaired (loss, policing, shaping queue,
//! duplication, reordering, corruption) and counted in both directions.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::impair::{Action, DatagramImpairer, DropCause};
use super::limits::{self, QueueBytes};
use super::{Dir, Event, Shared, bind_udp, sleep_until, unspecified_like};
use crate::net::sockopt::send_marked;
use crate::udp::header::{FLAG_HANDSHAKE, HEADER_LEN, Header};

/// Starts relaying a netrig UDP test whose server listens on `port`; returns
/// the relay's port for the client.
pub(super) fn udp_flow(sh: &Arc<Shared>, port: u16, stop: &Arc<AtomicBool>) -> io::Result<u16> {
    let place = Arc::new(
        limits::take(&sh.open_flows, sh.cfg.limits.max_flows).ok_or_else(|| {
            sh.udp_refused.fetch_add(1, SeqCst);
            io::Error::other(format!(
                "{} UDP flows open (--max-flows)",
                sh.cfg.limits.max_flows
            ))
        })?,
    );
    let client_side = bind_udp(SocketAddr::new(sh.cfg.listen.ip(), 0))?;
    let server_side = bind_udp(SocketAddr::new(unspecified_like(sh.cfg.to.ip()), 0))?;
    server_side.connect(SocketAddr::new(sh.cfg.to.ip(), port))?;
    let my_port = client_side.local_addr()?.port();
    let flow = sh.next_flow.fetch_add(1, SeqCst);
    sh.udp_flows.fetch_add(1, SeqCst);
    let peer: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
    {
        let (sh, stop, peer) = (Arc::clone(sh), Arc::clone(stop), Arc::clone(&peer));
        let (from, to) = (client_side.try_clone()?, server_side.try_clone()?);
        let place = Arc::clone(&place);
        std::thread::spawn(move || {
            let _place = place;
            let out = move |d: &[u8], tos: u8| {
                let _ = send_marked(&to, d, None, tos);
            };
            datagram_pump(&sh, flow, Dir::Up, &from, Some(&peer), out, &stop);
        });
    }
    {
        let (sh, stop) = (Arc::clone(sh), Arc::clone(stop));
        std::thread::spawn(move || {
            let _place = place;
            let to = client_side;
            let out = move |d: &[u8], tos: u8| {
                if let Some(a) = *peer.lock().unwrap_or_else(|p| p.into_inner()) {
                    let _ = send_marked(&to, d, Some(a), tos);
                }
            };
            datagram_pump(&sh, flow, Dir::Down, &server_side, None, out, &stop);
        });
    }
    Ok(my_port)
}

/// Plain UDP on the listening port: one upstream socket per client address.
pub(super) fn plain_udp(sh: Arc<Shared>, sock: UdpSocket) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
    crate::udp::receive::enable_rx_timestamps(&sock);
    crate::udp::receive::enable_rx_tos(&sock);
    let sock = Arc::new(sock);
    let mut flows: HashMap<SocketAddr, PlainFlow> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    while !sh.stop.load(SeqCst) {
        let (n, src, got) = match crate::udp::receive::recv_from_stamped(&sock, &mut buf) {
            Ok(x) => x,
            Err(_) => {
                for (_, p, _, _) in flows.values_mut() {
                    p.idle();
                }
                flows.retain(|_, (_, _, done, _)| !done.load(SeqCst));
                continue;
            }
        };
        let flow = match flows.entry(src) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                let Some(place) = limits::take(&sh.open_flows, sh.cfg.limits.max_flows) else {
                    sh.udp_refused.fetch_add(1, SeqCst);
                    continue;
                };
                match plain_flow(&sh, &sock, src, place) {
                    Some(f) => v.insert(f),
                    None => continue,
                }
            }
        };
        flow.1
            .handle(&mut buf[..n], sh.arrival_ns(got.stamp), got.tos);
    }
}

/// The upstream socket, the up pipe, "the flow is over", and its place.
type PlainFlow = (Arc<UdpSocket>, Pipe, Arc<AtomicBool>, limits::Place);

/// Opens the upstream socket for a new client address and starts relaying
/// what comes back.
fn plain_flow(
    sh: &Arc<Shared>,
    sock: &Arc<UdpSocket>,
    src: SocketAddr,
    place: limits::Place,
) -> Option<PlainFlow> {
    let up = bind_udp(SocketAddr::new(unspecified_like(sh.cfg.to.ip()), 0)).ok()?;
    up.connect(sh.cfg.to).ok()?;
    let up = Arc::new(up);
    let flow = sh.next_flow.fetch_add(1, SeqCst);
    sh.udp_flows.fetch_add(1, SeqCst);
    let done = Arc::new(AtomicBool::new(false));
    {
        let (sh, up, back, done) = (
            Arc::clone(sh),
            Arc::clone(&up),
            Arc::clone(sock),
            Arc::clone(&done),
        );
        std::thread::spawn(move || {
            let out = move |d: &[u8], tos: u8| {
                let _ = send_marked(&back, d, Some(src), tos);
            };
            datagram_pump(&sh, flow, Dir::Down, &up, None, out, &done);
            done.store(true, SeqCst);
        });
    }
    let to = Arc::clone(&up);
    let pipe = Pipe::new(sh, flow, Dir::Up, move |d: &[u8], tos: u8| {
        let _ = send_marked(&to, d, None, tos);
    });
    Some((up, pipe, done, place))
}

/// Reads datagrams from `from` and passes them through a [`Pipe`] until
/// `stop` is set or the flow has been silent for the idle timeout.
fn datagram_pump(
    sh: &Arc<Shared>,
    flow: u64,
    dir: Dir,
    from: &UdpSocket,
    learn: Option<&Mutex<Option<SocketAddr>>>,
    out: impl Fn(&[u8], u8) + Send + Sync + 'static,
    stop: &AtomicBool,
) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    crate::udp::receive::enable_rx_timestamps(from);
    crate::udp::receive::enable_rx_tos(from);
    let mut pipe = Pipe::new(sh, flow, dir, out);
    let mut buf = vec![0u8; 65536];
    let mut last = Instant::now();
    let idle = sh.cfg.limits.idle_timeout;
    while !stop.load(SeqCst) && !sh.stop.load(SeqCst) {
        if last.elapsed() >= idle {
            sh.idle_closed.fetch_add(1, SeqCst);
            break;
        }
        match crate::udp::receive::recv_from_stamped(from, &mut buf) {
            Ok((n, src, got)) => {
                last = Instant::now();
                if let Some(l) = learn {
                    *l.lock().unwrap_or_else(|p| p.into_inner()) = Some(src);
                }
                pipe.handle(&mut buf[..n], sh.arrival_ns(got.stamp), got.tos);
            }
            // Nothing followed a held datagram: release it in order (not a reorder).
            Err(_) => pipe.idle(),
        }
    }
    pipe.idle();
}

/// Sends a datagram with a TOS byte.
type Out = Box<dyn Fn(&[u8], u8) + Send + Sync>;

/// One direction of one UDP flow: decides, counts, logs, and sends now or
/// after a delay. Each datagram leaves with the TOS byte it arrived with
/// (a path that carries marking unchanged), or `--remark`'s.
struct Pipe {
    sh: Arc<Shared>,
    flow: u64,
    dir: Dir,
    imp: DatagramImpairer,
    held: Option<(Vec<u8>, u64, u8)>,
    out: Arc<Out>,
    queue: Option<mpsc::Sender<(u64, Vec<u8>, u8)>>,
    remark: Option<u8>,
    /// Bytes waiting in `queue`, bounded by `max_queue_bytes`.
    queued: Arc<QueueBytes>,
}

impl Pipe {
    fn new(
        sh: &Arc<Shared>,
        flow: u64,
        dir: Dir,
        out: impl Fn(&[u8], u8) + Send + Sync + 'static,
    ) -> Pipe {
        let spec = sh.spec(dir).clone();
        let remark = spec.remark_tos;
        let out: Arc<Out> = Arc::new(Box::new(out));
        let queued = Arc::new(QueueBytes::default());
        let queue = spec.delays().then(|| {
            let (tx, rx) = mpsc::channel::<(u64, Vec<u8>, u8)>();
            let (sh, out, queued) = (Arc::clone(sh), Arc::clone(&out), Arc::clone(&queued));
            std::thread::spawn(move || {
                for (at, d, tos) in rx {
                    sleep_until(&sh, at);
                    out(&d, tos);
                    queued.remove(d.len() as u64);
                }
            });
            tx
        });
        Pipe {
            imp: DatagramImpairer::new(spec, sh.seed(flow, dir), sh.now_ns())
                .with_bucket(sh.bucket(dir)),
            sh: Arc::clone(sh),
            flow,
            dir,
            held: None,
            out,
            queue,
            queued,
            remark,
        }
    }

    /// Sends now or queues for `at`; false when the delay line is full and
    /// the datagram was dropped (counted and logged as a queue drop).
    fn emit(&self, at: u64, d: &[u8], index: u64, tos: u8) -> bool {
        let tos = self.remark.unwrap_or(tos);
        let Some(q) = &self.queue else {
            (self.out)(d, tos);
            return true;
        };
        if !self
            .queued
            .try_add(d.len() as u64, self.sh.cfg.limits.max_queue_bytes)
        {
            let seq = Header::read(d).ok().map(|h| h.seq);
            self.sh.counts(self.dir).queue_dropped.fetch_add(1, SeqCst);
            self.log("queue_dropped", index, seq, None);
            return false;
        }
        let _ = q.send((at, d.to_vec(), tos));
        true
    }

    fn log(&self, event: &'static str, index: u64, seq: Option<u64>, offset: Option<u64>) {
        self.sh.event(Event {
            t_s: self.sh.t_s(),
            proto: "udp",
            flow: self.flow,
            dir: self.dir,
            event,
            index: Some(index),
            seq,
            offset,
        });
    }

    /// Impairs and forwards one datagram that arrived at `now` (relay
    /// clock) with TOS byte `tos` (0 where the kernel did not say).
    fn handle(&mut self, d: &mut [u8], now: u64, tos: Option<u8>) {
        let tos = tos.unwrap_or(0);
        let header = Header::read(d).ok();
        // netrig's setup handshake is not test traffic.
        if header.is_some_and(|h| h.flags & FLAG_HANDSHAKE != 0) {
            self.emit(now, d, self.imp.seen(), tos);
            return;
        }
        let seq = header.map(|h| h.seq);
        let protect = if header.is_some() { HEADER_LEN } else { 0 };
        let c = self.sh.counts(self.dir);
        c.datagrams.fetch_add(1, SeqCst);
        let index = self.imp.seen();
        match self.imp.decide(d.len(), protect, now) {
            Action::Drop(cause) => {
                let (counter, name) = match cause {
                    DropCause::Loss => (&c.lost, "lost"),
                    DropCause::Police => (&c.policed, "policed"),
                    DropCause::Queue => (&c.queue_dropped, "queue_dropped"),
                };
                counter.fetch_add(1, SeqCst);
                self.log(name, index, seq, None);
            }
            Action::Forward {
                at_ns,
                corrupt,
                duplicate,
                hold,
            } => {
                if let Some(o) = corrupt {
                    d[o] ^= 0x10;
                    c.corrupted.fetch_add(1, SeqCst);
                    self.log("corrupted", index, seq, Some(o as u64));
                }
                if hold && self.held.is_none() {
                    self.held = Some((d.to_vec(), index, tos));
                    return;
                }
                if self.emit(at_ns, d, index, tos) {
                    c.forwarded.fetch_add(1, SeqCst);
                }
                if let Some((h, hi, ht)) = self.held.take()
                    && self.emit(at_ns, &h, hi, ht)
                {
                    c.forwarded.fetch_add(1, SeqCst);
                    c.reordered.fetch_add(1, SeqCst);
                    let hs = Header::read(&h).ok().map(|h| h.seq);
                    self.log("reordered", hi, hs, None);
                }
                if duplicate && self.emit(at_ns, d, index, tos) {
                    c.duplicated.fetch_add(1, SeqCst);
                    self.log("duplicated", index, seq, None);
                }
            }
        }
    }

    /// Releases a held datagram in order.
    fn idle(&mut self) {
        if let Some((h, hi, ht)) = self.held.take()
            && self.emit(self.sh.now_ns(), &h, hi, ht)
        {
            self.sh.counts(self.dir).forwarded.fetch_add(1, SeqCst);
        }
    }
}
