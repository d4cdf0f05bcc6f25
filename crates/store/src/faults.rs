//! Store I/O faults: the one place where a failed write, fsync, create, rename, truncation,
//! allocation or removal of a store file is recorded.
//!
//! Each fault is counted by the kind of file, kept as its kind's last error (with the time),
//! and logged: at most once per `LOG_WINDOW` per kind, the next line saying how many were left
//! out, so a failing disk cannot flood the log. A fault on a file that a message's durability
//! rests on (the CommitLog, a ConsumeQueue, the index, the checkpoint) that is not mere
//! housekeeping (preallocation ahead of the writer, retention's removals) also makes the store
//! refuse appends, as RocketMQ marks its store not writable: after EIO or ENOSPC the disk may
//! have dropped what it was given, and a send acknowledged then could be lost. The refusal
//! lasts until a probe, run by the store's background thread at most every `PROBE_INTERVAL`,
//! writes and fsyncs a small file (`PROBE_FILE_NAME`) in that kind's directory again. Reads go
//! on throughout.
//!
//! A store's files report to its own record, which the layers hold. Files the broker keeps
//! through this crate without a `Store` at hand (its JSON snapshots, the timer buckets) find
//! that record by path: each open store lists its directories here, and a file under one of
//! them reports to that store; a file under none reports to a record of its own, logged and
//! counted all the same.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::types::StoreConfig;

/// A kind's errors are logged at most once per window; the rest are counted into the next line.
pub const LOG_WINDOW: Duration = Duration::from_secs(10);
/// How often a store that refuses appends tries its probe write.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// The probe's file, created, fsynced and removed in the directory of a kind that refuses
/// appends. Recovery removes one a crash left in the CommitLog directory, where every other
/// name must be a segment's.
pub const PROBE_FILE_NAME: &str = ".quiver-probe";
/// The probe writes a page: what a record's append writes at least.
const PROBE_BYTES: usize = 4096;

/// The kinds of file the store keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    /// CommitLog segments.
    CommitLog,
    /// ConsumeQueue files and their directories.
    ConsumeQueue,
    /// Key index files.
    Index,
    /// The checkpoint.
    Checkpoint,
    /// The store's other small files: damaged ranges, deleted topics, the abort file.
    Metadata,
    /// The broker's JSON snapshots under `config/` (topics, offsets, groups, pop state...).
    Config,
    /// The timer wheel's bucket files.
    Timer,
}

impl FileKind {
    pub const ALL: [FileKind; 7] = [
        FileKind::CommitLog,
        FileKind::ConsumeQueue,
        FileKind::Index,
        FileKind::Checkpoint,
        FileKind::Metadata,
        FileKind::Config,
        FileKind::Timer,
    ];

    /// The kind's name in logs and in the broker's runtime info.
    pub fn name(self) -> &'static str {
        match self {
            FileKind::CommitLog => "CommitLog",
            FileKind::ConsumeQueue => "ConsumeQueue",
            FileKind::Index => "Index",
            FileKind::Checkpoint => "Checkpoint",
            FileKind::Metadata => "Metadata",
            FileKind::Config => "Config",
            FileKind::Timer => "Timer",
        }
    }

    /// Whether a message's durability rests on files of this kind. The others fail their own
    /// callers (a topic's creation when `topics.json` cannot be written, the timer wheel's
    /// checkpoint when its buckets cannot be fsynced), which refuse what they cannot keep.
    fn holds_messages(self) -> bool {
        matches!(
            self,
            FileKind::CommitLog | FileKind::ConsumeQueue | FileKind::Index | FileKind::Checkpoint
        )
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// What was being done to the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    Write,
    Fsync,
    /// Written and fsynced in one step (a ConsumeQueue's or the index's flush).
    Flush,
    Create,
    Rename,
    /// A small file replaced whole: written to a temporary, fsynced, renamed over.
    Replace,
    Truncate,
    /// Zeros written or space allocated ahead of the CommitLog's writer.
    Preallocate,
    /// Retention's or a rollback's unlink.
    Remove,
}

impl IoOp {
    fn name(self) -> &'static str {
        match self {
            IoOp::Write => "write",
            IoOp::Fsync => "fsync",
            IoOp::Flush => "flush",
            IoOp::Create => "create",
            IoOp::Rename => "rename",
            IoOp::Replace => "replace",
            IoOp::Truncate => "truncate",
            IoOp::Preallocate => "preallocate",
            IoOp::Remove => "remove",
        }
    }

    /// Whether its failure may have cost written data. Preallocation only saves the writer
    /// work (it grows the file itself past the prepared end), and a file retention could not
    /// remove is tried again next round.
    fn loses_data(self) -> bool {
        !matches!(self, IoOp::Preallocate | IoOp::Remove)
    }
}

