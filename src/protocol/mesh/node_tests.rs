use super::*;

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 4795))
}

fn cfg(k: usize) -> Config {
    Config {
        k,
        interval: Duration::from_millis(1024),
        timeout: Duration::from_millis(512),
        tcp: false,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// An interval of 1024 ms puts every probe's phase on a whole ms (the
// phase is a 1024th of the interval), so the 1 ms steps of `run` hit
// each probe's time exactly.

/// Nodes 1..=n, each with the whole list.
fn mesh(n: u8, k: usize) -> BTreeMap<SocketAddr, Node> {
    let list: Vec<SocketAddr> = (1..=n).map(addr).collect();
    (1..=n)
        .map(|i| {
            let mut node = Node::new(cfg(k), addr(i), u64::from(i) << 32);
            node.set_peers(&list, ms(0));
            (addr(i), node)
        })
        .collect()
}

/// Runs the nodes in memory from `from` to `to` ms in 1 ms steps, every
/// datagram delivered at once, except those to or from `down`.
fn run(nodes: &mut BTreeMap<SocketAddr, Node>, from: u64, to: u64, down: Option<SocketAddr>) {
    for t in from..to {
        let now = ms(t);
        let real = 1_000_000_000_000 + now.as_nanos() as u64;
        let addrs: Vec<SocketAddr> = nodes.keys().copied().collect();
        for a in addrs {
            let out = nodes.get_mut(&a).unwrap().due(now, real);
            for (to, probe) in out {
                if Some(to) == down || Some(a) == down {
                    continue;
                }
                let Some(reply) = nodes.get_mut(&to).unwrap().datagram(a, &probe, now, real) else {
                    panic!("a probe gets a reply");
                };
                assert!(
                    nodes
                        .get_mut(&a)
                        .unwrap()
                        .datagram(to, &reply, now, real)
                        .is_none()
                );
            }
        }
    }
}

#[test]
fn every_node_probes_k_and_answers_its_probers() {
    let mut nodes = mesh(16, 3);
    run(&mut nodes, 0, 10_240, None);
    let mut indegree: BTreeMap<SocketAddr, usize> = BTreeMap::new();
    for (a, n) in &nodes {
        assert_eq!(n.known(), 15);
        let peers: Vec<_> = n.probed().collect();
        assert_eq!(peers.len(), 3, "{a}");
        for (p, peer) in peers {
            *indegree.entry(*p).or_default() += 1;
            assert_ne!(p, a);
            // 10 intervals: 10 probes, each answered.
            assert_eq!(peer.counts.sent, 10, "{a} -> {p}");
            assert_eq!(peer.counts.answered, 10);
            assert_eq!(peer.counts.lost, 0);
            assert_eq!(peer.rtt.count(), 10);
        }
    }
    for (a, n) in &nodes {
        let probers = indegree.get(a).copied().unwrap_or(0);
        assert_eq!(n.answerer.probers(ms(10_240), ms(10_240)), probers, "{a}");
        assert_eq!(n.answerer.answered, 10 * probers as u64);
    }
    assert_eq!(indegree.values().sum::<usize>(), 16 * 3);
}

#[test]
fn a_node_down_is_lost_for_exactly_its_probers() {
    let mut nodes = mesh(16, 3);
    run(&mut nodes, 0, 5120, None);
    let down = addr(7);
    run(&mut nodes, 5120, 8192, Some(down));
    for (a, n) in &nodes {
        if *a == down {
            continue;
        }
        for (p, peer) in n.probed() {
            if *p == down {
                // Three probes while down, each lost 512 ms after it.
                assert_eq!(peer.counts.lost, 3, "{a} -> {p}");
                assert_eq!(peer.window().loss_ratio, 3.0 / 8.0);
            } else {
                assert_eq!(peer.counts.lost, 0, "{a} -> {p}");
            }
        }
    }
}

#[test]
fn the_schedule_spreads_probes_and_wakes_for_timeouts() {
    let mut n = Node::new(cfg(3), addr(1), 0);
    let list: Vec<SocketAddr> = (1..=10).map(addr).collect();
    n.set_peers(&list, ms(1000));
    let first = n.next_wake().unwrap();
    assert!(first >= ms(1000) && first < ms(2024), "{first:?}");
    // Nothing before the first.
    assert!(n.due(first - Duration::from_nanos(1), 0).is_empty());
    let sent = n.due(first, 0);
    assert_eq!(sent.len(), 1);
    // Next: the probe's timeout or another peer's turn.
    let wake = n.next_wake().unwrap();
    assert!(wake > first && wake <= first + ms(512), "{wake:?}");
    // Over one interval each peer gets exactly one probe.
    let mut all = sent.len();
    for t in 0..1024 {
        all += n.due(first + ms(t), 0).len();
    }
    assert_eq!(all, 3);
    // A stall does not bring a burst.
    assert_eq!(n.due(first + ms(10_000), 0).len(), 3);
    assert_eq!(n.due(first + ms(10_001), 0).len(), 0);
}

#[test]
fn a_new_list_keeps_the_staying_peers_accounting() {
    let mut nodes = mesh(8, 3);
    run(&mut nodes, 0, 3072, None);
    let me = addr(1);
    let n = nodes.get_mut(&me).unwrap();
    let before: Vec<SocketAddr> = n.probed().map(|(a, _)| *a).collect();
    // Drop one chosen peer from the list.
    let gone = before[0];
    let list: Vec<SocketAddr> = (1..=8).map(addr).filter(|&a| a != gone).collect();
    n.set_peers(&list, ms(3072));
    let after: Vec<SocketAddr> = n.probed().map(|(a, _)| *a).collect();
    assert_eq!(after.len(), 3);
    assert!(!after.contains(&gone));
    for (a, p) in n.probed() {
        let sent = if before.contains(a) { 3 } else { 0 };
        assert_eq!(p.counts.sent, sent, "{a}");
    }
    // Self and repeats in the list are ignored.
    n.set_peers(&[me, me, addr(2), addr(2)], ms(300));
    assert_eq!(n.known(), 1);
    assert_eq!(n.probed().count(), 1);
    // A reply from a peer no longer probed is stray.
    assert_eq!(n.stray, 0);
    let r = crate::protocol::mesh::wire::Reply {
        epoch: 0,
        seq: 0,
        t1: 0,
        t2: 0,
        t3: 0,
        received: 0,
        before: 0,
        duplicate: false,
    };
    assert!(n.datagram(addr(5), &r.encode(), ms(300), 0).is_none());
    assert_eq!(n.stray, 1);
    assert!(n.datagram(addr(5), b"hello", ms(300), 0).is_none());
    assert_eq!(n.malformed, 1);
}

#[test]
fn tcp_probes_follow_the_interval() {
    let mut c = cfg(2);
    c.tcp = true;
    let mut n = Node::new(c, addr(1), 0);
    n.set_peers(&[addr(2), addr(3)], ms(0));
    let mut due = 0;
    for t in 0..10_240 {
        for p in n.tcp_due(ms(t)) {
            due += 1;
            n.tcp_done(p, Some(ms(1)));
        }
    }
    assert_eq!(due, 20);
    let connects: u64 = n.probed().map(|(_, p)| p.counts.tcp_connects).sum();
    assert_eq!(connects, 20);
    c.tcp = false;
    let mut n = Node::new(c, addr(1), 0);
    n.set_peers(&[addr(2)], ms(0));
    assert!(n.tcp_due(ms(500)).is_empty());
}

#[test]
fn jitter_stays_within_a_fifth() {
    let b = Duration::from_secs(10);
    assert_eq!(jittered(b, 0.0), Duration::from_secs(8));
    assert_eq!(jittered(b, 0.5), Duration::from_secs(10));
    assert!(jittered(b, 0.999_999) < Duration::from_secs(12));
    assert_eq!(jittered(b, 7.0), Duration::from_secs(12));
}

#[test]
fn a_new_address_for_this_node_starts_the_probing_over() {
    let list: Vec<SocketAddr> = (1..=6).map(addr).collect();
    let mut n = Node::new(cfg(2), addr(1), 0);
    n.set_peers(&list, ms(0));
    let first = n.next_wake().unwrap();
    assert_eq!(n.due(first, 0).len(), 1);
    let sent = |n: &Node| n.probed().map(|(_, p)| p.counts.sent).sum::<u64>();
    // The same address: nothing changes.
    n.set_me(addr(1));
    assert_eq!(n.me(), addr(1));
    assert_eq!((n.probed().count(), sent(&n)), (2, 1));
    // Another: its choice is another, so the old accounting goes.
    n.set_me(addr(6));
    assert_eq!(n.me(), addr(6));
    assert_eq!(n.probed().count(), 0);
    n.set_peers(&list, ms(5000));
    let probed: Vec<SocketAddr> = n.probed().map(|(a, _)| *a).collect();
    let mut want = choose(addr(6), &list, 2);
    want.sort();
    assert_eq!(probed, want);
    assert_eq!((n.known(), sent(&n)), (5, 0));
}

#[test]
fn a_peer_dropped_and_chosen_again_is_probed_in_a_new_run() {
    let (a, b) = (addr(1), addr(2));
    let mut na = Node::new(cfg(1), a, 7);
    let mut nb = Node::new(cfg(1), b, 9);
    nb.set_peers(&[a, b], ms(0));
    // Probes from a to b until `until`, each answered at once.
    let exchange = |na: &mut Node, nb: &mut Node, until: Duration| {
        while let Some(t) = na.next_wake().filter(|&t| t < until) {
            for (to, probe) in na.due(t, 0) {
                assert_eq!(to, b);
                let reply = nb.datagram(a, &probe, t, 0).unwrap();
                assert!(na.datagram(b, &reply, t, 0).is_none());
            }
        }
    };
    na.set_peers(&[a, b], ms(0));
    exchange(&mut na, &mut nb, ms(5000));
    let counts = |na: &Node| na.probed().map(|(_, p)| p.counts).next().unwrap();
    assert_eq!(counts(&na).answered, 5);
    // b leaves the list and comes back: its probes start over, and b
    // tells them from those of the earlier run (not duplicates of them).
    na.set_peers(&[a], ms(5000));
    assert_eq!(na.probed().count(), 0);
    na.set_peers(&[a, b], ms(5000));
    exchange(&mut na, &mut nb, ms(8000));
    let c = counts(&na);
    assert_eq!((c.sent, c.answered, c.duplicates_up), (3, 3, 0));
}
