//! The send request written straight into a frame buffer: SEND_MESSAGE_V2 (310) and
//! SEND_BATCH_MESSAGE (320) with the ROCKETMQ binary header.
//!
//! Building a `Command` costs a map and some twenty strings per message. A benchmark sends
//! tens of thousands of messages a second, so the send path writes the same bytes
//! `quiver_wire::encode_frame` would (the test below compares them) from borrowed values.
//! Layouts: frame and binary header as in `quiver_wire::frame`, batch body as in
//! `quiver_wire::batch`.

use bytes::{BufMut, BytesMut};
use quiver_wire::message::{NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};
use quiver_wire::{LanguageCode, FLAG_ONEWAY, FRAME_BYTES_MAX, SERVER_VERSION};

/// Length word + serialize-type/header-length word.
const FRAME_PREFIX_BYTES: usize = 8;
/// Serialize type of the binary header, in the top byte of the second word.
const SERIALIZE_ROCKETMQ: u32 = 1;
/// Inner record of a batch body without its body and properties bytes.
const BATCH_ENTRY_FIXED_BYTES: usize = 22;
/// Properties and the batch entry property length are signed shorts on disk.
pub const PROPERTIES_BYTES_MAX: usize = i16::MAX as usize;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SendFrameError {
    #[error("frame of {frame_bytes} bytes exceeds the limit of {limit_bytes}")]
    TooLarge {
        frame_bytes: usize,
        limit_bytes: usize,
    },
    #[error("properties of {0} bytes exceed 32767")]
    PropertiesTooLong(usize),
}

/// The per-send header fields (V2 keys `a` to `m`; `l` is only for retries and left out).
#[derive(Clone, Copy, Debug)]
pub struct SendFields<'a> {
    pub producer_group: &'a str,
    pub topic: &'a str,
    pub default_topic: &'a str,
    pub default_topic_queue_nums: i32,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub flag: i32,
    /// Header properties as pairs; pairs with an empty name or value are left out.
    pub properties: &'a [(&'a str, &'a str)],
    pub batch: bool,
    /// Sets the oneway bit: the broker sends no response.
    pub oneway: bool,
}

