//! Delayed delivery: every 100 ms the due messages of each delay level (`SCHEDULE_TOPIC_XXXX`,
//! queue level-1) are stored again under their real topic, and the level's offset moves past
//! them once the store holds the copies (`delay.rs` keeps the offsets).

use std::collections::BTreeMap;

use quiver_store::{AppendError, AppendOutcome, ReadStatus, Record};
use quiver_wire::message::{property, StoredMessage};

use super::{run_step, Owner, Ready};
use crate::delay::SCHEDULE_TOPIC;
use crate::state::Background;
use crate::stored;

/// RocketMQ's scheduler also looks every 100 ms; a message is late by at most this much.
const POLL_INTERVAL_MS: u64 = 100;
/// Messages moved per level per poll; keeps one poll's append request small.
const MESSAGES_PER_POLL_MAX: u32 = 64;
const READ_BYTES_MAX: u32 = 4 * 1024 * 1024;

/// Delayed delivery as a background owner (`schedule.rs`): every 100 ms, the due messages of
/// every level are appended to their real topics, and a level's offset moves past them once
/// the store holds them.
#[derive(Default)]
pub struct DelayDelivery {
    /// Level -> the offset to move to once its batch is stored.
    pending: BTreeMap<usize, u64>,
}

impl Owner for DelayDelivery {
    fn name(&self) -> &'static str {
        "delayed delivery"
    }

    fn period_ms(&self) -> u64 {
        POLL_INTERVAL_MS
    }

    fn step(&mut self, broker: Background<'_>, now_ms: i64) -> Ready {
        let mut ready = Ready::default();
        self.pending.clear();
        for level in 1..=broker.config.delay_levels_ms.len() {
            let Some((records, next)) = due_at_level(broker, level, now_ms) else {
                continue;
            };
            if records.is_empty() {
                broker.delay_offsets.set(level, next);
            } else {
                self.pending.insert(level, next);
                ready.append(records, level as u64);
            }
        }
        ready
    }

    fn stored(
        &mut self,
        broker: Background<'_>,
        token: u64,
        outcome: Result<AppendOutcome, AppendError>,
    ) -> bool {
        let level = token as usize;
        if let (Some(next), Ok(_)) = (self.pending.remove(&level), outcome) {
            broker.delay_offsets.set(level, next);
        }
        // Levels are independent: one that failed is tried again next step, the others go on.
        true
    }

    fn persist(&mut self, broker: Background<'_>) -> std::io::Result<()> {
        broker.delay_offsets.persist_if_dirty()
    }
}

/// Moves every level's messages due at `now_ms` to their real topics, on this thread (tests and
/// a step of the owner alike).
pub fn deliver_due(broker: Background<'_>, now_ms: i64) {
    run_step(&mut DelayDelivery::default(), broker, now_ms);
}

/// A level's messages due at `now_ms`, rebuilt for their real topics, and the offset after the
/// last one taken; None when there is nothing to move. Offsets below the queue's minimum were
/// removed: the level's offset moves on to where the store says, with no records.
fn due_at_level(broker: Background<'_>, level: usize, now_ms: i64) -> Option<(Vec<Record>, u64)> {
    let queue_id = level as u32 - 1;
    let offset = broker.delay_offsets.get(level);
    let bounds = broker.store.bounds(SCHEDULE_TOPIC, queue_id);
    if offset >= bounds.max_offset && offset >= bounds.min_offset {
        return None;
    }
    let read = match broker.store.read(
        SCHEDULE_TOPIC,
        queue_id,
        offset,
        MESSAGES_PER_POLL_MAX,
        READ_BYTES_MAX,
        &|_| true,
    ) {
        Ok(read) => read,
        Err(error) => {
            tracing::warn!(level, offset, %error, "cannot read the schedule queue");
            return None;
        }
    };
    if let Some(damage) = &read.damage {
        tracing::error!(level, next_offset = read.next_offset, %damage, "damaged scheduled record not delivered");
    }
    if read.status != ReadStatus::Found {
        return (read.next_offset != offset).then(|| (Vec::new(), read.next_offset));
    }
    let (records, next) = due_records(broker, level, &read.bytes, offset, now_ms);
    (!records.is_empty() || next != offset).then_some((records, next))
}

/// The due messages at the front of a read, rebuilt for their real topic, and the offset after
/// the last one taken.
fn due_records(
    broker: Background<'_>,
    level: usize,
    bytes: &[u8],
    offset: u64,
    now: i64,
) -> (Vec<Record>, u64) {
    let delay_ms = broker.config.delay_levels_ms[level - 1] as i64;
    let mut records = Vec::new();
    let mut next = offset;
    let mut rest = bytes;
    while !rest.is_empty() {
        let (message, size) = match StoredMessage::decode(rest, false) {
            Ok(decoded) => decoded,
            Err(error) => {
                tracing::error!(level, offset = next, %error, "undecodable schedule record skipped");
                return (records, next + 1);
            }
        };
        rest = &rest[size..];
        if message.store_timestamp + delay_ms > now {
            break;
        }
        next = message.queue_offset as u64 + 1;
        match real_message(message, broker, now).and_then(|m| stored::record_of(&m)) {
            Ok(record) => records.push(record),
            Err(error) => {
                tracing::error!(level, %error, "delayed message dropped: cannot rebuild it")
            }
        }
    }
    (records, next)
}

fn real_message(
    mut message: StoredMessage,
    broker: Background<'_>,
    now: i64,
) -> Result<StoredMessage, String> {
    let topic = message
        .property(property::REAL_TOPIC)
        .ok_or("no REAL_TOPIC property")?;
    let queue_id: i32 = message
        .property(property::REAL_QID)
        .and_then(|q| q.parse().ok())
        .ok_or("no REAL_QID property")?;
    message.properties = stored::without_property(&message.properties, property::DELAY);
    message.topic = topic;
    message.queue_id = queue_id;
    message.store_timestamp = now;
    message.store_host = broker.store_host;
    Ok(message)
}
