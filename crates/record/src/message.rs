//! `StoredMessage`: a record with its fields owned, for whoever builds records or reads them
//! out of a pull, pop, view or query body.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::Bytes;

use crate::hash::body_crc;
use crate::id::offset_msg_id;
use crate::layout::{
    host_bytes, put_host, sys_flag, Cursor, HOST_V4_BYTES, MAGIC_V1, MAGIC_V2, RECORD_BYTES_MIN,
    SHORT_STRING_BYTES_MAX, TOPIC_BYTES_MAX_V1,
};
use crate::properties::find_property;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MessageError {
    #[error("record needs {needed} bytes but only {available} are available")]
    Truncated { needed: usize, available: usize },
    #[error("bad magic code {0:#x}")]
    BadMagic(i32),
    #[error("field {field} has bad length {value}")]
    BadLength { field: &'static str, value: i64 },
    #[error("body CRC mismatch: stored {stored}, computed {computed}")]
    BodyCrcMismatch { stored: i32, computed: i32 },
    #[error("properties of {0} bytes exceed 32767")]
    PropertiesTooLong(usize),
    #[error("topic of {0} bytes exceeds 32767")]
    TopicTooLong(usize),
    #[error("{0} is not UTF-8")]
    BadUtf8(&'static str),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMessage {
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    /// As stored; `encode` sets or clears the two IPv6 bits to match the hosts.
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Bytes,
    pub topic: String,
    /// Raw 0x01/0x02 form (see `decode_properties`).
    pub properties: String,
}

impl StoredMessage {
    fn topic_length_bytes(&self) -> usize {
        if self.topic.len() > TOPIC_BYTES_MAX_V1 {
            2
        } else {
            1
        }
    }

    pub fn encoded_len(&self) -> usize {
        // RECORD_BYTES_MIN counts IPv4 hosts and a 1-byte topic length.
        RECORD_BYTES_MIN - 2 * HOST_V4_BYTES
            + host_bytes(self.born_host.is_ipv6())
            + host_bytes(self.store_host.is_ipv6())
            + self.body.len()
            + self.topic_length_bytes()
            - 1
            + self.topic.len()
            + self.properties.len()
    }

    /// Appends the record: TOTALSIZE, magic (v1 unless topic > 127 bytes, then v2), BODYCRC computed
    /// (crc32 & 0x7FFFFFFF), IPv6 sysflag bits set from the hosts. Errors if properties > 32767 bytes
    /// or topic > 32767 bytes or body > i32::MAX.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), MessageError> {
        if self.properties.len() > SHORT_STRING_BYTES_MAX {
            return Err(MessageError::PropertiesTooLong(self.properties.len()));
        }
        if self.topic.len() > SHORT_STRING_BYTES_MAX {
            return Err(MessageError::TopicTooLong(self.topic.len()));
        }
        let body_length = i32::try_from(self.body.len()).map_err(|_| MessageError::BadLength {
            field: "BODY",
            value: self.body.len() as i64,
        })?;
        let total = self.encoded_len();
        let total_size = i32::try_from(total).map_err(|_| MessageError::BadLength {
            field: "TOTALSIZE",
            value: total as i64,
        })?;
        let v2 = self.topic_length_bytes() == 2;
        let mut sys_flag = self.sys_flag & !(sys_flag::BORN_HOST_V6 | sys_flag::STORE_HOST_V6);
        if self.born_host.is_ipv6() {
            sys_flag |= sys_flag::BORN_HOST_V6;
        }
        if self.store_host.is_ipv6() {
            sys_flag |= sys_flag::STORE_HOST_V6;
        }

        out.reserve(total);
        let start = out.len();
        out.extend_from_slice(&total_size.to_be_bytes());
        out.extend_from_slice(&(if v2 { MAGIC_V2 } else { MAGIC_V1 }).to_be_bytes());
        out.extend_from_slice(&body_crc(&self.body).to_be_bytes());
        out.extend_from_slice(&self.queue_id.to_be_bytes());
        out.extend_from_slice(&self.flag.to_be_bytes());
        out.extend_from_slice(&self.queue_offset.to_be_bytes());
        out.extend_from_slice(&self.physical_offset.to_be_bytes());
        out.extend_from_slice(&sys_flag.to_be_bytes());
        out.extend_from_slice(&self.born_timestamp.to_be_bytes());
        put_host(out, &self.born_host);
        out.extend_from_slice(&self.store_timestamp.to_be_bytes());
        put_host(out, &self.store_host);
        out.extend_from_slice(&self.reconsume_times.to_be_bytes());
        out.extend_from_slice(&self.prepared_transaction_offset.to_be_bytes());
        out.extend_from_slice(&body_length.to_be_bytes());
        out.extend_from_slice(&self.body);
        // Both casts are exact: the lengths were checked against 127 / 32767 above.
        if v2 {
            out.extend_from_slice(&(self.topic.len() as i16).to_be_bytes());
        } else {
            out.push(self.topic.len() as u8);
        }
        out.extend_from_slice(self.topic.as_bytes());
        out.extend_from_slice(&(self.properties.len() as i16).to_be_bytes());
        out.extend_from_slice(self.properties.as_bytes());
        debug_assert_eq!(out.len() - start, total);
        Ok(())
    }

    /// Decode one record from the front of buf; returns the message and its total size.
    /// Checks lengths against buf (never panics), magic v1/v2. Does not check the CRC unless
    /// `verify_crc` is true.
    pub fn decode(buf: &[u8], verify_crc: bool) -> Result<(StoredMessage, usize), MessageError> {
        StoredMessage::decode_with(buf, verify_crc, Bytes::copy_from_slice)
    }

    /// `decode`, taking the body out of `buf` with `body_of`: a copy, or a slice of the
    /// shared buffer the record came in.
    fn decode_with(
        buf: &[u8],
        verify_crc: bool,
        body_of: impl FnOnce(&[u8]) -> Bytes,
    ) -> Result<(StoredMessage, usize), MessageError> {
        let total = record_bytes(buf)?;
        // From here on every read is confined to this record.
        let mut record = Reader(Cursor::new(&buf[..total], 4));
        let magic = record.i32()?;
        let v2 = match magic {
            MAGIC_V1 => false,
            MAGIC_V2 => true,
            other => return Err(MessageError::BadMagic(other)),
        };
        let stored_crc = record.i32()?;
        let queue_id = record.i32()?;
        let flag = record.i32()?;
        let queue_offset = record.i64()?;
        let physical_offset = record.i64()?;
        let sys_flag = record.i32()?;
        let born_timestamp = record.i64()?;
        let born_host = record.host(sys_flag & sys_flag::BORN_HOST_V6 != 0)?;
        let store_timestamp = record.i64()?;
        let store_host = record.host(sys_flag & sys_flag::STORE_HOST_V6 != 0)?;
        let reconsume_times = record.i32()?;
        let prepared_transaction_offset = record.i64()?;
        let body_length = record.i32()?;
        let body = record.bytes(i64::from(body_length), "BODY")?;
        let topic_length = if v2 {
            i64::from(record.i16()?)
        } else {
            // Java reads the v1 topic length as a signed byte.
            i64::from(i8::from_be_bytes(record.array()?))
        };
        let topic = record.bytes(topic_length, "TOPIC")?;
        let properties_length = record.i16()?;
        let properties = record.bytes(i64::from(properties_length), "PROPERTIES")?;
        if record.0.at() != total {
            return Err(MessageError::BadLength {
                field: "TOTALSIZE",
                // Exact: `total` was read as an i32.
                value: total as i64,
            });
        }
        if verify_crc {
            check_body_crc(body, stored_crc)?;
        }
        let message = StoredMessage {
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            body: body_of(body),
            topic: text(topic, "TOPIC")?,
            properties: text(properties, "PROPERTIES")?,
        };
        Ok((message, total))
    }

    /// Decodes records back to back until `buf` is used up, as a pull or pop body holds them.
    pub fn decode_all(buf: &[u8]) -> Result<Vec<StoredMessage>, MessageError> {
        let mut messages = Vec::new();
        let mut rest = buf;
        while !rest.is_empty() {
            let (message, size) = StoredMessage::decode(rest, false)?;
            messages.push(message);
            rest = &rest[size..];
        }
        Ok(messages)
    }

    /// `decode_all` for records that arrived in one shared buffer (a pull or pop response
    /// body): the bodies are slices of it, not copies.
    pub fn decode_all_shared(buf: &Bytes) -> Result<Vec<StoredMessage>, MessageError> {
        let mut messages = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let (message, size) =
                StoredMessage::decode_with(&buf[at..], false, |body| buf.slice_ref(body))?;
            messages.push(message);
            at += size;
        }
        Ok(messages)
    }

    pub fn property(&self, name: &str) -> Option<String> {
        find_property(&self.properties, name).map(str::to_owned)
    }

    pub fn offset_msg_id(&self) -> String {
        offset_msg_id(self.store_host, self.physical_offset)
    }
}

