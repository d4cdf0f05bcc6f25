//! The read path: pulls, lookups by time, by position and by key.
//!
//! Readers never open files: they clone a handle under a short read lock and do positional
//! reads. They see only what the appender has published.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::index::Index;
use crate::log::Log;
use crate::queues::consume_queue::{ConsumeQueue, Entry, ENTRY_BYTES};
use crate::queues::Queues;
use crate::transfer::{FileSlice, SEND_FROM_FILE_RECORD_BYTES_MIN};
use crate::types::{Boundary, LogChunk, QueueRead, ReadError, ReadStatus};
use quiver_record::{RecordView, RECORD_BYTES_MIN, STORE_TIMESTAMP_PREFIX_BYTES};

/// Entries one pull scans at most when filtering (RocketMQ: 16,000 bytes of entries = 800).
const SCAN_ENTRIES_MIN: u64 = 800;

/// What the read path reads. It writes nothing, and sees only what the appender published.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    pub log: &'a Log,
    pub queues: &'a Queues,
    pub index: &'a Index,
}

/// Records adjacent in the CommitLog, read with one call.
struct Run {
    start: u64,
    bytes: u64,
    /// Index of the run's first record in the read's list of sizes.
    first: usize,
}

/// The entries a read takes, all chosen before any record is read, so that adjacent records
/// are read with one call into a buffer sized once.
struct Taken {
    runs: Vec<Run>,
    /// Per taken entry: its size, its queue offset and its CommitLog position.
    sizes: Vec<u32>,
    offsets: Vec<u64>,
    positions: Vec<u64>,
    bytes: u64,
    /// After the last entry scanned.
    next_offset: u64,
    /// The first entry passed over for a size no record can have.
    skipped: Option<ReadError>,
}

impl Taken {
    /// Takes the record at `offset`, in the run it continues or in a new one.
    #[inline]
    fn push(&mut self, entry: Entry, offset: u64) {
        match self.runs.last_mut() {
            Some(r) if r.start.checked_add(r.bytes) == Some(entry.position) => {
                r.bytes += u64::from(entry.size);
            }
            _ => self.runs.push(Run {
                start: entry.position,
                bytes: u64::from(entry.size),
                first: self.sizes.len(),
            }),
        }
        self.sizes.push(entry.size);
        self.offsets.push(offset);
        self.positions.push(entry.position);
        self.bytes += u64::from(entry.size);
    }

    /// Whether the run's records are large enough, on average, that checking each one's
    /// header on its own and sending them from the file costs less than copying them.
    fn worth_sending_from_file(&self, run: usize) -> bool {
        let first = self.runs[run].first;
        let end = self
            .runs
            .get(run + 1)
            .map_or(self.sizes.len(), |next| next.first);
        let records = (end - first) as u64;
        self.runs[run].bytes >= SEND_FROM_FILE_RECORD_BYTES_MIN * records
    }
}

/// What a read asks for: up to `max_messages` records within `max_bytes` (always one, whatever
/// its size) of a queue from `offset`.
pub struct Wanted<'a> {
    pub topic: &'a str,
    pub queue_id: u32,
    pub offset: u64,
    pub max_messages: u32,
    pub max_bytes: u32,
}

