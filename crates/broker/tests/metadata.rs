//! What clients make the broker keep: the limits on topics, subscription groups, client ids and
//! the queues an offset may name, each refused with the key that sets it; topics.json written
//! in batches; a topic deleted that never existed leaves no trace.

mod harness;

use harness::{options, Harness};
use quiver_wire::body::{
    self, ConsumerData, HeartbeatData, KvTable, SubscriptionData, SubscriptionGroupConfig,
};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::UpdateConsumerOffsetRequestHeader;
use quiver_wire::{Command, Encoding, ExtFields};

fn heartbeat(client_id: &str, group: &str) -> Command {
    let data = HeartbeatData {
        client_id: client_id.into(),
        consumer_data_set: vec![ConsumerData {
            consume_from_where: "CONSUME_FROM_LAST_OFFSET".into(),
            consume_type: "CONSUME_PASSIVELY".into(),
            group_name: group.into(),
            message_model: "CLUSTERING".into(),
            subscription_data_set: vec![SubscriptionData {
                expression_type: "TAG".into(),
                sub_string: "*".into(),
                topic: "Orders".into(),
                ..SubscriptionData::default()
            }],
            unit_mode: false,
        }],
        ..HeartbeatData::default()
    };
    Command::request(request_code::HEART_BEAT, Encoding::Json).with_body(body::to_json(&data))
}

fn commit(topic: &str, group: &str, queue_id: i32, offset: i64) -> Command {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json).with_ext(header.to_ext())
}

fn update_group(name: &str) -> Command {
    Command::request(
        request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        Encoding::Json,
    )
    .with_ext(ExtFields::new())
    .with_body(body::to_json(&SubscriptionGroupConfig::named(name)))
}

fn delete_topic(topic: &str) -> Command {
    Command::request(request_code::DELETE_TOPIC_IN_BROKER, Encoding::Json)
        .with_ext(ExtFields::new().with("topic", topic))
}

/// A refusal with its code, naming the limit's key and the value in force.
#[track_caller]
fn assert_refused(answer: &Command, code: i32, key_and_value: &str) {
    let remark = answer.remark.as_deref().unwrap_or_default();
    assert_eq!(answer.code, code, "{remark}");
    assert!(remark.contains(key_and_value), "{remark}");
}

async fn runtime_figure(h: &Harness, key: &str) -> u64 {
    let request = Command::request(request_code::GET_BROKER_RUNTIME_INFO, Encoding::Json);
    let answer = h.call(request).await;
    let table: KvTable = body::from_json(&answer.body).expect("runtime info");
    table.table[key].parse().expect("a number")
}

#[tokio::test]
async fn topics_past_quiver_topics_max_are_refused_with_the_key_named() {
    let h = Harness::with_config("quiverTopicsMax=16");
    let topics = h.broker.administering().topics;
    let mut created = 0;
    while topics.count() < 16 {
        let answer = h.create_topic(&format!("Made{created}"), 1).await;
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        created += 1;
    }
    let answer = h.create_topic("OneTooMany", 1).await;
    assert_refused(&answer, response_code::SYSTEM_ERROR, "quiverTopicsMax=16");
    // A send that would create a topic is told the topic does not exist, and why.
    let answer = h.send("AutoCreated", b"x", &options()).await;
    assert_refused(
        &answer,
        response_code::TOPIC_NOT_EXIST,
        "quiverTopicsMax=16",
    );
    assert!(topics.shape("AutoCreated").is_none());
    // The topics there stay usable and changeable.
    assert_eq!(
        h.create_topic("Made0", 4).await.code,
        response_code::SUCCESS
    );
    assert_eq!(
        h.send("Made0", b"x", &options()).await.code,
        response_code::SUCCESS
    );
    // A deletion makes room.
    assert_eq!(
        h.call(delete_topic("Made0")).await.code,
        response_code::SUCCESS
    );
    assert_eq!(
        h.create_topic("OneTooMany", 1).await.code,
        response_code::SUCCESS
    );
    assert_eq!(runtime_figure(&h, "topicCount").await, 16);
}

