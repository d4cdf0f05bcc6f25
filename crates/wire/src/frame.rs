//! Frame layout (all integers big-endian):
//!
//! ```text
//! offset 0  4 bytes   frameLength: bytes that follow this field (4 + header + body)
//! offset 4  4 bytes   high byte: serialize type (0 JSON, 1 ROCKETMQ); low 24 bits: header length
//! offset 8  header    JSON text or ROCKETMQ binary header
//! ...       body      whatever remains of the frame
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub use crate::ext::{ExtFields, ExtText};
use crate::{binary_header, json_header};

/// Largest whole frame (length field included) that we accept or produce. It matches the Java
/// decoder's default `frameMaxLength`, so anything we send is also accepted by Java peers.
pub const FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;

/// `MQVersion.Version.V5_3_3` ordinal. Clients record the `version` of heartbeat responses as
/// the broker version and refuse SQL92 pulls below 232, so a real 5.x ordinal goes here.
pub const SERVER_VERSION: i32 = 479;

/// Bit 0 of `flag`: the command is a response.
pub const FLAG_RESPONSE: i32 = 1;
/// Bit 1 of `flag`: the request expects no response.
pub const FLAG_ONEWAY: i32 = 2;

/// Length field plus the serialize-type/header-length word.
const FRAME_PREFIX_BYTES: usize = 8;
/// The header length is the low 24 bits of the second word.
const HEADER_BYTES_MAX: usize = 0x00FF_FFFF;

const SERIALIZE_JSON: u8 = 0;
const SERIALIZE_ROCKETMQ: u8 = 1;

/// How a command's header is (or will be) serialized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    Json,
    RocketMq,
}

/// The sender's `LanguageCode`. The binary header carries the raw byte, JSON carries the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LanguageCode(pub u8);

/// Names in ordinal order, as Java's `LanguageCode` enum declares them.
const LANGUAGE_NAMES: [&str; 14] = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
    "OMS", "RUST", "NODE_JS",
];

impl LanguageCode {
    pub const JAVA: LanguageCode = LanguageCode(0);
    pub const OTHER: LanguageCode = LanguageCode(7);
    pub const RUST: LanguageCode = LanguageCode(12);

    /// The Java enum name. Codes Java does not know are reported as `OTHER`, the closest
    /// name a JSON peer can still parse.
    pub fn name(self) -> &'static str {
        LANGUAGE_NAMES
            .get(usize::from(self.0))
            .copied()
            .unwrap_or("OTHER")
    }

    pub fn from_name(name: &str) -> Option<LanguageCode> {
        LANGUAGE_NAMES
            .iter()
            .position(|known| *known == name)
            .and_then(|index| u8::try_from(index).ok())
            .map(LanguageCode)
    }
}

/// One RemotingCommand: a request or a response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub code: i32,
    pub language: LanguageCode,
    pub version: i32,
    pub opaque: i32,
    pub flag: i32,
    pub remark: Option<String>,
    /// `None` means extFields is absent, which is not the same as `{}` for Java peers.
    pub ext: Option<ExtFields>,
    pub body: Bytes,
    pub encoding: Encoding,
}

impl Command {
    /// A request with language JAVA, version SERVER_VERSION, flag 0, opaque 0, empty body.
    pub fn request(code: i32, encoding: Encoding) -> Command {
        Command {
            code,
            language: LanguageCode::JAVA,
            version: SERVER_VERSION,
            opaque: 0,
            flag: 0,
            remark: None,
            ext: None,
            body: Bytes::new(),
            encoding,
        }
    }

    /// The response to `self`: same opaque and encoding, flag FLAG_RESPONSE, language JAVA,
    /// version SERVER_VERSION, ext None, empty body.
    pub fn response_to(&self, code: i32) -> Command {
        Command {
            code,
            language: LanguageCode::JAVA,
            version: SERVER_VERSION,
            opaque: self.opaque,
            flag: FLAG_RESPONSE,
            remark: None,
            ext: None,
            body: Bytes::new(),
            encoding: self.encoding,
        }
    }

    pub fn with_ext(mut self, ext: ExtFields) -> Command {
        self.ext = Some(ext);
        self
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Command {
        self.body = body.into();
        self
    }

    pub fn with_remark(mut self, remark: impl Into<String>) -> Command {
        self.remark = Some(remark.into());
        self
    }

    pub fn with_opaque(mut self, opaque: i32) -> Command {
        self.opaque = opaque;
        self
    }

    pub fn oneway(mut self) -> Command {
        self.flag |= FLAG_ONEWAY;
        self
    }

    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    pub fn ext_get(&self, key: &str) -> Option<&str> {
        self.ext.as_ref().and_then(|ext| ext.get(key))
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {frame_bytes} bytes exceeds the limit of {limit_bytes}")]
    TooLarge {
        frame_bytes: usize,
        limit_bytes: usize,
    },
    #[error("frame length {0} is too small to hold a header")]
    TooSmall(i64),
    #[error("header length {header_bytes} does not fit in frame of {frame_bytes} bytes")]
    HeaderOverrun {
        header_bytes: usize,
        frame_bytes: usize,
    },
    #[error("unknown serialize type {0}")]
    UnknownEncoding(u8),
    #[error("bad JSON header: {0}")]
    BadJsonHeader(String),
    #[error("bad binary header: {0}")]
    BadBinaryHeader(String),
}

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
        // Safe to reserve: frame_bytes was checked against FRAME_BYTES_MAX above.
        buf.reserve(frame_bytes - buf.len());
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
    let frame_bytes = FRAME_PREFIX_BYTES + header_bytes + cmd.body.len();
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

    #[test]
    fn language_names_round_trip() {
        for code in 0..14u8 {
            let language = LanguageCode(code);
            assert_eq!(LanguageCode::from_name(language.name()), Some(language));
        }
        assert_eq!(LanguageCode::RUST.name(), "RUST");
        assert_eq!(LanguageCode(200).name(), "OTHER");
        assert_eq!(LanguageCode::from_name("COBOL"), None);
    }

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

    #[test]
    fn builders_set_flags() {
        let request = Command::request(15, Encoding::Json).with_opaque(9).oneway();
        assert!(request.is_oneway());
        assert!(!request.is_response());
        let response = request.response_to(0);
        assert!(response.is_response());
        assert_eq!(response.opaque, 9);
        assert_eq!(response.encoding, Encoding::Json);
    }
}
