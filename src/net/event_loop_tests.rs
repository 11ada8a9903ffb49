//! The skeleton on loopback sockets and in memory: stale tokens, timers
//! and "again" entries of a closed slot never reach its next occupant, a
//! slot holds one timer entry, the mailbox is taken a budget a turn.

use super::*;
use crate::net::loops::Mailboxes;
use mio::net::UdpSocket;
use std::net::SocketAddr;

/// A loop whose connections are numbers, with optional sockets.
struct Probe {
    core: Core<u32, u32>,
    socks: Vec<Option<UdpSocket>>,
    /// (slot, occupant, with an event) per `on_ready`.
    ready: Vec<(usize, u32, bool)>,
    /// (slot, occupant) per `on_timer`.
    timed: Vec<(usize, u32)>,
    mail: Vec<u32>,
    /// On the first ready slot: close the other of these two and put a
    /// new occupant (this number, with a fresh socket) in its place.
    swap: Option<([usize; 2], u32)>,
}

impl Probe {
    fn new(rx: Option<Receiver<u32>>, poll: Poll) -> Probe {
        Probe {
            core: Core::new(poll, rx, Duration::from_millis(10)),
            socks: Vec::new(),
            ready: Vec::new(),
            timed: Vec::new(),
            mail: Vec::new(),
            swap: None,
        }
    }

    /// A new occupant `v` with a socket of its own, registered.
    fn add(&mut self, v: u32) -> (usize, SocketAddr) {
        let k = self.core.slots.insert(v);
        let mut s = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let a = s.local_addr().unwrap();
        self.core
            .register(&mut s, k, 0, Interest::READABLE)
            .unwrap();
        if self.socks.len() <= k {
            self.socks.resize_with(k + 1, || None);
        }
        self.socks[k] = Some(s);
        (k, a)
    }

    fn close(&mut self, k: usize) {
        if let Some(mut s) = self.socks[k].take() {
            self.core.deregister(&mut s);
        }
        self.core.close(k);
    }
}

impl Handler for Probe {
    type Slot = u32;
    type Msg = u32;

    fn core(&mut self) -> &mut Core<u32, u32> {
        &mut self.core
    }

    fn on_ready(&mut self, k: usize, _sub: usize, ev: Option<&Event>) {
        let v = *self.core.slots.get(k).unwrap();
        self.ready.push((k, v, ev.is_some()));
        if let Some((pair, new)) = self.swap.take() {
            let other = if pair[0] == k { pair[1] } else { pair[0] };
            self.close(other);
            let (k2, _) = self.add(new);
            assert_eq!(k2, other, "the freed slot is reused");
        }
    }

    fn on_timer(&mut self, k: usize, _now: Instant) {
        let v = *self.core.slots.get(k).unwrap();
        self.timed.push((k, v));
    }

    fn on_message(&mut self, m: u32) {
        self.mail.push(m);
    }
}

fn poke(to: SocketAddr) {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(b"x", to).unwrap();
}

#[test]
fn a_closed_slots_tokens_go_stale() {
    let mut s: Slots<&str> = Slots::default();
    let a = s.insert("a");
    let ta = s.token(a, 1);
    assert_eq!(s.resolve(ta), Some((a, 1)));
    let b = s.insert("b");
    assert_eq!(s.resolve(s.token(b, 3)), Some((b, 3)));
    assert_eq!(s.take(a), Some("a"));
    assert_eq!(
        s.resolve(ta),
        Some((a, 1)),
        "a slot out for its step is held"
    );
    s.put(a, "a");
    assert_eq!(s.release(a), Some("a"));
    assert_eq!(s.resolve(ta), None);
    let c = s.insert("c");
    assert_eq!(c, a, "the free list reuses the index");
    assert_eq!(
        s.resolve(ta),
        None,
        "an old token is not the new occupant's"
    );
    assert_eq!(s.resolve(s.token(c, 1)), Some((c, 1)));
    assert_eq!(s.resolve(WAKE), None);
    assert_eq!(s.resolve(Token(RESERVED)), None);
    assert_eq!((s.live(), s.keys()), (2, vec![a, b]));
    // Putting into a free slot does nothing.
    s.release(b);
    s.put(b, "x");
    assert_eq!(s.get(b), None);
}

