//! Quiver's storage engine: RocketMQ's CommitLog, ConsumeQueues and key index on disk,
//! written by one appender at a time in groups and read concurrently without opening files.
//!
//! Layers, lowest first, each a type with private state reached through its methods:
//! - `record`: the stored-message layout; `durable_file`: atomic replacement and directory
//!   fsyncs; `faults`: the record of failed writes and fsyncs, which every layer reports to and
//!   which refuses appends while the disk fails them.
//! - `log::Log` (`log/`): CommitLog segments, the written, flushed and min positions, fsync and
//!   its failures, zero-filling ahead of the writer (`prealloc`), damaged ranges; its `Writer`
//!   writes the CommitLog.
//! - `queues::Queues` (`queues/`): the ConsumeQueues, deleted topics, the arrival and written
//!   listeners, and the gate that shows readers only confirmed entries in controller mode.
//! - `index::Index` (`index/`): the key index files.
//! - `durability::Durability` and `GroupCommit` (`durability/`): the checkpoint, the background
//!   flush and checkpoint threads, sync flush's group commit.
//!
//! Over them: `recovery` (open, builds the layers), `appender` (the write path: lays out
//! records, writes through the log's `Writer`, dispatches to queues and index), `read` (the
//! read path), `retention`, `replica` (a master's and a replica's side of replication, and the
//! gate's confirmations). `Store` holds the layers and hands each of those only the ones it
//! needs. This crate never uses tokio and knows nothing of the wire.

mod appender;
mod durability;
pub mod durable_file;
pub mod epoch;
mod faults;
mod index;
mod log;
mod memory;
mod queues;
mod read;
mod recovery;
mod replica;
mod retention;
mod timer_buckets;
mod transfer;
mod truncate;
mod types;

/// The `LD_PRELOAD` shim that puts real EIO and ENOSPC under the unit tests of flushes.
#[cfg(test)]
#[path = "../../testkit/src/io_faults.rs"]
mod io_faults_shim;

use std::sync::mpsc;
use std::sync::{Arc, LockResult, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

pub use types::{
    Append, AppendDone, AppendError, AppendOutcome, Appended, Boundary, DeleteTopicError,
    FlushMode, FlushStatus, LogChunk, OpenError, QueueBounds, QueueRead, ReadError, ReadStatus,
    Record, RecoveryReport, ReplicaError, StoreConfig, StoreStats, TopicDeletion, TruncateError,
    TruncateReport,
};

use appender::Appender;
/// The checkpoint file's reader, for tools and tests that look at a store from outside.
pub use durability::checkpoint::{read as read_checkpoint, Checkpoint};
use durability::{flusher, Durability, GroupCommit};
pub use epoch::{consistent_point, EpochEntries, EpochEntry, EpochFile, EpochFileError};
use faults::IoFaults;
pub use faults::{Fault, FaultReport, FileKind, KindFaults, Unwritable};
use index::Index;
use log::{prealloc, Log};
use memory::MemoryQueues;
pub use memory::{Drops, MemoryLimits, MemoryTopics, NOT_IN_LOG};
pub use queues::gate::STEPS_PER_QUEUE_MAX as GATE_STEPS_PER_QUEUE_MAX;
use queues::Queues;
pub use queues::{ArrivalListener, Confirmer, WrittenListener};
pub use retention::{DiskSpace, RetentionError, RetentionReport, SEGMENTS_PER_ROUND_MAX};
pub use timer_buckets::{TimerBuckets, TimerEntry};
pub use transfer::{assemble, FileSlice, SEND_FROM_FILE_RECORD_BYTES_MIN};

/// With sync flush, the group commit for what one `Store::append` wrote: the fdatasync that
/// completes those sends runs when this is dropped (or is left to a thread running one
/// already, which looks again when done). With async flush it does nothing.
#[must_use = "with sync flush the sends complete only once their commit runs; drop it soon"]
pub struct Commit<'a> {
    inner: Option<&'a Inner>,
}

impl Drop for Commit<'_> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner {
            inner.write_and_commit();
        }
    }
}

