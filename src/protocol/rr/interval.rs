//! Interval reports of a request/response run (`rr -i`), as tcp and udp
//! print one row per status interval: the round trips answered in each
//! interval, their rate over the interval's real length, and the interval's
//! own latency percentiles. Free of I/O: the caller says when each round
//! trip ended, in seconds since the run began.

use hdrhistogram::Histogram;
use serde::Serialize;

/// One interval's row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RrInterval {
    /// Seconds since the run began, at the interval's start.
    pub start_secs: f64,
    /// At its end (the last interval ends when the run did).
    pub end_secs: f64,
    /// Round trips answered in the interval.
    pub count: u64,
    /// Requests given up in it (UDP: no reply within --timeout).
    pub lost: u64,
    /// Answered round trips per second of the interval; none for an
    /// interval of no length.
    pub per_sec: Option<f64>,
    /// The interval's median round trip, µs (none: nothing answered).
    pub p50_us: Option<f64>,
    /// Its 90th percentile, µs.
    pub p90_us: Option<f64>,
    /// Its 99th percentile, µs.
    pub p99_us: Option<f64>,
    /// Its longest round trip, µs.
    pub max_us: Option<f64>,
}

impl RrInterval {
    /// The console's column names.
    pub const HEADERS: [&'static str; 7] = [
        "Interval", "Count", "Lost", "PerSec", "P50Us", "P90Us", "P99Us",
    ];
    /// The console's column widths.
    pub const WIDTHS: [usize; 7] = [17, 9, 6, 10, 10, 10, 10];

    /// The row's cells, in [`Self::HEADERS`] order.
    pub fn cells(&self) -> [String; 7] {
        let us = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
        [
            format!("{:.2}-{:.2} s", self.start_secs, self.end_secs),
            self.count.to_string(),
            self.lost.to_string(),
            self.per_sec
                .map_or_else(|| "-".to_string(), |r| format!("{r:.0}")),
            us(self.p50_us),
            us(self.p90_us),
            us(self.p99_us),
        ]
    }
}

/// Collects round trips into intervals of a fixed length.
pub struct Intervals {
    every: f64,
    start: f64,
    count: u64,
    lost: u64,
    hdr: Histogram<u64>,
}

impl Intervals {
    /// Intervals of `every_secs` seconds from the run's start.
    pub fn new(every_secs: f64) -> Intervals {
        Intervals {
            every: every_secs,
            start: 0.0,
            count: 0,
            lost: 0,
            // 1 ns to 1 h at 3 significant digits, as the run's own.
            hdr: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid HDR bounds"),
        }
    }

    /// A round trip ended `at_secs` after the run began, `rtt_ns` long
    /// (none: lost). Returns the intervals that ended before it, oldest
    /// first; an interval in which nothing ended is a row of zeros.
    pub fn record(&mut self, at_secs: f64, rtt_ns: Option<u64>) -> Vec<RrInterval> {
        let mut done = Vec::new();
        while self.every > 0.0 && at_secs >= self.start + self.every {
            let end = self.start + self.every;
            done.push(self.take(end));
        }
        match rtt_ns {
            Some(ns) => {
                self.count += 1;
                let _ = self.hdr.record(ns.clamp(1, self.hdr.high()));
            }
            None => self.lost += 1,
        }
        done
    }

    /// The last interval, cut at `at_secs` when the run ended; none if
    /// nothing ended in it.
    pub fn finish(&mut self, at_secs: f64) -> Option<RrInterval> {
        (self.count + self.lost > 0).then(|| self.take(at_secs.max(self.start)))
    }

    /// The interval from `start` to `end`, and a fresh one from `end`.
    fn take(&mut self, end: f64) -> RrInterval {
        let len = end - self.start;
        let pct = |q: f64| (self.count > 0).then(|| self.hdr.value_at_quantile(q) as f64 / 1e3);
        let row = RrInterval {
            start_secs: self.start,
            end_secs: end,
            count: self.count,
            lost: self.lost,
            per_sec: (len > 0.0).then(|| self.count as f64 / len),
            p50_us: pct(0.50),
            p90_us: pct(0.90),
            p99_us: pct(0.99),
            max_us: (self.count > 0).then(|| self.hdr.max() as f64 / 1e3),
        };
        self.start = end;
        self.count = 0;
        self.lost = 0;
        self.hdr.reset();
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_fall_into_their_interval() {
        let mut iv = Intervals::new(1.0);
        // 0.0-1.0: ten round trips of 100..=1000 us and one loss.
        for k in 1..=10u64 {
            assert!(iv.record(0.05 * k as f64, Some(k * 100_000)).is_empty());
        }
        assert!(iv.record(0.9, None).is_empty());
        // 2.5 closes 0-1 and an empty 1-2.
        let rows = iv.record(2.5, Some(2_000_000));
        assert_eq!(rows.len(), 2);
        let a = rows[0];
        assert_eq!((a.start_secs, a.end_secs), (0.0, 1.0));
        assert_eq!((a.count, a.lost), (10, 1));
        assert_eq!(a.per_sec, Some(10.0));
        let near = |v: Option<f64>, want: f64| (v.unwrap() - want).abs() <= want * 0.002;
        assert!(near(a.p50_us, 500.0), "{a:?}");
        assert!(near(a.p90_us, 900.0), "{a:?}");
        assert!(near(a.p99_us, 1000.0), "{a:?}");
        assert!(near(a.max_us, 1000.0), "{a:?}");
        let b = rows[1];
        assert_eq!(
            (b.start_secs, b.end_secs, b.count, b.lost),
            (1.0, 2.0, 0, 0)
        );
        assert_eq!(b.per_sec, Some(0.0));
        assert_eq!((b.p50_us, b.max_us), (None, None));
        // The last interval ends with the run: its rate over 0.5 s.
        let c = iv.finish(2.5).unwrap();
        assert_eq!((c.start_secs, c.end_secs, c.count), (2.0, 2.5, 1));
        assert_eq!(c.per_sec, Some(2.0));
        assert!(near(c.p50_us, 2000.0), "{c:?}");
        assert!(iv.finish(2.5).is_none(), "nothing after the last row");
    }

    #[test]
    fn an_interval_of_no_length_has_no_rate() {
        let mut iv = Intervals::new(1.0);
        assert!(iv.record(1.0, Some(1000)).len() == 1);
        let r = iv.finish(1.0).unwrap();
        assert_eq!((r.count, r.per_sec), (1, None));
    }

    #[test]
    fn intervals_of_no_length_make_one_row_of_the_whole_run() {
        // Not reachable from the command line (-i is at least 100 ms), but
        // the type must not loop on it.
        let mut iv = Intervals::new(0.0);
        assert!(iv.record(0.5, Some(1000)).is_empty());
        assert!(iv.record(3.0, None).is_empty());
        let r = iv.finish(4.0).unwrap();
        assert_eq!(
            (r.start_secs, r.end_secs, r.count, r.lost),
            (0.0, 4.0, 1, 1)
        );
        assert_eq!(r.per_sec, Some(0.25));
    }

    #[test]
    fn cells_show_the_row() {
        let r = RrInterval {
            start_secs: 1.0,
            end_secs: 2.0,
            count: 1234,
            lost: 3,
            per_sec: Some(1234.4),
            p50_us: Some(12.34),
            p90_us: Some(20.0),
            p99_us: None,
            max_us: Some(30.0),
        };
        assert_eq!(
            r.cells(),
            ["1.00-2.00 s", "1234", "3", "1234", "12.3", "20.0", "-"].map(String::from)
        );
    }
}
