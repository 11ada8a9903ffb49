//! `netrig tcp --iperf3 HOST[:PORT]` and `netrig udp --iperf3 …`: a test
//! against an unmodified `iperf3 -s`, reported as netrig reports its own
//! (console, `--json`, `--html`, `--json-iperf3`), with the peer marked as
//! iperf3 in the envelope's configuration and its own figures in the result.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Exit, finish, interrupt_flag, run_code};
use netrig::iperf3_client::{self as run, Outcome, RunError, Tick, report};
use netrig::protocol::iperf3::client::{ClientError, params_json};
use netrig::protocol::iperf3::{Mode, Params, Proto};
use netrig::protocol::units::{format_bits_per_sec, format_bytes};

/// iperf3's port (`PORT`, 5201).
pub const IPERF3_PORT: u16 = 5201;

/// What both commands pass.
pub struct Common<'a> {
    pub server: &'a str,
    pub connect_timeout: Duration,
    pub interval: Duration,
    pub json: Option<PathBuf>,
    pub verbosity: u8,
}

/// An option an iperf3 server cannot be given: one line, exit 6.
pub fn refuse(flag: &str, why: &str) -> ExitCode {
    eprintln!("netrig: {flag} cannot be used with --iperf3: {why}");
    ExitCode::from(Exit::Unsupported)
}

/// What every `--iperf3` run is refused alike, then the command's own list:
/// the first option that is set, refused by name (exit 6).
pub fn first_refused(
    key: bool,
    omit: bool,
    start_at: bool,
    json_stream: bool,
    own: &[(bool, &str, &str)],
) -> Option<ExitCode> {
    let common = [
        (
            key,
            "--key",
            "iperf3 clients do not prove a key to the server",
        ),
        (omit, "-O", "not carried yet"),
        (start_at, "--start-at", "iperf3 servers start at once"),
        (json_stream, "--json-stream", "not written for iperf3 runs"),
    ];
    common
        .iter()
        .chain(own)
        .find(|r| r.0)
        .map(|(_, flag, why)| refuse(flag, why))
}

/// `-t` in iperf3's unit, whole seconds; `default` when not given.
pub fn whole_seconds(time: Option<Duration>, default: u64) -> Result<u64, ExitCode> {
    match time {
        Some(t) if t.subsec_nanos() != 0 => Err(refuse(
            "-t with a fraction of a second",
            "iperf3 counts whole seconds",
        )),
        Some(t) => Ok(t.as_secs()),
        None => Ok(default),
    }
}

/// The parameters of a netrig client's test: `proto` and `mode`, nothing
/// else set yet (no `-O`, `-k`, token; netrig's version).
pub fn params(proto: Proto, mode: Mode) -> Params {
    Params {
        proto,
        mode,
        parallel: 1,
        time: 0,
        omit: 0,
        num: 0,
        blockcount: 0,
        len: 0,
        window: 0,
        bandwidth: 0,
        get_server_output: false,
        udp_counters_64bit: false,
        nodelay: false,
        congestion: None,
        mss: 0,
        authtoken: false,
        client_version: Some(format!("netrig {}", env!("CARGO_PKG_VERSION"))),
    }
}

/// The exit code for a run that got no results.
fn error_code(e: &RunError) -> Exit {
    match e {
        RunError::Protocol {
            source: ClientError::Busy | ClientError::ServerError { .. },
            ..
        } => Exit::Refused,
        _ => Exit::NetworkError,
    }
}

