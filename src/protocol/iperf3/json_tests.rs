use super::*;

fn tcp_doc(pattern: &str) -> Value {
    json!({
        "netrig": 1, "version": "0.1.0", "test": "tcp", "title": "t",
        "config": {"targets": ["10.0.0.1"], "port": 4794, "connections": 2, "pattern": pattern,
                   "buffer": {"fixed": 65536}, "time_limit": 2000},
        "result": {
            "start_unix": 1700000000.75, "duration_secs": 2.0,
            "totals": {"sent": 3000, "received": 0},
            "servers": [["10.0.0.1:4794", {"bytes_sent": 0, "bytes_received": 2900}]],
            "tcp_info": {"retransmits": 7}, "server_tcp_info": {"retransmits": 1},
            "intervals": [
                {"TimeSlice": 0.5, "SendBps": 1000, "RecvBps": 0, "Retransmits": 2},
                {"TimeSlice": 2.0, "SendBps": 2000, "RecvBps": 0, "Retransmits": 5, "Omitted": true}
            ],
            "connection_progress": [
                {"index": 0, "points": [{"secs": 0.25, "sent": 0, "received": 0}, {"secs": 2.0, "sent": 1200, "received": 0}]}
            ]
        }
    })
}

#[test]
fn tcp_sums_are_the_senders_and_the_receivers_counts() {
    let d = from_envelope(&tcp_doc("push")).unwrap();
    let e = &d["end"];
    assert_eq!(e["sum_sent"]["bytes"], 3000);
    assert_eq!(e["sum_sent"]["seconds"], 2.0);
    assert_eq!(e["sum_sent"]["bits_per_second"], 12000.0);
    assert_eq!(e["sum_sent"]["retransmits"], 8);
    assert_eq!(e["sum_sent"]["sender"], true);
    assert_eq!(e["sum_received"]["bytes"], 2900);
    assert_eq!(e["sum_received"]["bits_per_second"], 11600.0);
    assert!(e.get("sum").is_none(), "iperf3 writes end.sum for UDP only");
    assert!(
        e.get("cpu_utilization_percent").is_none(),
        "not measured, not claimed"
    );
    assert_eq!(d["intervals"][0]["sum"]["bytes"], 500);
    assert_eq!(d["intervals"][1]["sum"]["start"], 0.5);
    assert_eq!(d["intervals"][1]["sum"]["seconds"], 1.5);
    assert_eq!(d["intervals"][1]["sum"]["bytes"], 3000);
    assert_eq!(d["intervals"][1]["sum"]["retransmits"], 5);
    assert_eq!(d["intervals"][1]["sum"]["omitted"], true);
    assert_eq!(d["intervals"][0]["streams"][0]["bytes"], 500);
    let s = &e["streams"][0];
    assert_eq!(s["sender"]["bytes"], 1200);
    assert_eq!(s["receiver"]["seconds"], 1.75);
    assert_eq!(d["start"]["timestamp"]["timesecs"], 1700000000u64);
    assert_eq!(d["start"]["connecting_to"]["host"], "10.0.0.1");
    assert_eq!(d["start"]["test_start"]["num_streams"], 2);
    assert_eq!(d["start"]["test_start"]["duration"], 2);
    assert_eq!(d["start"]["test_start"]["reverse"], 0);
    assert_eq!(d["title"], "t");

    // Reverse: the server sends, the client receives.
    let mut pull = tcp_doc("pull");
    pull["result"]["totals"] = json!({"sent": 0, "received": 2800});
    pull["result"]["servers"][0][1] = json!({"bytes_sent": 2810, "bytes_received": 0});
    let d = from_envelope(&pull).unwrap();
    assert_eq!(d["end"]["sum_sent"]["bytes"], 2810);
    assert_eq!(d["end"]["sum_received"]["bytes"], 2800);
    assert_eq!(d["end"]["sum_sent"]["sender"], false);
    assert_eq!(d["start"]["test_start"]["reverse"], 1);
    // A server that never reported: each side's count stands for its peer's.
    pull["result"]["servers"][0][1] = Value::Null;
    let d = from_envelope(&pull).unwrap();
    assert_eq!(d["end"]["sum_sent"]["bytes"], 2800);
}

