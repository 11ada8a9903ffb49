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
use std::path::Path;
use thiserror::Error;

/// Environment variable holding the key itself (an alternative to `--key FILE`).
pub const KEY_ENV: &str = "NETRIG_KEY";
/// Shortest key accepted, bytes.
pub const MIN_KEY_LEN: usize = 16;
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
        Ok(Key(t.to_vec()))
    }

    /// Reads a key file.
    pub fn load(path: &Path) -> Result<Key, AuthError> {
        let bytes = std::fs::read(path).map_err(|e| AuthError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Key::from_text(&bytes)
    }

    /// The key from `--key FILE` if given, else from `NETRIG_KEY`, else none.
    pub fn from_file_or_env(path: Option<&Path>) -> Result<Option<Key>, AuthError> {
        if let Some(p) = path {
            return Key::load(p).map(Some);
        }
        match std::env::var_os(KEY_ENV) {
            Some(v) if !v.is_empty() => Key::from_text(v.as_encoded_bytes()).map(Some),
            _ => Ok(None),
        }
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
const CLIENT_LABEL: &[u8] = b"netrig-auth-v1 client";
const SERVER_LABEL: &[u8] = b"netrig-auth-v1 server";

/// A fresh random nonce, hex.
pub fn nonce() -> String {
    let n: [u8; NONCE_LEN] = rand::random();
    hex::encode(n)
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
    }

    #[test]
    fn keys_are_trimmed_checked_and_never_printed() {
        assert_eq!(key("  0123456789abcdef \n"), key("0123456789abcdef"));
        assert_eq!(Key::from_text(b"short\n"), Err(AuthError::TooShort(5)));
        assert_eq!(format!("{:?}", key("0123456789abcdef")), "Key(<16 bytes>)");
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
