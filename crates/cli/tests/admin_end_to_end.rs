//! Orderly-consumer queue locks and the admin requests mqadmin sends: LOCK_BATCH_MQ /
//! UNLOCK_BATCH_MQ, GET_TOPIC_STATS_INFO, GET_CONSUME_STATS (MessageQueue-keyed bodies in
//! fastjson's bare-object-key form), GET_TOPIC_CONFIG, GET_BROKER_CONFIG and topic deletion.

mod common;

use bytes::Bytes;
use common::{ext_i64, pull_all, up, wait_for_route};
use quiver_testkit::{SendOptions, WireClient};
use quiver_wire::body::{
    self, LockBatchRequestBody, LockBatchResponseBody, MessageQueue, TopicConfig,
};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::message::StoredMessage;
use quiver_wire::stats::{ConsumeStats, TopicStatsTable};
use quiver_wire::{Command, Encoding, ExtFields};

fn queue(id: i32) -> MessageQueue {
    MessageQueue {
        topic: "Ordered".into(),
        broker_name: "broker-a".into(),
        queue_id: id,
    }
}

fn lock(client: &mut WireClient, code: i32, client_id: &str, ids: &[i32]) -> Command {
    let request = LockBatchRequestBody {
        client_id: client_id.into(),
        consumer_group: "orderly".into(),
        mq_set: ids.iter().map(|id| queue(*id)).collect(),
        only_this_broker: true,
    };
    client
        .call(Command::request(code, Encoding::Json).with_body(body::to_json(&request)))
        .expect("lock call")
}

fn granted(response: &Command) -> Vec<i32> {
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let body: LockBatchResponseBody = body::from_json(&response.body).expect("lock body");
    let mut ids: Vec<i32> = body.lock_ok_mq_set.iter().map(|q| q.queue_id).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn a_queue_is_locked_by_one_client_of_a_group_until_it_unlocks() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let a = lock(
        &mut client,
        request_code::LOCK_BATCH_MQ,
        "client-a",
        &[0, 1],
    );
    assert_eq!(granted(&a), vec![0, 1]);
    let b = lock(
        &mut client,
        request_code::LOCK_BATCH_MQ,
        "client-b",
        &[1, 2],
    );
    assert_eq!(granted(&b), vec![2], "queue 1 stays with client-a");
    let renewed = lock(
        &mut client,
        request_code::LOCK_BATCH_MQ,
        "client-a",
        &[0, 1, 2],
    );
    assert_eq!(granted(&renewed), vec![0, 1]);
    let unlocked = lock(&mut client, request_code::UNLOCK_BATCH_MQ, "client-a", &[1]);
    assert_eq!(unlocked.code, response_code::SUCCESS);
    let b = lock(&mut client, request_code::LOCK_BATCH_MQ, "client-b", &[1]);
    assert_eq!(granted(&b), vec![1]);
}

