//! TCP goodput and reliability tests with ctsTraffic's semantics, on sockets.
//! A data connection's state machine and the burst schedule are in
//! `protocol::tcp`.

pub mod client;
pub mod config;
mod connect;
pub mod drive;
mod pool;
mod ports;
mod session;
