//! `netrig relay`: flags to [`netrig::relay::RelayConfig`], a periodic and a
//! final account of what was injected.

use anyhow::{Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use super::sock::{dscp, tos};
use super::{Json, Verbosity, duration, positive_duration, rate, size};
use netrig::protocol::relay::impair::ImpairSpec;
use netrig::protocol::units;
use netrig::relay::{DirCounts, Relay, RelayConfig, RelayCounts, RelayLimits};

/// Which directions get the impairments.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    /// Client to server and server to client.
    Both,
    /// Client to server only.
    Up,
    /// Server to client only.
    Down,
}

#[derive(Args)]
pub struct RelayArgs {
    /// Address to listen on, TCP and UDP on the same port (e.g. 127.0.0.1:5000, [::]:5000).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Where to forward: a netrig server, or any TCP/UDP service (HOST:PORT).
    #[arg(long, value_name = "HOST:PORT")]
    to: String,
    /// Relay TCP only.
    #[arg(long, conflicts_with = "udp_only")]
    tcp_only: bool,
    /// Relay UDP only.
    #[arg(long)]
    udp_only: bool,
    /// Directions to impair.
    #[arg(long, value_enum, default_value_t = Which::Both)]
    dir: Which,
    /// Drop datagrams at random with this probability (1% or 0.01).
    #[arg(long, default_value = "0", value_parser = probability)]
    loss: f64,
    /// Drop every Nth datagram.
    #[arg(long, default_value_t = 0, value_name = "N")]
    drop_every: u64,
    /// Duplicate datagrams at random with this probability.
    #[arg(long, default_value = "0", value_parser = probability)]
    dup: f64,
    /// Duplicate every Nth datagram.
    #[arg(long, default_value_t = 0, value_name = "N")]
    dup_every: u64,
    /// Hold datagrams back behind the next one with this probability.
    #[arg(long, default_value = "0", value_parser = probability)]
    reorder: f64,
    /// Hold back every Nth datagram.
    #[arg(long, default_value_t = 0, value_name = "N")]
    reorder_every: u64,
    /// Flip a payload bit: per datagram (UDP) or per byte (TCP data) with this probability.
    #[arg(long, default_value = "0", value_parser = probability)]
    corrupt: f64,
    /// Flip a payload bit in every Nth datagram (UDP) or every Nth data byte (TCP).
    #[arg(long, default_value_t = 0, value_name = "N")]
    corrupt_every: u64,
    /// Fixed delay added each way it applies.
    #[arg(long, default_value = "0", value_parser = duration)]
    delay: Duration,
    /// Uniform jitter ± this around the delay (order is kept).
    #[arg(long, default_value = "0", value_parser = duration)]
    jitter: Duration,
    /// Token-bucket rate (e.g. 50Mbit) for each direction of the whole relay,
    /// all TCP connections and UDP flows together, as a link's; shapes unless --police.
    #[arg(long, value_parser = rate)]
    rate: Option<u64>,
    /// Give each TCP connection and UDP flow its own --rate instead.
    #[arg(long, requires = "rate")]
    rate_per_flow: bool,
    /// Token-bucket depth (default: 10 ms at the rate, at least 3000 bytes).
    #[arg(long, value_parser = size)]
    burst: Option<u64>,
    /// Drop what exceeds the rate (policing) instead of queueing it (UDP; TCP is always shaped).
    #[arg(long)]
    police: bool,
    /// Shaping: drop a datagram that would wait longer than this.
    #[arg(long, default_value = "100ms", value_parser = duration)]
    queue_limit: Duration,
    /// Remark what is sent on with this DSCP (a name such as CS1, EF, or
    /// 0-63; ECN bits cleared), as a router that rewrites or bleaches
    /// marking would.
    #[arg(long, value_name = "DSCP", value_parser = dscp, conflicts_with = "remark_tos")]
    remark: Option<u8>,
    /// Rewrite the whole TOS byte of what is sent on (decimal or 0x hex;
    /// 0x03 marks CE on an ECN-capable UDP stream).
    #[arg(long, value_name = "TOS", value_parser = tos)]
    remark_tos: Option<u8>,
    /// Reset each TCP connection after this many data bytes in an impaired direction.
    #[arg(long, value_parser = size)]
    reset_after: Option<u64>,
    /// Seed for the random choices (default: random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Write every impairment to this CSV file.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Reset TCP connections beyond this many open at once.
    #[arg(long, default_value_t = RelayLimits::default().max_conns, value_parser = clap::value_parser!(u64).range(1..))]
    max_conns: u64,
    /// Reset TCP connections from one client address beyond this many open at once.
    #[arg(long, default_value_t = RelayLimits::default().max_conns_per_addr, value_parser = clap::value_parser!(u64).range(1..))]
    max_conns_per_addr: u64,
    /// Drop datagrams from new client addresses beyond this many UDP flows.
    #[arg(long, default_value_t = RelayLimits::default().max_flows, value_parser = clap::value_parser!(u64).range(1..))]
    max_flows: u64,
    /// Close a connection or flow that carried nothing for this long (a
    /// control connection counts its UDP test's datagrams).
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    idle_timeout: Duration,
    /// Most memory all the relay's queues hold together (TCP and UDP delay
    /// lines, as allocated); beyond it TCP is read no further and datagrams
    /// are dropped and logged as queue drops.
    #[arg(long, default_value = "256M", value_parser = size)]
    max_queue: u64,
    #[command(flatten)]
    json: Json,
    /// Stop after this long (default: until Ctrl-C).
    #[arg(short = 't', long = "time", visible_alias = "duration", value_parser = duration)]
    time: Option<Duration>,
    /// Print the counts every interval.
    #[arg(short = 'i', long, value_parser = duration)]
    interval: Option<Duration>,
    /// -q: only the final counts; default: also each connection and flow.
    #[command(flatten)]
    verbosity: Verbosity,
    #[command(flatten)]
    console: super::ConsoleArgs,
}

