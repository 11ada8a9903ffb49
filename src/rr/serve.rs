//! What the server's request/response sessions (`server::rr_tcp`,
//! `rr_udp`, `rr_sctp`, each on the loops) and the client share: the
//! largest messages each transport takes, the spec's check, and writing the
//! pattern.

use std::io::Write;

use crate::protocol::pattern::Pattern;
use crate::protocol::proto::{RrProto, RrSpec};
use crate::protocol::refusal::Invalid;
use crate::protocol::udp::header::{HEADER_LEN, MAX_DATAGRAM};

/// Largest TCP request or reply.
pub const MAX_TCP_MESSAGE: u32 = 16 << 20;
/// Largest SCTP one-to-many request or reply: one message, which must fit the
/// socket buffers.
pub const MAX_SEQPACKET_MESSAGE: u32 = 1 << 20;

/// Checks a request/response spec; the error names the problem.
pub fn validate(s: &RrSpec) -> Result<(), Invalid> {
    let max = match s.proto {
        RrProto::Tcp => MAX_TCP_MESSAGE,
        RrProto::Udp => (MAX_DATAGRAM - HEADER_LEN) as u32,
        RrProto::SctpSeqpacket => MAX_SEQPACKET_MESSAGE,
    };
    if s.size == 0 || s.size > max || s.reply > max {
        return Err(Invalid::RequestSize {
            max,
            proto: s.proto.name(),
        });
    }
    if s.iterations == 0 {
        return Err(Invalid::ZeroIterations);
    }
    s.sock.validate()?;
    Ok(())
}

/// Writes `len` pattern bytes of stream `start` from `offset`.
pub fn write_pattern(
    w: &mut impl Write,
    start: u64,
    offset: u64,
    len: usize,
) -> std::io::Result<()> {
    let p = Pattern::get();
    let mut done = 0;
    while done < len {
        let s = p.slice(start, offset + done as u64, len - done);
        w.write_all(s)?;
        done += s.len();
    }
    Ok(())
}
