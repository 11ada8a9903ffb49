//! UDP stream groups: `udp -P N` and `--bidir` run a session per stream,
//! and the server counts the group as one test against its test limits, as
//! iperf3 counts one test however many streams it has. The first stream
//! takes the test slot and opens the group for the rest, from the same
//! address, for a short while; the rate limit applies to the group's sum
//! (checked on each stream's spec, which carries the group's size).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How long after the first stream the others may join.
const JOIN_WINDOW: Duration = Duration::from_secs(30);

/// Most groups open at once; beyond it later streams take slots of their own.
const MAX_OPEN: usize = 4096;

#[derive(Debug)]
struct Group {
    ip: IpAddr,
    left: u32,
    until: Instant,
}

/// The groups open for more streams.
#[derive(Debug, Default)]
pub(super) struct Groups(Mutex<HashMap<Uuid, Group>>);

impl Groups {
    /// Group `id`'s first stream, from `ip`, was admitted: `more` may join.
    pub(super) fn open(&self, id: Uuid, ip: IpAddr, more: u32, now: Instant) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|_, v| v.until > now && v.left > 0);
        if more > 0 && g.len() < MAX_OPEN {
            g.insert(
                id,
                Group {
                    ip,
                    left: more,
                    until: now + JOIN_WINDOW,
                },
            );
        }
    }

    /// A later stream of group `id` from `ip`: whether it joins the group
    /// (and needs no test slot of its own).
    pub(super) fn join(&self, id: Uuid, ip: IpAddr, now: Instant) -> bool {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(v) = g.get_mut(&id) else {
            return false;
        };
        if v.ip != ip || v.until <= now || v.left == 0 {
            return false;
        }
        v.left -= 1;
        if v.left == 0 {
            g.remove(&id);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_admits_its_streams_from_its_address_for_a_while() {
        let g = Groups::default();
        let (id, ip, other) = (
            Uuid::from_u128(1),
            IpAddr::from([10, 0, 0, 1]),
            IpAddr::from([10, 0, 0, 2]),
        );
        let t = Instant::now();
        assert!(!g.join(id, ip, t), "not open yet");
        g.open(id, ip, 2, t);
        assert!(!g.join(id, other, t), "another address");
        assert!(g.join(id, ip, t));
        assert!(g.join(id, ip, t));
        assert!(!g.join(id, ip, t), "no room left");
        g.open(Uuid::from_u128(2), ip, 1, t);
        assert!(!g.join(Uuid::from_u128(2), ip, t + JOIN_WINDOW), "too late");
        assert!(!g.join(Uuid::from_u128(3), ip, t), "unknown group");
    }
}
