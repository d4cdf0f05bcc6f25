//! Non-persistent topics (`persistence=memory`): sends land in a ring per queue and never in
//! the CommitLog; pulls read the ring with the offsets, filters, statuses and long polling of a
//! ConsumeQueue; a full ring drops its oldest; offsets go on across restarts.

mod harness;

use std::time::Duration;

use harness::{field, messages, options, pull_request, Harness};
use quiver_broker::handler::Reply;
use quiver_testkit::{create_topic_request, SendOptions};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

fn create_with(topic: &str, queues: i32, attributes: &str) -> Command {
    let mut request = create_topic_request(topic, queues, Encoding::Json);
    let ext = request.ext.take().unwrap_or_default();
    request.with_ext(ext.with("attributes", attributes))
}

async fn memory_topic(h: &Harness, topic: &str, queues: i32) {
    let created = h
        .call(create_with(topic, queues, "+persistence=memory"))
        .await;
    assert_eq!(created.code, response_code::SUCCESS, "{:?}", created.remark);
}

fn on_queue(queue_id: i32, tags: &str) -> SendOptions {
    SendOptions {
        queue_id: Some(queue_id),
        tags: Some(tags.into()),
        ..options()
    }
}

async fn max_offset(h: &Harness, topic: &str, queue_id: i32) -> Command {
    let request = Command::request(request_code::GET_MAX_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("topic", topic)
            .with("queueId", queue_id),
    );
    h.call(request).await
}

#[tokio::test]
async fn sends_are_served_from_memory_with_offsets_and_tag_filters_and_never_reach_the_log() {
    let h = Harness::new();
    memory_topic(&h, "Prices", 2).await;
    let log_before = h.broker.pulling().store.stats().written_position;
    for i in 0..10 {
        let tags = if i % 2 == 0 { "Even" } else { "Odd" };
        let sent = h
            .send("Prices", format!("tick {i}").as_bytes(), &on_queue(1, tags))
            .await;
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
        assert_eq!(field(&sent, "queueOffset"), i.to_string());
    }
    assert_eq!(
        h.broker.pulling().store.stats().written_position,
        log_before,
        "nothing of a non-persistent topic is written to the CommitLog"
    );
    assert_eq!(
        h.broker.pulling().store.bounds("Prices", 1).max_offset,
        10,
        "the store answers a non-persistent queue's bounds from its ring"
    );

    let all = messages(&h.pull("Prices", "g", 1, 0).await);
    assert_eq!(all.len(), 10);
    for (i, message) in all.iter().enumerate() {
        assert_eq!(message.queue_offset, i as i64);
        assert_eq!(&message.body[..], format!("tick {i}").as_bytes());
        assert_eq!(message.topic, "Prices");
    }
    let mut odd = pull_request("Prices", "g", 1, 0, 0);
    let ext = odd.ext.take().unwrap();
    let odd = odd.with_ext(ext.with("subscription", "Odd"));
    let odd = messages(&h.call(odd).await);
    let offsets: Vec<i64> = odd.iter().map(|m| m.queue_offset).collect();
    assert_eq!(offsets, [1, 3, 5, 7, 9]);

    assert_eq!(field(&max_offset(&h, "Prices", 1).await, "offset"), "10");
    let at_end = h.pull("Prices", "g", 1, 10).await;
    assert_eq!(at_end.code, response_code::PULL_NOT_FOUND);
}

#[tokio::test]
async fn a_parked_pull_wakes_when_a_message_lands_in_the_ring() {
    let h = Harness::new();
    memory_topic(&h, "Presence", 1).await;
    let Reply::Wait(parked) = h.dispatch(&pull_request("Presence", "g", 0, 0, 20_000)) else {
        panic!("a pull on an empty queue with SUSPEND parks");
    };
    let parked = tokio::spawn(parked);
    let sent = h.send("Presence", b"online", &on_queue(0, "A")).await;
    assert_eq!(sent.code, response_code::SUCCESS);
    let answer = tokio::time::timeout(Duration::from_secs(10), parked)
        .await
        .expect("woken well before the suspend time")
        .expect("the parked pull completes");
    assert_eq!(&messages(&answer.command)[0].body[..], b"online");
}

