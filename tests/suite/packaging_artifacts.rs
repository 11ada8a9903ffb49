//! The built artifacts, used as a user would: the static binary, the .deb
//! installed with dpkg (binary, manual pages, completions, systemd unit;
//! its server answering a client) and removed, and the container image's
//! file system holding the static binary alone, which then serves a test.
//!
//! Building them takes minutes (a second, musl build of everything), so
//! these tests do not: .ci/run builds them once before `cargo test`
//! (packaging/build-static.sh, packaging/build-deb.sh), and here a missing
//! artifact fails under CI and says it skipped elsewhere, with the command
//! that builds it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::bin;
use bin::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn skip(test: &str, why: &str) {
    assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
    eprintln!("SKIPPED {test}: {why}");
}

fn static_binary(test: &str) -> Option<PathBuf> {
    let p = Path::new(ROOT).join("target/x86_64-unknown-linux-musl/release/netrig");
    if p.exists() {
        Some(p)
    } else {
        skip(test, "no static binary: run packaging/build-static.sh");
        None
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A netrig binary `exe` measures against the test build's server, and
/// the test build measures against `exe`'s server: each speaks to the other.
fn talks_both_ways(exe: &str) {
    let (server, addr) = serve(&[]);
    run(Command::new(exe).args([
        "tcp",
        &addr.to_string(),
        "-n",
        "1M",
        "--iterations",
        "1",
        "-q",
    ]));
    drop(server);
    let (server, addr) = serve_cmd({
        let mut c = Command::new(exe);
        c.args(["serve", "--listen", "127.0.0.1:0"]);
        c
    });
    run_expect(
        &["udp", &addr.to_string(), "-t", "300ms", "-b", "10M", "-q"],
        0,
    );
    drop(server);
}

fn is_static(path: &Path) -> bool {
    let f = run(Command::new("file").arg("-b").arg(path));
    let ldd = Command::new("ldd").arg(path).output().unwrap();
    let ldd =
        String::from_utf8_lossy(&ldd.stdout).into_owned() + &String::from_utf8_lossy(&ldd.stderr);
    (f.contains("static-pie linked") || f.contains("statically linked")) && !ldd.contains("=>")
}

#[test]
fn the_static_binary_has_no_shared_libraries_and_works() {
    let Some(bin) = static_binary("static binary") else {
        return;
    };
    assert!(is_static(&bin), "{} is not static", bin.display());
    let v = run(Command::new(&bin).arg("--version"));
    assert!(v.contains("target: x86_64-unknown-linux-musl"), "{v}");
    println!(
        "static binary: {} bytes",
        std::fs::metadata(&bin).unwrap().len()
    );
    talks_both_ways(bin.to_str().unwrap());
}

fn deb() -> Option<PathBuf> {
    let dir = Path::new(ROOT).join("target/packaging");
    std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

/// Installs the .deb, checks what it put where, runs its server against a
/// client, and removes it again.
#[test]
fn the_deb_installs_runs_and_removes() {
    const T: &str = "deb install";
    if !Path::new("/usr/bin/dpkg").exists() {
        return skip(T, "no dpkg (not Debian or Ubuntu)");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip(T, "dpkg -i needs root");
    }
    let Some(deb) = deb() else {
        return skip(
            T,
            "no .deb: run packaging/build-static.sh && packaging/build-deb.sh",
        );
    };
    if Command::new("dpkg")
        .args(["-s", "netrig"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
    {
        // Not ours to remove.
        eprintln!("SKIPPED {T}: a netrig package is already installed here");
        return;
    }
    let info = run(Command::new("dpkg-deb").arg("--info").arg(&deb));
    assert!(info.contains("Package: netrig"), "{info}");
    // Static: the package needs nothing from the system.
    assert!(
        info.lines()
            .all(|l| !l.trim_start().starts_with("Depends:") || l.trim() == "Depends:"),
        "{info}"
    );
    run(Command::new("dpkg").arg("-i").arg(&deb));
    struct Remove;
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = Command::new("dpkg").args(["-r", "netrig"]).output();
        }
    }
    let guard = Remove;
    let files = run(Command::new("dpkg").args(["-L", "netrig"]));
    for f in [
        "/usr/bin/netrig",
        "/usr/share/man/man1/netrig.1.gz",
        "/usr/share/man/man1/netrig-serve.1.gz",
        "/usr/share/bash-completion/completions/netrig",
        "/usr/share/zsh/vendor-completions/_netrig",
        "/usr/share/fish/vendor_completions.d/netrig.fish",
        "/lib/systemd/system/netrig.service",
    ] {
        let alt = f.replace("/lib/systemd", "/usr/lib/systemd");
        assert!(
            files.lines().any(|l| l == f || l == alt),
            "{f} not installed:\n{files}"
        );
        assert!(
            Path::new(f).exists() || Path::new(&alt).exists(),
            "{f} missing"
        );
    }
    // The installed unit as systemd reads it: every key known, the binary
    // and its Documentation= man page in place.
    if Path::new("/usr/bin/systemd-analyze").exists() {
        let unit = [
            "/lib/systemd/system/netrig.service",
            "/usr/lib/systemd/system/netrig.service",
        ]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
        let out = Command::new("systemd-analyze")
            .args(["verify", unit])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.trim().is_empty(),
            "systemd-analyze verify: {err}"
        );
    }
    let v = run(Command::new("/usr/bin/netrig").arg("--version"));
    assert!(
        v.starts_with(concat!("netrig ", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    assert!(is_static(Path::new("/usr/bin/netrig")));
    talks_both_ways("/usr/bin/netrig");
    drop(guard);
    assert!(
        !Path::new("/usr/bin/netrig").exists(),
        "dpkg -r left the binary"
    );
}

/// The image holds one file, the static binary, runs as a numeric
/// non-root user and serves by default. podman here builds images but
/// cannot run containers, so the binary is taken out and run.
#[test]
fn the_image_holds_the_static_binary_alone() {
    const T: &str = "container image";
    if !Path::new("/usr/bin/podman").exists() {
        return skip(T, "no podman (apt-get install podman)");
    }
    if static_binary(T).is_none() {
        return;
    }
    let tag = format!("localhost/netrig-test:{}", std::process::id());
    let ctx = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(ROOT).join("target/x86_64-unknown-linux-musl/release/netrig"),
        ctx.path().join("netrig"),
    )
    .unwrap();
    let built = Command::new("podman")
        .args(["build", "--quiet", "-f"])
        .arg(Path::new(ROOT).join("packaging/Containerfile"))
        .args(["-t", &tag])
        .arg(ctx.path())
        .output()
        .unwrap();
    if !built.status.success() {
        return skip(
            T,
            &format!(
                "podman cannot build here: {}",
                String::from_utf8_lossy(&built.stderr)
            ),
        );
    }
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Command::new("podman")
                .args([
                    "rm",
                    "-f",
                    &format!("{}-c", self.0.replace([':', '/'], "-")),
                ])
                .output();
            let _ = Command::new("podman").args(["rmi", "-f", &self.0]).output();
        }
    }
    let _cleanup = Cleanup(tag.clone());
    let inspect = run(Command::new("podman").args([
        "image",
        "inspect",
        "--format",
        "{{.Config.User}}|{{.Config.Entrypoint}}|{{.Config.Cmd}}|{{.Config.ExposedPorts}}",
        &tag,
    ]));
    let parts: Vec<&str> = inspect.trim().split('|').collect();
    assert_eq!(parts[0], "65532:65532", "{inspect}");
    assert_eq!(parts[1], "[/netrig]", "{inspect}");
    assert_eq!(parts[2], "[serve]", "{inspect}");
    assert!(
        parts[3].contains("4794/tcp") && parts[3].contains("4794/udp"),
        "{inspect}"
    );
    let layers = run(Command::new("podman").args([
        "image",
        "inspect",
        "--format",
        "{{len .RootFS.Layers}}",
        &tag,
    ]));
    assert_eq!(layers.trim(), "1", "FROM scratch and one COPY: one layer");
    // The file system as the image's layer holds it.
    let name = format!("{}-c", tag.replace([':', '/'], "-"));
    run(Command::new("podman").args(["create", "--name", &name, &tag]));
    let out = ctx.path().join("fs.tar");
    run(Command::new("podman").args(["export", "-o", out.to_str().unwrap(), &name]));
    let listing = run(Command::new("tar").arg("-tvf").arg(&out));
    // podman create adds empty mount points (etc, dev, proc, sys, run…) and
    // empty files for hosts/resolv.conf; the image's own content is one file.
    let mut regular: Vec<&str> = Vec::new();
    for l in listing.lines() {
        let size: u64 = l
            .split_whitespace()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let path = l.split_whitespace().last().unwrap_or("");
        if l.starts_with('-') && size > 0 {
            regular.push(path);
        } else {
            assert!(
                l.starts_with('d') || (l.starts_with('-') && size == 0),
                "unexpected entry {l}"
            );
        }
    }
    assert_eq!(regular, ["netrig"], "{listing}");
    let root = ctx.path().join("root");
    std::fs::create_dir(&root).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&out)
        .arg("-C")
        .arg(&root)
        .arg("netrig"));
    let exe = root.join("netrig");
    assert!(is_static(&exe));
    talks_both_ways(exe.to_str().unwrap());
}
