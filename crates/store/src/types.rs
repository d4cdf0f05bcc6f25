//! The value types of the public API: configuration, requests, outcomes and errors.

use crate::transfer::FileSlice;
use std::path::{Path, PathBuf};

/// Where the store keeps its files and the limits it enforces.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub commitlog_dir: PathBuf,
    pub consume_queue_dir: PathBuf,
    pub index_dir: PathBuf,
    pub checkpoint_path: PathBuf,
    pub abort_path: PathBuf,
    /// CommitLog ranges found damaged, kept out of reads across restarts (`damaged.rs`).
    pub damaged_path: PathBuf,
    /// Deleted topics and where the CommitLog stood when each was deleted (`deleted.rs`).
    pub deleted_topics_path: PathBuf,
    /// Size of one CommitLog segment (RocketMQ: 1 GiB).
    pub segment_bytes: u64,
    /// Entries per ConsumeQueue file (RocketMQ: 300,000 entries = 6,000,000 bytes).
    pub consume_queue_entries_per_file: u64,
    pub flush: FlushMode,
    /// Hash slots per index file.
    pub index_slots: u32,
    /// Entries per index file (entry 0 is never used, as in RocketMQ).
    pub index_entries_max: u32,
    /// Capacity of the appender's request queue; a full queue answers `Busy`.
    pub append_queue_requests_max: usize,
    /// Largest whole record an append accepts. Stored records are judged by the segment size
    /// instead: lowering this (maxMessageSize) must not hide or cut what was stored before.
    pub record_bytes_max: u32,
    /// A hard cap on the CommitLog's live bytes (written position minus min position):
    /// appends past it fail with `DiskFull` until retention frees segments. `u64::MAX` for
    /// none; a real full disk (ENOSPC) fails the same way.
    pub commitlog_bytes_max: u64,
    /// Where the next offsets of the queues kept in memory are reserved (`memory.rs`).
    pub memory_offsets_path: PathBuf,
    pub memory_limits: crate::MemoryLimits,
}