/// Two ready sockets in one batch; whichever comes first closes the other
/// and a new connection takes its slot: the other's event, still in the
/// batch, must not reach the newcomer (whose socket has nothing to read).
#[test]
fn a_stale_event_in_a_batch_does_not_reach_the_next_occupant() {
    for _ in 0..20 {
        let mut p = Probe::new(None, Poll::new().unwrap());
        let (ka, aa) = p.add(1);
        let (kb, ab) = p.add(2);
        p.swap = Some(([ka, kb], 3));
        poke(aa);
        poke(ab);
        assert_eq!(turn(&mut p).unwrap(), Flow::Go);
        assert_eq!(p.ready.len(), 1, "{:?}", p.ready);
        assert!(p.ready.iter().all(|&(_, v, _)| v != 3), "{:?}", p.ready);
        assert_eq!(p.core.slots.live(), 2);
    }
}

#[test]
fn a_slot_holds_one_timer_entry_and_a_closed_slots_timer_never_fires() {
    let mut p = Probe::new(None, Poll::new().unwrap());
    let t0 = Instant::now();
    let (a, _) = p.add(1);
    let (b, _) = p.add(2);
    for i in 0..1000u64 {
        p.core.arm(a, t0 + Duration::from_millis(i % 7));
        p.core.arm(b, t0);
    }
    assert_eq!(p.core.timers.len(), 2);
    p.close(a);
    let (c, _) = p.add(3);
    assert_eq!(c, a);
    assert_eq!(p.core.timers.at(c), None, "the new occupant starts unarmed");
    turn(&mut p).unwrap();
    assert_eq!(p.timed, vec![(b, 2)]);
    assert!(p.core.timers.is_empty());
}

#[test]
fn again_runs_after_the_turn_once_and_not_for_a_new_occupant() {
    let mut p = Probe::new(None, Poll::new().unwrap());
    let (a, _) = p.add(1);
    let (b, _) = p.add(2);
    p.core.again(a, 0);
    p.core.again(a, 0);
    p.core.again(b, 0);
    assert_eq!(p.core.timeout(Instant::now()), Duration::ZERO);
    p.close(b);
    let (c, _) = p.add(3);
    assert_eq!(c, b);
    turn(&mut p).unwrap();
    assert_eq!(p.ready, vec![(a, 1, false)]);
    p.ready.clear();
    turn(&mut p).unwrap();
    assert!(p.ready.is_empty());
}

/// A flood of messages does not hold the sockets back: each turn takes a
/// budget of them, the ready socket has its turn in the first, and the
/// rest follow on the next turns without sleeping (the waker fired once).
#[test]
fn the_mailbox_is_taken_a_budget_a_turn() {
    let (boxes, mut ends) = Mailboxes::<u32>::open(1).unwrap();
    let end = ends.pop().unwrap();
    let mut p = Probe::new(Some(end.rx), end.poll);
    let (k, addr) = p.add(7);
    let n = 3 * MAIL_BUDGET as u32 + 5;
    for m in 0..n {
        assert!(boxes.send(0, m));
    }
    poke(addr);
    turn(&mut p).unwrap();
    assert_eq!(p.mail.len(), MAIL_BUDGET);
    assert_eq!(p.ready, vec![(k, 7, true)]);
    for t in 2..=4 {
        assert_eq!(p.core.timeout(Instant::now()), Duration::ZERO);
        turn(&mut p).unwrap();
        assert_eq!(p.mail.len(), (t * MAIL_BUDGET).min(n as usize));
    }
    assert_eq!(p.mail, (0..n).collect::<Vec<_>>());
    // Drained: the loop may sleep again.
    turn(&mut p).unwrap();
    assert!(p.core.timeout(Instant::now()) > Duration::ZERO);
}