/// One recorded fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub op: &'static str,
    pub path: String,
    pub message: String,
    /// Wall-clock time, ms since the epoch.
    pub at_ms: i64,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {} failed: {}", self.op, self.path, self.message)
    }
}

/// The faults of one kind of file so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindFaults {
    pub kind: FileKind,
    pub errors: u64,
    pub last: Option<Fault>,
}

/// Why the store refuses appends, since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unwritable {
    pub since_ms: i64,
    /// The kinds whose probe has not succeeded yet, with the fault that stopped each.
    pub faults: Vec<(FileKind, Fault)>,
}

impl std::fmt::Display for Unwritable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (kind, fault) in &self.faults {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{}: {fault}", kind.name())?;
        }
        Ok(())
    }
}

/// A copy of the record, for the broker's runtime info.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultReport {
    /// Every kind, in `FileKind::ALL`'s order (so `kinds[kind as usize]` is `kind`'s).
    pub kinds: Vec<KindFaults>,
    /// None while the store takes appends.
    pub unwritable: Option<Unwritable>,
}

impl FaultReport {
    pub fn total_errors(&self) -> u64 {
        self.kinds.iter().map(|k| k.errors).sum()
    }
}

/// One kind's record.
#[derive(Default)]
struct KindRecord {
    errors: AtomicU64,
    state: Mutex<KindState>,
}

#[derive(Default)]
struct KindState {
    last: Option<Fault>,
    /// Set while the kind refuses appends: the fault that made it, and when that began.
    refusing: Option<(Fault, i64)>,
    logged_at: Option<Instant>,
    suppressed: u64,
}

struct Shared {
    kinds: [KindRecord; FileKind::ALL.len()],
    /// A bit per kind that refuses appends (`FileKind::bit`): read on every append.
    refusing: AtomicU32,
    /// Where each kind's probe writes; None for kinds that never refuse.
    probe_dirs: [Option<PathBuf>; FileKind::ALL.len()],
    last_probe: Mutex<Option<Instant>>,
}

/// The record of one store's I/O faults. Cheap to clone (an `Arc`); every clone is the same
/// record.
#[derive(Clone)]
pub struct IoFaults {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for IoFaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoFaults")
            .field("refusing", &self.shared.refusing.load(Ordering::Relaxed))
            .finish()
    }
}

/// The open stores' directories, each with its store's record, newest last.
static REGISTRY: Mutex<Vec<(PathBuf, Weak<Shared>)>> = Mutex::new(Vec::new());
/// The record of files under no open store.
static DETACHED: OnceLock<IoFaults> = OnceLock::new();

