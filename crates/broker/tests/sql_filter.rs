//! SQL92 subscriptions (`enablePropertyFilter`): pulls by a lite pull's own subscription and by
//! a push consumer's heartbeat, pops, non-persistent topics, CHECK_CLIENT_CONFIG, and the codes
//! RocketMQ refuses with.

mod harness;

use harness::{field, messages, pull_request, Harness};
use quiver_testkit::{create_topic_request, SendOptions};
use quiver_wire::body::{
    self, CheckClientRequestBody, ConsumerData, HeartbeatData, SubscriptionData,
};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{pull_sys_flag, PopMessageRequestHeader, PullMessageRequestHeader};
use quiver_wire::{Command, Encoding};

const ENABLED: &str = "enablePropertyFilter=true";
const SELECTOR: &str = "a BETWEEN 3 AND 5 AND TAGS IN ('A', 'B')";

/// Sends ten messages to queue 0: body `i`, property `a` = i, tags A, B, C in turn; the
/// selector takes 3 (A) and 4 (B), and 5 is C.
async fn send_mix(h: &Harness, topic: &str) {
    for i in 0..10 {
        let options = SendOptions {
            queue_id: Some(0),
            tags: Some(["A", "B", "C"][i % 3].to_string()),
            properties: vec![("a".to_string(), i.to_string())],
            ..SendOptions::default()
        };
        let sent = h.send(topic, i.to_string().as_bytes(), &options).await;
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    }
}

fn sql_pull(topic: &str, offset: i64, max: i32, expression: &str) -> Command {
    let header = PullMessageRequestHeader {
        queue_offset: offset,
        max_msg_nums: max,
        subscription: Some(expression.into()),
        expression_type: Some("SQL92".into()),
        ..quiver_testkit::pull_header(topic, "g", 0)
    };
    Command::request(request_code::LITE_PULL_MESSAGE, Encoding::Json).with_ext(header.to_ext())
}

