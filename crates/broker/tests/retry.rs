//! CONSUMER_SEND_MSG_BACK through the handler table: retry copies and dead letters.

mod harness;

use harness::{messages, options, Harness};
use quiver_broker::delay::SCHEDULE_TOPIC;
use quiver_broker::handler::Reply;
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::ConsumerSendMsgBackRequestHeader;
use quiver_wire::message::property;
use quiver_wire::{Command, Encoding};

fn send_back(position: i64, max_reconsume_times: Option<i32>) -> Command {
    let header = ConsumerSendMsgBackRequestHeader {
        offset: position,
        group: "g".into(),
        delay_level: 0,
        origin_msg_id: None,
        origin_topic: Some("Orders".into()),
        unit_mode: false,
        max_reconsume_times,
    };
    Command::request(request_code::CONSUMER_SEND_MSG_BACK, Encoding::Json).with_ext(header.to_ext())
}

#[tokio::test]
async fn a_message_sent_back_waits_in_the_schedule_topic_for_the_group_retry_topic() {
    let mut h = Harness::new();
    h.create_topic("Orders", 1).await;
    h.send("Orders", b"failed once", &options()).await;
    let original = &messages(&h.pull("Orders", "g", 0, 0).await)[0];
    h.advance(1_000);
    let request = send_back(original.physical_offset, None);
    assert!(
        matches!(h.dispatch(&request), Reply::Append { .. }),
        "a send-back is a write"
    );
    let answer = h.call(request).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);

    // The first retry waits at level 3 (10 s), queue 2 of the schedule topic.
    let scheduled = messages(&h.pull(SCHEDULE_TOPIC, "g", 2, 0).await);
    assert_eq!(scheduled.len(), 1);
    let copy = &scheduled[0];
    assert_eq!(&copy.body[..], b"failed once");
    assert_eq!(copy.reconsume_times, 1);
    assert_eq!(copy.store_timestamp, h.now_ms);
    assert_eq!(
        copy.property(property::REAL_TOPIC).as_deref(),
        Some("%RETRY%g")
    );
    assert_eq!(
        copy.property(property::RETRY_TOPIC).as_deref(),
        Some("Orders")
    );
}

#[tokio::test]
async fn a_message_past_its_retry_budget_goes_to_the_dead_letter_topic() {
    let h = Harness::new();
    h.create_topic("Orders", 1).await;
    h.send("Orders", b"poison", &options()).await;
    let original = &messages(&h.pull("Orders", "g", 0, 0).await)[0];
    let answer = h.call(send_back(original.physical_offset, Some(0))).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    let dead = messages(&h.pull("%DLQ%g", "g", 0, 0).await);
    assert_eq!(&dead[0].body[..], b"poison");
}

#[tokio::test]
async fn a_send_back_of_a_position_with_no_message_is_refused() {
    let h = Harness::new();
    let answer = h.call(send_back(123_456, None)).await;
    assert_eq!(answer.code, response_code::SYSTEM_ERROR);
    assert!(answer.remark.unwrap().contains("123456"));
}
