//! Committed consumer offsets per (topic, group, queue). Persisted as
//! `config/consumerOffset.json` in RocketMQ's shape (`offsetTable` keyed by `topic@group`),
//! every few seconds when changed and at shutdown.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use quiver_store::durable_file::{self, SnapshotFile};
use quiver_wire::body;
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct OffsetsFile {
    /// "topic@group" -> queue id -> next offset to consume
    offset_table: BTreeMap<String, BTreeMap<i32, i64>>,
    /// "topic@group" -> queue ids whose offset a consumer committed here since the master's
    /// copy last reached it (see `merge_from_master`). In memory only; on a broker that copies
    /// from no master it holds at most one mark per queue of `offset_table`.
    #[serde(skip)]
    committed_here: BTreeMap<String, BTreeSet<i32>>,
    /// "topic@group" -> queue id -> offset an admin reset the queue to, not yet handed to a
    /// consumer's pull (RocketMQ's server-side reset). While one waits, consumers' commits of
    /// that queue are ignored: they carry the offset from before the reset. In memory only:
    /// the reset offset itself is in `offset_table`, which consumers then read after a restart.
    #[serde(skip)]
    resets: BTreeMap<String, BTreeMap<i32, i64>>,
}

/// What `ConsumerOffsets::merge_from_master` did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OffsetsMerged {
    /// Queues whose offset changed to the master's.
    pub taken: usize,
    /// Queues that kept a higher offset committed on this broker: the master is behind on
    /// them, and the slave tells it (`replica_meta::copy_from_master`).
    pub kept_newer: Vec<KeptCommit>,
}

/// An offset a consumer committed on this broker that is higher than its master's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptCommit {
    pub topic: String,
    pub group: String,
    pub queue_id: i32,
    pub offset: i64,
}

pub struct ConsumerOffsets {
    file: SnapshotFile,
    table: Mutex<OffsetsFile>,
    dirty: AtomicBool,
}

fn key(topic: &str, group: &str) -> String {
    format!("{topic}@{group}")
}

impl ConsumerOffsets {
    pub fn open(path: PathBuf) -> Result<ConsumerOffsets, String> {
        let file = durable_file::load(&path, body::from_json::<OffsetsFile>)?;
        Ok(ConsumerOffsets {
            file: SnapshotFile::new(path),
            table: Mutex::new(file),
            dirty: AtomicBool::new(false),
        })
    }

    /// A consumer's commit (UPDATE_CONSUMER_OFFSET, or a pull that carries one).
    pub fn commit(&self, topic: &str, group: &str, queue_id: i32, offset: i64) {
        let key = key(topic, group);
        let mut table = self.table.lock().expect("offset table lock poisoned");
        // Consumers commit many times a second: the key is copied only for a new group.
        if let Some(queues) = table.offset_table.get_mut(&key) {
            queues.insert(queue_id, offset);
        } else {
            table
                .offset_table
                .insert(key.clone(), BTreeMap::from([(queue_id, offset)]));
        }
        table
            .committed_here
            .entry(key)
            .or_default()
            .insert(queue_id);
        self.dirty.store(true, Ordering::Release);
    }

    /// Every committed offset: "topic@group" -> queue id -> offset.
    pub fn snapshot(&self) -> BTreeMap<String, BTreeMap<i32, i64>> {
        let table = self.table.lock().expect("offset table lock poisoned");
        table.offset_table.clone()
    }

    /// Takes a master's offsets on a slave. The rule: the master's offset wins, lower or
    /// higher, except where a consumer committed a higher offset on this broker since the
    /// master's copy last reached it; that one is kept until the master's passes it.
    ///
    /// Why: consumers commit to a slave while its master is down. When the master comes back
    /// its offsets are older than those commits, and RocketMQ's plain overwrite would lower
    /// them, so that a consumer sent to this slave again redelivers what was already consumed.
    /// Plain "never lower" is wrong the other way: an offset reset on the master (mqadmin
    /// resetOffsetByTime, a topic deleted and created again) must reach the slave, or a
    /// consumer that fails over skips the messages the reset asked for. Only commits made
    /// here are newer than the master's knowledge, so only they are protected, and only until
    /// the master has caught up: the copy sends them to the master (`kept_newer`), so that a
    /// consumer that goes back to the master resumes from them too. The marks are in memory: a slave restarted while its master
    /// is down forgets them, and its first copy after that takes the master's offsets.
    ///
    /// Offsets the master does not have stay, as in RocketMQ (its slave copies with putAll).
    pub fn merge_from_master(&self, master: BTreeMap<String, BTreeMap<i32, i64>>) -> OffsetsMerged {
        let mut merged = OffsetsMerged::default();
        let mut guard = self.table.lock().expect("offset table lock poisoned");
        let table = &mut *guard;
        for (key, queues) in &master {
            if queues.is_empty() {
                continue;
            }
            let ours = table.offset_table.entry(key.clone()).or_default();
            let marks = table.committed_here.get(key);
            for (&queue_id, &offset) in queues {
                let here = ours.get(&queue_id).copied();
                let marked = marks.is_some_and(|marks| marks.contains(&queue_id));
                if marked && here.is_some_and(|here| here > offset) {
                    continue;
                }
                if here != Some(offset) {
                    ours.insert(queue_id, offset);
                    merged.taken += 1;
                }
            }
        }
        // What is still marked is newer than the master's offset, or the master has none (a
        // master killed before it persisted the group's offsets comes back without them).
        let table = &mut *guard;
        for (key, marks) in &mut table.committed_here {
            let theirs = master.get(key);
            let ours = table.offset_table.get(key);
            marks.retain(|queue_id| {
                let here = ours.and_then(|queues| queues.get(queue_id)).copied();
                let there = theirs.and_then(|queues| queues.get(queue_id)).copied();
                match (here, there) {
                    (Some(here), there) if there.is_none_or(|there| here > there) => {
                        if let Some((topic, group)) = key.split_once('@') {
                            merged.kept_newer.push(KeptCommit {
                                topic: topic.to_string(),
                                group: group.to_string(),
                                queue_id: *queue_id,
                                offset: here,
                            });
                        }
                        true
                    }
                    _ => false,
                }
            });
        }
        table.committed_here.retain(|_, marks| !marks.is_empty());
        if merged.taken > 0 {
            self.dirty.store(true, Ordering::Release);
        }
        merged
    }

