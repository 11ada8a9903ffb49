//! Several UDP streams as one test (`udp -P N`, `--bidir`), as iperf3 runs
//! parallel and bidirectional streams: each stream is a session of its own
//! (its own data socket, so its own 5-tuple), all carrying the same group
//! ID so the server counts them as one test. The first stream is set up
//! before the others, which then start together. Their intervals are added
//! up slice by slice for each direction.
//!
//! The streams share one clock offset, the first stream's: the clocks are
//! the same two for all, and the first measures it while nothing else runs.
//! Estimated by each stream while the others start (a busy host), the
//! offsets came out tens of µs apart, more than a loopback's delay, and
//! the streams' delays went below zero.

use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;

use super::client::{UdpClientConfig, UdpObserver, UdpReport, run_with_offset};
use super::receive::PacketRow;
use crate::control::ClientError;
use crate::protocol::udp::clock::Offset;
use crate::protocol::udp::track::{UdpInterval, UdpTotals};

/// One stream's outcome.
#[derive(Debug, Serialize)]
pub struct StreamResult {
    /// Its place in the group.
    pub index: u32,
    /// The server sends on it.
    pub reverse: bool,
    /// What it measured.
    pub report: Option<UdpReport>,
    /// Why it could not run, if it could not.
    pub error: Option<String>,
    /// The server refused it (a limit, the key): the run's exit code says
    /// so rather than calling the server lost.
    #[serde(skip)]
    pub refused: bool,
}

/// What a many-stream test measured.
#[derive(Debug, Serialize)]
pub struct StreamsReport {
    /// Every stream, in order.
    pub streams: Vec<StreamResult>,
    /// Client-to-server streams added up (receiver totals).
    pub sum_up: Option<UdpTotals>,
    /// Server-to-client streams added up.
    pub sum_down: Option<UdpTotals>,
    /// The summed rows, both directions, in the order printed.
    pub intervals: Vec<UdpInterval>,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
    /// A stream lost its server.
    pub server_lost: bool,
    /// The longest stream's duration, s.
    pub duration_secs: f64,
    /// The clock offset every stream's delays are corrected with (the
    /// first stream's estimate; absent with `--synced`).
    pub offset: Option<Offset>,
}

/// Receives the summed rows as they are made.
pub trait StreamsObserver {
    /// The first stream is set up; all start now.
    fn started(&mut self);
    /// The streams of one direction (`reverse`: server to client) added up
    /// for one slice; `running` streams took part.
    fn interval(&mut self, reverse: bool, iv: &UdpInterval, running: u32);
}

enum Event {
    Started(Option<Offset>),
    Interval(usize, UdpInterval),
    Done(usize, Box<Result<UdpReport, ClientError>>),
}

struct Fwd(usize, mpsc::Sender<Event>, Option<Offset>);

impl UdpObserver for Fwd {
    fn clock(&mut self, offset: Option<Offset>) {
        self.2 = offset;
    }
    fn started(&mut self) {
        let _ = self.1.send(Event::Started(self.2));
    }
    fn interval(&mut self, iv: &UdpInterval) {
        let _ = self.1.send(Event::Interval(self.0, iv.clone()));
    }
    fn packet(&mut self, _row: &PacketRow) {}
}

/// Rows waiting to be added up, per stream, and how many slices of each
/// direction were added so far.
struct Pending {
    rows: Vec<std::collections::VecDeque<UdpInterval>>,
    done: Vec<bool>,
    reverse: Vec<bool>,
}

impl Pending {
    /// The next slice of direction `rev`, once every stream of it still
    /// running has its row (or, when `flush`, whatever rows there are).
    fn next(&mut self, rev: bool, flush: bool) -> Option<(UdpInterval, u32)> {
        let members: Vec<usize> = (0..self.rows.len())
            .filter(|&i| self.reverse[i] == rev)
            .collect();
        let ready = members
            .iter()
            .all(|&i| !self.rows[i].is_empty() || self.done[i]);
        let any = members.iter().any(|&i| !self.rows[i].is_empty());
        if !any || (!ready && !flush) {
            return None;
        }
        let rows: Vec<UdpInterval> = members
            .iter()
            .filter_map(|&i| self.rows[i].pop_front())
            .collect();
        let refs: Vec<&UdpInterval> = rows.iter().collect();
        Some((
            crate::protocol::udp::sum::interval(&refs),
            rows.len() as u32,
        ))
    }
}

