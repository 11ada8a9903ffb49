//! Every command's JSON report against the JSON Schema in the repository
//! (`schema/netrig.schema.json`), validated by Python's `jsonschema`
//! (CI installs it; elsewhere the test says it skipped).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bin;
use bin::*;

const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/netrig.schema.json");

/// Validates each file; returns the files that failed, with the reasons.
fn invalid(files: &[PathBuf]) -> Option<String> {
    let script = r#"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
bad = []
for f in sys.argv[2:]:
    for e in v.iter_errors(json.load(open(f))):
        bad.append(f"{f}: {list(e.path)}: {e.message[:200]}")
print("\n".join(bad))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(SCHEMA)
        .args(files)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn validator_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import jsonschema"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install Python's jsonschema (.ci/run does)"
        );
        eprintln!("skipped: Python's jsonschema is not installed (pip install jsonschema)");
    }
    ok
}

fn write(dir: &Path, name: &str, args: &[&str], code: i32) -> PathBuf {
    let path = dir.join(format!("{name}.json"));
    let mut all = args.to_vec();
    all.extend(["-q", "--json", path.to_str().unwrap()]);
    let out = netrig(&all).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

#[test]
fn every_commands_json_matches_the_schema() {
    if !validator_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_held, port) = refused_port();
    let refused = format!("127.0.0.1:{port}");
    // Every command's run at once (each against an embedded server of
    // its own): most of them are time-bound (`-t`, load's phases).
    let runs: Vec<(&str, Vec<&str>, i32)> = vec![
        ("tcp", vec!["tcp", "-P", "2", "-n", "1M"], 0),
        (
            "udp",
            vec![
                "udp", "-t", "300ms", "-b", "5M", "--dscp", "EF", "--ecn", "ect0",
            ],
            0,
        ),
        ("udp-reverse", vec!["udp", "-t", "300ms", "-R"], 0),
        (
            "udp-streams",
            vec!["udp", "-t", "300ms", "-P", "2", "--bidir"],
            0,
        ),
        ("sweep", vec!["sweep", "--to-rate", "5M", "-t", "1s"], 0),
        ("rr", vec!["rr", "-n", "200"], 0),
        ("rr-udp", vec!["rr", "--proto", "udp", "-n", "200"], 0),
        ("spectrum", vec!["rr", "--spectrum", "0..3", "-n", "50"], 0),
        ("ping", vec!["ping", "-n", "3", "-i", "10ms"], 0),
        ("crr", vec!["crr", "-n", "50"], 0),
        (
            "load",
            vec![
                "load",
                "--idle",
                "1s",
                "--phase-time",
                "4s",
                "--phases",
                "upload",
                "-P",
                "2",
            ],
            0,
        ),
        (
            "relay",
            vec![
                "relay",
                "--listen",
                "127.0.0.1:0",
                "--to",
                "127.0.0.1:9",
                "-t",
                "200ms",
            ],
            0,
        ),
        ("refused", vec!["tcp", &refused], 3),
        ("refused-rr", vec!["rr", &refused], 3),
    ];
    let mut files: Vec<PathBuf> = std::thread::scope(|s| {
        let started: Vec<_> = runs
            .iter()
            .map(|(name, args, code)| s.spawn(move || write(d, name, args, *code)))
            .collect();
        started
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    // netrig merge's result, of each kind that merges.
    for kind in ["tcp", "udp", "udp-streams", "ping", "crr", "rr"] {
        let input = d.join(format!("{kind}.json"));
        let out = d.join(format!("merge-{kind}.json"));
        let (i, o) = (input.to_str().unwrap(), out.to_str().unwrap());
        let status = netrig(&["merge", i, i, "-o", o, "-q"]).status().unwrap();
        assert!(status.success(), "merge of {kind}");
        files.push(out);
    }
    if let Some(why) = invalid(&files) {
        panic!("reports that do not match the schema:\n{why}");
    }
    // The schema has teeth: a report without its result, or with a
    // negative count, is refused.
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    let mut broken = Vec::new();
    for (i, mutate) in [
        |v: &mut serde_json::Value| {
            v.as_object_mut().unwrap().remove("result");
        },
        |v: &mut serde_json::Value| v["result"]["totals"]["completed"] = (-1).into(),
        |v: &mut serde_json::Value| v["test"] = "nonsense".into(),
        |v: &mut serde_json::Value| v["result"] = serde_json::Value::Null,
        // Every TCP report says what CPU both ends used.
        |v: &mut serde_json::Value| {
            v["result"].as_object_mut().unwrap().remove("cpu");
        },
        |v: &mut serde_json::Value| v["result"]["cpu"]["local"]["total_percent"] = (-1).into(),
    ]
    .into_iter()
    .enumerate()
    {
        let mut v = doc.clone();
        mutate(&mut v);
        let p = d.join(format!("broken{i}.json"));
        std::fs::write(&p, v.to_string()).unwrap();
        broken.push(p);
    }
    let why = invalid(&broken).unwrap_or_default();
    for p in &broken {
        assert!(
            why.contains(p.to_str().unwrap()),
            "{} passed the schema:\n{why}",
            p.display()
        );
    }
}
