//! Running the `netrig` binary from tests: a server process, descriptor and
//! memory readings, signals, and JSON results.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_netrig");

pub fn netrig(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args);
    c
}

/// A child process killed on drop.
pub struct Proc(pub Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port free now, and never handed to another test of this process: the
/// kernel may give a just-released port to the next bind, and two servers
/// told the same port leave one test talking to the other's server (CI saw
/// a client refused once the other test's server was gone).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// A loopback port where connections are refused for as long as the
/// returned socket lives: it is bound and never listens, so no other test's
/// `bind(:0)` can be handed the port meanwhile (a port merely free now can
/// be, and a "refused" target would then answer).
pub fn refused_port() -> (socket2::Socket, u16) {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    s.bind(&any.into()).unwrap();
    let port = s.local_addr().unwrap().as_socket().unwrap().port();
    (s, port)
}

/// A peer tool's server (iperf3 -s, iperf -s) started by `make(port)` on a
/// free loopback port, once *that process* listens there. Peers cannot bind
/// port 0 and name it, so between [`free_port`] and their bind another test's
/// `serve --listen :0` may be handed the same port: a plain "is something
/// listening" check then passes on the other server while the peer exits with
/// "Address already in use" (CI saw this). The listener's socket is looked up
/// among the child's own descriptors, and a lost port is tried again.
pub fn peer_listening(what: &str, make: impl Fn(u16) -> Command) -> (Proc, u16) {
    for _ in 0..20 {
        let port = free_port();
        let mut child = Proc(make(port).spawn().unwrap());
        let t0 = Instant::now();
        loop {
            if child.0.try_wait().unwrap().is_some() {
                break; // lost the port: try another
            }
            if listens_on(child.0.id(), port) {
                return (child, port);
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{what} did not listen on port {port}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    panic!("{what} lost its port to another bind 20 times");
}

/// Whether process `pid` holds a TCP socket listening on `port` (IPv4 or
/// IPv6), read from /proc: the listening sockets' inodes against the
/// process's descriptors.
pub fn listens_on(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    let Some(mine) = socket_inodes(pid) else {
        return false;
    };
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                f.len() > 9
                    && f[1].ends_with(&want)
                    && f[3] == "0A"
                    && mine.contains(&f[9].to_string())
            })
        })
    })
}

/// The inodes of process `pid`'s sockets, from its descriptors' links
/// (`socket:[INODE]`), or None if they cannot be read.
pub fn socket_inodes(pid: u32) -> Option<Vec<String>> {
    let inodes = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().to_string();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    Some(inodes)
}

/// Starts `netrig serve` on loopback and returns once it listens. The
/// server picks its own port (`:0`) and names it on its first line, so no
/// other process can take the port between choosing and binding it.
pub fn serve(extra: &[&str]) -> (Proc, SocketAddr) {
    let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    serve_cmd(netrig(&args))
}

/// [`serve`] for a command set up by the caller (e.g. under `prlimit`); it
/// must listen on port 0.
pub fn serve_cmd(mut cmd: Command) -> (Proc, SocketAddr) {
    let mut child = Proc(cmd.stdout(Stdio::piped()).spawn().unwrap());
    let mut out = child.0.stdout.take().unwrap();
    let first = first_line(&mut out, "server");
    // Drained, so a verbose server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, listening_on(&first, " listening on "))
}

/// The first line a child prints, read a byte at a time so nothing after it
/// is taken from the pipe.
fn first_line(out: &mut impl std::io::Read, what: &str) -> String {
    let mut line = Vec::new();
    let mut b = [0u8];
    while out.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    assert!(!line.is_empty(), "{what} did not start");
    String::from_utf8_lossy(&line).into_owned()
}

/// The address after `after` in a start-up line.
fn listening_on(line: &str, after: &str) -> SocketAddr {
    let rest = line.split_once(after).map_or("", |(_, r)| r);
    let addr = rest.split_whitespace().next().unwrap_or("");
    addr.parse()
        .unwrap_or_else(|_| panic!("no address in start-up line {line:?}"))
}

