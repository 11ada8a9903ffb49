//! Rate profiles, free of I/O: steps of rate and datagram size over time,
//! the rate and size in force at any time, fitting to a test's duration, and
//! the departure schedule a profile implies. The files they come from are
//! read by `udp::scenario`.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One step of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateStep {
    /// Offset from the start, ns.
    pub at_ns: u64,
    /// Rate at this step, bit/s.
    pub rate_bps: u64,
    /// Datagram size at this step, bytes.
    pub size: u32,
    /// Keep this step's values until the next step instead of ramping.
    pub hold: bool,
}

/// Why a profile is unusable; names the line and field.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProfileError {
    /// A field did not parse.
    #[error("line {line}: {field}: {reason}")]
    Field {
        /// 1-based line number.
        line: usize,
        /// Which field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// Wrong number of fields.
    #[error("line {line}: expected TIME RATE SIZE [ramp|hold], found {found} fields")]
    Fields {
        /// 1-based line number.
        line: usize,
        /// Fields found.
        found: usize,
    },
    /// Times must increase.
    #[error("line {line}: time must be later than the previous step's")]
    NotIncreasing {
        /// 1-based line number.
        line: usize,
    },
    /// Fewer than two steps, or a first step not at time 0.
    #[error("a profile needs at least two steps, the first at time 0")]
    TooShort,
    /// Repeating the profile to the duration would take too many steps.
    #[error("repeated to --duration the profile would have more than {max} steps")]
    TooLong {
        /// The most steps allowed.
        max: usize,
    },
    /// A rate without a unit in netrig's format.
    #[error(
        "line {line}: rate '{rate}' has no unit: write e.g. {rate}k or {rate}M (bit/s), or give --profile-format flowping for FlowPing's kbit/s"
    )]
    BareRate {
        /// 1-based line number.
        line: usize,
        /// The rate as written.
        rate: String,
    },
}

/// Most steps a profile may have after repeating.
pub const MAX_STEPS: usize = 1_000_000;

/// A validated profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    steps: Vec<RateStep>,
    /// The datagram size stays at each step's value until the next step
    /// while the rate ramps (FlowPing's meaning), instead of ramping too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    size_steps: bool,
}

impl Profile {
    /// Builds a profile from steps (checked as a file would be).
    pub fn new(steps: Vec<RateStep>) -> Result<Profile, ProfileError> {
        let p = Profile {
            steps,
            size_steps: false,
        };
        p.check().map(|()| p)
    }

    /// Checks what [`Profile::new`] checks, for a profile that arrived over
    /// the wire (deserialising does not): at least two steps, the first at
    /// 0, times increasing, at most [`MAX_STEPS`].
    pub fn check(&self) -> Result<(), ProfileError> {
        let steps = &self.steps;
        if steps.len() < 2 || steps[0].at_ns != 0 {
            return Err(ProfileError::TooShort);
        }
        if steps.len() > MAX_STEPS {
            return Err(ProfileError::TooLong { max: MAX_STEPS });
        }
        for (i, w) in steps.windows(2).enumerate() {
            if w[1].at_ns <= w[0].at_ns {
                return Err(ProfileError::NotIncreasing { line: i + 2 });
            }
        }
        Ok(())
    }

    /// Smallest datagram size of any step.
    pub fn min_size(&self) -> u32 {
        self.steps.iter().map(|s| s.size).min().unwrap_or(0)
    }

    /// The same profile with sizes that change in steps (FlowPing).
    pub fn with_size_steps(mut self) -> Profile {
        self.size_steps = true;
        self
    }

