//! The protocol half of `udp`: what its sessions say and decide, without sockets or clocks.

pub mod analyze;
pub mod client_machine;
pub mod client_setup;
pub mod clock;
pub mod frames;
pub mod gro;
pub mod header;
pub mod hist;
pub mod intake;
pub mod iso;
pub mod marks;
pub mod outflow;
pub mod pace;
pub mod profile;
pub mod reception;
pub mod scenario;
pub mod sent;
pub mod session;
pub mod setup;
pub mod sum;
pub mod track;
