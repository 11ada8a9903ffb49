//! The protocol half of `load`: what its sessions say and decide, without sockets or clocks.

pub mod model;
