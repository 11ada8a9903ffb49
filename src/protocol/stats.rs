//! Live counters shared by connection threads, and the per-interval rows the
//! status table, status file and JSON report are made of.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Counters updated by every connection thread; read by the status ticker.
#[derive(Debug, Default)]
pub struct Counters {
    /// Payload bytes sent.
    pub sent: AtomicU64,
    /// Payload bytes received.
    pub received: AtomicU64,
    /// Connections currently moving data.
    pub in_flight: AtomicI64,
    /// Connections ended in agreed success.
    pub completed: AtomicU64,
    /// Connections ended in a network error.
    pub net_errors: AtomicU64,
    /// Connections ended in a data error.
    pub data_errors: AtomicU64,
    /// Connections cancelled by a stop.
    pub cancelled: AtomicU64,
    /// Segments retransmitted by this end's connections (TCP_INFO's
    /// tcpi_total_retrans, summed as the connections are sampled and end).
    pub retransmits: AtomicU64,
    /// TCP_INFO samples taken (one per live connection per interval) and
    /// the sums of their smoothed RTT (µs) and congestion window (segments).
    pub info_samples: AtomicU64,
    pub rtt_us_sum: AtomicU64,
    pub cwnd_sum: AtomicU64,
}

/// A point-in-time copy of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Payload bytes sent so far.
    pub sent: u64,
    /// Payload bytes received so far.
    pub received: u64,
    /// Connections moving data now.
    pub in_flight: i64,
    /// Successful connections so far.
    pub completed: u64,
    /// Network errors so far.
    pub net_errors: u64,
    /// Data errors so far.
    pub data_errors: u64,
    /// Cancelled connections so far.
    pub cancelled: u64,
    /// Segments retransmitted so far.
    pub retransmits: u64,
    /// TCP_INFO samples so far, and the sums of their RTT (µs) and cwnd.
    pub info_samples: u64,
    pub rtt_us_sum: u64,
    pub cwnd_sum: u64,
}

impl Counters {
    /// Reads all counters.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            sent: self.sent.load(Relaxed),
            received: self.received.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            completed: self.completed.load(Relaxed),
            net_errors: self.net_errors.load(Relaxed),
            data_errors: self.data_errors.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            retransmits: self.retransmits.load(Relaxed),
            info_samples: self.info_samples.load(Relaxed),
            rtt_us_sum: self.rtt_us_sum.load(Relaxed),
            cwnd_sum: self.cwnd_sum.load(Relaxed),
        }
    }

    /// One TCP_INFO sample of a live connection: its smoothed RTT (µs) and
    /// congestion window (segments).
    pub fn sample(&self, rtt_us: u32, cwnd: u32) {
        self.info_samples.fetch_add(1, Relaxed);
        self.rtt_us_sum.fetch_add(u64::from(rtt_us), Relaxed);
        self.cwnd_sum.fetch_add(u64::from(cwnd), Relaxed);
    }
}

/// A connection's payload bytes so far, at `secs` into the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Progress {
    pub secs: f64,
    pub sent: u64,
    pub received: u64,
}

/// Most points a connection's [`Progress`] series keeps: a long run with
/// short intervals would otherwise hold (and write) millions.
pub const PROGRESS_POINTS: usize = 4096;

/// Appends `p` to `series`; a full series first drops every other point
/// but its first and last, halving its resolution. The counts are
/// cumulative, so the rate between the points kept stays exact, averaged
/// over a longer span.
pub fn push_progress(series: &mut Vec<Progress>, p: Progress) {
    if series.len() >= PROGRESS_POINTS {
        let last = series.len() - 1;
        let mut i = 0;
        series.retain(|_| {
            let keep = i % 2 == 0 || i == last;
            i += 1;
            keep
        });
    }
    series.push(p);
}

