//! Reads that leave large records in the CommitLog's files for a connection to send from there
//! (`Store::read_to_send`) serve what copying reads serve, and check what they leave.

mod common;

use common::*;
use quiver_store::{
    assemble, ReadError, ReadStatus, Record, Store, SEND_FROM_FILE_RECORD_BYTES_MIN,
};

fn config(root: &std::path::Path) -> quiver_store::StoreConfig {
    let mut config = small_config(root);
    config.segment_bytes = 1 << 20;
    config
}

fn body(size: usize, seed: usize) -> Vec<u8> {
    (0..size).map(|i| (i * 31 + seed) as u8).collect()
}

/// The same offsets read both ways: the same status, counts, next offset and bytes, with the
/// large records' runs left in files and the small ones copied.
#[test]
fn records_left_in_files_read_the_same_as_copied_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(config(dir.path())).expect("open");
    // Small and large records, alone and in runs, across more than one segment.
    let sizes = [
        100, 20_000, 40_000, 90, 80, 17_000, 300_000, 64, 18_000, 18_000, 200_000,
    ];
    for round in 0..6 {
        let records: Vec<Record> = sizes
            .iter()
            .enumerate()
            .map(|(i, size)| simple("T", 0, &body(*size, round * 100 + i)))
            .collect();
        append(&store, records).expect("append");
    }
    let max = store.bounds("T", 0).max_offset;
    assert_eq!(max, 6 * sizes.len() as u64);
    let mut left_in_files = 0;
    for offset in 0..max {
        for (count, bytes) in [(32, u32::MAX), (3, u32::MAX), (32, 64 * 1024)] {
            let copied = store
                .read("T", 0, offset, count, bytes, &accept_all)
                .expect("read");
            let sent = store
                .read_to_send("T", 0, offset, count, bytes, &accept_all)
                .expect("read to send");
            assert!(copied.files.is_empty(), "a plain read copies everything");
            assert_eq!(sent.status, copied.status);
            assert_eq!(sent.message_count, copied.message_count);
            assert_eq!(sent.next_offset, copied.next_offset);
            assert_eq!(sent.end_position, copied.end_position);
            assert_eq!(sent.body_bytes(), copied.bytes.len() as u64);
            let whole = assemble(&sent.bytes, &sent.files).expect("assemble");
            assert!(whole == copied.bytes, "offset {offset}: the bodies differ");
            for slice in &sent.files {
                assert!(slice.len() >= SEND_FROM_FILE_RECORD_BYTES_MIN);
            }
            left_in_files += sent.files.len();
            let records = split(&whole);
            let small_only = records.iter().all(|r| r.len() < 1000);
            if small_only {
                assert!(sent.files.is_empty(), "small records are copied");
            }
        }
    }
    assert!(
        left_in_files > 100,
        "large records were left in files: {left_in_files}"
    );
    store.close().expect("close");
}

/// A record in a run left in a file whose header the log does not hold as its entry says is
/// reported and stepped over, as a copying read does: the records before it are served.
#[test]
fn damage_in_a_run_left_in_a_file_is_reported_and_stepped_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(config(dir.path())).expect("open");
    let records = (0..4).map(|i| simple("T", 0, &body(30_000, i))).collect();
    let appended = append(&store, records).expect("append");
    let positions: Vec<u64> = appended.entries.iter().map(|a| a.position).collect();
    store.close().expect("close");
    drop(store);
    let segment = dir.path().join("commitlog").join(format!("{:020}", 0));
    let mut bytes = std::fs::read(&segment).expect("read");
    let at = positions[2] as usize;
    bytes[at..at + 4].copy_from_slice(&0x00ff_ffffi32.to_be_bytes());
    std::fs::write(&segment, &bytes).expect("write");

    let (store, report) = Store::open(config(dir.path())).expect("reopen");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let before = store
        .read_to_send("T", 0, 0, 32, u32::MAX, &accept_all)
        .expect("read");
    assert_eq!(before.status, ReadStatus::Found);
    assert_eq!(before.message_count, 2);
    assert_eq!(before.next_offset, 2);
    assert_eq!(before.files.len(), 1);
    assert_eq!(before.files[0].len(), positions[2] - positions[0]);
    match &before.damage {
        Some(ReadError::Corrupt { position, .. }) => assert_eq!(*position, positions[2]),
        other => panic!("expected the damage reported, got {other:?}"),
    }
    let at_damage = store
        .read_to_send("T", 0, 2, 32, u32::MAX, &accept_all)
        .expect("read at the damage");
    assert_eq!(at_damage.status, ReadStatus::NoMatchedMessage);
    assert_eq!(at_damage.next_offset, 3);
    assert!(at_damage.files.is_empty());
    let after = store
        .read_to_send("T", 0, 3, 32, u32::MAX, &accept_all)
        .expect("read after the damage");
    assert_eq!(after.message_count, 1);
    assert_eq!(
        split(&assemble(&after.bytes, &after.files).unwrap()).len(),
        1
    );
    store.close().expect("close");
}
