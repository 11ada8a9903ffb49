//! Where a mesh node's peer list comes from: a file (one address a line,
//! re-read on every refresh) or a DNS name (a headless Service's name
//! resolves to every pod's address), read again every refresh interval,
//! moved by a random ±20% so many nodes do not ask at once. One thread,
//! whatever the list's size.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::protocol::mesh::node::jittered;
use crate::protocol::mesh::pick::{BadPeer, parse_list};

/// Where the peers come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file: `IP`, `IP:PORT` or `[IPv6]:PORT` a line; without a port, the
    /// mesh's own.
    File(PathBuf),
    /// Every address `name` resolves to, with `port`.
    Dns { name: String, port: u16 },
}

/// Why the peer list could not be read.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("cannot read {0}: {1}")]
    File(PathBuf, std::io::Error),
    #[error("{0}: {1}")]
    Parse(PathBuf, BadPeer),
    #[error("cannot resolve {0}: {1}")]
    Dns(String, std::io::Error),
}

impl Source {
    /// The list now; `port` for entries without one.
    pub fn read(&self, port: u16) -> Result<Vec<SocketAddr>, ReadError> {
        match self {
            Source::File(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| ReadError::File(p.clone(), e))?;
                parse_list(&text, port).map_err(|e| ReadError::Parse(p.clone(), e))
            }
            Source::Dns { name, port } => (name.as_str(), *port)
                .to_socket_addrs()
                .map(Iterator::collect)
                .map_err(|e| ReadError::Dns(name.clone(), e)),
        }
    }
}

/// Reads the list every `every` (jittered) and sends each result, until
/// `stop`. While no list was read yet, retries every second at most.
pub fn refresh(
    source: Source,
    port: u16,
    every: Duration,
    tx: Sender<Result<Vec<SocketAddr>, ReadError>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("mesh-peers".into())
        .spawn(move || {
            let mut ever = false;
            while !stop.load(SeqCst) {
                let r = source.read(port);
                ever |= r.is_ok();
                if tx.send(r).is_err() {
                    return;
                }
                let base = if ever {
                    every
                } else {
                    every.min(Duration::from_secs(1))
                };
                let wait = jittered(base, rand::random::<f64>());
                let until = Instant::now() + wait;
                while !stop.load(SeqCst) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(50).min(wait));
                }
            }
        })?;
    Ok(())
}