    /// The master has taken these commits (the slave sent them): they are no longer newer
    /// than the master's knowledge, so the master's offsets win again, a reset included. A
    /// queue committed again here since then keeps its mark.
    pub fn master_took(&self, commits: &[KeptCommit]) {
        let mut guard = self.table.lock().expect("offset table lock poisoned");
        let table = &mut *guard;
        for commit in commits {
            let key = key(&commit.topic, &commit.group);
            let current = table
                .offset_table
                .get(&key)
                .and_then(|queues| queues.get(&commit.queue_id));
            if current != Some(&commit.offset) {
                continue;
            }
            if let Some(marks) = table.committed_here.get_mut(&key) {
                marks.remove(&commit.queue_id);
                if marks.is_empty() {
                    table.committed_here.remove(&key);
                }
            }
        }
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

    /// An admin's reset of one queue (mqadmin resetOffsetByTime): the stored offset changes
    /// now, and the next pull of the queue by the group is told to move there.
    pub fn assign_reset(&self, topic: &str, group: &str, queue_id: i32, offset: i64) {
        let mut table = self.table.lock().expect("offset table lock poisoned");
        let key = key(topic, group);
        table
            .offset_table
            .entry(key.clone())
            .or_default()
            .insert(queue_id, offset);
        table
            .resets
            .entry(key)
            .or_default()
            .insert(queue_id, offset);
        self.dirty.store(true, Ordering::Release);
    }

    /// The reset waiting for the group's next pull of the queue, taken: a pull answers with it
    /// once.
    pub fn take_reset(&self, topic: &str, group: &str, queue_id: i32) -> Option<i64> {
        let mut table = self.table.lock().expect("offset table lock poisoned");
        let key = key(topic, group);
        let queues = table.resets.get_mut(&key)?;
        let offset = queues.remove(&queue_id);
        if queues.is_empty() {
            table.resets.remove(&key);
        }
        offset
    }

    /// Whether a reset of the queue waits for the group's next pull.
    pub fn reset_pending(&self, topic: &str, group: &str, queue_id: i32) -> bool {
        let table = self.table.lock().expect("offset table lock poisoned");
        table
            .resets
            .get(&key(topic, group))
            .is_some_and(|queues| queues.contains_key(&queue_id))
    }

    /// Forgets every offset of `group` (a deleted subscription group with cleanOffset).
    pub fn remove_group(&self, group: &str) -> bool {
        self.remove_keys(|key| key.rsplit_once('@').is_some_and(|(_, g)| g == group))
    }

    /// Forgets every group's offsets on `topic` (a deleted topic). Returns whether any went.
    pub fn remove_topic(&self, topic: &str) -> bool {
        self.remove_keys(|key| key.split_once('@').is_some_and(|(t, _)| t == topic))
    }

    /// Forgets every "topic@group" entry `gone` picks; true when an offset went.
    fn remove_keys(&self, gone: impl Fn(&str) -> bool) -> bool {
        let mut table = self.table.lock().expect("offset table lock poisoned");
        let before = table.offset_table.len();
        table.offset_table.retain(|key, _| !gone(key));
        table.committed_here.retain(|key, _| !gone(key));
        table.resets.retain(|key, _| !gone(key));
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
    fn a_reset_changes_the_offset_now_and_waits_once_for_a_pull() {
        let dir = tempfile::tempdir().expect("tempdir");
        let offsets = ConsumerOffsets::open(dir.path().join("o.json")).expect("open");
        offsets.commit("T", "g", 0, 50);
        offsets.assign_reset("T", "g", 0, 10);
        assert_eq!(offsets.get("T", "g", 0), Some(10));
        assert!(offsets.reset_pending("T", "g", 0));
        assert!(!offsets.reset_pending("T", "g", 1));
        assert_eq!(offsets.take_reset("T", "g", 0), Some(10));
        assert_eq!(offsets.take_reset("T", "g", 0), None);
        assert!(!offsets.reset_pending("T", "g", 0));
        offsets.commit("T", "g", 0, 11);
        offsets.commit("U", "g", 0, 3);
        offsets.commit("T", "other", 0, 4);
        assert!(offsets.remove_group("g"));
        assert_eq!(offsets.get("T", "g", 0), None);
        assert_eq!(offsets.get("U", "g", 0), None);
        assert_eq!(offsets.get("T", "other", 0), Some(4));
    }

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
        let backup = quiver_store::durable_file::backup_path(&path);
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
