//! The epoch file of RocketMQ 5's controller mode (`epochFileCheckpoint`): which controller
//! epoch wrote which part of the CommitLog. A broker appends an entry when it becomes master
//! (its epoch, starting at its log's end) and a slave when its master's stream enters a new
//! epoch; a slave that reconnects compares its entries with its master's to find the last
//! position both logs agree on (`consistent_point`) and cuts its log there.
//!
//! Format, text kept as RocketMQ writes it so that operators' tools read both:
//!
//! ```text
//! 2            number of entries
//! 327520601    CRC32 of the entry lines, each with its '\n', masked with 0x7FFFFFFF
//! 1-0          <epoch>-<startOffset>, one line per entry, epochs ascending
//! 2-1024
//! ```
//!
//! A stored CRC of 0 is not checked (RocketMQ's convention). An entry's end is the next entry's
//! start, and the last entry's is the log's end: ends are never stored.
//!
//! Unlike RocketMQ, every change is written crash-safely (temporary file, fsync, rename, directory
//! fsync, the content before kept as `.bak`), and a list emptied by a truncation is written as
//! such: RocketMQ skips writing an empty list, so its old entries come back at the next start.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::durable_file::{self, backup_path};
use crate::faults::{FileKind, IoFaults, IoOp};

/// The file's name under the store root, RocketMQ's.
pub const EPOCH_FILE_NAME: &str = "epochFileCheckpoint";
/// A larger file is refused unread. 100,000 entries of the longest form
/// (`-2147483648-9223372036854775807\n`, 32 bytes) take 3.2 MB; real files hold one entry per
/// election, a few hundred bytes in a cluster's lifetime, so 1 MiB is far above any honest one.
pub const EPOCH_FILE_BYTES_MAX: u64 = 1 << 20;
/// More entries are refused: the same bound a master's handshake answer has.
pub const EPOCH_ENTRIES_MAX: usize = 100_000;

/// One epoch: the controller epoch and the CommitLog position where its records start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: u64,
}

/// Entries in ascending epoch order with non-decreasing start offsets (a new epoch may start
/// where the last one did, when its master wrote nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochEntries {
    entries: Vec<EpochEntry>,
}

/// Why the text of an epoch file is not a list of entries.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EpochDecodeError {
    #[error("not UTF-8 text")]
    NotText,
    #[error("the {0} line is missing")]
    MissingLine(&'static str),
    #[error("line {line}: {text:?} is not a number")]
    BadNumber { line: usize, text: String },
    #[error("line {line}: {text:?} is not <epoch>-<startOffset>")]
    BadEntry { line: usize, text: String },
    #[error("{count} entries; at most {EPOCH_ENTRIES_MAX} are read")]
    TooManyEntries { count: u64 },
    #[error("the count line says {stated} entries, the file holds {found}")]
    CountMismatch { stated: u64, found: u64 },
    #[error("stored CRC {stored} does not match the entries' {computed}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("line {line}: epoch {epoch} at {start_offset} does not follow the entry before")]
    OutOfOrder {
        line: usize,
        epoch: i32,
        start_offset: u64,
    },
}

/// Why an epoch file could not be opened or changed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EpochFileError {
    /// Neither the file nor its backup could be read (each one's reason is in the message).
    #[error("epoch file unreadable: {0}")]
    Unreadable(String),
    #[error("epoch {epoch} is not after the last epoch {last_epoch}")]
    NotNewer { epoch: i32, last_epoch: i32 },
    #[error("epoch {epoch} would start at {start_offset}, below the last epoch's start {last_start_offset}")]
    StartsBelowLast {
        epoch: i32,
        start_offset: u64,
        last_start_offset: u64,
    },
    #[error("start offset {start_offset} is past the largest CommitLog position")]
    OffsetTooLarge { start_offset: u64 },
    #[error("writing {path}: {message}")]
    Write { path: String, message: String },
}

impl EpochEntries {
    /// The entries, checked for order.
    pub fn new(entries: Vec<EpochEntry>) -> Result<EpochEntries, EpochDecodeError> {
        if entries.len() > EPOCH_ENTRIES_MAX {
            return Err(EpochDecodeError::TooManyEntries {
                count: entries.len() as u64,
            });
        }
        for (i, pair) in entries.windows(2).enumerate() {
            if !follows(pair[0], pair[1]) {
                return Err(EpochDecodeError::OutOfOrder {
                    line: i + 4,
                    epoch: pair[1].epoch,
                    start_offset: pair[1].start_offset,
                });
            }
        }
        Ok(EpochEntries { entries })
    }

