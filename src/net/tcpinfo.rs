//! The kernel's TCP_INFO for a connection, and the part of it netrig
//! reports: what iperf3 shows as `Retr` and `Cwnd`, the RTTs, and what
//! limited the sender (Linux's busy, receive-window-limited and
//! send-buffer-limited times, the counterpart of Windows' SndLim counters
//! that ctsTraffic reports).

use serde::Serialize;
use std::os::fd::{AsRawFd, RawFd};

/// TCP_INFO as the kernel gives it.
pub fn raw(fd: RawFd) -> Option<libc::tcp_info> {
    // SAFETY: tcp_info is a plain C struct; all-zero is valid. getsockopt
    // writes at most `len` bytes into it and updates `len`.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let r = libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        (r == 0).then_some(info)
    }
}

/// One connection's TCP_INFO at the end of its data phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TcpInfo {
    /// Segments retransmitted over the connection's life
    /// (tcpi_total_retrans; iperf3's `Retr`).
    pub retransmits: u32,
    /// Bytes retransmitted (tcpi_bytes_retrans).
    pub bytes_retrans: u64,
    /// Smoothed RTT, µs (tcpi_rtt).
    pub rtt_us: u32,
    /// RTT variation, µs (tcpi_rttvar).
    pub rttvar_us: u32,
    /// Smallest RTT seen, µs (tcpi_min_rtt).
    pub min_rtt_us: u32,
    /// Congestion window, segments (tcpi_snd_cwnd; iperf3's `Cwnd` is this
    /// times the MSS).
    pub cwnd: u32,
    /// Segment size sent, bytes (tcpi_snd_mss).
    pub snd_mss: u32,
    /// Segment size received, bytes (tcpi_rcv_mss).
    pub rcv_mss: u32,
    /// Path MTU (tcpi_pmtu).
    pub pmtu: u32,
    /// Most recent delivery rate, bytes/s (tcpi_delivery_rate).
    pub delivery_rate: u64,
    /// Pacing rate, bytes/s (tcpi_pacing_rate).
    pub pacing_rate: u64,
    /// Segments sent and not yet acknowledged (tcpi_unacked).
    pub unacked: u32,
    /// Time with data in flight, µs (tcpi_busy_time).
    pub busy_us: u64,
    /// Time limited by the peer's receive window, µs (tcpi_rwnd_limited).
    pub rwnd_limited_us: u64,
    /// Time limited by this end's send buffer, µs (tcpi_sndbuf_limited).
    pub sndbuf_limited_us: u64,
    /// Reordering degree the kernel assumes (tcpi_reordering).
    pub reordering: u32,
    /// Reordering events seen (tcpi_reord_seen).
    pub reord_seen: u32,
    /// Duplicate segments reported by D-SACK (tcpi_dsack_dups).
    pub dsack_dups: u32,
    /// Bytes sent, retransmissions included (tcpi_bytes_sent).
    pub bytes_sent: u64,
    /// Bytes acknowledged (tcpi_bytes_acked).
    pub bytes_acked: u64,
}

/// The reported part of `s`'s TCP_INFO.
pub fn read<S: AsRawFd>(s: &S) -> Option<TcpInfo> {
    raw(s.as_raw_fd()).map(|i| TcpInfo {
        retransmits: i.tcpi_total_retrans,
        bytes_retrans: i.tcpi_bytes_retrans,
        rtt_us: i.tcpi_rtt,
        rttvar_us: i.tcpi_rttvar,
        min_rtt_us: i.tcpi_min_rtt,
        cwnd: i.tcpi_snd_cwnd,
        snd_mss: i.tcpi_snd_mss,
        rcv_mss: i.tcpi_rcv_mss,
        pmtu: i.tcpi_pmtu,
        delivery_rate: i.tcpi_delivery_rate,
        pacing_rate: i.tcpi_pacing_rate,
        unacked: i.tcpi_unacked,
        busy_us: i.tcpi_busy_time,
        rwnd_limited_us: i.tcpi_rwnd_limited,
        sndbuf_limited_us: i.tcpi_sndbuf_limited,
        reordering: i.tcpi_reordering,
        reord_seen: i.tcpi_reord_seen,
        dsack_dups: i.tcpi_dsack_dups,
        bytes_sent: i.tcpi_bytes_sent,
        bytes_acked: i.tcpi_bytes_acked,
    })
}

impl TcpInfo {
    /// The part an end reports to the other in its final report.
    pub fn summary(&self) -> crate::protocol::proto::TcpInfoSummary {
        crate::protocol::proto::TcpInfoSummary {
            retransmits: self.retransmits,
            bytes_retrans: self.bytes_retrans,
            rtt_us: self.rtt_us,
            min_rtt_us: self.min_rtt_us,
            cwnd: self.cwnd,
            snd_mss: self.snd_mss,
            rwnd_limited_us: self.rwnd_limited_us,
            sndbuf_limited_us: self.sndbuf_limited_us,
            busy_us: self.busy_us,
        }
    }
}

