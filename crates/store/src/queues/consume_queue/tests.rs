//! The ConsumeQueue's tests: entry layout, files, the tail and its whole-page writes, trim.

use super::*;

#[test]
fn entry_layout_is_position_size_tags() {
    let e = Entry {
        position: 0x0102_0304_0506_0708,
        size: 0x0A0B_0C0D,
        tags_code: -2,
    };
    let bytes = e.encode();
    assert_eq!(&bytes[0..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&bytes[8..12], &[0x0A, 0x0B, 0x0C, 0x0D]);
    assert_eq!(
        &bytes[12..20],
        &[0xFF; 7].iter().chain(&[0xFE]).copied().collect::<Vec<_>>()[..]
    );
    assert_eq!(Entry::decode(&bytes), e);
}

#[test]
fn entries_span_files_named_by_start_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = ConsumeQueue::open(dir.path(), "T", 0, 3).expect("open");
    let mut bytes = Vec::new();
    for i in 0..7u64 {
        bytes.extend_from_slice(
            &Entry {
                position: i * 100,
                size: 100,
                tags_code: 0,
            }
            .encode(),
        );
    }
    q.write_entries(0, &bytes).expect("write");
    q.publish(7);
    // Readers find entries still in the tail, and entries half in the file, half not.
    let mut out = Vec::new();
    q.read_entries(5, 2, &mut out).expect("read from the tail");
    assert_eq!(Entry::decode(&out[ENTRY_BYTES..]).position, 600);
    q.flush().expect("flush");
    assert!(dir.path().join("T/0").join(segment_name(60)).exists());
    assert!(dir.path().join("T/0").join(segment_name(120)).exists());
    let mut out = Vec::new();
    q.read_entries(2, 5, &mut out).expect("read");
    assert_eq!(Entry::decode(&out[0..]).position, 200);
    assert_eq!(Entry::decode(&out[4 * ENTRY_BYTES..]).position, 600);
    // Entries at or past a CommitLog end of 450 are dropped: offsets 0..4 remain.
    assert_eq!(q.trim(450).expect("trim"), 3);
    assert_eq!(q.bounds(), (0, 4));
    assert!(!dir.path().join("T/0").join(segment_name(120)).exists());
}

/// A deleted topic's queue, still held by retention or the checkpoint writer, must not
/// touch the files of a queue created since under the same name.
#[test]
fn a_retired_queue_leaves_its_successors_files_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = ConsumeQueue::open(dir.path(), "T", 0, 3).expect("open");
    let old_entries: Vec<u8> = (0..7).flat_map(entry_at).collect();
    old.write_entries(0, &old_entries).expect("write");
    old.publish(7);
    old.flush().expect("flush");
    // The deletion: retired, then its directory renamed away.
    old.retire_held(old.hold_files());
    std::fs::rename(dir.path().join("T"), dir.path().join("T.deleted-700")).expect("rename");
    let new = ConsumeQueue::open(dir.path(), "T", 0, 3).expect("open again");
    let new_entries: Vec<u8> = (0..5).flat_map(entry_at).collect();
    new.write_entries(0, &new_entries).expect("write");
    new.publish(5);
    new.flush().expect("flush");

    // Retention on the old queue removes nothing of the new one's.
    assert_eq!(old.drop_below(u64::MAX).expect("drop_below"), 0);
    assert!(new.path_for(0).exists());
    // Entries left in the old queue's tail are dropped, not written into a new file.
    old.write_entries(7, &entry_at(7)).expect("write");
    old.write_entries(9, &entry_at(9)).expect("write");
    old.flush().expect("flush");
    assert!(!dir.path().join("T/0").join(segment_name(180)).exists());
    let mut out = Vec::new();
    new.read_entries(0, 5, &mut out).expect("read");
    assert_eq!(out, new_entries);
}

/// A replica's queue that starts inside a file (and after files that do not exist)
/// reopens at its first entry, not at the file's start, whose entries read as zeros.
#[test]
fn a_queue_starting_inside_a_file_recovers_its_first_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = ConsumeQueue::open(dir.path(), "T", 0, 16).expect("open");
    let bytes: Vec<u8> = (37..45).flat_map(entry_at).collect();
    q.write_entries(37, &bytes).expect("write");
    q.start_at(37);
    q.publish(45);
    assert_eq!(q.bounds(), (37, 45));
    q.flush().expect("flush");
    drop(q);
    let q = ConsumeQueue::open(dir.path(), "T", 0, 16).expect("reopen");
    assert_eq!(q.trim(u64::MAX).expect("trim"), 0);
    assert_eq!(q.bounds(), (37, 45));
    let mut out = Vec::new();
    q.read_entries(37, 8, &mut out).expect("read");
    assert_eq!(Entry::decode(&out).tags_code, 37);
    // Every entry cut (the log ends before them): empty, at the file's start.
    q.trim(37 * 100).expect("trim");
    assert_eq!(q.bounds(), (32, 32));
}

fn entry_at(i: u64) -> [u8; ENTRY_BYTES] {
    Entry {
        position: i * 100,
        size: 100,
        tags_code: i as i64,
    }
    .encode()
}

