//! Tests of `udp::client_setup`: each step alone on a simulated clock, then
//! both ends in memory (this machine against the server's [`Opening`]) over
//! a control connection that delays and a datagram path that loses,
//! duplicates and reorders.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::protocol::refusal::Refusal;
use crate::protocol::udp::session::{Admitted, Opening, acts};

const TOKEN: u64 = 0x5eed;
const NONCE: u64 = 0x0b0e;
const WITHIN: Duration = Duration::from_secs(10);
/// The client's wall clock at the simulation's start, ns.
const REAL0: u64 = 1_700_000_000_000_000_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The wall clock `at` after `t0`.
fn real(t0: Instant, at: Instant) -> u64 {
    REAL0 + at.duration_since(t0).as_nanos() as u64
}

fn probe(nonce: u64) -> [u8; HEADER_LEN] {
    handshake_datagram(nonce, 1)
}

fn outs(s: &mut ClientSetup) -> Vec<Out> {
    std::iter::from_fn(|| s.poll_out()).collect()
}

fn is_handshake(o: &Out) -> bool {
    matches!(o, Out::Datagram(d) if Header::read(d).is_ok_and(|h| h.flags & FLAG_HANDSHAKE != 0 && h.seq == TOKEN))
}

/// A setup with trusted clocks at `t0`, its first datagram and message
/// taken.
fn handshaking(t0: Instant) -> ClientSetup {
    let mut s = ClientSetup::new(TOKEN, Clock::Trusted, WITHIN, t0, REAL0);
    let o = outs(&mut s);
    assert_eq!(o.len(), 2, "{o:?}");
    assert!(is_handshake(&o[0]), "{o:?}");
    assert_eq!(
        o[1],
        Out::Send(Box::new(Message::UdpHandshake { token: TOKEN }))
    );
    s
}

#[test]
fn eight_clock_exchanges_give_the_offset_then_the_handshake_starts() {
    let t0 = Instant::now();
    let theta: i64 = 7_000_000;
    let mut s = ClientSetup::new(TOKEN, Clock::Estimate, WITHIN, t0, REAL0);
    assert!(!s.wants_datagrams(), "no probe before the handshake");
    let mut now = t0;
    for i in 0..CLOCK_SAMPLES {
        let o = outs(&mut s);
        let [Out::Send(m)] = &o[..] else {
            panic!("exchange {i}: {o:?}")
        };
        let Message::TimeRequest { t1 } = **m else {
            panic!("{m:?}")
        };
        assert_eq!(t1, real(t0, now));
        // 2 ms each way; the server's clock is `theta` ahead. The later
        // exchanges are faster: the fastest one is the estimate.
        let leg = ms(2) - Duration::from_micros(100 * i as u64);
        let t2 = (real(t0, now + leg) as i64 + theta) as u64;
        now += 2 * leg;
        assert_eq!(s.offset(), None);
        s.on_message(Message::TimeReply { t1, t2, t3: t2 }, now, real(t0, now))
            .unwrap();
    }
    let o = s.offset().expect("an estimate");
    assert_eq!(o.server_minus_client_ns, theta);
    assert_eq!(o.uncertainty_ns, 1_300_000, "half the fastest round trip");
    let o = outs(&mut s);
    assert!(is_handshake(&o[0]), "{o:?}");
    assert_eq!(
        o[1],
        Out::Send(Box::new(Message::UdpHandshake { token: TOKEN }))
    );
}

#[test]
fn a_clock_reply_to_another_request_is_unexpected_and_ends_the_setup() {
    let t0 = Instant::now();
    let mut s = ClientSetup::new(TOKEN, Clock::Estimate, WITHIN, t0, REAL0);
    outs(&mut s);
    let wrong = Message::TimeReply {
        t1: REAL0 + 1,
        t2: 5,
        t3: 5,
    };
    assert_eq!(
        s.on_message(wrong.clone(), t0, REAL0),
        Err(SetupError::Unexpected(Box::new(wrong)))
    );
    assert_eq!(s.deadline(), None);
    assert_eq!(s.poll_out(), None);
    // Nothing is heard after.
    assert!(s.on_message(Message::UdpProbed, t0, REAL0).is_err());
}

