//! UDP paced streams on sockets: the sender and receiver engines (sendmmsg,
//! recvmmsg), the client and the server's setup. The datagram format,
//! accounting, pacing, clock offset estimation and the session machines are
//! in `protocol::udp`.

pub mod client;
mod drive;
pub(crate) mod mmsg;
pub mod receive;
pub mod send;
pub mod serve;
pub(crate) mod setup;
pub mod streams;
