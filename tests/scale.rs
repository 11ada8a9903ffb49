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
    let (mut p, _) = spawn_ready(
        &[
            "tcp",
            &t,
            "-c",
            &N.to_string(),
            "--iterations",
            "1",
            "--transfer",
            "64K",
            "--burst-size",
            "32K",
            "--burst-period",
            "1500ms",
            "--interval",
            "100ms",
            "--json",
            js.to_str().unwrap(),
        ],
        // The status row's In-Flight column (after two rates with their
        // units) shows all of them at once.
        |l| is_row(l) && l.split_whitespace().nth(5) == Some(&N.to_string()),
        30,
    );
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
