//! Crash durability: 64 producers send while the broker is killed with SIGKILL at a random
//! moment; after a restart every acknowledged message must be where its send result said.
//! Set QUIVER_CRASH_SEED to replay a failing run (each run prints its seed).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::binary;
use quiver_testkit::crash::{
    check_survival, checkpoint_flushed_position, commit_offsets, committed_offset, kill_when,
    max_offset, Producers, Rng,
};
use quiver_testkit::{QuiverProcess, WireClient};
use quiver_wire::code::response_code;
use quiver_wire::Encoding;

const TOPIC: &str = "CrashTopic";
const GROUP: &str = "crash_group";
const QUEUES: i32 = 8;
const PRODUCERS: usize = 64;
const BODY_BYTES_MAX: usize = 2048;
/// Generous for a debug build on a busy machine; the rounds usually reach their target in
/// well under a second of sending.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);

fn seed() -> u64 {
    let seed = std::env::var("QUIVER_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("QUIVER_CRASH_SEED={seed}");
    seed
}

fn start(dir: &Path, conf: &Path) -> QuiverProcess {
    let data = dir.join("data");
    QuiverProcess::start(
        &binary(),
        &[
            "up",
            "-c",
            conf.to_str().expect("utf-8 path"),
            "--data",
            data.to_str().expect("utf-8 path"),
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
        ],
        dir,
    )
    .expect("quiver up starts")
}

fn write_conf(dir: &Path, flush: &str) -> PathBuf {
    let path = dir.join("broker.conf");
    // Small segments so that rounds cross segment boundaries.
    let text = format!("flushDiskType={flush}\nmapedFileSizeCommitLog=4194304\n");
    std::fs::write(&path, text).expect("write broker.conf");
    path
}

/// Whether the broker has persisted `offsets` for the group (it does so every few seconds).
fn offsets_persisted(data: &Path, offsets: &BTreeMap<i32, i64>) -> bool {
    let Ok(text) = std::fs::read_to_string(data.join("config/consumerOffset.json")) else {
        return false;
    };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    let table = &json["offsetTable"][format!("{TOPIC}@{GROUP}")];
    offsets
        .iter()
        .all(|(queue, offset)| table[queue.to_string()].as_i64() == Some(*offset))
}

/// One round: commit offsets, load, kill -9 at a random moment, restart, check.
/// `required` decides which acknowledged sends must survive, given the flushed position read
/// from the checkpoint after the kill. Returns the restarted process.
fn round(
    dir: &Path,
    conf: &Path,
    quiver: QuiverProcess,
    rng: &mut Rng,
    required: fn(u64, &quiver_testkit::crash::Ack) -> bool,
) -> QuiverProcess {
    let mut quiver = quiver;
    let data = dir.join("data");
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let created = client.create_topic(TOPIC, QUEUES).expect("create topic");
    assert_eq!(created.code, response_code::SUCCESS, "{:?}", created.remark);
    // Offsets that differ every round, below what is stored.
    let offsets: BTreeMap<i32, i64> = (0..QUEUES)
        .map(|q| {
            let max = max_offset(&mut client, TOPIC, q).expect("max offset");
            (q, (max - q as i64).max(0) + rng.range(0, 3) as i64)
        })
        .collect();
    commit_offsets(&mut client, GROUP, TOPIC, &offsets).expect("commit offsets");
    let producers = Producers::start(
        quiver.broker(),
        TOPIC,
        QUEUES,
        PRODUCERS,
        BODY_BYTES_MAX,
        rng.next_u64(),
    )
    .expect("producers start");
    let acks_min = rng.range(100, 3000) as usize;
    kill_when(
        &producers,
        acks_min,
        LOAD_TIMEOUT,
        || offsets_persisted(&data, &offsets),
        || quiver.kill9(),
    )
    .expect("kill at a random moment");
    let acks = producers.finish().expect("producers saw only SUCCESS");
    let flushed = checkpoint_flushed_position(&data.join("checkpoint")).expect("checkpoint");
    let quiver = start(dir, conf);
    assert!(quiver.log().contains("unclean stop"), "recovery ran");
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let survival = check_survival(&mut client, TOPIC, QUEUES, &acks, |ack| {
        required(flushed, ack)
    })
    .unwrap_or_else(|e| panic!("after the crash: {e:#}"));
    println!("{survival:?} flushed={flushed}");
    assert!(survival.acked >= acks_min);
    for (queue, offset) in &offsets {
        let committed = committed_offset(&mut client, GROUP, TOPIC, *queue).expect("query");
        assert_eq!(
            committed,
            Some(*offset),
            "committed offset of queue {queue}"
        );
    }
    quiver
}

#[test]
fn sync_flush_keeps_every_acknowledged_message_through_kill_9() {
    let mut rng = Rng::new(seed());
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = write_conf(dir.path(), "SYNC_FLUSH");
    let mut quiver = start(dir.path(), &conf);
    for _ in 0..2 {
        // Earlier rounds' messages are checked again: they are still acknowledged.
        quiver = round(dir.path(), &conf, quiver, &mut rng, |_, _| true);
    }
}

#[test]
fn async_flush_keeps_what_the_checkpoint_covers_with_no_holes() {
    let mut rng = Rng::new(seed());
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = write_conf(dir.path(), "ASYNC_FLUSH");
    let quiver = start(dir.path(), &conf);
    // A record below the checkpoint's flushed position was fsynced: flushes end on record
    // boundaries, so such a record lies wholly below it.
    round(dir.path(), &conf, quiver, &mut rng, |flushed, ack| {
        ack.position < flushed
    });
}
