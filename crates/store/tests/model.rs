//! Model-based test: random appends, reads, topic deletions, clean reopens, crashes (with torn
//! tails and garbage) and flushes, checked against a plain in-memory model of every queue.

mod common;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use common::*;
use proptest::prelude::*;
use quiver_record::tags_code;
use quiver_store::{FlushMode, ReadStatus, Store, StoreConfig};

const TOPICS: [&str; 2] = ["Alpha", "Beta"];

#[derive(Clone, Debug)]
enum Op {
    /// (topic, queue, body length, tagged) per record of one batch.
    Append(Vec<(usize, u32, usize, bool)>),
    Read {
        topic: usize,
        queue_id: u32,
        offset: u16,
    },
    Reopen,
    /// Drop without close; then cut the last segment at a fraction of what lies past the flushed
    /// position, and/or append garbage.
    Crash {
        cut: Option<f64>,
        garbage_bytes: Option<usize>,
    },
    FlushWait,
    /// Deletes the topic; appends to it afterwards start a new topic at offset 0.
    Delete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => prop::collection::vec((0..2usize, 0..3u32, 0..300usize, any::<bool>()), 1..5)
            .prop_map(Op::Append),
        3 => (0..2usize, 0..3u32, any::<u16>())
            .prop_map(|(topic, queue_id, offset)| Op::Read { topic, queue_id, offset }),
        1 => Just(Op::Reopen),
        2 => (prop::option::of(0.0..1.0f64), prop::option::of(1..64usize))
            .prop_map(|(cut, garbage_bytes)| Op::Crash { cut, garbage_bytes }),
        1 => Just(Op::FlushWait),
        1 => (0..2usize).prop_map(Op::Delete),
    ]
}

/// Stored bytes, position and size of each record, per (topic, queue).
type Model = BTreeMap<(String, u32), Vec<(Vec<u8>, u64, u32)>>;

/// `background_flush`: when false the flusher stays idle, so the flushed position at a crash is
/// exactly the one the test read and FlushWait is the only flush; when true it runs every few
/// milliseconds, racing the crash (checkpoints may then lie past a later cut).
fn config(root: &Path, background_flush: bool) -> StoreConfig {
    let mut config = small_config(root);
    config.consume_queue_entries_per_file = 8;
    config.index_slots = 16;
    config.index_entries_max = 32;
    let interval_ms = if background_flush { 3 } else { 600_000 };
    config.flush = FlushMode::Async {
        interval_ms,
        least_pages: 0,
    };
    config
}

fn read_all(store: &Store, topic: &str, queue_id: u32) -> Vec<Vec<u8>> {
    let mut offset = store.bounds(topic, queue_id).min_offset;
    assert_eq!(offset, 0);
    let mut out = Vec::new();
    loop {
        let read = store
            .read(topic, queue_id, offset, 5, u32::MAX, &accept_all)
            .expect("read");
        match read.status {
            ReadStatus::Found => {
                out.extend(split(&read.bytes));
                offset = read.next_offset;
            }
            ReadStatus::OffsetOverflowOne | ReadStatus::NoMessageInQueue => return out,
            other => panic!("{topic}/{queue_id} at {offset}: {other:?}"),
        }
    }
}

/// Checks the reopened store against the model and shrinks the model to what survived.
/// `kept_below`: every record ending at or below this position must have survived.
fn check_reopened(
    store: &Store,
    model: &mut Model,
    kept_below: Option<u64>,
    gone: &[(&str, String)],
) {
    for (topic, key) in gone.iter().rev().take(4) {
        let found = store
            .query_by_key(topic, key, 4, 0, i64::MAX)
            .expect("query");
        assert!(
            found.is_empty(),
            "deleted {topic} record {key} found by key"
        );
    }
    for (topic, queue_id) in store.queues() {
        assert!(
            model.contains_key(&(topic.clone(), queue_id))
                || store.bounds(&topic, queue_id).max_offset == 0,
            "unexpected queue {topic}/{queue_id}"
        );
    }
    for ((topic, queue_id), records) in model.iter_mut() {
        let got = read_all(store, topic, *queue_id);
        assert!(got.len() <= records.len(), "{topic}/{queue_id} grew");
        for (i, bytes) in got.iter().enumerate() {
            assert_eq!(
                bytes, &records[i].0,
                "{topic}/{queue_id} offset {i} differs"
            );
            assert_eq!(
                &store.read_record(records[i].1).expect("read_record"),
                bytes
            );
        }
        match kept_below {
            None => assert_eq!(got.len(), records.len(), "{topic}/{queue_id} lost records"),
            Some(flushed) => {
                let must = records
                    .iter()
                    .filter(|(_, p, s)| p + u64::from(*s) <= flushed)
                    .count();
                assert!(got.len() >= must, "{topic}/{queue_id} lost flushed records");
            }
        }
        records.truncate(got.len());
        assert_eq!(store.bounds(topic, *queue_id).max_offset, got.len() as u64);
    }
}

fn damage_last_segment(root: &Path, flushed: u64, cut: Option<f64>, garbage_bytes: Option<usize>) {
    let mut segments: Vec<_> = std::fs::read_dir(root.join("commitlog"))
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    segments.sort();
    let Some(last) = segments.pop() else { return };
    let base: u64 = last
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .expect("name");
    let length = std::fs::metadata(&last).expect("metadata").len();
    if let Some(fraction) = cut {
        let keep = flushed.saturating_sub(base).min(length);
        let new_length = keep + ((length - keep) as f64 * fraction) as u64;
        OpenOptions::new()
            .write(true)
            .open(&last)
            .expect("open")
            .set_len(new_length)
            .expect("cut");
    }
    if let Some(n) = garbage_bytes {
        let garbage: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
        OpenOptions::new()
            .append(true)
            .open(&last)
            .expect("open")
            .write_all(&garbage)
            .expect("garbage");
    }
}