/// The record's TOTALSIZE: at least a record's fixed part, and all of it in `buf`.
fn record_bytes(buf: &[u8]) -> Result<usize, MessageError> {
    let total_size = Reader(Cursor::new(buf, 0)).i32()?;
    let total = usize::try_from(total_size)
        .ok()
        .filter(|total| *total >= RECORD_BYTES_MIN)
        .ok_or(MessageError::BadLength {
            field: "TOTALSIZE",
            value: i64::from(total_size),
        })?;
    if total > buf.len() {
        return Err(MessageError::Truncated {
            needed: total,
            available: buf.len(),
        });
    }
    Ok(total)
}

fn check_body_crc(body: &[u8], stored_crc: i32) -> Result<(), MessageError> {
    let computed = body_crc(body);
    if computed != stored_crc {
        return Err(MessageError::BodyCrcMismatch {
            stored: stored_crc,
            computed,
        });
    }
    Ok(())
}

fn text(bytes: &[u8], field: &'static str) -> Result<String, MessageError> {
    Ok(std::str::from_utf8(bytes)
        .map_err(|_| MessageError::BadUtf8(field))?
        .to_owned())
}

/// The shared cursor with this decoder's errors: running off the end is `Truncated`.
struct Reader<'a>(Cursor<'a>);