fn relock<T>(lock: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Counters and texts only: a panic while one was held leaves nothing to repair.
    lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl IoFaults {
    /// A record with probes in the given directories, not listed for lookups by path.
    fn with_probe_dirs(probe_dirs: [Option<PathBuf>; FileKind::ALL.len()]) -> IoFaults {
        IoFaults {
            shared: Arc::new(Shared {
                kinds: Default::default(),
                refusing: AtomicU32::new(0),
                probe_dirs,
                last_probe: Mutex::new(None),
            }),
        }
    }

    /// A record of its own, for layers opened outside a store (tests, tools).
    pub fn detached() -> IoFaults {
        IoFaults::with_probe_dirs(Default::default())
    }

    /// The record of the store `config` describes, listed so that files under its
    /// directories (and the folder of its lock and abort files, where the broker keeps
    /// `config/` and `timer/`) report to it.
    pub fn for_store(config: &StoreConfig) -> IoFaults {
        let mut probe_dirs: [Option<PathBuf>; FileKind::ALL.len()] = Default::default();
        let root = config.abort_path.parent().map(Path::to_path_buf);
        probe_dirs[FileKind::CommitLog as usize] = Some(config.commitlog_dir.clone());
        probe_dirs[FileKind::ConsumeQueue as usize] = Some(config.consume_queue_dir.clone());
        probe_dirs[FileKind::Index as usize] = Some(config.index_dir.clone());
        probe_dirs[FileKind::Checkpoint as usize] =
            config.checkpoint_path.parent().map(Path::to_path_buf);
        let faults = IoFaults::with_probe_dirs(probe_dirs);
        let dirs = [
            root,
            Some(config.commitlog_dir.clone()),
            Some(config.consume_queue_dir.clone()),
            Some(config.index_dir.clone()),
            config.checkpoint_path.parent().map(Path::to_path_buf),
            config.memory_offsets_path.parent().map(Path::to_path_buf),
        ];
        let mut registry = relock(&REGISTRY);
        registry.retain(|(_, store)| store.strong_count() > 0);
        for dir in dirs.into_iter().flatten() {
            registry.push((dir, Arc::downgrade(&faults.shared)));
        }
        faults
    }

    /// The record of the open store whose directory holds `path` (the innermost such
    /// directory, the newest store among equals), or the one of files under no store.
    pub fn for_path(path: &Path) -> IoFaults {
        let registry = relock(&REGISTRY);
        let found = registry
            .iter()
            .rev()
            .filter(|(dir, _)| path.starts_with(dir))
            .filter_map(|(dir, store)| Some((dir.components().count(), store.upgrade()?)))
            .max_by_key(|(depth, _)| *depth);
        match found {
            Some((_, shared)) => IoFaults { shared },
            None => DETACHED.get_or_init(IoFaults::detached).clone(),
        }
    }

    /// Records that `op` on `path`, a file of `kind`, failed with `error`.
    pub fn record(&self, kind: FileKind, op: IoOp, path: &Path, error: &io::Error) {
        let record = &self.shared.kinds[kind as usize];
        let errors = record.errors.fetch_add(1, Ordering::AcqRel) + 1;
        let fault = Fault {
            op: op.name(),
            path: path.display().to_string(),
            message: error.to_string(),
            at_ms: now_ms(),
        };
        let refuses = kind.holds_messages() && op.loses_data();
        let mut state = relock(&record.state);
        state.last = Some(fault.clone());
        let began_refusing = refuses && state.refusing.is_none();
        if refuses {
            self.shared.refusing.fetch_or(kind.bit(), Ordering::AcqRel);
            state.refusing.get_or_insert((fault.clone(), fault.at_ms));
        }
        let due = state.logged_at.is_none_or(|at| at.elapsed() >= LOG_WINDOW);
        if !due && !began_refusing {
            state.suppressed += 1;
            return;
        }
        let suppressed = std::mem::take(&mut state.suppressed);
        state.logged_at = Some(Instant::now());
        drop(state);
        tracing::error!(
            kind = kind.name(),
            op = op.name(),
            path = %fault.path,
            error = %fault.message,
            errors,
            suppressed,
            "store I/O error{}",
            if began_refusing {
                ": appends are refused until a write to this disk succeeds again"
            } else {
                ""
            }
        );
    }

    /// Why appends are refused; None while they are taken.
    pub fn unwritable(&self) -> Option<Unwritable> {
        if self.shared.refusing.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut faults = Vec::new();
        let mut since_ms = i64::MAX;
        for kind in FileKind::ALL {
            if let Some((fault, since)) = &relock(&self.shared.kinds[kind as usize].state).refusing
            {
                since_ms = since_ms.min(*since);
                faults.push((kind, fault.clone()));
            }
        }
        (!faults.is_empty()).then_some(Unwritable { since_ms, faults })
    }

    /// Whether appends are refused: one atomic load, for the append path.
    pub fn refuses_appends(&self) -> bool {
        self.shared.refusing.load(Ordering::Acquire) != 0
    }

    /// The counts, last faults and state, for the broker's runtime info.
    pub fn report(&self) -> FaultReport {
        let kinds = FileKind::ALL
            .iter()
            .map(|&kind| {
                let record = &self.shared.kinds[kind as usize];
                KindFaults {
                    kind,
                    errors: record.errors.load(Ordering::Acquire),
                    last: relock(&record.state).last.clone(),
                }
            })
            .collect();
        FaultReport {
            kinds,
            unwritable: self.unwritable(),
        }
    }

    /// While appends are refused, and at most once per `PROBE_INTERVAL`: writes and fsyncs a
    /// page in the directory of each kind that refuses them, and lets a kind whose probe
    /// succeeds take appends again. Runs on a store thread.
    pub fn probe_if_due(&self) {
        if !self.refuses_appends() {
            return;
        }
        {
            let mut last = relock(&self.shared.last_probe);
            if last.is_some_and(|at| at.elapsed() < PROBE_INTERVAL) {
                return;
            }
            *last = Some(Instant::now());
        }
        for kind in FileKind::ALL {
            if self.shared.refusing.load(Ordering::Acquire) & kind.bit() == 0 {
                continue;
            }
            let Some(dir) = &self.shared.probe_dirs[kind as usize] else {
                continue;
            };
            if let Err(error) = probe(dir) {
                tracing::debug!(kind = kind.name(), dir = %dir.display(), %error, "store probe write failed");
                continue;
            }
            let record = &self.shared.kinds[kind as usize];
            // Under the kind's lock, as `record` sets them: the bit and the state agree.
            let cleared = {
                let mut state = relock(&record.state);
                self.shared
                    .refusing
                    .fetch_and(!kind.bit(), Ordering::AcqRel);
                state.refusing.take()
            };
            if let Some((fault, _)) = cleared {
                let still_refused = self.refuses_appends();
                tracing::warn!(
                    kind = kind.name(),
                    dir = %dir.display(),
                    after = %fault,
                    still_refused,
                    "a probe write to the store's disk succeeded: appends are taken again \
                     unless another kind of file still fails"
                );
            }
        }
    }
}

/// Writes, fsyncs and removes `dir/PROBE_FILE_NAME`.
fn probe(dir: &Path) -> io::Result<()> {
    let path = dir.join(PROBE_FILE_NAME);
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .and_then(|mut file| {
            file.write_all(&[0u8; PROBE_BYTES])?;
            file.sync_data()
        });
    let removed = std::fs::remove_file(&path);
    written?;
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eio() -> io::Error {
        io::Error::from_raw_os_error(libc::EIO)
    }

    #[test]
    fn a_fault_on_a_message_file_refuses_appends_until_a_probe_succeeds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = StoreConfig::under(dir.path());
        std::fs::create_dir_all(&config.commitlog_dir).expect("dir");
        let faults = IoFaults::for_store(&config);
        assert!(!faults.refuses_appends());

        let segment = config.commitlog_dir.join("00000000000000000000");
        faults.record(FileKind::CommitLog, IoOp::Fsync, &segment, &eio());
        faults.record(FileKind::CommitLog, IoOp::Write, &segment, &eio());
        let report = faults.report();
        assert_eq!(report.total_errors(), 2);
        let commitlog = &report.kinds[FileKind::CommitLog as usize];
        assert_eq!(commitlog.errors, 2);
        assert_eq!(commitlog.last.as_ref().map(|f| f.op), Some("write"));
        let unwritable = report.unwritable.expect("refuses appends");
        assert_eq!(unwritable.faults.len(), 1);
        assert_eq!(
            unwritable.faults[0].1.op, "fsync",
            "the fault that began it"
        );
        assert!(unwritable.to_string().contains("CommitLog: fsync of"));

        faults.probe_if_due();
        assert!(
            !faults.refuses_appends(),
            "the probe wrote to a working disk"
        );
        assert!(!config.commitlog_dir.join(PROBE_FILE_NAME).exists());
        assert_eq!(faults.report().total_errors(), 2, "counts stay");
    }

    #[test]
    fn housekeeping_and_other_files_count_but_do_not_refuse_appends() {
        let faults = IoFaults::detached();
        let path = Path::new("/nowhere/00000000000000000000");
        faults.record(FileKind::CommitLog, IoOp::Preallocate, path, &eio());
        faults.record(FileKind::Index, IoOp::Remove, path, &eio());
        faults.record(FileKind::Config, IoOp::Write, path, &eio());
        faults.record(FileKind::Timer, IoOp::Fsync, path, &eio());
        assert!(!faults.refuses_appends());
        assert_eq!(faults.report().total_errors(), 4);
    }

    #[test]
    fn a_probe_that_fails_keeps_the_refusal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = StoreConfig::under(dir.path());
        config.index_dir = dir.path().join("missing");
        let faults = IoFaults::for_store(&config);
        faults.record(FileKind::Index, IoOp::Flush, &config.index_dir, &eio());
        faults.probe_if_due();
        assert!(faults.refuses_appends(), "no directory to probe in");
    }

    #[test]
    fn files_under_a_store_report_to_it_and_others_to_their_own_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = StoreConfig::under(&dir.path().join("store"));
        let faults = IoFaults::for_store(&config);
        let snapshot = dir.path().join("store").join("config").join("topics.json");
        IoFaults::for_path(&snapshot).record(FileKind::Config, IoOp::Rename, &snapshot, &eio());
        assert_eq!(faults.report().kinds[FileKind::Config as usize].errors, 1);
        let elsewhere = dir.path().join("elsewhere").join("topics.json");
        IoFaults::for_path(&elsewhere).record(FileKind::Config, IoOp::Rename, &elsewhere, &eio());
        assert_eq!(faults.report().kinds[FileKind::Config as usize].errors, 1);
        drop(faults);
        let after = IoFaults::for_path(&snapshot);
        let detached = DETACHED.get().expect("used above");
        assert!(
            Arc::ptr_eq(&after.shared, &detached.shared),
            "a closed store's files report to the record of files under no store"
        );
    }
}
