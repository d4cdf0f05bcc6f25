//! Delayed delivery with RocketMQ's delay levels. A message with property DELAY=n is stored in
//! `SCHEDULE_TOPIC_XXXX`, queue n-1, with its real topic and queue in REAL_TOPIC / REAL_QID.
//! Every queue of that topic holds one level, so its messages fall due in store order; the
//! scheduler walks each queue from the last delivered offset, stores each due message again
//! under its real topic, and advances the offset once the store has taken the copies.
//! Delivered offsets are kept in `config/delayOffset.json`; after a crash the messages after the
//! last persisted offset are delivered again (at least once, as in RocketMQ).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::schedule::{run_step, Owner, Ready};
use crate::state::Broker;
use crate::stored;
use quiver_store::durable_file::{self, SnapshotFile};
use quiver_store::{AppendError, AppendOutcome, ReadStatus, Record};
use quiver_wire::body;
use quiver_wire::message::{find_property, property, StoredMessage};
use serde::{Deserialize, Serialize};

pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// RocketMQ's default `messageDelayLevel`: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
pub const DEFAULT_LEVELS_MS: [u64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];
/// More levels would mean more schedule queues to poll; RocketMQ ships 18.
const LEVELS_MAX: usize = 64;
/// A level's delay at most: 30 days.
const LEVEL_MS_MAX: u64 = 30 * 24 * 3_600_000;
/// RocketMQ's scheduler also looks every 100 ms; a message is late by at most this much.
const POLL_INTERVAL_MS: u64 = 100;
const PERSIST_EVERY_POLLS: u32 = 10;
/// Messages moved per level per poll; keeps one poll's append request small.
const MESSAGES_PER_POLL_MAX: u32 = 64;
const READ_BYTES_MAX: u32 = 4 * 1024 * 1024;

/// Parses `messageDelayLevel`: space-separated durations with the units RocketMQ accepts
/// (`s`, `m`, `h`, `d`), e.g. "1s 5s 10s 30s 1m".
pub fn parse_levels(text: &str) -> Result<Vec<u64>, &'static str> {
    const ALLOWED: &str =
        "space-separated durations such as 1s 5s 2m 1h 1d (1 to 64 levels, each up to 30 days)";
    let mut levels = Vec::new();
    for word in text.split_whitespace() {
        let split = word.find(|c: char| !c.is_ascii_digit()).ok_or(ALLOWED)?;
        let (number, unit) = word.split_at(split);
        let number: u64 = number.parse().map_err(|_| ALLOWED)?;
        let unit_ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(ALLOWED),
        };
        let ms = number.checked_mul(unit_ms).ok_or(ALLOWED)?;
        if ms == 0 || ms > LEVEL_MS_MAX {
            return Err(ALLOWED);
        }
        levels.push(ms);
    }
    if levels.is_empty() || levels.len() > LEVELS_MAX {
        return Err(ALLOWED);
    }
    Ok(levels)
}

/// The levels as `messageDelayLevel` writes them, each in the largest unit that divides it
/// (`1s 5s 10s 30s 1m ... 2h`); `parse_levels` reads it back to the same values.
pub fn format_levels(levels_ms: &[u64]) -> String {
    let words: Vec<String> = levels_ms
        .iter()
        .map(|&ms| {
            let (unit, unit_ms) = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)]
                .into_iter()
                .find(|(_, unit_ms)| ms % unit_ms == 0)
                .unwrap_or(("s", 1_000));
            format!("{}{unit}", ms / unit_ms)
        })
        .collect();
    words.join(" ")
}

/// The DELAY level a message asks for, clamped to the highest level; None for no delay.
pub fn requested_level(properties: &str, levels: &[u64]) -> Option<usize> {
    level_of(find_property(properties, property::DELAY), levels)
}

/// The level a DELAY value asks for, clamped to the highest level; None for no delay.
pub fn level_of(delay: Option<&str>, levels: &[u64]) -> Option<usize> {
    let level: i64 = delay?.trim().parse().ok()?;
    (level > 0).then(|| (level as usize).min(levels.len()))
}

