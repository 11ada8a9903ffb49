//! Connect/request/response/close churn (`crr`), built on the TCP engine: each
//! transaction is a TCP connection with one push of the request and one pull
//! of the reply (plus netrig's data hello and result exchange, so every byte
//! is still verified and both ends agree on each transaction).

use serde::Serialize;

use crate::net::tcpinfo::TcpInfoTotals;
use crate::protocol::outcome::ResultKind;
use crate::protocol::proto::IoPattern;
use crate::protocol::rr::hist::{LatencyStats, Summary};
use crate::protocol::stats::IntervalRow;
use crate::tcp::client::{ConnectionRecord, Observer};
use crate::tcp::config::{BufferSpec, TcpClientConfig};

/// A TCP configuration that runs `transactions` crr transactions, `parallel` at a time.
pub fn config(
    target: String,
    port: u16,
    size: u32,
    reply: u32,
    transactions: u64,
    parallel: u32,
) -> TcpClientConfig {
    let mut c = TcpClientConfig::new(vec![target]);
    c.port = port;
    c.pattern = IoPattern::Pushpull;
    c.transfer = u64::from(size) + u64::from(reply);
    c.push_bytes = u64::from(size).max(1);
    c.pull_bytes = u64::from(reply).max(1);
    c.buffer = BufferSpec::Fixed(size.max(reply).clamp(1, 1 << 20));
    c.connections = parallel.max(1);
    c.iterations = Some(transactions.div_ceil(u64::from(parallel.max(1))).max(1));
    c.interval = None;
    // Its report has no per-connection rows.
    c.local_addrs = false;
    c
}

/// Collects handshake and transaction times.
pub struct CrrCollector {
    /// TCP connect times.
    pub handshake: LatencyStats,
    /// Connect-to-result times.
    pub transaction: LatencyStats,
    /// Transactions that did not succeed.
    pub failed: u64,
    /// Transactions cut short by a stop (Ctrl-C): neither a success nor a
    /// failure.
    pub cancelled: u64,
    /// The first failure's detail.
    pub first_failure: Option<String>,
    /// The client end's TCP_INFO at the end of each transaction (as its
    /// final report went out).
    pub tcp_info: TcpInfoTotals,
    /// The server end's, from its final reports.
    pub server_tcp_info: TcpInfoTotals,
}

impl Default for CrrCollector {
    fn default() -> Self {
        CrrCollector {
            handshake: LatencyStats::new(0.0, 10_000.0, 1000, 10),
            transaction: LatencyStats::new(0.0, 10_000.0, 1000, 10),
            failed: 0,
            cancelled: 0,
            first_failure: None,
            tcp_info: TcpInfoTotals::default(),
            server_tcp_info: TcpInfoTotals::default(),
        }
    }
}

impl Observer for CrrCollector {
    fn interval(&mut self, _row: &IntervalRow) {}

    fn connection(&mut self, rec: &ConnectionRecord) {
        if let Some(i) = &rec.tcp_info {
            self.tcp_info.add(i);
        }
        if let Some(i) = rec.peer_tcp_info {
            self.server_tcp_info.add(&i.into());
        }
        if rec.result.kind == ResultKind::Success {
            self.handshake.record_ns((rec.connect_ms * 1e6) as u64);
            self.transaction.record_ns((rec.time_ms * 1e6) as u64);
        } else if rec.result.kind == ResultKind::Cancelled {
            self.cancelled += 1;
        } else {
            self.failed += 1;
            self.first_failure
                .get_or_insert_with(|| format!("{}: {}", rec.result.kind, rec.result.detail));
        }
    }
}

/// What a crr run measured.
#[derive(Debug, Clone, Serialize)]
pub struct CrrReport {
    /// Successful transactions.
    pub transactions: u64,
    /// Failed transactions.
    pub failed: u64,
    /// Transactions in flight when the run was stopped, cut short.
    pub cancelled: u64,
    /// Stopped by Ctrl-C (or SIGTERM) before its count or time was reached.
    pub interrupted: bool,
    /// The wall clock when the run began, Unix seconds (as tcp's
    /// `start_unix`): where `netrig merge` lays it on its grid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_unix: Option<f64>,
    /// Wall time, s.
    pub duration_secs: f64,
    /// Successful transactions per second.
    pub per_sec: f64,
    /// TCP handshake times.
    pub handshake: Option<Summary>,
    /// Whole-transaction times.
    pub transaction: Option<Summary>,
    /// The client ends' TCP_INFO, summed over the transactions.
    pub tcp_info: Option<TcpInfoTotals>,
    /// The server ends'.
    pub server_tcp_info: Option<TcpInfoTotals>,
    /// `--get-server-output`: each server's own status rows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server_output: Vec<crate::tcp::client::ServerRows>,
}

impl CrrCollector {
    /// The report for a run that took `secs`.
    pub fn report(&self, secs: f64) -> CrrReport {
        let ok = self.transaction.count();
        CrrReport {
            transactions: ok,
            failed: self.failed,
            cancelled: self.cancelled,
            interrupted: false,
            start_unix: None,
            duration_secs: secs,
            per_sec: if secs > 0.0 { ok as f64 / secs } else { 0.0 },
            handshake: self.handshake.summary(),
            transaction: self.transaction.summary(),
            tcp_info: (self.tcp_info.connections > 0).then_some(self.tcp_info),
            server_tcp_info: (self.server_tcp_info.connections > 0).then_some(self.server_tcp_info),
            server_output: Vec::new(),
        }
    }
}
