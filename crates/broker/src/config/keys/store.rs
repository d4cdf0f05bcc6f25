//! The store: its files, flushing, the index and retention. Keys of `KEYS`, in the order GET_BROKER_CONFIG prints them (see `keys.rs`).

use super::*;

pub(in crate::config) static STORE: &[Key] = &[
    Key {
        name: "flushDiskType",
        aliases: &[],
        group: Group::Storage,
        default: "ASYNC_FLUSH",
        follows: None,
        doc: "`ASYNC_FLUSH` answers a send once it is written and flushes in the background; \
              `SYNC_FLUSH` answers once an fsync covers it (one fsync covers every send waiting).",
        live: None,
        read: |reading, field| {
            field
                .one_of(&FLUSH_TYPES)
                .map(|sync| reading.flush.sync = sync)
        },
        print: |printing| text_of(&FLUSH_TYPES, &printing.flush.sync),
    },
    Key {
        name: "flushIntervalCommitLog",
        aliases: &[],
        group: Group::Storage,
        default: "500",
        follows: None,
        doc: "With ASYNC_FLUSH, how often the flusher wakes (ms).",
        live: None,
        read: |reading, field| {
            field
                .number(1, 3_600_000)
                .map(|interval_ms| reading.flush.interval_ms = interval_ms)
        },
        print: |printing| printing.flush.interval_ms.to_string(),
    },
    Key {
        name: "flushCommitLogLeastPages",
        aliases: &[],
        group: Group::Storage,
        default: "4",
        follows: None,
        doc: "With ASYNC_FLUSH, the fewest unflushed 4 KiB pages worth an fsync when the \
              flusher wakes; every 10 s it flushes whatever there is.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 1_000_000)
                .map(|pages| reading.flush.least_pages = pages)
        },
        print: |printing| printing.flush.least_pages.to_string(),
    },
    Key {
        name: "syncFlushTimeout",
        aliases: &[],
        group: Group::Storage,
        default: "5000",
        follows: None,
        doc: "With SYNC_FLUSH, how long a send waits for its fsync (ms) before it is answered \
              FLUSH_DISK_TIMEOUT (the message is written either way).",
        live: None,
        read: |reading, field| {
            field
                .number(1, 3_600_000)
                .map(|timeout_ms| reading.flush.sync_timeout_ms = timeout_ms)
        },
        print: |printing| printing.flush.sync_timeout_ms.to_string(),
    },
    Key {
        name: "storePathRootDir",
        aliases: &[],
        group: Group::Storage,
        default: "store",
        follows: None,
        doc: "The folder of the store, and of the broker's own files under `config/`.",
        live: None,
        read: |reading, field| field.path().map(|path| reading.config.store_root = path),
        print: |printing| Printing::path(&printing.config.store_root),
    },
    Key {
        name: "storePathCommitLog",
        aliases: &[],
        group: Group::Storage,
        default: "store/commitlog",
        follows: Some("`storePathRootDir`/commitlog"),
        doc: "The CommitLog's segments.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_commitlog = Some(path))
        },
        print: |printing| Printing::path(&printing.store.commitlog_dir),
    },
    Key {
        name: "storePathConsumeQueue",
        aliases: &[],
        group: Group::Storage,
        default: "store/consumequeue",
        follows: Some("`storePathRootDir`/consumequeue"),
        doc: "The ConsumeQueues, a folder per topic.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_consume_queue = Some(path))
        },
        print: |printing| Printing::path(&printing.store.consume_queue_dir),
    },
    Key {
        name: "storePathIndex",
        aliases: &[],
        group: Group::Storage,
        default: "store/index",
        follows: Some("`storePathRootDir`/index"),
        doc: "The key index files.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_index = Some(path))
        },
        print: |printing| Printing::path(&printing.store.index_dir),
    },
    Key {
        name: "storeCheckpoint",
        aliases: &[],
        group: Group::Storage,
        default: "store/checkpoint",
        follows: Some("`storePathRootDir`/checkpoint"),
        doc: "The checkpoint file: how far the CommitLog, ConsumeQueues and index were on disk.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_checkpoint = Some(path))
        },
        print: |printing| Printing::path(&printing.store.checkpoint_path),
    },
    Key {
        name: "abortFile",
        aliases: &[],
        group: Group::Storage,
        default: "store/abort",
        follows: Some("`storePathRootDir`/abort"),
        doc: "The file present while the broker runs; found at start, it means the last run \
              did not stop cleanly.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_abort = Some(path))
        },
        print: |printing| Printing::path(&printing.store.abort_path),
    },
    Key {
        name: "mappedFileSizeCommitLog",
        aliases: &["mapedFileSizeCommitLog"],
        group: Group::Storage,
        default: "1073741824",
        follows: None,
        doc: "A CommitLog segment's size (bytes; 1 GiB).",
        live: None,
        read: |reading, field| {
            // Offsets within a segment are i32 on the wire and in the ConsumeQueue.
            let bytes = field.number(4096, i32::MAX as u64)?;
            reading.config.commitlog_segment_bytes = bytes;
            Ok(())
        },
        print: |printing| printing.config.commitlog_segment_bytes.to_string(),
    },
    Key {
        name: "mappedFileSizeConsumeQueue",
        aliases: &["mapedFileSizeConsumeQueue"],
        group: Group::Storage,
        default: "6000000",
        follows: None,
        doc: "A ConsumeQueue file's size (bytes), rounded up to whole 20-byte entries.",
        live: None,
        read: |reading, field| {
            // The most is 1 GiB of entries rounded up, so that every size printed reads back.
            let most = (1024 * 1024 * 1024_u64).div_ceil(CONSUME_QUEUE_ENTRY_BYTES)
                * CONSUME_QUEUE_ENTRY_BYTES;
            let bytes: u64 = field.number(CONSUME_QUEUE_ENTRY_BYTES, most)?;
            reading.config.consume_queue_entries_per_file =
                bytes.div_ceil(CONSUME_QUEUE_ENTRY_BYTES);
            Ok(())
        },
        print: |printing| {
            let entries = printing.config.consume_queue_entries_per_file;
            (entries * CONSUME_QUEUE_ENTRY_BYTES).to_string()
        },
    },
    Key {
        name: "maxHashSlotNum",
        aliases: &[],
        group: Group::Storage,
        default: "5000000",
        follows: None,
        doc: "A key index file's hash slots.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 100_000_000)
                .map(|slots| reading.config.index_slots = slots)
        },
        print: |printing| printing.config.index_slots.to_string(),
    },
    Key {
        name: "maxIndexNum",
        aliases: &[],
        group: Group::Storage,
        default: "20000000",
        follows: None,
        doc: "A key index file's entries; a full file is followed by a new one.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 400_000_000)
                .map(|entries| reading.config.index_entries_max = entries)
        },
        print: |printing| printing.config.index_entries_max.to_string(),
    },
    Key {
        name: "registerNameServerPeriod",
        aliases: &[],
        group: Group::Identity,
        default: "30000",
        follows: None,
        doc: "How often the broker registers its topics with every name server (ms); it \
              also registers soon after a topic is created (at most every 100 ms).",
        live: None,
        read: |reading, field| {
            field
                .number(1_000, 60_000)
                .map(|period_ms| reading.config.register_period_ms = period_ms)
        },
        print: |printing| printing.config.register_period_ms.to_string(),
    },
    Key {
        name: "compressedRegister",
        aliases: &[],
        group: Group::Identity,
        default: "false",
        follows: None,
        doc: "Registrations carry the topics zipped in RocketMQ's compressed layout, which \
              Java name servers read too; one whose JSON would pass 1 MiB is zipped whatever \
              this says, so that any number of topics fits a frame.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|compressed| reading.config.compressed_register = compressed)
        },
        print: |printing| printing.config.compressed_register.to_string(),
    },
    Key {
        name: "deleteWhen",
        aliases: &[],
        group: Group::Retention,
        default: "04",
        follows: None,
        doc: "Hours of the local day at which expired segments are deleted, `;`-separated \
              (`04;16`).",
        live: None,
        read: |reading, field| {
            field
                .delete_when()
                .map(|hours| reading.config.delete_when = hours)
        },
        print: |printing| printing.config.delete_when.clone(),
    },
    Key {
        name: "fileReservedTime",
        aliases: &[],
        group: Group::Retention,
        default: "72",
        follows: None,
        doc: "How long a sealed segment is kept (hours).",
        live: None,
        read: |reading, field| {
            field
                .number(0, 1_000_000)
                .map(|hours| reading.config.file_reserved_hours = hours)
        },
        print: |printing| printing.config.file_reserved_hours.to_string(),
    },
    Key {
        name: "diskMaxUsedSpaceRatio",
        aliases: &[],
        group: Group::Retention,
        default: "75",
        follows: None,
        doc: "Disk use (percent) past which expired segments go at any hour.",
        live: None,
        read: |reading, field| {
            field
                .number(10, 95)
                .map(|percent| reading.config.disk_max_used_ratio_percent = percent)
        },
        print: |printing| printing.config.disk_max_used_ratio_percent.to_string(),
    },
];