impl StoreConfig {
    /// The RocketMQ layout under `root`, with RocketMQ's defaults.
    pub fn under(root: &Path) -> StoreConfig {
        StoreConfig {
            commitlog_dir: root.join("commitlog"),
            consume_queue_dir: root.join("consumequeue"),
            index_dir: root.join("index"),
            checkpoint_path: root.join("checkpoint"),
            abort_path: root.join("abort"),
            damaged_path: root.join("damaged"),
            deleted_topics_path: root.join("deletedTopics"),
            segment_bytes: 1 << 30,
            consume_queue_entries_per_file: 300_000,
            flush: FlushMode::default(),
            index_slots: 5_000_000,
            index_entries_max: 20_000_000,
            append_queue_requests_max: 16_384,
            record_bytes_max: 4 * 1024 * 1024 + 64 * 1024,
            commitlog_bytes_max: u64::MAX,
            memory_offsets_path: root.join("config").join("memoryQueueOffsets.json"),
            memory_limits: crate::MemoryLimits::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushMode {
    /// Acknowledge at once; fsync in the background.
    Async { interval_ms: u64, least_pages: u32 },
    /// Acknowledge after an fsync covers the request.
    Sync { timeout_ms: u64 },
}

impl FlushMode {
    pub const ASYNC_DEFAULT: FlushMode = FlushMode::Async {
        interval_ms: 500,
        least_pages: 4,
    };
    pub const SYNC_DEFAULT: FlushMode = FlushMode::Sync { timeout_ms: 5000 };
}

impl Default for FlushMode {
    fn default() -> FlushMode {
        FlushMode::ASYNC_DEFAULT
    }
}

/// One stored message, built by the broker in the layout of wire spec §6.1.
#[derive(Clone, Debug)]
pub struct Record {
    pub topic: String,
    pub queue_id: u32,
    pub tags_code: i64,
    /// Words of KEYS plus UNIQ_KEY, for the index.
    pub keys: Vec<String>,
    /// The same value as STORETIMESTAMP in `bytes`.
    pub store_timestamp_ms: i64,
    /// The full record; QUEUEOFFSET and PHYSICALOFFSET are overwritten on append.
    /// Appends check that it parses, that BODYCRC is right and that non-empty properties end
    /// with 0x02, because recovery relies on those to find the end of the log.
    pub bytes: Vec<u8>,
}

/// One request's records, stored contiguously with consecutive offsets per queue, and what to
/// do once they are durable.
pub struct Append {
    pub records: Vec<Record>,
    /// Runs once the records are durable under the flush mode (see `Store::append`), or with
    /// the reason they were not written.
    pub done: AppendDone,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub queue_offset: u64,
    pub position: u64,
    pub size: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushStatus {
    Ok,
    /// The data is written, but no fsync covered it within the timeout (or the fsync failed).
    TimedOut,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcome {
    pub entries: Vec<Appended>,
    pub flush: FlushStatus,
}

impl AppendOutcome {
    /// The CommitLog position after the request's last record: what a replica must hold for
    /// it. None when its records are kept in memory, which no replica copies.
    pub fn log_end(&self) -> Option<u64> {
        let last = self.entries.last()?;
        (last.position != crate::NOT_IN_LOG as u64).then(|| last.position + u64::from(last.size))
    }
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum AppendError {
    #[error("store is busy: {queued_requests} appends waiting")]
    Busy { queued_requests: usize },
    #[error("record of {record_bytes} bytes exceeds the limit of {limit_bytes}")]
    TooLarge {
        record_bytes: usize,
        limit_bytes: usize,
    },
    #[error("record is malformed: {0}")]
    Malformed(String),
    #[error("disk full: {0}")]
    DiskFull(String),
    #[error("I/O error: {0}")]
    Io(String),
    /// A write or fsync of a file that appends rest on failed (EIO, ENOSPC, ...), and no
    /// write to that disk has succeeded since: the store refuses appends, as RocketMQ's store
    /// does when it is not writable, and takes them again once a probe write succeeds.
    #[error("the store is not writable: {0}")]
    NotWritable(String),
    #[error("store is closed")]
    Closed,
}

pub type AppendDone = Box<dyn FnOnce(Result<AppendOutcome, AppendError>) + Send>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStatus {
    Found,
    NoNewMessage,
    NoMatchedMessage,
    OffsetTooSmall,
    OffsetOverflowOne,
    OffsetOverflowBadly,
    NoMessageInQueue,
}

#[derive(Debug, Clone)]
pub struct QueueRead {
    pub status: ReadStatus,
    /// The found records back to back, as stored (a pull body), but for those in `files`.
    pub bytes: Vec<u8>,
    /// Records left in the CommitLog's files for the connection to send from there, each
    /// with its place in `bytes`; only a read that asks for them gets any.
    pub files: Vec<FileSlice>,
    pub message_count: u32,
    /// Where the last record served ends in the CommitLog, when the read knows it.
    pub end_position: Option<u64>,
    /// Per wire spec §4.3: after the last scanned entry.
    pub next_offset: u64,
    pub min_offset: u64,
    /// The next offset to be written.
    pub max_offset: u64,
    /// Damage met and not served: a record the log does not hold as its entry says (the read
    /// ends before it, or moves past it when it came first), or an impossible entry (skipped).
    pub damage: Option<ReadError>,
}

impl QueueRead {
    /// The body's size: the copied records and those left in files.
    pub fn body_bytes(&self) -> u64 {
        self.bytes.len() as u64 + self.files.iter().map(FileSlice::len).sum::<u64>()
    }

    /// An answer that carries no record: where the reader goes on, and the queue's bounds.
    pub fn empty(status: ReadStatus, next_offset: u64, min_offset: u64, max_offset: u64) -> Self {
        QueueRead {
            status,
            bytes: Vec::new(),
            files: Vec::new(),
            message_count: 0,
            end_position: None,
            next_offset,
            min_offset,
            max_offset,
            damage: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueBounds {
    pub min_offset: u64,
    pub max_offset: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    Lower,
    Upper,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum ReadError {
    #[error("I/O error reading {path}: {message}")]
    Io { path: String, message: String },
    #[error("corrupt data in {path} at byte {position}: {reason}")]
    Corrupt {
        path: String,
        position: u64,
        reason: String,
    },
    #[error("no record at position {0}")]
    NoRecord(u64),
    /// Retention has removed the CommitLog below `min_position` (`Store::read_log`).
    #[error("CommitLog position {position} is below the first one kept, {min_position}")]
    BelowMinPosition { position: u64, min_position: u64 },
    /// The CommitLog is written up to `written_position` only (`Store::read_log`): a replica
    /// asking from further on holds bytes this store never wrote.
    #[error("CommitLog position {position} is past the written position {written_position}")]
    PastWrittenPosition {
        position: u64,
        written_position: u64,
    },
}

/// CommitLog bytes as stored, for a replica (`Store::read_log`): `bytes` lie at
/// `position..next_position`, within one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    pub position: u64,
    pub bytes: Vec<u8>,
    /// Where the next chunk starts: `position + bytes.len()`.
    pub next_position: u64,
}

/// Why `Store::append_replicated` refused bytes. Nothing of a refused call is published or
/// kept: the caller resumes from `Store::stats().written_position`, which has not moved.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ReplicaError {
    #[error("replicated bytes start at position {got}, the CommitLog is written up to {expected}")]
    PositionMismatch { expected: u64, got: u64 },
    /// An empty store starts its log at a segment base (a multiple of `segment_bytes`) that
    /// a position can hold (below 2^63).
    #[error("an empty store starts at a segment base (a multiple of {segment_bytes}), not at {position}")]
    NotSegmentBase { position: u64, segment_bytes: u64 },
    /// The bytes end inside a unit (a record, or an end marker and its padding).
    #[error(
        "torn unit at position {position}: {needed_bytes} bytes needed, {available_bytes} given"
    )]
    Torn {
        position: u64,
        needed_bytes: u64,
        available_bytes: u64,
    },
    #[error("bad record at position {position}: {reason}")]
    BadRecord { position: u64, reason: String },
    /// A record's QUEUEOFFSET is not its queue's next offset.
    #[error(
        "record at position {position} has offset {got} in {topic}:{queue_id}, expected {expected}"
    )]
    QueueOffsetGap {
        topic: String,
        queue_id: u32,
        expected: u64,
        got: u64,
        position: u64,
    },
    /// A unit does not end where this store's segment does (an end marker of another size, or
    /// a record running past the segment end): the master's segments are of another size.
    #[error(
        "the {unit_bytes}-byte unit at position {position} does not end where a segment of \
         {segment_bytes} bytes does: the master's segment size differs"
    )]
    SegmentSizeMismatch {
        position: u64,
        unit_bytes: u64,
        segment_bytes: u64,
    },
    #[error("I/O error: {0}")]
    Io(String),
    #[error("store is closed")]
    Closed,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("I/O error on {path}: {message}")]
    Io { path: String, message: String },
    #[error("corrupt {path} at byte {position}: {reason}")]
    Corrupt {
        path: String,
        position: u64,
        reason: String,
    },
    #[error("store directory is locked by another process: {0}")]
    Locked(String),
}

/// A topic deletion that failed part-way; what it did is finished by the next recovery if it
/// got as far as renaming the topic's ConsumeQueue directory, and is undone otherwise.
#[derive(Debug, thiserror::Error)]
#[error("deleting topic {topic} failed on {path}: {message}")]
pub struct DeleteTopicError {
    pub topic: String,
    pub path: String,
    pub message: String,
}

/// What a topic deletion removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicDeletion {
    /// ConsumeQueues removed; 0 when the topic had none, and then nothing was recorded.
    pub queues: usize,
    /// The CommitLog position at the deletion: the topic's records below it stay out of reads.
    pub position: u64,
}

