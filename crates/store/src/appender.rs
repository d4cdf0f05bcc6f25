//! The appender: the only writer of the CommitLog, ConsumeQueues and index. It has no thread
//! of its own: whoever appends takes it and writes everything queued (see `Store::append`).
//!
//! Each turn takes every request waiting (a group, bounded by `GROUP_BYTES_MAX`), lays the
//! records out in one buffer, has the CommitLog writer write it with one call per segment
//! touched, dispatches (one run of ConsumeQueue entries per queue and one run of index
//! entries), publishes, and completes. A failed write rolls the files back to where the group
//! started, so the log stays a sequence of whole records.
//!
//! It holds the log's `Writer` and handles to the queues and the index, nothing more. A
//! replica's appends (`append_replicated`) are its second write path: its master's CommitLog
//! bytes, written as they are through the same `Writer` and dispatched from the records parsed
//! back out of them, one call at a time under the same lock as groups.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::durability::group_commit::SyncBatch;
use crate::faults::{FileKind, IoFaults, IoOp};
use crate::index::{Index, KeyEntry};
use crate::log::Writer;
use crate::queues::consume_queue::{ConsumeQueue, Entry, ENTRY_BYTES};
use crate::queues::{valid_topic, Queues, StartedDeletion};
use crate::types::{
    Append, AppendError, AppendOutcome, Appended, DeleteTopicError, FlushStatus, Record,
    ReplicaError, StoreConfig,
};
use quiver_record::{RecordView, BLANK_BYTES, MAGIC_BLANK, RECORD_BYTES_MIN};

/// A group stops taking requests past this many bytes, so its buffer stays bounded even when
/// the queue holds thousands of large batches; the rest form the next group.
const GROUP_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Linux ENOSPC.
const ENOSPC: i32 = 28;

/// Checks a request on the caller's thread, so the appender only copies bytes.
/// Returns the request's total size.
pub fn validate(request: &Append, config: &StoreConfig) -> Result<usize, AppendError> {
    if request.records.is_empty() {
        return Err(AppendError::Malformed("empty batch".to_string()));
    }
    let mut total_bytes = 0usize;
    for r in &request.records {
        if r.bytes.len() > config.record_bytes_max as usize {
            return Err(AppendError::TooLarge {
                record_bytes: r.bytes.len(),
                limit_bytes: config.record_bytes_max as usize,
            });
        }
        let view =
            RecordView::parse(&r.bytes).map_err(|e| AppendError::Malformed(e.to_string()))?;
        if !valid_topic(&r.topic) {
            return Err(AppendError::Malformed(format!(
                "invalid topic name {:?}",
                r.topic
            )));
        }
        if view.topic != r.topic
            || view.queue_id != r.queue_id as i32
            || view.store_timestamp_ms != r.store_timestamp_ms
        {
            return Err(AppendError::Malformed(
                "topic, queue id or store timestamp differ from the record bytes".to_string(),
            ));
        }
        if !view.body_crc_matches() {
            return Err(AppendError::Malformed(
                "BODYCRC does not match the body".to_string(),
            ));
        }
        total_bytes += r.bytes.len();
    }
    // A batch is stored contiguously in one segment, which keeps 8 bytes for the end marker.
    let limit_bytes = (config.segment_bytes - BLANK_BYTES) as usize;
    if total_bytes > limit_bytes {
        return Err(AppendError::TooLarge {
            record_bytes: total_bytes,
            limit_bytes,
        });
    }
    Ok(total_bytes)
}

pub fn error_of(e: &io::Error) -> AppendError {
    if e.raw_os_error() == Some(ENOSPC) {
        AppendError::DiskFull(e.to_string())
    } else {
        AppendError::Io(e.to_string())
    }
}

struct QueueWriter {
    queue: Arc<ConsumeQueue>,
    next_offset: u64,
    pending: Vec<u8>,
    pending_first: u64,
    touched: bool,
    /// Whether the last publish showed the queue's entries to readers (always, unless the
    /// gate is closed).
    shown: bool,
}

struct Chunk {
    base: u64,
    file_offset: u64,
    buf_start: usize,
    buf_end: usize,
}

