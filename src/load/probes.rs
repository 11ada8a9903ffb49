//! The probes of `netrig load` that are not the load itself: a new TCP
//! connection's handshake and a request/response on it (the draft's
//! "foreign" probes), on their own schedule, and the shared list every
//! probe's sample goes to.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::load::model::{ProbeKind, Sample};
use crate::protocol::proto::Message;

/// Foreign probes in flight at most; a schedule tick with this many still
/// waiting sends none (counted lost).
const MAX_FOREIGN: usize = 32;

/// Where every probe's sample goes.
pub(super) type Samples = Arc<Mutex<Vec<Sample>>>;

pub(super) fn push(samples: &Samples, s: Sample) {
    samples.lock().unwrap_or_else(|e| e.into_inner()).push(s);
}

/// A new connection's handshake, then netrig's hello and its answer: a
/// request/response the server makes on the fresh connection, without
/// opening a test (so probes never meet its per-client test limit).
fn foreign_probe(
    addr: SocketAddr,
    dev: Option<&str>,
    timeout: Duration,
) -> (Option<f64>, Option<f64>) {
    let t = Instant::now();
    let via = crate::net::Via {
        dev,
        ..Default::default()
    };
    let Ok(mut s) = crate::net::connect_stream(addr, None, timeout, via) else {
        return (None, None);
    };
    let connect = t.elapsed().as_secs_f64() * 1e3;
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(timeout));
    let hello = crate::protocol::proto::encode(&Message::Hello(Message::hello()));
    let t = Instant::now();
    let answered = s.write_all(&hello).is_ok()
        && matches!(
            crate::protocol::proto::read_message(&mut s),
            Ok(Message::HelloAck(_))
        );
    (
        Some(connect),
        answered.then(|| t.elapsed().as_secs_f64() * 1e3),
    )
}

/// Sends a foreign probe every `every` until `stop`, half a period after the
/// UDP probes so the kinds interleave.
pub(super) fn foreign_probes(
    addr: SocketAddr,
    dev: Option<String>,
    every: Duration,
    t0: Instant,
    samples: Samples,
    stop: Arc<AtomicBool>,
) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    let mut next = t0 + every / 2;
    let timeout = Duration::from_secs(2);
    while !stop.load(SeqCst) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        next += every;
        let t = now.duration_since(t0).as_secs_f64();
        if in_flight.load(SeqCst) >= MAX_FOREIGN {
            push(&samples, lost(t, ProbeKind::TcpConnect));
            continue;
        }
        in_flight.fetch_add(1, SeqCst);
        let (samples, in_flight) = (Arc::clone(&samples), Arc::clone(&in_flight));
        let dev = dev.clone();
        handles.push(std::thread::spawn(move || {
            let (connect, request) = foreign_probe(addr, dev.as_deref(), timeout);
            push(&samples, ms(t, ProbeKind::TcpConnect, connect));
            if connect.is_some() {
                push(&samples, ms(t, ProbeKind::TcpRequest, request));
            }
            in_flight.fetch_sub(1, SeqCst);
        }));
        handles.retain(|h| !h.is_finished());
    }
    for h in handles {
        let _ = h.join();
    }
}

pub(super) fn ms(t: f64, kind: ProbeKind, ms: Option<f64>) -> Sample {
    Sample {
        t,
        kind,
        ms,
        up_ms: None,
        down_ms: None,
    }
}

fn lost(t: f64, kind: ProbeKind) -> Sample {
    ms(t, kind, None)
}
