//! Reads this process's CPU clocks for [`crate::protocol::cpu`]: `getrusage
//! (RUSAGE_SELF)` for the process (as iperf3's `cpu_util()`), and each
//! thread's user + system time from `/proc/self/task/*/stat` (clock ticks,
//! usually 10 ms: the busiest thread is a verdict, not a precise figure).

use crate::protocol::cpu::CpuSample;
use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The wall-clock origin every sample counts from.
fn origin() -> Instant {
    static O: OnceLock<Instant> = OnceLock::new();
    *O.get_or_init(Instant::now)
}

fn ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// utime + stime, in clock ticks, from a `/proc/.../stat` line: the fields
/// after the command name, which is in parentheses and may hold spaces.
fn stat_ticks(line: &str) -> Option<u64> {
    let rest = &line[line.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    // Fields 3.. of stat(5): state is the first here; utime is field 14.
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Threads that said they were ending ([`EndNote`]), with their final CPU
/// time: a thread gone from `/proc` by the end of a test still counts.
/// The last few only: the client's data threads, not a server's history.
static ENDED: Mutex<VecDeque<(i32, u64)>> = Mutex::new(VecDeque::new());
const ENDED_KEPT: usize = 64;

/// Held by a thread whose CPU time a test's report should see whole: on
/// drop (the thread's last act) it notes the thread's final CPU time.
pub struct EndNote;

impl Drop for EndNote {
    fn drop(&mut self) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        // SAFETY: timespec is plain data.
        let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a timespec.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
            return;
        }
        let us = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000;
        let mut e = ENDED.lock().unwrap_or_else(|e| e.into_inner());
        if e.len() == ENDED_KEPT {
            e.pop_front();
        }
        e.push_back((tid, us));
    }
}

fn threads() -> Vec<(i32, u64)> {
    let hz = ticks_per_sec();
    let mut out: Vec<(i32, u64)> = match std::fs::read_dir("/proc/self/task") {
        Ok(dir) => dir
            .filter_map(|e| {
                let e = e.ok()?;
                let tid: i32 = e.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                Some((tid, stat_ticks(&stat)? * 1_000_000 / hz))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    // A thread both noted and still listed (it is exiting) counts once.
    for &(tid, us) in ENDED.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        match out.iter_mut().find(|(t, _)| *t == tid) {
            Some((_, v)) => *v = (*v).max(us),
            None => out.push((tid, us)),
        }
    }
    out
}

/// The process's CPU clocks now.
pub fn sample() -> CpuSample {
    let wall_us = origin().elapsed().as_micros() as u64;
    // SAFETY: rusage is plain data, filled in by the kernel.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0;
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    let (user_us, system_us) = match ok {
        true => (us(ru.ru_utime), us(ru.ru_stime)),
        false => (0, 0),
    };
    CpuSample {
        wall_us,
        user_us,
        system_us,
        threads: threads(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_with_spaces_in_the_name() {
        let line = "1234 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 1";
        assert_eq!(stat_ticks(line), Some(325));
        assert_eq!(stat_ticks("1 (x) S 1"), None);
    }

    #[test]
    fn a_busy_thread_that_ended_shows_in_the_sample() {
        let a = sample();
        let t = std::thread::spawn(|| {
            let _note = EndNote;
            let t0 = Instant::now();
            let mut x = 0u64;
            while t0.elapsed().as_millis() < 300 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        });
        t.join().expect("spinner");
        // The spinner is gone from /proc: only its note tells its time.
        let u = crate::protocol::cpu::CpuUsage::between(&a, &sample());
        assert!(u.wall_us >= 300_000, "{u:?}");
        // One-sided: the spinner was on a core for some of its 300 ms, and
        // the process's clock saw at least what one thread's did.
        assert!(u.busiest_thread_us > 0, "{u:?}");
        assert!(
            u.user_us + u.system_us + 20_000 >= u.busiest_thread_us,
            "{u:?}"
        );
        assert!(u.cores >= 1);
    }
}
