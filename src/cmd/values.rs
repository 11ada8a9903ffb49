//! Value parsers for clap: each turns one flag's text into its value, and
//! each error becomes clap's one-line usage error (exit 2).

use anyhow::Result;
use std::net::IpAddr;
use std::time::Duration;

use netrig::protocol::names::Named;
use netrig::protocol::units;

/// Most addresses one `-B A-B` range may name.
pub const MAX_BIND_RANGE: u128 = 1024;

/// A `-B` value: one address, or an inclusive range `A-B` of one family.
#[derive(Clone, Debug)]
pub struct Addrs(pub Vec<IpAddr>);

pub fn addrs(s: &str) -> Result<Addrs> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let ip = |t: &str| -> Result<IpAddr> {
        t.trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("'{}' is not an IP address", t.trim()))
    };
    let Some((a, b)) = s.split_once('-') else {
        return Ok(Addrs(vec![ip(s)?]));
    };
    let (lo, hi, v4) = match (ip(a)?, ip(b)?) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            (u128::from(u32::from(a)), u128::from(u32::from(b)), true)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), false),
        _ => anyhow::bail!("range {s} mixes IPv4 and IPv6"),
    };
    if hi < lo {
        anyhow::bail!("range {s} ends before it starts");
    }
    if hi - lo >= MAX_BIND_RANGE {
        anyhow::bail!(
            "range {s} names {} addresses; at most {MAX_BIND_RANGE}",
            hi - lo + 1
        );
    }
    Ok(Addrs(
        (lo..=hi)
            .map(|n| match v4 {
                true => IpAddr::V4(Ipv4Addr::from(n as u32)),
                false => IpAddr::V6(Ipv6Addr::from(n)),
            })
            .collect(),
    ))
}

pub fn target_arg(s: &str) -> Result<String> {
    netrig::net::check_target(s)?;
    Ok(s.to_string())
}
/// `-c HOST`: iperf3's client flag names the server. A bare number is
/// what `-c` meant in earlier releases (connections), so say where that went.
pub fn client_target(s: &str) -> Result<String> {
    if s.trim().parse::<u32>().is_ok() {
        anyhow::bail!(
            "-c names the server, as iperf3's -c HOST; for {s} connections at once give -P {s}"
        );
    }
    target_arg(s)
}
/// The shortest status interval. iperf3 refuses `-i` below 0.1 s
/// (MIN_INTERVAL in its src/iperf.h; "invalid report interval"): shorter
/// intervals print more lines than anyone reads and cost the run itself.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// `-i` of the status lines: at least [`MIN_INTERVAL`].
pub fn interval(s: &str) -> Result<Duration> {
    match duration(s)? {
        d if d < MIN_INTERVAL => {
            anyhow::bail!("at least 100ms (a status line per interval; iperf3 has the same floor)")
        }
        d => Ok(d),
    }
}
/// A count (`-n`) of at least one.
pub fn count(s: &str) -> Result<u64> {
    match s.trim().parse::<u64>() {
        Ok(0) => anyhow::bail!("must be at least 1"),
        Ok(n) => Ok(n),
        Err(_) => anyhow::bail!("'{s}' is not a whole number"),
    }
}
pub fn size(s: &str) -> Result<u64> {
    Ok(units::parse_size(s)?)
}
pub fn duration(s: &str) -> Result<Duration> {
    Ok(units::parse_duration(s)?)
}
pub fn positive_duration(s: &str) -> Result<Duration> {
    match duration(s)? {
        d if d.is_zero() => anyhow::bail!("must be greater than zero"),
        d => Ok(d),
    }
}

pub fn signed_duration(s: &str) -> Result<i64> {
    let (neg, body) = s.strip_prefix('-').map_or((false, s), |b| (true, b));
    let ns = duration(body)?.as_nanos() as i64;
    Ok(if neg { -ns } else { ns })
}
pub fn rate(s: &str) -> Result<u64> {
    match units::parse_rate(s)? {
        0 => anyhow::bail!("must be greater than zero"),
        r => Ok(r),
    }
}
/// A value, or a range of them `[lo,hi]` / `lo..hi` (ctsTraffic's
/// `-transfer:[lo,hi]`, `-RateLimit:[lo,hi]`): the low end and, for a
/// range, the high one.
pub fn range_of(s: &str, one: fn(&str) -> Result<u64>) -> Result<(u64, Option<u64>)> {
    let t = s.trim();
    let range = t
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|r| r.split_once(','))
        .or_else(|| t.split_once(".."));
    match range {
        None => Ok((one(t)?, None)),
        Some((a, b)) => {
            let (lo, hi) = (one(a.trim())?, one(b.trim())?);
            if lo == 0 || lo > hi {
                anyhow::bail!("[{lo},{hi}]: give 0 < lo <= hi");
            }
            Ok((lo, Some(hi)))
        }
    }
}

pub fn rate_or_zero(s: &str) -> Result<u64> {
    Ok(units::parse_rate(s)?)
}

/// A flag's choices from a wire enum's table of names ([`Named`]): listed in
/// `--help`, and anything else refused by clap with the list.
pub fn named<T: Named + Send + Sync + Clone>() -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        T::NAMES
            .iter()
            .map(|(_, n, h)| PossibleValue::new(*n).help(*h)),
    )
    .try_map(|s| T::from_typed(&s).ok_or("not one of the choices"))
}
