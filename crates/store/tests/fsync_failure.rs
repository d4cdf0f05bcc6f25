//! A full disk under the CommitLog: ext4 on a loop device whose backing file lives on a tmpfs
//! that is full. Which fails first depends on timing: usually a write reaches the page cache
//! and its writeback fails, so the fsync reports the error (and Linux drops the failed pages'
//! dirty state and may report the next fsync as a success); under load the write itself can
//! fail. Either way the store promises the same: a send whose write failed is answered with an
//! error, one whose fsync failed is answered TimedOut, the checkpoint never passes a failed
//! fsync (or recovery would never rescan its range), and every send acknowledged as flushed is
//! there after a reopen.
//!
//! Needs root (mount, losetup); skipped, with a message, where it cannot set that up.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use quiver_store::{
    AppendError, AppendOutcome, Appended, FlushMode, FlushStatus, OpenError, ReadStatus, Record,
    Store, StoreConfig,
};

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
    // Far longer than any wait here, so that TimedOut can only mean a failed fsync.
    config.flush = FlushMode::Sync {
        timeout_ms: 3_600_000,
    };
    config
}

fn checkpoint_flushed_position(root: &Path) -> u64 {
    // Checkpoint layout: three u64s, big-endian; the second is the CommitLog's flushed position.
    // A disk that filled before the first checkpoint was written leaves none: recovery then
    // scans from the start, as from a checkpoint at 0.
    let Ok(bytes) = std::fs::read(root.join("checkpoint")) else {
        return 0;
    };
    u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes"))
}

/// What the sends were answered, sorted by what the store promises for each.
#[derive(Default)]
struct Answers {
    /// Acknowledged as flushed: must be readable after a reopen.
    flushed: Vec<(Record, Appended)>,
    /// Where the first send answered TimedOut (its fsync, or one after its write, failed)
    /// was written.
    timed_out_from: Option<u64>,
    /// Answered with an error: the write failed and was rolled back (or the store refuses
    /// writes until a probe write succeeds, or until it is reopened if the rollback failed).
    failed: usize,
}

impl Answers {
    /// Records one send's answer; returns whether it was a failure of either kind.
    fn note(&mut self, record: Record, answer: Result<AppendOutcome, AppendError>) -> bool {
        match answer {
            Ok(outcome) if outcome.flush == FlushStatus::Ok => {
                self.flushed.push((record, outcome.entries[0]));
                false
            }
            Ok(outcome) => {
                let position = outcome.entries[0].position;
                self.timed_out_from =
                    Some(self.timed_out_from.map_or(position, |p| p.min(position)));
                true
            }
            // NotWritable: a write or fsync failed before, and the store refuses appends until
            // a probe write succeeds.
            Err(AppendError::Io(_) | AppendError::DiskFull(_) | AppendError::NotWritable(_)) => {
                self.failed += 1;
                true
            }
            Err(e) => panic!("a full disk answered with {e:?}"),
        }
    }
}

/// The i-th send's record: a body no other send has, so that a read finds this one only.
fn numbered(i: usize) -> Record {
    let mut body = format!("{i:08}").into_bytes();
    body.resize(4000, b'q');
    simple("T", (i % 4) as u32, &body)
}

#[test]
fn a_full_disk_fails_sends_but_loses_no_acknowledged_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(disk) = ThinDisk::set_up(dir.path()) else {
        eprintln!("skipped: cannot mount a tmpfs-backed loop device here (needs root)");
        return;
    };
    let root = disk.mount.join("store");
    let (store, _) = Store::open(config(&root)).expect("open");
    let mut answers = Answers::default();
    let mut next = 0;
    let mut send = |store: &Store, answers: &mut Answers| {
        let record = numbered(next);
        next += 1;
        answers.note(record.clone(), append(store, vec![record]))
    };
    for _ in 0..100 {
        assert!(!send(&store, &mut answers), "a send failed with space left");
    }
    // Lets the zero-filler get ahead while writeback still works; nothing below depends on it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    disk.fill_backing(256 << 10);

    // 20,000 sends of 4 KB are 80 MB, far past the 256 KiB left.
    let failed = (0..20_000).any(|_| send(&store, &mut answers));
    assert!(
        failed,
        "a write or an fsync failed once the backing store was full"
    );

    // Space returns: later writes and fsyncs may succeed, though pages whose writeback failed
    // may never reach the disk. Every send is answered, one way or the other.
    disk.free_backing();
    for _ in 0..200 {
        send(&store, &mut answers);
    }
    // A ConsumeQueue or index page whose writeback failed while the disk was full makes the
    // next fsync of its file fail, once: close may be the one told. Recovery then rescans from
    // the last checkpoint written.
    match store.close() {
        Ok(()) => {}
        Err(e @ OpenError::Io { .. }) => eprintln!("close after a full disk: {e}"),
        Err(e) => panic!("close: {e:?}"),
    }
    drop(store);

    if let Some(timed_out_from) = answers.timed_out_from {
        let checkpoint = checkpoint_flushed_position(&root);
        assert!(
            checkpoint <= timed_out_from,
            "checkpoint at {checkpoint} passed the fsync that failed at {timed_out_from}"
        );
    }

    // A reopen recovers whatever failed: sends are acknowledged again, and every send that was
    // acknowledged as flushed is read back as it was stored.
    let (store, _) = Store::open(config(&root)).expect("reopen");
    let record = numbered(next);
    let outcome = append(&store, vec![record.clone()]).expect("a send after reopening");
    assert_eq!(outcome.flush, FlushStatus::Ok);
    answers.flushed.push((record, outcome.entries[0]));
    for (record, appended) in &answers.flushed {
        let read = store
            .read(
                "T",
                record.queue_id,
                appended.queue_offset,
                1,
                u32::MAX,
                &accept_all,
            )
            .expect("read");
        assert_eq!(read.status, ReadStatus::Found, "{appended:?}");
        assert_eq!(
            read.bytes,
            stored(record, appended.queue_offset, appended.position),
            "{appended:?}"
        );
    }
    eprintln!(
        "{} sends acknowledged as flushed, {} failed writes, first TimedOut at {:?}",
        answers.flushed.len(),
        answers.failed,
        answers.timed_out_from
    );
    store.close().expect("close");
}
