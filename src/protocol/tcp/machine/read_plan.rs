//! How much a connection reads at a time: what the plan still expects, the
//! room left for a frame in progress, and the bytes it may skip without
//! looking at them (`--verify connection`). Kept apart from the machine so
//! the read sizes, which decide that the peer's final report is never
//! consumed as data, are read in one place.

use super::*;

impl Conn {
    /// How many bytes to read now, at most (0: do not read).
    pub fn want_read(&self) -> usize {
        match &self.phase {
            Phase::Data => {
                if self.recv_left == 0 {
                    return 0;
                }
                if self.ending_in {
                    return proto::frame_remaining(&self.tail);
                }
                let held = self.head.len() as u64;
                let mut n = (self.recv_left - held).min(self.buffer as u64);
                if let Some(b) = &self.bursts {
                    // A read never spans two bursts, so each is timed alone.
                    let size = b.spec.size.max(1);
                    let end = (self.burst_at * size + size).min(self.transfer);
                    n = n.min(end.saturating_sub(self.received + held));
                }
                if self.chunk > 0 {
                    // A read never spans a chunk's start, which is looked at
                    // first; and gets at least the bytes that decide it.
                    n = n.min(self.chunk - self.received % self.chunk - held);
                    if self.received.is_multiple_of(self.chunk) {
                        let k = (HEADER_LEN as u64).min(self.recv_left);
                        n = n.max(k.saturating_sub(held));
                    }
                }
                n as usize
            }
            Phase::Final {
                inbuf, peer: None, ..
            } => proto::frame_remaining(inbuf),
            _ => 0,
        }
    }

    /// How many bytes one read may take now: what [`Conn::want_read`]
    /// says, except that with count-only verification (the I/O layer
    /// drops data unread, [`Conn::skippable`]) a read at a chunk's start
    /// takes only the bytes that tell data from the end marker, and the
    /// rest of the chunk is dropped. (Reads of the whole buffer across
    /// chunk starts were measured and dropped: with verification at 8
    /// connections they cost 0.63x the goodput.)
    pub fn read_room(&self) -> usize {
        let want = self.want_read();
        if !self.verify
            && self.bursts.is_none()
            && self.chunk > 0
            && matches!(self.phase, Phase::Data)
            && !self.ending_in
            && self.received.is_multiple_of(self.chunk)
        {
            let k = (HEADER_LEN as u64).min(self.recv_left) as usize;
            return want.min(k.saturating_sub(self.head.len()).max(1));
        }
        want
    }

    /// How many of the next bytes may be dropped unread (`MSG_TRUNC`): with
    /// count-only verification, data that is not at a chunk's start (whose
    /// first bytes tell data from the end marker) nor timed burst by burst.
    /// 0 when the bytes must be read.
    pub fn skippable(&self) -> usize {
        let plain = !self.verify
            && self.bursts.is_none()
            && matches!(self.phase, Phase::Data)
            && !self.ending_in
            && self.head.is_empty();
        if !plain || (self.chunk > 0 && self.received.is_multiple_of(self.chunk)) {
            return 0;
        }
        self.want_read()
    }

    /// `n` bytes (no more than [`Conn::skippable`] said) were dropped
    /// unread: counted as received.
    pub fn on_skipped(&mut self, n: usize) {
        let n = (n as u64).min(self.skippable() as u64);
        self.received += n;
        self.recv_left -= n;
        self.advance();
    }
}
