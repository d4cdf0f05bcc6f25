//! Quiver's fuzz targets, in one table, and a bounded run of them that needs no nightly
//! toolchain.
//!
//! Each target is a function of arbitrary bytes that must not panic (nor overflow its stack,
//! nor take unbounded memory) on any input, and asserts what has to hold of what it decodes.
//! The functions live beside what they test, as a `fuzzing` module of the crate (hidden from
//! its documentation), because several reach what that crate keeps private and because being
//! compiled with the crate keeps them in step with it. `store_recovery` alone lives here: it
//! needs only the store's public API and a temporary directory.
//!
//! Two ways to run them:
//! - `cargo test -p quiver-fuzz` (stable, in `scripts/test.sh`): `bounded` runs each target
//!   over its seed corpus (`fuzz/corpus/<target>/`) and then over mutations of it for a few
//!   seconds, without coverage feedback.
//! - `scripts/fuzz.sh [TARGET] [SECONDS]` (nightly): cargo-fuzz builds `fuzz_targets/<target>.rs`
//!   with libFuzzer and coverage instrumentation, starting from the same corpus.

pub mod bounded;

use quiver_store::{FlushMode, ReadStatus, Store, StoreConfig};

/// One fuzz target: its name (the cargo-fuzz binary and the corpus folder), the function, and
/// tokens the bounded run splices into inputs (cargo-fuzz finds its own from comparisons).
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
    pub tokens: &'static [&'static [u8]],
}

const JSON_TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\"",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"null",
    b"true",
    b"false",
    b"-",
    b"0",
    b"1e400",
    b"-9223372036854775808",
    b"9223372036854775807",
    b"18446744073709551616",
    b"2147483648",
    b"{{",
    b"1:",
    b"-1:",
    b"\"\":",
];

const SQL_TOKENS: &[&[u8]] = &[
    b"(",
    b")",
    b" AND ",
    b" OR ",
    b"NOT ",
    b" = ",
    b" <> ",
    b" > ",
    b" <= ",
    b" BETWEEN ",
    b" IN ",
    b" IS ",
    b"NULL",
    b"TRUE",
    b" CONTAINS ",
    b" STARTSWITH ",
    b" ENDSWITH ",
    b"'",
    b"''",
    b"--",
    b"\n",
    b"/*",
    b"*/",
    b"-",
    b"+",
    b",",
    b"1.5E-3",
    b"9223372036854775808",
    b"a",
    b"TAGS",
    b"\x00",
    b"\x01",
    b"\x02",
    b"NaN",
    b"Infinity",
];

const HANDLE_TOKENS: &[&[u8]] = &[
    b" ",
    b"0",
    b"1",
    b"2",
    b"-1",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"broker-a",
];

/// Every target. `fuzz/Cargo.toml` has a binary of the same name for each, and
/// `fuzz/corpus/<name>/` its seeds.
pub const TARGETS: &[Target] = &[
    Target {
        name: "decode_frame",
        run: quiver_wire::fuzzing::decode_frame,
        tokens: JSON_TOKENS,
    },
    Target {
        name: "json_header",
        run: quiver_wire::fuzzing::json_header,
        tokens: JSON_TOKENS,
    },
    Target {
        name: "json_body",
        run: quiver_wire::fuzzing::json_body,
        tokens: JSON_TOKENS,
    },
    Target {
        name: "receipt_handle",
        run: quiver_wire::fuzzing::receipt_handle,
        tokens: HANDLE_TOKENS,
    },
    Target {
        name: "sql92",
        run: quiver_broker::fuzzing::sql92,
        tokens: SQL_TOKENS,
    },
    Target {
        name: "batch_ack",
        run: quiver_broker::fuzzing::batch_ack,
        tokens: JSON_TOKENS,
    },
    Target {
        name: "ha_slave_stream",
        run: quiver_broker::fuzzing::ha_slave_stream,
        tokens: &[],
    },
    Target {
        name: "ha_autoswitch_stream",
        run: quiver_broker::fuzzing::ha_autoswitch_stream,
        tokens: &[],
    },
    Target {
        name: "ha_master_session",
        run: quiver_broker::fuzzing::ha_master_session,
        tokens: &[],
    },
    Target {
        name: "ha_slave_session",
        run: quiver_broker::fuzzing::ha_slave_session,
        tokens: &[],
    },
    Target {
        name: "namesrv_requests",
        run: quiver_namesrv::fuzzing::requests,
        tokens: JSON_TOKENS,
    },
    Target {
        name: "store_recovery",
        run: store_recovery,
        tokens: &[],
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|target| target.name == name)
}

/// Store recovery on arbitrary files: the input becomes one CommitLog segment and one
/// ConsumeQueue file (the first two bytes say where it splits); opening the store and reading
/// every queue must never panic. Real segments in the corpus give bit-flipped
/// variants of valid data.
pub fn store_recovery(data: &[u8]) {
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
    read_every_queue(&store);
    let _ = store.close();
}

fn read_every_queue(store: &Store) {
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
}