#[test]
fn reads_span_the_file_and_the_tail_and_discard_cuts_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = ConsumeQueue::open(dir.path(), "T", 0, 1000).expect("open");
    let per_write = TAIL_WRITE_BYTES / ENTRY_BYTES + 1;
    let mut next = 0u64;
    for _ in 0..3 {
        let bytes: Vec<u8> = (next..next + per_write as u64).flat_map(entry_at).collect();
        q.write_entries(next, &bytes).expect("write");
        next += per_write as u64;
    }
    let bytes: Vec<u8> = (next..next + 5).flat_map(entry_at).collect();
    q.write_entries(next, &bytes).expect("write");
    next += 5;
    q.publish(next);
    // Three full pages went out, the last one's end padded with zeros.
    let file_len = std::fs::metadata(q.path_for(0)).expect("file").len();
    let written = 3 * per_write as u64 * ENTRY_BYTES as u64;
    assert_eq!(file_len, written.next_multiple_of(PAGE_BYTES));
    let mut out = Vec::new();
    q.read_entries(next - 10, 10, &mut out).expect("read");
    for (i, chunk) in out.chunks(ENTRY_BYTES).enumerate() {
        assert_eq!(
            Entry::decode(chunk).tags_code,
            (next - 10) as i64 + i as i64
        );
    }
    assert!(
        q.read_entries(next - 1, 2, &mut out).is_err(),
        "past the tail"
    );
    // A failed group's entries go, whether in the tail or in the file.
    q.discard_from(next - 2).expect("discard in the tail");
    q.publish(next - 2);
    q.read_entries(next - 3, 1, &mut out).expect("read");
    assert_eq!(Entry::decode(&out).tags_code, (next - 3) as i64);
    q.discard_from(10).expect("discard in the file");
    q.publish(10);
    q.flush().expect("flush");
    let file_len = std::fs::metadata(q.path_for(0)).expect("file").len();
    assert_eq!(file_len, 10 * ENTRY_BYTES as u64);
    let bytes: Vec<u8> = (10..12).flat_map(entry_at).collect();
    q.write_entries(10, &bytes).expect("write after discard");
    q.publish(12);
    q.read_entries(9, 3, &mut out).expect("read");
    assert_eq!(Entry::decode(&out[2 * ENTRY_BYTES..]).tags_code, 11);
}

/// Each flush writes from a page's start to a page's end (or the file's), whatever number
/// of entries it carries; what it writes reads back, and reopens, as exactly those entries.
#[test]
fn writes_cover_whole_pages_and_reopen_to_the_same_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 500 entries per file: 10,000 bytes, two full pages and a partial one.
    let q = ConsumeQueue::open(dir.path(), "T", 0, 500).expect("open");
    let mut next = 0u64;
    for step in 1..=60u64 {
        let n = step * 7 % 23 + 1;
        let bytes: Vec<u8> = (next..next + n).flat_map(entry_at).collect();
        q.write_entries(next, &bytes).expect("write");
        next += n;
        q.publish(next);
        q.flush().expect("flush");
        for file_number in 0..=(next - 1) / 500 {
            let path = dir
                .path()
                .join("T/0")
                .join(segment_name(file_number * 10_000));
            let len = std::fs::metadata(&path).expect("file").len();
            assert!(
                len.is_multiple_of(PAGE_BYTES) || len == 10_000,
                "{} is {len} bytes after {next} entries",
                path.display()
            );
        }
    }
    assert!(next > 500, "the entries span files");
    let mut out = Vec::new();
    q.read_entries(0, next, &mut out).expect("read");
    assert_eq!(out, (0..next).flat_map(entry_at).collect::<Vec<u8>>());
    drop(q);

    let q = ConsumeQueue::open(dir.path(), "T", 0, 500).expect("reopen");
    assert_eq!(q.trim(u64::MAX).expect("trim"), 0, "zeros are not entries");
    assert_eq!(q.bounds(), (0, next));
    q.read_entries(0, next, &mut out)
        .expect("read after reopen");
    assert_eq!(out, (0..next).flat_map(entry_at).collect::<Vec<u8>>());
    // Appends go on after the trim cut the padding.
    let bytes: Vec<u8> = (next..next + 3).flat_map(entry_at).collect();
    q.write_entries(next, &bytes).expect("write after reopen");
    q.publish(next + 3);
    q.flush().expect("flush");
    q.read_entries(next - 2, 5, &mut out).expect("read");
    assert_eq!(
        out,
        (next - 2..next + 3).flat_map(entry_at).collect::<Vec<u8>>()
    );
}

/// A flush whose fsync fails leaves the queue unflushed: the next flush fsyncs the same files
/// again instead of counting them done.
#[test]
fn a_failed_flush_is_tried_again_on_the_same_files() {
    let shim_dir = tempfile::tempdir().expect("tempdir");
    let test = "queues::consume_queue::tests::a_failed_flush_is_tried_again_on_the_same_files";
    let Some(shim) = crate::io_faults_shim::FaultShim::rerun_under_shim(test, shim_dir.path())
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let q = ConsumeQueue::open(dir.path(), "T", 0, 16).expect("open");
    let entry = |i: u64| {
        Entry {
            position: i * 100,
            size: 100,
            tags_code: 0,
        }
        .encode()
    };
    q.write_entries(0, &entry(0)).expect("write");
    q.publish(1);
    q.flush().expect("flush");
    q.write_entries(1, &entry(1)).expect("write");
    q.publish(2);
    shim.fail("EIO", "fsync", dir.path());
    let (path, _) = q.flush().expect_err("the fsync fails");
    assert_eq!(path, dir.path().join("T/0").join(segment_name(0)));
    q.flush()
        .expect_err("the file is fsynced again, not counted as flushed");
    shim.clear();
    q.flush().expect("flush once the disk works");
    let mut out = Vec::new();
    q.read_entries(0, 2, &mut out).expect("read");
    assert_eq!(Entry::decode(&out[ENTRY_BYTES..]).position, 100);
}
