//! What packages are made of, checked without building one: `--version`,
//! the completions and manual pages the packages ship (rendered by `man`,
//! sourced and run by bash), the systemd unit's exposure score and that its
//! system-call filter admits every call a working server makes, and the
//! Kubernetes manifests rendered by kustomize and validated against a named
//! Kubernetes version. Tools that .ci/run installs are required under CI;
//! elsewhere a missing one makes its test say it skipped.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::bin;
use bin::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The Kubernetes version the manifests are validated against.
const KUBERNETES_VERSION: &str = "1.32.0";

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// True when `tool` is there; else says the test skipped (and fails under
/// CI, whose .ci/run installs it).
fn need(tool: &str, test: &str) -> bool {
    if have(tool) {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {tool} is missing, and .ci/run should have installed it"
    );
    eprintln!("SKIPPED {test}: {tool} is not installed");
    false
}

fn output(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn version_names_the_commit_the_target_and_sctp() {
    let kernel = match netrig::sctp::support(false) {
        Ok(()) => "kernel: available".to_string(),
        Err(_) => "kernel: not available (".to_string(),
    };
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(ROOT)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    for flag in ["--version", "-V"] {
        let v = run_expect(&[flag], 0);
        let lines: Vec<&str> = v.lines().collect();
        assert_eq!(lines.len(), 4, "{v}");
        assert_eq!(lines[0], concat!("netrig ", env!("CARGO_PKG_VERSION")));
        let got = lines[1].strip_prefix("commit: ").expect("a commit line");
        match &commit {
            Some(c) => assert_eq!(got, c, "the commit built is HEAD"),
            None => assert_eq!(got, "unknown"),
        }
        // build.rs sets the same variable for this test as for the binary.
        assert_eq!(lines[2], concat!("target: ", env!("NETRIG_BUILD_TARGET")));
        assert!(lines[2].contains("-linux-"), "{}", lines[2]);
        assert!(
            lines[3].starts_with("sctp:   compiled in; ") && lines[3].contains(&kernel),
            "{} (expected {kernel})",
            lines[3]
        );
    }
    // The version flag belongs to the top level only.
    assert!(!run_expect(&["tcp", "--help"], 0).contains("commit:"));
}

#[test]
fn bash_completion_sources_and_completes_subcommands_and_flags() {
    if !need("bash", "bash completion") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("netrig.bash");
    std::fs::write(&file, run_expect(&["completions", "bash"], 0)).unwrap();
    // Sourced as bash-completion would, then asked as after a TAB.
    let script = format!(
        r#"source {f} || exit 9
complete -p netrig
COMP_WORDS=(netrig t); COMP_CWORD=1; COMP_LINE="netrig t"; COMP_POINT=8
_netrig netrig t netrig; echo "subcommands: ${{COMPREPLY[*]}}"
COMP_WORDS=(netrig tcp --txs); COMP_CWORD=2; COMP_LINE="netrig tcp --txs"; COMP_POINT=16
_netrig netrig --txs tcp; echo "flags: ${{COMPREPLY[*]}}""#,
        f = file.display()
    );
    let out = output(Command::new("bash").args(["--norc", "-c", &script]));
    assert!(
        out.contains("-F _netrig") && out.contains("netrig"),
        "{out}"
    );
    let subs = out.lines().find(|l| l.starts_with("subcommands:")).unwrap();
    assert!(subs.contains("tcp"), "{out}");
    assert!(!subs.contains("serve"), "only what starts with t: {out}");
    let flags = out.lines().find(|l| l.starts_with("flags:")).unwrap();
    assert!(flags.contains("--txstart-time"), "{out}");
}

#[test]
fn zsh_and_fish_completions_name_every_subcommand() {
    let zsh = run_expect(&["completions", "zsh"], 0);
    let fish = run_expect(&["completions", "fish"], 0);
    assert!(zsh.starts_with("#compdef netrig"), "{}", &zsh[..80]);
    for sub in ["serve", "tcp", "udp", "rr", "relay", "completions", "man"] {
        assert!(zsh.contains(&format!("'{sub}:")), "zsh lacks {sub}");
        assert!(fish.contains(&format!("-a \"{sub}\"")), "fish lacks {sub}");
    }
    for (shell, text) in [("zsh", &zsh), ("fish", &fish)] {
        if have(shell) {
            let dir = tempfile::tempdir().unwrap();
            let f = dir.path().join("c");
            std::fs::write(&f, text).unwrap();
            // Parsed without running: a syntax error fails here.
            output(Command::new(shell).args(["-n", f.to_str().unwrap()]));
        } else {
            eprintln!("SKIPPED parsing the {shell} completion: no {shell} here");
        }
    }
    run_expect(&["completions", "tcsh"], 2);
}

#[test]
fn man_pages_render_with_man() {
    if !need("man", "man pages") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().join("netrig.1");
    std::fs::write(&top, run_expect(&["man"], 0)).unwrap();
    let render = |page: &Path| {
        output(
            Command::new("man")
                .arg("-l")
                .arg(page)
                .env("MANWIDTH", "100")
                .env("MANPAGER", "cat")
                .env("PAGER", "cat"),
        )
    };
    let text = render(&top);
    for want in [
        "NAME",
        "SYNOPSIS",
        "SUBCOMMANDS",
        "netrig-serve(1)",
        "netrig-tcp(1)",
    ] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
    let pages = dir.path().join("pages");
    run_expect(&["man", "--dir", pages.to_str().unwrap()], 0);
    let tcp = render(&pages.join("netrig-tcp.1"));
    assert!(tcp.contains("--txstart-time"), "{tcp}");
    let serve = render(&pages.join("netrig-serve.1"));
    assert!(serve.contains("--max-rate"), "{serve}");
    let n = std::fs::read_dir(&pages).unwrap().count();
    assert!(n >= 12, "one page per subcommand and the top one, got {n}");
}

const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/packaging/systemd/netrig.service"
);

