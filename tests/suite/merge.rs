//! `netrig merge` end to end: real clients at once against one server on
//! loopback, their results merged, and the merge checked against its parts
//! (totals are the sums; percentiles are those of the summed histograms,
//! which hold every sample); bad inputs; `netrig report` of a merge.

use serde_json::Value;
use std::path::{Path, PathBuf};

use crate::bin;
use bin::*;

/// Runs `n` clients of `args` (each with its own `--json`) at once and
/// returns their result files.
fn clients(dir: &Path, n: usize, args: &[&str]) -> Vec<PathBuf> {
    let files: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("c{i}.json"))).collect();
    let kids: Vec<_> = files
        .iter()
        .map(|f| {
            let mut a = args.to_vec();
            a.extend(["-q", "--json", f.to_str().unwrap()]);
            netrig(&a)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert_eq!(k.wait().unwrap().code(), Some(0), "{args:?}");
    }
    files
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn merge(files: &[PathBuf], out: &Path) -> Value {
    let mut a = vec!["merge".to_string()];
    a.extend(files.iter().map(|f| f.display().to_string()));
    a.extend(["-o".into(), out.display().to_string()]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let printed = run_expect(&a, 0);
    assert!(printed.starts_with("merged "), "{printed}");
    read(out)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The sum of the parts' histograms at `pointer`, as percentiles named as
/// the merged ones are.
fn percentiles_of_all(parts: &[Value], pointer: &str, names: &Value) -> Vec<(String, f64)> {
    let hs: Vec<_> = parts
        .iter()
        .filter_map(|p| p.pointer(pointer)?.as_str())
        .map(|t| netrig::protocol::hdr::decode(t).unwrap())
        .collect();
    let all = netrig::protocol::hdr::sum(&hs).unwrap();
    let which: Vec<(&str, f64)> = names
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let n = p[0].as_str().unwrap();
            (n, netrig::protocol::hdr::quantile_of(n).unwrap())
        })
        .collect();
    netrig::protocol::hdr::percentiles_us(&all, &which)
}

fn pairs(v: &Value) -> Vec<(String, f64)> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn eight_udp_clients_merge_into_exact_totals_and_percentiles() {
    // Eight tests at once from one address: above the default per-client limit.
    let (_server, addr) = serve(&["--max-tests-per-client", "8"]);
    let dir = tempfile::tempdir().unwrap();
    let target = addr.to_string();
    let files = clients(
        dir.path(),
        8,
        &["udp", &target, "-t", "1", "-b", "2M", "-l", "500"],
    );
    let parts: Vec<Value> = files.iter().map(|f| read(f)).collect();
    let m = merge(&files, &dir.path().join("all.json"));
    assert_eq!(m["test"], "merge");
    let r = &m["result"];
    assert_eq!(r["kind"], "udp");
    assert_eq!(r["inputs"].as_array().unwrap().len(), 8);
    for k in ["bytes", "packets", "unique", "lost", "sent"] {
        let sum: u64 = parts.iter().map(|p| u(&p["result"]["totals"][k])).sum();
        assert_eq!(u(&r["totals"][k]), sum, "{k}");
    }
    let owd = &r["latency"]["one_way_delay"];
    let want = percentiles_of_all(&parts, "/result/totals/hdr", &owd["percentiles_us"]);
    assert_eq!(pairs(&owd["percentiles_us"]), want);
    let received: u64 = parts
        .iter()
        .map(|p| u(&p["result"]["totals"]["unique"]))
        .sum();
    assert!(
        u(&owd["count"]) <= received && u(&owd["count"]) > 0,
        "{owd}"
    );
    // The clients overlap in time: the grid spans about one run, not eight.
    let slices = r["intervals"].as_array().unwrap();
    let span = slices.last().unwrap()["end_secs"].as_f64().unwrap();
    assert!(span < 4.0, "{span}");
    let on_grid: u64 = slices.iter().map(|s| u(&s["bytes"])).sum();
    let total = u(&r["totals"]["bytes"]);
    assert!(
        on_grid.abs_diff(total) <= slices.len() as u64,
        "{on_grid} vs {total}"
    );
    eprintln!(
        "8 udp clients: {} datagrams, {} bytes, one-way delay of {} samples {:?}; \
         the sum of the 8 histograms gives {:?}",
        r["totals"]["unique"], total, owd["count"], owd["percentiles_us"], want
    );
    // A report draws every client and the total.
    let html = dir.path().join("all.html");
    run_expect(
        &[
            "report",
            dir.path().join("all.json").to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ],
        0,
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Goodput over time, every input and the total"));
    assert!(
        page.contains("data-name=\"total\""),
        "the total series is drawn"
    );
    assert!(page.contains("c7.json"), "each client is named");
}

#[test]
fn tcp_and_ping_clients_merge_too() {
    let (_server, addr) = serve(&[]);
    let dir = tempfile::tempdir().unwrap();
    let target = addr.to_string();
    let tcp_dir = dir.path().join("tcp");
    std::fs::create_dir(&tcp_dir).unwrap();
    let files = clients(
        &tcp_dir,
        3,
        &[
            "tcp", &target, "-t", "1", "-P", "2", "-b", "20M", "-i", "200ms",
        ],
    );
    let parts: Vec<Value> = files.iter().map(|f| read(f)).collect();
    let m = merge(&files, &dir.path().join("tcp.json"));
    let r = &m["result"];
    for (k, part) in [
        ("sent_bytes", "sent"),
        ("completed", "completed"),
        ("retransmits", "retransmits"),
    ] {
        let sum: u64 = parts.iter().map(|p| u(&p["result"]["totals"][part])).sum();
        assert_eq!(u(&r["totals"][k]), sum, "{k}");
    }
    let ct = &r["latency"]["connection_times"];
    assert_eq!(u(&ct["count"]), 6, "3 clients × 2 connections");
    let want = percentiles_of_all(
        &parts,
        "/result/connection_times/hdr",
        &ct["percentiles_us"],
    );
    assert_eq!(pairs(&ct["percentiles_us"]), want);
    assert_eq!(r["errors"].as_array().unwrap().len(), 0);

    let ping_dir = dir.path().join("ping");
    std::fs::create_dir(&ping_dir).unwrap();
    let files = clients(&ping_dir, 4, &["ping", &target, "-c", "20", "-i", "0.01"]);
    let parts: Vec<Value> = files.iter().map(|f| read(f)).collect();
    let m = merge(&files, &dir.path().join("ping.json"));
    let rtt = &m["result"]["latency"]["rtt"];
    assert_eq!(u(&rtt["count"]), 80);
    let want = percentiles_of_all(&parts, "/result/runs/0/latency/hdr", &rtt["percentiles_us"]);
    assert_eq!(pairs(&rtt["percentiles_us"]), want);
    assert_eq!(u(&m["result"]["totals"]["sent"]), 80);
}

/// The merged transaction series of `m` against its parts: on one grid
/// from the earliest input's time zero, every input's transactions laid on
/// it (each slice rounded, so within one per slice of `counted`).
fn check_transaction_grid(m: &Value, parts: &[Value], counted: &dyn Fn(&Value) -> u64) {
    let r = &m["result"];
    let starts: Vec<f64> = parts
        .iter()
        .map(|p| p["result"]["start_unix"].as_f64().expect("a start_unix"))
        .collect();
    let earliest = starts.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(r["start_unix"].as_f64(), Some(earliest));
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(r["inputs"][i]["start_unix"].as_f64(), Some(starts[i]));
        // The time zero is this run's, taken a moment before it ended.
        let end = starts[i] + p["result"]["duration_secs"].as_f64().unwrap();
        assert!(end - earliest < 60.0, "{end} vs {earliest}");
    }
    assert!(
        r["warnings"].as_array().unwrap().is_empty(),
        "{}",
        r["warnings"]
    );
    let slices = r["intervals"].as_array().unwrap();
    assert!(!slices.is_empty());
    let n = slices.len() as u64;
    let all: u64 = slices.iter().map(|s| u(&s["transactions"])).sum();
    let want: u64 = parts.iter().map(counted).sum();
    assert!(all.abs_diff(want) <= n, "{all} on the grid, {want} counted");
    for (i, p) in parts.iter().enumerate() {
        let mine: u64 = slices
            .iter()
            .map(|s| u(&s["per_input_transactions"][i]))
            .sum();
        assert!(mine.abs_diff(counted(p)) <= n, "input {i}: {mine}");
    }
}

#[test]
fn rr_ping_and_crr_clients_merge_on_the_wall_clock_grid() {
    let (_server, addr) = serve(&["--max-tests-per-client", "8"]);
    let dir = tempfile::tempdir().unwrap();
    let target = addr.to_string();
    let run = |kind: &str, args: &[&str]| {
        let sub = dir.path().join(kind);
        std::fs::create_dir(&sub).unwrap();
        let files = clients(&sub, 3, args);
        let parts: Vec<Value> = files.iter().map(|f| read(f)).collect();
        (
            merge(&files, &dir.path().join(format!("{kind}.json"))),
            parts,
        )
    };
    // Round trips answered, the warm-up's left out as the rows leave it.
    let answered = |p: &Value| u(&p["result"]["runs"][0]["received"]) - u(&p["config"]["warmup"]);
    let (m, parts) = run("ping", &["ping", &target, "-c", "30", "-i", "0.02"]);
    check_transaction_grid(&m, &parts, &answered);
    let (m, parts) = run("rr", &["rr", &target, "-t", "1", "-i", "250ms"]);
    check_transaction_grid(&m, &parts, &answered);
    // rr -i rows are in the result as shown.
    let rows = parts[0]["result"]["intervals"].as_array().unwrap();
    assert!(rows.len() >= 4, "{rows:?}");
    assert_eq!(rows[0]["end_secs"].as_f64(), Some(0.25));
    let (m, parts) = run("crr", &["crr", &target, "-n", "40"]);
    check_transaction_grid(&m, &parts, &|p: &Value| u(&p["result"]["transactions"]));
}

#[test]
fn udp_clients_with_streams_both_ways_merge_per_direction() {
    let (_server, addr) = serve(&["--max-tests-per-client", "12"]);
    let dir = tempfile::tempdir().unwrap();
    let target = addr.to_string();
    let files = clients(
        dir.path(),
        3,
        &["udp", &target, "-t", "1", "-b", "1M", "-P", "2", "--bidir"],
    );
    let parts: Vec<Value> = files.iter().map(|f| read(f)).collect();
    let m = merge(&files, &dir.path().join("all.json"));
    let r = &m["result"];
    for (sum, suffix) in [("sum_up", ""), ("sum_down", "_bidir_reverse")] {
        for k in ["bytes", "unique", "lost", "sent"] {
            let want: u64 = parts.iter().map(|p| u(&p["result"][sum][k])).sum();
            assert_eq!(u(&r["totals"][format!("{k}{suffix}")]), want, "{k}{suffix}");
        }
        // The streams' histograms of this direction, summed.
        let reverse = !suffix.is_empty();
        let hs: Vec<_> = (parts.iter())
            .flat_map(|p| p["result"]["streams"].as_array().unwrap().iter())
            .filter(|s| s["reverse"] == reverse)
            .map(|s| {
                netrig::protocol::hdr::decode(s["report"]["totals"]["hdr"].as_str().unwrap())
                    .unwrap()
            })
            .collect();
        assert_eq!(hs.len(), 6, "3 clients × 2 streams");
        let owd = &r["latency"][format!("one_way_delay{suffix}")];
        let all = netrig::protocol::hdr::sum(&hs).unwrap();
        assert_eq!(u(&owd["count"]), all.len());
        let which: Vec<(String, f64)> = pairs(&owd["percentiles_us"]);
        let which: Vec<(&str, f64)> = which
            .iter()
            .map(|(n, _)| (n.as_str(), netrig::protocol::hdr::quantile_of(n).unwrap()))
            .collect();
        assert_eq!(
            pairs(&owd["percentiles_us"]),
            netrig::protocol::hdr::percentiles_us(&all, &which)
        );
    }
    // Every input's column holds its four streams' bytes.
    let slices = r["intervals"].as_array().unwrap();
    for (i, p) in parts.iter().enumerate() {
        let mine: u64 = slices.iter().map(|s| u(&s["per_input"][i])).sum();
        let want = u(&p["result"]["sum_up"]["bytes"]) + u(&p["result"]["sum_down"]["bytes"]);
        assert!(
            mine.abs_diff(want) <= 4 * slices.len() as u64,
            "{mine} vs {want}"
        );
    }
    assert!(
        r["warnings"].as_array().unwrap().is_empty(),
        "{}",
        r["warnings"]
    );
}

#[test]
fn bad_inputs_are_one_line_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |name: &str, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let tcp = write(
        "t.json",
        r#"{"netrig":1,"test":"tcp","config":{"pattern":"push"},"result":null,"error":"x"}"#,
    );
    let udp = write(
        "u.json",
        r#"{"netrig":1,"test":"udp","config":{},"result":null,"error":"x"}"#,
    );
    let pull = write(
        "p.json",
        r#"{"netrig":1,"test":"tcp","config":{"pattern":"pull"},"result":null,"error":"x"}"#,
    );
    let other = write("o.json", r#"{"hello": 1}"#);
    let broken = write("b.json", "{");
    let out = d.join("all.json").display().to_string();
    let missing = d.join("missing.json").display().to_string();
    for (args, says) in [
        (vec![missing.as_str()], "cannot read"),
        (vec![broken.as_str()], "is not JSON"),
        (vec![other.as_str()], "not a netrig result"),
        (
            vec![tcp.as_str(), udp.as_str()],
            "merge results of one kind",
        ),
        (vec![tcp.as_str(), pull.as_str()], "config pattern is pull"),
    ] {
        let mut a = vec!["merge"];
        a.extend(&args);
        a.extend(["-o", out.as_str()]);
        let o = netrig(&a).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
        assert!(!err.contains("panicked"));
        assert!(!Path::new(&out).exists(), "nothing written on an error");
    }
}

/// The `data-points` of the series `name` in the SVG of `page`.
fn points_of(page: &str, name: &str) -> usize {
    let tag = format!("data-name=\"{name}\" data-points=\"");
    let rest = page
        .split(&tag)
        .nth(1)
        .unwrap_or_else(|| panic!("no series {name}"));
    rest[..rest.find('"').unwrap()].parse().unwrap()
}

#[test]
fn a_report_of_merged_rr_and_ping_charts_transactions_per_second() {
    let (_server, addr) = serve(&["--max-tests-per-client", "8"]);
    let dir = tempfile::tempdir().unwrap();
    let target = addr.to_string();
    for (kind, args) in [
        ("rr", vec!["rr", &target, "-t", "1", "-i", "250ms"]),
        ("ping", vec!["ping", &target, "-c", "30", "-i", "0.02"]),
    ] {
        let sub = dir.path().join(kind);
        std::fs::create_dir(&sub).unwrap();
        let files = clients(&sub, 2, &args);
        let json = dir.path().join(format!("{kind}.json"));
        let mut a = vec!["merge".to_string()];
        a.extend(files.iter().map(|f| f.display().to_string()));
        a.extend(["-i", "250ms", "-o"].map(String::from));
        a.push(json.display().to_string());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run_expect(&a, 0);
        let m = read(&json);
        let slices = m["result"]["intervals"].as_array().unwrap();
        // Every slice has a total; an input's rate needs a slice of some width.
        let wide = slices
            .iter()
            .filter(|s| s["end_secs"].as_f64() > s["start_secs"].as_f64())
            .count();
        assert!(wide >= 1, "{kind}: {slices:?}");
        let html = dir.path().join(format!("{kind}.html"));
        run_expect(
            &[
                "report",
                json.to_str().unwrap(),
                "-o",
                html.to_str().unwrap(),
            ],
            0,
        );
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(
            page.contains("Transactions per second over time, every input and the total"),
            "{kind}"
        );
        assert!(!page.contains("Goodput over time"), "{kind}");
        assert_eq!(points_of(&page, "total"), slices.len(), "{kind}");
        for f in &files {
            assert_eq!(points_of(&page, &f.display().to_string()), wide, "{kind}");
        }
        assert!(page.contains("transactions/s"), "{kind}");
    }
}
