//! The async client against a real `quiver up`: sends of every kind with their contents checked
//! on the consuming side, rebalance when a second consumer joins, offsets that survive a
//! consumer restart, and the lite pull consumer's seeks.

mod common;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use quiver_client::{
    Client, ClientConfig, ClientError, ConsumeFrom, LitePullConfig, LitePullConsumer, Message,
    MessageQueue, Producer, ProducerConfig, PushConsumer, PushConsumerConfig, SendStatus,
    StoredMessage,
};
use quiver_testkit::QuiverProcess;
use quiver_wire::message::property;

const WAIT: Duration = Duration::from_secs(30);

/// Polls `condition` every 20 ms until it holds; panics with `what` after `WAIT`.
async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn start() -> (tempfile::TempDir, QuiverProcess) {
    let dir = tempfile::tempdir().expect("temp dir");
    let quiver = common::up(dir.path());
    (dir, quiver)
}

fn client(quiver: &QuiverProcess) -> Client {
    Client::new(ClientConfig::new(&quiver.namesrv().to_string())).expect("client")
}

type Received = Arc<Mutex<Vec<StoredMessage>>>;

async fn consumer(
    quiver: &QuiverProcess,
    group: &str,
    topic: &str,
    from: ConsumeFrom,
) -> (PushConsumer, Received) {
    let received: Received = Arc::default();
    let sink = received.clone();
    let mut config = PushConsumerConfig::new(group, topic);
    config.consume_from = from;
    config.suspend_ms = 2_000;
    let consumer = PushConsumer::start(
        client(quiver),
        config,
        Arc::new(move |_queue: &MessageQueue, messages: &[StoredMessage]| {
            sink.lock().unwrap().extend_from_slice(messages)
        }),
    )
    .await
    .expect("consumer starts");
    (consumer, received)
}

/// Creates `topic` with `queues` queues and waits until the name server routes it.
async fn create_topic(quiver: &QuiverProcess, topic: &str, queues: i32) -> Client {
    let client = client(quiver);
    let broker = quiver.broker().to_string();
    client
        .create_topic(&broker, topic, queues)
        .await
        .expect("create topic");
    eventually("the topic's route", || async {
        client
            .refresh_route(topic)
            .await
            .is_ok_and(|route| route.read_queues.len() == queues as usize)
    })
    .await;
    client
}

