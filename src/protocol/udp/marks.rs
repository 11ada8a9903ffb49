//! What the path did to the sender's IP marking: the receiver counts the
//! TOS / traffic class byte of every counted datagram (IP_RECVTOS,
//! IPV6_RECVTCLASS) and compares it with what the sender set, so a DSCP
//! rewritten on the way (remarking, bleaching) and ECN congestion marks are
//! counted, not guessed. RFC 3168 §5 names the ECN codepoints; RFC 2474 puts
//! the DSCP in the byte's upper six bits.

use serde::{Deserialize, Serialize};

/// The ECN field's codepoints (RFC 3168 §5), the TOS byte's lower two bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ecn {
    /// 00: not ECN-capable.
    NotEct,
    /// 01: ECN-capable, ECT(1) (L4S uses it, RFC 9331).
    Ect1,
    /// 10: ECN-capable, ECT(0).
    Ect0,
    /// 11: congestion experienced.
    Ce,
}

impl crate::protocol::names::Named for Ecn {
    const NAMES: &'static [(Self, &'static str, &'static str)] = &[
        (Ecn::NotEct, "not-ect", "00: not ECN-capable"),
        (Ecn::Ect1, "ect1", "01: ECT(1), as L4S uses it"),
        (Ecn::Ect0, "ect0", "10: ECT(0)"),
        (Ecn::Ce, "ce", "11: congestion experienced"),
    ];
}

impl Ecn {
    /// The codepoint in a TOS byte.
    pub fn of(tos: u8) -> Ecn {
        match tos & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two bits.
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }

    /// As RFC 3168 writes it.
    pub fn name(self) -> &'static str {
        match self {
            Ecn::NotEct => "Not-ECT",
            Ecn::Ect1 => "ECT(1)",
            Ecn::Ect0 => "ECT(0)",
            Ecn::Ce => "CE",
        }
    }
}

/// The TOS byte with `ecn` in its ECN bits.
pub fn with_ecn(tos: u8, ecn: Ecn) -> u8 {
    (tos & !3) | ecn.bits()
}

/// How many counted datagrams arrived with each TOS byte.
#[derive(Debug, Clone)]
pub struct TosCounts([u64; 256]);

impl Default for TosCounts {
    fn default() -> Self {
        TosCounts([0; 256])
    }
}

/// Datagrams that arrived with one TOS byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TosSeen {
    /// The byte.
    pub tos: u8,
    /// Its DSCP, 0–63.
    pub dscp: u8,
    /// Its ECN codepoint.
    pub ecn: Ecn,
    /// How many datagrams carried it.
    pub datagrams: u64,
}

/// The receiver's account of the marking, against what the sender set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marking {
    /// The TOS byte the sender set.
    pub sent_tos: u8,
    /// Every byte seen, most frequent first.
    pub seen: Vec<TosSeen>,
    /// Datagrams whose DSCP differs from the one sent (remarked or bleached
    /// on the path).
    pub dscp_changed: u64,
    /// Datagrams marked CE (congestion experienced) on the way; counted
    /// only when the sender set ECT, since a router may mark only those.
    pub ecn_ce: u64,
    /// Datagrams sent ECN-capable that arrived Not-ECT (ECN bleached).
    pub ecn_cleared: u64,
    /// Datagrams whose ECN field changed in any other way (ECT(0)/ECT(1)
    /// swapped, or ECT set on a Not-ECT datagram).
    pub ecn_other: u64,
}

impl Marking {
    /// Nothing was marked and nothing arrived marked: not worth a line.
    pub fn is_plain(&self) -> bool {
        self.sent_tos == 0 && self.seen.iter().all(|s| s.tos == 0)
    }
}

impl TosCounts {
    /// One datagram with byte `tos`.
    pub fn on(&mut self, tos: u8) {
        self.0[usize::from(tos)] += 1;
    }