impl OpenError {
    pub(crate) fn io(path: &Path, error: &std::io::Error) -> OpenError {
        OpenError::Io {
            path: path.display().to_string(),
            message: error.to_string(),
        }
    }
}

impl ReadError {
    pub(crate) fn io(path: &Path, error: &std::io::Error) -> ReadError {
        ReadError::Io {
            path: path.display().to_string(),
            message: error.to_string(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// The abort file was present: the last run did not close cleanly.
    pub crashed: bool,
    /// Valid end position after recovery.
    pub commitlog_end: u64,
    /// Torn tail removed from the last segment.
    pub truncated_bytes: u64,
    /// Records whose ConsumeQueue/index entries were rebuilt.
    pub records_redispatched: u64,
    /// Corruption found before the tail, each with file and position.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct StoreStats {
    pub min_position: u64,
    pub written_position: u64,
    pub flushed_position: u64,
    pub messages_appended: u64,
    pub bytes_appended: u64,
}

/// What `Store::truncate_log` dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TruncateReport {
    /// The written position now: the position truncated at.
    pub position: u64,
    /// The written position before.
    pub dropped_from: u64,
    /// Whole segments removed (those past the one holding `position`).
    pub segments_removed: usize,
    /// ConsumeQueues that lost entries, each now ending at the offset its first dropped
    /// record had.
    pub queues_rewound: usize,
}

/// Why `Store::truncate_log` refused or failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TruncateError {
    /// Positions below the min position are gone already; past the written one there is
    /// nothing to drop.
    #[error(
        "position {position} is outside the CommitLog, which holds {min_position} to {written_position}"
    )]
    OutsideLog {
        position: u64,
        min_position: u64,
        written_position: u64,
    },
    /// Cutting inside a record would leave a torn one behind.
    #[error("position {position} is not where a record or end-of-segment marker starts: {reason}")]
    NotABoundary { position: u64, reason: String },
    /// A failed write or fsync: the cut may be part done on disk. A truncation left on disk
    /// by one is finished when the store next opens; until then the store refuses appends.
    #[error("I/O error on {path}: {message}")]
    Io { path: String, message: String },
    #[error("store is closed")]
    Closed,
}

impl TruncateError {
    pub fn io(path: &std::path::Path, e: &std::io::Error) -> TruncateError {
        TruncateError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }
}

impl From<OpenError> for TruncateError {
    fn from(e: OpenError) -> TruncateError {
        match e {
            OpenError::Io { path, message } => TruncateError::Io { path, message },
            other => TruncateError::Io {
                path: String::new(),
                message: other.to_string(),
            },
        }
    }
}