#[test]
fn udp_loss_and_jitter_are_the_receivers() {
    let doc = json!({
        "netrig": 1, "version": "0.1.0", "test": "udp",
        "config": {"target": "h", "port": 1, "spec": {"reverse": false, "size": 1000, "duration_ms": 1000}},
        "result": {
            "start_unix": 5.0, "duration_secs": 1.0,
            "sender": {"packets": 100, "bytes": 100000, "duration_secs": 0.5},
            "totals": {"sent": 100, "unique": 96, "bytes": 96000, "lost": 4, "reordered": 3, "jitter_us": 1500.0},
            "intervals": [{"time_slice": 1.0, "bytes": 96000, "packets": 96}]
        }
    });
    let d = from_envelope(&doc).unwrap();
    let e = &d["end"];
    assert_eq!(e["sum"]["lost_percent"], 4.0);
    assert_eq!(e["sum"]["lost_packets"], 4);
    assert_eq!(e["sum"]["packets"], 100);
    assert_eq!(e["sum"]["jitter_ms"], 1.5);
    assert_eq!(e["sum"]["bytes"], 100000);
    assert_eq!(e["sum"]["bits_per_second"], 1_600_000.0);
    assert_eq!(e["sum_sent"]["packets"], 100);
    assert_eq!(e["sum_sent"]["lost_packets"], 0);
    assert_eq!(e["sum_received"]["bytes"], 96000);
    assert_eq!(e["sum_received"]["bits_per_second"], 768_000.0);
    assert_eq!(e["streams"][0]["udp"]["out_of_order"], 3);
    assert_eq!(d["intervals"][0]["sum"]["packets"], 96);
    assert_eq!(d["start"]["test_start"]["protocol"], "UDP");
    assert_eq!(d["start"]["test_start"]["blksize"], 1000);
    // No sender count: the expected datagrams are those seen and lost.
    let mut nosent = doc.clone();
    nosent["result"]["totals"]["sent"] = Value::Null;
    nosent["result"]["totals"]["lost"] = json!(0);
    let d = from_envelope(&nosent).unwrap();
    assert_eq!(d["end"]["sum"]["packets"], 96);
    assert_eq!(d["end"]["sum"]["lost_percent"], 0.0);
}

#[test]
fn cpu_is_copied_only_when_measured() {
    let mut doc = tcp_doc("push");
    doc["result"]["cpu"] = json!({
        "local": {"total_percent": 12.5, "user_percent": 2.5, "system_percent": 10.0},
        "remote": {"total_percent": 3.0, "user_percent": 1.0, "system_percent": 2.0}
    });
    let d = from_envelope(&doc).unwrap();
    assert_eq!(
        d["end"]["cpu_utilization_percent"],
        json!({"host_total": 12.5, "host_user": 2.5, "host_system": 10.0,
               "remote_total": 3.0, "remote_user": 1.0, "remote_system": 2.0})
    );
    // The server did not say: no remote figures, not zeros.
    doc["result"]["cpu"]["remote"] = Value::Null;
    let d = from_envelope(&doc).unwrap();
    assert_eq!(
        d["end"]["cpu_utilization_percent"],
        json!({"host_total": 12.5, "host_user": 2.5, "host_system": 10.0})
    );
}

#[test]
fn other_kinds_and_failed_runs_are_errors() {
    let rr = json!({"test": "rr", "result": {}});
    assert_eq!(from_envelope(&rr), Err(Iperf3Error::Kind("rr".into())));
    let failed = json!({"test": "tcp", "result": null, "error": "refused"});
    let d = from_envelope(&failed).unwrap();
    assert_eq!(d["error"], "refused");
    assert!(d["end"].as_object().unwrap().is_empty());
    let shapeless = json!({"test": "udp", "config": {}, "result": {"bins": []}});
    assert!(matches!(
        from_envelope(&shapeless),
        Err(Iperf3Error::Shape(_))
    ));
}