#[test]
fn topic_and_consume_stats_report_offsets_per_queue() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    assert_eq!(
        client.create_topic("Stats", 3).unwrap().code,
        response_code::SUCCESS
    );
    for (queue_id, count) in [(0, 2), (1, 3), (2, 5)] {
        for i in 0..count {
            let options = SendOptions {
                queue_id: Some(queue_id),
                ..SendOptions::default()
            };
            let response = client
                .send("Stats", format!("m{i}").as_bytes(), &options)
                .unwrap();
            assert_eq!(response.code, response_code::SUCCESS);
        }
    }
    let commit = |client: &mut WireClient, queue_id: i32, offset: i64| {
        let ext = ExtFields::new()
            .with("consumerGroup", "readers")
            .with("topic", "Stats")
            .with("queueId", queue_id)
            .with("commitOffset", offset);
        let request =
            Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json).with_ext(ext);
        assert_eq!(client.call(request).unwrap().code, response_code::SUCCESS);
    };
    commit(&mut client, 0, 2);
    commit(&mut client, 1, 1);

    let ext = ExtFields::new().with("topic", "Stats");
    let response = client
        .call(Command::request(request_code::GET_TOPIC_STATS_INFO, Encoding::Json).with_ext(ext))
        .unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
    let text = String::from_utf8(response.body.to_vec()).unwrap();
    assert!(
        text.contains(r#"{"offsetTable":{{"topic":"Stats","#),
        "bare object keys: {text}"
    );
    let stats = TopicStatsTable::from_java_json(&response.body).unwrap();
    let max: Vec<i64> = stats.offset_table.values().map(|o| o.max_offset).collect();
    assert_eq!(max, vec![2, 3, 5]);
    assert!(stats
        .offset_table
        .values()
        .all(|o| o.min_offset == 0 && o.last_update_timestamp > 0));

    let ext = ExtFields::new().with("consumerGroup", "readers");
    let response = client
        .call(Command::request(request_code::GET_CONSUME_STATS, Encoding::Json).with_ext(ext))
        .unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
    let consume = ConsumeStats::from_java_json(&response.body).unwrap();
    let rows: Vec<(i32, i64, i64)> = consume
        .offset_table
        .iter()
        .map(|(q, o)| (q.queue_id, o.broker_offset, o.consumer_offset))
        .collect();
    assert_eq!(rows, vec![(0, 2, 2), (1, 3, 1), (2, 5, 0)]);
    let last = consume
        .offset_table
        .values()
        .map(|o| o.last_timestamp > 0)
        .collect::<Vec<_>>();
    assert_eq!(last, vec![true, true, false]);

    let ext = ExtFields::new().with("topic", "Stats").with("lo", "true");
    let response = client
        .call(Command::request(request_code::GET_TOPIC_CONFIG, Encoding::Json).with_ext(ext))
        .unwrap();
    let config: TopicConfig = body::from_json(&response.body).unwrap();
    assert_eq!(
        (config.read_queue_nums, config.write_queue_nums, config.perm),
        (3, 3, 6)
    );
    let ext = ExtFields::new().with("topic", "Nowhere");
    let response = client
        .call(Command::request(request_code::GET_TOPIC_CONFIG, Encoding::Json).with_ext(ext))
        .unwrap();
    assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
}

#[test]
fn system_topics_and_bad_names_cannot_be_created_or_reshaped() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    for topic in [
        "BenchmarkTest",
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "rmq_sys_anything",
        "DefaultCluster",
        "broker-a",
    ] {
        let response = client.create_topic(topic, 2).unwrap();
        assert_eq!(response.code, response_code::INVALID_PARAMETER, "{topic}");
        assert_eq!(
            response.remark.as_deref(),
            Some(format!("The topic[{topic}] is conflict with system topic.").as_str())
        );
    }
    let response = client.create_topic("bad name", 2).unwrap();
    assert_eq!(response.code, response_code::INVALID_PARAMETER);

    // BenchmarkTest keeps the shape the broker gave it.
    let request = Command::request(request_code::GET_TOPIC_CONFIG, Encoding::Json)
        .with_ext(ExtFields::new().with("topic", "BenchmarkTest"));
    let response = client.call(request).unwrap();
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let config: TopicConfig = body::from_json(&response.body).unwrap();
    assert_eq!(config.write_queue_nums, 8);
    // A name that merely resembles one is an ordinary topic.
    assert_eq!(
        client.create_topic("RMQ_SYS_anything", 2).unwrap().code,
        response_code::SUCCESS
    );
}

