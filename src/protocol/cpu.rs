//! CPU use of one end over a test: the figures iperf3 prints as "CPU
//! Utilization: local/sender X% (Y%u/Z%s)", and whether the end was the
//! limit rather than the network.
//!
//! iperf3 (src/iperf_util.c, `cpu_util()`) reads `getrusage(RUSAGE_SELF)`
//! and the wall clock when the test starts and when it ends, and reports
//! user and system CPU time over the wall time between, in percent of one
//! core (so a process with busy threads on several cores exceeds 100 %).
//! netrig does the same, and also follows each thread, because the whole
//! process's figure hides one saturated thread among idle ones: an end is
//! *CPU-bound* when its busiest thread was on a core for at least
//! [`BOUND_PERCENT`] of the wall time, or the process used that share of
//! every core the machine has.
//!
//! Protocol layer: samples are taken by `net::cpu`; this is arithmetic.

use serde::{Deserialize, Serialize};

/// A thread (or the whole process) that was on a core this share of the
/// wall time, in percent of one core, was the limit.
pub const BOUND_PERCENT: f64 = 90.0;

/// One reading of a process's CPU clocks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuSample {
    /// Wall clock, µs from any fixed origin (the same for both samples).
    pub wall_us: u64,
    /// User CPU time of the whole process, µs.
    pub user_us: u64,
    /// System CPU time of the whole process, µs.
    pub system_us: u64,
    /// Each live thread's id and CPU time (user + system), µs.
    pub threads: Vec<(i32, u64)>,
    /// Processors online.
    pub cores: u32,
}

/// One end's CPU use over a test, as carried on the wire (a server's
/// session summary) and written in the report. Microseconds, so the
/// summary that carries it stays exactly comparable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuUsage {
    /// Wall time the figures cover, µs.
    pub wall_us: u64,
    /// User CPU time of the process, µs.
    pub user_us: u64,
    /// System (kernel) CPU time of the process, µs.
    pub system_us: u64,
    /// CPU time of the busiest thread, µs.
    pub busiest_thread_us: u64,
    /// Processors online.
    pub cores: u32,
}

/// [`CpuUsage`] with its percentages, as the JSON report shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuReport {
    /// User + system CPU over wall time, percent of one core (iperf3's
    /// `host_total` / `remote_total`).
    pub total_percent: f64,
    /// User CPU over wall time, percent of one core.
    pub user_percent: f64,
    /// System CPU over wall time, percent of one core.
    pub system_percent: f64,
    /// The busiest thread's CPU over wall time, percent of one core.
    pub busiest_thread_percent: f64,
    /// The end was the limit: see [`CpuUsage::cpu_bound`].
    pub cpu_bound: bool,
    #[serde(flatten)]
    pub usage: CpuUsage,
}

impl CpuUsage {
    /// What the process used between two samples. A thread missing from
    /// `start` began within the window and counts whole; one missing from
    /// `end` ended within it and is not seen (its time is still in the
    /// process's totals).
    pub fn between(start: &CpuSample, end: &CpuSample) -> CpuUsage {
        let busiest = end
            .threads
            .iter()
            .map(|&(tid, t)| {
                let before = start
                    .threads
                    .iter()
                    .find(|&&(id, _)| id == tid)
                    .map_or(0, |&(_, b)| b);
                t.saturating_sub(before)
            })
            .max()
            .unwrap_or(0);
        CpuUsage {
            wall_us: end.wall_us.saturating_sub(start.wall_us),
            user_us: end.user_us.saturating_sub(start.user_us),
            system_us: end.system_us.saturating_sub(start.system_us),
            busiest_thread_us: busiest,
            cores: end.cores,
        }
    }

    fn percent(&self, us: u64) -> f64 {
        if self.wall_us > 0 {
            100.0 * us as f64 / self.wall_us as f64
        } else {
            0.0
        }
    }

    /// User + system over wall time, percent of one core.
    pub fn total_percent(&self) -> f64 {
        self.percent(self.user_us + self.system_us)
    }

