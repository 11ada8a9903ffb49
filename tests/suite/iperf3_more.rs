//! More of the real iperf3 client against `netrig serve` (issue 31): UDP
//! through `netrig relay --loss` (iperf3's lost datagrams are the relay's
//! drops), the server's CPU figures in the results exchange, and iperf3
//! clients detected on the server's main port (`--iperf3-detect`) beside
//! netrig clients. Without iperf3 installed every test says it skipped.

use crate::bin;

use bin::{Proc, have_iperf3, interrupt, netrig, relay};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A server, its main address, its iperf3 port if it has one, its log.
struct Srv {
    _proc: Proc,
    main: SocketAddr,
    iperf3: Option<SocketAddr>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Srv {
    fn start(extra: &[&str]) -> Srv {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let wants_port = extra.contains(&"--iperf3-port");
        let mut proc = Proc(netrig(&args).stdout(Stdio::piped()).spawn().unwrap());
        let mut out = BufReader::new(proc.0.stdout.take().unwrap());
        let (mut main, mut iperf3) = (None, None);
        for _ in 0..6 {
            let mut l = String::new();
            out.read_line(&mut l).unwrap();
            let addr = |after: &str| -> Option<SocketAddr> {
                let r = l.split(after).nth(1)?;
                r.split_whitespace().next()?.parse().ok()
            };
            if let Some(a) = addr("listening on ") {
                main = Some(a);
            }
            if let Some(a) = addr("iperf3 clients served on ") {
                iperf3 = Some(SocketAddr::from(([127, 0, 0, 1], a.port())));
            }
            if main.is_some() && (iperf3.is_some() || !wants_port) {
                break;
            }
        }
        let lines = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&lines);
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                keep.lock().unwrap().push(l);
            }
        });
        Srv {
            _proc: proc,
            main: main.expect("the server names its address"),
            iperf3,
            lines,
        }
    }

    /// Waits (up to 10 s) for a log line holding all of `needles`.
    fn wait_for(&self, needles: &[&str]) -> String {
        let t0 = Instant::now();
        loop {
            let l = self.lines.lock().unwrap();
            if let Some(l) = l.iter().find(|l| needles.iter().all(|n| l.contains(n))) {
                return l.clone();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no log line with {needles:?}: {l:?}"
            );
            drop(l);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `iperf3 -c 127.0.0.1 -p PORT ARGS -J`; its output.
fn iperf3_raw(port: u16, args: &[&str]) -> std::process::Output {
    Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .arg("-J")
        .output()
        .unwrap()
}

/// [`iperf3_raw`] that must succeed; its JSON.
fn iperf3(port: u16, args: &[&str]) -> Value {
    let out = iperf3_raw(port, args);
    assert!(out.status.success(), "iperf3 {args:?}: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 -J output is not JSON ({e}): {out:?}"));
    assert!(v.get("error").is_none(), "iperf3 {args:?}: {v}");
    v
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}")) as u64
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

/// The "Verified here": UDP at a fixed rate through `netrig relay`
/// dropping datagrams, each way in turn: the datagrams iperf3 reports lost
/// are the ones the relay dropped (its `--log` names each by its index in
/// the flow: 0 is the connect datagram or its reply, then the counter).
/// Only the direction with data is impaired, so the connect datagram and
/// its reply pass.
///
/// Up, `--loss 2%` with a seed and a block count (`-k`): every datagram is
/// counted. Down (`-R`), a reverse `-k` run through loss did not end here
/// (its client waits to receive that many blocks), so the run is timed:
/// the client counts until its timer, and a drop after the highest counter
/// it saw is one no receiver can tell from the end; the server stops
/// sending at the client's TEST_END, so only the last few go uncounted.
#[test]
fn udp_through_a_lossy_relay_iperf3_loses_what_the_relay_dropped() {
    if !have_iperf3("udp_through_a_lossy_relay_iperf3_loses_what_the_relay_dropped") {
        return;
    }
    let srv = Srv::start(&["--iperf3-port", "0"]);
    let to = srv.iperf3.unwrap();
    let cases: [(&str, &[&str], &[&str]); 2] = [
        (
            "up",
            &["--loss", "2%", "--seed", "7"],
            &["-b", "8M", "-k", "1500"],
        ),
        (
            "down",
            &["--drop-every", "20"],
            &["-b", "4M", "-t", "2", "-R"],
        ),
    ];
    for (dir, impair, extra) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let json = tmp.path().join("relay.json");
        let log = tmp.path().join("relay.csv");
        let mut rargs = vec!["--dir", dir, "--json", json.to_str().unwrap()];
        rargs.extend_from_slice(&["--log", log.to_str().unwrap()]);
        rargs.extend_from_slice(impair);
        let (rl, at) = relay(to, &rargs);
        let mut args = vec!["-u", "-l", "1000"];
        args.extend_from_slice(extra);
        let j = iperf3(at.port(), &args);
        let (code, _) = interrupt(rl);
        assert_eq!(code, Some(130));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let d = &v["result"][dir];
        let sent = u(d, &["datagrams"]) - 1;
        let r = &j["end"]["sum_received"];
        let highest = u(r, &["packets"]);
        // The relay's drops, by counter.
        let drops: Vec<u64> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .skip(1)
            .filter(|l| l.contains(",udp,") && l.contains(",lost,"))
            .map(|l| l.split(',').nth(5).unwrap().parse().unwrap())
            .collect();
        assert_eq!(drops.len() as u64, u(d, &["lost"]), "{v}");
        assert!(drops.len() as u64 >= sent / 100, "{dir}: {v}");
        let seen = drops.iter().filter(|&&c| c < highest).count() as u64;
        assert_eq!(u(r, &["lost_packets"]), seen, "{dir}: {r} {drops:?}");
        match dir {
            "up" => assert_eq!((highest, seen), (1500, drops.len() as u64), "{r}"),
            _ => assert!(sent - highest <= 4, "sent {sent}, counted to {highest}"),
        }
    }
}

