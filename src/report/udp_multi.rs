//! The output of a many-stream UDP test (`-P`, `--bidir`): one summed row
//! per slice and direction (a `Dir` column when both run), a line per
//! stream and a sum per direction at the end, and the connection file's
//! row per stream (ctsTraffic's `-Connections` for UDP).

use std::io;
use std::path::Path;

use super::RowWriter;
use super::udp_cells::*;
use crate::udp::streams::{StreamsObserver, StreamsReport};
use crate::udp::track::{UdpInterval, UdpTotals};
use crate::units::format_bits_per_sec;

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
            push_line!(
                lines,
                "SUM {:>4} ({} streams): {}",
                dir(rev),
                mine().count(),
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