/// Decimal digits of `value` in a stack buffer, as Java's `toString` writes them.
struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    fn new(value: i64) -> Decimal {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        let mut rest = value.unsigned_abs();
        loop {
            start -= 1;
            digits[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        if value < 0 {
            start -= 1;
            digits[start] = b'-';
        }
        Decimal { digits, start }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

/// Bytes of the encoded properties string.
pub fn properties_len(pairs: &[(&str, &str)]) -> usize {
    pairs
        .iter()
        .filter(|(name, value)| !name.is_empty() && !value.is_empty())
        .map(|(name, value)| name.len() + value.len() + 2)
        .sum()
}

fn put_properties(out: &mut BytesMut, pairs: &[(&str, &str)]) {
    for (name, value) in pairs {
        if name.is_empty() || value.is_empty() {
            continue;
        }
        out.put_slice(name.as_bytes());
        out.put_u8(NAME_VALUE_SEPARATOR);
        out.put_slice(value.as_bytes());
        out.put_u8(PROPERTY_SEPARATOR);
    }
}

fn put_entry(out: &mut BytesMut, key: &str, value: &[u8]) {
    // Keys are one letter and values far below 2^31 bytes (the frame limit is 16 MiB).
    out.put_i16(key.len() as i16);
    out.put_slice(key.as_bytes());
    out.put_i32(value.len() as i32);
    out.put_slice(value);
}

fn put_property_entry(out: &mut BytesMut, key: &str, pairs: &[(&str, &str)], length: usize) {
    out.put_i16(key.len() as i16);
    out.put_slice(key.as_bytes());
    out.put_i32(length as i32);
    put_properties(out, pairs);
}

/// Appends a whole send request frame: header from `fields`, body written by `body`.
/// On error `out` is left as it was.
pub fn encode_send(
    out: &mut BytesMut,
    code: i32,
    opaque: i32,
    fields: &SendFields<'_>,
    body: impl FnOnce(&mut BytesMut),
) -> Result<(), SendFrameError> {
    let properties_bytes = properties_len(fields.properties);
    if properties_bytes > PROPERTIES_BYTES_MAX {
        return Err(SendFrameError::PropertiesTooLong(properties_bytes));
    }
    let start = out.len();
    out.put_bytes(0, FRAME_PREFIX_BYTES);
    // Truncation to 16 bits is the format's; send codes fit.
    out.put_i16(code as i16);
    out.put_u8(LanguageCode::JAVA.0);
    out.put_i16(SERVER_VERSION as i16);
    out.put_i32(opaque);
    out.put_i32(if fields.oneway { FLAG_ONEWAY } else { 0 });
    out.put_i32(0); // remark: none
    let ext_length_at = out.len();
    out.put_i32(0);
    // Keys in the order a BTreeMap of the same fields iterates them.
    put_entry(out, "a", fields.producer_group.as_bytes());
    put_entry(out, "b", fields.topic.as_bytes());
    put_entry(out, "c", fields.default_topic.as_bytes());
    put_entry(
        out,
        "d",
        Decimal::new(fields.default_topic_queue_nums.into()).as_bytes(),
    );
    put_entry(out, "e", Decimal::new(fields.queue_id.into()).as_bytes());
    put_entry(out, "f", Decimal::new(fields.sys_flag.into()).as_bytes());
    put_entry(out, "g", Decimal::new(fields.born_timestamp).as_bytes());
    put_entry(out, "h", Decimal::new(fields.flag.into()).as_bytes());
    if properties_bytes > 0 {
        put_property_entry(out, "i", fields.properties, properties_bytes);
    }
    put_entry(out, "j", b"0");
    put_entry(out, "k", b"false");
    put_entry(out, "m", if fields.batch { b"true" } else { b"false" });
    let header_bytes = out.len() - start - FRAME_PREFIX_BYTES;
    let ext_bytes = out.len() - ext_length_at - 4;
    body(out);
    let frame_bytes = out.len() - start;
    if frame_bytes > FRAME_BYTES_MAX {
        out.truncate(start);
        return Err(SendFrameError::TooLarge {
            frame_bytes,
            limit_bytes: FRAME_BYTES_MAX,
        });
    }
    // All casts are exact: frame_bytes <= 16 MiB, so every part is below 2^24.
    out[ext_length_at..ext_length_at + 4].copy_from_slice(&(ext_bytes as u32).to_be_bytes());
    let word = SERIALIZE_ROCKETMQ << 24 | header_bytes as u32;
    out[start..start + 4].copy_from_slice(&((frame_bytes - 4) as u32).to_be_bytes());
    out[start + 4..start + 8].copy_from_slice(&word.to_be_bytes());
    Ok(())
}

/// Appends one inner record of a SEND_BATCH_MESSAGE body (magic and CRC written as 0, as the
/// Java client does). The caller has checked the properties length and the frame size.
pub fn put_batch_entry(out: &mut BytesMut, flag: i32, body: &[u8], properties: &[(&str, &str)]) {
    let properties_bytes = properties_len(properties);
    let total = BATCH_ENTRY_FIXED_BYTES + body.len() + properties_bytes;
    out.put_i32(total as i32);
    out.put_i32(0);
    out.put_i32(0);
    out.put_i32(flag);
    out.put_i32(body.len() as i32);
    out.put_slice(body);
    out.put_i16(properties_bytes as i16);
    put_properties(out, properties);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn batch_entry_len(body_bytes: usize, properties: &[(&str, &str)]) -> usize {
        BATCH_ENTRY_FIXED_BYTES + body_bytes + properties_len(properties)
    }
    use quiver_wire::code::request_code;
    use quiver_wire::{
        decode_batch, encode_batch, encode_frame, encode_properties, BatchEntry, Command, Encoding,
        SendMessageHeader,
    };

    fn header(properties: &str, batch: bool) -> SendMessageHeader {
        SendMessageHeader {
            producer_group: "benchmark_producer".into(),
            topic: "BenchmarkTest".into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 13,
            sys_flag: 0,
            born_timestamp: 1_795_293_274_693,
            flag: -7,
            properties: properties.into(),
            reconsume_times: 0,
            unit_mode: false,
            max_reconsume_times: None,
            batch,
        }
    }

    #[test]
    fn single_send_matches_the_codec_byte_for_byte() {
        let pairs = [
            ("UNIQ_KEY", "0A0B"),
            ("WAIT", "true"),
            ("TAGS", "t"),
            ("KEYS", ""),
        ];
        let expected_header = header(&encode_properties(pairs), false);
        let body = Bytes::from_static(b"payload");
        let command = Command::request(request_code::SEND_MESSAGE_V2, Encoding::RocketMq)
            .with_opaque(77)
            .with_ext(expected_header.to_v2())
            .with_body(body.clone());
        let mut expected = BytesMut::new();
        encode_frame(&command, &mut expected).unwrap();

        let fields = SendFields {
            producer_group: "benchmark_producer",
            topic: "BenchmarkTest",
            default_topic: "TBW102",
            default_topic_queue_nums: 4,
            queue_id: 13,
            sys_flag: 0,
            born_timestamp: 1_795_293_274_693,
            flag: -7,
            properties: &pairs,
            batch: false,
            oneway: false,
        };
        let mut out = BytesMut::from(&b"prefix"[..]);
        encode_send(
            &mut out,
            request_code::SEND_MESSAGE_V2,
            77,
            &fields,
            |out| out.extend_from_slice(&body),
        )
        .unwrap();
        assert_eq!(&out[..6], b"prefix");
        assert_eq!(&out[6..], &expected[..]);
    }

    #[test]
    fn batch_body_matches_the_codec() {
        let first = [("UNIQ_KEY", "01"), ("WAIT", "true")];
        let second: [(&str, &str); 0] = [];
        let mut out = BytesMut::new();
        put_batch_entry(&mut out, 0, b"one", &first);
        put_batch_entry(&mut out, 5, b"", &second);
        let entries = vec![
            BatchEntry {
                flag: 0,
                body: Bytes::from_static(b"one"),
                properties: encode_properties(first),
            },
            BatchEntry {
                flag: 5,
                body: Bytes::new(),
                properties: String::new(),
            },
        ];
        assert_eq!(&out[..], &encode_batch(&entries)[..]);
        assert_eq!(decode_batch(&out).unwrap(), entries);
        assert_eq!(
            out.len(),
            batch_entry_len(3, &first) + batch_entry_len(0, &second)
        );
    }

    #[test]
    fn oversized_frames_and_properties_are_refused() {
        let fields = SendFields {
            producer_group: "g",
            topic: "t",
            default_topic: "TBW102",
            default_topic_queue_nums: 4,
            queue_id: 0,
            sys_flag: 0,
            born_timestamp: 0,
            flag: 0,
            properties: &[],
            batch: false,
            oneway: false,
        };
        let mut out = BytesMut::from(&b"keep"[..]);
        let huge = vec![0u8; FRAME_BYTES_MAX];
        let result = encode_send(&mut out, 310, 1, &fields, |out| {
            out.extend_from_slice(&huge)
        });
        assert!(matches!(result, Err(SendFrameError::TooLarge { .. })));
        assert_eq!(&out[..], b"keep");
        let long = "v".repeat(PROPERTIES_BYTES_MAX);
        let pairs = [("KEYS", long.as_str())];
        let fields = SendFields {
            properties: &pairs,
            ..fields
        };
        let result = encode_send(&mut out, 310, 1, &fields, |_| {});
        assert!(matches!(result, Err(SendFrameError::PropertiesTooLong(_))));
    }

    #[test]
    fn decimals_match_to_string() {
        for value in [0, 7, -1, 10, i64::MAX, i64::MIN, 1_795_293_274_693] {
            assert_eq!(Decimal::new(value).as_bytes(), value.to_string().as_bytes());
        }
    }
}
