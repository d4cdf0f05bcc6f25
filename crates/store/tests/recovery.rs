mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use common::*;
use quiver_store::{Appended, ReadError, ReadStatus, Record, Store};

/// Appends `count` records spread over three queues; returns (record, where it went).
fn fill(store: &Store, count: usize) -> Vec<(Record, Appended)> {
    (0..count)
        .map(|i| {
            let body = vec![b'0' + (i % 10) as u8; 150 + (i * 13) % 200];
            let uniq = format!("U{i}");
            let r = record(Spec {
                topic: "T",
                queue_id: (i % 3) as u32,
                body: &body,
                uniq_key: Some(&uniq),
                ..Spec::default()
            });
            let appended = append(store, vec![r.clone()]).expect("append").entries[0];
            (r, appended)
        })
        .collect()
}

fn read_queue(store: &Store, queue_id: u32) -> Vec<Vec<u8>> {
    read_queue_all(store, "T", queue_id)
}

fn assert_all_readable(store: &Store, written: &[(Record, Appended)]) {
    for queue_id in 0..3u32 {
        let expected = expected_in_queue(written, queue_id);
        assert_eq!(read_queue(store, queue_id), expected, "queue {queue_id}");
    }
}

/// The record at `damaged` is refused and missing from its queue; every other one is served.
fn assert_all_but_one_served(store: &Store, written: &[(Record, Appended)], damaged: u64) {
    assert!(matches!(
        store.read_record(damaged),
        Err(ReadError::Corrupt { .. })
    ));
    let kept: Vec<_> = written
        .iter()
        .filter(|(_, a)| a.position != damaged)
        .cloned()
        .collect();
    assert_all_readable(store, &kept);
}

fn last_segment(root: &Path) -> std::path::PathBuf {
    let mut names: Vec<_> = std::fs::read_dir(root.join("commitlog"))
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    names.pop().expect("a segment")
}

#[test]
fn close_and_reopen_serves_everything_at_the_same_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 50);
    store.close().expect("close");
    drop(store);
    let (store, report) = Store::open(small_config(dir.path())).expect("reopen");
    assert!(!report.crashed);
    assert_eq!(report.truncated_bytes, 0);
    assert_eq!(
        report.records_redispatched, 0,
        "a clean close leaves nothing to redo"
    );
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_all_readable(&store, &written);
    // Offsets continue where they stopped.
    let next = append(&store, vec![simple("T", 0, b"next")])
        .expect("append")
        .entries[0];
    assert_eq!(
        next.queue_offset,
        written.iter().filter(|(r, _)| r.queue_id == 0).count() as u64
    );
    assert_eq!(
        store
            .query_by_key("T", "U7", 5, 0, i64::MAX)
            .expect("query")
            .len(),
        1
    );
}

#[test]
fn drop_without_close_is_a_crash_and_loses_nothing_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 40);
    drop(store);
    assert!(dir.path().join("abort").exists());
    let (store, report) = Store::open(small_config(dir.path())).expect("reopen");
    assert!(report.crashed);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_all_readable(&store, &written);
    assert_eq!(
        store
            .query_by_key("T", "U39", 5, 0, i64::MAX)
            .expect("query")
            .len(),
        1
    );
}

#[test]
fn a_torn_tail_is_truncated_and_everything_before_is_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let mut written = fill(&store, 40);
    drop(store);
    // Cut the last record in half.
    let (_, last) = written.pop().expect("records");
    let segment = last_segment(dir.path());
    let cut = last.position % 4096 + u64::from(last.size) / 2;
    OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("open")
        .set_len(cut)
        .expect("cut");
    let (store, report) = Store::open(small_config(dir.path())).expect("reopen");
    assert_eq!(report.truncated_bytes, u64::from(last.size) / 2);
    assert_eq!(report.commitlog_end, last.position);
    assert_all_readable(&store, &written);
    // The lost record's offset is handed out again.
    let again = append(&store, vec![simple("T", 39 % 3, b"again")])
        .expect("append")
        .entries[0];
    assert_eq!(
        (again.queue_offset, again.position),
        (last.queue_offset, last.position)
    );
}