fn probability(s: &str) -> Result<f64, units::UnitError> {
    units::parse_probability(s)
}

impl RelayArgs {
    /// The flags turned into the relay's config, in this one place, for
    /// the upstream `to` (resolved); the relay checks its impairments when
    /// it binds.
    fn to_config(&self, to: std::net::SocketAddr) -> RelayConfig {
        let spec = self.spec();
        let none = ImpairSpec::default();
        let (up, down) = match self.dir {
            Which::Both => (spec.clone(), spec),
            Which::Up => (spec, none),
            Which::Down => (none, spec),
        };
        RelayConfig {
            listen: self.listen,
            to,
            up,
            down,
            seed: self.seed.unwrap_or_else(rand::random),
            tcp: !self.udp_only,
            udp: !self.tcp_only,
            log: self.log.clone(),
            keep_events: false,
            verbosity: self.verbosity.level().min(1),
            rate_per_flow: self.rate_per_flow,
            limits: RelayLimits {
                max_conns: self.max_conns,
                max_conns_per_addr: self.max_conns_per_addr,
                max_flows: self.max_flows,
                idle_timeout: self.idle_timeout,
                max_queue_bytes: self.max_queue,
            },
        }
    }

    /// The impairments of one direction, as the flags give them.
    fn spec(&self) -> ImpairSpec {
        let rate = self.rate.unwrap_or(0);
        ImpairSpec {
            loss: self.loss,
            drop_every: self.drop_every,
            dup: self.dup,
            dup_every: self.dup_every,
            reorder: self.reorder,
            reorder_every: self.reorder_every,
            corrupt: self.corrupt,
            corrupt_every: self.corrupt_every,
            delay_ns: self.delay.as_nanos() as u64,
            jitter_ns: self.jitter.as_nanos() as u64,
            rate_bps: rate,
            burst: self.burst.unwrap_or((rate / 800).max(3000)),
            shape: !self.police,
            queue_limit_ns: self.queue_limit.as_nanos() as u64,
            reset_after: self.reset_after,
            remark_tos: self.remark.or(self.remark_tos),
        }
    }
}

