//! The key index, in RocketMQ's IndexFile format (wire spec §6.5).
//!
//! A chain of index files (layout in `index_file`); the newest one takes new entries.
//!
//! The active file keeps its slots in memory as atomics: the appender writes the entries to the
//! file first and then stores the slot, so a reader that sees a slot finds its entry on disk.
//! Slots and the header reach the file when the index is flushed (or the file is sealed),
//! which keeps the append path at one write per group. After a crash the on-disk slots may point
//! at entries past the header's indexCount; `open` walks such chains back below it.
//!
//! Flushes come every `FLUSH_INTERVAL`, not with every checkpoint: keys hash all over the slot
//! table, so each flush writes back most of its pages (about 20 MB with the default 5 million
//! slots), and at the checkpoint's 500 ms that doubled what the broker wrote to disk. A flush
//! says up to which CommitLog position every record's keys are durable (`durable_end`, which
//! the checkpoint records); recovery re-adds the keys of the records from there.

pub mod index_file;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use crate::faults::{FileKind, IoFaults, IoOp};
use crate::types::{OpenError, ReadError};
use index_file::{
    entry_at, file_bytes, load_slots, next_name, slot_of, write_slots, zero_slots, Header,
    IndexEntry, IndexFile, HEADER_BYTES, NAME_DIGITS,
};

/// How often `flush_if_due` makes the slots durable (RocketMQ flushes an index file only
/// when it is full): after a crash, recovery reads the CommitLog back this far to re-add keys.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(10);
/// The most entries one lookup walks along one file's chain for a slot (each a read of 20
/// bytes): past it the older entries of that slot are not found. Keys hash into 5 million
/// slots by default, so an honest chain is a handful of entries long.
pub const CHAIN_STEPS_MAX: u32 = 100_000;

/// Index files are named by the wall-clock time they were created at (see `index_file`).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[derive(Clone, Copy, Debug)]
pub struct KeyEntry {
    pub key_hash: i32,
    pub position: u64,
    pub store_timestamp_ms: i64,
}

struct Writer {
    active: Option<Arc<IndexFile>>,
    header: Header,
    dirty_slots: Vec<u32>,
    staged: Vec<u8>,
    overlay: HashMap<u32, u32>,
    sealed_unsynced: Vec<Arc<IndexFile>>,
    last_name: u64,
    /// Every record below this CommitLog position has had its keys added.
    indexed_end: u64,
}

impl Writer {
    /// The writer at open: the last file takes new entries when it has room left (its slots
    /// loaded into memory, chains a crash left past its header repaired), otherwise the next
    /// key starts a new file.
    fn resume(
        files: &[Arc<IndexFile>],
        headers: &[Header],
        entries_max: u32,
        last_name: u64,
        durable_end: u64,
    ) -> Result<Writer, OpenError> {
        let mut writer = Writer {
            active: None,
            header: Header::empty(),
            dirty_slots: Vec::new(),
            staged: Vec::new(),
            overlay: HashMap::new(),
            sealed_unsynced: Vec::new(),
            last_name,
            indexed_end: durable_end,
        };
        if let (Some(file), Some(header)) = (files.last(), headers.last()) {
            if header.index_count < entries_max {
                let (slots_memory, repaired) =
                    load_slots(file, header).map_err(|e| OpenError::io(&file.path, &e))?;
                *file.memory_slots.write().expect("index lock poisoned") = Some(slots_memory);
                writer.active = Some(Arc::clone(file));
                writer.header = *header;
                writer.dirty_slots = repaired;
            }
        }
        Ok(writer)
    }
}

/// The index files in `dir` (named by a number), oldest first.
fn file_names(dir: &Path) -> Result<Vec<(u64, PathBuf)>, OpenError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| OpenError::io(dir, &e))? {
        let entry = entry.map_err(|e| OpenError::io(dir, &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) && name.len() <= 19 {
            if let Ok(number) = name.parse::<u64>() {
                names.push((number, entry.path()));
            }
        }
    }
    names.sort();
    Ok(names)
}

