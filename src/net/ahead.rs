//! Bytes read from a stream ahead of what their reader wanted. A short
//! connection's peer sends its acknowledgement, reply and final report in
//! one segment (see `out.rs`); reading them frame by frame, header then
//! body, cost a read each (five on a crr client, three on its server), and
//! on loopback each read is a good part of what a transaction costs. One
//! read of up to [`AHEAD`] bytes takes them all; what the reader did not
//! want yet waits here, and is handed out before the socket is read again.

use std::io;

use crate::protocol::proto::{Message, ReadError, decode_frame};

/// How much a read takes when its reader wants less (a frame, a short
/// reply): more than a few frames, so that everything a peer sent in one
/// write arrives in one read.
pub const AHEAD: usize = 4096;

/// The largest buffer kept once all is handed out: a held connection keeps
/// no read's buffer.
const KEEP: usize = 512;

/// Bytes read and not yet handed out.
#[derive(Debug, Default)]
pub struct ReadAhead {
    bytes: Vec<u8>,
    at: usize,
    /// The socket said it would block, and no readiness came since: a
    /// read now would only say so again (epoll is edge-triggered: the next
    /// arrival is reported, see [`ReadAhead::stir`]).
    drained: bool,
    /// The last read came back shorter than asked: on TCP it took all that
    /// was queued ([`ReadAhead::took_all`]).
    short: bool,
}

impl ReadAhead {
    /// Readiness came for the socket: the next read may find something.
    pub fn stir(&mut self) {
        self.drained = false;
        self.short = false;
    }

    /// The socket said it would block, or a read of it came back short
    /// (which on TCP takes all that is queued): no read until readiness
    /// stirs it.
    pub fn drain(&mut self) {
        self.drained = true;
    }

    /// The stream is TCP, whose read takes all that is queued: if the last
    /// read came back shorter than asked, the socket was drained then, and
    /// only readiness brings more (an SCTP association reads a message at
    /// a time, so its short read says nothing of the next message).
    pub fn took_all(&mut self) {
        if self.short {
            self.drained = true;
        }
    }

    /// Whether a read could find anything: bytes wait here, or the socket
    /// did not say it would block since its last readiness.
    pub fn may_read(&self) -> bool {
        !self.drained || !self.is_empty()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// What waits, oldest first.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[self.at..]
    }