#[tokio::test]
async fn names_rocketmq_refuses_are_refused() {
    let h = Harness::new();
    for bad in ["has space", "dots.not.allowed", &"x".repeat(128)] {
        let answer = h.create_topic(bad, 1).await;
        assert_eq!(answer.code, response_code::INVALID_PARAMETER, "{bad}");
    }
    for bad in ["has space", "dots.not.allowed", &"g".repeat(256)] {
        let answer = h.call(update_group(bad)).await;
        assert_eq!(answer.code, response_code::INVALID_PARAMETER, "{bad}");
    }
    assert_eq!(
        h.create_topic(&"x".repeat(127), 1).await.code,
        response_code::SUCCESS
    );
}

#[tokio::test]
async fn groups_past_quiver_subscription_groups_max_are_refused_with_the_key_named() {
    let h = Harness::with_config("quiverSubscriptionGroupsMax=16");
    h.create_topic("Orders", 2).await;
    let groups = h.broker.membership().groups;
    let mut made = 0;
    while groups.names().len() < 16 {
        let answer = h.call(update_group(&format!("g{made}"))).await;
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        made += 1;
    }
    let answer = h.call(update_group("oneTooMany")).await;
    assert_refused(
        &answer,
        response_code::SYSTEM_ERROR,
        "quiverSubscriptionGroupsMax=16",
    );
    // Groups created on first use are refused the same way, by a commit and by a heartbeat.
    let answer = h.call(commit("Orders", "byCommit", 0, 1)).await;
    assert_refused(
        &answer,
        response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
        "quiverSubscriptionGroupsMax=16",
    );
    let answer = h.call(heartbeat("c1", "byHeartbeat")).await;
    assert_refused(
        &answer,
        response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
        "quiverSubscriptionGroupsMax=16",
    );
    assert!(groups.get("byHeartbeat").is_none());
    // The groups there go on as before.
    assert_eq!(
        h.call(commit("Orders", "g0", 1, 5)).await.code,
        response_code::SUCCESS
    );
    assert_eq!(
        h.call(heartbeat("c1", "g0")).await.code,
        response_code::SUCCESS
    );
}

#[tokio::test]
async fn client_ids_past_their_limits_are_refused_with_the_key_named() {
    let h = Harness::with_config("quiverClientIdsPerConnectionMax=2\nquiverClientIdsMax=3");
    let (other, _outgoing) = h.second_connection();
    for id in ["a1", "a2"] {
        assert_eq!(
            h.call(heartbeat(id, "g")).await.code,
            response_code::SUCCESS
        );
    }
    let answer = h.call(heartbeat("a3", "g")).await;
    assert_refused(
        &answer,
        response_code::SYSTEM_ERROR,
        "quiverClientIdsPerConnectionMax=2",
    );
    // The ids there heartbeat again as often as they like.
    assert_eq!(
        h.call(heartbeat("a1", "g")).await.code,
        response_code::SUCCESS
    );
    let answer = h.call_on(&other, heartbeat("b1", "g")).await;
    assert_eq!(answer.code, response_code::SUCCESS);
    let answer = h.call_on(&other, heartbeat("b2", "g")).await;
    assert_refused(&answer, response_code::SYSTEM_ERROR, "quiverClientIdsMax=3");
    assert_eq!(runtime_figure(&h, "clientIdCount").await, 3);
    // A closed connection's ids make room.
    h.broker.serving().connection_closed(&other);
    let answer = h.call(heartbeat("a3", "g")).await;
    assert_refused(
        &answer,
        response_code::SYSTEM_ERROR,
        "quiverClientIdsPerConnectionMax=2",
    );
    let (third, _outgoing) = h.second_connection();
    let answer = h.call_on(&third, heartbeat("c1", "g")).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
}

