//! Detects whether the build machine's kernel offers SCTP, so SCTP tests are
//! reported as ignored with the reason instead of silently passing.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(sctp_kernel)");
    println!("cargo:rerun-if-changed=build.rs");
    // SAFETY: socket(2) with constant arguments; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP) };
    if fd >= 0 {
        // SAFETY: `fd` is a descriptor this function just opened.
        unsafe { libc::close(fd) };
        println!("cargo:rustc-cfg=sctp_kernel");
    }
}
