//! Master/slave replication through the store: a master's CommitLog bytes, read with
//! `read_log` in chunks of any size and cut into whole units as a slave's client would, applied
//! to a second store with `append_replicated`, leave that store serving what the master serves
//! from where the slave started: the same queues, offsets, keys and CommitLog bytes.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use quiver_record::{RecordView, MAGIC_BLANK};
use quiver_store::{
    Boundary, FlushMode, ReadError, ReadStatus, Record, ReplicaError, Store, StoreConfig,
};

const SEGMENT_BYTES: u64 = 64 * 1024;
/// Where QUEUEOFFSET lies in a record.
const QUEUE_OFFSET_AT: usize = 20;
const TOPICS: [&str; 2] = ["Orders", "Audit"];

fn config(root: &Path, segment_bytes: u64) -> StoreConfig {
    let mut config = small_config(root);
    config.segment_bytes = segment_bytes;
    config
}

fn open(root: &Path, segment_bytes: u64) -> Store {
    Store::open(config(root, segment_bytes)).expect("open").0
}

/// The `i`th record the tests send: two topics, three queues each, keys, tags and a UNIQ_KEY.
fn nth_record(i: usize) -> Record {
    let body = vec![b'a' + (i % 26) as u8; 60 + (i * 37) % 1500];
    let key = format!("K{i}");
    let group_key = format!("G{}", i % 7);
    let uniq = format!("U{i}");
    let keys = [key.as_str(), group_key.as_str()];
    record(Spec {
        topic: TOPICS[i % 2],
        queue_id: (i / 2 % 3) as u32,
        body: &body,
        store_timestamp_ms: 1_700_000_000_000 + i as i64,
        tags: Some(if i.is_multiple_of(3) { "TagA" } else { "TagB" }),
        keys: &keys,
        uniq_key: Some(&uniq),
    })
}

/// Appends records `from..to` to the master, every fifth request a batch of three records of
/// one queue.
fn fill(master: &Store, from: usize, to: usize) {
    let mut i = from;
    while i < to {
        let batch = if i.is_multiple_of(5) {
            3.min(to - i)
        } else {
            1
        };
        let first = nth_record(i);
        let records: Vec<Record> = (0..batch)
            .map(|k| {
                let mut r = nth_record(i + k);
                if k > 0 {
                    // A batch goes to one queue.
                    let body = format!("batch {i} record {k}");
                    r = record(Spec {
                        topic: TOPICS[i % 2],
                        queue_id: first.queue_id,
                        body: body.as_bytes(),
                        store_timestamp_ms: first.store_timestamp_ms,
                        keys: &[],
                        uniq_key: Some(&format!("U{}", i + k)),
                        tags: None,
                    });
                }
                r
            })
            .collect();
        append(master, records).expect("append to the master");
        i += batch;
    }
}

/// The length of the whole units at the head of `buffer` (which starts at a unit): what a
/// slave's client hands to `append_replicated`. A blank marker's unit runs to the end of its
/// master's segment, which its TOTALSIZE gives.
fn whole_units(buffer: &[u8]) -> usize {
    let mut at = 0;
    while buffer.len() - at >= 8 {
        let total = i32::from_be_bytes(buffer[at..at + 4].try_into().expect("4 bytes"));
        assert!(total > 0, "a unit has a size");
        let unit = total as usize;
        if buffer.len() - at < unit {
            break;
        }
        at += unit;
    }
    at
}

/// A slave's client: fetches from `fetch_at`, keeps what does not yet form a whole unit.
struct Client {
    fetch_at: u64,
    buffer: Vec<u8>,
    buffer_at: u64,
}

impl Client {
    fn at(position: u64) -> Client {
        Client {
            fetch_at: position,
            buffer: Vec::new(),
            buffer_at: position,
        }
    }

