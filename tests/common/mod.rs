//! Shared test helpers: an in-process server, a recording observer, and an
//! in-process impairment relay that records exactly what it did.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::thread::JoinHandle;

use netrig::protocol::relay::impair::ImpairSpec;
use netrig::relay::{Event, Relay, RelayConfig, RelayCounts, RelayHandle};

use netrig::protocol::stats::IntervalRow;
use netrig::server::{Server, ServerConfig};
use netrig::tcp::client::{self, ConnectionRecord, Observer, RunReport};
use netrig::tcp::config::TcpClientConfig;

/// A server on 127.0.0.1:<ephemeral>, stopped on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub fn start() -> TestServer {
        Self::start_with(|_| {})
    }

    /// A server with `tweak` applied to the test defaults.
    pub fn start_with(tweak: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let mut cfg = ServerConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
            verbosity: 0,
            ..ServerConfig::default()
        };
        tweak(&mut cfg);
        let server = Server::bind(cfg).expect("bind test server");
        let addr = server.local_addrs()[0];
        let stop = server.stop_handle();
        let handle = Some(std::thread::spawn(move || server.run()));
        TestServer { addr, stop, handle }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Collects everything the client reports.
#[derive(Default)]
pub struct Collect {
    pub rows: Vec<IntervalRow>,
    pub conns: Vec<ConnectionRecord>,
}

impl Observer for Collect {
    fn interval(&mut self, row: &IntervalRow) {
        self.rows.push(*row);
    }
    fn connection(&mut self, rec: &ConnectionRecord) {
        self.conns.push(rec.clone());
    }
}

/// Runs a client against `target` with `tweak` applied to the defaults.
pub fn run_client(
    target: SocketAddr,
    tweak: impl FnOnce(&mut TcpClientConfig),
) -> (RunReport, Collect) {
    let mut cfg = TcpClientConfig::new(vec![target.to_string()]);
    cfg.interval = Some(std::time::Duration::from_millis(200));
    cfg.idle_timeout = Some(std::time::Duration::from_secs(10));
    tweak(&mut cfg);
    let mut c = Collect::default();
    let r = client::run(cfg, Arc::new(AtomicBool::new(false)), &mut c).expect("client run");
    (r, c)
}

/// A netrig relay on 127.0.0.1:<ephemeral> in front of `to`, keeping its
/// events in memory; stopped on drop.
pub struct TestRelay {
    pub addr: SocketAddr,
    pub h: RelayHandle,
}

impl TestRelay {
    pub fn start(to: SocketAddr, up: ImpairSpec, down: ImpairSpec) -> TestRelay {
        let h = Relay::bind(RelayConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            to,
            up,
            down,
            seed: 42,
            tcp: true,
            udp: true,
            log: None,
            keep_events: true,
            verbosity: 0,
            rate_per_flow: false,
            limits: Default::default(),
        })
        .expect("bind relay")
        .spawn();
        TestRelay { addr: h.addr, h }
    }

    /// Relays with `spec` on the client-to-server (`up`) or the other direction.
    pub fn one_way(to: SocketAddr, spec: ImpairSpec, up: bool) -> TestRelay {
        if up {
            Self::start(to, spec, ImpairSpec::default())
        } else {
            Self::start(to, ImpairSpec::default(), spec)
        }
    }

    pub fn counts(&self) -> RelayCounts {
        self.h.counts()
    }

    /// Events named `name`.
    pub fn events(&self, name: &str) -> Vec<Event> {
        self.h
            .events()
            .into_iter()
            .filter(|e| e.event == name)
            .collect()
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        self.h.stop();
    }
}
