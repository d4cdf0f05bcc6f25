//! ConsumeQueue: per (topic, queue) an array of fixed 20-byte entries, entry n at byte n × 20.
//!
//! Entry layout (big-endian, RocketMQ's): CommitLog position i64 | record size i32 | tagsCode i64.
//! Files hold `entries_per_file` entries and are named by their start byte offset (20 digits).
//! Only the appender writes; readers see entries below the published `max_offset`, which the
//! appender raises after the entries are written.
//!
//! Entries gather in memory (the queue's tail) until a page's worth is ready or the queue is
//! flushed, and only then go to the file: a group of sends touches every queue of a topic with
//! an entry or two each, and one write per queue per group was most of the store's system
//! calls. Readers copy entries from the tail when they are still there. A crash loses at most
//! the tail, which recovery rebuilds from the CommitLog past the checkpoint, and a checkpoint is
//! written only after `flush` put the tail in the file.
//!
//! Every write covers whole pages: the tail keeps the part of the last page already in the
//! file (its lead) and writes from the page's start, with zeros after the last entry up to the
//! page's end. A write that covers a page only in part makes the kernel read the page first
//! when it is no longer cached, and it does so holding the file's lock: the appender's next
//! write to the file, and every reader of the tail, waited for that disk read. Recovery already
//! takes zero entries at a file's end for no entries.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::durable_file::sync_parent_dir;
use crate::log::commitlog::{open_read_write, parse_segment_name, segment_name};

pub const ENTRY_BYTES: usize = 20;
const _: () = assert!(ENTRY_BYTES == 8 + 4 + 8);

/// How many entries a backwards scan reads at once while trimming a torn tail.
const TRIM_CHUNK_ENTRIES: u64 = 4096;
/// The page the kernel caches and reads a file in; writes start and end on its boundaries.
const PAGE_BYTES: u64 = 4096;
/// The tail goes to the file once it holds this many bytes (its lead included): a full page.
const TAIL_WRITE_BYTES: usize = PAGE_BYTES as usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub position: u64,
    pub size: u32,
    pub tags_code: i64,
}

impl Entry {
    const ZERO: Entry = Entry {
        position: 0,
        size: 0,
        tags_code: 0,
    };

    pub fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut out = [0u8; ENTRY_BYTES];
        out[0..8].copy_from_slice(&self.position.to_be_bytes());
        out[8..12].copy_from_slice(&self.size.to_be_bytes());
        out[12..20].copy_from_slice(&self.tags_code.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Entry {
        assert!(
            bytes.len() >= ENTRY_BYTES,
            "a ConsumeQueue entry is 20 bytes"
        );
        let mut position = [0u8; 8];
        position.copy_from_slice(&bytes[0..8]);
        let mut size = [0u8; 4];
        size.copy_from_slice(&bytes[8..12]);
        let mut tags = [0u8; 8];
        tags.copy_from_slice(&bytes[12..20]);
        Entry {
            position: u64::from_be_bytes(position),
            size: u32::from_be_bytes(size),
            tags_code: i64::from_be_bytes(tags),
        }
    }
}

/// A queue's files held still (`ConsumeQueue::hold_files`).
pub struct HeldFiles<'a> {
    _files: std::sync::RwLockWriteGuard<'a, BTreeMap<u64, Arc<File>>>,
}

pub struct ConsumeQueue {
    pub topic: String,
    pub queue_id: u32,
    dir: PathBuf,
    entries_per_file: u64,
    /// File number (offset / entries_per_file) → handle.
    files: RwLock<BTreeMap<u64, Arc<File>>>,
    min_offset: AtomicU64,
    max_offset: AtomicU64,
    /// Readers see entries below this when it is lower than `max_offset`: the store's gate
    /// (`gate.rs`) holds back entries whose records the replicas have not confirmed.
    /// `u64::MAX` for a queue the gate never held.
    visible_offset: AtomicU64,
    /// Entries below this are fsynced; only the checkpoint writer touches it.
    flushed_offset: AtomicU64,
    tail: Mutex<Tail>,
    /// Set, under the `files` lock, when the queue's topic is deleted: its directory may then
    /// hold a new queue of the same name, which nothing done through this one may touch.
    retired: AtomicBool,
}

/// Entries written and not yet in the file. `bytes` holds `lead` bytes already in the file,
/// from the start of the page holding entry `first` up to it, then the entries from `first` on.
/// The lead is 0 when those bytes are unknown (after opening, trimming or discarding) until
/// a write reaches the next page.
#[derive(Default)]
struct Tail {
    first: u64,
    lead: usize,
    bytes: Vec<u8>,
}

