//! The JSON object of a [`FinalReport`]: the verdict's fields beside the
//! report's own (`{"sent":1,"received":2,"verdict":"too_few","expected":10,
//! "got":2}`). serde's flattening would write the same object but decodes
//! it through a buffered copy of every field first, which made the report
//! the dearest of the messages each short connection exchanges; this flat
//! mirror reads and writes it in one pass.
//!
//! Protocol layer: no sockets.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{FinalReport, TcpInfoSummary, Verdict};

/// A verdict that lacks a field its kind needs.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("a {kind} verdict needs {field}")]
pub(super) struct MissingField {
    kind: &'static str,
    field: &'static str,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Ok,
    TooFew,
    TooMany,
    Corrupt,
    NetworkError,
    Cancelled,
}

/// [`FinalReport`] field by field, as on the wire.
#[derive(Serialize, Deserialize)]
pub(super) struct FinalWire {
    sent: u64,
    received: u64,
    verdict: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expected: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    got: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tcp_info: Option<TcpInfoSummary>,
}

impl From<FinalReport> for FinalWire {
    fn from(r: FinalReport) -> FinalWire {
        let mut w = FinalWire {
            sent: r.sent,
            received: r.received,
            verdict: Kind::Ok,
            expected: None,
            got: None,
            offset: None,
            detail: None,
            tcp_info: r.tcp_info,
        };
        w.verdict = match r.verdict {
            Verdict::Ok => Kind::Ok,
            Verdict::TooFew { expected, received } => {
                (w.expected, w.got) = (Some(expected), Some(received));
                Kind::TooFew
            }
            Verdict::TooMany { expected } => {
                w.expected = Some(expected);
                Kind::TooMany
            }
            Verdict::Corrupt { offset } => {
                w.offset = Some(offset);
                Kind::Corrupt
            }
            Verdict::NetworkError { detail } => {
                w.detail = Some(detail);
                Kind::NetworkError
            }
            Verdict::Cancelled => Kind::Cancelled,
        };
        w
    }
}

impl TryFrom<FinalWire> for FinalReport {
    type Error = MissingField;

    fn try_from(w: FinalWire) -> Result<FinalReport, MissingField> {
        let need = |v: Option<u64>, kind, field| v.ok_or(MissingField { kind, field });
        let verdict = match w.verdict {
            Kind::Ok => Verdict::Ok,
            Kind::TooFew => Verdict::TooFew {
                expected: need(w.expected, "too_few", "expected")?,
                received: need(w.got, "too_few", "got")?,
            },
            Kind::TooMany => Verdict::TooMany {
                expected: need(w.expected, "too_many", "expected")?,
            },
            Kind::Corrupt => Verdict::Corrupt {
                offset: need(w.offset, "corrupt", "offset")?,
            },
            Kind::NetworkError => Verdict::NetworkError {
                detail: w.detail.ok_or(MissingField {
                    kind: "network_error",
                    field: "detail",
                })?,
            },
            Kind::Cancelled => Verdict::Cancelled,
        };
        Ok(FinalReport {
            sent: w.sent,
            received: w.received,
            verdict,
            tcp_info: w.tcp_info,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(verdict: Verdict) -> FinalReport {
        FinalReport {
            sent: 1,
            received: 2,
            verdict,
            tcp_info: None,
        }
    }

    #[test]
    fn the_object_has_the_verdicts_fields_beside_the_reports() {
        let cases = [
            (Verdict::Ok, r#""verdict":"ok""#),
            (
                Verdict::TooFew {
                    expected: 10,
                    received: 3,
                },
                r#""verdict":"too_few","expected":10,"got":3"#,
            ),
            (
                Verdict::TooMany { expected: 9 },
                r#""verdict":"too_many","expected":9"#,
            ),
            (
                Verdict::Corrupt { offset: 77 },
                r#""verdict":"corrupt","offset":77"#,
            ),
            (
                Verdict::NetworkError {
                    detail: "reset".into(),
                },
                r#""verdict":"network_error","detail":"reset""#,
            ),
            (Verdict::Cancelled, r#""verdict":"cancelled""#),
        ];
        for (v, fields) in cases {
            let r = report(v);
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!(r#"{{"sent":1,"received":2,{fields}}}"#));
            assert_eq!(serde_json::from_str::<FinalReport>(&json).unwrap(), r);
        }
        let mut r = report(Verdict::Ok);
        r.tcp_info = Some(TcpInfoSummary {
            retransmits: 4,
            ..Default::default()
        });
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains(r#""verdict":"ok","tcp_info":{"retransmits":4,"#));
        assert_eq!(serde_json::from_str::<FinalReport>(&json).unwrap(), r);
    }

    #[test]
    fn a_verdict_without_its_fields_is_refused_and_extra_fields_are_ignored() {
        for (json, missing) in [
            (
                r#""verdict":"too_few","got":3"#,
                "a too_few verdict needs expected",
            ),
            (
                r#""verdict":"too_few","expected":3"#,
                "a too_few verdict needs got",
            ),
            (
                r#""verdict":"too_many""#,
                "a too_many verdict needs expected",
            ),
            (r#""verdict":"corrupt""#, "a corrupt verdict needs offset"),
            (
                r#""verdict":"network_error""#,
                "a network_error verdict needs detail",
            ),
        ] {
            let json = format!(r#"{{"sent":1,"received":2,{json}}}"#);
            let e = serde_json::from_str::<FinalReport>(&json).unwrap_err();
            assert!(e.to_string().contains(missing), "{json}: {e}");
        }
        let json = r#"{"sent":1,"received":2,"verdict":"ok","offset":5,"later":true}"#;
        assert_eq!(
            serde_json::from_str::<FinalReport>(json).unwrap(),
            report(Verdict::Ok)
        );
        let bad = r#"{"sent":1,"received":2,"verdict":"fine"}"#;
        assert!(serde_json::from_str::<FinalReport>(bad).is_err());
    }
}
