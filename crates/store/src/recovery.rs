//! Recovery at open: find the valid end of the CommitLog, rebuild ConsumeQueue entries past
//! the checkpoint and index entries past the index's own durable end, trim ConsumeQueues to the
//! log, write a fresh checkpoint.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::durability::checkpoint::{self, Checkpoint};
use crate::durability::Durability;
use crate::durable_file::sync_parent_dir;
use crate::faults::IoFaults;
use crate::index::{Index, KeyEntry};
use crate::log::commitlog::{segment_too_long, Segments};
use crate::log::damaged::{self, BadRange};
use crate::log::Log;
use crate::queues::consume_queue::Entry;
use crate::queues::deleted::{self, Deletions};
use crate::queues::{valid_topic, Queues};
use crate::truncate;
use crate::types::{OpenError, RecoveryReport, StoreConfig};
use quiver_record::{RecordView, BLANK_BYTES, MAGIC_BLANK, PHYSICAL_OFFSET_AT, RECORD_BYTES_MIN};

/// Bytes read at once while scanning segments.
const SCAN_READ_BYTES: usize = 4 * 1024 * 1024;
/// Index entries handed to the index at once during re-dispatch.
const KEY_BATCH: usize = 4096;
/// Positions that name themselves but fail a record check, after which the search for the
/// next valid record gives up (as if none followed): bounds recovery's work on a crafted file.
const CANDIDATES_REFUSED_MAX: u32 = 4096;

/// The layers as recovery leaves them, consistent and durable.
pub struct Recovered {
    pub log: Arc<Log>,
    pub queues: Arc<Queues>,
    pub index: Arc<Index>,
    pub durability: Arc<Durability>,
    /// The store directory's lock, held while the store is open.
    pub lock: File,
}

fn config_error(field: &str, reason: &str) -> OpenError {
    OpenError::Io {
        path: format!("StoreConfig.{field}"),
        message: reason.to_string(),
    }
}

fn check_config(config: &StoreConfig) -> Result<(), OpenError> {
    let record_max = u64::from(config.record_bytes_max);
    if config.segment_bytes < RECORD_BYTES_MIN as u64 + BLANK_BYTES
        || config.segment_bytes > i32::MAX as u64
    {
        return Err(config_error(
            "segment_bytes",
            "must hold a record and fit in an i32",
        ));
    }
    if record_max < RECORD_BYTES_MIN as u64 {
        return Err(config_error(
            "record_bytes_max",
            "smaller than the smallest record",
        ));
    }
    if config.consume_queue_entries_per_file == 0 {
        return Err(config_error(
            "consume_queue_entries_per_file",
            "must be positive",
        ));
    }
    if config.index_slots == 0 || config.index_entries_max < 2 {
        return Err(config_error(
            "index_slots",
            "need at least 1 slot and 2 entries",
        ));
    }
    if config.append_queue_requests_max == 0 {
        return Err(config_error(
            "append_queue_requests_max",
            "must be positive",
        ));
    }
    Ok(())
}