fn run(ops: Vec<Op>, background_flush: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = Store::open(config(dir.path(), background_flush)).expect("open");
    let mut model = Model::new();
    let mut serial = 0u64;
    // Keys of the records of each topic since its last deletion, and of the deleted ones.
    let mut keys: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut gone: Vec<(&str, String)> = Vec::new();
    for op in ops {
        match op {
            Op::Append(batch) => {
                let uniq: Vec<String> = batch
                    .iter()
                    .map(|_| {
                        serial += 1;
                        format!("U{serial}")
                    })
                    .collect();
                let records: Vec<_> = batch
                    .iter()
                    .zip(&uniq)
                    .map(|((topic, queue_id, body_bytes, tagged), uniq)| {
                        let body = vec![(*body_bytes % 251) as u8; *body_bytes];
                        record(Spec {
                            topic: TOPICS[*topic],
                            queue_id: *queue_id,
                            body: &body,
                            tags: tagged.then_some("Tag"),
                            uniq_key: Some(uniq),
                            ..Spec::default()
                        })
                    })
                    .collect();
                let outcome = append(&store, records.clone()).expect("append");
                for ((topic, ..), uniq) in batch.iter().zip(&uniq) {
                    keys.entry(TOPICS[*topic]).or_default().push(uniq.clone());
                }
                for (r, a) in records.iter().zip(&outcome.entries) {
                    let queue = model.entry((r.topic.clone(), r.queue_id)).or_default();
                    assert_eq!(
                        a.queue_offset,
                        queue.len() as u64,
                        "offsets are consecutive"
                    );
                    queue.push((stored(r, a.queue_offset, a.position), a.position, a.size));
                }
                let last = records.last().expect("non-empty batch");
                let found = store
                    .query_by_key(&last.topic, uniq.last().expect("uniq"), 4, 0, i64::MAX)
                    .expect("query");
                assert_eq!(found.len(), 1);
            }
            Op::Read {
                topic,
                queue_id,
                offset,
            } => {
                let topic = TOPICS[topic];
                let records = model
                    .get(&(topic.to_string(), queue_id))
                    .cloned()
                    .unwrap_or_default();
                let offset = u64::from(offset) % (records.len() as u64 + 2);
                let tagged = tags_code("Tag");
                let read = store
                    .read(topic, queue_id, offset, 3, u32::MAX, &|_| true)
                    .expect("read");
                let len = records.len() as u64;
                if offset < len {
                    assert_eq!(read.status, ReadStatus::Found);
                    let got = split(&read.bytes);
                    let want: Vec<_> = records[offset as usize..]
                        .iter()
                        .take(3)
                        .map(|r| r.0.clone())
                        .collect();
                    assert_eq!(got, want);
                    assert_eq!(read.next_offset, offset + want.len() as u64);
                    let filtered = store
                        .read(topic, queue_id, offset, 3, u32::MAX, &|c| c == tagged)
                        .expect("read");
                    assert!(filtered.next_offset > offset);
                } else if len == 0 {
                    let status = if offset == 0 {
                        ReadStatus::NoMessageInQueue
                    } else {
                        ReadStatus::OffsetOverflowBadly
                    };
                    assert_eq!((read.status, read.next_offset), (status, 0));
                } else if offset == len {
                    assert_eq!(
                        (read.status, read.next_offset),
                        (ReadStatus::OffsetOverflowOne, len)
                    );
                } else {
                    assert_eq!(
                        (read.status, read.next_offset),
                        (ReadStatus::OffsetOverflowBadly, len)
                    );
                }
            }
            Op::Reopen => {
                store.close().expect("close");
                drop(store);
                let (reopened, report) =
                    Store::open(config(dir.path(), background_flush)).expect("reopen");
                assert!(!report.crashed && report.problems.is_empty(), "{report:?}");
                store = reopened;
                check_reopened(&store, &mut model, None, &gone);
            }
            Op::Crash { cut, garbage_bytes } => {
                let flushed = store.stats().flushed_position;
                drop(store);
                damage_last_segment(dir.path(), flushed, cut, garbage_bytes);
                let (reopened, report) =
                    Store::open(config(dir.path(), background_flush)).expect("reopen after crash");
                assert!(report.crashed);
                assert!(report.problems.is_empty(), "{:?}", report.problems);
                store = reopened;
                check_reopened(&store, &mut model, Some(flushed), &gone);
            }
            Op::Delete(topic) => {
                let topic = TOPICS[topic];
                let queues = model.keys().filter(|(t, _)| t == topic).count();
                let deletion = store.delete_topic(topic).expect("delete");
                assert!(
                    deletion.queues >= queues,
                    "{deletion:?}: {queues} in the model"
                );
                model.retain(|(t, _), _| t != topic);
                for key in keys.remove(topic).unwrap_or_default() {
                    gone.push((topic, key));
                }
                assert!(store.queues().iter().all(|(t, _)| t != topic));
                check_reopened(&store, &mut model, None, &gone);
            }
            Op::FlushWait => {
                store.flush().expect("flush");
                let stats = store.stats();
                assert_eq!(stats.flushed_position, stats.written_position);
            }
        }
    }
    store.close().expect("close");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_model_across_reopens_and_crashes(
        ops in prop::collection::vec(op(), 1..40),
        background_flush in any::<bool>(),
    ) {
        run(ops, background_flush);
    }
}
