//! The end of a client's UDP stream on a simulated clock: the server
//! answering, vanishing or staying silent at every step, the user stopping
//! or insisting, and the results measured so far kept through all of it.

use super::*;
use crate::protocol::proto::SessionSummary;
use proptest::prelude::*;

const GRACE: Duration = Duration::from_secs(5);
const DRAIN: Duration = Duration::from_millis(400);
const LIMIT: Duration = Duration::from_secs(13);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn machine(reverse: bool) -> ClientMachine {
    ClientMachine::new(
        reverse,
        Bounds {
            limit: LIMIT,
            drain: DRAIN,
            grace: GRACE,
        },
    )
}

fn on(m: &mut ClientMachine, at: Duration, input: Input) -> Vec<Action> {
    let mut out = Vec::new();
    m.on(at, input, &mut out);
    out
}

fn tick(m: &mut ClientMachine, at: Duration) -> Vec<Action> {
    let mut out = Vec::new();
    m.tick(at, false, false, &mut out);
    out
}

fn interrupt(m: &mut ClientMachine, at: Duration) -> Vec<Action> {
    let mut out = Vec::new();
    m.tick(at, true, false, &mut out);
    out
}

fn sent(actions: &[Action]) -> Vec<&Message> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(m) => Some(m),
            _ => None,
        })
        .collect()
}

fn stops(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::StopWorker))
        .count()
}

fn account(packets: u64) -> SenderReport {
    SenderReport {
        packets,
        bytes: packets * 100,
        ..SenderReport::default()
    }
}

/// A receiver that got the datagrams numbered `seqs`.
fn received(seqs: &[u64]) -> Box<ReceiverStats> {
    let mut s = ReceiverStats::new(1_000, 10);
    for &q in seqs {
        s.on_datagram(q, 100, 5_000, 5_000, false);
    }
    Box::new(s)
}

fn summary(user_us: u64) -> Message {
    Message::Summary(SessionSummary {
        cpu: Some(CpuUsage {
            user_us,
            ..CpuUsage::default()
        }),
        ..SessionSummary::default()
    })
}

#[test]
fn a_sending_client_hands_its_account_over_and_says_goodbye_after_the_servers_totals() {
    let mut m = machine(false);
    assert!(tick(&mut m, ms(100)).is_empty());
    let a = on(&mut m, ms(3_000), Input::SenderDone(account(10)));
    assert!(matches!(sent(&a)[..], [Message::UdpDone(s)] if s.packets == 10));
    // No goodbye before the server's totals.
    assert!(sent(&tick(&mut m, ms(3_050))).is_empty());
    let totals = UdpTotals {
        sent: Some(10),
        unique: 9,
        lost: 1,
        ..UdpTotals::default()
    };
    assert!(
        on(
            &mut m,
            ms(3_500),
            Input::Message(Message::UdpResult(totals.clone()))
        )
        .is_empty()
    );
    let a = tick(&mut m, ms(3_500));
    assert!(matches!(sent(&a)[..], [Message::Goodbye]));
    assert!(
        sent(&tick(&mut m, ms(3_550))).is_empty(),
        "goodbye is said once"
    );
    assert!(!m.is_over());
    on(&mut m, ms(3_600), Input::Message(summary(125)));
    assert!(m.is_over());
    let end = m.finish();
    assert_eq!(end.totals, Some(totals));
    assert_eq!(end.sender.map(|s| s.packets), Some(10));
    assert_eq!(end.server_cpu.map(|c| c.user_us), Some(125));
    assert_eq!(end.duration_secs, 3.0);
    assert!(!end.server_lost && !end.interrupted);
}

#[test]
fn a_receiving_client_drains_after_the_servers_account_and_counts_loss_against_it() {
    let mut m = machine(true);
    let a = on(
        &mut m,
        ms(2_000),
        Input::Message(Message::UdpDone(account(10))),
    );
    assert!(matches!(a[..], [Action::DrainUntil(t)] if t == ms(2_000) + DRAIN));
    assert!(sent(&tick(&mut m, ms(2_100))).is_empty());
    on(
        &mut m,
        ms(2_400),
        Input::ReceiverDone(received(&[0, 1, 2, 4, 5, 6, 9])),
    );
    let a = tick(&mut m, ms(2_400));
    assert!(matches!(sent(&a)[..], [Message::Goodbye]));
    on(&mut m, ms(2_450), Input::Message(summary(1)));
    assert!(m.is_over());
    let end = m.finish();
    let t = end.totals.expect("the receiver's totals");
    assert_eq!((t.sent, t.unique, t.lost), (Some(10), 7, 3));
    assert_eq!(end.duration_secs, 2.4);
}