    /// Copies everything the master has to the slave, fetching chunks of the sizes `chunks`
    /// gives in turn.
    fn catch_up(&mut self, master: &Store, slave: &Store, chunks: &[usize]) {
        for &chunk_bytes in chunks.iter().cycle() {
            let chunk = master
                .read_log(self.fetch_at, chunk_bytes)
                .expect("read the master's log");
            assert_eq!(chunk.position, self.fetch_at);
            assert_eq!(
                chunk.next_position,
                chunk.position + chunk.bytes.len() as u64
            );
            if chunk.bytes.is_empty() {
                assert!(
                    self.buffer.is_empty(),
                    "the master's log ends in a whole unit"
                );
                return;
            }
            self.fetch_at = chunk.next_position;
            self.buffer.extend_from_slice(&chunk.bytes);
            let whole = whole_units(&self.buffer);
            if whole > 0 {
                let written = slave
                    .append_replicated(self.buffer_at, &self.buffer[..whole])
                    .expect("the slave takes whole units");
                self.buffer_at += whole as u64;
                assert_eq!(written, self.buffer_at);
                self.buffer.drain(..whole);
            }
        }
    }
}

/// Brings the slave up to the master from where its log ends (0 when it holds nothing).
fn replicate(master: &Store, slave: &Store, chunks: &[usize]) {
    Client::at(slave.stats().written_position).catch_up(master, slave, chunks);
}

/// Starts an empty slave where RocketMQ's master starts one: at the base of its last segment.
/// Returns that position.
fn start_new_slave(master: &Store, slave: &Store, chunks: &[usize]) -> u64 {
    let written = master.stats().written_position;
    let start = written - written % master.segment_bytes();
    Client::at(start).catch_up(master, slave, chunks);
    start
}

/// (topic, queue id) of a record unit.
fn queue_of(unit: &[u8]) -> (String, u32) {
    let view = RecordView::parse(unit).expect("a record");
    (view.topic.to_string(), view.queue_id as u32)
}

fn physical_offset(record: &[u8]) -> u64 {
    u64::from_be_bytes(record[28..36].try_into().expect("8 bytes"))
}

fn queue_offset(record: &[u8]) -> u64 {
    u64::from_be_bytes(
        record[QUEUE_OFFSET_AT..QUEUE_OFFSET_AT + 8]
            .try_into()
            .expect("8 bytes"),
    )
}

/// The slave serves what the master does from `start` on: each queue's records stored there
/// (by offset and bytes), its bounds, keys, and the CommitLog byte for byte.
fn assert_replica_matches(master: &Store, slave: &Store, start: u64) {
    let (m, s) = (master.stats(), slave.stats());
    assert_eq!(s.written_position, m.written_position, "written positions");
    assert_eq!(
        s.min_position,
        start.max(m.min_position),
        "slave's first position"
    );
    for (topic, queue_id) in master.queues() {
        let expected: Vec<Vec<u8>> = read_queue_all(master, &topic, queue_id)
            .into_iter()
            .filter(|r| physical_offset(r) >= s.min_position)
            .collect();
        let bounds = slave.bounds(&topic, queue_id);
        let Some(first) = expected.first() else {
            continue;
        };
        assert_eq!(
            bounds.min_offset,
            queue_offset(first),
            "{topic}:{queue_id} min offset"
        );
        assert_eq!(
            bounds.max_offset,
            master.bounds(&topic, queue_id).max_offset,
            "{topic}:{queue_id} max offset"
        );
        assert_eq!(
            read_queue_all(slave, &topic, queue_id),
            expected,
            "{topic}:{queue_id} records"
        );
    }
    for key in ["G0", "G3", "K5", "U7", "U1000", "K1500"] {
        for topic in TOPICS {
            let on_master: Vec<Vec<u8>> = master
                .query_by_key(topic, key, 64, 0, i64::MAX)
                .expect("query the master")
                .into_iter()
                .filter(|r| physical_offset(r) >= s.min_position)
                .collect();
            let on_slave = slave
                .query_by_key(topic, key, 64, 0, i64::MAX)
                .expect("query the slave");
            assert_eq!(on_slave, on_master, "key {key} in {topic}");
        }
    }
    assert_eq!(
        log_bytes(slave, s.min_position),
        log_bytes(master, s.min_position)
    );
}

fn log_bytes(store: &Store, mut position: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let chunk = store.read_log(position, 1 << 20).expect("read_log");
        if chunk.bytes.is_empty() {
            return out;
        }
        out.extend_from_slice(&chunk.bytes);
        position = chunk.next_position;
    }
}