/// The index file at `path` with its header; None when the file is not `expected_bytes` long
/// or its header does not count 1 to `entries_max` entries.
fn open_file(
    path: &Path,
    slots: u32,
    entries_max: u32,
    expected_bytes: u64,
) -> Result<Option<(IndexFile, Header)>, OpenError> {
    let loaded = (|| -> io::Result<Option<(File, Header)>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        if file.metadata()?.len() != expected_bytes {
            return Ok(None);
        }
        let mut b = [0u8; HEADER_BYTES as usize];
        file.read_exact_at(&mut b, 0)?;
        Ok(Some((file, Header::decode(&b))))
    })()
    .map_err(|e| OpenError::io(path, &e))?;
    Ok(match loaded {
        Some((file, header)) if header.index_count >= 1 && header.index_count <= entries_max => {
            let index_file = IndexFile {
                path: path.to_path_buf(),
                file,
                slots,
                begin_timestamp_ms: AtomicI64::new(header.begin_timestamp_ms),
                end_timestamp_ms: AtomicI64::new(header.end_timestamp_ms),
                index_count: AtomicU32::new(header.index_count),
                memory_slots: RwLock::new(None),
                table_end_page: OnceLock::new(),
            };
            Some((index_file, header))
        }
        _ => None,
    })
}

pub struct Index {
    dir: PathBuf,
    slots: u32,
    entries_max: u32,
    files: RwLock<Vec<Arc<IndexFile>>>,
    writer: Mutex<Writer>,
    flushed: Mutex<Flushed>,
    faults: IoFaults,
}

/// How far the index is durable.
struct Flushed {
    /// When `flush` last succeeded (None: not since opening).
    at: Option<Instant>,
    /// The `indexed_end` the last successful flush made durable.
    end: u64,
    /// How many truncations lowered the ends: a flush that began before one does not raise
    /// `end` past the truncated log.
    truncations: u64,
    /// Where the index was durable when a flush first failed since opening. The entries written
    /// since may have been on pages whose writeback failed and which the kernel then dropped,
    /// and a later fsync that succeeds says nothing of them: `durable_end` stays below this
    /// until the store reopens and recovery adds those keys again.
    failed_at: Option<u64>,
}

/// A failed operation on one index file.
struct FileError {
    path: PathBuf,
    op: IoOp,
    error: io::Error,
}

impl FileError {
    fn on(path: &Path, op: IoOp) -> impl FnOnce(io::Error) -> FileError + '_ {
        move |error| FileError {
            path: path.to_path_buf(),
            op,
            error,
        }
    }
}

impl Index {
    /// Opens the index files in `dir`; `durable_end` is where the last flush left them (the
    /// checkpoint's word: keys of records from there on may be missing, and are added again).
    pub fn open(
        dir: &Path,
        slots: u32,
        entries_max: u32,
        durable_end: u64,
        problems: &mut Vec<String>,
        faults: IoFaults,
    ) -> Result<Index, OpenError> {
        assert!(
            slots > 0 && entries_max >= 2,
            "index needs slots and room for an entry"
        );
        std::fs::create_dir_all(dir).map_err(|e| OpenError::io(dir, &e))?;
        let names = file_names(dir)?;
        let expected_bytes = file_bytes(slots, entries_max);
        let mut files = Vec::new();
        let mut headers = Vec::new();
        for (_, path) in &names {
            match open_file(path, slots, entries_max, expected_bytes)? {
                Some((file, header)) => {
                    files.push(Arc::new(file));
                    headers.push(header);
                }
                None => problems.push(format!(
                    "{}: not an index file of {slots} slots and {entries_max} entries \
                     ({expected_bytes} bytes) or bad header; ignored",
                    path.display()
                )),
            }
        }
        let last_name = names.last().map_or(0, |(n, _)| *n);
        let writer = Writer::resume(&files, &headers, entries_max, last_name, durable_end)?;
        Ok(Index {
            dir: dir.to_path_buf(),
            slots,
            entries_max,
            files: RwLock::new(files),
            writer: Mutex::new(writer),
            flushed: Mutex::new(Flushed {
                at: None,
                truncations: 0,
                end: durable_end,
                failed_at: None,
            }),
            faults,
        })
    }

    /// Every record below this CommitLog position has its keys in the index files, durably:
    /// held below the first failed flush until the store reopens.
    pub fn durable_end(&self) -> u64 {
        let flushed = self.flushed.lock().expect("index flush lock poisoned");
        flushed.end.min(flushed.failed_at.unwrap_or(u64::MAX))
    }

    /// Says that every record below `end` has had its keys added (the appender, after each
    /// group; recovery, as it goes).
    pub fn indexed_up_to(&self, end: u64) {
        let mut w = self.writer.lock().expect("index writer lock poisoned");
        w.indexed_end = w.indexed_end.max(end);
    }

