//! The `netrig` command line: one module per subcommand (flags to a library
//! configuration, a run, a report and an exit code), and what they share:
//! the flags every test spells the same way ([`flags`], parsed by
//! [`values`]), and here output-path checks, writing the results, signals,
//! the embedded server and exit codes.
//!
//! Flags follow iperf3 where the concept is the same (`-t` time, `-i`
//! interval, `-n` bytes or count, `-P` parallel connections, `-l` length,
//! `-b` bit rate, `-R` reverse, `-J` JSON, `-p` port, `-B` bind), with
//! ctsTraffic's long names as aliases. Spellings of earlier releases stay as
//! hidden aliases for one release.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use netrig::server::{Server, ServerConfig};
use netrig::tcp::client::ClientError;

// The commands name the shared flags and parsers as `super::X`.
pub use flags::*;
pub use values::*;

pub mod analyze;
pub mod crr;
pub mod docs;
pub mod flags;
pub mod habits;
pub mod iperf3c;
pub mod load;
pub mod merge;
pub mod mesh;
pub mod ping;
pub mod progress;
pub mod relay;
pub mod report;
pub mod rr;
pub mod serve;
pub mod sock;
pub mod sweep;
pub mod tcp;
pub mod udp;
pub mod udp_streams;
pub mod values;
pub mod version;

/// Exit codes, documented in the README. Declared in increasing value, so
/// `max` keeps the more serious of two outcomes (a data error over a network
/// error over success).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Exit {
    Ok = 0,
    Fatal = 1,
    Usage = 2,
    NetworkError = 3,
    DataError = 4,
    Refused = 5,
    Unsupported = 6,
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// `--json-iperf3`: where the iperf3-compatible document goes.
static IPERF3_OUT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// What every client command sets up before its test, every output path
/// checked first: where the JSON goes, how much to print, and the key.
pub struct Setup {
    pub json: Option<PathBuf>,
    /// `--json-stream`, checked.
    pub stream: Option<PathBuf>,
    pub verbosity: u8,
    pub key: Option<netrig::protocol::auth::Key>,
}

impl Setup {
    /// Checks `--json` and the command's other `outputs`, and loads the key;
    /// a problem is a usage error, already reported.
    pub fn new<'a>(
        json: &Json,
        verbosity: Verbosity,
        key: &KeyArg,
        console: &ConsoleArgs,
        outputs: impl IntoIterator<Item = (&'static str, Option<&'a Path>)>,
    ) -> Result<Setup, ExitCode> {
        let path = json.path();
        let others: Vec<(&'static str, Option<PathBuf>)> = outputs
            .into_iter()
            .map(|(f, p)| (f, p.map(Path::to_path_buf)))
            .collect();
        check_outputs(
            std::iter::once(("--json", path.as_deref()))
                .chain(std::iter::once(("--logfile", console.logfile())))
                .chain(std::iter::once(("--json-stream", json.stream_path())))
                .chain(std::iter::once(("--html", json.html_path())))
                .chain(others.iter().map(|(f, p)| (*f, p.as_deref()))),
        )?;
        console.apply()?;
        if let Some(h) = json.html_path() {
            let _ = HTML_OUT.set(h.to_path_buf());
        }
        Ok(Setup {
            key: key.load()?,
            verbosity: verbosity.level(),
            json: path,
            stream: json.stream_path().map(Path::to_path_buf),
        })
    }
}

/// Checks every output path before a test starts; a bad one is a usage
/// error that names the flag (exit 2).
pub fn check_outputs<'a>(
    outputs: impl IntoIterator<Item = (&'static str, Option<&'a Path>)>,
) -> Result<(), ExitCode> {
    let outputs: Vec<_> = outputs.into_iter().collect();
    netrig::output::check_all(outputs.iter().map(|(_, p)| *p)).map_err(|e| {
        let flag = outputs
            .iter()
            .find(|(_, p)| *p == Some(e.path()))
            .map_or("output", |(f, _)| f);
        eprintln!("netrig: {flag} {e}");
        ExitCode::from(Exit::Usage)
    })
}