/// Waits until something accepts connections at `addr` (a connection closed
/// without a word is dropped silently by a server or relay).
pub fn wait_listening(addr: SocketAddr, what: &str) {
    let t0 = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{what} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A valid UDP test spec: 1000-byte datagrams at 8 Mbit/s for 1 s.
pub fn udp_spec() -> netrig::protocol::proto::UdpSpec {
    netrig::protocol::proto::UdpSpec::steady(1000, 1_000_000_000, 1000)
}

pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Waits up to `secs` for the server's descriptors to return to `baseline`.
pub fn settles_to(pid: u32, baseline: usize, secs: u64) -> usize {
    let t0 = Instant::now();
    loop {
        let n = fd_count(pid);
        if n <= baseline || t0.elapsed() > Duration::from_secs(secs) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Resident set size of a process, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Sends SIGINT.
pub fn sigint(pid: u32) {
    assert!(
        Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// Runs netrig with `args`, expects exit code `code`, and returns its console output.
pub fn run_expect(args: &[&str], code: i32) -> String {
    let out = netrig(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs netrig with `args` plus `--json PATH`, expects exit code `code`,
/// and returns the parsed JSON with the console output.
pub fn run_json(args: &[&str], code: i32) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("out.json");
    let mut all = args.to_vec();
    all.extend_from_slice(&["--json", js.to_str().unwrap()]);
    let out = netrig(&all).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let json = std::fs::read_to_string(&js).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
    // On a wrong exit code, the report's totals say why better than the console.
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {stdout}\n{}\ntotals: {}\nsender: {}",
        String::from_utf8_lossy(&out.stderr),
        v["result"]["totals"],
        v["result"]["sender"]
    );
    assert!(!v.is_null(), "{args:?}: no JSON report");
    (v, stdout)
}

/// Waits for a process to exit by itself within `secs`.
pub fn wait_exit(p: &mut Proc, secs: u64) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = p.0.try_wait().unwrap() {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "process did not exit within {secs} s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `netrig relay --listen 127.0.0.1:0 --to TO` with `extra`, and
/// returns once it listens, with the address it picked. Its stdout stays
/// piped after the first line, for [`interrupt`].
pub fn relay(to: SocketAddr, extra: &[&str]) -> (Proc, SocketAddr) {
    let to = to.to_string();
    let mut args = vec!["relay", "--listen", "127.0.0.1:0", "--to", &to, "-v", "0"];
    args.extend_from_slice(extra);
    let mut child = Proc(
        netrig(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let first = first_line(child.0.stdout.as_mut().unwrap(), "relay");
    (child, listening_on(&first, "netrig relay "))
}

/// Stops a process with SIGINT and returns its exit code and stdout.
pub fn interrupt(mut p: Proc) -> (Option<i32>, String) {
    sigint(p.0.id());
    let mut out = String::new();
    if let Some(mut o) = p.0.stdout.take() {
        use std::io::Read;
        let _ = o.read_to_string(&mut out);
    }
    let code = p.0.wait().unwrap().code();
    (code, out)
}

/// A console table row: its first column is a number (a time slice).
pub fn is_row(line: &str) -> bool {
    line.split_whitespace()
        .next()
        .is_some_and(|t| t.parse::<f64>().is_ok())
}

/// Spawns netrig with stdout piped and returns once `ready` has accepted a
/// line of its output (within `secs`), with the lines seen so far. A thread
/// keeps draining the rest so the child never blocks on a full pipe.
pub fn spawn_ready(
    args: &[&str],
    ready: impl FnMut(&str) -> bool,
    secs: u64,
) -> (Proc, Vec<String>) {
    spawn_ready_cmd(netrig(args), ready, secs)
}

/// [`spawn_ready`] for a command set up by the caller (e.g. stderr piped).
pub fn spawn_ready_cmd(
    mut cmd: Command,
    mut ready: impl FnMut(&str) -> bool,
    secs: u64,
) -> (Proc, Vec<String>) {
    use std::io::BufRead;
    let mut p = Proc(cmd.stdout(Stdio::piped()).spawn().unwrap());
    let args = cmd.get_args().collect::<Vec<_>>();
    let out = p.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = ready(&line);
                seen.push(line);
                if done {
                    return (p, seen);
                }
            }
            Err(e) => {
                let tail = &seen[seen.len().saturating_sub(30)..];
                panic!("{args:?} not ready within {secs} s ({e}); last lines: {tail:?}")
            }
        }
    }
}

/// Spawns netrig and returns once it has printed `n` table rows.
pub fn spawn_after_rows(args: &[&str], n: usize, secs: u64) -> (Proc, Vec<String>) {
    let mut rows = 0;
    spawn_ready(
        args,
        |l| {
            rows += usize::from(is_row(l));
            rows >= n
        },
        secs,
    )
}

/// Bytes waiting in the receive queue of process `pid`'s UDP socket bound
/// to `port` on IPv4 (None: it has no such socket), from /proc/net/udp.
pub fn udp_rx_queue(pid: u32, port: u16) -> Option<u64> {
    // The process's sockets, by inode: another process may use the same port
    // on another address.
    let inodes = socket_inodes(pid)?;
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
        let rx = f.get(4)?.split(':').nth(1)?;
        let mine = inodes.iter().any(|i| Some(&i.as_str()) == f.get(9));
        (local_port == port && mine).then(|| u64::from_str_radix(rx, 16).ok())?
    })
}

/// Waits until process `pid` has a UDP socket bound to `port` and has read
/// everything queued to it.
pub fn udp_drained(pid: u32, port: u16, what: &str) {
    let t0 = Instant::now();
    while udp_rx_queue(pid, port) != Some(0) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{what}: UDP port {port} not bound or not reading"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Threads of a process.
pub fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// A legit client is served: `tcp` with two connections of 1 MiB exits 0.
pub fn alive(addr: SocketAddr) {
    let out = netrig(&[
        "tcp",
        &addr.to_string(),
        "-n",
        "1M",
        "-P",
        "2",
        "--iterations",
        "1",
        "-q",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "a legit client was not served");
}

/// Whether the real iperf3 client is installed; if not, `test` says it
/// skipped (`.ci/run` installs it).
pub fn have_iperf3(test: &str) -> bool {
    let ok = Command::new("iperf3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED {test}: iperf3 is not installed (apt-get install iperf3; .ci/run does)");
    }
    ok
}
