mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use common::*;
use quiver_store::record::tags_code;
use quiver_store::{
    Append, AppendError, Boundary, FlushMode, FlushStatus, OpenError, ReadError, ReadStatus, Store,
};

#[test]
fn store_is_send_sync_and_clone() {
    fn check<T: Send + Sync + Clone>() {}
    check::<Store>();
}

#[test]
fn round_trip_across_segment_boundaries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, report) = Store::open(small_config(dir.path())).expect("open");
    assert!(!report.crashed);
    let mut expected: Vec<Vec<Vec<u8>>> = vec![Vec::new(), Vec::new()];
    for i in 0..60u32 {
        let body = vec![b'a' + (i % 26) as u8; 100 + (i as usize * 7) % 300];
        let r = simple("TopicTest", i % 2, &body);
        let outcome = append(&store, vec![r.clone()]).expect("append");
        let appended = outcome.entries[0];
        assert_eq!(outcome.flush, FlushStatus::Ok);
        assert_eq!(
            appended.queue_offset,
            expected[(i % 2) as usize].len() as u64
        );
        assert_eq!(appended.size as usize, r.bytes.len());
        let bytes = stored(&r, appended.queue_offset, appended.position);
        assert_eq!(
            store.read_record(appended.position).expect("read_record"),
            bytes
        );
        expected[(i % 2) as usize].push(bytes);
    }
    let segments = std::fs::read_dir(dir.path().join("commitlog"))
        .expect("dir")
        .count();
    assert!(segments > 3, "only {segments} segments");
    for (queue_id, records) in expected.iter().enumerate() {
        let mut offset = 0;
        let mut got = Vec::new();
        while offset < records.len() as u64 {
            let read = store
                .read(
                    "TopicTest",
                    queue_id as u32,
                    offset,
                    7,
                    u32::MAX,
                    &accept_all,
                )
                .expect("read");
            assert_eq!(read.status, ReadStatus::Found);
            assert_eq!(read.max_offset, records.len() as u64);
            got.extend(split(&read.bytes));
            offset = read.next_offset;
        }
        assert_eq!(&got, records);
    }
    store.close().expect("close");
}

#[test]
fn a_batch_is_contiguous_with_consecutive_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    append(&store, vec![simple("T", 0, b"x")]).expect("append");
    let batch: Vec<_> = (0..5).map(|i| simple("T", 0, &[i; 200])).collect();
    let outcome = append(&store, batch.clone()).expect("append");
    for (i, entry) in outcome.entries.iter().enumerate() {
        assert_eq!(entry.queue_offset, 1 + i as u64);
        if i > 0 {
            let prev = outcome.entries[i - 1];
            assert_eq!(entry.position, prev.position + u64::from(prev.size));
        }
    }
    // One read returns the whole batch, as stored.
    let read = store
        .read("T", 0, 1, 32, u32::MAX, &accept_all)
        .expect("read");
    let records = split(&read.bytes);
    assert_eq!(records.len(), 5);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(
            r,
            &stored(&batch[i], 1 + i as u64, outcome.entries[i].position)
        );
    }
    // A batch larger than a segment can never be stored contiguously.
    let too_big: Vec<_> = (0..30).map(|_| simple("T", 0, &[0; 200])).collect();
    assert!(matches!(
        append(&store, too_big),
        Err(AppendError::TooLarge { .. })
    ));
}

#[test]
fn tag_filter_skips_entries_before_reading_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    for i in 0..10 {
        let tags = if i % 3 == 0 { "A" } else { "B" };
        let r = record(Spec {
            tags: Some(tags),
            ..Spec::default()
        });
        append(&store, vec![r]).expect("append");
    }
    let a = tags_code("A");
    let only_a = move |code: i64| code == a;
    let read = store
        .read("TopicTest", 0, 0, 2, u32::MAX, &only_a)
        .expect("read");
    assert_eq!(read.status, ReadStatus::Found);
    assert_eq!(read.message_count, 2);
    // Offsets 0 and 3 match; the next read starts after the last scanned entry.
    assert_eq!(read.next_offset, 4);
    let read = store
        .read("TopicTest", 0, 7, 32, u32::MAX, &|c| c == tags_code("C"))
        .expect("read");
    assert_eq!(read.status, ReadStatus::NoMatchedMessage);
    assert_eq!(read.next_offset, 10);
}

