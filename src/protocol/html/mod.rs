//! `netrig report` and `--html`: one self-contained HTML file from netrig
//! results (no script, no fetch, prints well). Results of one kind are
//! overlaid in the same charts, named by their `--title` or file name.
//! Pure: JSON values in, a document out ([`svg`] draws, [`kinds`] says
//! what to draw for each result kind).

pub mod kinds;
pub mod layout;
pub mod merge;
pub mod plot;
pub mod svg;
pub mod tcp;

use serde_json::Value;
use std::fmt::Write;

use svg::esc;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px auto;max-width:820px;color:#212529}\
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #dee2e6;padding-bottom:4px;margin-top:32px}\
h3{font-size:15px;margin:18px 0 2px}.caption{font-size:13px;color:#495057;margin:0 0 4px}\
table.facts{border-collapse:collapse;margin:6px 0}table.facts td{padding:2px 12px 2px 0;font-size:13px;vertical-align:top}\
td.config{font-family:ui-monospace,monospace;font-size:11px;color:#495057;word-break:break-word}\
.big{display:flex;flex-wrap:wrap;gap:18px;margin:8px 0}.big div{font-size:12px;color:#495057}\
.big b{display:block;font-size:22px;color:#212529}.error{color:#c92a2a}\
svg.chart{width:100%;height:auto}svg .tick{font-size:10px;fill:#495057}svg .axis{font-size:11px;fill:#212529}\
svg .legend{font-size:11px;fill:#212529}svg .marklabel{font-size:10px;fill:#c92a2a;paint-order:stroke;stroke:#fff;stroke-width:3px}\
@media print{body{margin:0}section{break-inside:avoid}}";

/// Where a result came from, for the legend: its `--title`, else `name`.
fn label(name: &str, doc: &Value) -> String {
    doc["title"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map_or_else(|| name.to_string(), str::to_string)
}

/// Each result's [`label`], made distinct where two are the same (one
/// `--title` on two runs): the name is added, then the result's position.
fn labels(results: &[(String, Value)]) -> Vec<String> {
    let twice = |all: &[String], l: &String| all.iter().filter(|m| *m == l).count() > 1;
    let base: Vec<String> = results.iter().map(|(n, d)| label(n, d)).collect();
    let mut out: Vec<String> = base
        .iter()
        .zip(results)
        .map(|(l, (n, _))| {
            if twice(&base, l) && l != n {
                format!("{l} ({n})")
            } else {
                l.clone()
            }
        })
        .collect();
    let first = out.clone();
    for (i, l) in out.iter_mut().enumerate() {
        if twice(&first, l) {
            *l = format!("{l} #{}", i + 1);
        }
    }
    out
}

fn target(doc: &Value) -> String {
    let c = &doc["config"];
    if let Some(t) = c["targets"].as_array() {
        return t
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", ");
    }
    c["target"]
        .as_str()
        .or_else(|| doc["result"]["remote"].as_str())
        .unwrap_or("-")
        .to_string()
}

/// This end's address, where the result names it (udp, rr, ping).
fn local(doc: &Value) -> Option<String> {
    let r = &doc["result"];
    r["local"]
        .as_str()
        .or_else(|| r["runs"][0]["local"].as_str())
        .map(str::to_string)
}

/// The configuration as `key=value` pairs, nested keys dotted, lists
/// joined by commas, unset (null) values and empty lists left out.
fn config_pairs(v: &Value, prefix: &str, out: &mut Vec<String>) {
    let key = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    let Some(map) = v.as_object() else {
        return;
    };
    for (k, v) in map {
        match v {
            Value::Null => {}
            Value::Object(_) => config_pairs(v, &key(k), out),
            Value::Array(a) if a.is_empty() => {}
            Value::Array(a) => {
                let items: Vec<String> = a
                    .iter()
                    .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
                    .collect();
                out.push(format!("{}={}", key(k), items.join(",")));
            }
            Value::String(t) => out.push(format!("{}={t}", key(k))),
            _ => out.push(format!("{}={v}", key(k))),
        }
    }
}

/// Renders `results` ((name, envelope) pairs) as one HTML document.
pub fn render(results: &[(String, Value)]) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    for (_, d) in results {
        let k = d["test"].as_str().unwrap_or("unknown");
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    let mut h = String::new();
    let title = match results {
        [(n, d)] => format!(
            "netrig {}: {}",
            d["test"].as_str().unwrap_or("?"),
            label(n, d)
        ),
        _ => format!("netrig: {} results", results.len()),
    };
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body><h1>{}</h1>",
        esc(&title),
        esc(&title)
    );
    let names = labels(results);
    for kind in kinds {
        let group: Vec<(String, &Value)> = results
            .iter()
            .zip(&names)
            .filter(|((_, d), _)| d["test"].as_str().unwrap_or("unknown") == kind)
            .map(|((_, d), l)| (l.clone(), d))
            .collect();
        let _ = write!(h, "<section><h2>{}</h2>", esc(kind));
        let views: Vec<plot::View> = group.iter().map(|(_, d)| kinds::view(d)).collect();
        for ((name, d), v) in group.iter().zip(&views) {
            let _ = write!(
                h,
                "<h3>{}</h3><table class=\"facts\"><tr><td>target</td><td>{}</td></tr>",
                esc(name),
                esc(&target(d)),
            );
            if let Some(l) = local(d) {
                let _ = write!(h, "<tr><td>from</td><td>{}</td></tr>", esc(&l));
            }
            let mut config = Vec::new();
            config_pairs(&d["config"], "", &mut config);
            let _ = write!(
                h,
                "<tr><td>netrig</td><td>{}</td></tr><tr><td>configuration</td><td class=\"config\">{}</td></tr></table>",
                esc(d["version"].as_str().unwrap_or("?")),
                esc(&config.join(" "))
            );
            if let Some(e) = d["error"].as_str() {
                let _ = write!(h, "<p class=\"error\">error: {}</p>", esc(e));
            }
            h.push_str("<div class=\"big\">");
            for (k, val) in &v.facts {
                let _ = write!(h, "<div>{}<b>{}</b></div>", esc(k), esc(val));
            }
            h.push_str("</div>");
        }
        // Each chart once, with every result's series in it.
        let Some(first) = views.first() else {
            continue;
        };
        for (i, c) in first.charts.iter().enumerate() {
            let mut merged = c.clone();
            merged.series.clear();
            merged.marks.clear();
            merged.categories.clear();
            for ((name, _), v) in group.iter().zip(&views) {
                let Some(theirs) = v
                    .charts
                    .iter()
                    .find(|o| o.title == c.title)
                    .or(v.charts.get(i))
                else {
                    continue;
                };
                // Categories (percentiles, phases) by name: one result's
                // p99 lines up with another's even where their lists differ.
                let at: Vec<f64> = theirs
                    .categories
                    .iter()
                    .map(|c| {
                        let i = merged.categories.iter().position(|m| m == c);
                        i.unwrap_or_else(|| {
                            merged.categories.push(c.clone());
                            merged.categories.len() - 1
                        }) as f64
                    })
                    .collect();
                for s in &theirs.series {
                    let mut s = s.clone();
                    if group.len() > 1 {
                        s.name = format!("{name}: {}", s.name);
                    }
                    if !at.is_empty() {
                        s.points.retain(|p| (p.0 as usize) < at.len());
                        for p in &mut s.points {
                            p.0 = at[p.0 as usize];
                        }
                    }
                    merged.series.push(s);
                }
                merged.marks.extend(theirs.marks.iter().cloned());
            }
            let _ = write!(
                h,
                "<h3>{}</h3><p class=\"caption\">{}</p>{}",
                esc(&merged.title),
                esc(&merged.caption),
                svg::render(&merged)
            );
        }
        h.push_str("</section>");
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_header_names_both_ends_and_the_configuration() {
        let doc = json!({
            "test": "udp", "version": "0.1.0",
            "config": {"target": "h:1", "spec": {"size": 1000, "media": null,
                "sock": {"tos": null, "no_delay": false}}, "bind": [], "targets": ["a", "b"]},
            "result": {"local": "127.0.0.1:5000"}
        });
        let mut pairs = Vec::new();
        config_pairs(&doc["config"], "", &mut pairs);
        assert_eq!(
            pairs,
            [
                "spec.size=1000",
                "spec.sock.no_delay=false",
                "target=h:1",
                "targets=a,b"
            ]
        );
        let page = render(&[("x.json".into(), doc)]);
        assert!(
            page.contains("<td>from</td><td>127.0.0.1:5000</td>"),
            "{page}"
        );
        assert!(
            page.contains("spec.size=1000 spec.sock.no_delay=false"),
            "{page}"
        );
        let rr = json!({"test": "rr", "config": {}, "result": {"runs": [{"local": "[::1]:9"}]}});
        assert_eq!(local(&rr).as_deref(), Some("[::1]:9"));
        assert_eq!(local(&json!({"result": {}})), None);
    }

    #[test]
    fn overlaid_results_have_distinct_names() {
        let run = |title: Option<&str>| {
            let mut d = json!({"test": "tcp", "config": {}, "result": {"totals": {"sent": 8},
                "intervals": [{"TimeSlice": 1.0, "SendBps": 1}]}});
            if let Some(t) = title {
                d["title"] = json!(t);
            }
            d
        };
        let names = |r: &[(&str, Option<&str>)]| {
            let r: Vec<(String, Value)> = r.iter().map(|(n, t)| (n.to_string(), run(*t))).collect();
            labels(&r)
        };
        assert_eq!(names(&[("a", None), ("b", None)]), ["a", "b"]);
        assert_eq!(names(&[("a", Some("x")), ("b", Some("y"))]), ["x", "y"]);
        // One --title on two runs: the file names tell them apart.
        assert_eq!(
            names(&[("a", Some("tcp")), ("b", Some("tcp")), ("c", Some("other"))]),
            ["tcp (a)", "tcp (b)", "other"]
        );
        // Nothing tells them apart: their positions do.
        assert_eq!(
            names(&[("tcp", None), ("tcp", Some("tcp"))]),
            ["tcp #1", "tcp #2"]
        );
        assert_eq!(
            names(&[("a", Some("a")), ("a", Some("a")), ("b", None)]),
            ["a #1", "a #2", "b"]
        );
        // And the legend says so.
        let page = render(&[
            ("x".into(), run(Some("tcp"))),
            ("y".into(), run(Some("tcp"))),
        ]);
        assert!(page.contains(r#"data-name="tcp (x): sent""#), "{page}");
        assert!(page.contains(r#"data-name="tcp (y): sent""#), "{page}");
    }

    #[test]
    fn overlaid_percentiles_line_up_by_name() {
        let rr = |p: Value| json!({"test": "rr", "config": {}, "result": {"runs": [{"latency": {"percentiles_us": p}}]}});
        let a = rr(json!([["p50", 1000.0], ["p99", 3000.0]]));
        let b = rr(json!([["p50", 2000.0], ["p90", 2500.0], ["p99", 4000.0]]));
        let page = render(&[("a".into(), a), ("b".into(), b)]);
        let chart = page
            .split("<h3>Round-trip percentiles</h3>")
            .nth(1)
            .unwrap();
        let ticks: Vec<&str> = chart
            .split(r#"text-anchor="middle" class="tick">"#)
            .skip(1)
            .map(|t| t.split('<').next().unwrap())
            .collect();
        assert_eq!(ticks, ["p50", "p99", "p90"]);
        // Three slots 222 px wide from x 78, centred at 189, 411 and 633.
        let b_bars = chart.split(r#"data-name="b: round trip""#).nth(1).unwrap();
        let xs: Vec<f64> = b_bars
            .split("</g>")
            .next()
            .unwrap()
            .split(r#"<rect x=""#)
            .skip(1)
            .map(|t| t.split('"').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(xs.len(), 3);
        // b's p50, p90 and p99 stand in slots 0, 2 and 1 (the right half
        // of each: from its centre).
        assert_eq!(xs, [189.0, 633.0, 411.0]);
    }
}
