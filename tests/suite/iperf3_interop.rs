//! The real iperf3 client against `netrig serve --iperf3-port` (issue 31):
//! TCP with 1 and 4 streams, reverse, bidir, UDP at a fixed rate, the
//! results exchange (`-J`, `--get-server-output`), the server's log, the
//! key rule, and hostile bytes on the iperf3 port. Without iperf3 installed
//! every test says it skipped (`.ci/run` installs it).

use crate::bin;

use bin::{Proc, have_iperf3, netrig};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A server with an iperf3 port, its log kept.
struct Srv {
    _proc: Proc,
    iperf3: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Srv {
    fn start(extra: &[&str]) -> Srv {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--iperf3-port", "0"];
        args.extend_from_slice(extra);
        let mut proc = Proc(netrig(&args).stdout(Stdio::piped()).spawn().unwrap());
        let mut out = BufReader::new(proc.0.stdout.take().unwrap());
        let mut port = None;
        for _ in 0..4 {
            let mut l = String::new();
            out.read_line(&mut l).unwrap();
            if let Some(r) = l.split("iperf3 clients served on ").nth(1) {
                let a: SocketAddr = r.split_whitespace().next().unwrap().parse().unwrap();
                port = Some(a.port());
                break;
            }
        }
        let port = port.expect("the server names its iperf3 port");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&lines);
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                keep.lock().unwrap().push(l);
            }
        });
        Srv {
            _proc: proc,
            iperf3: SocketAddr::from(([127, 0, 0, 1], port)),
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

    /// Runs iperf3 with `args` against the server, `-J`; its JSON.
    fn iperf3(&self, args: &[&str]) -> Value {
        let out = self.iperf3_raw(args, true);
        assert!(out.status.success(), "iperf3 {args:?}: {out:?}");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("iperf3 -J output is not JSON ({e}): {out:?}"))
    }

    fn iperf3_raw(&self, args: &[&str], json: bool) -> std::process::Output {
        let port = self.iperf3.port().to_string();
        let mut c = Command::new("iperf3");
        c.args(["-c", "127.0.0.1", "-p", &port]).args(args);
        if json {
            c.arg("-J");
        }
        c.output().unwrap()
    }
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}")) as u64
}

/// The bytes the server's log says it received for one test.
fn logged_received(line: &str) -> u64 {
    line.split("received ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {line:?}"))
}

#[test]
fn tcp_one_and_four_streams_bytes_agree_on_both_ends() {
    if !have_iperf3("tcp_one_and_four_streams_bytes_agree_on_both_ends") {
        return;
    }
    let srv = Srv::start(&[]);
    for streams in ["1", "4"] {
        let j = srv.iperf3(&["-t", "1", "-P", streams]);
        assert_eq!(
            j["start"]["test_start"]["num_streams"],
            streams.parse::<u64>().unwrap()
        );
        let sent = u(&j, &["end", "sum_sent", "bytes"]);
        let received = u(&j, &["end", "sum_received", "bytes"]);
        assert!(sent > 0);
        // The server drains what was in flight at TEST_END: its count (from
        // the results exchange) is every byte the client wrote.
        assert_eq!(received, sent, "-P {streams}");
        let cookie = j["start"]["cookie"].as_str().unwrap().to_owned();
        let line = srv.wait_for(&[&cookie, "done: received"]);
        assert_eq!(logged_received(&line), sent, "{line}");
        assert_eq!(
            j["end"]["streams"].as_array().unwrap().len(),
            streams.parse::<usize>().unwrap()
        );
    }
}

#[test]
fn reverse_and_bidir_move_data_the_server_sent() {
    if !have_iperf3("reverse_and_bidir_move_data_the_server_sent") {
        return;
    }
    let srv = Srv::start(&[]);
    let j = srv.iperf3(&["-t", "1", "-R", "-P", "2"]);
    let received = u(&j, &["end", "sum_received", "bytes"]);
    let sent = u(&j, &["end", "sum_sent", "bytes"]);
    assert!(received > 0);
    // The server counts what its sockets took; the client stops reading at
    // its end of the test, so it may have read less, never more.
    assert!(
        sent >= received,
        "server sent {sent}, client received {received}"
    );
    let cookie = j["start"]["cookie"].as_str().unwrap().to_owned();
    srv.wait_for(&[&cookie, "reverse"]);
    let line = srv.wait_for(&[&cookie, "done: received 0 bytes, sent"]);
    assert!(line.contains(&format!("sent {sent} bytes")), "{line}");

    let b = srv.iperf3(&["-t", "1", "--bidir"]);
    let up = u(&b, &["end", "sum_received", "bytes"]);
    let down = u(&b, &["end", "sum_received_bidir_reverse", "bytes"]);
    assert!(up > 0 && down > 0, "{b}");
    assert_eq!(
        up,
        u(&b, &["end", "sum_sent", "bytes"]),
        "client to server: exact"
    );
}

