//! The HTML report (`netrig report`, `--html`): real runs of every result
//! kind over loopback, rendered, with each chart's points checked against
//! the JSON; overlays; bad inputs; and a headless Chromium screenshot.

use crate::bin;
use bin::*;

use std::path::{Path, PathBuf};

/// The charts of a report: (series name, points drawn), in order.
fn series(html: &str) -> Vec<(String, usize)> {
    html.split(r#"<g class="series" data-name=""#)
        .skip(1)
        .map(|s| {
            let (name, rest) = s.split_once('"').unwrap();
            let n = rest
                .trim_start_matches(r#" data-points=""#)
                .split('"')
                .next()
                .unwrap();
            (name.to_string(), n.parse().unwrap())
        })
        .collect()
}

/// The markup of the chart titled `title` (its heading to its `</svg>`).
fn chart_of<'a>(html: &'a str, title: &str) -> &'a str {
    let from = html
        .split(&format!("<h3>{title}</h3>"))
        .nth(1)
        .unwrap_or_else(|| panic!("no chart {title:?}"));
    from.split("</svg>").next().unwrap()
}

/// The x of every marker in `chart`.
fn marks(chart: &str) -> Vec<f64> {
    chart
        .split(r#"class="mark" data-x=""#)
        .skip(1)
        .map(|s| s.split('"').next().unwrap().parse().unwrap())
        .collect()
}

/// Bins ((upper edge, count)) to the first that completes the total: the
/// points a CDF of them has.
fn cdf_points(counts: impl Iterator<Item = u64> + Clone) -> usize {
    let total: u64 = counts.clone().sum();
    let mut acc = 0;
    counts
        .take_while(|&n| {
            let before = acc;
            acc += n;
            before < total
        })
        .count()
}

/// The named percentiles of a `percentiles_us` list, in ms.
fn pcts_ms(p: &serde_json::Value, names: &[&str]) -> Vec<f64> {
    names
        .iter()
        .filter_map(|n| {
            p.as_array()?
                .iter()
                .find(|e| e[0] == *n)
                .and_then(|e| e[1].as_f64())
                .map(|us| us / 1e3)
        })
        .collect()
}

/// Runs `args` with `--json` into `dir`, renders it, returns (json, html).
fn run_and_render(dir: &Path, name: &str, args: &[&str]) -> (serde_json::Value, String) {
    let js = dir.join(format!("{name}.json"));
    let mut a = args.to_vec();
    a.extend_from_slice(&["-q", "--json", js.to_str().unwrap()]);
    run_expect(&a, 0);
    let html = dir.join(format!("{name}.html"));
    run_expect(
        &["report", js.to_str().unwrap(), "-o", html.to_str().unwrap()],
        0,
    );
    let v = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    (v, std::fs::read_to_string(&html).unwrap())
}

/// [`run_and_render`] for each (name, args), all at once: the runs are
/// time-bound (`-t`, `load`'s phases), so side by side they take about the
/// longest one's time. The results come in the order given.
fn run_and_render_all<N: AsRef<str> + Sync>(
    dir: &Path,
    runs: &[(N, Vec<&str>)],
) -> Vec<(serde_json::Value, String)> {
    std::thread::scope(|s| {
        let started: Vec<_> = runs
            .iter()
            .map(|(name, args)| s.spawn(move || run_and_render(dir, name.as_ref(), args)))
            .collect();
        started
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Each run named `FOLDER/COMMAND` for [`run_and_render_all`], its folder
/// made under `dir`.
fn in_folders<'a>(
    dir: &Path,
    runs: impl IntoIterator<Item = (&'a str, Vec<&'a str>)>,
) -> Vec<(String, Vec<&'a str>)> {
    runs.into_iter()
        .map(|(sub, args)| {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
            (format!("{sub}/{}", args[0]), args)
        })
        .collect()
}

/// A server for [`run_and_render_all`]: its runs come from one address at
/// once, more than the default four tests a client may run.
fn serve_many() -> (Proc, std::net::SocketAddr) {
    serve(&["-q", "--max-tests-per-client", "64"])
}

fn count(v: &serde_json::Value) -> usize {
    v.as_array().map_or(0, Vec::len)
}

/// A short load run's flags, its phase to follow.
const LOAD_SHORT: [&str; 7] = ["--idle", "1s", "--phase-time", "4s", "-P", "2", "--phases"];

/// A short tcp run's flags, its pattern to follow: the reports that
/// overlay a push and a pull run use it.
const TCP_SHORT: [&str; 9] = [
    "-t",
    "1s",
    "-i",
    "100ms",
    "-P",
    "2",
    "-n",
    "64M",
    "--pattern",
];

/// Per-connection goodput: the first connections' byte counts over time
/// end at what the connection file says each moved, add up to the run's
/// totals, and each is a line in the report; the duration histogram holds
/// every connection.
#[test]
fn each_connection_is_charted_and_adds_up() {
    let (_srv, addr) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let conns = dir.path().join("conns.csv");
    let (v, h) = run_and_render(
        dir.path(),
        "perconn",
        &[
            "tcp",
            &addr.to_string(),
            "-P",
            "3",
            "--iterations",
            "3",
            "-n",
            "200M",
            "--pattern",
            "duplex",
            "-i",
            "100ms",
            "--connection-file",
            conns.to_str().unwrap(),
        ],
    );
    let r = &v["result"];
    let mut by_id = std::collections::HashMap::new();
    let mut rd = csv::Reader::from_path(&conns).unwrap();
    let hd = rd.headers().unwrap().clone();
    let col = |n: &str| hd.iter().position(|c| c == n).unwrap();
    let (id, sent, recv) = (col("ConnectionId"), col("SendBytes"), col("RecvBytes"));
    for row in rd.records() {
        let row = row.unwrap();
        let n = |i: usize| row[i].parse::<u64>().unwrap();
        by_id.insert(row[id].to_string(), (n(sent), n(recv)));
    }
    assert_eq!(by_id.len(), 9);
    let progress = r["connection_progress"].as_array().unwrap();
    // Nine connections, all among the first 32: every one is tracked.
    let idx: Vec<u64> = progress
        .iter()
        .map(|p| p["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, (0..9).collect::<Vec<u64>>());
    let (mut total_sent, mut total_recv) = (0, 0);
    for p in progress {
        let pts = p["points"].as_array().unwrap();
        let at = |i: usize, k: &str| pts[i][k].as_f64().unwrap();
        assert!(pts.len() >= 2, "{p}");
        assert_eq!((at(0, "sent"), at(0, "received")), (0.0, 0.0));
        for w in pts.windows(2) {
            assert!(w[1]["secs"].as_f64() >= w[0]["secs"].as_f64(), "{p}");
            assert!(w[1]["sent"].as_u64() >= w[0]["sent"].as_u64(), "{p}");
            assert!(
                w[1]["received"].as_u64() >= w[0]["received"].as_u64(),
                "{p}"
            );
        }
        let last = pts.last().unwrap();
        let end = (
            last["sent"].as_u64().unwrap(),
            last["received"].as_u64().unwrap(),
        );
        assert_eq!(by_id[p["connection_id"].as_str().unwrap()], end, "{p}");
        // Duplex: -n is the sum of both directions.
        assert_eq!(end, (100 << 20, 100 << 20), "{p}");
        total_sent += end.0;
        total_recv += end.1;
    }
    assert_eq!(r["totals"]["sent"].as_u64(), Some(total_sent));
    assert_eq!(r["totals"]["received"].as_u64(), Some(total_recv));
    let bins = r["connection_histogram"].as_array().unwrap();
    let held: u64 = bins.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(held, 9);
    // The report: a line per connection each way, a bar per bin.
    let s = series(&h);
    for dir in ["sent", "received"] {
        let lines = series(chart_of(&h, &format!("Goodput per connection, {dir}")));
        assert_eq!(lines.len(), 9, "{lines:?}");
        for (p, (name, n)) in progress.iter().zip(&lines) {
            assert_eq!(name, &format!("#{}", p["index"]));
            let pts = p["points"].as_array().unwrap();
            let steps = pts
                .windows(2)
                .filter(|w| w[1]["secs"].as_f64() > w[0]["secs"].as_f64())
                .count();
            assert_eq!(*n, steps, "{name}");
        }
    }
    assert!(s.contains(&("connections".into(), bins.len())), "{s:?}");
}

/// Every kind renders, self-contained (no script, no fetch), with each
/// chart's points matching the JSON it came from.
#[test]
fn every_result_kind_renders_with_its_data() {
    let (_srv, addr) = serve_many();
    let a = addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let load = [&["load", &a][..], &LOAD_SHORT, &["upload"]].concat();
    let mut results = run_and_render_all(
        dir.path(),
        &[
            (
                "tcp",
                vec!["tcp", &a, "-t", "1s", "-i", "100ms", "-P", "2", "-n", "64M"],
            ),
            ("udp", vec!["udp", &a, "-t", "1s", "-i", "250ms"]),
            (
                "bidir",
                vec!["udp", &a, "--bidir", "-P", "2", "-t", "1s", "-i", "250ms"],
            ),
            (
                "burst",
                vec![
                    "udp",
                    &a,
                    "--burst-size",
                    "100K",
                    "--burst-period",
                    "200ms",
                    "-b",
                    "50M",
                    "-t",
                    "1s",
                ],
            ),
            ("media", vec!["udp", &a, "--media", "-b", "4M", "-t", "1s"]),
            ("sweep", vec!["sweep", &a, "-t", "2s", "--to-rate", "20M"]),
            ("rr", vec!["rr", &a, "--spectrum", "0..4", "-n", "200"]),
            ("ping", vec!["ping", &a, "-n", "5", "-i", "10ms"]),
            ("crr", vec!["crr", &a, "-n", "200"]),
            ("load", load),
        ],
    )
    .into_iter();
    let mut next = || results.next().unwrap();
    let (v, h) = next();
    let rows = count(&v["result"]["intervals"]);
    assert!(rows >= 8, "{rows}");
    let s = series(&h);
    // A push run: what was sent, and no line for the nothing received.
    assert!(s.contains(&("sent".into(), rows)), "{s:?}");
    assert!(!s.iter().any(|(n, _)| n == "received"), "{s:?}");
    assert!(s.contains(&("Completed".into(), rows)), "{s:?}");
    let pcts = count(&v["result"]["connection_times"]["percentiles_us"]);
    assert!(pcts >= 3 && s.contains(&("duration".into(), pcts)), "{s:?}");
    for banned in ["<script", "http://", "https://"] {
        // The SVG namespace is the one URL, and it is never fetched.
        let n = h.matches(banned).count();
        let ns = h.matches("http://www.w3.org/2000/svg").count();
        assert_eq!(n, if banned == "http://" { ns } else { 0 }, "{banned}");
    }
    let (v, h) = next();
    let rows = v["result"]["intervals"].as_array().unwrap();
    let with_delay = rows
        .iter()
        .filter(|r| r["delay_avg_us"].is_number())
        .count();
    let s = series(&h);
    for (name, n) in [
        ("received", rows.len()),
        ("drops", rows.len()),
        ("mean", with_delay),
    ] {
        assert!(s.contains(&(name.into(), n)), "{name}: {s:?}");
    }
    let hist = count(&v["result"]["totals"]["histogram"]);
    assert!(s.contains(&("datagrams".into(), hist)), "{s:?}");
    // The delay CDF: a point per bin until every datagram is counted, the
    // HDR percentiles marked where the JSON puts them.
    let t = &v["result"]["totals"];
    let counts = t["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[2].as_u64().unwrap());
    let c = chart_of(&h, "Delay CDF");
    assert_eq!(series(c), vec![("at or under".into(), cdf_points(counts))]);
    let want = pcts_ms(&t["percentiles_us"], &["p50", "p99", "p99.9"]);
    assert_eq!((marks(c), want.len()), (want, 3));
    // Streams each way: one series per stream, as many points as its rows.
    let (v, h) = next();
    let s = series(&h);
    for st in v["result"]["streams"].as_array().unwrap() {
        let dir = if st["reverse"] == true { "down" } else { "up" };
        let name = format!("{} {dir}", st["index"]);
        let rows = count(&st["report"]["intervals"]);
        assert!(s.contains(&(name.clone(), rows)), "{name}: {s:?}");
    }
    // Bursts and media frames have charts of their own.
    let (v, h) = next();
    let bursts = count(&v["result"]["bursts"]);
    assert!(bursts >= 4 && series(&h).contains(&("transfer ms".into(), bursts)));
    let (v, h) = next();
    let framed = v["result"]["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["frames"].is_object())
        .count();
    assert!(framed >= 1 && series(&h).contains(&("completed".into(), framed)));
    let (v, h) = next();
    let bins = count(&v["result"]["bins"]);
    assert!(series(&h).contains(&("received".into(), bins)));
    assert!(h.contains("Offered vs received rate"));
    let (v, h) = next();
    assert_eq!(count(&v["result"]["runs"]), 5);
    assert!(series(&h).contains(&("p99".into(), 5)), "{:?}", series(&h));
    let (v, h) = next();
    assert!(h.contains("Round-trip percentiles"));
    // ACE's histogram: a bar per non-empty bin in the JSON.
    let bins = count(&v["result"]["runs"][0]["histogram"]);
    assert!(bins >= 1 && series(&h).contains(&("round trips".into(), bins)));
    // Its CDF, with the percentiles marked.
    let run = &v["result"]["runs"][0];
    let counts = run["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b[1].is_number())
        .map(|b| b[2].as_u64().unwrap());
    let c = chart_of(&h, "Round-trip CDF");
    assert_eq!(series(c), vec![("at or under".into(), cdf_points(counts))]);
    let want = pcts_ms(&run["latency"]["percentiles_us"], &["p50", "p99", "p99.9"]);
    assert_eq!((marks(c), want.len()), (want, 3));
    // Every probe over time, from the JSON's probe log.
    assert_eq!(count(&v["result"]["probes"]["rows"]), 5);
    assert!(
        series(&h).contains(&("round trip".into(), 5)),
        "{:?}",
        series(&h)
    );
    let (v, h) = next();
    let pcts = count(&v["result"]["handshake"]["percentiles_us"]);
    assert!(series(&h).contains(&("handshake".into(), pcts)));
    let (v, h) = next();
    let udp = v["result"]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "udp" && p["ms"].is_number())
        .count();
    assert!(series(&h).contains(&("UDP round trip".into(), udp)));
    // Phase starts are marked.
    assert_eq!(h.matches(r#"class="mark""#).count(), 2, "idle and upload");
    assert!(h.contains(v["result"]["verdict"].as_str().unwrap()));
}

/// A sweep through a policing relay: the congestion point the analysis
/// found is marked on the charts at its rate.
#[test]
fn the_congestion_point_is_marked_at_the_analysed_rate() {
    let (_srv, to) = serve(&["-q"]);
    let (_rl, via) = relay(to, &["--rate", "20M", "--police"]);
    let dir = tempfile::tempdir().unwrap();
    // The analysis reads the policer from timing: a stalled run of this
    // shared host may find none, so up to three runs.
    let mut found = None;
    for _ in 0..3 {
        let (v, h) = run_and_render(
            dir.path(),
            "policed",
            &[
                "sweep",
                &via.to_string(),
                "-t",
                "4s",
                "--to-rate",
                "50M",
                "-i",
                "200ms",
            ],
        );
        if let Some(c) = v["result"]["analysis"]["congestion_bps"].as_f64() {
            found = Some((c, h));
            break;
        }
        eprintln!("no congestion point found: {}", v["result"]["analysis"]);
    }
    let (c, h) = found.expect("a congestion point in one of three sweeps");
    for title in [
        "Offered vs received rate",
        "Loss and delay against offered rate",
    ] {
        assert_eq!(marks(chart_of(&h, title)), vec![c], "{title} marks {c}");
    }
}

/// Two results of one kind share the charts, each series named by its
/// result's --title.
#[test]
fn results_of_one_kind_are_overlaid() {
    let (_srv, addr) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = Vec::new();
    for t in ["before", "after"] {
        let js = dir.path().join(format!("{t}.json"));
        run_expect(
            &[
                "udp",
                &addr.to_string(),
                "-t",
                "500ms",
                "--title",
                t,
                "-q",
                "--json",
                js.to_str().unwrap(),
            ],
            0,
        );
        files.push(js);
    }
    let out = dir.path().join("both.html");
    let mut args = vec!["report"];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    args.extend_from_slice(&["-o", out.to_str().unwrap()]);
    run_expect(&args, 0);
    let h = std::fs::read_to_string(&out).unwrap();
    let names: Vec<String> = series(&h).into_iter().map(|s| s.0).collect();
    assert!(names.contains(&"before: received".to_string()), "{names:?}");
    assert!(names.contains(&"after: received".to_string()), "{names:?}");
    assert_eq!(h.matches("<h3>Received rate over time</h3>").count(), 1);
}

/// `--html` on a test writes the report when the run ends, after Ctrl-C
/// too, with what was measured; bad inputs to `report` are usage errors.
#[test]
fn html_after_a_run_and_after_ctrl_c_and_bad_inputs() {
    let (_srv, addr) = serve(&["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("run.html");
    run_expect(
        &[
            "tcp",
            &addr.to_string(),
            "-n",
            "1M",
            "--iterations",
            "1",
            "-q",
            "--html",
            html.to_str().unwrap(),
        ],
        0,
    );
    assert!(
        std::fs::read_to_string(&html)
            .unwrap()
            .contains("Goodput over time")
    );
    let cut = dir.path().join("cut.html");
    let p = Proc(
        netrig(&[
            "udp",
            &addr.to_string(),
            "-t",
            "30s",
            "-q",
            "--html",
            cut.to_str().unwrap(),
        ])
        .spawn()
        .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (code, _) = interrupt(p);
    assert_eq!(code, Some(130));
    assert!(
        std::fs::read_to_string(&cut)
            .unwrap()
            .contains("Received rate over time")
    );
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{not json").unwrap();
    let other = dir.path().join("other.json");
    std::fs::write(&other, r#"{"hello": 1}"#).unwrap();
    let out = dir.path().join("x.html");
    for bad in [
        vec![
            "report",
            junk.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        vec![
            "report",
            other.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        vec!["report", "/no/such.json", "-o", out.to_str().unwrap()],
        vec![
            "report",
            other.to_str().unwrap(),
            "-o",
            "/no/such/dir/x.html",
        ],
        vec!["tcp", "--html", "/no/such/dir/x.html"],
    ] {
        let o = netrig(&bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
    }
    assert!(!out.exists());
}

/// Every chart of a report: (title, its `<svg>` markup).
fn charts(html: &str) -> Vec<(String, &str)> {
    html.split(r#"<svg class="chart""#)
        .skip(1)
        .map(|s| {
            let svg = s.split("</svg>").next().unwrap();
            let title = svg.split(r#"aria-label=""#).nth(1).unwrap();
            (unescape(title.split('"').next().unwrap()), svg)
        })
        .collect()
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// The value of attribute `name` in a tag's attribute text.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    tag.split(&format!(" {name}=\"")).nth(1)?.split('"').next()
}

/// A text element: its class, anchor, text and estimated box
/// (left, top, right, bottom).
struct Text {
    class: String,
    anchor: String,
    text: String,
    bx: [f64; 4],
}

/// Every `<text>` of `svg` with its box, estimated without a font: width
/// 0.62 em a character (DejaVu and Liberation Sans digits are 0.55–0.64
/// em), from 0.8 em above the baseline to 0.25 em below; a
/// `rotate(-90 x y)` turns the box about its anchor. Font sizes come from
/// the report's style (`svg .tick{font-size:10px...`).
fn texts(html: &str, svg: &str) -> Vec<Text> {
    let px = |class: &str| -> f64 {
        let rule = html
            .split(&format!("svg .{class}{{font-size:"))
            .nth(1)
            .unwrap_or_else(|| panic!("no font size for .{class}"));
        rule.split("px").next().unwrap().parse().unwrap()
    };
    svg.split("<text")
        .skip(1)
        .map(|t| {
            let (tag, rest) = t.split_once('>').unwrap();
            let text = unescape(rest.split("</text>").next().unwrap());
            let class = attr(tag, "class").unwrap().to_string();
            let anchor = attr(tag, "text-anchor").unwrap_or("start").to_string();
            let (x, y): (f64, f64) = (
                attr(tag, "x").unwrap().parse().unwrap(),
                attr(tag, "y").unwrap().parse().unwrap(),
            );
            let size = px(&class);
            let w = text.chars().count() as f64 * 0.62 * size;
            let left = match anchor.as_str() {
                "middle" => x - w / 2.0,
                "end" => x - w,
                _ => x,
            };
            let mut bx = [left, y - 0.8 * size, left + w, y + 0.25 * size];
            if let Some(r) = attr(tag, "transform") {
                let about: Vec<f64> = r
                    .strip_prefix("rotate(-90 ")
                    .and_then(|r| r.strip_suffix(')'))
                    .unwrap_or_else(|| panic!("{tag}"))
                    .split(' ')
                    .map(|v| v.parse().unwrap())
                    .collect();
                assert_eq!(about, [x, y], "turned about its anchor: {tag}");
                bx = [
                    x - 0.8 * size,
                    y - (bx[2] - x),
                    x + 0.25 * size,
                    y - (bx[0] - x),
                ];
            }
            Text {
                class,
                anchor,
                text,
                bx,
            }
        })
        .collect()
}

/// What is wrong with how the charts of `html` read: two text boxes that
/// overlap, a legend naming two series alike, a label outside the picture.
fn layout_faults(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (title, svg) in charts(html) {
        let view: Vec<f64> = attr(svg, "viewBox")
            .unwrap()
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        let t = texts(html, svg);
        for (i, a) in t.iter().enumerate() {
            let b = a.bx;
            if b[0] < -0.5 || b[1] < -0.5 || b[2] > view[2] + 0.5 || b[3] > view[3] + 0.5 {
                out.push(format!("{title}: {:?} outside the picture {b:?}", a.text));
            }
            for c in &t[i + 1..] {
                let d = c.bx;
                if b[0] < d[2] && d[0] < b[2] && b[1] < d[3] && d[1] < b[3] {
                    out.push(format!("{title}: {:?} over {:?}", a.text, c.text));
                }
            }
        }
        let names: Vec<&Text> = t.iter().filter(|t| t.class == "legend").collect();
        for (i, a) in names.iter().enumerate() {
            if names[i + 1..].iter().any(|b| b.text == a.text) {
                out.push(format!("{title}: two series named {:?}", a.text));
            }
        }
    }
    out
}

/// The x axis labels of a chart, left to right.
fn x_labels(html: &str, svg: &str) -> Vec<String> {
    texts(html, svg)
        .into_iter()
        .filter(|t| t.class == "tick" && t.anchor == "middle")
        .map(|t| t.text)
        .collect()
}

/// The chart titled `title` in the section of result kind `kind`.
fn chart_in<'a>(html: &'a str, kind: &str, title: &str) -> &'a str {
    let section = html
        .split(&format!("<section><h2>{kind}</h2>"))
        .nth(1)
        .unwrap_or_else(|| panic!("no {kind} section"));
    let section = section.split("</section>").next().unwrap();
    charts(section)
        .into_iter()
        .find(|(t, _)| t == title)
        .unwrap_or_else(|| panic!("no {title:?} chart for {kind}"))
        .1
}

fn percentile_names(p: &serde_json::Value) -> Vec<String> {
    p.as_array()
        .unwrap()
        .iter()
        .map(|e| e[0].as_str().unwrap().to_string())
        .collect()
}

/// Every chart of real tcp (push and pull, overlaid), udp, sweep, rr,
/// ping, crr and load reports reads: no two labels overlap or leave the
/// picture, and no legend names two series alike; percentiles and phases
/// are named on their axes; RPM is on a log axis; a one-way tcp run has no
/// line for the direction that moved nothing; two results from files of
/// one name are told apart by their paths' last parts.
#[test]
fn every_chart_reads_cleanly() {
    let (_srv, addr) = serve_many();
    let a = addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut files: Vec<(PathBuf, serde_json::Value)> = Vec::new();
    // Everything that reads wrong, each said once, all of it at the end.
    let mut wrong: Vec<String> = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            wrong.push(what);
        }
    };
    let mut faults: Vec<String> = Vec::new();
    let tcp = TCP_SHORT;
    let runs: Vec<(&str, Vec<&str>)> = vec![
        ("run1", [&["tcp", &a][..], &tcp, &["push"]].concat()),
        ("run2", [&["tcp", &a][..], &tcp, &["pull"]].concat()),
        ("run1", vec!["udp", &a, "-t", "1s", "-i", "250ms"]),
        ("run1", vec!["sweep", &a, "-t", "2s", "--to-rate", "20M"]),
        ("run1", vec!["rr", &a, "-n", "2000"]),
        ("run1", vec!["ping", &a, "-n", "20", "-i", "10ms"]),
        ("run1", vec!["crr", &a, "-n", "200"]),
        (
            "run1",
            [&["load", &a][..], &LOAD_SHORT, &["upload"]].concat(),
        ),
    ];
    let named = in_folders(d, runs);
    let mut results = Vec::new();
    for ((name, _), (v, h)) in named.iter().zip(run_and_render_all(d, &named)) {
        faults.extend(
            layout_faults(&h)
                .into_iter()
                .map(|f| format!("{name}: {f}")),
        );
        files.push((d.join(format!("{name}.json")), v.clone()));
        results.push(v);
    }
    let [push, pull, _udp, _sweep, rr, ping, crr, load] =
        <[serde_json::Value; 8]>::try_from(results).unwrap();
    // All of them in one report: tcp's two overlaid.
    let out = d.join("all.html");
    let mut args = vec!["report"];
    args.extend(files.iter().map(|(f, _)| f.to_str().unwrap()));
    args.extend_from_slice(&["-o", out.to_str().unwrap()]);
    run_expect(&args, 0);
    let h = std::fs::read_to_string(&out).unwrap();
    for f in faults.into_iter().chain(layout_faults(&h)) {
        check(false, f);
    }
    assert!(charts(&h).len() >= 20, "{}", charts(&h).len());
    // Percentiles by name, as the JSON lists them.
    let runs0 = |v: &serde_json::Value| v["result"]["runs"][0]["latency"]["percentiles_us"].clone();
    for (kind, title, p) in [
        ("rr", "Round-trip percentiles", runs0(&rr)),
        ("ping", "Round-trip percentiles", runs0(&ping)),
        (
            "tcp",
            "Connection durations",
            push["result"]["connection_times"]["percentiles_us"].clone(),
        ),
        (
            "crr",
            "Handshake and transaction percentiles",
            crr["result"]["handshake"]["percentiles_us"].clone(),
        ),
    ] {
        let names = percentile_names(&p);
        assert!(names.len() >= 5 && names[0] == "p50", "{kind}: {names:?}");
        let x = x_labels(&h, chart_in(&h, kind, title));
        check(
            x == names,
            format!("{kind} {title}: x axis {x:?}, not {names:?}"),
        );
    }
    // Phases by name, RPM on a log axis.
    let phases: Vec<String> = load["result"]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(phases, ["idle", "upload"]);
    for title in ["Goodput per phase", "Responsiveness per phase (RPM)"] {
        let x = x_labels(&h, chart_in(&h, "load", title));
        check(
            x == phases,
            format!("load {title}: x axis {x:?}, not {phases:?}"),
        );
    }
    let rpm = chart_in(&h, "load", "Responsiveness per phase (RPM)");
    check(
        rpm.contains(r#"data-y-scale="log""#),
        "RPM on a linear axis".into(),
    );
    // Push moved nothing in, pull nothing out: one line each, named by
    // as much of each file's path as tells them apart (both are tcp.json).
    assert!(push["result"]["totals"]["received"] == 0 && pull["result"]["totals"]["sent"] == 0);
    let names: Vec<String> = series(chart_in(&h, "tcp", "Goodput over time"))
        .into_iter()
        .map(|s| s.0)
        .collect();
    let want = ["run1/tcp.json: sent", "run2/tcp.json: received"];
    check(
        names == want,
        format!("tcp goodput lines {names:?}, not {want:?}"),
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Headless Chromium opens a report of tcp (push and pull overlaid), ping
/// and load: no console errors, no label over another, and the page is not
/// blank (its screenshot is several times a blank page's). The screenshot
/// is kept under target/ (report.png) for CI and for a person to look at.
#[test]
fn chromium_renders_the_report() {
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    else {
        eprintln!("SKIPPED: no chromium on this machine (.ci/run installs Debian's chromium)");
        return;
    };
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report.png");
    let blank = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("blank.png");
    let shot = |url: &str, png: &Path| {
        let o = std::process::Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
            ])
            .args(["--window-size=900,9000", "--enable-logging=stderr", "--v=0"])
            .arg(format!("--screenshot={}", png.display()))
            .arg(url)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!err.contains(":CONSOLE("), "console errors: {err}");
        std::fs::metadata(png).unwrap().len()
    };
    // A report of several kinds, two tcp runs overlaid: push and pull,
    // each from a file called tcp.json.
    let (_srv, addr) = serve_many();
    let a = addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tcp = TCP_SHORT;
    let runs = [
        ("push", [&["tcp", &a][..], &tcp, &["push"]].concat()),
        ("pull", [&["tcp", &a][..], &tcp, &["pull"]].concat()),
        ("ping", vec!["ping", &a, "-n", "50", "-i", "10ms"]),
        (
            "load",
            [&["load", &a][..], &LOAD_SHORT, &["download"]].concat(),
        ),
    ];
    let named = in_folders(d, runs);
    // The blank page's screenshot (it needs no report) while the runs go.
    let empty = std::thread::scope(|s| {
        let empty = s.spawn(|| shot("about:blank", &blank));
        run_and_render_all(d, &named);
        empty
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    });
    let files: Vec<String> = named
        .iter()
        .map(|(name, _)| d.join(format!("{name}.json")).display().to_string())
        .collect();
    let html = d.join("report.html");
    let mut args: Vec<&str> = vec!["report"];
    args.extend(files.iter().map(String::as_str));
    args.extend_from_slice(&["-o", html.to_str().unwrap()]);
    run_expect(&args, 0);
    let faults = layout_faults(&std::fs::read_to_string(&html).unwrap());
    assert!(faults.is_empty(), "{faults:#?}");
    let page = format!("file://{}", html.display());
    let size = shot(&page, &out);
    assert!(size > 4 * empty, "report {size} bytes, blank page {empty}");
    eprintln!("screenshot: {}", out.display());
}