#[test]
fn a_known_offset_skips_the_exchanges() {
    let t0 = Instant::now();
    let known = Offset {
        server_minus_client_ns: -3,
        uncertainty_ns: 9,
    };
    let mut s = ClientSetup::new(TOKEN, Clock::Known(known), WITHIN, t0, REAL0);
    assert_eq!(s.offset(), Some(known));
    assert!(is_handshake(&s.poll_out().unwrap()));
    assert!(handshaking(t0).offset().is_none());
}

#[test]
fn a_silent_server_is_named_at_every_step_that_waits_for_it() {
    let t0 = Instant::now();
    // The clock exchange.
    let mut s = ClientSetup::new(TOKEN, Clock::Estimate, WITHIN, t0, REAL0);
    assert_eq!(s.deadline(), Some(t0 + WITHIN));
    s.on_time(t0 + WITHIN - ms(1), REAL0).unwrap();
    let e = s.on_time(t0 + WITHIN, REAL0).unwrap_err();
    assert_eq!(
        e,
        SetupError::Silent {
            what: "clock reply",
            within: WITHIN
        }
    );
    assert_eq!(e.to_string(), "no clock reply from the server within 10s");
    // The word that a handshake datagram was seen.
    let mut s = handshaking(t0);
    s.on_time(t0 + WITHIN - ms(1), REAL0).unwrap();
    assert_eq!(s.on_time(t0 + WITHIN, REAL0), Err(SetupError::NeverProbed));
    // The probe after that word.
    let mut s = handshaking(t0);
    s.on_message(Message::UdpProbed, t0 + ms(200), REAL0)
        .unwrap();
    assert_eq!(s.deadline(), Some(t0 + ms(50)), "the next handshake, due");
    s.on_time(t0 + ms(200) + PROBE_WAIT - ms(1), REAL0).unwrap();
    assert_eq!(
        s.on_time(t0 + ms(200) + PROBE_WAIT, REAL0),
        Err(SetupError::ProbeLost)
    );
    // The go.
    let mut s = handshaking(t0);
    s.on_datagram(&probe(NONCE));
    s.on_message(Message::UdpProbed, t0, REAL0).unwrap();
    s.ready(0, t0 + ms(5));
    assert_eq!(s.deadline(), Some(t0 + ms(5) + WITHIN));
    s.on_time(t0 + ms(4) + WITHIN, REAL0).unwrap();
    assert_eq!(
        s.on_time(t0 + ms(5) + WITHIN, REAL0),
        Err(SetupError::Silent {
            what: "go",
            within: WITHIN
        })
    );
}

#[test]
fn handshake_datagrams_repeat_every_50ms_for_5s_and_stop_once_probed() {
    let t0 = Instant::now();
    let mut s = handshaking(t0);
    let mut sent = 0;
    let mut now = t0;
    // The server takes its time saying it saw one: the datagrams stop at 5 s.
    loop {
        let next = s.deadline().unwrap();
        assert!(next > now, "a deadline in the past would spin");
        if next >= t0 + ms(7000) {
            break;
        }
        now = next;
        s.on_time(now, real(t0, now)).unwrap();
        for o in outs(&mut s) {
            assert!(is_handshake(&o), "{o:?}");
            let Out::Datagram(d) = o else { unreachable!() };
            assert_eq!(Header::read(&d).unwrap().send_ns, real(t0, now));
            sent += 1;
        }
    }
    // 50 ms, 100 ms, ... 4950 ms after the first.
    assert_eq!(sent, 99);
    // The one that would be due at 5 s is not sent.
    s.on_time(t0 + HANDSHAKE_FOR, REAL0).unwrap();
    assert_eq!(s.poll_out(), None);
    assert_eq!(s.deadline(), Some(t0 + WITHIN), "only the wait is left");

    // Once the probe is here, none are sent, and no more are read.
    let mut s = handshaking(t0);
    assert!(s.wants_datagrams());
    s.on_datagram(&probe(NONCE));
    assert!(!s.wants_datagrams());
    s.on_time(t0 + ms(60), REAL0).unwrap();
    assert_eq!(s.poll_out(), None);
    assert_eq!(s.proven(), None, "not before udp_probed");
}

