//! Truncating the CommitLog (`Store::truncate_log`), as a slave does when its new master never
//! had its log's tail: nothing dropped is served afterwards, appends of both kinds take the
//! dropped records' positions and queue offsets, and no crash (right after the cut, or part
//! way through it) brings the dropped records back.

mod common;

use common::*;
use quiver_store::{
    Appended, Boundary, FlushMode, Record, Store, StoreConfig, TruncateError, TruncateReport,
};

const QUEUES: u32 = 3;
const FIRST_MS: i64 = 1_700_000_000_000;

/// The `i`th record: three queues, a key of its own, one store time each second.
fn nth_record(i: usize) -> Record {
    let body = vec![b'a' + (i % 26) as u8; 150 + (i * 53) % 300];
    let key = format!("K{i}");
    record(Spec {
        topic: "Orders",
        queue_id: i as u32 % QUEUES,
        body: &body,
        store_timestamp_ms: FIRST_MS + i as i64 * 1000,
        keys: &[key.as_str()],
        ..Spec::default()
    })
}

fn open(config: &StoreConfig) -> Store {
    Store::open(config.clone()).expect("open").0
}

/// Appends records `from..to` one request each; returns where each went.
fn fill(store: &Store, from: usize, to: usize) -> Vec<(Record, Appended)> {
    (from..to)
        .map(|i| {
            let record = nth_record(i);
            let outcome = append(store, vec![record.clone()]).expect("append");
            (record, outcome.entries[0])
        })
        .collect()
}

/// Checks that `store` holds exactly `kept` (and nothing of `dropped`) through every read.
fn assert_holds_only(store: &Store, kept: &[(Record, Appended)], dropped: &[(Record, Appended)]) {
    for queue_id in 0..QUEUES {
        assert_eq!(
            read_queue_all(store, "Orders", queue_id),
            expected_in_queue(kept, queue_id),
            "queue {queue_id}"
        );
        let kept_in_queue = kept.iter().filter(|(r, _)| r.queue_id == queue_id).count();
        assert_eq!(
            store.bounds("Orders", queue_id).max_offset,
            kept_in_queue as u64
        );
    }
    for (record, _) in dropped {
        let time = record.store_timestamp_ms;
        let found = store
            .query_by_key("Orders", &record.keys[0], 10, 0, i64::MAX)
            .expect("query");
        assert!(found.is_empty(), "{} found by key", record.keys[0]);
        let lower = store
            .offset_by_time("Orders", record.queue_id, time, Boundary::Lower)
            .expect("by time");
        let bounds = store.bounds("Orders", record.queue_id);
        assert_eq!(
            lower, bounds.max_offset,
            "nothing stored at or after {time}"
        );
    }
    for (record, appended) in kept.iter().rev().take(3) {
        let found = store
            .query_by_key("Orders", &record.keys[0], 10, 0, i64::MAX)
            .expect("query");
        assert_eq!(
            found,
            vec![stored(record, appended.queue_offset, appended.position)]
        );
    }
}

#[test]
fn after_a_truncate_no_read_sees_a_dropped_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path());
    let store = open(&config);
    let written = fill(&store, 0, 40);
    let (kept, dropped) = written.split_at(23);
    let cut = dropped[0].1.position;
    let before = store.stats().written_position;
    let report = store.truncate_log(cut).expect("truncate");
    assert_eq!(report.position, cut);
    assert_eq!(report.dropped_from, before);
    assert_eq!(report.queues_rewound, QUEUES as usize);
    assert_eq!(store.stats().written_position, cut);
    assert!(store.stats().flushed_position <= cut);
    assert_holds_only(&store, kept, dropped);
    assert!(store.read_record(cut).is_err());
    store.close().expect("close");
    let store = open(&config);
    assert_eq!(store.stats().written_position, cut);
    assert_holds_only(&store, kept, dropped);
}

#[test]
fn appends_after_a_truncate_take_the_dropped_positions_and_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&small_config(dir.path()));
    let written = fill(&store, 0, 40);
    let cut = written[17].1.position;
    store.truncate_log(cut).expect("truncate");
    let again = fill(&store, 17, 40);
    for ((_, first), (_, second)) in written[17..].iter().zip(&again) {
        assert_eq!(first, second, "the same position and queue offset");
    }
    let all: Vec<(Record, Appended)> = written[..17].iter().cloned().chain(again).collect();
    assert_holds_only(&store, &all, &[]);
}

/// A slave's appends of its master's bytes continue at the cut, at the dropped records'
/// queue offsets: a slave that received its master's records, cut back, receives them again.
#[test]
fn replicated_appends_continue_at_the_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = open(&small_config(&dir.path().join("master")));
    let written = fill(&master, 0, 40);
    let slave = open(&small_config(&dir.path().join("slave")));
    let copy = |from: u64| {
        let mut position = from;
        while position < master.stats().written_position {
            let chunk = master.read_log(position, 1 << 20).expect("read log");
            let end = slave
                .append_replicated(position, &chunk.bytes)
                .expect("replicate");
            assert_eq!(end, chunk.next_position);
            position = end;
        }
    };
    copy(0);
    let cut = written[11].1.position;
    slave.truncate_log(cut).expect("truncate");
    assert_holds_only(&slave, &written[..11], &written[11..]);
    copy(cut);
    assert_holds_only(&slave, &written, &[]);
}