fn count(received: &Received) -> usize {
    received.lock().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_send_arrives_with_its_contents() {
    let (_dir, quiver) = start();
    // Not created beforehand: the first send goes through TBW102's route and auto-create.
    let topic = "ClientSendKinds";
    let producer = Producer::new(client(&quiver), ProducerConfig::default());
    // `ready` comes before the broker's first registration reaches the name server.
    eventually("TBW102's route", || async {
        producer
            .client()
            .fetch_route("TBW102")
            .await
            .is_ok_and(|route| route.is_some())
    })
    .await;
    let first = producer
        .send(
            &Message::new(topic, "sync body")
                .with_tags("TagA")
                .with_key("k1")
                .with_key("k2")
                .with_property("color", "blue"),
        )
        .await
        .expect("sync send");
    assert_eq!(first.status, SendStatus::Ok);
    assert_eq!(first.uniq_id.len(), 32);
    let spawned = tokio::spawn(producer.send_async(Message::new(topic, "async body")));
    let second = spawned.await.expect("task").expect("async send");
    let batch: Vec<Message> = (0..5)
        .map(|i| Message::new(topic, format!("batch {i}")).with_key(format!("b{i}")))
        .collect();
    let batch_result = producer.send_batch(&batch).await.expect("batch send");
    assert_eq!(batch_result.msg_id.split(',').count(), 5);
    producer
        .send_oneway(&Message::new(topic, "oneway body"))
        .await
        .expect("oneway send");
    let chosen = MessageQueue {
        queue_id: 1,
        ..first.queue.clone()
    };
    let pinned = producer
        .send_to(&Message::new(topic, "pinned body"), &chosen)
        .await
        .expect("send to a chosen queue");
    assert_eq!(pinned.queue, chosen);

    // The broker registers the auto-created topic with the name server asynchronously.
    eventually("the new topic's route", || async {
        producer
            .client()
            .fetch_route(topic)
            .await
            .is_ok_and(|route| route.is_some())
    })
    .await;
    let (consumer, received) =
        consumer(&quiver, "kinds_group", topic, ConsumeFrom::FirstOffset).await;
    eventually("all 9 messages", || async { count(&received) >= 9 }).await;
    let messages = received.lock().unwrap().clone();
    assert_eq!(messages.len(), 9, "no duplicates");
    let by_body = |body: &str| {
        messages
            .iter()
            .find(|m| m.body[..] == *body.as_bytes())
            .unwrap_or_else(|| panic!("{body} not received"))
            .clone()
    };
    let sync = by_body("sync body");
    assert_eq!(sync.topic, topic);
    assert_eq!(sync.property(property::TAGS).as_deref(), Some("TagA"));
    assert_eq!(sync.property(property::KEYS).as_deref(), Some("k1 k2"));
    assert_eq!(sync.property("color").as_deref(), Some("blue"));
    assert_eq!(
        sync.property(property::UNIQ_KEY),
        Some(first.uniq_id.clone())
    );
    assert_eq!(sync.queue_id, first.queue.queue_id);
    assert_eq!(sync.queue_offset, first.queue_offset);
    assert_eq!(
        by_body("async body").property(property::UNIQ_KEY),
        Some(second.uniq_id)
    );
    let batch_uniq: Vec<&str> = batch_result.uniq_id.split(',').collect();
    assert_eq!(batch_uniq.len(), 5);
    for (i, uniq) in batch_uniq.iter().enumerate() {
        let message = by_body(&format!("batch {i}"));
        assert_eq!(message.queue_id, batch_result.queue.queue_id);
        assert_eq!(message.queue_offset, batch_result.queue_offset + i as i64);
        assert_eq!(message.property(property::KEYS), Some(format!("b{i}")));
        assert_eq!(message.property(property::UNIQ_KEY).as_deref(), Some(*uniq));
    }
    by_body("oneway body");
    assert_eq!(by_body("pinned body").queue_id, 1);
    consumer.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_consumer_takes_half_the_queues() {
    let (_dir, quiver) = start();
    let topic = "ClientRebalance";
    let admin = create_topic(&quiver, topic, 8).await;
    let (first, first_received) =
        consumer(&quiver, "split_group", topic, ConsumeFrom::LastOffset).await;
    assert_eq!(first.assigned().len(), 8);
    let (second, second_received) =
        consumer(&quiver, "split_group", topic, ConsumeFrom::LastOffset).await;
    // The broker notifies the first member, which rebalances without waiting for its timer.
    eventually("the queues split four and four", || async {
        first.assigned().len() == 4 && second.assigned().len() == 4
    })
    .await;
    let all: BTreeSet<MessageQueue> = first
        .assigned()
        .into_iter()
        .chain(second.assigned())
        .collect();
    assert_eq!(all.len(), 8, "together they hold every queue once");

    let producer = Producer::new(admin, ProducerConfig::default());
    for i in 0..40 {
        producer
            .send(&Message::new(topic, format!("m{i}")))
            .await
            .expect("send");
    }
    eventually("40 messages between the two", || async {
        count(&first_received) + count(&second_received) >= 40
    })
    .await;
    let first_bodies: BTreeSet<Bytes> = first_received
        .lock()
        .unwrap()
        .iter()
        .map(|m| m.body.clone())
        .collect();
    let second_bodies: BTreeSet<Bytes> = second_received
        .lock()
        .unwrap()
        .iter()
        .map(|m| m.body.clone())
        .collect();
    assert!(
        !first_bodies.is_empty() && !second_bodies.is_empty(),
        "both consumed"
    );
    assert!(
        first_bodies.is_disjoint(&second_bodies),
        "no message went to both"
    );
    assert_eq!(first_bodies.len() + second_bodies.len(), 40);
    let first_queues = first.assigned();
    assert!(first_received
        .lock()
        .unwrap()
        .iter()
        .all(|m| first_queues.iter().any(|q| q.queue_id == m.queue_id)));
    first.shutdown().await.expect("shutdown");
    second.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_a_consumer_restart() {
    let (_dir, quiver) = start();
    let topic = "ClientRestart";
    let admin = create_topic(&quiver, topic, 4).await;
    let producer = Producer::new(admin, ProducerConfig::default());
    let (consumer_one, received_one) =
        consumer(&quiver, "restart_group", topic, ConsumeFrom::LastOffset).await;
    for i in 0..20 {
        producer
            .send(&Message::new(topic, format!("before {i}")))
            .await
            .expect("send");
    }
    eventually("the first 20", || async { count(&received_one) >= 20 }).await;
    consumer_one.shutdown().await.expect("shutdown commits");

    for i in 0..10 {
        producer
            .send(&Message::new(topic, format!("after {i}")))
            .await
            .expect("send");
    }
    let (consumer_two, received_two) =
        consumer(&quiver, "restart_group", topic, ConsumeFrom::LastOffset).await;
    eventually("the 10 sent while no one consumed", || async {
        count(&received_two) >= 10
    })
    .await;
    // A marker sent last: once it is in, anything replayed from before would be in too.
    producer
        .send(&Message::new(topic, "marker"))
        .await
        .expect("send");
    eventually("the marker", || async { count(&received_two) >= 11 }).await;
    let bodies: Vec<String> = received_two
        .lock()
        .unwrap()
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(bodies.len(), 11, "{bodies:?}");
    assert!(
        bodies.iter().all(|b| !b.starts_with("before")),
        "{bodies:?}"
    );
    consumer_two.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lite_pull_assigns_seeks_and_commits() {
    let (_dir, quiver) = start();
    let topic = "ClientLitePull";
    let admin = create_topic(&quiver, topic, 1).await;
    let producer = Producer::new(admin.clone(), ProducerConfig::default());
    for i in 0..6 {
        producer
            .send(&Message::new(topic, format!("lite {i}")))
            .await
            .expect("send");
    }
    let mut config = LitePullConfig::new("lite_group");
    config.consume_from = ConsumeFrom::FirstOffset;
    config.suspend_ms = 1_000;
    let mut lite = LitePullConsumer::new(client(&quiver), config);
    let queues = lite.queues_of(topic).await.expect("queues");
    assert_eq!(queues.len(), 1);
    lite.assign(&queues);
    let mut bodies = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while bodies.len() < 6 && tokio::time::Instant::now() < deadline {
        for message in lite.poll(Duration::from_millis(500)).await.expect("poll") {
            bodies.push(String::from_utf8_lossy(&message.body).into_owned());
        }
    }
    assert_eq!(
        bodies,
        (0..6).map(|i| format!("lite {i}")).collect::<Vec<_>>()
    );

    lite.seek(&queues[0], 4).expect("seek");
    let again = lite.poll(WAIT).await.expect("poll");
    assert_eq!(again[0].body, Bytes::from_static(b"lite 4"));
    lite.seek_to_end(&queues[0]).await.expect("seek to end");
    assert!(lite
        .poll(Duration::from_millis(300))
        .await
        .expect("poll")
        .is_empty());
    lite.seek_to_begin(&queues[0]).await.expect("seek to begin");
    assert_eq!(lite.poll(WAIT).await.expect("poll")[0].queue_offset, 0);
    lite.seek(&queues[0], 3).expect("seek");
    lite.commit().await.expect("commit");
    assert_eq!(lite.committed(&queues[0]).await.expect("query"), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_and_a_dead_name_server_are_named() {
    let (_dir, quiver) = start();
    let result = PushConsumer::start(
        client(&quiver),
        PushConsumerConfig::new("g", "NoSuchTopic"),
        Arc::new(|_: &MessageQueue, _: &[StoredMessage]| {}),
    )
    .await;
    assert!(
        matches!(&result, Err(ClientError::TopicNotFound { topic }) if topic == "NoSuchTopic"),
        "{:?}",
        result.err()
    );
    let unused = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = unused.local_addr().expect("addr").to_string();
    drop(unused);
    let dead_client = Client::new(ClientConfig::new(&dead)).expect("client");
    let error = dead_client.route("T").await.expect_err("no name server");
    assert!(
        matches!(error, ClientError::NamesrvUnreachable { .. }),
        "{error}"
    );
}