/// Takes the store's `lock` file (next to `abort`), held for as long as the store is open: a
/// second broker started on the same directory would otherwise run recovery over files the
/// first is writing, and cut what it just wrote as a torn tail. RocketMQ refuses the same way.
fn lock_store(config: &StoreConfig) -> Result<std::fs::File, OpenError> {
    let path = config
        .abort_path
        .parent()
        .unwrap_or(config.commitlog_dir.as_path())
        .join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| OpenError::io(&path, &e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked(format!(
            "{} is held: another broker is running on this store",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(OpenError::io(&path, &e)),
    }
}

/// Recovers the store `config` describes; its layers record their I/O faults in `faults`.
pub fn recover(
    config: &StoreConfig,
    faults: &IoFaults,
) -> Result<(Recovered, RecoveryReport), OpenError> {
    check_config(config)?;
    let mut report = RecoveryReport {
        crashed: config.abort_path.exists(),
        ..RecoveryReport::default()
    };
    create_dirs(config)?;
    let lock = lock_store(config)?;
    let intent = truncate::intent_path(config);
    let truncation = truncate::pending(config).map_err(|e| OpenError::io(&intent, &e))?;
    let checkpoint = read_checkpoint(config, &mut report.problems)?
        .map(|c| truncation.map_or(c, |position| c.truncated_at(position)));
    let segments = Segments::open(&config.commitlog_dir, config.segment_bytes)?;
    if let Some(position) = truncation {
        truncate::finish_on_disk(&segments, position).map_err(|e| OpenError::io(&intent, &e))?;
        report.problems.push(format!(
            "{}: a truncation of the CommitLog at {position} was interrupted; finished",
            intent.display()
        ));
    }
    let queues = Queues::open(config, &mut report.problems)?;
    let deletions = queues.deletions();
    // The index is made durable less often than the checkpoint (`Index::flush_if_due`): its
    // keys are re-added from where its last flush left it, which may be before the dispatch
    // point. A checkpoint of the first format flushed the index with the queues.
    let index_from = checkpoint.map_or(0, |c| c.index_flushed_position);
    let index = Index::open(
        &config.index_dir,
        config.index_slots,
        config.index_entries_max,
        index_from,
        &mut report.problems,
        faults.clone(),
    )?;
    let damaged_before = damaged::load(&config.damaged_path, &mut report.problems)
        .map_err(|e| OpenError::io(&config.damaged_path, &e))?;
    let start = checkpoint.map_or(0, |c| c.dispatched_flushed_position);
    let mut scan = Scan {
        config,
        segments: &segments,
        queues: &queues,
        index: &index,
        dispatch_from: start,
        index_from,
        report: &mut report,
        keys: Vec::new(),
        bad_ranges: Vec::new(),
        queue_next: HashMap::new(),
        deletions,
    };
    let end = scan.run(start.min(index_from))?;
    index.indexed_up_to(end);
    let found = std::mem::take(&mut scan.bad_ranges);
    report.commitlog_end = end;
    trim_queues(&queues, &segments, end, &mut report.problems)?;
    let min_position = segments.first_base().unwrap_or(end);
    queues.tidy_deletions(min_position, end, &mut report.problems);
    let bad_ranges = store_damage(config, damaged_before, found, min_position, truncation)?;
    let log = Log::new(segments, end, min_position, bad_ranges, faults.clone());
    let recovered = make_durable(config, log, queues, index, lock, faults)?;
    if truncation.is_some() {
        truncate::finish(config).map_err(|e| OpenError::io(&intent, &e))?;
    }
    Ok((recovered, report))
}

fn create_dirs(config: &StoreConfig) -> Result<(), OpenError> {
    for dir in [
        Some(config.consume_queue_dir.as_path()),
        config.checkpoint_path.parent(),
        config.abort_path.parent(),
    ]
    .into_iter()
    .flatten()
    {
        std::fs::create_dir_all(dir).map_err(|e| OpenError::io(dir, &e))?;
    }
    Ok(())
}

/// The checkpoint, or None (and a problem reported) when it cannot be trusted: then the whole
/// CommitLog is scanned again.
fn read_checkpoint(
    config: &StoreConfig,
    problems: &mut Vec<String>,
) -> Result<Option<Checkpoint>, OpenError> {
    let path = &config.checkpoint_path;
    Ok(
        match checkpoint::read(path).map_err(|e| OpenError::io(path, &e))? {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                problems.push(format!(
                    "{}: {e}; rebuilding from the start of the CommitLog",
                    path.display()
                ));
                None
            }
            None => None,
        },
    )
}

/// Cuts every ConsumeQueue back to the log's valid `end`, and drops its entries below the
/// first segment.
fn trim_queues(
    queues: &Queues,
    segments: &Segments,
    end: u64,
    problems: &mut Vec<String>,
) -> Result<(), OpenError> {
    for queue in queues.all() {
        queue
            .trim(end)
            .map_err(|e| OpenError::io(&queue.path_for(0), &e))?;
        // Entries into segments retention deleted (a crash may have come between deleting
        // the segments and their ConsumeQueue files).
        if let Some(first) = segments.first_base() {
            if let Err(e) = queue.drop_below(first) {
                problems.push(format!(
                    "{}: cannot find the first entry past position {first}: {e}",
                    queue.path_for(0).display()
                ));
            }
        }
    }
    Ok(())
}

/// The damaged ranges known before with those the scan `found`, from `min_position` on and,
/// after a truncation, below its position (the bytes past it are gone, and new records will be
/// written there); stored when they changed, durably before the checkpoint moves the next
/// scan's start past the damage.
fn store_damage(
    config: &StoreConfig,
    damaged_before: Vec<BadRange>,
    found: Vec<BadRange>,
    min_position: u64,
    truncation: Option<u64>,
) -> Result<Vec<BadRange>, OpenError> {
    let mut bad_ranges = damaged::normalize(
        damaged_before.iter().copied().chain(found).collect(),
        min_position,
    );
    if let Some(position) = truncation {
        bad_ranges = damaged::clip(bad_ranges, position);
    }
    if bad_ranges != damaged_before {
        damaged::store(&config.damaged_path, &bad_ranges)
            .map_err(|e| OpenError::io(&config.damaged_path, &e))?;
    }
    Ok(bad_ranges)
}

/// Builds the layers over what recovery left, makes what it rebuilt durable before the
/// checkpoint claims it, and creates the abort file (removed by a clean close).
fn make_durable(
    config: &StoreConfig,
    log: Log,
    queues: Queues,
    index: Index,
    lock: File,
    faults: &IoFaults,
) -> Result<Recovered, OpenError> {
    let log = Arc::new(log);
    let queues = Arc::new(queues);
    let index = Arc::new(index);
    let durability = Arc::new(Durability::new(
        Arc::clone(&log),
        Arc::clone(&queues),
        Arc::clone(&index),
        config.checkpoint_path.clone(),
        faults.clone(),
    ));
    durability.flush()?;
    let abort = &config.abort_path;
    File::create(abort)
        .and_then(|_| sync_parent_dir(abort))
        .map_err(|e| OpenError::io(abort, &e))?;
    Ok(Recovered {
        log,
        queues,
        index,
        durability,
        lock,
    })
}

/// The checks a whole record (`bytes`, exactly TOTALSIZE long) must pass to be taken as the
/// record stored at `position`: by recovery's scan and by a replica's appends alike, so that
/// a replica keeps nothing its own recovery would refuse. The caller has checked TOTALSIZE
/// against the segment and keeps a queue's offsets in order.
pub(crate) fn check_record(bytes: &[u8], position: u64) -> Result<RecordView<'_>, String> {
    let view = RecordView::parse(bytes).map_err(|e| e.to_string())?;
    if !view.body_crc_matches() {
        return Err("BODYCRC mismatch".to_string());
    }
    if view.physical_offset != position as i64 {
        return Err(format!(
            "PHYSICALOFFSET {} != position",
            view.physical_offset
        ));
    }
    if view.queue_id < 0 || view.queue_offset < 0 || !valid_topic(view.topic) {
        return Err("bad queue id, queue offset or topic".to_string());
    }
    // Each lower offset of the queue is a record stored before this one, and the body CRC
    // does not cover the header: a flipped high bit here would move the queue's end.
    if view.queue_offset as u64 > position / RECORD_BYTES_MIN as u64 {
        return Err(format!(
            "QUEUEOFFSET {} is more than the records that fit before it",
            view.queue_offset
        ));
    }
    Ok(view)
}

