//! `netrig mesh` on 16 network namespaces on one bridge, k = 3, peers from
//! a file: every node probes exactly k peers, the ones rendezvous hashing
//! picks; every node is probed by the nodes that picked it (its
//! netrig_mesh_probers gauge) and so by about k; a node whose link goes
//! down shows as loss at exactly its probers within two probe intervals;
//! a 17th node joining moves only assignments to itself, about k of them.
//! Everything read from each node's /metrics, through prometheus-client's
//! OpenMetrics parser (tests/metrics_parse.py) at each checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/bin.rs"]
mod bin;
use bin::*;
#[path = "common/fabric.rs"]
mod fabric;
use fabric::{Fabric, http_get_in};
#[path = "common/netns.rs"]
mod netns;

use netrig::protocol::mesh::pick::choose;

const N: usize = 16;
const K: usize = 3;
const PORT: u16 = 4795;
const METRICS: u16 = 9465;
const INTERVAL: Duration = Duration::from_millis(400);

type Samples = BTreeMap<String, f64>;

fn parser_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "SKIPPED: python3 with prometheus-client is missing (pip install prometheus-client; .ci/run installs it)"
        );
    }
    ok
}

/// OpenMetrics text through prometheus-client's parser: every sample by
/// `name{labels sorted}`.
fn parse_om(text: &str) -> Samples {
    let mut py = Command::new("python3")
        .args([
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/metrics_parse.py"),
            "openmetrics",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    py.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused:\n{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (v["samples"].as_object().unwrap().iter())
        .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
        .collect()
}

/// The quick reading for polling: sample lines as written.
fn parse_lines(text: &str) -> Samples {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

struct Mesh {
    fabric: Fabric,
    procs: Vec<Option<Proc>>,
    peers_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Mesh {
    fn addr(&self, i: usize) -> SocketAddr {
        format!("{}:{PORT}", self.fabric.ip(i)).parse().unwrap()
    }

    fn write_list(&self, n: usize) {
        let text: String = (0..n).map(|i| format!("{}\n", self.fabric.ip(i))).collect();
        // Atomically, so a node never reads half a list.
        let tmp = self.peers_file.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.peers_file).unwrap();
    }

    fn start(&mut self, i: usize) {
        let ns = self.fabric.nodes[i].clone();
        let p = Proc(
            Command::new("ip")
                .args(["netns", "exec", &ns, BIN, "mesh", "--peers-file"])
                .arg(&self.peers_file)
                .args(["-k", &K.to_string()])
                .args(["--interval", "400ms", "--timeout", "250ms"])
                .args(["--refresh", "300ms", "--window", "2s"])
                .args(["--metrics", &format!("0.0.0.0:{METRICS}")])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        if self.procs.len() <= i {
            self.procs.resize_with(i + 1, || None);
        }
        self.procs[i] = Some(p);
    }

    fn get(&self, i: usize, openmetrics: bool) -> Option<String> {
        let at = SocketAddr::from(([127, 0, 0, 1], METRICS));
        http_get_in(&self.fabric.nodes[i], at, "/metrics", openmetrics).ok()
    }

    /// Node i's metrics through the OpenMetrics parser.
    fn scrape(&self, i: usize) -> Samples {
        parse_om(
            &self
                .get(i, true)
                .unwrap_or_else(|| panic!("node {i} did not answer")),
        )
    }

    /// Waits (at most 20 s) until `ok` holds for every node in `nodes`.
    fn wait_all(&self, nodes: &[usize], what: &str, ok: impl Fn(usize, &Samples) -> bool) {
        let t0 = Instant::now();
        for &i in nodes {
            loop {
                if let Some(p) = self.procs[i].as_ref() {
                    assert!(
                        Command::new("kill")
                            .args(["-0", &p.0.id().to_string()])
                            .status()
                            .unwrap()
                            .success(),
                        "node {i} exited"
                    );
                }
                if self.get(i, false).is_some_and(|t| ok(i, &parse_lines(&t))) {
                    break;
                }
                assert!(t0.elapsed() < Duration::from_secs(20), "node {i}: {what}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// The peers a node's samples have series for.
fn peers_of(s: &Samples) -> BTreeSet<SocketAddr> {
    s.keys()
        .filter_map(|k| k.strip_prefix("netrig_mesh_probes_sent_total{peer=\""))
        .filter_map(|r| r.strip_suffix("\"}"))
        .map(|a| a.parse().unwrap())
        .collect()
}

fn lost(s: &Samples, peer: SocketAddr) -> f64 {
    s.get(&format!("netrig_mesh_probes_lost_total{{peer=\"{peer}\"}}"))
        .copied()
        .unwrap_or(0.0)
}

#[test]
#[cfg_attr(not(netns_root), ignore = "needs root and iproute2 (ip netns)")]
fn a_mesh_of_sixteen_namespaces() {
    if !parser_available() {
        return;
    }
    let test_start = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut m = Mesh {
        fabric: Fabric::new('M', 78, N + 1),
        procs: Vec::new(),
        peers_file: dir.path().join("peers"),
        _dir: dir,
    };
    m.write_list(N);
    for i in 0..N {
        m.start(i);
    }
    let all: Vec<usize> = (0..N).collect();
    let list: Vec<SocketAddr> = all.iter().map(|&i| m.addr(i)).collect();

    // Ready: each node answered by all k peers it probes.
    m.wait_all(&all, "k peers answering", |_, s| {
        let p = peers_of(s);
        p.len() == K
            && p.iter().all(|a| {
                s.get(&format!("netrig_mesh_rtt_seconds_count{{peer=\"{a}\"}}"))
                    .is_some_and(|&c| c > 0.0)
            })
    });

    // Every node probes exactly k: the ones rendezvous hashing picks for it
    // (its own address found among the list's from its interfaces).
    let mut chosen: BTreeMap<usize, BTreeSet<SocketAddr>> = BTreeMap::new();
    let mut indegree: BTreeMap<SocketAddr, usize> = list.iter().map(|&a| (a, 0)).collect();
    for &i in &all {
        let s = m.scrape(i);
        assert_eq!(s["netrig_mesh_peers{}"], (N - 1) as f64, "node {i}");
        assert_eq!(s["netrig_mesh_probed_peers{}"], K as f64, "node {i}");
        let p = peers_of(&s);
        let want: BTreeSet<SocketAddr> = choose(m.addr(i), &list, K).into_iter().collect();
        assert_eq!(p, want, "node {i}");
        for a in &p {
            *indegree.get_mut(a).unwrap() += 1;
        }
        chosen.insert(i, p);
    }
    assert_eq!(indegree.values().sum::<usize>(), N * K);
    // Every node is probed by the nodes that picked it, as its own gauge
    // says once its window (2 s) holds only the present probers; about k.
    m.wait_all(&all, "probers gauge = in-degree", |i, s| {
        s.get("netrig_mesh_probers") == Some(&(indegree[&m.addr(i)] as f64))
    });
    for &i in &all {
        let s = m.scrape(i);
        let d = indegree[&m.addr(i)];
        assert_eq!(s["netrig_mesh_probers{}"], d as f64, "node {i}");
        assert!(s["netrig_mesh_probes_answered_total{}"] > 0.0 || d == 0);
        assert!(d <= 3 * K, "node {i} probed by {d}");
    }
    let unprobed = indegree.values().filter(|&&d| d == 0).count();
    assert!(
        unprobed <= 1,
        "{unprobed} nodes probed by none: {indegree:?}"
    );

    // A node's link goes down: loss at exactly its probers, within two
    // probe intervals (a probe sent within one interval, lost --timeout
    // later). Retried on another node if a stall of this shared host made
    // a bystander lose a probe too.
    let victims: Vec<usize> = {
        let mut v: Vec<usize> = all.clone();
        v.sort_by_key(|&i| std::cmp::Reverse(indegree[&m.addr(i)]));
        v
    };
    let mut attempt = 0;
    netns::until_one_passes(3, || {
        let v = victims[attempt];
        attempt += 1;
        let va = m.addr(v);
        let probers: BTreeSet<usize> = (all.iter().copied())
            .filter(|i| chosen[i].contains(&va))
            .collect();
        let others: Vec<usize> = all.iter().copied().filter(|&i| i != v).collect();
        let before: BTreeMap<usize, Samples> = others
            .iter()
            .map(|&i| (i, parse_lines(&m.get(i, false).unwrap())))
            .collect();
        let rtt_count = |s: &Samples| {
            s.get(&format!("netrig_mesh_rtt_seconds_count{{peer=\"{va}\"}}"))
                .copied()
                .unwrap_or(0.0)
        };
        m.fabric.link(v, false);
        let down = Instant::now();
        let mut took = None;
        while down.elapsed() < 2 * INTERVAL + Duration::from_secs(2) {
            let seen = probers.iter().all(|&i| {
                m.get(i, false)
                    .is_some_and(|t| lost(&parse_lines(&t), va) > lost(&before[&i], va))
            });
            if seen {
                took = Some(down.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let after: BTreeMap<usize, Samples> = others
            .iter()
            .map(|&i| (i, parse_lines(&m.get(i, false).unwrap())))
            .collect();
        m.fabric.link(v, true);
        // The loss as prometheus-client reads it.
        for &i in &probers {
            let s = m.scrape(i);
            let key = format!("netrig_mesh_probes_lost_total{{peer=\"{va}\"}}");
            assert!(s[&key] > lost(&before[&i], va), "node {i}: {key}");
        }
        // Back: two answers after the link is up mean every probe sent
        // while it was down has timed out (the second is sent an interval
        // after the first, longer than --timeout), so the next attempt
        // starts clean.
        let up: BTreeMap<usize, f64> = (probers.iter())
            .map(|&i| (i, rtt_count(&parse_lines(&m.get(i, false).unwrap()))))
            .collect();
        let probers_v: Vec<usize> = probers.iter().copied().collect();
        m.wait_all(&probers_v, "answers again", |i, s| {
            rtt_count(s) >= up[&i] + 2.0
        });
        for &i in &others {
            for peer in &chosen[&i] {
                let grew = lost(&after[&i], *peer) > lost(&before[&i], *peer);
                let want = *peer == va;
                if grew != want {
                    return Err(format!(
                        "node {i} -> {peer}: loss {} -> {} with node {v} ({va}) down {took:?}",
                        lost(&before[&i], *peer),
                        lost(&after[&i], *peer)
                    ));
                }
            }
        }
        match took {
            Some(t) if t <= 2 * INTERVAL => {}
            _ => {
                return Err(format!(
                    "the loss took {took:?} to be read, over {:?}",
                    2 * INTERVAL
                ));
            }
        }
        Ok(format!(
            "node {v} down: loss at its {} probers {probers:?} and no other",
            probers.len()
        ))
    });

    // A 17th node joins: only assignments to it move, about k of them
    // (each prober takes it with chance k/(N+1)).
    let new = N;
    m.start(new);
    m.write_list(N + 1);
    let grown: Vec<SocketAddr> = (0..=N).map(|i| m.addr(i)).collect();
    let everyone: Vec<usize> = (0..=N).collect();
    m.wait_all(&everyone, "the 17-node list", |_, s| {
        s.get("netrig_mesh_peers") == Some(&(N as f64))
    });
    let na = m.addr(new);
    let mut moved = 0;
    for &i in &all {
        let now = peers_of(&m.scrape(i));
        let gone: Vec<_> = chosen[&i].difference(&now).collect();
        let came: Vec<_> = now.difference(&chosen[&i]).collect();
        assert!(
            gone.len() <= 1 && came.len() == gone.len(),
            "node {i}: {gone:?} -> {came:?}"
        );
        if let Some(c) = came.first() {
            assert_eq!(**c, na, "node {i} moved to another than the newcomer");
            moved += 1;
        }
        let want: BTreeSet<SocketAddr> = choose(m.addr(i), &grown, K).into_iter().collect();
        assert_eq!(now, want, "node {i}");
    }
    assert!(
        moved <= 2 * K,
        "{moved} of {} assignments moved for one node joining",
        N * K
    );
    m.wait_all(&[new], "the newcomer probed by those who moved", |_, s| {
        peers_of(s).len() == K && s.get("netrig_mesh_probers") == Some(&(moved as f64))
    });
    eprintln!(
        "mesh: in-degrees {:?}, {moved} of {} assignments moved on a join, in {:?}",
        indegree.values().collect::<Vec<_>>(),
        N * K,
        test_start.elapsed()
    );
    drop(m);
}

/// The items of the YAML list under `key:` (one item a line), unquoted.
fn yaml_list(text: &str, key: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != key).skip(1);
    let mut out = Vec::new();
    for l in lines.by_ref() {
        let Some(item) = l.trim().strip_prefix("- ") else {
            break;
        };
        out.push(item.trim_matches('"').to_string());
    }
    out
}

/// The DaemonSet's own arguments (deploy/kubernetes/overlays/mesh), with
/// the pod's address as the kubelet expands it, on 4 namespaces where the
/// Service's name resolves to all 4 (`ip netns exec` mounts
/// /etc/netns/NS/hosts, as cluster DNS answers for a headless Service):
/// each node finds itself and probes the other 3; when a node leaves the
/// name's answer, its probers drop its series at the next refresh.
#[test]
#[cfg_attr(not(netns_root), ignore = "needs root and iproute2 (ip netns)")]
fn the_daemonsets_arguments_find_peers_by_dns_and_follow_it() {
    // Its nodes' series are read through the OpenMetrics parser.
    if !parser_available() {
        return;
    }
    let ds = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/overlays/mesh/mesh-daemonset.yaml"
    ))
    .unwrap();
    let args = yaml_list(&ds, "args:");
    assert_eq!(args[0], "mesh");
    let name = args
        .iter()
        .position(|a| a == "--peers-dns")
        .map(|i| args[i + 1].clone())
        .unwrap();
    let host = name.rsplit_once(':').unwrap().0.to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut m = Mesh {
        fabric: Fabric::new('D', 79, 4),
        procs: Vec::new(),
        peers_file: dir.path().join("unused"),
        _dir: dir,
    };
    let ips: Vec<String> = (0..4).map(|i| m.fabric.ip(i)).collect();
    let ip_refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    for i in 0..4 {
        m.fabric.host(&m.fabric.nodes[i].clone(), &host, &ip_refs);
    }
    for (i, ip) in ips.iter().enumerate() {
        let expanded: Vec<String> = args.iter().map(|a| a.replace("$(POD_IP)", ip)).collect();
        assert!(!expanded.iter().any(|a| a.contains("$(")), "{expanded:?}");
        let p = Proc(
            Command::new("ip")
                .args(["netns", "exec", &m.fabric.nodes[i], BIN])
                .args(&expanded)
                // Scaled down; a later flag overrides the DaemonSet's.
                .args([
                    "--interval",
                    "200ms",
                    "--refresh",
                    "300ms",
                    "--window",
                    "2s",
                ])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        m.procs.push(Some(p));
    }
    let all: Vec<usize> = (0..4).collect();
    m.wait_all(&all, "3 peers probed and answering, 3 probers", |i, s| {
        let p = peers_of(s);
        p.len() == 3
            && !p.contains(&m.addr(i))
            && s.get("netrig_mesh_probers") == Some(&3.0)
            && p.iter().all(|a| {
                s.get(&format!("netrig_mesh_rtt_seconds_count{{peer=\"{a}\"}}"))
                    .is_some_and(|&c| c > 0.0)
            })
    });
    // Node 3 leaves the name's answer: its series go at the next refresh.
    for i in 0..3 {
        m.fabric
            .host(&m.fabric.nodes[i].clone(), &host, &ip_refs[..3]);
    }
    let gone = m.addr(3);
    m.wait_all(&[0, 1, 2], "node 3's series dropped", |_, s| {
        s.get("netrig_mesh_peers") == Some(&2.0) && !peers_of(s).contains(&gone)
    });
    for i in 0..3 {
        let s = m.scrape(i);
        assert_eq!(peers_of(&s).len(), 2, "node {i}");
        assert!(s["netrig_mesh_peer_refreshes_total{}"] >= 2.0);
        assert!(
            !s.keys().any(|k| k.contains(&gone.to_string())),
            "node {i}: {s:?}"
        );
    }
}

/// Every netrig_mesh_ series the alerts and the dashboard under deploy/
/// query is one a mesh node exports (two nodes on loopback).
#[test]
fn the_deployed_alerts_and_dashboard_query_series_the_mesh_exports() {
    if !parser_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let list = format!("127.0.0.1:{pa}\n127.0.0.1:{pb}\n");
    let file = dir.path().join("peers");
    std::fs::write(&file, list).unwrap();
    let mut metrics = Vec::new();
    let mut procs = Vec::new();
    for p in [pa, pb] {
        let mp = free_port();
        metrics.push(mp);
        procs.push(Proc(
            netrig(&["mesh", "--peers-file"])
                .arg(&file)
                .args(["--listen", &format!("127.0.0.1:{p}")])
                .args(["--metrics", &format!("127.0.0.1:{mp}")])
                .args(["--interval", "100ms"])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        ));
    }
    let get = |port: u16| -> Option<String> {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n")
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    };
    let t0 = Instant::now();
    let text = loop {
        if let Some(t) =
            get(metrics[0]).filter(|t| t.contains("netrig_mesh_rtt_seconds_count{peer"))
        {
            break t;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no answered probe");
        std::thread::sleep(Duration::from_millis(50));
    };
    let samples = parse_om(&text);
    let names: BTreeSet<&str> = samples
        .keys()
        .map(|k| k.split('{').next().unwrap())
        .collect();
    let mut queried = BTreeSet::new();
    for f in [
        "deploy/kubernetes/overlays/monitoring/prometheusrule.yaml",
        "deploy/kubernetes/overlays/monitoring/netrig-dashboard.json",
    ] {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(f)).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("netrig_mesh_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            queried.insert(name);
        }
    }
    assert!(queried.len() >= 3, "{queried:?}");
    for q in &queried {
        assert!(
            names.contains(q.as_str()),
            "{q} is queried but not exported: {names:?}"
        );
    }
    // Every series of a probed peer carries its address.
    for k in samples.keys().filter(|k| k.contains("peer=")) {
        assert!(k.contains(&format!("peer=\"127.0.0.1:{pb}\"")), "{k}");
    }
}

#[test]
fn bad_mesh_flags_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("peers");
    std::fs::write(&file, "127.0.0.1\nnot-an-address\n").unwrap();
    let f = file.to_str().unwrap();
    let missing = dir.path().join("missing");
    let cases: [(&[&str], &str); 6] = [
        (&["mesh"], "--peers-file"),
        (&["mesh", "--peers-file", f], "line 2: \"not-an-address\""),
        (
            &["mesh", "--peers-file", missing.to_str().unwrap()],
            "cannot read",
        ),
        (&["mesh", "--peers-dns", "svc"], "expected NAME:PORT"),
        (
            &["mesh", "--peers-dns", "svc:1", "-k", "0"],
            "-k 0 is out of range",
        ),
        (
            &[
                "mesh",
                "--peers-dns",
                "svc:1",
                "--interval",
                "1s",
                "--timeout",
                "40s",
            ],
            "more than 32 intervals",
        ),
    ];
    for (args, want) in cases {
        let out = netrig(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        // One line, but for clap's own usage text.
        if args.len() > 1 {
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
}