    /// A truncation of the CommitLog at `position`: keys are added again from there, and no
    /// flush vouches for the index past it. Entries already in the files for records past it
    /// stay: a query reads the record each entry points at and keeps only one that holds the
    /// key, so they find nothing the log does not hold.
    pub fn rewind(&self, position: u64) {
        {
            let mut w = self.writer.lock().expect("index writer lock poisoned");
            w.indexed_end = w.indexed_end.min(position);
        }
        let mut flushed = self.flushed.lock().expect("index flush lock poisoned");
        flushed.truncations += 1;
        flushed.end = flushed.end.min(position);
        if let Some(at) = &mut flushed.failed_at {
            *at = (*at).min(position);
        }
    }

    /// Flushes when `FLUSH_INTERVAL` has passed since the last flush, or a sealed file waits
    /// for its fsync (a sealed file's header would otherwise name records whose keys a crash
    /// could lose).
    pub fn flush_if_due(&self) -> io::Result<()> {
        let sealed_waiting = !self
            .writer
            .lock()
            .expect("index writer lock poisoned")
            .sealed_unsynced
            .is_empty();
        // Counted from the last flush that succeeded: a failed one is tried again at once.
        let due = self
            .flushed
            .lock()
            .expect("index flush lock poisoned")
            .at
            .is_none_or(|at| at.elapsed() >= FLUSH_INTERVAL);
        if sealed_waiting || due {
            self.flush()?;
        }
        Ok(())
    }

    /// The directory holding the index files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Indexes `keys`, rolling to a new file when the active one is full. A failure is
    /// recorded in the store's faults, which then refuses appends.
    pub fn add(&self, keys: &[KeyEntry]) -> io::Result<()> {
        self.add_to_files(keys).map_err(|e| self.record(e))
    }

    fn record(&self, e: FileError) -> io::Error {
        self.faults.record(FileKind::Index, e.op, &e.path, &e.error);
        e.error
    }

    fn add_to_files(&self, keys: &[KeyEntry]) -> Result<(), FileError> {
        let mut guard = self.writer.lock().expect("index writer lock poisoned");
        let w = &mut *guard;
        let mut done = 0;
        while done < keys.len() {
            if w.active.is_none() || w.header.index_count >= self.entries_max {
                self.roll(w)?;
            }
            let file = Arc::clone(w.active.as_ref().expect("roll leaves an active file"));
            let first = w.header.index_count;
            let n = ((self.entries_max - first) as usize).min(keys.len() - done);
            let mut header = w.header;
            w.staged.clear();
            w.overlay.clear();
            let slots_guard = file.memory_slots.read().expect("index lock poisoned");
            let slots = slots_guard
                .as_ref()
                .expect("the active index file keeps its slots in memory");
            for (j, key) in keys[done..done + n].iter().enumerate() {
                let number = first + j as u32;
                if number == 1 {
                    header.begin_timestamp_ms = key.store_timestamp_ms;
                    header.begin_position = key.position;
                }
                let slot = slot_of(key.key_hash, self.slots);
                let prev = match w.overlay.get(&slot) {
                    Some(prev) => *prev,
                    None => slots[slot as usize].load(Ordering::Acquire),
                };
                // The header may come from a damaged file: no arithmetic on it may overflow.
                let time_diff_s = (key
                    .store_timestamp_ms
                    .saturating_sub(header.begin_timestamp_ms)
                    / 1000)
                    .clamp(0, i64::from(i32::MAX)) as i32;
                let entry = IndexEntry {
                    key_hash: key.key_hash,
                    position: key.position,
                    time_diff_s,
                    prev,
                };
                w.staged.extend_from_slice(&entry.encode());
                w.overlay.insert(slot, number);
                header.end_timestamp_ms = header.end_timestamp_ms.max(key.store_timestamp_ms);
                header.end_position = key.position;
            }
            file.file
                .write_all_at(&w.staged, entry_at(self.slots, first))
                .map_err(FileError::on(&file.path, IoOp::Write))?;
            for (slot, number) in w.overlay.drain() {
                if slots[slot as usize].swap(number, Ordering::AcqRel) == 0 {
                    header.slots_used = header.slots_used.saturating_add(1);
                }
                w.dirty_slots.push(slot);
            }
            drop(slots_guard);
            header.index_count += n as u32;
            w.header = header;
            file.begin_timestamp_ms
                .store(header.begin_timestamp_ms, Ordering::Release);
            file.end_timestamp_ms
                .store(header.end_timestamp_ms, Ordering::Release);
            file.index_count
                .store(header.index_count, Ordering::Release);
            done += n;
        }
        Ok(())
    }

