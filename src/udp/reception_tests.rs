//! Unit tests of `udp::reception` on its own (the intake's tests drive it
//! through the server's session): the per-datagram row's delay and the
//! receive slot's size.

use super::*;
use crate::udp::header::fill_payload;
use crate::udp::track::ReceiverStats;

const PAYLOAD: usize = 40;

fn config(offset_ns: i64, comp_ns: i64) -> ReceiverConfig {
    ReceiverConfig {
        stream: 1,
        max_size: HEADER_LEN + PAYLOAD,
        offset_ns,
        comp_ns,
        interval: Duration::from_secs(1),
        media: None,
        verify: true,
        burst: None,
        tag_key: None,
        offload: false,
    }
}

fn datagram(seq: u64, send_ns: u64) -> Vec<u8> {
    let mut d = vec![0u8; HEADER_LEN + PAYLOAD];
    fill_payload(1, seq, &mut d[HEADER_LEN..]);
    Header {
        flags: 0,
        stream: 1,
        seq,
        send_ns,
        payload_len: PAYLOAD as u32,
    }
    .write(&mut d);
    d
}

#[derive(Default)]
struct Rows(Vec<PacketRow>);

impl ReceiverSink for Rows {
    fn interval(&mut self, _iv: UdpInterval) {}
    fn packet(&mut self, row: &PacketRow) {
        self.0.push(row.clone());
    }
}

#[test]
fn a_rows_delay_is_corrected_by_the_offset_and_the_compensation() {
    // 1.5 ms between the clocks' stamps, the receiver's clock 0.5 ms ahead,
    // 0.2 ms compensation (--offset-comp) added back.
    let (send, recv, offset, comp) = (1_000_000u64, 2_500_000u64, 500_000i64, 200_000i64);
    let mut r = Reception::new(config(offset, comp), ReceiverStats::new(1000, 100));
    let mut rows = Rows::default();
    r.on_datagram(&datagram(0, send), recv, 0, None, &mut rows);
    let want_ns = (recv - send) as i64 - offset + comp;
    assert_eq!(rows.0.len(), 1);
    assert_eq!(rows.0[0].flight_us, want_ns as f64 / 1e3);
    assert_eq!((rows.0[0].seq, rows.0[0].arrival), (0, "new"));
    assert_eq!(
        r.stats().totals(None).delay_min_us,
        Some(want_ns as f64 / 1e3)
    );
}

#[test]
fn a_receive_slot_holds_one_byte_more_than_the_largest_datagram() {
    // The extra byte is how a datagram longer than announced shows up
    // truncated rather than fitting exactly.
    let c = config(0, 0);
    assert_eq!(c.slot(), c.max_size + 1);
    let small = ReceiverConfig { max_size: 1, ..c };
    assert_eq!(small.slot(), HEADER_LEN + 1);
}
