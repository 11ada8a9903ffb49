//! Pre-shared-key authentication of control connections, free of I/O:
//! HMAC-SHA256 challenge-response in both directions.
//!
//! The client sends a random nonce in its hello; a server with a key answers
//! with its own nonce; the client proves it knows the key with
//! `HMAC(key, "netrig-auth-v1 client" ‖ client nonce ‖ server nonce)` and the
//! server proves it back with the same over `"netrig-auth-v1 server"`. Fresh
//! nonces on both sides mean a recorded exchange cannot be replayed, and the
//! key never crosses the wire. Data connections attach by the session ID,
//! a random UUID learned only over the authenticated control connection.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use thiserror::Error;

/// Environment variable holding the key itself (an alternative to `--key FILE`).
pub const KEY_ENV: &str = "NETRIG_KEY";
/// Shortest key accepted, bytes.
pub const MIN_KEY_LEN: usize = 16;
/// Least estimated strength of a key, bits.
pub const MIN_KEY_BITS: u32 = 48;
/// Nonce length, bytes.
pub const NONCE_LEN: usize = 16;

/// Why a key could not be loaded or an exchange failed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum AuthError {
    /// The key file could not be read.
    #[error("cannot read key file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// The key is too short to be worth anything.
    #[error(
        "key is {0} bytes; at least {MIN_KEY_LEN} are needed (e.g. `head -c 32 /dev/urandom | base64`)"
    )]
    TooShort(usize),
    /// The key has bytes a text key never has (NUL, other control characters).
    #[error(
        "key has a control character (byte {byte:#04x} at offset {offset}); use printable text, e.g. base64"
    )]
    ControlChar {
        /// The byte.
        byte: u8,
        /// Where, after trimming.
        offset: usize,
    },
    /// The key repeats too few characters to be hard to guess.
    #[error(
        "key is too predictable (about {bits} bits; at least {MIN_KEY_BITS} needed): use random text, e.g. `head -c 32 /dev/urandom | base64`"
    )]
    Weak {
        /// Estimated bits.
        bits: u32,
    },
    /// `NETRIG_KEY` is set to nothing: failing closed beats running open.
    #[error("{KEY_ENV} is set but empty; unset it to run without a key, or give the key")]
    EmptyEnv,
    /// A nonce or proof is not the hex it should be.
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// A pre-shared key. Its bytes are never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key(<{} bytes>)", self.0.len())
    }
}

impl Key {
    /// A key from its text; surrounding whitespace (a trailing newline) is ignored.
    pub fn from_text(text: &[u8]) -> Result<Key, AuthError> {
        let t = text.trim_ascii();
        if t.len() < MIN_KEY_LEN {
            return Err(AuthError::TooShort(t.len()));
        }
        if let Some((offset, &byte)) = t.iter().enumerate().find(|(_, b)| b.is_ascii_control()) {
            return Err(AuthError::ControlChar { byte, offset });
        }
        let bits = estimated_bits(t);
        if bits < f64::from(MIN_KEY_BITS) {
            return Err(AuthError::Weak { bits: bits as u32 });
        }
        Ok(Key(t.to_vec()))
    }

    fn mac(&self, label: &[u8], first: &[u8], second: &[u8]) -> Hmac<Sha256> {
        // Any key length is valid for HMAC.
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(label);
        m.update(first);
        m.update(second);
        m
    }

    /// The client's proof, hex.
    pub fn client_proof(&self, client_nonce: &[u8], server_nonce: &[u8]) -> String {
        let m = self.mac(CLIENT_LABEL, client_nonce, server_nonce);
        hex::encode(m.finalize().into_bytes())
    }

    /// The server's proof, hex.
    pub fn server_proof(&self, client_nonce: &[u8], server_nonce: &[u8]) -> String {
        let m = self.mac(SERVER_LABEL, client_nonce, server_nonce);
        hex::encode(m.finalize().into_bytes())
    }

    /// Checks a client's proof in constant time.
    pub fn verify_client(&self, client_nonce: &[u8], server_nonce: &[u8], proof: &str) -> bool {
        self.verify(CLIENT_LABEL, client_nonce, server_nonce, proof)
    }

    /// Checks a server's proof in constant time.
    pub fn verify_server(&self, client_nonce: &[u8], server_nonce: &[u8], proof: &str) -> bool {
        self.verify(SERVER_LABEL, client_nonce, server_nonce, proof)
    }

    fn verify(&self, label: &[u8], cn: &[u8], sn: &[u8], proof: &str) -> bool {
        match hex::decode(proof) {
            Ok(p) => self.mac(label, cn, sn).verify_slice(&p).is_ok(),
            Err(_) => false,
        }
    }
}

