//! A fixed layout for the messages every data connection exchanges: the
//! two a server sends, its `data_ack` and an `ok` final report, for a
//! client whose data hello asked for it ([`super::DataHello::compact`]);
//! a client's own `ok` report once the server's came in this layout (a
//! server that writes it reads it); and the client's data hello itself,
//! to a server whose answer to the control connection's hello said it
//! reads it ([`super::COMPACT_DATA_HELLO`]: a client cannot learn
//! it from the data connection, whose hello is its first word). A crr
//! transaction is one hello, one ack and one report each way: decoding and
//! encoding them as JSON was about a microsecond and a half of each
//! transaction's user time at the client and one at the server.
//!
//! The frame header is the usual one; the payload is a tag byte (JSON
//! payloads start with `{`), then big-endian fields:
//! - `data_ack`: tag 1, the connection's 16 bytes (17 bytes);
//! - `final` with verdict `ok`: tag 2, a flags byte (bit 0: TCP_INFO
//!   follows), sent and received (u64 each), then the [`TcpInfoSummary`]
//!   if flagged: retransmits u32, bytes_retrans u64, rtt_us, min_rtt_us,
//!   cwnd, snd_mss u32 each, rwnd_limited_us, sndbuf_limited_us, busy_us
//!   u64 each (18 or 70 bytes);
//! - `data_hello`: tag 3, the session's and the connection's 16 bytes, the
//!   buffer (u32), a flags byte (bit 0: `compact`; bit 1: a proof
//!   follows), then the proof's 32 bytes if flagged (38 or 70 bytes). A
//!   proof that is not 32 bytes of lowercase hex has no layout.
//!
//! Any other message, and a report with another verdict (whose detail is
//! text), stays JSON. A payload that is neither JSON nor exactly one of
//! these layouts is malformed.

use uuid::Uuid;

use super::{DataHello, FinalReport, HEADER_LEN, Message, TcpInfoSummary, Verdict};

const ACK: u8 = 1;
const FINAL: u8 = 2;
const HELLO: u8 = 3;
/// A final report's flags: its TCP_INFO follows.
const WITH_INFO: u8 = 1;
/// A data hello's flags: it asks for the layout back ...
const WANTS_COMPACT: u8 = 1;
/// ... and its proof follows.
const WITH_PROOF: u8 = 2;
const ACK_LEN: usize = 17;
const FINAL_LEN: usize = 18;
const INFO_LEN: usize = 52;
const HELLO_LEN: usize = 38;
const PROOF_LEN: usize = 32;
/// What an encoded frame's buffer holds: the largest frame (a report with
/// TCP_INFO, a hello with its proof) and what is gathered behind it in the
/// same write (`tcp::drive::gather`): a crr request behind the hello, a
/// reply and the server's report behind the acknowledgement. Sized for the
/// frame alone, the buffer grew (a reallocation and a copy) on every
/// connection at both ends.
const ROOM: usize = 256;
const _: () = assert!(HEADER_LEN + FINAL_LEN + INFO_LEN <= ROOM);
const _: () = assert!(HEADER_LEN + HELLO_LEN + PROOF_LEN <= ROOM);

/// `msg` as one frame in the fixed layout; `None` for a message that has
/// none (it goes as JSON).
pub fn encode(msg: &Message) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(ROOM);
    out.extend_from_slice(&super::MAGIC);
    out.extend_from_slice(&[super::FRAME_VERSION, 0, 0, 0, 0, 0]);
    match msg {
        Message::DataAck { connection } => {
            out.push(ACK);
            out.extend_from_slice(connection.as_bytes());
        }
        Message::DataHello(h) => {
            let proof = match &h.proof {
                None => None,
                Some(p) => Some(proof_bytes(p)?),
            };
            out.push(HELLO);
            out.extend_from_slice(h.session.as_bytes());
            out.extend_from_slice(h.connection.as_bytes());
            out.extend_from_slice(&h.buffer.to_be_bytes());
            let wants = if h.compact { WANTS_COMPACT } else { 0 };
            out.push(wants | if proof.is_some() { WITH_PROOF } else { 0 });
            if let Some(p) = proof {
                out.extend_from_slice(&p);
            }
        }
        Message::Final(r) if r.verdict == Verdict::Ok => {
            out.push(FINAL);
            out.push(if r.tcp_info.is_some() { WITH_INFO } else { 0 });
            out.extend_from_slice(&r.sent.to_be_bytes());
            out.extend_from_slice(&r.received.to_be_bytes());
            if let Some(i) = &r.tcp_info {
                out.extend_from_slice(&i.retransmits.to_be_bytes());
                out.extend_from_slice(&i.bytes_retrans.to_be_bytes());
                for v in [i.rtt_us, i.min_rtt_us, i.cwnd, i.snd_mss] {
                    out.extend_from_slice(&v.to_be_bytes());
                }
                for v in [i.rwnd_limited_us, i.sndbuf_limited_us, i.busy_us] {
                    out.extend_from_slice(&v.to_be_bytes());
                }
            }
        }
        _ => return None,
    }
    let len = (out.len() - HEADER_LEN) as u32;
    out[4..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
    Some(out)
}