pub struct Appender {
    /// The CommitLog's writer: the next position and the active segment.
    commitlog: Writer,
    queues: Arc<Queues>,
    index: Arc<Index>,
    /// A cap on live CommitLog bytes (`StoreConfig::commitlog_bytes_max`).
    commitlog_bytes_max: u64,
    /// With sync flush: how long a send may wait for its fsync (`syncFlushTimeout`).
    sync_timeout: Option<Duration>,
    /// With sync flush: written groups whose completions wait for an fsync.
    unsynced: Vec<SyncBatch>,
    /// The group being written; its allocation is reused from turn to turn.
    group: Vec<Append>,
    buf: Vec<u8>,
    chunks: Vec<Chunk>,
    writer_of: HashMap<String, HashMap<u32, usize>>,
    writers: Vec<QueueWriter>,
    touched: Vec<usize>,
    keys: Vec<KeyEntry>,
    /// A replica's call: queues (by writer) that start at the given offset (see
    /// `append_replicated`), applied when the call publishes.
    restarts: Vec<(usize, u64)>,
    /// Set when a rollback failed: the files no longer match memory, so refuse further writes.
    broken: Option<String>,
    /// Where failed ConsumeQueue writes are recorded (the log and the index record their own).
    faults: IoFaults,
}

impl Appender {
    pub fn new(
        commitlog: Writer,
        queues: Arc<Queues>,
        index: Arc<Index>,
        commitlog_bytes_max: u64,
        sync_timeout: Option<Duration>,
        faults: IoFaults,
    ) -> Appender {
        Appender {
            commitlog,
            queues,
            index,
            commitlog_bytes_max,
            sync_timeout,
            unsynced: Vec::new(),
            group: Vec::new(),
            buf: Vec::new(),
            chunks: Vec::new(),
            writer_of: HashMap::new(),
            writers: Vec::new(),
            touched: Vec::new(),
            keys: Vec::new(),
            restarts: Vec::new(),
            broken: None,
            faults,
        }
    }

    /// Writes every job in `waiting` (left empty, its allocation swapped in for reuse), in
    /// groups of at most `GROUP_BYTES_MAX`, and completes them.
    pub fn append_all(&mut self, waiting: &mut Vec<Append>) {
        let mut group = std::mem::take(&mut self.group);
        std::mem::swap(&mut group, waiting);
        let mut rest = Vec::new();
        while !group.is_empty() {
            let mut group_bytes = 0;
            let split = group
                .iter()
                .position(|job| {
                    group_bytes += job_bytes(job);
                    group_bytes > GROUP_BYTES_MAX
                })
                // A single job over the limit still forms a group of its own.
                .map_or(group.len(), |index| index.max(1));
            if split < group.len() {
                rest = group.split_off(split);
            }
            self.process(&mut group);
            std::mem::swap(&mut group, &mut rest);
        }
        self.group = group;
    }

    /// With sync flush: moves the written groups that wait for an fsync to `into`.
    pub fn take_unsynced(&mut self, into: &mut Vec<SyncBatch>) {
        into.append(&mut self.unsynced);
    }

    fn process(&mut self, group: &mut Vec<Append>) {
        if let Some(reason) = &self.broken {
            let error = AppendError::Io(reason.clone());
            for job in group.drain(..) {
                (job.done)(Err(error.clone()));
            }
            return;
        }
        if let Some(error) = self.over_cap(group) {
            for job in group.drain(..) {
                (job.done)(Err(error.clone()));
            }
            return;
        }
        let failures_before = self.commitlog.log().fsync_failures();
        match self.write_group(group) {
            Ok(outcomes) => self.publish_and_complete(group, outcomes, failures_before),
            Err(e) => {
                self.rollback();
                let error = error_of(&e);
                for job in group.drain(..) {
                    (job.done)(Err(error.clone()));
                }
            }
        }
    }

    /// The configured cap on live CommitLog bytes, checked before anything is written; a
    /// group that would cross it fails whole (counting a possible end marker and roll).
    fn over_cap(&self, group: &[Append]) -> Option<AppendError> {
        let cap_bytes = self.commitlog_bytes_max;
        if cap_bytes == u64::MAX {
            return None;
        }
        let group_bytes: u64 = group.iter().map(|job| job_bytes(job) as u64).sum();
        let log = self.commitlog.log();
        let position = self.commitlog.position();
        let live_bytes = position.saturating_sub(log.min_position());
        // A roll pads the rest of the current segment with its end marker.
        let segment_end = self.commitlog.segment_base() + log.segment_bytes();
        let padding_bytes = if position + group_bytes + BLANK_BYTES > segment_end {
            segment_end.saturating_sub(position)
        } else {
            0
        };
        (live_bytes + group_bytes + padding_bytes > cap_bytes).then(|| {
            AppendError::DiskFull(format!(
                "the CommitLog holds {live_bytes} bytes and may hold at most {cap_bytes}; \
                 {group_bytes} more bytes do not fit"
            ))
        })
    }