/// The server's CPU figures reach the client in the results exchange
/// (iperf3's `remote_total`, `remote_user`, `remote_system`): a second of
/// TCP at full speed costs the server some CPU, and the figures are
/// percent of one core of a process with a few threads, user and system
/// adding up to the total.
#[test]
fn the_servers_cpu_figures_reach_the_iperf3_client() {
    if !have_iperf3("the_servers_cpu_figures_reach_the_iperf3_client") {
        return;
    }
    let srv = Srv::start(&["--iperf3-port", "0"]);
    let j = iperf3(srv.iperf3.unwrap().port(), &["-t", "1"]);
    let c = &j["end"]["cpu_utilization_percent"];
    let (total, user, system) = (
        f(c, &["remote_total"]),
        f(c, &["remote_user"]),
        f(c, &["remote_system"]),
    );
    assert!(total > 0.5, "{c}");
    assert!(total < 100.0 * 64.0, "{c}");
    assert!(user >= 0.0 && system > 0.0, "{c}");
    assert!((user + system - total).abs() < 0.01 * total.max(1.0), "{c}");
}

/// `--iperf3-detect`: iperf3 clients on the server's main port, told from
/// netrig's by their first bytes, TCP with 2 streams and UDP, while a
/// netrig client runs its test on the same port at the same time; iperf3's
/// data connections (which start with the cookie too) find their test.
#[test]
fn iperf3_clients_are_detected_on_the_main_port_beside_a_netrig_client() {
    if !have_iperf3("iperf3_clients_are_detected_on_the_main_port_beside_a_netrig_client") {
        return;
    }
    let srv = Srv::start(&["--iperf3-detect"]);
    let port = srv.main.port();
    let target = srv.main.to_string();
    let ours =
        std::thread::spawn(move || netrig(&["tcp", &target, "-t", "2", "-J"]).output().unwrap());
    let j = iperf3(port, &["-t", "1", "-P", "2"]);
    let sent = u(&j, &["end", "sum_sent", "bytes"]);
    assert!(sent > 0);
    assert_eq!(u(&j, &["end", "sum_received", "bytes"]), sent);
    let cookie = j["start"]["cookie"].as_str().unwrap().to_owned();
    let line = srv.wait_for(&[&cookie, "tcp, 2 streams"]);
    assert!(line.contains("iperf3 test"), "{line}");
    srv.wait_for(&[&cookie, &format!("done: received {sent} bytes")]);
    let k = iperf3(port, &["-u", "-b", "4M", "-l", "1000", "-t", "1"]);
    let s = &k["end"]["sum"];
    assert!(u(s, &["packets"]) > 100, "{s}");
    assert_eq!(u(s, &["lost_packets"]), 0, "{s}");
    let out = ours.join().unwrap();
    assert!(out.status.success(), "netrig tcp beside iperf3: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.to_string().contains("\"success\""), "{v}");
}