/// Buffered positional reads over one segment.
struct SegmentReader<'a> {
    file: &'a File,
    length: u64,
    buf: Vec<u8>,
    buf_start: u64,
}

impl SegmentReader<'_> {
    /// `n` bytes at `at`; the caller has checked that they lie within the file.
    fn get(&mut self, at: u64, n: usize) -> io::Result<&[u8]> {
        let buf_end = self.buf_start + self.buf.len() as u64;
        if at < self.buf_start || at + n as u64 > buf_end {
            let len = (self.length - at).min(SCAN_READ_BYTES.max(n) as u64) as usize;
            self.buf.resize(len, 0);
            self.file.read_exact_at(&mut self.buf, at)?;
            self.buf_start = at;
        }
        let from = (at - self.buf_start) as usize;
        Ok(&self.buf[from..from + n])
    }

    /// How many bytes from `at` on are already buffered (0 when `at` is outside the buffer).
    fn buffered_from(&self, at: u64) -> usize {
        let buf_end = self.buf_start + self.buf.len() as u64;
        if self.buf_start <= at && at < buf_end {
            (buf_end - at) as usize
        } else {
            0
        }
    }
}

/// Where the bytes other than zero end in `[at, segment end)`: `at` when all are zero. The
/// space ahead of the appender (zero-filled or allocated) reads as zeros, so a torn tail
/// followed by it counts as the torn bytes only.
fn content_end(reader: &mut SegmentReader, mut at: u64) -> io::Result<u64> {
    let mut end = at;
    while at < reader.length {
        let n = (reader.length - at).min(SCAN_READ_BYTES as u64) as usize;
        if let Some(last) = reader.get(at, n)?.iter().rposition(|b| *b != 0) {
            end = at + last as u64 + 1;
        }
        at += n as u64;
    }
    Ok(end)
}

