//! `netrig serve --metrics` and `--log-format json` (issue 29, items 4 and
//! 5): a real server on loopback, scraped before and after real tests and
//! a refused one, its answers parsed by prometheus-client's own parsers
//! (PyPI; tests/metrics_parse.py); a hostile scrape load beside a real
//! test; and the JSON log of a served test, a refusal and an auth failure.

use crate::bin;

use bin::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A server with `--metrics` on a port of its own choosing, and both addresses.
fn serve_metrics(extra: &[&str]) -> (Proc, SocketAddr, SocketAddr) {
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let mut p = Proc(netrig(&args).stdout(Stdio::piped()).spawn().unwrap());
    let mut out = BufReader::new(p.0.stdout.take().unwrap());
    let (mut first, mut second) = (String::new(), String::new());
    out.read_line(&mut first).unwrap();
    out.read_line(&mut second).unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let after = |l: &str, pre: &str, post: &str| -> SocketAddr {
        let rest = l.split(pre).nth(1).unwrap_or("");
        let a = rest.split(post).next().unwrap_or("").trim();
        a.parse().unwrap_or_else(|_| panic!("no address in {l:?}"))
    };
    let addr = after(&first, " listening on ", " ");
    let metrics = after(&second, "metrics at http://", "/metrics");
    (p, addr, metrics)
}

/// One HTTP exchange with the metrics endpoint: status line and body.
fn get(at: SocketAddr, accept: Option<&str>) -> (String, String) {
    let mut s = TcpStream::connect(at).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let req = format!("GET /metrics HTTP/1.1\r\nHost: netrig\r\n{accept}\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    (head.to_string(), body.to_string())
}

/// Whether Python's prometheus-client is here; says loudly when not.
fn parser_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "SKIPPED: python3 with prometheus-client is missing (pip install prometheus-client; .ci/run installs it): the metrics were not checked with its parser"
        );
    }
    ok
}

