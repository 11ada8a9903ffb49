//! Unit tests of the schedule as a sender's machine keeps it: the timing
//! each burst record carries (also of a burst whose first write waited,
//! and of one cut short by a failure), and when a rate limit next allows.

use std::io;
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::protocol::outcome::ResultKind;
use crate::protocol::plan::Role;
use crate::protocol::proto::{BurstSpec, IoPattern, RateLimit, TcpSpec};
use crate::protocol::tcp::machine::{Conn, Now, Transmit};

fn push_bursts(transfer: u64, size: u64, period_ms: u64) -> TcpSpec {
    TcpSpec {
        burst: Some(BurstSpec { size, period_ms }),
        ..TcpSpec::plain(IoPattern::Push, transfer, 0, 0)
    }
}

/// The clock `ms` milliseconds after `t0`, its wall clock 7 s + `ms` ms.
fn at(t0: Instant, ms: u64) -> Now {
    Now {
        mono: t0 + Duration::from_millis(ms),
        real_ns: 7_000_000_000 + ms * 1_000_000,
    }
}

#[test]
fn a_burst_is_timed_from_when_it_was_due_to_its_last_write_and_a_cut_one_as_far_as_it_got() {
    // Bursts of 1000 bytes a second. The first is offered at once, but its
    // write waits until 250 ms; the second is offered at 1 s and its
    // write fails.
    let t0 = Instant::now();
    let mut c = Conn::new(
        &push_bursts(3000, 1000, 1000),
        Uuid::from_u128(5),
        Role::Client,
        4096,
        t0,
    );
    assert!(matches!(c.transmit(at(t0, 0)), Transmit::Bytes(b) if b.len() == 1000));
    assert!(matches!(c.transmit(at(t0, 250)), Transmit::Bytes(b) if b.len() == 1000));
    c.on_written(1000, at(t0, 250));
    assert_eq!(
        c.transmit(at(t0, 250)),
        Transmit::WaitUntil(t0 + Duration::from_secs(1))
    );
    assert!(matches!(c.transmit(at(t0, 1000)), Transmit::Bytes(_)));
    c.on_error(&io::Error::from(io::ErrorKind::BrokenPipe));
    let (r, _, bursts) = c.into_result();
    assert_eq!(r.kind, ResultKind::NetworkError);
    assert_eq!(bursts.len(), 2);
    let (first, cut) = (&bursts[0], &bursts[1]);
    assert_eq!((first.start_s, first.end_s), (0.0, 0.25));
    assert_eq!(
        (first.start_rt_ns, first.end_rt_ns),
        (7_000_000_000, 7_250_000_000)
    );
    assert_eq!((first.calls, first.errors), (1, 0));
    assert_eq!(first.transfer_ms, 250.0);
    assert_eq!(first.rate_bps, 32_000.0);
    assert_eq!(first.duty_pct, 25.0);
    // Not one byte of the cut burst went out: no time, no rate.
    assert_eq!(
        (cut.index, cut.bytes, cut.calls, cut.errors),
        (1, 1000, 0, 1)
    );
    assert_eq!((cut.start_s, cut.end_s), (1.0, 1.0));
    assert_eq!(
        (cut.start_rt_ns, cut.end_rt_ns),
        (8_000_000_000, 8_000_000_000)
    );
    assert_eq!(
        (cut.transfer_ms, cut.rate_bps, cut.duty_pct),
        (0.0, 0.0, 0.0)
    );
}

#[test]
fn a_rate_limited_sender_days_into_its_run_waits_for_the_next_period() {
    // 80 bit/s in 100 ms periods: one byte a period. Two days in, the
    // sender may have sent one byte per period so far, and then waits
    // for the next period's, 100 ms on (not for any earlier time: a timer
    // already due would wake it again and again for nothing).
    let t0 = Instant::now();
    let s = TcpSpec {
        rate: Some(RateLimit {
            bps: 80,
            period_ms: 100,
            bps_max: None,
        }),
        ..TcpSpec::plain(IoPattern::Push, 1 << 40, 0, 0)
    };
    let mut c = Conn::new(&s, Uuid::from_u128(5), Role::Client, 1 << 20, t0);
    let days = 2 * 86_400_000;
    let now = at(t0, days);
    while let Transmit::Bytes(b) = c.transmit(now) {
        let n = b.len();
        c.on_written(n, now);
    }
    assert_eq!(c.progress().0, days / 100 + 1);
    assert_eq!(
        c.transmit(now),
        Transmit::WaitUntil(t0 + Duration::from_millis(days + 100))
    );
}