#[test]
fn rows_from_either_end_are_shown_and_kept_in_arrival_order() {
    let mut m = machine(true);
    let iv = |t: f64| UdpInterval {
        time_slice: t,
        ..UdpInterval::default()
    };
    let burst = |n: u64| BurstReport {
        index: n,
        ..BurstReport::default()
    };
    let a = on(&mut m, ms(1_000), Input::Interval(iv(1.0)));
    assert!(matches!(&a[..], [Action::Show(Shown::Interval(i))] if i.time_slice == 1.0));
    let a = on(
        &mut m,
        ms(2_000),
        Input::Message(Message::UdpInterval(iv(2.0))),
    );
    assert!(matches!(&a[..], [Action::Show(Shown::Interval(i))] if i.time_slice == 2.0));
    let a = on(&mut m, ms(2_100), Input::Burst(burst(1)));
    assert!(matches!(&a[..], [Action::Show(Shown::Burst(b))] if b.index == 1));
    let a = on(
        &mut m,
        ms(2_200),
        Input::Message(Message::UdpBurst(burst(2))),
    );
    assert!(matches!(&a[..], [Action::Show(Shown::Burst(b))] if b.index == 2));
    let end = m.finish();
    let times: Vec<f64> = end.intervals.iter().map(|i| i.time_slice).collect();
    assert_eq!(times, [1.0, 2.0]);
    let bursts: Vec<u64> = end.bursts.iter().map(|b| b.index).collect();
    assert_eq!(bursts, [1, 2]);
}

#[test]
fn the_servers_histogram_is_kept_to_what_a_histogram_holds_and_joins_its_totals() {
    let mut m = machine(false);
    let chunk = |n: usize| Message::UdpHistogram {
        bins: (0..n).map(|i| (i as f64, i as f64 + 1.0, 1)).collect(),
    };
    on(
        &mut m,
        ms(1),
        Input::Message(chunk(super::super::hist::MAX_BUCKETS - 2)),
    );
    on(&mut m, ms(2), Input::Message(chunk(5)));
    on(
        &mut m,
        ms(3),
        Input::Message(Message::UdpResult(UdpTotals::default())),
    );
    let end = m.finish();
    let t = end.totals.expect("totals");
    assert_eq!(t.histogram.len(), super::super::hist::MAX_BUCKETS);
    assert_eq!(t.histogram.last(), Some(&(1.0, 2.0, 1)));

    // Totals that carry their own histogram keep it.
    let mut m = machine(false);
    on(&mut m, ms(1), Input::Message(chunk(3)));
    let own = UdpTotals {
        histogram: vec![(7.0, 8.0, 9)],
        ..UdpTotals::default()
    };
    on(&mut m, ms(2), Input::Message(Message::UdpResult(own)));
    assert_eq!(
        m.finish().totals.expect("totals").histogram,
        [(7.0, 8.0, 9)]
    );
}

#[test]
fn ctrl_c_stops_a_sending_worker_once_and_asks_a_sending_server_to_stop_once() {
    let mut m = machine(false);
    let a = interrupt(&mut m, ms(1_000));
    assert_eq!((stops(&a), sent(&a).len()), (1, 0));
    let a = interrupt(&mut m, ms(1_050));
    assert!(
        a.is_empty(),
        "a second look at the flag does nothing: {a:?}"
    );

    let mut m = machine(true);
    let a = interrupt(&mut m, ms(1_000));
    assert_eq!(
        stops(&a),
        0,
        "the receiver keeps reading what is on the way"
    );
    assert!(matches!(sent(&a)[..], [Message::Stop]));
    assert!(interrupt(&mut m, ms(1_050)).is_empty());
    let end = m.finish();
    assert!(end.interrupted && !end.server_lost);
}

#[test]
fn a_server_silent_after_ctrl_c_gets_the_grace_then_the_measured_results_stand() {
    let mut m = machine(false);
    interrupt(&mut m, ms(1_000));
    on(&mut m, ms(1_100), Input::SenderDone(account(50)));
    let a = tick(&mut m, ms(1_000) + GRACE);
    assert!(
        a.is_empty() && !m.is_over(),
        "the grace is not up at its end"
    );
    let a = tick(&mut m, ms(1_000) + GRACE + ms(1));
    assert!(a.is_empty(), "the worker was already stopped: {a:?}");
    assert!(
        m.is_over(),
        "the worker handed over: nothing left to wait for"
    );
    let end = m.finish();
    assert!(end.server_lost && end.interrupted);
    assert_eq!(end.sender.map(|s| s.packets), Some(50));
}

