//! UDP paced streams: datagram format, receiver accounting, pacing, clock
//! offset estimation, and the sender/receiver engines.

pub mod analyze;
pub mod client;
pub mod clock;
pub mod engine;
pub mod header;
pub mod pace;
pub mod profile;
pub mod scenario;
pub mod serve;
pub mod track;