/// What a refused call must leave as it was.
fn snapshot(store: &Store) -> (u64, Vec<(String, u32, u64, u64)>) {
    let stats = store.stats();
    let mut queues: Vec<_> = store
        .queues()
        .into_iter()
        .map(|(topic, queue_id)| {
            let b = store.bounds(&topic, queue_id);
            (topic, queue_id, b.min_offset, b.max_offset)
        })
        .filter(|(_, _, _, max)| *max > 0)
        .collect();
    queues.sort();
    (stats.written_position, queues)
}

/// `bytes`, whole units from a segment's base or a record, split into units.
fn units(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let n = i32::from_be_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
        out.push(bytes[..n].to_vec());
        bytes = &bytes[n..];
    }
    out
}

#[test]
fn a_slave_serves_what_its_master_does_across_segments_and_chunk_sizes() {
    let (master_dir, slave_dir) = (tempdir(), tempdir());
    let master = open(master_dir.path(), SEGMENT_BYTES);
    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    let arrivals: Arc<Mutex<HashMap<(String, u32), u64>>> = Arc::default();
    let seen = Arc::clone(&arrivals);
    slave.set_arrival_listener(Arc::new(move |topic, queue_id, max_offset| {
        let mut seen = seen.lock().expect("lock");
        seen.insert((topic.to_string(), queue_id), max_offset);
    }));

    fill(&master, 0, 400);
    assert!(master.stats().written_position > 3 * SEGMENT_BYTES);
    replicate(&master, &slave, &[1, 7, 100, 4096, 70_000, 333]);
    assert_replica_matches(&master, &slave, 0);
    // Appends go on; the slave follows from where it stopped.
    fill(&master, 400, 600);
    replicate(&master, &slave, &[SEGMENT_BYTES as usize, 50]);
    assert_replica_matches(&master, &slave, 0);

    let arrivals = arrivals.lock().expect("lock");
    for (topic, queue_id) in master.queues() {
        assert_eq!(
            arrivals.get(&(topic.clone(), queue_id)),
            Some(&master.bounds(&topic, queue_id).max_offset),
            "parked pulls on {topic}:{queue_id} were told of the last arrival"
        );
    }
}

#[test]
fn a_new_slave_starts_at_the_masters_last_segment_with_queues_past_offset_zero() {
    let (master_dir, slave_dir) = (tempdir(), tempdir());
    let master = open(master_dir.path(), SEGMENT_BYTES);
    fill(&master, 0, 500);
    let written = master.stats().written_position;
    assert!(written > 3 * SEGMENT_BYTES, "several segments");
    let start = written - written % SEGMENT_BYTES;

    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    assert_eq!(start_new_slave(&master, &slave, &[5000, 13]), start);
    assert_eq!(slave.stats().min_position, start);
    assert_replica_matches(&master, &slave, start);
    for (topic, queue_id) in slave.queues() {
        let bounds = slave.bounds(&topic, queue_id);
        assert!(bounds.min_offset > 0, "{topic}:{queue_id} starts past 0");
        // Below the start: too small, as after retention.
        let read = slave
            .read(&topic, queue_id, 0, 1, u32::MAX, &accept_all)
            .expect("read");
        assert_eq!(read.status, ReadStatus::OffsetTooSmall);
        assert_eq!(read.next_offset, bounds.min_offset);
    }
    // Time lookups and the earliest time see the queue's first record, not offset 0.
    let (topic, queue_id) = slave.queues()[0].clone();
    let min = slave.bounds(&topic, queue_id).min_offset;
    let first = read_queue_all(&slave, &topic, queue_id).remove(0);
    let first_time = RecordView::parse(&first)
        .expect("record")
        .store_timestamp_ms;
    assert_eq!(
        slave.earliest_time(&topic, queue_id).expect("earliest"),
        Some(first_time)
    );
    assert_eq!(
        slave
            .offset_by_time(&topic, queue_id, 0, Boundary::Lower)
            .expect("by time"),
        min
    );

    // Clean reopen, then a crash (drop without close): the same queues from the same offsets.
    slave.close().expect("close");
    drop(slave);
    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    assert_replica_matches(&master, &slave, start);
    fill(&master, 500, 700);
    replicate(&master, &slave, &[777]);
    drop(slave);
    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    assert_replica_matches(&master, &slave, start);

    // Retention on the slave: its first segment goes, the queues' min offsets rise.
    fill(&master, 700, 900);
    replicate(&master, &slave, &[9000]);
    let report = slave
        .delete_expired(0, 0, true)
        .expect("retention on the slave");
    assert!(report.segments_deleted > 0);
    assert_replica_matches(&master, &slave, report.min_position);
    drop(slave);
    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    assert_replica_matches(&master, &slave, report.min_position);
}

