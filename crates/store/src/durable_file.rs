//! Making file changes survive a power loss: a file's content is replaced whole or not at all,
//! and a new or renamed file's directory entry is fsynced, since the file's own fsync does not
//! cover it. Every layer's small files (checkpoint, damaged ranges, deleted topics) and new
//! files (segments, ConsumeQueue and index files) go through here.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// Replaces the file at `path` with `bytes` so that a crash leaves the old or the new content:
/// written to `<path>.tmp`, fsynced, renamed over, directory fsynced.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = Path::new(&tmp_name);
    {
        let mut file = File::create(tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(tmp, path)?;
    sync_parent_dir(path)
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
