//! Fuzzes the relay's handling of bytes from the network: the frame splitter
//! fed in arbitrary pieces with arbitrary data lengths after frames, and the
//! impairers given arbitrary lengths. Data must come out exactly as it went in.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netrig::protocol::relay::framer::{After, Framer, Piece};
use netrig::protocol::relay::impair::{DatagramImpairer, ImpairSpec, StreamImpairer};

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let mut f = Framer::default();
    let mut out = Vec::new();
    let step = usize::from(ctl % 64) + 1;
    for chunk in rest.chunks(step) {
        for p in f.push(chunk, &mut |_| After {
            rewritten: false,
            data: Some(u64::from(ctl)),
        }) {
            match p {
                Piece::Frame(b) | Piece::Data(b) => out.extend(b),
            }
        }
    }
    assert!(rest.starts_with(&out), "pieces are the input, in order");
    let spec = ImpairSpec {
        corrupt: f64::from(ctl) / 255.0,
        reset_after: Some(u64::from(ctl) * 7),
        loss: 0.1,
        reorder: 0.1,
        rate_bps: 1_000_000,
        burst: 1500,
        shape: ctl % 2 == 0,
        queue_limit_ns: 1_000_000,
        ..Default::default()
    };
    let mut s = StreamImpairer::new(spec.clone(), u64::from(ctl));
    let mut copy = rest.to_vec();
    let _ = s.apply(&mut copy);
    let mut d = DatagramImpairer::new(spec, 1, 0);
    for (i, &b) in rest.iter().enumerate() {
        let _ = d.decide(usize::from(b), 32, i as u64 * 1000);
    }
});
