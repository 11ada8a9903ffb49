//! Bytes waiting to go out on a non-blocking stream: a frame or a few, written
//! as the socket takes them. A connection's small messages (its hello or
//! acknowledgement, a short request or reply, its final report) are gathered
//! here so that one write, and so one segment, carries them: on loopback each
//! write costs a trip through the peer's receive path, which is most of what
//! a short connection costs.

use std::io::{self, Write};

/// The largest buffer kept once all is written: room for a few frames (a
/// report is a few hundred bytes), not for gathered data.
const KEEP: usize = 512;

/// Bytes to write and how many are out.
#[derive(Debug)]
pub struct Out {
    bytes: Vec<u8>,
    at: usize,
}

impl Out {
    /// `bytes`, none written yet.
    pub fn new(bytes: Vec<u8>) -> Out {
        Out { bytes, at: 0 }
    }

    /// Bytes not yet written.
    pub fn pending(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Whether everything is written.
    pub fn is_empty(&self) -> bool {
        self.pending() == 0
    }

    /// Adds `b` behind what is still to go.
    pub fn push(&mut self, b: &[u8]) {
        if self.is_empty() {
            self.bytes.clear();
            self.at = 0;
        }
        self.bytes.extend_from_slice(b);
    }

    /// Drops what is still to go (the socket failed).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.at = 0;
    }

    /// Writes what the socket takes: Ok(true) once all is out, Ok(false)
    /// when it would block; a socket that takes nothing is an error.
    pub fn flush<S>(&mut self, s: &S) -> io::Result<bool>
    where
        for<'a> &'a S: Write,
    {
        let mut w = s;
        self.flush_with(|b| w.write(b))
    }

    /// [`Out::flush`] through `write`, which takes the bytes still to go
    /// and says how many it took.
    pub fn flush_with(
        &mut self,
        mut write: impl FnMut(&[u8]) -> io::Result<usize>,
    ) -> io::Result<bool> {
        let r = self.write_all_with(&mut write);
        if matches!(r, Ok(true)) && self.bytes.capacity() > KEEP {
            // A held connection keeps no gathered data's buffer.
            self.clear();
            self.bytes = Vec::new();
        }
        r
    }

    fn write_all_with(
        &mut self,
        write: &mut impl FnMut(&[u8]) -> io::Result<usize>,
    ) -> io::Result<bool> {
        while self.at < self.bytes.len() {
            match write(&self.bytes[self.at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A sink that takes at most `room` bytes per call, then would block.
    struct Sink(RefCell<(Vec<u8>, Vec<usize>)>);
    impl Write for &Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let mut s = self.0.borrow_mut();
            let Some(room) = s.1.pop() else {
                return Err(io::ErrorKind::WouldBlock.into());
            };
            let n = room.min(b.len());
            s.0.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_as_the_socket_takes_and_refuses_a_socket_that_takes_nothing() {
        let sink = Sink(RefCell::new((Vec::new(), vec![5, 3])));
        let mut out = Out::new((0u8..10).collect());
        assert!(!out.flush(&sink).unwrap());
        assert_eq!(sink.0.borrow().0, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        sink.0.borrow_mut().1 = vec![100];
        assert!(out.flush(&sink).unwrap());
        assert_eq!(sink.0.borrow().0, (0u8..10).collect::<Vec<_>>());
        let stuck = Sink(RefCell::new((Vec::new(), vec![0])));
        let e = Out::new(vec![1]).flush(&stuck).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WriteZero);
    }

    #[test]
    fn pushed_bytes_go_behind_what_is_still_to_go() {
        let sink = Sink(RefCell::new((Vec::new(), vec![2])));
        let mut out = Out::new(vec![1, 2, 3]);
        out.push(&[4]);
        assert_eq!(out.pending(), 4);
        assert!(!out.flush(&sink).unwrap());
        assert_eq!(out.pending(), 2);
        out.push(&[5]);
        sink.0.borrow_mut().1 = vec![100];
        assert!(out.flush(&sink).unwrap());
        assert!(out.is_empty());
        assert_eq!(sink.0.borrow().0, vec![1, 2, 3, 4, 5]);
        // Once all is out, the next push starts afresh.
        out.push(&[6]);
        assert_eq!((out.pending(), out.bytes.len()), (1, 1));
        out.clear();
        assert!(out.is_empty());
        // A buffer grown past KEEP is let go once it is written; a small
        // one is kept for the next frames.
        sink.0.borrow_mut().1 = vec![10_000, 10_000];
        out.push(&[7; KEEP + 1]);
        assert!(out.flush(&sink).unwrap());
        assert_eq!(out.bytes.capacity(), 0);
        out.push(&[8; KEEP]);
        let cap = out.bytes.capacity();
        assert!(out.flush(&sink).unwrap());
        assert_eq!(out.bytes.capacity(), cap);
    }
}
