//! The protocol half of `tcp`: what its sessions say and decide, without sockets or clocks.

pub mod machine;
pub(crate) mod schedule;
