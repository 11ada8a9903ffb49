//! Fuzzes the parsers for user-typed values (sizes, rates, durations, buffer ranges).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = netrig::protocol::units::parse_size(s);
        let _ = netrig::protocol::units::parse_rate(s);
        let _ = netrig::protocol::units::parse_duration(s);
        let _ = netrig::protocol::units::parse_probability(s);
        let _ = s.parse::<netrig::tcp::config::BufferSpec>();
    }
});
