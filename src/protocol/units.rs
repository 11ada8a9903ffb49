//! Human units for sizes, rates and durations, as typed on the command line.
//!
//! Sizes are binary (`64K` = 65,536 bytes) as in iperf and ctsTraffic; rates are
//! decimal bits per second (`10Gbit` = 10,000,000,000 bit/s) as on every link
//! datasheet. Durations take `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`; a bare number
//! is seconds. All parsers are pure and never panic on any input.

use std::time::Duration;
use thiserror::Error;

/// Why a human-unit value could not be parsed.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
pub enum UnitError {
    /// The value was empty.
    #[error("empty value")]
    Empty,
    /// The numeric part did not parse.
    #[error("'{0}' does not start with a number")]
    NotANumber(String),
    /// The suffix is not a known unit.
    #[error("unknown unit '{unit}' in '{input}' (expected {expected})")]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The suffix that was not recognised.
        unit: String,
        /// The units that would have been accepted.
        expected: &'static str,
    },
    /// Negative, not finite, or too large for the target type.
    #[error("'{0}' is out of range")]
    OutOfRange(String),
}

/// Splits "1.5Gbit" into (1.5, "Gbit").
fn split_number(input: &str) -> Result<(f64, &str), UnitError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(UnitError::Empty);
    }
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .map_or(s.len(), |(i, _)| i);
    let digits: String = s[..end].chars().filter(|&c| c != '_').collect();
    let value: f64 = digits
        .parse()
        .map_err(|_| UnitError::NotANumber(input.to_string()))?;
    if !value.is_finite() || value < 0.0 {
        return Err(UnitError::OutOfRange(input.to_string()));
    }
    Ok((value, s[end..].trim()))
}

fn to_u64(value: f64, input: &str) -> Result<u64, UnitError> {
    // 2^64 is not representable exactly; anything at or above it is out of range.
    if value >= 18_446_744_073_709_551_616.0 {
        return Err(UnitError::OutOfRange(input.to_string()));
    }
    Ok(value.round() as u64)
}

/// Parses a byte count: `1000`, `64K`, `1.5M`, `1G`, `2T` (binary multiples;
/// `K`, `KB`, `KiB` and lower case are all accepted).
pub fn parse_size(input: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(input)?;
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(UnitError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
                expected: "B, K, M, G or T",
            });
        }
    };
    to_u64(value * mult, input)
}

/// Parses a rate in bits per second: `100M`, `1700Mbit`, `10Gbps`, `2.5G`.
/// A suffix with a capital `B` and `/s` or `ps` (`100MB/s`, `100MBps`) means bytes.
pub fn parse_rate(input: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(input)?;
    let (prefix, bytes) = if let Some(p) = unit
        .strip_suffix("B/s")
        .or_else(|| unit.strip_suffix("Bps"))
    {
        (p, true)
    } else {
        let lower = unit.to_ascii_lowercase();
        let p = ["bit/s", "bits/s", "bps", "bit", "bits", "b/s"]
            .iter()
            .find_map(|s| lower.strip_suffix(s))
            .map(str::len)
            .map_or(unit, |n| &unit[..n]);
        (p, false)
    };
    let mult: f64 = match prefix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "m" | "M" => 1e6,
        "g" | "G" => 1e9,
        "t" | "T" => 1e12,
        _ => {
            return Err(UnitError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
                expected: "bit/s with k, M, G or T (e.g. 100Mbit, 10G, 50MB/s)",
            });
        }
    };
    to_u64(value * mult * if bytes { 8.0 } else { 1.0 }, input)
}

/// Parses a duration: `500ms`, `30s`, `5us`, `2m`, `1h`; a bare number is seconds.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let (value, unit) = split_number(input)?;
    let secs: f64 = match unit {
        "" | "s" | "sec" | "secs" => value,
        "ns" => value / 1e9,
        "us" | "µs" => value / 1e6,
        "ms" => value / 1e3,
        "m" | "min" | "mins" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(UnitError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
                expected: "ns, us, ms, s, m or h",
            });
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| UnitError::OutOfRange(input.to_string()))
}

