//! `netrig udp`'s flags turned into the engine's config in one place
//! ([`UdpArgs::to_config`]), every combination that cannot run refused
//! as a usage error: the stream's shape (plain, media or isochronous
//! frames), a rate profile, bursts, socket options and what follows one
//! stream only.

use anyhow::Result;
use std::process::ExitCode;

use super::{DEFAULT_RATE, DEFAULT_UDP_DURATION, UdpArgs};
use crate::cmd::udp_streams::Streams;
use crate::cmd::{rate_or_zero, usage};
use netrig::protocol::proto::{MediaSpec, UdpSpec};
use netrig::protocol::udp::pace::gap_for_rate;
use netrig::protocol::units;
use netrig::udp::client::UdpClientConfig;

/// A frame size given as a rate at the frame rate, or in datagrams.
#[derive(Clone, Copy, Debug)]
pub enum Load {
    /// Bits per second.
    Rate(u64),
    /// Datagrams per frame (iperf2's `p` suffix).
    Datagrams(u64),
}

impl Load {
    /// Bytes per frame at `fps` frames a second, datagrams of `size`.
    fn frame_bytes(self, fps: u32, size: u32) -> u64 {
        match self {
            Load::Rate(bps) => bps / 8 / u64::from(fps.max(1)),
            Load::Datagrams(n) => n.saturating_mul(u64::from(size)),
        }
    }
}

/// `--isochronous=FPS:MEAN,STDEV` (iperf2's spelling).
#[derive(Clone, Copy, Debug)]
pub struct Isochronous {
    fps: u32,
    mean: Load,
    stdev: Load,
}

pub(super) fn isochronous(s: &str) -> Result<Isochronous> {
    let (fps, load) = s
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("give FPS:MEAN,STDEV, e.g. 60:20m,0"))?;
    let fps: u32 = fps
        .trim()
        .parse()
        .ok()
        .filter(|f| (1..=100_000).contains(f))
        .ok_or_else(|| anyhow::anyhow!("{fps:?}: frames per second must be 1..=100000"))?;
    let (mean, stdev) = load.split_once(',').unwrap_or((load, "0"));
    let load = |v: &str| -> Result<Load> {
        let v = v.trim();
        match v.strip_suffix('p') {
            Some(n) => Ok(Load::Datagrams(n.parse().map_err(|_| {
                anyhow::anyhow!("{v:?}: datagrams per frame must be a whole number")
            })?)),
            None => Ok(Load::Rate(rate_or_zero(v)?)),
        }
    };
    let (mean, stdev) = (load(mean)?, load(stdev)?);
    if matches!(mean, Load::Rate(0) | Load::Datagrams(0)) {
        anyhow::bail!("the mean load must be more than zero");
    }
    Ok(Isochronous { fps, mean, stdev })
}

/// `netrig udp`'s flags as one checked whole.
pub(super) struct UdpConfig {
    /// The engine's config; `target` is empty when none was given (the
    /// embedded server's address, once it has started).
    pub(super) cfg: UdpClientConfig,
    pub(super) streams: Streams,
    /// The lines printed once the server has accepted.
    pub(super) banner: Vec<String>,
}

/// A stream's datagram size, spacing and direction, and its frames if it
/// sends frames.
struct Shape {
    size: u64,
    gap_ps: u64,
    /// The rate the gap comes from, when the stream is asked for by rate.
    rate_bps: Option<u64>,
    reverse: bool,
    media: Option<MediaSpec>,
}