    /// The busiest thread over wall time, percent of one core.
    pub fn busiest_thread_percent(&self) -> f64 {
        self.percent(self.busiest_thread_us)
    }

    /// The end was the limit: its busiest thread was on a core at least
    /// [`BOUND_PERCENT`] of the time, or the process used that share of
    /// every core.
    pub fn cpu_bound(&self) -> bool {
        self.busiest_thread_percent() >= BOUND_PERCENT
            || self.total_percent() >= BOUND_PERCENT * f64::from(self.cores.max(1))
    }

    /// The figures with their percentages.
    pub fn report(&self) -> CpuReport {
        CpuReport {
            total_percent: self.total_percent(),
            user_percent: self.percent(self.user_us),
            system_percent: self.percent(self.system_us),
            busiest_thread_percent: self.busiest_thread_percent(),
            cpu_bound: self.cpu_bound(),
            usage: *self,
        }
    }
}

/// Both ends of a run, as the report's `cpu` object.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuBoth {
    /// This process (the client).
    pub local: CpuReport,
    /// The server's process over its session, when it reported it (the
    /// busiest of several servers).
    pub remote: Option<CpuReport>,
}

impl CpuBoth {
    /// The client's usage and what the servers reported; the remote end is
    /// the server that used the most CPU.
    pub fn new(local: CpuUsage, remote: impl IntoIterator<Item = CpuUsage>) -> CpuBoth {
        let remote = remote
            .into_iter()
            .max_by(|a, b| a.total_percent().total_cmp(&b.total_percent()));
        CpuBoth {
            local: local.report(),
            remote: remote.map(|r| r.report()),
        }
    }

    /// iperf3's line: "CPU Utilization: local/sender 97.1% (2.1%u/95.0%s),
    /// remote/receiver 60.3% (...)"; `local_role` says which end this is
    /// (sender, receiver or both), then the verdict when an end was the limit.
    pub fn line(&self, local_role: &str, remote_role: &str) -> String {
        let one = |r: &CpuReport| {
            format!(
                "{:.1}% ({:.1}%u/{:.1}%s; busiest thread {:.1}%)",
                r.total_percent, r.user_percent, r.system_percent, r.busiest_thread_percent
            )
        };
        let mut s = format!("CPU Utilization: local/{local_role} {}", one(&self.local));
        match &self.remote {
            Some(r) => s += &format!(", remote/{remote_role} {}", one(r)),
            None => s += &format!(", remote/{remote_role} not reported"),
        }
        s
    }

