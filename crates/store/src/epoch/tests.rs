use super::*;

fn entry(epoch: i32, start_offset: u64) -> EpochEntry {
    EpochEntry {
        epoch,
        start_offset,
    }
}

fn entries(list: &[(i32, u64)]) -> Vec<EpochEntry> {
    list.iter().map(|&(e, s)| entry(e, s)).collect()
}

/// RocketMQ's example (entries 1@0 and 2@1024): its CRC, 327520601, is CRC32 of
/// "1-0\n2-1024\n" masked to 31 bits.
const JAVA_EXAMPLE: &[u8] = b"2\n327520601\n1-0\n2-1024\n";

#[test]
fn encodes_rocketmqs_example_byte_for_byte() {
    let list = EpochEntries::new(entries(&[(1, 0), (2, 1024)])).expect("ordered");
    assert_eq!(list.encode(), JAVA_EXAMPLE);
    assert_eq!(EpochEntries::decode(JAVA_EXAMPLE).expect("decode"), list);
}

#[test]
fn round_trips_and_an_empty_list_is_two_lines() {
    for list in [
        vec![],
        entries(&[(1, 0)]),
        entries(&[(1, 0), (2, 0), (7, 1 << 40), (i32::MAX, i64::MAX as u64)]),
    ] {
        let list = EpochEntries::new(list).expect("ordered");
        assert_eq!(EpochEntries::decode(&list.encode()).expect("decode"), list);
    }
    assert_eq!(EpochEntries::default().encode(), b"0\n0\n");
}

#[test]
fn a_stored_crc_of_zero_is_not_checked() {
    let list = EpochEntries::decode(b"2\n0\n1-0\n2-1024\n").expect("unchecked");
    assert_eq!(list.as_slice(), entries(&[(1, 0), (2, 1024)]));
}

#[test]
fn malformed_text_is_an_error_never_a_panic() {
    let cases: &[(&[u8], &str)] = &[
        (b"", "missing"),
        (b"2\n", "missing"),
        (b"x\n0\n", "not a number"),
        (b"1\n-5\n1-0\n", "not a number"),
        (b"2\n327520601\n1-0\n", "holds 1"),
        (b"1\n0\n1-0\n2-1024\n", "holds 2"),
        (b"2\n327520602\n1-0\n2-1024\n", "CRC"),
        (b"1\n0\n-1-0\n", "<epoch>-<startOffset>"),
        (b"1\n0\n1-\n", "<epoch>-<startOffset>"),
        (b"1\n0\n1-9223372036854775808\n", "<epoch>-<startOffset>"),
        (b"1\n0\n1\n", "<epoch>-<startOffset>"),
        (b"2\n0\n2-0\n1-0\n", "does not follow"),
        (b"2\n0\n1-10\n2-5\n", "does not follow"),
        (b"2\n0\n1-0\n1-5\n", "does not follow"),
        (b"100001\n0\n", "at most"),
        (b"99999999999999999999999\n0\n", "not a number"),
        (&[0xff, b'\n'], "UTF-8"),
    ];
    for (text, expected) in cases {
        let error = EpochEntries::decode(text).expect_err("malformed");
        assert!(
            error.to_string().contains(expected),
            "{:?}: {error}",
            String::from_utf8_lossy(text)
        );
    }
}

#[test]
fn ends_are_the_next_start_and_the_log_end_for_the_last() {
    let list = EpochEntries::new(entries(&[(1, 0), (2, 100), (3, 100), (4, 300)])).expect("ok");
    assert_eq!(list.end_offset(0, 500), 100);
    assert_eq!(list.end_offset(3, 500), 500);
    assert_eq!(list.end_offset(3, 200), 300, "never below its own start");
    assert_eq!(list.containing(50, 500), Some((entry(1, 0), 100)));
    assert_eq!(
        list.containing(100, 500),
        Some((entry(3, 100), 300)),
        "an epoch that wrote nothing is passed over"
    );
    assert_eq!(list.containing(500, 500), Some((entry(4, 300), 500)));
    assert_eq!(list.containing(501, 500), None);
    let later = EpochEntries::new(entries(&[(5, 64)])).expect("ok");
    assert_eq!(later.containing(10, 500), None);
}

#[test]
fn the_file_round_trips_and_keeps_the_content_before_as_bak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut file = EpochFile::open(dir.path()).expect("open");
    assert!(file.entries().is_empty());
    file.append(1, 0).expect("append 1");
    file.append(2, 1024).expect("append 2");
    assert_eq!(std::fs::read(file.path()).expect("read"), JAVA_EXAMPLE);
    assert_eq!(
        std::fs::read(file.backup_path()).expect("bak"),
        b"1\n1725254278\n1-0\n"
    );
    let reopened = EpochFile::open(dir.path()).expect("reopen");
    assert_eq!(reopened.entries(), file.entries());
    assert_eq!(reopened.last(), Some(entry(2, 1024)));
}