#[test]
fn a_slave_reopened_mid_replication_goes_on_from_its_last_whole_record() {
    let (master_dir, slave_dir) = (tempdir(), tempdir());
    let master = open(master_dir.path(), SEGMENT_BYTES);
    fill(&master, 0, 300);
    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    let mut client = Client::at(0);
    // Part of the log only: the client stops after a few chunks.
    for _ in 0..20 {
        let chunk = master.read_log(client.fetch_at, 3000).expect("read");
        client.fetch_at = chunk.next_position;
        client.buffer.extend_from_slice(&chunk.bytes);
        let whole = whole_units(&client.buffer);
        slave
            .append_replicated(client.buffer_at, &client.buffer[..whole])
            .expect("append");
        client.buffer_at += whole as u64;
        client.buffer.drain(..whole);
    }
    let written = slave.stats().written_position;
    assert!(written > 0);
    slave.close().expect("close");
    drop(slave);
    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    assert_eq!(slave.stats().written_position, written);
    replicate(&master, &slave, &[4000]);
    assert_replica_matches(&master, &slave, 0);

    // A crash that tore the last write: recovery cuts the torn record, and the slave fetches
    // it again from its last whole record.
    fill(&master, 300, 400);
    let written = slave.stats().written_position;
    let chunk = master.read_log(written, 5000).expect("read");
    let whole = whole_units(&chunk.bytes);
    slave
        .append_replicated(written, &chunk.bytes[..whole])
        .expect("append");
    let whole_end = written + whole as u64;
    drop(slave);
    // The first 100 bytes of the next record, where it would have gone.
    let torn = master.read_log(whole_end, 100).expect("read").bytes;
    assert_eq!(torn.len(), 100);
    let segment = slave_dir
        .path()
        .join("commitlog")
        .join(format!("{:020}", whole_end - whole_end % SEGMENT_BYTES));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&segment)
        .expect("segment");
    std::os::unix::fs::FileExt::write_all_at(&file, &torn, whole_end % SEGMENT_BYTES)
        .expect("torn write");
    drop(file);
    let (slave, report) = Store::open(config(slave_dir.path(), SEGMENT_BYTES)).expect("reopen");
    assert!(report.crashed);
    assert_eq!(report.truncated_bytes, 100);
    assert_eq!(report.commitlog_end, whole_end);
    assert_eq!(slave.stats().written_position, whole_end);
    replicate(&master, &slave, &[1234]);
    assert_replica_matches(&master, &slave, 0);
}

