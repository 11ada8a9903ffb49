//! A stream whose every read and write waits at most a per-operation timeout
//! and never past an absolute deadline. Socket timeouts restart on every
//! call, so a peer sending one byte a second would hold a plain timeout open
//! forever; this wrapper turns them into a deadline.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// `stream` with a per-call timeout and an absolute deadline.
pub struct Timed<'a> {
    stream: &'a TcpStream,
    per_call: Duration,
    deadline: Instant,
    /// The timeout last set on the socket (to skip the syscall when it is unchanged).
    armed: Option<Duration>,
}

impl<'a> Timed<'a> {
    /// Wraps `stream`; each call waits at most `per_call`, none past `deadline`.
    pub fn new(stream: &'a TcpStream, per_call: Duration, deadline: Instant) -> Self {
        Timed {
            stream,
            per_call,
            deadline,
            armed: None,
        }
    }

    /// Sets the socket's timeouts for the next call; fails once the deadline has passed.
    fn arm(&mut self) -> io::Result<()> {
        let left = self
            .deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "deadline passed"))?;
        let t = left.min(self.per_call);
        // Near the deadline the timeout shrinks with every call; before it, one syscall pair.
        if self.armed != Some(t) {
            self.stream.set_read_timeout(Some(t))?;
            self.stream.set_write_timeout(Some(t))?;
            self.armed = Some(t);
        }
        Ok(())
    }
}

impl Read for Timed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        let mut s = self.stream;
        s.read(buf)
    }
}

impl Write for Timed<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        let mut s = self.stream;
        s.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_trickle_cannot_outlast_the_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let writer = std::thread::spawn(move || {
            // One byte every 50 ms: each read succeeds well within its own timeout.
            for _ in 0..40 {
                if c.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let t0 = Instant::now();
        let mut t = Timed::new(&s, Duration::from_secs(10), t0 + Duration::from_millis(300));
        let mut got = 0;
        let err = loop {
            match t.read(&mut [0u8; 16]) {
                Ok(n) => got += n,
                Err(e) => break e,
            }
        };
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{err}"
        );
        assert!(got >= 1, "nothing read before the deadline");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        drop(s);
        writer.join().unwrap();
    }
}