/// The store. Cheap to clone (Arc inside); Send + Sync.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    config: StoreConfig,
    log: Arc<Log>,
    queues: Arc<Queues>,
    index: Arc<Index>,
    durability: Arc<Durability>,
    /// Failed writes and fsyncs, and whether they stop appends now.
    faults: IoFaults,
    /// The rings of the topics kept in memory, which the log never sees.
    memory: MemoryQueues,
    /// Requests waiting for the appender.
    queue: Mutex<Queue>,
    queue_capacity: usize,
    sync_flush: bool,
    /// The one writer. Whoever takes it writes everything queued, its own request and other
    /// callers' alike (flat combining), so appends need no thread of their own and no
    /// hand-off between threads; callers that find it taken leave their request to the holder.
    appender: Mutex<Appender>,
    /// Held through a topic deletion, both halves (`Store::delete_topic`), and a truncation.
    deleting: Mutex<()>,
    /// Held through a retention pass and a truncation: a pass judges segments sealed by the
    /// written position, which a truncation lowers.
    retaining: Mutex<()>,
    /// With sync flush: written groups waiting for an fsync, and who runs it.
    group_commit: Arc<GroupCommit>,
    /// Dropping these wakes and stops the timed background threads.
    stops: Mutex<Vec<mpsc::Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    closed: Mutex<bool>,
    /// The store directory's lock, held while the store is open.
    lock: Arc<std::fs::File>,
}

struct Queue {
    jobs: Vec<Append>,
    open: bool,
}

