//! Preparing the active segment ahead of the CommitLog writer, so that appends land in space
//! the file already has.
//!
//! Sync flush (`Fill::Zeros`): an fdatasync that must also record a larger file size commits
//! the filesystem journal (ext4: a jbd2 transaction and a second device flush). Measured on the
//! build machine, a 12 KiB write plus fdatasync took 133 µs and ~2 context switches when it
//! grew the file, 43 µs and one switch when it landed in space already written with zeros and
//! fsynced. With sync flush every group pays one fdatasync, so the writer writes into zeroed
//! space whenever it can.
//!
//! Async flush (`Fill::Allocate`): nobody waits for an fdatasync, but an append that grows the
//! file also changes its size in the inode and reserves blocks, and on the build machine (ext4)
//! such appends now and then took milliseconds: with 4,300-byte appends at 8,000 a second, an
//! fdatasync every 500 ms and both cores busy, 103 of 120,000 writes took over 2 ms when each
//! grew the file, 7 when the file was allocated ahead.
//! Zero-filling would double the bytes written, so the filler allocates instead (`fallocate`):
//! the file grows, reads of the new range give zeros, and nothing is written until the data is.
//!
//! How: a background thread keeps `[written, written + ahead)` of the active segment filled
//! with zeros (written and fsynced, or allocated), one chunk at a time. The bytes at and past
//! `end` are never data; both sides keep that true by writing past `end` only under the lock
//! and raising `end` afterwards. The filler tells the writer how far it has filled
//! (`zeroed_end`); the writer (`commitlog::write_in_segment`) writes below that without the
//! lock, and if it outruns the filler it writes past `end` under the lock (`hold`; the old,
//! slower path) and the filler resumes from there.
//!
//! Recovery treats an all-zero tail of the last segment as unused space and cuts it; both kinds
//! of space read as zeros.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::Log;
use crate::faults::{FileKind, IoOp};

/// How far past the written position the filler keeps zeros ready: at 100 MB/s of appends
/// that is 160 ms of headroom, far more than one fill round takes.
pub const AHEAD_BYTES: u64 = 16 * 1024 * 1024;
/// One fill: this many zeros (in `ZERO_WRITE_BYTES` writes) and one fdatasync, so the journal
/// commits once per MiB instead of once per group.
pub const CHUNK_BYTES: u64 = 1024 * 1024;
/// With async flush an allocation costs about the same whatever its size: fewer, larger ones.
pub const ALLOCATE_AHEAD_BYTES: u64 = 32 * 1024 * 1024;
pub const ALLOCATE_CHUNK_BYTES: u64 = 4 * 1024 * 1024;
/// The size of each write of zeros. The page cache sizes a new folio by the write that creates
/// it, and every later append into the active segment lands in a folio the filler created. One
/// 1 MiB write made 1 MiB folios: each append then walked the folio's 256 block buffers, and
/// each group's fdatasync wrote back and locked the whole folio the next appends were writing
/// into. Under 64 producers of 1 KiB sync sends that cost 4 samples in 1,000 per message in
/// those two places and 3.7 in spinlock contention; page-sized writes cut that to under 0.6.
const ZERO_WRITE_BYTES: u64 = 4096;
/// How often the filler looks at the written position while the writer is within half its
/// distance ahead of the zeroed end, and while it has more headroom than that. Each look is a
/// wake-up of an idle thread, which on a virtual machine costs far more than the look: at
/// 5 ms all the time the filler took a seventh of the broker's CPU under 25,000 sends a
/// second. At 100 MB/s of appends, half the distance is 80 ms (zeros) or 160 ms (allocation)
/// of headroom, so a look every 40 ms still finds the writer far from the zeroed end.
const POLL_CLOSE: Duration = Duration::from_millis(5);
const POLL_FAR: Duration = Duration::from_millis(40);
/// How long the filler waits after a failure (a full disk) before it tries again: each failure
/// is logged and counted, and the writer grows the file itself meanwhile.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// How the filler prepares space ahead of the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Writes zeros and fsyncs them (sync flush).
    Zeros,
    /// Allocates the space without writing it (async flush).
    Allocate,
}