/// Reads what `wanted` asks for of the records `accept` takes by tag code. With `to_send`,
/// runs of large records are checked and left in their segment (`QueueRead::files`) instead
/// of being copied.
pub fn read(
    reader: Reader<'_>,
    wanted: Wanted<'_>,
    accept: &dyn Fn(i64) -> bool,
    to_send: bool,
) -> Result<QueueRead, ReadError> {
    let Reader { log, queues, .. } = reader;
    let Wanted {
        topic,
        queue_id,
        offset,
        max_messages,
        max_bytes,
    } = wanted;
    let queue = queues.get(topic, queue_id);
    let (min, max) = queue
        .as_ref()
        .map_or((0, 0), |queue| queue.visible_bounds());
    if let Some((status, next_offset)) = offset_outside(offset, min, max) {
        return Ok(QueueRead::empty(status, next_offset, min, max));
    }
    let queue = queue.expect("a queue holding entries exists");
    let max_messages = max_messages.max(1);
    let scan = (max - offset).min(SCAN_ENTRIES_MIN.max(u64::from(max_messages)));
    let mut entries = Vec::new();
    if let Some(file_end) = scan_entries(&queue, offset, scan, max, &mut entries)? {
        return Ok(QueueRead::empty(
            ReadStatus::NoMatchedMessage,
            file_end,
            min,
            max,
        ));
    }
    let taken = take_entries(
        log,
        &queue,
        &entries,
        offset,
        max_messages,
        max_bytes,
        accept,
    );
    let sent_from_file: Vec<bool> = (0..taken.runs.len())
        .map(|run| to_send && taken.worth_sending_from_file(run))
        .collect();
    let copied_bytes: u64 = (taken.runs.iter().zip(&sent_from_file))
        .filter(|(_, from_file)| !**from_file)
        .map(|(run, _)| run.bytes)
        .sum();
    let mut out = Vec::with_capacity(copied_bytes as usize);
    let mut files = Vec::new();
    let mut segment_cache = None;
    let mut damage = None;
    for (run, from_file) in taken.runs.iter().zip(sent_from_file) {
        damage = if from_file {
            leave_run(
                log,
                run,
                &taken.sizes,
                out.len(),
                &mut files,
                &mut segment_cache,
            )?
        } else {
            read_run(log, run, &taken.sizes, &mut out, &mut segment_cache)?
        };
        if damage.is_some() {
            break;
        }
    }
    let mut count = taken.sizes.len();
    let mut next_offset = taken.next_offset;
    if let Some(damage) = &damage {
        // The records before the damaged one are served; the next read starts at it, and
        // one that starts at it moves past it, so a consumer is never stuck there.
        count = damage.record;
        let at = taken.offsets[damage.record];
        next_offset = if count > 0 { at } else { at + 1 };
    }
    let status = if count > 0 {
        ReadStatus::Found
    } else {
        ReadStatus::NoMatchedMessage
    };
    let end_position = count
        .checked_sub(1)
        .map(|last| taken.positions[last] + u64::from(taken.sizes[last]));
    Ok(QueueRead {
        status,
        bytes: out,
        files,
        message_count: count as u32,
        end_position,
        next_offset,
        min_offset: min,
        max_offset: max,
        damage: damage.map(|d| d.error).or(taken.skipped),
    })
}

/// The status of a read at `offset` and the offset to read next, when the queue (holding
/// `[min, max)`) has no entry there; None when it has.
fn offset_outside(offset: u64, min: u64, max: u64) -> Option<(ReadStatus, u64)> {
    if max == 0 {
        return Some(if offset == 0 {
            (ReadStatus::NoMessageInQueue, 0)
        } else {
            (ReadStatus::OffsetOverflowBadly, 0)
        });
    }
    if offset < min {
        Some((ReadStatus::OffsetTooSmall, min))
    } else if offset == max {
        Some((ReadStatus::OffsetOverflowOne, offset))
    } else if offset > max {
        Some((ReadStatus::OffsetOverflowBadly, max))
    } else {
        None
    }
}

/// Reads `count` entries from `offset` into `entries`. A file missing or cut short below the
/// queue's end (`max`; damage, or removed by hand) gives what this offset's file holds, or, if
/// it is that file, the next file's first offset (returned), where the reader moves on as
/// RocketMQ does, instead of failing every pull there.
fn scan_entries(
    queue: &ConsumeQueue,
    offset: u64,
    count: u64,
    max: u64,
    entries: &mut Vec<u8>,
) -> Result<Option<u64>, ReadError> {
    let missing = |e: &io::Error| {
        matches!(
            e.kind(),
            io::ErrorKind::NotFound | io::ErrorKind::UnexpectedEof
        )
    };
    match queue.read_entries(offset, count, entries) {
        Ok(()) => return Ok(None),
        Err(e) if !missing(&e) => return Err(ReadError::io(&queue.path_for(offset), &e)),
        Err(_) => {}
    }
    let file_end = queue.next_file_start(offset).min(max);
    match queue.read_entries(offset, file_end - offset, entries) {
        Ok(()) => Ok(None),
        Err(e) if missing(&e) => Ok(Some(file_end)),
        Err(e) => Err(ReadError::io(&queue.path_for(offset), &e)),
    }
}

