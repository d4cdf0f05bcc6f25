//! Frame layout (all integers big-endian):
//!
//! ```text
//! offset 0  4 bytes   frameLength: bytes that follow this field (4 + header + body)
//! offset 4  4 bytes   high byte: serialize type (0 JSON, 1 ROCKETMQ); low 24 bits: header length
//! offset 8  header    JSON text or ROCKETMQ binary header
//! ...       body      whatever remains of the frame
//! ```

use bytes::{Buf, BufMut, BytesMut};

use crate::command::{Command, Encoding};
use crate::frame_error::FrameError;
use crate::{binary_header, json_header};

/// Largest whole frame (length field included) that we accept or produce. It matches the Java
/// decoder's default `frameMaxLength`, so anything we send is also accepted by Java peers.
pub const FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Length field plus the serialize-type/header-length word.
const FRAME_PREFIX_BYTES: usize = 8;
/// The header length is the low 24 bits of the second word.
const HEADER_BYTES_MAX: usize = 0x00FF_FFFF;

const SERIALIZE_JSON: u8 = 0;
const SERIALIZE_ROCKETMQ: u8 = 1;

/// Decode one frame from the front of `buf`. Ok(None) = need more bytes (buf untouched);
/// Ok(Some(cmd)) = the frame's bytes were removed from buf; Err = the stream is unusable.
/// Checks the 4-byte length against FRAME_BYTES_MAX before reserving anything, so a hostile
/// length never allocates. Never panics on any input.
pub fn decode_frame(buf: &mut BytesMut) -> Result<Option<Command>, FrameError> {
    let Some(length_field) = buf.get(..4) else {
        return Ok(None);
    };
    let frame_length = i32::from_be_bytes([
        length_field[0],
        length_field[1],
        length_field[2],
        length_field[3],
    ]);
    // The header-length word is part of frameLength, so anything below 4 cannot be a frame.
    let after_length = match usize::try_from(frame_length) {
        Ok(n) if n >= 4 => n,
        _ => return Err(FrameError::TooSmall(i64::from(frame_length))),
    };
    let frame_bytes = after_length + 4;
    if frame_bytes > FRAME_BYTES_MAX {
        return Err(FrameError::TooLarge {
            frame_bytes,
            limit_bytes: FRAME_BYTES_MAX,
        });
    }

    // Validate the second word as soon as it is here, so garbage is refused without waiting
    // for (up to 16 MiB of) body bytes that may never come.
    if let Some(word) = buf.get(4..FRAME_PREFIX_BYTES) {
        let serialize_type = word[0];
        let header_bytes =
            usize::from(word[1]) << 16 | usize::from(word[2]) << 8 | usize::from(word[3]);
        if serialize_type != SERIALIZE_JSON && serialize_type != SERIALIZE_ROCKETMQ {
            return Err(FrameError::UnknownEncoding(serialize_type));
        }
        if header_bytes > after_length - 4 {
            return Err(FrameError::HeaderOverrun {
                header_bytes,
                frame_bytes,
            });
        }
    }

    if buf.len() < frame_bytes {
        // Room for the rest of the frame, but no more than the bytes already here: a prefix
        // that announces 16 MiB must not make the reader hold 16 MiB before they come. The
        // room doubles with what arrives, so a large frame is read with few reallocations
        // all the same.
        let rest = frame_bytes - buf.len();
        buf.reserve(rest.min(buf.len()));
        return Ok(None);
    }

    let mut frame = buf.split_to(frame_bytes).freeze();
    frame.advance(4);
    let word = frame.get_u32();
    let serialize_type = (word >> 24) as u8;
    let header_bytes = (word & HEADER_BYTES_MAX as u32) as usize;
    let header = frame.split_to(header_bytes);
    let body = frame;
    let mut cmd = match serialize_type {
        SERIALIZE_JSON => json_header::decode(&header)?,
        _ => binary_header::decode(&header)?,
    };
    cmd.body = body;
    Ok(Some(cmd))
}

/// Append the encoded frame to `out` in `cmd.encoding`. Err(TooLarge) if over FRAME_BYTES_MAX.
/// On error `out` is left as it was.
pub fn encode_frame(cmd: &Command, out: &mut BytesMut) -> Result<(), FrameError> {
    encode_frame_head(cmd, out)?;
    out.extend_from_slice(&cmd.body);
    Ok(())
}

/// `encode_frame` without the body: the length prefix (which counts the body) and the header.
/// A writer sends `cmd.body` right after, from where it already is, instead of copying it.
pub fn encode_frame_head(cmd: &Command, out: &mut BytesMut) -> Result<(), FrameError> {
    encode_frame_head_for(cmd, cmd.body.len(), out)
}