    /// The profile fitted to `duration_ns`: cut there, or repeated from its
    /// start until then, as FlowPing repeats a scenario shorter than its
    /// deadline. A repeat starts 1 ns after the previous pass ends (steps must
    /// increase), so its first rate applies at once.
    pub fn fit(&self, duration_ns: u64) -> Result<Profile, ProfileError> {
        let period = self.duration_ns();
        let mut steps: Vec<RateStep> = Vec::new();
        let mut base = 0u64;
        let next = 'passes: loop {
            for (i, s) in self.steps.iter().enumerate() {
                let at = base + s.at_ns + u64::from(base > 0 && i == 0);
                if at >= duration_ns {
                    break 'passes RateStep { at_ns: at, ..*s };
                }
                if steps.len() >= MAX_STEPS {
                    return Err(ProfileError::TooLong { max: MAX_STEPS });
                }
                steps.push(RateStep { at_ns: at, ..*s });
            }
            base += period;
        };
        // The last step closes the profile at the duration, with the rate and
        // size in force there.
        steps.push(next);
        let mut p = Profile {
            steps,
            size_steps: self.size_steps,
        };
        let (rate, size) = p.at(duration_ns);
        p.steps.pop();
        p.steps.push(RateStep {
            at_ns: duration_ns,
            rate_bps: rate.round() as u64,
            size: size.round() as u32,
            hold: false,
        });
        Profile::new(p.steps).map(|q| Profile {
            size_steps: self.size_steps,
            ..q
        })
    }

    /// A linear sweep from `from` to `to` bit/s over `duration_ns` at a fixed size.
    pub fn sweep(
        from_bps: u64,
        to_bps: u64,
        duration_ns: u64,
        size: u32,
    ) -> Result<Profile, ProfileError> {
        let step = |at_ns, rate_bps| RateStep {
            at_ns,
            rate_bps,
            size,
            hold: false,
        };
        Profile::new(vec![step(0, from_bps), step(duration_ns, to_bps)])
    }

    /// The steps.
    pub fn steps(&self) -> &[RateStep] {
        &self.steps
    }

    /// Largest datagram size of any step.
    pub fn max_size(&self) -> u32 {
        self.steps.iter().map(|s| s.size).max().unwrap_or(0)
    }

    /// Highest rate of any step, bit/s.
    pub fn max_rate(&self) -> u64 {
        self.steps.iter().map(|s| s.rate_bps).max().unwrap_or(0)
    }

    /// Length of the profile, ns.
    pub fn duration_ns(&self) -> u64 {
        self.steps.last().map_or(0, |s| s.at_ns)
    }

    /// Rate (bit/s) and size (bytes) in force at `t_ns`.
    pub fn at(&self, t_ns: u64) -> (f64, f64) {
        let i = self
            .steps
            .partition_point(|s| s.at_ns <= t_ns)
            .saturating_sub(1);
        let a = self.steps[i];
        let Some(b) = self.steps.get(i + 1) else {
            return (a.rate_bps as f64, a.size as f64);
        };
        if a.hold {
            return (a.rate_bps as f64, a.size as f64);
        }
        let f = (t_ns - a.at_ns) as f64 / (b.at_ns - a.at_ns) as f64;
        let lerp = |x: f64, y: f64| x + (y - x) * f;
        let size = if self.size_steps {
            a.size as f64
        } else {
            lerp(a.size as f64, b.size as f64)
        };
        (lerp(a.rate_bps as f64, b.rate_bps as f64), size)
    }

    /// Departures `(time ns, size bytes)` in order. The schedule follows the
    /// profile's cumulative bits B(t) exactly: each datagram owns `8 × size`
    /// bits of budget and leaves when half of its budget has accrued, so the
    /// bytes sent track the profile's integral within half a datagram, steps
    /// and ramps alike, and nothing leaves while the rate is zero.
    pub fn departures(&self) -> Departures {
        let segs = self
            .steps
            .windows(2)
            .map(|w| {
                let dur = (w[1].at_ns - w[0].at_ns) as f64 / 1e9;
                let r1 = if w[0].hold {
                    w[0].rate_bps
                } else {
                    w[1].rate_bps
                };
                Segment {
                    t0_ns: w[0].at_ns as f64,
                    dur,
                    r0: w[0].rate_bps as f64,
                    slope: (r1 as f64 - w[0].rate_bps as f64) / dur,
                }
            })
            .collect();
        let first_half = self.at(0).1 * 8.0 / 2.0;
        Departures {
            p: self.clone(),
            segs,
            seg: 0,
            u: 0.0,
            need: first_half,
        }
    }

    /// Bytes the profile asks for: the integral of rate over time, / 8.
    pub fn bytes(&self) -> f64 {
        self.bytes_until(self.duration_ns())
    }

    /// Bytes the profile asks for before `t_ns`.
    pub fn bytes_until(&self, t_ns: u64) -> f64 {
        let mut total = 0.0;
        for w in self.steps.windows(2) {
            if w[0].at_ns >= t_ns {
                break;
            }
            let end = w[1].at_ns.min(t_ns);
            let dt = (end - w[0].at_ns) as f64 / 1e9;
            let r0 = w[0].rate_bps as f64;
            let r1 = if w[0].hold { r0 } else { self.at(end).0 };
            let r1 = if end == w[1].at_ns && !w[0].hold {
                w[1].rate_bps as f64
            } else {
                r1
            };
            total += dt * (r0 + r1) / 2.0 / 8.0;
        }
        total
    }
}

