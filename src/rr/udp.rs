//! UDP request/response (`rr --proto udp`, `ping`): requests leave on their
//! own schedule whatever happens to earlier ones, and every reply is matched
//! to its request by sequence number. Without `--interval` the next request
//! leaves as soon as the previous one is answered or has timed out (ACE's
//! back-to-back test); with one, request *i* is due at start + i × interval,
//! so a lost reply never delays the probes after it (ping's schedule).

use std::collections::VecDeque;

use std::net::UdpSocket;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use super::echo::{Arrival, SeqWindow, UDP_REPLY_MIN, read_reply_words};
use super::run::{LIVENESS_CHECK, Probe, Run};
use crate::control::{ClientError, Control};
use crate::net::realtime_ns;
use crate::proto::Message;
use crate::udp::client::{data_socket, offset_estimate, prove_reachability};
use crate::udp::header::{FLAG_HANDSHAKE, HEADER_LEN, Header, fill_payload};

/// How many timed-out requests are remembered so that a reply arriving after
/// its timeout is counted late (not ignored, and not lost twice).
const EXPIRED_MEMORY: usize = 65_536;

/// A request in flight.
struct Pending {
    seq: u64,
    /// Monotonic send time (round trip start).
    t0: Instant,
    /// Realtime send time, stamped into the header (one-way up).
    t1: u64,
    /// Realtime just before the send call (kernel receive stamps compare to it).
    t_send: u64,
}

/// When request `seq` is due on an `interval` schedule starting at `start`.
fn due(start: Instant, interval: Duration, seq: u64) -> Instant {
    let ns = interval.as_nanos().saturating_mul(u128::from(seq));
    start + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX / 2))
}

/// How long to listen once every probe's fate is known: three times the
/// longest round trip seen, at least a millisecond, at most the timeout.
fn drain_time(max_rtt: Duration, timeout: Duration) -> Duration {
    (max_rtt * 3).max(Duration::from_millis(1)).min(timeout)
}

