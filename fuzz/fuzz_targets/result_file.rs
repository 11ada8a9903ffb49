//! Fuzzes what `netrig analyze` does with a result file: JSON from disk,
//! decoded into a profile and intervals, then binned and analysed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netrig::protocol::udp::analyze::{analyze, bins, samples};
use netrig::protocol::udp::sent::SenderReport;
use netrig::protocol::udp::profile::Profile;
use netrig::protocol::udp::track::UdpInterval;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(profile) = serde_json::from_value::<Profile>(doc["config"]["spec"]["profile"].clone())
    else {
        return;
    };
    let Ok(intervals) =
        serde_json::from_value::<Vec<UdpInterval>>(doc["result"]["intervals"].clone())
    else {
        return;
    };
    // The sender's per-interval account, when the file has one.
    let sender = serde_json::from_value::<SenderReport>(doc["result"]["sender"].clone()).ok();
    let sent = sender
        .as_ref()
        .map(|s| (s.sent_intervals.as_slice(), s.interval_ms as f64 / 1e3));
    let s = samples(&profile, &intervals, sent);
    let _ = bins(&s, 1e6);
    let _ = analyze(&s);
});
