//! Detects what the build machine offers — SCTP in the kernel, root with
//! iproute2 for network namespaces — so tests that need them are reported as
//! ignored with the reason instead of silently passing.

fn main() {
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
