//! `netrig sweep`: a UDP stream whose rate ramps linearly (bwdelaytester
//! -s), then the per-rate-bin table and the congestion analysis.

use anyhow::Result;
use clap::Args;
use std::process::ExitCode;

use super::udp::{DEFAULT_UDP_DURATION, UdpArgs, run_with};
use super::{rate, rate_or_zero, usage};

/// A sweep makes its own rate profile: the flags that set another rate or
/// stream shape conflict with it.
#[derive(Args)]
#[command(group(
    clap::ArgGroup::new("sweep_range")
        .args(["to_rate"])
        .conflicts_with_all(["bitrate", "gap", "profile", "media", "burst_size"])
))]
pub struct SweepArgs {
    /// Rate at the end of the sweep.
    #[arg(long = "to-rate", alias = "to", value_parser = rate)]
    to_rate: u64,
    /// Rate at the start of the sweep.
    #[arg(long = "from-rate", alias = "from", default_value = "0", value_parser = rate_or_zero)]
    from_rate: u64,
    #[command(flatten)]
    udp: UdpArgs,
}

pub fn run(a: SweepArgs) -> Result<ExitCode> {
    if a.from_rate > a.to_rate {
        return Ok(usage("--from-rate must not be above --to-rate"));
    }
    let size = a.udp.length as u32;
    let dur = a.udp.time.unwrap_or(DEFAULT_UDP_DURATION).as_nanos() as u64;
    match netrig::protocol::udp::profile::Profile::sweep(a.from_rate, a.to_rate, dur, size) {
        Ok(p) => run_with(a.udp, Some(p)),
        Err(e) => Ok(usage(format!("sweep: {e}"))),
    }
}
