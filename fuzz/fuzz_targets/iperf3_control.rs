//! Fuzzes the server's end of an iperf3 control connection: the cookie, the
//! parameter and results messages and the state bytes, fed in the chunks
//! the first byte chooses, must give events or a named error, never a panic,
//! and never let the machine ask for more than one message at a time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netrig::protocol::iperf3::{Control, MAX_RESULTS_JSON, udp};

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let mut c = Control::new();
    for piece in rest.chunks(chunk) {
        assert!(c.wants() <= 4 + MAX_RESULTS_JSON as usize);
        if c.feed(piece).is_err() {
            break;
        }
    }
    let _ = udp::Header::read(false, data);
    let _ = udp::Header::read(true, data);
});
