//! `--json-iperf3 FILE`: a tcp or udp result as the subset of iperf3's
//! `-J` document that dashboards and scripts read (k8s-netperf reads
//! `end.sum_sent.retransmits`, `end.sum_received.bits_per_second` and, for
//! UDP, `end.sum.lost_percent`; pScheduler and `jq` scripts the same).
//! Field meanings follow iperf3's own output (its `src/iperf_api.c`,
//! `iperf_print_results` and `iperf_json_start`, and real `iperf3 -J` runs):
//! `bytes` and `seconds` over a span, `bits_per_second` = bytes·8/seconds,
//! `sum_sent` the sending side's bytes and retransmits, `sum_received` the
//! receiving side's bytes, for UDP `end.sum` with the receiver's loss and
//! jitter (`jitter_ms`, `lost_packets`, `packets` expected, `lost_percent`).
//! UDP with several streams (`-P`, `--bidir`) is written as iperf3 3.12's
//! `-u -P N -J` and `--bidir -J` runs write theirs: a stream each, `end.sum`
//! over a direction's streams with their jitters averaged and their losses
//! added, and the reverse direction of `--bidir` in the `*_bidir_reverse`
//! sums. Pure: the netrig envelope in, the iperf3 document out.

use serde_json::{Value, json};
use thiserror::Error;

