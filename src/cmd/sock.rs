//! The socket and TCP tuning flags, spelled as iperf3 spells them (with
//! ctsTraffic's names as aliases), shared by every command that opens test
//! sockets: [`IpFlags`] for any socket, [`TcpFlags`] for TCP ones.

use anyhow::Result;
use clap::Args;
use std::time::Duration;

use super::{positive_duration, rate, size};
use netrig::protocol::sockopts::{ShutdownMode, SockOpts, parse_dscp, parse_tos};

/// Options for any test socket, TCP or UDP.
#[derive(Args, Clone, Debug, Default)]
pub struct IpFlags {
    /// Socket buffer size, send and receive (SO_SNDBUF/SO_RCVBUF; iperf3 -w,
    /// ctsTraffic -RecvBufValue/-SendBufValue); the report shows what the
    /// kernel granted.
    #[arg(short = 'w', long = "window", value_name = "BYTES", value_parser = window)]
    pub window: Option<u32>,
    /// DSCP code point to mark packets with: a name (EF, AF41, CS1, LE) or
    /// 0-63.
    #[arg(long, value_name = "DSCP", value_parser = dscp, conflicts_with = "tos")]
    pub dscp: Option<u8>,
    /// The whole IP TOS / IPv6 traffic class byte (iperf3 -S), decimal or 0x
    /// hex.
    #[arg(short = 'S', long, value_name = "TOS", value_parser = tos)]
    pub tos: Option<u8>,
    /// Set the don't-fragment bit (IP_MTU_DISCOVER = DO).
    #[arg(long)]
    pub dont_fragment: bool,
    /// Cap each socket's pacing rate (SO_MAX_PACING_RATE, bit/s; iperf3
    /// --fq-rate).
    #[arg(long, value_name = "RATE", value_parser = rate)]
    pub fq_rate: Option<u64>,
    /// Bind this end's test sockets to this interface (SO_BINDTODEVICE;
    /// iperf3 --bind-dev).
    #[arg(long, value_name = "IFACE", value_parser = interface)]
    pub bind_dev: Option<String>,
}

/// Options for TCP test sockets.
#[derive(Args, Clone, Debug, Default)]
pub struct TcpFlags {
    #[command(flatten)]
    pub ip: IpFlags,
    /// TCP maximum segment size (TCP_MAXSEG; iperf3 -M/--set-mss).
    #[arg(
        short = 'M',
        long = "mss",
        visible_alias = "set-mss",
        value_name = "BYTES"
    )]
    pub mss: Option<u32>,
    /// Congestion control algorithm (TCP_CONGESTION; iperf3 -C).
    #[arg(short = 'C', long, value_name = "ALGO", alias = "linux-congestion")]
    pub congestion: Option<String>,
    /// Turn Nagle's algorithm off on the client's sockets (TCP_NODELAY;
    /// iperf3 -N).
    #[arg(short = 'N', long)]
    pub no_delay: bool,
    /// Most unsent bytes a socket queues before a write waits
    /// (TCP_NOTSENT_LOWAT): less buffered data, data copied closer to its
    /// sending; applied by the server to its end too. 0 leaves the
    /// system's default (`netrig tcp` sets 128K on bulk runs of two or
    /// more connections unless told).
    #[arg(long, value_name = "BYTES", value_parser = notsent_lowat)]
    pub notsent_lowat: Option<u32>,
    /// TCP keepalive probes after this idle time (ctsTraffic
    /// -KeepAliveValue; at least 1s).
    #[arg(long, value_name = "D", value_parser = positive_duration)]
    pub keepalive: Option<Duration>,
    /// How the client closes each connection once done: graceful (FIN) or
    /// rude (RST), as ctsTraffic -shutdown.
    #[arg(long, default_value = "graceful", value_parser = super::named::<ShutdownMode>())]
    pub shutdown: ShutdownMode,
    /// Local port, or range lo-hi taken in turn, for the data connections
    /// (iperf3 --cport; ctsTraffic -LocalPort).
    #[arg(long, value_name = "PORT[-PORT]", visible_alias = "local-port", value_parser = ports)]
    pub cport: Option<(u16, u16)>,
}

/// `--bind-dev`: an interface this host has.
fn interface(s: &str) -> Result<String> {
    let name = std::ffi::CString::new(s).map_err(|_| anyhow::anyhow!("not an interface name"))?;
    // SAFETY: a valid NUL-terminated string; the call only reads it.
    if unsafe { libc::if_nametoindex(name.as_ptr()) } == 0 {
        anyhow::bail!("no interface {s:?} on this host (see `ip link`)");
    }
    Ok(s.to_string())
}

/// `--cport`: a port or a range `lo-hi`.
pub(super) fn ports(s: &str) -> Result<(u16, u16)> {
    let port = |p: &str| {
        p.trim()
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| anyhow::anyhow!("{p:?} is not a port 1-65535"))
    };
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => (port(s)?, port(s)?),
    };
    if lo > hi {
        anyhow::bail!("{lo}-{hi}: the range's low end is above its high end");
    }
    Ok((lo, hi))
}

fn notsent_lowat(s: &str) -> Result<u32> {
    match u32::try_from(size(s)?) {
        Ok(v) => Ok(v),
        Err(_) => anyhow::bail!("--notsent-lowat {s}: at most 4G"),
    }
}

fn window(s: &str) -> Result<u32> {
    let v = size(s)?;
    u32::try_from(v).map_err(|_| anyhow::anyhow!("--window {s}: at most 4G"))
}

pub(super) fn dscp(s: &str) -> Result<u8> {
    Ok(parse_dscp(s)?)
}

pub(super) fn tos(s: &str) -> Result<u8> {
    Ok(parse_tos(s)?)
}

impl IpFlags {
    /// The options for a UDP socket.
    pub fn opts(&self) -> SockOpts {
        SockOpts {
            window: self.window,
            tos: self.tos.or(self.dscp),
            dont_fragment: self.dont_fragment,
            fq_rate_bps: self.fq_rate,
            ..SockOpts::default()
        }
    }
}

impl TcpFlags {
    /// Whether --notsent-lowat was given (0 included: the system's default
    /// asked for by name).
    pub fn notsent_lowat_given(&self) -> bool {
        self.notsent_lowat.is_some()
    }

    /// The options for a TCP socket.
    pub fn opts(&self) -> SockOpts {
        SockOpts {
            mss: self.mss,
            congestion: self.congestion.clone(),
            no_delay: self.no_delay,
            // 0: the system's default, which is what leaving it unset gives.
            notsent_lowat: self.notsent_lowat.filter(|&b| b > 0),
            keepalive_ms: self.keepalive.map(|d| d.as_millis() as u64),
            shutdown: self.shutdown,
            ..self.ip.opts()
        }
    }
}