struct Segment {
    t0_ns: f64,
    dur: f64,
    r0: f64,
    slope: f64,
}

/// Iterator over a profile's departures.
pub struct Departures {
    p: Profile,
    segs: Vec<Segment>,
    seg: usize,
    /// Seconds into the current segment.
    u: f64,
    /// Bits of budget still to accrue before the next departure.
    need: f64,
}

impl Iterator for Departures {
    type Item = (u64, u32);

    fn next(&mut self) -> Option<(u64, u32)> {
        while let Some(g) = self.segs.get(self.seg) {
            let left = g.dur - self.u;
            let r = g.r0 + g.slope * self.u;
            let available = r * left + g.slope * left * left / 2.0;
            if available >= self.need && self.need >= 0.0 {
                // Solve r·x + slope·x²/2 = need for the smallest x >= 0, in
                // the form 2·need / (r + √disc): the textbook (√disc - r) /
                // slope cancels to nothing when slope·need is tiny next to r²
                // (a slow ramp at a high rate), and this one is also exact
                // at slope 0 (√(r²) = r). The floor on the divisor keeps a
                // zero budget at a zero rate at x = 0 rather than 0/0.
                let disc = (r * r + 2.0 * g.slope * self.need).max(0.0);
                let x = 2.0 * self.need / (r + disc.sqrt()).max(f64::MIN_POSITIVE);
                self.u += x.clamp(0.0, left);
                let t_ns = g.t0_ns + self.u * 1e9;
                let size = self.p.at(t_ns as u64).1;
                // This datagram's second half, then the next one's first half.
                self.need = size * 8.0;
                return Some((t_ns as u64, size.round() as u32));
            }
            self.need -= available.max(0.0);
            self.seg += 1;
            self.u = 0.0;
        }
        None
    }
}

/// Departures of an iperf2-style burst train: every `period_ns`, `per_burst`
/// datagrams of `size` bytes, `gap_ns` apart (0: back to back), until `end_ns`.
pub fn burst_departures(
    size: u32,
    per_burst: u64,
    period_ns: u64,
    gap_ns: u64,
    end_ns: u64,
) -> impl Iterator<Item = (u64, u32)> + Send {
    let period = period_ns.max(1);
    (0..)
        .map_while(move |k: u64| k.checked_mul(period).filter(|&t| t < end_ns))
        .flat_map(move |start| (0..per_burst.max(1)).map(move |i| (start + i * gap_ns, size)))
        .take_while(move |&(t, _)| t < end_ns)
}

/// Departures of a media stream whose frames of `frame` bytes leave `fps`
/// times a second (frame `n` at exactly `n / fps` s, so no rounding of the
/// period adds a frame) as datagrams of `size` bytes, back to back, the
/// last one carrying what is left (at least a header), until `end_ns`.
pub fn frame_departures(
    frames: super::iso::FrameBytes,
    size: u32,
    fps: u32,
    end_ns: u64,
) -> impl Iterator<Item = (u64, u32)> + Send {
    let size = size.max(super::header::HEADER_LEN as u32);
    let fps = u128::from(fps.max(1));
    (0..)
        .map_while(move |n: u64| {
            u64::try_from(u128::from(n) * 1_000_000_000 / fps)
                .ok()
                .filter(|&t| t < end_ns)
                .map(|t| (n, t))
        })
        .flat_map(move |(n, t)| {
            let frame = frames.bytes(n);
            let k = frames.datagrams(n, size);
            let rest = frame.saturating_sub((k - 1) * u64::from(size));
            let last = rest.clamp(super::header::HEADER_LEN as u64, u64::from(size)) as u32;
            (0..k).map(move |i| (t, if i + 1 == k { last } else { size }))
        })
}

#[cfg(test)]
mod tests {
    use super::super::iso::FrameBytes::Fixed;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_frame_leaves_as_full_datagrams_and_a_shorter_last() {
        // 100 frames a second: one every 10 ms.
        let d: Vec<_> = frame_departures(Fixed(3000), 1400, 100, 25_000_000).collect();
        assert_eq!(
            d,
            vec![
                (0, 1400),
                (0, 1400),
                (0, 200),
                (10_000_000, 1400),
                (10_000_000, 1400),
                (10_000_000, 200),
                (20_000_000, 1400),
                (20_000_000, 1400),
                (20_000_000, 200)
            ]
        );
        // A remainder smaller than a header is sent as a header.
        let d: Vec<_> = frame_departures(Fixed(1410), 1400, 100, 5).collect();
        assert_eq!(d, vec![(0, 1400), (0, 32)]);
        // A frame that fits one datagram is one datagram of its size.
        let d: Vec<_> = frame_departures(Fixed(900), 1400, 100, 5).collect();
        assert_eq!(d, vec![(0, 900)]);
        // 60 frames a second for 2 s: 120 frames, the last at 1.9833 s.
        let d: Vec<_> = frame_departures(Fixed(100), 1400, 60, 2_000_000_000).collect();
        assert_eq!(d.len(), 120);
        assert_eq!(d[119].0, 1_983_333_333);
    }