/// A usage error found after parsing: one line, exit 2.
pub fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("netrig: {msg}");
    ExitCode::from(Exit::Usage)
}

/// The exit code of a finished run: data errors win over network errors,
/// which win over an interrupt.
pub fn run_code(data_error: bool, network_error: bool, interrupted: bool) -> Exit {
    if data_error {
        Exit::DataError
    } else if network_error {
        Exit::NetworkError
    } else if interrupted {
        Exit::Interrupted
    } else {
        Exit::Ok
    }
}

/// `--html`: where the report goes, set once the paths are checked.
static HTML_OUT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Writes the result envelope where it is wanted, as HTML too with
/// `--html` and as iperf3's JSON with `--json-iperf3` (both made from the
/// envelope itself).
fn write_outputs(
    json: Option<&Path>,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Result<(), (PathBuf, std::io::Error)> {
    let (html, iperf3) = (HTML_OUT.get(), IPERF3_OUT.get());
    if html.is_none() && iperf3.is_none() {
        return match json {
            Some(p) => write(p).map_err(|e| (p.to_path_buf(), e)),
            None => Ok(()),
        };
    }
    // The envelope is written once, to the JSON file or a temporary one,
    // and read back for the report.
    let to_stdout = json.is_some_and(netrig::output::is_stdout);
    let tmp = std::env::temp_dir().join(format!("netrig-{}-report.json", std::process::id()));
    let file = json.filter(|_| !to_stdout).unwrap_or(&tmp).to_path_buf();
    let result = (|| {
        write(&file).map_err(|e| (file.clone(), e))?;
        let text = std::fs::read(&file).map_err(|e| (file.clone(), e))?;
        if to_stdout {
            use std::io::Write as _;
            std::io::stdout()
                .write_all(&text)
                .map_err(|e| (PathBuf::from("-"), e))?;
        }
        let doc: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| (file.clone(), std::io::Error::other(e)))?;
        if let Some(ip) = iperf3 {
            let out = netrig::protocol::iperf3::json::from_envelope(&doc)
                .map_err(|e| (ip.clone(), std::io::Error::other(e)))?;
            netrig::output::replace(ip, |w| {
                serde_json::to_writer_pretty(&mut *w, &out)?;
                w.write_all(b"\n")
            })
            .map_err(|e| (ip.clone(), e))?;
        }
        if let Some(html) = html {
            let page = netrig::protocol::html::render(&[(String::from("this run"), doc)]);
            netrig::output::replace(html, |w| w.write_all(page.as_bytes()))
                .map_err(|e| (html.clone(), e))?;
        }
        Ok(())
    })();
    if file == tmp {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes the JSON report if asked and folds output errors into the exit code.
pub fn finish(
    mut code: Exit,
    json: Option<&Path>,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
    output_errors: Vec<std::io::Error>,
) -> ExitCode {
    if let Err((p, e)) = write_outputs(json, write) {
        eprintln!("netrig: cannot write {}: {e}", p.display());
        code = code.max(Exit::Fatal);
    }
    for e in output_errors {
        eprintln!("netrig: output error: {e}");
        code = code.max(Exit::Fatal);
    }
    ExitCode::from(code)
}

/// The exit code for a client error.
pub fn client_error_code(e: &ClientError) -> Exit {
    match e {
        ClientError::Refused { .. } | ClientError::Unproven { .. } => Exit::Refused,
        ClientError::Connect { .. }
        | ClientError::Control { .. }
        | ClientError::NotNetrig { .. } => Exit::NetworkError,
        ClientError::Config(_)
        | ClientError::RrConfig(_)
        | ClientError::SockOpt(_)
        | ClientError::Invalid(_) => Exit::Usage,
        ClientError::Unsupported(_) => Exit::Unsupported,
    }
}

/// Reports a client error that stopped a run before it measured anything,
/// writes a JSON report saying so (for monitoring), and picks the exit code.
pub fn client_error_exit(
    e: ClientError,
    test: &str,
    json: Option<&Path>,
    config: &impl serde::Serialize,
) -> ExitCode {
    eprintln!("netrig: {e}");
    let code = client_error_code(&e);
    let message = e.to_string();
    let error_code = e.code();
    finish(
        code,
        json,
        |p| {
            netrig::report::write_envelope_coded(
                p,
                test,
                config,
                None::<&()>,
                Some(&message),
                error_code,
            )
        },
        Vec::new(),
    )
}

/// The flag SIGINT and SIGTERM set: the run stops gracefully and writes
/// everything it measured. GNU `timeout` and impatient users send a second
/// signal within a second, so only a third one cuts the waiting short: the
/// run skips its remaining waits for the server and writes its files, and
/// the process exits after 2 s whatever happens (row files are flushed row
/// by row, so they hold what was measured even then).
pub fn interrupt_flag() -> Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&flag);
        let signals = std::sync::atomic::AtomicU32::new(0);
        let r = ctrlc::set_handler(move || {
            f.store(true, SeqCst);
            match signals.fetch_add(1, SeqCst) {
                0 => {}
                1 => {
                    eprintln!("netrig: stopping and writing results; a third signal exits at once")
                }
                _ => {
                    // Skip every remaining wait; exit anyway if the results
                    // are not written within a moment.
                    netrig::control::hurry();
                    std::thread::spawn(|| {
                        std::thread::sleep(Duration::from_secs(2));
                        std::process::exit(i32::from(Exit::Interrupted as u8));
                    });
                }
            }
        });
        if let Err(e) = r {
            eprintln!("netrig: warning: cannot install the Ctrl-C handler: {e}");
        }
        flag
    })
    .clone()
}

