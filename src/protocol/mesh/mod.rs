//! The protocol half of `mesh`: what its sessions say and decide, without sockets or clocks.

pub mod answer;
pub mod node;
pub mod peer;
pub mod pick;
pub mod wire;
