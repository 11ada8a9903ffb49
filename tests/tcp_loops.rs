//! The TCP event loops over real loopback sockets. The client runs up to
//! four per core, each of `-P` connections on a loop (thread) of its own.
//! The server starts with two per core and adds loops, up to four per core,
//! only for lasting data connections: hellos, rr sessions and crr's short
//! connections add none, `-P 8` spreads over a loop each, a loop left with
//! nothing sleeps instead of ticking, and an added loop idle for about ten
//! seconds ends its thread until the next lasting test. Every connection
//! still moves verified data both ends agree on.

#[path = "common/bin.rs"]
mod bin;

use bin::{BIN, Proc, serve, wait_exit};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A thread of a process: its name, CPU seconds (user and system) and
/// voluntary context switches (each a sleep it woke from).
struct Task {
    name: String,
    cpu: f64,
    switches: u64,
}

/// The threads of `pid` whose name starts with `prefix`, by name.
fn tasks(pid: u32, prefix: &str) -> Vec<Task> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in dir.flatten() {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !name.starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        // Fields after the command's closing parenthesis: utime and stime
        // are the 12th and 13th, in clock ticks (100 a second).
        let f: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, r)| r)
            .split_whitespace()
            .collect();
        let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let switches = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        out.push(Task {
            name: name.trim().to_string(),
            cpu: (tick(11) + tick(12)) / 100.0,
            switches,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The server's event loops (threads named `serve-N`; its UDP sender pool's
/// `serve-send` is not one).
fn server_loops(pid: u32) -> Vec<Task> {
    let mut t = tasks(pid, "serve-");
    t.retain(|t| t.name["serve-".len()..].parse::<usize>().is_ok());
    t
}

/// The server's loops once their count is `want` (a thread takes its name
/// as it starts, so a new one may not show it yet), or after 5 s.
fn loops_settled(pid: u32, want: usize) -> usize {
    let mut n = server_loops(pid).len();
    for _ in 0..500 {
        if n == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        n = server_loops(pid).len();
    }
    n
}

/// The client's connection loops now running (threads named `conns-N`).
fn conn_loops(pid: u32) -> usize {
    tasks(pid, "conns-").len()
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs the client with `args` against `port` to its end; its JSON.
fn run(port: u16, args: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("out.json");
    let out = Command::new(BIN)
        .args([args[0], "127.0.0.1", "-p", &port.to_string(), "-q"])
        .args(&args[1..])
        .arg("--json")
        .arg(&js)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(out.success(), "{args:?}: {out}");
    serde_json::from_str(&std::fs::read_to_string(&js).unwrap()).unwrap()
}

#[test]
fn eight_connections_run_on_a_loop_each_and_all_verify() {
    let (srv, addr) = serve(&["-q"]);
    let spid = srv.0.id();
    let cores = cores();
    // The loops the server starts with; short connections and rr sessions
    // (control connections) add none.
    assert_eq!(
        loops_settled(spid, 2 * cores),
        2 * cores,
        "on {cores} cores"
    );
    run(addr.port(), &["crr", "-n", "300", "-P", "8"]);
    run(addr.port(), &["rr", "-n", "300"]);
    let before = server_loops(spid);
    assert_eq!(before.len(), 2 * cores, "after crr and rr");
    let port = addr.port().to_string();
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("out.json");
    let mut client = Proc(
        Command::new(BIN)
            .args(["tcp", "127.0.0.1", "-p", &port, "-P", "8", "-t", "2s", "-q"])
            .arg("--json")
            .arg(&js)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = client.0.id();
    let want = 8.min(4 * cores);
    // The loops start together at the run's start: look until all are
    // there or the run is over.
    let mut most = 0;
    while most < want && client.0.try_wait().unwrap().is_none() {
        most = most.max(conn_loops(pid));
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(most, want, "loops of the client at -P 8 on {cores} cores");
    assert!(wait_exit(&mut client, 30).success());
    // Loops were added for the lasting connections, never past four per
    // core, and the connections spread over them: as many loops as
    // connections (up to the loops there are, less one for the loop that
    // accepts and the control connection's) did work in the run.
    let after = server_loops(spid);
    let busy = after
        .iter()
        .filter(|a| {
            let was = before
                .iter()
                .find(|b| b.name == a.name)
                .map_or(0.0, |b| b.cpu);
            a.cpu - was >= 0.05
        })
        .count();
    let cpu: Vec<(&str, f64)> = after.iter().map(|a| (a.name.as_str(), a.cpu)).collect();
    eprintln!("server loops' CPU seconds after the run: {cpu:?}");
    assert!(after.len() <= 4 * cores, "{} server loops", after.len());
    if cores <= 2 {
        let n = loops_settled(spid, 4 * cores);
        assert_eq!(n, 4 * cores, "server loops at -P 8");
    }
    assert!(busy >= 8.min(4 * cores) - 2, "{busy} busy server loops");
    // Left with nothing, a loop sleeps: over a second, each loop but the
    // one that accepts wakes a few times, not every 20 ms tick (50). The
    // connections may take a moment to end: a few tries.
    let mut seen = Vec::new();
    let quiet = (0..10).any(|_| {
        let t0 = server_loops(spid);
        std::thread::sleep(Duration::from_secs(1));
        let t1 = server_loops(spid);
        let woke: Vec<u64> = t1
            .iter()
            .filter(|t| t.name != "serve-0")
            .map(|t| {
                let was = t0
                    .iter()
                    .find(|b| b.name == t.name)
                    .map_or(0, |b| b.switches);
                t.switches - was
            })
            .collect();
        let ok = woke.iter().all(|&n| n <= 10);
        seen.push(woke);
        ok
    });
    assert!(quiet, "wake-ups a second of the idle loops: {seen:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&js).unwrap()).unwrap();
    let t = &v["result"]["totals"];
    assert_eq!(
        (&t["cancelled"], &t["net_errors"], &t["data_errors"]),
        (&0.into(), &0.into(), &0.into()),
        "{t}"
    );
    let completed = t["completed"].as_u64().unwrap();
    assert!(completed >= 8, "{t}");
    // The server verified the same connections and bytes.
    let s = &v["result"]["servers"][0][1];
    assert_eq!(s["success"].as_u64(), Some(completed), "{s}");
    assert_eq!(s["bytes_received"], t["sent"]);
    assert!(t["sent"].as_u64().unwrap() > 0);
    // The added loops end their threads about ten idle seconds later: the
    // server is back to the loops it started with.
    let mut left = server_loops(spid).len();
    for _ in 0..60 {
        if left == 2 * cores {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        left = server_loops(spid).len();
    }
    assert_eq!(left, 2 * cores, "server loops 30 s after the run");
    // The next lasting test starts them again, and verifies.
    let v = run(addr.port(), &["tcp", "-P", "8", "-t", "1s"]);
    let t = &v["result"]["totals"];
    assert_eq!(
        (&t["net_errors"], &t["data_errors"]),
        (&0.into(), &0.into()),
        "{t}"
    );
    assert!(t["completed"].as_u64().unwrap() >= 8, "{t}");
    if cores <= 2 {
        let again = loops_settled(spid, 4 * cores);
        assert_eq!(again, 4 * cores, "server loops after the second run");
    }
}
