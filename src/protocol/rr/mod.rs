//! The protocol half of `rr`: what its sessions say and decide, without sockets or clocks.

pub mod answer;
pub mod echo;
pub mod hist;
pub mod interval;
pub mod probe;
pub mod seq_answer;
pub mod stream_answer;
