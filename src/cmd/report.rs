//! `netrig report`: one self-contained HTML file from netrig JSON results,
//! several of one kind overlaid for comparison.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

use super::{Exit, check_outputs, usage};

#[derive(Args)]
pub struct ReportArgs {
    /// netrig results (the --json files of any test); several of one kind
    /// are drawn in the same charts, named by --title or file name.
    #[arg(required = true, value_name = "RESULT.json")]
    files: Vec<PathBuf>,
    /// Where to write the HTML ("-": standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
}

pub fn run(a: ReportArgs) -> Result<ExitCode> {
    if let Err(c) = check_outputs([("-o", Some(a.output.as_path()))]) {
        return Ok(c);
    }
    let mut results = Vec::new();
    for f in &a.files {
        let text = match std::fs::read(f) {
            Ok(t) => t,
            Err(e) => return Ok(usage(format!("cannot read {}: {e}", f.display()))),
        };
        let doc: serde_json::Value = match serde_json::from_slice(&text) {
            Ok(d) => d,
            Err(e) => return Ok(usage(format!("{} is not JSON: {e}", f.display()))),
        };
        if doc["netrig"].is_null() || !doc["test"].is_string() {
            return Ok(usage(format!(
                "{} is not a netrig result (no \"netrig\" and \"test\" fields)",
                f.display()
            )));
        }
        results.push((f.display().to_string(), doc));
    }
    // Each result is named by its file name without `.json`, or by its
    // whole path where two share a file name (run1/tcp.json, run2/tcp.json).
    let stem = |f: &PathBuf| f.file_stem().map(|s| s.to_string_lossy().into_owned());
    for (f, (name, _)) in a.files.iter().zip(&mut results) {
        if let Some(s) = stem(f).filter(|s| {
            a.files
                .iter()
                .filter(|g| stem(g).as_ref() == Some(s))
                .count()
                == 1
        }) {
            *name = s;
        }
    }
    let page = netrig::html::render(&results);
    if let Err(e) = netrig::output::replace(&a.output, |w| w.write_all(page.as_bytes())) {
        eprintln!("netrig: cannot write {}: {e}", a.output.display());
        return Ok(ExitCode::from(Exit::Fatal));
    }
    Ok(ExitCode::SUCCESS)
}
