//! How a connection ended, and how the two ends' accounts are combined into
//! one result both agree on.
//!
//! A connection is a success only if both ends say so *and* their byte counts
//! match each other: what one end sent, the other received. Anything else is
//! exactly one of network error, data error or cancelled.

use serde::Serialize;
use std::{fmt, io};

use crate::protocol::proto::{FinalReport, ProtoError, Verdict};

/// Why the peer's final report is missing: the detail of the network
/// error the connection then ends with.
#[derive(Debug, thiserror::Error)]
pub enum NoReport {
    /// This end's side of the connection failed first.
    #[error("connection failed")]
    Failed,
    /// The peer closed before the first byte of its report.
    #[error("connection closed by peer")]
    Closed,
    /// The peer closed part-way through its report.
    #[error("unexpected end of file")]
    Truncated,
    /// Reading the report failed.
    #[error("{0}")]
    Io(io::Error),
    /// Another message came where the report belongs.
    #[error("unexpected message instead of final report: {0}")]
    Unexpected(String),
    /// Pattern bytes came where the report belongs.
    #[error("peer sent extra data")]
    ExtraData,
    /// The report's frame did not decode.
    #[error("{0}")]
    Malformed(ProtoError),
}

/// The class of a connection's result, as counted in the status table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultKind {
    /// Both ends sent, received and verified everything.
    Success,
    /// A socket call failed, or the peer vanished.
    NetworkError,
    /// Too few or too many bytes, or a byte did not match the pattern.
    DataError,
    /// Stopped by a time limit or Ctrl-C before it finished.
    Cancelled,
}

impl ResultKind {
    /// Counts one finished connection of this kind in `c`.
    pub fn count_in(self, c: &crate::protocol::stats::Counters) {
        let n = match self {
            ResultKind::Success => &c.completed,
            ResultKind::NetworkError => &c.net_errors,
            ResultKind::DataError => &c.data_errors,
            ResultKind::Cancelled => &c.cancelled,
        };
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl fmt::Display for ResultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResultKind::Success => "Succeeded",
            ResultKind::NetworkError => "NetworkError",
            ResultKind::DataError => "DataError",
            ResultKind::Cancelled => "Cancelled",
        })
    }
}

/// The agreed result of one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnResult {
    /// Class of the result.
    pub kind: ResultKind,
    /// Human-readable detail (empty on success).
    pub detail: String,
}

impl ConnResult {
    fn new(kind: ResultKind, detail: impl Into<String>) -> Self {
        ConnResult {
            kind,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Ok => f.write_str("ok"),
            Verdict::TooFew { expected, received } => write!(
                f,
                "too few bytes: connection closed after {received} of {expected} bytes"
            ),
            Verdict::TooMany { expected } => {
                write!(
                    f,
                    "too many bytes: data continued past the expected {expected} bytes"
                )
            }
            Verdict::Corrupt { offset } => write!(f, "corrupt data at offset {offset}"),
            Verdict::NetworkError { detail } => f.write_str(detail),
            Verdict::Cancelled => f.write_str("cancelled"),
        }
    }
}

fn kind_of(v: &Verdict) -> ResultKind {
    match v {
        Verdict::Ok => ResultKind::Success,
        Verdict::TooFew { .. } | Verdict::TooMany { .. } | Verdict::Corrupt { .. } => {
            ResultKind::DataError
        }
        Verdict::NetworkError { .. } => ResultKind::NetworkError,
        Verdict::Cancelled => ResultKind::Cancelled,
    }
}

/// A network error on a connection of a run that was being stopped is the
/// stop's doing: the server cancels its connections when told to stop, and
/// one whose data phase had just ended loses its final report to that. Both
/// ends then count it cancelled. Data errors stay findings.
pub fn after_stop(result: ConnResult, stopped: bool) -> ConnResult {
    if stopped && result.kind == ResultKind::NetworkError {
        return ConnResult::new(ResultKind::Cancelled, "stopped before completion");
    }
    result
}

