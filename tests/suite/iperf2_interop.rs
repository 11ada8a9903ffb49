//! The real iperf2 client (`iperf`, Debian's 2.x) against `netrig serve
//! --iperf2-port` (issue 31): TCP with and without `-e` and with `-P 2`
//! (bytes the client reports = bytes the server logs), UDP (the server
//! report the client prints: no loss on loopback, its datagram count the
//! server's), the key rule, what is refused (`-R`, `-d`) and hostile bytes
//! on the port. Without iperf installed every test says it skipped
//! (`.ci/run` installs it).

use crate::bin;

use bin::{Proc, netrig};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn have_iperf(test: &str) -> bool {
    let ok = Command::new("iperf").arg("-v").output().is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout).contains("iperf version 2")
            || String::from_utf8_lossy(&o.stderr).contains("iperf version 2")
    });
    if !ok {
        eprintln!(
            "SKIPPED {test}: iperf (2.x) is not installed (apt-get install iperf; .ci/run does)"
        );
    }
    ok
}

/// A server with an iperf2 port, its log kept.
struct Srv {
    _proc: Proc,
    port: u16,
    /// `--metrics`' address, if asked for.
    metrics: Option<SocketAddr>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Srv {
    fn start(extra: &[&str]) -> Srv {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--iperf2-port", "0"];
        args.extend_from_slice(extra);
        let mut proc = Proc(netrig(&args).stdout(Stdio::piped()).spawn().unwrap());
        let mut out = BufReader::new(proc.0.stdout.take().unwrap());
        let (mut port, mut metrics) = (None, None);
        for _ in 0..4 {
            let mut l = String::new();
            out.read_line(&mut l).unwrap();
            if let Some(r) = l.split("metrics at http://").nth(1) {
                metrics = r.split('/').next().and_then(|a| a.parse().ok());
            }
            let at = l.split("iperf2 clients served on ").nth(1).or_else(|| {
                l.split("\"event\":\"iperf2_listening\"")
                    .nth(1)
                    .map(|_| l.as_str())
            });
            if let Some(r) = at {
                let a = r
                    .split(|c: char| c.is_whitespace() || c == '"')
                    .find_map(|w| w.parse::<SocketAddr>().ok())
                    .unwrap_or_else(|| panic!("no address in {l:?}"));
                port = Some(a.port());
                break;
            }
        }
        let port = port.expect("the server names its iperf2 port");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&lines);
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                keep.lock().unwrap().push(l);
            }
        });
        Srv {
            _proc: proc,
            port,
            metrics,
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

    /// A series' value from `--metrics`.
    fn metric(&self, series: &str) -> u64 {
        use std::io::Read;
        let mut s = TcpStream::connect(self.metrics.expect("--metrics")).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in {body}"))
    }

    fn count(&self, needles: &[&str]) -> usize {
        let l = self.lines.lock().unwrap();
        l.iter()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .count()
    }

    /// Runs `iperf -c 127.0.0.1 -p PORT ARGS`, killed after 20 s; its
    /// standard output and error.
    fn iperf(&self, args: &[&str]) -> String {
        let port = self.port.to_string();
        let mut child = Proc(
            Command::new("iperf")
                .args(["-c", "127.0.0.1", "-p", &port])
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let t0 = Instant::now();
        while child.0.try_wait().unwrap().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "iperf {args:?} did not end"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        output(&mut child)
    }
}

/// What an ended client printed: its standard output, then its error.
fn output(child: &mut Proc) -> String {
    use std::io::Read;
    let mut out = String::new();
    if let Some(mut p) = child.0.stdout.take() {
        p.read_to_string(&mut out).unwrap();
    }
    if let Some(mut p) = child.0.stderr.take() {
        p.read_to_string(&mut out).unwrap();
    }
    out
}

/// The client's local ports, from its "local 127.0.0.1 port N connected".
fn local_ports(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split("local 127.0.0.1").nth(1))
        .filter_map(|r| r.split("port ").nth(1))
        .filter_map(|r| r.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The bytes on a "... sec  N Bytes ..." result line starting with `id`.
fn reported_bytes(out: &str, id: &str) -> u64 {
    out.lines()
        .filter(|l| l.starts_with(id) && l.contains(" sec "))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "Bytes")?;
            w.get(i - 1)?.parse().ok()
        })
        .next_back()
        .unwrap_or_else(|| panic!("no {id} byte count in {out}"))
}