#[test]
fn appends_must_be_newer_and_start_no_earlier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut file = EpochFile::open(dir.path()).expect("open");
    file.append(3, 100).expect("first");
    assert_eq!(
        file.append(3, 200),
        Err(EpochFileError::NotNewer {
            epoch: 3,
            last_epoch: 3
        })
    );
    assert_eq!(
        file.append(2, 200),
        Err(EpochFileError::NotNewer {
            epoch: 2,
            last_epoch: 3
        })
    );
    assert_eq!(
        file.append(4, 99),
        Err(EpochFileError::StartsBelowLast {
            epoch: 4,
            start_offset: 99,
            last_start_offset: 100
        })
    );
    assert!(matches!(
        file.append(4, u64::MAX),
        Err(EpochFileError::OffsetTooLarge { .. })
    ));
    file.append(4, 100).expect("same start is allowed");
    assert_eq!(file.entries().as_slice(), entries(&[(3, 100), (4, 100)]));
}

#[test]
fn truncation_to_nothing_is_written_and_stays_after_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut file = EpochFile::open(dir.path()).expect("open");
    file.append(1, 0).expect("append");
    file.append(2, 1024).expect("append");
    file.append(3, 4096).expect("append");
    assert_eq!(file.truncate_from(4097).expect("nothing"), 0);
    assert_eq!(file.truncate_from(1024).expect("two"), 2);
    assert_eq!(file.entries().as_slice(), entries(&[(1, 0)]));
    assert_eq!(file.truncate_from_epoch(1).expect("one"), 1);
    assert!(file.entries().is_empty());
    let reopened = EpochFile::open(dir.path()).expect("reopen");
    assert!(reopened.entries().is_empty(), "the old entries stay gone");
}

#[test]
fn a_torn_or_missing_file_falls_back_to_its_backup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut file = EpochFile::open(dir.path()).expect("open");
    file.append(1, 0).expect("append");
    file.append(2, 1024).expect("append");
    // A write cut short: the count no longer matches.
    std::fs::write(file.path(), &JAVA_EXAMPLE[..JAVA_EXAMPLE.len() - 5]).expect("tear");
    let reopened = EpochFile::open(dir.path()).expect("backup");
    assert_eq!(reopened.entries().as_slice(), entries(&[(1, 0)]));
    // A crash between the two renames leaves only the backup.
    std::fs::remove_file(file.path()).expect("remove");
    let reopened = EpochFile::open(dir.path()).expect("backup");
    assert_eq!(reopened.entries().as_slice(), entries(&[(1, 0)]));
    std::fs::write(file.backup_path(), b"1\n5\n1-0\n").expect("bad backup");
    let error = EpochFile::open(dir.path()).expect_err("both unreadable");
    assert!(error.to_string().contains("CRC"), "{error}");
}

#[test]
fn an_oversized_file_is_refused_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(EPOCH_FILE_NAME);
    std::fs::write(&path, vec![b'1'; EPOCH_FILE_BYTES_MAX as usize + 1]).expect("write");
    let error = EpochFile::open(dir.path()).expect_err("too long");
    assert!(error.to_string().contains("longer than"), "{error}");
}

#[test]
fn consistent_point_is_the_shared_epochs_nearer_end() {
    // Diverged tails: the slave wrote epoch 3 that its new master never had; both hold
    // epoch 2 from 100, which the master ended at 150.
    let local = entries(&[(1, 0), (2, 100), (3, 200)]);
    let master = entries(&[(1, 0), (2, 100), (4, 150)]);
    assert_eq!(consistent_point(&local, 300, &master, 400), Some(150));
    // The same epoch with another start is not shared.
    let master = entries(&[(1, 0), (2, 120), (4, 150)]);
    assert_eq!(consistent_point(&local, 300, &master, 400), Some(100));
    // No common epoch.
    assert_eq!(
        consistent_point(&entries(&[(2, 0)]), 10, &entries(&[(1, 0), (3, 5)]), 20),
        None
    );
    assert_eq!(consistent_point(&[], 0, &master, 400), None);
    // Equal logs: nothing to cut.
    let same = entries(&[(1, 0), (2, 100)]);
    assert_eq!(consistent_point(&same, 500, &same, 500), Some(500));
    // The master is behind in the shared last epoch: the slave's tail past it goes.
    assert_eq!(consistent_point(&same, 500, &same, 300), Some(300));
    // The slave is behind: it keeps everything and catches up.
    assert_eq!(consistent_point(&same, 300, &same, 500), Some(300));
    // The slave's newer epoch is on the master too: the walk stops there.
    let local = entries(&[(1, 0), (5, 100)]);
    let master = entries(&[(1, 0), (5, 100), (6, 400)]);
    assert_eq!(consistent_point(&local, 450, &master, 900), Some(400));
}
