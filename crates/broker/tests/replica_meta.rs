//! What a slave copies from its master: the four answers a master gives (GET_ALL_TOPIC_CONFIG,
//! GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET, GET_ALL_SUBSCRIPTIONGROUP_CONFIG) in the
//! shapes RocketMQ writes, and what a slave takes from them.

mod harness;

use std::collections::BTreeMap;
use std::time::Duration;

use harness::{field, options, Harness};
use quiver_broker::background::delay::deliver_due;
use quiver_broker::delay::SCHEDULE_TOPIC;
use quiver_broker::replica_meta::{self, CopyError, MasterMeta};
use quiver_broker::topic::{topic_config, AUTO_CREATE_TOPIC};
use quiver_broker::BrokerConfig;
use quiver_testkit::SendOptions;
use quiver_wire::body::{
    from_json, ConsumerOffsetSerializeWrapper, DelayOffsetSerializeWrapper,
    SubscriptionGroupConfig, SubscriptionGroupWrapper, TopicConfigAndMappingSerializeWrapper,
};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

/// GET_ALL_TOPIC_CONFIG's body as Apache RocketMQ 5.5.0 writes it: the topic wrapper of the
/// REGISTER_BROKER in /work/shared/wire-captures/05-mqadmin.jsonl (seq 39), the same class
/// and serialization the master answers GET_ALL_TOPIC_CONFIG with, cut to 5 of its 22 topics.
const ROCKETMQ_TOPIC_CONFIG: &str = r#"{"dataVersion":{"counter":7,"stateVersion":0,"timestamp":1795293294115},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1795293313090},"topicConfigTable":{"wire_admin_topic":{"attributes":{},"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG","topicName":"wire_admin_topic","topicSysFlag":0,"writeQueueNums":2},"%RETRY%wire_lite_group":{"attributes":{},"order":false,"perm":6,"readQueueNums":1,"topicFilterType":"SINGLE_TAG","topicName":"%RETRY%wire_lite_group","topicSysFlag":0,"writeQueueNums":1},"TBW102":{"attributes":{},"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8},"rmq_sys_REVIVE_LOG_DefaultCluster":{"attributes":{},"order":false,"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"rmq_sys_REVIVE_LOG_DefaultCluster","topicSysFlag":0,"writeQueueNums":8},"SCHEDULE_TOPIC_XXXX":{"attributes":{},"order":false,"perm":6,"readQueueNums":18,"topicFilterType":"SINGLE_TAG","topicName":"SCHEDULE_TOPIC_XXXX","topicSysFlag":0,"writeQueueNums":18}},"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}"#;

/// GET_ALL_CONSUMER_OFFSET's body as RocketMQ writes it (fastjson over ConsumerOffsetManager:
/// keys sorted, queue ids as bare integer keys, the derived `groupTopicMap` getter included).
/// Built from the upstream classes: no capture holds this request.
const ROCKETMQ_CONSUMER_OFFSETS: &str = r#"{"dataVersion":{"counter":2,"stateVersion":0,"timestamp":1795293294115},"groupTopicMap":{"g":["Orders"]},"offsetTable":{"Orders@g":{0:7,1:9}}}"#;

fn request(code: i32) -> Command {
    Command::request(code, Encoding::Json)
}

/// A RocketMQ 5 slave's GET_ALL_TOPIC_CONFIG: the first page of what it would page through.
fn paged_request(code: i32, seq_key: &'static str, max_key: &'static str) -> Command {
    let ext = ExtFields::new()
        .with(seq_key, 0)
        .with(max_key, 2_000)
        .with("dataVersion", "");
    request(code).with_ext(ext)
}

fn commit_request(topic: &str, group: &str, queue_id: i32, offset: i64) -> Command {
    let ext = ExtFields::new()
        .with("topic", topic)
        .with("consumerGroup", group)
        .with("queueId", queue_id)
        .with("commitOffset", offset);
    request(request_code::UPDATE_CONSUMER_OFFSET).with_ext(ext)
}