    pub fn as_slice(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn last(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Where the entry at `index` ends: the next entry's start, or `log_end` for the last
    /// (never below its own start).
    pub fn end_offset(&self, index: usize, log_end: u64) -> u64 {
        end_offset(&self.entries, index, log_end)
    }

    /// The entry whose range `[start, end)` holds `offset`, with its end, in a log ending at
    /// `log_end`; an offset equal to `log_end` belongs to the last entry (where a slave that
    /// holds everything goes on). None below the first start or past the log's end.
    pub fn containing(&self, offset: u64, log_end: u64) -> Option<(EpochEntry, u64)> {
        if offset > log_end {
            return None;
        }
        let index = self
            .entries
            .partition_point(|e| e.start_offset <= offset)
            .checked_sub(1)?;
        // Epochs that wrote nothing share their start with the next one: take the last.
        let end = self.end_offset(index, log_end);
        Some((self.entries[index], end))
    }

    /// The file's text.
    pub fn encode(&self) -> Vec<u8> {
        let lines = entry_lines(&self.entries);
        let crc = masked_crc(lines.as_bytes());
        format!("{}\n{crc}\n{lines}", self.entries.len()).into_bytes()
    }

    /// Parses the file's text; every byte is checked, nothing panics.
    pub fn decode(bytes: &[u8]) -> Result<EpochEntries, EpochDecodeError> {
        let text = std::str::from_utf8(bytes).map_err(|_| EpochDecodeError::NotText)?;
        let mut lines = text.lines();
        let count_line = lines.next().ok_or(EpochDecodeError::MissingLine("count"))?;
        let count: u64 = number(1, count_line)?;
        if count > EPOCH_ENTRIES_MAX as u64 {
            return Err(EpochDecodeError::TooManyEntries { count });
        }
        let crc_line = lines.next().ok_or(EpochDecodeError::MissingLine("CRC"))?;
        let stored: u32 = number(2, crc_line)?;
        let mut entries = Vec::with_capacity(count as usize);
        for (i, line) in lines.enumerate() {
            if entries.len() as u64 == count {
                return Err(EpochDecodeError::CountMismatch {
                    stated: count,
                    found: count + 1,
                });
            }
            entries.push(parse_entry(i + 3, line)?);
        }
        if entries.len() as u64 != count {
            return Err(EpochDecodeError::CountMismatch {
                stated: count,
                found: entries.len() as u64,
            });
        }
        let computed = masked_crc(entry_lines(&entries).as_bytes());
        if stored != 0 && stored != computed {
            return Err(EpochDecodeError::CrcMismatch { stored, computed });
        }
        EpochEntries::new(entries)
    }
}

/// Whether `next` may follow `last`: a newer epoch, starting no earlier.
fn follows(last: EpochEntry, next: EpochEntry) -> bool {
    next.epoch > last.epoch && next.start_offset >= last.start_offset
}

fn end_offset(entries: &[EpochEntry], index: usize, log_end: u64) -> u64 {
    match entries.get(index + 1) {
        Some(next) => next.start_offset,
        None => log_end.max(entries[index].start_offset),
    }
}

fn entry_lines(entries: &[EpochEntry]) -> String {
    let mut lines = String::with_capacity(entries.len() * 16);
    for e in entries {
        let _ = writeln!(lines, "{}-{}", e.epoch, e.start_offset);
    }
    lines
}

/// RocketMQ's checksum: `java.util.zip.CRC32` masked to a non-negative Java int.
fn masked_crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes) & 0x7FFF_FFFF
}

fn number<T: std::str::FromStr>(line: usize, text: &str) -> Result<T, EpochDecodeError> {
    text.parse().map_err(|_| EpochDecodeError::BadNumber {
        line,
        text: text.chars().take(64).collect(),
    })
}

