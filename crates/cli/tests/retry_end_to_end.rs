//! Retry, dead-letter and delayed delivery as RocketMQ clients rely on them:
//! CONSUMER_SEND_MSG_BACK copies a message to `%RETRY%group` after a delay level, then to
//! `%DLQ%group` once its reconsume budget is spent; DELAY on send holds a message back.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{binary, ext_i64, pull_all};
use quiver_testkit::{pull_header, wait_until, QuiverProcess, SendOptions, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::SendMessageHeader;
use quiver_wire::message::{encode_properties, StoredMessage};
use quiver_wire::{Command, Encoding, ExtFields};

/// Level 1 waits 1 s, level 2 waits 2 s, every later level 1 s.
const LEVELS: &str = "1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s";

fn up_with_levels(dir: &Path) -> QuiverProcess {
    common::up_with_config(dir, &format!("messageDelayLevel={LEVELS}\n"))
}

fn options(tags: &str, keys: &str) -> SendOptions {
    SendOptions {
        queue_id: Some(0),
        tags: Some(tags.into()),
        keys: Some(keys.into()),
        properties: vec![("origin".into(), "rust".into())],
    }
}

fn send_back(client: &mut WireClient, message: &StoredMessage, group: &str, max: i32) -> Command {
    let ext = ExtFields::new()
        .with("offset", message.physical_offset)
        .with("group", group)
        .with("delayLevel", 0)
        .with("originMsgId", message.offset_msg_id())
        .with("originTopic", &message.topic)
        .with("unitMode", false)
        .with("maxReconsumeTimes", max);
    client
        .call(Command::request(request_code::CONSUMER_SEND_MSG_BACK, Encoding::Json).with_ext(ext))
        .expect("send back")
}

/// Sends `body` to queue 0 of `topic` with the reconsume fields a consumer or the broker sets
/// (not a producer); returns the response.
fn send_counted(
    client: &mut WireClient,
    topic: &str,
    properties: &[(&str, &str)],
    reconsume_times: i32,
    max_reconsume_times: Option<i32>,
    body: &[u8],
) -> Command {
    let header = SendMessageHeader {
        properties: encode_properties(properties.iter().copied()),
        reconsume_times,
        max_reconsume_times,
        ..common::send_header("CLIENT_INNER_PRODUCER", topic)
    };
    let request = Command::request(request_code::SEND_MESSAGE, Encoding::Json)
        .with_ext(header.to_v1())
        .with_body(body.to_vec());
    client.call(request).expect("send")
}

/// Polls a queue until it holds `count` messages.
fn wait_for_messages(client: &mut WireClient, topic: &str, count: usize) -> Vec<StoredMessage> {
    wait_until(Duration::from_secs(20), || {
        let messages = pull_all(client, topic, 0, 0);
        (messages.len() >= count).then_some(messages)
    })
    .unwrap_or_else(|| panic!("{count} messages in {topic} within 20 s"))
}

/// Creates topic `Work`, sends one message `job` to it and returns it as stored.
fn one_stored_job(client: &mut WireClient) -> StoredMessage {
    assert_eq!(
        client.create_topic("Work", 1).unwrap().code,
        response_code::SUCCESS
    );
    let sent = client.send("Work", b"job", &options("TagA", "k")).unwrap();
    assert_eq!(sent.code, response_code::SUCCESS);
    pull_all(client, "Work", 0, 0).remove(0)
}

fn queue_is_empty(client: &mut WireClient, topic: &str) -> bool {
    let response = client.pull(topic, "test_group", 0, 0, 32, 0).expect("pull");
    response.code != response_code::SUCCESS
}

#[test]
fn sent_back_messages_are_retried_after_their_delay_then_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up_with_levels(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    assert_eq!(
        client.create_topic("Work", 1).unwrap().code,
        response_code::SUCCESS
    );
    let sent = client
        .send("Work", b"job-1", &options("TagA", "job-key"))
        .unwrap();
    assert_eq!(sent.code, response_code::SUCCESS);
    let original = pull_all(&mut client, "Work", 0, 0).remove(0);

    let sent_back_at = Instant::now();
    let response = send_back(&mut client, &original, "workers", 1);
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    assert!(
        queue_is_empty(&mut client, "%RETRY%workers"),
        "retried before its delay"
    );
    let retry = wait_for_messages(&mut client, "%RETRY%workers", 1).remove(0);
    // The first retry uses level 3 (1 s here).
    assert!(sent_back_at.elapsed() >= Duration::from_secs(1));
    assert_eq!(retry.body, original.body);
    assert_eq!(retry.reconsume_times, 1);
    assert_eq!(retry.property("RETRY_TOPIC").as_deref(), Some("Work"));
    assert_eq!(
        retry.property("ORIGIN_MESSAGE_ID"),
        Some(original.offset_msg_id())
    );
    assert_eq!(retry.property("KEYS").as_deref(), Some("job-key"));
    assert_eq!(retry.property("TAGS").as_deref(), Some("TagA"));
    assert_eq!(retry.property("origin").as_deref(), Some("rust"));
    assert_eq!(retry.property("UNIQ_KEY"), original.property("UNIQ_KEY"));
    assert_eq!(retry.property("DELAY"), None);
    assert!(retry.store_timestamp - original.store_timestamp >= 1000);

    // Reconsumed once with a budget of one: the next hand-back is dead.
    let response = send_back(&mut client, &retry, "workers", 1);
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let dead = pull_all(&mut client, "%DLQ%workers", 0, 0);
    assert_eq!(dead.len(), 1, "dead-lettered at once, without delay");
    assert_eq!(dead[0].body, original.body);
    assert_eq!(dead[0].reconsume_times, 2);
    assert_eq!(dead[0].property("RETRY_TOPIC").as_deref(), Some("Work"));
    assert_eq!(
        dead[0].property("ORIGIN_MESSAGE_ID"),
        Some(original.offset_msg_id())
    );

    let bad = ExtFields::new()
        .with("offset", 1_000_000_000_i64)
        .with("group", "workers")
        .with("delayLevel", 0);
    let response = client
        .call(Command::request(request_code::CONSUMER_SEND_MSG_BACK, Encoding::Json).with_ext(bad))
        .unwrap();
    assert_eq!(response.code, response_code::SYSTEM_ERROR);
}

#[test]
fn delayed_sends_wait_in_the_schedule_queue_for_their_level() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up_with_levels(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    assert_eq!(
        client.create_topic("Later", 1).unwrap().code,
        response_code::SUCCESS
    );
    let mut delayed = options("TagD", "later-key");
    delayed.properties.push(("DELAY".into(), "2".into()));
    let sent_at = Instant::now();
    let response = client.send("Later", b"in two seconds", &delayed).unwrap();
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    assert_eq!(ext_i64(&response, "queueId"), 0);
    assert!(
        queue_is_empty(&mut client, "Later"),
        "delivered before its delay"
    );
    let waiting = pull_all(&mut client, "SCHEDULE_TOPIC_XXXX", 1, 0);
    assert_eq!(waiting.len(), 1, "level 2 waits in schedule queue 1");
    assert_eq!(waiting[0].property("REAL_TOPIC").as_deref(), Some("Later"));
    assert_eq!(waiting[0].property("REAL_QID").as_deref(), Some("0"));

    let arrived = wait_for_messages(&mut client, "Later", 1).remove(0);
    assert!(sent_at.elapsed() >= Duration::from_secs(2));
    assert!(arrived.store_timestamp - waiting[0].store_timestamp >= 2000);
    assert_eq!(arrived.body.as_ref(), b"in two seconds");
    assert_eq!(arrived.topic, "Later");
    assert_eq!(arrived.property("DELAY"), None);
    assert_eq!(arrived.property("KEYS").as_deref(), Some("later-key"));
    assert_eq!(arrived.property("TAGS").as_deref(), Some("TagD"));
    assert_eq!(
        arrived.property("UNIQ_KEY"),
        waiting[0].property("UNIQ_KEY")
    );
}

#[test]
fn a_retry_send_over_its_budget_goes_to_the_dead_letter_topic() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up_with_levels(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    for (reconsume_times, body) in [(2, "still retried"), (3, "dead")] {
        // What a consumer sends itself when CONSUMER_SEND_MSG_BACK fails.
        let response = send_counted(
            &mut client,
            "%RETRY%payers",
            &[("TAGS", "TagR"), ("RETRY_TOPIC", "Pay")],
            reconsume_times,
            Some(2),
            body.as_bytes(),
        );
        assert_eq!(
            response.code,
            response_code::SUCCESS,
            "{:?}",
            response.remark
        );
    }
    let retried = wait_for_messages(&mut client, "%RETRY%payers", 1);
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].body.as_ref(), b"still retried");
    let dead = pull_all(&mut client, "%DLQ%payers", 0, 0);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body.as_ref(), b"dead");
    assert_eq!(dead[0].reconsume_times, 3);
}

