//! Atomic JSON snapshots for the broker's small config files (topics, consumer offsets): write a
//! temporary file, fsync it, rename it over the old one, so a crash leaves the old or the new
//! file whole, never a mix.

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
    fs::rename(&temporary, path)?;
    if let Some(parent) = path.parent() {
        // The rename lives in the directory: sync it too, or a crash can forget the rename.
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Reads a snapshot; a missing file is `None`, anything else unreadable is an error.
pub fn read_if_present(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}