    /// Hands out the first `n` waiting bytes (no more than wait).
    pub fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.bytes.len());
        if self.is_empty() {
            self.bytes.clear();
            self.at = 0;
            if self.bytes.capacity() > KEEP {
                self.bytes = Vec::new();
            }
        }
    }

    /// Puts `b` (a frame taken, to be read again elsewhere) in front of
    /// what waits.
    pub fn unread(&mut self, b: &[u8]) {
        let mut bytes = Vec::with_capacity(b.len() + self.bytes().len());
        bytes.extend_from_slice(b);
        bytes.extend_from_slice(self.bytes());
        self.bytes = bytes;
        self.at = 0;
    }

    /// Keeps `b`, read past what was wanted, behind what waits.
    pub fn stash(&mut self, b: &[u8]) {
        self.bytes.extend_from_slice(b);
    }

    /// Reads once through `recv` into `scratch` (at most [`AHEAD`] bytes)
    /// and keeps what came: Ok(0) is the peer's end of stream.
    pub fn fill(
        &mut self,
        scratch: &mut [u8],
        recv: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let cap = AHEAD.min(scratch.len());
        let n = recv(&mut scratch[..cap])?;
        self.short = n < cap;
        self.stash(&scratch[..n.min(cap)]);
        Ok(n)
    }

    /// Takes the first whole frame that waits, if one does.
    pub fn frame(&mut self) -> Result<Option<Message>, crate::protocol::proto::ProtoError> {
        self.frame_within(crate::protocol::proto::MAX_PAYLOAD)
    }

    /// [`ReadAhead::frame`] for a frame whose payload may be at most `max`
    /// bytes: a larger one is refused on its header, before its payload is
    /// held.
    pub fn frame_within(
        &mut self,
        max: usize,
    ) -> Result<Option<Message>, crate::protocol::proto::ProtoError> {
        if self.is_empty() {
            return Ok(None);
        }
        if let Some(header) = self
            .bytes()
            .first_chunk::<{ crate::protocol::proto::HEADER_LEN }>()
        {
            let len = crate::protocol::proto::parse_header(header)?;
            if len > max {
                return Err(crate::protocol::proto::ProtoError::OversizedHere { len, max });
            }
        }
        let r = decode_frame(self.bytes())?;
        Ok(r.map(|(m, used)| {
            self.consume(used);
            m
        }))
    }

    /// The next frame from what waits and then from a non-blocking stream
    /// read through `recv`: Ok(None) while more is needed (the stream would
    /// block). Reads go on only while the frame is incomplete, so what
    /// waits stays bounded by one frame (whose header bounds its length)
    /// and one read.
    pub fn read_frame(
        &mut self,
        scratch: &mut [u8],
        recv: impl FnMut(&mut [u8]) -> io::Result<usize>,
    ) -> Result<Option<Message>, ReadError> {
        self.read_frame_within(scratch, crate::protocol::proto::MAX_PAYLOAD, recv)
    }

    /// [`ReadAhead::read_frame`] for a frame of at most `max` payload bytes
    /// ([`ReadAhead::frame_within`]).
    pub fn read_frame_within(
        &mut self,
        scratch: &mut [u8],
        max: usize,
        mut recv: impl FnMut(&mut [u8]) -> io::Result<usize>,
    ) -> Result<Option<Message>, ReadError> {
        loop {
            if let Some(m) = self.frame_within(max)? {
                return Ok(Some(m));
            }
            let had = self.bytes().len();
            match self.fill(scratch, &mut recv) {
                Ok(0) if had == 0 => return Err(ReadError::Eof),
                Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.drained = true;
                    return Ok(None);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::proto::encode;
    use std::collections::VecDeque;

    /// A stream serving `chunks` one read each (cut to the read's size),
    /// then would block; counts its reads.
    struct Chunks(VecDeque<Vec<u8>>, usize);
    impl Chunks {
        fn recv(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.1 += 1;
            let Some(c) = self.0.front_mut() else {
                return Err(io::ErrorKind::WouldBlock.into());
            };
            let n = c.len().min(b.len());
            b[..n].copy_from_slice(&c[..n]);
            c.drain(..n);
            if c.is_empty() {
                self.0.pop_front();
            }
            Ok(n)
        }
    }

    fn ack(n: u128) -> Vec<u8> {
        encode(&Message::DataAck {
            connection: uuid::Uuid::from_u128(n),
        })
    }

    #[test]
    fn a_socket_that_said_it_would_block_is_not_read_again_until_stirred() {
        let mut a = ReadAhead::default();
        let mut s = Chunks([ack(1)].into(), 0);
        let mut scratch = [0u8; 8192];
        assert!(a.may_read(), "a new connection is read");
        let m = a.read_frame_within(&mut scratch, 1024, |b| s.recv(b));
        assert!(matches!(m, Ok(Some(_))));
        assert!(a.may_read(), "a whole frame read: more may wait");
        assert!(matches!(
            a.read_frame_within(&mut scratch, 1024, |b| s.recv(b)),
            Ok(None)
        ));
        assert!(!a.may_read(), "would block: no read until readiness");
        a.stir();
        assert!(a.may_read());
        // Bytes kept here are always worth a look, whatever the socket said.
        let _ = a.read_frame_within(&mut scratch, 1024, |b| s.recv(b));
        assert!(!a.may_read());
        a.stash(&ack(2)[..3]);
        assert!(a.may_read());
    }

    #[test]
    fn a_short_read_drains_a_tcp_socket_only_if_no_readiness_came_since() {
        let mut scratch = [0u8; 8192];
        // A data hello and the request behind it, in one short read: the
        // socket held nothing more then.
        let mut a = ReadAhead::default();
        let mut s = Chunks([[ack(1), vec![7; 64]].concat()].into(), 0);
        let m = a.read_frame_within(&mut scratch, 1024, |b| s.recv(b));
        assert!(matches!(m, Ok(Some(_))));
        assert!(a.may_read(), "the request waits here");
        a.consume(64);
        assert!(
            a.may_read(),
            "a short read alone says nothing of the stream"
        );
        a.took_all();
        assert!(!a.may_read(), "TCP: no read until readiness");
        assert_eq!(s.1, 1);
        // Readiness since the short read: a read may find more.
        let mut a = ReadAhead::default();
        let mut s = Chunks([ack(2)].into(), 0);
        let _ = a.read_frame_within(&mut scratch, 1024, |b| s.recv(b));
        a.stir();
        a.took_all();
        assert!(a.may_read());
        // A read that filled its buffer may have left more.
        let mut a = ReadAhead::default();
        a.fill(&mut scratch, |b| Ok(b.len())).unwrap();
        a.consume(AHEAD);
        a.took_all();
        assert!(a.may_read());
        // drain() is what a reader says of a read that would block or came
        // back short; readiness undoes it.
        a.drain();
        assert!(!a.may_read());
        a.stir();
        assert!(a.may_read());
    }

    #[test]
    fn a_frame_put_back_is_read_again_before_what_followed_it() {
        let mut a = ReadAhead::default();
        let mut s = Chunks([[ack(1), vec![7, 8]].concat()].into(), 0);
        let mut scratch = [0u8; 8192];
        let m = a.read_frame(&mut scratch, |b| s.recv(b)).unwrap();
        let Some(m) = m else { panic!("no frame") };
        a.consume(1);
        a.unread(&encode(&m));
        assert_eq!(a.bytes(), [ack(1), vec![8]].concat());
        let again = a.frame().unwrap();
        assert!(
            matches!(again, Some(Message::DataAck { connection }) if connection.as_u128() == 1)
        );
        assert_eq!(a.bytes(), [8]);
    }

    #[test]
    fn one_read_takes_several_frames_and_what_follows_waits() {
        let mut a = ReadAhead::default();
        let mut s = Chunks([[ack(1), ack(2), vec![7, 8, 9]].concat()].into(), 0);
        let mut scratch = [0u8; 8192];
        let m = a.read_frame(&mut scratch, |b| s.recv(b)).unwrap();
        assert!(matches!(m, Some(Message::DataAck { connection }) if connection.as_u128() == 1));
        let m = a.read_frame(&mut scratch, |b| s.recv(b)).unwrap();
        assert!(matches!(m, Some(Message::DataAck { connection }) if connection.as_u128() == 2));
        assert_eq!(s.1, 1, "both frames came in one read");
        assert_eq!(a.bytes(), [7, 8, 9]);
        a.consume(2);
        assert_eq!(a.bytes(), [9]);
        a.consume(5);
        assert!(a.is_empty());
    }

    #[test]
    fn a_frame_in_pieces_waits_for_the_rest_and_an_end_inside_one_is_an_error() {
        let f = ack(3);
        let mut scratch = [0u8; 64];
        let mut a = ReadAhead::default();
        let mut s = Chunks([f[..3].to_vec(), f[3..20].to_vec()].into(), 0);
        assert!(a.read_frame(&mut scratch, |b| s.recv(b)).unwrap().is_none());
        assert_eq!(a.bytes(), &f[..20]);
        s.0.push_back(f[20..].to_vec());
        assert!(a.read_frame(&mut scratch, |b| s.recv(b)).unwrap().is_some());
        assert!(a.is_empty());
        // A reader that reads 64 bytes at a time still gets a longer frame.
        assert!(f.len() > 64);
        // The stream ends: between frames that is the end, inside one an error.
        let r = a.read_frame(&mut scratch, |_| Ok(0));
        assert!(matches!(r, Err(ReadError::Eof)), "{r:?}");
        a.stash(&f[..5]);
        let r = a.read_frame(&mut scratch, |_| Ok(0));
        assert!(matches!(r, Err(ReadError::Io(_))), "{r:?}");
        // Garbage is refused as soon as it is seen, and a failed read fails.
        let mut a = ReadAhead::default();
        a.stash(b"GET / HTTP/1.1");
        assert!(matches!(
            a.read_frame(&mut scratch, |_| Ok(0)),
            Err(ReadError::Proto(_))
        ));
        let mut a = ReadAhead::default();
        let r = a.read_frame(&mut scratch, |_| Err(io::ErrorKind::ConnectionReset.into()));
        assert!(matches!(r, Err(ReadError::Io(_))), "{r:?}");
    }

    #[test]
    fn a_read_takes_at_most_ahead_and_an_emptied_buffer_is_let_go() {
        let mut a = ReadAhead::default();
        let mut scratch = vec![0u8; 3 * AHEAD];
        let n = a.fill(&mut scratch, |b| Ok(b.len())).unwrap();
        assert_eq!((n, a.bytes().len()), (AHEAD, AHEAD));
        a.consume(AHEAD - 1);
        assert!(!a.is_empty());
        a.consume(1);
        assert!(a.is_empty());
        assert_eq!(a.bytes.capacity(), 0);
        // A small buffer is kept for the next frames, up to KEEP bytes.
        a.stash(&[1; 100]);
        a.consume(100);
        assert!(a.bytes.capacity() >= 100);
        let mut edge = ReadAhead::default();
        edge.stash(&[1; KEEP]);
        assert_eq!(edge.bytes.capacity(), KEEP);
        edge.consume(KEEP);
        assert_eq!(edge.bytes.capacity(), KEEP);
        // A scratch smaller than AHEAD bounds the read.
        let mut small = [0u8; 10];
        assert_eq!(a.fill(&mut small, |b| Ok(b.len())).unwrap(), 10);
    }

    #[test]
    fn a_frame_larger_than_allowed_here_is_refused_on_its_header() {
        let f = ack(4);
        let len = f.len() - crate::protocol::proto::HEADER_LEN;
        let mut scratch = [0u8; 64];
        // Exactly the limit passes; one byte under it refuses on the
        // header alone, before the payload came.
        let mut a = ReadAhead::default();
        let mut s = Chunks([f.clone()].into(), 0);
        let m = a
            .read_frame_within(&mut scratch, len, |b| s.recv(b))
            .unwrap();
        assert!(m.is_some());
        let mut a = ReadAhead::default();
        let mut s = Chunks([f[..crate::protocol::proto::HEADER_LEN].to_vec()].into(), 0);
        let r = a.read_frame_within(&mut scratch, len - 1, |b| s.recv(b));
        assert!(
            matches!(&r, Err(ReadError::Proto(crate::protocol::proto::ProtoError::OversizedHere { len: l, max })) if *l == len && *max == len - 1),
            "{r:?}"
        );
        // A header cut short waits.
        let mut a = ReadAhead::default();
        let mut s = Chunks([f[..3].to_vec()].into(), 0);
        assert!(
            a.read_frame_within(&mut scratch, 1, |b| s.recv(b))
                .unwrap()
                .is_none()
        );
    }
}