/// The bytes the server's log says it received.
fn logged_received(line: &str) -> u64 {
    line.split("received ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {line:?}"))
}

#[test]
fn tcp_bytes_the_client_reports_are_the_bytes_the_server_counted() {
    if !have_iperf("tcp_bytes_the_client_reports_are_the_bytes_the_server_counted") {
        return;
    }
    let srv = Srv::start(&["--metrics", "127.0.0.1:0"]);
    let mut total = 0;
    for args in [
        &["-t", "1", "-f", "B"][..],
        &["-t", "1", "-f", "B", "-e"][..],
        &[
            "-n", "3000000", "-l", "10000", "-w", "256K", "-i", "0.5", "-f", "B",
        ][..],
    ] {
        let out = srv.iperf(args);
        let ports = local_ports(&out);
        assert_eq!(ports.len(), 1, "{out}");
        let line = srv.wait_for(&[&format!(":{}: completed: received", ports[0])]);
        assert!(line.contains("iperf2 TCP test"), "{line}");
        let client = reported_bytes(&out, "[  1]");
        assert!(client > 0, "{out}");
        assert_eq!(logged_received(&line), client, "{args:?}: {out}\n{line}");
        total += client;
        if args.contains(&"-n") {
            assert_eq!(client, 3_000_000);
            srv.wait_for(&[&format!(":{}: -n 3000000 bytes, -P 1", ports[0])]);
        }
    }
    // Two streams: two connections, each a test of its own; their sum is
    // the client's [SUM].
    let out = srv.iperf(&["-t", "1", "-P", "2", "-f", "B"]);
    let ports = local_ports(&out);
    assert_eq!(ports.len(), 2, "{out}");
    let server: u64 = ports
        .iter()
        .map(|p| logged_received(&srv.wait_for(&[&format!(":{p}: completed: received")])))
        .sum();
    assert_eq!(server, reported_bytes(&out, "[SUM]"), "{out}");
    assert_eq!(srv.count(&["-P 2"]), 2);
    // Metered like iperf3's runs, under a kind of their own.
    let kind = "{kind=\"iperf2\"}";
    total += server;
    assert_eq!(
        srv.metric(&format!("netrig_received_bytes_total{kind}")),
        total
    );
    assert_eq!(srv.metric(&format!("netrig_tests_started_total{kind}")), 5);
    assert_eq!(
        srv.metric(&format!("netrig_test_duration_seconds_count{kind}")),
        5
    );
    assert_eq!(srv.metric(&format!("netrig_active_tests_by_kind{kind}")), 0);
}

/// "Lost/Total" from each of the client's server reports: (lost, total).
fn server_reports(out: &str) -> Vec<(u64, u64)> {
    out.split("Server Report:")
        .skip(1)
        .map(|after| {
            let cell = after
                .lines()
                .filter(|l| l.contains("%)"))
                .flat_map(str::split_whitespace)
                .find(|w| w.contains('/') && w.split('/').all(|n| n.parse::<u64>().is_ok()))
                .unwrap_or_else(|| panic!("no lost/total in {after}"));
            let mut n = cell.split('/').map(|n| n.parse::<u64>().unwrap());
            (n.next().unwrap(), n.next().unwrap())
        })
        .collect()
}

fn server_report(out: &str) -> (u64, u64) {
    *server_reports(out)
        .first()
        .unwrap_or_else(|| panic!("no server report in {out}"))
}