/// A stream of a multi-stream udp result: `index`, direction, its own
/// start, receiver and sender seconds, datagrams sent, received (1000 B
/// each), lost, jitter µs, and two interval rows of (end s, datagrams).
#[allow(clippy::too_many_arguments)]
fn udp_stream(
    index: u64,
    reverse: bool,
    start: f64,
    (secs, sender_secs): (f64, f64),
    (sent, got, lost): (u64, u64, u64),
    jitter_us: f64,
    rows: [(f64, u64); 2],
) -> Value {
    json!({"index": index, "reverse": reverse, "error": null, "report": {
        "start_unix": start, "duration_secs": secs,
        "sender": {"packets": sent, "bytes": sent * 1000, "duration_secs": sender_secs},
        "totals": {"sent": sent, "unique": got, "bytes": got * 1000, "lost": lost, "reordered": index, "jitter_us": jitter_us},
        "intervals": rows.iter().map(|&(end, n)| json!({"time_slice": end, "bytes": n * 1000, "packets": n})).collect::<Vec<_>>(),
    }})
}

fn udp_multi(streams: Vec<Value>, reverse: bool) -> Value {
    json!({
        "netrig": 1, "version": "0.1.0", "test": "udp",
        "config": {"target": "h", "port": 1, "spec": {"reverse": reverse, "size": 1000, "duration_ms": 2000}},
        "result": {"streams": streams, "duration_secs": 2.5}
    })
}

#[test]
fn udp_bidir_with_two_streams_a_way_sums_each_direction_as_iperf3() {
    let doc = udp_multi(
        vec![
            udp_stream(
                0,
                false,
                10.5,
                (2.0, 1.5),
                (100, 90, 10),
                1000.0,
                [(1.0, 40), (2.0, 50)],
            ),
            udp_stream(
                1,
                false,
                10.25,
                (2.5, 2.0),
                (300, 297, 3),
                3000.0,
                [(1.0, 100), (2.5, 197)],
            ),
            udp_stream(
                2,
                true,
                11.0,
                (2.0, 1.0),
                (50, 50, 0),
                500.0,
                [(1.0, 20), (2.0, 30)],
            ),
            udp_stream(
                3,
                true,
                12.0,
                (1.0, 1.0),
                (50, 25, 25),
                1500.0,
                [(1.0, 25), (2.0, 0)],
            ),
        ],
        false,
    );
    let d = from_envelope(&doc).unwrap();
    let e = &d["end"];
    // The forward direction: what the client sent, what the server received.
    assert_eq!(e["sum_sent"]["bytes"], 400_000);
    assert_eq!(e["sum_sent"]["seconds"], 2.0);
    assert_eq!(e["sum_sent"]["bits_per_second"], 1_600_000.0);
    assert_eq!(e["sum_sent"]["packets"], 400);
    assert_eq!(e["sum_sent"]["sender"], true);
    assert_eq!(e["sum_received"]["bytes"], 387_000);
    assert_eq!(e["sum_received"]["seconds"], 2.5);
    assert_eq!(e["sum"]["lost_packets"], 13);
    assert_eq!(e["sum"]["packets"], 400);
    assert_eq!(e["sum"]["lost_percent"], 3.25);
    assert_eq!(e["sum"]["jitter_ms"], 2.0, "the streams' mean");
    assert_eq!(e["sum"]["bytes"], 400_000);
    // The reverse direction, in iperf3's *_bidir_reverse sums.
    assert_eq!(e["sum_received_bidir_reverse"]["bytes"], 75_000);
    assert_eq!(e["sum_received_bidir_reverse"]["sender"], false);
    assert_eq!(e["sum_bidir_reverse"]["lost_percent"], 25.0);
    assert_eq!(e["sum_bidir_reverse"]["jitter_ms"], 1.0);
    assert_eq!(e["sum_sent_bidir_reverse"]["bytes"], 100_000);
    assert_eq!(e["sum_sent_bidir_reverse"]["seconds"], 1.0);
    assert_eq!(e["sum_sent_bidir_reverse"]["sender"], true);
    // Every stream as its receiver saw it.
    let s = &e["streams"];
    assert_eq!(s.as_array().unwrap().len(), 4);
    assert_eq!(s[3]["udp"]["socket"], 3);
    assert_eq!(s[3]["udp"]["sender"], false);
    assert_eq!(s[3]["udp"]["lost_percent"], 50.0);
    assert_eq!(s[1]["udp"]["out_of_order"], 1);
    assert_eq!(s[1]["udp"]["jitter_ms"], 3.0);
    assert_eq!(s[1]["udp"]["bytes"], 297_000);
    // Interval k of each stream side by side, summed per direction.
    let i1 = &d["intervals"][1];
    assert_eq!(i1["streams"].as_array().unwrap().len(), 4);
    assert_eq!(i1["streams"][1]["start"], 1.0);
    assert_eq!(i1["streams"][1]["end"], 2.5);
    assert_eq!(i1["sum"]["bytes"], 247_000);
    assert_eq!(i1["sum"]["packets"], 247);
    assert_eq!(i1["sum"]["seconds"], 1.0, "the first stream's interval");
    assert_eq!(i1["sum_bidir_reverse"]["bytes"], 30_000);
    assert_eq!(i1["sum_bidir_reverse"]["sender"], false);
    let t = &d["start"]["test_start"];
    assert_eq!(
        (t["num_streams"].clone(), t["reverse"].clone()),
        (json!(2), json!(0))
    );
    assert_eq!(d["start"]["timestamp"]["timesecs"], 10);
}