#[tokio::test]
async fn a_full_ring_drops_its_oldest_and_a_consumer_behind_it_moves_on() {
    let h = Harness::with_config("nonPersistentQueueBytes=65536\n");
    memory_topic(&h, "Telemetry", 1).await;
    let body = vec![b't'; 1024];
    for _ in 0..200 {
        let sent = h.send("Telemetry", &body, &on_queue(0, "T")).await;
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    }
    let bounds = h.broker.pulling().store.bounds("Telemetry", 0);
    assert_eq!(bounds.max_offset, 200);
    assert!(bounds.min_offset > 100, "{bounds:?}");
    assert!(
        h.broker.pulling().store.memory_usage().0 <= 65_536,
        "{}",
        h.broker.pulling().store.memory_usage().0
    );

    let behind = h.pull("Telemetry", "slow", 0, 0).await;
    assert_eq!(behind.code, response_code::PULL_OFFSET_MOVED);
    assert_eq!(
        field(&behind, "nextBeginOffset"),
        bounds.min_offset.to_string()
    );
    let carried_on = messages(
        &h.pull("Telemetry", "slow", 0, bounds.min_offset as i64)
            .await,
    );
    assert_eq!(carried_on[0].queue_offset, bounds.min_offset as i64);

    let drops = &h.broker.pulling().store.memory_usage().1["Telemetry"];
    assert_eq!(drops.evicted, bounds.min_offset);
    assert_eq!(drops.skipped_by_group["slow"], bounds.min_offset);
}

#[tokio::test]
async fn after_a_restart_the_topic_is_empty_and_its_offsets_go_on() {
    let h = Harness::new();
    memory_topic(&h, "Quotes", 1).await;
    for _ in 0..5 {
        h.send("Quotes", b"q", &on_queue(0, "Q")).await;
    }
    // A clean stop writes the exact next offset.
    h.broker.pulling().store.close().expect("close");
    let h = h.reopen(|_| {});
    assert!(h.broker.pulling().topics.shape("Quotes").unwrap().memory);
    let bounds = h.broker.pulling().store.bounds("Quotes", 0);
    assert_eq!((bounds.min_offset, bounds.max_offset), (5, 5));
    let old = h.pull("Quotes", "g", 0, 2).await;
    assert_eq!(old.code, response_code::PULL_OFFSET_MOVED);
    // Nothing this ring held was skipped: those messages went with the restart.
    assert!(h.broker.pulling().store.memory_usage().1.is_empty());
    let sent = h.send("Quotes", b"new", &on_queue(0, "Q")).await;
    assert_eq!(field(&sent, "queueOffset"), "5");

    // A crash (no close): offsets go on past every offset handed out, from the reservation.
    for _ in 0..3 {
        h.send("Quotes", b"q", &on_queue(0, "Q")).await;
    }
    let h = h.reopen(|_| {});
    let sent = h.send("Quotes", b"after crash", &on_queue(0, "Q")).await;
    let offset: u64 = field(&sent, "queueOffset").parse().unwrap();
    assert!(
        offset >= 9,
        "offset {offset} was handed out before the crash"
    );
}

#[tokio::test]
async fn persistence_is_set_at_creation_and_checked() {
    let h = Harness::new();
    let bad = h.call(create_with("T1", 1, "+persistence=tape")).await;
    assert_eq!(bad.code, response_code::INVALID_PARAMETER);
    let malformed = h.call(create_with("T1", 1, "persistence=memory")).await;
    assert_eq!(malformed.code, response_code::INVALID_PARAMETER);

    memory_topic(&h, "T1", 1).await;
    // Updating the queues keeps it in memory; turning it into a persistent topic is refused.
    let updated = h.call(create_with("T1", 2, "")).await;
    assert_eq!(updated.code, response_code::SUCCESS);
    assert!(h.broker.pulling().topics.shape("T1").unwrap().memory);
    let to_disk = h.call(create_with("T1", 2, "-persistence")).await;
    assert_eq!(to_disk.code, response_code::INVALID_PARAMETER);
    assert!(to_disk.remark.unwrap().contains("cannot change"));

    assert_eq!(h.create_topic("T2", 1).await.code, response_code::SUCCESS);
    let to_memory = h.call(create_with("T2", 1, "+persistence=memory")).await;
    assert_eq!(to_memory.code, response_code::INVALID_PARAMETER);

    // A delayed message would wait on disk and be delivered through the store: refused.
    let delayed = SendOptions {
        properties: vec![("DELAY".into(), "2".into())],
        ..on_queue(0, "D")
    };
    let sent = h.send("T1", b"later", &delayed).await;
    assert_eq!(sent.code, response_code::MESSAGE_ILLEGAL);
}

#[tokio::test]
async fn topics_listed_in_broker_conf_are_non_persistent_from_the_start() {
    let h =
        Harness::with_config("nonPersistentTopics=Ticks, Heartbeats\ndefaultTopicQueueNums=3\n");
    for topic in ["Ticks", "Heartbeats"] {
        let shape = h
            .broker
            .pulling()
            .topics
            .shape(topic)
            .expect("created at start");
        assert!(shape.memory);
        assert_eq!(shape.write_queues, 3);
    }
    let sent = h.send("Ticks", b"1", &on_queue(2, "T")).await;
    assert_eq!(sent.code, response_code::SUCCESS);
    assert_eq!(h.broker.pulling().store.stats().written_position, 0);
}
