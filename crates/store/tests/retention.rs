//! Retention and a full store: old segments go with the ConsumeQueue and index files that
//! point into them; a capped store refuses appends, keeps serving reads, and takes appends
//! again once retention frees space.

mod common;

use std::path::Path;

use common::*;
use quiver_store::{AppendError, ReadStatus, Store, StoreConfig, SEGMENTS_PER_ROUND_MAX};

const HOUR_MS: i64 = 3_600_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

fn fill(store: &Store, count: usize) {
    for i in 0..count {
        let uniq = format!("R{i}");
        let body = vec![b'r'; 200];
        let r = record(Spec {
            topic: "T",
            queue_id: (i % 2) as u32,
            body: &body,
            uniq_key: Some(&uniq),
            ..Spec::default()
        });
        append(store, vec![r]).expect("append");
    }
}

fn count_files(dir: &Path) -> usize {
    let mut count = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("dir").flatten() {
            if entry.path().is_dir() {
                dirs.push(entry.path());
            } else {
                count += 1;
            }
        }
    }
    count
}

/// Reads a queue from `offset` to its end; returns the records' positions.
fn positions_from(store: &Store, queue_id: u32, mut offset: u64) -> Vec<u64> {
    let mut positions = Vec::new();
    loop {
        let read = store
            .read("T", queue_id, offset, 32, u32::MAX, &accept_all)
            .expect("read");
        if read.status != ReadStatus::Found {
            return positions;
        }
        for bytes in split(&read.bytes) {
            let mut position = [0u8; 8];
            position.copy_from_slice(&bytes[28..36]);
            positions.push(u64::from_be_bytes(position));
        }
        offset = read.next_offset;
    }
}

fn config(root: &Path) -> StoreConfig {
    let mut config = small_config(root);
    config.index_entries_max = 20;
    config
}

#[test]
fn expired_segments_go_with_their_consume_queue_and_index_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = Store::open(config(root)).expect("open");
    fill(&store, 200);
    // ConsumeQueue entries reach their files at the latest when the store is flushed.
    store.flush().expect("flush");
    let segments_before = count_files(&root.join("commitlog"));
    let queue_files_before = count_files(&root.join("consumequeue"));
    let index_files_before = count_files(&root.join("index"));
    assert!(segments_before > 5 && queue_files_before > 4 && index_files_before > 4);

    // Within the 72 h reserve: nothing goes.
    let kept = store
        .delete_expired(now_ms(), 72 * HOUR_MS as u64, false)
        .expect("retention");
    assert_eq!(kept.segments_deleted, 0);
    assert_eq!(store.bounds("T", 0).min_offset, 0);

    // Every sealed segment is older than the reserve; the active one stays. A round deletes
    // at most SEGMENTS_PER_ROUND_MAX of them.
    let later = now_ms() + 73 * HOUR_MS;
    let mut report = store
        .delete_expired(later, 72 * HOUR_MS as u64, false)
        .expect("retention");
    assert_eq!(
        report.segments_deleted,
        (segments_before - 1).min(SEGMENTS_PER_ROUND_MAX)
    );
    let (mut deleted, mut queue_files, mut index_files) = (0, 0, 0);
    while report.segments_deleted > 0 {
        deleted += report.segments_deleted;
        queue_files += report.consume_queue_files_deleted;
        index_files += report.index_files_deleted;
        report = store
            .delete_expired(later, 72 * HOUR_MS as u64, false)
            .expect("retention");
    }
    report.segments_deleted = deleted;
    report.consume_queue_files_deleted = queue_files;
    report.index_files_deleted = index_files;
    assert_eq!(deleted, segments_before - 1);
    assert_eq!(count_files(&root.join("commitlog")), 1);
    assert_eq!(store.stats().min_position, report.min_position);
    assert!(report.consume_queue_files_deleted > 0, "{report:?}");
    assert!(report.index_files_deleted > 0, "{report:?}");
    assert!(count_files(&root.join("consumequeue")) < queue_files_before);
    assert!(count_files(&root.join("index")) < index_files_before);

    for queue_id in 0..2 {
        let bounds = store.bounds("T", queue_id);
        assert!(bounds.min_offset > 0 && bounds.min_offset <= bounds.max_offset);
        // A consumer behind the deleted data is told where to carry on.
        let behind = store
            .read("T", queue_id, 0, 32, u32::MAX, &accept_all)
            .expect("read");
        assert_eq!(behind.status, ReadStatus::OffsetTooSmall);
        assert_eq!(behind.next_offset, bounds.min_offset);
        let positions = positions_from(&store, queue_id, bounds.min_offset);
        assert_eq!(
            positions.len() as u64,
            bounds.max_offset - bounds.min_offset
        );
        assert!(positions.iter().all(|p| *p >= report.min_position));
    }
    let bounds_before: Vec<_> = (0..2).map(|q| store.bounds("T", q)).collect();
    store.close().expect("close");

    // Recovery agrees, and appends continue after the old offsets.
    let (store, report) = Store::open(config(root)).expect("reopen");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let bounds_after: Vec<_> = (0..2).map(|q| store.bounds("T", q)).collect();
    assert_eq!(bounds_after, bounds_before);
    let appended = append(&store, vec![simple("T", 0, b"after")]).expect("append");
    assert_eq!(
        appended.entries[0].queue_offset,
        bounds_before[0].max_offset
    );
}

