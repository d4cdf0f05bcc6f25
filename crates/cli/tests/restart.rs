//! Restarts: a clean stop (SIGTERM) and a crash (kill -9) both come back with every
//! acknowledged message at its original offset, consumer offsets, and topics.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{binary, ext_i64, pull_all, up, wait_for_route};
use quiver_testkit::crash::max_offset;
use quiver_testkit::{send_request, QuiverProcess, SendOptions, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

const QUEUES: i32 = 4;

/// Sends `count` messages round-robin over the queues; returns (queue, offset) -> body.
fn send_many(
    quiver: &QuiverProcess,
    topic: &str,
    count: usize,
    tag: &str,
) -> BTreeMap<(i32, i64), Bytes> {
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    let mut sent = BTreeMap::new();
    for i in 0..count {
        let queue_id = (i % QUEUES as usize) as i32;
        let body = Bytes::from(format!("{tag} message {i} {}", "x".repeat(i % 300)));
        let options = SendOptions {
            queue_id: Some(queue_id),
            ..SendOptions::default()
        };
        let response = client.send(topic, &body, &options).unwrap();
        assert_eq!(
            response.code,
            response_code::SUCCESS,
            "{:?}",
            response.remark
        );
        let offset = ext_i64(&response, "queueOffset");
        assert!(
            sent.insert((queue_id, offset), body).is_none(),
            "offset handed out twice"
        );
    }
    sent
}

fn assert_all_readable(
    quiver: &QuiverProcess,
    topic: &str,
    expected: &BTreeMap<(i32, i64), Bytes>,
) {
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    for queue_id in 0..QUEUES {
        let messages = pull_all(&mut client, topic, queue_id, 0);
        let wanted: Vec<_> = expected.range((queue_id, 0)..(queue_id + 1, 0)).collect();
        assert_eq!(
            messages.len(),
            wanted.len(),
            "queue {queue_id} holds every acknowledged message"
        );
        for (message, ((_, offset), body)) in messages.iter().zip(wanted) {
            assert_eq!(message.queue_offset, *offset);
            assert_eq!(&message.body, body);
        }
        assert_eq!(
            max_offset(&mut client, topic, queue_id).unwrap() as usize,
            messages.len(),
            "ConsumeQueue agrees with the CommitLog"
        );
    }
}

fn commit_offset(quiver: &QuiverProcess, topic: &str, queue_id: i32, offset: i64) {
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let update = Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("consumerGroup", "g")
            .with("topic", topic)
            .with("queueId", queue_id)
            .with("commitOffset", offset),
    );
    assert_eq!(client.call(update).unwrap().code, response_code::SUCCESS);
}

fn committed_offset(quiver: &QuiverProcess, topic: &str, queue_id: i32) -> Option<i64> {
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let query = Command::request(request_code::QUERY_CONSUMER_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("consumerGroup", "g")
            .with("topic", topic)
            .with("queueId", queue_id),
    );
    let response = client.call(query).unwrap();
    (response.code == response_code::SUCCESS).then(|| ext_i64(&response, "offset"))
}

#[test]
fn a_clean_restart_keeps_messages_offsets_and_topics() {
    let dir = tempfile::tempdir().unwrap();
    let mut quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    client.create_topic("Durable", QUEUES).unwrap();
    let sent = send_many(&quiver, "Durable", 200, "clean");
    commit_offset(&quiver, "Durable", 2, 17);
    drop(client);
    assert!(
        quiver.terminate().unwrap().success(),
        "clean exit on SIGTERM"
    );
    assert!(
        !dir.path().join("abort").exists(),
        "a clean stop removes the abort file"
    );

    let quiver = up(dir.path());
    assert!(!quiver.log().contains("unclean stop"));
    wait_for_route(quiver.namesrv(), "Durable");
    assert_all_readable(&quiver, "Durable", &sent);
    assert_eq!(committed_offset(&quiver, "Durable", 2), Some(17));
    // New sends continue after the old offsets.
    let more = send_many(&quiver, "Durable", 8, "after");
    assert_eq!(more.keys().next(), Some(&(0, 50)));
}