impl Fill {
    fn ahead_bytes(self) -> u64 {
        match self {
            Fill::Zeros => AHEAD_BYTES,
            Fill::Allocate => ALLOCATE_AHEAD_BYTES,
        }
    }

    fn chunk_bytes(self) -> u64 {
        match self {
            Fill::Zeros => CHUNK_BYTES,
            Fill::Allocate => ALLOCATE_CHUNK_BYTES,
        }
    }
}

struct Zeroed {
    base: u64,
    file: Option<Arc<File>>,
    /// Absolute position; the file holds zeros from here to its length and no data.
    end: u64,
}

pub struct ZeroFiller {
    state: Mutex<Zeroed>,
    /// The filler's own descriptor of the active segment, by base. Its fdatasync must not be
    /// the one that learns of a failed writeback of the writer's pages: Linux reports such
    /// an error once per open file description, and the CommitLog's own fsync has to see it.
    filler_file: Mutex<Option<(u64, File)>>,
    /// A copy of `state.end` for the writer's lock-free check.
    zeroed_end: AtomicU64,
}

impl ZeroFiller {
    /// Starts with the active segment as recovery left it: data up to `end`, nothing after.
    pub fn new(base: u64, file: Option<Arc<File>>, end: u64) -> ZeroFiller {
        ZeroFiller {
            state: Mutex::new(Zeroed { base, file, end }),
            filler_file: Mutex::new(None),
            zeroed_end: AtomicU64::new(end),
        }
    }

    /// How far the active segment holds zeros and no data (an absolute position): the writer
    /// may write below it without holding the filler off.
    pub fn zeroed_end(&self) -> u64 {
        self.zeroed_end.load(Ordering::Acquire)
    }

    /// Holds the filler off while the writer writes past the zeroed end or cuts the segment.
    pub fn hold(&self) -> Held<'_> {
        Held {
            state: self.state.lock().expect("preallocation lock poisoned"),
            zeroed_end: &self.zeroed_end,
        }
    }

    /// Fills one chunk if the writer is closer than `fill`'s distance ahead to the zeroed end.
    /// Returns whether it filled anything; on failure, the segment's path with the error.
    fn fill_once(
        &self,
        fill: Fill,
        written: u64,
        segment_bytes: u64,
        zeros: &[u8],
        path_of: &dyn Fn(u64) -> PathBuf,
    ) -> Result<bool, (PathBuf, io::Error)> {
        let mut state = self.state.lock().expect("preallocation lock poisoned");
        if state.file.is_none() {
            return Ok(false);
        }
        let segment_end = state.base + segment_bytes;
        if state.end >= segment_end.min(written + fill.ahead_bytes()) {
            return Ok(false);
        }
        let mut filler_file = self.filler_file.lock().expect("filler file lock poisoned");
        if filler_file
            .as_ref()
            .is_none_or(|(base, _)| *base != state.base)
        {
            let path = path_of(state.base);
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| (path, e))?;
            *filler_file = Some((state.base, file));
        }
        let (_, file) = filler_file.as_ref().expect("filler file just opened");
        let from = state.end;
        let to = (from + fill.chunk_bytes()).min(segment_end);
        let write = match fill {
            Fill::Zeros => write_zeros(file, zeros, from - state.base, to - state.base)
                .and_then(|()| file.sync_data()),
            Fill::Allocate => allocate(file, from - state.base, to - state.base),
        };
        if let Err(e) = write {
            // Give back what a partial write took (a full disk): zeros past `end` are harmless,
            // but the space is better left to data.
            let _ = file.set_len(from - state.base);
            return Err((path_of(state.base), e));
        }
        state.end = to;
        self.zeroed_end.store(to, Ordering::Release);
        Ok(true)
    }
}