/// Parses a probability: `1%`, `0.5 %`, or a fraction `0.01`.
pub fn parse_probability(input: &str) -> Result<f64, UnitError> {
    let (value, unit) = split_number(input)?;
    let p = match unit {
        "%" => value / 100.0,
        "" => value,
        _ => {
            return Err(UnitError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
                expected: "% or a fraction",
            });
        }
    };
    if p > 1.0 {
        return Err(UnitError::OutOfRange(input.to_string()));
    }
    Ok(p)
}

/// Formats a bit rate for people: `9.87 Gbit/s`. The unit is the one the
/// rounded figure fits: 999,999 bit/s is `1.00 Mbit/s`, not `1000.00 kbit/s`.
pub fn format_bits_per_sec(bits: f64) -> String {
    const UNITS: [(f64, &str); 5] = [
        (1e12, "Tbit/s"),
        (1e9, "Gbit/s"),
        (1e6, "Mbit/s"),
        (1e3, "kbit/s"),
        (1.0, "bit/s"),
    ];
    let mut i = UNITS.iter().position(|u| bits >= u.0).unwrap_or(4);
    let text = |i: usize| format!("{:.2}", bits / UNITS[i].0);
    if i > 0 && text(i).len() > "999.99".len() {
        i -= 1;
    }
    format!("{} {}", text(i), UNITS[i].1)
}

/// Formats a byte count for people: `1.00 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