enum Step {
    Record(u64),
    Blank,
    /// Eight zero bytes: the start of space zero-filled ahead of the appender (or damage).
    Zeros,
    Invalid(String),
}

impl Step {
    /// What is wrong at byte `at` of the segment, if anything.
    fn damage(&self, at: u64) -> Option<String> {
        match self {
            Step::Zeros => Some(format!("zero bytes instead of a record at byte {at}")),
            Step::Invalid(reason) => Some(format!("invalid record at byte {at}: {reason}")),
            Step::Record(_) | Step::Blank => None,
        }
    }
}

struct Scan<'a> {
    config: &'a StoreConfig,
    segments: &'a Segments,
    queues: &'a Queues,
    index: &'a Index,
    /// Records from here on get their ConsumeQueue entries again (the checkpoint covers those
    /// before), and from `index_from` on their keys.
    dispatch_from: u64,
    index_from: u64,
    report: &'a mut RecoveryReport,
    keys: Vec<KeyEntry>,
    bad_ranges: Vec<BadRange>,
    /// Per topic and queue: one past the QUEUEOFFSET of the last record re-dispatched. A
    /// queue's records lie in the log in offset order, so a record below this is damaged.
    queue_next: HashMap<String, HashMap<u32, u64>>,
    /// Records of a deleted topic written before its deletion are passed over.
    deletions: Deletions,
}

