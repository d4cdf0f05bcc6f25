//! Consumer offsets and queue bounds: QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET,
//! GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP.

mod harness;

use harness::{field, options, Harness};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

fn queue_request(code: i32, topic: &str) -> Command {
    Command::request(code, Encoding::Json)
        .with_ext(ExtFields::new().with("topic", topic).with("queueId", 0))
}

fn group_request(code: i32, offset: Option<i64>) -> Command {
    let mut ext = ExtFields::new()
        .with("topic", "Orders")
        .with("consumerGroup", "g")
        .with("queueId", 0);
    if let Some(offset) = offset {
        ext = ext.with("commitOffset", offset);
    }
    Command::request(code, Encoding::Json).with_ext(ext)
}

#[tokio::test]
async fn a_committed_offset_is_read_back_and_an_uncommitted_one_is_not_found() {
    let h = Harness::new();
    h.create_topic("Orders", 1).await;
    let unknown = h
        .call(group_request(request_code::QUERY_CONSUMER_OFFSET, None))
        .await;
    assert_eq!(unknown.code, response_code::QUERY_NOT_FOUND);
    let commit = h
        .call(group_request(request_code::UPDATE_CONSUMER_OFFSET, Some(7)))
        .await;
    assert_eq!(commit.code, response_code::SUCCESS);
    let read = h
        .call(group_request(request_code::QUERY_CONSUMER_OFFSET, None))
        .await;
    assert_eq!(field(&read, "offset"), "7");
}

#[tokio::test]
async fn bounds_and_search_by_time_follow_what_was_stored() {
    let mut h = Harness::new();
    h.create_topic("Orders", 1).await;
    let to_queue_0 = quiver_testkit::SendOptions {
        queue_id: Some(0),
        ..options()
    };
    let first_ms = h.now_ms;
    for _ in 0..3 {
        h.send("Orders", b"x", &to_queue_0).await;
        h.advance(1_000);
    }
    let max = h
        .call(queue_request(request_code::GET_MAX_OFFSET, "Orders"))
        .await;
    assert_eq!(field(&max, "offset"), "3");
    let min = h
        .call(queue_request(request_code::GET_MIN_OFFSET, "Orders"))
        .await;
    assert_eq!(field(&min, "offset"), "0");
    let search = Command::request(request_code::SEARCH_OFFSET_BY_TIMESTAMP, Encoding::Json)
        .with_ext(
            ExtFields::new()
                .with("topic", "Orders")
                .with("queueId", 0)
                .with("timestamp", first_ms + 1_500),
        );
    let found = h.call(search).await;
    assert_eq!(
        field(&found, "offset"),
        "2",
        "the first stored at or after the time"
    );
}
