//! A CommitLog fsync that fails: ext4 on a loop device whose backing file lives on a tmpfs that
//! is full, so writes reach the page cache but their writeback fails. Linux drops the failed
//! pages' dirty state and may report the next fsync as a success; the checkpoint must not
//! pass the range whose fsync failed, or recovery would never rescan it.
//!
//! Needs root (mount, losetup); skipped, with a message, where it cannot set that up.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use quiver_store::{FlushMode, FlushStatus, Store, StoreConfig};

/// tmpfs → sparse image → loop device → ext4, undone in reverse when dropped.
struct ThinDisk {
    backing: PathBuf,
    mount: PathBuf,
    device: String,
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

impl ThinDisk {
    fn set_up(dir: &Path) -> Option<ThinDisk> {
        let backing = dir.join("backing");
        let mount = dir.join("fs");
        std::fs::create_dir_all(&backing).ok()?;
        std::fs::create_dir_all(&mount).ok()?;
        let backing_str = backing.to_str()?;
        run(
            "mount",
            &["-t", "tmpfs", "-o", "size=48m", "tmpfs", backing_str],
        )?;
        let image = backing.join("disk.img");
        let image_str = image.to_str()?.to_string();
        let mut disk = ThinDisk {
            backing,
            mount,
            device: String::new(),
        };
        std::fs::File::create(&image)
            .ok()?
            .set_len(256 << 20)
            .ok()?;
        disk.device = run("losetup", &["-f", "--show", &image_str])?;
        run(
            "mkfs.ext4",
            &["-q", "-F", "-O", "^has_journal", &disk.device],
        )?;
        run("mount", &[&disk.device, disk.mount.to_str()?])?;
        Some(disk)
    }

    /// Fills the backing tmpfs but for `left` bytes.
    fn fill_backing(&self, left: u64) {
        use std::io::Write;
        let path = self.backing.join("filler");
        let mut file = std::fs::File::create(&path).expect("filler");
        let chunk = vec![1u8; 1 << 20];
        let mut written = 0u64;
        while file.write_all(&chunk).is_ok() {
            written += chunk.len() as u64;
        }
        file.set_len(written.saturating_sub(left))
            .expect("shrink filler");
    }

    fn free_backing(&self) {
        std::fs::remove_file(self.backing.join("filler")).expect("remove filler");
    }
}

impl Drop for ThinDisk {
    fn drop(&mut self) {
        if let Some(mount) = self.mount.to_str() {
            let _ = run("umount", &["-l", mount]);
        }
        if !self.device.is_empty() {
            let _ = run("losetup", &["-d", &self.device]);
        }
        if let Some(backing) = self.backing.to_str() {
            let _ = run("umount", &["-l", backing]);
        }
    }
}

fn config(root: &Path) -> StoreConfig {
    let mut config = StoreConfig::under(root);
    config.segment_bytes = 4 << 20;
    config.flush = FlushMode::SYNC_DEFAULT;
    config
}

fn checkpoint_flushed_position(root: &Path) -> u64 {
    // Checkpoint layout: three u64s, big-endian; the second is the CommitLog's flushed position.
    let bytes = std::fs::read(root.join("checkpoint")).expect("checkpoint");
    u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes"))
}

#[test]
fn the_checkpoint_never_passes_a_failed_fsync() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(disk) = ThinDisk::set_up(dir.path()) else {
        eprintln!("skipped: cannot mount a tmpfs-backed loop device here (needs root)");
        return;
    };
    let root = disk.mount.join("store");
    let (store, _) = Store::open(config(&root)).expect("open");
    let body = vec![b'q'; 4000];
    let send = |i: usize| append(&store, vec![simple("T", (i % 4) as u32, &body)]).expect("append");
    for i in 0..100 {
        assert_eq!(send(i).flush, FlushStatus::Ok);
    }
    // Let the zero-filler get ahead while writeback still works.
    std::thread::sleep(std::time::Duration::from_millis(300));
    disk.fill_backing(256 << 10);

    let mut failed_at = None;
    for i in 100..20_000 {
        let outcome = send(i);
        if outcome.flush == FlushStatus::TimedOut {
            failed_at = Some(outcome.entries[0].position);
            break;
        }
    }
    let failed_at = failed_at.expect("an fsync failed once the backing store was full");

    // Space returns: later fsyncs succeed, though the failed pages may never reach the disk.
    disk.free_backing();
    let mut synced_again = false;
    for i in 0..200 {
        if send(i).flush == FlushStatus::Ok {
            synced_again = true;
        }
    }
    assert!(synced_again, "fsyncs succeed once space returns");
    store.close().expect("close");
    drop(store);

    let checkpoint = checkpoint_flushed_position(&root);
    assert!(
        checkpoint <= failed_at,
        "checkpoint at {checkpoint} passed the fsync that failed at {failed_at}"
    );
}
