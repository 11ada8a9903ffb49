//! `netrig load`'s output: the banner, one line per second, the table of
//! phases with their latency and responsiveness, and the verdict.

use crate::load::run::{LoadConfig, LoadReport, Second};
use crate::protocol::load::model::{KindStats, PhaseReport};
use crate::protocol::units::format_bits_per_sec;

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// The line before the run.
pub fn load_banner(cfg: &LoadConfig, target: &str) -> String {
    let phases: Vec<String> = cfg
        .phases
        .iter()
        .map(|p| format!("{p:?}").to_lowercase())
        .collect();
    format!(
        "Latency under load to {target}: idle {:.0} s, then {} for {:.0} s each (up to {} TCP connections); probes every {} ms: UDP round trips, new TCP connections, the load connections' RTT",
        cfg.idle_secs,
        phases.join(", "),
        cfg.phase_secs,
        cfg.max_connections,
        cfg.probe_interval_ms
    )
}

/// Headers of the per-second lines.
pub const LOAD_LIVE_HEADERS: &str =
    "     t phase              down           up conns   udp ms  connect ms   self ms";

/// One second of the run.
pub fn load_live_line(s: &Second) -> String {
    format!(
        "{:6.1} {:<8} {:>14} {:>12} {:>5} {:>8} {:>11} {:>9}",
        s.t,
        format!("{:?}", s.phase).to_lowercase(),
        format_bits_per_sec(s.down_bps),
        format_bits_per_sec(s.up_bps),
        s.connections,
        ms(s.udp_ms),
        ms(s.connect_ms),
        match (s.self_ms, s.phase) {
            // Downloading, the server sends on the load connections: their
            // RTT is the server's TCP_INFO, which comes with its rows at the
            // end of the phase.
            (None, crate::protocol::load::model::Phase::Download) => "at end".into(),
            (v, _) => ms(v),
        }
    )
}

fn kind(k: &KindStats) -> String {
    format!("{}/{}/{}", ms(k.p50_ms), ms(k.p90_ms), ms(k.p99_ms))
}

fn phase_line(p: &PhaseReport) -> String {
    let rpm = p
        .responsiveness
        .map_or_else(|| "-".into(), |r| format!("{:.0}", r.rpm));
    format!(
        "{:<8} {:>14} {:>14} {:>5} {:>22} {:>22} {:>22} {:>8} {:>7}",
        format!("{:?}", p.phase).to_lowercase(),
        format_bits_per_sec(p.down_bps),
        format_bits_per_sec(p.up_bps),
        p.connections,
        kind(&p.udp),
        kind(&p.tcp_connect),
        kind(&p.self_rtt),
        p.increase_ms
            .map_or_else(|| "-".into(), crate::protocol::load::model::signed_ms),
        rpm
    )
}