#[test]
fn garbage_after_the_tail_is_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 20);
    drop(store);
    let mut file = OpenOptions::new()
        .append(true)
        .open(last_segment(dir.path()))
        .expect("open");
    file.write_all(&[0xAB; 37]).expect("garbage");
    drop(file);
    let (store, report) = Store::open(small_config(dir.path())).expect("reopen");
    assert_eq!(report.truncated_bytes, 37);
    assert_all_readable(&store, &written);
}

#[test]
fn a_bit_flip_before_the_last_segment_is_reported_and_not_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 60);
    store.close().expect("close");
    drop(store);
    // Flip a body byte of the second record of the first segment; without a checkpoint the
    // whole log is scanned.
    let at = &written[1].1;
    assert!(at.position + u64::from(at.size) < 4096);
    let segment = dir.path().join("commitlog").join(format!("{:020}", 0));
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[at.position as usize + 90] ^= 0x01;
    std::fs::write(&segment, &bytes).expect("write");
    std::fs::remove_file(dir.path().join("checkpoint")).expect("remove checkpoint");
    let (store, report) = Store::open(small_config(dir.path())).expect("reopen");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains(&format!("{:020}", 0)),
        "{:?}",
        report.problems
    );
    assert!(
        report.problems[0].contains(&format!("byte {}", at.position)),
        "{:?}",
        report.problems
    );
    // Only the damaged record is not served: those after it in the same segment are.
    let next_at = &written[2].1;
    assert_eq!(next_at.position, at.position + u64::from(at.size));
    assert!(report.problems[0].contains(&format!("to {}", next_at.position)));
    assert_all_but_one_served(&store, &written, at.position);
    let later = written
        .iter()
        .find(|(r, a)| r.queue_id == 0 && a.position >= 4096)
        .expect("later");
    assert!(read_queue(&store, 0).contains(&stored(
        &later.0,
        later.1.queue_offset,
        later.1.position
    )));
    assert_eq!(written[0].1.position, 0);
    assert_eq!(
        store.read_record(0).expect("first record"),
        stored(&written[0].0, 0, 0)
    );

    // The checkpoint written since starts the next scan past the damage: the damage must
    // still not be served after a clean restart.
    store.close().expect("close");
    drop(store);
    let (store, report) = Store::open(small_config(dir.path())).expect("open again");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_all_but_one_served(&store, &written, at.position);
}

#[test]
fn a_segment_before_the_last_that_lost_its_tail_is_not_served_past_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 60);
    store.close().expect("close");
    drop(store);
    // Cut the first segment at the start of one of its records, as a crash can leave it when
    // the file's growth did not reach the disk but ConsumeQueue entries for it did.
    let in_first: Vec<_> = written.iter().filter(|(_, a)| a.position < 4096).collect();
    assert!(
        in_first.len() >= 4,
        "{} records in segment 0",
        in_first.len()
    );
    let cut = in_first[in_first.len() / 2].1.position;
    let segment = dir.path().join("commitlog").join(format!("{:020}", 0));
    OpenOptions::new()
        .write(true)
        .open(&segment)
        .and_then(|f| f.set_len(cut))
        .expect("cut");
    std::fs::remove_file(dir.path().join("checkpoint")).expect("remove checkpoint");

    let (store, report) = Store::open(small_config(dir.path())).expect("reopen");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains(&format!("ends at byte {cut}")),
        "{:?}",
        report.problems
    );
    let kept: Vec<_> = written
        .iter()
        .filter(|(_, a)| a.position < cut || a.position >= 4096)
        .cloned()
        .collect();
    assert!(kept.len() < written.len());
    assert_all_readable(&store, &kept);
    let lost = in_first.last().expect("a lost record").1.position;
    assert!(matches!(
        store.read_record(lost),
        Err(ReadError::Corrupt { .. })
    ));
    store.close().expect("close");
    drop(store);
    let (store, _) = Store::open(small_config(dir.path())).expect("open again");
    assert_all_readable(&store, &kept);
}