/// `n` and a noun, plural unless `n` is one: "1 connection", "8 connections".
pub fn count_of(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Serde helper: an optional duration as integer milliseconds.
pub mod duration_ms {
    use serde::Serializer;
    use std::time::Duration;

    /// Serializes `Some(d)` as milliseconds, `None` as null.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_millis() as u64),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_a_plural_unless_one() {
        assert_eq!(count_of(1, "connection"), "1 connection");
        assert_eq!(count_of(0, "connection"), "0 connections");
        assert_eq!(count_of(8, "connection"), "8 connections");
    }
    use proptest::prelude::*;

    #[test]
    fn probabilities() {
        assert_eq!(parse_probability("1%"), Ok(0.01));
        assert_eq!(parse_probability("0.25"), Ok(0.25));
        assert_eq!(parse_probability("100 %"), Ok(1.0));
        assert!(parse_probability("101%").is_err());
        assert!(parse_probability("2").is_err());
        assert!(parse_probability("5x").is_err());
        assert!(parse_probability("-1%").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K"), Ok(65_536));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1.5M"), Ok(1_572_864));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size(" 2 mb "), Ok(2 << 20));
        assert!(matches!(
            parse_size("3X"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert_eq!(parse_size(""), Err(UnitError::Empty));
        assert!(matches!(parse_size("K"), Err(UnitError::NotANumber(_))));
        assert!(matches!(
            parse_size("99999999T"),
            Err(UnitError::OutOfRange(_))
        ));
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10Gbit"), Ok(10_000_000_000));
        assert_eq!(parse_rate("1700Mbit"), Ok(1_700_000_000));
        assert_eq!(parse_rate("100M"), Ok(100_000_000));
        assert_eq!(parse_rate("2.5Gbps"), Ok(2_500_000_000));
        assert_eq!(parse_rate("50MB/s"), Ok(400_000_000));
        assert_eq!(parse_rate("64kbit/s"), Ok(64_000));
        assert_eq!(parse_rate("9600"), Ok(9600));
        assert!(parse_rate("10Xbit").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5us"), Ok(Duration::from_micros(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("5 fortnights").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bits_per_sec(9.87e9), "9.87 Gbit/s");
        assert_eq!(format_bytes(1 << 30), "1.00 GiB");
        assert_eq!(format_bytes(12), "12 B");
    }

    #[test]
    fn every_unit_and_its_spellings() {
        for (text, bytes) in [
            ("7", 7),
            ("7b", 7),
            ("7B", 7),
            ("1k", 1 << 10),
            ("1KB", 1 << 10),
            ("1m", 1 << 20),
            ("1MiB", 1 << 20),
            ("1g", 1 << 30),
            ("1GB", 1 << 30),
            ("1GiB", 1 << 30),
            ("1t", 1 << 40),
            ("1TB", 1 << 40),
            ("1TiB", 1 << 40),
            ("1_000", 1000),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for (text, bps) in [
            ("1k", 1_000),
            ("1K", 1_000),
            ("1m", 1_000_000),
            ("1g", 1_000_000_000),
            ("1t", 1_000_000_000_000),
            ("1T", 1_000_000_000_000),
            ("1Tbit", 1_000_000_000_000),
            ("1Mbits", 1_000_000),
            ("1Mbits/s", 1_000_000),
            ("1Mb/s", 1_000_000),
            ("1MBps", 8_000_000),
            ("1kB/s", 8_000),
            ("1bps", 1),
        ] {
            assert_eq!(parse_rate(text), Ok(bps), "{text}");
        }
        for (text, d) in [
            ("250ns", Duration::from_nanos(250)),
            ("3µs", Duration::from_micros(3)),
            ("2sec", Duration::from_secs(2)),
            ("2secs", Duration::from_secs(2)),
            ("1min", Duration::from_secs(60)),
            ("2mins", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("0.5h", Duration::from_secs(1800)),
        ] {
            assert_eq!(parse_duration(text), Ok(d), "{text}");
        }
        assert!(matches!(
            parse_duration("1e400"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999h"),
            Err(UnitError::OutOfRange(_))
        ));
    }

    #[test]
    fn sizes_at_the_top_of_u64() {
        // 2^64 − 2^11 is the largest f64 below 2^64; 2^64 itself is out of range.
        assert_eq!(parse_size("18446744073709549568"), Ok(u64::MAX - 2047));
        assert!(matches!(
            parse_size("18446744073709551616"),
            Err(UnitError::OutOfRange(_))
        ));
        assert_eq!(parse_size("16777215T"), Ok(16_777_215 << 40));
        assert!(parse_size("16777216T").is_err());
        assert_eq!(parse_rate("18446744T"), Ok(18_446_744_000_000_000_000));
        assert!(matches!(
            parse_rate("18446745T"),
            Err(UnitError::OutOfRange(_))
        ));
    }

    #[test]
    fn rates_are_formatted_in_the_unit_that_fits() {
        for (bits, text) in [
            (0.0, "0.00 bit/s"),
            (999.0, "999.00 bit/s"),
            (1_000.0, "1.00 kbit/s"),
            // The unit after rounding.
            (999_994.0, "999.99 kbit/s"),
            (999_995.0, "1.00 Mbit/s"),
            (999_999.0, "1.00 Mbit/s"),
            (999.999, "1.00 kbit/s"),
            (999.994, "999.99 bit/s"),
            (999.999e9, "1.00 Tbit/s"),
            (1e6, "1.00 Mbit/s"),
            (12.345e6, "12.35 Mbit/s"),
            (1e9, "1.00 Gbit/s"),
            (999.5e9, "999.50 Gbit/s"),
            (1e12, "1.00 Tbit/s"),
            (2.5e15, "2500.00 Tbit/s"),
        ] {
            assert_eq!(format_bits_per_sec(bits), text, "{bits}");
        }
    }

    #[test]
    fn byte_counts_are_formatted_up_to_and_past_the_last_unit() {
        for (bytes, text) in [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.00 KiB"),
            (1536, "1.50 KiB"),
            ((1 << 20) - 1, "1024.00 KiB"),
            (1 << 20, "1.00 MiB"),
            (5 << 30, "5.00 GiB"),
            (1 << 40, "1.00 TiB"),
            // Past the table the last unit stays: no index past its end.
            (1 << 50, "1024.00 TiB"),
            (u64::MAX, "16777216.00 TiB"),
        ] {
            assert_eq!(format_bytes(bytes), text, "{bytes}");
        }
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC{0,24}") {
            let _ = parse_size(&s);
            let _ = parse_rate(&s);
            let _ = parse_duration(&s);
        }

        #[test]
        fn size_roundtrip(n in 0u64..(1u64 << 50)) {
            prop_assert_eq!(parse_size(&n.to_string()), Ok(n));
            prop_assert_eq!(parse_size(&format!("{}K", n >> 10)), Ok((n >> 10) << 10));
        }
    }
}
