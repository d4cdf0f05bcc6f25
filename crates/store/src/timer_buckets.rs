//! The timer wheel's bucket files: one file per minute of due times under `<store>/timer/`,
//! named `<minute>.bucket`, each a run of 16-byte entries `[due ms: i64 BE][timer-queue offset:
//! u64 BE]` in the order they were indexed. The timer queue in the CommitLog is the source of
//! truth; these only spare the wheel from holding every waiting message in memory. Appends are
//! made durable by `sync` before the wheel's checkpoint vouches for them; a crash can leave a
//! torn last entry, which reading leaves out and the next append cuts off.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::durable_file;
use crate::faults::{FileKind, IoFaults, IoOp};

/// One entry: its due time in ms and its offset in the timer queue.
pub type TimerEntry = (i64, u64);

const ENTRY_BYTES: usize = 16;
const _: () = assert!(ENTRY_BYTES == std::mem::size_of::<i64>() + std::mem::size_of::<u64>());
const SUFFIX: &str = ".bucket";

/// The bucket files of one store, and which were appended to since their last `sync`.
#[derive(Debug)]
pub struct TimerBuckets {
    dir: PathBuf,
    touched: BTreeSet<i64>,
    /// The first fsync that failed since opening. The appends it covered may be on pages a
    /// failed writeback dropped, and a later fsync that succeeds says nothing of them: every
    /// later `sync` fails too, so the wheel's checkpoint stays where it was and its next open
    /// indexes those entries again from the timer queue.
    sync_failed: Option<String>,
}

impl TimerBuckets {
    /// The buckets under `dir` (created if missing).
    pub fn open(dir: PathBuf) -> io::Result<TimerBuckets> {
        std::fs::create_dir_all(&dir)?;
        Ok(TimerBuckets {
            dir,
            touched: BTreeSet::new(),
            sync_failed: None,
        })
    }

    fn path(&self, bucket: i64) -> PathBuf {
        self.dir.join(format!("{bucket}{SUFFIX}"))
    }