/// The summary after the run.
pub fn load_lines(rep: &LoadReport) -> Vec<String> {
    let mut lines = Vec::new();
    push_line!(lines, "");
    push_line!(
        lines,
        "{:<8} {:>14} {:>14} {:>5} {:>22} {:>22} {:>22} {:>8} {:>7}",
        "Phase",
        "Down",
        "Up",
        "Conns",
        "UDP RTT p50/p90/p99",
        "Connect p50/p90/p99",
        "Self RTT p50/p90/p99",
        "+ms",
        "RPM"
    );
    for p in &rep.phases {
        push_line!(lines, "{}", phase_line(p));
    }
    if let Some(p) = rep.phases.iter().find(|p| p.interrupted) {
        push_line!(
            lines,
            "({:?} was cut short by the stop after {:.1} s: no responsiveness for it)",
            p.phase,
            p.end - p.start
        );
    }
    let one_way: Vec<String> = rep
        .phases
        .iter()
        .map(|p| {
            format!(
                "{} {}/{}",
                format!("{:?}", p.phase).to_lowercase(),
                ms(p.udp_up_p50_ms),
                ms(p.udp_down_p50_ms)
            )
        })
        .collect();
    push_line!(lines, "UDP one-way p50, up/down ms: {}", one_way.join(", "));
    for p in rep.phases.iter().filter(|p| p.responsiveness.is_some()) {
        if let Some(r) = p.responsiveness {
            let f = r.from_ms;
            push_line!(
                lines,
                "{:?}: responsiveness {:.0} RPM (new connections {:.0} from connect {:.2} ms and request {:.2} ms, load connections {} from their RTT {} ms; trimmed means, draft-ietf-ippm-responsiveness-06, TCP-only, last {} s){}",
                p.phase,
                r.rpm,
                r.foreign_rpm,
                f.connect,
                f.request,
                r.loaded_rpm
                    .map_or_else(|| "-".into(), |l| format!("{l:.0}")),
                ms(f.load),
                crate::protocol::load::model::MAD,
                if p.saturated || p.phase == crate::protocol::load::model::Phase::Idle {
                    ""
                } else {
                    "; goodput never stabilised"
                }
            );
        }
    }
    let (up, down) = (rep.udp_lost_up, rep.udp_lost_down);
    if let (Some(u), Some(d)) = (up, down) {
        let sent: u64 = rep.phases.iter().map(|p| p.udp.count + p.udp.lost).sum();
        push_line!(
            lines,
            "UDP probes: {sent} sent, lost {u} on the way up, {d} on the way down"
        );
    }
    for e in &rep.errors {
        push_line!(lines, "Error: {e}");
    }
    push_line!(lines, "Verdict: {}", rep.verdict);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::load::model::Phase;

    fn second(phase: Phase, self_ms: Option<f64>) -> Second {
        Second {
            t: 3.0,
            phase,
            down_bps: 1e9,
            up_bps: 0.0,
            connections: 2,
            udp_ms: Some(0.05),
            connect_ms: Some(0.1),
            self_ms,
        }
    }

    #[test]
    fn the_live_self_rtt_says_when_it_comes_at_the_end() {
        let l = load_live_line(&second(Phase::Download, None));
        assert!(l.ends_with("   at end"), "{l:?}");
        let l = load_live_line(&second(Phase::Upload, None));
        assert!(l.ends_with("        -"), "{l:?}");
        let l = load_live_line(&second(Phase::Both, Some(1.234)));
        assert!(l.ends_with("     1.23"), "{l:?}");
        assert_eq!(l.len(), LOAD_LIVE_HEADERS.len(), "{l:?}");
    }

    fn stats(count: u64, lost: u64, p50: f64) -> KindStats {
        KindStats {
            count,
            lost,
            p50_ms: Some(p50),
            p90_ms: Some(p50 * 2.0),
            p99_ms: None,
            hdr: None,
        }
    }

    fn phase(phase: Phase, increase_ms: Option<f64>) -> PhaseReport {
        PhaseReport {
            phase,
            start: 2.0,
            end: 2.75,
            down_bps: 8e6,
            up_bps: 1e3,
            connections: 4,
            saturated: false,
            udp: stats(30, 2, 1.0),
            udp_up_p50_ms: Some(0.4),
            udp_down_p50_ms: None,
            tcp_connect: stats(10, 0, 0.5),
            tcp_request: stats(10, 0, 0.75),
            self_rtt: stats(5, 0, 2.25),
            increase_ms,
            responsiveness: None,
            interrupted: false,
        }
    }

    fn report(phases: Vec<PhaseReport>) -> LoadReport {
        LoadReport {
            schedule: crate::protocol::load::model::Schedule::new(1.0, &[Phase::Download], 1.0),
            phases,
            verdict: "fine".into(),
            udp_lost_up: Some(3),
            udp_lost_down: Some(4),
            offset: None,
            interrupted: false,
            errors: vec!["boom".into()],
            probes: Vec::new(),
        }
    }

    #[test]
    fn the_summary_gives_each_phase_its_rates_latencies_and_increase() {
        let mut down = phase(Phase::Download, Some(1.25));
        down.responsiveness = Some(crate::protocol::load::model::Responsiveness {
            foreign_rpm: 1500.4,
            loaded_rpm: Some(900.0),
            rpm: 1200.0,
            from_ms: crate::protocol::load::model::RpmInputs {
                connect: 0.5,
                request: 0.75,
                load: Some(2.0),
            },
        });
        let mut idle = phase(Phase::Idle, None);
        idle.interrupted = true;
        let l = load_lines(&report(vec![idle, down]));
        assert_eq!(l[0], "");
        assert!(
            l[1].starts_with("Phase ") && l[1].ends_with("+ms     RPM"),
            "{l:?}"
        );
        assert_eq!(
            l[2],
            "idle        8.00 Mbit/s    1.00 kbit/s     4            1.00/2.00/-            0.50/1.00/-            2.25/4.50/-        -       -"
        );
        assert!(l[3].starts_with("download    8.00 Mbit/s"), "{l:?}");
        assert!(l[3].ends_with("    +1.2    1200"), "{l:?}");
        assert_eq!(
            l[4],
            "(Idle was cut short by the stop after 0.8 s: no responsiveness for it)"
        );
        assert_eq!(
            l[5],
            "UDP one-way p50, up/down ms: idle 0.40/-, download 0.40/-"
        );
        assert_eq!(
            l[6],
            "Download: responsiveness 1200 RPM (new connections 1500 from connect 0.50 ms and request 0.75 ms, load connections 900 from their RTT 2.00 ms; trimmed means, draft-ietf-ippm-responsiveness-06, TCP-only, last 4 s); goodput never stabilised"
        );
        // Probes sent: each phase's received and lost.
        assert_eq!(
            l[7],
            "UDP probes: 64 sent, lost 3 on the way up, 4 on the way down"
        );
        assert_eq!(l[8], "Error: boom");
        assert_eq!(l[9], "Verdict: fine");
        assert_eq!(l.len(), 10);
    }

    #[test]
    fn the_banner_names_the_phases_and_their_lengths() {
        let cfg = LoadConfig {
            target: "h".into(),
            port: 4794,
            key: None,
            idle_secs: 5.0,
            phase_secs: 10.0,
            phases: vec![Phase::Download, Phase::Both],
            probe_interval_ms: 100,
            max_connections: 16,
            sock: Default::default(),
            bind_dev: None,
            connect_timeout: None,
            interval_secs: 1,
        };
        assert_eq!(
            load_banner(&cfg, "h:4794"),
            "Latency under load to h:4794: idle 5 s, then download, both for 10 s each (up to 16 TCP connections); probes every 100 ms: UDP round trips, new TCP connections, the load connections' RTT"
        );
    }
}