#[test]
fn read_status_follows_the_pull_decision_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let check = |topic: &str, offset, status, next| {
        let read = store
            .read(topic, 0, offset, 32, u32::MAX, &accept_all)
            .expect("read");
        assert_eq!(
            (read.status, read.next_offset),
            (status, next),
            "{topic} at {offset}"
        );
    };
    check("Missing", 0, ReadStatus::NoMessageInQueue, 0);
    check("Missing", 5, ReadStatus::OffsetOverflowBadly, 0);
    for _ in 0..3 {
        append(&store, vec![simple("T", 0, b"x")]).expect("append");
    }
    check("T", 3, ReadStatus::OffsetOverflowOne, 3);
    check("T", 9, ReadStatus::OffsetOverflowBadly, 3);
    check("T", 1, ReadStatus::Found, 3);
    let bounds = store.bounds("T", 0);
    assert_eq!((bounds.min_offset, bounds.max_offset), (0, 3));
    assert_eq!(store.bounds("Missing", 0).max_offset, 0);
}

#[test]
fn max_bytes_limits_a_read_but_never_below_one_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let mut size = 0;
    for _ in 0..5 {
        size = append(&store, vec![simple("T", 0, &[7; 300])])
            .expect("append")
            .entries[0]
            .size;
    }
    let read = store.read("T", 0, 0, 32, 1, &accept_all).expect("read");
    assert_eq!((read.message_count, read.next_offset), (1, 1));
    let read = store
        .read("T", 0, 0, 32, size * 3, &accept_all)
        .expect("read");
    assert_eq!((read.message_count, read.next_offset), (3, 3));
    let read = store
        .read("T", 0, 0, 2, u32::MAX, &accept_all)
        .expect("read");
    assert_eq!((read.message_count, read.next_offset), (2, 2));
}

#[test]
fn offset_by_time_and_earliest_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    assert_eq!(store.earliest_time("T", 0).expect("earliest"), None);
    for i in 0..10i64 {
        let r = record(Spec {
            topic: "T",
            store_timestamp_ms: 1000 + i * 100,
            ..Spec::default()
        });
        append(&store, vec![r]).expect("append");
    }
    assert_eq!(store.earliest_time("T", 0).expect("earliest"), Some(1000));
    let at = |ts, b| store.offset_by_time("T", 0, ts, b).expect("by time");
    assert_eq!(at(1250, Boundary::Lower), 3);
    assert_eq!(at(1250, Boundary::Upper), 2);
    assert_eq!(at(1300, Boundary::Lower), 3);
    assert_eq!(at(1300, Boundary::Upper), 3);
    assert_eq!(at(0, Boundary::Lower), 0);
    assert_eq!(at(0, Boundary::Upper), 0);
    assert_eq!(at(99_999, Boundary::Lower), 10);
    assert_eq!(at(99_999, Boundary::Upper), 9);
}

