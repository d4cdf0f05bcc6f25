//! Store recovery on arbitrary files: the input becomes one CommitLog segment and one
//! ConsumeQueue file (the first two bytes say where it splits); opening the store, reading
//! every queue and appending must never panic. Seed the corpus with real segments to get
//! bit-flipped variants of valid data.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_store::{FlushMode, ReadStatus, Store, StoreConfig};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let split = (usize::from(u16::from_be_bytes([data[0], data[1]])) % (data.len() - 1)) + 2;
    let (segment, consume_queue) = data[2..].split_at(split - 2);
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let root = dir.path();
    let queue_dir = root.join("consumequeue/T/0");
    if std::fs::create_dir_all(root.join("commitlog")).is_err()
        || std::fs::create_dir_all(&queue_dir).is_err()
        || std::fs::write(root.join("commitlog").join(format!("{:020}", 0)), segment).is_err()
        || std::fs::write(queue_dir.join(format!("{:020}", 0)), consume_queue).is_err()
    {
        return;
    }
    let mut config = StoreConfig::under(root);
    config.segment_bytes = 64 * 1024;
    config.consume_queue_entries_per_file = 1024;
    config.index_slots = 64;
    config.index_entries_max = 128;
    config.flush = FlushMode::Async {
        interval_ms: 3_600_000,
        least_pages: 0,
    };
    let Ok((store, _report)) = Store::open(config) else {
        return;
    };
    for (topic, queue_id) in store.queues() {
        let mut offset = store.bounds(&topic, queue_id).min_offset;
        for _ in 0..1024 {
            let Ok(read) = store.read(&topic, queue_id, offset, 16, 1 << 20, &|_| true) else {
                break;
            };
            match read.status {
                ReadStatus::Found | ReadStatus::NoMatchedMessage if read.next_offset > offset => {
                    offset = read.next_offset
                }
                _ => break,
            }
        }
    }
    let _ = store.close();
});
