//! The start every UDP session shares on the server, whichever way its
//! datagrams go (a stream the client sends, `udp::intake`; one the server
//! sends, `udp::outflow`; rr/ping, `rr::answer`), free of I/O: the
//! acceptance names a port and a token; the client's handshake datagram
//! carrying the token tells where it is (whether it arrives before or after
//! the client says on the control connection that it is sending them), and
//! the server sends nothing there but probes with a nonce until the client
//! echoes the nonce over the control connection. Each session's machine
//! holds one [`Setup`] and turns what it says into its own actions.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::header::{FLAG_HANDSHAKE, HEADER_LEN, Header};
use crate::protocol::refusal::{AuthFailure, Refusal};

/// How long the server waits for the client's handshake datagram once the
/// client says it is sending them.
pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(3);
/// Copies of the probe datagram, against loss.
pub const PROBES: usize = 3;

/// The client is found: connect the session socket to `to` (nothing from
/// elsewhere is read from here on), send it [`PROBES`] copies of `datagram`,
/// then say `udp_probed` on the control connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The client's proven address.
    pub to: SocketAddr,
    /// The probe, carrying the nonce.
    pub datagram: [u8; HEADER_LEN],
}

/// The setup of one session: what it was given and what it heard.
#[derive(Debug, Clone)]
pub struct Setup {
    token: u64,
    nonce: u64,
    /// Where the first handshake datagram with the token came from, before
    /// the client said it was sending them.
    heard: Option<SocketAddr>,
    /// Told the handshake datagrams leave: until when one is waited for.
    awaiting: Option<Instant>,
    /// Where the probes went.
    proven: Option<SocketAddr>,
}

impl Setup {
    /// A setup whose handshake datagrams carry `token` and whose probes
    /// carry `nonce`.
    pub fn new(token: u64, nonce: u64) -> Setup {
        Setup {
            token,
            nonce,
            heard: None,
            awaiting: None,
            proven: None,
        }
    }

    /// Whether a `udp_handshake` naming `token` belongs here now: the
    /// token is the session's, no probe has gone, and it is the first.
    pub fn expects(&self, token: u64) -> bool {
        token == self.token && self.awaiting.is_none() && self.proven.is_none()
    }

    /// The client says (at `now`) its handshake datagrams leave: the probe
    /// if one was heard already, else the wait for one starts.
    pub fn on_handshake_message(&mut self, now: Instant, real_ns: u64) -> Option<Probe> {
        match self.heard {
            Some(from) => Some(self.prove(from, real_ns)),
            None => {
                self.awaiting = Some(now + HANDSHAKE_WAIT);
                None
            }
        }
    }

    /// A datagram `d` from `from` before the client is proven (`real_ns`:
    /// the server's CLOCK_REALTIME, stamped in the probe): a handshake
    /// carrying the token is remembered, or answered with the probe once
    /// the client said it sends them; anything else is ignored.
    pub fn on_datagram(&mut self, d: &[u8], from: SocketAddr, real_ns: u64) -> Option<Probe> {
        let h = Header::read(d).ok()?;
        if h.flags & FLAG_HANDSHAKE == 0 || h.seq != self.token || self.proven.is_some() {
            return None;
        }
        match self.awaiting {
            Some(_) => Some(self.prove(from, real_ns)),
            None => {
                self.heard.get_or_insert(from);
                None
            }
        }
    }

    fn prove(&mut self, from: SocketAddr, real_ns: u64) -> Probe {
        self.awaiting = None;
        self.proven = Some(from);
        let mut datagram = [0u8; HEADER_LEN];
        Header {
            flags: FLAG_HANDSHAKE,
            stream: 0,
            seq: self.nonce,
            send_ns: real_ns,
            payload_len: 0,
        }
        .write(&mut datagram);
        Probe { to: from, datagram }
    }

    /// The client's `udp_ready` echoing `nonce`: the proven address, or
    /// the refusal if nothing was probed or the nonce is not the probes'.
    pub fn ready(&self, nonce: u64) -> Result<SocketAddr, Refusal> {
        match self.proven {
            Some(peer) if nonce == self.nonce => Ok(peer),
            _ => Err(AuthFailure::ProbeNonce.into()),
        }
    }

    /// When the setup wants a look: the end of the handshake wait, or of
    /// the setup time (`setup_ends`), whichever is first.
    pub fn deadline(&self, setup_ends: Instant) -> Instant {
        self.awaiting.map_or(setup_ends, |a| a.min(setup_ends))
    }