/// Why a result has no iperf3 form.
#[derive(Debug, Error, PartialEq)]
pub enum Iperf3Error {
    /// Not tcp or udp.
    #[error("iperf3 JSON is written for tcp and udp results, not {0}")]
    Kind(String),
    /// A shape this subset does not cover.
    #[error("iperf3 JSON does not cover {0}")]
    Shape(&'static str),
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn bps(bytes: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes * 8.0 / seconds
    } else {
        0.0
    }
}

/// A span as iperf3 writes one (`start`, `end`, `seconds`, `bytes`,
/// `bits_per_second`, `sender`), plus `extra` fields.
fn span(start: f64, end: f64, bytes: f64, sender: bool, extra: Value) -> Value {
    let mut s = json!({
        "start": start,
        "end": end,
        "seconds": end - start,
        "bytes": bytes.round() as u64,
        "bits_per_second": bps(bytes, end - start),
        "sender": sender,
    });
    if let (Some(m), Value::Object(e)) = (s.as_object_mut(), extra) {
        m.extend(e);
    }
    s
}

/// The `start` object: when, to where, and the test as iperf3 describes it.
fn start(doc: &Value, protocol: &str, streams: u64, blksize: u64, reverse: bool) -> Value {
    let c = &doc["config"];
    let r = &doc["result"];
    let host = c["targets"][0]
        .as_str()
        .or_else(|| c["target"].as_str())
        .unwrap_or("");
    let duration = c["time_limit"]
        .as_u64()
        .or_else(|| c["spec"]["duration_ms"].as_u64())
        .map_or(0, |ms| ms / 1000);
    json!({
        "version": format!("netrig {}", doc["version"].as_str().unwrap_or("")),
        "timestamp": {"timesecs": f(&r["start_unix"]).floor() as u64},
        "connecting_to": {"host": host, "port": u(&c["port"])},
        "test_start": {
            "protocol": protocol,
            "num_streams": streams,
            "blksize": blksize,
            "omit": 0,
            "duration": duration,
            "reverse": u64::from(reverse),
        },
    })
}

/// iperf3's `cpu_utilization_percent`, only where netrig measured CPU
/// (`result.cpu`): the local end is iperf3's host, the server its remote,
/// each in percent of one core over the test's wall time as iperf3
/// computes it (`iperf_util.c`, `cpu_util`). Without the server's figure
/// iperf3's remote fields are left out rather than written as 0.
fn cpu(r: &Value) -> Option<Value> {
    let local = r["cpu"]["local"].as_object()?;
    let mut out = serde_json::Map::new();
    for (side, end) in [
        ("host", Some(local)),
        ("remote", r["cpu"]["remote"].as_object()),
    ] {
        let Some(end) = end else { continue };
        for part in ["total", "user", "system"] {
            if let Some(v) = end.get(&format!("{part}_percent")).and_then(Value::as_f64) {
                out.insert(format!("{side}_{part}"), json!(v));
            }
        }
    }
    Some(Value::Object(out))
}

/// A udp result of several streams keeps no CPU of its own: each stream's
/// report holds the process-wide figures (`getrusage(RUSAGE_SELF)` on each
/// side) over that stream's own run, so the stream measured the longest
/// on a side stands for the whole test there, as iperf3's one process-wide
/// figure does; adding the streams' would count the process once a stream.
fn streams_cpu(r: &Value) -> Option<Value> {
    let reports = || {
        r["streams"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| &s["report"]["cpu"])
    };
    let longest = |side: &str| {
        reports()
            .filter(|c| c[side].is_object())
            .max_by_key(|c| u(&c[side]["wall_us"]))
            .map_or(Value::Null, |c| c[side].clone())
    };
    cpu(&json!({"cpu": {"local": longest("local"), "remote": longest("remote")}}))
}

/// The iperf3 document for a tcp or udp envelope.
pub fn from_envelope(doc: &Value) -> Result<Value, Iperf3Error> {
    let kind = doc["test"].as_str().unwrap_or("");
    if !matches!(kind, "tcp" | "udp") {
        return Err(Iperf3Error::Kind(kind.to_string()));
    }
    // A run that measured nothing: what iperf3 -J writes when a test fails,
    // empty sections and the error.
    if doc["result"].is_null() {
        let why = doc["error"].as_str().unwrap_or("nothing was measured");
        return Ok(json!({"start": {}, "intervals": [], "end": {}, "error": why}));
    }
    let mut out = match kind {
        "tcp" => tcp(doc),
        "udp" => udp(doc)?,
        k => return Err(Iperf3Error::Kind(k.to_string())),
    };
    if let Some(c) = cpu(&doc["result"]).or_else(|| streams_cpu(&doc["result"])) {
        out["end"]["cpu_utilization_percent"] = c;
    }
    if let Some(t) = doc["title"].as_str() {
        out["title"] = json!(t);
    }
    Ok(out)
}

fn tcp(doc: &Value) -> Value {
    let (c, r) = (&doc["config"], &doc["result"]);
    let pattern = c["pattern"].as_str().unwrap_or("push");
    let reverse = pattern == "pull";
    let secs = f(&r["duration_secs"]);
    // Bytes each end sent and received, by the servers' own counts where
    // they reported them (a server that never answered counts as its peer).
    let servers: Vec<&Value> = r["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| &s[1])
        .collect();
    let server = |k: &str| servers.iter().map(|s| u(&s[k])).sum::<u64>();
    let answered = servers.iter().any(|s| s.is_object());
    let (csent, crecv) = (u(&r["totals"]["sent"]), u(&r["totals"]["received"]));
    let (ssent, srecv) = if answered {
        (server("bytes_sent"), server("bytes_received"))
    } else {
        (crecv, csent)
    };
    let retransmits = u(&r["tcp_info"]["retransmits"]) + u(&r["server_tcp_info"]["retransmits"]);
    let mut intervals = Vec::new();
    let mut prev = 0.0;
    for row in r["intervals"].as_array().into_iter().flatten() {
        let end = f(&row["TimeSlice"]);
        let bytes = (f(&row["SendBps"]) + f(&row["RecvBps"])) * (end - prev);
        let extra = json!({"retransmits": u(&row["Retransmits"]), "omitted": row["Omitted"].as_bool().unwrap_or(false)});
        let mut stream = span(prev, end, bytes, !reverse, extra.clone());
        stream["socket"] = json!(0);
        intervals
            .push(json!({"streams": [stream], "sum": span(prev, end, bytes, !reverse, extra)}));
        prev = end;
    }
    // Per connection: netrig agrees every connection's bytes between both
    // ends, so a stream's sender and receiver hold the same count.
    let streams: Vec<Value> = r["connection_progress"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let last = p["points"].as_array().and_then(|a| a.last());
            let (s0, s1) = (
                f(&p["points"][0]["secs"]),
                last.map_or(0.0, |l| f(&l["secs"])),
            );
            let b = last.map_or(0.0, |l| f(&l["sent"]) + f(&l["received"]));
            let mut side = span(s0, s1, b, !reverse, json!({}));
            side["socket"] = p["index"].clone();
            json!({"sender": side.clone(), "receiver": side})
        })
        .collect();
    let connections = u(&c["connections"]).max(1);
    let blksize = c["buffer"]["fixed"].as_u64().unwrap_or(0);
    json!({
        "start": start(doc, "TCP", connections, blksize, reverse),
        "intervals": intervals,
        "end": {
            "streams": streams,
            "sum_sent": span(0.0, secs, (csent + ssent) as f64, !reverse, json!({"retransmits": retransmits})),
            "sum_received": span(0.0, secs, (srecv + crecv) as f64, !reverse, json!({})),
        },
    })
}

fn udp(doc: &Value) -> Result<Value, Iperf3Error> {
    let (c, r) = (&doc["config"], &doc["result"]);
    if r["streams"].is_array() {
        return Ok(udp_streams(doc));
    }
    let t = &r["totals"];
    if !t.is_object() {
        return Err(Iperf3Error::Shape("a udp result without its totals"));
    }
    let reverse = c["spec"]["reverse"].as_bool().unwrap_or(false);
    let secs = f(&r["duration_secs"]);
    let sender_secs = r["sender"]["duration_secs"].as_f64().unwrap_or(secs);
    let sent_bytes = r["sender"]["bytes"].as_f64().unwrap_or(f(&t["bytes"]));
    let expected = t["sent"]
        .as_u64()
        .unwrap_or(u(&t["unique"]) + u(&t["lost"]));
    let lost = u(&t["lost"]);
    let loss = json!({
        "jitter_ms": f(&t["jitter_us"]) / 1e3,
        "lost_packets": lost,
        "packets": expected,
        "lost_percent": if expected > 0 { 100.0 * lost as f64 / expected as f64 } else { 0.0 },
    });
    let mut intervals = Vec::new();
    let mut prev = 0.0;
    for row in r["intervals"].as_array().into_iter().flatten() {
        let end = f(&row["time_slice"]);
        let extra = json!({"packets": u(&row["packets"]), "omitted": row["omitted"].as_bool().unwrap_or(false)});
        let mut stream = span(prev, end, f(&row["bytes"]), !reverse, extra.clone());
        stream["socket"] = json!(0);
        intervals.push(
            json!({"streams": [stream], "sum": span(prev, end, f(&row["bytes"]), !reverse, extra)}),
        );
        prev = end;
    }
    let mut stream = span(0.0, secs, f(&t["bytes"]), !reverse, loss.clone());
    stream["socket"] = json!(0);
    stream["out_of_order"] = json!(u(&t["reordered"]));
    let sent_extra = json!({"jitter_ms": 0.0, "lost_packets": 0, "packets": u(&r["sender"]["packets"]), "lost_percent": 0.0});
    Ok(json!({
        "start": start(doc, "UDP", 1, u(&c["spec"]["size"]), reverse),
        "intervals": intervals,
        "end": {
            "streams": [{"udp": stream}],
            "sum": span(0.0, sender_secs, sent_bytes, !reverse, loss.clone()),
            "sum_sent": span(0.0, sender_secs, sent_bytes, !reverse, sent_extra),
            "sum_received": span(0.0, secs, f(&t["bytes"]), !reverse, loss),
        },
    }))
}

/// One stream of a udp result with several, as iperf3 counts it.
struct UdpStream<'a> {
    /// The stream's number, iperf3's `socket`.
    socket: u64,
    /// Whether the client sends it (iperf3's `sender`: the client's side).
    sender: bool,
    r: &'a Value,
    /// The receiver's time, and the sender's.
    secs: f64,
    sender_secs: f64,
    sent_bytes: f64,
    received_bytes: f64,
    /// Datagrams the receiver expected (the sender's count), and lost.
    expected: u64,
    lost: u64,
    jitter_ms: f64,
}

