//! The line budget of the server's refusal log, free of I/O: at most
//! [`LINES_PER_WINDOW`] refusal lines per [`WINDOW`] are written, the rest
//! counted, and the count written as one line once the window is over, so
//! the log still accounts for every refusal. The caller says what time it
//! is.

use std::time::{Duration, Instant};

/// Most refusal lines written in one [`WINDOW`].
pub(super) const LINES_PER_WINDOW: u32 = 20;
/// The window the line budget is counted over.
pub(super) const WINDOW: Duration = Duration::from_secs(1);

/// What becomes of one refusal line.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Write it, after a line accounting for `suppressed` lines of an
    /// earlier window (when not 0).
    Write { suppressed: u64 },
    /// Count it; when `flush_at` is given, the count is due then (nothing
    /// yet waits to write it).
    Suppress { flush_at: Option<Instant> },
}

/// The current window: when it began, the lines written in it, and those
/// suppressed and not yet accounted for.
#[derive(Debug, Default)]
pub(super) struct Window {
    start: Option<Instant>,
    lines: u32,
    suppressed: u64,
    /// A flush of `suppressed` is scheduled.
    pub(super) flushing: bool,
}

impl Window {
    pub(super) const fn new() -> Window {
        Window {
            start: None,
            lines: 0,
            suppressed: 0,
            flushing: false,
        }
    }

    pub(super) fn line(&mut self, now: Instant) -> Verdict {
        let mut suppressed = 0;
        let start = match self.start {
            Some(s) if now.saturating_duration_since(s) < WINDOW => s,
            _ => {
                suppressed = std::mem::take(&mut self.suppressed);
                self.lines = 0;
                self.start = Some(now);
                now
            }
        };
        if self.lines < LINES_PER_WINDOW {
            self.lines += 1;
            return Verdict::Write { suppressed };
        }
        self.suppressed += 1;
        let flush_at = (!self.flushing).then_some(start + WINDOW);
        self.flushing = true;
        Verdict::Suppress { flush_at }
    }

    /// The suppressed lines not yet accounted for, now accounted for.
    pub(super) fn flush(&mut self) -> u64 {
        self.flushing = false;
        std::mem::take(&mut self.suppressed)
    }
}

/// The line accounting for `n` refusal lines not written; none for none.
pub(super) fn count_line(n: u64) -> Option<String> {
    (n > 0).then(|| {
        format!("refusals: {n} more not logged (at most {LINES_PER_WINDOW} lines a second)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writes(w: &mut Window, at: Instant, n: u32) {
        for i in 0..n {
            assert_eq!(w.line(at), Verdict::Write { suppressed: 0 }, "line {i}");
        }
    }

    #[test]
    fn a_window_writes_its_budget_then_counts() {
        let t0 = Instant::now();
        let mut w = Window::new();
        writes(&mut w, t0, LINES_PER_WINDOW);
        let late = t0 + WINDOW - Duration::from_nanos(1);
        // The first suppressed line schedules the count for the window's end.
        assert_eq!(
            w.line(late),
            Verdict::Suppress {
                flush_at: Some(t0 + WINDOW)
            }
        );
        assert_eq!(w.line(late), Verdict::Suppress { flush_at: None });
        assert_eq!(w.line(late), Verdict::Suppress { flush_at: None });
        assert_eq!(w.flush(), 3);
        assert_eq!(w.flush(), 0);
    }

    #[test]
    fn the_next_window_accounts_for_what_was_not_flushed() {
        let t0 = Instant::now();
        let mut w = Window::new();
        writes(&mut w, t0, LINES_PER_WINDOW);
        for _ in 0..5 {
            assert!(matches!(w.line(t0), Verdict::Suppress { .. }));
        }
        // A window is exactly WINDOW long: at its end a new one begins.
        let t1 = t0 + WINDOW;
        assert_eq!(w.line(t1), Verdict::Write { suppressed: 5 });
        writes(&mut w, t1, LINES_PER_WINDOW - 1);
        // The old window's count, due at t1, comes after the line above
        // took it: it finds nothing, and the new window schedules its own.
        assert_eq!(w.flush(), 0);
        assert_eq!(
            w.line(t1),
            Verdict::Suppress {
                flush_at: Some(t1 + WINDOW)
            }
        );
        assert_eq!(w.flush(), 1);
    }

    #[test]
    fn the_count_line_names_the_count_and_the_budget() {
        assert_eq!(count_line(0), None);
        assert_eq!(
            count_line(1874).as_deref(),
            Some("refusals: 1874 more not logged (at most 20 lines a second)")
        );
        assert!(count_line(1).is_some());
    }

    #[test]
    fn a_window_starts_at_its_first_line_not_on_a_clock_tick() {
        let t0 = Instant::now();
        let mut w = Window::new();
        writes(&mut w, t0, 1);
        // Quiet for a while: the budget is whole again at the next line.
        let t1 = t0 + 3 * WINDOW;
        writes(&mut w, t1, LINES_PER_WINDOW);
        assert_eq!(
            w.line(t1 + WINDOW / 2),
            Verdict::Suppress {
                flush_at: Some(t1 + WINDOW)
            }
        );
    }
}
