//! `netrig report`: one self-contained HTML file from netrig JSON results,
//! several of one kind overlaid for comparison.

use anyhow::Result;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{Exit, check_outputs, read_json_files, usage};

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
    let docs = match read_json_files(&a.files) {
        Ok(d) => d,
        Err(c) => return Ok(c),
    };
    let mut results = Vec::new();
    for (f, doc) in a.files.iter().zip(docs) {
        if doc["netrig"].is_null() || !doc["test"].is_string() {
            return Ok(usage(format!(
                "{} is not a netrig result (no \"netrig\" and \"test\" fields)",
                f.display()
            )));
        }
        results.push((name_of(f, &a.files), doc));
    }
    let page = netrig::protocol::html::render(&results);
    if let Err(e) = netrig::output::replace(&a.output, |w| w.write_all(page.as_bytes())) {
        eprintln!("netrig: cannot write {}: {e}", a.output.display());
        return Ok(ExitCode::from(Exit::Fatal));
    }
    Ok(ExitCode::SUCCESS)
}

/// A result's name: its file name without `.json`, or where another file
/// has that name too, as much of its path as tells the two apart
/// (`run1/tcp.json`, `run2/tcp.json`).
fn name_of(f: &Path, all: &[PathBuf]) -> String {
    let tail = |p: &Path, k: usize| -> String {
        let parts: Vec<String> = p
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        parts[parts.len().saturating_sub(k)..].join("/")
    };
    let stem = |p: &Path| p.file_stem().map(|s| s.to_string_lossy().into_owned());
    let Some(own) = stem(f) else {
        return f.display().to_string();
    };
    let others: Vec<&PathBuf> = all
        .iter()
        .filter(|g| g.as_path() != f && stem(g).as_ref() == Some(&own))
        .collect();
    if others.is_empty() {
        return own;
    }
    let depth = f.components().count();
    (1..=depth)
        .map(|k| tail(f, k))
        .find(|t| others.iter().all(|g| tail(g, t.split('/').count()) != *t))
        .unwrap_or_else(|| f.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_named_by_file_or_by_as_much_path_as_tells_them_apart() {
        let all: Vec<PathBuf> = [
            "/tmp/x/run1/tcp.json",
            "/tmp/x/run2/tcp.json",
            "b/udp.json",
            "a/b/c.json",
            "d/b/c.json",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        let names: Vec<String> = all.iter().map(|f| name_of(f, &all)).collect();
        assert_eq!(
            names,
            [
                "run1/tcp.json",
                "run2/tcp.json",
                "udp",
                "a/b/c.json",
                "d/b/c.json"
            ]
        );
        // One file given twice: nothing tells them apart but the path.
        let twice = [PathBuf::from("r.json"), PathBuf::from("./r.json")];
        assert_eq!(name_of(&twice[0], &twice), "r.json");
        assert_eq!(name_of(&twice[1], &twice), "./r.json");
    }
}