    /// Starts deleting `topic`'s ConsumeQueues with the CommitLog at the next byte to write,
    /// between groups, so that no append of the topic interleaves (see
    /// `Queues::start_deletion`). Returns the position, and the deletion to finish once the
    /// appender is let go (None when the topic had no queues).
    pub fn start_deletion(
        &mut self,
        topic: &str,
    ) -> Result<(u64, Option<StartedDeletion>), DeleteTopicError> {
        let position = self.commitlog.position();
        let started = self
            .queues
            .start_deletion(topic, position, self.commitlog.log())?;
        if started.is_some() {
            self.forget_topic(topic);
        }
        Ok((position, started))
    }

    /// Refuses every later write: the files no longer match memory (a truncation failed
    /// part-way), and only a reopen brings them back in step.
    pub fn break_with(&mut self, reason: String) {
        self.broken = Some(reason);
    }

    /// Cuts the CommitLog at `position` for a truncation (`log::Writer::truncate`).
    pub fn truncate_log(
        &mut self,
        position: u64,
    ) -> Result<usize, (std::path::PathBuf, io::Error)> {
        self.commitlog.truncate(position)
    }

    /// After a truncation rewound the ConsumeQueues: each queue's next offset is its max
    /// offset again, the offset its first dropped record had.
    pub fn reload_queue_offsets(&mut self) {
        for writer in &mut self.writers {
            writer.next_offset = writer.queue.bounds().1;
            writer.touched = false;
        }
        self.touched.clear();
    }

    /// Drops the topic's queue writers (its ConsumeQueues are deleted): a later append to the
    /// topic opens a new queue, with offsets from 0. Call between groups only.
    fn forget_topic(&mut self, topic: &str) {
        self.writers.retain(|w| w.queue.topic != topic);
        self.writer_of.clear();
        for (i, writer) in self.writers.iter().enumerate() {
            self.writer_of
                .entry(writer.queue.topic.clone())
                .or_default()
                .insert(writer.queue.queue_id, i);
        }
    }

    fn writer_index(&mut self, topic: &str, queue_id: u32) -> io::Result<usize> {
        if let Some(i) = self.writer_of.get(topic).and_then(|m| m.get(&queue_id)) {
            return Ok(*i);
        }
        let queue = self
            .queues
            .get_or_create(topic, queue_id)
            .inspect_err(|e| {
                let dir = self.queues.dir_of(topic, queue_id);
                self.faults
                    .record(FileKind::ConsumeQueue, IoOp::Create, &dir, e);
            })?;
        let next_offset = queue.bounds().1;
        self.writers.push(QueueWriter {
            queue,
            next_offset,
            pending: Vec::new(),
            pending_first: 0,
            touched: false,
            shown: true,
        });
        let i = self.writers.len() - 1;
        self.writer_of
            .entry(topic.to_string())
            .or_default()
            .insert(queue_id, i);
        Ok(i)
    }

    /// Lays out, writes and dispatches the group; returns each request's entries. Nothing is
    /// published until the caller publishes.
    fn write_group(&mut self, group: &[Append]) -> io::Result<Vec<Vec<Appended>>> {
        let segment_bytes = self.commitlog.log().segment_bytes();
        self.buf.clear();
        self.chunks.clear();
        self.keys.clear();
        let start = self.commitlog.position();
        let mut position = start;
        let mut base = self.commitlog.segment_base();
        let mut chunk_start = 0;
        let mut outcomes = Vec::with_capacity(group.len());
        for job in group {
            let total: u64 = job.records.iter().map(|r| r.bytes.len() as u64).sum();
            if position + total + BLANK_BYTES > base + segment_bytes {
                self.buf.extend_from_slice(&quiver_record::blank_marker(
                    base + segment_bytes - position,
                ));
                self.chunks.push(Chunk {
                    base,
                    file_offset: start.max(base) - base,
                    buf_start: chunk_start,
                    buf_end: self.buf.len(),
                });
                chunk_start = self.buf.len();
                base += segment_bytes;
                position = base;
            }
            let mut entries = Vec::with_capacity(job.records.len());
            for record in &job.records {
                let appended = self.lay_out(record, position)?;
                position += u64::from(appended.size);
                entries.push(appended);
            }
            outcomes.push(entries);
        }
        if self.buf.len() > chunk_start {
            self.chunks.push(Chunk {
                base,
                file_offset: position - base - (self.buf.len() - chunk_start) as u64,
                buf_start: chunk_start,
                buf_end: self.buf.len(),
            });
        }
        self.write_chunks()?;
        self.write_dispatched(position)?;
        assert!(
            position - base < segment_bytes,
            "a segment always keeps room for its end marker"
        );
        self.commitlog.advance(position);
        Ok(outcomes)
    }

