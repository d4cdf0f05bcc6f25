//! Delayed messages: stored in the schedule topic, moved to their topic when due by the
//! clock the caller passes in.

mod harness;

use harness::{messages, options, Harness};
use quiver_broker::background::delay::deliver_due;
use quiver_broker::delay::SCHEDULE_TOPIC;
use quiver_testkit::SendOptions;
use quiver_wire::message::property;

#[tokio::test]
async fn a_delayed_message_is_delivered_at_its_level_and_not_before() {
    let mut h = Harness::new();
    h.create_topic("Reminders", 1).await;
    let level_2 = SendOptions {
        properties: vec![("DELAY".into(), "2".into())],
        ..options()
    };
    let sent_ms = h.now_ms;
    h.send("Reminders", b"in five seconds", &level_2).await;
    assert_eq!(
        h.broker
            .background()
            .store
            .bounds("Reminders", 0)
            .max_offset,
        0
    );
    assert_eq!(
        h.broker
            .background()
            .store
            .bounds(SCHEDULE_TOPIC, 1)
            .max_offset,
        1
    );

    // Level 2 is 5 s by default.
    deliver_due(h.broker.background(), sent_ms + 4_999);
    assert_eq!(
        h.broker
            .background()
            .store
            .bounds("Reminders", 0)
            .max_offset,
        0
    );

    h.advance(5_000);
    deliver_due(h.broker.background(), h.now_ms);
    let delivered = messages(&h.pull("Reminders", "g", 0, 0).await);
    assert_eq!(delivered.len(), 1);
    assert_eq!(&delivered[0].body[..], b"in five seconds");
    assert_eq!(delivered[0].store_timestamp, h.now_ms);
    assert_eq!(
        delivered[0].property(property::REAL_TOPIC).as_deref(),
        Some("Reminders")
    );
    // Delivered once: a later round finds nothing more due.
    deliver_due(h.broker.background(), h.now_ms + 60_000);
    assert_eq!(
        h.broker
            .background()
            .store
            .bounds("Reminders", 0)
            .max_offset,
        1
    );
}

#[tokio::test]
async fn messages_due_later_wait_behind_the_first_that_is_not_due() {
    let mut h = Harness::new();
    h.create_topic("Reminders", 1).await;
    let level_1 = SendOptions {
        properties: vec![("DELAY".into(), "1".into())],
        ..options()
    };
    h.send("Reminders", b"first", &level_1).await;
    h.advance(600);
    h.send("Reminders", b"second", &level_1).await;
    // Level 1 is 1 s: at 1,000 ms after the first only the first is due.
    deliver_due(h.broker.background(), h.now_ms - 600 + 1_000);
    assert_eq!(
        h.broker
            .background()
            .store
            .bounds("Reminders", 0)
            .max_offset,
        1
    );
    deliver_due(h.broker.background(), h.now_ms + 1_000);
    assert_eq!(
        h.broker
            .background()
            .store
            .bounds("Reminders", 0)
            .max_offset,
        2
    );
}
