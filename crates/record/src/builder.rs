//! `RecordBuilder`: well-formed records from a few fields, for tests and tools that need bytes
//! as the store would hold them. It fills the rest as a local producer would and encodes with
//! `StoredMessage`, so there is no second encoder to drift.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use bytes::Bytes;

use crate::message::StoredMessage;
use crate::properties::push_property;

/// The born host the builder writes: loopback, port 10000.
const BORN_HOST: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 10_000);
/// The store host the builder writes: loopback, RocketMQ's default broker port.
const STORE_HOST: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 10_911);

/// A v1 record (v2 past 127 topic bytes) with IPv4 hosts, zero offsets and flags, and
/// BORNTIMESTAMP equal to STORETIMESTAMP.
pub struct RecordBuilder<'a> {
    pub topic: &'a str,
    pub queue_id: u32,
    pub body: &'a [u8],
    pub store_timestamp_ms: i64,
    /// Written in order as given, empty names or values included, so tests can make records
    /// that parsing must cope with.
    pub properties: &'a [(&'a str, &'a str)],
}

impl RecordBuilder<'_> {
    /// # Panics
    /// If the topic or the properties exceed 32767 bytes: no record can hold them, and a
    /// builder for tests has no caller that could handle the error better than by failing.
    pub fn build(&self) -> Vec<u8> {
        let mut properties = String::new();
        for (name, value) in self.properties {
            push_property(&mut properties, name, value);
        }
        let message = StoredMessage {
            queue_id: self.queue_id as i32,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp: self.store_timestamp_ms,
            born_host: BORN_HOST,
            store_timestamp: self.store_timestamp_ms,
            store_host: STORE_HOST,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Bytes::copy_from_slice(self.body),
            topic: self.topic.to_owned(),
            properties,
        };
        let mut out = Vec::with_capacity(message.encoded_len());
        if let Err(error) = message.encode(&mut out) {
            panic!("RecordBuilder cannot encode {:?}: {error}", self.topic);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::body_crc;
    use crate::layout::{MAGIC_V1, RECORD_BYTES_MIN};

    /// The bytes the builder wrote field by field before it encoded through `StoredMessage`.
    #[test]
    fn builds_the_same_bytes_as_the_layout_written_out() {
        let built = RecordBuilder {
            topic: "T",
            queue_id: 7,
            body: b"hi",
            store_timestamp_ms: 5,
            properties: &[("A", "1")],
        }
        .build();
        let mut expected = Vec::new();
        let total = RECORD_BYTES_MIN + 2 + 1 + 4;
        expected.extend_from_slice(&(total as i32).to_be_bytes());
        expected.extend_from_slice(&MAGIC_V1.to_be_bytes());
        expected.extend_from_slice(&body_crc(b"hi").to_be_bytes());
        expected.extend_from_slice(&7i32.to_be_bytes());
        expected.extend_from_slice(&[0; 4 + 8 + 8 + 4]); // FLAG, offsets, SYSFLAG
        expected.extend_from_slice(&5i64.to_be_bytes());
        expected.extend_from_slice(&[127, 0, 0, 1, 0, 0, 0x27, 0x10]);
        expected.extend_from_slice(&5i64.to_be_bytes());
        expected.extend_from_slice(&[127, 0, 0, 1, 0, 0, 0x2A, 0x9F]);
        expected.extend_from_slice(&[0; 4 + 8]); // RECONSUMETIMES, PREPAREDTXOFFSET
        expected.extend_from_slice(&2i32.to_be_bytes());
        expected.extend_from_slice(b"hi");
        expected.extend_from_slice(&[1, b'T']);
        expected.extend_from_slice(&4i16.to_be_bytes());
        expected.extend_from_slice(b"A\x011\x02");
        assert_eq!(built, expected);
    }
}
