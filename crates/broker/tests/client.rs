//! HEART_BEAT, UNREGISTER_CLIENT and GET_CONSUMER_LIST_BY_GROUP, and the sweep that forgets
//! silent clients.

mod harness;

use harness::Harness;
use quiver_broker::clients::CLIENT_EXPIRY_MS;
use quiver_wire::body::{self, ConsumerData, ConsumerIdList, HeartbeatData, SubscriptionData};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

fn heartbeat(client_id: &str) -> Command {
    let data = HeartbeatData {
        client_id: client_id.into(),
        consumer_data_set: vec![ConsumerData {
            consume_from_where: "CONSUME_FROM_LAST_OFFSET".into(),
            consume_type: "CONSUME_PASSIVELY".into(),
            group_name: "g".into(),
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

fn consumer_list() -> Command {
    Command::request(request_code::GET_CONSUMER_LIST_BY_GROUP, Encoding::Json)
        .with_ext(ExtFields::new().with("consumerGroup", "g"))
}

async fn members(h: &Harness) -> Vec<String> {
    let answer = h.call(consumer_list()).await;
    if answer.code != response_code::SUCCESS {
        return Vec::new();
    }
    let ids: ConsumerIdList = body::from_json(&answer.body).expect("id list");
    ids.consumer_id_list
}

#[tokio::test]
async fn a_heartbeat_makes_a_member_and_the_group_retry_topic() {
    let h = Harness::new();
    let answer = h.call(heartbeat("c1")).await;
    assert_eq!(answer.code, response_code::SUCCESS);
    assert_eq!(members(&h).await, vec!["c1".to_string()]);
    assert!(h.broker.membership().topics.shape("%RETRY%g").is_some());
}

#[tokio::test]
async fn a_member_silent_past_the_expiry_is_forgot_and_the_others_are_told() {
    let mut h = Harness::new();
    h.call(heartbeat("c1")).await;
    let (other, mut other_outgoing) = h.second_connection();
    h.advance(60_000);
    h.call_on(&other, heartbeat("c2")).await;
    assert_eq!(members(&h).await.len(), 2);
    // Joining told c1's connection; drain that.
    while h.outgoing.try_recv().is_ok() {}

    h.broker.sweep(h.now_ms - 60_000 + CLIENT_EXPIRY_MS);
    assert_eq!(members(&h).await.len(), 2, "not yet past the expiry");
    h.broker.sweep(h.now_ms - 60_000 + CLIENT_EXPIRY_MS + 1);
    assert_eq!(members(&h).await, vec!["c2".to_string()]);
    let told = other_outgoing.try_recv().expect("c2 is told to rebalance");
    assert_eq!(told.command.code, request_code::NOTIFY_CONSUMER_IDS_CHANGED);
}

#[tokio::test]
async fn unregistering_removes_the_member() {
    let h = Harness::new();
    h.call(heartbeat("c1")).await;
    let unregister = Command::request(request_code::UNREGISTER_CLIENT, Encoding::Json).with_ext(
        ExtFields::new()
            .with("clientID", "c1")
            .with("consumerGroup", "g"),
    );
    assert_eq!(h.call(unregister).await.code, response_code::SUCCESS);
    assert!(members(&h).await.is_empty());
}
