//! The architecture as a test (docs/design.md): the library's modules form
//! no import cycle, and the protocol layer — wire format, machines, pattern,
//! outcome, statistics, analysis — uses neither the I/O layer nor sockets,
//! threads, files or the OS clock.
//!
//! Module references are read from the sources (`crate::a::b`, `super::x`),
//! leaving out comments and `#[cfg(test)]` code; a reference resolves to the
//! deepest module it names. A child using its own ancestor (a `mod.rs`) is
//! one unit and not counted; every other reference is an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The protocol layer is the folder `src/protocol/`: pure code, time and
/// bytes as arguments. Every module under it is checked.
const PROTOCOL: &str = "protocol";

/// Whether module `m` is in the protocol layer.
fn in_protocol(m: &str) -> bool {
    m == PROTOCOL || m.starts_with(&format!("{PROTOCOL}::"))
}

/// What the protocol layer may not touch.
const IO_MARKERS: &[&str] = &[
    "TcpStream",
    "TcpListener",
    "UdpSocket",
    "mio::",
    "socket2::",
    "libc::",
    "Instant::now",
    "SystemTime::now",
    "std::fs",
    "std::thread",
];

/// Every library module (`a::b`) and its source without comments and tests.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).expect("read src") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, out);
                continue;
            }
            let rel = p.strip_prefix("src").expect("under src");
            let rel = rel.to_string_lossy();
            let Some(stem) = rel.strip_suffix(".rs") else {
                continue;
            };
            if stem == "main" || stem.starts_with("cmd/") || stem.ends_with("_tests") {
                continue;
            }
            let mut parts: Vec<&str> = stem.split('/').collect();
            if matches!(parts.last(), Some(&"mod") | Some(&"lib")) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&p).expect("read source");
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let code: String = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            out.insert(parts.join("::"), code);
        }
    }
    let mut out = BTreeMap::new();
    walk(Path::new("src"), &mut out);
    out
}

/// The modules `code` (in module `me`) refers to.
fn references(me: &str, code: &str, known: &BTreeSet<String>, is_dir: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let here: Vec<&str> = if me.is_empty() {
        Vec::new()
    } else {
        me.split("::").collect()
    };
    // `super` from a file module is its parent; from a mod.rs, the parent's parent.
    let parent = if is_dir || here.is_empty() {
        here.len().saturating_sub(1)
    } else {
        here.len() - 1
    };
    for (prefix, base) in [("crate::", 0), ("super::", parent)] {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut path: Vec<String> = here[..base.min(here.len())]
                .iter()
                .map(|s| s.to_string())
                .collect();
            for seg in rest.split("::") {
                let ident: String = seg
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if ident.is_empty() || ident == "super" {
                    break;
                }
                path.push(ident.clone());
                if ident.len() != seg.len() {
                    break;
                }
            }
            // The deepest module the path names.
            while !path.is_empty() && !known.contains(&path.join("::")) {
                path.pop();
            }
            let target = path.join("::");
            let ancestor =
                me == target || me.starts_with(&format!("{target}::")) || target.is_empty();
            if !ancestor {
                out.insert(target);
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    mods.iter()
        .map(|(m, code)| {
            let is_dir = Path::new("src").join(m.replace("::", "/")).is_dir();
            (m.clone(), references(m, code, &known, is_dir))
        })
        .collect()
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let g = graph();
    assert!(g.len() > 40, "found only {} modules", g.len());
    // Depth-first search for a back edge, reporting the cycle it closes.
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            return Some(path[i..].to_vec());
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for t in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(t, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in g.keys() {
        let cycle = visit(m, &g, &mut Vec::new(), &mut done);
        assert!(
            cycle.is_none(),
            "import cycle: {}",
            cycle.unwrap_or_default().join(" -> ")
        );
    }
}

#[test]
fn the_protocol_layer_uses_only_itself() {
    let g = graph();
    let mods = modules();
    let layer: Vec<&String> = g.keys().filter(|m| in_protocol(m)).collect();
    assert!(
        layer.len() > 60,
        "found only {} protocol modules",
        layer.len()
    );
    for m in layer {
        let outside: Vec<_> = g[m].iter().filter(|r| !in_protocol(r)).collect();
        assert!(outside.is_empty(), "protocol module {m} uses {outside:?}");
        let code = &mods[m];
        for marker in IO_MARKERS {
            assert!(!code.contains(marker), "protocol module {m} uses {marker}");
        }
    }
}

/// The command line's parser belongs to the binary (src/cmd): no library
/// type derives or names clap, so flags are turned into configurations in
/// one place and the wire types stay free of it (a flag's choices come from
/// `names::Named` tables).
#[test]
fn the_library_carries_no_command_line_parser() {
    let mods = modules();
    assert!(mods.len() > 50, "read only {} modules", mods.len());
    for (m, code) in &mods {
        assert!(!code.contains("clap"), "library module {m} uses clap");
    }
}

#[test]
fn the_checker_sees_references() {
    // The reader must find what it is meant to forbid, or the tests above
    // pass on nothing.
    let g = graph();
    assert!(
        g["protocol::tcp::machine"].contains("protocol::plan"),
        "{:?}",
        g["protocol::tcp::machine"]
    );
    // A module outside the folder naming one inside it is seen as such.
    assert!(
        g["udp::client"].contains("protocol::udp::client_machine"),
        "{:?}",
        g["udp::client"]
    );
    assert!(g["server"].contains("udp::serve"), "{:?}", g["server"]);
    assert!(g["udp::send"].contains("udp::mmsg"), "{:?}", g["udp::send"]);
    assert!(modules()["udp::send"].contains("libc::"));
}

/// Flags become a configuration in one place per command (issue 27 item 8):
/// each command that runs an engine, a server, a relay or a mesh node builds
/// its config in one `to_config` method, and nowhere else in its file, so
/// the checks a configuration gets are found in one place.
#[test]
fn every_command_turns_its_flags_into_a_config_in_one_place() {
    for (file, literal) in [
        ("tcp.rs", "TcpClientConfig {"),
        ("udp/config.rs", "Ok(UdpConfig {"),
        ("rr.rs", "RrConfig {"),
        ("ping.rs", "RrConfig {"),
        ("crr.rs", "crr::config("),
        ("load.rs", "LoadConfig {"),
        ("serve.rs", "ServerConfig {"),
        ("relay.rs", "RelayConfig {"),
        ("mesh.rs", "MeshConfig {"),
    ] {
        let path = Path::new("src/cmd").join(file);
        let text = std::fs::read_to_string(&path).expect("read command source");
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let start = code
            .find("fn to_config(")
            .unwrap_or_else(|| panic!("{file}: no to_config"));
        // The method's body ends where the next item at its depth begins.
        let rest = &code[start + 1..];
        let end = ["\n    fn ", "\n    pub", "\nfn ", "\npub ", "\nimpl "]
            .iter()
            .filter_map(|m| rest.find(m))
            .min()
            .map_or(code.len(), |i| start + 1 + i);
        // A struct literal, not a return type.
        let at: Vec<usize> = code
            .match_indices(literal)
            .map(|(i, _)| i)
            .filter(|&i| !code[..i].ends_with("-> "))
            .collect();
        assert_eq!(at.len(), 1, "{file}: `{literal}` {} times", at.len());
        assert!(
            (start..end).contains(&at[0]),
            "{file}: `{literal}` outside to_config"
        );
    }
}
