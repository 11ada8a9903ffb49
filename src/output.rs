//! Output files as users name them. Every path is checked before a test
//! starts, so a typo costs a usage error rather than a finished measurement.
//! `-` is standard output (the human console then moves to standard error).
//! A FIFO, a device or a symlink is written through, never replaced: `--json
//! /dev/stdout` must print, not swap the system's symlink for a file. Only a
//! regular file (or a new one) is replaced atomically, through a temporary
//! file in its own directory that is removed on any error.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use thiserror::Error;

/// The path that means standard output.
pub const STDOUT: &str = "-";

/// Set when an output file is standard output: the console then goes to
/// standard error so the two never mix.
static CONSOLE_TO_STDERR: AtomicBool = AtomicBool::new(false);

/// Where human-readable output goes now.
pub fn console() -> Box<dyn Write + Send> {
    crate::console::wrap(if CONSOLE_TO_STDERR.load(SeqCst) {
        Box::new(io::stderr())
    } else {
        Box::new(io::stdout())
    })
}

/// Whether the console has moved to standard error.
pub fn console_is_stderr() -> bool {
    CONSOLE_TO_STDERR.load(SeqCst)
}

/// Why an output path cannot be used.
#[derive(Debug, Error)]
pub enum OutputError {
    /// The path names a directory.
    #[error("{0}: is a directory")]
    Directory(PathBuf),
    /// The directory the file would go in does not exist.
    #[error("{path}: no such directory {dir}")]
    NoDirectory {
        /// The output path.
        path: PathBuf,
        /// Its parent.
        dir: PathBuf,
    },
    /// The file or its directory cannot be written.
    #[error("{path}: cannot write: {source}")]
    NotWritable {
        /// The output path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Two outputs name the same file.
    #[error("{0} is given for two outputs")]
    Twice(PathBuf),
}

impl OutputError {
    /// The output path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            OutputError::Directory(p) | OutputError::Twice(p) => p,
            OutputError::NoDirectory { path, .. } | OutputError::NotWritable { path, .. } => path,
        }
    }
}

/// Whether `path` names standard output (`-`).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == STDOUT
}

fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A temporary name beside `path`, in the same directory (so the rename is
/// atomic), hidden, and unique to this process.
fn temp_beside(path: &Path, tag: &str) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    parent(path).join(format!(".{name}.{tag}{}.tmp", std::process::id()))
}

/// Whether a path exists as something other than a regular file (a symlink,
/// FIFO, device or socket), which is written through rather than replaced.
fn written_through(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_file())
}

/// Checks that `path` can be written, without truncating or creating it.
pub fn check(path: &Path) -> Result<(), OutputError> {
    if is_stdout(path) {
        return Ok(());
    }
    let not_writable = |source| OutputError::NotWritable {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(OutputError::Directory(path.to_path_buf())),
        Ok(m) if m.is_file() => {
            // Opening for writing without truncating proves it writable.
            return OpenOptions::new()
                .write(true)
                .open(path)
                .map(drop)
                .map_err(not_writable);
        }
        // A FIFO or a device: opening a FIFO would wait for its reader.
        Ok(_) => return Ok(()),
        Err(_) => {}
    }
    let dir = parent(path);
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        _ => {
            return Err(OutputError::NoDirectory {
                path: path.to_path_buf(),
                dir,
            });
        }
    }
    // Creating a file beside it is the only check root cannot bypass (a
    // read-only file system).
    let probe = temp_beside(path, "check");
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(not_writable)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Checks every given output path, and that no file is named twice. When one
/// of them is standard output, the console moves to standard error.
pub fn check_all<'a>(paths: impl IntoIterator<Item = Option<&'a Path>>) -> Result<(), OutputError> {
    let mut seen: Vec<&Path> = Vec::new();
    for p in paths.into_iter().flatten() {
        if seen.contains(&p) {
            return Err(OutputError::Twice(p.to_path_buf()));
        }
        check(p)?;
        seen.push(p);
    }
    if seen.iter().any(|p| is_stdout(p)) {
        CONSOLE_TO_STDERR.store(true, SeqCst);
    }
    Ok(())
}

/// Opens an output for rows written as the test runs.
pub fn create(path: &Path) -> io::Result<Box<dyn Write + Send>> {
    if is_stdout(path) {
        return Ok(Box::new(io::stdout()));
    }
    Ok(Box::new(File::create(path)?))
}

/// Writes a whole output at once: a regular file (or a new one) is replaced
/// atomically, so readers see the old file or the complete new one; anything
/// else is written through. No temporary file is left behind on error.
pub fn replace(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    if is_stdout(path) {
        let mut out = io::stdout().lock();
        write(&mut out)?;
        return out.flush();
    }
    if written_through(path) {
        let mut f = BufWriter::new(File::create(path)?);
        write(&mut f)?;
        return f.flush();
    }
    let tmp = temp_beside(path, "");
    let result = (|| {
        let mut f = BufWriter::new(OpenOptions::new().write(true).create_new(true).open(&tmp)?);
        write(&mut f)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn check_names_each_problem_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(check(d.path()), Err(OutputError::Directory(_))));
        let missing = d.path().join("nope/x.json");
        assert!(matches!(
            check(&missing),
            Err(OutputError::NoDirectory { .. })
        ));
        let fresh = d.path().join("x.json");
        check(&fresh).unwrap();
        assert!(names(d.path()).is_empty(), "a check creates nothing");
        std::fs::write(&fresh, "old").unwrap();
        check(&fresh).unwrap();
        assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "old");
        check(Path::new(STDOUT)).unwrap();
        let twice = check_all([Some(fresh.as_path()), Some(fresh.as_path())]);
        assert!(matches!(twice, Err(OutputError::Twice(_))));
    }

    #[test]
    fn regular_files_are_replaced_whole_and_errors_leave_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.json");
        std::fs::write(&p, "old").unwrap();
        replace(&p, |w| w.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let failed = replace(&p, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("boom"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(names(d.path()), ["r.json"]);
    }

    #[test]
    fn symlinks_and_fifos_are_written_through() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target.json");
        std::fs::write(&target, "old").unwrap();
        let link = d.path().join("link.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        check(&link).unwrap();
        replace(&link, |w| w.write_all(b"through")).unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "through");

        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        check(&fifo).unwrap();
        let f2 = fifo.clone();
        let reader = std::thread::spawn(move || std::fs::read_to_string(f2).unwrap());
        replace(&fifo, |w| w.write_all(b"piped")).unwrap();
        assert_eq!(reader.join().unwrap(), "piped");
        assert!(
            !std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_file(),
            "the FIFO is still a FIFO"
        );
    }
}