/// Writes 40 records, hands the bytes of one record in the middle of the last segment (with
/// records after it there) to `damage`, and reopens as after a crash before any checkpoint.
/// Checks that only that record is lost; returns the store, the records written and the one
/// problem recovery reported.
fn reopen_after_damage_in_the_last_segment(
    dir: &Path,
    damage: impl Fn(&mut [u8]),
) -> (Store, Vec<(Record, Appended)>, String) {
    let (store, _) = Store::open(small_config(dir)).expect("open");
    let written = fill(&store, 40);
    drop(store);
    let segment = last_segment(dir);
    let base = written.last().expect("records").1.position / 4096 * 4096;
    let in_last: Vec<_> = written.iter().filter(|(_, a)| a.position >= base).collect();
    assert!(
        in_last.len() >= 3,
        "{} records in the last segment",
        in_last.len()
    );
    let at = in_last[in_last.len() / 2].1;
    let mut bytes = std::fs::read(&segment).expect("read");
    let from = (at.position - base) as usize;
    damage(&mut bytes[from..from + at.size as usize]);
    std::fs::write(&segment, &bytes).expect("write");
    let _ = std::fs::remove_file(dir.join("checkpoint"));

    let (store, report) = Store::open(small_config(dir)).expect("reopen");
    assert_eq!(report.truncated_bytes, 0, "{:?}", report.problems);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let in_segment = at.position - base;
    assert!(
        report.problems[0].contains(&format!("byte {in_segment}")),
        "{:?}",
        report.problems
    );
    assert_all_but_one_served(&store, &written, at.position);
    let problem = report.problems[0].clone();
    (store, written, problem)
}

#[test]
fn a_bit_flip_inside_the_last_segment_is_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, written, problem) =
        reopen_after_damage_in_the_last_segment(dir.path(), |record| record[90] ^= 0x01);
    assert!(problem.contains("BODYCRC"), "{problem}");
    // Appends go on after the last record, not after the damage.
    let (last, last_at) = written.last().expect("records");
    let again = append(&store, vec![simple("T", last.queue_id, b"again")])
        .expect("append")
        .entries[0];
    assert_eq!(again.position, last_at.position + u64::from(last_at.size));
    assert_eq!(again.queue_offset, last_at.queue_offset + 1);
}

#[test]
fn a_lost_page_inside_the_last_segment_costs_only_its_records() {
    // Zeros where one record was: a write the disk never made.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, _, problem) =
        reopen_after_damage_in_the_last_segment(dir.path(), |record| record.fill(0));
    assert!(problem.contains("zero bytes"), "{problem}");
}

#[test]
fn a_lowered_queue_offset_does_not_take_an_earlier_records_place() {
    // The body CRC does not cover the header: a QUEUEOFFSET flipped down to 0 would overwrite
    // the ConsumeQueue entry of its queue's first record, stored earlier and intact.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, _, problem) =
        reopen_after_damage_in_the_last_segment(dir.path(), |record| record[20..28].fill(0));
    assert!(problem.contains("QUEUEOFFSET 0 is not after"), "{problem}");
}

#[test]
fn an_impossible_queue_offset_is_damage_not_a_new_queue_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 40);
    drop(store);
    // The body CRC does not cover the header: set a high bit of one record's QUEUEOFFSET.
    let (victim, at) = &written[30];
    let segment = dir
        .path()
        .join("commitlog")
        .join(format!("{:020}", at.position / 4096 * 4096));
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[(at.position % 4096) as usize + 20] ^= 0x40;
    std::fs::write(&segment, &bytes).expect("write");
    let _ = std::fs::remove_file(dir.path().join("checkpoint"));

    let (store, report) = Store::open(small_config(dir.path())).expect("reopen");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains("QUEUEOFFSET"),
        "{:?}",
        report.problems
    );
    let expected_max = written
        .iter()
        .filter(|(r, _)| r.queue_id == victim.queue_id)
        .count() as u64;
    assert_eq!(store.bounds("T", victim.queue_id).max_offset, expected_max);
    assert_all_but_one_served(&store, &written, at.position);
}