/// A key's strength as its length times the Shannon entropy of its byte
/// frequencies: random text scores near its true strength, repetitions
/// ("aaaa…", "abab…") score near nothing. An estimate, not a guarantee.
fn estimated_bits(t: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &b in t {
        counts[b as usize] += 1;
    }
    let n = t.len() as f64;
    let per_byte: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum();
    per_byte * n
}

/// Key for tagging one session's UDP test datagrams.
pub type DatagramKey = [u8; 32];
/// Bytes of HMAC tag at the end of an authenticated datagram.
pub const TAG_LEN: usize = 16;

impl Key {
    /// The session's datagram key, derived from the key and both nonces (so
    /// each session's is different and the pre-shared key is never used raw).
    pub fn datagram_key(&self, client_nonce: &[u8], server_nonce: &[u8]) -> DatagramKey {
        let m = self.mac(DATAGRAM_LABEL, client_nonce, server_nonce);
        m.finalize().into_bytes().into()
    }
}

/// A data connection's proof that it belongs to an authenticated session:
/// HMAC of both IDs under the session's key, hex. Without it, anyone who
/// learned a session ID could attach to the session.
pub fn data_proof(key: &DatagramKey, session: &uuid::Uuid, connection: &uuid::Uuid) -> String {
    let mut m = datagram_mac(key, DATA_LABEL);
    m.update(session.as_bytes());
    m.update(connection.as_bytes());
    hex::encode(m.finalize().into_bytes())
}

/// Checks a data connection's proof in constant time.
pub fn verify_data_proof(
    key: &DatagramKey,
    session: &uuid::Uuid,
    connection: &uuid::Uuid,
    proof: &str,
) -> bool {
    let Ok(p) = hex::decode(proof) else {
        return false;
    };
    let mut m = datagram_mac(key, DATA_LABEL);
    m.update(session.as_bytes());
    m.update(connection.as_bytes());
    m.verify_slice(&p).is_ok()
}

fn datagram_mac(key: &DatagramKey, data: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    m.update(data);
    m
}

/// Writes the tag of `datagram[..len - TAG_LEN]` into its last [`TAG_LEN`] bytes.
pub fn sign_datagram(key: &DatagramKey, datagram: &mut [u8]) {
    let Some(body) = datagram.len().checked_sub(TAG_LEN) else {
        return;
    };
    let tag = datagram_mac(key, &datagram[..body]).finalize().into_bytes();
    datagram[body..].copy_from_slice(&tag[..TAG_LEN]);
}

/// Whether a datagram's trailing tag is right (constant time).
pub fn datagram_is_authentic(key: &DatagramKey, datagram: &[u8]) -> bool {
    let Some(body) = datagram.len().checked_sub(TAG_LEN) else {
        return false;
    };
    datagram_mac(key, &datagram[..body])
        .verify_truncated_left(&datagram[body..])
        .is_ok()
}

const DATAGRAM_LABEL: &[u8] = b"netrig-datagram-v1";
const DATA_LABEL: &[u8] = b"netrig-data-v1";
const CLIENT_LABEL: &[u8] = b"netrig-auth-v1 client";
const SERVER_LABEL: &[u8] = b"netrig-auth-v1 server";

/// A fresh random nonce, hex.
pub fn nonce() -> String {
    hex::encode(nonce_bytes())
}

/// A fresh random nonce.
pub fn nonce_bytes() -> Vec<u8> {
    rand::random::<[u8; NONCE_LEN]>().to_vec()
}

