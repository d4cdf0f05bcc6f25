//! Topics kept in memory: the store routes their appends, reads, bounds and time lookups to a
//! ring per queue, never to the CommitLog, so a reader gets the same answers from one type
//! whatever the topic's kind; their next offsets outlive a clean close.

mod common;

use common::{accept_all, append, simple, small_config};
use quiver_store::{Boundary, ReadStatus, Store, NOT_IN_LOG};

#[test]
fn a_memory_topic_is_appended_read_and_bounded_through_the_store_and_skips_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(small_config(dir.path())).unwrap();
    store.memory_topics().set("Ticks", true);
    assert!(store.is_memory_topic("Ticks"));
    for i in 0..5u8 {
        let outcome = append(&store, vec![simple("Ticks", 1, &[i; 100])]).unwrap();
        assert_eq!(outcome.entries[0].queue_offset, u64::from(i));
        assert_eq!(outcome.entries[0].position, NOT_IN_LOG as u64);
        assert_eq!(outcome.log_end(), None, "nothing for a replica to wait for");
    }
    let logged = append(&store, vec![simple("Orders", 0, b"on disk")]).unwrap();
    assert!(logged.log_end().is_some());
    assert_eq!(store.stats().written_position, logged.log_end().unwrap());

    let bounds = store.bounds("Ticks", 1);
    assert_eq!((bounds.min_offset, bounds.max_offset), (0, 5));
    let read = store.read("Ticks", 1, 2, 32, 1 << 20, &accept_all).unwrap();
    assert_eq!(read.status, ReadStatus::Found);
    assert_eq!((read.message_count, read.next_offset), (3, 5));
    let read = store.read("Ticks", 1, 5, 32, 1 << 20, &accept_all).unwrap();
    assert_eq!(read.status, ReadStatus::OffsetOverflowOne);
    let at = store.offset_by_time("Ticks", 1, i64::MAX, Boundary::Lower);
    assert_eq!(at.unwrap(), 5);
    assert!(store.earliest_time("Ticks", 1).unwrap().is_some());
    let (bytes, _) = store.memory_usage();
    assert!(bytes >= 500, "{bytes}");

    store.close().unwrap();
    drop(store);
    let (store, _) = Store::open(small_config(dir.path())).unwrap();
    store.memory_topics().set("Ticks", true);
    let bounds = store.bounds("Ticks", 1);
    assert_eq!(
        (bounds.min_offset, bounds.max_offset),
        (5, 5),
        "a clean close keeps the next offset, not the messages"
    );
    store.delete_topic("Ticks").unwrap();
    assert_eq!(store.bounds("Ticks", 1).max_offset, 0);
    assert_eq!(store.memory_usage().0, 0);
}
