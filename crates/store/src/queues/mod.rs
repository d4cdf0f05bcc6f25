//! The queues layer: every ConsumeQueue by topic and queue id, the deleted topics, and who is
//! told of arrivals.
//!
//! The appender creates queues and writes their entries; readers look them up under a short
//! read lock and read entries below each queue's published max offset. Deleting a topic
//! (`deleted.rs`) removes its queues from the map and lists where the CommitLog stood.

pub mod consume_queue;
pub mod deleted;
pub mod gate;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};

use crate::durable_file::sync_parent_dir;
use crate::faults::{FileKind, IoOp};
use crate::log::Log;
use crate::types::{DeleteTopicError, OpenError, StoreConfig, TopicDeletion};
use consume_queue::ConsumeQueue;
use deleted::Deletions;

/// `(topic, queue_id, new max_offset)`, called on the thread that wrote the group (or that
/// confirmed it, behind a closed gate) once readers can see the entries.
pub type ArrivalListener = Arc<dyn Fn(&str, u32, u64) + Send + Sync>;
/// Called on the thread that wrote each group to the CommitLog, after it is published, whether
/// or not readers see its entries yet (replication streams what is written).
pub type WrittenListener = Arc<dyn Fn() + Send + Sync>;
type QueueMap = HashMap<String, HashMap<u32, Arc<ConsumeQueue>>>;

/// RocketMQ's topic character set; it also keeps topic names safe as directory names.
pub fn valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 255
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'%' | b'|'))
}

/// `Store::confirmer`: confirms through a weak handle.
#[derive(Clone)]
pub struct Confirmer(pub(crate) Weak<Queues>);

impl Confirmer {
    /// `Store::confirm`, if the store is still open.
    pub fn confirm(&self, position: u64) {
        if let Some(queues) = self.0.upgrade() {
            queues.confirm(position);
        }
    }
}

/// A deletion whose first half is done (`Queues::start_deletion`).
#[derive(Debug)]
pub struct StartedDeletion {
    topic: String,
    position: u64,
    /// The renamed directory, when the topic had one.
    trash: Option<PathBuf>,
    queues: usize,
}

pub struct Queues {
    /// The ConsumeQueue directory.
    root: PathBuf,
    entries_per_file: u64,
    map: RwLock<QueueMap>,
    /// Deleted topics (`deleted.rs`); added to under the appender lock.
    deletions: RwLock<Deletions>,
    deletions_path: PathBuf,
    listener: RwLock<Option<ArrivalListener>>,
    written_listener: RwLock<Option<WrittenListener>>,
    /// What of the published entries readers see (`gate.rs`).
    pub gate: gate::Gate,
}

impl Queues {
    /// Finishes the topic deletions a crash interrupted, then opens every queue on disk.
    pub fn open(config: &StoreConfig, problems: &mut Vec<String>) -> Result<Queues, OpenError> {
        let deletions = finish_deletions(config, problems)?;
        let map = open_queues(config)?;
        Ok(Queues {
            root: config.consume_queue_dir.clone(),
            entries_per_file: config.consume_queue_entries_per_file,
            map: RwLock::new(map),
            deletions: RwLock::new(deletions),
            deletions_path: config.deleted_topics_path.clone(),
            listener: RwLock::new(None),
            written_listener: RwLock::new(None),
            gate: gate::Gate::default(),
        })
    }