#[test]
fn query_by_key_finds_keys_and_unique_keys_newest_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let mut positions = Vec::new();
    // 150 records with index_entries_max 100 makes the index roll to a second file.
    for i in 0..150i64 {
        let uniq = format!("U{i}");
        let key = format!("order-{}", i % 5);
        let r = record(Spec {
            topic: "T",
            store_timestamp_ms: 1_000_000 + i * 1000,
            keys: &[key.as_str(), "shared"],
            uniq_key: Some(&uniq),
            ..Spec::default()
        });
        positions.push(append(&store, vec![r]).expect("append").entries[0].position);
    }
    // A record in another topic with the same key must not match.
    append(
        &store,
        vec![record(Spec {
            topic: "Other",
            keys: &["order-1"],
            ..Spec::default()
        })],
    )
    .expect("append");
    let position_of = |bytes: &Vec<u8>| u64::from_be_bytes(bytes[28..36].try_into().expect("8"));
    let found = store
        .query_by_key("T", "U42", 10, 0, i64::MAX)
        .expect("query");
    assert_eq!(
        found.iter().map(position_of).collect::<Vec<_>>(),
        [positions[42]]
    );
    let found = store
        .query_by_key("T", "order-1", 100, 0, i64::MAX)
        .expect("query");
    let expected: Vec<u64> = (0..150)
        .rev()
        .filter(|i| i % 5 == 1)
        .map(|i| positions[i])
        .collect();
    assert_eq!(found.iter().map(position_of).collect::<Vec<_>>(), expected);
    let found = store
        .query_by_key("T", "shared", 3, 0, i64::MAX)
        .expect("query");
    assert_eq!(
        found.iter().map(position_of).collect::<Vec<_>>(),
        [positions[149], positions[148], positions[147]]
    );
    let found = store
        .query_by_key("T", "order-1", 100, 1_000_000 + 10_000, 1_000_000 + 20_000)
        .expect("query");
    assert_eq!(
        found.iter().map(position_of).collect::<Vec<_>>(),
        [positions[16], positions[11]]
    );
    assert!(store
        .query_by_key("T", "absent", 10, 0, i64::MAX)
        .expect("query")
        .is_empty());
}

#[test]
fn read_record_rejects_positions_that_are_not_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let appended = append(&store, vec![simple("T", 0, b"x")])
        .expect("append")
        .entries[0];
    assert!(matches!(
        store.read_record(appended.position + 1),
        Err(ReadError::NoRecord(_))
    ));
    assert!(matches!(
        store.read_record(1 << 40),
        Err(ReadError::NoRecord(_))
    ));
}

#[test]
fn arrival_listener_is_called_once_per_queue_touched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let calls = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&calls);
    store.set_arrival_listener(Arc::new(move |topic: &str, queue_id, max| {
        sink.lock()
            .expect("lock")
            .push((topic.to_string(), queue_id, max));
    }));
    append(
        &store,
        vec![
            simple("T", 0, b"a"),
            simple("T", 0, b"b"),
            simple("T", 1, b"c"),
        ],
    )
    .expect("append");
    let mut calls = calls.lock().expect("lock").clone();
    calls.sort();
    assert_eq!(calls, [("T".to_string(), 0, 2), ("T".to_string(), 1, 1)]);
    let mut queues = store.queues();
    queues.sort();
    assert_eq!(queues, [("T".to_string(), 0), ("T".to_string(), 1)]);
}

#[test]
fn malformed_and_oversized_records_are_refused_inline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = small_config(dir.path());
    config.record_bytes_max = 500;
    let (store, _) = Store::open(config).expect("open");
    let big = simple("T", 0, &[0; 600]);
    assert!(matches!(
        append(&store, vec![big]),
        Err(AppendError::TooLarge { .. })
    ));
    let mut wrong_queue = simple("T", 0, b"x");
    wrong_queue.queue_id = 1;
    assert!(matches!(
        append(&store, vec![wrong_queue]),
        Err(AppendError::Malformed(_))
    ));
    let mut bad_crc = simple("T", 0, b"x");
    let last_body_byte = bad_crc.bytes.len() - 1 - 2 - 1 - 1;
    bad_crc.bytes[last_body_byte] ^= 1;
    assert!(matches!(
        append(&store, vec![bad_crc]),
        Err(AppendError::Malformed(_))
    ));
    let escape = simple("../x", 0, b"x");
    assert!(matches!(
        append(&store, vec![escape]),
        Err(AppendError::Malformed(_))
    ));
    assert!(matches!(
        append(&store, vec![]),
        Err(AppendError::Malformed(_))
    ));
    assert_eq!(store.stats().messages_appended, 0);
}