#[test]
fn the_systemd_unit_is_exposed_at_most_2_0() {
    if !need("systemd-analyze", "systemd unit score") {
        return;
    }
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager", UNIT])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for netrig.service: "))
        .and_then(|(_, r)| r.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no score in:\n{text}"));
    println!("systemd-analyze security: exposure {score}");
    assert!(score <= 2.0, "exposure {score} > 2.0:\n{text}");
    let unit = std::fs::read_to_string(UNIT).unwrap();
    for line in [
        "DynamicUser=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=\n",
        "RestrictAddressFamilies=AF_INET AF_INET6\n",
        "ExecStart=/usr/bin/netrig serve\n",
    ] {
        assert!(unit.contains(line), "the unit lacks {line:?}");
    }
}

/// The system calls in `systemd-analyze syscall-filter` groups, with the
/// groups they name expanded.
fn syscall_set(groups: &str) -> std::collections::BTreeSet<String> {
    let mut set = std::collections::BTreeSet::new();
    let mut todo: Vec<String> = groups.split_whitespace().map(String::from).collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(g) = todo.pop() {
        if !seen.insert(g.clone()) {
            continue;
        }
        let out =
            output(Command::new("systemd-analyze").args(["syscall-filter", "--no-pager", &g]));
        // The first line is the group's own name; then its members.
        for l in out.lines().skip(1).map(str::trim) {
            if l.starts_with('@') {
                todo.push(l.to_string());
            } else if !l.is_empty() && !l.starts_with('#') {
                set.insert(l.to_string());
            }
        }
    }
    set
}

/// The unit's filter (`@system-service` less `@privileged @resources`)
/// would kill the server on its first call outside it: a server traced
/// through TCP, UDP and rr tests must make none.
#[test]
fn the_units_syscall_filter_admits_every_call_the_server_makes() {
    if !need("systemd-analyze", "syscall filter") || !need("strace", "syscall filter") {
        return;
    }
    let unit = std::fs::read_to_string(UNIT).unwrap();
    assert!(
        unit.contains(
            "SystemCallFilter=@system-service\nSystemCallFilter=~@privileged @resources\n"
        )
    );
    let allowed = syscall_set("@system-service");
    let denied = syscall_set("@privileged @resources");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-o"])
        .arg(&trace)
        .args([BIN, "serve", "--listen", "127.0.0.1:0"]);
    let (server, addr) = serve_cmd(cmd);
    let target = addr.to_string();
    run_expect(&["tcp", &target, "-n", "1M", "--iterations", "1", "-q"], 0);
    run_expect(&["udp", &target, "-t", "300ms", "-b", "10M", "-q"], 0);
    run_expect(&["rr", &target, "-n", "200", "--warmup", "10", "-q"], 0);
    // Killing strace would leave the server running, detached: stop the
    // server (strace's one child) and let strace exit after it.
    let tracer = server.0.id();
    let children =
        std::fs::read_to_string(format!("/proc/{tracer}/task/{tracer}/children")).unwrap();
    let pid: u32 = children
        .split_whitespace()
        .next()
        .expect("the traced server")
        .parse()
        .unwrap();
    sigint(pid);
    let mut server = server;
    wait_exit(&mut server, 10);
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut used = std::collections::BTreeSet::new();
    for l in text.lines() {
        // "PID name(args…" or "PID <... name resumed>"
        let body = l.split_once(' ').map_or(l, |(_, r)| r).trim_start();
        if let Some((name, _)) = body.split_once('(')
            && !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            used.insert(name.to_string());
        }
    }
    assert!(
        used.contains("accept4") || used.contains("accept"),
        "{used:?}"
    );
    // execve is strace starting the server, before any filter would apply.
    let refused: Vec<_> = used
        .iter()
        .filter(|s| s.as_str() != "execve" && (!allowed.contains(*s) || denied.contains(*s)))
        .collect();
    assert!(refused.is_empty(), "outside the unit's filter: {refused:?}");
}