fn line(name: &str, c: &DirCounts) -> String {
    format!(
        "{name:<5} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>14} {:>8} {:>6}",
        c.datagrams,
        c.forwarded,
        c.lost,
        c.policed,
        c.queue_dropped,
        c.duplicated,
        c.reordered,
        c.corrupted,
        c.stream_bytes,
        c.stream_corrupted,
        c.resets
    )
}

fn print_counts(c: &RelayCounts) {
    netrig::out!(
        "{:<5} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>14} {:>8} {:>6}",
        "dir",
        "datagrams",
        "forwarded",
        "lost",
        "policed",
        "queue",
        "dup",
        "reorder",
        "corrupt",
        "tcp bytes",
        "flipped",
        "resets"
    );
    netrig::out!("{}", line("up", &c.up));
    netrig::out!("{}", line("down", &c.down));
    netrig::out!(
        "{} TCP connections, {} UDP flows; refused {} connections and {} datagrams of new flows over the caps; {} closed idle",
        c.tcp_connections,
        c.udp_flows,
        c.tcp_refused,
        c.udp_refused,
        c.idle_closed
    );
}

/// Runs `netrig relay`.
pub fn run(a: RelayArgs) -> Result<ExitCode> {
    let json = a.json.path();
    if let Err(c) = super::check_outputs([
        ("--log", a.log.as_deref()),
        ("--json", json.as_deref()),
        ("--logfile", a.console.logfile()),
        ("--json-stream", a.json.stream_path()),
    ])
    .and_then(|_| a.console.apply())
    {
        return Ok(c);
    }
    let to = netrig::net::resolve(&a.to, netrig::net::DEFAULT_PORT)
        .with_context(|| format!("cannot resolve --to {}", a.to))?
        .into_iter()
        .next()
        .with_context(|| format!("--to {} has no address", a.to))?;
    let cfg = a.to_config(to);
    let (seed, up_spec, down_spec) = (cfg.seed, cfg.up.clone(), cfg.down.clone());
    let relay = Relay::bind(cfg)
        // The error says its cause once; anyhow's chain would repeat it.
        .map_err(|e| anyhow::anyhow!("cannot start the relay: {e}"))?;
    let h = relay.handle();
    netrig::out!(
        "netrig relay {} -> {to} ({}), seed {seed}",
        h.addr,
        match (a.tcp_only, a.udp_only) {
            (true, _) => "TCP",
            (_, true) => "UDP",
            _ => "TCP and UDP",
        }
    );
    let config = serde_json::json!({
        "listen": h.addr, "to": to, "seed": seed, "up": up_spec, "down": down_spec,
        "tcp": !a.udp_only, "udp": !a.tcp_only, "rate_per_flow": a.rate_per_flow,
        "max_conns": a.max_conns, "max_conns_per_addr": a.max_conns_per_addr,
        "max_flows": a.max_flows,
        "idle_timeout_s": a.idle_timeout.as_secs_f64(), "max_queue_bytes": a.max_queue,
    });
    let mut sink = netrig::report::StreamSink::open(a.json.stream_path(), "relay", &config)
        .context("cannot open --json-stream")?;
    let flag = super::interrupt_flag();
    let runner = std::thread::spawn(move || relay.run());
    let start = Instant::now();
    let mut next = a.interval;
    while !flag.load(SeqCst) && a.time.is_none_or(|d| start.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(20));
        if let (Some(n), Some(i)) = (next, a.interval)
            && start.elapsed() >= n
        {
            let counts = h.counts();
            print_counts(&counts);
            sink.event("interval", &counts);
            next = Some(n + i);
        }
    }
    h.stop();
    let _ = runner.join();
    let counts = h.counts();
    print_counts(&counts);
    sink.end(Some(&counts), None);
    let code = if flag.load(SeqCst) {
        super::Exit::Interrupted
    } else {
        super::Exit::Ok
    };
    Ok(super::finish(
        code,
        json.as_deref(),
        |p| netrig::report::write_envelope(p, "relay", &config, Some(&counts), None),
        sink.take_errors(),
    ))
}
