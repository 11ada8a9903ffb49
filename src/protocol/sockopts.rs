//! The socket and TCP options a user asks for (iperf3's `-w`, `-M`, `-C`,
//! `-S`/`--dscp`, `--fq-rate`, `--no-delay`; ctsTraffic's `-KeepAliveValue`
//! and `-shutdown`): what they are, how they are spelled on the command line,
//! and which combinations make sense. Wire and config types, free of I/O;
//! `net::sockopt` applies them to sockets and reads back what the kernel
//! granted. A TCP test sends them to the server, which applies them to its
//! end of every data connection, as iperf3 does with its window, MSS and
//! congestion algorithm.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// How a client ends a connection once its verdict is agreed (ctsTraffic
/// `-shutdown`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShutdownMode {
    /// FIN: both ends close in order.
    #[default]
    Graceful,
    /// RST: the client closes with SO_LINGER 0, as ctsTraffic's "rude".
    Rude,
}

impl crate::protocol::names::Named for ShutdownMode {
    const NAMES: &'static [(Self, &'static str, &'static str)] = &[
        (
            ShutdownMode::Graceful,
            "graceful",
            "FIN: both ends close in order",
        ),
        (
            ShutdownMode::Rude,
            "rude",
            "RST: SO_LINGER 0, as ctsTraffic's rude",
        ),
    ];
}

/// The options for one test's sockets. Absent means "leave the kernel's
/// default".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SockOpts {
    /// SO_SNDBUF and SO_RCVBUF, bytes asked for (the kernel doubles it and
    /// caps it at `net.core.[rw]mem_max` unless root forces it).
    pub window: Option<u32>,
    /// TCP_MAXSEG, bytes: clamps the segment size this end advertises and
    /// sends.
    pub mss: Option<u32>,
    /// TCP_CONGESTION: the congestion control algorithm.
    pub congestion: Option<String>,
    /// TCP_NODELAY: Nagle off.
    pub no_delay: bool,
    /// SO_KEEPALIVE with this idle time (TCP_KEEPIDLE), ms.
    pub keepalive_ms: Option<u64>,
    /// How the client ends each connection.
    pub shutdown: ShutdownMode,
    /// IP_MTU_DISCOVER = IP_PMTUDISC_DO (IPV6_MTU_DISCOVER for IPv6): DF set,
    /// never fragmented by this host.
    pub dont_fragment: bool,
    /// SO_MAX_PACING_RATE, bit/s (the fq qdisc or TCP's internal pacing
    /// honours it).
    pub fq_rate_bps: Option<u64>,
    /// IP_TOS / IPV6_TCLASS byte: DSCP in the upper six bits, ECN in the
    /// lower two.
    pub tos: Option<u8>,
    /// TCP_NOTSENT_LOWAT, bytes: the most not-yet-sent data a socket
    /// queues before a write would block (on loopback, data copied closer
    /// to its sending stays in cache for the receiver). Sent only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notsent_lowat: Option<u32>,
    /// UDP: no segmentation offload (`UDP_SEGMENT` on the sender,
    /// `UDP_GRO` on the receiver); every datagram crosses into and out of
    /// the kernel on its own. Sent only when set, so older peers read the
    /// options as before.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_offload: bool,
}

/// Why an option value is not usable.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SockOptError {
    /// A DSCP name or number that is not one.
    #[error("DSCP {0:?}: give a number 0-63 or a name (EF, CS0-CS7, AF11-AF43, VA, LE)")]
    Dscp(String),
    /// A TOS value outside a byte.
    #[error("TOS {0:?}: give a number 0-255 (0x.. for hex)")]
    Tos(String),
    /// An MSS TCP cannot use.
    #[error("--mss {0}: TCP accepts 88 to 65535 bytes")]
    Mss(u32),
    /// A window of nothing.
    #[error("--window must be greater than zero")]
    Window,
    /// A congestion control name that cannot be a kernel module's name.
    #[error("--congestion {0:?}: not a congestion control name (letters, digits, '_', up to 15)")]
    CongestionName(String),
}

/// Linux's smallest TCP_MAXSEG (TCP_MIN_MSS) and the largest a 16-bit
/// option carries.
const MSS_RANGE: std::ops::RangeInclusive<u32> = 88..=65535;