async fn commit(h: &Harness, topic: &str, group: &str, queue_id: i32, offset: i64) {
    let response = h.call(commit_request(topic, group, queue_id, offset)).await;
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
}

/// A master with topic Orders (4 queues), offsets 7 and 9 for group g on queues 0 and 1, and
/// one delayed message delivered from level 2 (so level 2's delay offset is 1).
async fn master() -> Harness {
    let mut h = Harness::new();
    assert_eq!(
        h.create_topic("Orders", 4).await.code,
        response_code::SUCCESS
    );
    commit(&h, "Orders", "g", 0, 7).await;
    commit(&h, "Orders", "g", 1, 9).await;
    let level_2 = SendOptions {
        properties: vec![("DELAY".into(), "2".into())],
        ..options()
    };
    h.send("Orders", b"later", &level_2).await;
    h.advance(5_000);
    deliver_due(h.broker.background(), h.now_ms);
    h
}

/// The four answers of `h`, parsed as a slave parses them.
async fn answers(h: &Harness) -> MasterMeta {
    let body = |response: Command| {
        assert_eq!(
            response.code,
            response_code::SUCCESS,
            "{:?}",
            response.remark
        );
        response.body
    };
    let topics = body(h.call(request(request_code::GET_ALL_TOPIC_CONFIG)).await);
    let offsets = body(h.call(request(request_code::GET_ALL_CONSUMER_OFFSET)).await);
    let delay = body(h.call(request(request_code::GET_ALL_DELAY_OFFSET)).await);
    let groups = body(
        h.call(request(request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
            .await,
    );
    MasterMeta {
        topics: from_json(&topics).expect("topic config parses"),
        offsets: from_json(&offsets).expect("consumer offsets parse"),
        delay_offsets: from_json(&delay).expect("delay offsets parse"),
        subscription_groups: from_json(&groups).expect("subscription groups parse"),
    }
}

/// The object keys of `text` at its top level, in the order written.
fn top_level_keys(text: &str) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_str(text).expect("JSON");
    let mut keys: Vec<(usize, String)> = value
        .as_object()
        .expect("an object")
        .keys()
        .map(|key| {
            let needle = format!("\"{key}\":");
            (text.find(&needle).expect("key in text"), key.clone())
        })
        .collect();
    keys.sort();
    keys.into_iter().map(|(_, key)| key).collect()
}

#[tokio::test]
async fn the_topic_config_answer_has_rocketmq_shape_and_every_topic() {
    let h = master().await;
    // As a RocketMQ 5 slave asks: paging fields set. The whole table comes back at once, with
    // the total that tells the slave it has every topic.
    let response = h
        .call(paged_request(
            request_code::GET_ALL_TOPIC_CONFIG,
            "topicSeq",
            "maxTopicNum",
        ))
        .await;
    assert_eq!(response.code, response_code::SUCCESS);
    let text = std::str::from_utf8(&response.body).expect("UTF-8");
    let wrapper: TopicConfigAndMappingSerializeWrapper = from_json(&response.body).unwrap();
    let names = h.broker.replicating().topics.names();
    assert_eq!(field(&response, "totalTopicNum"), names.len().to_string());
    assert_eq!(
        wrapper
            .topic_config_table
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        names
    );

    // Golden: RocketMQ 5.5.0's keys in its order, and a topic entry byte for byte (Quiver's
    // TBW102 is RocketMQ's: 8 queues, perm 7).
    assert_eq!(top_level_keys(text), top_level_keys(ROCKETMQ_TOPIC_CONFIG));
    let tbw102 = r#""TBW102":{"attributes":{},"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8}"#;
    assert!(ROCKETMQ_TOPIC_CONFIG.contains(tbw102));
    assert!(text.contains(tbw102), "{text}");
    assert!(text.contains(r#""Orders":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"Orders","topicSysFlag":0,"writeQueueNums":4}"#));
    assert!(text.starts_with(r#"{"dataVersion":{"counter":"#));
    assert!(text.ends_with(r#"},"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}"#));

    // The mapping version stays put between answers: a RocketMQ slave that sees it change
    // replaces its topic table again.
    let again: TopicConfigAndMappingSerializeWrapper = from_json(
        &h.call(request(request_code::GET_ALL_TOPIC_CONFIG))
            .await
            .body,
    )
    .unwrap();
    assert_eq!(again.mapping_data_version, wrapper.mapping_data_version);
    assert_eq!(again.data_version, wrapper.data_version);
}

#[tokio::test]
async fn the_consumer_offset_answer_is_rocketmqs_offset_file() {
    let h = master().await;
    let response = h.call(request(request_code::GET_ALL_CONSUMER_OFFSET)).await;
    assert_eq!(response.code, response_code::SUCCESS);
    let text = String::from_utf8(response.body.to_vec()).unwrap();
    // RocketMQ's bytes with the data version's time made ours and the integer keys quoted
    // (standard JSON, which fastjson reads into its Integer-keyed map).
    let expected = ROCKETMQ_CONSUMER_OFFSETS
        .replace(r#""counter":2"#, r#""counter":0"#)
        .replace("1795293294115", &h.now_ms.to_string())
        .replace("{0:7,1:9}", r#"{"0":7,"1":9}"#);
    assert_eq!(text, expected);
    let ours: ConsumerOffsetSerializeWrapper = from_json(text.as_bytes()).unwrap();
    let theirs: ConsumerOffsetSerializeWrapper =
        from_json(ROCKETMQ_CONSUMER_OFFSETS.as_bytes()).unwrap();
    assert_eq!(ours.offset_table, theirs.offset_table);
    assert_eq!(ours.group_topic_map, theirs.group_topic_map);
}

#[tokio::test]
async fn the_delay_offset_answer_is_the_delay_offset_file() {
    let h = master().await;
    let response = h.call(request(request_code::GET_ALL_DELAY_OFFSET)).await;
    assert_eq!(response.code, response_code::SUCCESS);
    assert_eq!(&response.body[..], br#"{"offsetTable":{"2":1}}"#);
    let wrapper: DelayOffsetSerializeWrapper = from_json(&response.body).unwrap();
    assert_eq!(wrapper.offset_table, BTreeMap::from([(2, 1)]));
}

#[tokio::test]
async fn the_subscription_group_answer_is_the_group_table() {
    let h = master().await;
    let response = h
        .call(paged_request(
            request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            "groupSeq",
            "maxGroupNum",
        ))
        .await;
    assert_eq!(response.code, response_code::SUCCESS);
    // "g", created by its first offset commit, and RocketMQ's 8 system groups.
    assert_eq!(field(&response, "totalGroupNum"), "9");
    let text = std::str::from_utf8(&response.body).unwrap();
    assert_eq!(
        top_level_keys(text),
        ["dataVersion", "forbiddenTable", "subscriptionGroupTable"]
    );
    let wrapper: SubscriptionGroupWrapper = from_json(&response.body).unwrap();
    assert_eq!(
        wrapper.subscription_group_table.get("g"),
        Some(&SubscriptionGroupConfig::named("g"))
    );
    assert!(wrapper
        .subscription_group_table
        .contains_key("CID_RMQ_SYS_TRANS"));
    assert!(wrapper.forbidden_table.is_empty());
}

#[tokio::test]
async fn a_slave_takes_the_masters_topics_offsets_and_delay_offsets() {
    let master = master().await;
    let slave = Harness::new();
    assert_eq!(
        slave.create_topic("Gone", 2).await.code,
        response_code::SUCCESS
    );
    commit(&slave, "Gone", "g", 0, 5).await;
    // Drain the creation's registration request, to see the copy's own.
    tokio::time::timeout(
        Duration::from_secs(1),
        slave.broker.registering().topics_changed_since(),
    )
    .await
    .expect("creating a topic asks for registration");

    let report =
        replica_meta::apply(slave.broker.replicating(), answers(&master).await).expect("applies");

    let orders = slave
        .broker
        .replicating()
        .topics
        .shape("Orders")
        .expect("Orders copied");
    assert_eq!((orders.read_queues, orders.write_queues), (4, 4));
    assert!(slave.broker.replicating().topics.shape("Gone").is_none());
    assert_eq!(report.topics.added, ["Orders"]);
    assert_eq!(report.topics.removed, ["Gone"]);
    assert_eq!(slave.broker.replicating().offsets.get("Gone", "g", 0), None);
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 0),
        Some(7)
    );
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 1),
        Some(9)
    );
    assert_eq!(
        slave.broker.replicating().delay_offsets.snapshot(),
        BTreeMap::from([(2, 1)])
    );
    assert!(report.delay_offsets_changed);
    assert_eq!(report.subscription_groups, 9);
    assert!(
        slave.broker.replicating().groups.get("g").is_some(),
        "the master's group is copied"
    );
    tokio::time::timeout(
        Duration::from_secs(1),
        slave.broker.registering().topics_changed_since(),
    )
    .await
    .expect("a changed topic table asks for registration");

    // A second copy of the same answers changes nothing.
    let report =
        replica_meta::apply(slave.broker.replicating(), answers(&master).await).expect("applies");
    assert!(!report.topics.changed());
    assert_eq!(report.offsets.taken, 0);
    assert!(!report.delay_offsets_changed);
}

#[tokio::test]
async fn a_slave_applies_rocketmqs_topic_config_and_keeps_its_own_system_topics() {
    // Two delay levels: this slave's schedule topic has 2 queues, the master's 18.
    let slave = Harness::with_config("messageDelayLevel=1s 5s");
    let meta = MasterMeta {
        topics: from_json(ROCKETMQ_TOPIC_CONFIG.as_bytes()).expect("RocketMQ's body parses"),
        ..MasterMeta::default()
    };
    let report = replica_meta::apply(slave.broker.replicating(), meta).expect("applies");
    let admin = slave
        .broker
        .replicating()
        .topics
        .shape("wire_admin_topic")
        .expect("copied");
    assert_eq!(
        (admin.read_queues, admin.write_queues, admin.perm),
        (2, 2, 6)
    );
    assert!(slave
        .broker
        .replicating()
        .topics
        .shape("%RETRY%wire_lite_group")
        .is_some());
    // A system topic the slave lacks is taken; its own stay as they are, even when absent
    // from the master's table (BenchmarkTest).
    assert!(slave
        .broker
        .replicating()
        .topics
        .shape("rmq_sys_REVIVE_LOG_DefaultCluster")
        .is_some());
    assert_eq!(
        slave
            .broker
            .replicating()
            .topics
            .shape(SCHEDULE_TOPIC)
            .map(|s| s.write_queues),
        Some(2)
    );
    assert!(slave
        .broker
        .replicating()
        .topics
        .shape("BenchmarkTest")
        .is_some());
    assert!(slave
        .broker
        .replicating()
        .topics
        .shape(AUTO_CREATE_TOPIC)
        .is_some());
    assert!(report.topics.removed.is_empty(), "{:?}", report.topics);
}

#[tokio::test]
async fn a_newer_commit_on_the_slave_is_not_lowered_until_the_master_passes_it() {
    let slave = Harness::new();
    let master_offsets = |q0: i64, q1: i64| MasterMeta {
        topics: TopicConfigAndMappingSerializeWrapper {
            topic_config_table: BTreeMap::from([(
                "Orders".to_string(),
                topic_config("Orders", 4, 6),
            )]),
            ..Default::default()
        },
        offsets: from_json(
            format!(r#"{{"offsetTable":{{"Orders@g":{{0:{q0},1:{q1}}}}}}}"#).as_bytes(),
        )
        .expect("offsets parse"),
        ..MasterMeta::default()
    };
    replica_meta::apply(slave.broker.replicating(), master_offsets(7, 9)).unwrap();
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 0),
        Some(7)
    );

    // The master is down; a consumer commits queue 0 to the slave.
    commit(&slave, "Orders", "g", 0, 20).await;

    // The master is back with its older offsets: the slave keeps its own newer commit, and
    // takes the master's for queue 1, which nobody committed here, lower or not.
    let report = replica_meta::apply(slave.broker.replicating(), master_offsets(7, 4)).unwrap();
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 0),
        Some(20)
    );
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 1),
        Some(4)
    );
    assert_eq!(
        (report.offsets.kept_newer.len(), report.offsets.taken),
        (1, 1)
    );
    assert_eq!(
        (
            report.offsets.kept_newer[0].queue_id,
            report.offsets.kept_newer[0].offset
        ),
        (0, 20)
    );

    // Consumers commit to the master again and pass the slave's offset: the master's wins...
    replica_meta::apply(slave.broker.replicating(), master_offsets(25, 4)).unwrap();
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 0),
        Some(25)
    );
    // ...and from then on so does a reset to an earlier offset on the master.
    replica_meta::apply(slave.broker.replicating(), master_offsets(3, 4)).unwrap();
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 0),
        Some(3)
    );
}