/// The filler held off, so that the writer may write past the zeroed end (or cut the segment).
pub struct Held<'a> {
    state: MutexGuard<'a, Zeroed>,
    zeroed_end: &'a AtomicU64,
}

impl Held<'_> {
    /// Whether the filler works on `file`, the segment at `base`.
    pub fn fills(&self, base: u64, file: &Arc<File>) -> bool {
        self.state.base == base
            && self
                .state
                .file
                .as_ref()
                .is_some_and(|f| Arc::ptr_eq(f, file))
    }

    /// The writer moved to `file`, the segment at `base`: data up to `end`, no zeros past it.
    pub fn restart(&mut self, base: u64, file: &Arc<File>, end: u64) {
        *self.state = Zeroed {
            base,
            file: Some(Arc::clone(file)),
            end,
        };
    }

    /// The writer wrote data up to `end`: the filler goes on from there if that is past it.
    pub fn data_written_to(&mut self, end: u64) {
        self.state.end = self.state.end.max(end);
        self.zeroed_end.store(self.state.end, Ordering::Release);
    }

    /// A truncation removed the segment the filler worked on: nothing to fill until the
    /// writer creates the next one at `position`.
    pub fn forget(&mut self, position: u64) {
        *self.state = Zeroed {
            base: position,
            file: None,
            end: position,
        };
        self.zeroed_end.store(position, Ordering::Release);
    }

    /// The writer cut `file`, the segment at `base`, at `position`: nothing past it.
    pub fn cut(&mut self, base: u64, file: &Arc<File>, position: u64) {
        self.restart(base, file, position);
        self.zeroed_end.store(position, Ordering::Release);
    }
}

