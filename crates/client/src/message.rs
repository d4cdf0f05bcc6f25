//! What a producer sends and what a send returns.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use quiver_wire::body::MessageQueue;

/// A message to send. The body is reference-counted, so one body can be sent many times
/// without copying it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub topic: String,
    pub body: Bytes,
    pub tags: Option<String>,
    /// Business keys, indexed by the broker; sent space-separated.
    pub keys: Vec<String>,
    /// User properties.
    pub properties: Vec<(String, String)>,
    /// The user flag stored with the message.
    pub flag: i32,
}

impl Message {
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Message {
        Message {
            topic: topic.into(),
            body: body.into(),
            tags: None,
            keys: Vec::new(),
            properties: Vec::new(),
            flag: 0,
        }
    }

    pub fn with_tags(mut self, tags: impl Into<String>) -> Message {
        self.tags = Some(tags.into());
        self
    }

    pub fn with_key(mut self, key: impl Into<String>) -> Message {
        self.keys.push(key.into());
        self
    }

    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Message {
        self.properties.push((name.into(), value.into()));
        self
    }
}

/// How the broker stored a send. All four mean the message was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendStatus {
    Ok,
    FlushDiskTimeout,
    FlushSlaveTimeout,
    SlaveNotAvailable,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendResult {
    pub status: SendStatus,
    /// Offset message id(s) from the broker; comma-joined for a batch.
    pub msg_id: String,
    /// The client's UNIQ_KEY(s); comma-joined for a batch.
    pub uniq_id: String,
    pub queue: MessageQueue,
    /// Offset of the (first) message in its queue.
    pub queue_offset: i64,
}

/// Hex digits of a UNIQ_KEY.
pub const UNIQ_ID_BYTES: usize = 32;

/// Generates UNIQ_KEYs like the Java client's: 16 bytes as 32 upper-case hex digits: the
/// client IPv4 address, a per-producer random word, milliseconds since the producer started
/// and a counter, so ids from different producers and restarts do not collide.
#[derive(Debug)]
pub struct UniqIds {
    prefix: [u8; 8],
    started_ms: i64,
    counter: AtomicU32,
}

impl UniqIds {
    pub fn new(ip: Ipv4Addr, random_word: u32, started_ms: i64) -> UniqIds {
        let mut prefix = [0u8; 8];
        prefix[..4].copy_from_slice(&ip.octets());
        prefix[4..].copy_from_slice(&random_word.to_be_bytes());
        UniqIds {
            prefix,
            started_ms,
            counter: AtomicU32::new(0),
        }
    }

    /// The next id, written into a stack buffer (no allocation on the send path).
    pub fn next(&self, now_ms: i64) -> [u8; UNIQ_ID_BYTES] {
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&self.prefix);
        // Wraps after 49 days of uptime; the counter keeps ids distinct within a millisecond.
        let elapsed = (now_ms - self.started_ms) as u32;
        raw[8..12].copy_from_slice(&elapsed.to_be_bytes());
        let count = self.counter.fetch_add(1, Ordering::Relaxed);
        raw[12..].copy_from_slice(&count.to_be_bytes());
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut out = [0u8; UNIQ_ID_BYTES];
        for (index, byte) in raw.iter().enumerate() {
            out[2 * index] = HEX[usize::from(byte >> 4)];
            out[2 * index + 1] = HEX[usize::from(byte & 0xF)];
        }
        out
    }
}

/// The id as text; it is always ASCII hex.
pub fn uniq_str(id: &[u8; UNIQ_ID_BYTES]) -> &str {
    std::str::from_utf8(id).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniq_ids_are_distinct_upper_hex() {
        let ids = UniqIds::new(Ipv4Addr::new(10, 1, 2, 3), 0xDEAD_BEEF, 1_000);
        let first = ids.next(1_005);
        let second = ids.next(1_005);
        assert_ne!(first, second);
        let text = uniq_str(&first);
        assert!(text.starts_with("0A010203DEADBEEF00000005"));
        assert_eq!(text.len(), 32);
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()));
    }
}