    /// Lays out one record at `position`: hands out its queue offset, adds its ConsumeQueue
    /// entry and index keys, and copies it into the group's buffer with its offsets patched in.
    #[inline]
    fn lay_out(&mut self, r: &Record, position: u64) -> io::Result<Appended> {
        let w = self.writer_index(&r.topic, r.queue_id)?;
        let writer = &mut self.writers[w];
        let offset = writer.next_offset;
        writer.next_offset += 1;
        if !writer.touched {
            writer.touched = true;
            writer.pending.clear();
            writer.pending_first = offset;
            self.touched.push(w);
        }
        let size = r.bytes.len() as u32;
        writer.pending.extend_from_slice(
            &Entry {
                position,
                size,
                tags_code: r.tags_code,
            }
            .encode(),
        );
        let start = self.buf.len();
        self.buf.extend_from_slice(&r.bytes);
        quiver_record::patch_offsets(&mut self.buf[start..], offset, position);
        for key in &r.keys {
            self.keys.push(KeyEntry {
                key_hash: quiver_record::index_key_hash(&r.topic, key),
                position,
                store_timestamp_ms: r.store_timestamp_ms,
            });
        }
        Ok(Appended {
            queue_offset: offset,
            position,
            size,
        })
    }

    /// Writes the ConsumeQueue entries laid out for this call, one run per queue touched, and
    /// its index keys; every record below `end` then has its keys added.
    fn write_dispatched(&mut self, end: u64) -> io::Result<()> {
        for &w in &self.touched {
            let writer = &self.writers[w];
            let queue = &writer.queue;
            queue
                .write_entries(writer.pending_first, &writer.pending)
                .inspect_err(|e| {
                    let path = queue.path_for(writer.pending_first);
                    self.faults
                        .record(FileKind::ConsumeQueue, IoOp::Write, &path, e);
                })?;
        }
        self.index.add(&self.keys)?;
        self.index.indexed_up_to(end);
        Ok(())
    }

    fn write_chunks(&mut self) -> io::Result<()> {
        for chunk in &self.chunks {
            self.commitlog.write(
                chunk.base,
                chunk.file_offset,
                &self.buf[chunk.buf_start..chunk.buf_end],
            )?;
        }
        Ok(())
    }

    /// Undoes a failed group: files back to the published state, offsets handed out again.
    fn rollback(&mut self) {
        let mut failures = Vec::new();
        self.commitlog.roll_back(&mut failures);
        for &w in &self.touched {
            let writer = &mut self.writers[w];
            let published_offset = writer.queue.bounds().1;
            writer.next_offset = published_offset;
            writer.touched = false;
            if let Err(e) = writer.queue.discard_from(published_offset) {
                let path = writer.queue.path_for(published_offset);
                self.faults
                    .record(FileKind::ConsumeQueue, IoOp::Truncate, &path, &e);
                failures.push(e.to_string());
            }
        }
        self.touched.clear();
        self.restarts.clear();
        if !failures.is_empty() {
            self.broken = Some(format!(
                "rolling back a failed append failed ({}); reopen the store to recover",
                failures.join("; ")
            ));
        }
    }

    fn publish_and_complete(
        &mut self,
        group: &mut Vec<Append>,
        outcomes: Vec<Vec<Appended>>,
        failures_before: u64,
    ) {
        let bytes = self.buf.len() as u64;
        let messages: usize = outcomes.iter().map(Vec::len).sum();
        self.publish(messages as u64, bytes);
        let jobs = group.drain(..).zip(outcomes);
        match self.sync_timeout {
            None => {
                for (job, entries) in jobs {
                    (job.done)(Ok(AppendOutcome {
                        entries,
                        flush: FlushStatus::Ok,
                    }));
                }
            }
            Some(timeout) => self.unsynced.push(SyncBatch {
                end_position: self.commitlog.position(),
                failures_before,
                deadline: Instant::now() + timeout,
                completions: jobs
                    .map(|(job, entries)| {
                        (
                            job.done,
                            AppendOutcome {
                                entries,
                                flush: FlushStatus::Ok,
                            },
                        )
                    })
                    .collect(),
            }),
        }
    }

