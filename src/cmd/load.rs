//! `netrig load`: latency under load (bufferbloat) and responsiveness in
//! round trips per minute, one run of idle, download, upload and both.

use anyhow::Result;
use clap::Args;
use std::process::ExitCode;
use std::time::Duration;

use super::{
    Exit, Json, KeyArg, Setup, Target, Verbosity, client_error_exit, finish, interrupt_flag,
    positive_duration, run_code, target_or_embedded, usage,
};
use netrig::load::run::{LoadConfig, LoadError, LoadObserver, Second};
use netrig::protocol::load::model::Phase;

#[derive(Args)]
pub struct LoadArgs {
    #[command(flatten)]
    pub to: Target,
    /// The idle phase: the latency baseline.
    #[arg(long, value_name = "D", default_value = "5s", value_parser = positive_duration)]
    idle: Duration,
    /// Each loaded phase (at least 4 s: the responsiveness is taken over
    /// its last four seconds).
    #[arg(long, value_name = "D", default_value = "8s", value_parser = positive_duration)]
    phase_time: Duration,
    /// The loaded phases, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "download,upload,both"
    )]
    phases: Vec<LoadPhase>,
    /// Time between probes of each kind.
    #[arg(long, value_name = "D", default_value = "100ms", value_parser = positive_duration)]
    probe_interval: Duration,
    /// Most TCP connections a phase ramps up to (the draft's 16).
    #[arg(short = 'P', long, visible_alias = "parallel", default_value_t = 16)]
    max_connections: u32,
    /// A live line every this many seconds, with the interval's mean
    /// goodput and its probes' medians (whole seconds: the ramp moves
    /// once a second).
    #[arg(short = 'i', long, value_name = "D", default_value = "1s", value_parser = whole_seconds)]
    interval: u32,
    #[command(flatten)]
    connect: super::ConnectTimeout,
    #[command(flatten)]
    sock: super::sock::TcpFlags,
    #[command(flatten)]
    json: Json,
    #[command(flatten)]
    verbosity: Verbosity,
    #[command(flatten)]
    console: super::ConsoleArgs,
    #[command(flatten)]
    key: KeyArg,
}

/// `load -i`: a whole number of seconds, at least one.
fn whole_seconds(s: &str) -> Result<u32> {
    let d = super::duration(s)?;
    if d.subsec_nanos() != 0 || d.as_secs() == 0 {
        anyhow::bail!("give whole seconds, at least 1s (the ramp moves once a second)");
    }
    u32::try_from(d.as_secs()).map_err(|_| anyhow::anyhow!("too long"))
}

/// A loaded phase on the command line.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LoadPhase {
    Download,
    Upload,
    Both,
}

/// The console line and the JSON stream's event, each second.
struct Live {
    verbosity: u8,
    sink: netrig::report::StreamSink,
}

impl LoadObserver for Live {
    fn second(&mut self, s: &Second) {
        self.sink.event("second", s);
        if self.verbosity >= 1 {
            netrig::out!("{}", netrig::report::load_live_line(s));
        }
    }
}

impl LoadArgs {
    /// The flags turned into the run's config, in this one place, and
    /// checked (`LoadConfig::validate`); its target is empty until the
    /// embedded server (if none was given) has started. A config that
    /// cannot run is a usage error, already reported.
    fn to_config(&self, key: Option<netrig::protocol::auth::Key>) -> Result<LoadConfig, ExitCode> {
        if self.sock.cport.is_some() {
            return Err(usage(
                "--cport names one port; load opens many connections and probes",
            ));
        }
        let cfg = LoadConfig {
            target: String::new(),
            port: self.to.port,
            key,
            idle_secs: self.idle.as_secs_f64(),
            phase_secs: self.phase_time.as_secs_f64(),
            phases: self
                .phases
                .iter()
                .map(|p| match p {
                    LoadPhase::Download => Phase::Download,
                    LoadPhase::Upload => Phase::Upload,
                    LoadPhase::Both => Phase::Both,
                })
                .collect(),
            probe_interval_ms: self.probe_interval.as_millis().min(u128::from(u64::MAX)) as u64,
            max_connections: self.max_connections,
            sock: self.sock.opts(),
            bind_dev: self.sock.ip.bind_dev.clone(),
            connect_timeout: Some(self.connect.connect_timeout),
            interval_secs: self.interval,
        };
        cfg.validate().map_err(|e| usage(e.to_string()))?;
        Ok(cfg)
    }
}

pub fn run(a: LoadArgs) -> Result<ExitCode> {
    let Setup {
        json,
        stream,
        verbosity,
        key,
    } = match Setup::new(&a.json, a.verbosity, &a.key, &a.console, []) {
        Ok(s) => s,
        Err(c) => return Ok(c),
    };
    let mut cfg = match a.to_config(key.clone()) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let (target, embedded) = target_or_embedded(&a.to.host(), &key, verbosity)?;
    cfg.target = target.clone();
    if verbosity >= 1 {
        netrig::out!("{}", netrig::report::load_banner(&cfg, &target));
        netrig::out!("{}", netrig::report::LOAD_LIVE_HEADERS);
    }
    let sink = match netrig::report::StreamSink::open(stream.as_deref(), "load", &cfg) {
        Ok(s) => s,
        Err(e) => return Ok(usage(format!("cannot open --json-stream: {e}"))),
    };
    let mut live = Live { verbosity, sink };
    let result = netrig::load::run::run(&cfg, interrupt_flag(), &mut live);
    if let Some(e) = embedded {
        e.finish();
    }
    let rep = match result {
        Ok(r) => r,
        Err(LoadError::Client(e)) => {
            live.sink.end::<()>(None, Some(&e.to_string()));
            return Ok(client_error_exit(e, "load", json.as_deref(), &cfg));
        }
        Err(LoadError::Config(e)) => return Ok(usage(e.to_string())),
    };
    if verbosity >= 1 {
        netrig::report::print_load(&rep);
    } else {
        for e in &rep.errors {
            eprintln!("netrig: {e}");
        }
    }
    let code: Exit = run_code(false, !rep.errors.is_empty(), rep.interrupted);
    let failure = rep.errors.first().cloned();
    live.sink.end(Some(&rep), failure.as_deref());
    Ok(finish(
        code,
        json.as_deref(),
        |p| netrig::report::write_envelope(p, "load", &cfg, Some(&rep), failure.as_deref()),
        Vec::new(),
    ))
}
