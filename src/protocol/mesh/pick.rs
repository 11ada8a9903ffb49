//! Which peers a mesh node probes: the `k` of the peer list with the highest
//! rendezvous weight (highest-random-weight hashing) for this node. Every
//! node computes its own choice from the same list, with no coordination;
//! a node joining the list enters a prober's choice only where its weight
//! beats that prober's k-th best, so about k of the N·k assignments move
//! (each one to the new node), and a node leaving moves only the k
//! assignments that pointed at it.
//!
//! The weight is a fixed 64-bit hash of both addresses (FNV-1a, then a
//! SplitMix64 finaliser for avalanche), so every node, whatever its build,
//! makes the same choice for the same list.

use std::net::SocketAddr;

use thiserror::Error;

/// The rendezvous weight of `peer` for prober `me`.
pub fn weight(me: SocketAddr, peer: SocketAddr) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let text = format!("{me}|{peer}");
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // SplitMix64's finaliser: FNV alone leaves addresses differing in their
    // last byte with close weights.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The `k` peers of `list` that `me` probes, highest weight first; `me`
/// itself and repeats are left out.
pub fn choose(me: SocketAddr, list: &[SocketAddr], k: usize) -> Vec<SocketAddr> {
    let mut ranked: Vec<(u64, SocketAddr)> = list
        .iter()
        .filter(|&&p| p != me)
        .map(|&p| (weight(me, p), p))
        .collect();
    // Ties (never seen in practice) broken by address, so the choice stays
    // a function of the list.
    ranked.sort_unstable_by(|a, b| b.cmp(a));
    ranked.dedup_by_key(|(_, p)| *p);
    ranked.into_iter().take(k).map(|(_, p)| p).collect()
}

/// A bad line of a peer list.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {text:?} is not an IP address or IP:PORT")]
pub struct BadPeer {
    pub line: usize,
    pub text: String,
}

