//! The simulation `rr/probe_tests.rs` runs: the client's machine against
//! the server's own (`rr::answer::Answerer`) through an in-memory channel
//! that loses, duplicates, reorders and truncates datagrams each way, on a
//! simulated clock, and the checks every such run must pass.

use super::*;
use crate::protocol::proto::{Message, SessionSummary};
use crate::protocol::rr::answer::{Action, Answerer, Terms};
use std::collections::{BTreeMap, HashMap, HashSet};
pub(super) const TOKEN: u64 = 0x7070_7070;
pub(super) const NONCE: u64 = 0x5eed_5eed;
/// This end's CLOCK_REALTIME at the simulation's start: small enough that
/// the one-way sums in f64 are exact to the nanosecond.
pub(super) const REAL0: u64 = 1_000_000_000_000;

pub(super) fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(super) fn plan(total: u64, interval: Option<Duration>, timeout: Duration) -> Plan {
    Plan {
        size: 8,
        total,
        warmup: 0,
        timeout,
        interval,
        duration: None,
        offset_ns: 0,
        split_error_us: None,
    }
}

pub(super) fn client() -> std::net::SocketAddr {
    "127.0.0.2:5000".parse().unwrap()
}

/// A server machine through its setup, answering up to `iterations`.
pub(super) fn server(iterations: u64, reply: u32, t0: Instant) -> Answerer {
    let mut a = Answerer::new(
        Terms {
            session: uuid::Uuid::nil(),
            port: 9,
            token: TOKEN,
            nonce: NONCE,
            reply,
            iterations,
            setup: Duration::from_secs(10),
            deadline: Duration::from_secs(3600),
            max_duration: Duration::from_secs(3600),
        },
        t0,
    );
    let mut hs = vec![0u8; HEADER_LEN];
    Header {
        flags: FLAG_HANDSHAKE,
        stream: 0,
        seq: TOKEN,
        send_ns: 1,
        payload_len: 0,
    }
    .write(&mut hs);
    a.on_message(Message::UdpHandshake { token: TOKEN }, t0, 1);
    a.on_datagram(&hs, client(), 1, |r| r.to_vec());
    a.on_message(
        Message::UdpReady {
            nonce: NONCE,
            offset_ns: 0,
        },
        t0,
        1,
    );
    while let Some(x) = a.poll_action() {
        if let Action::Refuse(why) = x {
            panic!("refused: {why:?}");
        }
    }
    assert!(a.is_answering());
    a
}

pub(super) fn summary(a: &mut Answerer) -> SessionSummary {
    a.on_message(Message::Goodbye, Instant::now(), 0);
    while let Some(x) = a.poll_action() {
        if let Action::Send(m) = x
            && let Message::Summary(s) = *m
        {
            return s;
        }
    }
    panic!("no summary");
}

/// What the channel does to one datagram.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Fate {
    pub(super) lose: bool,
    /// Extra delay of the first copy, µs (reordering, lateness).
    pub(super) extra_us: u64,
    /// A second copy this many µs after the base delay.
    pub(super) dup_us: Option<u64>,
    /// Cut short (unreadable).
    pub(super) truncate: bool,
}

/// One direction: a base delay and the fates of its datagrams in order
/// (clean beyond the list).
#[derive(Debug, Clone, Default)]
pub(super) struct Way {
    pub(super) delay_us: u64,
    pub(super) fates: Vec<Fate>,
}

/// A datagram in flight: to the server or not, its sequence number, its
/// place (replies), whether intact, and its bytes.
#[derive(Debug)]
pub(super) struct Flying {
    pub(super) to_server: bool,
    pub(super) seq: u64,
    pub(super) place: u64,
    pub(super) intact: bool,
    pub(super) bytes: Vec<u8>,
}

/// One delivery, as the channel made it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Delivery {
    pub(super) at: Duration,
    pub(super) seq: u64,
    pub(super) place: u64,
    pub(super) intact: bool,
    /// To the server: whether it was still answering.
    pub(super) answering: bool,
}

#[derive(Debug)]
pub(super) struct Trace {
    /// Send time of each request, by number.
    pub(super) sends: Vec<Duration>,
    /// Every outcome with the time it was told.
    pub(super) events: Vec<(Duration, Outcome)>,
    pub(super) end: Duration,
    pub(super) counts: Counts,
    pub(super) summary: SessionSummary,
    pub(super) to_server: Vec<Delivery>,
    pub(super) to_client: Vec<Delivery>,
}

pub(super) struct Sim {
    pub(super) plan: Plan,
    pub(super) up: Way,
    pub(super) down: Way,
    /// The server gets nothing once it has answered this many.
    pub(super) gone_after: Option<u64>,
    /// The server's clock minus this end's, ns.
    pub(super) theta: i64,
    pub(super) reply: u32,
}