/// GET_BROKER_CONFIG answers the configuration in effect as properties lines: the values the
/// file set, the defaults it left, and the port actually bound.
#[test]
fn the_broker_config_request_answers_the_configuration_in_effect() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = common::up_with_config(
        dir.path(),
        "flushDiskType=SYNC_FLUSH
syncFlushTimeout=2500
fileReservedTime=12
",
    );
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let response = client
        .call(Command::request(
            request_code::GET_BROKER_CONFIG,
            Encoding::Json,
        ))
        .unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
    let text = String::from_utf8(response.body.to_vec()).unwrap();
    let properties: std::collections::HashMap<&str, &str> = text
        .lines()
        .map(|line| line.split_once('=').expect("key=value"))
        .collect();
    assert_eq!(properties["flushDiskType"], "SYNC_FLUSH", "{text}");
    assert_eq!(properties["syncFlushTimeout"], "2500");
    assert_eq!(properties["fileReservedTime"], "12");
    assert_eq!(properties["brokerName"], "broker-a");
    assert_eq!(properties["brokerClusterName"], "DefaultCluster");
    assert_eq!(
        properties["listenPort"],
        quiver.broker().port().to_string(),
        "the bound port, not listenPort=0"
    );
    // Written as java.util.Properties writes it: a colon is escaped.
    assert_eq!(
        properties["namesrvAddr"],
        quiver.namesrv().to_string().replace(':', "\\:")
    );
    assert_eq!(
        properties["storePathCommitLog"],
        dir.path().join("data/commitlog").display().to_string()
    );
    assert!(response
        .ext_get("version")
        .is_some_and(|v| v.contains("counter")));
}

#[test]
fn a_deleted_topic_is_gone_and_its_name_starts_again_empty_across_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    client.create_topic("Doomed", 2).unwrap();
    let to_queue_0 = |i: usize| SendOptions {
        queue_id: Some(0),
        keys: Some(format!("doomed-{i}")),
        ..SendOptions::default()
    };
    for i in 0..6 {
        let response = client
            .send("Doomed", format!("old {i}").as_bytes(), &to_queue_0(i))
            .unwrap();
        assert_eq!(response.code, response_code::SUCCESS);
    }
    let offsets = |code| {
        Command::request(code, Encoding::Json).with_ext(
            ExtFields::new()
                .with("consumerGroup", "doomed_group")
                .with("topic", "Doomed")
                .with("queueId", 0),
        )
    };
    let commit = offsets(request_code::UPDATE_CONSUMER_OFFSET);
    let commit = Command {
        ext: Some(commit.ext.unwrap().with("commitOffset", 4)),
        ..commit
    };
    assert_eq!(client.call(commit).unwrap().code, response_code::SUCCESS);
    wait_for_route(quiver.namesrv(), "Doomed");

    let delete = |topic: &str| {
        Command::request(request_code::DELETE_TOPIC_IN_BROKER, Encoding::Json)
            .with_ext(ExtFields::new().with("topic", topic))
    };
    for refused in [" ", "SCHEDULE_TOPIC_XXXX", "../consumequeue"] {
        let response = client.call(delete(refused)).unwrap();
        assert_eq!(
            response.code,
            response_code::INVALID_PARAMETER,
            "{refused:?}: {:?}",
            response.remark
        );
    }
    let response = client.call(delete("Doomed")).unwrap();
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let max_offset = |client: &mut WireClient| {
        let request = Command::request(request_code::GET_MAX_OFFSET, Encoding::Json)
            .with_ext(ExtFields::new().with("topic", "Doomed").with("queueId", 0));
        ext_i64(&client.call(request).unwrap(), "offset")
    };
    assert_eq!(max_offset(&mut client), 0);
    assert_eq!(
        client
            .call(offsets(request_code::QUERY_CONSUMER_OFFSET))
            .unwrap()
            .code,
        response_code::QUERY_NOT_FOUND,
        "the deleted topic's committed offsets go with it"
    );
    let query = Command::request(request_code::QUERY_MESSAGE, Encoding::Json).with_ext(
        ExtFields::new()
            .with("topic", "Doomed")
            .with("key", "doomed-3")
            .with("maxNum", 32)
            .with("beginTimestamp", 0)
            .with("endTimestamp", i64::MAX),
    );
    let response = client.call(query.clone()).unwrap();
    assert!(
        response.body.is_empty(),
        "found a deleted message by key: {response:?}"
    );

    // The name server forgets the route when told, as mqadmin deleteTopic tells it.
    let mut namesrv = WireClient::connect(quiver.namesrv(), Encoding::Json).unwrap();
    let response = namesrv
        .call(
            Command::request(request_code::DELETE_TOPIC_IN_NAMESRV, Encoding::Json).with_ext(
                ExtFields::new()
                    .with("topic", "Doomed")
                    .with("clusterName", "DefaultCluster"),
            ),
        )
        .unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
    let route = Command::request(request_code::GET_ROUTEINFO_BY_TOPIC, Encoding::Json)
        .with_ext(ExtFields::new().with("topic", "Doomed"));
    assert_eq!(
        namesrv.call(route).unwrap().code,
        response_code::TOPIC_NOT_EXIST
    );

    // Created again, the topic starts at offset 0; a crash brings back none of the old one.
    client.create_topic("Doomed", 2).unwrap();
    for i in 0..2 {
        let response = client
            .send("Doomed", format!("new {i}").as_bytes(), &to_queue_0(i))
            .unwrap();
        assert_eq!(ext_i64(&response, "queueOffset"), i as i64);
    }
    drop(client);
    quiver.kill9().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let bodies: Vec<Bytes> = pull_all(&mut client, "Doomed", 0, 0)
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(bodies, [Bytes::from("new 0"), Bytes::from("new 1")]);
    assert_eq!(max_offset(&mut client), 2);
    let response = client.call(query.clone()).unwrap();
    assert!(
        response.body.is_empty(),
        "found a deleted message by key after the restart: {response:?}"
    );
    let new_key = Command {
        ext: Some(query.ext.unwrap().with("key", "doomed-1")),
        ..query
    };
    let found = StoredMessage::decode_all(&client.call(new_key).unwrap().body).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].body, Bytes::from("new 1"));
}