#[test]
fn a_receiver_that_never_hands_over_is_stopped_after_one_grace_and_left_after_two() {
    let mut m = machine(true);
    interrupt(&mut m, ms(1_000));
    let a = tick(&mut m, ms(1_000) + GRACE + ms(1));
    assert_eq!(stops(&a), 1);
    assert!(!m.is_over());
    assert!(tick(&mut m, ms(1_000) + 2 * GRACE).is_empty());
    assert!(!m.is_over());
    tick(&mut m, ms(1_000) + 2 * GRACE + ms(1));
    assert!(m.is_over());
    assert!(m.finish().server_lost);
}

#[test]
fn totals_in_hand_when_the_grace_ends_mean_the_server_was_not_lost() {
    let mut m = machine(true);
    interrupt(&mut m, ms(1_000));
    on(&mut m, ms(1_200), Input::ReceiverDone(received(&[0, 1])));
    tick(&mut m, ms(1_000) + GRACE + ms(1));
    assert!(m.is_over());
    let end = m.finish();
    assert!(!end.server_lost);
    assert_eq!(end.totals.map(|t| t.unique), Some(2));
}

#[test]
fn a_stream_past_its_limit_is_stopped_and_the_server_taken_for_lost_without_a_goodbye() {
    let mut m = machine(false);
    assert!(tick(&mut m, LIMIT).is_empty());
    let a = tick(&mut m, LIMIT + Duration::from_nanos(1));
    assert_eq!(stops(&a), 1);
    let mut all = a;
    for t in [ms(1), ms(10), GRACE, GRACE + ms(1)] {
        all.extend(tick(&mut m, LIMIT + t));
    }
    assert!(!m.is_over(), "the sender has not handed over yet");
    all.extend(on(
        &mut m,
        LIMIT + GRACE + ms(2),
        Input::SenderDone(account(3)),
    ));
    all.extend(tick(&mut m, LIMIT + GRACE + ms(3)));
    assert!(!sent(&all).contains(&&Message::Goodbye), "{all:?}");
    assert!(m.is_over());
    assert!(m.finish().server_lost);
}

#[test]
fn hurrying_ends_a_stopping_run_at_once_but_not_a_running_one() {
    let mut m = machine(false);
    let mut out = Vec::new();
    m.tick(ms(500), false, true, &mut out);
    assert!(!m.is_over(), "nothing is stopping yet");
    m.tick(ms(600), true, true, &mut out);
    assert!(m.is_over());
    assert!(m.finish().interrupted);
}

#[test]
fn a_control_connection_lost_before_goodbye_stops_the_worker_and_after_it_ends_the_run() {
    let mut m = machine(true);
    let a = on(&mut m, ms(700), Input::ControlLost);
    assert_eq!(stops(&a), 1);
    assert!(!m.is_over(), "the worker still has to hand over");
    assert!(
        sent(&tick(&mut m, ms(750))).is_empty(),
        "no goodbye to a lost server"
    );
    on(&mut m, ms(800), Input::ReceiverDone(received(&[0])));
    tick(&mut m, ms(810));
    assert!(
        m.is_over(),
        "the worker handed over: nothing more will come"
    );
    let end = m.finish();
    assert!(end.server_lost);
    assert_eq!(end.totals.map(|t| t.unique), Some(1));

    // A worker that never hands over gets the graces a stop gets.
    let mut m = machine(true);
    on(&mut m, ms(700), Input::ControlLost);
    tick(&mut m, ms(700) + 2 * GRACE);
    assert!(!m.is_over());
    tick(&mut m, ms(701) + 2 * GRACE);
    assert!(m.is_over());

    let mut m = machine(false);
    on(
        &mut m,
        ms(100),
        Input::Message(Message::UdpResult(UdpTotals::default())),
    );
    assert!(matches!(
        sent(&tick(&mut m, ms(100)))[..],
        [Message::Goodbye]
    ));
    // The goodbye's write failed, or the server hung up after it.
    assert!(on(&mut m, ms(110), Input::ControlLost).is_empty());
    assert!(m.is_over());
    assert!(!m.finish().server_lost);
}

#[test]
fn a_message_out_of_turn_is_taken_as_a_lost_server() {
    let mut m = machine(false);
    let a = on(&mut m, ms(100), Input::Message(Message::UdpGo));
    assert_eq!(stops(&a), 1);
    // The control connection is still open but says nothing more: the run
    // ends when the sender hands over, not when the server hangs up.
    on(&mut m, ms(150), Input::SenderDone(account(4)));
    tick(&mut m, ms(160));
    assert!(m.is_over());
    assert!(m.finish().server_lost);
}

