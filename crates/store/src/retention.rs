//! Retention: deleting the oldest CommitLog segments, and the ConsumeQueue and index files
//! that only point into them.
//!
//! Only a prefix of segments goes (the segment chain must stay contiguous for `open`), and
//! never the last one, which the appender writes. Order matters for concurrent readers: the
//! minimum position and queue offsets move up first, so that new reads answer "offset too
//! small" instead of finding entries whose bytes are gone; files are unlinked last (a reader
//! already holding a handle keeps reading the unlinked file for up to a second, after which
//! the segment's blocks are freed a step at a time on the retention thread, so that freeing
//! 1 GiB never stalls the writer at once: see `Segments::delete`).

use std::io;
use std::path::Path;
use std::time::UNIX_EPOCH;

use crate::faults::{FileKind, IoOp};
use crate::index::Index;
use crate::log::Log;
use crate::queues::Queues;

/// What one retention pass removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    pub segments_deleted: usize,
    pub consume_queue_files_deleted: usize,
    pub index_files_deleted: usize,
    /// The CommitLog's first position after the pass.
    pub min_position: u64,
    /// ConsumeQueue or index files that could not be trimmed (damaged, say). They do not
    /// stop the pass: reads skip entries below `min_position`, and the next pass tries again.
    pub problems: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("retention failed on {path}: {message}")]
pub struct RetentionError {
    pub path: String,
    pub message: String,
}

fn retention_error(path: &Path, e: &io::Error) -> RetentionError {
    RetentionError {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Last modification of a file in ms since the epoch.
fn modified_ms(path: &Path) -> io::Result<i64> {
    let modified = std::fs::metadata(path)?.modified()?;
    Ok(modified
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64))
}

/// Segments one round deletes at most (RocketMQ's `deleteFileBatchMax`): a disk past the
/// forced-cleaning mark, full of other data perhaps, loses the oldest few each round (every
/// 10 s), not every sealed segment at once.
pub const SEGMENTS_PER_ROUND_MAX: usize = 10;

/// Deletes sealed segments last written more than `reserve_ms` before `now_ms` (any sealed
/// segment when `at_once`), oldest first, stopping at the first one that is kept and after
/// `SEGMENTS_PER_ROUND_MAX`.
pub fn delete_expired(
    log: &Log,
    queues: &Queues,
    index: &Index,
    now_ms: i64,
    reserve_ms: u64,
    at_once: bool,
) -> Result<RetentionReport, RetentionError> {
    let bases = log.bases();
    let mut doomed = Vec::new();
    // Only segments wholly below the published written position are sealed: the appender
    // lists the next segment before the group that rolled into it is published, and rolls
    // back to the previous one if that group fails (a full disk, exactly when retention runs
    // at once).
    let written = log.written();
    let sealed = bases
        .iter()
        .take(bases.len().saturating_sub(1))
        .filter(|&&base| base + log.segment_bytes() <= written);
    for &base in sealed.take(SEGMENTS_PER_ROUND_MAX) {
        let path = log.segment_path(base);
        let expired = at_once
            || modified_ms(&path)
                .map_err(|e| retention_error(&path, &e))?
                .saturating_add(reserve_ms.min(i64::MAX as u64) as i64)
                <= now_ms;
        if !expired {
            break;
        }
        doomed.push(base);
    }
    let mut report = RetentionReport {
        min_position: log.min_position(),
        ..RetentionReport::default()
    };
    let Some(&last_doomed) = doomed.last() else {
        return Ok(report);
    };
    let min_position = last_doomed + log.segment_bytes();
    log.raise_min_position(min_position);
    report.min_position = min_position;
    for queue in queues.all() {
        match queue.drop_below(min_position) {
            Ok(deleted) => report.consume_queue_files_deleted += deleted,
            Err(e) => {
                let path = queue.path_for(0);
                log.faults()
                    .record(FileKind::ConsumeQueue, IoOp::Remove, &path, &e);
                report.problems.push(retention_error(&path, &e).to_string())
            }
        }
    }
    match index.delete_below(min_position) {
        Ok(deleted) => report.index_files_deleted = deleted,
        Err(e) => report
            .problems
            .push(retention_error(index.dir(), &e).to_string()),
    }
    for base in doomed {
        log.remove_segment(base)
            .map_err(|e| retention_error(&log.segment_path(base), &e))?;
        report.segments_deleted += 1;
    }
    Ok(report)
}

/// Total and available bytes of the filesystem holding `path` (statvfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    pub total_bytes: u64,
    pub available_bytes: u64,
}

impl DiskSpace {
    /// (total - available) / total in percent: space only root may use counts as used.
    pub fn used_percent(&self) -> u32 {
        if self.total_bytes == 0 {
            return 0;
        }
        let used = self.total_bytes.saturating_sub(self.available_bytes);
        (used.saturating_mul(100) / self.total_bytes) as u32
    }
}

pub fn disk_space(path: &Path) -> io::Result<DiskSpace> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call, and `stat`
    // points to writable memory of the size statvfs(3) fills; it is read only on success.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialized the whole struct.
    let stat = unsafe { stat.assume_init() };
    // The field types differ between targets (u32 or u64); widening is what matters.
    #[allow(clippy::useless_conversion)]
    let (fragment, blocks, available) = (
        u64::from(stat.f_frsize),
        u64::from(stat.f_blocks),
        u64::from(stat.f_bavail),
    );
    Ok(DiskSpace {
        total_bytes: blocks.saturating_mul(fragment),
        available_bytes: available.saturating_mul(fragment),
    })
}
