//! `netrig completions SHELL` and `netrig man`: shell completions and
//! manual pages generated from the clap definitions, so they never drift
//! from the flags the binary accepts. Packages install their output.

use anyhow::{Context, Result};
use clap::Args;
use clap_complete::Shell;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_name = "SHELL")]
    shell: Shell,
}

#[derive(Args)]
pub struct ManArgs {
    /// Write netrig.1 and one page per subcommand (netrig-tcp.1, …) into
    /// this directory instead of printing netrig.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn completions(a: CompletionsArgs, mut cmd: clap::Command) -> Result<ExitCode> {
    // Rendered into memory first: clap_complete panics on a failed write
    // (a closed pipe), which must be an error message instead.
    let mut text = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "netrig", &mut text);
    let mut out = std::io::stdout().lock();
    out.write_all(&text)
        .and_then(|_| out.flush())
        .context("writing the completions")?;
    Ok(ExitCode::SUCCESS)
}

pub fn man(a: ManArgs, cmd: clap::Command) -> Result<ExitCode> {
    match a.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, &dir)
                .with_context(|| format!("writing manual pages into {}", dir.display()))?;
        }
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .and_then(|_| out.flush())
                .context("writing the manual page")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