#[test]
fn udp_server_report_reaches_the_client_with_the_servers_count() {
    if !have_iperf("udp_server_report_reaches_the_client_with_the_servers_count") {
        return;
    }
    let srv = Srv::start(&["--log-format", "json"]);
    for extra in [&[][..], &["-e"][..]] {
        let mut args = vec!["-u", "-b", "10M", "-t", "1"];
        args.extend_from_slice(extra);
        let out = srv.iperf(&args);
        let (lost, total) = server_report(&out);
        assert_eq!(lost, 0, "{out}");
        // 10 Mbit/s of 1470-byte datagrams for 1 s: about 850.
        assert!((400..=1700).contains(&total), "{out}");
        let port = &local_ports(&out)[0];
        let line = srv.wait_for(&["session_end", "iperf2", &format!(":{port}\"")]);
        let j: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(j["result"], "completed", "{line}");
        assert_eq!(j["datagrams"], total, "{line}");
        assert_eq!(j["datagrams_total"], total, "{line}");
        assert_eq!(j["lost"], 0, "{line}");
        assert_eq!(j["bytes_received"], total * 1470, "{line}");
    }
    // Two flows: a report each, each the server's count for its flow.
    let out = srv.iperf(&["-u", "-b", "5M", "-t", "1", "-l", "1000", "-P", "2"]);
    let mut client: Vec<(u64, u64)> = server_reports(&out);
    let ports = local_ports(&out);
    assert_eq!((client.len(), ports.len()), (2, 2), "{out}");
    let mut server: Vec<(u64, u64)> = ports
        .iter()
        .map(|p| {
            let line = srv.wait_for(&["session_end", "iperf2", &format!(":{p}\"")]);
            let j: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(j["bytes_received"], j["datagrams"].as_u64().unwrap() * 1000);
            (
                j["lost"].as_u64().unwrap(),
                j["datagrams_total"].as_u64().unwrap(),
            )
        })
        .collect();
    client.sort_unstable();
    server.sort_unstable();
    assert_eq!(client, server, "{out}");
    assert!(
        client.iter().all(|&(lost, total)| lost == 0 && total > 200),
        "{out}"
    );
}

#[test]
fn a_key_keeps_iperf2_out_unless_allowed() {
    if !have_iperf("a_key_keeps_iperf2_out_unless_allowed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "a shared secret of some length\n").unwrap();
    let key = key.to_str().unwrap();
    let keyed = Srv::start(&["--key", key]);
    keyed.iperf(&["-t", "1"]);
    keyed.wait_for(&["refused", "iperf2 clients cannot prove the pre-shared key"]);
    assert_eq!(keyed.count(&["completed"]), 0);
    let allowed = Srv::start(&["--key", key, "--iperf2-allow-unauthenticated"]);
    let out = allowed.iperf(&["-t", "1", "-f", "B"]);
    let line = allowed.wait_for(&["iperf2 TCP test", "completed: received"]);
    assert_eq!(logged_received(&line), reported_bytes(&out, "[  1]"));
}

#[test]
fn what_needs_a_sending_server_and_hostile_bytes_get_one_line_each() {
    if !have_iperf("what_needs_a_sending_server_and_hostile_bytes_get_one_line_each") {
        return;
    }
    let srv = Srv::start(&[]);
    srv.iperf(&["-t", "1", "-R"]);
    srv.wait_for(&["refused", "-R/--full-duplex is not served"]);
    srv.iperf(&["-t", "1", "-d"]);
    srv.wait_for(&["refused", "-d/-r (dual test) is not served"]);
    let tcp = SocketAddr::from(([127, 0, 0, 1], srv.port));
    for (bytes, why) in [
        (
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            "not an iperf2 client header (flags 0x47455420)",
        ),
        (
            &[0xff; 64][..],
            "not an iperf2 client header (flags 0xffffffff)",
        ),
        (
            &[0x40, 0x01, 0x00, 0x02, 0, 0, 0, 1][..],
            "header length 2 out of range",
        ),
    ] {
        let mut s = TcpStream::connect(tcp).unwrap();
        let _ = s.write_all(bytes);
        srv.wait_for(&["refused", why]);
    }
    // A connection that closes inside its header.
    let mut s = TcpStream::connect(tcp).unwrap();
    s.write_all(&[0x40, 0x01, 0x00, 0x78, 0, 0]).unwrap();
    drop(s);
    srv.wait_for(&["refused", "a short client header"]);
    // Datagrams: garbage from one address makes one line, not one each.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    let me = u.local_addr().unwrap().port().to_string();
    for _ in 0..50 {
        u.send_to(&[0xff; 100], tcp).unwrap();
        u.send_to(&[1, 2, 3], tcp).unwrap();
    }
    // The same thread reads every datagram in order: once a later test is
    // logged, these were all handled.
    let out = srv.iperf(&["-u", "-b", "1M", "-t", "1"]);
    assert_eq!(server_report(&out).0, 0, "{out}");
    srv.wait_for(&["iperf2 UDP test", "completed"]);
    assert_eq!(
        srv.count(&["refused", &format!(":{me}:")]),
        1,
        "{:?}",
        srv.lines
    );
    // And TCP still works.
    let out = srv.iperf(&["-t", "1", "-f", "B"]);
    let port = &local_ports(&out)[0];
    let line = srv.wait_for(&[&format!(":{port}: completed: received")]);
    assert_eq!(logged_received(&line), reported_bytes(&out, "[  1]"));
}

/// Connections yet to send their header hold no `--max-tests` slot (they
/// are read on the accept thread), so silent ones cannot keep clients out;
/// past `--handshake-timeout` they are closed with a line each.
#[test]
fn silent_connections_hold_no_test_slot() {
    if !have_iperf("silent_connections_hold_no_test_slot") {
        return;
    }
    let srv = Srv::start(&["--max-tests", "1", "--handshake-timeout", "3s"]);
    let tcp = SocketAddr::from(([127, 0, 0, 1], srv.port));
    let silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(tcp).unwrap()).collect();
    let out = srv.iperf(&["-t", "1", "-f", "B"]);
    let port = &local_ports(&out)[0];
    let line = srv.wait_for(&[&format!(":{port}: completed: received")]);
    assert_eq!(logged_received(&line), reported_bytes(&out, "[  1]"));
    for s in &silent {
        let me = s.local_addr().unwrap().port();
        srv.wait_for(&[&format!(":{me}: refused"), "no whole client header"]);
    }
}

