//! Runs the client's setup of an accepted UDP session
//! ([`ClientSetup`]: clock exchanges, handshake datagrams, ready and go)
//! over the control connection and the data socket, on the caller's
//! thread: one poll(2) waits for either until the machine's next deadline.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::drive::recv_now;
use crate::control::{ClientError, Control};
use crate::net::realtime_ns;
use crate::protocol::udp::client_setup::{ClientSetup, Clock, Out, SetupError};
use crate::protocol::udp::clock::Offset;

/// Datagrams read from the data socket per wake-up during the setup: a
/// peer flooding it cannot keep the control connection from being read.
const DATAGRAMS_A_TURN: usize = 16;

/// A session set up and started.
pub(crate) struct Started {
    /// The offset estimate, or the one given; none with trusted clocks.
    pub offset: Option<Offset>,
    /// Taken just before `udp_ready` went, so nothing the server sends
    /// can arrive before it.
    pub epoch: Instant,
    /// The wall clock at `epoch`, Unix seconds.
    pub start_unix: f64,
}

/// Sets up the session accepted with `token` and starts it: the clock as
/// `clock` says, the path proven over `sock`, then (at `start_at`, Unix
/// seconds, if given) ready and go.
pub(crate) fn set_up(
    c: &mut Control,
    sock: &UdpSocket,
    token: u64,
    clock: Clock,
    start_at: Option<f64>,
    interrupt: &AtomicBool,
) -> Result<Started, ClientError> {
    // As long as a control reply may take (the connection's read timeout).
    let within = c
        .stream
        .read_timeout()
        .ok()
        .flatten()
        .unwrap_or(Duration::from_secs(10));
    let mut m = ClientSetup::new(token, clock, within, Instant::now(), realtime_ns());
    run_until(c, sock, &mut m, |m| m.proven().is_some())?;
    if let Some(at) = start_at {
        crate::net::wait_for_epoch(at, interrupt);
    }
    let offset = m.offset();
    let epoch = Instant::now();
    let start_unix = realtime_ns() as f64 / 1e9;
    m.ready(offset.map_or(0, |o| o.server_minus_client_ns), epoch);
    run_until(c, sock, &mut m, ClientSetup::is_started)?;
    Ok(Started {
        offset,
        epoch,
        start_unix,
    })
}

/// Feeds `m` the control connection, the data socket and the time, and
/// sends what it asks, until `done` says so.
fn run_until(
    c: &mut Control,
    sock: &UdpSocket,
    m: &mut ClientSetup,
    done: impl Fn(&ClientSetup) -> bool,
) -> Result<(), ClientError> {
    let named = |c: &Control, e: SetupError| match e {
        SetupError::Unexpected(msg) => c.unexpected(*msg),
        e => c.failed(e.to_string()),
    };
    let ctl = c.stream.as_raw_fd();
    let mut buf = [0u8; 2048];
    loop {
        while let Some(o) = m.poll_out() {
            match o {
                Out::Send(msg) => c.send(&msg)?,
                // A handshake lost here is as one lost on the way: the
                // next one goes in 50 ms.
                Out::Datagram(d) => {
                    let _ = sock.send(&d);
                }
            }
        }
        if done(m) {
            return Ok(());
        }
        let wait = m.deadline().map_or(Duration::from_millis(50), |d| {
            d.saturating_duration_since(Instant::now())
        });
        // The data socket is left alone once the probe came: the session's
        // first datagrams may be there before the go is read, and are the
        // session's (poll skips a negative descriptor).
        let data = match m.wants_datagrams() {
            true => sock.as_raw_fd(),
            false => -1,
        };
        let ready = crate::net::readable_among(&[ctl, data], wait).unwrap_or(vec![false; 2]);
        if ready[1] {
            for _ in 0..DATAGRAMS_A_TURN {
                if !m.wants_datagrams() {
                    break;
                }
                match recv_now(data, &mut buf) {
                    Ok(n) => m.on_datagram(&buf[..n]),
                    Err(_) => break,
                }
            }
        }
        if ready[0] {
            // A frame is read whole (the server writes each at once); an
            // error frame is the server's refusal, named as such.
            let msg = c.recv()?;
            m.on_message(msg, Instant::now(), realtime_ns())
                .map_err(|e| named(c, e))?;
            continue;
        }
        m.on_time(Instant::now(), realtime_ns())
            .map_err(|e| named(c, e))?;
    }
}