    fn parse(text: &str) -> Result<Profile, ProfileError> {
        crate::protocol::udp::scenario::parse(text, crate::protocol::udp::scenario::Format::Auto)
            .map(|(p, _)| p)
    }

    #[test]
    fn parses_flowping_style_files() {
        let text = "# t rate size\n0 1M 500\n10s, 2M, 1000 ; hold\n\n20s\t2M\t1000 # end\n";
        let p = parse(text).unwrap();
        assert_eq!(p.steps().len(), 3);
        assert!(p.steps()[1].hold);
        assert_eq!(p.duration_ns(), 20_000_000_000);
        assert_eq!(p.at(5_000_000_000), (1.5e6, 750.0));
        assert_eq!(p.at(15_000_000_000), (2e6, 1000.0));
    }

    #[test]
    fn errors_name_line_and_field() {
        assert_eq!(
            parse("0 1M 500\n5s 2X 500\n").unwrap_err().to_string(),
            "line 2: rate: unknown unit 'X' in '2X' (expected bit/s with k, M, G or T (e.g. 100Mbit, 10G, 50MB/s))"
        );
        assert_eq!(
            parse("0 1M 500\n5s 2M\n"),
            Err(ProfileError::Fields { line: 2, found: 2 })
        );
        assert_eq!(
            parse("0 1M 500\n0 2M 500\n"),
            Err(ProfileError::NotIncreasing { line: 2 })
        );
        assert!(matches!(
            parse("0 1M 10\n1 1M 100\n"),
            Err(ProfileError::Field {
                line: 1,
                field: "size",
                ..
            })
        ));
        assert!(matches!(
            parse("0 1M 100 jump\n1 1M 100\n"),
            Err(ProfileError::Field { field: "mode", .. })
        ));
        assert_eq!(parse("1s 1M 100\n2s 1M 100\n"), Err(ProfileError::TooShort));
    }

    #[test]
    fn burst_trains() {
        let d: Vec<_> = burst_departures(1000, 3, 1_000_000, 10, 2_500_000).collect();
        let times: Vec<u64> = d.iter().map(|x| x.0).collect();
        assert_eq!(
            times,
            [
                0, 10, 20, 1_000_000, 1_000_010, 1_000_020, 2_000_000, 2_000_010, 2_000_020
            ]
        );
    }

    #[test]
    fn zero_rate_segments_send_nothing() {
        let p = parse("0 0 100 hold\n1s 8M 100 hold\n2s 0 100\n").unwrap();
        let d: Vec<_> = p.departures().collect();
        assert!(d.first().unwrap().0 >= 1_000_000_000);
        assert!(d.last().unwrap().0 < 2_000_000_000);
        assert_eq!(d.len(), 10_000); // 8 Mbit/s of 100 B datagrams for 1 s
    }

    proptest! {
        /// A schedule delivers the profile's bytes within rounding (half a datagram).
        #[test]
        fn delivers_the_profiles_bytes(r1 in 1u64..50, r2 in 1u64..50, r3 in 0u64..50, s in 100u32..1500, hold in any::<bool>()) {
            let steps = vec![
                RateStep { at_ns: 0, rate_bps: r1 * 1_000_000, size: s, hold },
                RateStep { at_ns: 300_000_000, rate_bps: r2 * 1_000_000, size: s, hold: false },
                RateStep { at_ns: 600_000_000, rate_bps: r3 * 1_000_000, size: s, hold },
                RateStep { at_ns: 900_000_000, rate_bps: r3 * 1_000_000, size: s, hold: false },
            ];
            let p = Profile::new(steps).unwrap();
            let sent: f64 = p.departures().map(|(_, sz)| sz as f64).sum();
            let want = p.bytes();
            prop_assert!((sent - want).abs() <= s as f64 / 2.0 + 1.0, "sent {} want {}", sent, want);
        }
    }
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod more_tests;