#[tokio::test]
async fn malformed_offsets_from_a_master_are_skipped() {
    let slave = Harness::new();
    let offsets = from_json(
        br#"{"offsetTable":{"no-separator":{0:1},"Orders@g":{0:5,-1:3,1:-2},"bad topic@g":{0:1}}}"#,
    )
    .unwrap();
    let (merged, skipped) = replica_meta::apply_offsets(slave.broker.replicating(), offsets);
    assert_eq!((merged.taken, skipped), (1, 4));
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 0),
        Some(5)
    );
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", -1),
        None
    );
}

/// A master broker started as the binary starts it, on a free loopback port.
async fn running_master(root: &std::path::Path) -> quiver_broker::RunningBroker {
    let config = BrokerConfig {
        store_root: root.join("store"),
        listen_port: 0,
        commitlog_segment_bytes: 16 << 20,
        consume_queue_entries_per_file: 1_000,
        index_slots: 1_000,
        index_entries_max: 4_000,
        ..BrokerConfig::default()
    };
    quiver_broker::start(config).await.expect("master starts")
}

#[tokio::test]
async fn copy_from_master_asks_a_running_master_over_tcp_and_applies_its_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = running_master(dir.path()).await;
    let master = running.broker.replicating();
    master
        .topics
        .create_if_absent(topic_config("Orders", 4, 6))
        .expect("topic");
    master.offsets.commit("Orders", "g", 2, 11);

    let slave = Harness::new();
    let addr = running.local_addr.to_string();
    let report =
        replica_meta::copy_from_master(slave.broker.replicating(), &addr, Duration::from_secs(10))
            .await
            .expect("copies");
    running.shutdown().await;

    assert_eq!(report.topics.added, ["Orders"]);
    assert_eq!(report.offsets.taken, 1);
    // The system groups: "g" committed straight into the offset table, not through a request.
    assert_eq!(report.subscription_groups, 8);
    assert_eq!(
        slave
            .broker
            .replicating()
            .topics
            .shape("Orders")
            .map(|s| s.write_queues),
        Some(4)
    );
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 2),
        Some(11)
    );
}