/// An in-process server on loopback for runs without a target.
pub struct Embedded {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<std::io::Result<()>>,
}

impl Embedded {
    pub fn start(key: Option<netrig::protocol::auth::Key>) -> Result<Embedded> {
        let server = Server::bind(ServerConfig {
            key,
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
            verbosity: 0,
            ..ServerConfig::default()
        })
        .context("cannot start the embedded server")?;
        let addr = server.local_addrs()[0];
        let stop = server.stop_handle();
        let handle = std::thread::spawn(move || server.run());
        Ok(Embedded { addr, stop, handle })
    }

    pub fn finish(self) {
        self.stop.store(true, SeqCst);
        let _ = self.handle.join();
    }
}

/// Starts an embedded server when no target is given; returns the target to use.
pub fn target_or_embedded(
    target: &Option<String>,
    key: &Option<netrig::protocol::auth::Key>,
    verbosity: u8,
) -> Result<(String, Option<Embedded>)> {
    match target {
        Some(t) => Ok((t.clone(), None)),
        None => {
            let e = Embedded::start(key.clone())?;
            if verbosity >= 1 {
                netrig::out!(
                    "No target given: testing against an embedded server on {}.",
                    e.addr
                );
            }
            Ok((e.addr.to_string(), Some(e)))
        }
    }
}

/// The JSON documents in `files`, in order, or the usage error (exit 2)
/// naming the first that cannot be read or is not JSON (`report`, `merge`).
pub(crate) fn read_json_files(files: &[PathBuf]) -> Result<Vec<serde_json::Value>, ExitCode> {
    let mut docs = Vec::with_capacity(files.len());
    for f in files {
        let text =
            std::fs::read(f).map_err(|e| usage(format!("cannot read {}: {e}", f.display())))?;
        let doc = serde_json::from_slice(&text)
            .map_err(|e| usage(format!("{} is not JSON: {e}", f.display())))?;
        docs.push(doc);
    }
    Ok(docs)
}