#[test]
fn a_crash_right_after_a_truncate_does_not_bring_the_tail_back() {
    for flush in [
        FlushMode::Async {
            interval_ms: 10,
            least_pages: 0,
        },
        FlushMode::Sync { timeout_ms: 5_000 },
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = small_config(dir.path());
        config.flush = flush;
        let store = open(&config);
        let written = fill(&store, 0, 60);
        store.flush().expect("flush");
        let cut = written[9].1.position;
        let report = store.truncate_log(cut).expect("truncate");
        assert!(
            report.segments_removed >= 2,
            "the tail spans segments: {report:?}"
        );
        drop(store);
        let (store, recovery) = Store::open(config.clone()).expect("reopen");
        assert!(recovery.crashed);
        assert_eq!(store.stats().written_position, cut);
        let segments = std::fs::read_dir(&config.commitlog_dir)
            .expect("commitlog")
            .count();
        assert_eq!(segments as u64, cut / config.segment_bytes + 1);
        assert_holds_only(&store, &written[..9], &written[9..]);
        let again = fill(&store, 9, 12);
        assert_eq!(again[0].1, written[9].1);
    }
}

/// A crash part-way through a truncation leaves its intent on disk; the next open finishes it
/// from there, whatever the other files say.
#[test]
fn an_interrupted_truncation_is_finished_by_the_next_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path());
    let store = open(&config);
    let written = fill(&store, 0, 50);
    store.close().expect("close");
    let cut = written[14].1.position;
    let intent = dir.path().join("truncating");
    std::fs::write(&intent, format!("{cut}\n")).expect("intent");
    let (store, recovery) = Store::open(config.clone()).expect("reopen");
    assert!(
        recovery.problems.iter().any(|p| p.contains("truncation")),
        "{:?}",
        recovery.problems
    );
    assert!(!intent.exists(), "finished, the intent is removed");
    assert_eq!(store.stats().written_position, cut);
    assert_holds_only(&store, &written[..14], &written[14..]);
    drop(store);
    std::fs::write(&intent, b"not a position").expect("bad intent");
    assert!(
        Store::open(config).is_err(),
        "an unreadable intent stops the open"
    );
}

#[test]
fn positions_that_are_not_boundaries_inside_the_log_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path());
    let store = open(&config);
    let written = fill(&store, 0, 30);
    let end = store.stats().written_position;
    let refusals = [
        (end + 1, "outside"),
        (written[5].1.position + 1, "not where a record"),
        (written[5].1.position + 40, "not where a record"),
    ];
    for (position, expected) in refusals {
        let error = store.truncate_log(position).expect_err("refused");
        assert!(error.to_string().contains(expected), "{position}: {error}");
    }
    assert_eq!(store.stats().written_position, end, "nothing changed");
    assert_eq!(
        store.truncate_log(end),
        Ok(TruncateReport {
            position: end,
            dropped_from: end,
            segments_removed: 0,
            queues_rewound: 0
        })
    );
    // The end marker of the first segment, and the second segment's base, are boundaries.
    let first_in_second = written
        .iter()
        .position(|(_, a)| a.position >= config.segment_bytes)
        .expect("two segments");
    let last_in_first = &written[first_in_second - 1].1;
    let marker = last_in_first.position + u64::from(last_in_first.size);
    store
        .truncate_log(config.segment_bytes)
        .expect("segment base");
    store.truncate_log(marker).expect("end marker");
    assert_holds_only(
        &store,
        &written[..first_in_second],
        &written[first_in_second..],
    );
}

#[test]
fn a_position_below_the_logs_start_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = open(&small_config(&dir.path().join("master")));
    fill(&master, 0, 40);
    let slave = open(&small_config(&dir.path().join("slave")));
    let base = master.segment_bytes();
    let chunk = master.read_log(base, 1 << 20).expect("read log");
    slave
        .append_replicated(base, &chunk.bytes)
        .expect("replicate");
    assert!(matches!(
        slave.truncate_log(base - 1),
        Err(TruncateError::OutsideLog {
            min_position,
            ..
        }) if min_position == base
    ));
}

/// A topic deleted after the cut: its name's new records, written where the deleted ones
/// were, are not taken for records from before the deletion, after a crash either.
#[test]
fn a_topic_deleted_past_the_cut_gets_its_new_records_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path());
    let store = open(&config);
    fill(&store, 0, 5);
    let gone: Vec<Appended> = (0..3)
        .map(|_| {
            append(&store, vec![simple("Gone", 0, b"old")])
                .expect("append")
                .entries[0]
        })
        .collect();
    store.delete_topic("Gone").expect("delete");
    fill(&store, 5, 10);
    store.truncate_log(gone[1].position).expect("truncate");
    for i in 0..4u64 {
        let outcome = append(&store, vec![simple("Gone", 0, b"new")]).expect("append");
        assert_eq!(
            outcome.entries[0].queue_offset, i,
            "a new topic starts at 0"
        );
    }
    drop(store);
    let store = open(&config);
    assert_eq!(store.bounds("Gone", 0).max_offset, 4);
    let bodies: Vec<Vec<u8>> = read_queue_all(&store, "Gone", 0);
    assert_eq!(bodies.len(), 4);
}
