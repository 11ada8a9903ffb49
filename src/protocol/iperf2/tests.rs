use super::*;

/// iperf 2.1.8's TCP header for `-c ... -p 5901 -t 1` (by experiment).
fn tcp_header(flags: u32, ext: u16, amount: i32) -> Vec<u8> {
    let mut b = Vec::new();
    for w in [flags, 1, 5901, 0, 0, amount as u32, 0, 0] {
        b.extend_from_slice(&w.to_be_bytes());
    }
    b.extend_from_slice(&ext.to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&0x0002_0001u32.to_be_bytes());
    b
}

#[test]
fn reads_a_2_1_8_tcp_header() {
    let b = tcp_header(0x4001_0078, 0, -100);
    assert_eq!(ClientHeader::wanted(0x4001_0078), EXT_LEN);
    let h = ClientHeader::parse(&b).unwrap();
    assert_eq!(h.amount, Amount::Centis(100));
    assert_eq!(h.threads, 1);
    assert_eq!(h.ext_flags, 0);
    assert_eq!(h.describe(), "-t 1.00 s, -P 1");
    let n = ClientHeader::parse(&tcp_header(0x4001_0078, 0, 1000)).unwrap();
    assert_eq!(n.amount, Amount::Bytes(1000));
    assert_eq!(n.describe(), "-n 1000 bytes, -P 1");
    let old = ClientHeader::parse(&[0; 24]).unwrap();
    assert_eq!(old.amount, Amount::Unset);
}

#[test]
fn wanted_follows_the_declared_length() {
    assert_eq!(ClientHeader::wanted(0), V1_LEN);
    assert_eq!(ClientHeader::wanted(HEADER_EXTEND), EXT_LEN);
    assert_eq!(ClientHeader::wanted(HEADER_LEN_BIT | 28), 28);
    assert_eq!(ClientHeader::wanted(HEADER_LEN_BIT | 0x1FE), EXT_LEN);
}

#[test]
fn refuses_what_needs_a_sending_server() {
    let dual = ClientHeader::parse(&tcp_header(0xc001_0079, 0, -100));
    assert!(matches!(
        dual,
        Err(HeaderError::Unsupported("-d/-r (dual test)", _))
    ));
    let rev = ClientHeader::parse(&tcp_header(0x4401_0078, EXT_REVERSE, -100));
    assert!(matches!(
        rev,
        Err(HeaderError::Unsupported("-R/--full-duplex", _))
    ));
    let fd = ClientHeader::parse(&tcp_header(0x4001_0078, EXT_FULLDUPLEX, -100));
    assert!(matches!(fd, Err(HeaderError::Unsupported(..))));
    let bb = ClientHeader::parse(&tcp_header(HEADER_BOUNCEBACK, 0, -100));
    assert!(matches!(
        bb,
        Err(HeaderError::Unsupported("--bounceback", _))
    ));
    let key = ClientHeader::parse(&tcp_header(HEADER_KEYCHECK, 0, -100));
    assert!(matches!(
        key,
        Err(HeaderError::Unsupported("--permit-key", _))
    ));
    // Extended flags are only read when the header has them.
    let short = ClientHeader::parse(&tcp_header(HEADER_LEN_BIT | 24, EXT_REVERSE, -1));
    assert_eq!(short.unwrap().ext_flags, 0);
}

