//! Counts per client address and per network prefix (an IPv4 /24, an IPv6
//! /64): what one address may hold is capped by its own limit, and what one
//! network may hold by four addresses' worth, so an attacker with many
//! addresses in one network (an IPv6 host has 2^64) gets no more than a few
//! hosts would.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use super::limits::ClientSlot;

/// How many addresses' worth one prefix may hold.
pub const PREFIX_SHARE: u32 = 4;

/// The network `ip` is in: its /24 (IPv4) or /64 (IPv6), as an address with
/// the host bits cleared.
pub fn prefix(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::from([a, b, c, 0])
        }
        IpAddr::V6(v6) => {
            let mut o = v6.octets();
            o[8..].fill(0);
            IpAddr::from(o)
        }
    }
}

/// One count kept per address and per prefix.
#[derive(Debug, Default)]
pub struct PerSource {
    addrs: Mutex<HashMap<IpAddr, u32>>,
    prefixes: Mutex<HashMap<IpAddr, u32>>,
}

/// Which cap a source reached, and how many it held before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Address { has: u32 },
    Prefix { prefix: IpAddr, has: u32 },
}

/// An address's and its prefix's share, given back on drop.
pub struct SourceSlot<'a> {
    _addr: ClientSlot<'a>,
    _prefix: ClientSlot<'a>,
}

impl PerSource {
    /// Counts one more for `ip`, or says which cap (`max` for the address,
    /// [`PREFIX_SHARE`] × `max` for its prefix) it would pass.
    pub fn take(&self, ip: IpAddr, max: u32) -> Result<SourceSlot<'_>, Over> {
        let ip = ip.to_canonical();
        let (addr, n) = count(&self.addrs, ip);
        if n > max {
            return Err(Over::Address { has: n - 1 });
        }
        let net = prefix(ip);
        let (pre, n) = count(&self.prefixes, net);
        if n > max.saturating_mul(PREFIX_SHARE) {
            return Err(Over::Prefix {
                prefix: net,
                has: n - 1,
            });
        }
        Ok(SourceSlot {
            _addr: addr,
            _prefix: pre,
        })
    }

    /// The count held by `ip` now.
    #[cfg(test)]
    pub fn held(&self, ip: IpAddr) -> u32 {
        let m = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&ip.to_canonical()).copied().unwrap_or(0)
    }

    /// Takes back a slot handed over without being given back
    /// ([`std::mem::forget`]): the worker thread's copy.
    pub fn adopt(&self, ip: IpAddr) -> SourceSlot<'_> {
        let ip = ip.to_canonical();
        SourceSlot {
            _addr: ClientSlot {
                map: &self.addrs,
                ip,
            },
            _prefix: ClientSlot {
                map: &self.prefixes,
                ip: prefix(ip),
            },
        }
    }
}

/// Counts one more in `map` for `key`; the slot and the count.
fn count(map: &Mutex<HashMap<IpAddr, u32>>, key: IpAddr) -> (ClientSlot<'_>, u32) {
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    let n = m.entry(key).or_insert(0);
    *n += 1;
    (ClientSlot { map, ip: key }, *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_a_v4_slash_24_and_a_v6_slash_64() {
        let p = |s: &str| prefix(s.parse().unwrap()).to_string();
        assert_eq!(p("192.0.2.77"), "192.0.2.0");
        assert_eq!(p("::ffff:192.0.2.77"), "192.0.2.0");
        assert_eq!(p("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::");
    }

    #[test]
    fn an_address_and_its_prefix_are_capped_and_given_back() {
        let s = PerSource::default();
        let a = |x: u8| IpAddr::from([10, 0, 0, x]);
        let mut held = Vec::new();
        // max 2 per address: 8 per /24.
        for x in 1..=4 {
            held.push(s.take(a(x), 2).unwrap());
            held.push(s.take(a(x), 2).unwrap());
        }
        assert_eq!(s.held(a(1)), 2);
        assert_eq!(s.take(a(1), 2).err(), Some(Over::Address { has: 2 }));
        assert_eq!(
            s.take(a(5), 2).err(),
            Some(Over::Prefix {
                prefix: a(0),
                has: 8
            })
        );
        // Another network is untouched, and refusals were given back.
        assert!(s.take(IpAddr::from([10, 0, 1, 5]), 2).is_ok());
        assert_eq!(s.held(a(1)), 2);
        assert_eq!(s.held(a(5)), 0);
        held.pop();
        assert!(s.take(a(5), 2).is_ok(), "room again in the prefix");
        drop(held);
        assert_eq!(s.held(a(1)), 0);
        let x = s.take(a(1), 1).unwrap();
        std::mem::forget(x);
        assert_eq!(s.held(a(1)), 1);
        drop(s.adopt(a(1)));
        assert_eq!(s.held(a(1)), 0);
    }
}
