//! rr over TCP on the server's event loops (issue 27, items 2 and 4): many
//! concurrent sessions from several addresses are answered exactly on a
//! bounded number of threads, and sessions with 16 MiB requests do not
//! slow a legit crr or rr beside them past twice their time alone. Each
//! test runs a real `netrig serve` on loopback and speaks rr by hand where
//! a real client would spend a thread or a process per session.

#[path = "common/bin.rs"]
mod bin;
#[path = "common/timing.rs"]
mod timing;

use bin::*;
use netrig::protocol::pattern::{Direction, Pattern, stream_start};
use netrig::protocol::proto::{self, Message, RrProto, RrSpec, SessionSummary, TestSpec};
use netrig::rr::serve::write_pattern;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use timing::{best_of, timed};

/// This file's tests one at a time: two of them time clients against the
/// same clients alone, which another test's 2,000 sessions would skew.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn spec(size: u32, reply: u32, iterations: u64) -> RrSpec {
    RrSpec::plain(RrProto::Tcp, size, reply, iterations)
}

/// One rr-over-TCP session spoken by hand from `from`.
struct Session {
    s: TcpStream,
    session: uuid::Uuid,
    spec: RrSpec,
    seq: u64,
}

impl Session {
    fn open(addr: SocketAddr, from: IpAddr, spec: RrSpec) -> Session {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        netrig::net::bind_local(&sock, addr, Some(from), None).unwrap();
        sock.connect(&addr.into()).unwrap();
        let mut s: TcpStream = sock.into();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        proto::write_message(&mut s, &Message::Hello(Message::hello())).unwrap();
        let ack = proto::read_message(&mut s);
        assert!(matches!(ack, Ok(Message::HelloAck(_))), "{ack:?}");
        let req = Message::TestRequest {
            test: TestSpec::Rr(spec.clone()),
        };
        proto::write_message(&mut s, &req).unwrap();
        let accept = proto::read_message(&mut s);
        let Ok(Message::TestAccept { session }) = accept else {
            panic!("from {from}: not accepted: {accept:?}")
        };
        Session {
            s,
            session,
            spec,
            seq: 0,
        }
    }

    /// Sends the next request and reads its reply: whether the reply is
    /// the pattern.
    fn exchange(&mut self) -> bool {
        let (size, reply) = (self.spec.size as u64, self.spec.reply as usize);
        let start = stream_start(self.session, Direction::ClientToServer);
        let mut req = Vec::new();
        write_pattern(&mut req, start, self.seq * size, size as usize).unwrap();
        self.s.write_all(&req).unwrap();
        let mut rep = vec![0u8; reply];
        self.s.read_exact(&mut rep).unwrap();
        let start = stream_start(self.session, Direction::ServerToClient);
        let ok = Pattern::get()
            .verify(start, self.seq * reply as u64, &rep)
            .is_ok();
        self.seq += 1;
        ok
    }

    fn goodbye(&mut self) -> SessionSummary {
        proto::write_message(&mut self.s, &Message::Goodbye).unwrap();
        match proto::read_message(&mut self.s) {
            Ok(Message::Summary(s)) => s,
            other => panic!("no summary: {other:?}"),
        }
    }
}

