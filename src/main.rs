//! The `netrig` binary: parses the command line (see [`cmd`]), runs the
//! subcommand and turns its outcome into an exit code. All measuring lives
//! in the library.

use clap::error::{ContextKind, ContextValue};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

mod cmd;

#[derive(Parser)]
#[command(
    name = "netrig",
    version,
    // A flag given twice takes its last value, so scripts can append overrides.
    args_override_self = true,
    about = "Measure what a network path really delivers: goodput, latency, loss, reliability — every byte verified."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a server. It needs no test options: each client describes its test.
    Serve(cmd::serve::ServeArgs),
    /// TCP goodput and reliability test (ctsTraffic semantics). Without a target,
    /// runs against an embedded server on loopback.
    Tcp(cmd::tcp::TcpArgs),
    /// Paced UDP stream: loss, duplicates, reordering, one-way delay, jitter;
    /// or a ctsTraffic-style media stream with --media. Without a target, runs
    /// against an embedded server on loopback.
    Udp(cmd::udp::UdpArgs),
    /// Request/response round-trip latency (ACE perf tests) over TCP, UDP or SCTP;
    /// --spectrum runs a range of power-of-two request sizes.
    Rr(cmd::rr::RrArgs),
    /// Ping over UDP: one line per probe with round trip and one-way estimates.
    Ping(cmd::ping::PingArgs),
    /// Connect/request/response/close churn: connections per second and
    /// handshake and transaction time percentiles.
    Crr(cmd::crr::CrrArgs),
    /// Latency under load: idle, download, upload and both at once, with
    /// UDP, new-connection and load-connection probes throughout; the
    /// bufferbloat per phase and the responsiveness in RPM (IETF IPPM draft).
    Load(cmd::load::LoadArgs),
    /// A self-contained HTML report with charts from netrig JSON results;
    /// several results of one kind are overlaid for comparison.
    Report(cmd::report::ReportArgs),
    /// Results of one test kind from many clients or runs as one: counts
    /// added, intervals on one wall-clock grid, exact percentiles.
    Merge(cmd::merge::MergeArgs),
    /// UDP rate sweep (bwdelaytester -s): ramp the rate linearly, then print a
    /// table per offered-rate bin and the congestion analysis.
    Sweep(cmd::sweep::SweepArgs),
    /// Analyse a saved profile/sweep result (--json file): rate bins,
    /// congestion point, shaping or policing, committed burst.
    Analyze(cmd::analyze::AnalyzeArgs),
    /// User-space impairment relay for TCP and UDP (no netem needed): loss,
    /// duplication, reordering, delay and jitter, rate limits, corruption,
    /// resets; seeded, and logs exactly what it did.
    Relay(cmd::relay::RelayArgs),
    /// Mesh monitor node: answers its peers' probes, probes k of them
    /// (rendezvous hashing over a DNS name's or a file's peer list) and
    /// serves loss, round trip and one-way delays per peer on /metrics.
    Mesh(cmd::mesh::MeshArgs),
    /// Print shell completions (bash, zsh, fish, …) for netrig.
    Completions(cmd::docs::CompletionsArgs),
    /// Print the manual page, or write one per subcommand with --dir.
    Man(cmd::docs::ManArgs),
}

fn main() -> ExitCode {
    let args = cmd::legacy_args(std::env::args_os());
    let parsed = cmd::version::command(Cli::command(), &args)
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            // An iperf3 flag from habit: netrig's spelling, not clap's guess.
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && let Some(ContextValue::String(flag)) = e.get(ContextKind::InvalidArg)
                && let Some(hint) = cmd::habits::hint(cmd::habits::subcommand(&args), flag)
            {
                eprintln!("netrig: unexpected argument '{flag}': {hint}");
                return ExitCode::from(cmd::Exit::Usage);
            }
            // clap's message, with netrig's one prefix for errors.
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            eprint!("netrig: {text}");
            return ExitCode::from(cmd::Exit::Usage);
        }
        Err(e) => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    // A measuring command stops gracefully on Ctrl-C from its first line
    // of output on: the handler is in place before anything is printed (a
    // signal between the start event and the run's own call to it killed
    // the process with nothing written).
    if matches!(
        cli.cmd,
        Cmd::Serve(_)
            | Cmd::Tcp(_)
            | Cmd::Udp(_)
            | Cmd::Rr(_)
            | Cmd::Ping(_)
            | Cmd::Crr(_)
            | Cmd::Load(_)
            | Cmd::Relay(_)
            | Cmd::Mesh(_)
    ) {
        cmd::interrupt_flag();
    }
    let r = match cli.cmd {
        Cmd::Serve(a) => cmd::serve::run(a),
        Cmd::Tcp(a) => cmd::tcp::run(a),
        Cmd::Udp(a) => cmd::udp::run(a),
        Cmd::Rr(a) => cmd::rr::run(a),
        Cmd::Ping(a) => cmd::ping::run(a),
        Cmd::Crr(a) => cmd::crr::run(a),
        Cmd::Load(a) => cmd::load::run(a),
        Cmd::Report(a) => cmd::report::run(a),
        Cmd::Merge(a) => cmd::merge::run(a),
        Cmd::Sweep(a) => cmd::sweep::run(a),
        Cmd::Analyze(a) => cmd::analyze::run(a),
        Cmd::Relay(a) => cmd::relay::run(a),
        Cmd::Mesh(a) => cmd::mesh::run(a),
        Cmd::Completions(a) => cmd::docs::completions(a, Cli::command()),
        Cmd::Man(a) => cmd::docs::man(a, Cli::command()),
    };
    r.unwrap_or_else(|e| {
        eprintln!("netrig: {e:#}");
        ExitCode::from(cmd::Exit::Fatal)
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap checks every flag for clashes (two flags on one short letter,
    /// say, as shared flag groups are added) only when asked.
    #[test]
    fn the_command_line_has_no_clashing_flags() {
        super::Cli::command().debug_assert();
    }
}
