//! The README's examples, run as a user would, scaled down: every line of
//! every `sh` block (but the build commands) runs in a scratch directory,
//! with `server.example` pointing at a local server and each test's size or
//! time cut to a fraction of a second. A flag renamed or removed, or an
//! example that no longer works, fails here, so the README cannot drift.

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bin;
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
        // The shortest idle and phases the RPM's moving average allows.
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
    // Client examples run side by side (below): from one address, more
    // than the default four tests at once would be refused.
    let (_srv, open_server) = serve(&["-q", "--max-tests-per-client", "64"]);
    // Clients given the README's key need a server that proves it holds it
    // (started once the example has made the key file).
    let mut keyed = None;
    let relay_addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    // `netrig serve` examples listen on the default port: say so plainly if
    // something else holds it.
    let default_port_taken = listening("127.0.0.1:4794".parse().unwrap());
    let mut failures = Vec::new();
    // Client examples (most of the time: `load`'s phases are seconds long)
    // run in the background, a few at once; an example waits for those
    // that name one of its files (one writes what the next reads).
    let mut running: Vec<Background> = Vec::new();
    for line in &lines {
        let files = files_of(line);
        let (wait, keep): (Vec<_>, Vec<_>) = running
            .drain(..)
            .partition(|b| b.files.iter().any(|f| files.contains(f)));
        running = keep;
        failures.extend(wait.into_iter().filter_map(Background::failure));
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
                keyed
                    .get_or_insert_with(|| {
                        serve(&["-q", "--key", &key, "--max-tests-per-client", "64"])
                    })
                    .1
            }
            false => open_server,
        };
        let local = line
            .replace("server.example:4794", &server.to_string())
            .replace("server.example", &server.to_string());
        let cmd = if words[0] == "netrig" {
            // The binary under test, scaled down (before any trailing comment).
            let run = local.split(" #").next().unwrap_or(&local);
            // One loaded phase where the example names none (`--phases`
            // adds to a list): 5 s instead of 13.
            let one_phase = match sub == "load" && !run.contains("--phases") {
                true => " --phases download",
                false => "",
            };
            format!("{BIN}{}{}{one_phase}", &run["netrig".len()..], scaled(sub))
        } else {
            local.clone()
        };
        // A client through "the relay" needs one: a plain relay to the server.
        let relay = (sub != "relay" && cmd.contains("127.0.0.1:5000") && sub != "serve")
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
                Some(status) => {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        use std::io::Read;
                        let _ = e.read_to_string(&mut err);
                    }
                    let taken = !cmd.contains("--listen") && default_port_taken;
                    failures.push(if taken {
                        format!(
                            "{line}: the default port 4794 was already taken by another process before this test started, so the example cannot listen there (find it: ss -ltnp 'sport = :4794'); it said: {}",
                            err.trim()
                        )
                    } else {
                        format!("{line}: exited early with {status}: {}", err.trim())
                    });
                }
            }
            continue;
        }
        let run = example(line.clone(), cmd, dir.path().to_path_buf());
        // In the foreground: anything of the test's own (a relay above, the
        // README's relay address) and anything not netrig's.
        if sub == "relay" || relay.is_some() || words[0] != "netrig" {
            failures.extend(run().err());
            continue;
        }
        if running.len() >= AT_ONCE {
            failures.extend(running.remove(0).failure());
        }
        running.push(Background {
            files,
            run: std::thread::spawn(run),
        });
    }
    failures.extend(running.into_iter().filter_map(Background::failure));
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

/// Client examples at once in the background: on 2 cores the time-bound
/// ones (`load`'s phases, `-t` runs) overlap, and none has to win a race.
const AT_ONCE: usize = 6;

/// An example running on a thread of its own, and the files it names.
struct Background {
    files: Vec<String>,
    run: std::thread::JoinHandle<Result<(), String>>,
}

impl Background {
    /// Waits for it: its failure, if it failed.
    fn failure(self) -> Option<String> {
        self.run.join().expect("an example's thread").err()
    }
}

/// The words of `line` that name a file (`tcp.json`, `netrig.key`), but
/// not the README's stand-in host.
fn files_of(line: &str) -> Vec<String> {
    line.split(" #")
        .next()
        .unwrap_or(line)
        .split_whitespace()
        .filter(|w| w.contains('.') && w.contains(|c: char| c.is_ascii_alphabetic()))
        .filter(|w| !w.contains("server.example"))
        .map(str::to_string)
        .collect()
}

