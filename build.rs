//! Detects what the build machine offers — SCTP in the kernel, root with
//! iproute2 for network namespaces — so tests that need them are reported as
//! ignored with the reason instead of silently passing; and records what
//! `netrig --version` reports about the build (commit, target).

fn main() {
    build_facts();
    println!("cargo:rustc-check-cfg=cfg(sctp_kernel)");
    println!("cargo:rustc-check-cfg=cfg(netns_root)");
    // Namespace tests need root and iproute2 (ip, tc).
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let has = |tool: &str| {
        ["/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"]
            .iter()
            .any(|d| std::path::Path::new(&format!("{d}{tool}")).exists())
    };
    if root && has("ip") && has("tc") {
        println!("cargo:rustc-cfg=netns_root");
    }
    println!("cargo:rerun-if-changed=build.rs");
    // SAFETY: socket(2) with constant arguments; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP) };
    if fd >= 0 {
        // SAFETY: `fd` is a descriptor this function just opened.
        unsafe { libc::close(fd) };
        println!("cargo:rustc-cfg=sctp_kernel");
    }
}

/// The commit and target `netrig --version` prints. The commit comes from
/// NETRIG_COMMIT when set (a build from a tarball that knows its commit),
/// else from git when this crate is the top of a git work tree, else
/// "unknown" (a tarball, or a crate unpacked inside some other repository).
fn build_facts() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=NETRIG_BUILD_TARGET={target}");
    println!("cargo:rerun-if-env-changed=NETRIG_COMMIT");
    let commit = match std::env::var("NETRIG_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => git_commit().unwrap_or_else(|| "unknown".into()),
    };
    println!("cargo:rustc-env=NETRIG_BUILD_COMMIT={commit}");
}

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(std::env::var_os("CARGO_MANIFEST_DIR")?)
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !s.trim().is_empty()).then(|| s.trim().to_string())
}

fn git_commit() -> Option<String> {
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let here = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    if std::fs::canonicalize(top).ok()? != std::fs::canonicalize(here).ok()? {
        return None;
    }
    // Rerun when HEAD moves: a checkout changes HEAD, a commit the branch's
    // ref (loose, or in packed-refs). A path that does not exist is left
    // out, as cargo would rerun on every build for it.
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(r);
    }
    for w in watch {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &w])
            && std::path::Path::new(&p).exists()
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