/// GET_TOPICS_BY_CLUSTER and GET_SYSTEM_TOPIC_LIST_FROM_NS, which admin tools built on
/// RocketMQ's MQAdminExt send to the name server.
#[test]
fn the_name_server_lists_topics_by_cluster_and_its_system_topics() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    client.create_topic("Listed", 2).unwrap();
    wait_for_route(quiver.namesrv(), "Listed");
    let mut namesrv = WireClient::connect(quiver.namesrv(), Encoding::Json).unwrap();
    let by_cluster = |namesrv: &mut WireClient, cluster: &str| {
        let response = namesrv
            .call(
                Command::request(request_code::GET_TOPICS_BY_CLUSTER, Encoding::Json)
                    .with_ext(ExtFields::new().with("cluster", cluster)),
            )
            .unwrap();
        assert_eq!(response.code, response_code::SUCCESS, "{response:?}");
        body::from_json::<body::TopicList>(&response.body)
            .unwrap()
            .topic_list
    };
    assert!(by_cluster(&mut namesrv, "DefaultCluster").contains(&"Listed".to_string()));
    assert!(by_cluster(&mut namesrv, "NoSuchCluster").is_empty());

    let missing = namesrv
        .call(Command::request(
            request_code::GET_TOPICS_BY_CLUSTER,
            Encoding::Json,
        ))
        .unwrap();
    assert_eq!(missing.code, response_code::SYSTEM_ERROR);

    let response = namesrv
        .call(Command::request(
            request_code::GET_SYSTEM_TOPIC_LIST_FROM_NS,
            Encoding::Json,
        ))
        .unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
    let system = body::from_json::<body::TopicList>(&response.body).unwrap();
    assert_eq!(system.topic_list, vec!["DefaultCluster", "broker-a"]);
    assert_eq!(
        system.broker_addr.as_deref(),
        Some(quiver.broker().to_string().as_str())
    );
}