#[test]
fn refuses_garbage() {
    let http = ClientHeader::parse(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(http, Err(HeaderError::NotIperf2(0x4745_5420)));
    assert_eq!(
        ClientHeader::parse(&[0xff; 40]),
        Err(HeaderError::NotIperf2(0xffff_ffff))
    );
    assert_eq!(
        ClientHeader::parse(&tcp_header(HEADER_LEN_BIT | 22, 0, -1)),
        Err(HeaderError::Length(22))
    );
    assert_eq!(
        ClientHeader::parse(&tcp_header(HEADER_LEN_BIT | 0x1FE, 0, -1)),
        Err(HeaderError::Length(0x1FE))
    );
    assert!(ClientHeader::parse(&tcp_header(HEADER_LEN_BIT | 256, 0, -1)).is_ok());
    assert_eq!(ClientHeader::parse(&[0; 23]), Err(HeaderError::Short(23)));
    assert_eq!(ClientHeader::parse(&[0; 3]), Err(HeaderError::Short(3)));
}

fn datagram(id: u32, id2: u32, flags: u32) -> Vec<u8> {
    let mut d = Vec::new();
    for w in [id, 7, 250_000, id2, flags] {
        d.extend_from_slice(&w.to_be_bytes());
    }
    d
}

#[test]
fn reads_sequence_numbers() {
    let d = Datagram::read(&datagram(5, 0, 0x4801_0098)).unwrap();
    assert_eq!((d.seq, d.sec, d.usec), (5, 7, 250_000));
    assert_eq!(d.sent(), 7.25);
    // The final datagram, 64-bit: -895 as iperf 2.1.8 sends it.
    let fin = Datagram::read(&datagram(-895i32 as u32, u32::MAX, HEADER_SEQNO64B)).unwrap();
    assert_eq!(fin.seq, -895);
    let big = Datagram::read(&datagram(1, 1, HEADER_SEQNO64B)).unwrap();
    assert_eq!(big.seq, (1 << 32) + 1);
    // 32-bit: id2 is not part of it.
    let narrow = Datagram::read(&datagram(-3i32 as u32, 9, 0)).unwrap();
    assert_eq!(narrow.seq, -3);
    assert_eq!(Datagram::read(&[0; 15]), None);
}

#[test]
fn counts_loss_order_and_duplicates() {
    let mut c = UdpCount::default();
    for s in [1, 2, 4, 3, 3, 6] {
        c.datagram(s, 100, 0.0);
    }
    assert_eq!(c.received, 6);
    assert_eq!(c.bytes, 600);
    assert_eq!(c.highest, 6);
    assert_eq!(c.out_of_order, 1);
    assert_eq!(c.duplicates, 1);
    assert_eq!(c.total(None), 6);
    assert_eq!(c.lost(None), 1);
    // The final datagram -8 says 7 were sent: the last one was lost too.
    assert_eq!(c.total(Some(8)), 7);
    assert_eq!(c.lost(Some(8)), 2);
    assert_eq!(c.total(Some(3)), 6);
}

#[test]
fn forgets_old_numbers_beyond_the_window() {
    let mut c = UdpCount::default();
    c.datagram(1, 1, 0.0);
    c.datagram(1 + WINDOW, 1, 0.0);
    // The same slot, a new number: not a duplicate.
    assert_eq!(c.duplicates, 0);
    c.datagram(1 + WINDOW, 1, 0.0);
    assert_eq!(c.duplicates, 1);
    c.datagram(3 * WINDOW, 1, 0.0);
    c.datagram(2 * WINDOW + 1, 1, 0.0);
    assert_eq!(c.duplicates, 1);
    assert_eq!(c.out_of_order, 1);
    // Too old to tell: late, not a duplicate.
    c.datagram(1, 1, 0.0);
    assert_eq!((c.duplicates, c.out_of_order), (1, 2));
}

#[test]
fn jitter_is_rfc3550s() {
    let mut c = UdpCount::default();
    c.datagram(1, 1, 0.010);
    assert_eq!(c.jitter, 0.0);
    c.datagram(2, 1, 0.026);
    assert!((c.jitter - 0.001).abs() < 1e-12, "{}", c.jitter);
    c.datagram(3, 1, 0.010);
    assert!((c.jitter - (0.001 + (0.016 - 0.001) / 16.0)).abs() < 1e-12);
}

#[test]
fn report_round_trips_in_iperf2s_layout() {
    let r = ServerReport {
        bytes: (3 << 32) + 5,
        secs: 2.5,
        lost: (1 << 32) + 2,
        out_of_order: 7,
        datagrams: (2 << 32) + 9,
        jitter: 1.25,
    };
    let d = r.encode();
    assert_eq!(d.len(), 128);
    assert_eq!(d[..16], [0; 16]);
    let word = |i: usize| u32::from_be_bytes(d[16 + 4 * i..20 + 4 * i].try_into().unwrap());
    assert_eq!(word(0), 0x8800_0000);
    assert_eq!((word(1), word(2)), (3, 5));
    assert_eq!((word(3), word(4)), (2, 500_000));
    assert_eq!((word(5), word(6), word(7)), (2, 7, 9));
    assert_eq!((word(8), word(9)), (1, 250_000));
    assert_eq!((word(25), word(26), word(27)), (1, 0, 2));
    assert_eq!(ServerReport::decode(&d), Some(r));
    assert_eq!(ServerReport::decode(&d[..100]), None);
}

#[test]
fn report_of_a_count() {
    let mut c = UdpCount::default();
    for s in [1, 2, 3, 5] {
        c.datagram(s, 1470, 0.0);
    }
    let r = ServerReport::of(&c, Some(7), 1.0);
    assert_eq!((r.datagrams, r.lost, r.bytes), (6, 2, 4 * 1470));
    assert_eq!(r.secs, 1.0);
}

mod hostile {
    use super::super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever arrives, reading it is an answer or an error, never a
        /// panic, and the count stays consistent.
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = ClientHeader::parse(&b);
            if let Some(g) = Datagram::read(&b) {
                let mut c = UdpCount::default();
                if g.seq > 0 {
                    c.datagram(g.seq.unsigned_abs(), b.len(), g.sent());
                }
                let fin = (g.seq < 0).then(|| g.seq.unsigned_abs());
                let r = ServerReport::of(&c, fin, 1.0);
                prop_assert!(r.lost <= r.datagrams);
                prop_assert_eq!(ServerReport::decode(&r.encode()).map(|d| d.datagrams), Some(r.datagrams));
            }
        }

        /// Any arrival order of numbers 1..=n: nothing lost, every repeat a
        /// duplicate, every late one out of order.
        #[test]
        fn any_order_counts_each_number_once(
            order in Just((1u64..=200).collect::<Vec<_>>()).prop_shuffle(),
            repeats in proptest::collection::vec(1u64..=200, 0..20),
        ) {
            let mut c = UdpCount::default();
            let mut highest = 0;
            let mut late = 0;
            for &s in &order {
                if s < highest { late += 1; }
                highest = highest.max(s);
                c.datagram(s, 10, 0.0);
            }
            for &s in &repeats {
                c.datagram(s, 10, 0.0);
            }
            prop_assert_eq!(c.lost(Some(201)), 0);
            prop_assert_eq!(c.total(Some(201)), 200);
            prop_assert_eq!(c.duplicates, repeats.len() as u64);
            prop_assert_eq!(c.out_of_order, late);
        }
    }
}

