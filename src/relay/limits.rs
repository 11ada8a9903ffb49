//! What one relay lets the network make it hold: TCP connections, UDP
//! flows, time without traffic, and bytes waiting in a delay line. The relay
//! listens on a port anyone can reach, so each has a cap, and what is
//! refused or dropped is counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

/// The relay's caps.
#[derive(Debug, Clone, Copy)]
pub struct RelayLimits {
    /// Most TCP connections relayed at once; more are reset.
    pub max_conns: u64,
    /// Most UDP flows (client addresses, netrig UDP tests) at once; datagrams
    /// from further addresses are dropped.
    pub max_flows: u64,
    /// A connection or flow with no traffic either way for this long is closed.
    pub idle_timeout: Duration,
    /// Most bytes waiting in one UDP flow direction's delay line; datagrams
    /// beyond it are dropped and counted as queue drops.
    pub max_queue_bytes: u64,
}

impl Default for RelayLimits {
    fn default() -> Self {
        RelayLimits {
            max_conns: 512,
            max_flows: 256,
            idle_timeout: Duration::from_secs(60),
            max_queue_bytes: 64 << 20,
        }
    }
}

/// One of `max` places, given back on drop.
#[derive(Debug)]
pub struct Place(Arc<AtomicU64>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

/// Takes one of `max` places counted in `open`, or `None` when all are taken.
pub fn take(open: &Arc<AtomicU64>, max: u64) -> Option<Place> {
    let before = open.fetch_add(1, SeqCst);
    let place = Place(Arc::clone(open));
    (before < max).then_some(place)
}

/// Bytes waiting in one delay line, bounded.
#[derive(Debug, Default)]
pub struct QueueBytes(AtomicU64);

impl QueueBytes {
    /// Counts `n` more bytes in, unless that would pass `max`.
    pub fn try_add(&self, n: u64, max: u64) -> bool {
        self.0
            .fetch_update(SeqCst, SeqCst, |q| {
                q.checked_add(n).filter(|&total| total <= max)
            })
            .is_ok()
    }

    /// Counts `n` bytes out.
    pub fn remove(&self, n: u64) {
        self.0.fetch_sub(n, SeqCst);
    }

    /// Bytes waiting.
    pub fn get(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_run_out_and_come_back() {
        let open = Arc::new(AtomicU64::new(0));
        let a = take(&open, 2).unwrap();
        let b = take(&open, 2).unwrap();
        assert!(take(&open, 2).is_none());
        assert_eq!(open.load(SeqCst), 2);
        drop(a);
        let c = take(&open, 2);
        assert!(c.is_some());
        drop((b, c));
        assert_eq!(open.load(SeqCst), 0);
    }

    #[test]
    fn a_queue_holds_up_to_its_limit_exactly() {
        let q = QueueBytes::default();
        assert!(q.try_add(600, 1000));
        assert!(q.try_add(400, 1000));
        assert!(!q.try_add(1, 1000));
        assert_eq!(q.get(), 1000);
        q.remove(400);
        assert!(q.try_add(400, 1000));
        assert!(!q.try_add(u64::MAX, u64::MAX));
    }
}