/// Reads a peer list: one address a line (`IP`, `IP:PORT` or `[IPv6]:PORT`;
/// without a port, `port`), blank lines and `#` comments ignored.
pub fn parse_list(text: &str, port: u16) -> Result<Vec<SocketAddr>, BadPeer> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        let addr = l
            .parse::<SocketAddr>()
            .or_else(|_| l.parse::<std::net::IpAddr>().map(|ip| (ip, port).into()))
            .map_err(|_| BadPeer {
                line: i + 1,
                text: l.to_string(),
            })?;
        out.push(addr);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn node(i: u32) -> SocketAddr {
        let [a, b, c, d] = 0x0a00_0000u32.wrapping_add(i).to_be_bytes();
        SocketAddr::from(([a, b, c, d], 4795))
    }

    fn nodes(n: u32) -> Vec<SocketAddr> {
        (0..n).map(node).collect()
    }

    #[test]
    fn weights_are_fixed_and_differ_by_prober() {
        let (a, b) = (node(1), node(2));
        // A fixed function: the same on every node and build.
        assert_eq!(weight(a, b), weight(a, b));
        assert_ne!(weight(a, b), weight(b, a));
        assert_ne!(weight(a, b), weight(a, node(3)));
        let w: BTreeSet<u64> = (0..1000).map(|i| weight(a, node(i))).collect();
        assert_eq!(w.len(), 1000);
        // Spread over the whole range, not clustered by the last byte.
        let high = w.iter().filter(|&&x| x >= 1 << 63).count();
        assert!(
            (400..600).contains(&high),
            "{high} of 1000 in the upper half"
        );
    }

    #[test]
    fn weights_are_the_same_on_every_build() {
        // Nodes of different builds must rank peers alike: FNV-1a 64 of
        // "ME|PEER", then SplitMix64's finaliser, as computed by an
        // independent implementation (Python, checked against FNV-1a's
        // published vector for "a", 0xaf63dc4c8601ec8c).
        let a: SocketAddr = "10.0.0.1:4795".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:4795".parse().unwrap();
        let c: SocketAddr = "[fd00::1]:4795".parse().unwrap();
        let d: SocketAddr = "10.0.0.2:9000".parse().unwrap();
        assert_eq!(weight(a, b), 0x19d8_ece4_0eee_a1cb);
        assert_eq!(weight(b, a), 0x4a93_d2a0_31ed_e67b);
        assert_eq!(weight(c, d), 0xa4ff_2d20_2a5b_23e2);
    }

    #[test]
    fn choice_is_the_top_k_without_self() {
        let list = nodes(16);
        let me = list[5];
        let got = choose(me, &list, 3);
        assert_eq!(got.len(), 3);
        assert!(!got.contains(&me));
        let mut want: Vec<SocketAddr> = list.iter().copied().filter(|&p| p != me).collect();
        want.sort_by_key(|&p| std::cmp::Reverse(weight(me, p)));
        assert_eq!(got, want[..3]);
        // The list's order and repeats do not matter.
        let mut shuffled = list.clone();
        shuffled.reverse();
        shuffled.extend_from_slice(&list[..4]);
        assert_eq!(choose(me, &shuffled, 3), got);
        // Fewer peers than k: all of them.
        assert_eq!(choose(me, &list[4..7], 3).len(), 2);
        assert_eq!(choose(me, &[me], 3), Vec::<SocketAddr>::new());
    }

    #[test]
    fn each_node_is_probed_by_k_on_average_and_none_by_many() {
        for n in [16u32, 50, 200] {
            let list = nodes(n);
            let k = 3;
            let mut indegree = vec![0usize; n as usize];
            for &me in &list {
                for p in choose(me, &list, k) {
                    indegree[list.iter().position(|&x| x == p).unwrap()] += 1;
                }
            }
            assert_eq!(indegree.iter().sum::<usize>(), n as usize * k);
            let max = *indegree.iter().max().unwrap();
            assert!(max <= 4 * k, "n {n}: a node probed by {max}");
        }
    }

    #[test]
    fn a_peer_list_file() {
        let text = "# mesh\n10.0.0.1\n\n10.0.0.2:9000  # other port\n[fd00::1]:4795\n  fd00::2 \n";
        assert_eq!(
            parse_list(text, 4795),
            Ok(vec![
                "10.0.0.1:4795".parse().unwrap(),
                "10.0.0.2:9000".parse().unwrap(),
                "[fd00::1]:4795".parse().unwrap(),
                "[fd00::2]:4795".parse().unwrap(),
            ])
        );
        assert_eq!(
            parse_list("10.0.0.1\nnode-b\n", 1),
            Err(BadPeer {
                line: 2,
                text: "node-b".into()
            })
        );
    }

    proptest! {
        /// A node joining moves only assignments to itself: every prober's
        /// new choice is its old one, or the old one with one peer replaced
        /// by the newcomer; and a node leaving moves exactly the
        /// assignments that pointed at it.
        #[test]
        fn joining_and_leaving_move_only_the_newcomers_share(
            n in 4u32..60, k in 1usize..6, seed in any::<u32>()
        ) {
            let list: Vec<SocketAddr> = (0..n).map(|i| node(seed.wrapping_add(i.wrapping_mul(7919)))).collect();
            let new = node(seed.wrapping_sub(1));
            prop_assume!(!list.contains(&new));
            let mut grown = list.clone();
            grown.push(new);
            let mut moved = 0;
            for &me in &list {
                let before: BTreeSet<_> = choose(me, &list, k).into_iter().collect();
                let after: BTreeSet<_> = choose(me, &grown, k).into_iter().collect();
                let gone: Vec<_> = before.difference(&after).collect();
                let came: Vec<_> = after.difference(&before).collect();
                prop_assert!(gone.len() <= 1);
                if let Some(c) = came.first() {
                    prop_assert_eq!(**c, new);
                    prop_assert_eq!(came.len(), 1);
                }
                moved += came.len();
                // Leaving is the reverse.
                let back: BTreeSet<_> = choose(me, &list, k).into_iter().collect();
                prop_assert_eq!(&back, &before);
            }
            prop_assert!(moved <= list.len());
        }
    }

    #[test]
    fn a_join_moves_about_k_of_n_k_assignments() {
        // Averaged over many joins: each prober takes the newcomer with
        // chance k/(N+1), so about k assignments move in all.
        let (n, k) = (40u32, 3usize);
        let list = nodes(n);
        let mut moved = 0usize;
        let trials = 200u32;
        for t in 0..trials {
            let new = node(10_000 + t);
            let mut grown = list.clone();
            grown.push(new);
            for &me in &list {
                moved += usize::from(choose(me, &grown, k).contains(&new));
            }
        }
        let mean = moved as f64 / f64::from(trials);
        let want = (n as f64) * k as f64 / (n as f64 + 1.0);
        assert!(
            (mean - want).abs() < 0.5,
            "{mean} assignments moved per join, expected about {want}"
        );
    }
}
