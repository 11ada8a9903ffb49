//! `netrig udp -P N` and `--bidir`: several streams as one test, their
//! intervals and totals added up per direction (see `netrig::udp::streams`).

use anyhow::{Context, Result};
use std::path::Path;
use std::process::ExitCode;

use super::{client_error_exit, finish, interrupt_flag, run_code};
use netrig::protocol::proto::StreamGroup;
use netrig::protocol::udp::track::UdpInterval;
use netrig::report::{MultiReporter, StreamSink};
use netrig::udp::client::UdpClientConfig;
use netrig::udp::streams::{StreamsObserver, run_streams};

/// How many streams, which ways.
pub struct Streams {
    /// Streams per direction.
    pub parallel: u32,
    /// Both directions at once.
    pub bidir: bool,
}

impl Streams {
    /// Whether this is more than one stream.
    pub fn many(&self) -> bool {
        self.parallel > 1 || self.bidir
    }
}

/// Where the results go.
pub struct Outputs<'a> {
    pub json: Option<&'a Path>,
    pub stream: Option<&'a Path>,
    pub status_file: Option<&'a Path>,
    pub connection_file: Option<&'a Path>,
}

/// The console and files, and the JSON lines, as one observer.
struct Both<'a> {
    reporter: &'a mut MultiReporter,
    sink: &'a mut StreamSink,
}

impl StreamsObserver for Both<'_> {
    fn started(&mut self) {
        self.reporter.started();
    }
    fn interval(&mut self, reverse: bool, iv: &UdpInterval, running: u32) {
        self.sink.event("interval", iv);
        self.reporter.interval(reverse, iv, running);
    }
}

/// Runs `base`'s stream `s.parallel` times each way asked, as one test.
pub fn run(
    base: &UdpClientConfig,
    s: Streams,
    verbosity: u8,
    banner: Vec<String>,
    out: Outputs<'_>,
    test: &'static str,
) -> Result<ExitCode> {
    let id = uuid::Uuid::new_v4();
    let rev = base.spec.reverse;
    let mut dirs = vec![rev; s.parallel as usize];
    if s.bidir {
        dirs.extend(std::iter::repeat_n(!rev, s.parallel as usize));
    }
    let total = dirs.len() as u32;
    let cfgs: Vec<UdpClientConfig> = dirs
        .iter()
        .enumerate()
        .map(|(i, &reverse)| {
            let mut c = base.clone();
            c.spec.reverse = reverse;
            c.spec.group = Some(StreamGroup {
                id,
                streams: total,
                index: i as u32,
            });
            // Isochronous streams draw their own frame sizes, as iperf2's
            // -P threads do.
            if let Some(v) = c.spec.media.as_mut().and_then(|m| m.varying.as_mut()) {
                v.seed = v.seed.wrapping_add(i as u64);
            }
            c.per_packet = false;
            c
        })
        .collect();
    let mut reporter = MultiReporter::new(
        verbosity,
        base.spec.media.is_some(),
        s.bidir,
        out.status_file,
        out.connection_file,
    )
    .context("cannot open an output file")?;
    let mut sink = StreamSink::open(out.stream, test, base).context("cannot open --json-stream")?;
    if verbosity >= 1 {
        for l in &banner {
            netrig::out!("{l}");
        }
        netrig::out!(
            "{total} streams{}, each its own session and data socket; one test to the server",
            if s.bidir { ", both directions" } else { "" }
        );
    }
    let result = run_streams(
        cfgs,
        interrupt_flag(),
        &mut Both {
            reporter: &mut reporter,
            sink: &mut sink,
        },
    );
    let rep = match result {
        Ok(r) => r,
        Err(e) => {
            sink.end::<()>(None, Some(&e.to_string()));
            return Ok(client_error_exit(e, test, out.json, base));
        }
    };
    reporter.finish(&rep);
    let corrupt = [&rep.sum_up, &rep.sum_down]
        .iter()
        .any(|t| t.as_ref().is_some_and(|t| t.corrupt > 0));
    let failure = rep
        .streams
        .iter()
        .find_map(|s| s.error.clone())
        .or_else(|| {
            rep.server_lost
                .then(|| "a stream's server was lost mid-test".into())
        });
    if let Some(f) = &failure {
        eprintln!("netrig: {f}");
    }
    let refused = rep.streams.iter().any(|s| s.refused);
    let code = match run_code(corrupt, rep.server_lost, rep.interrupted) {
        // A stream the server turned away is a refusal, unless data failed
        // verification (which wins over everything).
        super::Exit::Ok | super::Exit::Interrupted if refused => super::Exit::Refused,
        c => c,
    };
    sink.end(Some(&rep), failure.as_deref());
    let mut errors = reporter.take_errors();
    errors.extend(sink.take_errors());
    Ok(finish(
        code,
        out.json,
        |p| netrig::report::write_envelope(p, test, base, Some(&rep), failure.as_deref()),
        errors,
    ))
}