/// Turns `message` into its schedule-queue form for `level` (1-based, already clamped).
/// Returns the delivery time, which RocketMQ stores as the ConsumeQueue tag code.
pub fn schedule(message: &mut StoredMessage, level: usize, levels: &[u64]) -> i64 {
    let mut properties =
        stored::with_property(&message.properties, property::REAL_TOPIC, &message.topic);
    properties = stored::with_property(
        &properties,
        property::REAL_QID,
        &message.queue_id.to_string(),
    );
    properties = stored::with_property(&properties, property::DELAY, &level.to_string());
    message.properties = properties;
    message.topic = SCHEDULE_TOPIC.to_string();
    message.queue_id = level as i32 - 1;
    message.store_timestamp + levels[level - 1] as i64
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct OffsetsFile {
    /// level -> next schedule-queue offset to deliver
    offset_table: BTreeMap<i32, i64>,
}

/// How far each level has been delivered.
pub struct DelayOffsets {
    file: SnapshotFile,
    table: Mutex<OffsetsFile>,
    dirty: AtomicBool,
}

impl DelayOffsets {
    pub fn open(path: PathBuf) -> Result<DelayOffsets, String> {
        let file = durable_file::load(&path, body::from_json::<OffsetsFile>)?;
        Ok(DelayOffsets {
            file: SnapshotFile::new(path),
            table: Mutex::new(file),
            dirty: AtomicBool::new(false),
        })
    }

    fn get(&self, level: usize) -> u64 {
        let table = self.table.lock().expect("delay offsets lock poisoned");
        table
            .offset_table
            .get(&(level as i32))
            .map_or(0, |o| (*o).max(0) as u64)
    }

    fn set(&self, level: usize, offset: u64) {
        let mut table = self.table.lock().expect("delay offsets lock poisoned");
        table.offset_table.insert(level as i32, offset as i64);
        self.dirty.store(true, Ordering::Release);
    }

    /// Level -> next offset to deliver, as `delayOffset.json` holds it.
    pub fn snapshot(&self) -> BTreeMap<i32, i64> {
        let table = self.table.lock().expect("delay offsets lock poisoned");
        table.offset_table.clone()
    }

    /// Takes `table` in place of this broker's (a slave copying its master). Returns whether
    /// anything changed; the change is persisted with the next `persist_if_dirty`.
    pub fn replace(&self, table: BTreeMap<i32, i64>) -> bool {
        let mut current = self.table.lock().expect("delay offsets lock poisoned");
        if current.offset_table == table {
            return false;
        }
        current.offset_table = table;
        self.dirty.store(true, Ordering::Release);
        true
    }

    pub fn persist_if_dirty(&self) -> std::io::Result<()> {
        let result = self.file.write(|| {
            self.dirty
                .swap(false, Ordering::AcqRel)
                .then(|| body::to_json(&*self.table.lock().expect("delay offsets lock poisoned")))
        });
        if result.is_err() {
            self.dirty.store(true, Ordering::Release);
        }
        result
    }
}

/// Delayed delivery as a background owner (`schedule.rs`): every 100 ms, the due messages of
/// every level are appended to their real topics, and a level's offset moves past them once
/// the store holds them.
#[derive(Default)]
pub struct DelayDelivery {
    steps: u32,
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

    fn step(&mut self, broker: &Broker, now_ms: i64) -> Ready {
        self.steps = self.steps.wrapping_add(1);
        let mut ready = Ready {
            persist: self.steps.is_multiple_of(PERSIST_EVERY_POLLS),
            ..Ready::default()
        };
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
        broker: &Broker,
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

    fn persist(&mut self, broker: &Broker) -> std::io::Result<()> {
        broker.delay_offsets.persist_if_dirty()
    }
}

/// Moves every level's messages due at `now_ms` to their real topics, on this thread (tests and
/// a step of the owner alike).
pub fn deliver_due(broker: &Broker, now_ms: i64) {
    run_step(&mut DelayDelivery::default(), broker, now_ms);
}

/// A level's messages due at `now_ms`, rebuilt for their real topics, and the offset after the
/// last one taken; None when there is nothing to move. Offsets below the queue's minimum were
/// removed: the level's offset moves on to where the store says, with no records.
fn due_at_level(broker: &Broker, level: usize, now_ms: i64) -> Option<(Vec<Record>, u64)> {
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
    broker: &Broker,
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
    broker: &Broker,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_like_rocketmq() {
        assert_eq!(
            parse_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h").unwrap(),
            DEFAULT_LEVELS_MS.to_vec()
        );
        assert_eq!(parse_levels(" 2s  1d ").unwrap(), vec![2_000, 86_400_000]);
        for bad in ["", "1", "1x", "s", "0s", "31d", "-1s"] {
            assert!(parse_levels(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn requested_levels_are_clamped_and_zero_means_none() {
        let levels = [1_000, 2_000, 3_000];
        assert_eq!(requested_level("DELAY\u{1}2\u{2}", &levels), Some(2));
        assert_eq!(requested_level("DELAY\u{1}9\u{2}", &levels), Some(3));
        assert_eq!(requested_level("DELAY\u{1}0\u{2}", &levels), None);
        assert_eq!(requested_level("TAGS\u{1}a\u{2}", &levels), None);
    }
}