#[test]
fn consume_queues_and_index_are_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 50);
    store.close().expect("close");
    drop(store);
    std::fs::remove_dir_all(dir.path().join("consumequeue")).expect("remove cq");
    std::fs::remove_dir_all(dir.path().join("index")).expect("remove index");
    std::fs::remove_file(dir.path().join("checkpoint")).expect("remove checkpoint");
    let (store, report) = Store::open(small_config(dir.path())).expect("reopen");
    assert_eq!(report.records_redispatched, 50);
    assert_all_readable(&store, &written);
    assert_eq!(
        store
            .query_by_key("T", "U12", 5, 0, i64::MAX)
            .expect("query")
            .len(),
        1
    );
}

#[test]
fn a_segment_named_past_the_largest_position_is_refused_not_a_panic() {
    // The only segment: nothing before it to be out of sequence with.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("commitlog")).expect("mkdir");
    std::fs::write(dir.path().join("commitlog").join(u64::MAX.to_string()), b"").expect("write");
    let error = Store::open(small_config(dir.path()))
        .err()
        .expect("refused");
    assert!(
        error
            .to_string()
            .contains("past the largest CommitLog position"),
        "{error}"
    );
}

#[test]
fn a_missing_consume_queue_file_costs_its_entries_not_the_queue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path());
    let per_file = config.consume_queue_entries_per_file;
    let (store, _) = Store::open(config).expect("open");
    let written = fill(&store, 120);
    store.close().expect("close");
    drop(store);
    // Queue 0 holds 40 entries: files 0, 1 and 2 of 16 each. Remove the middle one.
    let middle = dir
        .path()
        .join("consumequeue/T/0")
        .join(format!("{:020}", per_file * 20));
    std::fs::remove_file(&middle).expect("remove");

    let (store, _) = Store::open(small_config(dir.path())).expect("reopen");
    let expected: Vec<Vec<u8>> = written
        .iter()
        .filter(|(r, a)| r.queue_id == 0 && !(per_file..2 * per_file).contains(&a.queue_offset))
        .map(|(r, a)| stored(r, a.queue_offset, a.position))
        .collect();
    assert_eq!(read_queue(&store, 0), expected);
    let skipped = store
        .read("T", 0, per_file + 3, 32, u32::MAX, &accept_all)
        .expect("read");
    assert_eq!(skipped.status, ReadStatus::NoMatchedMessage);
    assert_eq!(skipped.next_offset, 2 * per_file);
}

#[test]
fn a_store_reopened_with_smaller_files_is_refused_and_keeps_its_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut larger = small_config(dir.path());
    larger.segment_bytes = 1 << 20;
    let (store, _) = Store::open(larger.clone()).expect("open");
    let written = fill(&store, 40);
    store.close().expect("close");
    drop(store);
    let length_before = std::fs::metadata(last_segment(dir.path()))
        .expect("segment")
        .len();

    let error = Store::open(small_config(dir.path()))
        .err()
        .expect("a lowered segment size is refused")
        .to_string();
    assert!(error.contains("mappedFileSizeCommitLog"), "{error}");
    assert_eq!(
        std::fs::metadata(last_segment(dir.path()))
            .expect("segment")
            .len(),
        length_before,
        "nothing cut"
    );

    let mut fewer_entries = larger.clone();
    fewer_entries.consume_queue_entries_per_file = 4;
    let error = Store::open(fewer_entries)
        .err()
        .expect("a smaller ConsumeQueue file size is refused")
        .to_string();
    assert!(error.contains("mappedFileSizeConsumeQueue"), "{error}");

    let (store, report) = Store::open(larger).expect("the old sizes still open it");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_all_readable(&store, &written);
}