#[test]
fn udp_streams_one_way_fill_the_plain_sums_whichever_way() {
    let streams = |reverse| {
        vec![
            udp_stream(
                0,
                reverse,
                7.0,
                (1.0, 1.0),
                (10, 8, 2),
                250.0,
                [(0.5, 4), (1.0, 4)],
            ),
            udp_stream(
                1,
                reverse,
                7.0,
                (1.0, 1.0),
                (10, 10, 0),
                750.0,
                [(0.5, 5), (1.0, 5)],
            ),
        ]
    };
    for reverse in [false, true] {
        let d = from_envelope(&udp_multi(streams(reverse), reverse)).unwrap();
        let e = &d["end"];
        assert!(e.get("sum_bidir_reverse").is_none(), "one way only");
        assert_eq!(e["sum_received"]["bytes"], 18_000);
        assert_eq!(e["sum_received"]["sender"], !reverse);
        assert_eq!(e["sum"]["lost_percent"], 10.0);
        assert_eq!(e["sum"]["jitter_ms"], 0.5);
        assert_eq!(d["intervals"][0]["sum"]["bytes"], 9000);
        assert!(d["intervals"][0].get("sum_bidir_reverse").is_none());
        assert_eq!(d["start"]["test_start"]["reverse"], u64::from(reverse));
        assert_eq!(d["start"]["test_start"]["num_streams"], 2);
    }
}

/// A receiving stream's interval rows with the receiver's loss figures:
/// (end s, datagrams received, gaps opened, jitter µs).
fn with_loss_rows(mut stream: Value, rows: [(f64, u64, i64, f64); 2]) -> Value {
    stream["report"]["intervals"] = rows
        .iter()
        .map(|&(end, n, drops, jitter_us)| {
            json!({"time_slice": end, "bytes": n * 1000, "packets": n, "drops": drops, "jitter_us": jitter_us})
        })
        .collect();
    stream
}