/// The envelope's configuration: the fields netrig's own runs have that
/// readers use (targets, port, connections, pattern, …), the peer, and the
/// parameters as sent.
fn config(c: &Common, addr: Option<SocketAddr>, p: &Params) -> Value {
    let params: Value = serde_json::from_slice(&params_json(p)).unwrap_or(Value::Null);
    let pattern = match p.mode {
        Mode::ClientSends => "push",
        Mode::Reverse => "pull",
        Mode::Bidir => "duplex",
    };
    let duration_ms = p.time * 1000;
    match p.proto {
        Proto::Tcp => json!({
            "peer": "iperf3",
            "targets": [c.server],
            "port": addr.map_or(IPERF3_PORT, |a| a.port()),
            "connections": p.parallel,
            "pattern": pattern,
            "transfer": p.num,
            "verify": "connection",
            "buffer": {"fixed": p.len},
            "time_limit": (p.time > 0).then_some(duration_ms),
            "iperf3_parameters": params,
        }),
        Proto::Udp => json!({
            "peer": "iperf3",
            "target": c.server,
            "streams": p.parallel,
            "spec": {
                "reverse": p.mode == Mode::Reverse,
                "size": p.len,
                "gap_ps": gap_ps(p.bandwidth, p.len),
                "duration_ms": duration_ms,
                "rate_bps": p.bandwidth,
            },
            "iperf3_parameters": params,
        }),
    }
}

/// The gap between datagrams at `bps`, picoseconds.
fn gap_ps(bps: u64, len: u32) -> u64 {
    if bps == 0 {
        0
    } else {
        (u128::from(len) * 8 * 1_000_000_000_000 / u128::from(bps)) as u64
    }
}

/// Resolves, runs, and on failure says why (stderr, JSON) with its code.
fn start(c: &Common, p: &Params, test: &str) -> Result<(SocketAddr, Outcome), ExitCode> {
    let fail = |addr: Option<SocketAddr>, code: Exit, why: String| {
        eprintln!("netrig: {why}");
        let cfg = config(c, addr, p);
        Err(finish(
            code,
            c.json.as_deref(),
            |path| netrig::report::write_envelope(path, test, &cfg, None::<&()>, Some(&why)),
            Vec::new(),
        ))
    };
    let addr = match netrig::net::resolve(c.server, IPERF3_PORT) {
        Ok(a) if !a.is_empty() => a[0],
        Ok(_) => {
            return fail(
                None,
                Exit::NetworkError,
                format!("{} has no address", c.server),
            );
        }
        Err(e) => {
            return fail(
                None,
                Exit::NetworkError,
                format!("cannot resolve {}: {e}", c.server),
            );
        }
    };
    if c.verbosity >= 1 {
        netrig::out!("Testing against iperf3 server {addr}: {}", describe(p));
    }
    let cfg = run::Config {
        server: addr,
        params: p.clone(),
        connect_timeout: c.connect_timeout,
        interval: c.interval,
    };
    let verbose = c.verbosity >= 1;
    let mut prev: Option<Tick> = None;
    let mut show = |t: &Tick| {
        if verbose {
            let (s0, r0, t0) = prev.map_or((0, 0, 0.0), |x| (x.sent, x.received, x.secs));
            let span = (t.secs - t0).max(1e-9);
            netrig::out!(
                "{:7.2} s  sent {:>12}  received {:>12}",
                t.secs,
                format_bits_per_sec((t.sent - s0) as f64 * 8.0 / span),
                format_bits_per_sec((t.received - r0) as f64 * 8.0 / span)
            );
        }
        prev = Some(*t);
    };
    match run::run(&cfg, &interrupt_flag(), &mut show) {
        Ok(o) => Ok((addr, o)),
        Err(e) => fail(Some(addr), error_code(&e), e.to_string()),
    }
}

fn describe(p: &Params) -> String {
    let dir = match p.mode {
        Mode::ClientSends => "client sends",
        Mode::Reverse => "server sends (-R)",
        Mode::Bidir => "both ways (--bidir)",
    };
    let bound = match (p.time, p.num) {
        (0, n) => format!("{n} bytes"),
        (t, _) => format!("{t} s"),
    };
    let rate = if p.bandwidth > 0 {
        format!(", {} a stream", format_bits_per_sec(p.bandwidth as f64))
    } else {
        String::new()
    };
    format!(
        "{} stream(s), {dir}, {bound}, {} bytes a write{rate}",
        p.parallel, p.len
    )
}