/// The names of `pid`'s threads that are not its event loops (`serve-N`).
fn other_threads(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .filter(|n| !n.starts_with("serve-"))
        .collect();
    names.sort();
    names
}

/// An iperf2 TCP test runs on the server's event loops: `-P 8` adds no
/// thread besides loops (at most four per core in all), and every stream's
/// bytes are still counted.
#[test]
fn iperf2_tcp_streams_take_no_thread_of_their_own() {
    if !have_iperf("iperf2_tcp_streams_take_no_thread_of_their_own") {
        return;
    }
    let srv = Srv::start(&["--max-tests-per-client", "8"]);
    let pid = srv._proc.0.id();
    // Each thread names itself as it starts: wait until the iperf2 port's
    // and the two loops per core the server starts with have.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t0 = Instant::now();
    let before = loop {
        let names = other_threads(pid);
        let loops = bin::threads(pid).saturating_sub(names.len());
        if names.iter().any(|n| n == "iperf2-accept") && loops == 2 * cores {
            break names;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{names:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let port = srv.port.to_string();
    let mut child = Proc(
        Command::new("iperf")
            .args([
                "-c",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                "3",
                "-P",
                "8",
                "-f",
                "B",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Sampled while the streams run: the test's threads would show here.
    let t0 = Instant::now();
    let (mut seen, mut last) = (Vec::new(), before.clone());
    while child.0.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(20), "iperf did not end");
        // A loop being added is "netrig" until it names itself: a change
        // counts when two samples 50 ms apart show it.
        let now = other_threads(pid);
        if now != before && now == last {
            seen = now.clone();
        }
        last = now;
        let loops = bin::threads(pid).saturating_sub(other_threads(pid).len());
        assert!(loops <= 4 * cores, "{loops} loops");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(seen.is_empty(), "threads {seen:?}, before {before:?}");
    let out = output(&mut child);
    let ports = local_ports(&out);
    assert_eq!(ports.len(), 8, "{out}");
    let server: u64 = ports
        .iter()
        .map(|p| logged_received(&srv.wait_for(&[&format!(":{p}: completed: received")])))
        .sum();
    assert_eq!(server, reported_bytes(&out, "[SUM]"), "{out}");
}

/// A TCP test given in time is refused up front if it asks for more than
/// `--max-duration` (iperf2's `-t` comes in hundredths of a second), as
/// long as it is served, the same rule as for netrig's own tests.
#[test]
fn an_iperf2_tcp_test_may_ask_for_max_duration_and_no_more() {
    if !have_iperf("an_iperf2_tcp_test_may_ask_for_max_duration_and_no_more") {
        return;
    }
    let srv = Srv::start(&["--max-duration", "1s"]);
    let out = srv.iperf(&["-t", "1.01", "-f", "B"]);
    let port = &local_ports(&out)[0];
    srv.wait_for(&[
        &format!(":{port}: refused"),
        "server limit: max duration 1 s (asked for 1.01 s)",
    ]);
    let out = srv.iperf(&["-t", "1", "-f", "B"]);
    let port = &local_ports(&out)[0];
    let line = srv.wait_for(&[&format!(":{port}: completed: received")]);
    assert_eq!(logged_received(&line), reported_bytes(&out, "[  1]"));
    assert_eq!(srv.count(&["refused"]), 1, "{:?}", srv.lines);
}

/// A test given in bytes cannot be refused for its length up front: the
/// server ends it at `--max-duration` and its grace, however fast it moves.
#[test]
fn an_iperf2_tcp_test_is_ended_at_the_servers_duration_limit() {
    if !have_iperf("an_iperf2_tcp_test_is_ended_at_the_servers_duration_limit") {
        return;
    }
    let srv = Srv::start(&["--max-duration", "1s"]);
    let t0 = Instant::now();
    let out = srv.iperf(&["-n", "10000G", "-f", "B"]);
    let port = &local_ports(&out)[0];
    let line = srv.wait_for(&[&format!(":{port}: server limit: duration: received")]);
    let took = t0.elapsed();
    // One second and the 5 s grace; a little more for a loaded machine.
    assert!(
        took >= Duration::from_secs(6),
        "ended after {took:?}: {line}"
    );
    assert!(
        took < Duration::from_secs(15),
        "ended after {took:?}: {line}"
    );
    assert!(logged_received(&line) > 0, "{line}");
}

/// `--max-bytes` holds for an iperf2 TCP test as it does for netrig's own
/// (it refuses what "would move more than" it): a test may move exactly
/// that many bytes, the client header's included (iperf2's `-n` counts
/// them too), one byte more ends it, and a client that sends on is cut
/// within one read past the limit.
#[test]
fn max_bytes_lets_an_iperf2_test_move_exactly_that_much() {
    if !have_iperf("max_bytes_lets_an_iperf2_test_move_exactly_that_much") {
        return;
    }
    let max = 3_000_000;
    let srv = Srv::start(&["--max-bytes", &max.to_string()]);
    let ended = |out: &str, how: &str| {
        let port = &local_ports(out)[0];
        logged_received(&srv.wait_for(&[&format!(":{port}: {how}: received")]))
    };
    let out = srv.iperf(&["-n", &max.to_string(), "-f", "B"]);
    assert_eq!(reported_bytes(&out, "[  1]"), max, "{out}");
    assert_eq!(ended(&out, "completed"), max);
    // However the reads fall, the count passes the limit only at the
    // client's last byte: the server stops there, before its close.
    let out = srv.iperf(&["-n", &(max + 1).to_string(), "-f", "B"]);
    assert_eq!(ended(&out, "server limit: bytes"), max + 1);
    // A client that would send for 10 s is stopped at the first read that
    // passes the limit, a read being at most the loop's buffer (256 KiB).
    let out = srv.iperf(&["-t", "10", "-f", "B"]);
    let got = ended(&out, "server limit: bytes");
    assert!(got > max && got <= max + (256 << 10), "{got}: {out}");
    assert_eq!(srv.count(&["completed"]), 1, "{:?}", srv.lines);
}