#[test]
fn a_tick_is_called_and_can_stop_the_loop() {
    struct Ticker {
        core: Core<(), ()>,
        ticks: u32,
    }
    impl Handler for Ticker {
        type Slot = ();
        type Msg = ();
        fn core(&mut self) -> &mut Core<(), ()> {
            &mut self.core
        }
        fn on_ready(&mut self, _: usize, _: usize, _: Option<&Event>) {}
        fn on_timer(&mut self, _: usize, _: Instant) {}
        fn on_tick(&mut self, _: Instant) -> Flow {
            self.ticks += 1;
            if self.ticks == 3 {
                Flow::Stop
            } else {
                Flow::Go
            }
        }
    }
    let mut t = Ticker {
        core: Core::new(Poll::new().unwrap(), None, Duration::from_millis(1)),
        ticks: 0,
    };
    run(&mut t).unwrap();
    assert_eq!(t.ticks, 3);
}

/// A loop-wide wake-up shortens the next poll (past no timer and well
/// before the tick), once: the poll after it sleeps as before.
#[test]
fn wake_by_holds_for_the_next_poll_only() {
    let mut p = Probe::new(None, Poll::new().unwrap());
    p.core.tick = Duration::from_secs(10);
    turn(&mut p).unwrap();
    let now = Instant::now();
    p.core.wake_by(now + Duration::from_secs(5));
    p.core.wake_by(now + Duration::from_millis(30));
    assert!(p.core.timeout(now) <= Duration::from_millis(30));
    let t0 = Instant::now();
    turn(&mut p).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(p.core.timeout(Instant::now()) > Duration::from_secs(5));
}

#[test]
fn widening_a_sockets_interest_reports_its_readiness_at_once() {
    // The server watches a connection for room to write only once it has
    // something to write: the socket, long writable, must be reported as
    // soon as its interest is widened, or the bytes would wait forever.
    let mut p = Probe::new(None, Poll::new().unwrap());
    let (k, _) = p.add(1);
    turn(&mut p).unwrap();
    assert!(p.ready.is_empty(), "watched for reading only: nothing");
    let mut s = p.socks[k].take().unwrap();
    let both = Interest::READABLE | Interest::WRITABLE;
    p.core.reregister(&mut s, k, 0, both).unwrap();
    p.socks[k] = Some(s);
    turn(&mut p).unwrap();
    assert_eq!(p.ready, vec![(k, 1, true)]);
    // Edge-triggered: reported once, not again while nothing changes.
    turn(&mut p).unwrap();
    assert_eq!(p.ready.len(), 1);
}

#[test]
fn a_longer_tick_lengthens_the_sleep_and_a_shorter_one_takes_effect_at_once() {
    let mut core: Core<u32, u32> = Core::new(Poll::new().unwrap(), None, Duration::from_millis(10));
    let now = Instant::now();
    core.next_tick = now + Duration::from_millis(10);
    // An idle loop: the tick after this one comes a second later.
    core.set_tick(Duration::from_secs(1), now);
    assert_eq!(core.timeout(now), Duration::from_millis(10));
    core.next_tick = now + Duration::from_secs(1);
    assert_eq!(core.timeout(now), Duration::from_secs(1));
    // Work arrives half-way: the next sleep is the short tick, not what is
    // left of the long one.
    let later = now + Duration::from_millis(500);
    core.set_tick(Duration::from_millis(10), later);
    assert_eq!(core.timeout(later), Duration::from_millis(10));
    // A slot's timer still cuts the sleep short.
    let k = core.slots.insert(1);
    core.set_tick(Duration::from_secs(1), later);
    core.timers.push(later + Duration::from_millis(3), k);
    assert_eq!(core.timeout(later), Duration::from_millis(3));
    // The earliest of timer, tick and loop-wide wake-up bounds it, and
    // nothing sleeps past the tick however far they are.
    core.wake_by(later + Duration::from_millis(1));
    assert_eq!(core.timeout(later), Duration::from_millis(1));
    core.by = None;
    core.timers.cancel(k);
    core.timers.push(later + Duration::from_secs(9), k);
    core.next_tick = later + Duration::from_secs(9);
    assert_eq!(core.timeout(later), Duration::from_secs(1));
    assert_eq!(
        core.timeout(later + Duration::from_secs(10)),
        Duration::ZERO
    );
}
