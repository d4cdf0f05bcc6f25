//! Disk faults under the real broker: `quiver up` runs under the `LD_PRELOAD` shim of
//! `crates/testkit/shim`, and the test fails its CommitLog's fsyncs with EIO, or its writes
//! with ENOSPC, for a while. Nothing is acknowledged as SEND_OK that the disk did not take,
//! sends are refused as RocketMQ refuses them while its store is not writable
//! (SERVICE_NOT_AVAILABLE), runtime info says so and counts the errors, sends succeed again
//! once the disk does, and after a restart every message acknowledged SEND_OK is there.
//!
//! Needs a C compiler (`cc`) to build the shim; skipped, with a message, without one.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{binary, ext_i64, pull_all};
use quiver_testkit::{wait_until, FaultShim, QuiverProcess, SendOptions, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding};

const TOPIC: &str = "Faults";
const WAIT: Duration = Duration::from_secs(30);

/// `quiver up` on `dir/data` with `conf` as its broker.conf, under `shim` if given.
fn start(dir: &Path, conf: &str, shim: Option<&FaultShim>) -> QuiverProcess {
    let conf_path = dir.join("broker.conf");
    std::fs::write(&conf_path, conf).expect("write broker.conf");
    let data = dir.join("data");
    let args = [
        "up",
        "--data",
        data.to_str().expect("UTF-8 path"),
        "--namesrv-port",
        "0",
        "--broker-port",
        "0",
        "-c",
        conf_path.to_str().expect("UTF-8 path"),
    ];
    let env = shim.map(FaultShim::env).unwrap_or_default();
    QuiverProcess::start_with_env(&binary(), &args, dir, &env).expect("quiver up starts")
}

fn shim_or_skip(dir: &Path) -> Option<FaultShim> {
    match FaultShim::build(&dir.join("shim")) {
        Ok(shim) => Some(shim),
        Err(reason) => {
            eprintln!("skipped: {reason}");
            None
        }
    }
}

fn runtime_info(client: &mut WireClient) -> BTreeMap<String, String> {
    let request = Command::request(request_code::GET_BROKER_RUNTIME_INFO, Encoding::Json);
    let answer = client.call(request).expect("runtime info");
    assert_eq!(answer.code, response_code::SUCCESS);
    let body: serde_json::Value = serde_json::from_slice(&answer.body).expect("json body");
    body["table"]
        .as_object()
        .expect("a table")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// What was answered SEND_OK: offset in queue 0 -> body.
#[derive(Default)]
struct Acked(BTreeMap<i64, Bytes>);

impl Acked {
    /// Sends one message to queue 0; returns the answer's code (and keeps it if SEND_OK).
    fn send(&mut self, client: &mut WireClient, body: String) -> (i32, Option<String>) {
        let options = SendOptions {
            queue_id: Some(0),
            ..SendOptions::default()
        };
        let answer = client
            .send(TOPIC, body.as_bytes(), &options)
            .expect("an answer");
        if answer.code == response_code::SUCCESS {
            let offset = ext_i64(&answer, "queueOffset");
            assert!(self.0.insert(offset, Bytes::from(body)).is_none());
        }
        (answer.code, answer.remark)
    }

    /// Every acknowledged message is read back at its offset.
    fn check(&self, quiver: &QuiverProcess) {
        let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
        let read: BTreeMap<i64, Bytes> = pull_all(&mut client, TOPIC, 0, 0)
            .into_iter()
            .map(|m| (m.queue_offset, m.body))
            .collect();
        for (offset, body) in &self.0 {
            assert_eq!(
                read.get(offset),
                Some(body),
                "acknowledged message at offset {offset} is missing or differs"
            );
        }
    }
}

/// Sends until one is answered SEND_OK (the store probes its disk every half second to a second).
fn send_until_accepted(acked: &mut Acked, client: &mut WireClient, tag: &str) {
    let mut attempt = 0;
    let accepted = wait_until(WAIT, || {
        attempt += 1;
        let (code, _) = acked.send(client, format!("{tag} attempt {attempt}"));
        (code == response_code::SUCCESS).then_some(())
    });
    assert!(
        accepted.is_some(),
        "sends were not accepted again after the fault cleared"
    );
}

#[test]
fn a_failed_fsync_is_never_acknowledged_and_refuses_sends_until_the_disk_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(shim) = shim_or_skip(dir.path()) else {
        return;
    };
    let conf = "flushDiskType=SYNC_FLUSH\nsyncFlushTimeout=60000\n";
    let mut quiver = start(dir.path(), conf, Some(&shim));
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let created = client.create_topic(TOPIC, 1).expect("create topic");
    assert_eq!(created.code, response_code::SUCCESS, "{:?}", created.remark);
    let mut acked = Acked::default();
    for i in 0..20 {
        let (code, remark) = acked.send(&mut client, format!("before {i}"));
        assert_eq!(code, response_code::SUCCESS, "{remark:?}");
    }
    let info = runtime_info(&mut client);
    assert_eq!(info["storeUnwritable"], "false");
    assert_eq!(info["storeIoErrors"], "0");

    shim.fail("EIO", "fsync", &dir.path().join("data").join("commitlog"));
    let (code, remark) = acked.send(&mut client, "during the fault".to_string());
    assert_eq!(
        code,
        response_code::FLUSH_DISK_TIMEOUT,
        "a send whose fsync failed: {remark:?}"
    );
    for i in 0..5 {
        let (code, remark) = acked.send(&mut client, format!("refused {i}"));
        assert_eq!(code, response_code::SERVICE_NOT_AVAILABLE, "{remark:?}");
        let remark = remark.unwrap_or_default();
        assert!(
            remark.starts_with("service not available now") && remark.contains("not writable"),
            "{remark}"
        );
    }
    let info = runtime_info(&mut client);
    assert_eq!(info["storeUnwritable"], "true", "{info:?}");
    assert!(info["storeUnwritableReason"].contains("fsync"), "{info:?}");
    assert!(
        info["storeIoErrorsCommitLog"].parse::<u64>().unwrap() >= 1,
        "{info:?}"
    );
    assert!(
        info["storeIoLastErrorCommitLog"].contains("Input/output error"),
        "{info:?}"
    );
    // Reads go on while sends are refused.
    acked.check(&quiver);

    shim.clear();
    send_until_accepted(&mut acked, &mut client, "after the fault");
    for i in 0..10 {
        let (code, remark) = acked.send(&mut client, format!("after {i}"));
        assert_eq!(code, response_code::SUCCESS, "{remark:?}");
    }
    let info = runtime_info(&mut client);
    assert_eq!(info["storeUnwritable"], "false", "{info:?}");
    assert!(
        info["storeIoErrorsCommitLog"].parse::<u64>().unwrap() >= 1,
        "counts stay"
    );
    acked.check(&quiver);

    // A crash, and a start without the shim: every SEND_OK is there.
    quiver.kill9().expect("kill -9");
    let quiver = start(dir.path(), conf, None);
    acked.check(&quiver);
    assert!(
        quiver.log().contains("store I/O error"),
        "the fault was logged"
    );
}