impl Sim {
    pub(super) fn new(plan: Plan) -> Sim {
        Sim {
            plan,
            up: Way {
                delay_us: 300,
                fates: Vec::new(),
            },
            down: Way {
                delay_us: 200,
                fates: Vec::new(),
            },
            gone_after: None,
            theta: 0,
            reply: 0,
        }
    }

    pub(super) fn run(self) -> Trace {
        let t0 = Instant::now();
        let mut p = Prober::new(self.plan.clone(), t0);
        let mut a = server(self.plan.total, self.reply, t0);
        let srv_real = |now: Duration| (REAL0 as i64 + now.as_nanos() as i64 + self.theta) as u64;
        let real = |now: Duration| REAL0 + now.as_nanos() as u64;
        let mut flying: BTreeMap<(Duration, u64), Flying> = BTreeMap::new();
        let mut order = 0u64;
        let (mut n_up, mut n_down, mut answered) = (0usize, 0usize, 0u64);
        let mut tr = Trace {
            sends: Vec::new(),
            events: Vec::new(),
            end: Duration::ZERO,
            counts: Counts::default(),
            summary: SessionSummary::default(),
            to_server: Vec::new(),
            to_client: Vec::new(),
        };
        let mut send = |flying: &mut BTreeMap<(Duration, u64), Flying>,
                        way: &Way,
                        n: &mut usize,
                        now: Duration,
                        f: Flying| {
            let fate = way.fates.get(*n).copied().unwrap_or_default();
            *n += 1;
            if fate.lose {
                return;
            }
            let mut f = f;
            if fate.truncate {
                f.bytes.pop();
                f.intact = false;
            }
            let copy = fate.dup_us.map(|_| Flying {
                bytes: f.bytes.clone(),
                ..f
            });
            flying.insert((now + us(way.delay_us + fate.extra_us), order), f);
            order += 1;
            if let (Some(d), Some(c)) = (fate.dup_us, copy) {
                flying.insert((now + us(way.delay_us + d), order), c);
                order += 1;
            }
        };
        let mut now = Duration::ZERO;
        for step in 0.. {
            assert!(step < 100_000, "the run does not end");
            // What arrives now is in before the machine looks at the time.
            while let Some(e) = flying.first_entry()
                && e.key().0 <= now
            {
                let f = e.remove();
                if f.to_server {
                    let answering = a.is_answering();
                    tr.to_server.push(Delivery {
                        at: now,
                        seq: f.seq,
                        place: 0,
                        intact: f.intact,
                        answering,
                    });
                    if let Some(r) =
                        a.on_datagram(&f.bytes, client(), srv_real(now), |r| r.to_vec())
                    {
                        a.sent();
                        let reply = Flying {
                            to_server: false,
                            seq: f.seq,
                            place: answered,
                            intact: true,
                            bytes: r,
                        };
                        answered += 1;
                        send(&mut flying, &self.down, &mut n_down, now, reply);
                    }
                } else {
                    tr.to_client.push(Delivery {
                        at: now,
                        seq: f.seq,
                        place: f.place,
                        intact: f.intact,
                        answering: false,
                    });
                    let arrived = Arrived {
                        at: t0 + now,
                        real_ns: real(now),
                        stamp: None,
                        tos: None,
                    };
                    p.on_datagram(&f.bytes, arrived);
                    while let Some(o) = p.poll_event() {
                        tr.events.push((now, o));
                    }
                }
            }
            let wait = loop {
                let next = p.poll(t0 + now);
                while let Some(o) = p.poll_event() {
                    tr.events.push((now, o));
                }
                match next {
                    Next::Send => {
                        let d = p.request(real(now)).to_vec();
                        let h = Header::read(&d).expect("a request reads");
                        assert_eq!(h.seq, tr.sends.len() as u64);
                        assert!(h.seq < self.plan.total, "more than asked for");
                        tr.sends.push(now);
                        p.sent(t0 + now, real(now));
                        let gone = self.gone_after.is_some_and(|k| answered >= k);
                        let f = Flying {
                            to_server: true,
                            seq: h.seq,
                            place: 0,
                            intact: true,
                            bytes: d,
                        };
                        if gone {
                            n_up += 1;
                        } else {
                            send(&mut flying, &self.up, &mut n_up, now, f);
                        }
                    }
                    Next::Wait(t) => {
                        assert!(t > t0 + now, "a wait that is no wait");
                        break Some(t - t0);
                    }
                    Next::Done => break None,
                }
            };
            let Some(wait) = wait else {
                tr.end = now;
                break;
            };
            now = flying
                .first_key_value()
                .map_or(wait, |(k, _)| k.0.min(wait));
        }
        tr.counts = p.counts();
        tr.summary = summary(&mut a);
        tr
    }
}