/// Runs `cmd` (the README's `line`, scaled down) in `dir`: a failure says
/// what and how.
fn example(
    line: String,
    cmd: String,
    dir: std::path::PathBuf,
) -> impl FnOnce() -> Result<(), String> + Send + 'static {
    move || {
        let t0 = Instant::now();
        let out = Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(dir)
            .output()
            .unwrap();
        let code = out.status.code();
        // SCTP examples need a kernel with SCTP (exit 6 names what is missing).
        let ok = code == Some(0) || (line.contains("sctp") && code == Some(6));
        match ok {
            true => Ok(()),
            false => Err(format!(
                "{line}\n  ran: {cmd}\n  exit {code:?} after {:?}: {}",
                t0.elapsed(),
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }
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

/// A console line's shape: numbers (addresses, signs and decimals
/// included) become `#`, units one word each, runs of spaces one space, so
/// a sample and a real run compare by their words and columns.
fn shape(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let digit_at = |i: usize| chars.get(i).is_some_and(char::is_ascii_digit);
    let mut numbered = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let sign =
            (c == '-' || c == '+') && digit_at(i + 1) && !numbered.ends_with(char::is_alphanumeric);
        if c.is_ascii_digit() || sign {
            i += 1;
            while digit_at(i) || (matches!(chars.get(i), Some('.' | ':')) && digit_at(i + 1)) {
                i += 1;
            }
            numbered.push('#');
        } else {
            numbered.push(c);
            i += 1;
        }
    }
    numbered
        .split_whitespace()
        .map(|w| {
            let core = w.trim_matches(|c: char| "(),;".contains(c));
            let unit = match core {
                _ if core.ends_with("bit/s") => "bit/s",
                "B" | "KiB" | "MiB" | "GiB" | "TiB" => "B",
                "connection" | "connections" => "connections",
                // An empty cell stands where a number may be.
                "-" => "#",
                _ => return w.to_string(),
            };
            w.replacen(core, unit, 1)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The ```text block of the README whose first line starts with `first`.
fn sample<'a>(readme: &'a str, first: &str) -> Vec<&'a str> {
    let at = readme
        .find(&format!("```text\n{first}"))
        .unwrap_or_else(|| panic!("no README sample starting {first:?}"));
    let body = &readme[at + "```text\n".len()..];
    body[..body.find("```").expect("the sample ends")]
        .lines()
        .filter(|l| !l.trim().is_empty() && l.trim() != "...")
        .collect()
}

/// The README's console samples have the shape of today's output: each
/// sample line is a line the command prints (with other numbers), and no
/// line the command prints between the sample's first and last line (to
/// its end, where the sample shows the end) is missing from the sample.
#[test]
fn readme_samples_have_the_shape_of_real_output() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    // (the sample's first words, the command scaled down, the sample shows
    // the output to its end)
    let cases: &[(&str, &[&str], bool)] = &[
        // Long enough (~0.3 s on loopback) that its last slice is past the
        // 50 ms a rate needs.
        ("TCP Push to", &["tcp", "-n", "128M"], true),
        (
            "UDP client -> server",
            &["udp", "-b", "200M", "-l", "1400", "-t", "1200ms"],
            true,
        ),
        ("Request/response over", &["rr", "-n", "2000"], false),
        ("64 bytes from", &["ping", "-n", "3", "-i", "20ms"], true),
        (
            "Connect/request/response/close",
            &["crr", "-n", "300", "-P", "2"],
            true,
        ),
    ];
    let mut problems = Vec::new();
    for (first, args, to_end) in cases {
        let want = sample(&readme, first);
        let out = run_expect(args, 0);
        // What a run against the embedded server adds, and warnings.
        let real: Vec<&str> = out
            .lines()
            .filter(|l| !l.trim().is_empty())
            // The CPU-bound verdict is there only when the host was the
            // limit, and the clock offset's "Early:" note only when a loaded
            // host delayed the offset probes more than the datagrams.
            .filter(|l| {
                !l.starts_with("No target given")
                    && !l.starts_with("netrig: warning")
                    && !l.starts_with("CPU-bound: ")
                    && !l.starts_with("Early: ")
            })
            .collect();
        let want_shapes: Vec<String> = want.iter().map(|l| shape(l)).collect();
        let real_shapes: Vec<String> = real.iter().map(|l| shape(l)).collect();
        for (line, s) in want.iter().zip(&want_shapes) {
            if !real_shapes.contains(s) {
                problems.push(format!(
                    "{args:?}: the README shows a line it no longer prints:\n  {line}\n  shape {s}"
                ));
            }
        }
        let from = real_shapes.iter().position(|s| s == &want_shapes[0]);
        let to = if *to_end {
            Some(real_shapes.len() - 1)
        } else {
            real_shapes
                .iter()
                .rposition(|s| Some(s) == want_shapes.last())
        };
        if let (Some(a), Some(b)) = (from, to) {
            for (line, s) in real[a..=b].iter().zip(&real_shapes[a..=b]) {
                if !want_shapes.contains(s) {
                    problems.push(format!(
                        "{args:?}: prints a line the README's sample lacks:\n  {line}\n  shape {s}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn shapes_make_numbers_units_and_spacing_alike() {
    assert_eq!(
        shape("     0.579   29.65 Gbit/s     0.00 bit/s         0"),
        shape(" 12.000  1.00 kbit/s  3.5 bit/s 17")
    );
    assert_eq!(
        shape("Server 127.0.0.1:33487: 8 connections,"),
        "Server #: # connections,"
    );
    assert_eq!(
        shape("Total Bytes Sent : 2147483648 (2.00 GiB)"),
        "Total Bytes Sent : # (# B)"
    );
    assert_eq!(
        shape("offset of -2.4 us +/- 23.9 us"),
        "offset of # us +/- # us"
    );
    assert_eq!(shape("1 connection"), shape("2000 connections"));
    assert_ne!(shape("Retr 1 (520 B)"), shape("Retr 1"));
}