#[test]
fn a_full_queue_answers_busy_and_close_answers_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = small_config(dir.path());
    config.append_queue_requests_max = 1;
    let (store, _) = Store::open(config).expect("open");
    // The listener runs on the thread writing the group: holding it there keeps the queue
    // full, and that thread keeps the appender while the test thread queues more.
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let entered_tx = Mutex::new(entered_tx);
    store.set_arrival_listener(Arc::new(move |_: &str, _, _| {
        let _ = entered_tx.lock().expect("lock").send(());
        let _ = release_rx.lock().expect("lock").recv_timeout(WAIT);
    }));
    let (done_tx, done_rx) = mpsc::channel();
    let request = |tx: mpsc::Sender<_>| Append {
        records: vec![simple("T", 0, b"x")],
        done: Box::new(move |r| {
            let _ = tx.send(r);
        }),
    };
    let writer = {
        let (store, first) = (store.clone(), request(done_tx.clone()));
        std::thread::spawn(move || drop(store.append(vec![first])))
    };
    entered_rx
        .recv_timeout(WAIT)
        .expect("the first append is being written");
    for _ in 0..2 {
        drop(store.append(vec![request(done_tx.clone())]));
    }
    // First is in the listener, second waits in the queue, third is refused.
    let busy = done_rx.recv_timeout(WAIT).expect("busy");
    assert!(matches!(busy, Err(AppendError::Busy { .. })), "{busy:?}");
    drop(release_tx);
    assert!(done_rx.recv_timeout(WAIT).expect("first").is_ok());
    assert!(done_rx.recv_timeout(WAIT).expect("second").is_ok());
    writer.join().expect("writer thread");
    store.close().expect("close");
    store.close().expect("close is idempotent");
    assert_eq!(
        append(&store, vec![simple("T", 0, b"x")]),
        Err(AppendError::Closed)
    );
    assert!(!dir.path().join("abort").exists());
}

/// A store with sync flush and 1 MiB segments.
fn open_sync(dir: &std::path::Path) -> Store {
    let mut config = small_config(dir);
    config.segment_bytes = 1 << 20;
    config.flush = FlushMode::Sync { timeout_ms: 5000 };
    Store::open(config).expect("open").0
}

#[test]
fn sync_flush_acknowledges_after_an_fsync_and_shares_fsyncs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_sync(dir.path());
    let threads = 8;
    let per_thread = 40;
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            let acknowledged = Arc::clone(&acknowledged);
            std::thread::spawn(move || {
                for _ in 0..per_thread {
                    let outcome = append(&store, vec![simple("T", t, &[1; 500])]).expect("append");
                    assert_eq!(outcome.flush, FlushStatus::Ok);
                    let end = outcome.entries[0].position + u64::from(outcome.entries[0].size);
                    // The ack comes only once an fsync covered the record.
                    assert!(store.stats().flushed_position >= end);
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    let requests = (threads * per_thread) as u64;
    assert_eq!(acknowledged.load(Ordering::Relaxed) as u64, requests);
    let fsyncs = store.commitlog_fsyncs();
    assert!(fsyncs < requests, "{fsyncs} fsyncs for {requests} requests");
    store.close().expect("close");
}

#[test]
fn requests_appended_together_are_acknowledged_by_one_fsync_once_their_commit_drops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_sync(dir.path());
    let (done_tx, done_rx) = mpsc::channel();
    let appends = (0..3)
        .map(|queue_id| {
            let tx = done_tx.clone();
            Append {
                records: vec![simple("T", queue_id, b"queued")],
                done: Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            }
        })
        .collect();
    let fsyncs_before = store.commitlog_fsyncs();
    let commit = store.append(appends);
    // Written (readable) but not acknowledged: no fsync has covered them yet.
    assert_eq!(store.bounds("T", 2).max_offset, 1);
    assert!(done_rx.try_recv().is_err());
    assert_eq!(store.commitlog_fsyncs(), fsyncs_before);
    drop(commit);
    for _ in 0..3 {
        let outcome = done_rx.recv_timeout(WAIT).expect("ack").expect("ok");
        assert_eq!(outcome.flush, FlushStatus::Ok);
    }
    assert_eq!(
        store.commitlog_fsyncs(),
        fsyncs_before + 1,
        "one fsync for the three"
    );
    store.close().expect("close");
}

#[test]
fn a_key_query_stops_at_what_one_answer_frame_can_hold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = quiver_store::StoreConfig::under(dir.path());
    config.segment_bytes = 64 * 1024 * 1024;
    let (store, _) = Store::open(config).expect("open");
    let body = vec![b'q'; 4 * 1024 * 1024];
    for _ in 0..4 {
        let r = record(Spec {
            topic: "T",
            body: &body,
            keys: &["big"],
            ..Spec::default()
        });
        append(&store, vec![r]).expect("append");
    }
    let found = store
        .query_by_key("T", "big", 64, 0, i64::MAX)
        .expect("query");
    // Each record is 4 MiB and a header: two fit in 12 MiB, a third does not.
    assert_eq!(found.len(), 2);
    assert!(found.iter().map(Vec::len).sum::<usize>() <= 12 * 1024 * 1024);
    store.close().expect("close");
}