/// Runs UDP round trips after the control connection has accepted them.
pub(super) fn run(
    c: &mut Control,
    port: u16,
    token: u64,
    run: &mut Run,
    on_probe: &mut dyn FnMut(&Probe),
) -> Result<(), ClientError> {
    let cfg = run.cfg;
    let offset = if cfg.synced {
        None
    } else {
        Some(offset_estimate(c)?)
    };
    run.rep.offset = offset;
    let theta = offset.map_or(0, |o| o.server_minus_client_ns) as f64;
    let split_error_us = offset.map(|o| o.uncertainty_ns as f64 / 1e3);
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
    let mut marks = crate::udp::marks::TosCounts::default();
    let nonce = prove_reachability(c, &sock, token)?;
    if let Some(at) = cfg.start_at {
        crate::net::wait_for_epoch(at, run.interrupt);
    }
    match c.call(&Message::UdpReady {
        nonce,
        offset_ns: theta as i64,
    })? {
        Message::UdpGo => {}
        m => return Err(c.unexpected(m)),
    }
    let timeout = cfg.timeout.unwrap_or(Duration::from_secs(1));
    if cfg.busy_poll {
        sock.set_nonblocking(true)
            .map_err(|e| c.failed(e.to_string()))?;
    }
    let mut req = vec![0u8; HEADER_LEN + cfg.size as usize];
    let mut buf = vec![0u8; 65536];
    let mut expect = Vec::new();
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut expired: VecDeque<u64> = VecDeque::new();
    let mut next = 0u64;
    let start = Instant::now();
    let mut checked = start;
    let probe = |seq: u64, warm: u64| Probe {
        seq,
        rtt_us: None,
        up_us: None,
        down_us: None,
        split_error_us,
        late: false,
        duplicate: false,
        warmup: seq < warm,
    };
    // Replies by sequence number (each counted once), and the highest place
    // in the server's sending order seen (a reply behind it was reordered on
    // the way down).
    let mut replies = SeqWindow::default();
    let mut top_place: Option<u64> = None;
    let (mut dup_down, mut reordered_down) = (0u64, 0u64);
    let mut failure = None;
    let mut max_rtt = Duration::ZERO;
    let mut drain_until: Option<Instant> = None;
    // The receive timeout last set: changed only when the wait must end
    // sooner, or would end needlessly early, so a round trip costs one
    // system call less than setting it before every receive.
    let mut read_timeout = Duration::ZERO;
    loop {
        if run.interrupt.load(SeqCst) {
            break;
        }
        let now = Instant::now();
        if now.duration_since(checked) >= LIVENESS_CHECK {
            checked = now;
            if c.peer_gone() {
                failure = Some(c.failed(format!(
                    "the server closed the control connection after {} requests",
                    run.rep.sent
                )));
                break;
            }
        }
        // Requests whose timeout has passed are lost (until a reply proves late).
        while let Some(p) = pending.front()
            && now.duration_since(p.t0) >= timeout
        {
            let seq = p.seq;
            pending.pop_front();
            if expired.len() == EXPIRED_MEMORY {
                expired.pop_front();
            }
            expired.push_back(seq);
            on_probe(&probe(seq, cfg.warmup));
        }
        let next_due = run.may_send(next, now).then(|| match cfg.interval {
            Some(iv) => due(start, iv, next),
            // Back to back: the next request waits for this one's fate.
            None if pending.is_empty() => now,
            None => now + timeout,
        });
        if let Some(d) = next_due
            && d <= now
        {
            let seq = next;
            next += 1;
            fill_payload(1, seq, &mut req[HEADER_LEN..]);
            let t1 = realtime_ns();
            Header {
                flags: 0,
                stream: 1,
                seq,
                send_ns: t1,
                payload_len: cfg.size,
            }
            .write(&mut req);
            let t0 = Instant::now();
            let t_send = realtime_ns();
            run.rep.sent += 1;
            if sock.send(&req).is_ok() {
                pending.push_back(Pending {
                    seq,
                    t0,
                    t1,
                    t_send,
                });
            } else {
                on_probe(&probe(seq, cfg.warmup));
            }
            continue;
        }
        // Every probe's fate is known: listen a little longer for duplicates
        // and late replies still on their way (irtt waits 3 × the longest
        // round trip for the same reason), then stop.
        let drain = if next_due.is_none() && pending.is_empty() {
            let end = *drain_until.get_or_insert_with(|| now + drain_time(max_rtt, timeout));
            if now >= end {
                break;
            }
            Some(end)
        } else {
            None
        };
        // Sleep in the socket until the next send, the next timeout, the end
        // of the drain or a liveness check, whichever comes first.
        let mut wake = checked + LIVENESS_CHECK;
        if let Some(d) = drain {
            wake = wake.min(d);
        }
        if let Some(d) = next_due {
            wake = wake.min(d);
        }
        if let Some(p) = pending.front() {
            wake = wake.min(p.t0 + timeout);
        }
        let left = wake.saturating_duration_since(Instant::now());
        if left.is_zero() {
            continue;
        }
        if cfg.busy_poll {
            std::hint::spin_loop();
        } else if let Some(t) = next_read_timeout(read_timeout, left) {
            let _ = sock.set_read_timeout(Some(t));
            read_timeout = t;
        }
        let (n, _, got) = match crate::udp::receive::recv_from_stamped(&sock, &mut buf) {
            Ok(r) => r,
            Err(e) if crate::net::nothing_yet(&e) => continue,
            // ICMP errors (port unreachable) surface here; the request stays
            // pending and times out as lost.
            Err(_) => continue,
        };
        let arrived = Instant::now();
        let Ok(h) = Header::read(&buf[..n]) else {
            continue;
        };
        if h.flags & FLAG_HANDSHAKE != 0 || n < HEADER_LEN + UDP_REPLY_MIN as usize {
            continue;
        }
        match replies.arrive(h.seq) {
            Arrival::Fresh { .. } => {}
            Arrival::Duplicate => {
                dup_down += 1;
                let mut p = probe(h.seq, cfg.warmup);
                p.duplicate = true;
                on_probe(&p);
                continue;
            }
            Arrival::Stale => continue,
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[HEADER_LEN + at..HEADER_LEN + at + 8]);
            u64::from_be_bytes(b)
        };
        // The reply starts with the server's receive time and its place in
        // the server's sending order; the rest is the pattern for
        // (stream ^ 1, seq).
        let words = read_reply_words([word(0), word(8), word(16)]);
        if let Some((_, place)) = words {
            reordered_down += u64::from(top_place.is_some_and(|t| place < t));
            top_place = Some(top_place.map_or(place, |t| t.max(place)));
        }
        let Some(i) = pending.iter().position(|p| p.seq == h.seq) else {
            // Not in flight: a reply after its timeout counts late.
            if let Some(j) = expired.iter().position(|&s| s == h.seq) {
                expired.remove(j);
                run.rep.late += 1;
                let mut p = probe(h.seq, cfg.warmup);
                p.late = true;
                on_probe(&p);
            }
            continue;
        };
        let Some(p) = pending.remove(i) else {
            continue;
        };
        let mut rtt = arrived.duration_since(p.t0);
        let mut t4 = realtime_ns();
        let kernel_time = stamped && got.stamp.is_some();
        if let Some(tos) = got.tos {
            marks.on(tos);
        }
        if let (true, Some(st)) = (stamped, got.stamp) {
            // The kernel's receive time leaves out this process's wake-up.
            rtt = Duration::from_nanos(st.saturating_sub(p.t_send)).min(rtt);
            t4 = st;
        }
        let t2 = word(0);
        let head = UDP_REPLY_MIN as usize;
        expect.resize(n - HEADER_LEN, 0);
        fill_payload(h.stream ^ 1, h.seq, &mut expect);
        if words.is_none() || buf[HEADER_LEN + head..n] != expect[head..] {
            run.rep.corrupt += 1;
        }
        run.rep.received += 1;
        max_rtt = max_rtt.max(rtt);
        run.rep.rx_stamped += u64::from(kernel_time);
        run.record(p.seq, rtt);
        let mut out = probe(p.seq, cfg.warmup);
        out.rtt_us = Some(rtt.as_nanos() as f64 / 1e3);
        out.up_us = Some((t2 as f64 - p.t1 as f64 - theta) / 1e3);
        out.down_us = Some((t4 as f64 - h.send_ns as f64 + theta) / 1e3);
        on_probe(&out);
    }
    run.rep.reply_marking = marks.marking(cfg.sock.tos.unwrap_or(0));
    run.rep.duplicates_down = Some(dup_down);
    run.rep.reordered_down = Some(reordered_down);
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

    #[test]
    fn schedule_is_absolute_and_does_not_overflow() {
        let s = Instant::now();
        let iv = Duration::from_millis(10);
        assert_eq!(due(s, iv, 0), s);
        assert_eq!(due(s, iv, 7) - s, Duration::from_millis(70));
        // Far beyond u32 sequence numbers the schedule still moves forward.
        let far = (1u64 << 33) + 5;
        assert_eq!(
            due(s, Duration::from_nanos(1), far) - s,
            Duration::from_nanos(far)
        );
        // An absurd product saturates instead of panicking.
        let _ = due(s, Duration::from_secs(1 << 40), u64::MAX);
    }

    #[test]
    fn the_drain_is_three_round_trips_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(drain_time(ms(2), ms(1000)), ms(6));
        assert_eq!(drain_time(Duration::ZERO, ms(1000)), ms(1));
        assert_eq!(drain_time(ms(400), ms(1000)), ms(1000));
    }
}
