//! Timing `netrig` client runs for the fairness tests: one run's wall time,
//! and the best of several as the baseline a run beside an attack is held to.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use crate::bin::netrig;

/// Runs `args` (a netrig client) and returns how long it took, or why it
/// failed.
pub fn timed(args: &[&str]) -> Result<Duration, String> {
    let t0 = Instant::now();
    let out = netrig(args).output().unwrap();
    let took = t0.elapsed();
    match out.status.code() {
        Some(0) => Ok(took),
        code => Err(format!(
            "{args:?} exited {code:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// The shortest of `n` runs of `args` (the best case is the least noisy on
/// a shared machine).
pub fn best_of(n: usize, args: &[&str]) -> Duration {
    (0..n)
        .map(|_| timed(args).unwrap_or_else(|e| panic!("alone: {e}")))
        .min()
        .unwrap()
}
