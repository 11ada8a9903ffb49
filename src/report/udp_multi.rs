//! The output of a many-stream UDP test (`-P`, `--bidir`): one summed row
//! per slice and direction (a `Dir` column when both run), a line per
//! stream and a sum per direction at the end, and the connection file's
//! row per stream (ctsTraffic's `-Connections` for UDP).

use std::io;
use std::path::Path;

use super::RowWriter;
use super::udp_cells::*;
use crate::protocol::udp::track::{UdpInterval, UdpTotals};
use crate::protocol::units::format_bits_per_sec;
use crate::udp::streams::{StreamsObserver, StreamsReport};

/// The observer of a many-stream test.
pub struct MultiReporter {
    verbosity: u8,
    media: bool,
    bidir: bool,
    header: Vec<&'static str>,
    console: RowWriter,
    status: Option<RowWriter>,
    connections: Option<RowWriter>,
    last: [f64; 2],
    errors: Vec<io::Error>,
}

fn dir(reverse: bool) -> &'static str {
    if reverse { "down" } else { "up" }
}

impl MultiReporter {
    /// Opens the files; `bidir` adds the direction column.
    pub fn new(
        verbosity: u8,
        media: bool,
        bidir: bool,
        status_file: Option<&Path>,
        connection_file: Option<&Path>,
    ) -> io::Result<MultiReporter> {
        let with_dir = |h: &[&'static str], w: &[usize]| {
            let (mut h2, mut w2) = (Vec::new(), Vec::new());
            if bidir {
                h2.push("Dir");
                w2.push(4);
            }
            h2.extend_from_slice(h);
            w2.extend_from_slice(w);
            (h2, w2)
        };
        let (ch, cw) = if media {
            with_dir(&MEDIA_HEADERS, &MEDIA_WIDTHS)
        } else {
            // -v (verbosity 2) shows every column; the default fits 100 characters.
            with_dir(
                &udp_console_pick(&udp_console_headers(), verbosity >= 2),
                &udp_console_pick(&UDP_CONSOLE_WIDTHS, verbosity >= 2),
            )
        };
        let (fh, fw) = if media {
            with_dir(&MEDIA_HEADERS, &MEDIA_WIDTHS)
        } else {
            with_dir(&UDP_HEADERS, &UDP_WIDTHS)
        };
        let open = |p: &Path, h: &[&str], w: &[usize]| {
            RowWriter::create(p, h, w)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        Ok(MultiReporter {
            verbosity,
            media,
            bidir,
            header: ch,
            console: RowWriter::console(crate::output::console(), &cw),
            status: status_file.map(|p| open(p, &fh, &fw)).transpose()?,
            connections: connection_file
                .map(|p| open(p, &UDP_CONNECTION_HEADERS, &UDP_CONNECTION_WIDTHS))
                .transpose()?,
            last: [0.0; 2],
            errors: Vec::new(),
        })
    }

    /// Output errors so far.
    pub fn take_errors(&mut self) -> Vec<io::Error> {
        std::mem::take(&mut self.errors)
    }

    /// The end: a line per stream and a sum per direction on the console,
    /// a row per stream in the connection file.
    pub fn finish(&mut self, rep: &StreamsReport) {
        for s in &rep.streams {
            if let (Some(w), Some(r)) = (self.connections.as_mut(), &s.report)
                && let Err(e) = w.row(&connection_cells(r))
            {
                self.errors.push(e);
            }
        }
        if self.verbosity == 0 {
            return;
        }
        for l in finish_lines(rep) {
            let _ = self.console.line(&l);
        }
    }
}

/// The end's console lines: a line per stream, the clock offset, a sum
/// per direction.
fn finish_lines(rep: &StreamsReport) -> Vec<String> {
    let mut lines = Vec::new();
    for s in &rep.streams {
        match (&s.report, &s.error) {
            (Some(r), _) => {
                let secs = r
                    .sender
                    .as_ref()
                    .map_or(r.duration_secs, |x| x.duration_secs);
                if let Some(t) = &r.totals {
                    push_line!(
                        lines,
                        "stream {:>3} {:>4}: {}",
                        s.index,
                        dir(s.reverse),
                        totals_line(t, secs)
                    );
                }
            }
            (None, Some(e)) => {
                push_line!(
                    lines,
                    "stream {:>3} {:>4}: failed: {e}",
                    s.index,
                    dir(s.reverse)
                )
            }
            (None, None) => {}
        }
    }
    if let Some(o) = &rep.offset {
        push_line!(
            lines,
            "Clocks: not synchronised; one server-client offset for every stream, estimated in band as {:.1} us +/- {:.1} us (delays carry that uncertainty)",
            o.server_minus_client_ns as f64 / 1e3,
            o.uncertainty_ns as f64 / 1e3
        );
    }
    for (rev, sum) in [(false, &rep.sum_up), (true, &rep.sum_down)] {
        if let Some(t) = sum {
            let mine = || rep.streams.iter().filter(|s| s.reverse == rev);
            // The streams' own time (their senders'), not the drain after.
            let secs = mine()
                .filter_map(|s| s.report.as_ref())
                .map(|r| {
                    r.sender
                        .as_ref()
                        .map_or(r.duration_secs, |x| x.duration_secs)
                })
                .fold(0.0, f64::max);
            // The sum is over the streams that ran: one the server refused
            // is named apart, not counted in it.
            let (ran, all) = (
                mine().filter(|s| s.report.is_some()).count(),
                mine().count(),
            );
            let streams = match ran == all {
                true => format!("{all} streams"),
                false => format!("{ran} of {all} streams"),
            };
            push_line!(
                lines,
                "SUM {:>4} ({streams}): {}",
                dir(rev),
                totals_line(t, secs)
            );
            if let Some(note) = super::udp::early_note(t, rep.offset.as_ref()) {
                push_line!(lines, "SUM {:>4} {note}", dir(rev));
            }
        }
    }
    lines
}

/// A stream's or a sum's totals in one line.
fn totals_line(t: &UdpTotals, secs: f64) -> String {
    let pct = t
        .sent
        .filter(|&s| s > 0)
        .map_or(0.0, |s| 100.0 * t.lost as f64 / s as f64);
    let mut line = format!(
        "{} datagrams ({} unique), {}; lost {} ({pct:.3}%), duplicates {}, reordered {}, corrupt {}",
        t.packets,
        t.unique,
        format_bits_per_sec(t.bytes as f64 * 8.0 / secs.max(1e-9)),
        t.lost,
        t.duplicates,
        t.reordered,
        t.corrupt
    );
    if let Some(avg) = t.delay_avg_us {
        line.push_str(&format!("; one-way delay avg {avg:.1} us"));
        if let Some((_, p50)) = t.percentiles_us.iter().find(|p| p.0 == "p50") {
            line.push_str(&format!(", p50 {p50:.1} us"));
        }
    }
    if let Some(f) = &t.frames {
        line.push_str(&format!(
            "; frames {} completed, {} dropped",
            f.completed, f.dropped
        ));
    }
    line
}

impl StreamsObserver for MultiReporter {
    fn started(&mut self) {
        if self.verbosity >= 1 {
            let _ = self.console.row(&self.header);
        }
    }

