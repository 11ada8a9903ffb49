//! Unit tests of `udp::intake`: a client leaving at every step of a session
//! closes it with nothing after, and a property test of the receiver's
//! counts against a model of a path that loses, duplicates, reorders,
//! truncates and corrupts datagrams.

use super::*;
use proptest::prelude::*;

/// One step of a client's session, for leaving after any of them.
fn step(a: &mut Intake, k: usize, t0: Instant) {
    let t = t0 + Duration::from_millis(k as u64);
    match k {
        0 => a.on_message(Message::TimeRequest { t1: 1 }, t, 1),
        1 => a.on_message(Message::UdpHandshake { token: TOKEN }, t, 1),
        2 => a.on_datagram(&handshake(TOKEN), client(), at(t, 1)),
        3 => a.on_message(
            Message::UdpReady {
                nonce: NONCE,
                offset_ns: 0,
            },
            t,
            1,
        ),
        4 => a.on_datagram(&datagram(0, 0), client(), at(t, 1)),
        5 => a.on_timeout(t0 + Duration::from_secs(1)),
        6 => a.on_message(done(1), t0 + Duration::from_secs(1), 1),
        7 => a.on_timeout(t0 + Duration::from_secs(2)),
        _ => a.on_message(Message::Goodbye, t0 + Duration::from_secs(2), 1),
    }
}

#[test]
fn a_client_gone_at_every_step_closes_it_and_nothing_follows() {
    for gone in 0..=9 {
        let t0 = Instant::now();
        let mut a = intake(t0);
        let mut s = Said::default();
        for k in 0..gone {
            step(&mut a, k, t0);
            drain(&mut a, &mut s);
        }
        let was_over = a.is_over();
        a.on_closed();
        drain(&mut a, &mut s);
        assert!(a.is_over() && a.deadline().is_none(), "gone after {gone}");
        assert!(s.refused.is_none(), "gone after {gone}: {:?}", s.refused);
        // Over already (after the goodbye) or closed now: once either way.
        assert!(s.closed, "gone after {gone}");
        let before = s.sent.len();
        for k in 0..=8 {
            step(&mut a, k, t0);
        }
        a.on_closed();
        assert!(!a.has_actions(), "gone after {gone}");
        assert_eq!(s.sent.len(), before);
        assert_eq!(was_over, gone == 9, "over only after the goodbye");
    }
}

/// What the path does to one datagram.
#[derive(Debug, Clone)]
enum Fate {
    Deliver,
    Lose,
    Duplicate,
    /// Held back and delivered this many datagrams later.
    Delay(usize),
    /// Cut to this many bytes.
    Truncate(usize),
    /// A payload byte flipped.
    Flip(usize),
    /// Replaced by bytes that are no datagram.
    Garbage(Vec<u8>),
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        6 => Just(Fate::Deliver),
        2 => Just(Fate::Lose),
        1 => Just(Fate::Duplicate),
        1 => (1usize..6).prop_map(Fate::Delay),
        1 => (0usize..HEADER_LEN + PAYLOAD).prop_map(Fate::Truncate),
        1 => (0usize..PAYLOAD).prop_map(Fate::Flip),
        1 => proptest::collection::vec(any::<u8>(), 0..80).prop_map(|mut g| {
            // Never the header's magic.
            if let Some(b) = g.first_mut() {
                *b = 0;
            }
            Fate::Garbage(g)
        }),
    ]
}

/// The receiver's counts as a model: what arrives at or above the next
/// expected number is new, a missing one arriving is reordered, anything
/// else a duplicate; unreadable datagrams count as corrupt packets.
#[derive(Debug, Default, PartialEq)]
struct Model {
    packets: u64,
    bytes: u64,
    unique: u64,
    duplicates: u64,
    reordered: u64,
    corrupt: u64,
}