impl Scan<'_> {
    /// Scans from `start`, re-dispatching valid records; returns the valid end.
    fn run(&mut self, start: u64) -> Result<u64, OpenError> {
        let bases = self.segments.bases();
        let segment_bytes = self.config.segment_bytes;
        let (Some(&first), Some(&last)) = (bases.first(), bases.last()) else {
            return Ok(0);
        };
        let last_length = self.length(last)?;
        // After a crash, bytes past the last segment's end are a torn write and are cut below;
        // after a clean stop nothing can have been torn.
        if last_length > segment_bytes && !self.report.crashed {
            return Err(segment_too_long(&self.segments.path(last), segment_bytes));
        }
        // A checkpoint outside the files (files removed or cut by hand): rescan what is there.
        let mut start = start.max(first);
        if start > last + last_length && start != last + segment_bytes {
            start = last;
        }
        let mut end = start;
        for &base in bases.iter().filter(|b| **b + segment_bytes > start) {
            if let Some(segment_end) = self.scan_segment(base, start, base == last)? {
                end = segment_end;
            }
        }
        self.flush_keys()?;
        Ok(end)
    }

    /// Scans the segment at `base` from `start` (or from its beginning), re-dispatching its
    /// valid records and keeping reads out of its damage. Returns where the log's valid end is
    /// when it is in this segment (or after it: the segment ends with its end marker), None
    /// when the segment ends in damage or without its marker.
    fn scan_segment(
        &mut self,
        base: u64,
        start: u64,
        is_last: bool,
    ) -> Result<Option<u64>, OpenError> {
        let segment_bytes = self.config.segment_bytes;
        let (file, length) = self.open_segment(base, is_last)?;
        let mut at = start.saturating_sub(base);
        if at > length {
            at = 0;
        }
        let mut reader = SegmentReader {
            file: &file,
            length,
            buf: Vec::new(),
            buf_start: 0,
        };
        let path = self.segments.path(base);
        loop {
            if at == length {
                return Ok(self.file_end(&path, base, at, is_last));
            }
            let step = self
                .step(&mut reader, base, at)
                .map_err(|e| OpenError::io(&path, &e))?;
            let damage = step.damage(at);
            if let Some(damage) = &damage {
                if let Some(next) = self.pass_damage(&mut reader, &path, base, at, damage)? {
                    at = next;
                    continue;
                }
            }
            match step {
                Step::Record(size) => at += size,
                Step::Blank => return Ok(Some(base + segment_bytes)),
                Step::Zeros | Step::Invalid(_) if is_last => {
                    return self.cut_tail(&mut reader, &path, base, at).map(Some);
                }
                Step::Zeros | Step::Invalid(_) => {
                    self.not_served(
                        format!(
                            "{}: {}; the rest of the segment is not served",
                            path.display(),
                            damage.unwrap_or_default()
                        ),
                        base + at..base + segment_bytes,
                    );
                    return Ok(None);
                }
            }
        }
    }

    /// Where the scan meets the end of the segment's file, at `at`, with no end marker: the
    /// log's end in the last segment. Any other segment lost its tail (a crash between the
    /// ConsumeQueue's write and the file's growth reaching the disk, or a cut): entries
    /// pointing there must not be read as records.
    fn file_end(&mut self, path: &Path, base: u64, at: u64, is_last: bool) -> Option<u64> {
        if is_last {
            return Some(base + at);
        }
        self.not_served(
            format!(
                "{}: segment ends at byte {at} without an end marker",
                path.display()
            ),
            base + at..base + self.config.segment_bytes,
        );
        None
    }

    /// The segment at `base` and its length; the last one cut to the segment size first, as
    /// bytes past it are a torn write after a crash (`run` refuses them after a clean stop).
    fn open_segment(&mut self, base: u64, is_last: bool) -> Result<(Arc<File>, u64), OpenError> {
        let segment_bytes = self.config.segment_bytes;
        let (_, file) = self.segments.find(base).expect("listed segment is open");
        let mut length = self.length(base)?;
        if is_last && length > segment_bytes {
            file.set_len(segment_bytes)
                .map_err(|e| OpenError::io(&self.segments.path(base), &e))?;
            self.report.truncated_bytes += length - segment_bytes;
            length = segment_bytes;
        }
        Ok((file, length))
    }

    /// Damage with good records after it (a page lost or a bit flipped) is neither a torn
    /// tail nor the end of the segment: the records after it are served and kept, only the
    /// damaged bytes are not. Returns where the next valid record starts, if one does.
    fn pass_damage(
        &mut self,
        reader: &mut SegmentReader,
        path: &Path,
        base: u64,
        at: u64,
        damage: &str,
    ) -> Result<Option<u64>, OpenError> {
        let next = self
            .next_valid(reader, base, at)
            .map_err(|e| OpenError::io(path, &e))?;
        if let Some(next) = next {
            self.not_served(
                format!(
                    "{}: {damage}; bytes {at} to {next} are not served",
                    path.display()
                ),
                base + at..base + next,
            );
        }
        Ok(next)
    }

    /// Cuts the last segment at `at`, where its records end in zeros or damage, and returns
    /// the log's end there. Unused space prepared ahead of the appender is not a torn tail;
    /// anything else is.
    fn cut_tail(
        &mut self,
        reader: &mut SegmentReader,
        path: &Path,
        base: u64,
        at: u64,
    ) -> Result<u64, OpenError> {
        let content = content_end(reader, at).map_err(|e| OpenError::io(path, &e))?;
        self.report.truncated_bytes += content - at;
        reader
            .file
            .set_len(at)
            .map_err(|e| OpenError::io(path, &e))?;
        Ok(base + at)
    }

    fn length(&self, base: u64) -> Result<u64, OpenError> {
        let path = self.segments.path(base);
        let (_, file) = self.segments.find(base).expect("listed segment is open");
        file.metadata()
            .map(|m| m.len())
            .map_err(|e| OpenError::io(&path, &e))
    }

    /// Reports damage and keeps reads out of `range` (absolute positions).
    fn not_served(&mut self, problem: String, range: std::ops::Range<u64>) {
        self.report.problems.push(problem);
        self.bad_ranges.push(BadRange {
            start: range.start,
            end: range.end,
        });
    }

    /// Re-dispatches the record at `at` if it is valid.
    fn step(&mut self, reader: &mut SegmentReader, base: u64, at: u64) -> io::Result<Step> {
        let total = match self.check(reader, base, at)? {
            Ok(total) => total,
            Err(step) => return Ok(step),
        };
        let bytes = reader.get(at, total as usize)?;
        let view = match RecordView::parse(bytes) {
            Ok(view) => view,
            Err(e) => return Ok(Step::Invalid(e.to_string())),
        };
        let position = base + at;
        if deleted::is_deleted(&self.deletions, view.topic, position) {
            return Ok(Step::Record(total));
        }
        if position >= self.dispatch_from {
            let entry = Entry {
                position,
                size: total as u32,
                tags_code: view.tags_code(),
            };
            let queue = self
                .queues
                .get_or_create(view.topic, view.queue_id as u32)?;
            queue.write_entries(view.queue_offset as u64, &entry.encode())?;
            self.report.records_redispatched += 1;
        }
        let next = view.queue_offset as u64 + 1;
        match self.queue_next.get_mut(view.topic) {
            Some(queues) => {
                queues.insert(view.queue_id as u32, next);
            }
            // A topic's name is copied once, not once per record.
            None => {
                let queues = HashMap::from([(view.queue_id as u32, next)]);
                self.queue_next.insert(view.topic.to_string(), queues);
            }
        }
        if position >= self.index_from {
            let mut keys = std::mem::take(&mut self.keys);
            view.for_each_key(|key| {
                keys.push(KeyEntry {
                    key_hash: quiver_record::index_key_hash(view.topic, key),
                    position,
                    store_timestamp_ms: view.store_timestamp_ms,
                })
            });
            self.keys = keys;
        }
        if self.keys.len() >= KEY_BATCH {
            self.index.add(&self.keys)?;
            self.keys.clear();
        }
        Ok(Step::Record(total))
    }

    /// The first position after `at` in this segment where a valid record starts. A record
    /// holds its own position (PHYSICALOFFSET), so only positions whose bytes name themselves
    /// are checked in full; a stray match must still pass every check, the body CRC included.
    fn next_valid(
        &self,
        reader: &mut SegmentReader,
        base: u64,
        at: u64,
    ) -> io::Result<Option<u64>> {
        const ANCHOR_END: usize = PHYSICAL_OFFSET_AT + 8;
        let mut from = at + 1;
        let mut refused = 0;
        while reader.length.saturating_sub(from) >= RECORD_BYTES_MIN as u64 {
            // Search what is buffered before reading on: after a refused candidate the search
            // resumes one byte later, and reading a fresh window there each time would read
            // the segment once per candidate.
            let buffered = reader.buffered_from(from);
            let n = if buffered >= ANCHOR_END {
                buffered
            } else {
                (reader.length - from).min(SCAN_READ_BYTES as u64) as usize
            };
            let window = reader.get(from, n)?;
            // No position past 0 is all zero bytes: space zero-filled ahead of the appender
            // is passed over without looking at each position.
            if n >= ANCHOR_END && window.iter().all(|b| *b == 0) {
                from += (n - ANCHOR_END + 1) as u64;
                continue;
            }
            let candidate = window.windows(ANCHOR_END).enumerate().find_map(|(i, w)| {
                let position = base + from + i as u64;
                (w[PHYSICAL_OFFSET_AT..] == position.to_be_bytes()).then_some(from + i as u64)
            });
            match candidate {
                Some(position) => {
                    if self.check(reader, base, position)?.is_ok() {
                        return Ok(Some(position));
                    }
                    // Each refusal may have checked a body CRC over up to a segment's
                    // bytes; only a file made to look like records everywhere gets here often.
                    refused += 1;
                    if refused == CANDIDATES_REFUSED_MAX {
                        return Ok(None);
                    }
                    from = position + 1;
                }
                // The last ANCHOR_END - 1 bytes start windows that did not fit: look again.
                None if n >= ANCHOR_END => from += (n - ANCHOR_END + 1) as u64,
                None => break,
            }
        }
        Ok(None)
    }

    /// The size of the valid record at `at`, or what is there instead. Reads, never writes.
    fn check(
        &self,
        reader: &mut SegmentReader,
        base: u64,
        at: u64,
    ) -> io::Result<Result<u64, Step>> {
        let segment_bytes = self.config.segment_bytes;
        if reader.length - at < BLANK_BYTES {
            return Ok(Err(Step::Invalid("torn header".to_string())));
        }
        let head = reader.get(at, BLANK_BYTES as usize)?;
        if head.iter().all(|b| *b == 0) {
            return Ok(Err(Step::Zeros));
        }
        let total = quiver_record::read_i32(head, 0).unwrap_or(-1);
        let magic = quiver_record::read_i32(head, 4).unwrap_or(0);
        if magic == MAGIC_BLANK {
            return Ok(if total as i64 == (segment_bytes - at) as i64 {
                Err(Step::Blank)
            } else {
                Err(Step::Invalid(format!(
                    "end marker of {total} bytes at byte {at}"
                )))
            });
        }
        if !quiver_record::is_record_magic(magic) {
            return Ok(Err(Step::Invalid(format!("bad MAGIC {magic:#x}"))));
        }
        // Not bounded by `record_bytes_max`: that limits appends, and lowering it must not turn
        // records stored under a higher one into damage. A record must fit in its segment.
        if total < RECORD_BYTES_MIN as i32 {
            return Ok(Err(Step::Invalid(format!("bad TOTALSIZE {total}"))));
        }
        let total = total as u64;
        if at + total + BLANK_BYTES > segment_bytes {
            return Ok(Err(Step::Invalid(
                "record leaves no room for the end marker".to_string(),
            )));
        }
        if at + total > reader.length {
            return Ok(Err(Step::Invalid("torn record".to_string())));
        }
        let bytes = reader.get(at, total as usize)?;
        let view = match check_record(bytes, base + at) {
            Ok(view) => view,
            Err(reason) => return Ok(Err(Step::Invalid(reason))),
        };
        // A lower QUEUEOFFSET (or another queue's) would overwrite the ConsumeQueue entry of
        // an intact record stored earlier.
        let next = self
            .queue_next
            .get(view.topic)
            .and_then(|queues| queues.get(&(view.queue_id as u32)));
        if let Some(&next) = next {
            if (view.queue_offset as u64) < next {
                return Ok(Err(Step::Invalid(format!(
                    "QUEUEOFFSET {} is not after an earlier record's {} in its queue",
                    view.queue_offset,
                    next - 1
                ))));
            }
        }
        Ok(Ok(total))
    }

    fn flush_keys(&mut self) -> Result<(), OpenError> {
        self.index
            .add(&self.keys)
            .map_err(|e| OpenError::io(&self.config.index_dir, &e))?;
        self.keys.clear();
        Ok(())
    }
}
