//! Unit tests of `udp::reception` on its own (the intake's tests drive it
//! through the server's session): the per-datagram row's delay and the
//! receive slot's size.

use super::*;
use crate::protocol::udp::header::fill_payload;
use crate::protocol::udp::track::ReceiverStats;

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

#[test]
fn with_a_key_the_tagged_datagram_counts_and_the_forged_one_is_invalid() {
    // Which of the two counts matters, not only how many: the signed one is
    // the stream's seq 0, the forged one an unreadable datagram.
    let key: crate::protocol::auth::DatagramKey = [7; 32];
    let cfg = ReceiverConfig {
        tag_key: Some(key),
        ..config(0, 0)
    };
    let mut r = Reception::new(cfg, ReceiverStats::new(1000, 100));
    let mut rows = Rows::default();
    let mut forged = datagram(1, 0);
    crate::protocol::auth::sign_datagram(&[8; 32], &mut forged);
    r.on_datagram(&forged, 10, 0, None, &mut rows);
    assert!(rows.0.is_empty(), "a forged datagram has no row");
    let t = r.stats().totals(None);
    assert_eq!((t.packets, t.unique, t.corrupt), (1, 0, 1));
    let mut signed = datagram(0, 0);
    crate::protocol::auth::sign_datagram(&key, &mut signed);
    r.on_datagram(&signed, 10, 0, None, &mut rows);
    assert_eq!(rows.0.len(), 1);
    assert_eq!((rows.0[0].seq, rows.0[0].arrival), (0, "new"));
    assert!(!rows.0[0].corrupt, "the tag is no part of the payload");
    let t = r.stats().totals(None);
    assert_eq!((t.packets, t.unique, t.corrupt), (2, 1, 1));
}

#[test]
fn a_media_frame_is_late_only_past_its_deadline_and_a_duplicate_never() {
    // Frames of one datagram each, 10 ms apart, a 20 ms playout buffer:
    // frame k is due 20 + 10k ms after frame 0 (here at time zero).
    let cfg = ReceiverConfig {
        media: Some(MediaPlan {
            frame_ns: 10_000_000,
            depth_ns: 20_000_000,
        }),
        ..config(0, 0)
    };
    let mut r = Reception::new(cfg, ReceiverStats::new(1000, 100));
    let mut rows = Rows::default();
    let ms = |n: i64| n * 1_000_000;
    // (seq, arrival ms, late so far): early, exactly due, 1 ms past due,
    // well past due, a duplicate past due, early again.
    let steps = [
        (0, 0, 0),
        (1, 5, 0),
        (4, 60, 0),
        (2, 41, 1),
        (3, 70, 2),
        (3, 80, 2),
        (5, 10, 2),
    ];
    for (seq, at, late) in steps {
        r.on_datagram(&datagram(seq, 0), 1, ms(at), None, &mut rows);
        assert_eq!(
            r.stats().totals(None).late,
            late,
            "after seq {seq} at {at} ms"
        );
    }
    let mut ivs = Intervals::default();
    r.finish(Duration::from_millis(100), &mut ivs);
    assert_eq!(ivs.0.iter().map(|iv| iv.late).collect::<Vec<_>>(), [2]);
}

#[derive(Default)]
struct Intervals(Vec<UdpInterval>);

impl ReceiverSink for Intervals {
    fn interval(&mut self, iv: UdpInterval) {
        self.0.push(iv);
    }
}
