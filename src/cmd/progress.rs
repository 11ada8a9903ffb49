//! Progress of long bounded runs that print nothing until they end (`rr`,
//! `crr`): done/total, rate and ETA on a terminal, through indicatif; nothing
//! at all when either output is not a terminal, so files and pipes get only
//! the results.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// A progress bar, or nothing when it would not be seen.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar for `total` steps of `what` (e.g. "round trips"), shown at
    /// verbosity 1 and above on a terminal.
    pub fn new(total: u64, what: &str, verbosity: u8) -> Progress {
        let shown = verbosity >= 1
            && std::io::stdout().is_terminal()
            && std::io::stderr().is_terminal()
            && !netrig::output::console_is_stderr();
        Progress(shown.then(|| {
            let bar = ProgressBar::new(total);
            let style = ProgressStyle::with_template(&format!(
                "{{bar:30}} {{human_pos}}/{{human_len}} {what}, {{rate}}, ETA {{eta}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key(
                "rate",
                |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0}/s", s.per_sec());
                },
            );
            bar.set_style(style);
            bar
        }))
    }

    /// One more step done.
    pub fn inc(&self) {
        if let Some(b) = &self.0 {
            b.inc(1);
        }
    }

    /// Removes the bar (before the results are printed).
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