/// `encode_frame_head` for a body of `body_bytes` that the writer sends from elsewhere (from
/// files, with `cmd.body` among them).
pub fn encode_frame_head_for(
    cmd: &Command,
    body_bytes: usize,
    out: &mut BytesMut,
) -> Result<(), FrameError> {
    let start = out.len();
    // Reserve the prefix now and patch it once the header length is known, so the header is
    // written straight into `out` instead of into a temporary buffer.
    out.put_bytes(0, FRAME_PREFIX_BYTES);
    let serialize_type = match cmd.encoding {
        Encoding::Json => {
            json_header::encode(cmd, out);
            SERIALIZE_JSON
        }
        Encoding::RocketMq => {
            if let Err(err) = binary_header::encode(cmd, out) {
                out.truncate(start);
                return Err(err);
            }
            SERIALIZE_ROCKETMQ
        }
    };
    let header_bytes = out.len() - start - FRAME_PREFIX_BYTES;
    let frame_bytes = FRAME_PREFIX_BYTES + header_bytes + body_bytes;
    if frame_bytes > FRAME_BYTES_MAX {
        out.truncate(start);
        return Err(FrameError::TooLarge {
            frame_bytes,
            limit_bytes: FRAME_BYTES_MAX,
        });
    }
    // Both casts are exact: frame_bytes <= 16 MiB, which also keeps header_bytes < 2^24.
    let frame_length = (frame_bytes - 4) as u32;
    let word = u32::from(serialize_type) << 24 | header_bytes as u32;
    out[start..start + 4].copy_from_slice(&frame_length.to_be_bytes());
    out[start + 4..start + 8].copy_from_slice(&word.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::ExtFields;

    #[test]
    fn hostile_length_is_refused_before_allocating() {
        let mut buf = BytesMut::from(&[0x7f, 0xff, 0xff, 0xff][..]);
        let capacity_before = buf.capacity();
        assert!(matches!(
            decode_frame(&mut buf),
            Err(FrameError::TooLarge { .. })
        ));
        assert_eq!(buf.capacity(), capacity_before);
    }

    /// Eight bytes that announce a frame just under the limit reserve room for what arrived,
    /// not for the frame: many such prefixes must not hold 16 MiB each.
    #[test]
    fn a_large_frame_is_given_room_as_its_bytes_arrive() {
        let announced = (FRAME_BYTES_MAX - 4) as u32;
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&announced.to_be_bytes());
        buf.extend_from_slice(&[SERIALIZE_JSON, 0, 0, 2]);
        assert_eq!(decode_frame(&mut buf), Ok(None));
        assert!(buf.capacity() <= 128 * 1024, "{} reserved", buf.capacity());
        // With half the frame here, the room for the rest is at most as much again.
        buf.resize(FRAME_BYTES_MAX / 2, b' ');
        assert_eq!(decode_frame(&mut buf), Ok(None));
        assert!(buf.capacity() <= FRAME_BYTES_MAX + 64 * 1024);
    }

    #[test]
    fn negative_and_tiny_lengths_are_too_small() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        assert_eq!(decode_frame(&mut buf), Err(FrameError::TooSmall(-1)));
        let mut buf = BytesMut::from(&[0, 0, 0, 3][..]);
        assert_eq!(decode_frame(&mut buf), Err(FrameError::TooSmall(3)));
    }

    #[test]
    fn unknown_serialize_type_is_refused() {
        let mut buf = BytesMut::from(&[0, 0, 0, 4, 2, 0, 0, 0][..]);
        assert_eq!(decode_frame(&mut buf), Err(FrameError::UnknownEncoding(2)));
    }

    #[test]
    fn header_longer_than_frame_is_refused() {
        let mut buf = BytesMut::from(&[0, 0, 0, 6, 1, 0, 0, 3][..]);
        assert_eq!(
            decode_frame(&mut buf),
            Err(FrameError::HeaderOverrun {
                header_bytes: 3,
                frame_bytes: 10
            })
        );
    }

    #[test]
    fn oversized_body_is_refused_on_encode() {
        let cmd = Command::request(10, Encoding::RocketMq).with_body(vec![0u8; FRAME_BYTES_MAX]);
        let mut out = BytesMut::from(&b"keep"[..]);
        assert!(matches!(
            encode_frame(&cmd, &mut out),
            Err(FrameError::TooLarge { .. })
        ));
        assert_eq!(&out[..], b"keep");
    }

    #[test]
    fn spec_example_route_request_encodes_exactly() {
        let cmd = Command::request(105, Encoding::RocketMq)
            .with_opaque(1)
            .with_ext(ExtFields::new().with("topic", "T"));
        let mut out = BytesMut::new();
        encode_frame(&cmd, &mut out).unwrap();
        let mut expected = vec![0, 0, 0, 0x25, 1, 0, 0, 0x21, 0, 0x69, 0, 0x01, 0xDF];
        expected.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0C]);
        expected.extend_from_slice(&[0, 5]);
        expected.extend_from_slice(b"topic");
        expected.extend_from_slice(&[0, 0, 0, 1]);
        expected.extend_from_slice(b"T");
        assert_eq!(&out[..], &expected[..]);
    }
}
