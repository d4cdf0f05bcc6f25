//! Truncating the CommitLog (`Store::truncate_log`): a slave whose new master never had the
//! tail of its log drops it, and the store goes on from there as if it had never been
//! written. RocketMQ only moves its positions in memory and leaves the dropped records on
//! disk, where its recovery finds them again after a crash (apache/rocketmq#10666); here the
//! cut is on disk before anything sees the shorter log.
//!
//! A cut touches several files (segments, ConsumeQueues, the index's and the log's
//! positions, the checkpoint), which no single write changes at once. So it is first written
//! down: `truncating` (next to the checkpoint) holds the position, written and fsynced before
//! any other file changes and removed, durably, after every other one has. Recovery that finds
//! it cuts the log there before scanning, so a crash at any point of a truncation ends with
//! the log cut at the position, never with the dropped records back.
//!
//! Order, with the appender held (no append interleaves) and retention and topic deletions
//! kept out: the intent; the segments past the position removed and the one holding it cut,
//! fsynced; each ConsumeQueue's entries from the position on removed, fsynced, its max offset
//! lowered; the index told to add keys again from the position; the damaged ranges past it
//! dropped; the written and flushed positions lowered; a checkpoint that vouches for nothing
//! past it; the intent removed.

use std::io;
use std::path::{Path, PathBuf};

use crate::appender::Appender;
use crate::durability::Durability;
use crate::durable_file;
use crate::faults::{FileKind, IoOp};
use crate::index::Index;
use crate::log::commitlog::Segments;
use crate::log::{damaged, Log};
use crate::queues::Queues;
use crate::types::{StoreConfig, TruncateError, TruncateReport};
use quiver_record::{BLANK_BYTES, MAGIC_BLANK, RECORD_BYTES_MIN};

/// The file recording a truncation under way, next to the checkpoint: one line, the position.
pub fn intent_path(config: &StoreConfig) -> PathBuf {
    config.checkpoint_path.with_file_name("truncating")
}

/// The truncation a crash interrupted, if any. A file that does not hold a position is an
/// error: guessing could bring the dropped records back.
pub fn pending(config: &StoreConfig) -> io::Result<Option<u64>> {
    let path = intent_path(config);
    let text = match std::fs::read(&path) {
        Ok(bytes) if bytes.len() <= 32 => bytes,
        Ok(_) => return Err(io::Error::new(io::ErrorKind::InvalidData, "too long")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    std::str::from_utf8(&text)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "does not hold a CommitLog position",
            )
        })
}

/// Recovery's half of a truncation a crash interrupted: the segments at and past `position`
/// removed (the last first, so that those left stay contiguous if this too is interrupted),
/// the one holding it cut there, all fsynced. The rest (queues, index, checkpoint, damaged
/// ranges) recovery rebuilds from the log's new end.
pub fn finish_on_disk(segments: &Segments, position: u64) -> io::Result<()> {
    let segment_bytes = segments.segment_bytes();
    for base in segments.bases().into_iter().rev() {
        if base >= position {
            segments.remove(base)?;
        } else if base + segment_bytes > position {
            if let Some((_, file)) = segments.find(base) {
                if file.metadata()?.len() > position - base {
                    file.set_len(position - base)?;
                    file.sync_all()?;
                }
            }
        }
    }
    durable_file::sync_parent_dir(&segments.path(position))
}

/// Removes the intent, durably, once the truncation is complete everywhere.
pub fn finish(config: &StoreConfig) -> io::Result<()> {
    durable_file::replace_or_remove_file(&intent_path(config), b"")
}

/// The layers a truncation changes.
pub struct Layers<'a> {
    pub config: &'a StoreConfig,
    pub log: &'a Log,
    pub queues: &'a Queues,
    pub index: &'a Index,
    pub durability: &'a Durability,
}

