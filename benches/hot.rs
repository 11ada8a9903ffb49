//! Micro-benchmarks of the pure code on the data path, so a regression
//! shows here before the end-to-end benches (bench/*.sh) notice it:
//! payload pattern verification, the UDP sequence tracker and per-datagram
//! accounting, frame and datagram-header decoding, and the GRO split.
//! `cargo bench --no-run` builds them (CI); `cargo bench` runs them.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use netrig::protocol::proto::{Message, decode_frame, encode};
use netrig::protocol::udp::gro;
use netrig::protocol::udp::header::{HEADER_LEN, Header, fill_payload, verify_payload};
use netrig::protocol::udp::track::{ReceiverStats, SeqTracker};
use std::hint::black_box;

fn pattern(c: &mut Criterion) {
    let mut g = c.benchmark_group("pattern");
    for size in [64usize, 1400, 65_536] {
        let mut d = vec![0u8; size];
        fill_payload(1, 12_345, &mut d);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("verify {size} B"), |b| {
            b.iter(|| verify_payload(1, black_box(12_345), black_box(&d)))
        });
        g.bench_function(format!("fill {size} B"), |b| {
            b.iter(|| fill_payload(1, black_box(12_345), black_box(&mut d)))
        });
    }
    g.finish();
}

/// 64 Ki sequence numbers: in order, and with every 50th swapped with its
/// neighbour and every 97th missing, as a lossy, reordering path delivers.
fn arrivals() -> (Vec<u64>, Vec<u64>) {
    let clean: Vec<u64> = (0..65_536).collect();
    let mut messy: Vec<u64> = clean.iter().copied().filter(|s| s % 97 != 13).collect();
    for i in (0..messy.len() - 1).step_by(50) {
        messy.swap(i, i + 1);
    }
    (clean, messy)
}

fn tracker(c: &mut Criterion) {
    let mut g = c.benchmark_group("udp tracker");
    let (clean, messy) = arrivals();
    for (name, seqs) in [("in order", &clean), ("lossy, reordered", &messy)] {
        g.throughput(Throughput::Elements(seqs.len() as u64));
        g.bench_function(format!("SeqTracker {name}"), |b| {
            b.iter(|| {
                let mut t = SeqTracker::default();
                for &s in seqs {
                    black_box(t.on_seq(s));
                }
                t.missing()
            })
        });
        g.bench_function(format!("ReceiverStats {name}"), |b| {
            b.iter(|| {
                let mut st = ReceiverStats::new(50_000, 100);
                for &s in seqs {
                    let transit = 20_000 + (s % 7) as i64 * 100;
                    black_box(st.on_datagram(s, 1400, transit, transit, false));
                }
                st.totals(None).lost
            })
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    let frame = encode(&Message::DataAck {
        connection: uuid::Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0),
    });
    g.bench_function("control frame (data_ack)", |b| {
        b.iter(|| decode_frame(black_box(&frame)).map(|m| m.map(|(_, n)| n)))
    });
    let mut d = vec![0u8; 1400];
    Header {
        flags: 0,
        stream: 1,
        seq: 7,
        send_ns: 1_700_000_000_000_000_000,
        payload_len: (1400 - HEADER_LEN) as u32,
    }
    .write(&mut d);
    g.bench_function("datagram header", |b| {
        b.iter(|| Header::read(black_box(&d)).map(|h| h.seq))
    });
    g.finish();
}

fn gro_split(c: &mut Criterion) {
    let mut g = c.benchmark_group("gro");
    for seg in [64usize, 1400] {
        let len = (gro::MAX_BYTES / seg).min(gro::MAX_SEGMENTS) * seg - seg / 2;
        g.throughput(Throughput::Elements(len.div_ceil(seg) as u64));
        g.bench_function(format!("split {len} B at {seg}"), |b| {
            b.iter(|| {
                gro::split(black_box(len), black_box(seg))
                    .map(|(at, n)| at ^ n)
                    .fold(0, |a, x| a ^ x)
            })
        });
    }
    let lens = vec![1400usize; 187];
    let mut out = Vec::new();
    g.bench_function("groups 187 x 1400 B", |b| {
        b.iter(|| {
            gro::groups(black_box(&lens), &mut out);
            out.len()
        })
    });
    g.finish();
}

criterion_group!(benches, pattern, tracker, decode, gro_split);
criterion_main!(benches);
