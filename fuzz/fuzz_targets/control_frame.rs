//! Fuzzes every decoder that reads control/data-connection bytes from the network.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netrig::protocol::proto::{decode_frame, encode, read_message};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((msg, used))) = decode_frame(data) {
        assert!(used <= data.len());
        // Whatever decodes must re-encode to something that decodes the same.
        let again = encode(&msg);
        let (back, _) = decode_frame(&again).expect("re-encoded frame decodes").expect("complete");
        assert_eq!(back, msg);
    }
    let _ = read_message(&mut &data[..]);
});
