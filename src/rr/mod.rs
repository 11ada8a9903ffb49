//! Round-trip latency: request/response (`rr`), ping-like probing (`ping`),
//! connect/request/response/close churn (`crr`), and their statistics.

pub mod answer;
pub mod client;
pub mod crr;
pub mod echo;
pub mod hist;
pub mod interval;
pub mod probe;
mod run;
pub mod serve;
pub mod stream_answer;
mod udp;
