//! `netrig analyze`: re-analyse a saved profile or sweep result.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

use super::{check_outputs, rate};
use netrig::report::{print_analysis, write_bins};

#[derive(Args)]
pub struct AnalyzeArgs {
    /// A JSON file written by `netrig udp --profile … --json` or `netrig sweep … --json`.
    file: PathBuf,
    /// Rate bin width (default: a twentieth of the peak rate).
    #[arg(long, value_parser = rate)]
    bin: Option<u64>,
    /// Write the rate-bin table here (CSV if the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
}

pub fn run(a: AnalyzeArgs) -> Result<ExitCode> {
    if let Err(c) = check_outputs([("--csv", a.csv.as_deref())]) {
        return Ok(c);
    }
    let bad = |why: String| {
        eprintln!("netrig: {}: {why}", a.file.display());
        Ok(ExitCode::from(super::Exit::Usage))
    };
    // A file that cannot be read is bad input, as for `netrig report`.
    let text = match std::fs::read(&a.file) {
        Ok(t) => t,
        Err(e) => return bad(format!("cannot read: {e}")),
    };
    let doc: serde_json::Value = match serde_json::from_slice(&text) {
        Ok(d) => d,
        Err(e) => return bad(format!("not JSON: {e}")),
    };
    let profile =
        match serde_json::from_value::<netrig::protocol::udp::profile::Profile>(
            doc["config"]["spec"]["profile"].clone(),
        ) {
            Ok(p) => p,
            Err(_) => return bad(
                "no rate profile in config.spec.profile (is it from `udp --profile` or `sweep`?)"
                    .into(),
            ),
        };
    let intervals = match serde_json::from_value::<Vec<netrig::protocol::udp::track::UdpInterval>>(
        doc["result"]["intervals"].clone(),
    ) {
        Ok(i) => i,
        Err(e) => return bad(format!("result.intervals: {e}")),
    };
    let sender = serde_json::from_value::<netrig::protocol::udp::sent::SenderReport>(
        doc["result"]["sender"].clone(),
    )
    .ok();
    let (bins, analysis) = super::udp::analyse(&profile, &intervals, sender.as_ref(), a.bin);
    print_analysis(&bins, &analysis);
    if let Some(p) = &a.csv {
        write_bins(p, &bins).with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
