//! Scale: a client holds thousands of concurrent verified connections on a
//! few threads and one descriptor each (issue 14). The full-size runs
//! (19,500 per process, 100,000 across processes) are `bench/scale.sh`.

#[path = "common/bin.rs"]
mod bin;
use bin::*;

/// The tests here each use up to 20,000 descriptors and most of a source
/// address's ports: one at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A tcp run of `n` connections against `target`, each sending two 32 KiB
/// bursts `period` apart, so all are open at once.
fn hold<'a>(target: &'a str, n: &'a str, period: &'a str) -> Vec<&'a str> {
    vec![
        "tcp",
        target,
        "-c",
        n,
        "--iterations",
        "1",
        "--transfer",
        "64K",
        "--burst-size",
        "32K",
        "--burst-period",
        period,
        "--interval",
        "100ms",
    ]
}

/// A server that admits `n` connections, from one address too.
fn serve_up_to(n: &str) -> (Proc, std::net::SocketAddr) {
    serve(&["-q", "--max-conns-per-client", n, "--max-conns", n])
}

/// A small test: 4 connections of 1 MiB from `from`.
fn normal_test<'a>(target: &'a str, from: &'a str) -> Vec<&'a str> {
    vec![
        "tcp",
        target,
        "-B",
        from,
        "-n",
        "1M",
        "-c",
        "2",
        "--iterations",
        "2",
        "-v",
        "0",
    ]
}

/// Whether a status row's In-Flight column (after two rates with their
/// units) shows all `n` connections at once.
fn all_in_flight(n: usize) -> impl FnMut(&str) -> bool {
    move |l| is_row(l) && l.split_whitespace().nth(5) == Some(&n.to_string())
}

