//! Unit tests of a run's sessions over real control connections on
//! loopback: the test end plays the server (or a fake one that greets and
//! accepts), and checks what the client sends, what it reads back, which
//! servers it finds lost, how a stop reaches every server, and the shared
//! state's round robin, throttle and data deadline.

use super::*;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::OnceLock;

use crate::protocol::proto::{
    ErrorCode, Message, SessionSummary, TestSpec, read_message, write_message,
};
use crate::protocol::stats::IntervalRow;

/// A connected pair on loopback: (the client's end, the server's end).
fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ours = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (theirs, _) = l.accept().unwrap();
    // A bound on the server's reads, should the client's message never come.
    theirs
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    (ours, theirs)
}

/// A session greeted and accepted on the client's end `stream`: the
/// server's answers are written to `theirs` ahead, and what the client sent
/// for them (hello, request) is read off it.
fn accepted(stream: TcpStream, theirs: &mut TcpStream) -> ServerControl {
    let addr = stream.peer_addr().unwrap();
    send(
        theirs,
        &[
            Message::HelloAck(Message::hello()),
            Message::TestAccept {
                session: Uuid::nil(),
            },
        ],
    );
    let mut c = Control::greet("test", addr, stream, Duration::from_secs(10), None).unwrap();
    let cfg = TcpClientConfig::new(vec![]);
    let accept = c.request(TestSpec::Tcp(cfg.spec())).unwrap();
    assert_eq!(accept, Accept::Session(Uuid::nil()));
    assert!(matches!(read_message(theirs), Ok(Message::Hello(_))));
    assert!(matches!(
        read_message(theirs),
        Ok(Message::TestRequest { .. })
    ));
    ServerControl {
        addr,
        bind: None,
        id: Uuid::nil(),
        control: Mutex::new(c),
        data_key: None,
        compact_data_hello: false,
        unresponsive: AtomicBool::new(false),
        setting_up: AtomicU64::new(0),
        opened: AtomicU64::new(0),
    }
}

/// A session on a fresh pair: (it, the server's end).
fn control() -> (ServerControl, TcpStream) {
    let (ours, mut theirs) = pair();
    let s = accepted(ours, &mut theirs);
    (s, theirs)
}

fn shared(sessions: Vec<ServerControl>) -> Shared {
    let cfg = TcpClientConfig::new(vec![]);
    Shared {
        spec: cfg.spec(),
        cfg,
        sessions,
        counters: Counters::default(),
        stop: AtomicBool::new(false),
        abort: AtomicBool::new(false),
        halt: AtomicBool::new(false),
        next: AtomicU64::new(0),
        throttle: AtomicU64::new(2),
        start: Instant::now(),
        granted: OnceLock::new(),
        ports: None,
    }
}

/// Waits until the server's bytes or close have reached the client's end.
fn readable(s: &ServerControl) {
    let c = s.control.lock().unwrap();
    assert!(crate::net::wait_readable(
        &c.stream,
        Duration::from_secs(10)
    ));
}

fn send(s: &mut TcpStream, msgs: &[Message]) {
    for m in msgs {
        write_message(s, m).unwrap();
    }
}

fn error(message: &str) -> Message {
    Message::Error {
        code: ErrorCode::Refused,
        message: message.into(),
    }
}

fn rows(n: usize, truncated: bool) -> Message {
    let c = Counters::default().snapshot();
    Message::ServerIntervals {
        rows: vec![IntervalRow::between(&c, 0.0, &c, 1.0); n],
        truncated,
    }
}

#[test]
fn a_stop_goes_out_once_and_counts_as_answered_by_an_ack_or_a_reason() {
    let (s, mut theirs) = control();
    send(&mut theirs, &[Message::StopAck]);
    assert!(s.control.lock().unwrap().stop_test(STOP_GRACE));
    assert_eq!(read_message(&mut theirs).unwrap(), Message::Stop);
    // A test stopped once is not stopped again.
    assert!(!s.control.lock().unwrap().stop_test(STOP_GRACE));
    // A reason answers it too.
    let (s, mut theirs) = control();
    send(&mut theirs, &[error("no")]);
    assert!(s.control.lock().unwrap().stop_test(STOP_GRACE));
    // A stop that cannot go out is not answered.
    let (s, _theirs) = control();
    let mut c = s.control.lock().unwrap();
    c.stream.shutdown(Shutdown::Write).unwrap();
    assert!(!c.stop_test(STOP_GRACE));
}

#[test]
fn goodbye_gathers_the_servers_rows_and_returns_the_summary() {
    let (s, mut theirs) = control();
    // The server's replies are already on their way when goodbye goes.
    send(
        &mut theirs,
        &[
            rows(2, true),
            rows(1, false),
            Message::Summary(SessionSummary {
                connections: 5,
                ..Default::default()
            }),
        ],
    );
    let (summary, got) = s.goodbye();
    assert_eq!(summary.map(|s| s.connections), Some(5));
    assert_eq!((got.rows.len(), got.truncated), (3, true));
    assert_eq!(got.server, Some(s.addr));
    assert_eq!(read_message(&mut theirs).unwrap(), Message::Goodbye);
    // A reason instead of a summary: none.
    let (s, mut theirs) = control();
    send(&mut theirs, &[error("done")]);
    assert_eq!(s.goodbye().0, None);
    // A goodbye that cannot go out waits for no reply.
    let (s, mut theirs) = control();
    send(&mut theirs, &[Message::Summary(SessionSummary::default())]);
    s.control
        .lock()
        .unwrap()
        .stream
        .shutdown(Shutdown::Write)
        .unwrap();
    assert_eq!(s.goodbye().0, None);
}

