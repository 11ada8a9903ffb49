//! Fuzzes the FlowPing scenario-file parser and the schedule it drives: any
//! file must give a profile or an error naming the line, never a panic or a
//! schedule that runs backwards.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netrig::protocol::udp::scenario::{Format, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((p, _)) = parse(text, Format::Auto) {
        let mut last = 0;
        for (t, size) in p.departures().take(10_000) {
            assert!(t >= last, "departures go forward");
            assert!(size > 0);
            last = t;
        }
    }
});
