//! `--cport lo-hi` (ctsTraffic -LocalPort): the local ports data
//! connections bind to, shared by every event loop. A port is leased to one
//! connection and comes back when its socket is closed, so a new connection
//! never takes a port another loop's connection still holds (which the
//! kernel refuses with EADDRNOTAVAIL).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The ports free for a new connection.
#[derive(Debug)]
pub(super) struct PortPool(Mutex<VecDeque<u16>>);

/// One port, held until dropped (after its socket: declare it after the
/// stream in a struct).
#[derive(Debug)]
pub(super) struct PortLease {
    pub(super) port: u16,
    pool: Arc<PortPool>,
}

impl PortPool {
    /// Ports `lo..=hi`, handed out lowest first, then in the order they
    /// come back.
    pub(super) fn new(lo: u16, hi: u16) -> Arc<PortPool> {
        Arc::new(PortPool(Mutex::new((lo..=hi).collect())))
    }

    /// A free port, if one is.
    pub(super) fn take(self: &Arc<Self>) -> Option<PortLease> {
        let port = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()?;
        Some(PortLease {
            port,
            pool: Arc::clone(self),
        })
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        self.pool
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(self.port);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_held_until_its_lease_is_dropped() {
        let p = PortPool::new(10, 12);
        let a = p.take().unwrap();
        let b = p.take().unwrap();
        let c = p.take().unwrap();
        assert_eq!((a.port, b.port, c.port), (10, 11, 12));
        assert!(p.take().is_none());
        drop(b);
        let d = p.take().unwrap();
        assert_eq!(d.port, 11);
        assert!(p.take().is_none());
        drop((a, c, d));
        let mut back: Vec<u16> = std::iter::from_fn(|| {
            p.take().map(|l| {
                let port = l.port;
                std::mem::forget(l);
                port
            })
        })
        .collect();
        back.sort_unstable();
        assert_eq!(back, vec![10, 11, 12]);
    }
}
