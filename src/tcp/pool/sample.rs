//! A status row's samples: the TCP_INFO of the connections that moved
//! since their last sample (within the row's share), and the charted
//! connections' bytes so far.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::{Stage, Worker};
use crate::protocol::stats::{Progress, push_progress};

impl Worker<'_> {
    /// Samples the TCP_INFO (RTT and window, and the retransmissions
    /// since a socket's last sample) of connections that moved since their
    /// last sample, at most a row's share of
    /// [`crate::protocol::stats::TCP_INFO_PER_SEC`], oldest first (one not sampled
    /// in a row waits for a later one; its retransmissions count then or
    /// when it ends); and the tracked connections' bytes so far. An idle
    /// connection is not read at all.
    pub(super) fn sample(&mut self, every: Duration) {
        let secs = self.sh.elapsed();
        for &k in &self.tracked {
            let Some(slot) = self.core.slots.get_mut(k) else {
                continue;
            };
            if let Stage::Data { conn, .. } | Stage::Hello { conn, .. } = &slot.stage {
                let (sent, received) = conn.progress();
                let now = Progress {
                    secs,
                    sent,
                    received,
                };
                push_progress(&mut slot.rec.progress, now);
            }
        }
        let left = crate::protocol::stats::samples_per_row(every);
        let moved = std::mem::take(&mut self.moved);
        let mut taken = 0;
        for (i, &k) in moved.iter().enumerate() {
            if taken == left {
                // The rest wait for the next row, first in line.
                self.moved.extend(
                    moved[i..]
                        .iter()
                        .copied()
                        .filter(|&k| self.core.slots.get(k).is_some_and(|s| s.listed)),
                );
                break;
            }
            let Some(slot) = self.core.slots.get_mut(k) else {
                continue;
            };
            if !slot.listed {
                continue;
            }
            slot.listed = false;
            if matches!(slot.stage, Stage::Connecting) {
                continue;
            }
            taken += 1;
            if let Some(i) = crate::net::tcpinfo::raw(std::os::fd::AsRawFd::as_raw_fd(&slot.stream))
            {
                self.sh.counters.sample(i.tcpi_rtt, i.tcpi_snd_cwnd);
                let more = i.tcpi_total_retrans.saturating_sub(slot.retrans_counted);
                self.sh
                    .counters
                    .retransmits
                    .fetch_add(u64::from(more), Relaxed);
                slot.retrans_counted = i.tcpi_total_retrans;
            }
        }
    }
}