#[test]
fn udp_bidir_interval_reverse_sums_carry_iperf3s_receiver_fields() {
    let forward = udp_stream(
        0,
        false,
        5.0,
        (2.0, 2.0),
        (100, 100, 0),
        0.0,
        [(1.0, 50), (2.0, 50)],
    );
    let back = |i, rows| {
        with_loss_rows(
            udp_stream(
                i,
                true,
                5.0,
                (2.0, 2.0),
                (100, 90, 10),
                0.0,
                [(1.0, 0), (2.0, 0)],
            ),
            rows,
        )
    };
    let doc = udp_multi(
        vec![
            forward,
            back(1, [(1.0, 30, 10, 1000.0), (2.0, 50, -2, 500.0)]),
            back(2, [(1.0, 10, 0, 3000.0), (2.0, 40, 0, 1500.0)]),
        ],
        false,
    );
    let d = from_envelope(&doc).unwrap();
    let i0 = &d["intervals"][0];
    // The receiving streams: expected = received + lost, as iperf3 counts.
    assert_eq!(
        i0["streams"][1],
        json!({"socket": 1, "start": 0.0, "end": 1.0, "seconds": 1.0, "bytes": 30_000,
               "bits_per_second": 240_000.0, "packets": 40, "omitted": false,
               "jitter_ms": 1.0, "lost_packets": 10, "lost_percent": 25.0, "sender": false})
    );
    assert_eq!(
        i0["sum_bidir_reverse"],
        json!({"start": 0.0, "end": 1.0, "seconds": 1.0, "bytes": 40_000,
               "bits_per_second": 320_000.0, "packets": 50, "omitted": false,
               "jitter_ms": 2.0, "lost_packets": 10, "lost_percent": 20.0, "sender": false})
    );
    // A late arrival filling an older gap is no negative loss.
    let i1 = &d["intervals"][1];
    assert_eq!(i1["streams"][1]["lost_packets"], 0);
    assert_eq!(i1["streams"][1]["packets"], 50);
    assert_eq!(i1["sum_bidir_reverse"]["packets"], 90);
    assert_eq!(i1["sum_bidir_reverse"]["jitter_ms"], 1.0);
    assert_eq!(i1["sum_bidir_reverse"]["lost_percent"], 0.0);
    // The sending direction's rows stay as iperf3's sender writes them.
    assert_eq!(
        i0["sum"],
        json!({"start": 0.0, "end": 1.0, "seconds": 1.0, "bytes": 50_000,
               "bits_per_second": 400_000.0, "packets": 50, "omitted": false, "sender": true})
    );
    assert!(i0["streams"][0].get("jitter_ms").is_none());
}

#[test]
fn udp_streams_cpu_is_the_longest_measured_streams_on_each_side() {
    let cpu = |wall_us: u64, total: f64| {
        json!({"total_percent": total, "user_percent": total / 4.0,
               "system_percent": total * 0.75, "wall_us": wall_us})
    };
    let mut doc = udp_multi(
        vec![
            udp_stream(
                0,
                false,
                5.0,
                (1.0, 1.0),
                (10, 10, 0),
                0.0,
                [(0.5, 5), (1.0, 5)],
            ),
            udp_stream(
                1,
                false,
                5.0,
                (1.0, 1.0),
                (10, 10, 0),
                0.0,
                [(0.5, 5), (1.0, 5)],
            ),
            udp_stream(
                2,
                false,
                5.0,
                (1.0, 1.0),
                (10, 10, 0),
                0.0,
                [(0.5, 5), (1.0, 5)],
            ),
        ],
        false,
    );
    // Without any stream's figures: nothing, not zeros.
    let d = from_envelope(&doc).unwrap();
    assert!(d["end"].get("cpu_utilization_percent").is_none());
    let s = &mut doc["result"]["streams"];
    s[0]["report"]["cpu"] = json!({"local": cpu(900_000, 8.0), "remote": cpu(2_000_000, 40.0)});
    s[1]["report"]["cpu"] = json!({"local": cpu(1_000_000, 12.0), "remote": null});
    s[2]["report"]["cpu"] = json!({"local": cpu(950_000, 20.0), "remote": cpu(1_500_000, 4.0)});
    let d = from_envelope(&doc).unwrap();
    assert_eq!(
        d["end"]["cpu_utilization_percent"],
        json!({"host_total": 12.0, "host_user": 3.0, "host_system": 9.0,
               "remote_total": 40.0, "remote_user": 10.0, "remote_system": 30.0})
    );
    // No server figures at all: the host's only.
    for i in 0..3 {
        doc["result"]["streams"][i]["report"]["cpu"]["remote"] = Value::Null;
    }
    let d = from_envelope(&doc).unwrap();
    assert_eq!(
        d["end"]["cpu_utilization_percent"],
        json!({"host_total": 12.0, "host_user": 3.0, "host_system": 9.0})
    );
}