/// Largest congestion control name (TCP_CA_NAME_MAX is 16 with the NUL).
const CA_NAME_MAX: usize = 15;

/// What the kernel granted on one socket (reported by each end: the
/// client for its own sockets, the server in its session summary).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    /// SO_SNDBUF, bytes (the kernel's doubled value).
    pub sndbuf: Option<u64>,
    /// SO_RCVBUF, bytes.
    pub rcvbuf: Option<u64>,
    /// TCP_MAXSEG: the segment size in use, bytes.
    pub mss: Option<u32>,
    /// TCP_CONGESTION in use.
    pub congestion: Option<String>,
    /// IP_TOS / IPV6_TCLASS in use.
    pub tos: Option<u8>,
}

impl SockOpts {
    /// Checks values the kernel would reject or silently change.
    pub fn validate(&self) -> Result<(), SockOptError> {
        if let Some(m) = self.mss
            && !MSS_RANGE.contains(&m)
        {
            return Err(SockOptError::Mss(m));
        }
        if self.window == Some(0) {
            return Err(SockOptError::Window);
        }
        if let Some(c) = &self.congestion
            && (c.is_empty()
                || c.len() > CA_NAME_MAX
                || !c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_'))
        {
            return Err(SockOptError::CongestionName(c.clone()));
        }
        Ok(())
    }

    /// The options the server applies to its end of a data connection: the
    /// ones that describe the path's use (window, MSS, congestion, marking,
    /// pacing), not how the client closes or probes its own sockets.
    pub fn for_server(&self) -> SockOpts {
        SockOpts {
            keepalive_ms: None,
            shutdown: ShutdownMode::Graceful,
            ..self.clone()
        }
    }

    /// Whether nothing is asked for.
    pub fn is_default(&self) -> bool {
        *self == SockOpts::default()
    }
}

/// DSCP names (RFC 2474 class selectors, RFC 2597 assured forwarding,
/// RFC 3246 expedited forwarding, RFC 5865 voice-admit, RFC 8622 lower
/// effort) and their code points.
fn dscp_name(name: &str) -> Option<u8> {
    let n = name.to_ascii_uppercase();
    match n.as_str() {
        "EF" => return Some(46),
        "VA" => return Some(44),
        "LE" => return Some(1),
        "DF" | "BE" => return Some(0),
        _ => {}
    }
    let digit = |c: u8| c.is_ascii_digit().then(|| c - b'0');
    match n.as_bytes() {
        [b'C', b'S', d] => digit(*d).filter(|&x| x <= 7).map(|x| x << 3),
        [b'A', b'F', c, p] => {
            let (c, p) = (digit(*c)?, digit(*p)?);
            ((1..=4).contains(&c) && (1..=3).contains(&p)).then_some((c << 3) | (p << 1))
        }
        _ => None,
    }
}

/// The name of a DSCP code point (0–63), where it has one.
pub fn dscp_label(code: u8) -> Option<String> {
    match code {
        46 => Some("EF".into()),
        44 => Some("VA".into()),
        1 => Some("LE".into()),
        c if c < 64 && c % 8 == 0 => Some(format!("CS{}", c >> 3)),
        c if (1..=4).contains(&(c >> 3)) && (1..=3).contains(&((c & 7) >> 1)) && c & 1 == 0 => {
            Some(format!("AF{}{}", c >> 3, (c & 7) >> 1))
        }
        _ => None,
    }
}

/// A number in decimal, or hex with `0x`.
fn number(s: &str) -> Option<u64> {
    let t = s.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

/// `--dscp`: a name (`EF`, `AF41`, `CS1`) or a number 0–63; the TOS byte
/// it makes (DSCP shifted over the two ECN bits).
pub fn parse_dscp(s: &str) -> Result<u8, SockOptError> {
    let code = match number(s) {
        Some(n) if n <= 63 => n as u8,
        Some(_) => return Err(SockOptError::Dscp(s.into())),
        None => dscp_name(s.trim()).ok_or_else(|| SockOptError::Dscp(s.into()))?,
    };
    Ok(code << 2)
}

/// `--tos`: the whole byte, as iperf3's `-S` (decimal or `0x` hex).
pub fn parse_tos(s: &str) -> Result<u8, SockOptError> {
    number(s)
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| SockOptError::Tos(s.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dscp_names_and_numbers_make_the_tos_byte() {
        for (s, tos) in [
            ("EF", 0xb8),
            ("ef", 0xb8),
            ("AF41", 0x88),
            ("AF11", 0x28),
            ("AF43", 0x98),
            ("CS1", 0x20),
            ("CS7", 0xe0),
            ("CS0", 0),
            ("VA", 0xb0),
            ("LE", 0x04),
            ("BE", 0),
            ("46", 0xb8),
            ("63", 0xfc),
            ("0x2e", 0xb8),
        ] {
            assert_eq!(parse_dscp(s), Ok(tos), "{s}");
        }
        for bad in ["64", "AF44", "AF51", "AF01", "CS8", "XX", "", "-1", "AF4"] {
            assert!(parse_dscp(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dscp_labels_name_what_parse_dscp_reads() {
        for name in [
            "EF", "VA", "LE", "CS0", "CS1", "CS7", "AF11", "AF23", "AF41", "AF43",
        ] {
            let code = parse_dscp(name).unwrap() >> 2;
            assert_eq!(dscp_label(code).as_deref(), Some(name));
        }
        for unnamed in [2, 3, 9, 15, 33, 39, 45, 47, 63, 64] {
            assert_eq!(dscp_label(unnamed), None, "{unnamed}");
        }
    }

    #[test]
    fn tos_is_a_byte_in_decimal_or_hex() {
        assert_eq!(parse_tos("184"), Ok(184));
        assert_eq!(parse_tos("0xb8"), Ok(184));
        assert_eq!(parse_tos("255"), Ok(255));
        assert!(parse_tos("256").is_err());
        assert!(parse_tos("x").is_err());
    }

    #[test]
    fn validation_names_the_bad_value() {
        let ok = SockOpts {
            mss: Some(88),
            congestion: Some("bbr".into()),
            window: Some(1),
            ..SockOpts::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        let with = |f: fn(&mut SockOpts)| {
            let mut o = SockOpts::default();
            f(&mut o);
            o.validate()
        };
        assert_eq!(with(|o| o.mss = Some(87)), Err(SockOptError::Mss(87)));
        assert_eq!(with(|o| o.mss = Some(65536)), Err(SockOptError::Mss(65536)));
        assert_eq!(with(|o| o.mss = Some(65535)), Ok(()));
        assert_eq!(with(|o| o.window = Some(0)), Err(SockOptError::Window));
        for bad in ["", "a b", "sixteen_letters_", "cubic;"] {
            let o = SockOpts {
                congestion: Some(bad.into()),
                ..SockOpts::default()
            };
            assert!(o.validate().is_err(), "{bad}");
        }
        let o = SockOpts {
            congestion: Some("fifteen_letters".into()),
            ..SockOpts::default()
        };
        assert_eq!(o.validate(), Ok(()));
    }

    #[test]
    fn no_offload_reaches_the_server_and_is_sent_only_when_set() {
        let off = SockOpts {
            no_offload: true,
            ..SockOpts::default()
        };
        assert!(off.for_server().no_offload);
        let wire = serde_json::to_string(&off).unwrap();
        assert!(wire.contains("\"no_offload\":true"), "{wire}");
        let back: SockOpts = serde_json::from_str(&wire).unwrap();
        assert_eq!(back, off);
        let plain = serde_json::to_string(&SockOpts::default()).unwrap();
        assert!(!plain.contains("no_offload"), "{plain}");
    }

    #[test]
    fn the_server_gets_the_path_options_only() {
        let o = SockOpts {
            window: Some(1 << 20),
            tos: Some(0xb8),
            keepalive_ms: Some(1000),
            shutdown: ShutdownMode::Rude,
            ..SockOpts::default()
        };
        let s = o.for_server();
        assert_eq!((s.window, s.tos), (Some(1 << 20), Some(0xb8)));
        assert_eq!((s.keepalive_ms, s.shutdown), (None, ShutdownMode::Graceful));
        assert!(SockOpts::default().is_default());
        assert!(!o.is_default());
    }
}
