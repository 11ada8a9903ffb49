//! Frames on the wire: a message encoded behind its 8-byte header, a
//! header checked, a payload decoded (JSON, or the fixed layout of
//! [`super::compact`] for the data connection's hello, ack and reports),
//! a whole frame taken from a buffer or read from a stream, and long
//! lists cut into frames that fit. The messages themselves are in `proto.rs`.

use super::*;

/// Encodes a message into one frame.
pub fn encode(msg: &Message) -> Vec<u8> {
    // The payload goes behind the header, whose length is filled in once
    // it is known: one buffer, and no copy (a short connection encodes a
    // frame or two at each end).
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[FRAME_VERSION, 0, 0, 0, 0, 0]);
    // Serializing these plain structs to JSON cannot fail.
    if serde_json::to_writer(&mut out, msg).is_err() {
        out.truncate(HEADER_LEN);
    }
    let len = (out.len() - HEADER_LEN) as u32;
    out[4..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
    out
}

/// Validates a frame header and returns the payload length.
pub fn parse_header(header: &[u8; HEADER_LEN]) -> Result<usize, ProtoError> {
    if header[..2] != MAGIC {
        return Err(ProtoError::BadMagic([header[0], header[1]]));
    }
    if header[2] != FRAME_VERSION {
        return Err(ProtoError::UnsupportedFrameVersion(header[2]));
    }
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(ProtoError::Oversized(len));
    }
    Ok(len)
}

/// Decodes a message payload.
pub fn decode_payload(payload: &[u8]) -> Result<Message, ProtoError> {
    if compact::is_compact(payload) {
        return compact::decode(payload).ok_or_else(|| {
            ProtoError::Malformed(format!(
                "a {}-byte payload in no fixed layout",
                payload.len()
            ))
        });
    }
    if let Some(m) = decode_data_message(payload) {
        return Ok(m);
    }
    serde_json::from_slice(payload).map_err(|e| ProtoError::Malformed(e.to_string()))
}

/// The body of [`Message::DataAck`], for [`decode_data_message`].
#[derive(Deserialize)]
struct DataAckBody {
    connection: Uuid,
}

/// The messages every data connection exchanges (its hello, the
/// acknowledgement, the final reports), decoded straight into their
/// structs when the tag comes first, as [`encode`] writes it. An
/// internally tagged enum is decoded through a buffered copy of the whole
/// object first, which made decoding a third of a short connection's user
/// time at each end. The struct ignores the tag as an unknown field. None
/// leaves the payload to the general decoder, which also words the errors.
pub(super) fn decode_data_message(payload: &[u8]) -> Option<Message> {
    let rest = payload.strip_prefix(br#"{"type":""#)?;
    let tag = &rest[..rest.iter().position(|&b| b == b'"')?];
    match tag {
        b"final" => serde_json::from_slice(payload).ok().map(Message::Final),
        b"data_hello" => serde_json::from_slice(payload).ok().map(Message::DataHello),
        b"data_ack" => serde_json::from_slice::<DataAckBody>(payload)
            .ok()
            .map(|b| Message::DataAck {
                connection: b.connection,
            }),
        _ => None,
    }
}

/// Bytes still needed to complete the first frame in `buf`: reading
/// exactly these never consumes what follows the frame. 0 when the frame is
/// complete or its header is invalid ([`decode_frame`] says which).
pub fn frame_remaining(buf: &[u8]) -> usize {
    let Some(header) = buf.first_chunk::<HEADER_LEN>() else {
        return HEADER_LEN - buf.len();
    };
    parse_header(header).map_or(0, |len| (HEADER_LEN + len).saturating_sub(buf.len()))
}

/// Decodes the first frame in `buf`. Returns `Ok(None)` when more bytes are
/// needed, otherwise the message and how many bytes it used. Garbage is
/// rejected as soon as the bytes seen prove it is garbage.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Message, usize)>, ProtoError> {
    if buf.len() < HEADER_LEN {
        let n = buf.len().min(2);
        if buf[..n] != MAGIC[..n] {
            let mut m = [0u8; 2];
            m[..n].copy_from_slice(&buf[..n]);
            return Err(ProtoError::BadMagic(m));
        }
        return Ok(None);
    }
    let mut header = [0u8; HEADER_LEN];
    header.copy_from_slice(&buf[..HEADER_LEN]);
    let len = parse_header(&header)?;
    let Some(payload) = buf.get(HEADER_LEN..HEADER_LEN + len) else {
        return Ok(None);
    };
    Ok(Some((decode_payload(payload)?, HEADER_LEN + len)))
}

/// Reads exactly one message from a blocking reader.
pub fn read_message(r: &mut impl Read) -> Result<Message, ReadError> {
    let mut header = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Err(ReadError::Eof),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
        // Reject garbage on its first bytes rather than waiting for eight.
        decode_frame(&header[..got])?;
    }
    let len = parse_header(&header)?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(decode_payload(&payload)?)
}

/// Histogram buckets per [`Message::UdpHistogram`] frame (each well under
/// 64 bytes of JSON, so a chunk fits [`MAX_PAYLOAD`]).
pub const HISTOGRAM_CHUNK: usize = 1000;

/// Writes one message as a frame. A message too large for a frame is not
/// sent at all (the peer would reject it): the error says so.
pub fn write_message(w: &mut impl Write, msg: &Message) -> io::Result<()> {
    let frame = encode(msg);
    if frame.len() - HEADER_LEN > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            ProtoError::Oversized(frame.len() - HEADER_LEN),
        ));
    }
    w.write_all(&frame)
}

/// The frames that carry UDP totals: the histogram in chunks when the
/// whole would not fit one frame, then the totals.
pub fn udp_result_frames(mut totals: crate::protocol::udp::track::UdpTotals) -> Vec<Message> {
    let mut out = Vec::new();
    if encoded_payload_len(&Message::UdpResult(totals.clone())) > MAX_PAYLOAD {
        let bins = std::mem::take(&mut totals.histogram);
        out = in_frames(&bins, HISTOGRAM_CHUNK, |bins, _| Message::UdpHistogram {
            bins,
        });
    }
    // A histogram too wide for a frame stays behind: the bucket list above
    // still travels, only an exact merge of this result is lost.
    if encoded_payload_len(&Message::UdpResult(totals.clone())) > MAX_PAYLOAD {
        totals.hdr = None;
    }
    out.push(Message::UdpResult(totals));
    out
}

pub(super) fn encoded_payload_len(m: &Message) -> usize {
    encode(m).len() - HEADER_LEN
}

/// `items` as messages of at most `per` items each, halving any chunk whose
/// frame would pass [`MAX_PAYLOAD`]; `make` gets each chunk and whether it
/// is the last. No items make one empty last message.
pub fn in_frames<T: Clone>(
    items: &[T],
    per: usize,
    make: impl Fn(Vec<T>, bool) -> Message,
) -> Vec<Message> {
    let mut groups: Vec<&[T]> = Vec::new();
    let mut todo: Vec<&[T]> = items.chunks(per.max(1)).rev().collect();
    while let Some(g) = todo.pop() {
        if g.len() > 1 && encoded_payload_len(&make(g.to_vec(), false)) > MAX_PAYLOAD {
            let (a, b) = g.split_at(g.len() / 2);
            todo.push(b);
            todo.push(a);
        } else {
            groups.push(g);
        }
    }
    if groups.is_empty() {
        return vec![make(Vec::new(), true)];
    }
    let n = groups.len();
    groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| make(g.to_vec(), i + 1 == n))
        .collect()
}