#[test]
fn only_a_prefix_of_old_segments_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = Store::open(config(root)).expect("open");
    fill(&store, 60);
    let first = root.join("commitlog").join(format!("{:020}", 0));
    let second = root.join("commitlog").join(format!("{:020}", 4096));
    // Make the second segment look fresh: the first cannot go past it out of order.
    let fresh = std::fs::File::options()
        .write(true)
        .open(&second)
        .expect("open");
    fresh
        .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(7200))
        .expect("set mtime");
    let report = store
        .delete_expired(now_ms() + HOUR_MS, 0, false)
        .expect("retention");
    assert_eq!(report.segments_deleted, 1);
    assert!(!first.exists() && second.exists());
    assert_eq!(report.min_position, 4096);
}

#[test]
fn a_capped_store_refuses_appends_keeps_reads_and_recovers_after_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut config = config(root);
    config.commitlog_bytes_max = 4 * 4096;
    let (store, _) = Store::open(config).expect("open");
    let mut accepted = 0;
    let refusal = loop {
        match append(&store, vec![simple("T", 0, &[b'f'; 300])]) {
            Ok(_) => accepted += 1,
            Err(error) => break error,
        }
        assert!(accepted < 1000, "the cap never applied");
    };
    match &refusal {
        AppendError::DiskFull(reason) => assert!(reason.contains("at most 16384"), "{reason}"),
        other => panic!("expected DiskFull, got {other:?}"),
    }
    // Reads are unaffected and see every accepted record.
    assert_eq!(positions_from(&store, 0, 0).len(), accepted);
    // Still full: another append fails the same way and damages nothing.
    assert!(matches!(
        append(&store, vec![simple("T", 0, &[b'f'; 300])]),
        Err(AppendError::DiskFull(_))
    ));
    let report = store
        .delete_expired(now_ms(), u64::MAX, true)
        .expect("retention");
    assert!(report.segments_deleted > 0);
    let appended = append(&store, vec![simple("T", 0, b"space again")]).expect("append");
    assert_eq!(appended.entries[0].queue_offset, accepted as u64);
    let min = store.bounds("T", 0).min_offset;
    assert_eq!(
        positions_from(&store, 0, min).len() as u64,
        accepted as u64 + 1 - min
    );
    store.close().expect("close");
    let (store, report) = Store::open(config_capped(root)).expect("reopen");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(store.bounds("T", 0).max_offset, accepted as u64 + 1);
}

