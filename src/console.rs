//! The human console's decorations, as iperf3 has them: `--title` before
//! every line (and in the JSON), `--timestamps` (a strftime format of the
//! wall clock) before every line, and `--logfile`, which sends the console
//! to a file instead of the terminal. Set once at start; every line written
//! through [`crate::output::console`] gets them.

use std::fs::File;
use std::io::{self, Write};
use std::sync::OnceLock;

/// What decorates the console.
#[derive(Debug, Default)]
pub struct Decor {
    /// Printed before every line, followed by `:  ` (iperf3's spacing).
    pub title: Option<String>,
    /// A strftime format; the local time in it is printed before every line.
    pub timestamps: Option<String>,
    /// The console goes here, appended, instead of the terminal.
    pub logfile: Option<File>,
}

static DECOR: OnceLock<Decor> = OnceLock::new();

/// Sets the decorations for the rest of the process (the first call wins).
pub fn set(d: Decor) {
    let _ = DECOR.set(d);
}

/// The `--title`, if one was given.
pub fn title() -> Option<&'static str> {
    DECOR.get().and_then(|d| d.title.as_deref())
}

/// `inner` decorated as set, or `inner` itself when nothing is.
pub(crate) fn wrap(inner: Box<dyn Write + Send>) -> Box<dyn Write + Send> {
    let Some(d) = DECOR.get() else {
        return inner;
    };
    if d.title.is_none() && d.timestamps.is_none() && d.logfile.is_none() {
        return inner;
    }
    let out: Box<dyn Write + Send> = match &d.logfile {
        Some(f) => Box::new(f),
        None => inner,
    };
    Box::new(Prefixed {
        out,
        decor: d,
        at_start: true,
    })
}

/// A writer that puts the decorations before each line it starts.
struct Prefixed {
    out: Box<dyn Write + Send>,
    decor: &'static Decor,
    at_start: bool,
}

impl Decor {
    /// What goes before a line started now.
    fn prefix(&self) -> Vec<u8> {
        let mut p = String::new();
        if let Some(f) = &self.timestamps {
            p.push_str(&strftime_now(f));
        }
        if let Some(t) = &self.title {
            p.push_str(t);
            p.push_str(":  ");
        }
        p.into_bytes()
    }
}

impl Write for Prefixed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let out = prefix_lines(buf, &mut self.at_start, || self.decor.prefix());
        self.out.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// `buf` with `prefix()` before every line that starts in it; `at_start`
/// says whether the previous write ended a line, and is updated.
fn prefix_lines(buf: &[u8], at_start: &mut bool, prefix: impl Fn() -> Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(buf.len() + 32);
    for piece in buf.split_inclusive(|&b| b == b'\n') {
        if *at_start {
            out.extend_from_slice(&prefix());
        }
        out.extend_from_slice(piece);
        *at_start = piece.ends_with(b"\n");
    }
    out
}

/// The local time now in strftime format `fmt` (as iperf3's
/// `--timestamps`); an empty string if the format cannot be rendered.
fn strftime_now(fmt: &str) -> String {
    let Ok(cfmt) = std::ffi::CString::new(fmt) else {
        return String::new();
    };
    let mut buf = [0u8; 256];
    // SAFETY: time(NULL) only returns; localtime_r fills the zeroed `tm`
    // we own; strftime writes at most buf.len() bytes into `buf` and
    // returns how many (0 when it does not fit).
    let n = unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return String::new();
        }
        libc::strftime(buf.as_mut_ptr().cast(), buf.len(), cfmt.as_ptr(), &tm)
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(writes: &[&str]) -> String {
        let mut at = true;
        let mut out = Vec::new();
        for w in writes {
            out.extend(prefix_lines(w.as_bytes(), &mut at, || b"T: ".to_vec()));
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_line_started_gets_the_prefix_once() {
        assert_eq!(run(&["a\n"]), "T: a\n");
        assert_eq!(run(&["a\nb\n"]), "T: a\nT: b\n");
        // A line written in pieces is prefixed once, where it starts.
        assert_eq!(run(&["ab", "c\n", "d\n"]), "T: abc\nT: d\n");
        // An empty line still gets its prefix; nothing after the last
        // newline means no dangling prefix.
        assert_eq!(run(&["\n", "x\n"]), "T: \nT: x\n");
        assert_eq!(run(&["x"]), "T: x");
        assert_eq!(run(&[""]), "");
    }

    #[test]
    fn strftime_renders_the_format() {
        let y = strftime_now("%Y");
        assert_eq!(y.len(), 4, "{y}");
        assert!(y.chars().all(|c| c.is_ascii_digit()), "{y}");
        assert_eq!(strftime_now("literal"), "literal");
        assert_eq!(strftime_now("bad\0nul"), "");
    }
}