#[test]
fn a_full_disk_refuses_sends_cleanly_and_they_succeed_once_space_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(shim) = shim_or_skip(dir.path()) else {
        return;
    };
    let mut quiver = start(dir.path(), "", Some(&shim));
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let created = client.create_topic(TOPIC, 1).expect("create topic");
    assert_eq!(created.code, response_code::SUCCESS, "{:?}", created.remark);
    let mut acked = Acked::default();
    for i in 0..10 {
        let (code, remark) = acked.send(&mut client, format!("before {i}"));
        assert_eq!(code, response_code::SUCCESS, "{remark:?}");
    }

    shim.fail(
        "ENOSPC",
        "write",
        &dir.path().join("data").join("commitlog"),
    );
    let (code, remark) = acked.send(&mut client, "on a full disk".to_string());
    assert_eq!(code, response_code::SERVICE_NOT_AVAILABLE, "{remark:?}");
    assert!(remark.unwrap_or_default().contains("disk is full"));
    for i in 0..5 {
        let (code, remark) = acked.send(&mut client, format!("refused {i}"));
        assert_eq!(code, response_code::SERVICE_NOT_AVAILABLE, "{remark:?}");
    }
    let info = runtime_info(&mut client);
    assert_eq!(info["storeUnwritable"], "true", "{info:?}");
    assert!(
        info["storeIoLastErrorCommitLog"].contains("No space left"),
        "{info:?}"
    );
    acked.check(&quiver);

    shim.clear();
    send_until_accepted(&mut acked, &mut client, "space returned");
    for i in 0..10 {
        let (code, remark) = acked.send(&mut client, format!("after {i}"));
        assert_eq!(code, response_code::SUCCESS, "{remark:?}");
    }
    let status = quiver.terminate().expect("stops on SIGTERM");
    assert!(
        status.success(),
        "a clean stop after the disk recovered: {status:?}"
    );
    let quiver = start(dir.path(), "", None);
    acked.check(&quiver);
}
