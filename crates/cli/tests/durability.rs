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
    QuiverProcess::up_with_config(&binary(), &dir.join("data"), Some(conf), dir)
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

/// A tmpfs of a few MiB mounted for one test; unmounted (lazily) when dropped.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    /// None when this process may not mount (not root, or no tmpfs): the test then skips.
    fn mount(path: &Path, size_mib: u32) -> Option<SmallDisk> {
        std::fs::create_dir_all(path).ok()?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then(|| SmallDisk {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

#[test]
fn a_full_disk_refuses_sends_keeps_pulls_and_recovers_when_space_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(disk) = SmallDisk::mount(&dir.path().join("disk"), 8) else {
        println!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let conf = dir.path().join("broker.conf");
    // Small files so that the 8 MiB hold several segments, queues and an index.
    let text = "flushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=1048576\n\
                mapedFileSizeConsumeQueue=6000\nmaxHashSlotNum=1000\nmaxIndexNum=4000\n\
                nonPersistentTopics=Presence\n";
    std::fs::write(&conf, text).expect("write conf");
    // Space the test gives back later.
    let ballast = disk.path.join("ballast");
    std::fs::write(&ballast, vec![1u8; 3 << 20]).expect("ballast");
    let data = disk.path.join("data");
    let args = |data: &Path| {
        vec![
            "up".to_string(),
            "-c".to_string(),
            conf.display().to_string(),
            "--data".to_string(),
            data.display().to_string(),
            "--namesrv-port".to_string(),
            "0".to_string(),
            "--broker-port".to_string(),
            "0".to_string(),
        ]
    };
    let start = || {
        let args = args(&data);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        QuiverProcess::start(&binary(), &args, dir.path()).expect("quiver up starts")
    };
    let quiver = start();
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).expect("connect");
    let options = quiver_testkit::SendOptions {
        queue_id: Some(0),
        ..Default::default()
    };
    let mut acked = Vec::new();
    let refusal = loop {
        let body = format!("{:06}-{}", acked.len(), "d".repeat(4000)).into_bytes();
        let response = client.send(TOPIC, &body, &options).expect("send");
        if response.code != response_code::SUCCESS {
            break response;
        }
        acked.push(body);
        assert!(acked.len() < 10_000, "the disk never filled");
    };
    assert_eq!(refusal.code, response_code::SERVICE_NOT_AVAILABLE);
    let remark = refusal.remark.clone().unwrap_or_default();
    // The append that met the full disk says so; if a background write (a checkpoint, a
    // ConsumeQueue flush) met it first, the store already refuses appends for it.
    assert!(
        remark.contains("disk is full") || remark.contains("No space left"),
        "{remark}"
    );
    assert!(acked.len() > 100, "only {} sends fit", acked.len());
    println!("{} sends fit before: {remark}", acked.len());

    // Pulls keep working and see every acknowledged message, intact.
    let mut reader = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let check = |reader: &mut WireClient, acked: &[Vec<u8>]| {
        let stored = quiver_testkit::crash::read_queue(reader, TOPIC, 0).expect("pull");
        assert_eq!(stored.len(), acked.len());
        for (message, body) in stored.iter().zip(acked) {
            assert_eq!(message.body.as_ref(), body.as_slice());
        }
    };
    check(&mut reader, &acked);

    // A non-persistent topic never waits on the disk: with the persistent topic's sends just
    // refused, its sends are answered from memory and read back.
    let presence = quiver_testkit::SendOptions {
        queue_id: Some(0),
        ..Default::default()
    };
    for i in 0..5 {
        let body = format!("presence {i}").into_bytes();
        let response = client.send("Presence", &body, &presence).expect("send");
        assert_eq!(
            response.code,
            response_code::SUCCESS,
            "non-persistent send {i} with the disk full: {:?}",
            response.remark
        );
    }
    let kept = quiver_testkit::crash::read_queue(&mut reader, "Presence", 0).expect("pull");
    let bodies: Vec<&[u8]> = kept.iter().map(|m| m.body.as_ref()).collect();
    assert_eq!(bodies.len(), 5, "{bodies:?}");
    assert_eq!(bodies[4], b"presence 4");

    // Space returns: sends succeed again once the store's probe write does (within a second or
    // so); until then they are refused, and not acknowledged.
    std::fs::remove_file(&ballast).expect("free space");
    let body = b"after the disk was freed".to_vec();
    let accepted = quiver_testkit::wait_until(Duration::from_secs(30), || {
        let response = client.send(TOPIC, &body, &options).expect("send");
        match response.code {
            response_code::SUCCESS => Some(()),
            response_code::SERVICE_NOT_AVAILABLE => None,
            other => panic!(
                "answered {other} after space returned: {:?}",
                response.remark
            ),
        }
    });
    assert!(
        accepted.is_some(),
        "sends were still refused 30 s after space returned"
    );
    acked.push(body);
    check(&mut reader, &acked);

    // And what was stored survives a crash.
    drop(quiver);
    let quiver = start();
    let mut reader = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    check(&mut reader, &acked);
}

#[test]
fn consumer_group_names_are_checked_as_rocketmq_checks_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let quiver = common::up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    client.create_topic(TOPIC, 1).expect("create");
    let pull = client
        .pull(TOPIC, "bad group!", 0, 0, 1, 0)
        .expect("pull answered");
    assert_eq!(pull.code, response_code::SYSTEM_ERROR);
    let remark = pull.remark.unwrap_or_default();
    assert!(
        remark.contains("the specified group[bad group!]"),
        "{remark}"
    );
    let mut offsets = BTreeMap::new();
    offsets.insert(0, 1);
    let error = commit_offsets(&mut client, "bad/group", TOPIC, &offsets).unwrap_err();
    assert!(error.to_string().contains("illegal characters"), "{error}");
    commit_offsets(&mut client, "good_group-1", TOPIC, &offsets).expect("a valid group");
}