impl UdpArgs {
    /// The flags turned into the engine's config, in this one place, with
    /// `sweep_profile` for a sweep; a combination that cannot run is a usage
    /// error, already reported.
    pub(super) fn to_config(
        &self,
        sweep_profile: Option<netrig::protocol::udp::profile::Profile>,
        key: Option<netrig::protocol::auth::Key>,
        verbosity: u8,
    ) -> Result<UdpConfig, ExitCode> {
        if self.profile.is_none() && sweep_profile.is_none() {
            for (set, flag) in [
                (self.precompute, "--precompute"),
                (self.bin.is_some(), "--bin"),
                (self.csv.is_some(), "--csv"),
            ] {
                if set {
                    return Err(usage(format!(
                        "{flag} applies to rate profiles: give --profile FILE or use `netrig sweep`"
                    )));
                }
            }
        }
        let shape = self.shape()?;
        if self.jitter_file.is_some() && !shape.reverse {
            return Err(usage(
                "--jitter-file needs --reverse or --media (the client must be the receiver)",
            ));
        }
        if self.omit.is_some() && sweep_profile.is_some() {
            return Err(usage("--omit applies to steady streams, not sweeps"));
        }
        let mut banner = Vec::new();
        let profile = match sweep_profile {
            Some(p) => Some(p),
            None => self.profile(verbosity, &mut banner)?,
        };
        let (size, gap_ps, rate_bps, duration_ms) = match &profile {
            Some(p) => (
                u64::from(p.max_size()),
                gap_for_rate(p.max_size(), p.max_rate().max(1)),
                None,
                (p.duration_ns() / 1_000_000).max(1),
            ),
            None => (
                shape.size,
                shape.gap_ps,
                shape.rate_bps,
                self.time.unwrap_or(DEFAULT_UDP_DURATION).as_millis().max(1) as u64,
            ),
        };
        let omit_ms = self.omit.map_or(0, |o| o.as_millis().max(1) as u64);
        let duration_ms = duration_ms.saturating_add(omit_ms);
        let burst = self.burst_size.zip(self.burst_period).map(|(b, p)| {
            netrig::protocol::proto::BurstSpec {
                size: b,
                period_ms: p.as_millis().max(1) as u64,
            }
        });
        // Without an explicit rate, a burst's datagrams go back to back.
        let (gap_ps, rate_bps) = if burst.is_some() && self.bitrate.is_none() && self.gap.is_none()
        {
            (1, None)
        } else {
            (gap_ps, rate_bps)
        };
        let spec = UdpSpec {
            reverse: shape.reverse,
            size: size as u32,
            gap_ps,
            rate_bps,
            duration_ms,
            pacing: self.pacing,
            catch_up: self.catch_up,
            verify: !self.no_verify,
            interval_ms: self.interval.as_millis().max(1) as u64,
            hist_bin_ns: self.hist_bin.as_nanos() as u64,
            hist_bins: self.hist_bins,
            offset_comp_ns: self.offset_comp,
            media: shape.media,
            profile,
            precompute: self.precompute,
            burst,
            auth_datagrams: self.auth_datagrams,
            sock: self.sock_opts()?,
            omit_ms,
            group: None,
        };
        let streams = Streams {
            parallel: self.parallel,
            bidir: self.bidir,
        };
        // What a server would refuse as nonsense, refused here as usage.
        netrig::udp::serve::sane(&spec).map_err(|e| usage(e.to_string()))?;
        self.check_streams(&streams, &spec)?;
        banner.push(netrig::report::udp_banner(&spec));
        let cfg = UdpClientConfig {
            start_at: self.start.at,
            key,
            target: self
                .target
                .clone()
                .or_else(|| self.client.clone())
                .unwrap_or_default(),
            port: self.port,
            spec,
            synced: self.synced || self.trip_times,
            bind: self.bind,
            bind_dev: self.sock.bind_dev.clone(),
            rcvbuf: self.rcvbuf.map(|v| v as usize),
            sndbuf: self.sndbuf.map(|v| v as usize),
            per_packet: self.jitter_file.is_some(),
            cport: self.cport,
            connect_timeout: Some(self.connect.connect_timeout),
        };
        Ok(UdpConfig {
            cfg,
            streams,
            banner,
        })
    }

