//! TCP goodput and reliability tests with ctsTraffic's semantics.

pub mod client;
pub mod config;
mod connect;
pub mod drive;
pub mod machine;
mod pool;
mod ports;
mod schedule;
mod session;