/// Detection keeps the main port's rules: with a key set iperf3 clients are
/// refused (and logged) unless let in; bytes that start as a cookie and are
/// not one are refused; netrig's own clients are served throughout.
#[test]
fn the_main_ports_iperf3_detection_keeps_the_key_rule_and_refuses_impostors() {
    if !have_iperf3("the_main_ports_iperf3_detection_keeps_the_key_rule_and_refuses_impostors") {
        return;
    }
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "a shared secret of some length\n").unwrap();
    let key = key.to_str().unwrap();
    let keyed = Srv::start(&["--iperf3-detect", "--key", key]);
    // With -J iperf3 exits 0 on a refusal and names it in the JSON.
    let out = iperf3_raw(keyed.main.port(), &["-t", "1"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["error"].is_string(), "{out:?}");
    keyed.wait_for(&["refused: iperf3: iperf3 clients cannot prove the pre-shared key"]);
    let open = Srv::start(&[
        "--iperf3-detect",
        "--key",
        key,
        "--iperf3-allow-unauthenticated",
    ]);
    iperf3(open.main.port(), &["-t", "1"]);

    let srv = Srv::start(&["--iperf3-detect"]);
    let mut s = std::net::TcpStream::connect(srv.main).unwrap();
    s.write_all(b"abcdefghijklmnopqrstuvwxyz234567abcdX")
        .unwrap();
    // Not a cookie's last byte: not iperf3, so netrig's refusal.
    srv.wait_for(&["refused: not a netrig frame"]);
    let mut s = std::net::TcpStream::connect(srv.main).unwrap();
    s.write_all(b"abcdefghijklmnopqrstuvwxyz234567abcd\0more")
        .unwrap();
    srv.wait_for(&["refused: iperf3: bytes from an iperf3 client past its cookie"]);
    let ours = netrig(&["tcp", &srv.main.to_string(), "-t", "1"])
        .output()
        .unwrap();
    assert!(ours.status.success(), "{ours:?}");
}

/// An iperf3 test holds its address's place before its thread starts: from
/// one address, tests waiting for their parameters take at most
/// `--max-tests-per-client` threads, and the rest are denied at once.
#[test]
fn one_address_holds_at_most_its_share_of_iperf3_test_threads() {
    use std::io::{Read, Write};
    let srv = Srv::start(&[
        "--iperf3-port",
        "0",
        "--max-tests",
        "16",
        "--max-tests-per-client",
        "2",
        "--handshake-timeout",
        "10s",
    ]);
    let at = srv.iperf3.expect("the server names its iperf3 port");
    let pid = srv._proc.0.id();
    let mut conns = Vec::new();
    let mut first = Vec::new();
    for i in 0..6u8 {
        let mut s = std::net::TcpStream::connect(at).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // A cookie's shape: 36 of [a-z2-7] and a NUL, distinct per test.
        let mut cookie = [b'a' + i; 37];
        cookie[36] = 0;
        s.write_all(&cookie).unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        first.push(b[0] as i8);
        conns.push(s);
    }
    // PARAM_EXCHANGE (9) to the first two, ACCESS_DENIED (-1) to the rest.
    assert_eq!(first, [9, 9, -1, -1, -1, -1]);
    let tests = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|n| n.trim() == "iperf3-test")
        })
        .count();
    assert_eq!(tests, 2);
    srv.wait_for(&["refused", "iperf3: server limit", "per client address"]);
}