    /// Publishes what was written and dispatched: the written position, then each touched
    /// queue's max offset; then tells the arrival listener.
    /// Behind a closed gate (`queues/gate.rs`) a queue's entries are shown, and its listener
    /// told, only once the group's end is confirmed.
    fn publish(&mut self, messages: u64, bytes: u64) {
        self.commitlog.publish();
        let gate = &self.queues.gate;
        let gated = gate.is_closed();
        let end_position = self.commitlog.position();
        for &w in &self.touched {
            let writer = &mut self.writers[w];
            if gated {
                let published = writer.queue.bounds().1;
                writer.shown =
                    gate.publishing(&writer.queue, published, writer.next_offset, end_position);
            }
            writer.queue.publish(writer.next_offset);
        }
        self.commitlog.count_appended(messages, bytes);
        let listener = self.queues.listener();
        for &w in &self.touched {
            let writer = &mut self.writers[w];
            writer.touched = false;
            if !std::mem::replace(&mut writer.shown, true) {
                continue;
            }
            if let Some(listener) = &listener {
                listener(
                    &writer.queue.topic,
                    writer.queue.queue_id,
                    writer.next_offset,
                );
            }
        }
        self.touched.clear();
        if let Some(written) = self.queues.written_listener() {
            written();
        }
    }

    /// A replica's append: `bytes`, copied from its master's CommitLog, written at `position`
    /// (see `Store::append_replicated` for the contract). Every unit is checked and dispatched
    /// in memory before anything is written; a failure after that rolls the files back as a
    /// failed group does, so nothing of the call is published. Returns the written position.
    pub fn append_replicated(&mut self, position: u64, bytes: &[u8]) -> Result<u64, ReplicaError> {
        if let Some(reason) = &self.broken {
            return Err(ReplicaError::Io(reason.clone()));
        }
        let log = self.commitlog.log();
        let segment_bytes = log.segment_bytes();
        let written = self.commitlog.position();
        // A store that holds nothing starts where its master's last segment does.
        let empty = written == 0 && log.first_base().is_none();
        if empty {
            if !position.is_multiple_of(segment_bytes) || position > i64::MAX as u64 - segment_bytes
            {
                return Err(ReplicaError::NotSegmentBase {
                    position,
                    segment_bytes,
                });
            }
        } else if position != written {
            return Err(ReplicaError::PositionMismatch {
                expected: written,
                got: position,
            });
        }
        if bytes.is_empty() {
            return Ok(written);
        }
        self.keys.clear();
        self.restarts.clear();
        let written = self
            .dispatch_replicated(position, bytes)
            .and_then(|records| {
                self.write_replicated(position, bytes)?;
                Ok(records)
            });
        let records = match written {
            Ok(records) => records,
            Err(e) => {
                self.rollback();
                return Err(e);
            }
        };
        if empty {
            self.commitlog.log().raise_min_position(position);
        }
        for &(w, offset) in &self.restarts {
            self.writers[w].queue.start_at(offset);
        }
        self.restarts.clear();
        self.publish(records, bytes.len() as u64);
        Ok(self.commitlog.position())
    }