#[tokio::test]
async fn offsets_are_taken_only_for_queues_the_topic_has() {
    let h = Harness::new();
    h.create_topic("Orders", 4).await;
    assert_eq!(
        h.call(commit("Orders", "g", 3, 7)).await.code,
        response_code::SUCCESS
    );
    for queue_id in [4, 1_000_000, -1] {
        let answer = h.call(commit("Orders", "g", queue_id, 7)).await;
        assert_eq!(
            answer.code,
            response_code::INVALID_PARAMETER,
            "{queue_id}: {:?}",
            answer.remark
        );
    }
    let offsets = h.broker.pulling().offsets;
    assert_eq!(offsets.get("Orders", "g", 3), Some(7));
    assert_eq!(offsets.get("Orders", "g", 4), None);
}

/// Sends that create topics never wait for topics.json, and admin creations arriving together
/// share one write: many topics, few writes. The file holds every one of them.
#[tokio::test]
async fn many_topics_created_at_once_cost_few_writes_and_all_reach_the_file() {
    let h = Harness::new();
    let topics = h.broker.administering().topics;
    let before = runtime_figure(&h, "topicConfigWrites").await;
    for index in 0..300 {
        let answer = h.send(&format!("Sent{index}"), b"x", &options()).await;
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    }
    assert_eq!(
        runtime_figure(&h, "topicConfigWrites").await,
        before,
        "a send's topic waits for no write"
    );
    assert!(topics.is_dirty());
    // 200 admin creations at once: each answers once its topic is in the file, and the first
    // write covers all of them.
    let replies: Vec<_> = (0..200)
        .map(|index| {
            let request =
                quiver_testkit::create_topic_request(&format!("Admin{index}"), 2, Encoding::Json);
            h.dispatch(&request)
        })
        .collect();
    for reply in replies {
        let answer = harness::finish(&h.broker, reply).await;
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    }
    let writes = runtime_figure(&h, "topicConfigWrites").await - before;
    assert_eq!(writes, 1, "500 topics, one write");
    assert!(!topics.is_dirty());

    // The write the admin creations waited for holds the sent topics too.
    let h = h.reopen(|_| {});
    let topics = h.broker.administering().topics;
    for index in 0..300 {
        assert!(
            topics.shape(&format!("Sent{index}")).is_some(),
            "Sent{index}"
        );
    }
    for index in 0..200 {
        let shape = topics.shape(&format!("Admin{index}")).expect("admin topic");
        assert_eq!(shape.write_queues, 2);
    }
}

#[tokio::test]
async fn deleting_a_topic_that_never_existed_answers_success_and_writes_nothing() {
    let h = Harness::new();
    let root = h.broker.lifecycle().config.store_root.clone();
    let config_dir = root.join("config");
    let modified = |name: &str| {
        std::fs::metadata(config_dir.join(name))
            .and_then(|m| m.modified())
            .ok()
    };
    let topics_before = modified("topics.json");
    let writes = runtime_figure(&h, "topicConfigWrites").await;
    let answer = h.call(delete_topic("NeverWas")).await;
    assert_eq!(answer.code, response_code::SUCCESS);
    assert!(
        !root.join("deletedTopics").exists(),
        "no deletion is recorded for a name that never held a message"
    );
    assert_eq!(modified("topics.json"), topics_before);
    assert!(modified("consumerOffset.json").is_none());
    assert_eq!(runtime_figure(&h, "topicConfigWrites").await, writes);
    // A topic created and never sent to is deleted from the table, and from no queue.
    h.create_topic("Empty", 2).await;
    assert_eq!(
        h.call(delete_topic("Empty")).await.code,
        response_code::SUCCESS
    );
    assert!(h.broker.administering().topics.shape("Empty").is_none());
    assert!(!root.join("deletedTopics").exists());
}