#[test]
fn refused_bytes_publish_nothing_and_a_correct_retry_succeeds() {
    let (master_dir, slave_dir) = (tempdir(), tempdir());
    let master = open(master_dir.path(), SEGMENT_BYTES);
    fill(&master, 0, 30);
    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    let arrivals = Arc::new(Mutex::new(0usize));
    let counted = Arc::clone(&arrivals);
    slave.set_arrival_listener(Arc::new(move |_, _, _| {
        *counted.lock().expect("lock") += 1;
    }));
    let log = log_bytes(&master, 0);
    let all = units(&log);
    // The first twenty records make the slave's state; the next ones are sent wrongly first.
    let head: Vec<u8> = all[..20].concat();
    assert_eq!(
        slave.append_replicated(0, &head).expect("head"),
        head.len() as u64
    );
    let at = head.len() as u64;
    let next_units = &all[20..24];
    let next: Vec<u8> = next_units.concat();
    let before = snapshot(&slave);
    let arrivals_before = *arrivals.lock().expect("lock");
    let refused = |slave: &Store, error: ReplicaError| {
        assert_eq!(snapshot(slave), before, "{error} published nothing");
        assert_eq!(*arrivals.lock().expect("lock"), arrivals_before);
        assert!(slave.read_log(at, 1 << 20).expect("read").bytes.is_empty());
        for unit in next_units {
            let view = RecordView::parse(unit).expect("record");
            view.for_each_key(|key| {
                let found = slave
                    .query_by_key(view.topic, key, 64, 0, i64::MAX)
                    .expect("query");
                assert!(
                    found.iter().all(|r| physical_offset(r) < at),
                    "{error}: key {key} found"
                );
            });
        }
    };

    // Not at the written position.
    let error = slave
        .append_replicated(at + 1, &next)
        .expect_err("wrong position");
    assert_eq!(
        error,
        ReplicaError::PositionMismatch {
            expected: at,
            got: at + 1
        }
    );
    refused(&slave, error);

    // A flipped body byte in the last of four records: the three before it go neither.
    let mut bad_crc = next.clone();
    let last = next.len() - next_units[3].len();
    let body_at = {
        let view = RecordView::parse(&next_units[3]).expect("record");
        assert!(!view.body.is_empty());
        view.body.as_ptr() as usize - next_units[3].as_ptr() as usize
    };
    bad_crc[last + body_at] ^= 0x40;
    let error = slave.append_replicated(at, &bad_crc).expect_err("bad CRC");
    assert!(
        matches!(&error, ReplicaError::BadRecord { position, reason }
            if *position == at + last as u64 && reason.contains("BODYCRC")),
        "{error}"
    );
    refused(&slave, error);

    // A QUEUEOFFSET one past its queue's next (the CRC does not cover it), in a queue the
    // slave holds entries of.
    let (gap_unit, gap_at) = (0..next_units.len())
        .map(|j| (j, next_units[..j].iter().map(Vec::len).sum::<usize>()))
        .find(|&(j, _)| {
            let queue = queue_of(&next_units[j]);
            slave.bounds(&queue.0, queue.1).max_offset > 0
                && next_units[..j].iter().all(|u| queue_of(u) != queue)
        })
        .expect("a record of a queue the slave holds");
    let (topic, queue_id) = queue_of(&next_units[gap_unit]);
    let expected = slave.bounds(&topic, queue_id).max_offset;
    assert_eq!(queue_offset(&next_units[gap_unit]), expected);
    let mut gap = next.clone();
    gap[gap_at + QUEUE_OFFSET_AT..gap_at + QUEUE_OFFSET_AT + 8]
        .copy_from_slice(&(expected + 1).to_be_bytes());
    let error = slave.append_replicated(at, &gap).expect_err("gap");
    assert_eq!(
        error,
        ReplicaError::QueueOffsetGap {
            topic,
            queue_id,
            expected,
            got: expected + 1,
            position: at + gap_at as u64,
        }
    );
    refused(&slave, error);

    // Bytes that end inside a record.
    let error = slave
        .append_replicated(at, &next[..next.len() - 1])
        .expect_err("torn");
    assert!(matches!(error, ReplicaError::Torn { .. }), "{error}");
    refused(&slave, error);

    // The right bytes are taken.
    let written = slave.append_replicated(at, &next).expect("retry");
    assert_eq!(written, at + next.len() as u64);
    assert!(*arrivals.lock().expect("lock") > arrivals_before);
    replicate(&master, &slave, &[10_000]);
    assert_replica_matches(&master, &slave, 0);

    // An empty store starts at a segment base only.
    let empty_dir = tempdir();
    let empty = open(empty_dir.path(), SEGMENT_BYTES);
    let error = empty
        .append_replicated(SEGMENT_BYTES + 8, &next)
        .expect_err("not a segment base");
    assert_eq!(
        error,
        ReplicaError::NotSegmentBase {
            position: SEGMENT_BYTES + 8,
            segment_bytes: SEGMENT_BYTES
        }
    );
    assert_eq!(empty.stats().written_position, 0);
    assert!(empty.queues().is_empty());
}

