//! Making file changes survive a power loss, and the one writer of every small file Quiver keeps:
//! a file's content is replaced whole or not at all, and a new or renamed file's directory entry
//! is fsynced, since the file's own fsync does not cover it. The store's own small files
//! (checkpoint, damaged ranges, deleted topics) and new files (segments, ConsumeQueue and index
//! files) go through here, and so do the broker's JSON snapshots (topics, groups, offsets, pop
//! and timer progress) through `SnapshotFile`, which also keeps the snapshot before as
//! `<name>.bak`, as RocketMQ's config manager does: a file damaged on disk or by hand then costs
//! the changes since the snapshot before it, not all.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::faults::{FileKind, IoFaults, IoOp};

/// Replaces the file at `path` with `bytes` so that a crash leaves the old or the new content:
/// written to `<path>.tmp`, fsynced, renamed over, directory fsynced.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_temporary(path, bytes).and_then(|tmp| {
        std::fs::rename(&tmp, path)?;
        sync_parent_dir(path)
    })
}

/// `replace_file`, except that the content replaced is kept as `<path>.bak` (see `load`).
/// A crash between the two renames leaves only the backup, which `load` then reads.
pub fn replace_keeping_backup(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = write_temporary(path, bytes)?;
    match std::fs::rename(path, backup_path(path)) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    std::fs::rename(&tmp, path)?;
    sync_parent_dir(path)
}

/// `<path>.tmp`, written and fsynced.
fn write_temporary(path: &Path, bytes: &[u8]) -> io::Result<PathBuf> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(tmp)
}