    /// The account against `sent`; `None` when no byte was seen (the
    /// kernel did not report them).
    pub fn marking(&self, sent: u8) -> Option<Marking> {
        let mut seen: Vec<TosSeen> = (0..=255u8)
            .zip(self.0.iter())
            .filter(|&(_, &n)| n > 0)
            .map(|(tos, &datagrams)| TosSeen {
                tos,
                dscp: tos >> 2,
                ecn: Ecn::of(tos),
                datagrams,
            })
            .collect();
        if seen.is_empty() {
            return None;
        }
        seen.sort_by(|a, b| b.datagrams.cmp(&a.datagrams).then(a.tos.cmp(&b.tos)));
        let mut m = Marking {
            sent_tos: sent,
            seen: Vec::new(),
            dscp_changed: 0,
            ecn_ce: 0,
            ecn_cleared: 0,
            ecn_other: 0,
        };
        let sent_ecn = Ecn::of(sent);
        for s in &seen {
            if s.dscp != sent >> 2 {
                m.dscp_changed += s.datagrams;
            }
            match (sent_ecn, s.ecn) {
                (a, b) if a == b => {}
                (Ecn::Ect0 | Ecn::Ect1, Ecn::Ce) => m.ecn_ce += s.datagrams,
                (Ecn::Ect0 | Ecn::Ect1 | Ecn::Ce, Ecn::NotEct) => m.ecn_cleared += s.datagrams,
                _ => m.ecn_other += s.datagrams,
            }
        }
        m.seen = seen;
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(bytes: &[(u8, u64)]) -> TosCounts {
        let mut c = TosCounts::default();
        for &(tos, n) in bytes {
            for _ in 0..n {
                c.on(tos);
            }
        }
        c
    }

    #[test]
    fn nothing_seen_is_no_account() {
        assert_eq!(TosCounts::default().marking(0xb8), None);
    }

    #[test]
    fn plain_means_unmarked_both_ways() {
        assert!(counts(&[(0, 3)]).marking(0).unwrap().is_plain());
        assert!(!counts(&[(0, 3)]).marking(0x04).unwrap().is_plain());
        assert!(!counts(&[(0, 2), (0x01, 1)]).marking(0).unwrap().is_plain());
    }

    #[test]
    fn an_untouched_path_changes_nothing() {
        let m = counts(&[(0xba, 5)]).marking(0xba).unwrap();
        assert_eq!(
            m.seen,
            vec![TosSeen {
                tos: 0xba,
                dscp: 46,
                ecn: Ecn::Ect0,
                datagrams: 5
            }]
        );
        assert_eq!(
            (m.dscp_changed, m.ecn_ce, m.ecn_cleared, m.ecn_other),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn remarking_congestion_and_bleaching_are_told_apart() {
        // Sent EF + ECT(0): 3 arrive as sent, 2 CE-marked, 4 remarked to
        // CS1 keeping ECT(0), 1 bleached to 0.
        let m = counts(&[(0xba, 3), (0xbb, 2), (0x22, 4), (0x00, 1)])
            .marking(0xba)
            .unwrap();
        assert_eq!(m.dscp_changed, 5);
        assert_eq!(m.ecn_ce, 2);
        assert_eq!(m.ecn_cleared, 1);
        assert_eq!(m.ecn_other, 0);
        // Most frequent first, ties by byte.
        let order: Vec<u8> = m.seen.iter().map(|s| s.tos).collect();
        assert_eq!(order, vec![0x22, 0xba, 0xbb, 0x00]);
        assert_eq!(m.seen.iter().map(|s| s.datagrams).sum::<u64>(), 10);
    }

    #[test]
    fn ecn_changes_a_router_may_not_make_are_other() {
        // Not-ECT sent: CE or ECT arriving is not congestion, it is a
        // rewrite; ECT(1) for ECT(0) likewise.
        let m = counts(&[(0x03, 1), (0x01, 2)]).marking(0x00).unwrap();
        assert_eq!((m.ecn_ce, m.ecn_cleared, m.ecn_other), (0, 0, 3));
        let m = counts(&[(0x01, 2), (0x00, 1)]).marking(0x02).unwrap();
        assert_eq!((m.ecn_ce, m.ecn_cleared, m.ecn_other), (0, 1, 2));
        let m = counts(&[(0x03, 2)]).marking(0x01).unwrap();
        assert_eq!((m.ecn_ce, m.ecn_cleared, m.ecn_other), (2, 0, 0));
        // CE sent and CE arriving is no change; CE sent, Not-ECT arriving
        // is a clearing.
        let m = counts(&[(0x03, 2), (0x00, 1)]).marking(0x03).unwrap();
        assert_eq!((m.ecn_ce, m.ecn_cleared, m.ecn_other), (0, 1, 0));
    }

    #[test]
    fn ecn_codepoints_round_trip() {
        for e in [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
            assert_eq!(Ecn::of(with_ecn(0xb8, e)), e);
            assert_eq!(with_ecn(0xb8, e) >> 2, 46);
        }
        assert_eq!(with_ecn(0xbb, Ecn::NotEct), 0xb8);
        assert_eq!(Ecn::Ce.name(), "CE");
    }
}
