//! State shared by the store's threads and its readers.
//!
//! Ownership: the appender thread is the only writer of the CommitLog, ConsumeQueues and index;
//! it publishes progress through atomics. Readers take short read locks for map lookups only.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::durability::checkpoint::{self, Checkpoint};
use crate::log::commitlog::Segments;
use crate::queues::consume_queue::ConsumeQueue;
use crate::queues::deleted::{self, Deletions};
use crate::index::Index;
use crate::log::prealloc::Preallocation;
use crate::types::{OpenError, StoreConfig};

/// `(topic, queue_id, new max_offset)`, called on the appender thread.
pub type ArrivalListener = Arc<dyn Fn(&str, u32, u64) + Send + Sync>;
pub type QueueMap = HashMap<String, HashMap<u32, Arc<ConsumeQueue>>>;

/// A CommitLog range found corrupt at recovery: never served as records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRange {
    pub start: u64,
    pub end: u64,
}

pub struct Shared {
    pub config: StoreConfig,
    pub segments: Segments,
    /// Everything below is written and dispatched (ConsumeQueue and index entries exist).
    pub written_position: AtomicU64,
    /// Everything below is fsynced in the CommitLog.
    pub flushed_position: AtomicU64,
    /// Where the first failed CommitLog fsync began (`u64::MAX`: none since the store opened).
    /// Linux may drop the pages a failed writeback held and report the next fsync as a
    /// success, so the checkpoint never passes this: recovery rescans from before it.
    pub fsync_failed_from: AtomicU64,
    /// How many CommitLog fsyncs have failed, whoever ran them. A group written before a
    /// failure is never acknowledged as flushed after it: the failed writeback may have held its
    /// pages, and the fsync that reported the error (perhaps another caller's) was the only one
    /// that would.
    pub fsync_failures: AtomicU64,
    pub min_position: AtomicU64,
    pub queues: RwLock<QueueMap>,
    pub index: Index,
    pub bad_ranges: Vec<BadRange>,
    /// Deleted topics (`deleted.rs`); written under the appender lock.
    pub deletions: RwLock<Deletions>,
    pub listener: RwLock<Option<ArrivalListener>>,
    pub messages_appended: AtomicU64,
    pub bytes_appended: AtomicU64,
    pub commitlog_fsyncs: AtomicU64,
    /// Zeroed space ahead of the appender in the active segment.
    pub preallocation: Preallocation,
    /// Serializes checkpoint writers; holds the last checkpoint written.
    pub checkpoint: Mutex<Checkpoint>,
    /// The store directory's lock, held while the store is open.
    pub lock: std::fs::File,
}

impl Shared {
    pub fn queue(&self, topic: &str, queue_id: u32) -> Option<Arc<ConsumeQueue>> {
        let queues = self.queues.read().expect("queue map lock poisoned");
        queues.get(topic)?.get(&queue_id).cloned()
    }

    pub fn all_queues(&self) -> Vec<Arc<ConsumeQueue>> {
        let queues = self.queues.read().expect("queue map lock poisoned");
        queues.values().flat_map(|q| q.values().cloned()).collect()
    }

    /// The queue, created (directory included) if it does not exist yet.
    pub fn queue_or_create(&self, topic: &str, queue_id: u32) -> io::Result<Arc<ConsumeQueue>> {
        queue_or_create(&self.queues, &self.config, topic, queue_id)
    }

    /// Whether the record of `topic` at `position` belongs to a deleted topic.
    pub fn is_deleted(&self, topic: &str, position: u64) -> bool {
        let deletions = self.deletions.read().expect("deletions lock poisoned");
        deleted::is_deleted(&deletions, topic, position)
    }

    pub fn is_bad(&self, position: u64) -> bool {
        self.bad_ranges
            .iter()
            .any(|r| r.start <= position && position < r.end)
    }

    /// fsyncs the CommitLog up to `target` and publishes the new flushed position.
    pub fn flush_commitlog(&self, target: u64) -> io::Result<()> {
        let flushed = self.flushed_position.load(Ordering::Acquire);
        if target <= flushed {
            return Ok(());
        }
        if let Err(e) = self.segments.sync_range(flushed, target) {
            self.fsync_failed_from.fetch_min(flushed, Ordering::AcqRel);
            self.fsync_failures.fetch_add(1, Ordering::AcqRel);
            return Err(e);
        }
        self.commitlog_fsyncs.fetch_add(1, Ordering::Relaxed);
        self.flushed_position.fetch_max(target, Ordering::AcqRel);
        Ok(())
    }

    /// Flushes ConsumeQueues and index up to what is dispatched now, then records it.
    pub fn write_checkpoint(&self) -> Result<(), OpenError> {
        let mut last = self.checkpoint.lock().expect("checkpoint lock poisoned");
        // Everything below `dispatched` has its entries written: the appender publishes the
        // written position only after dispatching.
        let dispatched = self.written_position.load(Ordering::Acquire);
        let flushed = self
            .flushed_position
            .load(Ordering::Acquire)
            .min(self.fsync_failed_from.load(Ordering::Acquire));
        let target = dispatched.min(flushed);
        if last.dispatched_flushed_position == target && last.commitlog_flushed_position == flushed
        {
            return Ok(());
        }
        for queue in self.all_queues() {
            queue
                .flush()
                .map_err(|e| OpenError::io(&queue.path_for(0), &e))?;
        }
        self.index
            .flush()
            .map_err(|e| OpenError::io(&self.config.index_dir, &e))?;
        let now = checkpoint::now_ms();
        let next = Checkpoint {
            commitlog_flushed_position: flushed,
            // A dispatch point past the durable CommitLog would let recovery skip a torn tail.
            dispatched_flushed_position: target,
            commitlog_flushed_ms: now,
            dispatched_flushed_ms: now,
        };
        checkpoint::write(&self.config.checkpoint_path, &next)
            .map_err(|e| OpenError::io(&self.config.checkpoint_path, &e))?;
        *last = next;
        Ok(())
    }
}

pub fn queue_or_create(
    queues: &RwLock<QueueMap>,
    config: &StoreConfig,
    topic: &str,
    queue_id: u32,
) -> io::Result<Arc<ConsumeQueue>> {
    if let Some(queue) = queues
        .read()
        .expect("queue map lock poisoned")
        .get(topic)
        .and_then(|q| q.get(&queue_id))
    {
        return Ok(Arc::clone(queue));
    }
    let queue = Arc::new(ConsumeQueue::open(
        &config.consume_queue_dir,
        topic,
        queue_id,
        config.consume_queue_entries_per_file,
    )?);
    let mut queues = queues.write().expect("queue map lock poisoned");
    let by_id = queues.entry(topic.to_string()).or_default();
    Ok(Arc::clone(by_id.entry(queue_id).or_insert(queue)))
}
