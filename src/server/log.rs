//! The server's log: one place that writes every event line, as text (the
//! default) or as one JSON object a line (`serve --log-format json`, for
//! journald, Loki and the like).
//!
//! Refusal lines are rate-limited: a flood of refused connections
//! (garbage, a connection storm over `--max-conns`) must not turn the log
//! into the flood's echo. What is written and what is counted is decided in
//! [`super::lines`]; this writes it, and writes a window's count when the
//! window ends. The limiter is one per process, like the standard output
//! it protects.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use serde_json::{Value, json};

use super::lines::{LINES_PER_WINDOW, Verdict, Window, count_line};

static REFUSALS: Mutex<Window> = Mutex::new(Window::new());

/// How the server writes its log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON object per line and event.
    Json,
}

/// Writes one event: `text` as it is, or `json` with the time and the
/// event's name added.
pub(super) fn event(
    format: LogFormat,
    name: &str,
    text: std::fmt::Arguments<'_>,
    json: impl FnOnce() -> Value,
) {
    match format {
        LogFormat::Text => crate::out!("{text}"),
        LogFormat::Json => {
            let mut v = json();
            if let Value::Object(m) = &mut v {
                m.insert("ts".into(), Value::String(now_rfc3339()));
                m.insert("event".into(), Value::String(name.into()));
            }
            crate::out!("{v}");
        }
    }
}

/// Writes a refusal (or a stop, or an auth failure), or counts it when
/// the window's budget is spent.
pub(super) fn refusal(
    format: LogFormat,
    peer: SocketAddr,
    why: &crate::protocol::refusal::Refusal,
) {
    let name = match why {
        crate::protocol::refusal::Refusal::Auth(_) => "auth_failure",
        _ => "refusal",
    };
    let line = Line {
        name,
        verb: super::refusal_verb(why),
        code: why.code(),
        reason: why,
    };
    limited(format, peer, &line);
}

/// A refusal of a client that does not speak netrig's protocol (an iperf3
/// client), named by the code netrig would have sent and its reason.
pub(super) fn foreign_refusal(
    format: LogFormat,
    peer: SocketAddr,
    code: crate::protocol::proto::ErrorCode,
    why: &str,
) {
    let line = Line {
        name: "refusal",
        verb: "refused",
        code,
        reason: &why,
    };
    limited(format, peer, &line);
}

struct Line<'a> {
    name: &'a str,
    verb: &'a str,
    code: crate::protocol::proto::ErrorCode,
    reason: &'a dyn std::fmt::Display,
}

/// Writes `line`, or counts it when the window's budget is spent.
fn limited(format: LogFormat, peer: SocketAddr, line: &Line<'_>) {
    let verdict = REFUSALS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .line(Instant::now());
    match verdict {
        Verdict::Write { suppressed } => {
            suppressed_line(format, suppressed);
            let (verb, why) = (line.verb, line.reason);
            event(
                format,
                line.name,
                format_args!("{peer}: {verb}: {why}"),
                || {
                    json!({
                        "client": peer.to_string(),
                        "action": verb,
                        "code": super::metrics::code_name(line.code),
                        "reason": why.to_string(),
                    })
                },
            );
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
                    suppressed_line(format, n);
                });
            if flusher.is_err() {
                // The next refusal line accounts for them instead.
                REFUSALS.lock().unwrap_or_else(|e| e.into_inner()).flushing = false;
            }
        }
    }
}

/// The line accounting for `n` refusals not written, if any.
fn suppressed_line(format: LogFormat, n: u64) {
    if let Some(l) = count_line(n) {
        event(
            format,
            "refusals_not_logged",
            format_args!("{l}"),
            || json!({ "count": n, "most_per_second": LINES_PER_WINDOW }),
        );
    }
}

fn now_rfc3339() -> String {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// `unix_ms` (milliseconds since 1970, UTC) as RFC 3339 with milliseconds.
fn rfc3339(unix_ms: u64) -> String {
    let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rest / 3600, rest / 60 % 60, rest % 60);
    // Days to a civil date (H. Hinnant's days_from_civil, inverted).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{ms:03}Z")
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn times_are_written_as_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        // `date -u -d @951782400` : the leap day of 2000.
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(951_868_799_999), "2000-02-29T23:59:59.999Z");
        assert_eq!(rfc3339(1_709_251_199_000), "2024-02-29T23:59:59.000Z");
        assert_eq!(rfc3339(1_735_689_600_000), "2025-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
    }
}