impl<'a> Reader<'a> {
    fn truncated(&self, count: usize) -> MessageError {
        MessageError::Truncated {
            needed: self.0.at().saturating_add(count),
            available: self.0.len(),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], MessageError> {
        self.0.array().ok_or_else(|| self.truncated(N))
    }

    fn i16(&mut self) -> Result<i16, MessageError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, MessageError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, MessageError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    fn bytes(&mut self, length: i64, field: &'static str) -> Result<&'a [u8], MessageError> {
        let count = usize::try_from(length).map_err(|_| MessageError::BadLength {
            field,
            value: length,
        })?;
        self.0.take(count).ok_or_else(|| self.truncated(count))
    }

    fn host(&mut self, ipv6: bool) -> Result<SocketAddr, MessageError> {
        let ip = if ipv6 {
            IpAddr::V6(Ipv6Addr::from(self.array::<16>()?))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.array::<4>()?))
        };
        let port = self.i32()?;
        // Java stores the port as an int; only 0..=65535 can be a real port.
        let port = u16::try_from(port).map_err(|_| MessageError::BadLength {
            field: "PORT",
            value: i64::from(port),
        })?;
        Ok(SocketAddr::new(ip, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::QUEUE_OFFSET_AT;
    use crate::properties::encode_properties;

    fn sample(born: &str, store: &str, topic: &str) -> StoredMessage {
        StoredMessage {
            queue_id: 3,
            flag: 0,
            queue_offset: 42,
            physical_offset: 110_866,
            sys_flag: sys_flag::BORN_HOST_V6,
            born_timestamp: 1_795_293_274_693,
            born_host: born.parse().unwrap(),
            store_timestamp: 1_795_293_274_700,
            store_host: store.parse().unwrap(),
            reconsume_times: 1,
            prepared_transaction_offset: 0,
            body: Bytes::from_static(b"hello"),
            topic: topic.to_owned(),
            properties: encode_properties([("TAGS", "TagA"), ("KEYS", "k1 k2")]),
        }
    }

    #[test]
    fn record_round_trips_and_fixes_ipv6_bits() {
        let message = sample("127.0.0.1:50714", "127.0.0.1:10911", "wire_json");
        let mut out = Vec::new();
        message.encode(&mut out).unwrap();
        assert_eq!(out.len(), message.encoded_len());
        assert_eq!(&out[4..8], &MAGIC_V1.to_be_bytes());
        assert_eq!(
            &out[QUEUE_OFFSET_AT..QUEUE_OFFSET_AT + 8],
            &42i64.to_be_bytes()
        );
        let (decoded, size) = StoredMessage::decode(&out, true).unwrap();
        assert_eq!(size, out.len());
        assert_eq!(decoded.sys_flag, 0);
        assert_eq!(
            decoded,
            StoredMessage {
                sys_flag: 0,
                ..message
            }
        );
    }

    #[test]
    fn long_topic_uses_v2() {
        let message = sample("[::1]:1", "[fe80::1]:10911", &"t".repeat(200));
        let mut out = Vec::new();
        message.encode(&mut out).unwrap();
        assert_eq!(&out[4..8], &MAGIC_V2.to_be_bytes());
        let (decoded, _) = StoredMessage::decode(&out, true).unwrap();
        assert_eq!(
            decoded.sys_flag,
            sys_flag::BORN_HOST_V6 | sys_flag::STORE_HOST_V6
        );
        assert_eq!(decoded.topic.len(), 200);
    }

    #[test]
    fn corruption_is_detected() {
        let message = sample("127.0.0.1:1", "127.0.0.1:2", "t");
        let mut out = Vec::new();
        message.encode(&mut out).unwrap();
        let body_at = out.len() - message.properties.len() - 2 - 1 - 1 - 5;
        out[body_at] ^= 0xFF;
        assert!(matches!(
            StoredMessage::decode(&out, true),
            Err(MessageError::BodyCrcMismatch { .. })
        ));
        assert!(StoredMessage::decode(&out, false).is_ok());
        for cut in 0..out.len() {
            assert!(StoredMessage::decode(&out[..cut], false).is_err());
        }
        out[4] = 0;
        assert!(matches!(
            StoredMessage::decode(&out, false),
            Err(MessageError::BadMagic(_))
        ));
    }

    #[test]
    fn oversized_properties_are_refused() {
        let mut message = sample("127.0.0.1:1", "127.0.0.1:2", "t");
        message.properties = "x".repeat(32768);
        assert_eq!(
            message.encode(&mut Vec::new()),
            Err(MessageError::PropertiesTooLong(32768))
        );
    }
}