    /// Checks every unit of a replica's bytes and lays out their ConsumeQueue and index
    /// entries in memory; writes nothing. Returns how many records the bytes hold.
    fn dispatch_replicated(&mut self, position: u64, bytes: &[u8]) -> Result<u64, ReplicaError> {
        let segment_bytes = self.commitlog.log().segment_bytes();
        let mut records = 0u64;
        let mut at = 0usize;
        while at < bytes.len() {
            let unit_position = position + at as u64;
            let in_segment = unit_position % segment_bytes;
            let left_in_segment = segment_bytes - in_segment;
            let rest = &bytes[at..];
            let torn = |needed_bytes: u64| ReplicaError::Torn {
                position: unit_position,
                needed_bytes,
                available_bytes: rest.len() as u64,
            };
            if (rest.len() as u64) < BLANK_BYTES {
                return Err(torn(BLANK_BYTES));
            }
            let total = quiver_record::read_i32(rest, 0).unwrap_or(-1);
            let magic = quiver_record::read_i32(rest, 4).unwrap_or(0);
            if magic == MAGIC_BLANK {
                // The marker's size is what its master's segment had left; the padding after
                // it comes whole, so that the next unit starts at the next segment.
                if i64::from(total) != left_in_segment as i64 {
                    return Err(ReplicaError::SegmentSizeMismatch {
                        position: unit_position,
                        unit_bytes: total.max(0) as u64,
                        segment_bytes,
                    });
                }
                if (rest.len() as u64) < left_in_segment {
                    return Err(torn(left_in_segment));
                }
                at += left_in_segment as usize;
                continue;
            }
            let bad = |reason: String| ReplicaError::BadRecord {
                position: unit_position,
                reason,
            };
            if !quiver_record::is_record_magic(magic) {
                return Err(bad(format!("bad MAGIC {magic:#x}")));
            }
            if total < RECORD_BYTES_MIN as i32 || total as u64 + BLANK_BYTES > segment_bytes {
                return Err(bad(format!("bad TOTALSIZE {total}")));
            }
            let total = total as u64;
            // A record keeps room for its segment's end marker, as recovery requires.
            if total + BLANK_BYTES > left_in_segment {
                return Err(ReplicaError::SegmentSizeMismatch {
                    position: unit_position,
                    unit_bytes: total,
                    segment_bytes,
                });
            }
            if (rest.len() as u64) < total {
                return Err(torn(total));
            }
            let view = crate::recovery::check_record(&rest[..total as usize], unit_position)
                .map_err(bad)?;
            self.dispatch_record(&view, unit_position, total as u32)?;
            records += 1;
            at += total as usize;
        }
        Ok(records)
    }

    /// Lays out one replicated record's ConsumeQueue entry (at its own QUEUEOFFSET) and index
    /// entries. A queue holding no entry starts at the record's offset: its master's earlier
    /// entries were never replicated here (a replica starts at its master's last segment).
    fn dispatch_record(
        &mut self,
        view: &RecordView<'_>,
        position: u64,
        size: u32,
    ) -> Result<(), ReplicaError> {
        let queue_id = view.queue_id as u32;
        let w = self
            .writer_index(view.topic, queue_id)
            .map_err(|e| ReplicaError::Io(e.to_string()))?;
        let writer = &mut self.writers[w];
        let offset = view.queue_offset as u64;
        if offset != writer.next_offset {
            let (min, max) = writer.queue.bounds();
            // Not yet touched by this call, so `next_offset` is the published max. A queue
            // with no entry serves nothing below `offset` either way; one with entries must
            // go on from its last.
            let restart = !writer.touched && min == max && offset > max;
            if !restart {
                return Err(ReplicaError::QueueOffsetGap {
                    topic: view.topic.to_string(),
                    queue_id,
                    expected: writer.next_offset,
                    got: offset,
                    position,
                });
            }
            writer.next_offset = offset;
            self.restarts.push((w, offset));
        }
        let writer = &mut self.writers[w];
        writer.next_offset = offset + 1;
        if !writer.touched {
            writer.touched = true;
            writer.pending.clear();
            writer.pending_first = offset;
            self.touched.push(w);
        }
        writer.pending.extend_from_slice(
            &Entry {
                position,
                size,
                tags_code: view.tags_code(),
            }
            .encode(),
        );
        let keys = &mut self.keys;
        view.for_each_key(|key| {
            keys.push(KeyEntry {
                key_hash: quiver_record::index_key_hash(view.topic, key),
                position,
                store_timestamp_ms: view.store_timestamp_ms,
            })
        });
        Ok(())
    }

    /// Writes a replica's checked bytes (one write per segment), their ConsumeQueue and index
    /// entries, and with sync flush fsyncs the CommitLog: a replica reports a position to its
    /// master as received only once it is durable. Publishes nothing.
    fn write_replicated(&mut self, position: u64, bytes: &[u8]) -> Result<(), ReplicaError> {
        let io = |e: io::Error| ReplicaError::Io(e.to_string());
        let segment_bytes = self.commitlog.log().segment_bytes();
        let end = position + bytes.len() as u64;
        let mut at = position;
        while at < end {
            let base = at - at % segment_bytes;
            let chunk_end = end.min(base + segment_bytes);
            let chunk = &bytes[(at - position) as usize..(chunk_end - position) as usize];
            self.commitlog.write(base, at - base, chunk).map_err(io)?;
            at = chunk_end;
        }
        self.write_dispatched(end).map_err(io)?;
        self.commitlog.advance_replicated(end);
        Ok(())
    }
}

fn job_bytes(job: &Append) -> usize {
    job.records.iter().map(|r| r.bytes.len()).sum()
}

const _: () = assert!(ENTRY_BYTES == 20);