    fn roll(&self, w: &mut Writer) -> Result<(), FileError> {
        if let Some(old) = &w.active {
            old.seal(&w.header)
                .map_err(FileError::on(&old.path, IoOp::Write))?;
        }
        let number = next_name(w.last_name, now_ms());
        let path = self.dir.join(format!("{number:0NAME_DIGITS$}"));
        let header = Header::empty();
        let file = (|| {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)?;
            file.set_len(file_bytes(self.slots, self.entries_max))?;
            file.write_all_at(&header.encode(), 0)?;
            // The file's own fsyncs do not make its name durable, and a checkpoint past its
            // entries would otherwise outlive it after a power loss: recovery would not index
            // them again.
            crate::durable_file::sync_parent_dir(&path)?;
            Ok(file)
        })()
        .map_err(FileError::on(&path, IoOp::Create))?;
        let file = Arc::new(IndexFile {
            path,
            file,
            slots: self.slots,
            begin_timestamp_ms: AtomicI64::new(0),
            end_timestamp_ms: AtomicI64::new(0),
            index_count: AtomicU32::new(1),
            memory_slots: RwLock::new(Some(zero_slots(self.slots))),
            table_end_page: OnceLock::new(),
        });
        self.files
            .write()
            .expect("index lock poisoned")
            .push(Arc::clone(&file));
        if let Some(old) = w.active.replace(file) {
            w.sealed_unsynced.push(old);
        }
        w.last_name = number;
        w.header = header;
        w.dirty_slots.clear();
        Ok(())
    }

    /// Retention: deletes sealed files whose entries all point below `min_position` (their
    /// header's end position is the last entry's). Returns how many it deleted.
    pub fn delete_below(&self, min_position: u64) -> io::Result<usize> {
        // The writer lock keeps the file list and the active file still meanwhile.
        let w = self.writer.lock().expect("index writer lock poisoned");
        let files = self.files.read().expect("index lock poisoned").clone();
        let mut doomed = Vec::new();
        for file in &files {
            if w.active.as_ref().is_some_and(|a| Arc::ptr_eq(a, file)) {
                continue;
            }
            let mut b = [0u8; HEADER_BYTES as usize];
            file.file.read_exact_at(&mut b, 0)?;
            if Header::decode(&b).end_position < min_position {
                doomed.push(Arc::clone(file));
            }
        }
        self.files
            .write()
            .expect("index lock poisoned")
            .retain(|f| !doomed.iter().any(|d| Arc::ptr_eq(d, f)));
        drop(w);
        for file in &doomed {
            std::fs::remove_file(&file.path)
                .map_err(FileError::on(&file.path, IoOp::Remove))
                .map_err(|e| self.record(e))?;
        }
        Ok(doomed.len())
    }

    /// Writes dirty slots and the header of the active file and fsyncs what changed. On
    /// failure the sealed files and dirty slots wait for the next flush, the failure is
    /// recorded, and `durable_end` stays below it until the store reopens.
    pub fn flush(&self) -> io::Result<()> {
        // Read before `indexed_end`: a truncation lowers that first, then counts itself.
        let truncations = self
            .flushed
            .lock()
            .expect("index flush lock poisoned")
            .truncations;
        let (active, header, mut dirty, sealed, indexed_end) = {
            let mut w = self.writer.lock().expect("index writer lock poisoned");
            (
                w.active.clone(),
                w.header,
                std::mem::take(&mut w.dirty_slots),
                std::mem::take(&mut w.sealed_unsynced),
                w.indexed_end,
            )
        };
        dirty.sort_unstable();
        dirty.dedup();
        let synced = sealed
            .iter()
            .try_for_each(|file| {
                file.file
                    .sync_data()
                    .map_err(FileError::on(&file.path, IoOp::Fsync))
            })
            .and_then(|()| match &active {
                Some(file) => write_slots(file, &dirty, &header)
                    .and_then(|()| file.file.sync_data())
                    .map_err(FileError::on(&file.path, IoOp::Flush)),
                None => Ok(()),
            });
        let mut flushed = self.flushed.lock().expect("index flush lock poisoned");
        match synced {
            Ok(()) => {
                flushed.at = Some(Instant::now());
                if flushed.truncations == truncations {
                    flushed.end = flushed.end.max(indexed_end);
                }
                Ok(())
            }
            Err(e) => {
                let held = flushed
                    .failed_at
                    .map_or(flushed.end, |at| at.min(flushed.end));
                flushed.failed_at = Some(held);
                drop(flushed);
                // Kept for the next attempt, ahead of files sealed meanwhile.
                let mut w = self.writer.lock().expect("index writer lock poisoned");
                w.dirty_slots.extend_from_slice(&dirty);
                let later = std::mem::replace(&mut w.sealed_unsynced, sealed);
                w.sealed_unsynced.extend(later);
                drop(w);
                Err(self.record(e))
            }
        }
    }

    /// Calls `visit` with the position of each entry for `key_hash` whose time may lie in
    /// [begin_ms, end_ms], newest first, until it returns false. Walks at most
    /// `CHAIN_STEPS_MAX` entries of each file's chain: keys made to share a slot cannot make
    /// one lookup read the whole file.
    pub fn query(
        &self,
        key_hash: i32,
        begin_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(u64) -> Result<bool, ReadError>,
    ) -> Result<(), ReadError> {
        let files = self.files.read().expect("index lock poisoned").clone();
        let slot = slot_of(key_hash, self.slots);
        for file in files.iter().rev() {
            let count = file.index_count.load(Ordering::Acquire);
            let begin = file.begin_timestamp_ms.load(Ordering::Acquire);
            let end = file.end_timestamp_ms.load(Ordering::Acquire);
            if count <= 1 || end < begin_ms || begin > end_ms {
                continue;
            }
            let io_error = |e: io::Error| ReadError::io(&file.path, &e);
            let mut number = file.slot(slot).map_err(io_error)?;
            let mut steps = 0u32;
            while number != 0 && number < self.entries_max && steps < CHAIN_STEPS_MAX {
                let entry = file.entry(number).map_err(io_error)?;
                // timeDiff is truncated to seconds: the true time is in [time, time + 1 s).
                let time = begin.saturating_add(i64::from(entry.time_diff_s) * 1000);
                if entry.key_hash == key_hash
                    && time <= end_ms
                    && time.saturating_add(999) >= begin_ms
                    && !visit(entry.position)?
                {
                    return Ok(());
                }
                // Chains only point backwards; anything else is a stale slot after a crash.
                if entry.prev >= number {
                    break;
                }
                number = entry.prev;
                steps += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_survive_reopen_and_roll() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut problems = Vec::new();
        let index =
            Index::open(dir.path(), 4, 5, 0, &mut problems, IoFaults::detached()).expect("open");
        let keys: Vec<KeyEntry> = (0..10u64)
            .map(|i| KeyEntry {
                key_hash: (i % 3) as i32,
                position: i * 100,
                store_timestamp_ms: 1_000_000 + i as i64 * 1000,
            })
            .collect();
        index.add(&keys).expect("add");
        let collect = |index: &Index, hash| {
            let mut found = Vec::new();
            index
                .query(hash, 0, i64::MAX, &mut |p| {
                    found.push(p);
                    Ok(true)
                })
                .expect("query");
            found
        };
        assert_eq!(collect(&index, 1), [700, 400, 100]);
        index.flush().expect("flush");
        drop(index);
        let index =
            Index::open(dir.path(), 4, 5, 0, &mut problems, IoFaults::detached()).expect("reopen");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(collect(&index, 1), [700, 400, 100]);
        assert_eq!(collect(&index, 0), [900, 600, 300, 0]);
    }

    /// Sets the begin and end timestamps in the header of every index file under `dir`.
    fn patch_timestamps(dir: &std::path::Path, begin_ms: i64, end_ms: i64) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let file = OpenOptions::new()
                .write(true)
                .open(entry.expect("entry").path())
                .expect("open");
            let mut header = [0u8; 16];
            header[..8].copy_from_slice(&begin_ms.to_be_bytes());
            header[8..].copy_from_slice(&end_ms.to_be_bytes());
            std::os::unix::fs::FileExt::write_all_at(&file, &header, 0).expect("patch");
        }
    }

    #[test]
    fn damaged_header_timestamps_neither_overflow_nor_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut problems = Vec::new();
        let keys: Vec<KeyEntry> = (0..3u64)
            .map(|i| KeyEntry {
                key_hash: 7,
                position: i * 100,
                store_timestamp_ms: 1_000_000 + i as i64 * 1000,
            })
            .collect();
        let index =
            Index::open(dir.path(), 4, 50, 0, &mut problems, IoFaults::detached()).expect("open");
        index.add(&keys).expect("add");
        index.flush().expect("flush");
        drop(index);

        // A begin far in the past: the next entry's time offset from it is out of range.
        patch_timestamps(dir.path(), i64::MIN + 10, 2_000_000);
        let index =
            Index::open(dir.path(), 4, 50, 0, &mut problems, IoFaults::detached()).expect("reopen");
        index.add(&keys[..1]).expect("add past a damaged begin");
        index.flush().expect("flush");
        drop(index);

        // A begin at the end of time: entry times computed from it are out of range.
        patch_timestamps(dir.path(), i64::MAX - 10, i64::MAX);
        let index =
            Index::open(dir.path(), 4, 50, 0, &mut problems, IoFaults::detached()).expect("reopen");
        let mut found = Vec::new();
        index
            .query(7, 0, i64::MAX, &mut |p| {
                found.push(p);
                Ok(true)
            })
            .expect("query");
        // Every entry now seems to be stored at the end of time, which the range includes.
        assert_eq!(found, [0, 200, 100, 0]);
    }

    /// A flush that fails keeps the sealed file it could not fsync for the next flush, and the
    /// durable end stays below the failure even once a flush succeeds: the failed writeback
    /// may have dropped entries that no later fsync brings back.
    #[test]
    fn a_failed_flush_keeps_its_files_and_holds_the_durable_end() {
        let shim_dir = tempfile::tempdir().expect("tempdir");
        let test = "index::tests::a_failed_flush_keeps_its_files_and_holds_the_durable_end";
        let Some(shim) = crate::io_faults_shim::FaultShim::rerun_under_shim(test, shim_dir.path())
        else {
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let mut problems = Vec::new();
        let faults = IoFaults::detached();
        // Four entries fill a file (entry 0 is never used).
        let index = Index::open(dir.path(), 4, 5, 0, &mut problems, faults.clone()).expect("open");
        let keys = |range: std::ops::Range<u64>| -> Vec<KeyEntry> {
            range
                .map(|i| KeyEntry {
                    key_hash: i as i32,
                    position: i * 100,
                    store_timestamp_ms: 1_000_000,
                })
                .collect()
        };
        index.add(&keys(0..4)).expect("add");
        index.indexed_up_to(400);
        index.flush().expect("flush");
        assert_eq!(index.durable_end(), 400);
        // The next key seals the first file, which now waits for its fsync.
        index.add(&keys(4..6)).expect("add");
        index.indexed_up_to(600);
        let first = file_names(dir.path()).expect("names")[0].1.clone();
        shim.fail("EIO", "fsync", &first);
        index.flush().expect_err("the sealed file's fsync fails");
        assert_eq!(index.durable_end(), 400);
        index
            .flush()
            .expect_err("the sealed file is fsynced again, not forgotten");
        assert_eq!(faults.report().kinds[FileKind::Index as usize].errors, 2);
        assert!(faults.refuses_appends());

        shim.clear();
        index.flush().expect("flush once the disk works");
        assert_eq!(
            index.durable_end(),
            400,
            "held below the failure until reopened"
        );
        drop(index);
        let index = Index::open(dir.path(), 4, 5, 400, &mut problems, IoFaults::detached())
            .expect("reopen");
        assert_eq!(index.durable_end(), 400);
    }

    /// The slot table's last page also holds the first entries; writing that page whole (from
    /// memory) must keep them, before and after they are all written.
    #[test]
    fn the_table_end_page_keeps_its_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut problems = Vec::new();
        // 2,000 slots end the table at byte 8,040: page 1 holds slots 1,014 on and entries 0-7.
        let index = Index::open(
            dir.path(),
            2000,
            100,
            0,
            &mut problems,
            IoFaults::detached(),
        )
        .expect("open");
        let key = |i: u64| KeyEntry {
            // Every other key lands in page 1's slots.
            key_hash: if i.is_multiple_of(2) {
                1014 + i as i32
            } else {
                i as i32
            },
            position: i * 100,
            store_timestamp_ms: 1_000_000 + i as i64,
        };
        for i in 0..30u64 {
            index.add(&[key(i)]).expect("add");
            index.flush().expect("flush");
        }
        drop(index);
        let index = Index::open(
            dir.path(),
            2000,
            100,
            0,
            &mut problems,
            IoFaults::detached(),
        )
        .expect("reopen");
        assert!(problems.is_empty(), "{problems:?}");
        for i in 0..30u64 {
            let mut found = Vec::new();
            index
                .query(key(i).key_hash, 0, i64::MAX, &mut |p| {
                    found.push(p);
                    Ok(true)
                })
                .expect("query");
            assert_eq!(found, [i * 100], "key {i}");
        }
    }
}
