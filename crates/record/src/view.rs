//! `RecordView`: a record parsed in place, for the store, which parses every record it
//! recovers, appends or serves by key and must not allocate to do it.
//!
//! It is stricter than `StoredMessage::decode`, because it judges bytes read back from disk:
//! the slice must be exactly TOTALSIZE long and the properties must end with 0x02, so that a
//! torn tail is told from a whole record. It is also more lenient in what it does not need:
//! it reads no host and so checks no port, and it leaves the properties as bytes.

use crate::hash::{body_crc, tags_code};
use crate::layout::{host_bytes, is_record_magic, sys_flag, Cursor, MAGIC_V1};
use crate::properties::{property, property_byte_pairs, PROPERTY_SEPARATOR};

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

/// The shared cursor with this parser's errors, which name the field that did not fit.
struct FieldReader<'a>(Cursor<'a>);

impl<'a> FieldReader<'a> {
    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], RecordError> {
        let at = self.0.at();
        self.0.take(n).ok_or(RecordError::Truncated {
            field,
            at,
            needed_bytes: n,
            available_bytes: self.0.len() - at,
        })
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], RecordError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, RecordError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, RecordError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, RecordError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    fn length(&mut self, field: &'static str, length: i32) -> Result<&'a [u8], RecordError> {
        if length < 0 {
            return Err(RecordError::NegativeLength { field, length });
        }
        self.take(field, length as usize)
    }
}