fn bodies(response: &Command) -> Vec<String> {
    messages(response)
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

fn subscription(expression_type: &str, expression: &str) -> SubscriptionData {
    SubscriptionData {
        expression_type: expression_type.into(),
        sub_string: expression.into(),
        sub_version: 1,
        topic: "Prices".into(),
        ..SubscriptionData::default()
    }
}

fn heartbeat(expression_type: &str, expression: &str) -> Command {
    let data = HeartbeatData {
        client_id: "c1".into(),
        consumer_data_set: vec![ConsumerData {
            consume_type: "CONSUME_PASSIVELY".into(),
            group_name: "g".into(),
            message_model: "CLUSTERING".into(),
            subscription_data_set: vec![subscription(expression_type, expression)],
            ..ConsumerData::default()
        }],
        ..HeartbeatData::default()
    };
    Command::request(request_code::HEART_BEAT, Encoding::Json).with_body(body::to_json(&data))
}

/// A push consumer's pull: no subscription of its own, the heartbeat's is used.
fn push_pull(topic: &str, offset: i64) -> Command {
    let mut request = pull_request(topic, "g", 0, offset, 0);
    let mut header = PullMessageRequestHeader::from_ext(request.ext.as_ref().unwrap()).unwrap();
    header.sys_flag &= !pull_sys_flag::SUBSCRIPTION;
    header.subscription = None;
    header.sub_version = 1;
    request.ext = Some(header.to_ext());
    request
}

fn check_client(expression_type: &str, expression: &str) -> Command {
    let body = CheckClientRequestBody {
        client_id: "c1".into(),
        group: "g".into(),
        subscription_data: subscription(expression_type, expression),
    };
    Command::request(request_code::CHECK_CLIENT_CONFIG, Encoding::Json)
        .with_body(body::to_json(&body))
}

#[tokio::test]
async fn a_lite_pull_gets_exactly_the_selected_messages() {
    let h = Harness::with_config(ENABLED);
    h.create_topic("Prices", 1).await;
    send_mix(&h, "Prices").await;
    let answer = h.call(sql_pull("Prices", 0, 32, SELECTOR)).await;
    assert_eq!(bodies(&answer), vec!["3", "4"]);
    assert_eq!(field(&answer, "nextBeginOffset"), "10");
}

#[tokio::test]
async fn a_pull_whose_messages_are_all_refused_moves_past_them() {
    let h = Harness::with_config(ENABLED);
    h.create_topic("Prices", 1).await;
    send_mix(&h, "Prices").await;
    let answer = h.call(sql_pull("Prices", 0, 32, "a > 100")).await;
    assert_eq!(answer.code, response_code::PULL_RETRY_IMMEDIATELY);
    assert_eq!(field(&answer, "nextBeginOffset"), "10");
    let missing = h.call(sql_pull("Prices", 0, 32, "nobody = 'x'")).await;
    assert_eq!(missing.code, response_code::PULL_RETRY_IMMEDIATELY);
}

#[tokio::test]
async fn a_sql_pull_stops_at_its_maximum_and_goes_on_from_the_next_selected() {
    let h = Harness::with_config(ENABLED);
    h.create_topic("Prices", 1).await;
    send_mix(&h, "Prices").await;
    let first = h.call(sql_pull("Prices", 0, 2, "a >= 2")).await;
    assert_eq!(bodies(&first), vec!["2", "3"]);
    assert_eq!(field(&first, "nextBeginOffset"), "4");
    let second = h.call(sql_pull("Prices", 4, 32, "a >= 2")).await;
    assert_eq!(bodies(&second).len(), 6);
}

#[tokio::test]
async fn tags_are_the_tags_property_and_numbers_convert() {
    let h = Harness::with_config(ENABLED);
    h.create_topic("Prices", 1).await;
    send_mix(&h, "Prices").await;
    let answer = h
        .call(sql_pull(
            "Prices",
            0,
            32,
            "TAGS = 'C' AND a <> 2 AND a < 8.5",
        ))
        .await;
    assert_eq!(bodies(&answer), vec!["5", "8"]);
}

#[tokio::test]
async fn a_push_consumer_is_filtered_by_its_heartbeat_subscription() {
    let h = Harness::with_config(ENABLED);
    h.create_topic("Prices", 1).await;
    send_mix(&h, "Prices").await;
    assert_eq!(
        h.call(heartbeat("SQL92", SELECTOR)).await.code,
        response_code::SUCCESS
    );
    let answer = h.call(push_pull("Prices", 0)).await;
    assert_eq!(bodies(&answer), vec!["3", "4"]);
}

#[tokio::test]
async fn a_bad_expression_is_refused_with_rocketmqs_codes() {
    let h = Harness::with_config(ENABLED);
    h.create_topic("Prices", 1).await;
    send_mix(&h, "Prices").await;
    let pulled = h.call(sql_pull("Prices", 0, 32, "a != 1")).await;
    assert_eq!(pulled.code, response_code::SUBSCRIPTION_PARSE_FAILED);
    // The heartbeat is taken; its pulls are refused until one brings a good expression.
    assert_eq!(
        h.call(heartbeat("SQL92", "a ==")).await.code,
        response_code::SUCCESS
    );
    let pushed = h.call(push_pull("Prices", 0)).await;
    assert_eq!(pushed.code, response_code::FILTER_DATA_NOT_EXIST);
    let checked = h.call(check_client("SQL92", "a BETWEEN 5 AND 3")).await;
    assert_eq!(checked.code, response_code::SUBSCRIPTION_PARSE_FAILED);
    assert!(checked
        .remark
        .as_deref()
        .is_some_and(|r| r.contains("invalid SQL92 expression")));
    let unknown = h.call(sql_pull("Prices", 0, 32, "*")).await;
    assert_eq!(unknown.code, response_code::SUBSCRIPTION_PARSE_FAILED);
}

#[tokio::test]
async fn check_client_config_answers_as_rocketmq() {
    let h = Harness::with_config(ENABLED);
    assert_eq!(
        h.call(check_client("SQL92", SELECTOR)).await.code,
        response_code::SUCCESS
    );
    assert_eq!(
        h.call(check_client("TAG", "*")).await.code,
        response_code::SUCCESS
    );
    let off = Harness::new();
    assert_eq!(
        off.call(check_client("TAG", "A || B")).await.code,
        response_code::SUCCESS
    );
    let refused = off.call(check_client("SQL92", SELECTOR)).await;
    assert_eq!(refused.code, response_code::SYSTEM_ERROR);
}

#[tokio::test]
async fn without_enable_property_filter_sql_pulls_are_refused_and_tag_pulls_are_not() {
    let h = Harness::new();
    h.create_topic("Prices", 1).await;
    send_mix(&h, "Prices").await;
    let refused = h.call(sql_pull("Prices", 0, 32, SELECTOR)).await;
    assert_eq!(refused.code, response_code::SYSTEM_ERROR);
    assert!(refused
        .remark
        .as_deref()
        .is_some_and(|r| r.contains("filter message by SQL92")));
    h.call(heartbeat("SQL92", SELECTOR)).await;
    assert_eq!(
        h.call(push_pull("Prices", 0)).await.code,
        response_code::SYSTEM_ERROR
    );
    assert_eq!(bodies(&h.pull("Prices", "g", 0, 0).await).len(), 10);
}

#[tokio::test]
async fn a_non_persistent_topic_is_filtered_too() {
    let h = Harness::with_config(ENABLED);
    let mut request = create_topic_request("Live", 1, Encoding::Json);
    let ext = request.ext.take().unwrap_or_default();
    let created = h
        .call(request.with_ext(ext.with("attributes", "+persistence=memory")))
        .await;
    assert_eq!(created.code, response_code::SUCCESS, "{:?}", created.remark);
    send_mix(&h, "Live").await;
    let answer = h.call(sql_pull("Live", 0, 32, SELECTOR)).await;
    assert_eq!(bodies(&answer), vec!["3", "4"]);
    assert_eq!(field(&answer, "nextBeginOffset"), "10");
}

fn pop_request(expression_type: &str, expression: &str) -> Command {
    let header = PopMessageRequestHeader {
        consumer_group: "pop_group".into(),
        topic: "Prices".into(),
        queue_id: -1,
        max_msg_nums: 32,
        invisible_time: 60_000,
        poll_time: 0,
        born_time: 0,
        init_mode: 0,
        exp_type: Some(expression_type.into()),
        exp: Some(expression.into()),
        order: Some(false),
    };
    Command::request(request_code::POP_MESSAGE, Encoding::Json).with_ext(header.to_ext())
}

#[tokio::test]
async fn a_pop_takes_only_the_selected_messages_and_moves_past_the_rest() {
    let h = Harness::with_config(ENABLED);
    h.create_topic("Prices", 1).await;
    send_mix(&h, "Prices").await;
    let popped = h.call(pop_request("SQL92", SELECTOR)).await;
    assert_eq!(bodies(&popped), vec!["3", "4"]);
    let again = h.call(pop_request("SQL92", SELECTOR)).await;
    assert_eq!(again.code, response_code::PULL_NOT_FOUND);
    let bad = h.call(pop_request("SQL92", "a IN (1)")).await;
    assert_eq!(bad.code, response_code::SUBSCRIPTION_PARSE_FAILED);
}