/// A panic in an append callback cannot leave these inconsistent (the appender completes a
/// group only after publishing it), so a poisoned lock is still usable.
fn relock<'a, T>(result: LockResult<MutexGuard<'a, T>>) -> MutexGuard<'a, T> {
    result.unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Inner {
    fn reader(&self) -> read::Reader<'_> {
        read::Reader {
            log: &self.log,
            queues: &self.queues,
            index: &self.index,
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        relock(self.queue.lock())
    }

    /// Queues `appends` for the appender; refuses (and completes) the ones it cannot take.
    fn queue_all(&self, appends: Vec<Append>) {
        let mut refused = Vec::new();
        let mut in_memory = Vec::new();
        {
            let mut queue = self.queue();
            for append in appends {
                if let Err(error) = appender::validate(&append, &self.config) {
                    refused.push((error, append.done));
                } else if !queue.open {
                    refused.push((AppendError::Closed, append.done));
                } else if self.memory.any_topic() && self.holds_in_memory(&append) {
                    // A ring needs no disk: it takes appends while the disk fails.
                    in_memory.push(append);
                } else if let Some(error) = self.not_writable() {
                    refused.push((error, append.done));
                } else if queue.jobs.len() >= self.queue_capacity {
                    let queued_requests = queue.jobs.len();
                    refused.push((AppendError::Busy { queued_requests }, append.done));
                } else {
                    queue.jobs.push(append);
                }
            }
        }
        // Outside the lock: callbacks never run under the queue lock.
        for (error, done) in refused {
            done(Err(error));
        }
        for append in in_memory {
            self.append_in_memory(append);
        }
    }

    /// Why appends to the log are refused now, if they are: a write or fsync of a file they
    /// rest on failed and no probe write has succeeded since (`faults`).
    fn not_writable(&self) -> Option<AppendError> {
        if !self.faults.refuses_appends() {
            return None;
        }
        let reason = self.faults.unwritable().map_or_else(
            || "a write to the disk failed".to_string(),
            |u| u.to_string(),
        );
        Some(AppendError::NotWritable(reason))
    }

    /// Whether an append's records go to a ring (a request's records share one topic).
    fn holds_in_memory(&self, append: &Append) -> bool {
        append
            .records
            .first()
            .is_some_and(|record| self.memory.holds(&record.topic))
    }

    /// Puts a request's records in their queue's ring and completes it at once: nothing waits
    /// for a disk or a replica. Readers parked on the queue are told, as after a log append.
    fn append_in_memory(&self, append: Append) {
        let Append { records, done } = append;
        let queue = records.first().map(|r| (r.topic.clone(), r.queue_id));
        let entries = self.memory.append(records);
        if let (Some((topic, queue_id)), Some(last)) = (queue, entries.last()) {
            if let Some(listener) = self.queues.listener() {
                listener(&topic, queue_id, last.queue_offset + 1);
            }
        }
        done(Ok(AppendOutcome {
            entries,
            flush: FlushStatus::Ok,
        }));
    }

    /// Writes everything queued, then (with sync flush) runs one group commit for what is
    /// written, unless another thread is at either.
    fn write_and_commit(&self) {
        self.write_queued();
        if self.sync_flush {
            self.group_commit.commit_once();
        }
    }

    /// Writes everything queued unless another thread is already at it.
    fn write_queued(&self) {
        loop {
            let mut appender = match self.appender.try_lock() {
                Ok(appender) => appender,
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                // The holder looks at the queue again after letting go, so it will see ours.
                Err(TryLockError::WouldBlock) => break,
            };
            self.append_queued(&mut appender);
            drop(appender);
            if self.queue().jobs.is_empty() {
                return;
            }
        }
    }

    /// Writes the queue; with sync flush, the written groups join `unsynced`.
    fn append_queued(&self, appender: &mut Appender) {
        let mut taken = Vec::new();
        loop {
            std::mem::swap(&mut self.queue().jobs, &mut taken);
            if taken.is_empty() {
                break;
            }
            appender.append_all(&mut taken);
        }
        appender.take_unsynced(&mut self.group_commit.unsynced());
    }

    /// Stops accepting appends, completes what is queued, and joins the threads.
    fn stop_threads(&self) {
        self.queue().open = false;
        {
            // Blocking: a request queued just now may be in another thread's hands.
            let mut appender = relock(self.appender.lock());
            self.append_queued(&mut appender);
        }
        self.group_commit.stop_thread();
        self.group_commit.commit_all();

        self.stops.lock().expect("stop lock poisoned").clear();
        let threads = std::mem::take(&mut *self.threads.lock().expect("thread lock poisoned"));
        let me = std::thread::current().id();
        for handle in threads {
            // A callback running on a store thread may close the store; it cannot join itself.
            if handle.thread().id() != me {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for Inner {
    /// Stops the threads but leaves the abort file: a drop without close() is a crash.
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// Starts a store thread. It holds the directory's lock until it ends: a thread whose
/// completion dropped the last handle to the store is not joined, and may still fsync.
fn spawn(
    name: &str,
    lock: &Arc<std::fs::File>,
    body: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, OpenError> {
    let lock = Arc::clone(lock);
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            body();
            drop(lock);
        })
        .map_err(|e| OpenError::Io {
            path: format!("thread {name}"),
            message: e.to_string(),
        })
}

/// The store's own threads, and the senders whose drop wakes and stops the timed ones.
struct Threads {
    handles: Vec<JoinHandle<()>>,
    stops: Vec<mpsc::Sender<()>>,
}

impl Threads {
    /// Starts a store thread that runs until its stop sender is dropped.
    fn start_stoppable(
        &mut self,
        name: &str,
        lock: &Arc<std::fs::File>,
        body: impl FnOnce(mpsc::Receiver<()>) + Send + 'static,
    ) -> Result<(), OpenError> {
        let (stop, stopped) = mpsc::channel();
        self.stops.push(stop);
        self.handles.push(spawn(name, lock, move || body(stopped))?);
        Ok(())
    }
}

/// Starts the threads of the flush mode (the flusher, or the checkpointer and the sync thread)
/// and the zeroer. Returns sync flush's timeout for the appender, with the threads.
fn start_threads(
    flush: FlushMode,
    log: &Arc<Log>,
    durability: &Arc<Durability>,
    group_commit: &Arc<GroupCommit>,
    lock: &Arc<std::fs::File>,
) -> Result<(Option<Duration>, Threads), OpenError> {
    let mut threads = Threads {
        handles: Vec::new(),
        stops: Vec::new(),
    };
    let d = Arc::clone(durability);
    let sync = match flush {
        FlushMode::Async {
            interval_ms,
            least_pages,
        } => {
            threads.start_stoppable("quiver-store-flusher", lock, move |stopped| {
                flusher::run_async(d, stopped, interval_ms, least_pages)
            })?;
            None
        }
        FlushMode::Sync { timeout_ms } => {
            threads.start_stoppable("quiver-store-checkpoint", lock, move |stopped| {
                flusher::run_checkpointer(d, stopped)
            })?;
            let g = Arc::clone(group_commit);
            threads
                .handles
                .push(spawn("quiver-store-sync", lock, move || g.run_thread())?);
            Some(Duration::from_millis(timeout_ms))
        }
    };
    // Zeroed space pays off when every group waits for an fdatasync; with async flush it
    // would double the bytes written for a flush that nobody waits on, so the space is
    // only allocated.
    let fill = match flush {
        FlushMode::Sync { .. } => prealloc::Fill::Zeros,
        FlushMode::Async { .. } => prealloc::Fill::Allocate,
    };
    let l = Arc::clone(log);
    threads.start_stoppable("quiver-store-zeroer", lock, move |stopped| {
        prealloc::run(l, fill, stopped)
    })?;
    Ok((sync, threads))
}

impl Store {
    pub fn open(config: StoreConfig) -> Result<(Store, RecoveryReport), OpenError> {
        let flush = config.flush;
        let faults = IoFaults::for_store(&config);
        let (recovered, report) = recovery::recover(&config, &faults)?;
        let recovery::Recovered {
            log,
            queues,
            index,
            durability,
            lock,
        } = recovered;
        let lock = Arc::new(lock);
        let group_commit = Arc::new(GroupCommit::new(Arc::clone(&log)));
        let (sync, threads) = start_threads(flush, &log, &durability, &group_commit, &lock)?;
        let appender = Appender::new(
            log::Writer::new(Arc::clone(&log)),
            Arc::clone(&queues),
            Arc::clone(&index),
            config.commitlog_bytes_max,
            sync,
            faults.clone(),
        );
        let memory = MemoryQueues::open(config.memory_offsets_path.clone(), config.memory_limits)
            .map_err(|message| OpenError::Io {
            path: config.memory_offsets_path.display().to_string(),
            message,
        })?;
        let store = Store {
            inner: Arc::new(Inner {
                memory,
                queue: Mutex::new(Queue {
                    jobs: Vec::new(),
                    open: true,
                }),
                queue_capacity: config.append_queue_requests_max.max(1),
                sync_flush: sync.is_some(),
                appender: Mutex::new(appender),
                deleting: Mutex::new(()),
                retaining: Mutex::new(()),
                group_commit,
                stops: Mutex::new(threads.stops),
                threads: Mutex::new(threads.handles),
                closed: Mutex::new(false),
                config,
                log,
                queues,
                index,
                durability,
                faults,
                lock,
            }),
        };
        Ok((store, report))
    }

    /// The one way to write records: writes every request in `appends`, with whatever other
    /// callers have queued, as one group, unless another thread is writing already (which then
    /// writes these too: flat combining). Each request's `done` runs once its records are
    /// durable under the flush mode: with async flush as soon as they are written, with sync
    /// flush once an fdatasync covers them. It runs on whichever thread wrote (or synced) the
    /// request, or here for a refused one (invalid, `Busy` when the queue is full,
    /// `NotWritable` while a failed write or fsync stops appends to the log, `Closed`).
    ///
    /// With sync flush the returned `Commit` runs that fdatasync when it is dropped, so a
    /// caller may hold it for a moment (across one yield) to let other writers add their groups
    /// to the same fdatasync. Holding it longer only delays these sends.
    pub fn append(&self, appends: Vec<Append>) -> Commit<'_> {
        self.inner.queue_all(appends);
        self.inner.write_queued();
        Commit {
            inner: self.inner.sync_flush.then_some(&*self.inner),
        }
    }

    /// Reads up to `max_messages` / `max_bytes` (at least one message if any matches) starting
    /// at logical `offset`; `accept(tags_code)` filters ConsumeQueue entries before the
    /// CommitLog is read. Status per wire spec §4.3.
    pub fn read(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max_messages: u32,
        max_bytes: u32,
        accept: &dyn Fn(i64) -> bool,
    ) -> Result<QueueRead, ReadError> {
        let wanted = read::Wanted {
            topic,
            queue_id,
            offset,
            max_messages,
            max_bytes,
        };
        self.read_queue(wanted, accept, false)
    }

    /// `read`, leaving runs of large records (`SEND_FROM_FILE_RECORD_BYTES_MIN` on average)
    /// in the CommitLog's files, in `QueueRead::files`, for the caller to send from there: a
    /// pull answer's body goes from the page cache to the socket without being copied.
    pub fn read_to_send(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max_messages: u32,
        max_bytes: u32,
        accept: &dyn Fn(i64) -> bool,
    ) -> Result<QueueRead, ReadError> {
        let wanted = read::Wanted {
            topic,
            queue_id,
            offset,
            max_messages,
            max_bytes,
        };
        self.read_queue(wanted, accept, true)
    }

    /// A topic kept in memory is read from its rings; any other from the files.
    fn read_queue(
        &self,
        wanted: read::Wanted<'_>,
        accept: &dyn Fn(i64) -> bool,
        to_send: bool,
    ) -> Result<QueueRead, ReadError> {
        let memory = &self.inner.memory;
        if memory.holds(wanted.topic) {
            let read::Wanted {
                topic,
                queue_id,
                offset,
                max_messages,
                max_bytes,
            } = wanted;
            return Ok(memory.read(topic, queue_id, offset, max_messages, max_bytes, accept));
        }
        read::read(self.inner.reader(), wanted, accept, to_send)
    }

    /// Zeros for an unknown queue.
    pub fn bounds(&self, topic: &str, queue_id: u32) -> QueueBounds {
        if self.inner.memory.holds(topic) {
            return self.inner.memory.bounds(topic, queue_id);
        }
        let (min_offset, max_offset) = self
            .inner
            .queues
            .get(topic, queue_id)
            .map_or((0, 0), |q| q.visible_bounds());
        QueueBounds {
            min_offset,
            max_offset,
        }
    }

    /// The tag codes of up to `max` ConsumeQueue entries from `offset` (raised to the queue's
    /// minimum), with their offsets, and the offset after the last one: what a reader that
    /// needs only the codes (the timer's due times) reads without touching the CommitLog.
    pub fn queue_codes(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max: u64,
    ) -> Result<(Vec<(u64, i64)>, u64), ReadError> {
        let Some(queue) = self.inner.queues.get(topic, queue_id) else {
            return Ok((Vec::new(), offset));
        };
        let (min, end) = queue.visible_bounds();
        let from = offset.max(min);
        let count = end.saturating_sub(from).min(max);
        if count == 0 {
            return Ok((Vec::new(), from.max(offset)));
        }
        let mut raw = Vec::new();
        queue
            .read_entries(from, count, &mut raw)
            .map_err(|e| ReadError::io(&queue.path_for(from), &e))?;
        let codes = raw
            .chunks_exact(queues::consume_queue::ENTRY_BYTES)
            .enumerate()
            .map(|(i, entry)| {
                let entry = queues::consume_queue::Entry::decode(entry);
                (from + i as u64, entry.tags_code)
            })
            .collect();
        Ok((codes, from + count))
    }

    /// Where in the CommitLog the visible entry at `offset` of a queue lies; None when the
    /// queue has no such entry (or is held in memory, with no log position).
    pub fn entry_position(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<Option<u64>, ReadError> {
        let Some(queue) = self.inner.queues.get(topic, queue_id) else {
            return Ok(None);
        };
        let (min, end) = queue.visible_bounds();
        if offset < min || offset >= end {
            return Ok(None);
        }
        let mut raw = Vec::new();
        queue
            .read_entries(offset, 1, &mut raw)
            .map_err(|e| ReadError::io(&queue.path_for(offset), &e))?;
        Ok(raw
            .get(..queues::consume_queue::ENTRY_BYTES)
            .map(|entry| queues::consume_queue::Entry::decode(entry).position))
    }

    /// Lower: the first offset stored at or after `timestamp_ms` (max_offset if none).
    /// Upper: the last offset stored at or before it (min_offset if none). 0 for an unknown queue.
    pub fn offset_by_time(
        &self,
        topic: &str,
        queue_id: u32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> Result<u64, ReadError> {
        let memory = &self.inner.memory;
        if memory.holds(topic) {
            return Ok(memory.offset_by_time(topic, queue_id, timestamp_ms, boundary));
        }
        read::offset_by_time(self.inner.reader(), topic, queue_id, timestamp_ms, boundary)
    }

    /// Store time of the record at the queue's min offset; None for an empty or unknown queue.
    pub fn earliest_time(&self, topic: &str, queue_id: u32) -> Result<Option<i64>, ReadError> {
        if self.inner.memory.holds(topic) {
            return Ok(self.inner.memory.earliest_time(topic, queue_id));
        }
        read::earliest_time(self.inner.reader(), topic, queue_id)
    }

    /// The record at a CommitLog position (view by id, send-back).
    pub fn read_record(&self, position: u64) -> Result<Vec<u8>, ReadError> {
        read::read_record(&self.inner.log, position)
    }

    /// Records indexed under `key` (a KEYS word or UNIQ_KEY) for `topic`, newest first, at most
    /// `max`, with store time in [begin_ms, end_ms]; deduplicated by position; hash collisions
    /// filtered out by checking the record's topic and keys.
    pub fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Vec<u8>>, ReadError> {
        read::query_by_key(self.inner.reader(), topic, key, max, begin_ms, end_ms)
    }

    /// Called on the thread that wrote each group, after it, with (topic, queue_id, new max_offset),
    /// once per queue touched. Replaces any previous listener.
    pub fn set_arrival_listener(&self, listener: ArrivalListener) {
        self.inner.queues.set_listener(listener);
    }

    /// Told after each group written to the CommitLog, before readers may see it (a closed
    /// gate shows it later): what replication streams.
    pub fn set_written_listener(&self, listener: WrittenListener) {
        self.inner.queues.set_written_listener(listener);
    }

    /// Deletes `topic`'s ConsumeQueues, as RocketMQ's `deleteTopics` does: its queues become
    /// unknown, an append to it afterwards starts a new queue at offset 0, and its records
    /// (which stay in the CommitLog until retention takes their segments) are neither
    /// re-dispatched by recovery nor found by key. Appends wait only for its rename and its
    /// bookkeeping in memory, never for a disk: its fsyncs and file removals run after it lets
    /// the appender go, on the caller's thread, which must not be an async runtime's worker.
    /// Durable when it returns; a crash part-way either undoes it or lets the next open finish it. A topic
    /// with no queues (a name that never held a message) is not recorded: `queues` is 0.
    pub fn delete_topic(&self, topic: &str) -> Result<TopicDeletion, DeleteTopicError> {
        let inner = &self.inner;
        // One at a time: the list each writes must hold only deletions whose rename is durable.
        let _one_at_a_time = relock(inner.deleting.lock());
        // Whatever the topic's kind now: a name deleted and created again as the other kind
        // must find neither its old ring nor its old ConsumeQueues.
        inner
            .memory
            .remove_topic(topic)
            .map_err(|e| DeleteTopicError {
                topic: topic.to_string(),
                path: inner.config.memory_offsets_path.display().to_string(),
                message: e.to_string(),
            })?;
        // The appender is held only for the renames and the bookkeeping in memory: the fsyncs,
        // the list's write and the removal of the files come after, while sends go on.
        let started = relock(inner.appender.lock()).start_deletion(topic);
        // Sends that others queued while this held the appender were left to the holder: write
        // them (and, with sync flush, fsync them) as any holder does after letting go.
        inner.write_and_commit();
        match started? {
            (position, None) => Ok(TopicDeletion {
                queues: 0,
                position,
            }),
            (_, Some(started)) => inner.queues.finish_deletion(started, &inner.log),
        }
    }

    /// The topics kept in memory, for the owner of topics' settings to mark (`MemoryTopics::set`):
    /// from then on a marked topic's appends, reads, bounds and offset lookups go to its rings.
    pub fn memory_topics(&self) -> Arc<MemoryTopics> {
        Arc::clone(self.inner.memory.topics())
    }

    /// Whether `topic`'s queues are kept in memory.
    pub fn is_memory_topic(&self, topic: &str) -> bool {
        self.inner.memory.holds(topic)
    }

    /// A consumer `group` read `topic`'s queue below its oldest offset from `from` and is moved
    /// on: for a ring, the messages it skipped were dropped for it and are counted; the log
    /// keeps no such count (retention is the operator's choice).
    pub fn consumer_moved(&self, topic: &str, queue_id: u32, group: &str, from: u64) {
        if self.inner.memory.holds(topic) {
            self.inner
                .memory
                .consumer_moved(topic, queue_id, group, from);
        }
    }

    /// Bytes held in the rings of memory topics, and what they dropped, per topic.
    pub fn memory_usage(&self) -> (u64, std::collections::BTreeMap<String, Drops>) {
        self.inner.memory.usage()
    }

    /// Every (topic, queue) that has a ConsumeQueue.
    pub fn queues(&self) -> Vec<(String, u32)> {
        self.inner
            .queues
            .all()
            .iter()
            .map(|q| (q.topic.clone(), q.queue_id))
            .collect()
    }

    pub fn stats(&self) -> StoreStats {
        self.inner.log.stats()
    }

    /// Failed writes and fsyncs of the store's files (and of the files the broker keeps under
    /// its directories) by kind, the last of each, and whether appends are refused now.
    pub fn io_faults(&self) -> FaultReport {
        self.inner.faults.report()
    }

    /// How many CommitLog fsync rounds have run (each may cover many requests).
    pub fn commitlog_fsyncs(&self) -> u64 {
        self.inner.log.fsyncs()
    }

    /// Retention: deletes the oldest sealed CommitLog segments last written more than
    /// `reserve_ms` before `now_ms` (every sealed segment when `at_once`, for a full disk), and
    /// the ConsumeQueue and index files that point only into them. Min offsets move up; reads
    /// below them answer `OffsetTooSmall`. The caller passes the time, so tests control it.
    pub fn delete_expired(
        &self,
        now_ms: i64,
        reserve_ms: u64,
        at_once: bool,
    ) -> Result<RetentionReport, RetentionError> {
        let inner = &self.inner;
        let _retaining = relock(inner.retaining.lock());
        retention::delete_expired(
            &inner.log,
            &inner.queues,
            &inner.index,
            now_ms,
            reserve_ms,
            at_once,
        )
    }

    /// Space on the filesystem holding the CommitLog.
    pub fn disk_space(&self) -> std::io::Result<DiskSpace> {
        retention::disk_space(self.inner.log.dir())
    }

    /// fsyncs everything written so far and writes the checkpoint, now.
    pub fn flush(&self) -> Result<(), OpenError> {
        self.inner.durability.flush()
    }

    /// Stops accepting appends, completes what is queued, flushes everything, writes the
    /// checkpoint, removes the abort file, joins the threads, lets go of the directory's lock.
    /// Idempotent.
    /// Do not call it from an append callback: it waits for the threads that run callbacks.
    pub fn close(&self) -> Result<(), OpenError> {
        let mut closed = self.inner.closed.lock().expect("close lock poisoned");
        if *closed {
            return Ok(());
        }
        self.inner.stop_threads();
        self.flush()?;
        let memory_offsets = &self.inner.config.memory_offsets_path;
        self.inner
            .memory
            .close()
            .map_err(|e| OpenError::io(memory_offsets, &e))?;
        let abort = &self.inner.config.abort_path;
        let failed = |op, e: std::io::Error| {
            self.inner.faults.record(FileKind::Metadata, op, abort, &e);
            OpenError::io(abort, &e)
        };
        match std::fs::remove_file(abort) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(faults::IoOp::Remove, e)),
        }
        durable_file::sync_parent_dir(abort).map_err(|e| failed(faults::IoOp::Fsync, e))?;
        *closed = true;
        // Closed: the directory is free for the next open, even while this handle lives on.
        let _ = self.inner.lock.unlock();
        Ok(())
    }
}
