//! Fuzzes the server's control conversation with sequences of messages, not
//! single frames: the input is a run of frames (as a client would send
//! them) with one leading byte choosing a keyed server and how the server
//! answers each test request. Whatever arrives, a refusal or close is the
//! last step, a test is admitted at most once and only after the key was
//! proven, and a test is acknowledged only after it was admitted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netrig::protocol::auth::Key;
use netrig::protocol::conversation::{Conversation, Step};
use netrig::protocol::proto::{Message, decode_frame};
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let key = (mode & 1 == 1)
        .then(|| Key::from_text(b"a fuzzing key that is long and random enough").ok())
        .flatten();
    let (mut c, first) = Conversation::new(
        &Message::hello(),
        mode & 2 == 2,
        key,
        vec![9; 16],
        Duration::from_secs(60),
    );
    let mut all = vec![first];
    let mut answer = mode >> 2;
    loop {
        let steps = match decode_frame(rest) {
            Ok(Some((m, used))) => {
                rest = &rest[used..];
                c.on_message(m)
            }
            Ok(None) => break,
            Err(e) => {
                all.push(c.on_malformed(e));
                break;
            }
        };
        let admitted = steps.iter().any(|s| matches!(s, Step::Admit(_)));
        all.push(steps);
        if admitted {
            answer = answer.rotate_left(1);
            all.push(match answer % 3 {
                0 => c.accepted(uuid_of(answer)),
                1 => c.refused(netrig::protocol::refusal::Refusal::Stopped),
                _ => {
                    c.handed_off();
                    Vec::new()
                }
            });
        }
    }
    all.push(c.on_timeout());
    let (mut ended, mut admitted, mut asked) = (false, 0, false);
    for s in all.iter().flatten() {
        assert!(!ended, "a step after the end: {s:?}");
        match s {
            Step::Refuse(_) | Step::Close => ended = true,
            Step::Admit(_) => {
                admitted += 1;
                asked = true;
            }
            Step::Send(Message::TestAccept { .. }) => assert!(asked),
            _ => {}
        }
    }
    assert!(admitted <= 1);
});

fn uuid_of(n: u8) -> uuid::Uuid {
    uuid::Uuid::from_bytes([n; 16])
}
