//! What the scale tests share: the descriptors they need (or a skip that
//! says so), a quiet server admitting thousands of sessions from a few
//! addresses, and a sampler of its thread count's peak.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::bin::{Proc, serve, threads};

/// Raises this process's descriptor limit to at least `need`; false, having
/// said that the test is skipped, when it cannot.
pub fn fds_or_skip(need: u64) -> bool {
    match netrig::net::raise_fd_limit() {
        Ok(n) if n >= need => true,
        r => {
            eprintln!("skipped: {need} descriptors needed, the limit is {r:?}");
            false
        }
    }
}

/// A quiet server on loopback that admits `sessions` tests at once,
/// `per_source` tests and connections from each address.
pub fn scale_server(sessions: usize, per_source: usize) -> (Proc, SocketAddr) {
    let per_source = per_source.to_string();
    serve(&[
        "-q",
        "--max-tests",
        &(sessions + 16).to_string(),
        "--max-tests-per-client",
        &per_source,
        "--max-conns-per-client",
        &per_source,
        "--max-conns",
        &(sessions + 256).to_string(),
        // Each session is charged the most it could hold (two histograms
        // grown to their widest for rr), far past what these hold: the
        // account must not depend on this machine's memory.
        "--max-memory",
        &format!("{}M", sessions * 2),
    ])
}

/// This machine's cores.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The threads a server runs whatever its load: two loops per core, the
/// main thread, the signal handler's thread and the thread that watches
/// its flag (README: "Running a public server").
pub fn loop_threads() -> usize {
    2 * cores() + 3
}

/// Samples a process's thread count every 10 ms until stopped.
pub struct ThreadPeak {
    done: Arc<AtomicBool>,
    peak: Arc<AtomicUsize>,
    sampler: JoinHandle<()>,
}

impl ThreadPeak {
    pub fn start(pid: u32) -> ThreadPeak {
        let done = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicUsize::new(0));
        let sampler = {
            let (done, peak) = (Arc::clone(&done), Arc::clone(&peak));
            std::thread::spawn(move || {
                while !done.load(SeqCst) {
                    peak.fetch_max(threads(pid), SeqCst);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        ThreadPeak {
            done,
            peak,
            sampler,
        }
    }

    /// Stops sampling: the most threads seen.
    pub fn stop(self) -> usize {
        self.done.store(true, SeqCst);
        self.sampler.join().unwrap();
        self.peak.load(SeqCst)
    }
}
