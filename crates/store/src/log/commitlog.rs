//! CommitLog segments: naming, the open file handles readers share, fsync, and the one writer.
//!
//! A segment is one file named by its start position (20 zero-padded digits). Its length is the
//! number of bytes written so far, plus zeros written ahead of the writer in the active
//! segment (see `prealloc`). Handles stay open for the life of
//! the store so that a read is one lookup under a short lock plus one positional read.
//!
//! `Writer` writes bytes laid out elsewhere at the positions it is given: the appender lays out
//! records and dispatches them (ConsumeQueue and index entries) itself, and a replica's
//! appends (`Appender::append_replicated`) write its master's bytes at the master's positions
//! through the same `write`, dispatching from the records parsed back out of them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use super::prealloc::ZeroFiller;
use super::Log;
use crate::faults::{FileKind, IoOp};
use crate::types::{OpenError, ReadError};

pub const SEGMENT_NAME_DIGITS: usize = 20;

/// How long `Segments::delete` waits for readers to drop a deleted segment's handle.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
const RELEASE_POLL: std::time::Duration = std::time::Duration::from_millis(5);
/// A deleted segment shrinks by this much at a time (about 45 ms of freeing with discard)...
const RELEASE_STEP_BYTES: u64 = 64 << 20;
/// ...with this pause between steps, in which the writer allocates freely.
const RELEASE_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

pub fn segment_name(base: u64) -> String {
    format!("{base:020}")
}

/// The start position a segment (or ConsumeQueue) file name stands for.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    if name.len() != SEGMENT_NAME_DIGITS || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

pub struct Segments {
    dir: PathBuf,
    segment_bytes: u64,
    files: RwLock<BTreeMap<u64, Arc<File>>>,
}

pub fn open_read_write(path: &Path, create: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .create(create)
        .truncate(false);
    open_without_atime(&mut options, path)
}

/// Opens with O_NOATIME where the file's owner allows it: consumers read segments and
/// ConsumeQueue files thousands of times a second, and each read would otherwise check
/// (and now and then write) the access time, which nothing here uses. Falls back to a plain
/// open when the process does not own the file.
pub(crate) fn open_without_atime(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    match options.clone().custom_flags(libc::O_NOATIME).open(path) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => options.open(path),
        other => other,
    }
}

/// A segment longer than the configured size: records never cross a segment's end, so it was
/// written under a larger mappedFileSizeCommitLog, and cutting it would delete messages.
pub(crate) fn segment_too_long(path: &Path, segment_bytes: u64) -> OpenError {
    OpenError::Corrupt {
        path: path.display().to_string(),
        position: segment_bytes,
        reason: format!(
            "segment is longer than the segment size {segment_bytes}: was \
             mappedFileSizeCommitLog lowered? Set it back to open this store"
        ),
    }
}