fn config_capped(root: &Path) -> StoreConfig {
    let mut config = config(root);
    config.commitlog_bytes_max = 4 * 4096;
    config
}

#[test]
fn a_queue_whose_every_entry_expired_keeps_its_offsets_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let entries_per_file = config(root).consume_queue_entries_per_file;
    let (store, _) = Store::open(config(root)).expect("open");
    // Exactly one ConsumeQueue file of queue A/0, then enough of another topic to seal the
    // segments A/0's records are in.
    for i in 0..entries_per_file {
        append(&store, vec![simple("A", 0, format!("a{i}").as_bytes())]).expect("append");
    }
    for _ in 0..60 {
        append(&store, vec![simple("B", 0, &[b'b'; 200])]).expect("append");
    }
    store.flush().expect("flush");
    store.delete_expired(now_ms(), 0, true).expect("retention");
    let bounds = store.bounds("A", 0);
    assert_eq!(
        (bounds.min_offset, bounds.max_offset),
        (entries_per_file, entries_per_file)
    );
    store.close().expect("close");
    drop(store);

    let (store, _) = Store::open(config(root)).expect("reopen");
    let bounds = store.bounds("A", 0);
    assert_eq!(
        (bounds.min_offset, bounds.max_offset),
        (entries_per_file, entries_per_file)
    );
    // The next message takes the next offset, not one a consumer has committed past.
    let appended = append(&store, vec![simple("A", 0, b"next")]).expect("append");
    assert_eq!(appended.entries[0].queue_offset, entries_per_file);
}

/// A ConsumeQueue file missing from the middle of a queue does not stop retention (the disk
/// would fill), and a consumer of that queue still reaches every record left in the log.
#[test]
fn a_damaged_consume_queue_does_not_stop_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let per_file = config(root).consume_queue_entries_per_file;
    let (store, _) = Store::open(config(root)).expect("open");
    fill(&store, 200);
    store.close().expect("close");
    drop(store);
    let segments_before = count_files(&root.join("commitlog"));
    // Queue 0's third file: entries that point into segments retention removes.
    let missing = root
        .join("consumequeue/T/0")
        .join(format!("{:020}", 2 * per_file * 20));
    std::fs::remove_file(&missing).expect("remove");

    let (store, _) = Store::open(config(root)).expect("reopen");
    let later = now_ms() + 73 * HOUR_MS;
    let mut deleted = 0;
    let mut min_position = 0;
    loop {
        let report = store
            .delete_expired(later, 72 * HOUR_MS as u64, false)
            .expect("retention");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        if report.segments_deleted == 0 {
            break;
        }
        deleted += report.segments_deleted;
        min_position = report.min_position;
    }
    assert_eq!(deleted, segments_before - 1);

    // From the queue's minimum, following the store's next offsets, a consumer reaches every
    // record still in the log and nothing removed.
    let bounds = store.bounds("T", 0);
    let mut offset = bounds.min_offset;
    let mut positions = Vec::new();
    let mut first_served = None;
    while offset < bounds.max_offset {
        let read = store
            .read("T", 0, offset, 32, u32::MAX, &accept_all)
            .expect("read");
        assert!(
            matches!(
                read.status,
                ReadStatus::Found | ReadStatus::NoMatchedMessage
            ),
            "{:?} at {offset}",
            read.status
        );
        if read.status == ReadStatus::Found {
            first_served.get_or_insert(offset);
        }
        for bytes in split(&read.bytes) {
            positions.push(u64::from_be_bytes(
                bytes[28..36].try_into().expect("8 bytes"),
            ));
        }
        assert!(read.next_offset > offset);
        offset = read.next_offset;
    }
    assert!(!positions.is_empty());
    assert!(positions.iter().all(|p| *p >= min_position));
    let first_served = first_served.expect("a record served");
    assert_eq!(positions.len() as u64, bounds.max_offset - first_served);
    assert_eq!(positions, positions_from(&store, 0, first_served));
}