#[tokio::test]
async fn copy_from_master_reports_a_master_that_cannot_be_reached() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    let slave = Harness::new();
    let error =
        replica_meta::copy_from_master(slave.broker.replicating(), &addr, Duration::from_secs(5))
            .await
            .expect_err("nothing listens there");
    assert!(
        matches!(&error, CopyError::Unreachable { request, .. } if *request == "GET_ALL_TOPIC_CONFIG"),
        "{error}"
    );
    let own = slave.broker.replicating().store_host.to_string();
    let error =
        replica_meta::copy_from_master(slave.broker.replicating(), &own, Duration::from_secs(5))
            .await
            .expect_err("not from itself");
    assert!(matches!(error, CopyError::OwnAddress { .. }), "{error}");
}

#[tokio::test]
async fn a_commit_made_on_the_slave_while_the_master_was_away_reaches_the_master() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = running_master(dir.path()).await;
    let master = running.broker.replicating();
    master
        .topics
        .create_if_absent(topic_config("Orders", 4, 6))
        .expect("topic");
    master.offsets.commit("Orders", "g", 2, 11);
    let addr = running.local_addr.to_string();
    let slave = Harness::new();
    replica_meta::copy_from_master(slave.broker.replicating(), &addr, Duration::from_secs(10))
        .await
        .expect("first copy");

    // With the master away, the group's consumer committed queue 2 further on the slave.
    commit(&slave, "Orders", "g", 2, 40).await;

    // The next copy keeps the slave's newer offset and hands it to the master, so a consumer
    // that goes back to the master does not consume 11..40 again.
    let report =
        replica_meta::copy_from_master(slave.broker.replicating(), &addr, Duration::from_secs(10))
            .await
            .expect("second copy");
    assert_eq!(report.offsets.kept_newer.len(), 1, "{report:?}");
    assert_eq!(master.offsets.get("Orders", "g", 2), Some(40));
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 2),
        Some(40)
    );

    // Once the master has it, the slave holds no claim of its own any more: a later reset on
    // the master to an earlier offset reaches the slave.
    master.offsets.commit("Orders", "g", 2, 5);
    let report =
        replica_meta::copy_from_master(slave.broker.replicating(), &addr, Duration::from_secs(10))
            .await
            .expect("third copy");
    running.shutdown().await;
    assert!(report.offsets.kept_newer.is_empty(), "{report:?}");
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 2),
        Some(5)
    );
}

