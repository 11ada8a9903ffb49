//! Clock offset between client and server, estimated in band over the control
//! connection (NTP's on-wire method): the client stamps t1, the server t2 on
//! receipt and t3 on reply, the client t4 on receipt. For each exchange
//! offset = ((t2 - t1) + (t3 - t4)) / 2 and round trip = (t4 - t1) - (t3 - t2);
//! the exchange with the smallest round trip wins, and its half round trip
//! bounds the error of the offset (and so of every one-way delay).

use serde::Serialize;

/// One timestamp exchange, CLOCK_REALTIME ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// Client send.
    pub t1: u64,
    /// Server receive.
    pub t2: u64,
    /// Server send.
    pub t3: u64,
    /// Client receive.
    pub t4: u64,
}

/// The estimate: server clock minus client clock, with its error bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Offset {
    /// Server minus client, ns.
    pub server_minus_client_ns: i64,
    /// The offset is right to within ± this, ns.
    pub uncertainty_ns: u64,
}

/// Picks the best estimate from samples (`None` if there are none).
pub fn estimate(samples: &[ClockSample]) -> Option<Offset> {
    samples
        .iter()
        .map(|s| {
            let (t1, t2, t3, t4) = (s.t1 as i128, s.t2 as i128, s.t3 as i128, s.t4 as i128);
            let rtt = ((t4 - t1) - (t3 - t2)).max(0);
            (rtt, ((t2 - t1) + (t3 - t4)) / 2)
        })
        .min_by_key(|&(rtt, _)| rtt)
        .map(|(rtt, off)| Offset {
            server_minus_client_ns: off as i64,
            uncertainty_ns: (rtt / 2) as u64,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_path_recovers_offset() {
        // Server is 5 ms ahead; 100 µs each way; server holds 10 µs.
        let s = ClockSample {
            t1: 1_000_000,
            t2: 6_100_000,
            t3: 6_110_000,
            t4: 1_210_000,
        };
        assert_eq!(
            estimate(&[s]),
            Some(Offset {
                server_minus_client_ns: 5_000_000,
                uncertainty_ns: 100_000
            })
        );
    }

    #[test]
    fn smallest_round_trip_wins() {
        let slow = ClockSample {
            t1: 0,
            t2: 900_000,
            t3: 900_000,
            t4: 1_000_000,
        };
        let fast = ClockSample {
            t1: 0,
            t2: 10_000,
            t3: 10_000,
            t4: 20_000,
        };
        assert_eq!(estimate(&[slow, fast]).unwrap().server_minus_client_ns, 0);
        assert_eq!(estimate(&[]), None);
    }
}