/// One row of the status table (ctsTraffic's columns, plus cancelled).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntervalRow {
    /// Seconds since the test started, at the end of this slice.
    #[serde(rename = "TimeSlice")]
    pub time_slice: f64,
    /// Bytes per second sent during the slice.
    #[serde(rename = "SendBps")]
    pub send_bps: u64,
    /// Bytes per second received during the slice.
    #[serde(rename = "RecvBps")]
    pub recv_bps: u64,
    /// Connections moving data at the end of the slice.
    #[serde(rename = "In-Flight")]
    pub in_flight: i64,
    /// Successful connections so far.
    #[serde(rename = "Completed")]
    pub completed: u64,
    /// Network errors so far.
    #[serde(rename = "NetError")]
    pub net_errors: u64,
    /// Data errors so far.
    #[serde(rename = "DataError")]
    pub data_errors: u64,
    /// Segments this end retransmitted during the slice (TCP_INFO; iperf3's
    /// `Retr`). Not a ctsTraffic column: JSON and console only.
    #[serde(rename = "Retransmits", default)]
    pub retransmits: u64,
    /// Mean smoothed RTT of the live connections sampled in the slice, µs.
    #[serde(rename = "RttUs", default)]
    pub rtt_us: Option<f64>,
    /// Mean congestion window of those samples, segments.
    #[serde(rename = "CwndSegments", default)]
    pub cwnd: Option<f64>,
    /// The slice ends within the `--omit` warm-up.
    #[serde(
        rename = "Omitted",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub omitted: bool,
    /// How long the slice was, s (the rates' divisor).
    #[serde(skip)]
    pub span_secs: f64,
}

/// The shortest slice the console gives a rate for, s. A rate over a few
/// ms is what went into the socket buffers, or a rate limiter's whole
/// period's allowance at once, not the path's: the first row of a run
/// (1 ms in) showed 18 Gbit/s under an 800 Mbit/s limit, a 10 ms tail row
/// 2.23 Gbit/s. Files keep the exact bytes per second of every slice.
pub const MIN_RATE_SPAN_SECS: f64 = 0.05;

/// A rate in bit/s with units for the console, or "-" when it is over a
/// slice shorter than [`MIN_RATE_SPAN_SECS`].
pub fn console_rate(bits_per_sec: f64, span_secs: f64) -> String {
    if span_secs < MIN_RATE_SPAN_SECS {
        "-".into()
    } else {
        crate::protocol::units::format_bits_per_sec(bits_per_sec)
    }
}

impl IntervalRow {
    /// Column names, in order, as printed and written.
    pub const HEADERS: [&'static str; 7] = [
        "TimeSlice",
        "SendBps",
        "RecvBps",
        "In-Flight",
        "Completed",
        "NetError",
        "DataError",
    ];

    /// The row for a slice from `prev` (at `prev_secs`) to `now` (at `now_secs`).
    pub fn between(prev: &Snapshot, prev_secs: f64, now: &Snapshot, now_secs: f64) -> Self {
        let dt = now_secs - prev_secs;
        let samples = now.info_samples.saturating_sub(prev.info_samples);
        let mean = |sum: u64| (samples > 0).then(|| sum as f64 / samples as f64);
        let rate = |a: u64, b: u64| {
            if dt > 0.0 {
                (b.saturating_sub(a) as f64 / dt).round() as u64
            } else {
                0
            }
        };
        IntervalRow {
            time_slice: now_secs,
            send_bps: rate(prev.sent, now.sent),
            recv_bps: rate(prev.received, now.received),
            in_flight: now.in_flight,
            completed: now.completed,
            net_errors: now.net_errors,
            data_errors: now.data_errors,
            retransmits: now.retransmits.saturating_sub(prev.retransmits),
            rtt_us: mean(now.rtt_us_sum.saturating_sub(prev.rtt_us_sum)),
            cwnd: mean(now.cwnd_sum.saturating_sub(prev.cwnd_sum)),
            omitted: false,
            span_secs: dt,
        }
    }

    /// Column names on the console, where rates are bits per second with
    /// units, followed by iperf3's `Retr` and the mean RTT.
    pub const CONSOLE_HEADERS: [&'static str; 9] = [
        "TimeSlice",
        "Send",
        "Recv",
        "In-Flight",
        "Completed",
        "NetError",
        "DataError",
        "Retr",
        "RttMs",
    ];

