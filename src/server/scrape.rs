//! The `serve --metrics` endpoint: one thread of its own with a bounded
//! number of scrape connections, so that no scrape load reaches the event
//! loops or the tests. A scrape reads atomics ([`super::metrics`]) and a
//! few lines of `/proc`, never a lock the data path takes.
//!
//! Hostile scrapers are bounded on every side: at most [`MAX_SCRAPES`]
//! connections at once (further ones are accepted and closed at once, so
//! the backlog never fills), a request of at most [`MAX_REQUEST`] bytes,
//! and [`SCRAPE_TIMEOUT`] for a connection's whole life, whether it never
//! sends, trickles, or never reads its answer.

use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::State;
use super::metrics::{Gauges, Request, parse_request};

/// Most scrape connections served at once.
pub const MAX_SCRAPES: usize = 8;
/// Largest request (request line and headers) read.
pub const MAX_REQUEST: usize = 8 << 10;
/// Longest a scrape connection lives, from its accept to its close.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the thread looks whether the server is stopping.
const TICK: Duration = Duration::from_millis(100);
const LISTENER: Token = Token(usize::MAX);

/// One scrape connection.
struct Scrape {
    stream: TcpStream,
    until: Instant,
    request: Vec<u8>,
    /// The answer, once the request is in, and how much of it is written.
    answer: Option<(Vec<u8>, usize)>,
}

/// What an endpoint serves: the metrics text, and when to stop.
pub(crate) trait Source: Send + Sync + 'static {
    /// The endpoint's thread ends once this is true.
    fn stopping(&self) -> bool;
    /// The metrics as OpenMetrics 1.0 when `openmetrics`, else Prometheus
    /// text format 0.0.4.
    fn render(&self, openmetrics: bool) -> String;
}

impl Source for State {
    fn stopping(&self) -> bool {
        self.stop.load(SeqCst)
    }

    fn render(&self, openmetrics: bool) -> String {
        let g = Gauges {
            tests: self.tests.load(SeqCst),
            connections: self.open.load(SeqCst),
            resident_bytes: crate::net::resident_bytes(),
            threads: threads(),
            limits: self.cfg.limits,
        };
        self.metrics.render(&g, openmetrics)
    }
}

/// Starts the metrics thread on `listener`.
pub(crate) fn start<S: Source>(st: Arc<S>, listener: TcpListener) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = mio::net::TcpListener::from_std(listener);
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            if let Err(e) = serve(st.as_ref(), poll, &listener) {
                eprintln!("netrig serve: metrics endpoint failed: {e}");
            }
        })?;
    Ok(())
}

fn serve(st: &impl Source, mut poll: Poll, listener: &mio::net::TcpListener) -> io::Result<()> {
    let mut events = Events::with_capacity(64);
    let mut slots: Vec<Option<Scrape>> = (0..MAX_SCRAPES).map(|_| None).collect();
    while !st.stopping() {
        let now = Instant::now();
        let wait = (slots.iter().flatten())
            .map(|s| s.until.saturating_duration_since(now))
            .fold(TICK, Duration::min);
        match poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in &events {
            match ev.token() {
                LISTENER => accept_all(&poll, listener, &mut slots),
                Token(k) => {
                    if let Some(slot) = slots.get_mut(k) {
                        advance(st, &poll, slot);
                    }
                }
            }
        }
        let now = Instant::now();
        for slot in &mut slots {
            if slot.as_ref().is_some_and(|s| now >= s.until) {
                close(&poll, slot);
            }
        }
    }
    Ok(())
}

/// Accepts every waiting connection: into a free slot, or closed at once
/// when all are taken.
fn accept_all(poll: &Poll, listener: &mio::net::TcpListener, slots: &mut [Option<Scrape>]) {
    loop {
        let (mut stream, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Out of descriptors or an aborted connection: the next
            // readiness report tries again.
            Err(_) => return,
        };
        let Some(k) = slots.iter().position(Option::is_none) else {
            // Full: dropped, which closes it.
            continue;
        };
        let both = Interest::READABLE | Interest::WRITABLE;
        if poll
            .registry()
            .register(&mut stream, Token(k), both)
            .is_err()
        {
            continue;
        }
        slots[k] = Some(Scrape {
            stream,
            until: Instant::now() + SCRAPE_TIMEOUT,
            request: Vec::new(),
            answer: None,
        });
    }
}

/// Reads the request, answers it, and closes the connection once the
/// answer is out (or on any failure).
fn advance(st: &impl Source, poll: &Poll, slot: &mut Option<Scrape>) {
    let Some(s) = slot.as_mut() else {
        return;
    };
    if s.answer.is_none() {
        match read_request(s) {
            Ok(Some(req)) => s.answer = Some((answer(st, &req), 0)),
            Ok(None) => return,
            Err(()) => return close(poll, slot),
        }
    }
    if let Some((bytes, done)) = &mut s.answer {
        while *done < bytes.len() {
            match s.stream.write(&bytes[*done..]) {
                Ok(0) => return close(poll, slot),
                Ok(n) => *done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return close(poll, slot),
            }
        }
        close(poll, slot);
    }
}

/// Reads what has come: the request's head once it is complete, None while
/// it is not, and an error when the client closed or sent too much.
fn read_request(s: &mut Scrape) -> Result<Option<Vec<u8>>, ()> {
    let mut buf = [0u8; 2048];
    loop {
        if let Some(end) = head_end(&s.request) {
            s.request.truncate(end);
            return Ok(Some(std::mem::take(&mut s.request)));
        }
        if s.request.len() >= MAX_REQUEST {
            return Err(());
        }
        let room = buf.len().min(MAX_REQUEST - s.request.len());
        match s.stream.read(&mut buf[..room]) {
            Ok(0) => return Err(()),
            Ok(n) => s.request.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
}

/// Where the request's head ends (after its blank line).
fn head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn close(poll: &Poll, slot: &mut Option<Scrape>) {
    if let Some(mut s) = slot.take() {
        let _ = poll.registry().deregister(&mut s.stream);
    }
}

/// The whole HTTP answer to a request head.
fn answer(st: &impl Source, head: &[u8]) -> Vec<u8> {
    let (status, ctype, body, bodiless) = match parse_request(head) {
        Request::Metrics { openmetrics, head } => {
            let body = st.render(openmetrics);
            let ctype = match openmetrics {
                true => "application/openmetrics-text; version=1.0.0; charset=utf-8",
                false => "text/plain; version=0.0.4; charset=utf-8",
            };
            ("200 OK", ctype, body, head)
        }
        Request::NotFound => (
            "404 Not Found",
            TEXT,
            "netrig serves its metrics at /metrics\n".to_string(),
            false,
        ),
        Request::BadMethod => (
            "405 Method Not Allowed",
            TEXT,
            "GET /metrics\n".into(),
            false,
        ),
        Request::Bad => (
            "400 Bad Request",
            TEXT,
            "not an HTTP request\n".into(),
            false,
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !bodiless {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

const TEXT: &str = "text/plain; charset=utf-8";

/// The process's threads, from `/proc/self/status` (0 if unreadable).
pub(crate) fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}
