//! The TCP client's event loops over real loopback sockets: up to four per
//! core, each of `-P` connections runs on a loop (thread) of its own, and
//! every connection still moves verified data both ends agree on.

#[path = "common/bin.rs"]
mod bin;

use bin::{BIN, Proc, serve, wait_exit};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The client's connection loops now running (threads named `conns-N`).
fn conn_loops(pid: u32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("conns-"))
        .count()
}

#[test]
fn eight_connections_run_on_a_loop_each_and_all_verify() {
    let (_srv, addr) = serve(&["-q"]);
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
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
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
}
