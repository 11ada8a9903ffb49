//! The pure parts of a load run: the live line, the ramp, the seconds, the
//! probes' samples and plan, and the report, from figures in memory.

use super::*;

fn config() -> LoadConfig {
    LoadConfig {
        target: "127.0.0.1".into(),
        port: 5201,
        key: None,
        idle_secs: 2.0,
        phase_secs: 5.0,
        phases: vec![Phase::Download, Phase::Upload],
        probe_interval_ms: 100,
        max_connections: 4,
        sock: Default::default(),
        bind_dev: None,
        connect_timeout: None,
        interval_secs: 1,
    }
}

fn samples(v: &[(f64, ProbeKind, Option<f64>)]) -> Samples {
    Arc::new(Mutex::new(v.iter().map(|&(t, k, m)| ms(t, k, m)).collect()))
}

fn row(time_slice: f64, send_bps: u64, recv_bps: u64, rtt_us: Option<f64>) -> IntervalRow {
    IntervalRow {
        time_slice,
        send_bps,
        recv_bps,
        in_flight: 0,
        completed: 0,
        net_errors: 0,
        data_errors: 0,
        retransmits: 0,
        rtt_us,
        cwnd: None,
        omitted: false,
        span_secs: 0.0,
    }
}

fn probe(seq: u64, rtt_us: Option<f64>) -> Probe {
    Probe {
        seq,
        rtt_us,
        up_us: rtt_us.map(|r| r * 0.25),
        down_us: rtt_us.map(|r| r * 0.75),
        split_error_us: None,
        late: false,
        duplicate: false,
        warmup: false,
    }
}

#[test]
fn validate_names_the_first_setting_out_of_range() {
    assert_eq!(config().validate(), Ok(()));
    let with = |f: fn(&mut LoadConfig)| {
        let mut c = config();
        f(&mut c);
        c.validate()
    };
    use LoadConfigError::*;
    assert_eq!(with(|c| c.phases.clear()), Err(NoPhases));
    assert_eq!(with(|c| c.idle_secs = 0.99), Err(IdleTooShort));
    assert_eq!(with(|c| c.idle_secs = 1.0), Ok(()));
    assert_eq!(with(|c| c.phase_secs = 3.99), Err(PhaseTooShort(4)));
    assert_eq!(with(|c| c.phase_secs = 4.0), Ok(()));
    assert_eq!(with(|c| c.probe_interval_ms = 9), Err(Interval));
    assert_eq!(with(|c| c.probe_interval_ms = 10), Ok(()));
    assert_eq!(with(|c| c.probe_interval_ms = 1000), Ok(()));
    assert_eq!(with(|c| c.probe_interval_ms = 1001), Err(Interval));
    assert_eq!(with(|c| c.max_connections = 0), Err(Connections));
    assert_eq!(with(|c| c.max_connections = 1), Ok(()));
    assert_eq!(with(|c| c.max_connections = 64), Ok(()));
    assert_eq!(with(|c| c.max_connections = 65), Err(Connections));
}

#[test]
fn load_connections_count_goodput_and_the_sender_samples_its_rtt() {
    let s = samples(&[]);
    let mut o = LoadObs::new(Arc::clone(&s), 10.0, IoPattern::Push);
    o.interval(&row(0.5, 200, 1000, Some(2500.0)));
    o.interval(&row(1.5, 400, 3000, None));
    // A row out of order adds nothing.
    o.interval(&row(1.0, 999, 999, None));
    assert_eq!(o.down.load(SeqCst), 500 + 3000);
    assert_eq!(o.up.load(SeqCst), 100 + 400);
    assert_eq!(
        *s.lock().unwrap(),
        [ms(10.5, ProbeKind::SelfRtt, Some(2.5))]
    );
    // Downloading, this end receives: its RTT is not the sender's.
    let s = samples(&[]);
    let mut o = LoadObs::new(Arc::clone(&s), 10.0, IoPattern::Pull);
    o.interval(&row(0.5, 0, 1000, Some(2500.0)));
    assert!(s.lock().unwrap().is_empty());
    assert_eq!(o.down.load(SeqCst), 500);
}

