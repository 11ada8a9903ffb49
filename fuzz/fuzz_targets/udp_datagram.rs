//! Fuzzes the UDP datagram decoder and the receiver accounting fed with
//! whatever decodes (sequence numbers and timestamps straight from the wire).
#![no_main]

use libfuzzer_sys::fuzz_target;
use netrig::protocol::udp::header::{HEADER_LEN, Header, verify_payload};
use netrig::protocol::udp::track::ReceiverStats;

fuzz_target!(|data: &[u8]| {
    let mut stats = ReceiverStats::new(1000, 16);
    // Treat the input as a run of datagrams, each prefixed by a one-byte length.
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = (len as usize).min(tail.len());
        let (d, next) = tail.split_at(n);
        rest = next;
        if let Ok(h) = Header::read(d) {
            let corrupt = verify_payload(h.stream, h.seq, &d[HEADER_LEN..]).is_err();
            let t = h.send_ns as i64;
            stats.on_datagram(h.seq, d.len(), t, t, corrupt);
        } else {
            stats.on_invalid(d.len());
        }
    }
    let iv = stats.take_interval(1.0);
    assert!(iv.packets as usize <= data.len());
    let _ = stats.totals(None);
});