impl Trace {
    pub(super) fn fates(&self) -> Vec<&(Duration, Outcome)> {
        self.events.iter().filter(|e| e.1.probe.is_fate()).collect()
    }

    /// The fate of each request, by number: its time and round trip.
    pub(super) fn fate_of(&self) -> HashMap<u64, (Duration, Option<Duration>)> {
        let mut m = HashMap::new();
        for (at, o) in self.fates() {
            assert!(
                m.insert(o.probe.seq, (*at, o.rtt)).is_none(),
                "two fates for {}",
                o.probe.seq
            );
        }
        m
    }

    /// The counts the channel says the client should have.
    pub(super) fn expected(&self, timeout: Duration) -> Counts {
        let mut c = Counts {
            sent: self.sends.len() as u64,
            ..Counts::default()
        };
        let mut seen = HashSet::new();
        let mut top: Option<u64> = None;
        for d in self.to_client.iter().filter(|d| d.intact) {
            if !seen.insert(d.seq) {
                c.duplicates_down += 1;
                continue;
            }
            c.reordered_down += u64::from(top.is_some_and(|t| d.place < t));
            top = Some(top.map_or(d.place, |t| t.max(d.place)));
            if d.at - self.sends[d.seq as usize] <= timeout {
                c.received += 1;
            } else {
                c.late += 1;
            }
        }
        c
    }

    /// The server's counts the channel says it should have.
    pub(super) fn expected_server(&self) -> (u64, u64) {
        let mut seen = HashSet::new();
        let mut dups = 0;
        for d in self.to_server.iter().filter(|d| d.intact && d.answering) {
            if !seen.insert(d.seq) {
                dups += 1;
            }
        }
        (seen.len() as u64, dups)
    }
}

/// Checks everything a run must satisfy whatever the channel did.
pub(super) fn check(t: &Trace, plan: &Plan) -> Result<(), TestCaseError> {
    let want = t.expected(plan.timeout);
    prop_assert_eq!(t.counts, want, "{:?}", t.to_client);
    prop_assert_eq!(t.counts.sent, plan.total);
    // One fate per request: answered in time or lost, never both, never
    // a duplicate counted as an answer or a loss.
    let fates = t.fate_of();
    prop_assert_eq!(fates.len() as u64, t.counts.sent);
    let answered = fates.values().filter(|f| f.1.is_some()).count() as u64;
    prop_assert_eq!(answered, t.counts.received);
    let late = t.events.iter().filter(|e| e.1.probe.late).count() as u64;
    let dups = t.events.iter().filter(|e| e.1.probe.duplicate).count() as u64;
    prop_assert_eq!((late, dups), (t.counts.late, t.counts.duplicates_down));
    // The report's loss each way (rr/client.rs) from the server's summary.
    let (reached, dup_up) = t.expected_server();
    prop_assert_eq!(t.summary.requests, reached);
    prop_assert_eq!(t.summary.duplicates, dup_up);
    let replies_in = t.to_client.iter().filter(|d| d.intact).map(|d| d.seq);
    let replies_in = replies_in.collect::<HashSet<_>>().len() as u64;
    prop_assert_eq!(t.counts.received + t.counts.late, replies_in);
    prop_assert!(replies_in <= reached);
    for (seq, (at, rtt)) in &fates {
        let sent = t.sends[*seq as usize];
        match rtt {
            Some(r) => prop_assert_eq!(*r, *at - sent),
            None => prop_assert_eq!(*at, sent + plan.timeout, "lost {}", seq),
        }
    }
    // The schedule: on an interval, request i leaves at i × interval
    // whatever became of the others; back to back, at the previous fate.
    for (i, s) in t.sends.iter().enumerate() {
        let want = match plan.interval {
            Some(iv) => iv * i as u32,
            None if i == 0 => Duration::ZERO,
            None => fates[&(i as u64 - 1)].0,
        };
        prop_assert_eq!(*s, want, "request {}", i);
    }
    // The drain: three of the longest round trips after the last fate.
    let last = fates.values().map(|f| f.0).max().unwrap_or_default();
    let max_rtt = fates.values().filter_map(|f| f.1).max().unwrap_or_default();
    prop_assert_eq!(t.end, last + drain_time(max_rtt, plan.timeout));
    Ok(())
}

pub(super) fn run_checked(s: Sim) -> Trace {
    let plan = s.plan.clone();
    let t = s.run();
    if let Err(e) = check(&t, &plan) {
        panic!("{e}");
    }
    t
}