impl<'a> UdpStream<'a> {
    fn of(s: &'a Value) -> Option<UdpStream<'a>> {
        let r = &s["report"];
        let t = r["totals"].as_object()?;
        let secs = f(&r["duration_secs"]);
        let received_bytes = t.get("bytes").map_or(0.0, f);
        let lost = t.get("lost").map_or(0, u);
        Some(UdpStream {
            socket: u(&s["index"]),
            sender: !s["reverse"].as_bool().unwrap_or(false),
            r,
            secs,
            sender_secs: r["sender"]["duration_secs"].as_f64().unwrap_or(secs),
            sent_bytes: r["sender"]["bytes"].as_f64().unwrap_or(received_bytes),
            received_bytes,
            expected: t
                .get("sent")
                .and_then(Value::as_u64)
                .unwrap_or(t.get("unique").map_or(0, u) + lost),
            lost,
            jitter_ms: t.get("jitter_us").map_or(0.0, f) / 1e3,
        })
    }
}

/// iperf3's loss fields over `streams`: losses and expected datagrams
/// added, jitter their mean (as iperf3 sums a direction's streams).
fn loss_of(streams: &[&UdpStream]) -> Value {
    let lost: u64 = streams.iter().map(|s| s.lost).sum();
    let expected: u64 = streams.iter().map(|s| s.expected).sum();
    let jitter = match streams.len() {
        0 => 0.0,
        n => streams.iter().map(|s| s.jitter_ms).sum::<f64>() / n as f64,
    };
    json!({
        "jitter_ms": jitter,
        "lost_packets": lost,
        "packets": expected,
        "lost_percent": if expected > 0 { 100.0 * lost as f64 / expected as f64 } else { 0.0 },
    })
}

/// `lost` in percent of `expected`, 0 when nothing was expected.
fn percent(lost: u64, expected: u64) -> f64 {
    if expected > 0 {
        100.0 * lost as f64 / expected as f64
    } else {
        0.0
    }
}

/// A receiving stream's interval row with iperf3's receiver fields (as a
/// real iperf3 3.12 `-u --bidir -J` run writes its receiving stream's
/// intervals): `packets` the datagrams expected (received and lost, as
/// iperf3 counts them from sequence numbers), `lost_packets` the gaps the
/// interval opened (none when late arrivals filled more than it opened),
/// `jitter_ms` the jitter at the interval's end.
fn interval_loss(row: &Value, omitted: bool) -> Value {
    let lost = row["drops"].as_i64().unwrap_or(0).max(0) as u64;
    let packets = u(&row["packets"]) + lost;
    json!({
        "packets": packets,
        "omitted": omitted,
        "jitter_ms": f(&row["jitter_us"]) / 1e3,
        "lost_packets": lost,
        "lost_percent": percent(lost, packets),
    })
}

/// A direction's `sum`, `sum_sent` and `sum_received` (one stream's
/// fields as [`udp`] writes them, added).
fn udp_sums(streams: &[&UdpStream], sender: bool) -> [Value; 3] {
    let max = |g: fn(&UdpStream) -> f64| streams.iter().map(|s| g(s)).fold(0.0, f64::max);
    let add = |g: fn(&UdpStream) -> f64| streams.iter().map(|s| g(s)).sum::<f64>();
    let (sender_secs, secs) = (max(|s| s.sender_secs), max(|s| s.secs));
    let sent = add(|s| s.sent_bytes);
    let packets: u64 = streams.iter().map(|s| u(&s.r["sender"]["packets"])).sum();
    let loss = loss_of(streams);
    let sent_extra =
        json!({"jitter_ms": 0.0, "lost_packets": 0, "packets": packets, "lost_percent": 0.0});
    [
        span(0.0, sender_secs, sent, sender, loss.clone()),
        span(0.0, sender_secs, sent, sender, sent_extra),
        span(0.0, secs, add(|s| s.received_bytes), sender, loss),
    ]
}

/// A udp result of several streams (`-P`, `--bidir`), as iperf3 writes one.
fn udp_streams(doc: &Value) -> Value {
    let (c, r) = (&doc["config"], &doc["result"]);
    let all: Vec<UdpStream> = (r["streams"].as_array().into_iter().flatten())
        .filter_map(UdpStream::of)
        .collect();
    let forward: Vec<&UdpStream> = all.iter().filter(|s| s.sender).collect();
    let reverse: Vec<&UdpStream> = all.iter().filter(|s| !s.sender).collect();
    let bidir = !forward.is_empty() && !reverse.is_empty();
    // The plain sums hold the only direction, or --bidir's forward one.
    let (main, back) = match bidir || reverse.is_empty() {
        true => (&forward, &reverse),
        false => (&reverse, &forward),
    };
    // Interval k of every stream, side by side, summed per direction.
    let rows = |s: &UdpStream| {
        let mut prev = 0.0;
        (s.r["intervals"].as_array().into_iter().flatten())
            .map(|row| {
                let end = f(&row["time_slice"]);
                let omitted = row["omitted"].as_bool().unwrap_or(false);
                let extra = match s.sender {
                    true => json!({"packets": u(&row["packets"]), "omitted": omitted}),
                    false => interval_loss(row, omitted),
                };
                let mut one = span(prev, end, f(&row["bytes"]), s.sender, extra);
                one["socket"] = json!(s.socket);
                prev = end;
                one
            })
            .collect::<Vec<_>>()
    };
    let per_stream: Vec<Vec<Value>> = all.iter().map(rows).collect();
    let longest = per_stream.iter().map(Vec::len).max().unwrap_or(0);
    let sum_of = |k: usize, sender: bool| -> Option<Value> {
        let spans: Vec<&Value> = (all.iter().zip(&per_stream))
            .filter(|(s, _)| s.sender == sender)
            .filter_map(|(_, rows)| rows.get(k))
            .collect();
        let first = spans.first()?;
        let bytes: f64 = spans.iter().map(|s| f(&s["bytes"])).sum();
        let packets: u64 = spans.iter().map(|s| u(&s["packets"])).sum();
        let omitted = spans.iter().any(|s| s["omitted"] == json!(true));
        let mut extra = json!({"packets": packets, "omitted": omitted});
        if !sender {
            // As iperf3 sums a receiving direction: jitters averaged, losses added.
            let lost: u64 = spans.iter().map(|s| u(&s["lost_packets"])).sum();
            let jitter = spans.iter().map(|s| f(&s["jitter_ms"])).sum::<f64>() / spans.len() as f64;
            extra["jitter_ms"] = json!(jitter);
            extra["lost_packets"] = json!(lost);
            extra["lost_percent"] = json!(percent(lost, packets));
        }
        Some(span(
            f(&first["start"]),
            f(&first["end"]),
            bytes,
            sender,
            extra,
        ))
    };
    let main_sender = main.first().is_none_or(|s| s.sender);
    let intervals: Vec<Value> = (0..longest)
        .map(|k| {
            let streams: Vec<&Value> = per_stream.iter().filter_map(|rows| rows.get(k)).collect();
            let mut row = json!({"streams": streams});
            if let Some(s) = sum_of(k, main_sender) {
                row["sum"] = s;
            }
            if bidir && let Some(s) = sum_of(k, false) {
                row["sum_bidir_reverse"] = s;
            }
            row
        })
        .collect();
    let streams: Vec<Value> = all
        .iter()
        .map(|s| {
            let t = &s.r["totals"];
            let mut one = span(0.0, s.secs, s.received_bytes, s.sender, loss_of(&[s]));
            one["socket"] = json!(s.socket);
            one["out_of_order"] = json!(u(&t["reordered"]));
            json!({"udp": one})
        })
        .collect();
    let [sum, sum_sent, sum_received] = udp_sums(main, main_sender);
    let mut end = json!({
        "streams": streams,
        "sum": sum,
        "sum_sent": sum_sent,
        "sum_received": sum_received,
    });
    if bidir {
        let [sum, sent, received] = udp_sums(back, false);
        end["sum_bidir_reverse"] = sum;
        end["sum_sent_bidir_reverse"] = sent;
        // iperf3 3.12 marks this one sent, unlike the reverse's others.
        end["sum_sent_bidir_reverse"]["sender"] = json!(true);
        end["sum_received_bidir_reverse"] = received;
    }
    // The envelope's time zero is its first stream's.
    let mut timed = doc.clone();
    timed["result"]["start_unix"] = all
        .iter()
        .filter_map(|s| s.r["start_unix"].as_f64())
        .reduce(f64::min)
        .map_or(Value::Null, |t| json!(t));
    let per_direction = forward.len().max(reverse.len()) as u64;
    let reversed = c["spec"]["reverse"].as_bool().unwrap_or(false);
    json!({
        "start": start(&timed, "UDP", per_direction, u(&c["spec"]["size"]), reversed),
        "intervals": intervals,
        "end": end,
    })
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
