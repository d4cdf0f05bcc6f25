//! Atomic JSON snapshots for the broker's small config files (topics, consumer offsets): write a
//! temporary file, fsync it, keep the old file as `<name>.bak` and rename the new one in its
//! place, so a crash leaves the old or the new file whole, never a mix. Loading falls back to
//! `<name>.bak` when the file is missing or unreadable, as RocketMQ's config manager does, so a
//! file damaged on disk or by hand costs the changes since the snapshot before it, not all.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A config file written as whole snapshots, one writer at a time: the lock is held from taking
/// the snapshot to its rename, so two writers (two topics created at once, the periodic offset
/// write and shutdown's) never share the temporary file, and an older snapshot never lands
/// after a newer one.
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
    pub fn write(&self, take: impl FnOnce() -> Option<Vec<u8>>) -> std::io::Result<()> {
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        match take() {
            Some(bytes) => write_atomically(&self.path, &bytes),
            None => Ok(()),
        }
    }
}

/// The previous snapshot of `path`: `topics.json.bak` for `topics.json`, RocketMQ's name.
pub fn backup_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bak");
    PathBuf::from(name)
}

pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let temporary = path.with_extension("tmp");
    {
        let mut file = File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    // A crash between the two renames leaves only the backup, which loading then reads.
    match fs::rename(path, backup_path(path)) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    fs::rename(&temporary, path)?;
    if let Some(parent) = path.parent() {
        // The rename lives in the directory: sync it too, or a crash can forget the rename.
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Reads a snapshot; a missing file is `None`, anything else unreadable is an error.
fn read_if_present(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Loads the snapshot at `path` with `parse`: the file if it reads and parses, else its backup
/// (logged as an error: the changes after the backup are gone), else `T::default()` when
/// neither exists. Unreadable both ways is an error that names both files.
pub fn load<T: Default, E: std::fmt::Display>(
    path: &Path,
    parse: impl Fn(&[u8]) -> Result<T, E>,
) -> Result<T, String> {
    let read = |path: &Path| -> Result<Option<T>, String> {
        match read_if_present(path) {
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
                "config file unreadable: loaded its backup, changes since that snapshot are lost"
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