/// Combines this end's report with the peer's (or the reason there is none).
pub fn agree(mine: &FinalReport, peer: Result<&FinalReport, &NoReport>) -> ConnResult {
    let my_kind = kind_of(&mine.verdict);
    if my_kind == ResultKind::Cancelled || matches!(peer, Ok(p) if p.verdict == Verdict::Cancelled)
    {
        return ConnResult::new(ResultKind::Cancelled, "stopped before completion");
    }
    if my_kind != ResultKind::Success {
        return ConnResult::new(my_kind, mine.verdict.to_string());
    }
    let peer = match peer {
        Ok(p) => p,
        Err(e) => {
            return ConnResult::new(
                ResultKind::NetworkError,
                format!("no result from peer: {e}"),
            );
        }
    };
    let peer_kind = kind_of(&peer.verdict);
    if peer_kind != ResultKind::Success {
        return ConnResult::new(peer_kind, format!("peer: {}", peer.verdict));
    }
    if peer.received != mine.sent || peer.sent != mine.received {
        return ConnResult::new(
            ResultKind::DataError,
            format!(
                "byte counts disagree: sent {} / peer received {}, received {} / peer sent {}",
                mine.sent, peer.received, mine.received, peer.sent
            ),
        );
    }
    ConnResult::new(ResultKind::Success, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_counts_in_its_own_counter() {
        let c = crate::protocol::stats::Counters::default();
        for (k, n) in [
            (ResultKind::Success, 1),
            (ResultKind::NetworkError, 2),
            (ResultKind::DataError, 3),
            (ResultKind::Cancelled, 4),
        ] {
            for _ in 0..n {
                k.count_in(&c);
            }
        }
        let s = c.snapshot();
        assert_eq!(
            (s.completed, s.net_errors, s.data_errors, s.cancelled),
            (1, 2, 3, 4)
        );
    }

    #[test]
    fn only_network_errors_of_a_stopped_run_become_cancellations() {
        let net = || ConnResult::new(ResultKind::NetworkError, "no result from peer");
        assert_eq!(after_stop(net(), true).kind, ResultKind::Cancelled);
        assert_eq!(after_stop(net(), false).kind, ResultKind::NetworkError);
        for k in [
            ResultKind::Success,
            ResultKind::DataError,
            ResultKind::Cancelled,
        ] {
            assert_eq!(after_stop(ConnResult::new(k, "x"), true).kind, k);
        }
    }

    fn rep(sent: u64, received: u64, verdict: Verdict) -> FinalReport {
        FinalReport {
            sent,
            received,
            verdict,
            tcp_info: None,
        }
    }

    #[test]
    fn success_needs_both_and_matching_counts() {
        let me = rep(100, 0, Verdict::Ok);
        assert_eq!(
            agree(&me, Ok(&rep(0, 100, Verdict::Ok))).kind,
            ResultKind::Success
        );
        let r = agree(&me, Ok(&rep(0, 99, Verdict::Ok)));
        assert_eq!(r.kind, ResultKind::DataError);
        assert!(r.detail.contains("disagree"));
    }

    #[test]
    fn peer_data_error_wins_over_local_ok() {
        let r = agree(
            &rep(100, 0, Verdict::Ok),
            Ok(&rep(0, 100, Verdict::Corrupt { offset: 5 })),
        );
        assert_eq!(r.kind, ResultKind::DataError);
        assert_eq!(r.detail, "peer: corrupt data at offset 5");
    }

    #[test]
    fn local_errors_and_missing_peer() {
        let net = Verdict::NetworkError {
            detail: "Connection reset by peer (os error 104)".into(),
        };
        assert_eq!(
            agree(&rep(1, 0, net), Err(&NoReport::Failed)).kind,
            ResultKind::NetworkError
        );
        let r = agree(&rep(1, 0, Verdict::Ok), Err(&NoReport::Closed));
        assert_eq!(r.kind, ResultKind::NetworkError);
        let few = Verdict::TooFew {
            expected: 10,
            received: 3,
        };
        assert_eq!(
            agree(&rep(0, 3, few), Err(&NoReport::Failed)).kind,
            ResultKind::DataError
        );
        assert_eq!(
            agree(&rep(0, 3, Verdict::Cancelled), Err(&NoReport::Failed)).kind,
            ResultKind::Cancelled
        );
    }

    #[test]
    fn either_end_cancelled_is_cancelled_and_only_then() {
        let ok = rep(100, 0, Verdict::Ok);
        // The peer cancelled, this end finished: cancelled.
        let r = agree(&ok, Ok(&rep(0, 40, Verdict::Cancelled)));
        assert_eq!(r.kind, ResultKind::Cancelled);
        assert_eq!(r.detail, "stopped before completion");
        // This end cancelled, the peer finished: cancelled.
        let r = agree(
            &rep(40, 0, Verdict::Cancelled),
            Ok(&rep(0, 100, Verdict::Ok)),
        );
        assert_eq!(r.kind, ResultKind::Cancelled);
        // Neither: not cancelled.
        assert_eq!(
            agree(&ok, Ok(&rep(0, 100, Verdict::Ok))).kind,
            ResultKind::Success
        );
    }

    #[test]
    fn kinds_print_as_ctstraffic_names_them() {
        let names: Vec<String> = [
            ResultKind::Success,
            ResultKind::NetworkError,
            ResultKind::DataError,
            ResultKind::Cancelled,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            names,
            ["Succeeded", "NetworkError", "DataError", "Cancelled"]
        );
        for (v, text) in [
            (Verdict::Ok, "ok"),
            (
                Verdict::TooFew {
                    expected: 10,
                    received: 3,
                },
                "too few bytes: connection closed after 3 of 10 bytes",
            ),
            (
                Verdict::TooMany { expected: 10 },
                "too many bytes: data continued past the expected 10 bytes",
            ),
            (Verdict::Cancelled, "cancelled"),
        ] {
            assert_eq!(v.to_string(), text);
        }
    }
}