#[test]
fn the_probe_and_udp_probed_prove_the_path_in_either_order() {
    let t0 = Instant::now();
    for probe_first in [true, false] {
        let mut s = handshaking(t0);
        if probe_first {
            s.on_datagram(&probe(NONCE));
            s.on_message(Message::UdpProbed, t0, REAL0).unwrap();
        } else {
            s.on_message(Message::UdpProbed, t0, REAL0).unwrap();
            assert_eq!(s.proven(), None);
            s.on_datagram(&probe(NONCE));
        }
        assert_eq!(s.proven(), Some(NONCE), "probe first: {probe_first}");
        assert!(
            !s.wants_datagrams(),
            "the session's datagrams are not the setup's"
        );
        assert_eq!(s.deadline(), None, "the driver's to start");
        assert!(!s.is_started());
        // A second copy of the probe changes nothing.
        s.on_datagram(&probe(NONCE + 1));
        s.ready(-42, t0);
        assert_eq!(
            outs(&mut s),
            vec![Out::Send(Box::new(Message::UdpReady {
                nonce: NONCE,
                offset_ns: -42
            }))]
        );
        s.on_message(Message::UdpGo, t0, REAL0).unwrap();
        assert!(s.is_started());
        assert_eq!(s.deadline(), None);
    }
}

#[test]
fn only_the_first_probe_counts_and_other_datagrams_are_not_the_setups() {
    let t0 = Instant::now();
    let mut s = handshaking(t0);
    // Not a handshake, too short, empty: ignored.
    let mut data = [0u8; HEADER_LEN];
    Header {
        flags: 0,
        stream: 0,
        seq: 1,
        send_ns: 1,
        payload_len: 0,
    }
    .write(&mut data);
    for d in [&data[..], &probe(NONCE)[..5], &[][..]] {
        s.on_datagram(d);
    }
    s.on_datagram(&probe(NONCE));
    s.on_datagram(&probe(NONCE + 1));
    s.on_message(Message::UdpProbed, t0, REAL0).unwrap();
    assert_eq!(s.proven(), Some(NONCE));
}

#[test]
fn messages_out_of_turn_are_unexpected() {
    let t0 = Instant::now();
    // A go before ready.
    let mut s = handshaking(t0);
    assert!(matches!(
        s.on_message(Message::UdpGo, t0, REAL0),
        Err(SetupError::Unexpected(_))
    ));
    // A second udp_probed.
    let mut s = handshaking(t0);
    s.on_message(Message::UdpProbed, t0, REAL0).unwrap();
    assert!(s.on_message(Message::UdpProbed, t0, REAL0).is_err());
    // Anything once proven and before ready.
    let mut s = handshaking(t0);
    s.on_datagram(&probe(NONCE));
    s.on_message(Message::UdpProbed, t0, REAL0).unwrap();
    assert!(s.on_message(Message::UdpGo, t0, REAL0).is_err());
    assert_eq!(s.proven(), None, "failed");
    // Ready when not proven does nothing.
    let mut s = handshaking(t0);
    s.ready(0, t0);
    assert_eq!(s.poll_out(), None);
}

// ---- Both ends in memory ----

/// The server machine's actions (the common ones only).
#[derive(Debug)]
enum Action {
    Send(Box<Message>),
    Connect(SocketAddr),
    Datagram([u8; HEADER_LEN]),
    Refuse(Refusal),
    Close,
}

acts!(Action);

/// What a datagram meets on the way.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Arrives,
    Lost,
    Twice,
    /// Arrives this much later than it would.
    Late(u64),
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        4 => Just(Fate::Arrives),
        3 => Just(Fate::Lost),
        1 => Just(Fate::Twice),
        1 => (1u64..400).prop_map(Fate::Late),
    ]
}

#[derive(Debug)]
enum Hop {
    ToServer(Message),
    ToClient(Message),
    DatagramToServer([u8; HEADER_LEN]),
    DatagramToClient([u8; HEADER_LEN]),
}

/// How a simulated setup ended.
#[derive(Debug, PartialEq)]
enum End {
    /// Both ends started, the client with this offset estimate.
    Started(Option<Offset>),
    Client(SetupError),
    Server(String),
}