    /// The row as a person reads it: rates in bit/s with units, none over
    /// a slice too short for one ([`Self::cells`] keeps ctsTraffic's exact
    /// bytes per second for files).
    pub fn console_cells(&self) -> [String; 9] {
        let c = self.cells();
        [
            c[0].clone(),
            console_rate(self.send_bps as f64 * 8.0, self.span_secs),
            console_rate(self.recv_bps as f64 * 8.0, self.span_secs),
            c[3].clone(),
            c[4].clone(),
            c[5].clone(),
            c[6].clone(),
            self.retransmits.to_string(),
            self.rtt_us
                .map_or("-".into(), |r| format!("{:.3}", r / 1e3)),
        ]
    }

    /// The row's cells as text, in [`Self::HEADERS`] order.
    pub fn cells(&self) -> [String; 7] {
        [
            format!("{:.3}", self.time_slice),
            self.send_bps.to_string(),
            self.recv_bps.to_string(),
            self.in_flight.to_string(),
            self.completed.to_string(),
            self.net_errors.to_string(),
            self.data_errors.to_string(),
        ]
    }
}

/// Most TCP_INFO readings one sampler (a server session, a client event
/// loop) takes a second for its status rows, whatever its connection
/// count: a reading is a system call, and 100,000 connections read every
/// row cost a core.
pub const TCP_INFO_PER_SEC: u64 = 2_000;

/// How many connections a row of `every` samples: [`TCP_INFO_PER_SEC`]'s
/// share of the row, at least one.
pub fn samples_per_row(every: std::time::Duration) -> usize {
    let n = u128::from(TCP_INFO_PER_SEC) * every.as_millis() / 1000;
    n.clamp(1, u128::from(TCP_INFO_PER_SEC)) as usize
}

/// The order a row visits `n` connection slots in: from `from`, where the
/// last row's samples stopped, round to just before it, so that with more
/// connections than a row samples each gets its turn.
pub fn sample_order(n: usize, from: usize) -> impl Iterator<Item = usize> {
    let from = from.min(n);
    (from..n).chain(0..from)
}

/// When a status row's connections are sampled: from the middle of each
/// row (so every row has its samples), at most [`samples_per_row`] times
/// a row.
#[derive(Debug, Clone)]
pub struct SampleBudget {
    every: std::time::Duration,
    from: std::time::Instant,
    left: usize,
}

impl SampleBudget {
    /// Rows of `every` from `t0`.
    pub fn new(every: std::time::Duration, t0: std::time::Instant) -> SampleBudget {
        SampleBudget {
            every,
            from: t0 + every / 2,
            left: samples_per_row(every),
        }
    }

    /// Whether a connection scanned at `now` is sampled (counted if so).
    pub fn take(&mut self, now: std::time::Instant) -> bool {
        if now < self.from || self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }

    /// A row was taken at `now`: the next is sampled from its middle.
    pub fn row_taken(&mut self, now: std::time::Instant) {
        self.from = now + self.every / 2;
        self.left = samples_per_row(self.every);
    }
}

/// Rows taken every `every` from counters the caller snapshots: a server's
/// own account of a session (iperf3's --get-server-output), bounded to
/// `cap` rows.
#[derive(Debug)]
pub struct IntervalLog {
    every: std::time::Duration,
    t0: std::time::Instant,
    next: std::time::Instant,
    prev: (Snapshot, f64),
    rows: Vec<IntervalRow>,
    cap: usize,
    truncated: bool,
}

impl IntervalLog {
    /// A log of a row every `every` from `t0`, keeping at most `cap`.
    pub fn new(every: std::time::Duration, t0: std::time::Instant, cap: usize) -> IntervalLog {
        let every = every.max(std::time::Duration::from_millis(1));
        IntervalLog {
            every,
            t0,
            next: t0 + every,
            prev: (Snapshot::default(), 0.0),
            rows: Vec::new(),
            cap,
            truncated: false,
        }
    }

    /// Whether a row is due at `now`.
    pub fn due(&self, now: std::time::Instant) -> bool {
        now >= self.next
    }

