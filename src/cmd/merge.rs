//! `netrig merge`: results of one test kind from many clients or runs as
//! one result (see [`netrig::protocol::merge`]), written as a netrig envelope whose
//! `test` is `merge`; `netrig report` draws it.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

use super::{Exit, check_outputs, read_json_files, usage};

#[derive(Args)]
pub struct MergeArgs {
    /// netrig results (the --json files of tcp, udp, crr, rr or ping runs),
    /// all of one kind and configuration.
    #[arg(required = true, value_name = "RESULT.json")]
    files: Vec<PathBuf>,
    /// Where to write the merged result ("-": standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// The step of the common wall-clock grid the inputs' intervals are laid on.
    #[arg(short = 'i', long = "interval", value_name = "D", default_value = "1s", value_parser = super::interval)]
    interval: std::time::Duration,
    /// Print nothing but errors.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// What the merged envelope's `config` says: how it was made.
#[derive(serde::Serialize)]
struct MergeConfig<'a> {
    kind: &'a str,
    interval_secs: f64,
    inputs: Vec<String>,
}

pub fn run(a: MergeArgs) -> Result<ExitCode> {
    if let Err(c) = check_outputs([("-o", Some(a.output.as_path()))]) {
        return Ok(c);
    }
    let inputs: Vec<(String, serde_json::Value)> = match read_json_files(&a.files) {
        Ok(docs) => a
            .files
            .iter()
            .map(|f| f.display().to_string())
            .zip(docs)
            .collect(),
        Err(c) => return Ok(c),
    };
    let merged = match netrig::protocol::merge::merge(&inputs, a.interval.as_secs_f64()) {
        Ok(m) => m,
        Err(e) => return Ok(usage(e)),
    };
    let config = MergeConfig {
        kind: &merged.kind,
        interval_secs: merged.interval_secs,
        inputs: inputs.iter().map(|i| i.0.clone()).collect(),
    };
    if let Err(e) = netrig::report::write_envelope(&a.output, "merge", &config, Some(&merged), None)
    {
        eprintln!("netrig: cannot write {}: {e}", a.output.display());
        return Ok(ExitCode::from(Exit::Fatal));
    }
    for w in &merged.warnings {
        eprintln!("netrig: warning: {w}");
    }
    if !a.quiet {
        netrig::out!("{}", netrig::report::merge_summary(&merged));
    }
    Ok(ExitCode::SUCCESS)
}
