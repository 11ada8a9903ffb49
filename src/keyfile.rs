//! Where a pre-shared key comes from: a file (`--key FILE`) or the
//! `NETRIG_KEY` environment variable. The key's checks are in `auth`.

use std::path::Path;

use crate::protocol::auth::{AuthError, KEY_ENV, Key};

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
        return load(p).map(Some);
    }
    match std::env::var_os(KEY_ENV) {
        Some(v) if v.is_empty() => Err(AuthError::EmptyEnv),
        Some(v) => Key::from_text(v.as_encoded_bytes()).map(Some),
        None => Ok(None),
    }
}
