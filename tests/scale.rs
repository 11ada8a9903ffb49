//! Scale: a client holds thousands of concurrent verified connections on a
//! few threads and one descriptor each (issue 14). The full-size runs
//! (19,500 per process, 100,000 across processes) are `bench/scale.sh`.

#[path = "common/bin.rs"]
mod bin;
use bin::*;

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
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

/// Whether a status row's In-Flight column (after two rates with their
/// units) shows all `n` connections at once.
fn all_in_flight(n: usize) -> impl FnMut(&str) -> bool {
    move |l| is_row(l) && l.split_whitespace().nth(5) == Some(&n.to_string())
}

#[test]
fn a_client_holds_thousands_of_connections_on_a_few_threads() {
    const N: usize = 2000;
    let (_srv, addr) = serve(&[
        "-q",
        "--max-conns-per-client",
        "3000",
        "--max-conns",
        "3000",
    ]);
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
    // The connection loops (one per core), the main thread and the signal handler.
    assert!(th <= cores + 3, "{th} threads for {N} connections");
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
    const N: usize = 19_000;
    let (srv, addr) = serve(&[
        "-q",
        "--max-conns-per-client",
        "20000",
        "--max-conns",
        "20000",
    ]);
    let spid = srv.0.id();
    let t = addr.to_string();
    let normal = [
        "tcp",
        &t,
        "-n",
        "1M",
        "-c",
        "2",
        "--iterations",
        "2",
        "-v",
        "0",
    ];
    // Once served, everything the server keeps (event loops and all) is in the baseline.
    run_json(&normal, 0);
    let base_fds = fd_count(spid);
    let n = N.to_string();
    let (big, _) = spawn_ready(&hold(&t, &n, "60s"), all_in_flight(N), 60);
    let (th, fds) = (threads(spid), fd_count(spid));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("{N} connections held: server {th} threads, {fds} descriptors");
    // The loops (one per core), the acceptor, the main thread, the signal handler.
    assert!(th <= cores + 4, "{th} server threads for {N} connections");
    assert!((N..=N + 30).contains(&fds), "{fds} server descriptors");
    // A normal test meanwhile, served in full.
    let (v, _) = run_json(
        &[
            "tcp",
            &t,
            "-n",
            "1M",
            "-c",
            "2",
            "--iterations",
            "2",
            "-v",
            "0",
        ],
        0,
    );
    assert_eq!(
        v["result"]["totals"]["completed"], 4,
        "{}",
        v["result"]["totals"]
    );
    // Stopped: every connection is cancelled and the server lets go of all.
    let (code, _) = interrupt(big);
    assert_eq!(code, Some(130));
    let after = settles_to(spid, base_fds, 30);
    assert!(
        after <= base_fds,
        "server descriptors {after} > {base_fds} before"
    );
}