#[test]
fn goodbye_gives_up_on_a_silent_server_after_the_grace() {
    // Takes STOP_GRACE (5 s): the server reads the request and says nothing.
    let (s, _theirs) = control();
    assert_eq!(s.goodbye().0, None);
}

#[test]
fn a_server_that_speaks_or_closes_first_is_lost_and_its_reason_read() {
    let (s, mut theirs) = control();
    assert!(!control_lost(&s));
    send(&mut theirs, &[error("server full")]);
    readable(&s);
    assert!(control_lost(&s));
    assert_eq!(control_error(&s).as_deref(), Some("server full"));
    // A close without a reason.
    let (s, theirs) = control();
    drop(theirs);
    readable(&s);
    assert!(control_lost(&s));
    assert_eq!(control_error(&s), None);
    // A message that is no reason.
    let (s, mut theirs) = control();
    send(&mut theirs, &[Message::StopAck]);
    readable(&s);
    assert_eq!(control_error(&s), None);
}

#[test]
fn lost_servers_are_noted_once_with_their_reasons_and_halt_the_run() {
    let (quiet, _keep) = control();
    let (gone, mut theirs) = control();
    send(&mut theirs, &[error("limit reached")]);
    drop(theirs);
    let sh = shared(vec![quiet, gone]);
    readable(&sh.sessions[1]);
    let gone_addr = sh.sessions[1].addr;
    let (mut lost, mut errors) = (Vec::new(), Vec::new());
    note_lost_servers(&sh, &mut lost, &mut errors, Duration::ZERO);
    assert_eq!(lost, [gone_addr]);
    assert_eq!(errors, [(gone_addr, "limit reached".to_string())]);
    assert!(sh.halt.load(SeqCst));
    note_lost_servers(&sh, &mut lost, &mut errors, Duration::ZERO);
    assert_eq!((lost.len(), errors.len()), (1, 1));
}

#[test]
fn with_a_wait_a_server_that_closes_during_it_is_noted() {
    // The server sends its reason and closes once the client is waiting
    // for it: seen as the session's lock held (and kept) by the wait.
    let (s, mut theirs) = control();
    let sh = shared(vec![s]);
    let addr = sh.sessions[0].addr;
    let done = AtomicBool::new(false);
    let (mut lost, mut errors) = (Vec::new(), Vec::new());
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut held_since = None;
            while !done.load(SeqCst) {
                match sh.sessions[0].control.try_lock() {
                    Ok(_) => held_since = None,
                    Err(_) => {
                        let t = *held_since.get_or_insert_with(Instant::now);
                        if t.elapsed() >= Duration::from_millis(20) {
                            send(&mut theirs, &[error("bye")]);
                            theirs.shutdown(Shutdown::Both).unwrap();
                            return;
                        }
                    }
                }
                std::thread::yield_now();
            }
        });
        note_lost_servers(&sh, &mut lost, &mut errors, Duration::from_secs(30));
        done.store(true, SeqCst);
    });
    assert_eq!(lost, [addr]);
    assert_eq!(errors, [(addr, "bye".to_string())]);
}

#[test]
fn a_stop_reaches_every_server_once_and_marks_those_that_do_not_answer() {
    let (answers, mut theirs) = control();
    send(&mut theirs, &[Message::StopAck]);
    let (silent, gone) = control();
    drop(gone);
    let sh = shared(vec![answers, silent]);
    sh.stop_all();
    assert!(sh.stop.load(SeqCst) && sh.abort.load(SeqCst));
    let unresponsive: Vec<bool> = sh
        .sessions
        .iter()
        .map(|s| s.unresponsive.load(SeqCst))
        .collect();
    assert_eq!(unresponsive, [false, true]);
    sh.stop_all();
    drop(sh);
    assert_eq!(read_message(&mut theirs).unwrap(), Message::Stop);
    assert!(read_message(&mut theirs).is_err(), "a second stop was sent");
}