    /// The verdict on the run's host limit: which ends were CPU-bound.
    pub fn verdict(&self) -> Option<String> {
        let local = self.local.cpu_bound;
        let remote = self.remote.is_some_and(|r| r.cpu_bound);
        let which = match (local, remote) {
            (false, false) => return None,
            (true, false) => "the client",
            (false, true) => "the server",
            (true, true) => "both ends",
        };
        Some(format!(
            "CPU-bound: {which} had a thread on a core {BOUND_PERCENT:.0}% of the time or more (or used that share of every core); the figures measure the host, not only the network"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(wall: u64, user: u64, sys: u64, threads: &[(i32, u64)]) -> CpuSample {
        CpuSample {
            wall_us: wall,
            user_us: user,
            system_us: sys,
            threads: threads.to_vec(),
            cores: 2,
        }
    }

    #[test]
    fn usage_is_the_difference_over_wall_time() {
        let a = sample(1_000_000, 200_000, 300_000, &[(1, 100_000), (2, 50_000)]);
        let b = sample(
            3_000_000,
            700_000,
            1_800_000,
            &[(1, 1_900_000), (2, 250_000), (3, 400_000)],
        );
        let u = CpuUsage::between(&a, &b);
        assert_eq!(u.wall_us, 2_000_000);
        assert_eq!(u.user_us, 500_000);
        assert_eq!(u.system_us, 1_500_000);
        // Thread 1 grew 1.8 s; thread 3, new, counts whole (0.4 s).
        assert_eq!(u.busiest_thread_us, 1_800_000);
        let r = u.report();
        assert_eq!(r.total_percent, 100.0);
        assert_eq!(r.user_percent, 25.0);
        assert_eq!(r.system_percent, 75.0);
        assert_eq!(r.busiest_thread_percent, 90.0);
        assert!(r.cpu_bound, "a thread at exactly 90% is bound");
    }

    #[test]
    fn new_threads_count_whole_and_none_is_zero() {
        let a = sample(0, 0, 0, &[(1, 500_000)]);
        let b = sample(1_000_000, 0, 0, &[(1, 600_000), (7, 300_000)]);
        assert_eq!(CpuUsage::between(&a, &b).busiest_thread_us, 300_000);
        let none = CpuUsage::between(&a, &sample(1_000_000, 0, 0, &[]));
        assert_eq!(none.busiest_thread_us, 0);
        // Clocks never run backwards; a bad reading gives 0, not a wrap.
        let back = CpuUsage::between(&b, &a);
        assert_eq!((back.wall_us, back.busiest_thread_us), (0, 0));
        assert_eq!(back.total_percent(), 0.0);
    }

    #[test]
    fn bound_by_one_thread_or_by_every_core() {
        // Wall 10 s; figures in tenths of a second.
        let u = |busiest: u64, total: u64, cores: u32| CpuUsage {
            wall_us: 10_000_000,
            user_us: total * 50_000,
            system_us: total * 50_000,
            busiest_thread_us: busiest * 100_000,
            cores,
        };
        assert!(!u(89, 89, 2).cpu_bound());
        assert!(u(90, 90, 2).cpu_bound());
        // Two threads at 85% each on a 2-core machine: neither is bound,
        // the machine is not full.
        assert!(!u(85, 170, 2).cpu_bound());
        assert!(u(85, 180, 2).cpu_bound());
        assert!(!u(85, 179, 2).cpu_bound());
        // One core: the process's share of it.
        assert!(u(50, 90, 1).cpu_bound());
        assert!(!u(50, 89, 1).cpu_bound());
        // No wall time: nothing is bound.
        assert!(
            !CpuUsage {
                wall_us: 0,
                ..u(90, 90, 2)
            }
            .cpu_bound()
        );
    }

    #[test]
    fn remote_is_the_busiest_server_and_verdict_names_the_end() {
        let idle = CpuUsage {
            wall_us: 1_000_000,
            user_us: 100_000,
            system_us: 100_000,
            busiest_thread_us: 100_000,
            cores: 2,
        };
        let busy = CpuUsage {
            busiest_thread_us: 950_000,
            system_us: 900_000,
            ..idle
        };
        let both = CpuBoth::new(idle, [idle, busy, idle]);
        assert_eq!(both.remote, Some(busy.report()));
        assert_eq!(both.local, idle.report());
        let v = both.verdict().expect("the server was bound");
        assert!(v.starts_with("CPU-bound: the server "), "{v}");
        assert_eq!(CpuBoth::new(idle, []).verdict(), None);
        assert!(
            CpuBoth::new(busy, [])
                .verdict()
                .unwrap()
                .contains("the client")
        );
        assert!(
            CpuBoth::new(busy, [busy])
                .verdict()
                .unwrap()
                .contains("both ends")
        );
        let line = both.line("sender", "receiver");
        assert_eq!(
            line,
            "CPU Utilization: local/sender 20.0% (10.0%u/10.0%s; busiest thread 10.0%), \
             remote/receiver 100.0% (10.0%u/90.0%s; busiest thread 95.0%)"
        );
        assert_eq!(
            CpuBoth::new(idle, []).line("sender", "receiver"),
            "CPU Utilization: local/sender 20.0% (10.0%u/10.0%s; busiest thread 10.0%), remote/receiver not reported"
        );
    }
}