impl Segments {
    /// Lists and opens the segments; their bases must follow each other by `segment_bytes`.
    pub fn open(dir: &Path, segment_bytes: u64) -> Result<Segments, OpenError> {
        std::fs::create_dir_all(dir).map_err(|e| OpenError::io(dir, &e))?;
        let mut bases = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| OpenError::io(dir, &e))? {
            let entry = entry.map_err(|e| OpenError::io(dir, &e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name == crate::faults::PROBE_FILE_NAME {
                // A probe write a crash interrupted (`faults`): never data.
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            match parse_segment_name(&name) {
                Some(base) => bases.push(base),
                None => {
                    return Err(OpenError::Corrupt {
                        path: entry.path().display().to_string(),
                        position: 0,
                        reason: "not a CommitLog segment name (20 digits)".to_string(),
                    })
                }
            }
        }
        bases.sort_unstable();
        // Positions travel as i64 (PHYSICALOFFSET, commit log offsets on the wire).
        if let Some(&last) = bases.last() {
            if last > i64::MAX as u64 - segment_bytes {
                return Err(OpenError::Corrupt {
                    path: dir.join(segment_name(last)).display().to_string(),
                    position: 0,
                    reason: "segment name is past the largest CommitLog position".to_string(),
                });
            }
        }
        let mut files = BTreeMap::new();
        for (i, base) in bases.iter().enumerate() {
            let path = dir.join(segment_name(*base));
            if i > 0 && bases[i - 1] + segment_bytes != *base {
                return Err(OpenError::Corrupt {
                    path: path.display().to_string(),
                    position: 0,
                    reason: format!(
                        "segment does not follow {} (segment size {segment_bytes}): a segment is \
                         missing, or mappedFileSizeCommitLog was changed (set it back)",
                        segment_name(bases[i - 1])
                    ),
                });
            }
            let file = open_read_write(&path, false).map_err(|e| OpenError::io(&path, &e))?;
            let length = file.metadata().map_err(|e| OpenError::io(&path, &e))?.len();
            // Records never cross a segment's end, so a longer segment before the last was
            // written under a larger mappedFileSizeCommitLog (the last: see recovery).
            if length > segment_bytes && i + 1 < bases.len() {
                return Err(segment_too_long(&path, segment_bytes));
            }
            files.insert(*base, Arc::new(file));
        }
        Ok(Segments {
            dir: dir.to_path_buf(),
            segment_bytes,
            files: RwLock::new(files),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    pub fn path(&self, base: u64) -> PathBuf {
        self.dir.join(segment_name(base))
    }

    /// The segment holding `position`, if it exists.
    pub fn find(&self, position: u64) -> Option<(u64, Arc<File>)> {
        let files = self.files.read().expect("segment map lock poisoned");
        let (base, file) = files.range(..=position).next_back()?;
        (position < base + self.segment_bytes).then(|| (*base, Arc::clone(file)))
    }

    pub fn bases(&self) -> Vec<u64> {
        let files = self.files.read().expect("segment map lock poisoned");
        files.keys().copied().collect()
    }

    pub fn first_base(&self) -> Option<u64> {
        let files = self.files.read().expect("segment map lock poisoned");
        files.keys().next().copied()
    }

    pub fn last(&self) -> Option<(u64, Arc<File>)> {
        let files = self.files.read().expect("segment map lock poisoned");
        files.iter().next_back().map(|(b, f)| (*b, Arc::clone(f)))
    }

    /// Creates an empty segment at `base` and makes it visible to readers.
    pub fn create(&self, base: u64) -> io::Result<Arc<File>> {
        let path = self.path(base);
        let file = Arc::new(open_without_atime(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true),
            &path,
        )?);
        // Sync flush promises durability of what an fsync of the file covered; the file's
        // directory entry must be durable too, or a crash could lose the whole segment.
        crate::durable_file::sync_parent_dir(&path)?;
        let mut files = self.files.write().expect("segment map lock poisoned");
        files.insert(base, Arc::clone(&file));
        Ok(file)
    }

    /// Deletes and forgets a segment: one retention expired, or one a failed group created.
    pub fn remove(&self, base: u64) -> io::Result<()> {
        self.forget(base).map(drop)
    }

    /// Deletes and forgets a sealed segment, and frees its blocks on the calling thread, a
    /// little at a time (retention). The filesystem frees an unlinked file's blocks when its
    /// last handle closes; on a disk mounted with `discard` that takes about 0.7 s per GiB and
    /// holds block allocation meanwhile. Left to chance, that close would fall on whichever
    /// thread drops the last handle (a runtime worker, say), and the writer's next allocation
    /// would wait for the whole segment. So this waits (up to `RELEASE_WAIT`) for readers to
    /// drop their handles, then shrinks the file `RELEASE_STEP_BYTES` at a time, pausing
    /// between steps, and closes it. A reader still holding the handle after the wait can only
    /// be reading below the minimum position, which new reads no longer reach.
    pub fn delete(&self, base: u64) -> io::Result<()> {
        let Some(file) = self.forget(base)? else {
            return Ok(());
        };
        let deadline = std::time::Instant::now() + RELEASE_WAIT;
        while Arc::strong_count(&file) > 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(RELEASE_POLL);
        }
        // The segment is gone from the disk's namespace and the map already: a failed shrink
        // only leaves the freeing to the close.
        let mut length = file.metadata().map_or(0, |m| m.len());
        while length > 0 {
            length = length.saturating_sub(RELEASE_STEP_BYTES);
            if file.set_len(length).is_err() {
                break;
            }
            if length > 0 {
                std::thread::sleep(RELEASE_PAUSE);
            }
        }
        Ok(())
    }

    /// Unlinks a segment and drops it from the map; its handle, if it was listed.
    fn forget(&self, base: u64) -> io::Result<Option<Arc<File>>> {
        // Unlinked first: a segment whose unlink failed stays listed, so the next retention
        // pass tries it again instead of leaving a file that no pass sees (and a gap that
        // would stop the next open).
        match std::fs::remove_file(self.path(base)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(self
            .files
            .write()
            .expect("segment map lock poisoned")
            .remove(&base))
    }

    /// Reads `buf.len()` bytes at `position`; the range must lie in one segment.
    pub fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let (base, file) = self.find(position).ok_or(ReadError::NoRecord(position))?;
        file.read_exact_at(buf, position - base)
            .map_err(|e| ReadError::io(&self.path(base), &e))
    }

    /// Starts the kernel writing back `[from, to)` (positions) without waiting for it or
    /// flushing the device's cache: the fsync that follows then finds little left to write.
    pub fn start_writeback(&self, from: u64, to: u64) -> io::Result<()> {
        if from >= to {
            return Ok(());
        }
        let targets: Vec<(u64, Arc<File>)> = {
            let files = self.files.read().expect("segment map lock poisoned");
            files
                .range(..to)
                .filter(|(base, _)| **base + self.segment_bytes > from)
                .map(|(base, f)| (*base, Arc::clone(f)))
                .collect()
        };
        for (base, file) in targets {
            let start = from.max(base) - base;
            let end = to.min(base + self.segment_bytes) - base;
            // SAFETY: a plain system call on a descriptor the Arc keeps open.
            let result = unsafe {
                libc::sync_file_range(
                    std::os::fd::AsRawFd::as_raw_fd(&*file),
                    start as libc::off64_t,
                    (end - start) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
            if result != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// fsyncs every segment that holds bytes in [from, to); on failure, the base of the
    /// segment whose fsync failed.
    pub fn sync_range(&self, from: u64, to: u64) -> Result<(), (u64, io::Error)> {
        if from >= to {
            return Ok(());
        }
        let targets: Vec<(u64, Arc<File>)> = {
            let files = self.files.read().expect("segment map lock poisoned");
            files
                .range(..to)
                .filter(|(base, _)| **base + self.segment_bytes > from)
                .map(|(base, f)| (*base, Arc::clone(f)))
                .collect()
        };
        for (base, file) in targets {
            file.sync_data().map_err(|e| (base, e))?;
        }
        Ok(())
    }
}

/// The CommitLog's one writer: the next position and the active segment. Held by the appender,
/// so by one thread at a time.
pub struct Writer {
    log: Arc<Log>,
    /// Next byte to write; equals the published written position between groups.
    position: u64,
    segment_base: u64,
    /// None until the segment at `segment_base` is created.
    segment_file: Option<Arc<File>>,
}

impl Writer {
    /// Goes on from where the log ends.
    pub fn new(log: Arc<Log>) -> Writer {
        let position = log.written();
        let (segment_base, segment_file) = super::active_segment(&log.segments, position);
        Writer {
            log,
            position,
            segment_base,
            segment_file,
        }
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The next byte to write: between groups, the written position.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Where the segment the next byte goes to starts (or would start, before it exists).
    pub fn segment_base(&self) -> u64 {
        self.segment_base
    }

    /// Writes `bytes` at `file_offset` in the segment at `base`, creating the segment when it
    /// is the next one. Nothing is published: see `advance` and `publish`.
    /// A failure is recorded in the store's faults, which then refuses appends.
    pub fn write(&mut self, base: u64, file_offset: u64, bytes: &[u8]) -> io::Result<()> {
        let file = match &self.segment_file {
            Some(file) if base == self.segment_base => Arc::clone(file),
            _ => {
                let file = self
                    .log
                    .segments
                    .create(base)
                    .inspect_err(|e| self.record(IoOp::Create, base, e))?;
                self.segment_base = base;
                self.segment_file = Some(Arc::clone(&file));
                file
            }
        };
        write_in_segment(&self.log.zeros, base, &file, file_offset, bytes)
            .inspect_err(|e| self.record(IoOp::Write, base, e))
    }

    fn record(&self, op: IoOp, base: u64, error: &io::Error) {
        let path = self.log.segments.path(base);
        self.log
            .faults
            .record(FileKind::CommitLog, op, &path, error);
    }

    /// The group is written up to `position` (not yet published).
    pub fn advance(&mut self, position: u64) {
        self.position = position;
    }

    /// As `advance`, for a replica's bytes, which may end exactly at a segment's end (an end
    /// marker with its padding): the next byte then goes to the next segment, not yet created.
    /// (A group of `write_group` always ends inside a segment, which keeps room for its
    /// marker.)
    pub fn advance_replicated(&mut self, position: u64) {
        self.position = position;
        if position == self.segment_base + self.log.segment_bytes {
            self.segment_base = position;
            self.segment_file = None;
        }
    }

    /// Publishes the written position: everything below it is dispatched.
    pub fn publish(&self) {
        self.log
            .written_position
            .store(self.position, Ordering::Release);
    }

    /// Counts what a published group appended (`Store::stats`).
    pub fn count_appended(&self, messages: u64, bytes: u64) {
        let log = &self.log;
        log.messages_appended.fetch_add(messages, Ordering::Relaxed);
        log.bytes_appended.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Undoes a failed group's writes: segments it created are removed and the active one is
    /// cut back to the published position. What could not be undone goes to `failures`.
    pub fn roll_back(&mut self, failures: &mut Vec<String>) {
        let published = self.log.written();
        let segment_bytes = self.log.segment_bytes;
        // Segments created by this group start past the published position.
        while self.segment_file.is_some() && self.segment_base > published {
            if let Err(e) = self.log.segments.remove(self.segment_base) {
                self.record(IoOp::Remove, self.segment_base, &e);
                failures.push(e.to_string());
            }
            self.segment_base -= segment_bytes;
            self.segment_file = self.log.segments.find(self.segment_base).map(|(_, f)| f);
        }
        if self.segment_base > published {
            self.segment_base = published;
        }
        if let Some(file) = &self.segment_file {
            if let Err(e) = cut_segment(&self.log.zeros, self.segment_base, file, published) {
                self.record(IoOp::Truncate, self.segment_base, &e);
                failures.push(e.to_string());
            }
        }
        self.position = published;
    }
}

impl Writer {
    /// Cuts the log at `position` (a record or end-marker boundary at or above the min
    /// position, below the written position; the caller has checked it) for good: the
    /// segments past the one holding it are removed, that one is cut at it, and both the
    /// directory and the cut segment are fsynced before the written and flushed positions
    /// move back, so no reader or flush sees the shorter log before it is on disk. Returns how
    /// many segments were removed; on failure, the file that failed.
    pub fn truncate(&mut self, position: u64) -> Result<usize, (PathBuf, io::Error)> {
        let log = Arc::clone(&self.log);
        let segment_bytes = log.segment_bytes;
        let holder =
            (!position.is_multiple_of(segment_bytes)).then(|| position - position % segment_bytes);
        let doomed: Vec<u64> = log
            .segments
            .bases()
            .into_iter()
            .filter(|base| *base >= position)
            .rev()
            .collect();
        let failed = |base: u64, e: io::Error| {
            let path = log.segments.path(base);
            log.faults
                .record(FileKind::CommitLog, IoOp::Truncate, &path, &e);
            (path, e)
        };
        // The filler is held off throughout: it must not write into a segment being cut or
        // removed.
        let mut zeroed = log.zeros.hold();
        for &base in &doomed {
            log.segments.remove(base).map_err(|e| failed(base, e))?;
        }
        if !doomed.is_empty() {
            crate::durable_file::sync_parent_dir(&log.segments.path(position))
                .map_err(|e| failed(position, e))?;
        }
        let file = match holder {
            Some(base) => {
                let (_, file) = log.segments.find(base).ok_or_else(|| {
                    failed(
                        base,
                        io::Error::new(io::ErrorKind::NotFound, "segment missing"),
                    )
                })?;
                file.set_len(position - base)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| failed(base, e))?;
                zeroed.cut(base, &file, position);
                Some(file)
            }
            None => {
                zeroed.forget(position);
                None
            }
        };
        drop(zeroed);
        self.segment_base = holder.unwrap_or(position);
        self.segment_file = file;
        self.position = position;
        let _flushing = log.flushing.lock().unwrap_or_else(|p| p.into_inner());
        log.written_position.store(position, Ordering::Release);
        log.flushed_position.fetch_min(position, Ordering::AcqRel);
        Ok(doomed.len())
    }
}

/// The write of `bytes` at `file_offset` in the segment at `base`. Below the zeroed end it
/// needs no lock; past it, it holds the filler off (see `prealloc`).
pub(super) fn write_in_segment(
    zeros: &ZeroFiller,
    base: u64,
    file: &Arc<File>,
    file_offset: u64,
    bytes: &[u8],
) -> io::Result<()> {
    let end = base + file_offset + bytes.len() as u64;
    // Positions are absolute, so a zeroed end left from an older segment is below every
    // position of a newer one and sends the write to the locked path.
    if end <= zeros.zeroed_end() {
        return file.write_all_at(bytes, file_offset);
    }
    let mut zeroed = zeros.hold();
    if !zeroed.fills(base, file) {
        // A new segment: nothing zeroed in it yet.
        zeroed.restart(base, file, base + file_offset);
    }
    file.write_all_at(bytes, file_offset)?;
    zeroed.data_written_to(end);
    Ok(())
}

/// Cuts the active segment at `position` (a failed group's rollback) so that the filler
/// cannot race with the truncation.
pub(super) fn cut_segment(
    zeros: &ZeroFiller,
    base: u64,
    file: &Arc<File>,
    position: u64,
) -> io::Result<()> {
    let mut zeroed = zeros.hold();
    let result = file.set_len(position - base);
    zeroed.cut(base, file, position);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_are_twenty_digits_and_round_trip() {
        assert_eq!(segment_name(0), "00000000000000000000");
        assert_eq!(segment_name(1 << 30), "00000000001073741824");
        assert_eq!(parse_segment_name("00000000001073741824"), Some(1 << 30));
        assert_eq!(parse_segment_name("0000000000107374182"), None);
        assert_eq!(parse_segment_name("0000000000107374182x"), None);
        assert_eq!(parse_segment_name("+0000000000107374182"), None);
    }

    #[test]
    fn a_missing_segment_is_reported_with_its_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(segment_name(0)), b"").expect("write");
        std::fs::write(dir.path().join(segment_name(8192)), b"").expect("write");
        match Segments::open(dir.path(), 4096) {
            Err(OpenError::Corrupt { path, .. }) => assert!(path.ends_with(&segment_name(8192))),
            other => panic!("expected Corrupt, got {:?}", other.err()),
        }
    }

    #[test]
    fn find_maps_positions_to_segments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let segments = Segments::open(dir.path(), 4096).expect("open");
        segments.create(0).expect("create");
        segments.create(4096).expect("create");
        assert_eq!(segments.find(0).map(|s| s.0), Some(0));
        assert_eq!(segments.find(4095).map(|s| s.0), Some(0));
        assert_eq!(segments.find(4096).map(|s| s.0), Some(4096));
        assert_eq!(segments.find(8192).map(|s| s.0), None);
    }

    #[test]
    fn a_deleted_segment_is_freed_by_the_deleting_thread_not_by_its_last_reader() {
        let dir = tempfile::tempdir().expect("tempdir");
        let segment_bytes = 3 * RELEASE_STEP_BYTES / 2;
        let segments = Segments::open(dir.path(), segment_bytes).expect("open");
        let file = segments.create(0).expect("create");
        file.write_all_at(&[7u8; 4096], segment_bytes - 4096)
            .expect("write");
        segments.create(segment_bytes).expect("create");
        // A reader that keeps its handle past the wait.
        let (_, reader) = segments.find(0).expect("listed");
        drop(file);
        segments.delete(0).expect("delete");
        assert!(!segments.path(0).exists(), "unlinked");
        assert_eq!(segments.find(0).map(|s| s.0), None, "forgotten");
        assert_eq!(
            reader.metadata().expect("metadata").len(),
            0,
            "the blocks were freed by delete, not left for the reader's close"
        );
        assert_eq!(segments.bases(), vec![segment_bytes]);
    }
}