#[test]
fn the_live_median_is_of_the_lines_own_span() {
    use ProbeKind::*;
    let s = samples(&[
        (2.0, Udp, Some(0.2)),
        (3.0, Udp, Some(0.5)),
        (5.0, Udp, Some(10.0)),
        (4.0, Udp, Some(1.0)),
        (4.5, Udp, None),
        (4.5, TcpConnect, Some(0.1)),
        (4.2, Udp, Some(3.0)),
        (5.5, Udp, Some(50.0)),
    ]);
    // (3, 5]: 1, 3 and 10 ms.
    assert_eq!(last_second(&s, 5.0, 2.0, Udp), Some(3.0));
    assert_eq!(last_second(&s, 5.0, 2.0, TcpConnect), Some(0.1));
    assert_eq!(last_second(&s, 5.0, 2.0, SelfRtt), None);
}

#[test]
fn a_live_line_goes_out_every_interval_and_at_a_phase_end() {
    let mut acc = LiveAcc::default();
    assert_eq!(acc.add(100.0, 10.0, 3, false), None);
    assert_eq!(acc.add(200.0, 20.0, 3, false), None);
    assert_eq!(acc.add(300.0, 30.0, 3, false), Some((3.0, 600.0, 60.0)));
    assert_eq!(acc, LiveAcc::default());
    // The phase's last second closes a short line.
    assert_eq!(acc.add(100.0, 10.0, 3, false), None);
    assert_eq!(acc.add(50.0, 5.0, 3, true), Some((2.0, 150.0, 15.0)));
    // -i 0 is every second.
    assert_eq!(acc.add(7.0, 1.0, 0, false), Some((1.0, 7.0, 1.0)));
    assert_eq!(acc.add(8.0, 2.0, 1, false), Some((1.0, 8.0, 2.0)));
}

#[test]
fn a_live_line_has_its_spans_rates_and_medians() {
    use ProbeKind::*;
    let s = samples(&[
        (7.5, Udp, Some(4.0)),
        (7.0, TcpConnect, Some(6.0)),
        (6.5, SelfRtt, Some(8.0)),
        (5.5, Udp, Some(99.0)),
    ]);
    let l = live_line(&s, 8.0, Phase::Upload, (2.0, 1000.0, 3000.0), 3);
    assert_eq!(
        l,
        Second {
            t: 8.0,
            phase: Phase::Upload,
            down_bps: 4000.0,
            up_bps: 12000.0,
            connections: 3,
            udp_ms: Some(4.0),
            connect_ms: Some(6.0),
            self_ms: Some(8.0),
        }
    );
}

#[test]
fn a_phase_ticks_each_whole_second_to_its_end() {
    let t: Vec<_> = ticks(2.3, 5.0).collect();
    assert_eq!(t, [(3.0, false), (4.0, false), (5.0, true)]);
    let t: Vec<_> = ticks(2.0, 4.5).collect();
    assert_eq!(t, [(3.0, false), (4.0, true)]);
    // An end a hair before a whole second still has that second.
    let t: Vec<_> = ticks(0.0, 3.0 - 1e-12).collect();
    assert_eq!(t, [(1.0, false), (2.0, false), (3.0, true)]);
    // An end a hair short of that: the second before it is not the last.
    let t: Vec<_> = ticks(0.0, 3.0 - 1e-9).collect();
    assert_eq!(t, [(1.0, false), (2.0, false), (3.0, true)]);
    assert_eq!(ticks(5.2, 5.9).count(), 0);
}

#[test]
fn the_ramp_adds_a_connection_a_second_until_goodput_is_stable() {
    let mut r = Ramp::new(8);
    // Each second moves 100 bytes in all, split differently each time.
    let mut total = (0, 0);
    let mut out = Vec::new();
    for (open, (d, u)) in [
        (1, (90, 10)),
        (2, (10, 90)),
        (3, (50, 50)),
        (4, (99, 1)),
        (4, (500, 0)),
    ] {
        total = (total.0 + d, total.1 + u);
        out.push(r.second(total, open));
    }
    assert_eq!(
        out,
        [
            ((90, 10), Some(2)),
            ((10, 90), Some(3)),
            ((50, 50), Some(4)),
            ((99, 1), None),
            ((500, 0), None),
        ]
    );
    assert!(r.saturated);
    // The cap stops the ramp before stability does.
    let mut r = Ramp::new(2);
    assert_eq!(r.second((100, 0), 1), ((100, 0), Some(2)));
    assert_eq!(r.second((300, 0), 2), ((200, 0), None));
    assert!(!r.saturated);
}