/// A consumer commits offsets as fast as it can while the broker is told to stop: every commit
/// the broker answered is in what the next start reads, because the broker stops reading
/// requests before it persists offsets, not after.
#[test]
fn offsets_committed_until_the_stop_survive_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    client.create_topic("Stopping", QUEUES).unwrap();
    let broker = quiver.broker();
    let committer = std::thread::spawn(move || {
        let mut client = WireClient::connect(broker, Encoding::Json).unwrap();
        client.set_read_timeout(Duration::from_secs(10)).unwrap();
        let mut answered = 0;
        for offset in 1.. {
            let update = Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json)
                .with_ext(
                    ExtFields::new()
                        .with("consumerGroup", "g")
                        .with("topic", "Stopping")
                        .with("queueId", 1)
                        .with("commitOffset", offset),
                );
            match client.call(update) {
                Ok(response) if response.code == response_code::SUCCESS => answered = offset,
                _ => break,
            }
        }
        answered
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        quiver.terminate().unwrap().success(),
        "clean exit on SIGTERM"
    );
    let answered = committer.join().unwrap();
    assert!(answered > 0, "the broker answered commits before the stop");

    let quiver = up(dir.path());
    let kept = committed_offset(&quiver, "Stopping", 1).expect("an offset is stored");
    assert!(
        kept >= answered,
        "offset {answered} was acknowledged before the stop, but the restart has {kept}"
    );
}

/// A stop asked for while the store recovers does not kill the process halfway: recovery
/// finishes, the broker closes the store, and the next start is a clean one. The checkpoint is
/// swapped for a FIFO holding the same bytes, so recovery blocks on reading it until the test
/// has sent SIGTERM: the signal lands during recovery every time.
#[test]
fn sigterm_during_recovery_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    client.create_topic("Recovering", QUEUES).unwrap();
    let sent = send_many(&quiver, "Recovering", 2_000, "before");
    let checkpoint_path = dir.path().join("checkpoint");
    let checkpoint = quiver_testkit::wait_until(Duration::from_secs(10), || {
        std::fs::read(&checkpoint_path)
            .ok()
            .filter(|c| !c.is_empty())
    })
    .expect("the broker writes a checkpoint");
    quiver.kill9().unwrap();
    std::fs::remove_file(&checkpoint_path).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&checkpoint_path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", checkpoint_path.display());

    let log_path = dir.path().join("quiver.log");
    let logged_before = std::fs::read_to_string(&log_path).unwrap_or_default().len();
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(&log_path)
        .unwrap();
    let mut child = std::process::Command::new(binary())
        .args(["up", "--data", dir.path().to_str().unwrap()])
        .args(["--namesrv-port", "0", "--broker-port", "0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .env("QUIVER_LOG", "info")
        .spawn()
        .unwrap();
    let opening = quiver_testkit::wait_until(Duration::from_secs(20), || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        log[logged_before..]
            .contains("opening the store")
            .then_some(())
    });
    assert!(opening.is_some(), "the broker logs that it opens the store");
    quiver_testkit::terminate_pid(child.id()).unwrap();
    // Give the signal time to arrive, then let recovery read the checkpoint and go on.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&checkpoint_path, &checkpoint).unwrap();
    let status = child.wait().unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    let this_run = &log[logged_before..];
    assert!(
        status.success(),
        "a clean exit, not death by signal: {status:?}\n{this_run}"
    );
    assert!(
        this_run.contains("stop requested while starting"),
        "the stop was seen once the store was open:\n{this_run}"
    );
    assert!(
        !dir.path().join("abort").exists(),
        "the store was closed cleanly"
    );
    let after = std::fs::metadata(&checkpoint_path).unwrap();
    assert!(
        after.is_file(),
        "the closing store replaced the FIFO with a checkpoint file"
    );

    let quiver = up(dir.path());
    let log = quiver.log();
    let last_start = &log[log.rfind("opening the store").unwrap()..];
    assert!(
        !last_start.contains("unclean stop"),
        "the start after the stop is a clean one:\n{last_start}"
    );
    assert_all_readable(&quiver, "Recovering", &sent);
}

#[test]
fn kill_9_and_restart_keeps_every_acknowledged_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    client.create_topic("Crashy", QUEUES).unwrap();
    let mut sent = send_many(&quiver, "Crashy", 400, "before");
    quiver.kill9().unwrap();
    assert!(
        dir.path().join("abort").exists(),
        "a crash leaves the abort file"
    );

    let mut quiver = up(dir.path());
    assert_all_readable(&quiver, "Crashy", &sent);
    sent.extend(send_many(&quiver, "Crashy", 40, "between"));
    quiver.kill9().unwrap();

    let quiver = up(dir.path());
    assert_all_readable(&quiver, "Crashy", &sent);
}