    /// Every bucket that has a file, lowest first.
    pub fn list(&self) -> io::Result<Vec<i64>> {
        let mut buckets = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let bucket = entry?
                .file_name()
                .to_str()
                .and_then(|name| name.strip_suffix(SUFFIX))
                .and_then(|name| name.parse::<i64>().ok());
            buckets.extend(bucket);
        }
        buckets.sort_unstable();
        Ok(buckets)
    }

    /// When the bucket's file was last written.
    pub fn modified(&self, bucket: i64) -> io::Result<SystemTime> {
        std::fs::metadata(self.path(bucket))?.modified()
    }

    /// A bucket's entries (none for a missing file); a torn last entry is left out.
    pub fn read(&self, bucket: i64) -> io::Result<Vec<TimerEntry>> {
        let mut bytes = Vec::new();
        match File::open(self.path(bucket)) {
            Ok(mut file) => file.read_to_end(&mut bytes)?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        Ok(bytes.chunks_exact(ENTRY_BYTES).map(decode).collect())
    }

    /// Records a failed `op` on `path` in the faults of the store holding the bucket files.
    fn record(&self, op: IoOp, path: &Path, error: io::Error) -> io::Error {
        IoFaults::for_path(&self.dir).record(FileKind::Timer, op, path, &error);
        error
    }

    /// Adds entries at the end of a bucket (durable after the next `sync`).
    pub fn append(&mut self, bucket: i64, entries: &[TimerEntry]) -> io::Result<()> {
        let path = self.path(bucket);
        let appended = (|| {
            let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
            // A torn entry from a crash would shift every later one: cut back to whole entries.
            let len = file.metadata()?.len();
            if len % ENTRY_BYTES as u64 != 0 {
                file.set_len(len - len % ENTRY_BYTES as u64)?;
            }
            self.touched.insert(bucket);
            file.write_all(&encode(entries))
        })();
        appended.map_err(|e| self.record(IoOp::Write, &path, e))
    }

    /// Replaces a bucket's entries, durably (a crash leaves the old or the new ones).
    pub fn replace(&mut self, bucket: i64, entries: &[TimerEntry]) -> io::Result<()> {
        let path = self.path(bucket);
        durable_file::replace_file(&path, &encode(entries))
            .map_err(|e| self.record(IoOp::Replace, &path, e))?;
        self.touched.remove(&bucket);
        Ok(())
    }

    /// fsyncs every bucket appended to since the last call, and the directory of new ones.
    /// Once one fails, every later call fails (see `sync_failed`).
    pub fn sync(&mut self) -> io::Result<()> {
        if let Some(reason) = &self.sync_failed {
            return Err(io::Error::other(format!(
                "an fsync of the timer buckets failed since they were opened ({reason}): the \
                 entries it covered are indexed again from the timer queue after a restart"
            )));
        }
        let synced = self.sync_touched();
        if let Err(e) = &synced {
            self.sync_failed = Some(e.to_string());
        }
        synced
    }

    fn sync_touched(&mut self) -> io::Result<()> {
        let synced_any = !self.touched.is_empty();
        while let Some(&bucket) = self.touched.first() {
            let path = self.path(bucket);
            match File::open(&path) {
                Ok(file) => file
                    .sync_all()
                    .map_err(|e| self.record(IoOp::Fsync, &path, e))?,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(self.record(IoOp::Fsync, &path, error)),
            }
            self.touched.remove(&bucket);
        }
        if synced_any {
            File::open(&self.dir)
                .and_then(|dir| dir.sync_all())
                .map_err(|e| self.record(IoOp::Fsync, &self.dir, e))?;
        }
        Ok(())
    }

    /// Removes every bucket below `bucket` (wholly delivered).
    pub fn remove_below(&mut self, bucket: i64) -> io::Result<()> {
        for old in self.list()?.into_iter().take_while(|b| *b < bucket) {
            let path = self.path(old);
            std::fs::remove_file(&path).map_err(|e| self.record(IoOp::Remove, &path, e))?;
            self.touched.remove(&old);
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn decode(entry: &[u8]) -> TimerEntry {
    let due = i64::from_be_bytes(entry[..8].try_into().expect("8 bytes"));
    let offset = u64::from_be_bytes(entry[8..].try_into().expect("8 bytes"));
    (due, offset)
}

fn encode(entries: &[TimerEntry]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(entries.len() * ENTRY_BYTES);
    for (due, offset) in entries {
        bytes.extend_from_slice(&due.to_be_bytes());
        bytes.extend_from_slice(&offset.to_be_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_bucket_entry_is_cut_before_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let mut buckets = TimerBuckets::open(dir.path().join("timer")).unwrap();
        buckets.append(7, &[(1, 2)]).unwrap();
        let mut file = OpenOptions::new()
            .append(true)
            .open(buckets.path(7))
            .unwrap();
        file.write_all(&[9, 9, 9]).unwrap();
        drop(file);
        assert_eq!(buckets.read(7).unwrap(), [(1, 2)]);
        buckets.append(7, &[(3, 4)]).unwrap();
        assert_eq!(buckets.read(7).unwrap(), [(1, 2), (3, 4)]);
    }

    #[test]
    fn buckets_are_listed_in_order_and_removed_below_a_minute() {
        let dir = tempfile::tempdir().unwrap();
        let mut buckets = TimerBuckets::open(dir.path().to_path_buf()).unwrap();
        for bucket in [12, -3, 5] {
            buckets.append(bucket, &[(bucket * 60_000, 1)]).unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), b"not a bucket").unwrap();
        buckets.sync().unwrap();
        assert_eq!(buckets.list().unwrap(), [-3, 5, 12]);
        buckets.replace(5, &[]).unwrap();
        assert_eq!(buckets.read(5).unwrap(), []);
        buckets.remove_below(12).unwrap();
        assert_eq!(buckets.list().unwrap(), [12]);
        assert_eq!(buckets.read(-3).unwrap(), []);
    }
}
