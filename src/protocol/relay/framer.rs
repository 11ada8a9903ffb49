//! Splits one direction of a relayed TCP connection into netrig control
//! frames and data, free of I/O.
//!
//! The relay impairs data, not the protocol around it: a flipped byte in a
//! control frame would only make the test fail to start, while a flipped data
//! byte is what a test must detect and report at the right offset. So a
//! direction that starts with netrig's magic is parsed frame by frame; the
//! caller looks at each frame and says how many data bytes follow it. A
//! direction that does not start with a frame (iperf3, anything else) is all
//! data.

use crate::protocol::proto::{self, Message, ProtoError};

/// What the caller does after seeing a frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct After {
    /// The frame was changed and must be encoded again.
    pub rewritten: bool,
    /// This many data bytes follow the frame, then frames again.
    pub data: Option<u64>,
}

/// A piece of the stream, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// A whole frame, to forward as it is (possibly re-encoded).
    Frame(Vec<u8>),
    /// Data bytes, to impair.
    Data(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Detect,
    Frames,
    Data(u64),
    AllData,
}

/// The splitter for one direction.
#[derive(Debug, Clone)]
pub struct Framer {
    mode: Mode,
    buf: Vec<u8>,
}

impl Default for Framer {
    fn default() -> Self {
        Framer {
            mode: Mode::Detect,
            buf: Vec::new(),
        }
    }
}

impl Framer {
    /// Whether this direction turned out to be something other than netrig.
    pub fn foreign(&self) -> bool {
        self.mode == Mode::AllData
    }

    /// How many more bytes are data for sure: `Some` while in data (to the
    /// end of the stream for a foreign one), `None` while reading frames.
    pub fn data_left(&self) -> Option<u64> {
        match self.mode {
            Mode::Data(n) => Some(n),
            Mode::AllData => Some(u64::MAX),
            Mode::Detect | Mode::Frames => None,
        }
    }

    /// The capacity of the partial frame it holds, bytes.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Feeds bytes; `on_frame` sees every decoded frame (and may rewrite it).
    pub fn push(
        &mut self,
        mut input: &[u8],
        on_frame: &mut dyn FnMut(&mut Message) -> After,
    ) -> Vec<Piece> {
        let mut out = Vec::new();
        loop {
            match self.mode {
                Mode::AllData => {
                    if !input.is_empty() {
                        out.push(Piece::Data(input.to_vec()));
                    }
                    return out;
                }
                Mode::Data(n) => {
                    if input.is_empty() {
                        return out;
                    }
                    let take = (n.min(input.len() as u64)) as usize;
                    out.push(Piece::Data(input[..take].to_vec()));
                    input = &input[take..];
                    self.mode = if take as u64 == n {
                        Mode::Frames
                    } else {
                        Mode::Data(n - take as u64)
                    };
                }
                Mode::Detect | Mode::Frames => {
                    self.buf.extend_from_slice(input);
                    match proto::decode_frame(&self.buf) {
                        Ok(None) => return out,
                        Ok(Some((mut msg, used))) => {
                            let rest = self.buf.split_off(used);
                            let frame = std::mem::take(&mut self.buf);
                            let after = on_frame(&mut msg);
                            out.push(Piece::Frame(if after.rewritten {
                                proto::encode(&msg)
                            } else {
                                frame
                            }));
                            self.mode = match after.data {
                                Some(n) if n > 0 => Mode::Data(n),
                                _ => Mode::Frames,
                            };
                            // Whatever followed the frame goes round again.
                            return self.continue_with(rest, out, on_frame);
                        }
                        Err(ProtoError::BadMagic(_)) if self.mode == Mode::Detect => {
                            self.mode = Mode::AllData;
                            let all = std::mem::take(&mut self.buf);
                            out.push(Piece::Data(all));
                            return out;
                        }
                        Err(_) => {
                            // Out of step (for example a test stopped early):
                            // pass the rest through as data.
                            self.mode = Mode::AllData;
                            let all = std::mem::take(&mut self.buf);
                            out.push(Piece::Data(all));
                            return out;
                        }
                    }
                }
            }
        }
    }

    fn continue_with(
        &mut self,
        rest: Vec<u8>,
        mut out: Vec<Piece>,
        on_frame: &mut dyn FnMut(&mut Message) -> After,
    ) -> Vec<Piece> {
        if !rest.is_empty() {
            out.extend(self.push(&rest, on_frame));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::proto::encode;

    #[test]
    fn frames_then_data_then_frames() {
        let mut bytes = encode(&Message::Stop);
        bytes.extend_from_slice(&[7u8; 10]);
        bytes.extend(encode(&Message::Goodbye));
        for split in 1..bytes.len() {
            let mut f = Framer::default();
            let mut seen = Vec::new();
            let mut on = |m: &mut Message| {
                seen.push(m.clone());
                After {
                    rewritten: false,
                    data: matches!(m, Message::Stop).then_some(10),
                }
            };
            let mut pieces = f.push(&bytes[..split], &mut on);
            pieces.extend(f.push(&bytes[split..], &mut on));
            let data: Vec<u8> = pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::Data(d) => Some(d.clone()),
                    Piece::Frame(_) => None,
                })
                .flatten()
                .collect();
            assert_eq!(data, vec![7u8; 10], "split {split}");
            assert_eq!(seen, vec![Message::Stop, Message::Goodbye]);
            let joined: Vec<u8> = pieces
                .into_iter()
                .flat_map(|p| match p {
                    Piece::Data(d) | Piece::Frame(d) => d,
                })
                .collect();
            assert_eq!(joined, bytes);
        }
    }

    #[test]
    fn foreign_streams_are_all_data() {
        let mut f = Framer::default();
        let p = f.push(b"GET / HTTP/1.1\r\n", &mut |_| After::default());
        assert!(f.foreign());
        assert_eq!(p, vec![Piece::Data(b"GET / HTTP/1.1\r\n".to_vec())]);
    }

    #[test]
    fn rewritten_frames_are_reencoded() {
        let mut f = Framer::default();
        let id = uuid::Uuid::nil();
        let bytes = encode(&Message::UdpAccept {
            session: id,
            port: 1,
            token: 2,
        });
        let p = f.push(&bytes, &mut |m| {
            if let Message::UdpAccept { port, .. } = m {
                *port = 9;
            }
            After {
                rewritten: true,
                data: None,
            }
        });
        assert_eq!(
            p,
            vec![Piece::Frame(encode(&Message::UdpAccept {
                session: id,
                port: 9,
                token: 2
            }))]
        );
    }
}