#[test]
fn the_seed_broker_conf_starts_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let seed = include_str!("fixtures/seed-002-broker.conf");
    let store = dir.path().join("store");
    let config = seed.replace("/usr/local/rocketmq/store", store.to_str().unwrap());
    let path = dir.path().join("broker.conf");
    std::fs::write(&path, config).unwrap();
    let quiver = QuiverProcess::start(
        &binary(),
        &["broker", "-c", path.to_str().unwrap()],
        dir.path(),
    )
    .unwrap();
    assert_eq!(quiver.broker().port(), 10911, "listenPort from the file");
    let log = quiver.log();
    assert!(
        !log.contains("ignoring"),
        "every key of the seed's file is understood:\n{log}"
    );
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    let response = client
        .send("SeedTopic", b"hello", &SendOptions::default())
        .unwrap();
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    assert!(store.join("commitlog").join(format!("{:020}", 0)).exists());
}

#[test]
fn unknown_keys_are_listed_in_one_warning_and_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broker.conf");
    let config = format!(
        "listenPort=0\nstorePathRootDir={}\nsendMessageThreadPoolNums=128\n\nnoSuchKey=1\n",
        dir.path().join("store").display()
    );
    std::fs::write(&path, config).unwrap();
    let quiver = QuiverProcess::start(
        &binary(),
        &["broker", "-c", path.to_str().unwrap()],
        dir.path(),
    )
    .unwrap();
    let log = quiver.log();
    let warnings: Vec<_> = log.lines().filter(|l| l.contains("ignoring")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("sendMessageThreadPoolNums (line 3)"),
        "{log}"
    );
    assert!(warnings[0].contains("noSuchKey (line 5)"), "{log}");
}

#[test]
fn a_bad_config_value_stops_start_up_naming_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broker.conf");
    std::fs::write(
        &path,
        "brokerName=b\n# fine so far\nflushDiskType=SOMETIMES\n",
    )
    .unwrap();
    let output = std::process::Command::new(binary())
        .args(["broker", "-c", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 3"), "{stderr}");
    assert!(stderr.contains("flushDiskType"), "{stderr}");
    assert!(stderr.contains("ASYNC_FLUSH, SYNC_FLUSH"), "{stderr}");
}

/// A client that keeps sending while the broker stops receives the answer to every send the
/// broker stored: the broker ends the connection with FIN after its last answer and reads on
/// until the client closes, instead of closing on unread input (a reset, which throws away the
/// answers still queued towards the client).
#[test]
fn every_stored_send_is_answered_when_the_broker_stops_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut quiver = up(dir.path());
    let mut admin = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    admin.create_topic("Stopping", 1).unwrap();
    drop(admin);

    let stream = std::net::TcpStream::connect(quiver.broker()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let mut stream = stream.try_clone().unwrap();
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let body = vec![b'w'; 100];
            let options = SendOptions {
                queue_id: Some(0),
                ..SendOptions::default()
            };
            let mut frame = bytes::BytesMut::new();
            for opaque in 1..=1_000_000 {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                let mut request = send_request("Stopping", &body, &options, false);
                request.opaque = opaque;
                frame.clear();
                quiver_wire::encode_frame(&request, &mut frame).unwrap();
                if stream.write_all(&frame).is_err() {
                    break;
                }
            }
        })
    };
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let status = quiver.terminate().unwrap();
        (quiver, status)
    });

    // Reads slower than the broker answers, so that answers are queued towards us when it stops.
    let mut reader = stream;
    let mut input = bytes::BytesMut::new();
    let mut chunk = vec![0u8; 32 * 1024];
    let mut answered = 0i64;
    let ended = loop {
        match reader.read(&mut chunk) {
            Ok(0) => break None,
            Ok(read) => input.extend_from_slice(&chunk[..read]),
            Err(error) => break Some(error),
        }
        while let Some(frame) = quiver_wire::decode_frame(&mut input).unwrap() {
            if frame.is_response() {
                assert_eq!(frame.code, response_code::SUCCESS, "{:?}", frame.remark);
                answered += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    done.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    drop(reader);
    let (_, status) = stopper.join().unwrap();
    assert!(status.success(), "clean exit on SIGTERM");
    assert!(
        ended.is_none(),
        "the broker reset the connection: {ended:?}"
    );

    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let stored = max_offset(&mut client, "Stopping", 0).unwrap();
    assert!(answered > 0, "no send was answered before the stop");
    assert_eq!(answered, stored, "every stored send was answered");
}