/// Chooses what a read takes of the `entries` scanned from `offset`: up to `max_messages`
/// accepted records within `max_bytes` (the first one whatever its size), passing over entries
/// the log cannot serve.
fn take_entries(
    log: &Log,
    queue: &ConsumeQueue,
    entries: &[u8],
    offset: u64,
    max_messages: u32,
    max_bytes: u32,
    accept: &dyn Fn(i64) -> bool,
) -> Taken {
    let mut taken = Taken {
        runs: Vec::new(),
        sizes: Vec::new(),
        offsets: Vec::new(),
        positions: Vec::new(),
        bytes: 0,
        next_offset: offset,
        skipped: None,
    };
    // Entries below the log's start were removed by retention; they are met when this queue's
    // minimum lags (a damaged file stopped retention from trimming it).
    let log_start = log.min_position();
    for (i, raw) in entries.chunks_exact(ENTRY_BYTES).enumerate() {
        if taken.sizes.len() >= max_messages as usize {
            break;
        }
        let entry = Entry::decode(raw);
        let at = offset + i as u64;
        // Bounded by the segment, not by `record_bytes_max`, which limits appends only.
        let oversized = u64::from(entry.size) > log.segment_bytes();
        if oversized && taken.skipped.is_none() {
            // Larger than any record: reading it would only cost memory.
            taken.skipped = Some(ReadError::Corrupt {
                path: queue.path_for(at).display().to_string(),
                position: queue.byte_in_file(at),
                reason: format!("ConsumeQueue entry gives an impossible size {}", entry.size),
            });
        }
        let servable = entry.size as usize >= RECORD_BYTES_MIN
            && !oversized
            && entry.position >= log_start
            && !log.is_damaged(entry.position);
        if servable && accept(entry.tags_code) {
            if !taken.sizes.is_empty() && taken.bytes + u64::from(entry.size) > u64::from(max_bytes)
            {
                break;
            }
            taken.push(entry, at);
        }
        taken.next_offset = at + 1;
    }
    taken
}

/// A record a ConsumeQueue entry points at that the CommitLog does not hold as the entry
/// describes: `record` indexes the read's taken entries.
struct Damage {
    record: usize,
    error: ReadError,
}

/// Appends the run's records to `out`. On damage, `out` keeps only the records before the
/// damaged one.
fn read_run(
    log: &Log,
    run: &Run,
    sizes: &[u32],
    out: &mut Vec<u8>,
    segment_cache: &mut Option<(u64, Arc<File>)>,
) -> Result<Option<Damage>, ReadError> {
    let (base, file) = match run_segment(log, run, segment_cache)? {
        Ok(found) => found,
        Err(damage) => return Ok(Some(damage)),
    };
    let at = out.len();
    out.resize(at + run.bytes as usize, 0);
    match file.read_exact_at(&mut out[at..], run.start - base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            out.truncate(at);
            return Ok(Some(segment_damage(
                log,
                base,
                run.first,
                run.start,
                "ConsumeQueue entry points past the end of the segment file".to_string(),
            )));
        }
        Err(e) => return Err(ReadError::io(&log.segment_path(base), &e)),
    }
    Ok(check_run(log, base, run, sizes, out, at))
}