/// A proof's bytes, when it is their lowercase hex (what
/// [`crate::protocol::auth::data_proof`] writes), so that the layout gives
/// back the very string.
fn proof_bytes(hex_proof: &str) -> Option<[u8; PROOF_LEN]> {
    let mut b = [0u8; PROOF_LEN];
    hex::decode_to_slice(hex_proof, &mut b).ok()?;
    (hex::encode(b) == hex_proof).then_some(b)
}

/// `msg` in the fixed layout when `compact` and it has one, else as JSON.
pub fn encode_for(msg: &Message, compact: bool) -> Vec<u8> {
    compact
        .then(|| encode(msg))
        .flatten()
        .unwrap_or_else(|| super::encode(msg))
}

/// Whether `payload` is in the fixed layout (not JSON).
pub fn is_compact(payload: &[u8]) -> bool {
    payload
        .first()
        .is_some_and(|&b| b == ACK || b == FINAL || b == HELLO)
}

/// Reads big-endian integers off the front of a payload.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        let mut b = [0u8; N];
        b.copy_from_slice(head);
        b
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
}

/// The message in a fixed-layout payload; `None` unless `payload` is
/// exactly one of the layouts.
pub fn decode(payload: &[u8]) -> Option<Message> {
    let (&tag, body) = payload.split_first()?;
    match (tag, body.len()) {
        (ACK, n) if n == ACK_LEN - 1 => Some(Message::DataAck {
            connection: Uuid::from_bytes(Fields(body).take()),
        }),
        (HELLO, n) if n == HELLO_LEN - 1 || n == HELLO_LEN - 1 + PROOF_LEN => {
            let mut f = Fields(body);
            let (session, connection) = (f.take(), f.take());
            let buffer = f.u32();
            let flags = f.take::<1>()[0];
            let with_proof = n != HELLO_LEN - 1;
            if flags & !WANTS_COMPACT != if with_proof { WITH_PROOF } else { 0 } {
                return None;
            }
            Some(Message::DataHello(DataHello {
                session: Uuid::from_bytes(session),
                connection: Uuid::from_bytes(connection),
                buffer,
                proof: with_proof.then(|| hex::encode(f.take::<PROOF_LEN>())),
                compact: flags & WANTS_COMPACT != 0,
            }))
        }
        (FINAL, n) if n == FINAL_LEN - 1 || n == FINAL_LEN - 1 + INFO_LEN => {
            let mut f = Fields(body);
            let flags = f.take::<1>()[0];
            let with_info = n != FINAL_LEN - 1;
            if flags != if with_info { WITH_INFO } else { 0 } {
                return None;
            }
            let (sent, received) = (f.u64(), f.u64());
            let tcp_info = with_info.then(|| TcpInfoSummary {
                retransmits: f.u32(),
                bytes_retrans: f.u64(),
                rtt_us: f.u32(),
                min_rtt_us: f.u32(),
                cwnd: f.u32(),
                snd_mss: f.u32(),
                rwnd_limited_us: f.u64(),
                sndbuf_limited_us: f.u64(),
                busy_us: f.u64(),
            });
            Some(Message::Final(FinalReport {
                sent,
                received,
                verdict: Verdict::Ok,
                tcp_info,
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::proto::decode_frame;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes behind a layout's tag, of any length near the
        /// layouts', decode to a message or to nothing, never a panic; and
        /// what decodes encodes back to the same bytes.
        #[test]
        fn bytes_behind_a_tag_never_panic(tag in 1u8..4, rest in proptest::collection::vec(any::<u8>(), 0..100)) {
            let p = [&[tag][..], &rest].concat();
            if let Some(m) = decode(&p) {
                prop_assert_eq!(&encode(&m).unwrap()[HEADER_LEN..], &p[..]);
            }
        }

        #[test]
        fn a_data_hello_comes_back_whole(s in any::<u128>(), c in any::<u128>(), buffer in any::<u32>(),
                                         proof in proptest::option::of(any::<[u8; 32]>()), compact in any::<bool>()) {
            let m = Message::DataHello(DataHello {
                session: Uuid::from_u128(s),
                connection: Uuid::from_u128(c),
                buffer,
                proof: proof.map(hex::encode),
                compact,
            });
            let frame = encode(&m).unwrap();
            prop_assert_eq!(decode_frame(&frame).unwrap(), Some((m, frame.len())));
        }
    }

    fn info() -> TcpInfoSummary {
        TcpInfoSummary {
            retransmits: 1,
            bytes_retrans: 2,
            rtt_us: 3,
            min_rtt_us: 4,
            cwnd: 5,
            snd_mss: 6,
            rwnd_limited_us: 7,
            sndbuf_limited_us: 8,
            busy_us: u64::MAX - 9,
        }
    }

    fn report(verdict: Verdict, tcp_info: Option<TcpInfoSummary>) -> Message {
        Message::Final(FinalReport {
            sent: 64,
            received: u64::MAX - 2,
            verdict,
            tcp_info,
        })
    }

    #[test]
    fn an_ack_and_ok_reports_go_in_the_fixed_layout_and_come_back_whole() {
        let ack = Message::DataAck {
            connection: Uuid::from_u128(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10),
        };
        for (m, len) in [
            (ack, ACK_LEN),
            (report(Verdict::Ok, None), FINAL_LEN),
            (report(Verdict::Ok, Some(info())), FINAL_LEN + INFO_LEN),
        ] {
            let frame = encode_for(&m, true);
            assert_eq!(frame.len(), HEADER_LEN + len, "{m:?}");
            assert_eq!(super::super::frame_remaining(&frame), 0);
            assert!(is_compact(&frame[HEADER_LEN..]), "{m:?}");
            assert_eq!(
                decode_frame(&frame).unwrap(),
                Some((m.clone(), frame.len()))
            );
            // Not asked for: JSON, which decodes the same.
            let json = encode_for(&m, false);
            assert_eq!(json[HEADER_LEN], b'{');
            assert!(!is_compact(&json[HEADER_LEN..]));
            assert_eq!(decode_frame(&json).unwrap(), Some((m, json.len())));
        }
    }

    fn hello(proof: Option<String>, compact: bool) -> Message {
        Message::DataHello(DataHello {
            session: Uuid::from_u128(0x1112_1314_1516_1718_191a_1b1c_1d1e_1f20),
            connection: Uuid::from_u128(0x2122_2324_2526_2728_292a_2b2c_2d2e_2f30),
            buffer: 0x0102_0304,
            proof,
            compact,
        })
    }

    fn a_proof() -> String {
        let key = [7u8; 32];
        crate::protocol::auth::data_proof(&key, &Uuid::from_u128(1), &Uuid::from_u128(2))
    }

    #[test]
    fn a_data_hello_goes_in_the_fixed_layout_with_or_without_its_proof() {
        for (m, len) in [
            (hello(None, true), HELLO_LEN),
            (hello(None, false), HELLO_LEN),
            (hello(Some(a_proof()), true), HELLO_LEN + PROOF_LEN),
            (hello(Some(a_proof()), false), HELLO_LEN + PROOF_LEN),
        ] {
            let frame = encode_for(&m, true);
            assert_eq!(frame.len(), HEADER_LEN + len, "{m:?}");
            assert_eq!(frame[HEADER_LEN], HELLO);
            assert_eq!(super::super::frame_remaining(&frame), 0);
            assert_eq!(
                decode_frame(&frame).unwrap(),
                Some((m.clone(), frame.len()))
            );
        }
        // Field by field: the IDs as they are, the buffer big-endian.
        let frame = encode(&hello(Some(a_proof()), true)).unwrap();
        let body = &frame[HEADER_LEN + 1..];
        assert_eq!(
            body[..16],
            [
                0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e,
                0x1f, 0x20
            ]
        );
        assert_eq!(body[16], 0x21);
        assert_eq!(body[32..37], [1, 2, 3, 4, WANTS_COMPACT | WITH_PROOF]);
        assert_eq!(hex::encode(&body[37..]), a_proof());
    }

    #[test]
    fn a_proof_that_is_not_32_bytes_of_lowercase_hex_sends_the_hello_as_json() {
        let upper = a_proof().to_uppercase();
        for p in [
            upper,
            "zz".repeat(32),
            "ab".repeat(31),
            "ab".repeat(33),
            String::new(),
        ] {
            let m = hello(Some(p), true);
            assert_eq!(encode(&m), None, "{m:?}");
            let frame = encode_for(&m, true);
            assert_eq!(frame[HEADER_LEN], b'{');
            assert_eq!(decode_frame(&frame).unwrap(), Some((m, frame.len())));
        }
    }

    #[test]
    fn a_data_hello_off_its_layout_is_malformed() {
        let with = encode(&hello(Some(a_proof()), true)).unwrap()[HEADER_LEN..].to_vec();
        let without = encode(&hello(None, false)).unwrap()[HEADER_LEN..].to_vec();
        let flags = HELLO_LEN - 1;
        let mut bad: Vec<Vec<u8>> = vec![
            with[..with.len() - 1].to_vec(),
            [&with[..], &[0]].concat(),
            without[..without.len() - 1].to_vec(),
            [&without[..], &[0]].concat(),
            vec![HELLO],
        ];
        // A proof flagged and absent, or present and not flagged, or an
        // unknown flag.
        for (body, f) in [
            (&without, WITH_PROOF),
            (&without, WITH_PROOF | WANTS_COMPACT),
            (&with, WANTS_COMPACT),
            (&with, 0),
            (&without, 4),
            (&with, WITH_PROOF | 0x80),
        ] {
            let mut b = body.clone();
            b[flags] = f;
            bad.push(b);
        }
        for p in bad {
            assert_eq!(decode(&p), None, "{p:?}");
        }
        // The flags it may carry decode as they say.
        for (body, f, compact) in [
            (&without, 0, false),
            (&without, WANTS_COMPACT, true),
            (&with, WITH_PROOF, false),
        ] {
            let mut b = body.clone();
            b[flags] = f;
            match decode(&b) {
                Some(Message::DataHello(h)) => assert_eq!(h.compact, compact, "{f}"),
                m => panic!("{f}: {m:?}"),
            }
        }
    }

    #[test]
    fn other_messages_and_verdicts_stay_json() {
        for m in [
            report(Verdict::Cancelled, None),
            report(Verdict::Corrupt { offset: 3 }, Some(info())),
            Message::DataEnd,
            Message::Stop,
        ] {
            assert_eq!(encode(&m), None, "{m:?}");
            let frame = encode_for(&m, true);
            assert_eq!(frame, super::super::encode(&m));
            assert_eq!(decode_frame(&frame).unwrap(), Some((m, frame.len())));
        }
    }

    #[test]
    fn a_payload_off_its_layout_is_malformed() {
        let good = encode(&report(Verdict::Ok, Some(info()))).unwrap();
        let body = &good[HEADER_LEN..];
        assert!(decode(body).is_some());
        // A byte short or long, a flag that does not match the length, an
        // unknown flag or tag: none decodes.
        let mut bad: Vec<Vec<u8>> = vec![
            body[..body.len() - 1].to_vec(),
            [body, &[0]].concat(),
            vec![ACK; 16],
            vec![ACK; 18],
            vec![],
            vec![4; 17],
        ];
        let mut flag = body.to_vec();
        flag[1] = 0;
        bad.push(flag);
        let mut short = encode(&report(Verdict::Ok, None)).unwrap()[HEADER_LEN..].to_vec();
        short[1] = WITH_INFO;
        bad.push(short.clone());
        short[1] = 2;
        bad.push(short);
        for p in bad {
            assert_eq!(decode(&p), None, "{p:?}");
            let mut frame = super::super::encode(&Message::Stop)[..HEADER_LEN].to_vec();
            frame[4..HEADER_LEN].copy_from_slice(&(p.len() as u32).to_be_bytes());
            frame.extend_from_slice(&p);
            assert!(decode_frame(&frame).is_err(), "{p:?}");
        }
    }
}