impl From<crate::protocol::proto::TcpInfoSummary> for TcpInfo {
    fn from(s: crate::protocol::proto::TcpInfoSummary) -> TcpInfo {
        TcpInfo {
            retransmits: s.retransmits,
            bytes_retrans: s.bytes_retrans,
            rtt_us: s.rtt_us,
            min_rtt_us: s.min_rtt_us,
            cwnd: s.cwnd,
            snd_mss: s.snd_mss,
            rwnd_limited_us: s.rwnd_limited_us,
            sndbuf_limited_us: s.sndbuf_limited_us,
            busy_us: s.busy_us,
            ..TcpInfo::default()
        }
    }
}

/// TCP_INFO summed over a run's connections (one end of each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TcpInfoTotals {
    /// Connections with a reading.
    pub connections: u64,
    /// Segments retransmitted, all connections.
    pub retransmits: u64,
    /// Bytes retransmitted, all connections.
    pub bytes_retrans: u64,
    /// Mean of the connections' smoothed RTTs at their end, µs.
    pub rtt_mean_us: f64,
    /// Largest smoothed RTT, µs.
    pub rtt_max_us: u32,
    /// Smallest RTT any connection saw, µs.
    pub min_rtt_us: u32,
    /// Largest congestion window, segments.
    pub cwnd_max: u32,
    /// Smallest segment size sent, bytes.
    pub snd_mss_min: u32,
    /// Time limited by the receiver's window, all connections, µs.
    pub rwnd_limited_us: u64,
    /// Time limited by the send buffer, all connections, µs.
    pub sndbuf_limited_us: u64,
    /// Time with data in flight, all connections, µs.
    pub busy_us: u64,
    /// Reordering events, all connections.
    pub reord_seen: u64,
}

impl TcpInfoTotals {
    /// Counts one connection's reading in.
    pub fn add(&mut self, i: &TcpInfo) {
        let n = self.connections as f64;
        self.rtt_mean_us = (self.rtt_mean_us * n + f64::from(i.rtt_us)) / (n + 1.0);
        let first = self.connections == 0;
        self.connections += 1;
        self.retransmits += u64::from(i.retransmits);
        self.bytes_retrans += i.bytes_retrans;
        self.rtt_max_us = self.rtt_max_us.max(i.rtt_us);
        self.min_rtt_us = if first {
            i.min_rtt_us
        } else {
            self.min_rtt_us.min(i.min_rtt_us)
        };
        self.cwnd_max = self.cwnd_max.max(i.cwnd);
        self.snd_mss_min = if first {
            i.snd_mss
        } else {
            self.snd_mss_min.min(i.snd_mss)
        };
        self.rwnd_limited_us += i.rwnd_limited_us;
        self.sndbuf_limited_us += i.sndbuf_limited_us;
        self.busy_us += i.busy_us;
        self.reord_seen += u64::from(i.reord_seen);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn totals_sum_counts_and_keep_extremes() {
        let a = TcpInfo {
            retransmits: 3,
            bytes_retrans: 300,
            rtt_us: 100,
            min_rtt_us: 40,
            cwnd: 10,
            snd_mss: 1448,
            rwnd_limited_us: 5,
            sndbuf_limited_us: 7,
            busy_us: 11,
            reord_seen: 1,
            ..TcpInfo::default()
        };
        let b = TcpInfo {
            retransmits: 1,
            bytes_retrans: 100,
            rtt_us: 300,
            min_rtt_us: 60,
            cwnd: 20,
            snd_mss: 988,
            rwnd_limited_us: 1,
            sndbuf_limited_us: 2,
            busy_us: 3,
            reord_seen: 2,
            ..TcpInfo::default()
        };
        let mut t = TcpInfoTotals::default();
        t.add(&b);
        t.add(&a);
        assert_eq!(t.connections, 2);
        assert_eq!((t.retransmits, t.bytes_retrans), (4, 400));
        assert_eq!(t.rtt_mean_us, 200.0);
        assert_eq!((t.rtt_max_us, t.min_rtt_us), (300, 40));
        assert_eq!((t.cwnd_max, t.snd_mss_min), (20, 988));
        assert_eq!((t.rwnd_limited_us, t.sndbuf_limited_us), (6, 9));
        assert_eq!((t.busy_us, t.reord_seen), (14, 3));
        t.add(&TcpInfo {
            rtt_us: 500,
            min_rtt_us: 90,
            snd_mss: 2000,
            ..TcpInfo::default()
        });
        assert_eq!(t.rtt_mean_us, 300.0);
        assert_eq!((t.min_rtt_us, t.snd_mss_min), (40, 988));
    }

    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_loopback_connection_reports_its_bytes_and_segment_size() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 100_000];
        s.read_exact(&mut got).unwrap();
        let i = read(&c).expect("TCP_INFO");
        assert!(i.bytes_acked >= 100_000 || i.bytes_sent >= 100_000, "{i:?}");
        assert!(i.snd_mss > 1000 && i.cwnd > 0, "{i:?}");
        assert_eq!(i.retransmits, 0, "{i:?}");
        assert_eq!(read(&l).map(|i| i.bytes_sent), Some(0));
    }
}