/// Damage below the checkpoint is not rescanned at open; a read that meets it serves the
/// records before it, reports it with its file, and moves past it, instead of failing at the
/// same offset forever.
#[test]
fn damage_a_read_meets_is_reported_and_stepped_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 60);
    store.close().expect("close");
    drop(store);
    let (_, victim) = written
        .iter()
        .filter(|(r, a)| r.queue_id == 0 && a.position + u64::from(a.size) < 4096)
        .nth(2)
        .cloned()
        .expect("a third queue-0 record in the first segment");
    let segment = dir.path().join("commitlog").join(format!("{:020}", 0));
    let mut bytes = std::fs::read(&segment).expect("read");
    let at = victim.position as usize;
    bytes[at..at + 4].copy_from_slice(&0x00ff_ffffi32.to_be_bytes());
    std::fs::write(&segment, &bytes).expect("write");

    let (store, report) = Store::open(small_config(dir.path())).expect("reopen");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let before = store
        .read("T", 0, 0, 32, u32::MAX, &accept_all)
        .expect("read");
    assert_eq!(before.status, ReadStatus::Found);
    assert_eq!(u64::from(before.message_count), victim.queue_offset);
    assert_eq!(before.next_offset, victim.queue_offset);
    match &before.damage {
        Some(ReadError::Corrupt { path, position, .. }) => {
            assert!(path.ends_with(&format!("{:020}", 0)), "{path}");
            assert_eq!(*position, victim.position);
        }
        other => panic!("expected the damage reported, got {other:?}"),
    }
    let at_damage = store
        .read("T", 0, victim.queue_offset, 32, u32::MAX, &accept_all)
        .expect("read at the damage");
    assert_eq!(at_damage.status, ReadStatus::NoMatchedMessage);
    assert_eq!(at_damage.next_offset, victim.queue_offset + 1);
    assert!(at_damage.damage.is_some());
    let kept: Vec<_> = written
        .iter()
        .filter(|(_, a)| a.position != victim.position)
        .cloned()
        .collect();
    assert_eq!(read_queue(&store, 0), expected_in_queue(&kept, 0));
}

/// A ConsumeQueue entry whose size no record can have is skipped and reported, not read: it
/// would otherwise make every read of it allocate that much.
#[test]
fn an_entry_with_an_impossible_size_is_skipped_and_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 30);
    store.close().expect("close");
    drop(store);
    let cq = dir
        .path()
        .join("consumequeue/T/0")
        .join(format!("{:020}", 0));
    let mut entries = std::fs::read(&cq).expect("read");
    // Entry 1: position i64, size i32, tags code i64.
    entries[20 + 8..20 + 12].copy_from_slice(&i32::MAX.to_be_bytes());
    std::fs::write(&cq, &entries).expect("write");

    let (store, _) = Store::open(small_config(dir.path())).expect("reopen");
    let read = store
        .read("T", 0, 0, 32, u32::MAX, &accept_all)
        .expect("read");
    match &read.damage {
        Some(ReadError::Corrupt { path, position, .. }) => {
            assert!(path.contains("consumequeue"), "{path}");
            assert_eq!(*position, 20);
        }
        other => panic!("expected the entry reported, got {other:?}"),
    }
    let kept: Vec<_> = written
        .iter()
        .filter(|(r, a)| !(r.queue_id == 0 && a.queue_offset == 1))
        .cloned()
        .collect();
    assert_eq!(read_queue(&store, 0), expected_in_queue(&kept, 0));
}

/// maxMessageSize limits sends, not what is stored: a store reopened with a lower limit, after
/// a crash, still serves and keeps a record written under the higher one.
#[test]
fn a_lower_record_limit_after_a_crash_keeps_larger_records_already_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let small = fill(&store, 3);
    let body = vec![b'L'; 2_000];
    let large = record(Spec {
        topic: "T",
        queue_id: 0,
        body: &body,
        ..Spec::default()
    });
    let appended = append(&store, vec![large.clone()]).expect("append").entries[0];
    drop(store);
    assert!(dir.path().join("abort").exists());

    let mut lower = small_config(dir.path());
    lower.record_bytes_max = 1_024;
    let (store, report) = Store::open(lower).expect("reopen");
    assert!(report.crashed);
    assert_eq!(report.truncated_bytes, 0, "nothing cut");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(
        store
            .read_record(appended.position)
            .expect("the large record"),
        stored(&large, appended.queue_offset, appended.position)
    );
    let mut written = small;
    written.push((large, appended));
    assert_all_readable(&store, &written);
    // New appends are held to the new limit.
    assert!(append(&store, vec![simple("T", 0, &body)]).is_err());
}