    fn interval(&mut self, reverse: bool, iv: &UdpInterval, running: u32) {
        let k = usize::from(reverse);
        let secs = iv.time_slice - self.last[k];
        self.last[k] = iv.time_slice;
        let prefix = |mut c: Vec<String>| {
            if self.bidir {
                c.insert(0, dir(reverse).to_string());
            }
            c
        };
        let (shown, file) = if self.media {
            let c = prefix(media_cells(iv, secs, running));
            (c.clone(), c)
        } else {
            (
                prefix(udp_console_pick(
                    &udp_console_cells(iv, secs),
                    self.verbosity >= 2,
                )),
                prefix(udp_cells(iv)),
            )
        };
        if self.verbosity >= 1 {
            let _ = self.console.row(&shown);
        }
        if let Some(w) = self.status.as_mut()
            && let Err(e) = w.row(&file)
        {
            self.errors.push(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udp::streams::StreamResult;

    fn reporter(
        verbosity: u8,
        media: bool,
        bidir: bool,
    ) -> (MultiReporter, crate::report::Capture) {
        let mut r = MultiReporter::new(verbosity, media, bidir, None, None).unwrap();
        let c = r.console.capture();
        (r, c)
    }

    fn words(text: &str) -> Vec<Vec<String>> {
        text.lines()
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect()
    }

    fn totals(bytes: u64) -> UdpTotals {
        UdpTotals {
            sent: Some(100),
            unique: 90,
            packets: 92,
            bytes,
            lost: 10,
            duplicates: 2,
            reordered: 3,
            corrupt: 1,
            ..Default::default()
        }
    }

    fn stream(index: u32, reverse: bool, secs: f64, bytes: u64) -> StreamResult {
        let mut rep = crate::report::udp::console_tests::udp_report(Some(totals(bytes)));
        rep.duration_secs = secs + 1.0;
        rep.sender = Some(crate::protocol::udp::sent::SenderReport {
            duration_secs: secs,
            ..Default::default()
        });
        StreamResult {
            index,
            reverse,
            report: Some(rep),
            error: None,
            refused: false,
        }
    }

    fn streams() -> StreamsReport {
        StreamsReport {
            streams: vec![
                stream(0, false, 2.0, 1_000_000),
                stream(1, false, 4.0, 1_000_000),
                stream(2, true, 1.0, 500_000),
                StreamResult {
                    index: 3,
                    reverse: true,
                    report: None,
                    error: Some("refused".into()),
                    refused: true,
                },
            ],
            sum_up: Some(totals(2_000_000)),
            sum_down: None,
            intervals: Vec::new(),
            interrupted: false,
            server_lost: false,
            duration_secs: 4.0,
            offset: None,
        }
    }

    #[test]
    fn a_totals_line_gives_rate_loss_and_delay() {
        let mut t = totals(1_000_000);
        assert_eq!(
            totals_line(&t, 2.0),
            "92 datagrams (90 unique), 4.00 Mbit/s; lost 10 (10.000%), duplicates 2, reordered 3, corrupt 1"
        );
        t.delay_avg_us = Some(12.34);
        t.percentiles_us = vec![("p25".into(), 1.0), ("p50".into(), 5.55)];
        t.frames = Some(crate::protocol::udp::frames::FrameCounts {
            completed: 7,
            dropped: 1,
            ..Default::default()
        });
        assert!(
            totals_line(&t, 2.0).ends_with(
                "corrupt 1; one-way delay avg 12.3 us, p50 5.5 us; frames 7 completed, 1 dropped"
            ),
            "{}",
            totals_line(&t, 2.0)
        );
        // Nothing sent known: no loss percentage to divide out.
        t.sent = Some(0);
        assert!(totals_line(&t, 2.0).contains("lost 10 (0.000%)"));
        t.percentiles_us.clear();
        assert!(totals_line(&t, 2.0).ends_with("avg 12.3 us; frames 7 completed, 1 dropped"));
    }

    #[test]
    fn the_end_lists_each_stream_and_sums_each_direction_over_the_longest_sender() {
        let l = finish_lines(&streams());
        assert_eq!(l.len(), 5, "{l:?}");
        assert!(
            l[0].starts_with("stream   0   up: 92 datagrams (90 unique), 4.00 Mbit/s;"),
            "{l:?}"
        );
        assert!(
            l[1].starts_with("stream   1   up: 92 datagrams (90 unique), 2.00 Mbit/s;"),
            "{l:?}"
        );
        assert!(
            l[2].starts_with("stream   2 down: 92 datagrams (90 unique), 4.00 Mbit/s;"),
            "{l:?}"
        );
        assert_eq!(l[3], "stream   3 down: failed: refused");
        // Up: 2 MB over the longest up sender's 4 s, from 2 streams.
        assert!(
            l[4].starts_with("SUM   up (2 streams): 92 datagrams (90 unique), 4.00 Mbit/s;"),
            "{l:?}"
        );
        let mut rep = streams();
        rep.sum_down = Some(UdpTotals {
            delays_below_zero: 1,
            below_zero_by_us: Some(2.0),
            ..totals(1_000_000)
        });
        rep.offset = Some(crate::protocol::udp::clock::Offset {
            server_minus_client_ns: 1500,
            uncertainty_ns: 500,
        });
        let l = finish_lines(&rep);
        assert!(l[4].starts_with("Clocks: not synchronised; one server-client offset for every stream, estimated in band as 1.5 us +/- 0.5 us"), "{l:?}");
        // Down: stream 2's 1 s, and only stream 2 (stream 3 has no report).
        assert!(
            l[6].starts_with("SUM down (1 of 2 streams): 92 datagrams (90 unique), 8.00 Mbit/s;"),
            "{l:?}"
        );
        assert!(l[7].starts_with("SUM down Early: 1 datagrams"), "{l:?}");
    }

    #[test]
    fn the_end_prints_from_v_and_fills_the_connection_file() {
        let (mut r, c) = reporter(1, false, false);
        let file = crate::report::Capture::default();
        r.connections = Some(RowWriter::console(Box::new(file.clone()), &[0; 10]));
        r.finish(&streams());
        assert_eq!(c.text().lines().count(), 5, "{}", c.text());
        // A row per stream that has a report.
        assert_eq!(file.text().lines().count(), 3, "{}", file.text());
        let (mut r, c) = reporter(0, false, false);
        let file = crate::report::Capture::default();
        r.connections = Some(RowWriter::console(Box::new(file.clone()), &[0; 10]));
        r.finish(&streams());
        assert_eq!(c.text(), "");
        assert_eq!(file.text().lines().count(), 3);
    }

    fn interval(time_slice: f64, bytes: u64) -> UdpInterval {
        UdpInterval {
            time_slice,
            bytes,
            packets: bytes / 1000,
            ..Default::default()
        }
    }

    #[test]
    fn summed_rows_give_each_direction_its_own_slice_and_a_dir_column() {
        let (mut r, c) = reporter(1, false, true);
        let status = crate::report::Capture::default();
        r.status = Some(RowWriter::console(Box::new(status.clone()), &[0; 14]));
        r.started();
        r.interval(false, &interval(0.5, 125_000), 2);
        r.interval(true, &interval(0.25, 125_000), 2);
        r.interval(false, &interval(1.0, 125_000), 2);
        let rows = words(&c.text());
        assert_eq!(rows[0][..2], ["Dir", "TimeSlice"]);
        assert_eq!(rows[1][..4], ["up", "0.500", "2.00", "Mbit/s"]);
        assert_eq!(rows[2][..4], ["down", "0.250", "4.00", "Mbit/s"]);
        assert_eq!(rows[3][..4], ["up", "1.000", "2.00", "Mbit/s"]);
        // Brief columns by default; the file has raw counts.
        assert_eq!(rows[1].len(), 1 + 9 + 1);
        assert_eq!(words(&status.text())[0][..3], ["up", "0.500", "125000"]);
        let (mut r, c) = reporter(2, false, false);
        r.interval(false, &interval(0.5, 125_000), 1);
        assert_eq!(words(&c.text())[0].len(), 15 + 1);
        let (mut r, c) = reporter(0, false, false);
        r.started();
        r.interval(false, &interval(0.5, 125_000), 1);
        assert_eq!(c.text(), "");
    }

    #[test]
    fn media_rows_count_the_running_streams() {
        let (mut r, c) = reporter(1, true, false);
        r.interval(false, &interval(0.5, 125_000), 3);
        assert_eq!(words(&c.text())[0][..3], ["0.500", "2000000", "3"]);
    }

    /// A writer whose every write fails, like a full disk.
    struct Full;

    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn write_errors_are_kept_for_the_end() {
        let (mut r, _c) = reporter(0, false, false);
        r.status = Some(RowWriter::console(Box::new(Full), &[0; 13]));
        r.interval(false, &interval(0.5, 1000), 1);
        let e = r.take_errors();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].to_string(), "disk full");
    }
}