/// Checks the run's records as `read_run` does, reading only their headers, and leaves them in
/// their segment: a slice of it joins `files`, to go before `bytes[at..]`. On damage, the
/// slice holds only the records before the damaged one.
fn leave_run(
    log: &Log,
    run: &Run,
    sizes: &[u32],
    at: usize,
    files: &mut Vec<FileSlice>,
    segment_cache: &mut Option<(u64, Arc<File>)>,
) -> Result<Option<Damage>, ReadError> {
    let (base, file) = match run_segment(log, run, segment_cache)? {
        Ok(found) => found,
        Err(damage) => return Ok(Some(damage)),
    };
    let file_bytes = file
        .metadata()
        .map_err(|e| ReadError::io(&log.segment_path(base), &e))?
        .len();
    let mut checked = 0u64;
    let mut damage = None;
    for (record, size) in sizes.iter().enumerate().skip(run.first) {
        if checked >= run.bytes {
            break;
        }
        let position = run.start + checked;
        let mut head = [0u8; 8];
        let in_file = position - base + u64::from(*size) <= file_bytes;
        if !in_file {
            damage = Some(segment_damage(
                log,
                base,
                record,
                position,
                "ConsumeQueue entry points past the end of the segment file".to_string(),
            ));
            break;
        }
        file.read_exact_at(&mut head, position - base)
            .map_err(|e| ReadError::io(&log.segment_path(base), &e))?;
        if let Some(reason) = header_mismatch(&head, *size) {
            damage = Some(segment_damage(log, base, record, position, reason));
            break;
        }
        checked += u64::from(*size);
    }
    if checked > 0 {
        files.push(FileSlice::new(
            at,
            Arc::clone(file),
            run.start - base,
            checked,
        ));
    }
    Ok(damage)
}

/// Why a record's first bytes are not those of a `size`-byte record, if they are not.
#[inline]
fn header_mismatch(record: &[u8], size: u32) -> Option<String> {
    let total = quiver_record::read_i32(record, 0).unwrap_or(-1);
    let magic = quiver_record::read_i32(record, 4).unwrap_or(0);
    (total != size as i32 || !quiver_record::is_record_magic(magic)).then(|| {
        format!("ConsumeQueue says a {size}-byte record, the log has TOTALSIZE {total} MAGIC {magic:#x}")
    })
}

/// The segment holding the run (its base and file), through `segment_cache`; damage when none
/// does or the run passes its end.
fn run_segment<'c>(
    log: &Log,
    run: &Run,
    segment_cache: &'c mut Option<(u64, Arc<File>)>,
) -> Result<Result<(u64, &'c Arc<File>), Damage>, ReadError> {
    if let Some(damage) = cache_segment(log, run, segment_cache)? {
        return Ok(Err(damage));
    }
    let (base, file) = segment_cache
        .as_ref()
        .expect("segment cache was just filled");
    if run.start + run.bytes > base + log.segment_bytes() {
        return Ok(Err(segment_damage(
            log,
            *base,
            run.first,
            run.start,
            "ConsumeQueue entry runs past the segment end".to_string(),
        )));
    }
    Ok(Ok((*base, file)))
}

/// Puts the segment holding the run's start in `segment_cache`, unless it is there already:
/// consecutive runs mostly lie in one segment.
#[inline]
fn cache_segment(
    log: &Log,
    run: &Run,
    segment_cache: &mut Option<(u64, Arc<File>)>,
) -> Result<Option<Damage>, ReadError> {
    let segment_bytes = log.segment_bytes();
    let cached = matches!(segment_cache, Some((base, _)) if *base <= run.start && run.start < *base + segment_bytes);
    if cached {
        return Ok(None);
    }
    match log.find(run.start) {
        Some(found) => {
            *segment_cache = Some(found);
            Ok(None)
        }
        // Retention removed the segment after this read began: the caller's next read
        // finds the queue's minimum raised.
        None if run.start < log.min_position() => Err(ReadError::NoRecord(run.start)),
        // A damaged entry: skipped like the others, or its consumer would retry it forever.
        None => Ok(Some(Damage {
            record: run.first,
            error: ReadError::Corrupt {
                path: log.dir().display().to_string(),
                position: run.start,
                reason: "ConsumeQueue entry points where no segment is".to_string(),
            },
        })),
    }
}

