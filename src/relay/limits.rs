//! What one relay lets the network make it hold: TCP connections (in all
//! and from one address), UDP flows, time without traffic, and the memory
//! its queues hold. The relay listens on a port anyone can reach, so each
//! has a cap, and what is refused or dropped is counted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The relay's caps.
#[derive(Debug, Clone, Copy)]
pub struct RelayLimits {
    /// Most TCP connections relayed at once; more are reset.
    pub max_conns: u64,
    /// Most TCP connections from one client address at once; more are reset.
    pub max_conns_per_addr: u64,
    /// Most UDP flows (client addresses, netrig UDP tests) at once; datagrams
    /// from further addresses are dropped.
    pub max_flows: u64,
    /// A connection or flow with no traffic either way for this long is
    /// closed (a control connection counts the traffic of its UDP flows).
    pub idle_timeout: Duration,
    /// Most memory all queues of the relay hold together (TCP delay lines
    /// and UDP delay lines), counted as allocated ([`alloc_size`]).
    pub max_queue_bytes: u64,
}

impl Default for RelayLimits {
    fn default() -> Self {
        RelayLimits {
            max_conns: 512,
            max_conns_per_addr: 64,
            max_flows: 256,
            idle_timeout: Duration::from_secs(60),
            max_queue_bytes: 256 << 20,
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

/// Open connections per client address.
#[derive(Debug, Default)]
pub struct PerAddr(Mutex<HashMap<IpAddr, u64>>);

/// One connection's place in [`PerAddr`], given back on drop.
#[derive(Debug)]
pub struct AddrPlace(Arc<PerAddr>, IpAddr);

impl Drop for AddrPlace {
    fn drop(&mut self) {
        let mut m = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.1);
            }
        }
    }
}

/// Takes a place for one more connection from `ip`, or `None` when `ip`
/// already has `max` open.
pub fn take_for(per: &Arc<PerAddr>, ip: IpAddr, max: u64) -> Option<AddrPlace> {
    let mut m = per.0.lock().unwrap_or_else(|e| e.into_inner());
    let n = m.entry(ip).or_insert(0);
    if *n >= max {
        return None;
    }
    *n += 1;
    Some(AddrPlace(Arc::clone(per), ip))
}

/// What the allocator takes for a buffer of `cap` bytes: glibc's malloc
/// adds an 8-byte header and rounds up to 16, at least 32 (malloc(3),
/// "Notes"; the chunk layout in glibc's malloc.c). Nothing for `cap` 0.
pub fn alloc_size(cap: usize) -> u64 {
    if cap == 0 {
        return 0;
    }
    (cap as u64 + 8).next_multiple_of(16).max(32)
}

/// What one queued entry of type `T` owning a buffer of `cap` bytes costs:
/// the buffer as allocated, and the entry twice (a `VecDeque` may hold up to
/// twice its length).
pub fn entry_cost<T>(cap: usize) -> u64 {
    alloc_size(cap) + 2 * std::mem::size_of::<T>() as u64
}

/// The memory the relay's queues hold, all of them together, bounded.
#[derive(Debug)]
pub struct MemBudget {
    used: AtomicU64,
    max: u64,
}

impl MemBudget {
    /// A budget of `max` bytes.
    pub fn new(max: u64) -> MemBudget {
        MemBudget {
            used: AtomicU64::new(0),
            max,
        }
    }

    /// Counts `n` more bytes in, unless that would pass the maximum.
    pub fn try_take(&self, n: u64) -> bool {
        self.used
            .fetch_update(SeqCst, SeqCst, |q| {
                q.checked_add(n).filter(|&total| total <= self.max)
            })
            .is_ok()
    }

    /// Counts `n` bytes out.
    pub fn give(&self, n: u64) {
        self.used.fetch_sub(n, SeqCst);
    }

    /// Bytes held.
    pub fn used(&self) -> u64 {
        self.used.load(SeqCst)
    }

    /// Bytes that may still be taken.
    pub fn free(&self) -> u64 {
        self.max.saturating_sub(self.used())
    }

    /// The maximum.
    pub fn max(&self) -> u64 {
        self.max
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
    fn each_address_has_its_own_places() {
        let per = Arc::new(PerAddr::default());
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let a1 = take_for(&per, a, 2).unwrap();
        let a2 = take_for(&per, a, 2).unwrap();
        assert!(take_for(&per, a, 2).is_none());
        let b1 = take_for(&per, b, 2).unwrap();
        drop(a1);
        let a3 = take_for(&per, a, 2).unwrap();
        assert!(take_for(&per, a, 2).is_none());
        drop((a2, a3, b1));
        assert!(per.0.lock().unwrap().is_empty());
    }

    #[test]
    fn allocations_are_counted_as_malloc_takes_them() {
        assert_eq!(alloc_size(0), 0);
        assert_eq!(alloc_size(1), 32);
        assert_eq!(alloc_size(24), 32);
        assert_eq!(alloc_size(25), 48);
        assert_eq!(alloc_size(40), 48);
        assert_eq!(alloc_size(41), 64);
        assert_eq!(alloc_size(8000), 8016);
        assert_eq!(entry_cost::<[u64; 5]>(1), 32 + 80);
        assert_eq!(entry_cost::<[u64; 5]>(0), 80);
    }

    #[test]
    fn a_budget_holds_up_to_its_limit_exactly() {
        let q = MemBudget::new(1000);
        assert!(q.try_take(600));
        assert!(q.try_take(400));
        assert!(!q.try_take(1));
        assert_eq!((q.used(), q.free(), q.max()), (1000, 0, 1000));
        q.give(400);
        assert_eq!((q.used(), q.free()), (600, 400));
        assert!(!q.try_take(401));
        assert!(q.try_take(400));
        let big = MemBudget::new(u64::MAX);
        assert!(big.try_take(u64::MAX));
        assert!(!big.try_take(1));
    }
}
