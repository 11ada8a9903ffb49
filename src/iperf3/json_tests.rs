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
    let multi = json!({"test": "udp", "config": {}, "result": {"streams": []}});
    assert!(matches!(from_envelope(&multi), Err(Iperf3Error::Shape(_))));
}