#[test]
fn udp_at_a_fixed_rate_loses_nothing_on_loopback_and_both_ends_count_the_same() {
    if !have_iperf3("udp_at_a_fixed_rate_loses_nothing_on_loopback_and_both_ends_count_the_same") {
        return;
    }
    let srv = Srv::start(&[]);
    let j = srv.iperf3(&["-u", "-b", "8M", "-l", "1000", "-t", "1"]);
    let s = &j["end"]["sum"];
    let packets = u(s, &["packets"]);
    // 8 Mbit/s of 1000-byte datagrams for 1 s: about 1000 of them.
    assert!((500..=1500).contains(&packets), "{s}");
    assert_eq!(u(s, &["lost_packets"]), 0, "{s}");
    let sent = u(&j, &["end", "sum_sent", "bytes"]);
    assert_eq!(u(&j, &["end", "sum_received", "bytes"]), sent);
    assert_eq!(sent, packets * 1000);
    // 64-bit counters and reverse: the server sends, the client counts.
    let r = srv.iperf3(&[
        "-u",
        "-b",
        "4M",
        "-l",
        "1200",
        "-t",
        "1",
        "-R",
        "--udp-counters-64bit",
    ]);
    let s = &r["end"]["sum"];
    assert!(u(s, &["packets"]) > 0, "{s}");
    assert_eq!(u(s, &["lost_packets"]), 0, "{s}");
}

#[test]
fn get_server_output_shows_netrigs_own_count() {
    if !have_iperf3("get_server_output_shows_netrigs_own_count") {
        return;
    }
    let srv = Srv::start(&[]);
    let out = srv.iperf3_raw(&["-t", "1", "--get-server-output"], false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("Server output:"), "{text}");
    assert!(
        text.contains("netrig serve (iperf3 protocol): tcp, 1 streams"),
        "{text}"
    );
    assert!(text.contains("received"), "{text}");
}

#[test]
fn limits_and_the_key_refuse_iperf3_clients_with_a_reason() {
    if !have_iperf3("limits_and_the_key_refuse_iperf3_clients_with_a_reason") {
        return;
    }
    let srv = Srv::start(&["--max-duration", "2s"]);
    let out = srv.iperf3_raw(&["-t", "5"], false);
    assert!(!out.status.success(), "{out:?}");
    srv.wait_for(&["refused: iperf3: server limit: max duration 2 s"]);

    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "a shared secret of some length\n").unwrap();
    let key = key.to_str().unwrap();
    let keyed = Srv::start(&["--key", key]);
    let out = keyed.iperf3_raw(&["-t", "1"], false);
    assert!(!out.status.success(), "{out:?}");
    keyed.wait_for(&["refused: iperf3: iperf3 clients cannot prove the pre-shared key"]);
    let open = Srv::start(&["--key", key, "--iperf3-allow-unauthenticated"]);
    open.iperf3(&["-t", "1"]);
}

#[test]
fn hostile_bytes_on_the_iperf3_port_are_refused_and_the_server_serves_on() {
    if !have_iperf3("hostile_bytes_on_the_iperf3_port_are_refused_and_the_server_serves_on") {
        return;
    }
    let srv = Srv::start(&[]);
    // Not a cookie.
    let mut s = TcpStream::connect(srv.iperf3).unwrap();
    s.write_all(&[b'G'; 37]).unwrap();
    srv.wait_for(&["refused: iperf3: not an iperf3 cookie"]);
    // A cookie, then a parameter message longer than iperf3 allows: the
    // server asks for parameters (9), then answers SERVER_ERROR (-2).
    let mut s = TcpStream::connect(srv.iperf3).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"abcdefghijklmnopqrstuvwxyz234567abcd\0")
        .unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    assert_eq!(b[0], 9);
    s.write_all(&(1u32 << 30).to_be_bytes()).unwrap();
    s.read_exact(&mut b).unwrap();
    assert_eq!(b[0] as i8, -2);
    srv.wait_for(&["refused: iperf3", "over the 8192-byte limit"]);
    // Invalid JSON likewise.
    let mut s = TcpStream::connect(srv.iperf3).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"bcdefghijklmnopqrstuvwxyz234567abcde\0")
        .unwrap();
    s.read_exact(&mut b).unwrap();
    s.write_all(&[0, 0, 0, 5, b'{', b'x', b'x', b'x', b'x'])
        .unwrap();
    s.read_exact(&mut b).unwrap();
    assert_eq!(b[0] as i8, -2);
    // A silent connection holds no test: a real client runs meanwhile.
    let _silent = TcpStream::connect(srv.iperf3).unwrap();
    srv.iperf3(&["-t", "1"]);
}

#[test]
fn byte_and_block_bounds_and_socket_options_of_the_matrix_work_with_the_real_client() {
    if !have_iperf3(
        "byte_and_block_bounds_and_socket_options_of_the_matrix_work_with_the_real_client",
    ) {
        return;
    }
    let srv = Srv::start(&[]);
    // -n and -k bound the run by bytes and by blocks (of -l, 128 KiB by
    // default): exactly that many bytes leave and arrive.
    for (args, want) in [
        (vec!["-n", "20M"], Some(20 << 20)),
        (vec!["-k", "50", "-l", "64K"], Some(50 * 64 * 1024)),
        (vec!["-t", "1", "-l", "128K", "-w", "256K"], None),
        (vec!["-t", "1", "-Z", "-C", "cubic", "-N"], None),
    ] {
        let j = srv.iperf3(&args);
        let sent = u(&j, &["end", "sum_sent", "bytes"]);
        let received = u(&j, &["end", "sum_received", "bytes"]);
        assert!(sent > 0, "{args:?}");
        assert_eq!(received, sent, "{args:?}");
        if let Some(want) = want {
            assert_eq!(sent, want, "{args:?}");
        }
    }
}
