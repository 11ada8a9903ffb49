//! The protocol layer: wire formats, session state machines, the data pattern, schedules,
//! statistics and analysis. Nothing here touches a socket, a thread, a file or the OS clock:
//! time and bytes come in as arguments (`tests/suite/layers.rs` checks it), so both ends of every
//! conversation can be run in memory.

pub mod asking;
pub mod auth;
pub mod budget;
pub mod conversation;
pub mod cpu;
pub mod greeting;
pub mod hdr;
pub mod html;
pub mod iperf2;
pub mod iperf3;
pub mod load;
pub mod merge;
pub mod mesh;
pub mod names;
pub mod outcome;
pub mod pattern;
pub mod plan;
pub mod proto;
pub mod refusal;
pub mod relay;
pub mod rr;
pub mod sockopts;
pub mod spec;
pub mod stats;
pub mod tcp;
pub mod udp;
pub mod units;
