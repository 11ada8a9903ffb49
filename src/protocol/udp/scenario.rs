//! Scenario files, free of I/O: netrig's own format and FlowPing's, told
//! apart so that neither is read with the other's meaning.
//!
//! Both have one point per line, fields separated by spaces, tabs, commas or
//! semicolons, `#` starting a comment.
//!
//! - **netrig**: `TIME RATE SIZE [ramp|hold]`. TIME takes units (`10s`,
//!   `500ms`; bare = seconds), RATE must carry one (`512k`, `10M`, `1Gbit`;
//!   only `0` may be bare), SIZE is bytes. Rate and size ramp linearly to the
//!   next point unless `hold`.
//! - **FlowPing** (`flowping -u FILE`): `TIME RATE SIZE`, bare numbers only.
//!   TIME is seconds, RATE is **kbit/s** (FlowPing's `cSetup::parseSrcFile`
//!   reads it with `atoi` and multiplies by 1000; the FlowPing paper's Fig. 2
//!   axis is `"TX Rate [kbps]"`), SIZE is bytes. The rate ramps linearly to the
//!   next point while the size keeps the point's value (`prepNextPacket` uses
//!   the segment's starting length), and a scenario shorter than the test is
//!   repeated (`refactorTPoints`), which [`Profile::fit`] does.
//!
//! A file whose every time and rate is a bare number is FlowPing's; any unit
//! makes it netrig's, where a bare non-zero rate is an error rather than a
//! guess.

use super::profile::{Profile, ProfileError, RateStep};
use crate::protocol::units::{parse_duration, parse_rate, parse_size};

/// Which format a scenario file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Decide from the file: bare numbers only is FlowPing.
    Auto,
    /// netrig's format: units on rates.
    Netrig,
    /// FlowPing's: seconds, kbit/s, bytes.
    Flowping,
}

impl crate::protocol::names::Named for Format {
    const NAMES: &'static [(Self, &'static str, &'static str)] = &[
        (
            Format::Auto,
            "auto",
            "decide from the file: bare numbers only is FlowPing",
        ),
        (Format::Netrig, "netrig", "netrig's: units on rates"),
        (
            Format::Flowping,
            "flowping",
            "FlowPing's: seconds, kbit/s, bytes",
        ),
    ];
}

impl Format {
    /// How the banner names a resolved format.
    pub fn describe(self) -> &'static str {
        match self {
            Format::Auto | Format::Netrig => "netrig format (rates with units)",
            Format::Flowping => {
                "FlowPing format (seconds, kbit/s, bytes; rate ramps, size steps; repeats to --duration)"
            }
        }
    }
}

/// A line's fields, with its 1-based number.
struct Line<'a> {
    number: usize,
    fields: Vec<&'a str>,
}

fn lines(text: &str) -> Vec<Line<'_>> {
    text.lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let body = raw.split('#').next().unwrap_or("");
            let fields: Vec<&str> = body
                .split(|c: char| c.is_whitespace() || c == ',' || c == ';')
                .filter(|f| !f.is_empty())
                .collect();
            (!fields.is_empty()).then_some(Line {
                number: i + 1,
                fields,
            })
        })
        .collect()
}

/// A plain decimal number, as FlowPing's `atof`/`atoi` fields are written.
fn bare(f: &str) -> bool {
    !f.is_empty()
        && f.chars().all(|c| c.is_ascii_digit() || c == '.')
        && f.chars().any(|c| c.is_ascii_digit())
}

