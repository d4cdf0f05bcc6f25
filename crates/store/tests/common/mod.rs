//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use quiver_store::record::{self, RecordBuilder};
use quiver_store::{
    Append, AppendError, AppendOutcome, Appended, FlushMode, ReadStatus, Record, Store, StoreConfig,
};

pub const WAIT: Duration = Duration::from_secs(20);

/// Small files so that tests cross segment, ConsumeQueue and index file boundaries.
pub fn small_config(root: &Path) -> StoreConfig {
    let mut config = StoreConfig::under(root);
    config.segment_bytes = 4096;
    config.consume_queue_entries_per_file = 16;
    config.index_slots = 64;
    config.index_entries_max = 100;
    config.flush = FlushMode::Async {
        interval_ms: 10,
        least_pages: 0,
    };
    config
}

pub struct Spec<'a> {
    pub topic: &'a str,
    pub queue_id: u32,
    pub body: &'a [u8],
    pub store_timestamp_ms: i64,
    pub tags: Option<&'a str>,
    pub keys: &'a [&'a str],
    pub uniq_key: Option<&'a str>,
}

impl Default for Spec<'_> {
    fn default() -> Self {
        Spec {
            topic: "TopicTest",
            queue_id: 0,
            body: b"body",
            store_timestamp_ms: 1_700_000_000_000,
            tags: None,
            keys: &[],
            uniq_key: None,
        }
    }
}

pub fn record(spec: Spec) -> Record {
    let joined_keys = spec.keys.join(" ");
    let mut properties = Vec::new();
    if let Some(tags) = spec.tags {
        properties.push(("TAGS", tags));
    }
    if !spec.keys.is_empty() {
        properties.push(("KEYS", joined_keys.as_str()));
    }
    if let Some(uniq) = spec.uniq_key {
        properties.push(("UNIQ_KEY", uniq));
    }
    let bytes = RecordBuilder {
        topic: spec.topic,
        queue_id: spec.queue_id,
        body: spec.body,
        store_timestamp_ms: spec.store_timestamp_ms,
        properties: &properties,
    }
    .build();
    let mut keys: Vec<String> = spec.keys.iter().map(|k| k.to_string()).collect();
    keys.extend(spec.uniq_key.map(str::to_string));
    Record {
        topic: spec.topic.to_string(),
        queue_id: spec.queue_id,
        tags_code: spec.tags.map_or(0, record::tags_code),
        keys,
        store_timestamp_ms: spec.store_timestamp_ms,
        bytes,
    }
}

pub fn simple(topic: &str, queue_id: u32, body: &[u8]) -> Record {
    record(Spec {
        topic,
        queue_id,
        body,
        ..Spec::default()
    })
}

pub fn append(store: &Store, records: Vec<Record>) -> Result<AppendOutcome, AppendError> {
    let (tx, rx) = mpsc::channel();
    let done = Box::new(move |result| {
        let _ = tx.send(result);
    });
    drop(store.append(vec![Append { records, done }]));
    rx.recv_timeout(WAIT).expect("append completes")
}

/// The stored form of `record` at the given offsets (what a read returns).
pub fn stored(record: &Record, queue_offset: u64, position: u64) -> Vec<u8> {
    let mut bytes = record.bytes.clone();
    bytes[20..28].copy_from_slice(&queue_offset.to_be_bytes());
    bytes[28..36].copy_from_slice(&position.to_be_bytes());
    bytes
}

/// Splits a pull body into records.
pub fn split(mut body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while body.len() >= 4 {
        let size = i32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
        out.push(body[..size].to_vec());
        body = &body[size..];
    }
    assert!(body.is_empty(), "trailing bytes in pull body");
    out
}

pub fn accept_all(_: i64) -> bool {
    true
}

/// Every record of a queue from its min offset, in offset order (stored bytes).
pub fn read_queue_all(store: &Store, topic: &str, queue_id: u32) -> Vec<Vec<u8>> {
    let mut offset = store.bounds(topic, queue_id).min_offset;
    let mut out = Vec::new();
    loop {
        let read = store
            .read(topic, queue_id, offset, 32, u32::MAX, &accept_all)
            .expect("read");
        match read.status {
            ReadStatus::Found | ReadStatus::NoMatchedMessage => {
                out.extend(split(&read.bytes));
                offset = read.next_offset;
            }
            _ => return out,
        }
    }
}

/// The stored bytes of the records in `written` that went to `queue_id`, in append order.
pub fn expected_in_queue(written: &[(Record, Appended)], queue_id: u32) -> Vec<Vec<u8>> {
    written
        .iter()
        .filter(|(r, _)| r.queue_id == queue_id)
        .map(|(r, a)| stored(r, a.queue_offset, a.position))
        .collect()
}
