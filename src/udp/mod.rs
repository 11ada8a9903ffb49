//! UDP paced streams: datagram format, receiver accounting, pacing, clock
//! offset estimation, and the sender/receiver engines.

pub mod analyze;
pub mod client;
pub mod client_machine;
pub mod clock;
pub mod frames;
pub mod gro;
pub mod header;
pub mod hist;
pub mod intake;
pub mod iso;
pub mod marks;
mod mmsg;
pub mod outflow;
pub mod pace;
pub mod profile;
pub mod receive;
pub mod reception;
pub mod scenario;
pub mod send;
pub mod sent;
pub mod serve;
pub mod session;
pub mod setup;
pub mod streams;
pub mod sum;
pub mod track;
