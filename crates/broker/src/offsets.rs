//! Committed consumer offsets per (topic, group, queue). Persisted as
//! `config/consumerOffset.json` in RocketMQ's shape (`offsetTable` keyed by `topic@group`),
//! every few seconds when changed and at shutdown.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use quiver_wire::body;
use serde::{Deserialize, Serialize};

use crate::persist;

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct OffsetsFile {
    /// "topic@group" -> queue id -> next offset to consume
    offset_table: BTreeMap<String, BTreeMap<i32, i64>>,
}

pub struct ConsumerOffsets {
    file: persist::SnapshotFile,
    table: Mutex<OffsetsFile>,
    dirty: AtomicBool,
}

fn key(topic: &str, group: &str) -> String {
    format!("{topic}@{group}")
}

impl ConsumerOffsets {
    pub fn open(path: PathBuf) -> Result<ConsumerOffsets, String> {
        let file = persist::load(&path, body::from_json::<OffsetsFile>)?;
        Ok(ConsumerOffsets {
            file: persist::SnapshotFile::new(path),
            table: Mutex::new(file),
            dirty: AtomicBool::new(false),
        })
    }

    pub fn commit(&self, topic: &str, group: &str, queue_id: i32, offset: i64) {
        let mut table = self.table.lock().expect("offset table lock poisoned");
        table
            .offset_table
            .entry(key(topic, group))
            .or_default()
            .insert(queue_id, offset);
        self.dirty.store(true, Ordering::Release);
    }

    pub fn get(&self, topic: &str, group: &str, queue_id: i32) -> Option<i64> {
        let table = self.table.lock().expect("offset table lock poisoned");
        table
            .offset_table
            .get(&key(topic, group))?
            .get(&queue_id)
            .copied()
    }

    /// Groups with committed offsets on `topic`.
    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        let table = self.table.lock().expect("offset table lock poisoned");
        table
            .offset_table
            .keys()
            .filter_map(|k| k.split_once('@'))
            .filter(|(t, _)| *t == topic)
            .map(|(_, g)| g.to_string())
            .collect()
    }

    /// Topics with committed offsets for `group`, with their queue offsets.
    pub fn of_group(&self, group: &str) -> BTreeMap<String, BTreeMap<i32, i64>> {
        let table = self.table.lock().expect("offset table lock poisoned");
        table
            .offset_table
            .iter()
            .filter_map(|(k, queues)| k.rsplit_once('@').map(|(t, g)| (t, g, queues)))
            .filter(|(_, g, _)| *g == group)
            .map(|(t, _, queues)| (t.to_string(), queues.clone()))
            .collect()
    }

    /// Forgets every group's offsets on `topic` (a deleted topic). Returns whether any went.
    pub fn remove_topic(&self, topic: &str) -> bool {
        let mut table = self.table.lock().expect("offset table lock poisoned");
        let before = table.offset_table.len();
        table
            .offset_table
            .retain(|k, _| k.split_once('@').is_none_or(|(t, _)| t != topic));
        let removed = table.offset_table.len() != before;
        if removed {
            self.dirty.store(true, Ordering::Release);
        }
        removed
    }

    /// Writes the table if it changed since the last write.
    pub fn persist_if_dirty(&self) -> std::io::Result<()> {
        let result = self.file.write(|| {
            self.dirty
                .swap(false, Ordering::AcqRel)
                .then(|| body::to_json(&*self.table.lock().expect("offset table lock poisoned")))
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
    fn committed_offsets_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config/consumerOffset.json");
        let offsets = ConsumerOffsets::open(path.clone()).expect("open");
        offsets.commit("T", "g", 3, 42);
        offsets.commit("T", "g", 3, 43);
        offsets.persist_if_dirty().expect("persist");
        let offsets = ConsumerOffsets::open(path).expect("reopen");
        assert_eq!(offsets.get("T", "g", 3), Some(43));
        assert_eq!(offsets.get("T", "g", 0), None);
        assert_eq!(offsets.groups_of_topic("T"), vec!["g".to_string()]);
    }

    #[test]
    fn a_damaged_offsets_file_falls_back_to_the_snapshot_before_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config/consumerOffset.json");
        let offsets = ConsumerOffsets::open(path.clone()).expect("open");
        offsets.commit("T", "g", 0, 10);
        offsets.persist_if_dirty().expect("persist");
        offsets.commit("T", "g", 0, 20);
        offsets.persist_if_dirty().expect("persist");
        let backup = persist::backup_path(&path);
        assert!(
            backup.ends_with("consumerOffset.json.bak"),
            "{}",
            backup.display()
        );

        // Cut short, as a disk or a hand edit might leave it: the snapshot before it loads.
        let text = std::fs::read(&path).expect("read");
        std::fs::write(&path, &text[..text.len() / 2]).expect("truncate");
        let reopened = ConsumerOffsets::open(path.clone()).expect("backup loads");
        assert_eq!(reopened.get("T", "g", 0), Some(10));

        // Empty, and then missing, read the same way.
        std::fs::write(&path, b"").expect("empty");
        let reopened = ConsumerOffsets::open(path.clone()).expect("backup loads");
        assert_eq!(reopened.get("T", "g", 0), Some(10));
        std::fs::remove_file(&path).expect("remove");
        let reopened = ConsumerOffsets::open(path.clone()).expect("backup loads");
        assert_eq!(reopened.get("T", "g", 0), Some(10));

        // Both damaged: refused, naming both files, instead of starting from nothing.
        std::fs::write(&path, b"{not json").expect("damage");
        std::fs::write(&backup, b"{nor this").expect("damage backup");
        let error = ConsumerOffsets::open(path.clone())
            .err()
            .expect("both unreadable is refused");
        assert!(error.contains("consumerOffset.json:"), "{error}");
        assert!(error.contains("consumerOffset.json.bak:"), "{error}");

        // Neither present: a first start.
        std::fs::remove_file(&path).expect("remove");
        std::fs::remove_file(&backup).expect("remove backup");
        let fresh = ConsumerOffsets::open(path).expect("first start");
        assert_eq!(fresh.get("T", "g", 0), None);
    }
}
