//! Real EIO and ENOSPC under the store, from the `LD_PRELOAD` shim (`crates/testkit/shim`):
//! each test runs again in a child process of this binary under the shim, which fails writes,
//! fsyncs or both on the files of one directory while a rule says so.
//!
//! What the store promises: a failed write or fsync is counted and refuses appends until a
//! probe write succeeds, reads go on, the checkpoint never passes a failed fsync or flush
//! (Linux may have dropped those pages and report the next fsync as a success), and after a
//! reopen every append that was answered is read back as it was stored.
//!
//! Needs a C compiler (`cc`) to build the shim; skipped, with a message, without one.

mod common;

#[path = "../../testkit/src/io_faults.rs"]
mod io_faults;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use io_faults::FaultShim;
use quiver_store::{
    read_checkpoint, AppendError, Appended, Checkpoint, FileKind, FlushMode, Record, Store,
    StoreConfig,
};

/// Polls `condition` every 10 ms until it holds; panics after `WAIT` naming `what`.
fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The checkpoint on disk (all zeros before the first: a new store writes none until it holds
/// something).
fn checkpoint(config: &StoreConfig) -> Checkpoint {
    read_checkpoint(&config.checkpoint_path)
        .expect("read checkpoint")
        .map(|c| c.expect("a valid checkpoint"))
        .unwrap_or_default()
}

fn errors(store: &Store, kind: FileKind) -> u64 {
    store.io_faults().kinds[kind as usize].errors
}

/// A batch of `count` records for queue 0 of "T", with bodies `tag-i`, as one request.
fn batch(tag: &str, count: usize) -> Vec<Record> {
    (0..count)
        .map(|i| simple("T", 0, format!("{tag}-{i:04}").as_bytes()))
        .collect()
}

/// The written records in order, with where each went.
#[derive(Default)]
struct Written(Vec<(Record, Appended)>);

impl Written {
    fn append(&mut self, store: &Store, records: Vec<Record>) -> Result<(), AppendError> {
        let outcome = append(store, records.clone())?;
        self.0.extend(records.into_iter().zip(outcome.entries));
        Ok(())
    }

    /// Every written record is read back as it was stored.
    fn check(&self, store: &Store) {
        assert_eq!(
            read_queue_all(store, "T", 0),
            expected_in_queue(&self.0, 0),
            "every answered append reads back"
        );
    }
}

fn config(root: &Path) -> StoreConfig {
    let mut config = small_config(root);
    config.segment_bytes = 1 << 20;
    config
}

/// Opens the store in a fresh folder and writes a first batch that the checkpoint covers.
fn open_with_checkpointed_batch() -> (tempfile::TempDir, StoreConfig, Store, Written, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(&dir.path().join("store"));
    let (store, _) = Store::open(config.clone()).expect("open");
    let mut written = Written::default();
    written.append(&store, batch("before", 20)).expect("append");
    let end = store.stats().written_position;
    wait_for("the checkpoint to cover the first batch", || {
        let c = checkpoint(&config);
        c.commitlog_flushed_position == end && c.dispatched_flushed_position == end
    });
    (dir, config, store, written, end)
}

/// After the fault clears: the probe lets appends in again, a batch of 10 is taken, and a
/// reopen rescans at least `rescanned` records and reads back everything answered.
fn clear_and_reopen(
    shim: &FaultShim,
    config: &StoreConfig,
    store: Store,
    mut written: Written,
    rescanned: u64,
) {
    shim.clear();
    wait_for("the probe to let appends in again", || {
        store.io_faults().unwritable.is_none()
    });
    written
        .append(&store, batch("after", 10))
        .expect("append once the fault cleared");
    written.check(&store);
    store.close().expect("close");
    drop(store);

    let (store, report) = Store::open(config.clone()).expect("reopen");
    assert!(
        report.records_redispatched >= rescanned,
        "recovery rescanned what the checkpoint did not vouch for: {report:?}"
    );
    written.check(&store);
    written
        .append(&store, batch("reopened", 5))
        .expect("append after reopening");
    store.close().expect("close");
}

#[test]
fn a_failed_async_commitlog_fsync_refuses_appends_and_holds_the_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let test = "a_failed_async_commitlog_fsync_refuses_appends_and_holds_the_checkpoint";
    let Some(shim) = FaultShim::rerun_under_shim(test, dir.path()) else {
        return;
    };
    let (_dir, config, store, mut written, before) = open_with_checkpointed_batch();
    shim.fail("EIO", "fsync", &config.commitlog_dir);
    // Nothing was left to fsync, so the flusher has not failed yet: this one is taken.
    written.append(&store, batch("during", 20)).expect("append");
    wait_for("the failed fsync to be recorded", || {
        errors(&store, FileKind::CommitLog) > 0 && store.io_faults().unwritable.is_some()
    });
    let refused = append(&store, batch("refused", 1));
    assert!(
        matches!(refused, Err(AppendError::NotWritable(ref reason)) if reason.contains("fsync")),
        "{refused:?}"
    );
    written.check(&store);
    let c = checkpoint(&config);
    assert!(
        c.commitlog_flushed_position <= before,
        "{c:?} passed {before}"
    );
    assert!(
        c.dispatched_flushed_position <= before,
        "{c:?} passed {before}"
    );

    shim.clear();
    wait_for("a later fsync to succeed", || {
        store.stats().flushed_position == store.stats().written_position
    });
    // Flushed now, but a failed writeback may have lost those pages: still held.
    let c = checkpoint(&config);
    assert_eq!(c.commitlog_flushed_position, before, "{c:?}");
    // The 20 written during the fault and the 10 after it.
    clear_and_reopen(&shim, &config, store, written, 30);
}