#[test]
fn a_reconsume_count_at_the_top_of_its_range_is_sent_back_without_overflow() {
    // The count comes from the producer's header; a hand-back must not wrap it.
    let dir = tempfile::tempdir().unwrap();
    let quiver = up_with_levels(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    client.create_topic("Worn", 1).unwrap();
    for reconsume_times in [i32::MAX - 1, i32::MAX] {
        let response = send_counted(
            &mut client,
            "Worn",
            &[("TAGS", "TagW")],
            reconsume_times,
            None,
            b"worn",
        );
        assert_eq!(response.code, response_code::SUCCESS);
    }
    let stored = pull_all(&mut client, "Worn", 0, 0);
    assert_eq!(stored.len(), 2);
    for message in &stored {
        let response = send_back(&mut client, message, "wearers", i32::MAX);
        assert_eq!(
            response.code,
            response_code::SUCCESS,
            "{:?}",
            response.remark
        );
    }
    // i32::MAX - 1 is still within a budget of i32::MAX: retried; i32::MAX is spent: dead.
    let dead = pull_all(&mut client, "%DLQ%wearers", 0, 0);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reconsume_times, i32::MAX);
}

#[test]
fn only_the_broker_creates_dead_letter_topics_when_auto_create_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("broker.conf");
    std::fs::write(&conf, "autoCreateTopicEnable=false\n").unwrap();
    let quiver =
        QuiverProcess::up_with_config(&binary(), &dir.path().join("data"), Some(&conf), dir.path())
            .expect("quiver up starts");
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let response = client
        .send("%DLQ%strangers", b"x", &SendOptions::default())
        .unwrap();
    assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
    // A retry over its budget is redirected by the broker, which creates the topic.
    let response = send_counted(
        &mut client,
        "%RETRY%payers",
        &[("TAGS", "TagR"), ("RETRY_TOPIC", "Pay")],
        3,
        Some(2),
        b"dead",
    );
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    assert_eq!(pull_all(&mut client, "%DLQ%payers", 0, 0).len(), 1);
}

