//! The CommitLog layer: the segments, the positions it publishes (written, flushed, min), its
//! fsync and the record of fsyncs that failed, zero-filling ahead of the writer, and the ranges
//! recovery found damaged.
//!
//! One `Writer` (`commitlog.rs`), held by whoever holds the appender, writes the log; it
//! publishes the written position only once the records' ConsumeQueue and index entries exist,
//! so everything below it is dispatched. Readers take a segment's handle under a short lock and
//! read positions below what is published.

pub mod commitlog;
pub mod damaged;
pub mod prealloc;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::faults::{FileKind, IoFaults, IoOp};
use crate::types::{ReadError, StoreStats};
use commitlog::Segments;
use damaged::BadRange;
use prealloc::ZeroFiller;

pub use commitlog::Writer;

pub struct Log {
    segments: Segments,
    segment_bytes: u64,
    /// Everything below is written and dispatched (ConsumeQueue and index entries exist).
    written_position: AtomicU64,
    /// Everything below is fsynced in the CommitLog.
    flushed_position: AtomicU64,
    /// Where the first failed CommitLog fsync began (`u64::MAX`: none since the store opened).
    /// Linux may drop the pages a failed writeback held and report the next fsync as a
    /// success, so the checkpoint never passes this: recovery rescans from before it.
    fsync_failed_from: AtomicU64,
    /// How many CommitLog fsyncs have failed, whoever ran them. A group written before a
    /// failure is never acknowledged as flushed after it: the failed writeback may have held its
    /// pages, and the fsync that reported the error (perhaps another caller's) was the only one
    /// that would.
    fsync_failures: AtomicU64,
    fsyncs: AtomicU64,
    min_position: AtomicU64,
    messages_appended: AtomicU64,
    bytes_appended: AtomicU64,
    /// Ranges recovery found damaged (`damaged.rs`), kept out of reads; a truncation drops
    /// those past its position.
    damaged: RwLock<Vec<BadRange>>,
    /// Whether `damaged` holds any range: reads check every entry, and almost every log has
    /// none.
    has_damage: std::sync::atomic::AtomicBool,
    /// Held by each fsync round from reading the flushed position to raising it, and by a
    /// truncation while it lowers it, so that no round started before a truncation raises
    /// the flushed position past the shorter log.
    flushing: Mutex<()>,
    /// Zeroed space ahead of the writer in the active segment.
    zeros: ZeroFiller,
    /// Where its failed writes, fsyncs and removals are recorded.
    faults: IoFaults,
}

impl Log {
    /// The log as recovery leaves it: valid up to `end`, nothing before `min_position`.
    pub fn new(
        segments: Segments,
        end: u64,
        min_position: u64,
        damaged: Vec<BadRange>,
        faults: IoFaults,
    ) -> Log {
        let segment_bytes = segments.segment_bytes();
        let (base, file) = active_segment(&segments, end);
        Log {
            zeros: ZeroFiller::new(base, file, end),
            segments,
            segment_bytes,
            written_position: AtomicU64::new(end),
            flushed_position: AtomicU64::new(0),
            fsync_failed_from: AtomicU64::new(u64::MAX),
            fsync_failures: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            min_position: AtomicU64::new(min_position),
            messages_appended: AtomicU64::new(0),
            bytes_appended: AtomicU64::new(0),
            has_damage: std::sync::atomic::AtomicBool::new(!damaged.is_empty()),
            damaged: RwLock::new(damaged),
            flushing: Mutex::new(()),
            faults,
        }
    }

    /// The store's record of I/O faults.
    pub fn faults(&self) -> &IoFaults {
        &self.faults
    }

    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    /// The CommitLog directory.
    pub fn dir(&self) -> &Path {
        self.segments.dir()
    }

    pub fn segment_path(&self, base: u64) -> PathBuf {
        self.segments.path(base)
    }

    /// The segment holding `position`, if it exists.
    pub fn find(&self, position: u64) -> Option<(u64, Arc<File>)> {
        self.segments.find(position)
    }