/// A ConsumeQueue entry that points where no segment is is skipped as damage like any other:
/// an error there would make its consumer retry the same offset forever.
#[test]
fn a_consume_queue_entry_pointing_nowhere_is_skipped_not_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(small_config(dir.path())).expect("open");
    let written = fill(&store, 30);
    store.close().expect("close");
    drop(store);
    // `fill` sends record i to queue i % 3: queue 0's offset 1 is record 3.
    let damaged = &written[3].1;
    assert_eq!(damaged.queue_offset, 1);
    let queue_file = dir
        .path()
        .join("consumequeue/T/0")
        .join(format!("{:020}", 0));
    let file = OpenOptions::new()
        .write(true)
        .open(&queue_file)
        .expect("queue file");
    std::os::unix::fs::FileExt::write_all_at(&file, &(1u64 << 40).to_be_bytes(), 20)
        .expect("damage the entry");
    drop(file);

    let (store, _) = Store::open(small_config(dir.path())).expect("reopen");
    let at_damage = store
        .read("T", 0, 1, 16, 1 << 20, &accept_all)
        .expect("a read at the damaged entry answers");
    assert!(at_damage.next_offset > 1, "the read moved past offset 1");
    let kept: Vec<_> = written
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, w)| w.clone())
        .collect();
    assert_all_readable(&store, &kept);
}

/// The index is flushed every few seconds, not with each checkpoint: a crash after a
/// checkpoint that moved past the index's last flush re-adds the keys of the records in
/// between (found once, not lost and not twice), and ConsumeQueue entries are not redone for
/// the records the checkpoint covers.
#[test]
fn keys_written_after_the_index_flush_are_added_again_once_after_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path());
    let (store, _) = Store::open(config.clone()).expect("open");
    let started = std::time::Instant::now();
    fill(&store, 20);
    // Everything durable, the index too: its next flush is ten seconds away.
    store.flush().expect("flush");
    let indexed = store.stats().written_position;
    let more: Vec<_> = (20..40)
        .map(|i| {
            let uniq = format!("U{i}");
            let r = record(Spec {
                topic: "T",
                queue_id: 0,
                body: b"after the index flush",
                uniq_key: Some(&uniq),
                ..Spec::default()
            });
            append(&store, vec![r]).expect("append").entries[0]
        })
        .collect();
    let end = store.stats().written_position;
    // The background checkpoint (every 10 ms here) covers the new records' queue entries.
    let read_checkpoint = || {
        let checkpoint = quiver_store::read_checkpoint(&config.checkpoint_path)
            .expect("read")
            .expect("a checkpoint")
            .expect("a valid one");
        (
            checkpoint.dispatched_flushed_position,
            checkpoint.index_flushed_position,
        )
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while read_checkpoint().0 < end {
        assert!(
            std::time::Instant::now() < until,
            "no checkpoint past {end}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (dispatched, index) = read_checkpoint();
    if started.elapsed() < std::time::Duration::from_secs(9) {
        assert_eq!(
            (dispatched, index),
            (end, indexed),
            "queues checkpointed past the index"
        );
    }
    drop(store);

    let (store, report) = Store::open(config).expect("reopen");
    assert!(report.crashed);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.records_redispatched, 0, "the queues were durable");
    for i in [0, 19, 20, 39] {
        let found = store
            .query_by_key("T", &format!("U{i}"), 5, 0, i64::MAX)
            .expect("query");
        assert_eq!(found.len(), 1, "key U{i}");
    }
    assert_eq!(store.bounds("T", 0).max_offset, 7 + more.len() as u64);
}