/// Truncates the log at `position` (see the module's comment); the caller holds the appender.
pub fn truncate(
    appender: &mut Appender,
    layers: &Layers<'_>,
    position: u64,
) -> Result<TruncateReport, TruncateError> {
    let log = layers.log;
    let written = log.written();
    let min_position = log.min_position();
    if position < min_position || position > written {
        return Err(TruncateError::OutsideLog {
            position,
            min_position,
            written_position: written,
        });
    }
    let mut report = TruncateReport {
        position,
        dropped_from: written,
        ..TruncateReport::default()
    };
    if position == written {
        return Ok(report);
    }
    check_boundary(log, layers.queues, position)?;
    let config = layers.config;
    let intent = intent_path(config);
    let metadata_failed = |path: &Path, op: IoOp, e: io::Error| {
        log.faults().record(FileKind::Metadata, op, path, &e);
        TruncateError::io(path, &e)
    };
    durable_file::replace_file(&intent, format!("{position}\n").as_bytes())
        .map_err(|e| metadata_failed(&intent, IoOp::Replace, e))?;
    layers.durability.truncated(position, || {
        report.segments_removed = appender
            .truncate_log(position)
            .map_err(|(path, e)| TruncateError::io(&path, &e))?;
        report.queues_rewound = rewind_queues(log, layers.queues, position)?;
        appender.reload_queue_offsets();
        layers.index.rewind(position);
        drop_damage_past(log, config, position)?;
        // A topic deleted past the cut: its records left are all older than the cut, and the
        // ones a topic of that name gets from here on are newer than its deletion.
        let mut problems = Vec::new();
        layers
            .queues
            .tidy_deletions(min_position, position, &mut problems);
        if let Some(problem) = problems.pop() {
            return Err(TruncateError::Io {
                path: config.deleted_topics_path.display().to_string(),
                message: problem,
            });
        }
        Ok::<_, TruncateError>(())
    })?;
    finish(config).map_err(|e| metadata_failed(&intent, IoOp::Remove, e))?;
    Ok(report)
}

/// Removes every ConsumeQueue's entries at and past `position`; returns how many queues lost
/// any.
fn rewind_queues(log: &Log, queues: &Queues, position: u64) -> Result<usize, TruncateError> {
    let mut rewound = 0;
    for queue in queues.all() {
        match queue.rewind_to_position(position) {
            Ok(Some(_)) => rewound += 1,
            Ok(None) => {}
            Err(e) => {
                let path = queue.path_for(queue.bounds().1);
                log.faults()
                    .record(FileKind::ConsumeQueue, IoOp::Truncate, &path, &e);
                return Err(TruncateError::io(&path, &e));
            }
        }
    }
    Ok(rewound)
}

/// Drops the damaged ranges at and past `position` (new records will be written there),
/// storing the list when it changed.
fn drop_damage_past(log: &Log, config: &StoreConfig, position: u64) -> Result<(), TruncateError> {
    let (ranges, changed) = log.clip_damaged(position);
    if changed {
        damaged::store(&config.damaged_path, &ranges).map_err(|e| {
            log.faults()
                .record(FileKind::Metadata, IoOp::Replace, &config.damaged_path, &e);
            TruncateError::io(&config.damaged_path, &e)
        })?;
    }
    Ok(())
}

/// Whether `position` (inside the log, below its written position) is where a unit starts:
/// a segment's base; an end-of-segment marker whose size reaches the segment's end; or a
/// record that passes recovery's checks at this position and is the one its ConsumeQueue
/// entry points at (a record's bytes alone could hold another record's copy).
fn check_boundary(log: &Log, queues: &Queues, position: u64) -> Result<(), TruncateError> {
    let segment_bytes = log.segment_bytes();
    let in_segment = position % segment_bytes;
    if in_segment == 0 {
        return Ok(());
    }
    let not = |reason: String| TruncateError::NotABoundary { position, reason };
    let read = |buf: &mut [u8]| {
        log.read_at(position, buf)
            .map_err(|e| not(format!("unreadable: {e}")))
    };
    let mut head = [0u8; BLANK_BYTES as usize];
    read(&mut head)?;
    let total = quiver_record::read_i32(&head, 0).unwrap_or(-1);
    let magic = quiver_record::read_i32(&head, 4).unwrap_or(0);
    if magic == MAGIC_BLANK {
        return if i64::from(total) == (segment_bytes - in_segment) as i64 {
            Ok(())
        } else {
            Err(not(format!("an end marker of {total} bytes")))
        };
    }
    let fits = total >= RECORD_BYTES_MIN as i32
        && in_segment + total as u64 + BLANK_BYTES <= segment_bytes
        && position + total as u64 <= log.written();
    if !quiver_record::is_record_magic(magic) || !fits {
        return Err(not(format!("size {total}, magic {magic:#x}")));
    }
    let mut bytes = vec![0u8; total as usize];
    read(&mut bytes)?;
    let view = crate::recovery::check_record(&bytes, position).map_err(&not)?;
    let queue = queues.get(view.topic, view.queue_id as u32);
    let Some(queue) = queue.filter(|_| !queues.is_deleted(view.topic, position)) else {
        // A deleted topic's record: its checks are all there is.
        return Ok(());
    };
    let offset = view.queue_offset as u64;
    let (min, max) = queue.bounds();
    if offset < min || offset >= max {
        return Ok(());
    }
    match queue.entry(offset) {
        Ok(entry) if entry.position == position => Ok(()),
        Ok(entry) => Err(not(format!(
            "the record's queue entry {}:{}@{offset} points at {}",
            view.topic, view.queue_id, entry.position
        ))),
        Err(e) => Err(not(format!("its queue entry is unreadable: {e}"))),
    }
}
