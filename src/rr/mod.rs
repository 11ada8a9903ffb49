//! Round-trip latency: request/response (`rr`), ping-like probing (`ping`),
//! connect/request/response/close churn (`crr`) on sockets. Their statistics
//! and answering machines are in `protocol::rr`.

pub mod client;
pub mod crr;
pub mod run;
pub mod serve;
mod udp;
