//! Non-persistent topics against a real `quiver up`, with the Rust client: delivery with tag
//! filters and long polling, a consumer behind a full ring moved on, the CommitLog untouched,
//! and a restart after which the topic is empty and its offsets go on.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quiver_client::{
    Client, ClientConfig, ConsumeFrom, Message, MessageQueue, Producer, ProducerConfig,
    PushConsumer, PushConsumerConfig, StoredMessage,
};
use quiver_testkit::{QuiverProcess, SendOptions, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

const WAIT: Duration = Duration::from_secs(30);
const CONF: &str = "nonPersistentTopics=Telemetry\nnonPersistentQueueBytes=65536\n";

async fn eventually<F: FnMut() -> bool>(what: &str, mut condition: F) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn client(quiver: &QuiverProcess) -> Client {
    Client::new(ClientConfig::new(&quiver.namesrv().to_string())).expect("client")
}

fn runtime_value(wire: &mut WireClient, key: &str) -> String {
    let request = Command::request(request_code::GET_BROKER_RUNTIME_INFO, Encoding::Json);
    let answer = wire.call(request).expect("runtime info");
    let table: serde_json::Value = serde_json::from_slice(&answer.body).expect("json body");
    table["table"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} missing"))
        .to_string()
}

fn max_offset(wire: &mut WireClient, topic: &str, queue_id: i32) -> i64 {
    let request = Command::request(request_code::GET_MAX_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("topic", topic)
            .with("queueId", queue_id),
    );
    let answer = wire.call(request).expect("max offset");
    answer.ext_get("offset").unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_persistent_topic_delivers_drops_when_full_and_restarts_empty() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut quiver = common::up_with_config(dir.path(), CONF);
    let mut wire = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let log_before = runtime_value(&mut wire, "commitLogMaxOffset");

    // A consumer of tag A waits (long polling) before anything is sent.
    let received: Arc<Mutex<Vec<StoredMessage>>> = Arc::default();
    let sink = received.clone();
    let mut config = PushConsumerConfig::new("telemetry_readers", "Telemetry");
    config.consume_from = ConsumeFrom::FirstOffset;
    config.expression = "A".into();
    config.suspend_ms = 15_000;
    let consumer = PushConsumer::start(
        client(&quiver),
        config,
        Arc::new(move |_queue: &MessageQueue, messages: &[StoredMessage]| {
            sink.lock().unwrap().extend_from_slice(messages)
        }),
    )
    .await
    .expect("consumer starts");
    let producer = Producer::new(client(&quiver), ProducerConfig::default());
    // Let the consumer take its queues and park its pulls first.
    eventually("the consumer to own queues", || {
        !consumer.assigned().is_empty()
    })
    .await;
    for i in 0..40 {
        let tags = if i % 2 == 0 { "A" } else { "B" };
        let message = Message::new("Telemetry", format!("reading {i}")).with_tags(tags);
        producer.send(&message).await.expect("send");
    }
    eventually("the 20 messages tagged A", || {
        received.lock().unwrap().len() >= 20
    })
    .await;
    {
        let got = received.lock().unwrap();
        assert_eq!(got.len(), 20, "only tag A, once each");
        assert!(got.iter().all(|m| m.topic == "Telemetry"));
    }
    consumer.shutdown().await.expect("consumer stops");

    // A full ring drops its oldest; a reader behind it is moved to the oldest kept message.
    let body = vec![b'x'; 1024];
    let on_zero = SendOptions {
        queue_id: Some(0),
        ..SendOptions::default()
    };
    for _ in 0..200 {
        let sent = wire.send("Telemetry", &body, &on_zero).expect("send");
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    }
    let behind = wire.pull("Telemetry", "late", 0, 0, 32, 0).expect("pull");
    assert_eq!(behind.code, response_code::PULL_OFFSET_MOVED);
    let oldest: i64 = behind.ext_get("nextBeginOffset").unwrap().parse().unwrap();
    assert!(oldest > 0);
    assert_ne!(runtime_value(&mut wire, "nonPersistentEvicted"), "0");
    assert_eq!(
        runtime_value(&mut wire, "commitLogMaxOffset"),
        log_before,
        "a non-persistent topic writes nothing to the CommitLog"
    );

    // A restart: the topic is there, empty, and its offsets go on.
    let end = max_offset(&mut wire, "Telemetry", 0);
    drop(wire);
    quiver.terminate().expect("stop");
    let quiver = common::up_with_config(dir.path(), CONF);
    let mut wire = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    assert_eq!(max_offset(&mut wire, "Telemetry", 0), end);
    let old = wire
        .pull("Telemetry", "late", 0, oldest, 32, 0)
        .expect("pull");
    assert_eq!(old.code, response_code::PULL_OFFSET_MOVED);
    let sent = wire.send("Telemetry", b"fresh", &on_zero).expect("send");
    assert_eq!(sent.ext_get("queueOffset"), Some(end.to_string().as_str()));
}