#[test]
fn connections_go_round_robin_under_the_throttle_and_end_data_at_the_time_limit() {
    let sessions = (0..3).map(|_| control().0).collect();
    let mut sh = shared(sessions);
    let order: Vec<usize> = (0..7).map(|i| sh.session_for(i)).collect();
    assert_eq!(order, [0, 1, 2, 0, 1, 2, 0]);
    // --throttle 2: two connects at once, a third when one is done.
    assert!(sh.throttle_try_acquire() && sh.throttle_try_acquire());
    assert!(!sh.throttle_try_acquire());
    sh.throttle_release();
    assert!(sh.throttle_try_acquire());
    // A run started 3 s ago has run 3 s.
    sh.start = Instant::now() - Duration::from_secs(3);
    let secs = sh.elapsed();
    assert!((3.0..3600.0).contains(&secs), "{secs}");
    // -t: time-bounded connections end their data at the limit.
    sh.cfg.time_limit = Some(Duration::from_secs(10));
    assert_eq!(sh.data_deadline(), None, "not time-bounded");
    sh.spec.time_bound_ms = 10_000;
    assert_eq!(sh.data_deadline(), Some(sh.start + Duration::from_secs(10)));
    sh.cfg.time_limit = None;
    assert_eq!(sh.data_deadline(), None, "no time limit");
}

#[test]
fn a_stalled_server_holds_only_its_share_of_the_throttle_and_each_gets_its_round_robin_connections()
{
    let sessions = (0..2).map(|_| control().0).collect();
    let mut sh = shared(sessions);
    (sh.cfg.throttle, sh.cfg.connections, sh.cfg.iterations) = (40, 51, Some(1));
    // Server 0 stalls: its share (40 / 2) of setups never ends.
    for k in 0..20 {
        assert_eq!(sh.claim_session(0), Ok(0));
        assert_eq!(sh.claim_index(0), Some(2 * k));
    }
    // Server 1 gets every connection of its round robin meanwhile (each
    // set up at once), in the run's order.
    let mut got = Vec::new();
    while let Ok(s) = sh.claim_session(0) {
        assert_eq!(s, 1);
        got.extend(sh.claim_index(s));
        sh.setup_done(s);
    }
    assert_eq!(got, (0..25).map(|k| 2 * k + 1).collect::<Vec<_>>());
    assert_eq!(sh.claim_session(1), Err(NoServer::Full));
    // Once server 0 answers, the rest of its 26 (of 51) open, then none.
    sh.setup_done(0);
    let mut got = Vec::new();
    while let Ok(s) = sh.claim_session(1) {
        got.extend(sh.claim_index(s));
        sh.setup_done(s);
    }
    assert_eq!(got, [40, 42, 44, 46, 48, 50]);
    assert_eq!(sh.claim_index(0), None);
    for _ in 0..19 {
        sh.setup_done(0);
    }
    assert_eq!(sh.claim_session(0), Err(NoServer::Done));
    // Many servers: each holds at least 16 places, however small the share.
    sh.cfg.throttle = 10;
    for _ in 0..16 {
        assert_eq!(sh.claim_session(0), Err(NoServer::Done));
    }
    sh.cfg.iterations = Some(2);
    for _ in 0..16 {
        assert_eq!(sh.claim_session(0), Ok(0));
    }
    assert_eq!(sh.claim_session(0), Ok(1));
}

/// A server that greets and accepts `n` sessions in turn and keeps their
/// control connections; returns each one's peer address.
fn fake_server(l: TcpListener, n: usize) -> std::thread::JoinHandle<Vec<(IpAddr, TcpStream)>> {
    std::thread::spawn(move || {
        (0..n)
            .map(|i| {
                let (mut s, from) = l.accept().unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                assert!(matches!(read_message(&mut s), Ok(Message::Hello(_))));
                send(&mut s, &[Message::HelloAck(Message::hello())]);
                assert!(matches!(
                    read_message(&mut s),
                    Ok(Message::TestRequest {
                        test: TestSpec::Tcp(_)
                    })
                ));
                let session = Uuid::from_u128(i as u128 + 1);
                send(&mut s, &[Message::TestAccept { session }]);
                (from.ip(), s)
            })
            .collect()
    })
}

#[test]
fn each_source_address_of_the_targets_family_opens_a_session_of_its_own() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cfg = TcpClientConfig::new(vec![]);
    cfg.port = l.local_addr().unwrap().port();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    // An IPv6 address is not the IPv4 target's; the first IPv4 one opens
    // the first session, the other the second.
    cfg.bind = vec![ip("::1"), ip("127.0.0.3"), ip("127.0.0.2")];
    let server = fake_server(l, 2);
    let sessions = open_sessions("127.0.0.1", &cfg).unwrap();
    let got: Vec<(Option<IpAddr>, Uuid)> = sessions.iter().map(|s| (s.bind, s.id)).collect();
    let want = [ip("127.0.0.3"), ip("127.0.0.2")];
    assert_eq!(
        got,
        [
            (Some(want[0]), Uuid::from_u128(1)),
            (Some(want[1]), Uuid::from_u128(2))
        ]
    );
    // Joined only once both sessions are known to be open.
    let from = server.join().unwrap();
    assert_eq!(from.iter().map(|f| f.0).collect::<Vec<_>>(), want);
    // No address of the target's family: an error, before any connect.
    cfg.bind = vec![ip("::1")];
    let to = "127.0.0.1:1".parse().unwrap();
    assert!(matches!(
        first_bind(&cfg, to),
        Err(ConfigError::NoBindForFamily(_))
    ));
    cfg.bind.clear();
    assert_eq!(first_bind(&cfg, to), Ok(None));
}