/// A marker or a record that does not end at this store's segment end is refused, with
/// nothing kept; the whole units before it are taken on a retry without it.
#[test]
fn a_master_with_another_segment_size_is_refused() {
    for (master_segment_bytes, slave_segment_bytes) in [(8192, 4096), (4096, 8192)] {
        let (master_dir, slave_dir) = (tempdir(), tempdir());
        let master = open(master_dir.path(), master_segment_bytes);
        fill(&master, 0, 40);
        let slave = open(slave_dir.path(), slave_segment_bytes);
        let log = log_bytes(&master, 0);
        let all = units(&log);
        // The first unit that does not fit: a record across the slave's smaller segment end,
        // or the master's marker, short of the slave's larger one.
        let mut end = 0u64;
        let bad = all
            .iter()
            .position(|unit| {
                let left = slave_segment_bytes - end % slave_segment_bytes;
                let blank = i32::from_be_bytes(unit[4..8].try_into().expect("4")) == MAGIC_BLANK;
                let fits = if blank {
                    unit.len() as u64 == left
                } else {
                    unit.len() as u64 + 8 <= left
                };
                end += unit.len() as u64;
                !fits
            })
            .expect("a unit that does not fit");
        let good: Vec<u8> = all[..bad].concat();
        let with_bad: Vec<u8> = all[..=bad].concat();
        let error = slave
            .append_replicated(0, &with_bad)
            .expect_err("another segment size");
        assert!(
            matches!(&error, ReplicaError::SegmentSizeMismatch { position, segment_bytes, .. }
                if *position == good.len() as u64 && *segment_bytes == slave_segment_bytes),
            "{error}"
        );
        assert_eq!(slave.stats().written_position, 0);
        assert!(slave
            .queues()
            .iter()
            .all(|(t, q)| slave.bounds(t, *q).max_offset == 0));
        if !good.is_empty() {
            let written = slave
                .append_replicated(0, &good)
                .expect("the units that fit");
            assert_eq!(written, good.len() as u64);
        }
    }
}

#[test]
fn a_normal_append_after_replicated_bytes_goes_on_from_them() {
    let (master_dir, slave_dir) = (tempdir(), tempdir());
    let master = open(master_dir.path(), SEGMENT_BYTES);
    fill(&master, 0, 200);
    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    // The whole first segment: records, its end marker and the padding to its end.
    let first = master
        .read_log(0, SEGMENT_BYTES as usize)
        .expect("read the first segment");
    assert_eq!(first.bytes.len() as u64, SEGMENT_BYTES);
    let marker_at = units(&first.bytes)
        .iter()
        .take_while(|u| i32::from_be_bytes(u[4..8].try_into().expect("4")) != MAGIC_BLANK)
        .map(Vec::len)
        .sum::<usize>();
    assert!(
        first.bytes[marker_at + 8..].iter().all(|b| *b == 0),
        "padding reads as zeros"
    );
    assert_eq!(
        slave.append_replicated(0, &first.bytes).expect("append"),
        SEGMENT_BYTES
    );
    let bounds = slave.bounds(TOPICS[0], 0);
    let appended = append(&slave, vec![nth_record(0)]).expect("a normal append");
    assert_eq!(appended.entries[0].position, SEGMENT_BYTES);
    assert_eq!(appended.entries[0].queue_offset, bounds.max_offset);
    slave.close().expect("close");
    drop(slave);
    let slave = open(slave_dir.path(), SEGMENT_BYTES);
    assert_eq!(slave.bounds(TOPICS[0], 0).max_offset, bounds.max_offset + 1);
    let last = read_queue_all(&slave, TOPICS[0], 0)
        .pop()
        .expect("a record");
    assert_eq!(physical_offset(&last), SEGMENT_BYTES);
}

