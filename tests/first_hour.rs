//! What a new user meets in the first hour, from the command line: talking to
//! something that is not a netrig server, output paths, signals, exit codes
//! and conflicting flags (issue 11's defects, each pinned by a test).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

#[path = "common/bin.rs"]
mod bin;
use bin::*;

/// How a fake server answers netrig's hello.
#[derive(Clone, Copy)]
enum Fake {
    /// Reads and never answers (an HTTP server waiting for a request line).
    Silent,
    /// Reads iperf3's 37-byte cookie and answers PARAM_EXCHANGE (9).
    Iperf3,
    /// Answers with an HTTP error, as a web server does to garbage.
    Http,
}

/// A loopback listener that answers every connection as `kind` does.
fn fake_server(kind: Fake) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().take(8) {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 37];
                let _ = s.read_exact(&mut buf);
                match kind {
                    Fake::Silent => std::thread::sleep(Duration::from_secs(20)),
                    Fake::Iperf3 => {
                        let _ = s.write_all(&[9]);
                        std::thread::sleep(Duration::from_secs(20));
                    }
                    Fake::Http => {
                        let _ = s.write_all(b"HTTP/1.0 400 Bad request\r\n\r\n");
                    }
                }
            });
        }
    });
    addr
}

/// Every client command says plainly, within a few seconds, that the target
/// is not a netrig server and what it looks like (it used to wait 10–30 s and
/// print EAGAIN or "bad magic").
#[test]
fn a_peer_that_is_not_netrig_is_named_within_seconds() {
    let cases = [
        (Fake::Silent, "no reply to hello within 3s"),
        (Fake::Iperf3, "it looks like an iperf3 server"),
        (Fake::Http, "it answered with HTTP"),
    ];
    for (kind, why) in cases {
        let addr = fake_server(kind).to_string();
        let t0 = Instant::now();
        // All five at once: each waits out the same 3 s.
        let runs: Vec<_> = [
            vec!["tcp", &addr, "-i", "1"],
            vec!["udp", &addr, "-d", "1"],
            vec!["rr", &addr, "-n", "10"],
            vec!["ping", &addr, "-c", "1"],
            vec!["crr", &addr, "-n", "10"],
        ]
        .into_iter()
        .map(|cmd| {
            let child = netrig(&cmd)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (cmd, child)
        })
        .collect();
        for (cmd, child) in runs {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(3), "{cmd:?}: {err}");
            assert!(
                err.contains("is not a netrig server") && err.contains(why),
                "{cmd:?}: {err}"
            );
        }
        let el = t0.elapsed();
        assert!(el < Duration::from_secs(9), "{why}: took {el:?}");
    }
}