/// A client that writes many requests at once (as a pipelining one does)
/// has them queued together at the server, which reads more than one
/// request's bytes at a time and stops reading when a read comes back
/// short (the socket is drained: another read would only say it would
/// block, a system call per round trip). Every request is still answered
/// exactly once, in order, whether the burst arrives in one piece or
/// split across requests, and a request that arrives after the server
/// found the socket drained is read on its readiness.
#[test]
fn requests_queued_together_are_each_answered_once_in_order() {
    let _one = alone();
    let (_srv, addr) = serve(&["-q"]);
    let from: IpAddr = "127.0.0.1".parse().unwrap();
    for (size, reply) in [(64u32, 64u32), (100, 7), (16384, 16384), (1, 3000)] {
        let n = 200u64;
        let mut s = Session::open(addr, from, spec(size, reply, n));
        let start = stream_start(s.session, Direction::ClientToServer);
        let mut reqs = Vec::new();
        write_pattern(&mut reqs, start, 0, (size as u64 * n) as usize).unwrap();
        // Half the requests in one write, then, once their replies are
        // back, the rest in pieces cut across requests; written from a
        // thread of their own, so that replies the client does not read yet
        // cannot stop the writes.
        let mut w = s.s.try_clone().unwrap();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            let half = reqs.len() / 2;
            w.write_all(&reqs[..half]).unwrap();
            wait.recv().unwrap();
            for piece in reqs[half..].chunks(size as usize / 2 + 3) {
                w.write_all(piece).unwrap();
            }
        });
        let reply_start = stream_start(s.session, Direction::ServerToClient);
        let mut rep = vec![0u8; reply as usize * (n as usize / 2)];
        s.s.read_exact(&mut rep).unwrap();
        assert!(
            Pattern::get().verify(reply_start, 0, &rep).is_ok(),
            "{size} B"
        );
        go.send(()).unwrap();
        s.s.read_exact(&mut rep).unwrap();
        let at = reply as u64 * (n / 2);
        assert!(
            Pattern::get().verify(reply_start, at, &rep).is_ok(),
            "{size} B"
        );
        writer.join().unwrap();
        let sum = s.goodbye();
        assert_eq!((sum.requests, sum.data_errors), (n, 0), "{size} B");
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn two_thousand_concurrent_rr_tcp_sessions_are_answered_exactly_on_few_threads() {
    let _one = alone();
    // Issue 27: each rr-over-TCP session had a thread of its own; 2,000
    // concurrent ones were 2,000 threads (16k of them aborted the server).
    const FROM: usize = 8;
    const EACH: usize = 250;
    const ROUNDS: u64 = 3;
    let per = EACH.to_string();
    let all = (FROM * EACH).to_string();
    let (srv, addr) = serve(&[
        "-q",
        "--max-tests",
        &all,
        "--max-tests-per-client",
        &per,
        "--max-conns-per-client",
        &per,
    ]);
    let pid = srv.0.id();
    let idle_threads = threads(pid);
    // Each address opens its sessions, all are open at once, then each
    // answers its rounds, round-robin over its sessions.
    let opened = Arc::new(Barrier::new(FROM + 1));
    let measured = Arc::new(Barrier::new(FROM + 1));
    let workers: Vec<_> = (0..FROM)
        .map(|i| {
            let (opened, measured) = (Arc::clone(&opened), Arc::clone(&measured));
            std::thread::spawn(move || {
                // Different /24s: the per-network caps are not the point.
                let from: IpAddr = format!("127.0.{}.2", i + 1).parse().unwrap();
                // Odd sizes and a reply larger than a request. A session
                // refused (a place in the address's count lost on the way,
                // as once when a connection moved between loops) fails the
                // test after the barriers, rather than leaving the others
                // waiting on them for ever.
                let open = std::panic::catch_unwind(|| {
                    (0..EACH)
                        .map(|k| Session::open(addr, from, spec(100 + k as u32, 3000, ROUNDS)))
                        .collect::<Vec<Session>>()
                });
                opened.wait();
                measured.wait();
                let mut ss = open.unwrap_or_else(|e| std::panic::resume_unwind(e));
                let mut bad = 0;
                for _ in 0..ROUNDS {
                    for s in &mut ss {
                        bad += u64::from(!s.exchange());
                    }
                }
                let sums: Vec<SessionSummary> = ss.iter_mut().map(Session::goodbye).collect();
                (bad, sums)
            })
        })
        .collect();
    opened.wait();
    let busy_threads = threads(pid);
    eprintln!(
        "{busy_threads} server threads with {} sessions open ({idle_threads} idle)",
        FROM * EACH
    );
    measured.wait();
    let mut sessions = 0;
    for w in workers {
        let (bad, sums) = w.join().unwrap();
        assert_eq!(bad, 0, "replies that were not the pattern");
        for s in sums {
            assert_eq!((s.requests, s.data_errors), (ROUNDS, 0), "{s:?}");
            sessions += 1;
        }
    }
    assert_eq!(sessions, FROM * EACH);
    // The loops (two per core) and a few service threads, however many
    // sessions: the old server had one more thread per session.
    let bound = 2 * cores() + 8;
    assert!(
        busy_threads <= bound,
        "{busy_threads} server threads with {} sessions open ({idle_threads} idle; bound {bound})",
        FROM * EACH
    );
}