#[test]
fn a_second_open_of_a_store_in_use_is_refused_until_the_first_closes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    append(&store, vec![simple("T", 0, b"kept")]).expect("append");
    match Store::open(small_config(dir.path())) {
        Err(OpenError::Locked(message)) => {
            assert!(message.contains("another broker"), "{message}")
        }
        Err(other) => panic!("expected Locked, got {other}"),
        Ok(_) => panic!("two stores opened on one directory"),
    }
    store.close().expect("close");
    drop(store);
    let (store, _) = Store::open(small_config(dir.path())).expect("reopen after close");
    assert_eq!(store.bounds("T", 0).max_offset, 1);
}

#[test]
fn a_group_written_during_a_commit_is_acknowledged_by_the_sync_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_sync(dir.path());
    let (done_tx, done_rx) = mpsc::channel();
    let during = store.clone();
    let first_tx = done_tx.clone();
    let first = Append {
        records: vec![simple("T", 0, b"first")],
        done: Box::new(move |result| {
            // Runs on the committing thread while its commit is still under way: the commit
            // below finds it so and leaves the new group to it.
            let second_tx = first_tx.clone();
            let second = Append {
                records: vec![simple("T", 1, b"second")],
                done: Box::new(move |result| {
                    let thread = std::thread::current().name().map(String::from);
                    let _ = second_tx.send(("second", result, thread));
                }),
            };
            drop(during.append(vec![second]));
            let _ = first_tx.send(("first", result, None));
        }),
    };
    drop(store.append(vec![first]));
    let (name, first, _) = done_rx.recv_timeout(WAIT).expect("first ack");
    assert_eq!(name, "first");
    assert_eq!(first.expect("ok").flush, FlushStatus::Ok);
    // No caller drains again: the thread that ran the commit handed the rest over.
    let (name, second, thread) = done_rx.recv_timeout(WAIT).expect("second ack");
    assert_eq!(name, "second");
    assert_eq!(second.expect("ok").flush, FlushStatus::Ok);
    assert_eq!(thread.as_deref(), Some("quiver-store-sync"));
    assert_eq!(store.bounds("T", 1).max_offset, 1);
    store.close().expect("close");
}

/// Sends a message when dropped.
struct DropSignal(mpsc::Sender<&'static str>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        let _ = self.0.send("dropped");
    }
}

#[test]
fn a_completion_that_drops_the_last_handle_closes_the_store_without_hanging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_sync(dir.path());
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (dropped_tx, dropped_rx) = mpsc::channel();
    let during = store.clone();
    let first = Append {
        records: vec![simple("T", 0, b"first")],
        done: Box::new(move |_| {
            // Left to the sync thread; its completion holds the last handle to the store.
            let last = (during.clone(), DropSignal(dropped_tx));
            let second = Append {
                records: vec![simple("T", 1, b"second")],
                done: Box::new(move |_| {
                    let _last = last;
                    let _ = go_rx.recv_timeout(WAIT);
                }),
            };
            drop(during.append(vec![second]));
        }),
    };
    drop(store.append(vec![first]));
    drop(store);
    go_tx.send(()).expect("the second completion waits");
    assert_eq!(
        dropped_rx.recv_timeout(WAIT),
        Ok("dropped"),
        "the store closed on the sync thread"
    );
}