#[test]
fn an_ended_machine_ignores_what_comes_after() {
    let mut m = machine(false);
    on(&mut m, ms(100), Input::Message(summary(0)));
    assert!(m.is_over());
    assert!(on(&mut m, ms(200), Input::SenderDone(account(1))).is_empty());
    assert!(interrupt(&mut m, ms(300)).is_empty());
    assert!(m.finish().sender.is_none());
}

/// One step of a simulated run.
#[derive(Debug, Clone)]
enum Step {
    Tick(u64),
    Interrupt(u64),
    Hurry(u64),
    Lost(u64),
    WorkerDone(u64),
    Result(u64),
    ServerDone(u64),
    Summary(u64),
}

fn step() -> impl Strategy<Value = Step> {
    let gap = 0u64..4_000;
    prop_oneof![
        4 => gap.clone().prop_map(Step::Tick),
        1 => gap.clone().prop_map(Step::Interrupt),
        1 => gap.clone().prop_map(Step::Hurry),
        1 => gap.clone().prop_map(Step::Lost),
        1 => gap.clone().prop_map(Step::WorkerDone),
        1 => gap.clone().prop_map(Step::Result),
        1 => gap.clone().prop_map(Step::ServerDone),
        1 => gap.prop_map(Step::Summary),
    ]
}

proptest! {
    /// Whatever the server and the user do, each message and the worker's
    /// stop happen at most once, nothing is asked of a run that is over,
    /// and a run fed nothing but time ends within the limit and two graces.
    #[test]
    fn every_run_ends_in_bounded_time_with_each_step_taken_once(
        reverse in any::<bool>(),
        steps in proptest::collection::vec(step(), 0..40),
    ) {
        let mut m = machine(reverse);
        let mut now = Duration::ZERO;
        let mut all = Vec::new();
        let mut interrupted = false;
        for s in steps {
            let was_over = m.is_over();
            let mut out = Vec::new();
            match s {
                Step::Tick(d) => { now += ms(d); m.tick(now, interrupted, false, &mut out) }
                Step::Interrupt(d) => { now += ms(d); interrupted = true; m.tick(now, true, false, &mut out) }
                Step::Hurry(d) => { now += ms(d); m.tick(now, interrupted, true, &mut out) }
                Step::Lost(d) => { now += ms(d); m.on(now, Input::ControlLost, &mut out) }
                Step::WorkerDone(d) => {
                    now += ms(d);
                    let input = match reverse {
                        true => Input::ReceiverDone(received(&[0, 1, 2])),
                        false => Input::SenderDone(account(3)),
                    };
                    m.on(now, input, &mut out)
                }
                Step::Result(d) => { now += ms(d); m.on(now, Input::Message(Message::UdpResult(UdpTotals::default())), &mut out) }
                Step::ServerDone(d) => { now += ms(d); m.on(now, Input::Message(Message::UdpDone(account(3))), &mut out) }
                Step::Summary(d) => { now += ms(d); m.on(now, Input::Message(summary(0)), &mut out) }
            }
            if was_over {
                prop_assert!(out.is_empty(), "asked {:?} of a run that was over", out);
                prop_assert!(m.is_over());
            }
            all.extend(out);
        }
        let count = |want: &Message| sent(&all).iter().filter(|m| **m == want).count();
        prop_assert!(count(&Message::Goodbye) <= 1);
        prop_assert!(count(&Message::Stop) <= 1);
        prop_assert!(stops(&all) <= 1);
        // Only time from here on, a tick every 50 ms: over within the
        // limit, the tick that notices it and two graces.
        let end = now.max(LIMIT) + ms(50) + 2 * GRACE + ms(2);
        let mut t = now;
        while t < end && !m.is_over() {
            t += ms(50);
            m.tick(t, interrupted, false, &mut Vec::new());
        }
        prop_assert!(m.is_over(), "still running at {:?}", t);
    }
}

#[test]
fn a_worker_gone_without_a_word_ends_the_run_with_what_came_before() {
    let mut m = machine(false);
    on(&mut m, ms(500), Input::Interval(UdpInterval::default()));
    assert!(!m.is_over());
    m.worker_gone();
    assert!(m.is_over());
    assert!(on(&mut m, ms(600), Input::Message(summary(1))).is_empty());
    let end = m.finish();
    assert_eq!(end.intervals.len(), 1);
    assert!(
        end.server_cpu.is_none(),
        "nothing is taken in after the end"
    );
}
