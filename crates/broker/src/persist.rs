//! Atomic JSON snapshots for the broker's small config files (topics, consumer offsets): write a
//! temporary file, fsync it, rename it over the old one, so a crash leaves the old or the new
//! file whole, never a mix.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

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
