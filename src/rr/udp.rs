//! UDP request/response (`rr --proto udp`, `ping`) on a socket: the setup
//! (offset estimate, reachability proof, start), then a thin driver of the
//! client's machine ([`Prober`]: the schedule, matching replies to requests,
//! late replies, duplicates, timeouts and the drain), which waits on the
//! socket until the machine's next deadline, with the liveness check and
//! Ctrl-C beside it.

use std::net::UdpSocket;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use super::run::{LIVENESS_CHECK, Probe, Run};
use crate::control::{ClientError, Control};
use crate::net::realtime_ns;
use crate::protocol::rr::probe::{Arrived, Next, Plan, Prober};
use crate::protocol::udp::client_setup::Clock;
use crate::udp::client::data_socket;
use crate::udp::setup::set_up;

/// Runs UDP round trips after the control connection has accepted them.
pub(super) fn run(
    c: &mut Control,
    port: u16,
    token: u64,
    run: &mut Run,
    on_probe: &mut dyn FnMut(&Probe, Instant),
) -> Result<(), ClientError> {
    let cfg = run.cfg;
    let server = std::net::SocketAddr::new(c.addr.ip(), port);
    let sock: UdpSocket = data_socket(
        server,
        cfg.bind.first().copied(),
        crate::udp::client::DataSocketOpts {
            bind_dev: cfg.bind_dev.as_deref(),
            rcvbuf: 1 << 20,
            sndbuf: 1 << 20,
            opts: &cfg.sock,
            port: cfg.cport,
        },
        c,
    )?;
    run.rep.local = sock.local_addr().ok();
    let stamped = cfg.rx_timestamps && crate::udp::receive::enable_rx_timestamps(&sock);
    crate::udp::receive::enable_rx_tos(&sock);
    let clock = match cfg.synced {
        true => Clock::Trusted,
        false => Clock::Estimate,
    };
    let offset = set_up(c, &sock, token, clock, cfg.start_at, run.interrupt)?.offset;
    run.rep.offset = offset;
    let theta = offset.map_or(0, |o| o.server_minus_client_ns);
    let split_error_us = offset.map(|o| o.uncertainty_ns as f64 / 1e3);
    let timeout = cfg.timeout.unwrap_or(Duration::from_secs(1));
    if cfg.busy_poll {
        sock.set_nonblocking(true)
            .map_err(|e| c.failed(e.to_string()))?;
    }
    let mut buf = vec![0u8; 65536];
    let start = Instant::now();
    let mut prober = Prober::new(
        Plan {
            size: cfg.size,
            total: run.total,
            warmup: cfg.warmup,
            timeout,
            interval: cfg.interval,
            duration: cfg.duration,
            offset_ns: theta,
            split_error_us,
        },
        start,
    );
    // When the control connection is next checked: a deadline, so a loop
    // turn compares instants rather than subtracting them.
    let mut check_at = start + LIVENESS_CHECK;
    // Tells the machine's outcomes: a reply in time is a sample.
    let mut tell = |prober: &mut Prober, run: &mut Run, now: Instant| {
        while let Some(o) = prober.poll_event() {
            if let Some(rtt) = o.rtt {
                run.record_at(o.probe.seq, rtt, now);
            }
            on_probe(&o.probe, now);
        }
    };
    let mut failure = None;
    // The receive timeout last set: changed only when the wait must end
    // sooner, or would end needlessly early, so a round trip costs one
    // system call less than setting it before every receive.
    let mut read_timeout = Duration::ZERO;
    // The time is read once a step, where something happened (a send, a
    // reply, a wake-up), and serves everything up to the next: each clock
    // read is about 1 % of a same-CPU round trip.
    let mut now = start;
    loop {
        if run.interrupt.load(SeqCst) {
            break;
        }
        if now >= check_at {
            check_at = now + LIVENESS_CHECK;
            if c.peer_gone() {
                failure = Some(c.failed(format!(
                    "the server closed the control connection after {} requests",
                    prober.counts().sent
                )));
                break;
            }
        }
        let next = prober.poll(now);
        tell(&mut prober, run, now);
        let until = match next {
            Next::Done => break,
            Next::Wait(t) => t,
            Next::Send => {
                // The request carries the time it leaves; a kernel receive
                // stamp on its reply is measured from the same reading.
                let t_send = realtime_ns();
                let req = prober.request(t_send);
                now = Instant::now();
                if sock.send(req).is_ok() {
                    prober.sent(now, t_send);
                } else {
                    prober.send_failed();
                    tell(&mut prober, run, now);
                }
                continue;
            }
        };
        // Sleep in the socket until the machine's deadline or a liveness
        // check, whichever comes first.
        let wake = until.min(check_at);
        let left = wake.saturating_duration_since(now);
        if left.is_zero() {
            now = Instant::now();
            continue;
        }
        if cfg.busy_poll {
            std::hint::spin_loop();
        } else if let Some(t) = next_read_timeout(read_timeout, left) {
            let _ = sock.set_read_timeout(Some(t));
            read_timeout = t;
        }
        // The socket is connected: only the server's datagrams arrive.
        let got = crate::udp::receive::recv_connected(&sock, &mut buf);
        now = Instant::now();
        let (n, got) = match got {
            Ok(r) => r,
            Err(e) if crate::net::nothing_yet(&e) => continue,
            // ICMP errors (port unreachable) surface here; the request stays
            // pending and times out as lost.
            Err(_) => continue,
        };
        prober.on_datagram(
            &buf[..n],
            Arrived {
                at: now,
                real_ns: realtime_ns(),
                stamp: got.stamp.filter(|_| stamped),
                tos: got.tos,
            },
        );
        tell(&mut prober, run, now);
    }
    let counts = prober.counts();
    run.rep.sent = counts.sent;
    run.rep.received = counts.received;
    run.rep.late = counts.late;
    run.rep.corrupt = counts.corrupt;
    run.rep.rx_stamped = counts.rx_stamped;
    run.rep.reply_marking = prober.marking(cfg.sock.tos.unwrap_or(0));
    run.rep.duplicates_down = Some(counts.duplicates_down);
    run.rep.reordered_down = Some(counts.reordered_down);
    failure.map_or(Ok(()), Err)
}

/// The receive timeout to set when `left` remains before the loop must wake
/// and `set` is the one in force (zero: none yet), or `None` to keep `set`.
/// A timeout longer than `left` would oversleep, so it is cut to half of
/// `left`; one under a quarter of `left` would wake for nothing, so it is
/// raised to half. Waking early costs a loop turn; the next wait is shorter.
fn next_read_timeout(set: Duration, left: Duration) -> Option<Duration> {
    let half = (left / 2).max(Duration::from_micros(1));
    if set.is_zero() || set > left || set < left / 4 {
        Some(half)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_timeout_is_reset_only_when_it_would_oversleep_or_wake_early() {
        let ms = Duration::from_millis;
        assert_eq!(next_read_timeout(Duration::ZERO, ms(100)), Some(ms(50)));
        assert_eq!(next_read_timeout(ms(50), ms(100)), None);
        assert_eq!(next_read_timeout(ms(50), ms(50)), None);
        assert_eq!(
            next_read_timeout(ms(50), ms(49)),
            Some(Duration::from_micros(24_500))
        );
        assert_eq!(next_read_timeout(ms(25), ms(100)), None);
        assert_eq!(next_read_timeout(ms(24), ms(100)), Some(ms(50)));
        // Never zero: a zero timeout would block for ever.
        assert_eq!(
            next_read_timeout(Duration::ZERO, Duration::from_nanos(1)),
            Some(Duration::from_micros(1))
        );
    }
}