#[test]
fn read_log_stays_within_a_segment_and_the_written_position() {
    let dir = tempdir();
    let master = open(dir.path(), SEGMENT_BYTES);
    let empty = master.read_log(0, 100).expect("empty store");
    assert!(empty.bytes.is_empty());
    assert_eq!(empty.next_position, 0);
    fill(&master, 0, 200);
    let written = master.stats().written_position;
    let chunk = master.read_log(SEGMENT_BYTES - 10, 1000).expect("read");
    assert_eq!(
        chunk.next_position, SEGMENT_BYTES,
        "a chunk ends at a segment end"
    );
    assert_eq!(chunk.bytes, vec![0; 10], "padding after the end marker");
    let tail = master.read_log(written - 5, 1000).expect("read");
    assert_eq!(tail.bytes.len(), 5);
    assert!(master
        .read_log(written, 1000)
        .expect("at the end")
        .bytes
        .is_empty());
    assert!(matches!(
        master.read_log(written + 1, 1000),
        Err(ReadError::PastWrittenPosition { position, written_position })
            if position == written + 1 && written_position == written
    ));
    let report = master.delete_expired(0, 0, true).expect("retention");
    assert!(report.segments_deleted > 0);
    assert!(matches!(
        master.read_log(0, 1000),
        Err(ReadError::BelowMinPosition { position: 0, min_position })
            if min_position == report.min_position
    ));
}

/// A slave's report says what it has written, as RocketMQ's do; its fsync follows on the
/// store's sync thread, so the next bytes need not wait for it.
#[test]
fn with_sync_flush_replicated_bytes_are_fsynced_by_the_sync_thread_soon_after() {
    let (master_dir, slave_dir) = (tempdir(), tempdir());
    let master = open(master_dir.path(), SEGMENT_BYTES);
    fill(&master, 0, 100);
    let mut slave_config = config(slave_dir.path(), SEGMENT_BYTES);
    slave_config.flush = FlushMode::Sync { timeout_ms: 5000 };
    let (slave, _) = Store::open(slave_config).expect("open");
    let chunk = master.read_log(0, 20_000).expect("read");
    let whole = whole_units(&chunk.bytes);
    let fsyncs_before = slave.commitlog_fsyncs();
    let written = slave
        .append_replicated(0, &chunk.bytes[..whole])
        .expect("append");
    flushed_within(&slave, written, Duration::from_secs(10));
    assert!(slave.commitlog_fsyncs() > fsyncs_before);
    replicate(&master, &slave, &[30_000]);
    flushed_within(
        &slave,
        slave.stats().written_position,
        Duration::from_secs(10),
    );
    assert_replica_matches(&master, &slave, 0);
}

/// Waits until the store's flushed position reaches `position`, failing past `deadline`.
fn flushed_within(store: &Store, position: u64, deadline: Duration) {
    let until = std::time::Instant::now() + deadline;
    while store.stats().flushed_position < position {
        assert!(
            std::time::Instant::now() < until,
            "flushed {} of {position} after {deadline:?}",
            store.stats().flushed_position
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_closed_store_refuses_replicated_bytes() {
    let dir = tempdir();
    let store = open(dir.path(), SEGMENT_BYTES);
    store.close().expect("close");
    assert_eq!(store.append_replicated(0, &[]), Err(ReplicaError::Closed));
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Any chunking of the master's log, any segment size, a slave from the start or from the
    /// master's last segment: the same queues, keys and bytes.
    #[test]
    fn any_chunking_replicates_the_master(
        segment_bytes in prop::sample::select(vec![4096u64, 8192, 65_536]),
        records in 20usize..160,
        chunks in prop::collection::vec(1usize..20_000, 1..6),
        from_last_segment in any::<bool>(),
        reopen in 0u8..3,
    ) {
        let (master_dir, slave_dir) = (tempdir(), tempdir());
        let master = open(master_dir.path(), segment_bytes);
        fill(&master, 0, records);
        let mut slave = open(slave_dir.path(), segment_bytes);
        let start = if from_last_segment {
            start_new_slave(&master, &slave, &chunks)
        } else {
            replicate(&master, &slave, &chunks);
            0
        };
        assert_replica_matches(&master, &slave, start);
        fill(&master, records, records + 40);
        // 0: none; 1: close and open; 2: a crash (drop without close) and open.
        if reopen == 1 {
            slave.close().expect("close");
        }
        if reopen > 0 {
            drop(slave);
            slave = open(slave_dir.path(), segment_bytes);
        }
        replicate(&master, &slave, &chunks);
        assert_replica_matches(&master, &slave, start);
    }
}