/// kubectl with a kustomize that reads these kustomizations (`labels`,
/// inline `patches`: kustomize 4.1 and later; Debian 12's kubernetes-client
/// 1.20 has 2.0).
fn kustomize(test: &str) -> bool {
    if !need("kubectl", test) {
        return false;
    }
    let v = output(Command::new("kubectl").args(["version", "--client"]));
    let major = v
        .lines()
        .find_map(|l| l.strip_prefix("Kustomize Version: v"))
        .and_then(|r| r.split('.').next())
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    if major < 4 {
        eprintln!("SKIPPED {test}: kubectl's kustomize is older than 4.1:\n{v}");
        return false;
    }
    true
}

const KUSTOMIZATIONS: &[&str] = &[
    "overlays/default",
    "overlays/hostnetwork",
    "overlays/monitoring",
    "overlays/mesh",
    "jobs/load",
];

/// Every overlay renders, and its output passes kubernetes-validate
/// --strict for one Kubernetes version. The Prometheus Operator's kinds
/// (PodMonitor, PrometheusRule) have no schema there: the validator says
/// so and they are checked here by hand instead.
#[test]
fn every_kustomization_renders_and_validates() {
    if !kustomize("kubernetes manifests") || !need("kubernetes-validate", "kubernetes manifests") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for k in KUSTOMIZATIONS {
        let rendered = output(
            Command::new("kubectl")
                .args(["kustomize"])
                .arg(Path::new(ROOT).join("deploy/kubernetes").join(k)),
        );
        let file = dir.path().join(k.replace('/', "-") + ".yaml");
        std::fs::write(&file, &rendered).unwrap();
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "-k", KUBERNETES_VERSION])
            .arg(&file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{k}:\n{text}");
        let kinds: Vec<&str> = rendered
            .lines()
            .filter_map(|l| l.strip_prefix("kind: "))
            .collect();
        let crds = ["PodMonitor", "PrometheusRule"];
        for kind in &kinds {
            let lower = kind.to_lowercase();
            if crds.contains(kind) {
                assert!(
                    text.contains(&format!("Couldn't find schema for kind {kind}")),
                    "{text}"
                );
            } else {
                assert!(
                    text.contains(&format!("passed for resource {lower}/")),
                    "{k}: {kind} not validated:\n{text}"
                );
            }
        }
        for want in [
            "runAsNonRoot: true",
            "readOnlyRootFilesystem: true",
            "allowPrivilegeEscalation: false",
            "type: RuntimeDefault",
            "- ALL",
            "limits:",
            "secretKeyRef:",
        ] {
            // The mesh's probes carry no key (overlays/mesh says why).
            if *k == "overlays/mesh" && want == "secretKeyRef:" {
                continue;
            }
            assert!(rendered.contains(want), "{k}: no {want}");
        }
        println!("{k}: {} resources rendered and validated", kinds.len());
    }
    // The validator is strict: a misspelt field is an error, so the
    // passes above mean something.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  clusterIp: None\n",
    )
    .unwrap();
    let st = Command::new("kubernetes-validate")
        .args(["--strict", "-k", KUBERNETES_VERSION])
        .arg(&bad)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(
        !st.success(),
        "kubernetes-validate accepted a misspelt field"
    );
}