#[test]
fn each_phase_loads_its_direction_for_the_time_left() {
    let cfg = config();
    let cap = Arc::new(AtomicU64::new(1));
    let c = load_config(&cfg, Phase::Download, 10.0, 12.25, &cap);
    assert_eq!(c.pattern, IoPattern::Pull);
    assert_eq!(c.time_limit, Some(Duration::from_millis(2250)));
    assert_eq!(c.interval, Some(Duration::from_millis(100)));
    assert_eq!(c.connections, 4);
    // Load connections run for the phase's time, never ending on a size.
    assert_eq!((c.transfer, c.iterations), (1 << 40, None));
    assert!(c.server_output);
    assert!(Arc::ptr_eq(c.open_cap.as_ref().unwrap(), &cap));
    let c = load_config(&cfg, Phase::Upload, 12.0, 12.2, &cap);
    assert_eq!(c.pattern, IoPattern::Push);
    assert_eq!(c.time_limit, Some(Duration::from_millis(500)));
    assert_eq!(
        load_config(&cfg, Phase::Both, 0.0, 1.0, &cap).pattern,
        IoPattern::Duplex
    );
}

#[test]
fn the_servers_rows_give_the_upload_and_the_downloads_rtt() {
    use crate::tcp::client::ServerRows;
    let server = |rows| ServerRows {
        server: None,
        rows,
        truncated: false,
    };
    let out = [
        server(vec![
            row(0.5, 0, 1000, Some(3000.0)),
            row(2.0, 0, 2000, None),
        ]),
        server(vec![row(1.0, 0, 500, Some(1500.0)), row(0.5, 0, 999, None)]),
    ];
    let (up, selfs) = server_side(&out, IoPattern::Pull, 20.0);
    assert_eq!(up, Some(500 + 3000 + 500));
    assert_eq!(
        selfs,
        [
            ms(20.5, ProbeKind::SelfRtt, Some(3.0)),
            ms(21.0, ProbeKind::SelfRtt, Some(1.5)),
        ]
    );
    let (up, selfs) = server_side(&out, IoPattern::Push, 20.0);
    assert_eq!(up, Some(4000));
    assert!(selfs.is_empty());
    assert_eq!(server_side(&[], IoPattern::Push, 0.0), (None, Vec::new()));
}

#[test]
fn udp_probes_cover_the_schedule_at_the_probe_interval() {
    let mut cfg = config();
    cfg.probe_interval_ms = 300;
    let p = probe_plan(&cfg, 10.0);
    // Probes at 0, 0.3, ..., 9.9 s.
    assert_eq!(p.iterations, 34);
    assert_eq!(p.interval, Some(Duration::from_millis(300)));
    assert_eq!(p.timeout, Some(PROBE_TIMEOUT));
    assert_eq!(p.transport, Transport::Udp);
    assert_eq!(probe_plan(&cfg, 9.9).iterations, 34);
}

#[test]
fn the_first_probe_back_tells_when_probe_zero_left() {
    assert_eq!(
        since_first_probe(&probe(3, Some(2500.0)), 100.0),
        Duration::from_secs_f64(0.0025 + 0.3)
    );
    // Lost: told when its timeout passed.
    assert_eq!(
        since_first_probe(&probe(2, None), 50.0),
        Duration::from_secs_f64(1.0 + 0.1)
    );
}

