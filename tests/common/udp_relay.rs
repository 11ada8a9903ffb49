//! The UDP impairments the older tests were written against, on top of the
//! library relay: every `n`th test datagram gets one action.
#![allow(dead_code)]

use std::net::SocketAddr;

use netrig::protocol::relay::impair::ImpairSpec;

use crate::common::TestRelay;

/// Every `n`th test datagram (1-based; 0 = never) gets the action.
#[derive(Clone, Copy, Debug, Default)]
pub struct Impair {
    pub drop_every: u64,
    pub dup_every: u64,
    pub swap_every: u64,
    pub corrupt_every: u64,
    /// Police with a token bucket: (rate bit/s, depth bytes).
    pub police: Option<(u64, u64)>,
}

pub struct UdpRelay {
    pub addr: SocketAddr,
    relay: TestRelay,
    c2s: bool,
}

impl UdpRelay {
    /// Relays to the netrig server at `server`; impairs the data direction given by `c2s`.
    pub fn start(server: SocketAddr, im: Impair, c2s: bool) -> UdpRelay {
        let (rate_bps, burst) = im.police.unwrap_or((0, 0));
        let spec = ImpairSpec {
            drop_every: im.drop_every,
            dup_every: im.dup_every,
            reorder_every: im.swap_every,
            corrupt_every: im.corrupt_every,
            rate_bps,
            burst,
            ..Default::default()
        };
        let relay = TestRelay::one_way(server, spec, c2s);
        UdpRelay {
            addr: relay.addr,
            relay,
            c2s,
        }
    }

    /// (seen, dropped, duplicated, reordered, corrupted) in the impaired direction.
    pub fn get(&self) -> (u64, u64, u64, u64, u64) {
        let all = self.relay.counts();
        let c = if self.c2s { all.up } else { all.down };
        (
            c.datagrams,
            c.lost + c.policed + c.queue_dropped,
            c.duplicated,
            c.reordered,
            c.corrupted,
        )
    }
}