/// The pieces the validator cannot check: the PodMonitor scrapes a port
/// the server declares, the server is started with --metrics on it, every
/// alert has an expression over netrig's series, and the dashboard is JSON
/// whose panels all query netrig's series.
#[test]
fn the_monitoring_overlay_is_consistent() {
    if !kustomize("monitoring overlay") {
        return;
    }
    let rendered = output(
        Command::new("kubectl")
            .arg("kustomize")
            .arg(Path::new(ROOT).join("deploy/kubernetes/overlays/monitoring")),
    );
    assert!(
        rendered.contains("- --metrics\n        - 0.0.0.0:9464\n"),
        "{rendered}"
    );
    assert!(
        rendered.contains("containerPort: 9464\n          name: metrics"),
        "{rendered}"
    );
    assert!(
        rendered.contains(
            "podMetricsEndpoints:\n  - interval: 30s\n    path: /metrics\n    port: metrics"
        ),
        "{rendered}"
    );
    let alerts = rendered.matches("- alert: Netrig").count();
    let exprs = rendered.matches("expr: ").count();
    assert!(
        alerts >= 4 && exprs == alerts,
        "{alerts} alerts, {exprs} expressions"
    );
    for want in ["NetrigPathLoss", "NetrigPathLatency"] {
        assert!(rendered.contains(want), "no {want} alert");
    }
    let dash = std::fs::read_to_string(
        Path::new(ROOT).join("deploy/kubernetes/overlays/monitoring/netrig-dashboard.json"),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&dash).unwrap();
    let panels = v["panels"].as_array().unwrap();
    assert!(panels.len() >= 4);
    for p in panels {
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty());
        for t in targets {
            assert!(t["expr"].as_str().unwrap().contains("netrig_"), "{t}");
        }
    }
    assert!(rendered.contains("grafana_dashboard: \"1\""));
}

/// The mesh overlay: a DaemonSet of `netrig mesh` finding its peers
/// through the headless Service it ships, on the ports that Service and
/// the PodMonitor name, and nothing of the server's.
#[test]
fn the_mesh_overlay_finds_its_peers_through_its_headless_service() {
    if !kustomize("mesh overlay") {
        return;
    }
    let rendered = output(
        Command::new("kubectl")
            .arg("kustomize")
            .arg(Path::new(ROOT).join("deploy/kubernetes/overlays/mesh")),
    );
    let kinds: Vec<&str> = (rendered.lines())
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    assert_eq!(
        kinds,
        ["Namespace", "ServiceAccount", "Service", "DaemonSet"]
    );
    assert!(!rendered.contains("netrig-server"), "{rendered}");
    for want in [
        "clusterIP: None",
        "publishNotReadyAddresses: true",
        "- --peers-dns\n        - netrig-mesh.netrig.svc:4795\n",
        "- --self\n        - $(POD_IP):4795\n",
        "- --metrics\n        - 0.0.0.0:9465\n",
        "fieldPath: status.podIP",
        "containerPort: 4795\n          name: mesh-udp\n          protocol: UDP",
        "containerPort: 9465\n          name: metrics",
        "  name: netrig-mesh\n  namespace: netrig\n",
    ] {
        assert!(rendered.contains(want), "no {want:?} in:\n{rendered}");
    }
    let monitoring = output(
        Command::new("kubectl")
            .arg("kustomize")
            .arg(Path::new(ROOT).join("deploy/kubernetes/overlays/monitoring")),
    );
    assert!(
        monitoring.contains(
            "  name: netrig-mesh\n  namespace: netrig\nspec:\n  podMetricsEndpoints:\n  - interval: 30s\n    path: /metrics\n    port: metrics\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: netrig-mesh\n"
        ),
        "{monitoring}"
    );
}

/// The load Job: Indexed, every client at once, each told the one start
/// time and naming its stream and JSON by its index.
#[test]
fn the_load_job_starts_n_indexed_clients_together() {
    if !kustomize("load job") {
        return;
    }
    let r = output(
        Command::new("kubectl")
            .arg("kustomize")
            .arg(Path::new(ROOT).join("deploy/kubernetes/jobs/load")),
    );
    let field = |name: &str| -> String {
        r.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name}"))
            .to_string()
    };
    assert_eq!(field("completionMode"), "Indexed");
    assert_eq!(field("completions"), field("parallelism"));
    assert_eq!(field("backoffLimit"), "0");
    for want in [
        "- --txstart-time\n        - $(START_AT)",
        "- client-$(JOB_COMPLETION_INDEX)",
        "- --json\n        - '-'",
        "metadata.annotations['batch.kubernetes.io/job-completion-index']",
        "name: netrig-load-start",
    ] {
        assert!(r.contains(want), "no {want:?} in\n{r}");
    }
    // Every flag the Job passes exists: the same args, with the
    // variables given, parse (a start time one second ahead).
    let start = format!("{}", netrig::net::realtime_ns() / 1_000_000_000 + 1);
    let (server, addr) = serve(&[]);
    let out = netrig(&[
        "tcp",
        &addr.to_string(),
        "--txstart-time",
        &start,
        "-t",
        "300ms",
        "-P",
        "4",
        "--seed",
        "3",
        "--title",
        "client-3",
        "--json",
        "-",
        "-q",
    ])
    .output()
    .unwrap();
    drop(server);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON alone on stdout");
    assert!(
        v.to_string().contains("client-3"),
        "the title names the stream"
    );
}