#[test]
fn a_udp_probe_is_placed_at_its_send_time_once() {
    assert_eq!(
        udp_sample(&probe(7, Some(2000.0)), 250.0),
        Some(Sample {
            t: 1.75,
            kind: ProbeKind::Udp,
            ms: Some(2.0),
            up_ms: Some(0.5),
            down_ms: Some(1.5),
        })
    );
    let lost = udp_sample(&probe(4, None), 250.0).unwrap();
    assert_eq!((lost.t, lost.ms), (1.0, None));
    let late = Probe {
        late: true,
        ..probe(4, Some(1.0))
    };
    let duplicate = Probe {
        duplicate: true,
        ..probe(4, Some(1.0))
    };
    assert_eq!(udp_sample(&late, 250.0), None);
    assert_eq!(udp_sample(&duplicate, 250.0), None);
}

fn udp_report(lost_up: u64, error: Option<&str>) -> crate::rr::client::RrReport {
    let mut r = crate::rr::client::RrReport::empty(&probe_plan(&config(), 12.0));
    r.lost_up = Some(lost_up);
    r.lost_down = Some(lost_up + 1);
    r.error = error.map(str::to_string);
    r
}

fn stats() -> crate::protocol::rr::hist::LatencyStats {
    crate::protocol::rr::hist::LatencyStats::new(0.0, 1e6, 10, 1)
}

#[test]
fn the_report_sorts_the_probes_and_keeps_the_udp_losses() {
    let schedule = Schedule::new(2.0, &[Phase::Download], 5.0);
    let probes = vec![
        ms(3.0, ProbeKind::Udp, Some(30.0)),
        ms(1.0, ProbeKind::Udp, Some(10.0)),
    ];
    let loads = [
        PhaseLoad::default(),
        PhaseLoad {
            down_bytes: 5_000_000,
            ..Default::default()
        },
    ];
    let r = report(
        schedule.clone(),
        probes,
        &loads,
        None,
        Some(Ok((udp_report(3, None), stats()))),
        vec!["Download load: boom".into()],
    );
    assert_eq!(r.schedule, schedule);
    assert_eq!(r.probes.iter().map(|p| p.t).collect::<Vec<_>>(), [1.0, 3.0]);
    assert_eq!((r.udp_lost_up, r.udp_lost_down), (Some(3), Some(4)));
    assert!(!r.interrupted);
    assert_eq!(r.phases[1].down_bps, 8e6);
    assert_eq!(r.phases[1].increase_ms, Some(20.0));
    assert_eq!(r.verdict, model::verdict(&r.phases));
    assert!(!r.verdict.starts_with("interrupted"), "{}", r.verdict);
    assert_eq!(r.errors, ["Download load: boom"]);
}

#[test]
fn a_stopped_run_is_cut_where_it_stopped_and_says_so() {
    let schedule = Schedule::new(2.0, &[Phase::Download, Phase::Upload], 5.0);
    let r = report(
        schedule.clone(),
        Vec::new(),
        &[PhaseLoad::default(); 2],
        Some(4.5),
        Some(Ok((udp_report(0, Some("reset")), stats()))),
        Vec::new(),
    );
    assert!(r.interrupted);
    assert_eq!(
        r.schedule.phases,
        [(Phase::Idle, 0.0, 2.0), (Phase::Download, 2.0, 4.5)]
    );
    assert!(r.phases[1].interrupted && !r.phases[0].interrupted);
    assert!(
        r.verdict
            .starts_with("interrupted before the end of the schedule; "),
        "{}",
        r.verdict
    );
    assert_eq!(r.errors, ["UDP probes: reset"]);
    // Stopped exactly at a phase's end: nothing was cut short.
    let r = report(schedule, Vec::new(), &[], Some(7.0), None, Vec::new());
    assert!(r.interrupted && !r.phases[1].interrupted);
    assert_eq!((r.udp_lost_up, r.errors.len()), (None, 0));
    let r = report(
        Schedule::new(2.0, &[Phase::Upload], 5.0),
        Vec::new(),
        &[],
        None,
        Some(Err(ClientError::Control {
            target: "x".into(),
            detail: "gone".into(),
        })),
        Vec::new(),
    );
    assert_eq!(r.errors, ["UDP probes: control connection to x: gone"]);
    assert_eq!(r.udp_lost_up, None);
}
