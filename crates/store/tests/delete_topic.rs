//! Deleting a topic: its queues go, the name starts again at offset 0, and neither a crash nor
//! a rebuild from the whole CommitLog brings the deleted records back.

mod common;

use common::*;
use quiver_store::{Appended, Record, Store, StoreConfig};

/// Appends `count` records of `topic` over three queues, each with the key `<prefix><i>`.
fn fill(store: &Store, topic: &str, prefix: &str, count: usize) -> Vec<(Record, Appended)> {
    (0..count)
        .map(|i| {
            let body = format!("{prefix} {i} {}", "x".repeat(100 + i % 50));
            let key = format!("{prefix}{i}");
            let r = record(Spec {
                topic,
                queue_id: (i % 3) as u32,
                body: body.as_bytes(),
                keys: &[&key],
                ..Spec::default()
            });
            let appended = append(store, vec![r.clone()]).expect("append").entries[0];
            (r, appended)
        })
        .collect()
}

/// Every queue of `topic` holds exactly `written`, at the offsets the appends gave.
fn assert_holds(store: &Store, topic: &str, written: &[(Record, Appended)]) {
    for queue_id in 0..3u32 {
        let expected = expected_in_queue(written, queue_id);
        let bounds = store.bounds(topic, queue_id);
        assert_eq!(
            bounds.max_offset,
            expected.len() as u64,
            "{topic} {queue_id}"
        );
        assert_eq!(
            read_queue_all(store, topic, queue_id),
            expected,
            "{topic} {queue_id}"
        );
    }
}

fn found_by_key(store: &Store, topic: &str, key: &str) -> usize {
    store
        .query_by_key(topic, key, 10, 0, i64::MAX)
        .expect("query")
        .len()
}

/// Reopens after a crash with the checkpoint removed, so that recovery re-dispatches every
/// record in the CommitLog, the deleted ones included.
fn crash_and_rebuild(store: Store, config: &StoreConfig) -> Store {
    drop(store);
    match std::fs::remove_file(&config.checkpoint_path) {
        Ok(()) => {}
        // None written yet: the scan starts at 0 anyway.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("remove checkpoint: {e}"),
    }
    let (store, report) = Store::open(config.clone()).expect("reopen");
    assert!(report.crashed);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    store
}

#[test]
fn a_deleted_topic_stays_deleted_and_its_name_starts_again_at_offset_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path());
    let (store, _) = Store::open(config.clone()).expect("open");
    fill(&store, "T", "old", 30);
    let other = fill(&store, "Other", "other", 12);

    let deletion = store.delete_topic("T").expect("delete");
    assert_eq!(deletion.queues, 3);
    assert_eq!(deletion.position, store.stats().written_position);
    assert!(!dir.path().join("consumequeue/T").exists());
    assert!(store.queues().iter().all(|(topic, _)| topic != "T"));
    assert_holds(&store, "T", &[]);
    assert_eq!(found_by_key(&store, "T", "old7"), 0);

    let new = fill(&store, "T", "new", 9);
    assert_eq!(
        new[0].1.queue_offset, 0,
        "the name starts again at offset 0"
    );
    assert_holds(&store, "T", &new);
    assert_holds(&store, "Other", &other);

    let store = crash_and_rebuild(store, &config);
    assert_holds(&store, "T", &new);
    assert_holds(&store, "Other", &other);
    assert_eq!(found_by_key(&store, "T", "old7"), 0);
    assert_eq!(found_by_key(&store, "T", "new7"), 1);
    assert_eq!(found_by_key(&store, "Other", "other7"), 1);

    // Offsets go on from the new topic's, and a clean restart keeps all of it.
    let more = fill(&store, "T", "more", 3);
    assert_eq!(more[0].1.queue_offset, 3);
    store.close().expect("close");
    drop(store);
    let (store, report) = Store::open(config).expect("reopen");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let both: Vec<_> = new.into_iter().chain(more).collect();
    assert_holds(&store, "T", &both);
}

#[test]
fn deleting_twice_and_deleting_an_unknown_topic_are_harmless() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path());
    let (store, _) = Store::open(config.clone()).expect("open");
    assert_eq!(store.delete_topic("Nobody").expect("delete").queues, 0);
    assert!(
        !config.deleted_topics_path.exists(),
        "a name that never held a message is not recorded"
    );
    fill(&store, "T", "first", 6);
    store.delete_topic("T").expect("delete");
    let second = fill(&store, "T", "second", 6);
    let deletion = store.delete_topic("T").expect("delete again");
    assert_eq!(deletion.queues, 3);
    let third = fill(&store, "T", "third", 4);
    assert_eq!(third[0].1.queue_offset, 0);
    let store = crash_and_rebuild(store, &config);
    assert_holds(&store, "T", &third);
    assert_eq!(found_by_key(&store, "T", "second1"), 0);
    assert_eq!(second.len(), 6);
}

/// A crash after the rename that commits a deletion and before the deletion list was written.
#[test]
fn a_deletion_interrupted_after_its_rename_is_finished_by_the_next_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path());
    let (store, _) = Store::open(config.clone()).expect("open");
    fill(&store, "T", "old", 30);
    let other = fill(&store, "Other", "other", 6);
    let position = store.stats().written_position;
    store.close().expect("close");
    drop(store);
    let queues = dir.path().join("consumequeue");
    let trash = queues.join(format!("T.deleted-{position}"));
    std::fs::rename(queues.join("T"), &trash).expect("rename");
    assert!(!config.deleted_topics_path.exists());

    let (store, report) = Store::open(config.clone()).expect("reopen");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(!trash.exists(), "the trash directory is removed");
    let listed = std::fs::read_to_string(&config.deleted_topics_path).expect("list");
    assert_eq!(listed, format!("{position} T\n"));
    assert_holds(&store, "T", &[]);
    assert_holds(&store, "Other", &other);
    let new = fill(&store, "T", "new", 6);
    assert_eq!(new[0].1.queue_offset, 0);
    let store = crash_and_rebuild(store, &config);
    assert_holds(&store, "T", &new);
    assert_eq!(found_by_key(&store, "T", "old3"), 0);
}

/// Sends queued while a deletion holds the appender are written, not stranded.
#[test]
fn appends_racing_a_deletion_are_all_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = small_config(dir.path());
    config.flush = quiver_store::FlushMode::Sync { timeout_ms: 5000 };
    let (store, _) = Store::open(config).expect("open");
    std::thread::scope(|scope| {
        let senders: Vec<_> = (0..4)
            .map(|t| {
                let store = &store;
                scope.spawn(move || {
                    for i in 0..50 {
                        let body = format!("{t} {i}");
                        append(store, vec![simple("T", t, body.as_bytes())]).expect("append");
                    }
                })
            })
            .collect();
        for _ in 0..5 {
            store.delete_topic("T").expect("delete");
        }
        for sender in senders {
            sender.join().expect("sender");
        }
    });
    // Every queue's offsets are dense from its min: nothing half-deleted remains.
    for (topic, queue_id) in store.queues() {
        let bounds = store.bounds(&topic, queue_id);
        let read = read_queue_all(&store, &topic, queue_id);
        assert_eq!(read.len() as u64, bounds.max_offset - bounds.min_offset);
    }
}