#[test]
fn extended_flags_are_read_only_from_an_extended_header_that_holds_them() {
    // Without HEADER_EXTEND the words after client_hdr_v1 are not flags,
    // however long the header says it is.
    let plain = ClientHeader::parse(&tcp_header(HEADER_LEN_BIT | 40, EXT_REVERSE, -1)).unwrap();
    assert_eq!(plain.ext_flags, 0);
    // Extended, but declared too short to reach the flag words.
    let short = tcp_header(HEADER_EXTEND | HEADER_LEN_BIT | 24, EXT_REVERSE, -1);
    assert_eq!(ClientHeader::parse(&short).unwrap().ext_flags, 0);
    // Extended and long enough: the flags count.
    let full = tcp_header(HEADER_EXTEND | HEADER_LEN_BIT | 40, EXT_REVERSE, -1);
    assert!(matches!(
        ClientHeader::parse(&full),
        Err(HeaderError::Unsupported("-R/--full-duplex", _))
    ));
}

#[test]
fn no_amount_is_unset_and_a_flagless_header_has_none() {
    let zero = ClientHeader::parse(&tcp_header(0x4001_0078, 0, 0)).unwrap();
    assert_eq!(zero.amount, Amount::Unset);
    assert_eq!(zero.describe(), "no length given, -P 1");
    // A header whose flag word is 0 carries no meaning in mAmount.
    let flagless = ClientHeader::parse(&tcp_header(0, 0, 1000)).unwrap();
    assert_eq!(flagless.amount, Amount::Unset);
    let one = ClientHeader::parse(&tcp_header(0x4001_0078, 0, -1)).unwrap();
    assert_eq!(one.amount, Amount::Centis(1));
}

#[test]
fn a_number_a_whole_window_behind_is_late_not_a_duplicate() {
    let mut c = UdpCount::default();
    c.datagram(1 + WINDOW, 1, 0.0);
    // Same slot as the newest, too old to tell apart from it.
    c.datagram(1, 1, 0.0);
    assert_eq!((c.duplicates, c.out_of_order), (0, 1));
    // One inside the window that never came is neither.
    c.datagram(2, 1, 0.0);
    assert_eq!((c.duplicates, c.out_of_order), (0, 2));
}

#[test]
fn slots_the_window_moves_past_are_freed_for_the_numbers_that_reuse_them() {
    let mut c = UdpCount::default();
    c.datagram(5, 1, 0.0);
    // A jump of less than the window: the slots up to it are forgotten,
    // 5's among them (5 + WINDOW uses it).
    c.datagram(WINDOW + 6, 1, 0.0);
    c.datagram(WINDOW + 5, 1, 0.0);
    assert_eq!((c.duplicates, c.out_of_order), (0, 1));
    c.datagram(WINDOW + 5, 1, 0.0);
    assert_eq!(c.duplicates, 1);
}

#[test]
fn recent_numbers_stay_remembered_as_the_count_moves_on() {
    let mut c = UdpCount::default();
    for s in 1..=(WINDOW / 2 + 10) {
        c.datagram(s, 1, 0.0);
    }
    // Every recent number is still known: a repeat is a duplicate.
    c.datagram(WINDOW / 2 + 9, 1, 0.0);
    c.datagram(1, 1, 0.0);
    assert_eq!((c.duplicates, c.out_of_order), (2, 0));
    assert_eq!(c.lost(None), 0);
}

#[test]
fn a_first_datagram_numbered_zero_is_in_order() {
    let mut c = UdpCount::default();
    c.datagram(0, 1, 0.0);
    assert_eq!((c.duplicates, c.out_of_order, c.highest), (0, 0, 0));
}

#[test]
fn a_report_without_64_bit_counts_reads_only_their_low_words() {
    let r = ServerReport {
        bytes: 5,
        secs: 1.0,
        lost: (1 << 32) + 2,
        out_of_order: (1 << 32) + 7,
        datagrams: (2 << 32) + 9,
        jitter: 0.0,
    };
    let mut d = r.encode();
    // An older server's flags: HEADER_VERSION1 without HEADER_SEQNO64B,
    // its words 25..27 (here left as they were) are not counts.
    d[16..20].copy_from_slice(&HEADER_VERSION1.to_be_bytes());
    let narrow = ServerReport::decode(&d).unwrap();
    assert_eq!(
        (narrow.lost, narrow.out_of_order, narrow.datagrams),
        (2, 7, 9)
    );
}