impl Tail {
    fn entries(&self) -> &[u8] {
        &self.bytes[self.lead..]
    }

    fn is_empty(&self) -> bool {
        self.bytes.len() == self.lead
    }

    fn end(&self) -> u64 {
        self.first + (self.entries().len() / ENTRY_BYTES) as u64
    }

    /// Starts the tail over at `first`, empty and with no lead.
    fn restart(&mut self, first: u64) {
        self.first = first;
        self.lead = 0;
        self.bytes.clear();
    }
}

impl ConsumeQueue {
    /// Opens the queue's directory, creating it if needed, and its files.
    pub fn open(
        root: &Path,
        topic: &str,
        queue_id: u32,
        entries_per_file: u64,
    ) -> io::Result<ConsumeQueue> {
        assert!(entries_per_file > 0, "entries_per_file must be positive");
        let dir = root.join(topic).join(queue_id.to_string());
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir)?;
            // The checkpoint will vouch for entries in here: the directories must outlive a
            // power loss as surely as the files in them.
            sync_parent_dir(&dir)?;
            sync_parent_dir(&root.join(topic))?;
        }
        let file_bytes = entries_per_file * ENTRY_BYTES as u64;
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            // Stray files (editor backups, temp files) are not ours to judge; skip them.
            let Some(start_byte) = parse_segment_name(&name.to_string_lossy()) else {
                continue;
            };
            let file = open_read_write(&entry.path(), false)?;
            // Files of another size were written under another mappedFileSizeConsumeQueue:
            // reading them with this one would misplace every entry, and skipping them would
            // hide the queue's messages.
            if start_byte % file_bytes != 0 || file.metadata()?.len() > file_bytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} does not fit ConsumeQueue files of {entries_per_file} entries: was \
                         mappedFileSizeConsumeQueue changed? Set it back to open this store",
                        entry.path().display()
                    ),
                ));
            }
            files.insert(start_byte / file_bytes, Arc::new(file));
        }
        let queue = ConsumeQueue {
            topic: topic.to_string(),
            queue_id,
            dir,
            entries_per_file,
            files: RwLock::new(files),
            min_offset: AtomicU64::new(0),
            max_offset: AtomicU64::new(0),
            visible_offset: AtomicU64::new(u64::MAX),
            flushed_offset: AtomicU64::new(0),
            tail: Mutex::new(Tail::default()),
            retired: AtomicBool::new(false),
        };
        Ok(queue)
    }

    fn file_path(&self, file_number: u64) -> PathBuf {
        // Saturating: a name for an error message about an impossible offset must not panic.
        self.dir.join(segment_name(
            file_number.saturating_mul(self.entries_per_file * ENTRY_BYTES as u64),
        ))
    }

    fn file(&self, file_number: u64) -> Option<Arc<File>> {
        let files = self.files.read().expect("consume queue lock poisoned");
        files.get(&file_number).cloned()
    }

    /// The file's handle, the file created if needed; None once the queue is retired.
    fn file_for_write(&self, file_number: u64) -> io::Result<Option<Arc<File>>> {
        if let Some(file) = self.file(file_number) {
            // Writing through a handle never reaches a newer queue's files.
            return Ok(Some(file));
        }
        // Created under the lock, so that `retire_held` cannot come between the check and the
        // creation of a file in what may by then be another queue's directory.
        let mut files = self.files.write().expect("consume queue lock poisoned");
        if self.retired.load(Ordering::Acquire) {
            return Ok(None);
        }
        if let Some(file) = files.get(&file_number) {
            return Ok(Some(Arc::clone(file)));
        }
        let path = self.file_path(file_number);
        let file = Arc::new(open_read_write(&path, true)?);
        sync_parent_dir(&path)?;
        files.insert(file_number, Arc::clone(&file));
        Ok(Some(file))
    }

    /// Holds off every creation and removal of the queue's files (and readers' lookups) until
    /// the guard is dropped or handed to `retire_held`: while its topic's deletion renames the
    /// directory, a checkpoint's flush would otherwise try to create a file in a directory
    /// that is gone, and take that for a failing disk.
    pub fn hold_files(&self) -> HeldFiles<'_> {
        HeldFiles {
            _files: self.files.write().expect("consume queue lock poisoned"),
        }
    }

    /// Marks the queue deleted (its topic was), its files held by `held`: from now on it
    /// creates and removes no files by path. Handles already open stay usable for readers.
    pub fn retire_held(&self, held: HeldFiles<'_>) {
        self.retired.store(true, Ordering::Release);
        drop(held);
    }

    fn tail(&self) -> MutexGuard<'_, Tail> {
        self.tail.lock().expect("consume queue tail lock poisoned")
    }

    /// Adds encoded entries starting at `first_offset` to the tail, and writes the tail to the
    /// file once it holds a page's worth. Entries continue the tail; anything else (recovery
    /// rewriting an entry) first sends the tail to the file.
    pub fn write_entries(&self, first_offset: u64, bytes: &[u8]) -> io::Result<()> {
        assert_eq!(bytes.len() % ENTRY_BYTES, 0, "whole entries only");
        let mut tail = self.tail();
        if !tail.is_empty() && tail.end() != first_offset {
            self.write_out(&mut tail)?;
        }
        if tail.is_empty() && tail.first != first_offset {
            tail.restart(first_offset);
        }
        tail.bytes.extend_from_slice(bytes);
        if tail.bytes.len() >= TAIL_WRITE_BYTES {
            self.write_out(&mut tail)?;
        }
        Ok(())
    }

    /// Writes the tail to the file (nothing when it is empty): one write per file touched, from
    /// the lead's page start to the last page's end (or the file's). On failure the tail keeps
    /// its entries, so readers still find them and the next flush tries again.
    fn write_out(&self, tail: &mut Tail) -> io::Result<()> {
        if tail.is_empty() {
            return Ok(());
        }
        let file_bytes = self.entries_per_file * ENTRY_BYTES as u64;
        let mut offset = tail.first;
        // Where in the tail's bytes the current file's part starts.
        let mut from = 0;
        let mut lead = tail.lead;
        loop {
            let file_number = offset / self.entries_per_file;
            let in_file = offset % self.entries_per_file;
            let left = (tail.bytes.len() - from - lead) / ENTRY_BYTES;
            let count = ((self.entries_per_file - in_file) as usize).min(left);
            let start = in_file * ENTRY_BYTES as u64 - lead as u64;
            let len = lead + count * ENTRY_BYTES;
            let end = start + len as u64;
            let Some(file) = self.file_for_write(file_number)? else {
                // Retired: the entries belong to a deleted topic.
                tail.restart(tail.end());
                return Ok(());
            };
            let last = count == left;
            if last {
                // Zeros up to the page's end; the tail's bytes end here, so they go on them.
                let padded = end.div_ceil(PAGE_BYTES) * PAGE_BYTES;
                let pad = (padded.min(file_bytes) - end) as usize;
                tail.bytes.resize(tail.bytes.len() + pad, 0);
                let written = file.write_all_at(&tail.bytes[from..from + len + pad], start);
                tail.bytes.truncate(from + len);
                written?;
            } else {
                file.write_all_at(&tail.bytes[from..from + len], start)?;
            }
            offset += count as u64;
            if last {
                // The last page's written part becomes the next write's lead, when all of it
                // came from this write (and it is not the file's end).
                let page_start = end / PAGE_BYTES * PAGE_BYTES;
                let keep = if end == file_bytes || page_start < start {
                    0
                } else {
                    (end - page_start) as usize
                };
                tail.bytes.drain(..tail.bytes.len() - keep);
                tail.first = offset;
                tail.lead = keep;
                return Ok(());
            }
            from += len;
            lead = 0;
        }
    }

    /// Reads `count` entries from `offset` into `out` (replacing its contents).
    pub fn read_entries(&self, offset: u64, count: u64, out: &mut Vec<u8>) -> io::Result<()> {
        out.clear();
        out.resize(count as usize * ENTRY_BYTES, 0);
        // Entries from the tail's first on are copied from memory; everything below it is in
        // the file (the tail moves forward only after its write).
        let mut from_file = count;
        {
            let tail = self.tail();
            if !tail.is_empty() && offset + count > tail.first {
                if offset + count > tail.end() {
                    // Never zeros taken for entries. Not UnexpectedEof: readers take that for
                    // a file cut short and move past it.
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "entries {offset}..{} asked, written up to {}",
                            offset + count,
                            tail.end()
                        ),
                    ));
                }
                let skip = tail.first.saturating_sub(offset);
                let start = offset.max(tail.first);
                let end = offset + count;
                let source = (start - tail.first) as usize * ENTRY_BYTES
                    ..(end - tail.first) as usize * ENTRY_BYTES;
                let target =
                    skip as usize * ENTRY_BYTES..(skip + end - start) as usize * ENTRY_BYTES;
                out[target].copy_from_slice(&tail.entries()[source]);
                from_file = skip;
            }
        }
        let count = from_file;
        let mut done = 0u64;
        while done < count {
            let at = offset + done;
            let file_number = at / self.entries_per_file;
            let in_file = at % self.entries_per_file;
            let n = (self.entries_per_file - in_file).min(count - done);
            let file = self.file(file_number).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} is missing", self.file_path(file_number).display()),
                )
            })?;
            let range = done as usize * ENTRY_BYTES..(done + n) as usize * ENTRY_BYTES;
            file.read_exact_at(&mut out[range], in_file * ENTRY_BYTES as u64)?;
            done += n;
        }
        Ok(())
    }

    pub fn entry(&self, offset: u64) -> io::Result<Entry> {
        let mut buf = Vec::with_capacity(ENTRY_BYTES);
        self.read_entries(offset, 1, &mut buf)?;
        Ok(Entry::decode(&buf))
    }

    /// The first offset of the file after the one holding `offset`.
    pub fn next_file_start(&self, offset: u64) -> u64 {
        (offset / self.entries_per_file + 1) * self.entries_per_file
    }

    /// Where `offset`'s entry starts in its file.
    pub fn byte_in_file(&self, offset: u64) -> u64 {
        offset % self.entries_per_file * ENTRY_BYTES as u64
    }

    pub fn path_for(&self, offset: u64) -> PathBuf {
        self.file_path(offset / self.entries_per_file)
    }

    pub fn bounds(&self) -> (u64, u64) {
        // max first: min only grows, so a min read later can never exceed this max.
        let max = self.max_offset.load(Ordering::Acquire);
        let min = self.min_offset.load(Ordering::Acquire);
        (min.min(max), max)
    }

    /// What readers may read: `bounds` with the max lowered to what the gate lets through.
    pub fn visible_bounds(&self) -> (u64, u64) {
        let max = self.max_offset.load(Ordering::Acquire);
        let max = max.min(self.visible_offset.load(Ordering::Acquire));
        let min = self.min_offset.load(Ordering::Acquire);
        (min.min(max), max)
    }

    /// Makes entries below `max_offset` published: written, and visible to readers unless
    /// the gate holds them back; only the appender calls it.
    pub fn publish(&self, max_offset: u64) {
        self.max_offset.store(max_offset, Ordering::Release);
    }

    /// The gate's: readers see entries below `offset` and no further (whatever is published).
    pub(crate) fn set_visible(&self, offset: u64) {
        self.visible_offset.store(offset, Ordering::Release);
    }

    pub(crate) fn visible_offset(&self) -> u64 {
        self.visible_offset.load(Ordering::Acquire)
    }

    /// Writes the tail to the file and fsyncs the files holding entries written since the
    /// last call, published or not: the appender publishes a queue's max offset only after the
    /// CommitLog's written position, which the checkpoint reads first and then vouches for.
    /// On failure, with the path of the file that failed, nothing counts as flushed: the tail
    /// keeps what it could not write and the next call fsyncs the same files again.
    pub fn flush(&self) -> Result<(), (PathBuf, io::Error)> {
        let published = self.max_offset.load(Ordering::Acquire);
        let written = {
            let mut tail = self.tail();
            let first = tail.first;
            self.write_out(&mut tail)
                .map_err(|e| (self.path_for(first), e))?;
            tail.first
        };
        let max = published.max(written);
        let flushed = self.flushed_offset.load(Ordering::Acquire);
        if flushed >= max {
            return Ok(());
        }
        let first_file = flushed / self.entries_per_file;
        let last_file = (max - 1) / self.entries_per_file;
        // The files that exist in the range, not every number in it: a damaged record can
        // leave an entry at an absurd offset, and counting up to it would never end.
        let files: Vec<(u64, Arc<File>)> = self
            .files
            .read()
            .expect("consume queue lock poisoned")
            .range(first_file..=last_file)
            .map(|(number, file)| (*number, Arc::clone(file)))
            .collect();
        for (number, file) in files {
            file.sync_data().map_err(|e| (self.file_path(number), e))?;
        }
        self.flushed_offset.store(max, Ordering::Release);
        Ok(())
    }

    /// Retention: raises the min offset to the first entry at or past `min_position` and
    /// deletes the files whose entries all lie below it, except the last one (as RocketMQ
    /// does): a queue with no file would reopen with its offsets back at 0, and the next
    /// append would reuse offsets consumers have already committed past. Returns how many
    /// files it deleted. Entries point at increasing positions, so a binary search finds the
    /// new min offset.
    /// An entry that cannot be read (its file missing or cut short) counts as not below:
    /// the min offset may then stay lower than it could, which reads tolerate, but never
    /// passes an entry still in the log.
    pub fn drop_below(&self, min_position: u64) -> io::Result<usize> {
        let (mut low, mut high) = self.bounds();
        while low < high {
            let middle = low + (high - low) / 2;
            let below = match self.entry(middle) {
                Ok(entry) => entry.position < min_position,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::UnexpectedEof
                    ) =>
                {
                    false
                }
                Err(e) => return Err(e),
            };
            if below {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        self.min_offset.fetch_max(low, Ordering::AcqRel);
        let min_offset = self.min_offset.load(Ordering::Acquire);
        let mut files = self.files.write().expect("consume queue lock poisoned");
        if self.retired.load(Ordering::Acquire) {
            return Ok(0);
        }
        let last = files.keys().next_back().copied();
        let doomed: Vec<u64> = files
            .keys()
            .copied()
            .filter(|n| (n + 1) * self.entries_per_file <= min_offset && Some(*n) != last)
            .collect();
        for file_number in &doomed {
            // As for segments: a file whose unlink failed stays listed for the next pass.
            match std::fs::remove_file(self.file_path(*file_number)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            files.remove(file_number);
        }
        Ok(doomed.len())
    }

    /// Removes entries at `offset` and beyond (after a failed append, so that no stale entry
    /// survives to be taken for a real one by recovery).
    pub fn discard_from(&self, offset: u64) -> io::Result<()> {
        {
            let mut tail = self.tail();
            if tail.end() > offset {
                let keep = tail.lead + offset.saturating_sub(tail.first) as usize * ENTRY_BYTES;
                tail.bytes.truncate(keep);
            }
            if tail.is_empty() {
                // The file is cut below: what the lead holds may no longer be in it.
                tail.restart(offset);
            }
        }
        let keep_file = offset / self.entries_per_file;
        let mut files = self.files.write().expect("consume queue lock poisoned");
        let later: Vec<u64> = files.range(keep_file + 1..).map(|(n, _)| *n).collect();
        for file_number in later {
            files.remove(&file_number);
            std::fs::remove_file(self.file_path(file_number))?;
        }
        if let Some(file) = files.get(&keep_file) {
            // Only ever shorter: entries below `offset` may still be in the tail.
            let keep = (offset % self.entries_per_file) * ENTRY_BYTES as u64;
            if file.metadata()?.len() > keep {
                file.set_len(keep)?;
            }
        }
        Ok(())
    }

    /// A truncation of the CommitLog at `position`: removes the entries that point at or past
    /// it, durably (the kept file cut and fsynced, later files removed and their directory
    /// fsynced), then lowers the max offset, so that the next record of the queue takes the
    /// offset the first removed one had. Returns the new max offset, None when no entry
    /// pointed that far. The appender is held: nothing is appended meanwhile. Entries point at
    /// increasing positions, so a binary search finds the first to go.
    pub fn rewind_to_position(&self, position: u64) -> io::Result<Option<u64>> {
        let (min, max) = self.bounds();
        let (mut low, mut high) = (min, max);
        while low < high {
            let middle = low + (high - low) / 2;
            if self.entry(middle)?.position < position {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        if low == max {
            return Ok(None);
        }
        let files_before = self
            .files
            .read()
            .expect("consume queue lock poisoned")
            .len();
        self.discard_from(low)?;
        let kept = self.file(low / self.entries_per_file);
        if let Some(file) = kept {
            file.sync_data()?;
        }
        if self
            .files
            .read()
            .expect("consume queue lock poisoned")
            .len()
            != files_before
        {
            sync_parent_dir(&self.path_for(low))?;
        }
        self.max_offset.store(low, Ordering::Release);
        // A queue the gate holds shows nothing past the cut, whatever is appended later.
        if self.visible_offset.load(Ordering::Acquire) != u64::MAX {
            self.visible_offset.fetch_min(low, Ordering::AcqRel);
        }
        self.flushed_offset.fetch_min(low, Ordering::AcqRel);
        Ok(Some(low))
    }

    /// A replica's queue starts at `offset`, the offset of the first record of it that the
    /// replica received: its master holds the entries below, this store never will. Called
    /// before the entry at `offset` is published; the file holding it reads as zeros below it.
    pub fn start_at(&self, offset: u64) {
        self.min_offset.fetch_max(offset, Ordering::AcqRel);
    }

    /// The queue's first entry, for recovery: the first offset below `max_offset` in the
    /// files that holds an entry (size > 0), not the start of the first file, whose entries
    /// below a replica's first (`start_at`) are zeros. Entries are read one at first, since a
    /// queue's first entry is almost always at its first file's start.
    fn first_entry(&self, files: &BTreeMap<u64, Arc<File>>, max_offset: u64) -> io::Result<u64> {
        let mut buf = Vec::new();
        for (&file_number, file) in files {
            let first_offset = file_number * self.entries_per_file;
            if first_offset >= max_offset {
                break;
            }
            let entries = (file.metadata()?.len() / ENTRY_BYTES as u64)
                .min(self.entries_per_file)
                .min(max_offset - first_offset);
            let mut start = 0;
            let mut chunk = 1;
            while start < entries {
                let n = chunk.min(entries - start);
                buf.clear();
                buf.resize(n as usize * ENTRY_BYTES, 0);
                file.read_exact_at(&mut buf, start * ENTRY_BYTES as u64)?;
                let found = buf
                    .chunks_exact(ENTRY_BYTES)
                    .position(|raw| Entry::decode(raw).size > 0);
                if let Some(i) = found {
                    return Ok(first_offset + start + i as u64);
                }
                start += n;
                chunk = TRIM_CHUNK_ENTRIES;
            }
        }
        Ok(max_offset)
    }

    /// Recovery step 5: drops entries that point at or past `commitlog_end` and torn or zero
    /// entries at the tail, then sets min and max. Returns how many entries were dropped, not
    /// counting zeros.
    pub fn trim(&self, commitlog_end: u64) -> io::Result<u64> {
        self.write_out(&mut self.tail())?;
        let mut files = self.files.write().expect("consume queue lock poisoned");
        let mut dropped = 0u64;
        let mut max_offset = None;
        let numbers: Vec<u64> = files.keys().rev().copied().collect();
        let mut buf = Vec::new();
        for file_number in numbers {
            let file = Arc::clone(&files[&file_number]);
            let entries = file.metadata()?.len() / ENTRY_BYTES as u64;
            let mut end = entries.min(self.entries_per_file);
            let mut last_valid = None;
            while end > 0 && last_valid.is_none() {
                let start = end.saturating_sub(TRIM_CHUNK_ENTRIES);
                buf.clear();
                buf.resize((end - start) as usize * ENTRY_BYTES, 0);
                file.read_exact_at(&mut buf, start * ENTRY_BYTES as u64)?;
                for i in (0..end - start).rev() {
                    let e = Entry::decode(&buf[i as usize * ENTRY_BYTES..]);
                    if e.size > 0 && e.position.saturating_add(u64::from(e.size)) <= commitlog_end {
                        last_valid = Some(start + i);
                        break;
                    }
                    // Zeros are no entry: the pages' ends that writes fill (or a torn write).
                    if e != Entry::ZERO {
                        dropped += 1;
                    }
                }
                end = start;
            }
            let first_offset = file_number * self.entries_per_file;
            match last_valid {
                Some(i) => {
                    file.set_len((i + 1) * ENTRY_BYTES as u64)?;
                    max_offset = Some(first_offset + i + 1);
                    break;
                }
                None if files.len() > 1 => {
                    files.remove(&file_number);
                    std::fs::remove_file(self.file_path(file_number))?;
                }
                None => {
                    file.set_len(0)?;
                    max_offset = Some(first_offset);
                }
            }
        }
        let max_offset = max_offset.unwrap_or(0);
        let min_offset = self.first_entry(&files, max_offset)?;
        self.min_offset.store(min_offset, Ordering::Release);
        self.max_offset.store(max_offset, Ordering::Release);
        self.flushed_offset.store(0, Ordering::Release);
        drop(files);
        // The tail (empty since the write above) continues at the new end, not past dropped
        // entries: `flush` counts what it holds as written.
        self.tail().restart(max_offset);
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests;
