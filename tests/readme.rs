//! The README's examples, run as a user would, scaled down: every line of
//! every `sh` block (but the build commands) runs in a scratch directory,
//! with `server.example` pointing at a local server and each test's size or
//! time cut to a fraction of a second. A flag renamed or removed, or an
//! example that no longer works, fails here, so the README cannot drift.

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/bin.rs"]
mod bin;
use bin::*;

/// The lines of the README's `sh` blocks, continuation lines joined.
fn examples(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        let t = line.trim_end();
        if t.starts_with("```") {
            in_sh = t == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(t);
        let full = std::mem::take(&mut pending);
        let body = full.trim();
        if !body.is_empty() && !body.starts_with('#') && !body.starts_with("cargo ") {
            out.push(body.to_string());
        }
    }
    out
}

/// Flags appended to scale a command down (a flag given twice takes its
/// last value).
fn scaled(cmd: &str) -> &'static str {
    match cmd {
        "tcp" => " -n 1M --iterations 1 -P 2 -t 5s -q",
        "udp" => " -t 300ms -q",
        "sweep" => " -t 1s --to-rate 20M -q",
        "rr" => " -n 300 --warmup 10 -q",
        "ping" => " -n 3 -i 10ms -q",
        "crr" => " -n 100 -q",
        "load" => " --idle 1s --phase-time 4s -P 2 -q",
        "relay" => " -t 300ms -q",
        _ => "",
    }
}

fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

#[test]
fn every_readme_example_runs() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let lines = examples(&readme);
    assert!(lines.len() > 30, "found only {} examples", lines.len());
    let dir = tempfile::tempdir().unwrap();
    // The README's scenario file, as a user would save it.
    let scenario = readme
        .split("```text\n# slow start")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README's scenario example");
    std::fs::write(
        dir.path().join("scenario.txt"),
        format!("# slow start{scenario}"),
    )
    .unwrap();
    let (_srv, open_server) = serve(&["-q"]);
    // Clients given the README's key need a server that proves it holds it
    // (started once the example has made the key file).
    let mut keyed = None;
    let relay_addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    let mut failures = Vec::new();
    for line in &lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        let sub = if words[0] == "netrig" {
            words.get(1).copied().unwrap_or("")
        } else {
            ""
        };
        let server = match line.contains("--key netrig.key") && sub != "serve" {
            true => {
                let key = dir.path().join("netrig.key");
                let key = key.to_str().unwrap().to_string();
                keyed.get_or_insert_with(|| serve(&["-q", "--key", &key])).1
            }
            false => open_server,
        };
        let local = line
            .replace("server.example:4794", &server.to_string())
            .replace("server.example", &server.to_string());
        let cmd = if words[0] == "netrig" {
            // The binary under test, scaled down (before any trailing comment).
            let run = local.split(" #").next().unwrap_or(&local);
            format!("{BIN}{}{}", &run["netrig".len()..], scaled(sub))
        } else {
            local.clone()
        };
        // A client through "the relay" needs one: a plain relay to the server.
        let _relay = (sub != "relay" && cmd.contains("127.0.0.1:5000") && sub != "serve")
            .then(|| relay_to(server));
        if sub == "serve" {
            // A server runs until stopped: it must start and keep running.
            let mut child = Command::new("sh")
                .args(["-c", &format!("exec {}", cmd.trim_end_matches(" -q"))])
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(400));
            match child.try_wait().unwrap() {
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                Some(status) => failures.push(format!("{line}: exited early with {status}")),
            }
            continue;
        }
        let t0 = Instant::now();
        let out = Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let code = out.status.code();
        // SCTP examples need a kernel with SCTP (exit 6 names what is missing).
        let ok = code == Some(0) || (line.contains("sctp") && code == Some(6));
        if !ok {
            failures.push(format!(
                "{line}\n  ran: {cmd}\n  exit {code:?} after {:?}: {}",
                t0.elapsed(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    assert!(
        !listening(relay_addr),
        "the example relays stopped by themselves"
    );
    assert!(
        failures.is_empty(),
        "README examples that fail:\n{}",
        failures.join("\n")
    );
}

/// A relay on the README's relay address (127.0.0.1:5000) to `server`.
fn relay_to(server: SocketAddr) -> Proc {
    let to = server.to_string();
    let p = Proc(
        netrig(&["relay", "--listen", "127.0.0.1:5000", "--to", &to, "-q"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while !listening("127.0.0.1:5000".parse().unwrap()) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "relay did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    p
}
