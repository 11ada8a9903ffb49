//! netrig: measures what a network path really delivers — goodput, latency,
//! loss and reliability — with every byte verified.
//!
//! The pure parts (wire protocol, pattern, I/O plans, statistics, result
//! agreement, units) have no I/O and are tested on their own; the engines
//! (`tcp`, `server`) and reporting sit on top of them. The `netrig` binary is a
//! thin command-line layer over this library.

/// Prints a line to stdout, ignoring errors: a closed pipe (`netrig … | head`)
/// must neither panic nor stop the run before its files are written.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::output::console(), $($t)*);
    }};
}

pub mod console;
pub mod control;
pub mod guard;
pub mod iperf3_client;
pub mod keyfile;
pub mod load;
pub mod mesh;
pub mod net;
pub mod output;
pub mod protocol;
pub mod relay;
pub mod report;
pub mod rr;
pub mod sctp;
pub mod server;
pub mod tcp;
pub mod udp;
