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

use crate::stored;
use quiver_store::durable_file::{self, SnapshotFile};
use quiver_wire::body;
use quiver_wire::message::{find_property, property, StoredMessage};
use serde::{Deserialize, Serialize};

pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

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

    pub fn get(&self, level: usize) -> u64 {
        let table = self.table.lock().expect("delay offsets lock poisoned");
        table
            .offset_table
            .get(&(level as i32))
            .map_or(0, |o| (*o).max(0) as u64)
    }

    pub fn set(&self, level: usize, offset: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_levels_are_clamped_and_zero_means_none() {
        let levels = [1_000, 2_000, 3_000];
        assert_eq!(requested_level("DELAY\u{1}2\u{2}", &levels), Some(2));
        assert_eq!(requested_level("DELAY\u{1}9\u{2}", &levels), Some(3));
        assert_eq!(requested_level("DELAY\u{1}0\u{2}", &levels), None);
        assert_eq!(requested_level("TAGS\u{1}a\u{2}", &levels), None);
    }
}
