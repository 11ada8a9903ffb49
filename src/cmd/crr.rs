//! `netrig crr`: connect/request/response/close churn, every transaction a
//! verified netrig TCP connection.

use anyhow::Result;
use clap::Args;
use std::process::ExitCode;
use std::time::Duration;

use super::{
    Json, KeyArg, Setup, Target, Verbosity, client_error_exit, finish, interrupt_flag,
    positive_duration, run_code, size, target_or_embedded, usage,
};
use netrig::tcp::client;

#[derive(Args)]
pub struct CrrArgs {
    #[command(flatten)]
    pub to: Target,
    /// Request size in bytes.
    #[arg(short = 'l', long = "length", alias = "size", short_alias = 's', default_value = "64", value_parser = size)]
    length: u64,
    /// Reply size in bytes.
    #[arg(long, default_value = "2", value_parser = size)]
    reply: u64,
    /// Transactions (connections) in total; default 10000, or, with
    /// --time, as many as fit in it.
    #[arg(
        short = 'n',
        long = "count",
        visible_alias = "transactions",
        value_parser = super::count
    )]
    count: Option<u64>,
    /// Transactions in flight at once.
    #[arg(
        short = 'P',
        long = "parallel",
        visible_alias = "connections",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    parallel: u32,
    /// Run for this long: without -n, as many transactions as fit; with
    /// it, whichever ends first.
    #[arg(short = 't', long = "time", visible_alias = "time-limit", value_parser = positive_duration)]
    time: Option<Duration>,
    /// Ask the server for its own status rows, every --interval, and put
    /// them in the JSON (`server_output`; iperf3 --get-server-output).
    #[arg(long)]
    get_server_output: bool,
    /// The server's status rows' interval (with --get-server-output).
    #[arg(short = 'i', long, default_value = "1s", value_parser = super::interval, requires = "get_server_output")]
    interval: Duration,
    #[command(flatten)]
    bind: super::Sources,
    #[command(flatten)]
    json: Json,
    #[command(flatten)]
    verbosity: Verbosity,
    #[command(flatten)]
    console: super::ConsoleArgs,
    #[command(flatten)]
    start: super::StartAt,
    #[command(flatten)]
    key: KeyArg,
    #[command(flatten)]
    sock: super::sock::TcpFlags,
    #[command(flatten)]
    connect: super::ConnectTimeout,
}

/// Transactions without -n or -t.
const DEFAULT_COUNT: u64 = 10_000;

/// The crr collector, with a progress bar that moves as transactions end.
struct Counted {
    inner: netrig::rr::crr::CrrCollector,
    progress: super::progress::Progress,
    /// Said with the first transaction's end: a server that cannot be
    /// reached gets its one error line alone.
    banner: Option<String>,
}

impl client::Observer for Counted {
    fn interval(&mut self, row: &netrig::protocol::stats::IntervalRow) {
        self.inner.interval(row);
    }

    fn connection(&mut self, rec: &client::ConnectionRecord) {
        if let Some(b) = self.banner.take() {
            netrig::out!("{b}");
        }
        self.progress.inc();
        self.inner.connection(rec);
    }
}

impl CrrArgs {
    /// The flags turned into the engine's config (the TCP engine with one
    /// request and reply per connection), in this one place, and checked
    /// (`TcpClientConfig::validate`); its targets are empty until the
    /// embedded server (if none was given) has started. A config that
    /// cannot run is a usage error, already reported.
    fn to_config(
        &self,
        key: Option<netrig::protocol::auth::Key>,
    ) -> Result<netrig::tcp::config::TcpClientConfig, ExitCode> {
        if self.length == 0 || self.length > 1 << 20 || self.reply > 1 << 20 {
            return Err(usage("--length must be 1..=1M and --reply at most 1M"));
        }
        let mut cfg = netrig::rr::crr::config(
            String::new(),
            self.to.port,
            self.length as u32,
            self.reply as u32,
            self.count.unwrap_or(DEFAULT_COUNT),
            self.parallel,
        );
        cfg.targets.clear();
        cfg.time_limit = self.time;
        if self.count.is_none() && self.time.is_some() {
            // The deadline ends the run, not a count it would finish early.
            cfg.iterations = None;
        }
        cfg.connect_timeout = Some(self.connect.connect_timeout);
        if self.get_server_output {
            cfg.server_output = true;
            cfg.interval = Some(self.interval);
        }
        cfg.bind = self.bind.addrs();
        cfg.sock = self.sock.opts();
        cfg.start_at = self.start.at;
        cfg.bind_dev = self.sock.ip.bind_dev.clone();
        cfg.local_ports = self.sock.cport;
        cfg.key = key;
        cfg.validate().map_err(usage)?;
        Ok(cfg)
    }
}

pub fn run(a: CrrArgs) -> Result<ExitCode> {
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
    cfg.targets = vec![target];
    let count = a.count.unwrap_or(DEFAULT_COUNT);
    let mut col = Counted {
        banner: (verbosity >= 1).then(|| netrig::report::crr_banner(a.length, a.reply, a.parallel)),
        inner: netrig::rr::crr::CrrCollector::default(),
        progress: super::progress::Progress::new(
            count,
            "transactions",
            if cfg.iterations.is_some() {
                verbosity
            } else {
                0
            },
        ),
    };
    let mut sink = match netrig::report::StreamSink::open(stream.as_deref(), "crr", &cfg) {
        Ok(s) => s,
        Err(e) => return Ok(usage(format!("cannot open --json-stream: {e}"))),
    };
    let interrupt = interrupt_flag();
    let result = client::run(cfg.clone(), interrupt, &mut col);
    col.progress.finish();
    let col = col.inner;
    if let Some(e) = embedded {
        e.finish();
    }
    let run = match result {
        Ok(r) => r,
        Err(e) => {
            sink.end::<()>(None, Some(&e.to_string()));
            return Ok(client_error_exit(e, "crr", json.as_deref(), &cfg));
        }
    };
    let mut rep = col.report(run.duration_secs);
    rep.server_output = run.server_output;
    rep.interrupted = run.interrupted;
    rep.start_unix = Some(run.start_unix);
    if verbosity >= 1 {
        netrig::report::print_crr(&rep, col.first_failure.as_deref());
    } else if let Some(f) = &col.first_failure {
        // Quiet mode still says why the exit code is not 0.
        eprintln!("netrig: {} transactions failed; first: {f}", rep.failed);
    }
    let code = run_code(run.totals.data_errors > 0, rep.failed > 0, run.interrupted);
    let failure = col
        .first_failure
        .as_ref()
        .map(|f| format!("{} transactions failed; first: {f}", rep.failed));
    sink.end(Some(&rep), failure.as_deref());
    Ok(finish(
        code,
        json.as_deref(),
        |p| netrig::report::write_envelope(p, "crr", &cfg, Some(&rep), failure.as_deref()),
        sink.take_errors(),
    ))
}
