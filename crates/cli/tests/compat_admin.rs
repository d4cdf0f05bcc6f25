//! Orderly-consumer queue locks and the admin figures mqadmin reads: LOCK_BATCH_MQ /
//! UNLOCK_BATCH_MQ, GET_TOPIC_STATS_INFO, GET_CONSUME_STATS (MessageQueue-keyed bodies in
//! fastjson's bare-object-key form) and GET_TOPIC_CONFIG.

mod common;

use common::up;
use quiver_testkit::{SendOptions, WireClient};
use quiver_wire::body::{
    self, LockBatchRequestBody, LockBatchResponseBody, MessageQueue, TopicConfig,
};
use quiver_wire::code::{request_code, response_code};
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