/// Decodes a nonce received from the peer.
pub fn decode_nonce(hex_nonce: &str) -> Result<Vec<u8>, AuthError> {
    match hex::decode(hex_nonce) {
        Ok(n) if n.len() == NONCE_LEN => Ok(n),
        _ => Err(AuthError::Malformed("nonce")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(s: &str) -> Key {
        Key::from_text(s.as_bytes()).unwrap()
    }

    #[test]
    fn proofs_verify_only_with_the_same_key_and_nonces() {
        let k = key("correct horse battery staple\n");
        let (cn, sn) = ([1u8; 16], [2u8; 16]);
        let p = k.client_proof(&cn, &sn);
        assert!(k.verify_client(&cn, &sn, &p));
        assert!(!key("correct horse battery stapler").verify_client(&cn, &sn, &p));
        assert!(!k.verify_client(&sn, &cn, &p), "nonces are ordered");
        assert!(
            !k.verify_server(&cn, &sn, &p),
            "a client proof is no server proof"
        );
        assert!(!k.verify_client(&cn, &sn, "zz"));
        assert!(!k.verify_client(&cn, &sn, ""));
        let sp = k.server_proof(&cn, &sn);
        assert_eq!(sp.len(), 64);
        assert!(k.verify_server(&cn, &sn, &sp));
        assert!(
            !k.verify_client(&cn, &sn, &sp),
            "a server proof is no client proof"
        );
        assert!(!key("correct horse battery stapler").verify_server(&cn, &sn, &sp));
    }

    #[test]
    fn keys_are_trimmed_checked_and_never_printed() {
        assert_eq!(key("  0123456789abcdef \n"), key("0123456789abcdef"));
        assert_eq!(Key::from_text(b"short\n"), Err(AuthError::TooShort(5)));
        assert_eq!(format!("{:?}", key("0123456789abcdef")), "Key(<16 bytes>)");
    }

    #[test]
    fn weak_and_odd_keys_are_refused() {
        let mut abc = b"abc".to_vec();
        abc.extend([0u8; 15]);
        assert_eq!(
            Key::from_text(&abc),
            Err(AuthError::ControlChar { byte: 0, offset: 3 })
        );
        assert_eq!(
            Key::from_text(b"aaaaaaaaaaaaaaaaaaaaaaaa"),
            Err(AuthError::Weak { bits: 0 })
        );
        assert_eq!(
            Key::from_text(b"abababababababab"),
            Err(AuthError::Weak { bits: 16 })
        );
        // 16 distinct characters: 64 bits; 12 distinct of 16: about 56.
        assert!(Key::from_text(b"0123456789abcdef").is_ok());
        // Eight characters twice each: exactly 48 bits, just enough.
        assert_eq!(estimated_bits(b"aabbccddeeffgghh"), 48.0);
        assert!(Key::from_text(b"aabbccddeeffgghh").is_ok());
        assert_eq!(
            Key::from_text(b"aabbccddeeffgggg"),
            Err(AuthError::Weak { bits: 44 })
        );
        assert!(estimated_bits(b"0123456789ab0123") > 55.0);
        assert!(estimated_bits(b"0123456789ab0123") < 58.0);
        assert!(Key::from_text(b"a shared secret of some length").is_ok());
        assert!(Key::from_text(b"dGhpcyBpcyBhIHRlc3Qga2V5IG9mIDMyIGJ5dGVz").is_ok());
    }

    #[test]
    fn data_proofs_bind_both_ids_and_the_key() {
        let (k1, k2) = ([1u8; 32], [2u8; 32]);
        let (s, c) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
        let p = data_proof(&k1, &s, &c);
        assert!(verify_data_proof(&k1, &s, &c, &p));
        assert!(!verify_data_proof(&k2, &s, &c, &p));
        assert!(!verify_data_proof(&k1, &c, &s, &p));
        assert!(!verify_data_proof(&k1, &s, &s, &p));
        assert!(!verify_data_proof(&k1, &s, &c, &p[..62]));
        assert!(!verify_data_proof(&k1, &s, &c, "zz"));
    }

    #[test]
    fn known_answer() {
        // HMAC-SHA256 of the label and nonces, computed independently (Python hmac).
        let k = key("0123456789abcdef");
        assert_eq!(
            k.client_proof(&[0u8; 16], &[0xffu8; 16]),
            "bab8d7eb672a713addd86cdf7cc21f59b62f6e3a99af863839702f3ca02d104c"
        );
    }

    #[test]
    fn datagram_tags_detect_any_change() {
        let k = key("0123456789abcdef").datagram_key(&[1; 16], &[2; 16]);
        let other = key("0123456789abcdef").datagram_key(&[1; 16], &[3; 16]);
        let mut d = vec![7u8; 100];
        sign_datagram(&k, &mut d);
        assert!(datagram_is_authentic(&k, &d));
        assert!(
            !datagram_is_authentic(&other, &d),
            "keys differ per session"
        );
        for i in 0..d.len() {
            let mut bad = d.clone();
            bad[i] ^= 0x10;
            assert!(!datagram_is_authentic(&k, &bad), "flip at {i}");
        }
        assert!(!datagram_is_authentic(&k, &d[..10]));
    }

    #[test]
    fn nonces_are_fresh_and_decode() {
        let (a, b) = (nonce(), nonce());
        assert_ne!(a, b);
        assert_eq!(decode_nonce(&a).unwrap().len(), NONCE_LEN);
        assert!(decode_nonce("abcd").is_err());
        assert!(decode_nonce("not hex at all!!").is_err());
    }

    proptest! {
        #[test]
        fn garbage_proofs_never_verify(p in ".{0,80}") {
            let k = key("0123456789abcdef");
            prop_assert!(!k.verify_client(&[0u8; 16], &[1u8; 16], &p));
        }
    }
}