    /// Reads `buf.len()` bytes at `position`; the range must lie in one segment.
    pub fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.segments.read_at(position, buf)
    }

    pub fn bases(&self) -> Vec<u64> {
        self.segments.bases()
    }

    /// The first segment on disk: retention raises `min_position` before it removes segments.
    pub fn first_base(&self) -> Option<u64> {
        self.segments.first_base()
    }

    /// Everything below is written and dispatched.
    pub fn written(&self) -> u64 {
        self.written_position.load(Ordering::Acquire)
    }

    /// Everything below is fsynced.
    pub fn flushed(&self) -> u64 {
        self.flushed_position.load(Ordering::Acquire)
    }

    /// How far a checkpoint may vouch for the CommitLog: the flushed position, held below the
    /// first fsync that failed until the store reopens.
    pub fn durable(&self) -> u64 {
        self.flushed()
            .min(self.fsync_failed_from.load(Ordering::Acquire))
    }

    /// How many CommitLog fsyncs have failed since the store opened.
    pub fn fsync_failures(&self) -> u64 {
        self.fsync_failures.load(Ordering::Acquire)
    }

    /// How many CommitLog fsync rounds have succeeded.
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    /// The first position still in the log: below it, retention has removed (or is removing)
    /// the segments.
    pub fn min_position(&self) -> u64 {
        self.min_position.load(Ordering::Acquire)
    }

    /// Retention, before it removes the segments below `position`; a replica's first append
    /// into an empty store, whose log then starts at its master's segment base.
    pub fn raise_min_position(&self, position: u64) {
        self.min_position.fetch_max(position, Ordering::AcqRel);
    }

    /// Deletes and forgets a sealed segment, freeing its blocks on this thread (retention).
    pub fn remove_segment(&self, base: u64) -> io::Result<()> {
        let result = self.segments.delete(base);
        if let Err(e) = &result {
            let path = self.segments.path(base);
            self.faults
                .record(FileKind::CommitLog, IoOp::Remove, &path, e);
        }
        result
    }

    /// Whether `position` lies in a range recovery found damaged.
    pub fn is_damaged(&self, position: u64) -> bool {
        if !self.has_damage.load(Ordering::Acquire) {
            return false;
        }
        self.damaged
            .read()
            .expect("damaged ranges lock poisoned")
            .iter()
            .any(|r| r.start <= position && position < r.end)
    }

    /// A truncation at `position`: the damaged ranges below it, clipped to it, and whether
    /// that changed them (the caller stores them).
    pub fn clip_damaged(&self, position: u64) -> (Vec<BadRange>, bool) {
        let mut damaged = self.damaged.write().expect("damaged ranges lock poisoned");
        let before = damaged.clone();
        *damaged = damaged::clip(std::mem::take(&mut *damaged), position);
        self.has_damage
            .store(!damaged.is_empty(), Ordering::Release);
        (damaged.clone(), *damaged != before)
    }

    /// Starts writing back the whole pages written since the last call (the page the writer
    /// is still filling is left alone: writeback locks the pages it submits). Errors are left
    /// to the fsync that follows, which sees them too.
    pub fn start_writeback(&self, kicked: &mut u64) {
        let to = self.written() / WRITEBACK_PAGE * WRITEBACK_PAGE;
        let from = (*kicked).max(self.flushed());
        if to > from && self.segments.start_writeback(from, to).is_ok() {
            *kicked = to;
        }
    }

    /// fsyncs the CommitLog up to `target` and publishes the new flushed position.
    /// A target past the written position (a group written before a truncation dropped it)
    /// flushes only up to the written position.
    pub fn flush(&self, target: u64) -> io::Result<()> {
        let _flushing = self.flushing.lock().unwrap_or_else(|p| p.into_inner());
        let target = target.min(self.written());
        let flushed = self.flushed_position.load(Ordering::Acquire);
        if target <= flushed {
            return Ok(());
        }
        if let Err((base, e)) = self.segments.sync_range(flushed, target) {
            self.fsync_failed_from.fetch_min(flushed, Ordering::AcqRel);
            self.fsync_failures.fetch_add(1, Ordering::AcqRel);
            let path = self.segments.path(base);
            self.faults
                .record(FileKind::CommitLog, IoOp::Fsync, &path, &e);
            return Err(e);
        }
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.flushed_position.fetch_max(target, Ordering::AcqRel);
        Ok(())
    }

    pub fn stats(&self) -> StoreStats {
        StoreStats {
            min_position: self.min_position(),
            written_position: self.written(),
            flushed_position: self.flushed(),
            messages_appended: self.messages_appended.load(Ordering::Relaxed),
            bytes_appended: self.bytes_appended.load(Ordering::Relaxed),
        }
    }
}

const WRITEBACK_PAGE: u64 = 4096;

/// The segment the writer goes on with when the log ends at `end`: the last one if `end` lies
/// in it, else none yet (the next segment starts at `end`).
fn active_segment(segments: &Segments, end: u64) -> (u64, Option<Arc<File>>) {
    match segments.last() {
        Some((base, file)) if base <= end && end < base + segments.segment_bytes() => {
            (base, Some(file))
        }
        _ => (end, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    /// Writeback is started for whole pages up to the written position, across segments, and
    /// never again for the same pages; nothing below the flushed position.
    #[test]
    fn writeback_covers_written_whole_pages_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let segments = commitlog::Segments::open(dir.path(), 8192).expect("open");
        for base in [0, 8192] {
            let file = segments.create(base).expect("create");
            file.write_all_at(&[1u8; 8192], 0).expect("write");
        }
        let log = Log::new(segments, 13_000, 0, Vec::new(), IoFaults::detached());
        let mut kicked = 0;
        log.start_writeback(&mut kicked);
        assert_eq!(kicked, 12_288, "the page being filled is left alone");
        log.start_writeback(&mut kicked);
        assert_eq!(kicked, 12_288);
        log.flush(13_000).expect("flush");
        let mut from_zero = 0;
        log.start_writeback(&mut from_zero);
        assert_eq!(from_zero, 0, "nothing new past the flushed position");
    }
}