/// Sessions each from its own address, sending requests (of zeros:
/// corrupt, still answered) and reading replies as fast as loopback lets
/// them, `pace` bytes a second each way: 16 MiB requests and replies, or
/// one-byte ones pipelined without pacing.
struct Huge {
    stop: Arc<AtomicBool>,
    moved: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Huge {
    fn start(addr: SocketAddr, n: usize, pace: u64) -> Huge {
        let big = 16 << 20;
        Huge::sessions(addr, n, spec(big, big, 100_000), pace)
    }

    fn sessions(addr: SocketAddr, n: usize, spec: RrSpec, pace: u64) -> Huge {
        let stop = Arc::new(AtomicBool::new(false));
        let moved = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for i in 0..n {
            let from: IpAddr = format!("127.0.9.{}", i + 2).parse().unwrap();
            let s = Session::open(addr, from, spec.clone());
            let mut w = s.s.try_clone().unwrap();
            let mut r = s.s;
            let (stop_w, stop_r) = (Arc::clone(&stop), Arc::clone(&stop));
            let moved = Arc::clone(&moved);
            threads.push(std::thread::spawn(move || {
                let chunk = vec![0u8; 1 << 20];
                let t0 = Instant::now();
                let mut sent = 0u64;
                while !stop_w.load(Relaxed) {
                    let allowed = (t0.elapsed().as_secs_f64() * pace as f64) as u64;
                    if sent + chunk.len() as u64 > allowed {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    match w.write(&chunk) {
                        Ok(n) if n > 0 => sent += n as u64,
                        _ => return,
                    }
                }
                let _ = w.shutdown(std::net::Shutdown::Both);
            }));
            threads.push(std::thread::spawn(move || {
                let _ = r.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = vec![0u8; 1 << 20];
                while !stop_r.load(Relaxed) {
                    match r.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => {
                            moved.fetch_add(n as u64, Relaxed);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => return,
                    }
                }
                // Its writer may be blocked on a full socket that the
                // server no longer empties.
                let _ = r.shutdown(std::net::Shutdown::Both);
            }));
        }
        Huge {
            stop,
            moved,
            threads,
        }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        self.moved.load(Relaxed)
    }
}

#[test]
fn sixteen_mib_requests_do_not_hold_the_loops_from_crr_and_rr() {
    let _one = alone();
    // Issue 27, item 4: a session served without a budget per wake-up
    // holds its loop while its client keeps up; every connection on that
    // loop (and accepting, on loop 0) waits.
    let (_srv, addr) = serve(&["-q"]);
    let a = addr.to_string();
    let crr = ["crr", &a, "-n", "3000", "-q"];
    let rr = ["rr", &a, "-n", "5000", "--warmup", "0", "-q"];
    let crr_alone = best_of(3, &crr);
    let rr_alone = best_of(3, &rr);
    // One per loop, more or less (two per core); each moves 64 MiB/s each
    // way: far more than a loop moves between two of crr's round trips.
    let huge = Huge::start(addr, 2 * cores(), 64 << 20);
    let mut tries = Vec::new();
    let mut passed = false;
    // Five tries: a shared 2-core machine once failed all of three.
    for _ in 0..5 {
        let c = timed(&crr);
        let r = timed(&rr);
        let ok = matches!((&c, &r), (Ok(c), Ok(r)) if *c <= crr_alone * 2 && *r <= rr_alone * 2);
        tries.push((c, r));
        if ok {
            passed = true;
            break;
        }
    }
    let moved = huge.stop();
    // They were answered, not starved in turn.
    assert!(
        moved >= 16 << 20,
        "the huge sessions got {moved} reply bytes"
    );
    assert!(
        passed,
        "alone crr {crr_alone:?} rr {rr_alone:?}; beside huge requests: {tries:?} \
         ({moved} reply bytes to them)"
    );
}

#[test]
fn pipelined_one_byte_requests_do_not_hold_the_loops_from_crr_and_rr() {
    let _one = alone();
    // Issue 27, item 4: a client that writes megabytes of one-byte
    // requests at once and reads the replies as they come never lets its
    // session's socket run dry, so a turn that lasts until the socket would
    // block lasts for ever, and every connection on that loop (and
    // accepting, on loop 0) waits; only the budget per wake-up ends it.
    let (_srv, addr) = serve(&["-q"]);
    let a = addr.to_string();
    let crr = ["crr", &a, "-n", "200", "-q"];
    let rr = ["rr", &a, "-n", "2000", "--warmup", "0", "-q"];
    let crr_alone = best_of(3, &crr);
    let rr_alone = best_of(3, &rr);
    // One per loop (two per core), unpaced: each writes 1 MiB of requests
    // at a time, megabytes ahead of what its loop answers.
    let flood = Huge::sessions(addr, 2 * cores(), spec(1, 1, 1 << 40), u64::MAX);
    // Generous: four loops that always have work and eight client threads
    // share two cores with the victims (measured 6-47x their time alone
    // with the budget). Without it the victims get no answer at all ("no
    // reply to hello within 3s"), however often they try.
    const SLOWER: u32 = 50;
    let mut tries = Vec::new();
    let mut passed = false;
    for _ in 0..5 {
        let c = timed(&crr);
        let r = timed(&rr);
        let ok = match (&c, &r) {
            (Ok(c), Ok(r)) => *c <= crr_alone * SLOWER && *r <= rr_alone * SLOWER,
            _ => false,
        };
        tries.push((c, r));
        if ok {
            passed = true;
            break;
        }
    }
    let moved = flood.stop();
    eprintln!("alone crr {crr_alone:?} rr {rr_alone:?}; beside: {tries:?}; {moved} replies");
    assert!(
        moved >= 1 << 16,
        "the pipelining sessions got {moved} replies"
    );
    assert!(
        passed,
        "alone crr {crr_alone:?} rr {rr_alone:?}; beside pipelined one-byte requests: \
         {tries:?} ({moved} replies to them)"
    );
}