#[tokio::test]
async fn a_commit_on_the_slave_is_kept_when_the_master_returns_without_the_group() {
    let slave = Harness::new();
    assert_eq!(
        slave.create_topic("Orders", 4).await.code,
        response_code::SUCCESS
    );
    commit(&slave, "Orders", "g", 1, 30).await;
    // A master killed before it persisted the group's offsets comes back with none.
    let master = MasterMeta {
        topics: TopicConfigAndMappingSerializeWrapper {
            topic_config_table: BTreeMap::from([(
                "Orders".to_string(),
                topic_config("Orders", 4, 6),
            )]),
            ..Default::default()
        },
        ..MasterMeta::default()
    };
    let report = replica_meta::apply(slave.broker.replicating(), master).unwrap();
    assert_eq!(
        slave.broker.replicating().offsets.get("Orders", "g", 1),
        Some(30)
    );
    let kept: Vec<_> = report
        .offsets
        .kept_newer
        .iter()
        .map(|c| (c.topic.as_str(), c.group.as_str(), c.queue_id, c.offset))
        .collect();
    assert_eq!(kept, [("Orders", "g", 1, 30)]);
}

/// A slave builds ConsumeQueues from its master's log at once but learns the topic table at
/// its next copy; restarted in between (say, as the new master) it still serves the topic.
#[tokio::test]
async fn a_topic_the_store_holds_but_the_table_lacks_is_served_after_a_restart() {
    let h = Harness::new();
    assert_eq!(
        h.create_topic("Copied", 3).await.code,
        response_code::SUCCESS
    );
    let on_queue_2 = SendOptions {
        queue_id: Some(2),
        ..options()
    };
    assert_eq!(
        h.send("Copied", b"kept", &on_queue_2).await.code,
        response_code::SUCCESS
    );
    let h = h.reopen(|root| {
        std::fs::remove_file(root.join("config").join("topics.json")).expect("drop the table")
    });
    assert_eq!(
        h.broker
            .replicating()
            .topics
            .shape("Copied")
            .map(|s| s.read_queues),
        Some(3)
    );
    let pulled = h.pull("Copied", "g", 2, 0).await;
    assert_eq!(pulled.code, response_code::SUCCESS, "{:?}", pulled.remark);
    assert_eq!(&harness::messages(&pulled)[0].body[..], b"kept");
}