    /// The datagrams of an isochronous, a media or a plain stream.
    fn shape(&self) -> Result<Shape, ExitCode> {
        use netrig::protocol::udp::header::{HEADER_LEN, MAX_DATAGRAM};
        if let Some(iso) = self.isochronous {
            if self.length < HEADER_LEN as u64 || self.length > MAX_DATAGRAM as u64 {
                return Err(usage(format!(
                    "-l/--length must be {HEADER_LEN}..={MAX_DATAGRAM} bytes"
                )));
            }
            let size = self.length as u32;
            let mean = iso.mean.frame_bytes(iso.fps, size);
            let max_frame = 100_000_000_000 / 8;
            if mean < HEADER_LEN as u64 || mean > max_frame {
                return Err(usage(format!(
                    "--isochronous: a mean frame of {mean} bytes must be {HEADER_LEN}..={max_frame} bytes"
                )));
            }
            let media = MediaSpec {
                fps: iso.fps,
                buffer_depth_ms: self.buffer_depth.as_millis() as u64,
                frame_bytes: mean,
                varying: Some(netrig::protocol::udp::iso::Varying {
                    stdev_bytes: iso.stdev.frame_bytes(iso.fps, size),
                    seed: rand::random(),
                }),
            };
            Ok(Shape {
                size: u64::from(size),
                gap_ps: 1_000_000_000_000 / u64::from(iso.fps),
                rate_bps: None,
                reverse: self.reverse,
                media: Some(media),
            })
        } else if self.media {
            let bitrate = self.bitrate.unwrap_or_default();
            let frame = bitrate / 8 / u64::from(self.fps);
            // A frame of up to a second of a 100 Gbit/s stream.
            let max_frame = 100_000_000_000 / 8;
            if frame < HEADER_LEN as u64 || frame > max_frame {
                return Err(usage(format!(
                    "media frame of {frame} bytes (bitrate / 8 / fps) must be {HEADER_LEN}..={max_frame} bytes: adjust --bitrate or --fps"
                )));
            }
            let dsize = u64::from(self.datagram_size);
            let media = MediaSpec {
                fps: self.fps,
                buffer_depth_ms: self.buffer_depth.as_millis() as u64,
                frame_bytes: frame,
                varying: None,
            };
            Ok(Shape {
                size: frame.min(dsize),
                gap_ps: 1_000_000_000_000 / u64::from(self.fps),
                rate_bps: None,
                reverse: true,
                media: Some(media),
            })
        } else {
            if self.length < HEADER_LEN as u64 || self.length > MAX_DATAGRAM as u64 {
                return Err(usage(format!(
                    "-l/--length must be {HEADER_LEN}..={MAX_DATAGRAM} bytes"
                )));
            }
            let rate_bps = match self.gap {
                Some(_) => None,
                None => Some(self.bitrate.unwrap_or(DEFAULT_RATE)),
            };
            let gap_ps = match (rate_bps, self.gap) {
                (_, Some(g)) => g.as_nanos() as u64 * 1000,
                (r, None) => gap_for_rate(self.length as u32, r.unwrap_or(DEFAULT_RATE)),
            };
            Ok(Shape {
                size: self.length,
                gap_ps,
                rate_bps: rate_bps.filter(|r| *r > 0),
                reverse: self.reverse,
                media: None,
            })
        }
    }

    /// `--profile FILE`, read and fitted to `--time`; its line goes to the
    /// `banner`. An unreadable file is a fatal error (exit 1), a bad one a
    /// usage error, both already reported.
    fn profile(
        &self,
        verbosity: u8,
        banner: &mut Vec<String>,
    ) -> Result<Option<netrig::protocol::udp::profile::Profile>, ExitCode> {
        let Some(path) = &self.profile else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            eprintln!("netrig: cannot read {}: {e}", path.display());
            ExitCode::from(crate::cmd::Exit::Fatal)
        })?;
        let parsed = netrig::protocol::udp::scenario::parse(&text, self.profile_format).and_then(
            |(p, f)| {
                match self.time {
                    Some(d) => p.fit(d.as_nanos().min(u64::MAX as u128) as u64),
                    None => Ok(p),
                }
                .map(|p| (p, f))
            },
        );
        match parsed {
            Ok((p, format)) => {
                if verbosity >= 1 {
                    banner.push(format!(
                        "Profile {}: {}, {} steps, {:.3} s, {} on average",
                        path.display(),
                        format.describe(),
                        p.steps().len(),
                        p.duration_ns() as f64 / 1e9,
                        units::format_bits_per_sec(p.bytes() * 8e9 / p.duration_ns() as f64)
                    ));
                }
                Ok(Some(p))
            }
            Err(e) => Err(usage(format!("{}: {e}", path.display()))),
        }
    }

    /// The data socket's options, `--no-offload` and `--ecn` included.
    fn sock_opts(&self) -> Result<netrig::protocol::sockopts::SockOpts, ExitCode> {
        let mut sock = self.sock.opts();
        sock.no_offload = self.no_offload;
        if let Some(e) = self.ecn {
            sock.tos = Some(netrig::protocol::udp::marks::with_ecn(
                sock.tos.unwrap_or(0),
                e,
            ));
        }
        sock.validate().map_err(|e| usage(e.to_string()))?;
        Ok(sock)
    }

    /// What follows one stream only: refused with -P or --bidir.
    fn check_streams(&self, streams: &Streams, spec: &UdpSpec) -> Result<(), ExitCode> {
        if !streams.many() {
            return Ok(());
        }
        let why = if self.jitter_file.is_some() {
            Some("--jitter-file follows one stream: not with -P or --bidir")
        } else if spec.profile.is_some() {
            Some("rate profiles and sweeps run one stream: not with -P or --bidir")
        } else if self.bidir && spec.media.is_some_and(|m| m.varying.is_none()) {
            Some("a media stream flows server to client: not with --bidir")
        } else if self.cport.is_some() {
            Some("--cport names one stream's port: not with -P or --bidir")
        } else {
            None
        };
        match why {
            Some(why) => Err(usage(why)),
            None => Ok(()),
        }
    }
}
