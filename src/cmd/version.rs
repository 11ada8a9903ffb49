//! `netrig --version` / `-V`: the version, the commit and target it was
//! built from, and SCTP — compiled in, and whether this kernel offers it
//! now (a bug report needs both; a static binary runs on kernels it was
//! not built on).

use std::ffi::OsString;

/// What the build recorded (build.rs): never changes at run time.
pub const BUILD: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("NETRIG_BUILD_COMMIT"),
    "\ntarget: ",
    env!("NETRIG_BUILD_TARGET"),
    "\nsctp:   compiled in"
);

/// Whether the command line asks for the version: clap offers -V and
/// --version on the top level only, as the first argument.
pub fn wanted(args: &[OsString]) -> bool {
    args.get(1).is_some_and(|a| a == "-V" || a == "--version")
}

/// The full text after "netrig ": the build facts, then SCTP in the
/// running kernel. Only probed when asked for: opening an SCTP socket can
/// make the kernel load its sctp module.
pub fn text() -> String {
    let kernel = match netrig::sctp::support(false) {
        Ok(()) => "available".to_string(),
        Err(e) => format!("not available ({})", e.source),
    };
    format!("{BUILD}; kernel: {kernel}")
}

/// The command with the full version text when it is asked for, so both
/// -V and --version print it.
pub fn command(cmd: clap::Command, args: &[OsString]) -> clap::Command {
    if !wanted(args) {
        return cmd;
    }
    // The text is built at run time and clap keeps it for the process's
    // life: leaking one short string is the simplest owner.
    let v: &'static str = Box::leak(text().into_boxed_str());
    cmd.version(v).long_version(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_a_first_version_flag_asks_for_the_version() {
        assert!(wanted(&args(&["netrig", "-V"])));
        assert!(wanted(&args(&["netrig", "--version"])));
        assert!(!wanted(&args(&["netrig"])));
        assert!(!wanted(&args(&["netrig", "tcp", "-V"])));
        assert!(!wanted(&args(&["netrig", "--versions"])));
    }
}