/// `text` through prometheus-client's parser for `format`.
fn parse(text: &str, format: &str) -> Value {
    let mut py = Command::new("python3")
        .args([
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/metrics_parse.py"),
            format,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    py.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus-client's {format} parser rejected the metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A scrape in OpenMetrics, parsed.
fn scrape(at: SocketAddr) -> Value {
    let (head, body) = get(at, Some("application/openmetrics-text; version=1.0.0"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    parse(&body, "openmetrics")
}

fn sample(v: &Value, key: &str) -> f64 {
    v["samples"][key]
        .as_f64()
        .unwrap_or_else(|| panic!("no sample {key} in {}", v["samples"]))
}

#[test]
fn counters_move_as_real_tests_run_and_both_formats_parse() {
    if !parser_available() {
        return;
    }
    let (_srv, addr, at) = serve_metrics(&[]);
    let a = addr.to_string();
    let before = scrape(at);
    assert_eq!(before["types"]["netrig_refusals"], "counter");
    assert_eq!(before["types"]["netrig_test_duration_seconds"], "histogram");
    assert_eq!(before["types"]["netrig_build"], "info");
    run_expect(&["tcp", &a, "-t", "1", "-q"], 0);
    run_expect(&["udp", &a, "-t", "1", "-b", "1M", "-q"], 0);
    run_expect(&["ping", &a, "-n", "3", "-i", "10ms", "-q"], 0);
    // Past the server's --max-duration: refused.
    run_expect(&["tcp", &a, "-t", "100h", "-q"], 5);
    let kinds = ["tcp", "udp", "rr_udp"];
    // A session ends on the server when its control connection closes,
    // a moment after the client exits.
    let t0 = Instant::now();
    let after = loop {
        let now = scrape(at);
        let ended = kinds.iter().all(|k| {
            sample(
                &now,
                &format!("netrig_test_duration_seconds_count{{kind=\"{k}\"}}"),
            ) >= 1.0
        });
        if ended || t0.elapsed() > Duration::from_secs(10) {
            break now;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let grew = |key: &str| sample(&after, key) - sample(&before, key);
    for k in kinds {
        let l = format!("{{kind=\"{k}\"}}");
        assert_eq!(grew(&format!("netrig_tests_started_total{l}")), 1.0, "{k}");
        assert_eq!(
            grew(&format!("netrig_test_duration_seconds_count{l}")),
            1.0,
            "{k}"
        );
        assert!(
            grew(&format!("netrig_test_duration_seconds_sum{l}")) > 0.0,
            "{k}"
        );
        assert_eq!(
            sample(&after, &format!("netrig_active_tests_by_kind{l}")),
            0.0
        );
    }
    assert_eq!(grew("netrig_tests_started_total{kind=\"rr_tcp\"}"), 0.0);
    assert_eq!(
        grew("netrig_refusals_total{reason=\"limit_duration\"}"),
        1.0
    );
    assert_eq!(grew("netrig_refusals_total{reason=\"limit_tests\"}"), 0.0);
    assert!(grew("netrig_test_duration_seconds_sum{kind=\"tcp\"}") >= 1.0);
    // The tcp test sent to the server, which verified what it received.
    assert!(grew("netrig_received_bytes_total{kind=\"tcp\"}") > 1e6);
    assert_eq!(grew("netrig_data_errors_total{kind=\"tcp\"}"), 0.0);
    assert_eq!(sample(&after, "netrig_active_tests{}"), 0.0);
    assert_eq!(sample(&after, "netrig_limit_tests{}"), 64.0);
    assert_eq!(sample(&after, "netrig_limit_duration_seconds{}"), 3600.0);
    assert!(sample(&after, "netrig_process_resident_memory_bytes{}") > 1e6);
    assert!(sample(&after, "netrig_process_threads{}") >= 2.0);
    // Without OpenMetrics in its Accept, a scraper gets format 0.0.4.
    let (head, body) = get(at, None);
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(!body.contains("# EOF"));
    let prom = parse(&body, "prometheus");
    assert_eq!(
        sample(&prom, "netrig_refusals_total{reason=\"limit_duration\"}"),
        sample(&after, "netrig_refusals_total{reason=\"limit_duration\"}")
    );
}

/// Scrapes until every kind in `kinds` has ended `n` more tests than in
/// `before` (a session ends on the server when its control connection
/// closes, a moment after the client exits), or 10 s passed.
fn scrape_when_ended(at: SocketAddr, before: &Value, kinds: &[(&str, f64)]) -> Value {
    let t0 = Instant::now();
    loop {
        let now = scrape(at);
        let ended = kinds.iter().all(|(k, n)| {
            let key = format!("netrig_test_duration_seconds_count{{kind=\"{k}\"}}");
            sample(&now, &key) - sample(before, &key) >= *n
        });
        if ended || t0.elapsed() > Duration::from_secs(10) {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn udp_and_rr_sessions_count_the_bytes_they_moved_and_their_errors() {
    if !parser_available() {
        return;
    }
    let (_srv, addr, at) = serve_metrics(&[]);
    let a = addr.to_string();
    let before = scrape(at);
    let (up, _) = run_json(&["udp", &a, "-t", "1", "-b", "1M", "-q"], 0);
    let (down, _) = run_json(&["udp", &a, "-t", "1", "-b", "1M", "-R", "-q"], 0);
    let (ping, _) = run_json(&["ping", &a, "-n", "3", "-i", "10ms", "-q"], 0);
    let (rr, _) = run_json(&["rr", &a, "-n", "5", "-q"], 0);
    let (crr, _) = run_json(&["crr", &a, "-n", "4", "-q"], 0);
    let after = scrape_when_ended(
        at,
        &before,
        &[("udp", 2.0), ("rr_udp", 1.0), ("rr_tcp", 1.0), ("tcp", 1.0)],
    );
    let grew = |name: &str, k: &str| {
        let key = format!("netrig_{name}_total{{kind=\"{k}\"}}");
        sample(&after, &key) - sample(&before, &key)
    };
    let n = |v: &Value| v.as_u64().unwrap() as f64;
    // A UDP stream: what the server received is what the client's result
    // (the server's own count) says; reversed, what its sender sent.
    let received = n(&up["result"]["totals"]["bytes"]);
    let sent = n(&down["result"]["sender"]["bytes"]);
    assert!(received > 0.0 && sent > 0.0);
    assert_eq!(grew("received_bytes", "udp"), received);
    assert_eq!(grew("sent_bytes", "udp"), sent);
    // Ping: every request and reply is one datagram, netrig's header and
    // the payload (the reply at least the words it carries).
    let header = netrig::protocol::udp::header::HEADER_LEN as f64;
    let run = &ping["result"]["runs"][0];
    let answered = n(&run["server_requests"]);
    assert_eq!(answered, 3.0);
    let size = n(&ping["config"]["size"]);
    let reply =
        n(&ping["config"]["reply"]).max(f64::from(netrig::protocol::rr::echo::UDP_REPLY_MIN));
    assert_eq!(grew("received_bytes", "rr_udp"), answered * (header + size));
    assert_eq!(grew("sent_bytes", "rr_udp"), answered * (header + reply));
    // rr over TCP: the requests read and the replies written, warm-up too.
    let run = &rr["result"]["runs"][0];
    let answered = n(&run["server_requests"]);
    assert!(answered >= 5.0);
    let (size, reply) = (n(&rr["config"]["size"]), n(&rr["config"]["reply"]));
    assert_eq!(grew("received_bytes", "rr_tcp"), answered * size);
    assert_eq!(grew("sent_bytes", "rr_tcp"), answered * reply);
    // crr runs as TCP tests, counted there.
    assert_eq!(n(&crr["result"]["transactions"]), 4.0);
    assert!(grew("received_bytes", "tcp") >= 4.0 * n(&crr["config"]["push_bytes"]));
    for k in ["udp", "rr_udp", "rr_tcp", "tcp"] {
        assert_eq!(grew("network_errors", k), 0.0, "{k}");
        assert_eq!(grew("data_errors", k), 0.0, "{k}");
    }
}

/// The names of a process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .collect()
}

/// A server event loop's thread (`serve-N`).
fn is_loop(name: &str) -> bool {
    (name.trim().strip_prefix("serve-")).is_some_and(|n| n.parse::<usize>().is_ok())
}

/// The server's threads but its event loops: the loops it adds for a
/// test's lasting data connections (up to two per core, README: "Running a
/// public server") are not the scrapers' doing.
fn threads(pid: u32) -> usize {
    thread_names(pid).iter().filter(|n| !is_loop(n)).count()
}

/// The server's event loops.
fn loops(pid: u32) -> usize {
    thread_names(pid).iter().filter(|n| is_loop(n)).count()
}

#[test]
fn a_hostile_scrape_load_does_not_hurt_a_test_or_grow_the_server() {
    let (srv, addr, at) = serve_metrics(&["-q"]);
    let pid = srv.0.id();
    let (threads0, fds0) = (threads(pid), fd_count(pid));
    // 200 scrapers that never send, 20 that ask and never read, and a few
    // that send an endless request.
    let mut held: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(at).ok())
        .collect();
    for _ in 0..20 {
        if let Ok(mut s) = TcpStream::connect(at) {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            held.push(s);
        }
    }
    let mut floods = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(at).unwrap();
        floods.push(std::thread::spawn(move || {
            let junk = vec![b'X'; 64 << 10];
            // Ends once the server closes on it.
            let t0 = Instant::now();
            while s.write_all(&junk).is_ok() && t0.elapsed() < Duration::from_secs(20) {}
            t0.elapsed()
        }));
    }
    // A real test meanwhile passes, and the server's threads and
    // descriptors, looked at while it runs, stay bounded: at most 8 scrape
    // connections are held (src/server/scrape.rs), the others closed, and
    // the test's own (a control and 8 data connections).
    let a = addr.to_string();
    let mut tcp = netrig(&["tcp", &a, "-t", "1", "-q"]).spawn().unwrap();
    let (mut most_threads, mut most_fds, mut most_loops) = (0, 0, 0);
    let status = loop {
        most_threads = most_threads.max(threads(pid));
        most_loops = most_loops.max(loops(pid));
        most_fds = most_fds.max(fd_count(pid));
        if let Some(s) = tcp.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(0),
        "the tcp test failed under scrape load"
    );
    assert!(
        most_threads <= threads0,
        "server threads grew under scrape load: {threads0} -> {most_threads}"
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(most_loops <= 4 * cores, "{most_loops} server loops");
    // Besides those, up to two files open for a moment: a scrape reads
    // /proc/self (memory, threads) and a test's summary its CPU times.
    assert!(
        most_fds <= fds0 + 8 + 9 + 2,
        "server descriptors {fds0} -> {most_fds}"
    );
    for f in floods {
        let took = f.join().unwrap();
        assert!(
            took < Duration::from_secs(20),
            "an endless request was read on"
        );
    }
    // Once the held scrapes time out, a real scrape is answered, all held
    // ones still open on this side.
    let t0 = Instant::now();
    loop {
        let mut s = TcpStream::connect(at).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut all = String::new();
        let _ = s.read_to_string(&mut all);
        if all.starts_with("HTTP/1.1 200") {
            assert!(all.contains("netrig_process_threads "));
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no scrape answered");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(held);
}

#[test]
fn bad_metrics_and_log_format_values_are_one_line_errors() {
    let out = netrig(&["serve", "--metrics", "localhost"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--metrics"), "{err}");
    let out = netrig(&["serve", "--log-format", "xml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log-format"));
    // A metrics address in use: cannot listen, exit 1, before serving.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let m = taken.local_addr().unwrap().to_string();
    let out = netrig(&["serve", "--listen", "127.0.0.1:0", "--metrics", &m])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen for --metrics on {m}")),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Waits (up to 10 s) for the log lines that have every `(key, value)`.
fn wait_json(lines: &std::sync::Mutex<Vec<String>>, want: &[(&str, &str)]) -> Value {
    let t0 = Instant::now();
    loop {
        let found = lines.lock().unwrap().iter().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            want.iter().all(|(k, x)| v[*k] == *x).then_some(v)
        });
        if let Some(v) = found {
            return v;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no log line with {want:?} in {:?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_json_log_is_one_object_per_event_with_the_documented_keys() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "a shared secret of some length\n").unwrap();
    let key = key.to_str().unwrap();
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
        "--key",
        key,
    ];
    let mut p = Proc(netrig(&args).stdout(Stdio::piped()).spawn().unwrap());
    let out = BufReader::new(p.0.stdout.take().unwrap());
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let keep = std::sync::Arc::clone(&lines);
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            keep.lock().unwrap().push(l);
        }
    });
    let listening = wait_json(&lines, &[("event", "listening")]);
    let a = listening["address"].as_str().unwrap().to_string();
    run_expect(&["tcp", &a, "-t", "1", "-q", "--key", key], 0);
    run_expect(&["udp", &a, "-t", "1", "-b", "1M", "-q", "--key", key], 0);
    run_expect(&["tcp", &a, "-t", "100h", "-q", "--key", key], 5);
    run_expect(&["tcp", &a, "-t", "1", "-q"], 5);
    let end = wait_json(&lines, &[("event", "session_end"), ("kind", "tcp")]);
    let start = wait_json(&lines, &[("event", "session_start"), ("kind", "tcp")]);
    assert_eq!(start["session"], end["session"]);
    assert_eq!(end["result"], "ok");
    assert!(end["bytes_received"].as_u64().unwrap() > 1_000_000, "{end}");
    assert_eq!(end["bytes_sent"], 0);
    assert!(end["duration_s"].as_f64().unwrap() >= 1.0, "{end}");
    let client: SocketAddr = end["client"].as_str().unwrap().parse().unwrap();
    assert!(client.ip().is_loopback());
    let udp = wait_json(&lines, &[("event", "session_end"), ("kind", "udp")]);
    assert_eq!(udp["result"], "ok");
    assert!(udp["bytes_received"].as_u64().unwrap() > 0, "{udp}");
    assert_eq!(udp["bytes_sent"], 0, "{udp}");
    wait_json(&lines, &[("event", "session_start"), ("kind", "udp")]);
    let refusal = wait_json(&lines, &[("event", "refusal"), ("code", "limit_duration")]);
    assert_eq!(refusal["action"], "refused");
    assert!(refusal["reason"].as_str().unwrap().contains("max duration"));
    let auth = wait_json(&lines, &[("event", "auth_failure"), ("code", "auth")]);
    assert!(auth["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    // Every line, the start-up ones too, is one JSON object with a time.
    for l in lines.lock().unwrap().iter() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        let ts = v["ts"].as_str().unwrap_or_else(|| panic!("no ts: {l}"));
        assert!(ts.ends_with('Z') && ts.len() == 24, "{ts}");
        assert!(v["event"].is_string(), "{l}");
    }
}