    /// Whether the handshake wait is over at `now` with no datagram.
    pub fn handshake_missed(&self, now: Instant) -> bool {
        self.awaiting.is_some_and(|a| now >= a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: u64 = 0x7071;
    const NONCE: u64 = 0xabcd_ef01;

    fn from() -> SocketAddr {
        "127.0.0.1:40000".parse().unwrap()
    }

    fn datagram(flags: u8, seq: u64) -> [u8; HEADER_LEN] {
        let mut d = [0u8; HEADER_LEN];
        Header {
            flags,
            stream: 0,
            seq,
            send_ns: 5,
            payload_len: 0,
        }
        .write(&mut d);
        d
    }

    fn is_probe_nonce(r: Result<SocketAddr, Refusal>) -> bool {
        matches!(r, Err(Refusal::Auth(AuthFailure::ProbeNonce)))
    }

    #[test]
    fn a_handshake_heard_before_the_message_is_probed_when_it_comes() {
        let mut s = Setup::new(TOKEN, NONCE);
        assert!(s.expects(TOKEN));
        assert!(!s.expects(TOKEN + 1));
        assert_eq!(
            s.on_datagram(&datagram(FLAG_HANDSHAKE, TOKEN), from(), 9),
            None
        );
        // A second sender of the token is not the client's address.
        let other: SocketAddr = "127.0.0.1:40001".parse().unwrap();
        assert_eq!(
            s.on_datagram(&datagram(FLAG_HANDSHAKE, TOKEN), other, 9),
            None
        );
        assert!(is_probe_nonce(s.ready(NONCE)), "nothing probed yet");
        let now = Instant::now();
        let p = s.on_handshake_message(now, 1_234).expect("a probe");
        assert_eq!(p.to, from());
        let h = Header::read(&p.datagram).unwrap();
        assert_eq!((h.flags, h.seq, h.send_ns), (FLAG_HANDSHAKE, NONCE, 1_234));
        // Proven: no second handshake message, no wait, no more probes.
        assert!(!s.expects(TOKEN));
        assert!(!s.handshake_missed(now + HANDSHAKE_WAIT * 2));
        assert_eq!(s.deadline(now), now);
        assert_eq!(
            s.on_datagram(&datagram(FLAG_HANDSHAKE, TOKEN), other, 9),
            None
        );
        assert_eq!(s.ready(NONCE).unwrap(), from());
        assert!(is_probe_nonce(s.ready(NONCE + 1)));
    }

    #[test]
    fn after_the_message_the_first_handshake_is_probed_within_the_wait() {
        let mut s = Setup::new(TOKEN, NONCE);
        let now = Instant::now();
        let ends = now + Duration::from_secs(60);
        assert_eq!(s.deadline(ends), ends);
        assert!(
            !s.handshake_missed(now + HANDSHAKE_WAIT * 2),
            "not awaited yet"
        );
        assert_eq!(s.on_handshake_message(now, 1), None);
        assert!(!s.expects(TOKEN), "a second handshake message");
        let wait = now + HANDSHAKE_WAIT;
        assert_eq!(s.deadline(ends), wait);
        assert_eq!(s.deadline(now), now);
        assert!(!s.handshake_missed(wait - Duration::from_nanos(1)));
        assert!(s.handshake_missed(wait));
        // Not a handshake, another token, too short: ignored.
        assert_eq!(s.on_datagram(&datagram(0, TOKEN), from(), 9), None);
        assert_eq!(
            s.on_datagram(&datagram(FLAG_HANDSHAKE, TOKEN + 1), from(), 9),
            None
        );
        assert_eq!(
            s.on_datagram(&datagram(FLAG_HANDSHAKE, TOKEN)[..8], from(), 9),
            None
        );
        let p = s.on_datagram(&datagram(FLAG_HANDSHAKE, TOKEN), from(), 77);
        let p = p.expect("the probe");
        assert_eq!(p.to, from());
        let h = Header::read(&p.datagram).unwrap();
        assert_eq!((h.flags, h.seq, h.send_ns), (FLAG_HANDSHAKE, NONCE, 77));
        assert!(!s.handshake_missed(wait), "the wait ended with the probe");
        assert_eq!(s.deadline(ends), ends);
        assert_eq!(s.ready(NONCE).unwrap(), from());
    }

    #[test]
    fn a_datagram_that_is_not_a_handshake_is_not_remembered() {
        let mut s = Setup::new(TOKEN, NONCE);
        assert_eq!(s.on_datagram(&datagram(0, TOKEN), from(), 9), None);
        assert_eq!(s.on_handshake_message(Instant::now(), 1), None);
    }
}