/// `replace_file`, except that empty content removes the file (durably) instead.
pub fn replace_or_remove_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if !bytes.is_empty() {
        return replace_file(path, bytes);
    }
    match std::fs::remove_file(path) {
        Ok(()) => sync_parent_dir(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes a rename or a new file durable: the directory entry lives in the parent.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

/// The previous snapshot of `path`: `topics.json.bak` for `topics.json`, RocketMQ's name.
pub fn backup_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bak");
    PathBuf::from(name)
}

/// A file written as whole snapshots (`replace_keeping_backup`), one writer at a time: the lock
/// is held from taking the snapshot to its rename, so two writers (two topics created at once,
/// the periodic offset write and shutdown's) never share the temporary file, and an older
/// snapshot never lands after a newer one.
#[derive(Debug)]
pub struct SnapshotFile {
    path: PathBuf,
    writing: Mutex<()>,
}

impl SnapshotFile {
    pub fn new(path: PathBuf) -> SnapshotFile {
        SnapshotFile {
            path,
            writing: Mutex::new(()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the snapshot `take` returns, taken under the lock; nothing when it returns None.
    /// A failure is also recorded in the faults of the store holding the file.
    pub fn write(&self, take: impl FnOnce() -> Option<Vec<u8>>) -> io::Result<()> {
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        match take() {
            Some(bytes) => replace_keeping_backup(&self.path, &bytes).inspect_err(|e| {
                IoFaults::for_path(&self.path).record(
                    FileKind::Config,
                    IoOp::Replace,
                    &self.path,
                    e,
                )
            }),
            None => Ok(()),
        }
    }

    /// Whether the file or its backup is there: a snapshot was written before.
    pub fn was_written(&self) -> bool {
        self.path.exists() || backup_path(&self.path).exists()
    }

    /// When the file was last replaced (None when it is missing or the time is unreadable).
    pub fn modified(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()
    }

    /// Loads the snapshot with `parse`: see `load`.
    pub fn load<T: Default, E: std::fmt::Display>(
        &self,
        parse: impl Fn(&[u8]) -> Result<T, E>,
    ) -> Result<T, String> {
        load(&self.path, parse)
    }
}

/// Reads a snapshot; a missing file is `None`, anything else unreadable is an error, and so is
/// a file longer than `bytes_max` (read no further than one byte past it).
fn read_if_present(path: &Path, bytes_max: u64) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let mut bytes = Vec::new();
    file.take(bytes_max.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > bytes_max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("longer than {bytes_max} bytes"),
        ));
    }
    Ok(Some(bytes))
}

/// Loads the snapshot at `path` with `parse`: the file if it reads and parses, else its backup
/// (logged as an error: the changes after the backup are gone), else `T::default()` when
/// neither exists. Unreadable both ways is an error that names both files.
pub fn load<T: Default, E: std::fmt::Display>(
    path: &Path,
    parse: impl Fn(&[u8]) -> Result<T, E>,
) -> Result<T, String> {
    load_bounded(path, u64::MAX, parse)
}

/// `load`, refusing a file (or backup) longer than `bytes_max` as unreadable: for files whose
/// size has a known bound, so that a damaged or hostile one is never read whole into memory.
pub fn load_bounded<T: Default, E: std::fmt::Display>(
    path: &Path,
    bytes_max: u64,
    parse: impl Fn(&[u8]) -> Result<T, E>,
) -> Result<T, String> {
    let read = |path: &Path| -> Result<Option<T>, String> {
        match read_if_present(path, bytes_max) {
            Ok(Some(bytes)) if bytes.iter().all(u8::is_ascii_whitespace) => {
                Err("it is empty".to_string())
            }
            Ok(Some(bytes)) => parse(&bytes).map(Some).map_err(|e| e.to_string()),
            Ok(None) => Ok(None),
            Err(error) => Err(error.to_string()),
        }
    };
    let problem = match read(path) {
        Ok(Some(value)) => return Ok(value),
        Ok(None) => None,
        Err(message) => Some(message),
    };
    let backup = backup_path(path);
    match (problem, read(&backup)) {
        (None, Ok(None)) => Ok(T::default()),
        (problem, Ok(Some(value))) => {
            let problem = problem.unwrap_or_else(|| "it is missing".to_string());
            tracing::error!(
                file = %path.display(),
                backup = %backup.display(),
                %problem,
                "file unreadable: loaded its backup, changes since that snapshot are lost"
            );
            Ok(value)
        }
        (Some(problem), Ok(None)) => Err(format!("{}: {problem}", path.display())),
        (problem, Err(backup_problem)) => Err(format!(
            "{}: {}; its backup {}: {backup_problem}",
            path.display(),
            problem.unwrap_or_else(|| "it is missing".to_string()),
            backup.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(bytes: &[u8]) -> Result<String, std::str::Utf8Error> {
        std::str::from_utf8(bytes).map(str::to_string)
    }

    #[test]
    fn a_snapshot_keeps_the_one_before_as_its_backup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = SnapshotFile::new(dir.path().join("config").join("state.json"));
        assert!(!file.was_written());
        file.write(|| Some(b"one".to_vec())).expect("first");
        file.write(|| Some(b"two".to_vec())).expect("second");
        assert!(file.was_written());
        assert_eq!(file.load(parse_text).expect("load"), "two");
        assert_eq!(
            std::fs::read(backup_path(file.path())).expect("backup"),
            b"one"
        );
        assert!(!dir.path().join("config").join("state.json.tmp").exists());
    }

    #[test]
    fn a_damaged_snapshot_loads_its_backup_and_both_damaged_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let file = SnapshotFile::new(path.clone());
        file.write(|| Some(b"one".to_vec())).expect("first");
        file.write(|| Some(b"two".to_vec())).expect("second");
        std::fs::write(&path, b"  \n").expect("empty it");
        assert_eq!(file.load(parse_text).expect("backup"), "one");
        std::fs::write(&path, [0xff]).expect("damage");
        std::fs::write(backup_path(&path), [0xfe]).expect("damage backup");
        let error = file.load(parse_text).expect_err("both damaged");
        assert!(
            error.contains("state.json") && error.contains("state.json.bak"),
            "{error}"
        );
        std::fs::remove_file(&path).expect("remove");
        std::fs::remove_file(backup_path(&path)).expect("remove backup");
        assert_eq!(file.load(parse_text).expect("neither"), "");
    }
}
