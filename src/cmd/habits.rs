//! iperf3's flags typed from habit where netrig spells the idea otherwise:
//! a one-line hint naming netrig's spelling, in place of clap's guess (which
//! offers `--bind` for `--bidir`). The flags netrig can take as iperf3 means
//! them are accepted by the commands themselves (`-c HOST`, tcp's `-R` and
//! `--bidir`, udp's `-u`); these are the rest.

/// The hint for `flag`, unknown to subcommand `sub` (none: before any
/// subcommand), if it is an iperf3 habit.
pub fn hint(sub: Option<&str>, flag: &str) -> Option<String> {
    let flag = flag.split_once('=').map_or(flag, |(f, _)| f);
    let text = match (flag, sub) {
        ("-s" | "--server" | "-D" | "--daemon", _) => {
            "iperf3's server is `netrig serve` (it needs no test options: each client describes its test)"
        }
        ("-c" | "--client", None) => {
            "name the test first, then the server: `netrig tcp HOST` (or udp, rr, ping, crr, load)"
        }
        ("-u" | "--udp", Some("rr")) => "request/response over UDP is `netrig rr HOST --proto udp`",
        ("-u" | "--udp", _) => "UDP tests are `netrig udp HOST` (iperf3 -u)",
        ("-R" | "--reverse", _) => {
            "the server sends with `netrig tcp HOST -R` (--pattern pull) or `netrig udp HOST -R`"
        }
        ("--bidir", _) => {
            "both directions at once are `netrig tcp HOST --bidir` (--pattern duplex) or `netrig udp HOST --bidir`"
        }
        _ => return None,
    };
    Some(text.to_string())
}

/// The subcommand in `args` (the program's name first), if one was given.
pub fn subcommand(args: &[std::ffi::OsString]) -> Option<&str> {
    const SUBCOMMANDS: [&str; 11] = [
        "serve", "tcp", "udp", "rr", "ping", "crr", "load", "report", "sweep", "analyze", "relay",
    ];
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| !a.starts_with('-'))
        .filter(|a| SUBCOMMANDS.contains(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn habits_get_netrigs_spelling() {
        assert!(hint(None, "-s").unwrap().contains("`netrig serve`"));
        assert!(hint(Some("tcp"), "-s").unwrap().contains("`netrig serve`"));
        assert!(
            hint(Some("tcp"), "-u")
                .unwrap()
                .contains("`netrig udp HOST`")
        );
        assert!(hint(Some("rr"), "--udp").unwrap().contains("--proto udp"));
        assert!(
            hint(Some("rr"), "--bidir")
                .unwrap()
                .contains("--pattern duplex")
        );
        assert!(hint(Some("crr"), "-R").unwrap().contains("--pattern pull"));
        assert!(hint(None, "-c").unwrap().contains("`netrig tcp HOST`"));
        assert!(hint(Some("ping"), "--bidir=1").is_some());
        assert_eq!(hint(Some("tcp"), "--frobnicate"), None);
        assert_eq!(hint(Some("tcp"), "-c"), None, "tcp takes -c itself");
    }

    #[test]
    fn the_subcommand_is_the_first_word() {
        let v = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(subcommand(&v(&["netrig", "tcp", "-s"])), Some("tcp"));
        assert_eq!(subcommand(&v(&["netrig", "-s"])), None);
        assert_eq!(subcommand(&v(&["netrig", "-c", "host"])), None);
        assert_eq!(subcommand(&v(&["netrig", "-v", "rr"])), Some("rr"));
    }
}