#[test]
fn a_failed_consume_queue_flush_holds_the_checkpoint_until_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let test = "a_failed_consume_queue_flush_holds_the_checkpoint_until_reopen";
    let Some(shim) = FaultShim::rerun_under_shim(test, dir.path()) else {
        return;
    };
    let (_dir, config, store, mut written, before) = open_with_checkpointed_batch();
    shim.fail("EIO", "fsync", &config.consume_queue_dir);
    written.append(&store, batch("during", 20)).expect("append");
    let during = store.stats().written_position;
    wait_for("the failed flush to be recorded", || {
        errors(&store, FileKind::ConsumeQueue) > 0
    });
    assert!(store.io_faults().unwritable.is_some());
    assert!(matches!(
        append(&store, batch("refused", 1)),
        Err(AppendError::NotWritable(_))
    ));
    // The CommitLog is fine: its part of the checkpoint moves on, the queues' does not.
    wait_for("the checkpoint to cover the CommitLog", || {
        checkpoint(&config).commitlog_flushed_position == during
    });
    assert_eq!(checkpoint(&config).dispatched_flushed_position, before);
    let failures = errors(&store, FileKind::ConsumeQueue);
    wait_for("the flush to be tried again", || {
        errors(&store, FileKind::ConsumeQueue) > failures
    });

    shim.clear();
    wait_for("the queues to flush again", || {
        store.io_faults().unwritable.is_none() && store.flush().is_ok()
    });
    let c = checkpoint(&config);
    assert_eq!(
        c.dispatched_flushed_position, before,
        "{c:?}: held until reopen"
    );
    clear_and_reopen(&shim, &config, store, written, 30);
}

#[test]
fn a_full_disk_refuses_the_append_cleanly_and_then_every_append_until_it_clears() {
    let dir = tempfile::tempdir().expect("tempdir");
    let test = "a_full_disk_refuses_the_append_cleanly_and_then_every_append_until_it_clears";
    let Some(shim) = FaultShim::rerun_under_shim(test, dir.path()) else {
        return;
    };
    let (_dir, config, store, written, before) = open_with_checkpointed_batch();
    shim.fail("ENOSPC", "write", &config.commitlog_dir);
    let full = append(&store, batch("full", 3));
    assert!(matches!(full, Err(AppendError::DiskFull(_))), "{full:?}");
    assert_eq!(
        store.stats().written_position,
        before,
        "the failed group was rolled back"
    );
    let refused = append(&store, batch("refused", 1));
    assert!(
        matches!(refused, Err(AppendError::NotWritable(ref reason)) if reason.contains("No space")),
        "{refused:?}"
    );
    let report = store.io_faults();
    assert_eq!(report.kinds[FileKind::CommitLog as usize].errors, 1);
    let last = report.kinds[FileKind::CommitLog as usize]
        .last
        .clone()
        .expect("the last fault");
    assert_eq!(last.op, "write");
    written.check(&store);
    // Nothing was lost to a failed fsync: the checkpoint moves on as usual.
    clear_and_reopen(&shim, &config, store, written, 0);
}

#[test]
fn sync_flush_answers_a_failed_fsync_as_timed_out_and_refuses_the_next_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let test = "sync_flush_answers_a_failed_fsync_as_timed_out_and_refuses_the_next_appends";
    let Some(shim) = FaultShim::rerun_under_shim(test, dir.path()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = config(&dir.path().join("store"));
    config.flush = FlushMode::Sync {
        timeout_ms: 3_600_000,
    };
    let (store, _) = Store::open(config.clone()).expect("open");
    let mut written = Written::default();
    written.append(&store, batch("before", 5)).expect("append");
    let before = store.stats().written_position;
    shim.fail("EIO", "fsync", &config.commitlog_dir);
    let outcome = append(&store, batch("during", 1)).expect("written");
    assert_eq!(
        outcome.flush,
        quiver_store::FlushStatus::TimedOut,
        "never acknowledged as flushed"
    );
    assert!(matches!(
        append(&store, batch("refused", 1)),
        Err(AppendError::NotWritable(_))
    ));
    written
        .0
        .extend(batch("during", 1).into_iter().zip(outcome.entries));
    clear_and_reopen_sync(&shim, &config, store, written, before);
}

/// As `clear_and_reopen`, for sync flush: the append after the fault is acknowledged as flushed.
fn clear_and_reopen_sync(
    shim: &FaultShim,
    config: &StoreConfig,
    store: Store,
    mut written: Written,
    held: u64,
) {
    shim.clear();
    wait_for("the probe to let appends in again", || {
        store.io_faults().unwritable.is_none()
    });
    let records = batch("after", 1);
    let outcome = append(&store, records.clone()).expect("append once the fault cleared");
    assert_eq!(outcome.flush, quiver_store::FlushStatus::Ok);
    written.0.extend(records.into_iter().zip(outcome.entries));
    written.check(&store);
    assert!(checkpoint(config).commitlog_flushed_position <= held);
    store.close().expect("close");
    drop(store);
    let (store, _) = Store::open(config.clone()).expect("reopen");
    written.check(&store);
    store.close().expect("close");
}
