use super::*;

/// The value of the sample `name{labels}` in `text` (labels exactly as
/// rendered, empty for none).
fn value(text: &str, name: &str, labels: &str) -> Option<String> {
    let key = match labels.is_empty() {
        true => format!("{name} "),
        false => format!("{name}{{{labels}}} "),
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map(str::to_string)
}

fn gauges() -> Gauges {
    Gauges {
        tests: 3,
        connections: 7,
        resident_bytes: 12345,
        threads: 9,
        limits: Limits::default(),
    }
}

#[test]
fn every_code_has_its_own_place_and_name() {
    for (i, c) in CODES.iter().enumerate() {
        assert_eq!(code_index(*c), i, "{c:?}");
    }
    let mut names: Vec<String> = CODES.iter().map(|c| code_name(*c)).collect();
    assert_eq!(
        code_name(ErrorCode::LimitTestsPerClient),
        "limit_tests_per_client"
    );
    names.sort();
    names.dedup();
    assert_eq!(names.len(), CODES.len());
}

#[test]
fn kinds_have_their_own_places_and_names() {
    for (i, k) in Kind::ALL.iter().enumerate() {
        assert_eq!(k.index(), i);
    }
    let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(
        names,
        [
            "tcp", "udp", "rr_tcp", "rr_udp", "rr_sctp", "iperf3", "iperf2"
        ]
    );
}

#[test]
fn refusals_count_under_their_code() {
    let m = Metrics::default();
    m.refused(ErrorCode::LimitTests);
    m.refused(ErrorCode::LimitTests);
    m.refused(ErrorCode::Auth);
    let t = m.render(&gauges(), false);
    let v = |r: &str| value(&t, "netrig_refusals_total", &format!("reason=\"{r}\""));
    assert_eq!(v("limit_tests").as_deref(), Some("2"));
    assert_eq!(v("auth").as_deref(), Some("1"));
    assert_eq!(v("malformed").as_deref(), Some("0"));
    // A code no server sends is not shown.
    assert_eq!(v("other"), None);
}

#[test]
fn an_ended_test_counts_its_bytes_errors_and_duration() {
    let m = Metrics::default();
    m.started(Kind::Tcp);
    m.started(Kind::Tcp);
    m.started(Kind::Udp);
    let moved = Moved {
        sent: 1000,
        received: 2000,
        network_errors: 3,
        data_errors: 4,
    };
    m.ended(Kind::Tcp, Duration::from_millis(1500), moved);
    let t = m.render(&gauges(), false);
    let tcp = "kind=\"tcp\"";
    let v = |name: &str, l: &str| value(&t, name, l).unwrap_or_default();
    assert_eq!(v("netrig_tests_started_total", tcp), "2");
    assert_eq!(v("netrig_tests_started_total", "kind=\"udp\""), "1");
    assert_eq!(v("netrig_sent_bytes_total", tcp), "1000");
    assert_eq!(v("netrig_received_bytes_total", tcp), "2000");
    assert_eq!(v("netrig_network_errors_total", tcp), "3");
    assert_eq!(v("netrig_data_errors_total", tcp), "4");
    assert_eq!(v("netrig_sent_bytes_total", "kind=\"udp\""), "0");
    assert_eq!(v("netrig_active_tests_by_kind", tcp), "1");
    assert_eq!(v("netrig_active_tests_by_kind", "kind=\"udp\""), "1");
    assert_eq!(v("netrig_test_duration_seconds_count", tcp), "1");
    assert_eq!(v("netrig_test_duration_seconds_sum", tcp), "1.5");
    // 1.5 s falls in the bucket up to 2.5 s, and every one above it.
    let bucket = |le: &str| {
        v(
            "netrig_test_duration_seconds_bucket",
            &format!("{tcp},le=\"{le}\""),
        )
    };
    assert_eq!(bucket("1.0"), "0");
    assert_eq!(bucket("2.5"), "1");
    assert_eq!(bucket("3600.0"), "1");
    assert_eq!(bucket("+Inf"), "1");
}

#[test]
fn a_duration_on_a_bucket_bound_counts_in_that_bucket_and_beyond_the_last_in_inf() {
    let m = Metrics::default();
    m.ended(Kind::Udp, Duration::from_secs(1), Moved::default());
    m.ended(Kind::Udp, Duration::from_secs(7200), Moved::default());
    let t = m.render(&gauges(), true);
    let bucket = |le: &str| {
        let l = format!("kind=\"udp\",le=\"{le}\"");
        value(&t, "netrig_test_duration_seconds_bucket", &l).unwrap_or_default()
    };
    assert_eq!(bucket("0.5"), "0");
    assert_eq!(bucket("1.0"), "1");
    assert_eq!(bucket("3600.0"), "1");
    assert_eq!(bucket("+Inf"), "2");
    let count = value(&t, "netrig_test_duration_seconds_count", "kind=\"udp\"");
    assert_eq!(count.as_deref(), Some("2"));
    let sum = value(&t, "netrig_test_duration_seconds_sum", "kind=\"udp\"");
    assert_eq!(sum.as_deref(), Some("7201.0"));
}

#[test]
fn the_gauges_and_limits_are_shown_in_base_units() {
    let m = Metrics::default();
    let t = m.render(&gauges(), false);
    let v = |name: &str| value(&t, name, "").unwrap_or_default();
    assert_eq!(v("netrig_active_tests"), "3");
    assert_eq!(v("netrig_open_connections"), "7");
    assert_eq!(v("netrig_process_resident_memory_bytes"), "12345");
    assert_eq!(v("netrig_process_threads"), "9");
    // 40 Gbit/s is 5e9 bytes a second; an hour is 3600 s.
    assert_eq!(v("netrig_limit_rate_bytes_per_second"), "5000000000.0");
    assert_eq!(v("netrig_limit_duration_seconds"), "3600.0");
    assert_eq!(v("netrig_limit_tests"), "64.0");
    assert_eq!(v("netrig_limit_tests_per_client"), "4.0");
    assert_eq!(v("netrig_limit_connections"), "8192.0");
    assert_eq!(v("netrig_limit_connections_per_client"), "256.0");
    assert_eq!(
        v("netrig_limit_memory_bytes"),
        format!("{:?}", (1u64 << 30) as f64)
    );
    assert_eq!(
        v("netrig_limit_bytes"),
        format!("{:?}", (4u64 << 40) as f64)
    );
}

#[test]
fn the_two_formats_name_families_as_each_expects() {
    let m = Metrics::default();
    let prom = m.render(&gauges(), false);
    let om = m.render(&gauges(), true);
    assert!(prom.contains("# TYPE netrig_refusals_total counter\n"));
    assert!(om.contains("# TYPE netrig_refusals counter\n"));
    assert!(prom.contains("# TYPE netrig_build_info gauge\n"));
    assert!(om.contains("# TYPE netrig_build info\n"));
    assert!(om.contains("# UNIT netrig_test_duration_seconds seconds\n"));
    assert!(om.contains("# UNIT netrig_sent_bytes bytes\n"));
    assert!(!prom.contains("# UNIT"));
    assert!(om.ends_with("# EOF\n"));
    assert!(!prom.contains("# EOF"));
    let info = format!(
        "netrig_build_info{{version=\"{}\",protocol=\"{PROTOCOL_VERSION}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert!(prom.contains(&info) && om.contains(&info));
}

#[test]
fn a_scrape_gets_openmetrics_only_when_it_accepts_it() {
    let prom = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n";
    assert_eq!(
        parse_request(prom),
        Request::Metrics {
            openmetrics: false,
            head: false
        }
    );
    let om = b"GET /metrics?x=1 HTTP/1.1\r\naccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n";
    assert_eq!(
        parse_request(om),
        Request::Metrics {
            openmetrics: true,
            head: false
        }
    );
    let head = b"HEAD /metrics HTTP/1.0\r\n\r\n";
    assert_eq!(
        parse_request(head),
        Request::Metrics {
            openmetrics: false,
            head: true
        }
    );
    assert_eq!(parse_request(b"GET / HTTP/1.1\r\n\r\n"), Request::NotFound);
    assert_eq!(
        parse_request(b"POST /metrics HTTP/1.1\r\n\r\n"),
        Request::BadMethod
    );
    assert_eq!(parse_request(b"GET /metrics\r\n\r\n"), Request::Bad);
    assert_eq!(parse_request(b"\xff\xfe\r\n\r\n"), Request::Bad);
    assert_eq!(parse_request(b"GET /metrics FTP/1\r\n\r\n"), Request::Bad);
}

#[test]
fn a_session_summary_moves_its_bytes_and_errors_each_to_its_own_counter() {
    let s = crate::protocol::proto::SessionSummary {
        bytes_sent: 11,
        bytes_received: 22,
        network_errors: 3,
        data_errors: 4,
        requests: 99,
        ..Default::default()
    };
    let m = Moved::from(&s);
    assert_eq!(
        (m.sent, m.received, m.network_errors, m.data_errors),
        (11, 22, 3, 4)
    );
}