    /// The row from the last one to `now`, when the counters read `snap`
    /// (a late caller gets one row for the whole span, never made-up ones).
    pub fn take(&mut self, now: std::time::Instant, snap: Snapshot) {
        let secs = now.saturating_duration_since(self.t0).as_secs_f64();
        if secs <= self.prev.1 {
            return;
        }
        if self.rows.len() < self.cap {
            self.rows
                .push(IntervalRow::between(&self.prev.0, self.prev.1, &snap, secs));
        } else {
            self.truncated = true;
        }
        self.prev = (snap, secs);
        while self.next <= now {
            self.next += self.every;
        }
    }

    /// The rows, and whether some were left out for the cap.
    pub fn finish(&mut self) -> (Vec<IntervalRow>, bool) {
        (std::mem::take(&mut self.rows), self.truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_info_samples_are_bounded_per_second_and_start_mid_row() {
        use std::time::{Duration, Instant};
        let ms = Duration::from_millis;
        assert_eq!(samples_per_row(ms(100)), 200);
        assert_eq!(samples_per_row(ms(1000)), 2000);
        assert_eq!(samples_per_row(ms(1)), 2);
        assert_eq!(samples_per_row(ms(0)), 1);
        assert_eq!(samples_per_row(Duration::from_secs(3600)), 2000);
        let t0 = Instant::now();
        let mut b = SampleBudget::new(ms(100), t0);
        assert!(!b.take(t0 + ms(49)));
        let taken = (0..1000).filter(|_| b.take(t0 + ms(50))).count();
        assert_eq!(taken, 200);
        b.row_taken(t0 + ms(100));
        assert!(!b.take(t0 + ms(149)));
        assert!(b.take(t0 + ms(150)));
        let taken = (0..1000).filter(|_| b.take(t0 + ms(199))).count();
        assert_eq!(taken, 199);
        let order = |n, from| sample_order(n, from).collect::<Vec<_>>();
        assert_eq!(order(4, 0), [0, 1, 2, 3]);
        assert_eq!(order(4, 2), [2, 3, 0, 1]);
        assert_eq!(order(4, 4), [0, 1, 2, 3]);
        assert_eq!(order(4, 9), [0, 1, 2, 3]);
        assert_eq!(order(0, 3), [0usize; 0]);
    }

    #[test]
    fn a_full_progress_series_halves_and_keeps_its_ends() {
        let at = |i: u64| Progress {
            secs: i as f64,
            sent: i * 10,
            received: i,
        };
        let mut s = Vec::new();
        for i in 0..PROGRESS_POINTS as u64 {
            push_progress(&mut s, at(i));
        }
        assert_eq!(s.len(), PROGRESS_POINTS);
        assert_eq!(s[PROGRESS_POINTS - 1], at(PROGRESS_POINTS as u64 - 1));
        // The next point: the even ones and the last stay, then it joins.
        push_progress(&mut s, at(9999));
        assert_eq!(s.len(), PROGRESS_POINTS / 2 + 2);
        assert_eq!(s[0], at(0));
        assert_eq!(s[1], at(2));
        assert_eq!(s[PROGRESS_POINTS / 2 - 1], at(PROGRESS_POINTS as u64 - 2));
        assert_eq!(s[PROGRESS_POINTS / 2], at(PROGRESS_POINTS as u64 - 1));
        assert_eq!(s[PROGRESS_POINTS / 2 + 1], at(9999));
        // Short series are kept whole.
        let mut short = vec![at(0)];
        push_progress(&mut short, at(1));
        assert_eq!(short, vec![at(0), at(1)]);
    }

    #[test]
    fn samples_add_up_and_a_row_gives_their_means_over_its_slice() {
        let c = Counters::default();
        c.sample(100, 10);
        c.sample(300, 30);
        let a = c.snapshot();
        assert_eq!((a.info_samples, a.rtt_us_sum, a.cwnd_sum), (2, 400, 40));
        c.sample(1000, 7);
        c.retransmits.fetch_add(5, Relaxed);
        let b = c.snapshot();
        let r = IntervalRow::between(&a, 0.5, &b, 1.0);
        // Only the slice's own sample.
        assert_eq!(
            (r.rtt_us, r.cwnd, r.retransmits),
            (Some(1000.0), Some(7.0), 5)
        );
        assert_eq!(r.span_secs, 0.5);
        let r = IntervalRow::between(&Snapshot::default(), 0.0, &b, 1.0);
        assert_eq!((r.rtt_us, r.cwnd), (Some(1400.0 / 3.0), Some(47.0 / 3.0)));
        // No samples, no means.
        let r = IntervalRow::between(&b, 1.0, &b, 2.0);
        assert_eq!((r.rtt_us, r.cwnd), (None, None));
        assert_eq!(r.console_cells()[8], "-");
    }

    #[test]
    fn the_console_gives_no_rate_over_a_slice_too_short_for_one() {
        let a = Snapshot::default();
        let b = Snapshot {
            sent: 1_250_000,
            received: 250_000,
            rtt_us_sum: 1500,
            info_samples: 1,
            ..Default::default()
        };
        // 1.25 MB in 1 ms would print 10 Gbit/s: the first row of a run.
        let r = IntervalRow::between(&a, 0.0, &b, 0.001);
        assert_eq!(r.send_bps, 1_250_000_000);
        let c = r.console_cells();
        assert_eq!((c[1].as_str(), c[2].as_str()), ("-", "-"));
        assert_eq!(c[8], "1.500");
        // Files keep the exact bytes per second.
        assert_eq!(r.cells()[1], "1250000000");
        // From 50 ms on the rate is shown, in bits.
        let r = IntervalRow::between(&a, 1.0, &b, 1.05);
        let c = r.console_cells();
        assert_eq!(
            (c[1].as_str(), c[2].as_str()),
            ("200.00 Mbit/s", "40.00 Mbit/s")
        );
        let r = IntervalRow::between(&a, 0.0, &b, 2.0);
        let c = r.console_cells();
        assert_eq!(
            (c[1].as_str(), c[2].as_str()),
            ("5.00 Mbit/s", "1.00 Mbit/s")
        );
        assert_eq!(console_rate(8.0, MIN_RATE_SPAN_SECS), "8.00 bit/s");
        assert_eq!(console_rate(8.0, MIN_RATE_SPAN_SECS * 0.99), "-");
    }

    #[test]
    fn interval_rates() {
        let a = Snapshot {
            sent: 1000,
            ..Default::default()
        };
        let b = Snapshot {
            sent: 3000,
            received: 500,
            completed: 2,
            ..Default::default()
        };
        let r = IntervalRow::between(&a, 1.0, &b, 3.0);
        assert_eq!(r.send_bps, 1000);
        assert_eq!(r.recv_bps, 250);
        assert_eq!(r.completed, 2);
        assert_eq!(r.cells()[0], "3.000");
        let z = IntervalRow::between(&a, 1.0, &b, 1.0);
        assert_eq!(z.send_bps, 0);
    }

    #[test]
    fn an_interval_log_takes_a_row_per_interval_and_one_for_a_late_span() {
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut l = IntervalLog::new(Duration::from_millis(100), t0, 3);
        assert!(!l.due(ms(99)));
        assert!(l.due(ms(100)));
        let snap = |sent| Snapshot {
            sent,
            ..Default::default()
        };
        l.take(ms(100), snap(1000));
        // Called late: one row for 100..350, the next due at 400.
        l.take(ms(350), snap(3500));
        assert!(!l.due(ms(399)));
        assert!(l.due(ms(400)));
        l.take(ms(400), snap(4000));
        // A row taken just as it fell due moves the next a whole interval on.
        assert!(!l.due(ms(499)));
        assert!(l.due(ms(500)));
        // Past the cap: counted as left out, not kept.
        l.take(ms(500), snap(5000));
        // Nothing new at the same time.
        l.take(ms(500), snap(9999));
        let (rows, truncated) = l.finish();
        assert!(truncated);
        let got: Vec<(u64, u64)> = rows
            .iter()
            .map(|r| ((r.time_slice * 1000.0).round() as u64, r.send_bps))
            .collect();
        assert_eq!(got, vec![(100, 10_000), (350, 10_000), (400, 10_000)]);
    }
}