impl<'a> RecordView<'a> {
    /// Parses a whole record; `bytes` must be exactly TOTALSIZE long. No input makes it panic.
    pub fn parse(bytes: &'a [u8]) -> Result<RecordView<'a>, RecordError> {
        let mut c = FieldReader(Cursor::new(bytes, 0));
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
        c.take(
            "BORNHOST",
            host_bytes(sys_flag & sys_flag::BORN_HOST_V6 != 0),
        )?;
        let store_timestamp_ms = c.i64("STORETIMESTAMP")?;
        c.take(
            "STOREHOST",
            host_bytes(sys_flag & sys_flag::STORE_HOST_V6 != 0),
        )?;
        c.i32("RECONSUMETIMES")?;
        c.i64("PREPAREDTXOFFSET")?;
        let body_length = c.i32("BODYLEN")?;
        let body = c.length("BODY", body_length)?;
        let topic_length = if magic == MAGIC_V1 {
            // Java reads the v1 topic length as a signed byte.
            i32::from(i8::from_be_bytes(c.array("TOPICLEN")?))
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
        if c.0.at() != bytes.len() {
            return Err(RecordError::TrailingBytes {
                extra_bytes: bytes.len() - c.0.at(),
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

    pub fn body_crc_matches(&self) -> bool {
        body_crc(self.body) == self.body_crc
    }

    /// The name/value pairs, parsed as `decode_properties` does (wire spec §6.3).
    pub fn properties(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        property_byte_pairs(self.properties)
    }

    /// The value of `name`. The last occurrence wins, as in `find_property` and Java's
    /// HashMap: the broker computes a record's tag code and index keys with `find_property`
    /// when it appends, and recovery must rebuild the same entries from the bytes.
    pub fn property(&self, name: &str) -> Option<&'a [u8]> {
        crate::properties::find_property_range(self.properties, name.as_bytes())
            .map(|range| &self.properties[range])
    }

    /// The ConsumeQueue tag code: the hash of TAGS, except in the timer queue, whose entries
    /// carry each message's due time (TIMER_OUT_MS) so that the timer reads its schedule from
    /// the ConsumeQueue alone. Recovery and a slave's replicated appends rebuild entries with
    /// this, so they match what the send path wrote.
    pub fn tags_code(&self) -> i64 {
        if self.topic == crate::TIMER_TOPIC {
            if let Some(Ok(Ok(due))) = self
                .property(property::TIMER_OUT_MS)
                .map(|v| std::str::from_utf8(v).map(str::parse::<i64>))
            {
                return due;
            }
        }
        match self.property(property::TAGS).map(std::str::from_utf8) {
            Some(Ok(tags)) => tags_code(tags),
            _ => 0,
        }
    }

    /// Calls `visit` with each index key: every word of KEYS, then UNIQ_KEY.
    pub fn for_each_key(&self, mut visit: impl FnMut(&'a str)) {
        if let Some(Ok(keys)) = self.property(property::KEYS).map(std::str::from_utf8) {
            keys.split(' ')
                .filter(|k| !k.is_empty())
                .for_each(&mut visit);
        }
        if let Some(Ok(key)) = self.property(property::UNIQ_KEY).map(std::str::from_utf8) {
            visit(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::RecordBuilder;
    use crate::hash::java_string_hash;
    use crate::layout::store_timestamp_from_prefix;

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
    fn a_timer_queue_record_has_its_due_time_as_tag_code() {
        let bytes = RecordBuilder {
            topic: crate::TIMER_TOPIC,
            queue_id: 0,
            body: b"later",
            store_timestamp_ms: 1_700_000_000_000,
            properties: &[("TAGS", "TagA"), ("TIMER_OUT_MS", "1700000005000")],
        }
        .build();
        assert_eq!(
            RecordView::parse(&bytes).unwrap().tags_code(),
            1_700_000_005_000
        );
        // Elsewhere TIMER_OUT_MS is just a property (a delivered timer message keeps it).
        let bytes = RecordBuilder {
            topic: "Orders",
            queue_id: 0,
            body: b"now",
            store_timestamp_ms: 1_700_000_000_000,
            properties: &[("TAGS", "TagA"), ("TIMER_OUT_MS", "1700000005000")],
        }
        .build();
        assert_eq!(
            RecordView::parse(&bytes).unwrap().tags_code(),
            i64::from(java_string_hash("TagA"))
        );
    }

    #[test]
    fn parses_what_the_builder_writes() {
        let bytes = sample();
        let view = RecordView::parse(&bytes).expect("parses");
        assert_eq!(view.topic, "TopicTest");
        assert_eq!(view.queue_id, 3);
        assert_eq!(view.body, b"hello");
        assert_eq!(view.store_timestamp_ms, 1_700_000_000_123);
        assert!(view.body_crc_matches());
        assert_eq!(view.tags_code(), i64::from(java_string_hash("TagA")));
        let mut keys = Vec::new();
        view.for_each_key(|k| keys.push(k.to_string()));
        assert_eq!(keys, ["k1", "k2", "U1"]);
        assert_eq!(store_timestamp_from_prefix(&bytes), Some(1_700_000_000_123));
    }

    #[test]
    fn every_truncation_and_every_byte_flip_is_an_error_or_a_parse_never_a_panic() {
        let bytes = sample();
        for len in 0..bytes.len() {
            assert!(RecordView::parse(&bytes[..len]).is_err());
        }
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[at] ^= 1 << bit;
                let _ = RecordView::parse(&flipped);
            }
        }
    }

    #[test]
    fn a_name_given_twice_reads_as_its_last_value_as_on_the_send_path() {
        let bytes = RecordBuilder {
            topic: "T",
            queue_id: 0,
            body: b"",
            store_timestamp_ms: 0,
            properties: &[
                ("TAGS", "first"),
                ("KEYS", "a"),
                ("TAGS", "last"),
                ("KEYS", "b"),
            ],
        }
        .build();
        let view = RecordView::parse(&bytes).unwrap();
        assert_eq!(view.property("TAGS"), Some(&b"last"[..]));
        assert_eq!(view.tags_code(), tags_code("last"));
        let mut keys = Vec::new();
        view.for_each_key(|k| keys.push(k));
        assert_eq!(keys, ["b"]);
    }

    #[test]
    fn a_torn_properties_tail_is_refused() {
        let mut bytes = sample();
        let last = bytes.len() - 1;
        bytes[last] = b'x';
        assert_eq!(
            RecordView::parse(&bytes).map(|_| ()),
            Err(RecordError::UnterminatedProperties)
        );
    }
}