#[test]
fn a_send_back_to_a_read_only_retry_topic_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up_with_levels(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let original = one_stored_job(&mut client);
    // %RETRY%drained readable only, as an operator closing it to writes would leave it.
    let ext = ExtFields::new()
        .with("topic", "%RETRY%drained")
        .with("defaultTopic", "TBW102")
        .with("readQueueNums", 1)
        .with("writeQueueNums", 1)
        .with("perm", 4)
        .with("topicFilterType", "SINGLE_TAG");
    let created = client
        .call(Command::request(request_code::UPDATE_AND_CREATE_TOPIC, Encoding::Json).with_ext(ext))
        .unwrap();
    assert_eq!(created.code, response_code::SUCCESS);

    let response = send_back(&mut client, &original, "drained", 16);
    assert_eq!(response.code, response_code::NO_PERMISSION);
    assert_eq!(
        response.remark.as_deref(),
        Some("the topic[%RETRY%drained] sending message is forbidden")
    );
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(queue_is_empty(&mut client, "%RETRY%drained"));
}

#[test]
fn a_pull_refused_for_an_unknown_queue_commits_no_offset() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up_with_levels(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    assert_eq!(
        client.create_topic("Work", 1).unwrap().code,
        response_code::SUCCESS
    );
    let flags = quiver_wire::header::pull_sys_flag::COMMIT_OFFSET
        | quiver_wire::header::pull_sys_flag::SUBSCRIPTION;
    for (topic, queue_id, refusal) in [
        ("Nowhere", 0, response_code::TOPIC_NOT_EXIST),
        ("Work", 7, response_code::INVALID_PARAMETER),
    ] {
        let header = quiver_wire::header::PullMessageRequestHeader {
            sys_flag: flags,
            commit_offset: 5,
            ..pull_header(topic, "g", queue_id)
        };
        let response = client
            .call(
                Command::request(request_code::PULL_MESSAGE, Encoding::Json)
                    .with_ext(header.to_ext()),
            )
            .unwrap();
        assert_eq!(response.code, refusal, "{topic} {queue_id}");
        let query = Command::request(request_code::QUERY_CONSUMER_OFFSET, Encoding::Json).with_ext(
            ExtFields::new()
                .with("consumerGroup", "g")
                .with("topic", topic)
                .with("queueId", queue_id),
        );
        assert_eq!(
            client.call(query).unwrap().code,
            response_code::QUERY_NOT_FOUND,
            "no offset kept for {topic} {queue_id}"
        );
    }
}

#[test]
fn a_negative_retry_budget_dead_letters_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up_with_levels(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let original = one_stored_job(&mut client);
    let response = send_back(&mut client, &original, "eager", -1);
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let dead = wait_for_messages(&mut client, "%DLQ%eager", 1);
    assert_eq!(dead[0].body.as_ref(), b"job");
}