#[test]
fn a_rate_over_no_time_is_zero() {
    // iperf3 writes 0 bits_per_second for an interval of no length, not
    // infinity or NaN (which JSON cannot carry).
    assert_eq!(bps(1000.0, 0.0), 0.0);
    assert_eq!(bps(1000.0, 2.0), 4000.0);
}

#[test]
fn tcp_counts_both_ways_and_marks_the_clients_side_as_sender() {
    // Bytes received count as well as bytes sent (a bidirectional run has
    // both), in the intervals and in each connection's total.
    let mut doc = tcp_doc("push");
    doc["result"]["intervals"][0]["RecvBps"] = json!(600);
    doc["result"]["connection_progress"][0]["points"][1]["received"] = json!(300);
    let d = from_envelope(&doc).unwrap();
    let (send_bps, recv_bps, slice) = (1000.0, 600.0, 0.5);
    assert_eq!(
        d["intervals"][0]["sum"]["bytes"],
        ((send_bps + recv_bps) * slice) as u64
    );
    assert_eq!(d["end"]["streams"][0]["sender"]["bytes"], 1200 + 300);
    // The client sends in a push test: every span it writes says so.
    assert_eq!(d["intervals"][0]["streams"][0]["sender"], true);
    assert_eq!(d["end"]["streams"][0]["sender"]["sender"], true);
    let d = from_envelope(&tcp_doc("pull")).unwrap();
    assert_eq!(d["intervals"][0]["streams"][0]["sender"], false);
    assert_eq!(d["end"]["streams"][0]["receiver"]["sender"], false);
}

#[test]
fn udp_expected_without_a_sender_count_adds_the_lost_and_the_sides_follow_reverse() {
    let doc = |reverse: bool| {
        json!({
            "netrig": 1, "version": "0.1.0", "test": "udp",
            "config": {"target": "h", "port": 1, "spec": {"reverse": reverse, "size": 1000, "duration_ms": 1000}},
            "result": {
                "duration_secs": 1.0,
                "totals": {"unique": 96, "bytes": 96000, "lost": 4, "jitter_us": 0.0},
                "intervals": [{"time_slice": 1.0, "bytes": 96000, "packets": 96}]
            }
        })
    };
    let d = from_envelope(&doc(false)).unwrap();
    let (unique, lost) = (96, 4);
    assert_eq!(d["end"]["sum"]["packets"], unique + lost);
    assert_eq!(
        d["end"]["sum"]["lost_percent"],
        100.0 * lost as f64 / (unique + lost) as f64
    );
    assert_eq!(d["intervals"][0]["streams"][0]["sender"], true);
    assert_eq!(d["end"]["streams"][0]["udp"]["sender"], true);
    let d = from_envelope(&doc(true)).unwrap();
    assert_eq!(d["intervals"][0]["streams"][0]["sender"], false);
    assert_eq!(d["end"]["streams"][0]["udp"]["sender"], false);
}

#[test]
fn udp_streams_without_a_sender_count_expect_the_received_and_lost() {
    // A receiving stream whose totals carry no sender count (the sender's
    // report never came): iperf3's expected datagrams are those received
    // and lost; an interval that expected nothing has 0 % loss.
    let (unique, lost) = (90, 10);
    let mut s = udp_stream(
        0,
        true,
        5.0,
        (2.0, 2.0),
        (100, unique, lost),
        0.0,
        [(1.0, 0), (2.0, 0)],
    );
    s["report"]["totals"]["sent"] = Value::Null;
    let s = with_loss_rows(s, [(1.0, 0, 0, 0.0), (2.0, unique, lost as i64, 0.0)]);
    let d = from_envelope(&udp_multi(vec![s], true)).unwrap();
    assert_eq!(d["end"]["sum"]["packets"], unique + lost);
    assert_eq!(
        d["end"]["sum"]["lost_percent"],
        100.0 * lost as f64 / (unique + lost) as f64
    );
    assert_eq!(d["intervals"][0]["streams"][0]["packets"], 0);
    assert_eq!(d["intervals"][0]["streams"][0]["lost_percent"], 0.0);
    assert_eq!(d["intervals"][0]["sum"]["lost_percent"], 0.0);
}
