//! Admin requests: topics created, refused and deleted; the runtime figures.

mod harness;

use harness::{field, options, Harness};
use quiver_wire::body::{self, KvTable};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

#[tokio::test]
async fn system_topic_names_cannot_be_created_or_reshaped() {
    let h = Harness::new();
    for topic in [
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "DefaultCluster",
        "broker-a",
    ] {
        let answer = h.create_topic(topic, 4).await;
        assert_eq!(answer.code, response_code::INVALID_PARAMETER, "{topic}");
    }
    let answer = h.create_topic("Orders", 4).await;
    assert_eq!(answer.code, response_code::SUCCESS);
    assert_eq!(
        h.broker
            .administering()
            .topics
            .shape("Orders")
            .unwrap()
            .write_queues,
        4
    );
}

#[tokio::test]
async fn a_deleted_topic_loses_its_messages_and_offsets() {
    let h = Harness::new();
    h.create_topic("Orders", 1).await;
    h.send("Orders", b"old", &options()).await;
    let delete = Command::request(request_code::DELETE_TOPIC_IN_BROKER, Encoding::Json)
        .with_ext(ExtFields::new().with("topic", "Orders"));
    assert_eq!(h.call(delete).await.code, response_code::SUCCESS);
    assert!(h.broker.administering().topics.shape("Orders").is_none());
    assert_eq!(
        h.pull("Orders", "g", 0, 0).await.code,
        response_code::TOPIC_NOT_EXIST
    );
    h.create_topic("Orders", 1).await;
    let again = h.send("Orders", b"new", &options()).await;
    assert_eq!(
        field(&again, "queueOffset"),
        "0",
        "a new topic starts at offset 0"
    );
}

#[tokio::test]
async fn runtime_info_counts_uptime_on_the_call_clock() {
    let mut h = Harness::new();
    h.advance(90_000);
    let answer = h
        .call(Command::request(
            request_code::GET_BROKER_RUNTIME_INFO,
            Encoding::Json,
        ))
        .await;
    assert_eq!(answer.code, response_code::SUCCESS);
    let table: KvTable = body::from_json(&answer.body).expect("kv table");
    assert_eq!(
        table.table["runtime"],
        "[ 0 days, 0 hours, 1 minutes, 30 seconds ]"
    );
    // A healthy disk: sends are taken and no store file has failed a write.
    assert_eq!(table.table["storeUnwritable"], "false");
    assert_eq!(table.table["storeUnwritableReason"], "");
    assert_eq!(table.table["storeIoErrors"], "0");
    assert_eq!(table.table["storeIoErrorsCommitLog"], "0");
    assert_eq!(table.table["storeIoErrorsTimer"], "0");
    assert!(!table.table.contains_key("storeIoLastErrorCommitLog"));
}

fn update_config(text: &str) -> Command {
    Command::request(request_code::UPDATE_BROKER_CONFIG, Encoding::Json)
        .with_body(text.as_bytes().to_vec())
}

async fn config_value(h: &Harness, key: &str) -> String {
    let answer = h
        .call(Command::request(
            request_code::GET_BROKER_CONFIG,
            Encoding::Json,
        ))
        .await;
    let text = String::from_utf8(answer.body.to_vec()).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .to_string()
}

#[tokio::test]
async fn runtime_keys_change_at_once_and_the_others_are_refused_with_the_reason() {
    let h = Harness::new();
    h.create_topic("Orders", 1).await;
    let answer = h.call(update_config("brokerPermission=4\n")).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    assert_eq!(config_value(&h, "brokerPermission").await, "4");
    let refused = h.send("Orders", b"x", &options()).await;
    assert_eq!(refused.code, response_code::NO_PERMISSION);
    h.call(update_config("brokerPermission=6\n")).await;
    assert_eq!(
        h.send("Orders", b"x", &options()).await.code,
        response_code::SUCCESS
    );

    h.call(update_config(
        "autoCreateSubscriptionGroup=false\nautoCreateTopicEnable=false\n",
    ))
    .await;
    assert_eq!(
        config_value(&h, "autoCreateSubscriptionGroup").await,
        "false"
    );
    assert_eq!(
        h.pull("Orders", "newGroup", 0, 0).await.code,
        response_code::SUBSCRIPTION_GROUP_NOT_EXIST
    );
    let auto = h.send("Unheard", b"x", &options()).await;
    assert_eq!(auto.code, response_code::TOPIC_NOT_EXIST);

    for (text, words) in [
        ("flushDiskType=SYNC_FLUSH\n", "read only at start"),
        ("brokerPermission=99\n", "brokerPermission"),
        ("noSuchKey=1\n", "unknown broker config key noSuchKey"),
    ] {
        let answer = h.call(update_config(text)).await;
        assert_eq!(answer.code, response_code::INVALID_PARAMETER, "{text}");
        let remark = answer.remark.unwrap_or_default();
        assert!(remark.contains(words), "{text}: {remark}");
    }
    assert_eq!(config_value(&h, "brokerPermission").await, "6");
}