    pub fn get(&self, topic: &str, queue_id: u32) -> Option<Arc<ConsumeQueue>> {
        let map = self.map.read().expect("queue map lock poisoned");
        map.get(topic)?.get(&queue_id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<ConsumeQueue>> {
        let map = self.map.read().expect("queue map lock poisoned");
        map.values().flat_map(|q| q.values().cloned()).collect()
    }

    /// The directory of a queue's files.
    pub fn dir_of(&self, topic: &str, queue_id: u32) -> PathBuf {
        self.root.join(topic).join(queue_id.to_string())
    }

    /// The queue, created (directory included) if it does not exist yet.
    pub fn get_or_create(&self, topic: &str, queue_id: u32) -> io::Result<Arc<ConsumeQueue>> {
        if let Some(queue) = self.get(topic, queue_id) {
            return Ok(queue);
        }
        let queue = Arc::new(ConsumeQueue::open(
            &self.root,
            topic,
            queue_id,
            self.entries_per_file,
        )?);
        let mut map = self.map.write().expect("queue map lock poisoned");
        let by_id = map.entry(topic.to_string()).or_default();
        Ok(Arc::clone(by_id.entry(queue_id).or_insert(queue)))
    }

    /// Whether the record of `topic` at `position` belongs to a deleted topic.
    pub fn is_deleted(&self, topic: &str, position: u64) -> bool {
        let deletions = self.deletions.read().expect("deletions lock poisoned");
        deleted::is_deleted(&deletions, topic, position)
    }

    /// The deleted topics now (recovery's scan passes over their records).
    pub fn deletions(&self) -> Deletions {
        self.deletions
            .read()
            .expect("deletions lock poisoned")
            .clone()
    }

    /// After recovery: drops deletions below the log's first position and lowers those past
    /// its end (`end`), rewriting the list if that changed it.
    pub fn tidy_deletions(&self, min_position: u64, end: u64, problems: &mut Vec<String>) {
        let mut deletions = self.deletions.write().expect("deletions lock poisoned");
        let before = deletions.clone();
        deleted::prune(&mut deletions, min_position);
        // A deletion past the log's end (files cut by hand): every record of the topic left is
        // older, and the ones appended from here on are not.
        for position in deletions.values_mut() {
            *position = (*position).min(end);
        }
        if *deletions != before {
            // Only tidying: the entries it would drop or lower do no harm until the next open.
            if let Err(e) = deleted::store(&self.deletions_path, &deletions) {
                let path = self.deletions_path.display();
                problems.push(format!("{path}: cannot rewrite: {e}"));
            }
        }
    }

    /// Called on the thread that wrote each group, after it, once per queue touched.
    pub fn set_listener(&self, listener: ArrivalListener) {
        *self.listener.write().expect("listener lock poisoned") = Some(listener);
    }

    /// `Store::confirm`: shows what the gate lets through and tells the listener of each
    /// queue that grew.
    pub fn confirm(&self, position: u64) {
        let shown = self.gate.confirm(position);
        if shown.is_empty() {
            return;
        }
        if let Some(listener) = self.listener() {
            for step in shown {
                listener(&step.queue.topic, step.queue.queue_id, step.offset);
            }
        }
    }

    pub fn set_written_listener(&self, listener: WrittenListener) {
        *self
            .written_listener
            .write()
            .expect("listener lock poisoned") = Some(listener);
    }

    pub fn written_listener(&self) -> Option<WrittenListener> {
        self.written_listener
            .read()
            .expect("listener lock poisoned")
            .clone()
    }

    pub fn listener(&self) -> Option<ArrivalListener> {
        self.listener
            .read()
            .expect("listener lock poisoned")
            .clone()
    }

    /// The first half of deleting `topic`, the CommitLog standing at `position` (see
    /// `deleted.rs`): renames its directory to its trash name, retires its queues and lists the
    /// deletion in memory, so that from here on reads and key queries leave its records out and
    /// an append of the topic opens new queues from offset 0. The caller holds the appender, so
    /// that no append of the topic interleaves, and forgets its own handles to the queues; it
    /// then lets go of the appender and calls `finish_deletion`. Nothing here waits for a disk:
    /// sends go on while the deletion is made durable. None when the topic has no queues: a
    /// name that never held a message is not recorded.
    ///
    /// Why the rename can wait for its fsync: a new queue of the topic fsyncs this directory
    /// when it creates its own (`ConsumeQueue::open`), before any record of it is written, and
    /// that fsync carries the rename with it. So no record of a topic created again can outlive
    /// a crash that loses its deletion.
    pub fn start_deletion(
        &self,
        topic: &str,
        position: u64,
        log: &Log,
    ) -> Result<Option<StartedDeletion>, DeleteTopicError> {
        let root = &self.root;
        if !valid_topic(topic) {
            // Never a path outside the ConsumeQueue directory.
            return Err(DeleteTopicError {
                topic: topic.to_string(),
                path: root.display().to_string(),
                message: "not a valid topic name".to_string(),
            });
        }
        // Sorted, so that the locks are always taken in one order (nothing else holds two).
        let mut doomed: Vec<Arc<ConsumeQueue>> = {
            let map = self.map.read().expect("queue map lock poisoned");
            map.get(topic)
                .map(|queues| queues.values().cloned().collect())
                .unwrap_or_default()
        };
        doomed.sort_by_key(|queue| queue.queue_id);
        let held: Vec<_> = doomed.iter().map(|queue| queue.hold_files()).collect();
        let dir = root.join(topic);
        let trash = root.join(deleted::trash_name(topic, position));
        let renamed = match std::fs::rename(&dir, &trash) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => {
                log.faults()
                    .record(FileKind::ConsumeQueue, IoOp::Rename, &dir, &e);
                return Err(deletion_failed(topic, &dir, e));
            }
        };
        if !renamed && doomed.is_empty() {
            return Ok(None);
        }
        let removed = self.retire_queues(topic, &doomed, held);
        deleted::add(
            &mut self.deletions.write().expect("deletions lock poisoned"),
            topic,
            position,
        );
        Ok(Some(StartedDeletion {
            topic: topic.to_string(),
            position,
            trash: renamed.then_some(trash),
            queues: removed.len(),
        }))
    }

    /// The second half of a deletion, with no lock of the appender's held: the CommitLog
    /// fsynced up to the deletion's position (so that no crash leaves the log ending below
    /// it), the rename made durable (the commit point), the list written, the renamed
    /// directory removed. The caller runs one deletion at a time, so the list written holds
    /// no deletion whose rename is not durable yet. An error leaves the deletion in effect in
    /// memory; its trash directory stays, and the next open finishes it from its name.
    pub fn finish_deletion(
        &self,
        started: StartedDeletion,
        log: &Log,
    ) -> Result<TopicDeletion, DeleteTopicError> {
        let StartedDeletion {
            topic,
            position,
            trash,
            queues,
        } = started;
        log.flush(position)
            .map_err(|e| deletion_failed(&topic, log.dir(), e))?;
        if let Some(trash) = &trash {
            sync_parent_dir(trash).map_err(|e| {
                log.faults()
                    .record(FileKind::ConsumeQueue, IoOp::Fsync, &self.root, &e);
                deletion_failed(&topic, &self.root, e)
            })?;
        }
        let listed = {
            let mut deletions = self.deletions.write().expect("deletions lock poisoned");
            // The first segment on disk, not the min position: retention raises that before
            // it removes the segments, and a deletion must stay listed while any of its
            // records may be read.
            if let Some(first) = log.first_base() {
                deleted::prune(&mut deletions, first);
            }
            deletions.clone()
        };
        deleted::store(&self.deletions_path, &listed).map_err(|e| {
            log.faults()
                .record(FileKind::Metadata, IoOp::Replace, &self.deletions_path, &e);
            deletion_failed(&topic, &self.deletions_path, e)
        })?;
        if let Some(trash) = &trash {
            // Left over, the directory is removed by the next open.
            let _ = std::fs::remove_dir_all(trash);
        }
        Ok(TopicDeletion { queues, position })
    }

    /// Takes the topic's queues out of the map and retires them (`doomed`, whose files `held`
    /// holds): retention and the checkpoint writer may hold them still, and retired, they
    /// leave the directory (where the topic may be created again) alone.
    fn retire_queues(
        &self,
        topic: &str,
        doomed: &[Arc<ConsumeQueue>],
        held: Vec<consume_queue::HeldFiles<'_>>,
    ) -> HashMap<u32, Arc<ConsumeQueue>> {
        let removed = self
            .map
            .write()
            .expect("queue map lock poisoned")
            .remove(topic)
            .unwrap_or_default();
        for (queue, held) in doomed.iter().zip(held) {
            queue.retire_held(held);
        }
        removed
    }
}

fn deletion_failed(topic: &str, path: &Path, e: io::Error) -> DeleteTopicError {
    DeleteTopicError {
        topic: topic.to_string(),
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Loads the deleted-topic list and finishes the deletions a crash interrupted: a ConsumeQueue
/// directory renamed to its trash name (see `deleted.rs`) is recorded in the list and removed.
fn finish_deletions(
    config: &StoreConfig,
    problems: &mut Vec<String>,
) -> Result<Deletions, OpenError> {
    let path = &config.deleted_topics_path;
    let mut deletions = deleted::load(path, problems).map_err(|e| OpenError::io(path, &e))?;
    let mut trash = Vec::new();
    for entry in read_dir(&config.consume_queue_dir)? {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some((topic, position)) = deleted::parse_trash_name(&name) {
            deleted::add(&mut deletions, topic, position);
            trash.push(entry.path());
        }
    }
    if trash.is_empty() {
        return Ok(deletions);
    }
    if let Err(e) = deleted::store(path, &deletions) {
        // The trash directories stay, so the next open finishes these deletions again; this
        // one has them in memory.
        problems.push(format!(
            "{}: cannot record deleted topics: {e}",
            path.display()
        ));
        return Ok(deletions);
    }
    for dir in trash {
        // Left over, it is only skipped (its name is no topic's); the next open tries again.
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            problems.push(format!("{}: cannot remove: {e}", dir.display()));
        }
    }
    Ok(deletions)
}

fn open_queues(config: &StoreConfig) -> Result<QueueMap, OpenError> {
    let root = &config.consume_queue_dir;
    let mut queues = QueueMap::new();
    for topic_entry in read_dir(root)? {
        let topic = topic_entry.file_name().to_string_lossy().into_owned();
        if !valid_topic(&topic) || !topic_entry.path().is_dir() {
            continue;
        }
        for queue_entry in read_dir(&topic_entry.path())? {
            let Ok(queue_id) = queue_entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let queue = ConsumeQueue::open(
                root,
                &topic,
                queue_id,
                config.consume_queue_entries_per_file,
            )
            .map_err(|e| OpenError::io(&queue_entry.path(), &e))?;
            queues
                .entry(topic.clone())
                .or_default()
                .insert(queue_id, Arc::new(queue));
        }
    }
    Ok(queues)
}

fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>, OpenError> {
    std::fs::read_dir(dir)
        .and_then(|entries| entries.collect::<io::Result<Vec<_>>>())
        .map_err(|e| OpenError::io(dir, &e))
}
