//! Sends through the handler table: what is stored, what is answered, and what is refused.

mod harness;

use harness::{field, messages, options, Harness};
use quiver_broker::handler::Reply;
use quiver_testkit::{send_request, SendOptions};
use quiver_wire::code::response_code;
use quiver_wire::message::property;

#[tokio::test]
async fn a_send_is_answered_with_its_queue_offset_and_stored_at_the_call_time() {
    let mut h = Harness::new();
    let to_queue_1 = SendOptions {
        queue_id: Some(1),
        tags: Some("red".into()),
        ..options()
    };
    let first = h.send("Orders", b"one", &to_queue_1).await;
    assert_eq!(first.code, response_code::SUCCESS, "{:?}", first.remark);
    assert_eq!(field(&first, "queueId"), "1");
    assert_eq!(field(&first, "queueOffset"), "0");
    h.advance(5_000);
    let second = h.send("Orders", b"two", &to_queue_1).await;
    assert_eq!(field(&second, "queueOffset"), "1");

    let stored = messages(&h.pull("Orders", "g", 1, 0).await);
    assert_eq!(stored.len(), 2);
    assert_eq!(&stored[1].body[..], b"two");
    assert_eq!(
        stored[1].store_timestamp, h.now_ms,
        "stamped with the call's time"
    );
    assert_eq!(stored[0].store_timestamp, h.now_ms - 5_000);
    assert_eq!(stored[0].property(property::TAGS).as_deref(), Some("red"));
    assert!(stored[0].property(property::UNIQ_KEY).is_some());
    assert_eq!(
        stored[0].property(property::CLUSTER).as_deref(),
        Some("DefaultCluster")
    );
}

#[tokio::test]
async fn a_send_is_work_for_the_store_not_an_answer() {
    let h = Harness::new();
    let request = send_request("Orders", b"x", &options(), false);
    match h.dispatch(&request) {
        Reply::Append { records, .. } => {
            assert_eq!(records.len(), 1);
            assert_eq!(records[0].topic, "Orders");
        }
        _ => panic!("a valid send returns records to append"),
    }
    // Nothing is stored until the connection layer appends the records.
    assert_eq!(h.broker.sending().store.bounds("Orders", 0).max_offset, 0);
}

#[tokio::test]
async fn sends_to_system_topics_are_refused_and_transaction_halves_kept_aside() {
    let h = Harness::new();
    for topic in ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"] {
        let refused = h.send(topic, b"x", &options()).await;
        assert_eq!(refused.code, response_code::NO_PERMISSION, "{topic}");
    }
    let half = SendOptions {
        properties: vec![("TRAN_MSG".into(), "true".into())],
        ..options()
    };
    let stored = h.send("Orders", b"x", &half).await;
    assert_eq!(stored.code, response_code::SUCCESS);
    assert_eq!(h.broker.sending().store.bounds("Orders", 0).max_offset, 0);
    assert_eq!(
        h.broker
            .sending()
            .store
            .bounds("RMQ_SYS_TRANS_HALF_TOPIC", 0)
            .max_offset,
        1
    );
}

#[tokio::test]
async fn a_body_over_max_message_size_is_refused_before_it_is_stored() {
    let h = Harness::with_config("maxMessageSize=1024\n");
    let refused = h.send("Orders", &[b'x'; 1025], &options()).await;
    assert_eq!(refused.code, response_code::MESSAGE_ILLEGAL);
    assert_eq!(h.broker.sending().store.stats().messages_appended, 0);
    let fits = h.send("Orders", &[b'x'; 1024], &options()).await;
    assert_eq!(fits.code, response_code::SUCCESS);
}

#[tokio::test]
async fn with_sync_flush_a_send_is_answered_once_an_fsync_covers_it() {
    let h = Harness::with_config("flushDiskType=SYNC_FLUSH\n");
    let before = h.broker.sending().store.commitlog_fsyncs();
    let sent = h.send("Orders", b"durable", &options()).await;
    assert_eq!(sent.code, response_code::SUCCESS);
    let stats = h.broker.sending().store.stats();
    assert_eq!(stats.flushed_position, stats.written_position);
    assert!(h.broker.sending().store.commitlog_fsyncs() > before);
}

/// Every word of KEYS becomes an index entry: a message may carry 64, and one with more is
/// refused before anything is stored.
#[tokio::test]
async fn a_message_with_more_keys_than_may_be_indexed_is_refused() {
    let h = Harness::new();
    assert_eq!(h.create_topic("Keys", 1).await.code, response_code::SUCCESS);
    let words = |n: usize| {
        (0..n)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let with_keys = |n| SendOptions {
        keys: Some(words(n)),
        ..SendOptions::default()
    };
    let sent = h.send("Keys", b"ok", &with_keys(64)).await;
    assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    let refused = h.send("Keys", b"too many", &with_keys(65)).await;
    assert_eq!(refused.code, response_code::MESSAGE_ILLEGAL);
    assert!(refused.remark.unwrap_or_default().contains("65 words"));
    assert_eq!(h.broker.pulling().store.bounds("Keys", 0).max_offset, 1);
}