/// Writes zeros over `[from, to)` of `file`, `zeros.len()` bytes at a time.
fn write_zeros(file: &File, zeros: &[u8], from: u64, to: u64) -> io::Result<()> {
    let mut at = from;
    while at < to {
        let n = (zeros.len() as u64).min(to - at);
        file.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

/// Allocates `[from, to)` of `file` (offsets in the file), growing it to `to`.
fn allocate(file: &File, from: u64, to: u64) -> io::Result<()> {
    // SAFETY: a plain system call on a descriptor `file` keeps open.
    let result = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(file),
            0,
            from as libc::off_t,
            (to - from) as libc::off_t,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The filler thread; ends when `stop` is dropped.
pub fn run(log: Arc<Log>, fill: Fill, stop: Receiver<()>) {
    let zeros = match fill {
        Fill::Zeros => vec![0u8; ZERO_WRITE_BYTES as usize],
        Fill::Allocate => Vec::new(),
    };
    loop {
        let written = log.written();
        // Fill until caught up; an error (a full disk) waits a while.
        let wait = match log
            .zeros
            .fill_once(fill, written, log.segment_bytes, &zeros, &|base| {
                log.segments.path(base)
            }) {
            Ok(true) => continue,
            Ok(false) => {
                let headroom = log.zeros.zeroed_end().saturating_sub(log.written());
                if headroom > fill.ahead_bytes() / 2 {
                    POLL_FAR
                } else {
                    POLL_CLOSE
                }
            }
            // A filesystem without fallocate: the writer grows the file itself, as it would
            // with no filler.
            Err((_, e)) if fill == Fill::Allocate && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                return
            }
            Err((path, e)) => {
                log.faults
                    .record(FileKind::CommitLog, IoOp::Preallocate, &path, &e);
                RETRY_INTERVAL
            }
        };
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::commitlog::{cut_segment, write_in_segment};
    use super::*;

    /// An empty segment at base 0 in `dir`, with its zero-filler.
    fn segment(dir: &std::path::Path) -> (PathBuf, Arc<File>, ZeroFiller) {
        let path = dir.join("00000000000000000000");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        let file = Arc::new(file);
        let filler = ZeroFiller::new(0, Some(Arc::clone(&file)), 0);
        (path, file, filler)
    }

    #[test]
    fn fills_zeros_ahead_in_chunks_and_never_over_data() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file, filler) = segment(dir.path());
        // Not a whole number of chunks or pages: the last fill is short.
        let segment_bytes = 2 * CHUNK_BYTES + 1000;
        let zeros = vec![0u8; ZERO_WRITE_BYTES as usize];
        let path_of = |_: u64| path.clone();

        let data = vec![7u8; 1500];
        write_in_segment(&filler, 0, &file, 0, &data).unwrap();
        assert!(filler
            .fill_once(Fill::Zeros, 1500, segment_bytes, &zeros, &path_of)
            .unwrap());
        assert_eq!(file.metadata().unwrap().len(), 1500 + CHUNK_BYTES);
        assert_eq!(
            filler.zeroed_end.load(Ordering::Acquire),
            1500 + CHUNK_BYTES
        );

        // Below the zeroed end the writer writes without the lock; later fills leave it be.
        write_in_segment(&filler, 0, &file, 1500, &data).unwrap();
        while filler
            .fill_once(Fill::Zeros, 3000, segment_bytes, &zeros, &path_of)
            .unwrap()
        {}
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, segment_bytes);
        assert!(bytes[..3000].iter().all(|&b| b == 7));
        assert!(bytes[3000..].iter().all(|&b| b == 0));
        assert_eq!(filler.zeroed_end.load(Ordering::Acquire), segment_bytes);
    }

    #[test]
    fn a_rollback_cuts_the_zeros_and_filling_resumes_from_the_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file, filler) = segment(dir.path());
        let zeros = vec![0u8; ZERO_WRITE_BYTES as usize];
        let path_of = |_: u64| path.clone();
        write_in_segment(&filler, 0, &file, 0, &[9u8; 100]).unwrap();
        assert!(filler
            .fill_once(Fill::Zeros, 100, 8 * CHUNK_BYTES, &zeros, &path_of)
            .unwrap());

        cut_segment(&filler, 0, &file, 60).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 60);
        assert_eq!(filler.zeroed_end.load(Ordering::Acquire), 60);
        assert!(filler
            .fill_once(Fill::Zeros, 60, 8 * CHUNK_BYTES, &zeros, &path_of)
            .unwrap());
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, 60 + CHUNK_BYTES);
        assert!(bytes[..60].iter().all(|&b| b == 9));
        assert!(bytes[60..].iter().all(|&b| b == 0));
    }

    #[test]
    fn allocating_grows_the_file_with_reserved_zeros_and_keeps_the_data() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let (path, file, filler) = segment(dir.path());
        let path_of = |_: u64| path.clone();
        let segment_bytes = 2 * ALLOCATE_CHUNK_BYTES + 1000;
        write_in_segment(&filler, 0, &file, 0, &[5u8; 3000]).unwrap();
        let filled = match filler.fill_once(Fill::Allocate, 3000, segment_bytes, &[], &path_of) {
            Err((_, e)) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                println!("skipped: this filesystem has no fallocate");
                return;
            }
            other => other.unwrap(),
        };
        assert!(filled);
        let metadata = file.metadata().unwrap();
        assert_eq!(metadata.len(), 3000 + ALLOCATE_CHUNK_BYTES);
        // The space is the file's now (512-byte blocks), not a hole.
        assert!(metadata.blocks() * 512 >= ALLOCATE_CHUNK_BYTES);

        // The writer writes into it without the filler's lock; filling stops at the segment's end.
        write_in_segment(&filler, 0, &file, 3000, &[6u8; 3000]).unwrap();
        while filler
            .fill_once(Fill::Allocate, 6000, segment_bytes, &[], &path_of)
            .unwrap()
        {}
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, segment_bytes);
        assert!(bytes[..3000].iter().all(|&b| b == 5));
        assert!(bytes[3000..6000].iter().all(|&b| b == 6));
        assert!(bytes[6000..].iter().all(|&b| b == 0));
    }
}