struct World {
    t0: Instant,
    /// One way, ms.
    ctl_delay: u64,
    dgram_delay: u64,
    /// The server's wall clock ahead of the client's, ns.
    theta: i64,
    fates: Vec<Fate>,
    sent: usize,
    hops: BTreeMap<(Instant, u64), Hop>,
    seq: u64,
}

impl World {
    fn put(&mut self, after: u64, h: Hop) {
        self.seq += 1;
        let at = self.t0 + ms(after);
        self.hops.insert((at, self.seq), h);
    }
    fn datagram(&mut self, now: Instant, h: impl Fn() -> Hop) {
        let f = self.fates.get(self.sent).copied().unwrap_or(Fate::Arrives);
        self.sent += 1;
        let base = now.duration_since(self.t0).as_millis() as u64 + self.dgram_delay;
        match f {
            Fate::Arrives => self.put(base, h()),
            Fate::Lost => {}
            Fate::Twice => {
                self.put(base, h());
                self.put(base, h());
            }
            Fate::Late(by) => self.put(base + by, h()),
        }
    }
    fn at(&self, now: Instant) -> u64 {
        now.duration_since(self.t0).as_millis() as u64
    }
}

/// Runs a whole setup: the server accepts at 0, the client estimates the
/// clock (or trusts it) and proves the path; every datagram either way
/// meets the next of `fates` (then arrives).
fn simulate(ctl_delay: u64, dgram_delay: u64, clock: Clock, fates: Vec<Fate>) -> End {
    let t0 = Instant::now();
    let client_addr: SocketAddr = "192.0.2.7:40000".parse().unwrap();
    let mut w = World {
        t0,
        ctl_delay,
        dgram_delay,
        theta: 123_456_789,
        fates,
        sent: 0,
        hops: BTreeMap::new(),
        seq: 0,
    };
    let mut q: VecDeque<Action> = VecDeque::new();
    let a = Admitted {
        session: Uuid::from_u128(1),
        port: 5201,
        token: TOKEN,
        nonce: NONCE,
        setup: Duration::from_secs(20),
        deadline: Duration::from_secs(60),
        max_duration: Duration::from_secs(55),
    };
    let mut server = Opening::new(a, t0, &mut q);
    let mut proven_to = None;
    let mut client: Option<ClientSetup> = None;
    let theta = w.theta;
    let server_real = |at: Instant| (real(t0, at) as i64 + theta) as u64;
    let mut now = t0;
    // A deadline that does not move the time on would spin here.
    for _ in 0..100_000 {
        // The server's actions.
        while let Some(act) = q.pop_front() {
            match act {
                Action::Send(m) => w.put(w.at(now) + w.ctl_delay, Hop::ToClient(*m)),
                Action::Connect(to) => assert_eq!(to, client_addr),
                Action::Datagram(d) => w.datagram(now, || Hop::DatagramToClient(d)),
                Action::Refuse(r) => return End::Server(r.to_string()),
                Action::Close => return End::Server("closed".into()),
            }
        }
        // The client's.
        if let Some(c) = client.as_mut() {
            if let Some(nonce) = c.proven() {
                assert_eq!(nonce, NONCE);
                let theta = c.offset().map_or(0, |o| o.server_minus_client_ns);
                c.ready(theta, now);
            }
            while let Some(o) = c.poll_out() {
                match o {
                    Out::Send(m) => w.put(w.at(now) + w.ctl_delay, Hop::ToServer(*m)),
                    Out::Datagram(d) => w.datagram(now, || Hop::DatagramToServer(d)),
                }
            }
            if c.is_started() {
                assert_eq!(proven_to, Some(client_addr), "the server started too");
                return End::Started(c.offset());
            }
        }
        // The next thing to happen: a hop, the client's deadline, the server's.
        let mut next = server.setup_deadline();
        if let Some(d) = client.as_ref().and_then(|c| c.deadline()) {
            next = next.min(d);
        }
        let hop = w.hops.first_key_value().map(|(k, _)| *k);
        if let Some((at, _)) = hop
            && at <= next
        {
            now = at;
            let (_, h) = w.hops.pop_first().unwrap();
            let r = match h {
                Hop::ToClient(Message::UdpAccept { token, .. }) => {
                    let c = ClientSetup::new(token, clock, WITHIN, now, real(t0, now));
                    client = Some(c);
                    Ok(())
                }
                Hop::ToClient(m) => client.as_mut().unwrap().on_message(m, now, real(t0, now)),
                Hop::DatagramToClient(d) => {
                    client.as_mut().unwrap().on_datagram(&d);
                    Ok(())
                }
                Hop::ToServer(Message::UdpReady { nonce, .. }) => {
                    match server.ready(nonce) {
                        Ok(to) => {
                            proven_to = Some(to);
                            w.put(w.at(now) + w.ctl_delay, Hop::ToClient(Message::UdpGo));
                        }
                        Err(r) => return End::Server(r.to_string()),
                    }
                    Ok(())
                }
                Hop::ToServer(m) => {
                    let heard =
                        server.on_message(m, proven_to.is_none(), now, server_real(now), &mut q);
                    assert!(
                        !matches!(heard, crate::protocol::udp::session::Heard::Other(_)),
                        "{heard:?}"
                    );
                    Ok(())
                }
                Hop::DatagramToServer(d) => {
                    server.on_datagram(&d, client_addr, server_real(now), &mut q);
                    Ok(())
                }
            };
            if let Err(e) = r {
                return End::Client(e);
            }
            continue;
        }
        now = next;
        if let Some(r) = server.setup_timeout(now) {
            return End::Server(r.to_string());
        }
        if let Some(c) = client.as_mut()
            && let Err(e) = c.on_time(now, real(t0, now))
        {
            return End::Client(e);
        }
        assert!(now < t0 + Duration::from_secs(30), "the setup never ended");
    }
    panic!("the setup spun without the time moving on")
}

