//! Damaged files: whatever bytes a segment or a ConsumeQueue file holds, opening the store and
//! reading every queue must return values or errors, never panic. The cargo-fuzz target
//! `store_recovery` (in /fuzz) runs the same open-and-read on arbitrary inputs.

mod common;

use std::path::Path;

use common::*;
use proptest::prelude::*;
use quiver_store::{ReadStatus, Store};

const QUEUES: u32 = 2;

/// A store with `count` records over two queues, crossing segment boundaries; closed cleanly
/// or dropped (a crash), as `crash` says.
fn build(root: &Path, count: usize, crash: bool) {
    let (store, _) = Store::open(small_config(root)).expect("open");
    for i in 0..count {
        let body = vec![b'a' + (i % 26) as u8; 40 + (i * 37) % 300];
        let uniq = format!("K{i}");
        append(
            &store,
            vec![record(Spec {
                topic: "T",
                queue_id: i as u32 % QUEUES,
                body: &body,
                uniq_key: Some(&uniq),
                ..Spec::default()
            })],
        )
        .expect("append");
    }
    if crash {
        drop(store);
    } else {
        store.close().expect("close");
    }
}

/// Every file of the store's CommitLog and ConsumeQueues, sorted.
fn files(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.join("commitlog"), root.join("consumequeue")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Opens the damaged store and reads everything it offers; only panics are failures.
fn open_and_read_all(root: &Path) {
    let Ok((store, _report)) = Store::open(small_config(root)) else {
        return;
    };
    for (topic, queue_id) in store.queues() {
        let bounds = store.bounds(&topic, queue_id);
        let mut offset = bounds.min_offset;
        // Every read moves forward or ends, so this terminates; the cap guards a bug.
        for _ in 0..10_000 {
            let Ok(read) = store.read(&topic, queue_id, offset, 16, 1 << 20, &accept_all) else {
                break;
            };
            match read.status {
                ReadStatus::Found | ReadStatus::NoMatchedMessage if read.next_offset > offset => {
                    offset = read.next_offset
                }
                _ => break,
            }
        }
        let _ = store.earliest_time(&topic, queue_id);
        let _ = store.offset_by_time(
            &topic,
            queue_id,
            1_700_000_000_000,
            quiver_store::Boundary::Lower,
        );
    }
    let _ = store.query_by_key("T", "K3", 8, 0, i64::MAX);
    let _ = append(&store, vec![simple("T", 0, b"after damage")]);
    let _ = store.close();
}

#[derive(Debug, Clone)]
enum Damage {
    /// Flip one bit at a fraction of the file's length.
    Flip { file: usize, at: f64, bit: u8 },
    /// Overwrite a run of bytes.
    Overwrite {
        file: usize,
        at: f64,
        bytes: Vec<u8>,
    },
    /// Cut the file at a fraction of its length.
    Cut { file: usize, at: f64 },
    /// Replace the file with arbitrary bytes.
    Replace { file: usize, bytes: Vec<u8> },
}

fn damage() -> impl Strategy<Value = Damage> {
    let file = 0usize..64;
    let at = 0.0f64..1.0;
    prop_oneof![
        (file.clone(), at.clone(), 0u8..8).prop_map(|(file, at, bit)| Damage::Flip {
            file,
            at,
            bit
        }),
        (
            file.clone(),
            at.clone(),
            prop::collection::vec(any::<u8>(), 1..64)
        )
            .prop_map(|(file, at, bytes)| Damage::Overwrite { file, at, bytes }),
        (file.clone(), at).prop_map(|(file, at)| Damage::Cut { file, at }),
        (file, prop::collection::vec(any::<u8>(), 0..5000))
            .prop_map(|(file, bytes)| Damage::Replace { file, bytes }),
    ]
}

fn apply(root: &Path, damage: &Damage) {
    let files = files(root);
    let pick = |file: usize| files[file % files.len()].clone();
    let offset = |bytes: &[u8], at: f64| ((bytes.len() as f64) * at) as usize;
    match damage {
        Damage::Flip { file, at, bit } => {
            let path = pick(*file);
            let mut bytes = std::fs::read(&path).expect("read");
            if !bytes.is_empty() {
                let i = offset(&bytes, *at).min(bytes.len() - 1);
                bytes[i] ^= 1 << bit;
            }
            std::fs::write(&path, bytes).expect("write");
        }
        Damage::Overwrite {
            file,
            at,
            bytes: new,
        } => {
            let path = pick(*file);
            let mut bytes = std::fs::read(&path).expect("read");
            let i = offset(&bytes, *at);
            let end = (i + new.len()).min(bytes.len());
            bytes[i..end].copy_from_slice(&new[..end - i]);
            std::fs::write(&path, bytes).expect("write");
        }
        Damage::Cut { file, at } => {
            let path = pick(*file);
            let bytes = std::fs::read(&path).expect("read");
            std::fs::write(&path, &bytes[..offset(&bytes, *at)]).expect("write");
        }
        Damage::Replace { file, bytes } => std::fs::write(pick(*file), bytes).expect("write"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn damaged_segments_and_consume_queues_never_panic(
        count in 1usize..40,
        crash in any::<bool>(),
        damages in prop::collection::vec(damage(), 1..4),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        build(dir.path(), count, crash);
        for d in &damages {
            apply(dir.path(), d);
        }
        open_and_read_all(dir.path());
        // A second open sees what the first recovery left.
        open_and_read_all(dir.path());
    }

    #[test]
    fn arbitrary_bytes_as_segment_and_consume_queue_never_panic(
        segment in prop::collection::vec(any::<u8>(), 0..6000),
        consume_queue in prop::collection::vec(any::<u8>(), 0..400),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("commitlog")).expect("mkdir");
        std::fs::write(root.join("commitlog").join(format!("{:020}", 0)), &segment).expect("write");
        let queue_dir = root.join("consumequeue/T/0");
        std::fs::create_dir_all(&queue_dir).expect("mkdir");
        std::fs::write(queue_dir.join(format!("{:020}", 0)), &consume_queue).expect("write");
        open_and_read_all(root);
    }
}
