//! What the relay did: counts per direction, and every impairment as an
//! event, kept in memory for tests and written to the `--log` CSV file as
//! it happens.

use serde::Serialize;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use super::Dir;

/// What the relay did in one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DirCounts {
    /// Datagrams subject to impairment.
    pub datagrams: u64,
    /// Datagrams forwarded (duplicates not counted twice).
    pub forwarded: u64,
    /// Dropped by `--loss`/`--drop-every`.
    pub lost: u64,
    /// Dropped by the policer.
    pub policed: u64,
    /// Dropped because the shaping queue was full.
    pub queue_dropped: u64,
    /// Sent twice.
    pub duplicated: u64,
    /// Sent after a later datagram.
    pub reordered: u64,
    /// Datagrams with one flipped payload bit.
    pub corrupted: u64,
    /// Stream data bytes relayed (TCP).
    pub stream_bytes: u64,
    /// Stream bytes flipped (TCP).
    pub stream_corrupted: u64,
    /// Connections reset by `--reset-after` (TCP).
    pub resets: u64,
}

#[derive(Default)]
pub(super) struct DirCounters {
    pub(super) datagrams: AtomicU64,
    pub(super) forwarded: AtomicU64,
    pub(super) lost: AtomicU64,
    pub(super) policed: AtomicU64,
    pub(super) queue_dropped: AtomicU64,
    pub(super) duplicated: AtomicU64,
    pub(super) reordered: AtomicU64,
    pub(super) corrupted: AtomicU64,
    pub(super) stream_bytes: AtomicU64,
    pub(super) stream_corrupted: AtomicU64,
    pub(super) resets: AtomicU64,
}

impl DirCounters {
    pub(super) fn snapshot(&self) -> DirCounts {
        DirCounts {
            datagrams: self.datagrams.load(SeqCst),
            forwarded: self.forwarded.load(SeqCst),
            lost: self.lost.load(SeqCst),
            policed: self.policed.load(SeqCst),
            queue_dropped: self.queue_dropped.load(SeqCst),
            duplicated: self.duplicated.load(SeqCst),
            reordered: self.reordered.load(SeqCst),
            corrupted: self.corrupted.load(SeqCst),
            stream_bytes: self.stream_bytes.load(SeqCst),
            stream_corrupted: self.stream_corrupted.load(SeqCst),
            resets: self.resets.load(SeqCst),
        }
    }
}

/// Everything the relay did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RelayCounts {
    /// Client to server.
    pub up: DirCounts,
    /// Server to client.
    pub down: DirCounts,
    /// TCP connections relayed.
    pub tcp_connections: u64,
    /// UDP flows relayed.
    pub udp_flows: u64,
    /// TCP connections reset because `max_conns` were open.
    pub tcp_refused: u64,
    /// Datagrams dropped because `max_flows` were open (new flows refused).
    pub udp_refused: u64,
    /// Connections and flows closed after `idle_timeout` without traffic.
    pub idle_closed: u64,
}

/// One impairment the relay made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Seconds since the relay started.
    pub t_s: f64,
    /// "tcp" or "udp".
    pub proto: &'static str,
    /// Connection or flow number, from 0 in order of arrival.
    pub flow: u64,
    /// Direction.
    pub dir: Dir,
    /// What was done: lost, policed, queue_dropped, duplicated, reordered,
    /// corrupted, reset.
    pub event: &'static str,
    /// UDP: the datagram's index in its flow and direction, from 0.
    pub index: Option<u64>,
    /// UDP: the netrig sequence number, when the datagram is netrig's.
    pub seq: Option<u64>,
    /// TCP: the data offset of the flipped byte or of the reset; UDP: the
    /// flipped byte's offset in the datagram.
    pub offset: Option<u64>,
}

const MAX_KEPT_EVENTS: usize = 1_000_000;

/// The header line of the `--log` CSV file.
pub const LOG_HEADER: &str = "time_s,proto,flow,dir,event,index,seq,offset";

/// Where events go: memory (when kept, up to [`MAX_KEPT_EVENTS`]) and the
/// log file (when asked for).
pub(super) struct EventLog {
    kept: Option<Mutex<Vec<Event>>>,
    file: Option<Mutex<BufWriter<Box<dyn Write + Send>>>>,
}

impl EventLog {
    /// Creates the log file, if any, with its header.
    pub(super) fn open(path: Option<&Path>, keep: bool) -> io::Result<EventLog> {
        let file = match path {
            Some(p) => {
                let mut w = BufWriter::new(crate::output::create(p)?);
                writeln!(w, "{LOG_HEADER}")?;
                Some(Mutex::new(w))
            }
            None => None,
        };
        Ok(EventLog {
            kept: keep.then(|| Mutex::new(Vec::new())),
            file,
        })
    }

    pub(super) fn record(&self, e: Event) {
        if let Some(file) = &self.file {
            let mut w = file.lock().unwrap_or_else(|p| p.into_inner());
            let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
            let _ = writeln!(
                w,
                "{:.6},{},{},{},{},{},{},{}",
                e.t_s,
                e.proto,
                e.flow,
                match e.dir {
                    Dir::Up => "up",
                    Dir::Down => "down",
                },
                e.event,
                opt(e.index),
                opt(e.seq),
                opt(e.offset)
            );
        }
        if let Some(kept) = &self.kept {
            let mut v = kept.lock().unwrap_or_else(|p| p.into_inner());
            if v.len() < MAX_KEPT_EVENTS {
                v.push(e);
            }
        }
    }

    /// The kept events (none unless kept).
    pub(super) fn events(&self) -> Vec<Event> {
        self.kept.as_ref().map_or_else(Vec::new, |k| {
            k.lock().unwrap_or_else(|p| p.into_inner()).clone()
        })
    }

    /// Writes out what the file's buffer holds.
    pub(super) fn flush(&self) {
        if let Some(file) = &self.file {
            let _ = file.lock().unwrap_or_else(|p| p.into_inner()).flush();
        }
    }
}
