//! `netrig mesh`: a node of the mesh monitor. It answers its peers' probes
//! and probes k of them (chosen by rendezvous hashing over the peer list),
//! and serves the results on `/metrics` until interrupted.

use anyhow::{Context, Result};
use clap::{ArgGroup, Args};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::{Exit, interrupt_flag, positive_duration, usage};
use netrig::mesh::source::Source;
use netrig::mesh::{Mesh, MeshConfig};
use netrig::protocol::mesh::node;

/// The mesh's UDP (and TCP connect probe) port by default.
pub const DEFAULT_MESH_PORT: u16 = 4795;
/// Most peers one node probes.
const MAX_K: usize = 64;

#[derive(Args)]
#[command(group(ArgGroup::new("peer_list").required(true).args(["peers_file", "peers_dns"])))]
pub struct MeshArgs {
    /// The peer list: one address a line (IP, IP:PORT or [IPv6]:PORT; the
    /// mesh port when none), re-read every --refresh.
    #[arg(long, value_name = "FILE")]
    peers_file: Option<PathBuf>,
    /// The peer list: every address NAME resolves to (a headless Service),
    /// re-resolved every --refresh.
    #[arg(long, value_name = "NAME:PORT")]
    peers_dns: Option<String>,
    /// UDP address to answer probes on and send them from (with
    /// --tcp-connect, also the TCP one).
    #[arg(long, value_name = "ADDR:PORT", default_value_t = SocketAddr::from(([0, 0, 0, 0], DEFAULT_MESH_PORT)))]
    listen: SocketAddr,
    /// This node's address as the peer list names it. Default: the list's
    /// entry with the listen port that is an address of this host.
    #[arg(long = "self", value_name = "ADDR:PORT")]
    me: Option<SocketAddr>,
    /// Peers to probe (rendezvous hashing picks which), at most 64.
    #[arg(short = 'k', long, default_value_t = 3)]
    peers: usize,
    /// Between two probes of one peer.
    #[arg(long, default_value = "1s", value_parser = positive_duration)]
    interval: Duration,
    /// A probe with no reply after this is lost. Default: half the
    /// interval, so an unreachable peer shows within two intervals.
    #[arg(long, value_parser = positive_duration)]
    timeout: Option<Duration>,
    /// Between two reads of the peer list (each moved by up to ±20%).
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    refresh: Duration,
    /// The window of the netrig_mesh_probers gauge (distinct probers heard).
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    window: Duration,
    /// Also probe each peer with a TCP connect every interval (the node
    /// accepts them on its listen port).
    #[arg(long)]
    tcp_connect: bool,
    /// Serve Prometheus/OpenMetrics metrics over HTTP here (path /metrics).
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:9465")]
    metrics: SocketAddr,
}

impl MeshArgs {
    /// The flags turned into the node's config, in this one place, and
    /// checked (the peers file read once: a file that cannot be read at the
    /// start is a mistake in the command, while DNS may not answer yet, pods
    /// still starting, so it is retried). A config that cannot run is a
    /// usage error, already reported.
    fn to_config(&self) -> Result<MeshConfig, ExitCode> {
        if !(1..=MAX_K).contains(&self.peers) {
            return Err(usage(format!(
                "-k {} is out of range: probe 1 to {MAX_K} peers",
                self.peers
            )));
        }
        let timeout = self.timeout.unwrap_or(self.interval / 2);
        // The ring of probes in flight holds 64: a probe must be settled
        // before its slot is reused.
        if timeout > self.interval * 32 {
            return Err(usage(format!(
                "--timeout {timeout:?} is more than 32 intervals ({:?})",
                self.interval * 32
            )));
        }
        let source = match (&self.peers_file, &self.peers_dns) {
            (Some(f), _) => Source::File(f.clone()),
            (None, Some(d)) => match dns_target(d) {
                Some((name, port)) => Source::Dns { name, port },
                None => {
                    return Err(usage(format!(
                        "--peers-dns {d}: expected NAME:PORT (e.g. netrig-mesh.netrig.svc:4795)"
                    )));
                }
            },
            (None, None) => return Err(usage("give --peers-file or --peers-dns")),
        };
        if let Source::File(_) = &source
            && let Err(e) = source.read(self.listen.port())
        {
            return Err(usage(format!("--peers-file: {e}")));
        }
        Ok(MeshConfig {
            listen: self.listen,
            me: self.me,
            source,
            node: node::Config {
                k: self.peers,
                interval: self.interval,
                timeout,
                tcp: self.tcp_connect,
            },
            refresh: self.refresh,
            window: self.window,
        })
    }
}

pub fn run(a: MeshArgs) -> Result<ExitCode> {
    let cfg = match a.to_config() {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let metrics = std::net::TcpListener::bind(a.metrics)
        .with_context(|| format!("cannot listen for --metrics on {}", a.metrics))?;
    let metrics_at = metrics.local_addr()?;
    let stop = interrupt_flag();
    let mesh = Mesh::bind(cfg, std::sync::Arc::clone(&stop))?;
    mesh.serve_metrics(metrics)?;
    netrig::out!(
        "netrig mesh: probing up to {} peers every {:?} from UDP {}, metrics at http://{metrics_at}/metrics",
        a.peers,
        a.interval,
        mesh.local_addr()
    );
    mesh.run()?;
    if stop.load(SeqCst) {
        return Ok(ExitCode::from(Exit::Interrupted));
    }
    Ok(ExitCode::SUCCESS)
}

/// NAME:PORT split at the last colon.
fn dns_target(s: &str) -> Option<(String, u16)> {
    let (name, port) = s.rsplit_once(':')?;
    let port = port.parse().ok()?;
    (!name.is_empty() && !name.contains(':')).then(|| (name.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_targets() {
        assert_eq!(
            dns_target("netrig-mesh.netrig.svc:4795"),
            Some(("netrig-mesh.netrig.svc".into(), 4795))
        );
        assert_eq!(dns_target("netrig-mesh"), None);
        assert_eq!(dns_target(":4795"), None);
        assert_eq!(dns_target("a:b:4795"), None);
        assert_eq!(dns_target("a:99999"), None);
    }
}
