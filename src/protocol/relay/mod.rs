//! The protocol half of `relay`: what its sessions say and decide, without sockets or clocks.

pub mod framer;
pub mod impair;