/// Runs the streams `cfgs` (each spec with its group set; the first one
/// opens the group) until all end. An error before the first stream is up
/// is the run's error; later ones are its streams'.
pub fn run_streams(
    cfgs: Vec<UdpClientConfig>,
    interrupt: Arc<AtomicBool>,
    obs: &mut dyn StreamsObserver,
) -> Result<StreamsReport, ClientError> {
    let n = cfgs.len();
    let (tx, rx) = mpsc::channel::<Event>();
    let mut results: Vec<Option<Result<UdpReport, ClientError>>> = (0..n).map(|_| None).collect();
    let reverse: Vec<bool> = cfgs.iter().map(|c| c.spec.reverse).collect();
    let spawn = |i: usize, cfg: UdpClientConfig, known: Option<Offset>, tx: mpsc::Sender<Event>| {
        let interrupt = Arc::clone(&interrupt);
        std::thread::spawn(move || {
            let r = run_with_offset(&cfg, known, interrupt, &mut Fwd(i, tx.clone(), None));
            let _ = tx.send(Event::Done(i, Box::new(r)));
        });
    };
    let mut cfgs = cfgs.into_iter();
    if let Some(first) = cfgs.next() {
        spawn(0, first, None, tx.clone());
    }
    let mut pending = Pending {
        rows: (0..n).map(|_| Default::default()).collect(),
        done: vec![false; n],
        reverse: reverse.clone(),
    };
    let mut rest = Some(cfgs);
    let mut intervals = Vec::new();
    let mut finished = 0;
    let mut offset = None;
    let emit = |pending: &mut Pending,
                flush: bool,
                obs: &mut dyn StreamsObserver,
                out: &mut Vec<UdpInterval>| {
        for rev in [false, true] {
            while let Some((iv, running)) = pending.next(rev, flush) {
                obs.interval(rev, &iv, running);
                out.push(iv);
            }
        }
    };
    while finished < n {
        let Ok(ev) = rx.recv() else { break };
        match ev {
            Event::Started(o) => {
                if let Some(more) = rest.take() {
                    offset = o;
                    obs.started();
                    for (k, cfg) in more.enumerate() {
                        spawn(k + 1, cfg, o, tx.clone());
                    }
                }
            }
            Event::Interval(i, iv) => pending.rows[i].push_back(iv),
            Event::Done(i, r) => {
                if i == 0 && rest.is_some() {
                    // The first stream never came up: nothing else starts.
                    return match *r {
                        Err(e) => Err(e),
                        Ok(rep) => Ok(single(rep, reverse[0])),
                    };
                }
                pending.done[i] = true;
                results[i] = Some(*r);
                finished += 1;
            }
        }
        emit(&mut pending, false, obs, &mut intervals);
    }
    emit(&mut pending, true, obs, &mut intervals);
    let streams: Vec<StreamResult> = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let refused = matches!(
                r,
                Some(Err(
                    ClientError::Refused { .. } | ClientError::Unproven { .. }
                ))
            );
            let (report, error) = match r {
                Some(Ok(rep)) => (Some(rep), None),
                Some(Err(e)) => (None, Some(e.to_string())),
                None => (None, Some("did not finish".into())),
            };
            StreamResult {
                index: i as u32,
                reverse: reverse[i],
                report,
                error,
                refused,
            }
        })
        .collect();
    Ok(summarise(streams, intervals, offset))
}

/// A group whose first stream ended before the others started.
fn single(rep: UdpReport, reverse: bool) -> StreamsReport {
    let intervals = rep.intervals.clone();
    let offset = rep.offset;
    summarise(
        vec![StreamResult {
            index: 0,
            reverse,
            report: Some(rep),
            error: None,
            refused: false,
        }],
        intervals,
        offset,
    )
}

fn summarise(
    streams: Vec<StreamResult>,
    intervals: Vec<UdpInterval>,
    offset: Option<Offset>,
) -> StreamsReport {
    let sum = |rev: bool| {
        let ts: Vec<&UdpTotals> = streams
            .iter()
            .filter(|s| s.reverse == rev)
            .filter_map(|s| s.report.as_ref()?.totals.as_ref())
            .collect();
        (!ts.is_empty()).then(|| crate::protocol::udp::sum::totals(&ts))
    };
    let reports = || streams.iter().filter_map(|s| s.report.as_ref());
    StreamsReport {
        sum_up: sum(false),
        sum_down: sum(true),
        intervals,
        interrupted: reports().any(|r| r.interrupted),
        server_lost: reports().any(|r| r.server_lost)
            || streams.iter().any(|s| s.error.is_some() && !s.refused),
        duration_secs: reports().map(|r| r.duration_secs).fold(0.0, f64::max),
        offset,
        streams,
    }
}