/// Parses a scenario file; returns the profile and the format it was read in.
pub fn parse(text: &str, format: Format) -> Result<(Profile, Format), ProfileError> {
    let lines = lines(text);
    let format = match format {
        Format::Auto
            if !lines.is_empty()
                && lines
                    .iter()
                    .all(|l| l.fields.len() >= 2 && bare(l.fields[0]) && bare(l.fields[1])) =>
        {
            Format::Flowping
        }
        Format::Auto => Format::Netrig,
        f => f,
    };
    let steps = lines
        .iter()
        .map(|l| match format {
            Format::Flowping => flowping_step(l),
            _ => netrig_step(l),
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (w, l) in steps.windows(2).zip(lines.iter().skip(1)) {
        if w[1].at_ns <= w[0].at_ns {
            return Err(ProfileError::NotIncreasing { line: l.number });
        }
    }
    let p = Profile::new(steps)?;
    Ok(match format {
        Format::Flowping => (p.with_size_steps(), format),
        _ => (p, format),
    })
}

fn field_error(line: usize, field: &'static str, reason: String) -> ProfileError {
    ProfileError::Field {
        line,
        field,
        reason,
    }
}

fn checked_size(line: usize, s: &str) -> Result<u32, ProfileError> {
    let size = parse_size(s).map_err(|e| field_error(line, "size", e.to_string()))?;
    if !(32..=65_507).contains(&size) {
        return Err(field_error(
            line,
            "size",
            format!("{size} is outside 32..=65507 bytes"),
        ));
    }
    Ok(size as u32)
}

fn netrig_step(l: &Line) -> Result<RateStep, ProfileError> {
    let (line, f) = (l.number, &l.fields);
    if !(3..=4).contains(&f.len()) {
        return Err(ProfileError::Fields {
            line,
            found: f.len(),
        });
    }
    let at = parse_duration(f[0]).map_err(|e| field_error(line, "time", e.to_string()))?;
    if bare(f[1]) && f[1].chars().any(|c| c != '0' && c != '.') {
        return Err(ProfileError::BareRate {
            line,
            rate: f[1].to_string(),
        });
    }
    let rate = parse_rate(f[1]).map_err(|e| field_error(line, "rate", e.to_string()))?;
    let size = checked_size(line, f[2])?;
    let hold = match f.get(3).map(|s| s.to_ascii_lowercase()) {
        None => false,
        Some(m) if m == "ramp" => false,
        Some(m) if m == "hold" => true,
        Some(m) => {
            return Err(field_error(
                line,
                "mode",
                format!("'{m}' is neither ramp nor hold"),
            ));
        }
    };
    Ok(RateStep {
        at_ns: at.as_nanos().min(u64::MAX as u128) as u64,
        rate_bps: rate,
        size,
        hold,
    })
}

fn flowping_step(l: &Line) -> Result<RateStep, ProfileError> {
    let (line, f) = (l.number, &l.fields);
    if f.len() < 3 {
        return Err(ProfileError::Fields {
            line,
            found: f.len(),
        });
    }
    let number = |field: &'static str, s: &str| {
        s.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| field_error(line, field, format!("'{s}' is not a number")))
    };
    let secs = number("time", f[0])?;
    let kbps = number("rate", f[1])?;
    if secs > 1e9 {
        return Err(field_error(
            line,
            "time",
            format!("{secs} s is out of range"),
        ));
    }
    if kbps > 1e12 {
        return Err(field_error(
            line,
            "rate",
            format!("{kbps} kbit/s is out of range"),
        ));
    }
    Ok(RateStep {
        at_ns: (secs * 1e9).round() as u64,
        rate_bps: (kbps * 1000.0).round() as u64,
        size: checked_size(line, f[2])?,
        hold: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file from issue 11: FlowPing reads it as 1→5 Mbit/s over 2 s,
    /// 5 Mbit/s for 2 s, then 5→0 over 2 s: 21 Mbit in 6 s.
    const FLOWPING: &str = "0 1000 500\n2 5000 500\n4 5000 1000\n6 0 1000\n";

    #[test]
    fn flowping_files_are_detected_and_read_in_kbit_per_second() {
        let (p, f) = parse(FLOWPING, Format::Auto).unwrap();
        assert_eq!(f, Format::Flowping);
        assert_eq!(p.duration_ns(), 6_000_000_000);
        assert_eq!(p.bytes(), 21e6 / 8.0);
        // Rate ramps, size holds until the next point.
        assert_eq!(p.at(1_000_000_000), (3e6, 500.0));
        assert_eq!(p.at(5_000_000_000), (2.5e6, 1000.0));
        assert_eq!(p.at(3_999_999_999).1, 500.0);
    }

    #[test]
    fn a_unit_makes_it_netrig_and_bare_rates_are_refused_there() {
        let (p, f) = parse("0 0 200\n1s 8M 100\n", Format::Auto).unwrap();
        assert_eq!((f, p.at(500_000_000).0), (Format::Netrig, 4e6));
        assert_eq!(
            parse("0 0 200\n1s 8000 100\n2s 1M 100\n", Format::Auto).unwrap_err(),
            ProfileError::BareRate {
                line: 2,
                rate: "8000".into()
            }
        );
        // Forced netrig on a FlowPing file: refused, never guessed.
        assert!(matches!(
            parse(FLOWPING, Format::Netrig),
            Err(ProfileError::BareRate { line: 1, .. })
        ));
        // Forced FlowPing on a file with units: the unit is an error.
        assert!(matches!(
            parse("0 1M 200\n1 1M 200\n", Format::Flowping),
            Err(ProfileError::Field { field: "rate", .. })
        ));
    }

    #[test]
    fn the_banner_names_the_format_and_its_units() {
        assert!(Format::Flowping.describe().starts_with("FlowPing format"));
        assert!(Format::Flowping.describe().contains("kbit/s"));
        assert!(Format::Netrig.describe().contains("rates with units"));
        assert_eq!(Format::Auto.describe(), Format::Netrig.describe());
    }

    #[test]
    fn explicit_ramp_and_bad_flowping_lines() {
        let (p, _) = parse("0 1M 100 ramp\n1s 3M 100\n", Format::Auto).unwrap();
        assert_eq!(p.at(500_000_000).0, 2e6);
        let fp = |t: &str| parse(t, Format::Flowping);
        assert_eq!(
            fp("0 1000\n1 1000 500\n").unwrap_err(),
            ProfileError::Fields { line: 1, found: 2 }
        );
        assert!(matches!(
            fp("-1 1000 500\n1 1000 500\n"),
            Err(ProfileError::Field { field: "time", .. })
        ));
        assert!(matches!(
            fp("0 -5 500\n1 1000 500\n"),
            Err(ProfileError::Field { field: "rate", .. })
        ));
        assert!(matches!(
            fp("0 inf 500\n1 1000 500\n"),
            Err(ProfileError::Field { field: "rate", .. })
        ));
        // Bounds: up to 1e9 s and 1e12 kbit/s; past either, refused.
        assert!(fp("0 1000 500\n1000000000 1000000000000 500\n").is_ok());
        assert!(matches!(
            fp("0 1000 500\n1000000001 1000 500\n"),
            Err(ProfileError::Field { field: "time", .. })
        ));
        assert!(matches!(
            fp("0 1000 500\n1 1000000000001 500\n"),
            Err(ProfileError::Field { field: "rate", .. })
        ));
    }

    #[test]
    fn bytes_until_integrates_ramps_holds_and_steps() {
        let (p, _) = parse(FLOWPING, Format::Flowping).unwrap();
        assert_eq!(p.bytes_until(0), 0.0);
        // 1 -> 3 Mbit/s over the first second: 2 Mbit.
        assert_eq!(p.bytes_until(1_000_000_000), 2e6 / 8.0);
        assert_eq!(p.bytes_until(2_000_000_000), 6e6 / 8.0);
        assert_eq!(p.bytes_until(3_000_000_000), 11e6 / 8.0);
        assert_eq!(p.bytes_until(6_000_000_000), p.bytes());
        assert_eq!(p.bytes_until(60_000_000_000), p.bytes());
        let (h, _) = parse("0 8M 100 hold\n1s 0 100\n", Format::Auto).unwrap();
        assert_eq!(h.bytes_until(500_000_000), 0.5e6);
    }

    #[test]
    fn fitting_repeats_or_cuts_as_flowping_does() {
        let (p, _) = parse(FLOWPING, Format::Flowping).unwrap();
        let twice = p.fit(12_000_000_000).unwrap();
        assert!(
            (twice.bytes() - 2.0 * 21e6 / 8.0).abs() < 10.0,
            "{}",
            twice.bytes()
        );
        // A fitted FlowPing profile keeps its size steps.
        assert_eq!(twice.at(3_000_000_000).1, 500.0);
        // The second pass starts at the first point's rate (1 Mbit/s).
        assert!((twice.at(6_000_000_001).0 - 1e6).abs() < 1.0);
        let half = p.fit(3_000_000_000).unwrap();
        assert_eq!(half.duration_ns(), 3_000_000_000);
        assert_eq!(half.bytes(), (6e6 + 5e6) / 8.0);
        // Cut mid-segment: the closing step has the rate and size there
        // (FlowPing's size steps: 500 B until the 4 s point).
        let last = *half.steps().last().unwrap();
        assert_eq!((last.rate_bps, last.size), (5_000_000, 500));
        // Cut inside the second pass: 1 -> 5 Mbit/s from 6 s to 8 s.
        let late = p.fit(7_500_000_000).unwrap();
        let last = *late.steps().last().unwrap();
        assert_eq!(
            (last.at_ns, last.rate_bps, last.size),
            (7_500_000_000, 4_000_000, 500)
        );
        let same = p.fit(6_000_000_000).unwrap();
        assert_eq!(same.bytes(), p.bytes());
        assert!(p.fit(0).is_err());
        let tiny = parse("0 1 64\n0.000001 1 64\n", Format::Flowping)
            .unwrap()
            .0;
        assert_eq!(
            tiny.fit(3_600_000_000_000),
            Err(ProfileError::TooLong {
                max: super::super::profile::MAX_STEPS
            })
        );
    }

    #[test]
    fn only_bare_times_and_bare_rates_make_a_flowping_file() {
        // A bare time with a unit rate is netrig's (bare = seconds).
        let (p, f) = parse("0 1M 500\n2 3M 500\n", Format::Auto).unwrap();
        assert_eq!((f, p.at(1_000_000_000).0), (Format::Netrig, 2e6));
        // So is a unit time with a bare rate, which netrig then refuses.
        assert!(matches!(
            parse("0s 1000 500\n2s 3000 500\n", Format::Auto),
            Err(ProfileError::BareRate { line: 1, .. })
        ));
        // A line of one field is netrig's, and reported as too short.
        assert_eq!(
            parse("0 0 500\n5\n", Format::Auto).unwrap_err(),
            ProfileError::Fields { line: 2, found: 1 }
        );
    }
}