#[test]
fn a_client_holds_thousands_of_connections_on_a_few_threads() {
    let _one = one_at_a_time();
    const N: usize = 2000;
    let (_srv, addr) = serve_up_to("3000");
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("t.json");
    let t = addr.to_string();
    // Two 32 KiB bursts 1.5 s apart: every connection stays open a while.
    let n = N.to_string();
    let mut args = hold(&t, &n, "1500ms");
    args.extend(["--json", js.to_str().unwrap()]);
    let (mut p, _) = spawn_ready(&args, all_in_flight(N), 30);
    let pid = p.0.id();
    let (th, fds) = (threads(pid), fd_count(pid));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("{N} connections in flight: client {th} threads, {fds} descriptors");
    // The connection loops (four per core, `net::data_loops`), the main
    // thread and the signal handler.
    assert!(th <= 4 * cores + 3, "{th} threads for {N} connections");
    // One descriptor per connection, plus control, stdio and epoll.
    assert!(fds <= N + 20, "{fds} descriptors for {N} connections");
    let status = wait_exit(&mut p, 60);
    assert_eq!(status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    let totals = &v["result"]["totals"];
    assert_eq!(totals["completed"], N, "{totals}");
    assert_eq!(totals["sent"], N * 65536, "{totals}");
    for k in ["net_errors", "data_errors", "cancelled"] {
        assert_eq!(totals[k], 0, "{k}: {totals}");
    }
}

/// 19,000 connections through one server process (this machine allows
/// 20,000 descriptors per process): the server holds them on a few threads
/// and still serves a normal test meanwhile, then lets go of them all.
#[test]
fn a_server_holds_19000_connections_on_a_few_threads_and_still_serves() {
    let _one = one_at_a_time();
    const N: usize = 19_000;
    let (srv, addr) = serve_up_to("20000");
    let spid = srv.0.id();
    let t = addr.to_string();
    let normal = normal_test(&t, "127.0.0.1");
    // Once served, everything the server keeps (event loops and all) is in the baseline.
    run_json(&normal, 0);
    let base_fds = fd_count(spid);
    let n = N.to_string();
    let (big, _) = spawn_ready(&hold(&t, &n, "60s"), all_in_flight(N), 60);
    let (th, fds) = (threads(spid), fd_count(spid));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("{N} connections held: server {th} threads, {fds} descriptors");
    // The loops (two per core, and up to two more per core for lasting
    // data connections), the acceptor, the main thread, the signal handler.
    assert!(
        th <= 4 * cores + 4,
        "{th} server threads for {N} connections"
    );
    assert!((N..=N + 30).contains(&fds), "{fds} server descriptors");
    // A normal test meanwhile, served in full.
    let (v, _) = run_json(&normal, 0);
    let totals = &v["result"]["totals"];
    assert_eq!(totals["completed"], 4, "{totals}");
    // Stopped: every connection is cancelled and the server lets go of all.
    let (code, _) = interrupt(big);
    assert_eq!(code, Some(130));
    let after = settles_to(spid, base_fds, 30);
    assert!(
        after <= base_fds,
        "server descriptors {after} > {base_fds} before"
    );
}

/// Holds idle connections to `port` from 127.0.A.1 for A in `first..first+count`,
/// `per` from each, until its stdin closes; prints how many it opened.
const IDLE_HOLDER: &str = r#"
import socket, sys
first, count, per, port = map(int, sys.argv[1:5])
held = []
for a in range(first, first + count):
    for _ in range(per):
        s = socket.socket()
        # The port is chosen at connect (IP_BIND_ADDRESS_NO_PORT), not held
        # from every other connection by bind.
        s.setsockopt(socket.SOL_IP, 24, 1)
        try:
            s.bind(("127.0.%d.1" % a, 0))
            s.connect(("127.0.0.1", port))
            held.append(s)
        except OSError:
            s.close()
print(len(held), flush=True)
sys.stdin.read()
"#;

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

/// Idle connections from 32 addresses, more than the server's descriptors:
/// it holds at most its share of silent connections (closing the oldest) on
/// a few threads without spinning, and a client that says hello at once is
/// served meanwhile and after.
#[test]
fn idle_connections_from_32_addresses_past_the_descriptor_limit_keep_no_one_out() {
    let _one = one_at_a_time();
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let (srv, addr) = serve(&["-q", "--max-conns-per-client", "1000"]);
    let spid = srv.0.id();
    let t = addr.to_string();
    let normal = normal_test(&t, "127.0.0.250");
    run_json(&normal, 0);
    let base_fds = fd_count(spid);
    let base_th = threads(spid);
    // Two holders (each process may open 20,000 descriptors): 32 addresses
    // x 650 = 20,800 connections, more than the server's descriptors.
    let holders: Vec<_> = [(1, 16), (17, 16)]
        .iter()
        .map(|(first, count)| {
            let mut c = Command::new("python3")
                .args([
                    "-c",
                    IDLE_HOLDER,
                    &first.to_string(),
                    &count.to_string(),
                    "650",
                ])
                .arg(addr.port().to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3");
            let mut line = String::new();
            std::io::BufReader::new(c.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            eprintln!("holder opened {}", line.trim());
            c
        })
        .collect();
    // Silent connections are held apart from --max-conns: at most an
    // eighth of it (the open-file limit, 20,000 here, less 256), the oldest
    // closed as newer ones come.
    let fd_limit = std::fs::read_to_string(format!("/proc/{spid}/limits"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<usize>().ok())
        .unwrap_or(20_000);
    let cap = base_fds + (fd_limit - 256) / 8 + 64;
    // Silent for 2 s, the oldest are closed down to the loops' share.
    let fds = settles_to(spid, cap, 15);
    let th = threads(spid);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("server: {th} threads, {fds} descriptors");
    // Idle connections add no thread: those the normal test left (two
    // loops per core and any it added for its data, the main thread, the
    // signal handler) are all there are.
    assert!(
        th <= base_th && th <= 4 * cores + 4,
        "{th} threads ({base_th} before)"
    );
    assert!(fds <= cap, "{fds} descriptors");
    // Not spinning at its limit.
    let before = cpu_ticks(spid);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let used = cpu_ticks(spid) - before;
    assert!(
        used < 30,
        "server used {used} ticks in 1 s holding idle connections"
    );
    // Another address is served while they are all connected.
    let (v, _) = run_json(&normal, 0);
    assert_eq!(v["result"]["totals"]["completed"], 4);
    for mut h in holders {
        drop(h.stdin.take());
        let _ = h.wait();
    }
    let after = settles_to(spid, base_fds, 30);
    assert!(
        after <= base_fds,
        "{after} descriptors after, {base_fds} before"
    );
    let (v, _) = run_json(&normal, 0);
    assert_eq!(v["result"]["totals"]["completed"], 4);
}

/// The client raises its open-file limit to the hard limit, and says before
/// the test, naming the limit and the fix, when that is still too few.
#[test]
fn too_few_open_files_for_the_connections_is_said_before_the_test() {
    let with_limit = |soft_hard: &str, args: &[&str]| {
        let out = std::process::Command::new("prlimit")
            .arg(format!("--nofile={soft_hard}"))
            .arg(BIN)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = with_limit("100:100", &["tcp", "127.0.0.1:9", "-P", "200"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("-P 200 needs about 264 open files and this process may open 100")
            && err.contains("ulimit -Hn"),
        "{err}"
    );
    // A soft limit below the hard one is raised: 200 connections and the
    // embedded server's 200 fit 1000.
    let (code, err) = with_limit("100:1000", &["tcp", "-P", "200", "-n", "1K", "-q"]);
    assert_eq!(code, Some(0), "{err}");
}

/// Abuse from one address: 10,000 connections from 127.0.9.1, most idle,
/// some with half a hello, some trickling a byte a second. The server
/// holds its per-address share (256 by default) and refuses the rest,
/// naming the limit; a normal test from another address meanwhile takes
/// no more than a second longer than without them; memory stays bounded.
#[test]
fn ten_thousand_connections_from_one_address_do_not_hold_up_another() {
    use netrig::protocol::proto::{self, ErrorCode, Message};
    use socket2::{Domain, Socket, Type};
    use std::io::Write;
    use std::time::{Duration, Instant};
    let _one = one_at_a_time();
    let (mut srv, addr) = serve(&["-q"]);
    let spid = srv.0.id();
    let t = addr.to_string();
    let normal = normal_test(&t, "127.0.0.250");
    let t0 = Instant::now();
    run_json(&normal, 0);
    let alone = t0.elapsed();
    let rss = rss_kib(spid);
    let from: std::net::SocketAddr = "127.0.9.1:0".parse().unwrap();
    let hello = proto::encode(&Message::Hello(Message::hello()));
    let mut held = Vec::new();
    for k in 0..10_000 {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.bind(&from.into()).unwrap();
        s.connect(&addr.into()).unwrap();
        let mut s = std::net::TcpStream::from(s);
        if k % 10 == 1 {
            // Half a hello, never finished.
            let _ = s.write_all(&hello[..hello.len() / 2]);
        }
        held.push(s);
    }
    // Trickling: a byte of a hello a second on 20 of the held ones.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle: Vec<std::net::TcpStream> = held[..200]
        .iter()
        .step_by(10)
        .map(|s| s.try_clone().unwrap())
        .collect();
    let stop2 = std::sync::Arc::clone(&stop);
    let h = std::thread::spawn(move || {
        let mut trickle = trickle;
        let mut i = 0;
        while !stop2.load(std::sync::atomic::Ordering::SeqCst) && i < hello.len() {
            for s in &mut trickle {
                let _ = s.write_all(&hello[i..i + 1]);
            }
            i += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    // The last ones were refused with the reason.
    for s in held.iter_mut().rev().take(20) {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        match proto::read_message(s) {
            Ok(Message::Error { code, message }) => {
                assert_eq!(code, ErrorCode::LimitConnectionsPerClient, "{message}");
                assert!(
                    message.contains("max 256 connections per client address"),
                    "{message}"
                )
            }
            other => panic!("not refused: {other:?}"),
        }
    }
    // A normal test from another address, a second slower at most (the
    // machine is shared: three tries).
    let mut took = Duration::MAX;
    for _ in 0..3 {
        let t1 = Instant::now();
        let (v, _) = run_json(&normal, 0);
        assert_eq!(v["result"]["totals"]["completed"], 4);
        took = took.min(t1.elapsed());
        if took <= alone + Duration::from_secs(1) {
            break;
        }
    }
    eprintln!("normal test alone {alone:?}, beside 10,000 abusive connections {took:?}");
    assert!(
        took <= alone + Duration::from_secs(1),
        "{took:?} vs {alone:?}"
    );
    let grown = rss_kib(spid).saturating_sub(rss);
    eprintln!("server RSS grew by {grown} KiB");
    assert!(grown < 64 * 1024, "server RSS grew by {grown} KiB");
    assert!(srv.0.try_wait().unwrap().is_none(), "server died");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    h.join().unwrap();
}

/// Holding idle connections costs the processes (almost) nothing (issue
/// 27): each connection's idle deadline is its one timer entry, not a
/// look at every connection on every tick, and an idle connection's
/// TCP_INFO is not read. 10,000 connections waiting a minute for their next
/// burst: over a few seconds of holding, server and client each use under
/// 3 % of one core (the server once used ~10 % here in release, far more in
/// a debug build, scanning them every 20 ms). CPU time, not wall time: the
/// best of three windows counts, so another process's load does not fail it.
#[test]
fn holding_ten_thousand_idle_connections_costs_almost_no_cpu() {
    let _one = one_at_a_time();
    const N: usize = 10_000;
    let (srv, addr) = serve_up_to("12000");
    let spid = srv.0.id();
    let t = addr.to_string();
    let n = N.to_string();
    let (big, _) = spawn_ready(&hold(&t, &n, "60s"), all_in_flight(N), 60);
    let cpid = big.0.id();
    // The connections that moved (their first burst) have their TCP_INFO
    // read at a bounded rate: 10,000 take 5 s at 2,000 a second, so the
    // first two windows may see that work; the last three are past it, as
    // before (they were the three windows after a 6 s wait).
    let hz = 100;
    let secs = 3;
    let mut best = (u64::MAX, u64::MAX);
    for _ in 0..5 {
        let (s0, c0) = (cpu_ticks(spid), cpu_ticks(cpid));
        std::thread::sleep(std::time::Duration::from_secs(secs));
        let (s, c) = (cpu_ticks(spid) - s0, cpu_ticks(cpid) - c0);
        eprintln!("holding {N} idle connections for {secs} s: server {s} ticks, client {c}");
        best = (best.0.min(s), best.1.min(c));
        if best.0 * 100 < 3 * hz * secs && best.1 * 100 < 3 * hz * secs {
            break;
        }
    }
    let (s, c) = best;
    assert!(
        s * 100 < 3 * hz * secs,
        "server used {s} ticks in {secs} s holding {N} idle connections"
    );
    assert!(
        c * 100 < 3 * hz * secs,
        "client used {c} ticks in {secs} s holding {N} idle connections"
    );
    let (code, _) = interrupt(big);
    assert_eq!(code, Some(130));
}

/// Copies what arrives on `a` to `b` and the other way, each direction on
/// its own thread, passing a close on as a shutdown.
fn pipe(a: std::net::TcpStream, b: std::net::TcpStream) {
    for (mut from, mut to) in [(a.try_clone().unwrap(), b.try_clone().unwrap()), (b, a)] {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    }
}

/// A front the test stands behind: a listener whose accepted connections
/// come to the test in order, for it to forward or hold.
fn front() -> (String, std::sync::mpsc::Receiver<std::net::TcpStream>) {
    let front = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = front.local_addr().unwrap().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in front.incoming() {
            if s.map(|s| tx.send(s)).is_err() {
                return;
            }
        }
    });
    (at, rx)
}

/// A `tcp` client of `count` 64 KiB connections to `targets` in one
/// iteration under `--throttle`, writing its JSON report.
struct Throttled {
    client: Proc,
    _dir: tempfile::TempDir,
    js: std::path::PathBuf,
}

impl Throttled {
    fn spawn(targets: &[&str], count: usize, throttle: usize) -> Throttled {
        let dir = tempfile::tempdir().unwrap();
        let js = dir.path().join("t.json");
        let (c, th) = (count.to_string(), throttle.to_string());
        let mut args = vec!["tcp"];
        args.extend_from_slice(targets);
        let rest = [
            "-c",
            &c,
            "--iterations",
            "1",
            "-n",
            "64K",
            "--throttle",
            &th,
            "-q",
        ];
        args.extend_from_slice(&rest);
        args.extend_from_slice(&["--json", js.to_str().unwrap()]);
        let client = Proc(netrig(&args).spawn().unwrap());
        Throttled {
            client,
            _dir: dir,
            js,
        }
    }

    /// Waits for the client to succeed and returns its report's totals.
    fn totals(&mut self) -> serde_json::Value {
        assert_eq!(wait_exit(&mut self.client, 60).code(), Some(0));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&self.js).unwrap()).unwrap();
        v["result"]["totals"].clone()
    }
}

/// A server that answers nothing for a while (a CPU-starved one, at its
/// worst): the client holds at most `--throttle` connections waiting for
/// their data hello's answer, and opens the next ones only as those are
/// answered (it once opened every connection at once, and on a starved
/// machine the last ones waited past the idle timeout: bench/scale.sh's
/// 500,000). A front forwards the control connection at once and holds
/// the data connections unanswered until it has seen the throttle's worth;
/// no more arrive meanwhile; then it forwards them all, and every
/// connection completes.
#[test]
fn a_client_waiting_on_a_stalled_server_opens_no_more_than_its_throttle() {
    use std::net::TcpStream;
    use std::time::Duration;
    const N: usize = 120;
    const THROTTLE: usize = 10;
    let (_srv, addr) = serve(&["-q"]);
    let (t, rx) = front();
    let mut client = Throttled::spawn(&[&t], N, THROTTLE);
    let forward = |s: TcpStream| pipe(s, TcpStream::connect(addr).unwrap());
    // The control connection comes first and is answered.
    forward(rx.recv_timeout(Duration::from_secs(30)).unwrap());
    let held: Vec<TcpStream> = (0..THROTTLE)
        .map(|_| rx.recv_timeout(Duration::from_secs(30)).unwrap())
        .collect();
    // None answered: no further connection is opened (all N were at once).
    let more = rx.recv_timeout(Duration::from_millis(500));
    assert!(
        more.is_err(),
        "a connection past --throttle {THROTTLE} opened while none was answered"
    );
    held.into_iter().for_each(forward);
    let mut opened = 1 + THROTTLE;
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while opened < N + 1 && std::time::Instant::now() < until {
        if let Ok(s) = rx.recv_timeout(Duration::from_millis(100)) {
            forward(s);
            opened += 1;
        }
    }
    let totals = client.totals();
    assert_eq!(totals["completed"], N, "{totals}");
    assert_eq!(totals["net_errors"], 0, "{totals}");
}

/// Two servers, one stalled (its data connections held unanswered, as a
/// starved server's listen queue holds them): the client goes on opening
/// the other server's connections. Each server's connections hold at most
/// its share of the `--throttle` places (the throttle over the servers),
/// so the stalled one's cannot take them all. Once every place gathered on
/// the slowest server, and at 1,000,000 connections over 60 + 60 processes
/// (bench/scale.sh) its listen queue overflowed and connects timed out.
#[test]
fn a_client_with_a_stalled_server_still_opens_on_the_other() {
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::{Duration, Instant};
    const PER_SERVER: usize = 100;
    const THROTTLE: usize = 40;
    let (_srv, addr) = serve(&["-q"]);
    // The stalled front: its connections come to this thread, which
    // forwards the control connection and holds the rest.
    let (a, rx) = front();
    // The live front forwards every connection at once, and counts them.
    let live = TcpListener::bind("127.0.0.1:0").unwrap();
    let b = live.local_addr().unwrap().to_string();
    let through = Arc::new(AtomicUsize::new(0));
    let n = Arc::clone(&through);
    std::thread::spawn(move || {
        for s in live.incoming() {
            let Ok(s) = s else { return };
            pipe(s, TcpStream::connect(addr).unwrap());
            n.fetch_add(1, SeqCst);
        }
    });
    let mut client = Throttled::spawn(&[&a, &b], 2 * PER_SERVER, THROTTLE);
    let forward = move |s: TcpStream| pipe(s, TcpStream::connect(addr).unwrap());
    forward(rx.recv_timeout(Duration::from_secs(30)).unwrap());
    // Every one of the live server's connections (and its control
    // connection) while the stalled one's wait.
    let until = Instant::now() + Duration::from_secs(30);
    while through.load(SeqCst) < 1 + PER_SERVER && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut held: Vec<TcpStream> = rx.try_iter().collect();
    assert_eq!(
        through.load(SeqCst),
        1 + PER_SERVER,
        "the live server's connections waited behind the stalled one's ({} held there)",
        held.len()
    );
    assert!(
        held.len() <= THROTTLE / 2,
        "{} connections wait on the stalled server, over its share of --throttle {THROTTLE}",
        held.len()
    );
    // Then the stalled server's connections go through, the rest as they come.
    held.drain(..).for_each(forward);
    std::thread::spawn(move || rx.into_iter().for_each(forward));
    let totals = client.totals();
    assert_eq!(totals["completed"], 2 * PER_SERVER, "{totals}");
    assert_eq!(totals["net_errors"], 0, "{totals}");
}

/// Sends `sig` (STOP, CONT) to process `pid`.
fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{sig} {pid}");
}

/// Loop 0 accepts at most a budget of connections a turn, so that a flood
/// of connections cannot hold its other connections back; what waits in the
/// listen queue past the budget is accepted on the next turns, with no new
/// event from the listener (epoll is edge-triggered). Here 600 connections
/// and their hellos queue while the server is stopped; once it runs again,
/// every hello is answered.
#[test]
fn connections_queued_past_the_accept_budget_are_all_accepted() {
    use netrig::protocol::proto::{self, Message};
    use std::net::TcpStream;
    use std::time::Duration;
    let _one = one_at_a_time();
    const N: usize = 600;
    let (srv, addr) = serve(&["-q", "--max-conns-per-client", "1000"]);
    let spid = srv.0.id();
    signal(spid, "STOP");
    let mut conns: Vec<TcpStream> = (0..N)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            proto::write_message(&mut s, &Message::Hello(Message::hello())).unwrap();
            s
        })
        .collect();
    signal(spid, "CONT");
    // One deadline for all: a connection never accepted fails the test in
    // 20 s, not 10 s each.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut unanswered = 0;
    for s in &mut conns {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        if !matches!(proto::read_message(s), Ok(Message::HelloAck(_))) {
            unanswered += 1;
        }
    }
    assert_eq!(
        unanswered, 0,
        "of {N} queued connections, {unanswered} got no answer"
    );
}

/// A server starved of CPU past its handshake timeout (stopped: the worst
/// case) while the hellos of thousands of accepted connections arrive:
/// every setup deadline comes due with its hello already in the socket, and
/// the loop looks at the socket once more before it closes the connection.
/// It once closed them unread: all 6,000 here (a poll resumed after a stop
/// returns EINTR with no readiness, and the timers ran first), and past
/// the 1,024 readiness reports a poll returns, those of a loop's wake-up
/// beyond them. Every connection gets its answer (a refusal: the session
/// is unknown), none is closed silently.
#[test]
fn a_server_starved_past_its_handshake_timeout_still_reads_the_hellos_waiting() {
    use netrig::protocol::proto::{self, ErrorCode, Message};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};
    let _one = one_at_a_time();
    const N: usize = 6000;
    let (srv, addr) = serve(&[
        "-q",
        "--handshake-timeout",
        "1s",
        "--max-conns",
        "100000",
        "--max-conns-per-client",
        "10000",
    ]);
    let spid = srv.0.id();
    let base = fd_count(spid);
    let mut conns: Vec<TcpStream> = (0..N).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // All accepted (each a descriptor of the server) and waiting for a hello.
    let t0 = Instant::now();
    while fd_count(spid) < base + N {
        assert!(t0.elapsed() < Duration::from_secs(30), "not all accepted");
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(spid, "STOP");
    let stopped = Instant::now();
    for s in &mut conns {
        let hello = Message::DataHello(proto::DataHello {
            session: uuid::Uuid::new_v4(),
            connection: uuid::Uuid::new_v4(),
            buffer: 65536,
            compact: false,
            proof: None,
        });
        proto::write_message(s, &hello).unwrap();
    }
    // Starved past every setup deadline (1 s from its accept).
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(stopped.elapsed()));
    signal(spid, "CONT");
    let mut unanswered = 0;
    for s in &mut conns {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        match proto::read_message(s) {
            Ok(Message::Error { code, message }) => {
                assert_eq!(code, ErrorCode::UnknownSession, "{message}");
                assert!(message.contains("unknown session"), "{message}")
            }
            _ => unanswered += 1,
        }
    }
    assert_eq!(
        unanswered, 0,
        "of {N} hellos waiting, {unanswered} got no answer"
    );
}