impl Model {
    fn arrive(&mut self, d: &[u8], seen: &mut HashSet<u64>, next: &mut u64) {
        self.packets += 1;
        self.bytes += d.len() as u64;
        let Ok(h) = Header::read(d) else {
            self.corrupt += 1;
            return;
        };
        if verify_payload(&d[HEADER_LEN..], h.seq) {
            self.corrupt += 1;
        }
        if h.seq >= *next {
            self.unique += 1;
            *next = h.seq + 1;
        } else if !seen.contains(&h.seq) {
            self.unique += 1;
            self.reordered += 1;
        } else {
            self.duplicates += 1;
        }
        seen.insert(h.seq);
    }
}

fn verify_payload(p: &[u8], seq: u64) -> bool {
    crate::protocol::udp::header::verify_payload(1, seq, p).is_err()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn counts_equal_a_model_of_the_path(
        fates in proptest::collection::vec(fate(), 0..120),
        tell in any::<bool>(),
        gap_ms in 1u64..400,
    ) {
        let t0 = Instant::now();
        let (mut a, mut s) = started(t0);
        let mut arrivals: Vec<Vec<u8>> = Vec::new();
        let mut held: Vec<(usize, Vec<u8>)> = Vec::new();
        for (seq, f) in fates.iter().enumerate() {
            let d = datagram(seq as u64, 0);
            match f {
                Fate::Deliver => arrivals.push(d),
                Fate::Lose => {}
                Fate::Duplicate => {
                    arrivals.push(d.clone());
                    arrivals.push(d);
                }
                Fate::Delay(n) => held.push((arrivals.len() + n, d)),
                Fate::Truncate(n) => arrivals.push(d[..*n].to_vec()),
                Fate::Flip(i) => {
                    let mut d = d;
                    d[HEADER_LEN + i] ^= 0x40;
                    arrivals.push(d);
                }
                Fate::Garbage(g) => arrivals.push(g.clone()),
            }
            held.sort_by_key(|(at, _)| *at);
            while held.first().is_some_and(|(at, _)| *at <= arrivals.len()) {
                arrivals.push(held.remove(0).1);
            }
        }
        arrivals.extend(held.into_iter().map(|(_, d)| d));
        let mut model = Model::default();
        let (mut seen, mut next) = (HashSet::new(), 0);
        let mut now = t0;
        for d in &arrivals {
            now += Duration::from_millis(gap_ms);
            run_clock(&mut a, &mut s, now);
            a.on_datagram(d, client(), at(now, 7));
            model.arrive(d, &mut seen, &mut next);
        }
        let sent = fates.len() as u64;
        if tell {
            a.on_message(done(sent), now, 1);
            run_clock(&mut a, &mut s, now + Duration::from_secs(1));
            prop_assert!(!a.is_running());
        }
        a.on_message(Message::Goodbye, now + Duration::from_secs(1), 1);
        drain(&mut a, &mut s);
        let tot = s.totals();
        prop_assert_eq!(tot.len(), 1);
        let t = tot[0];
        let got = Model {
            packets: t.packets,
            bytes: t.bytes,
            unique: t.unique,
            duplicates: t.duplicates,
            reordered: t.reordered,
            corrupt: t.corrupt,
        };
        prop_assert_eq!(&got, &model);
        let lost = match tell {
            true => sent - model.unique,
            // Without the sender's account: the gaps below the highest seen.
            false => next - model.unique,
        };
        prop_assert_eq!(t.lost, lost);
        prop_assert_eq!(t.sent, tell.then_some(sent));
        // The intervals add up to the totals, each ended in order.
        let ivs = s.intervals();
        let sum: u64 = ivs.iter().map(|iv| iv.packets).sum();
        prop_assert_eq!(sum, model.packets);
        let sum: u64 = ivs.iter().map(|iv| iv.duplicates).sum();
        prop_assert_eq!(sum, model.duplicates);
        prop_assert!(ivs.windows(2).all(|w| w[0].time_slice <= w[1].time_slice));
        prop_assert!(s.closed && s.refused.is_none());
    }
}