#[test]
fn both_ends_start_on_a_clean_path_with_the_offset_found() {
    let End::Started(Some(o)) = simulate(3, 3, Clock::Estimate, vec![]) else {
        panic!("not started")
    };
    assert_eq!(o.server_minus_client_ns, 123_456_789);
    assert_eq!(o.uncertainty_ns, 3_000_000);
    assert_eq!(
        simulate(1, 1, Clock::Trusted, vec![]),
        End::Started(None),
        "trusted clocks"
    );
}

#[test]
fn lost_handshakes_are_sent_again_and_lost_probes_are_named() {
    // The first four handshake datagrams are lost; the fifth proves the
    // path, and the server's three probes arrive.
    let lost4 = vec![Fate::Lost; 4];
    assert!(matches!(
        simulate(2, 2, Clock::Trusted, lost4),
        End::Started(None)
    ));
    // Every handshake is lost: the server gives up on its wait (3 s).
    let all_lost = simulate(2, 2, Clock::Trusted, vec![Fate::Lost; 1000]);
    assert!(
        matches!(&all_lost, End::Server(why) if why.contains("handshake")),
        "{all_lost:?}"
    );
    // The handshake arrives but the three probes are lost.
    let probes_lost = vec![Fate::Arrives, Fate::Lost, Fate::Lost, Fate::Lost];
    assert_eq!(
        simulate(2, 2, Clock::Trusted, probes_lost),
        End::Client(SetupError::ProbeLost)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever the datagram path does, the setup ends within its bounds
    /// with both ends agreeing: started together with the server's nonce
    /// echoed and the offset right within its bound, or one end naming why.
    #[test]
    fn the_setup_ends_in_agreement_on_any_path(
        ctl in 0u64..40,
        dgram in 0u64..40,
        estimate in any::<bool>(),
        fates in proptest::collection::vec(fate(), 0..120),
    ) {
        let lossless = fates.iter().all(|f| !matches!(f, Fate::Lost));
        let clock = if estimate { Clock::Estimate } else { Clock::Trusted };
        match simulate(ctl, dgram, clock, fates) {
            End::Started(o) => {
                if estimate {
                    let o = o.expect("an estimate");
                    let err = (o.server_minus_client_ns - 123_456_789).unsigned_abs();
                    prop_assert!(err <= o.uncertainty_ns, "{o:?}");
                } else {
                    prop_assert_eq!(o, None);
                }
            }
            other => prop_assert!(!lossless, "a path that loses nothing failed: {other:?}"),
        }
    }
}
