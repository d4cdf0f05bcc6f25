//! Message trace: the trace topic's creation under `traceTopicEnable` and `msgTraceTopicName`,
//! and trace records found by the message id they carry in KEYS, as `mqadmin
//! queryMsgTraceById` looks them up.

mod harness;

use harness::Harness;
use quiver_testkit::SendOptions;
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::QueryMessageRequestHeader;
use quiver_wire::message::{property, StoredMessage};
use quiver_wire::{Command, Encoding};

const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

#[tokio::test]
async fn trace_topic_enable_creates_the_trace_topic_at_start_with_one_queue() {
    let h = Harness::with_config("traceTopicEnable=true");
    let shape = h
        .broker
        .sending()
        .topics
        .shape(TRACE_TOPIC)
        .expect("created at start");
    assert_eq!(
        (shape.read_queues, shape.write_queues, shape.perm),
        (1, 1, 6)
    );
    let answer = h.create_topic(TRACE_TOPIC, 8).await;
    assert_eq!(
        answer.code,
        response_code::INVALID_PARAMETER,
        "a system topic"
    );

    let named = Harness::with_config("traceTopicEnable=true\nmsgTraceTopicName=Audit_Trace");
    assert!(named.broker.sending().topics.shape("Audit_Trace").is_some());
    assert!(named.broker.sending().topics.shape(TRACE_TOPIC).is_none());
}

#[tokio::test]
async fn without_trace_topic_enable_the_first_trace_record_creates_it_from_tbw102() {
    let h = Harness::new();
    assert!(h.broker.sending().topics.shape(TRACE_TOPIC).is_none());
    let answer = h.send(TRACE_TOPIC, b"trace", &SendOptions::default()).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    let shape = h
        .broker
        .sending()
        .topics
        .shape(TRACE_TOPIC)
        .expect("auto-created");
    // The client's defaultTopicQueueNums (4 in the test sender), as for any other topic.
    assert_eq!((shape.write_queues, shape.perm), (4, 6));
}

#[test]
fn a_bad_trace_topic_name_stops_start_up_with_the_key() {
    let mut config = quiver_broker::BrokerConfig::default();
    let error = config
        .apply_properties("msgTraceTopicName=no spaces")
        .unwrap_err();
    assert_eq!(error.key, "msgTraceTopicName");
}

#[tokio::test]
async fn a_trace_record_is_found_by_the_traced_message_id_in_its_keys() {
    let h = Harness::with_config("traceTopicEnable=true");
    // AsyncTraceDispatcher sets KEYS to the traced message's id and its own keys.
    let traced_id = "7F00000100002A9F0000000000000042";
    let options = SendOptions {
        keys: Some(format!("{traced_id} order-17")),
        ..SendOptions::default()
    };
    let record = "Pub\u{1}1793491200000\u{1}DefaultRegion\u{1}pg\u{1}Orders\u{1}";
    let answer = h.send(TRACE_TOPIC, record.as_bytes(), &options).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);

    let query = QueryMessageRequestHeader {
        topic: TRACE_TOPIC.into(),
        key: traced_id.into(),
        max_num: 64,
        begin_timestamp: 0,
        end_timestamp: i64::MAX,
        unique_key_query: false,
    };
    let request =
        Command::request(request_code::QUERY_MESSAGE, Encoding::Json).with_ext(query.to_ext());
    let found = h.call(request).await;
    assert_eq!(found.code, response_code::SUCCESS, "{:?}", found.remark);
    let (message, _) = StoredMessage::decode(&found.body, false).expect("a stored record");
    assert_eq!(&message.body[..], record.as_bytes());
}

#[tokio::test]
async fn stored_messages_carry_the_region_and_trace_switch_that_consumer_traces_need() {
    let h = Harness::new();
    let to_queue_0 = SendOptions {
        queue_id: Some(0),
        ..SendOptions::default()
    };
    let answer = h.send("Orders", b"x", &to_queue_0).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    let stored = harness::messages(&h.pull("Orders", "g", 0, 0).await);
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].property(property::MSG_REGION).as_deref(),
        Some("DefaultRegion")
    );
    assert_eq!(
        stored[0].property(property::TRACE_SWITCH).as_deref(),
        Some("true")
    );
}