/// A cheap check that the entries and the log agree on the run's records, read into
/// `out[at..]`; the CRC is left to the consumer. On a mismatch, `out` is cut before the record.
fn check_run(
    log: &Log,
    base: u64,
    run: &Run,
    sizes: &[u32],
    out: &mut Vec<u8>,
    at: usize,
) -> Option<Damage> {
    let mut record_at = at;
    let mut position = run.start;
    let run_end = at + run.bytes as usize;
    for (record, size) in sizes.iter().enumerate().skip(run.first) {
        if record_at >= run_end {
            break;
        }
        if let Some(reason) = header_mismatch(&out[record_at..], *size) {
            out.truncate(record_at);
            return Some(segment_damage(log, base, record, position, reason));
        }
        record_at += *size as usize;
        position += u64::from(*size);
    }
    None
}

/// Damage at `position` in the segment at `base`. The path is formatted only when something is
/// wrong: reads are the hot path.
fn segment_damage(log: &Log, base: u64, record: usize, position: u64, reason: String) -> Damage {
    Damage {
        record,
        error: ReadError::Corrupt {
            path: log.segment_path(base).display().to_string(),
            position: position - base,
            reason,
        },
    }
}

fn store_timestamp(log: &Log, queue: &ConsumeQueue, offset: u64) -> Result<i64, ReadError> {
    let entry = queue
        .entry(offset)
        .map_err(|e| ReadError::io(&queue.path_for(offset), &e))?;
    let mut prefix = [0u8; STORE_TIMESTAMP_PREFIX_BYTES];
    let n = (entry.size as usize).min(STORE_TIMESTAMP_PREFIX_BYTES);
    log.read_at(entry.position, &mut prefix[..n])?;
    quiver_record::store_timestamp_from_prefix(&prefix[..n])
        .ok_or(ReadError::NoRecord(entry.position))
}

/// Lower: the first offset stored at or after `timestamp_ms` (max if none).
/// Upper: the last offset stored at or before it (min if none).
pub fn offset_by_time(
    reader: Reader<'_>,
    topic: &str,
    queue_id: u32,
    timestamp_ms: i64,
    boundary: Boundary,
) -> Result<u64, ReadError> {
    let Reader { log, queues, .. } = reader;
    let Some(queue) = queues.get(topic, queue_id) else {
        return Ok(0);
    };
    let (min, max) = queue.visible_bounds();
    let (mut lo, mut hi) = (min, max);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let time = store_timestamp(log, &queue, mid)?;
        let go_right = match boundary {
            Boundary::Lower => time < timestamp_ms,
            Boundary::Upper => time <= timestamp_ms,
        };
        if go_right {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(match boundary {
        Boundary::Lower => lo,
        Boundary::Upper if lo == min => min,
        Boundary::Upper => lo - 1,
    })
}

pub fn earliest_time(
    reader: Reader<'_>,
    topic: &str,
    queue_id: u32,
) -> Result<Option<i64>, ReadError> {
    let Reader { log, queues, .. } = reader;
    let Some(queue) = queues.get(topic, queue_id) else {
        return Ok(None);
    };
    let (min, max) = queue.visible_bounds();
    if min == max {
        return Ok(None);
    }
    store_timestamp(log, &queue, min).map(Some)
}

pub fn read_record(log: &Log, position: u64) -> Result<Vec<u8>, ReadError> {
    let written = log.written();
    if position < log.min_position() || position >= written {
        return Err(ReadError::NoRecord(position));
    }
    let (base, file) = log.find(position).ok_or(ReadError::NoRecord(position))?;
    let path = log.segment_path(base);
    if log.is_damaged(position) {
        return Err(ReadError::Corrupt {
            path: path.display().to_string(),
            position: position - base,
            reason: "inside a range found corrupt at recovery".to_string(),
        });
    }
    let read = |buf: &mut [u8]| match file.read_exact_at(buf, position - base) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(ReadError::NoRecord(position)),
        Err(e) => Err(ReadError::io(&path, &e)),
    };
    let mut head = [0u8; 8];
    read(&mut head)?;
    let total = quiver_record::read_i32(&head, 0).unwrap_or(-1);
    let magic = quiver_record::read_i32(&head, 4).unwrap_or(0);
    let fits = total >= RECORD_BYTES_MIN as i32
        && total as u64 <= log.segment_bytes()
        && position + total as u64 <= written;
    if !quiver_record::is_record_magic(magic) || !fits {
        return Err(ReadError::NoRecord(position));
    }
    let mut bytes = vec![0u8; total as usize];
    read(&mut bytes)?;
    match RecordView::parse(&bytes) {
        Ok(view) if view.physical_offset == position as i64 => Ok(bytes),
        _ => Err(ReadError::NoRecord(position)),
    }
}