/// Whether this end's counts equal the server's, stream by stream; the
/// lines saying so.
fn agreement(o: &Outcome, addr: SocketAddr) -> (bool, Vec<String>) {
    let (got, sent) = report::server_totals(o);
    let mine_sent: u64 = o.streams.iter().filter(|s| s.sends).map(|s| s.bytes).sum();
    let mine_got: u64 = o.streams.iter().filter(|s| !s.sends).map(|s| s.bytes).sum();
    let mut lines = vec![format!(
        "iperf3 server {addr} (its own count): received {got} bytes ({}), sent {sent} bytes ({})",
        format_bytes(got),
        format_bytes(sent)
    )];
    let complete = report::complete(&o.server, o);
    let same = complete && got == mine_sent && sent == mine_got;
    if !complete {
        lines.push("netrig: warning: the iperf3 server's results lack a stream".into());
    } else if !same {
        lines.push(format!(
            "netrig: warning: the counts differ: this end sent {mine_sent} and received {mine_got} bytes"
        ));
    }
    (same, lines)
}

pub fn tcp(c: Common, p: Params) -> ExitCode {
    let (addr, o) = match start(&c, &p, "tcp") {
        Ok(x) => x,
        Err(code) => return code,
    };
    let rep = report::tcp(&o, addr);
    let (_, lines) = agreement(&o, addr);
    if c.verbosity >= 1 {
        netrig::report::print_summary(&rep);
    }
    print_agreement(&c, &lines, &o);
    let cfg = config(&c, Some(addr), &p);
    let result = report::WithPeer {
        report: rep,
        iperf3: report::side(&o, false),
    };
    finish(
        run_code(false, false, o.interrupted),
        c.json.as_deref(),
        |path| netrig::report::write_envelope(path, "tcp", &cfg, Some(&result), None),
        Vec::new(),
    )
}

fn print_agreement(c: &Common, lines: &[String], o: &Outcome) {
    for l in lines {
        if l.starts_with("netrig: warning") {
            eprintln!("{l}");
        } else if c.verbosity >= 1 {
            netrig::out!("{l}");
        }
    }
    if let (Some(t), true) = (&o.server.server_output_text, c.verbosity >= 1) {
        netrig::out!("Server output:\n{t}");
    }
}

pub fn udp(c: Common, p: Params) -> ExitCode {
    let (addr, o) = match start(&c, &p, "udp") {
        Ok(x) => x,
        Err(code) => return code,
    };
    let rep = report::udp(&o, &p, addr);
    let (_, lines) = agreement(&o, addr);
    if c.verbosity >= 1
        && let (Some(t), Some(s)) = (&rep.totals, &rep.sender)
    {
        let expected = t.sent.unwrap_or(0);
        let pct = if expected > 0 {
            100.0 * t.lost as f64 / expected as f64
        } else {
            0.0
        };
        let who = if p.mode == Mode::Reverse {
            "this end"
        } else {
            "the iperf3 server"
        };
        netrig::out!();
        netrig::out!(
            "Sent {} datagrams, {} bytes in {:.2} s ({})",
            s.packets,
            s.bytes,
            s.duration_secs,
            format_bits_per_sec(s.achieved_bps)
        );
        netrig::out!(
            "Received at {who}: {} bytes, lost {}/{} datagrams ({pct:.3} %), jitter {:.3} ms",
            t.bytes,
            t.lost,
            expected,
            t.jitter_us / 1e3
        );
    }
    print_agreement(&c, &lines, &o);
    let cfg = config(&c, Some(addr), &p);
    let result = report::WithPeer {
        report: rep,
        iperf3: report::side(&o, true),
    };
    finish(
        run_code(false, false, o.interrupted),
        c.json.as_deref(),
        |path| netrig::report::write_envelope(path, "udp", &cfg, Some(&result), None),
        Vec::new(),
    )
}