/// `<epoch>-<startOffset>`; a negative epoch has a second `-` and is refused, as RocketMQ skips
/// a line that does not split in two.
fn parse_entry(line: usize, text: &str) -> Result<EpochEntry, EpochDecodeError> {
    let bad = || EpochDecodeError::BadEntry {
        line,
        text: text.chars().take(64).collect(),
    };
    let mut parts = text.split('-');
    let (Some(epoch), Some(start), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let epoch: i32 = epoch.parse().map_err(|_| bad())?;
    let start_offset: u64 = start.parse().map_err(|_| bad())?;
    if start_offset > i64::MAX as u64 {
        return Err(bad());
    }
    Ok(EpochEntry {
        epoch,
        start_offset,
    })
}

/// The last position a slave's log and its master's agree on (RocketMQ's
/// `findConsistentPoint`): walking the slave's epochs from the newest, the first one the master
/// has too, with the same start, is shared up to the nearer of its two ends. None when no
/// epoch is shared that way: the logs have nothing in common an epoch can vouch for. A slave
/// with no entries has nothing to compare (RocketMQ then keeps its log): the caller decides.
pub fn consistent_point(
    local: &[EpochEntry],
    local_end: u64,
    master: &[EpochEntry],
    master_end: u64,
) -> Option<u64> {
    for (i, entry) in local.iter().enumerate().rev() {
        let Ok(m) = master.binary_search_by_key(&entry.epoch, |e| e.epoch) else {
            continue;
        };
        if master[m].start_offset != entry.start_offset {
            continue;
        }
        let local_to = end_offset(local, i, local_end);
        let master_to = end_offset(master, m, master_end);
        return Some(local_to.min(master_to));
    }
    None
}

/// The epoch file under a store root, and its entries as last written. Changed through
/// `&mut self`: one owner writes it.
#[derive(Debug)]
pub struct EpochFile {
    path: PathBuf,
    entries: EpochEntries,
}

impl EpochFile {
    /// Opens `<root>/epochFileCheckpoint`: empty when neither it nor its `.bak` exists, its
    /// `.bak` when it is missing, too long or fails its count, CRC or order checks (logged), an
    /// error when both fail.
    pub fn open(root: &Path) -> Result<EpochFile, EpochFileError> {
        let path = root.join(EPOCH_FILE_NAME);
        let entries = durable_file::load_bounded(&path, EPOCH_FILE_BYTES_MAX, EpochEntries::decode)
            .map_err(EpochFileError::Unreadable)?;
        Ok(EpochFile { path, entries })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn entries(&self) -> &EpochEntries {
        &self.entries
    }

    pub fn last(&self) -> Option<EpochEntry> {
        self.entries.last()
    }

    /// Adds `epoch` starting at `start_offset`, durably. Refused unless the epoch is newer
    /// than the last and starts no earlier (and past `EPOCH_ENTRIES_MAX` entries).
    pub fn append(&mut self, epoch: i32, start_offset: u64) -> Result<(), EpochFileError> {
        if start_offset > i64::MAX as u64 {
            return Err(EpochFileError::OffsetTooLarge { start_offset });
        }
        let next = EpochEntry {
            epoch,
            start_offset,
        };
        if let Some(last) = self.entries.last() {
            if epoch <= last.epoch {
                return Err(EpochFileError::NotNewer {
                    epoch,
                    last_epoch: last.epoch,
                });
            }
            if !follows(last, next) {
                return Err(EpochFileError::StartsBelowLast {
                    epoch,
                    start_offset,
                    last_start_offset: last.start_offset,
                });
            }
        }
        let mut entries = self.entries.entries.clone();
        entries.push(next);
        let entries = EpochEntries::new(entries).map_err(|e| EpochFileError::Write {
            path: self.path.display().to_string(),
            message: e.to_string(),
        })?;
        self.replace(entries)
    }

    /// Drops the entries that start at or past `offset` (a log cut there), durably, even when
    /// none is left. Returns how many it dropped; writes nothing when none.
    pub fn truncate_from(&mut self, offset: u64) -> Result<usize, EpochFileError> {
        self.keep_while(|e| e.start_offset < offset)
    }

    /// Drops the entries of `epoch` and newer, durably (a broker becoming master in `epoch`
    /// forgets what it heard of it and later ones before adding its own). Returns how many.
    pub fn truncate_from_epoch(&mut self, epoch: i32) -> Result<usize, EpochFileError> {
        self.keep_while(|e| e.epoch < epoch)
    }

    /// Keeps the leading entries for which `keep` holds (both callers' conditions hold for a
    /// prefix, since epochs and starts ascend).
    fn keep_while(&mut self, keep: impl Fn(&EpochEntry) -> bool) -> Result<usize, EpochFileError> {
        let kept = self.entries.entries.partition_point(keep);
        let dropped = self.entries.len() - kept;
        if dropped == 0 {
            return Ok(0);
        }
        let entries = EpochEntries {
            entries: self.entries.entries[..kept].to_vec(),
        };
        self.replace(entries)?;
        Ok(dropped)
    }

    /// Writes `entries` and, once that is durable, holds them in memory.
    fn replace(&mut self, entries: EpochEntries) -> Result<(), EpochFileError> {
        durable_file::replace_keeping_backup(&self.path, &entries.encode()).map_err(|e| {
            IoFaults::for_path(&self.path).record(
                FileKind::Metadata,
                IoOp::Replace,
                &self.path,
                &e,
            );
            EpochFileError::Write {
                path: self.path.display().to_string(),
                message: e.to_string(),
            }
        })?;
        self.entries = entries;
        Ok(())
    }

    /// The backup's path (`epochFileCheckpoint.bak`).
    pub fn backup_path(&self) -> PathBuf {
        backup_path(&self.path)
    }
}

#[cfg(test)]
mod tests;