/// The most record bytes one key query returns (after the first record): its answer is one
/// frame, and RocketMQ's frames stop at 16 MiB.
pub const QUERY_BYTES_MAX: usize = 12 * 1024 * 1024;

pub fn query_by_key(
    reader: Reader<'_>,
    topic: &str,
    key: &str,
    max: usize,
    begin_ms: i64,
    end_ms: i64,
) -> Result<Vec<Vec<u8>>, ReadError> {
    let Reader { log, queues, index } = reader;
    let mut found = Vec::new();
    if max == 0 {
        return Ok(found);
    }
    let mut seen = HashSet::new();
    let mut found_bytes = 0;
    let key_hash = quiver_record::index_key_hash(topic, key);
    index.query(key_hash, begin_ms, end_ms, &mut |position| {
        if !seen.insert(position) {
            return Ok(true);
        }
        let bytes = match read_record(log, position) {
            Ok(bytes) => bytes,
            // Stale entries (a truncated tail, a reused position) and corrupt ranges are skipped.
            Err(ReadError::NoRecord(_) | ReadError::Corrupt { .. }) => return Ok(true),
            Err(e) => return Err(e),
        };
        let matches = RecordView::parse(&bytes).is_ok_and(|view| {
            let mut has_key = false;
            view.for_each_key(|k| has_key |= k == key);
            view.topic == topic
                && !queues.is_deleted(topic, position)
                && has_key
                && (begin_ms..=end_ms).contains(&view.store_timestamp_ms)
        });
        if matches {
            // At least one record, then no more than fits the answer's frame.
            if !found.is_empty() && found_bytes + bytes.len() > QUERY_BYTES_MAX {
                return Ok(false);
            }
            found_bytes += bytes.len();
            found.push(bytes);
        }
        Ok(found.len() < max)
    })?;
    Ok(found)
}

/// The CommitLog bytes from `position` for a replica (`Store::read_log`): below the written
/// position, within one segment, zeros where a sealed segment's file ends before the segment
/// does (the appender writes only the end marker, not its padding).
pub fn read_log(log: &Log, position: u64, bytes_max: usize) -> Result<LogChunk, ReadError> {
    let written = log.written();
    if position > written {
        return Err(ReadError::PastWrittenPosition {
            position,
            written_position: written,
        });
    }
    let below_min = |min_position: u64| ReadError::BelowMinPosition {
        position,
        min_position,
    };
    let min_position = log.min_position();
    if position < min_position {
        return Err(below_min(min_position));
    }
    let segment_bytes = log.segment_bytes();
    let segment_end = position - position % segment_bytes + segment_bytes;
    let end = written
        .min(segment_end)
        .min(position.saturating_add(bytes_max as u64));
    let mut bytes = vec![0u8; (end - position) as usize];
    if !bytes.is_empty() {
        let Some((base, file)) = log.find(position) else {
            // Retention removed the segment since the check above.
            let min_position = log.min_position();
            if position < min_position {
                return Err(below_min(min_position));
            }
            return Err(ReadError::Corrupt {
                path: log.dir().display().to_string(),
                position,
                reason: "no segment holds this position below the written one".to_string(),
            });
        };
        let mut done = 0;
        while done < bytes.len() {
            match file.read_at(&mut bytes[done..], position - base + done as u64) {
                // The file ends here: the rest stays zeros.
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::io(&log.segment_path(base), &e)),
            }
        }
    }
    Ok(LogChunk {
        position,
        bytes,
        next_position: end,
    })
}
