//! The refusal lines of the server's log, rate-limited: a flood of refused
//! connections (garbage, a connection storm over `--max-conns`) must not
//! turn the log into the flood's echo. What is written and what is counted
//! is decided in [`super::lines`]; this writes it, and writes a window's
//! count when the window ends.
//!
//! The limiter is one per process, like the standard output it protects.

use std::sync::Mutex;
use std::time::Instant;

use super::lines::{Verdict, Window, count_line};

static REFUSALS: Mutex<Window> = Mutex::new(Window::new());

/// Writes `line` to the log, or counts it when the window's budget is spent.
pub(super) fn refusal(line: std::fmt::Arguments<'_>) {
    let verdict = REFUSALS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .line(Instant::now());
    match verdict {
        Verdict::Write { suppressed } => {
            if let Some(l) = count_line(suppressed) {
                crate::out!("{l}");
            }
            crate::out!("{line}");
        }
        Verdict::Suppress { flush_at: None } => {}
        Verdict::Suppress { flush_at: Some(at) } => {
            // The flood may end with this window: the count is written when
            // the window ends, not at the next refusal, which may never come.
            let flusher = std::thread::Builder::new()
                .name("refusal-log".into())
                .spawn(move || {
                    std::thread::sleep(at.saturating_duration_since(Instant::now()));
                    let n = REFUSALS.lock().unwrap_or_else(|e| e.into_inner()).flush();
                    if let Some(l) = count_line(n) {
                        crate::out!("{l}");
                    }
                });
            if flusher.is_err() {
                // The next refusal line accounts for them instead.
                REFUSALS.lock().unwrap_or_else(|e| e.into_inner()).flushing = false;
            }
        }
    }
}
