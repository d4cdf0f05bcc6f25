//! Pop consumption in process: modes and assignments, pops that hand each message out once,
//! acks, revives through the pop retry topic with the reconsume count raised, the dead-letter
//! topic past the retry maximum, changed invisible times, the state across a restart, and
//! admin offset resets (INVOKE_BROKER_TO_RESET_OFFSET) that move a group's pop cursors.

mod harness;

use harness::{field, messages, options, Harness};
use quiver_broker::background::pop_revive::revive_due;
use quiver_broker::pop::retry_topic;
use quiver_testkit::SendOptions;
use quiver_wire::body::{self, QueryAssignmentResponseBody};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{
    AckMessageRequestHeader, PopMessageRequestHeader, ResetOffsetRequestHeader,
};
use quiver_wire::message::{property, StoredMessage};
use quiver_wire::receipt::{ReceiptHandle, RetryFlag};
use quiver_wire::{Command, Encoding};

const GROUP: &str = "pop_group";

fn json_request(code: i32, body: &str) -> Command {
    Command::request(code, Encoding::Json).with_body(body.as_bytes().to_vec())
}

async fn set_pop_mode(h: &Harness, topic: &str) {
    let body = format!(
        r#"{{"consumerGroup":"{GROUP}","mode":"POP","popShareQueueNum":0,"topic":"{topic}"}}"#
    );
    let answer = h
        .call(json_request(request_code::SET_MESSAGE_REQUEST_MODE, &body))
        .await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
}

fn pop_request(topic: &str, max: i32, invisible_ms: i64) -> Command {
    pop_request_with(topic, max, invisible_ms, false)
}

fn pop_request_with(topic: &str, max: i32, invisible_ms: i64, order: bool) -> Command {
    let header = PopMessageRequestHeader {
        consumer_group: GROUP.into(),
        topic: topic.into(),
        queue_id: -1,
        max_msg_nums: max,
        invisible_time: invisible_ms,
        poll_time: 0,
        born_time: 0,
        init_mode: 0,
        exp_type: Some("TAG".into()),
        exp: Some("*".into()),
        order: Some(order),
    };
    Command::request(request_code::POP_MESSAGE, Encoding::Json).with_ext(header.to_ext())
}

/// The handle the Java client builds for a message of a pop answer (or finds in POP_CK).
fn handle(answer: &Command, message: &StoredMessage) -> ReceiptHandle {
    if let Some(handle) = message.property(property::POP_CK) {
        return ReceiptHandle::parse(&handle).expect("the broker's handle parses");
    }
    let number = |key: &str| field(answer, key).parse().expect(key);
    ReceiptHandle {
        start_offset: message.queue_offset,
        pop_time_ms: number("popTime"),
        invisible_ms: number("invisibleTime"),
        revive_queue_id: field(answer, "reviveQid").parse().expect("reviveQid"),
        retry: RetryFlag::Normal,
        broker_name: "broker-a".into(),
        queue_id: message.queue_id,
        queue_offset: Some(message.queue_offset),
    }
}

async fn ack(h: &Harness, topic: &str, answer: &Command, message: &StoredMessage) {
    let handle = handle(answer, message);
    let header = AckMessageRequestHeader {
        consumer_group: GROUP.into(),
        topic: topic.into(),
        queue_id: handle.queue_id,
        extra_info: handle.encode(),
        offset: message.queue_offset,
    };
    let request =
        Command::request(request_code::ACK_MESSAGE, Encoding::Json).with_ext(header.to_ext());
    assert_eq!(h.call(request).await.code, response_code::SUCCESS);
}

fn on_queue(queue_id: i32) -> SendOptions {
    SendOptions {
        queue_id: Some(queue_id),
        ..options()
    }
}

#[tokio::test]
async fn a_group_in_pop_mode_is_assigned_every_queue_and_others_share_them_out() {
    let h = Harness::new();
    assert_eq!(
        h.create_topic("Orders", 4).await.code,
        response_code::SUCCESS
    );
    set_pop_mode(&h, "Orders").await;
    let modes = h
        .call(Command::request(
            request_code::GET_ALL_MESSAGE_REQUEST_MODE,
            Encoding::Json,
        ))
        .await;
    assert!(String::from_utf8_lossy(&modes.body).contains(r#""mode":"POP""#));

    let query = |group: &str| {
        json_request(
            request_code::QUERY_ASSIGNMENT,
            &format!(
                r#"{{"clientId":"c1","consumerGroup":"{group}","messageModel":"CLUSTERING","strategyName":"AVG","topic":"Orders"}}"#
            ),
        )
    };
    let answer = h.call(query(GROUP)).await;
    let body: QueryAssignmentResponseBody = body::from_json(&answer.body).unwrap();
    assert_eq!(body.message_queue_assignments.len(), 1);
    assert_eq!(body.message_queue_assignments[0].message_queue.queue_id, -1);
    assert_eq!(body.message_queue_assignments[0].mode, "POP");
    // A group in pull mode with no live member gets nothing to pull.
    let answer = h.call(query("other")).await;
    let body: QueryAssignmentResponseBody = body::from_json(&answer.body).unwrap();
    assert!(body.message_queue_assignments.is_empty());
}

#[tokio::test]
async fn popped_messages_are_handed_out_once_and_unacked_ones_come_back_through_the_retry_topic() {
    let mut h = Harness::new();
    assert_eq!(h.create_topic("Jobs", 2).await.code, response_code::SUCCESS);
    for i in 0..10 {
        let sent = h
            .send("Jobs", format!("job {i}").as_bytes(), &on_queue(i % 2))
            .await;
        assert_eq!(sent.code, response_code::SUCCESS);
    }
    let first = h.call(pop_request("Jobs", 32, 30_000)).await;
    assert_eq!(first.code, response_code::SUCCESS, "{:?}", first.remark);
    let popped = messages(&first);
    assert_eq!(popped.len(), 10);
    assert!(!field(&first, "startOffsetInfo").is_empty());
    assert_eq!(field(&first, "restNum"), "0");
    // Invisible now: a second pop finds nothing.
    let second = h.call(pop_request("Jobs", 32, 30_000)).await;
    assert_eq!(second.code, response_code::PULL_NOT_FOUND);

    // Half are acknowledged; the group's committed offsets stop at the first unacked one.
    for message in popped.iter().filter(|m| m.queue_id == 0) {
        ack(&h, "Jobs", &first, message).await;
    }
    assert_eq!(h.broker.popping().offsets.get("Jobs", GROUP, 0), Some(5));
    assert_eq!(h.broker.popping().offsets.get("Jobs", GROUP, 1), Some(0));

    // Their invisible time runs out: the other half comes back, counted once more.
    h.advance(30_001);
    revive_due(h.broker.background(), h.now_ms);
    assert_eq!(
        h.broker
            .popping()
            .store
            .bounds(&retry_topic(GROUP, "Jobs"), 0)
            .max_offset,
        5
    );
    assert_eq!(h.broker.popping().offsets.get("Jobs", GROUP, 1), Some(5));
    let again = h.call(pop_request("Jobs", 32, 30_000)).await;
    let back = messages(&again);
    assert_eq!(back.len(), 5);
    for message in &back {
        assert_eq!(message.topic, "Jobs", "handed out under the consumed topic");
        assert_eq!(message.reconsume_times, 1);
        let body = String::from_utf8(message.body.to_vec()).unwrap();
        let n: i32 = body.trim_start_matches("job ").parse().unwrap();
        assert_eq!(n % 2, 1, "only the unacked ones: {body}");
        let handle = message
            .property(property::POP_CK)
            .expect("the broker's handle");
        let parsed = ReceiptHandle::parse(&handle).expect("the broker's handle parses");
        assert_eq!(parsed.retry, RetryFlag::Retry, "retry flag: {handle}");
    }
    for message in &back {
        ack(&h, "Jobs", &again, message).await;
    }
    h.advance(60_000);
    revive_due(h.broker.background(), h.now_ms);
    let done = h.call(pop_request("Jobs", 32, 30_000)).await;
    assert_eq!(done.code, response_code::PULL_NOT_FOUND, "all acknowledged");
}

#[tokio::test]
async fn past_the_retry_maximum_a_message_goes_to_the_dead_letter_topic() {
    let mut h = Harness::new();
    assert_eq!(
        h.create_topic("Poison", 1).await.code,
        response_code::SUCCESS
    );
    h.send("Poison", b"never acked", &on_queue(0)).await;
    for round in 0..=16 {
        let answer = h.call(pop_request("Poison", 1, 1_000)).await;
        assert_eq!(answer.code, response_code::SUCCESS, "round {round}");
        assert_eq!(messages(&answer)[0].reconsume_times, round);
        h.advance(1_001);
        revive_due(h.broker.background(), h.now_ms);
    }
    let dead = h.pull(&format!("%DLQ%{GROUP}"), "reader", 0, 0).await;
    let dead = messages(&dead);
    assert_eq!(dead.len(), 1);
    assert_eq!(&dead[0].body[..], b"never acked");
    let empty = h.call(pop_request("Poison", 1, 1_000)).await;
    assert_eq!(empty.code, response_code::PULL_NOT_FOUND);
}

#[tokio::test]
async fn the_groups_retry_max_times_decides_when_a_popped_message_is_dead() {
    let mut h = Harness::new();
    h.create_topic("Poison", 1).await;
    let mut config = quiver_wire::body::SubscriptionGroupConfig::named(GROUP);
    config.retry_max_times = 2;
    h.broker
        .membership()
        .groups
        .update(config, h.now_ms)
        .expect("group");
    h.send("Poison", b"never acked", &on_queue(0)).await;
    for round in 0..=2 {
        let answer = h.call(pop_request("Poison", 1, 1_000)).await;
        assert_eq!(answer.code, response_code::SUCCESS, "round {round}");
        h.advance(1_001);
        revive_due(h.broker.background(), h.now_ms);
    }
    let dead = h.pull(&format!("%DLQ%{GROUP}"), "reader", 0, 0).await;
    assert_eq!(messages(&dead).len(), 1, "dead after 2 retries, not 16");
}

#[tokio::test]
async fn a_longer_invisible_time_keeps_a_message_from_coming_back() {
    let mut h = Harness::new();
    assert_eq!(h.create_topic("Slow", 1).await.code, response_code::SUCCESS);
    h.send("Slow", b"slow job", &on_queue(0)).await;
    let answer = h.call(pop_request("Slow", 1, 10_000)).await;
    let message = &messages(&answer)[0];
    let ext = quiver_wire::ExtFields::new()
        .with("consumerGroup", GROUP)
        .with("topic", "Slow")
        .with("queueId", 0)
        .with("extraInfo", handle(&answer, message).encode())
        .with("offset", message.queue_offset)
        .with("invisibleTime", 100_000);
    let change =
        Command::request(request_code::CHANGE_MESSAGE_INVISIBLETIME, Encoding::Json).with_ext(ext);
    let changed = h.call(change).await;
    assert_eq!(changed.code, response_code::SUCCESS, "{:?}", changed.remark);
    assert_eq!(field(&changed, "invisibleTime"), "100000");
    h.advance(60_000);
    revive_due(h.broker.background(), h.now_ms);
    assert_eq!(
        h.broker
            .popping()
            .store
            .bounds(&retry_topic(GROUP, "Slow"), 0)
            .max_offset,
        0
    );
    h.advance(50_000);
    revive_due(h.broker.background(), h.now_ms);
    assert_eq!(
        h.broker
            .popping()
            .store
            .bounds(&retry_topic(GROUP, "Slow"), 0)
            .max_offset,
        1
    );
}

#[tokio::test]
async fn after_a_restart_acked_messages_stay_acked_and_unacked_ones_come_back() {
    let h = Harness::new();
    assert_eq!(h.create_topic("Kept", 1).await.code, response_code::SUCCESS);
    for i in 0..4 {
        h.send("Kept", format!("m{i}").as_bytes(), &on_queue(0))
            .await;
    }
    let answer = h.call(pop_request("Kept", 32, 5_000)).await;
    let popped = messages(&answer);
    ack(&h, "Kept", &answer, &popped[0]).await;
    ack(&h, "Kept", &answer, &popped[2]).await;
    h.broker.popping().pop.persist_if_dirty().unwrap();
    let start = h.now_ms;
    let mut h = h.reopen(|_| {});
    h.now_ms = start;
    let none = h.call(pop_request("Kept", 32, 5_000)).await;
    assert_eq!(none.code, response_code::PULL_NOT_FOUND, "still invisible");
    h.advance(5_001);
    revive_due(h.broker.background(), h.now_ms);
    let back = messages(&h.call(pop_request("Kept", 32, 5_000)).await);
    let bodies: Vec<&[u8]> = back.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, [b"m1" as &[u8], b"m3"]);
}

#[tokio::test]
async fn peek_shows_what_the_next_pop_would_take_and_takes_nothing() {
    let h = Harness::new();
    assert_eq!(
        h.create_topic("Peeked", 1).await.code,
        response_code::SUCCESS
    );
    for i in 0..3 {
        h.send("Peeked", format!("p{i}").as_bytes(), &on_queue(0))
            .await;
    }
    let peek = |max: i32| {
        let ext = quiver_wire::ExtFields::new()
            .with("consumerGroup", GROUP)
            .with("topic", "Peeked")
            .with("queueId", -1)
            .with("maxMsgNums", max);
        Command::request(request_code::PEEK_MESSAGE, Encoding::Json).with_ext(ext)
    };
    let peeked = h.call(peek(2)).await;
    assert_eq!(messages(&peeked).len(), 2);
    assert_eq!(field(&peeked, "restNum"), "1");
    // Peeking took nothing: a pop still gets all three.
    let popped = h.call(pop_request("Peeked", 32, 30_000)).await;
    assert_eq!(messages(&popped).len(), 3);
    let after = h.call(peek(2)).await;
    assert_eq!(after.code, response_code::PULL_NOT_FOUND);
}

#[tokio::test]
async fn notification_says_whether_there_is_something_to_pop_and_waits_for_it() {
    let h = Harness::new();
    assert_eq!(
        h.create_topic("Notified", 2).await.code,
        response_code::SUCCESS
    );
    let notification = |poll_ms: i64| {
        let ext = quiver_wire::ExtFields::new()
            .with("consumerGroup", GROUP)
            .with("topic", "Notified")
            .with("queueId", -1)
            .with("pollTime", poll_ms)
            .with("bornTime", 0);
        Command::request(request_code::NOTIFICATION, Encoding::Json).with_ext(ext)
    };
    let none = h.call(notification(0)).await;
    assert_eq!(field(&none, "hasMsg"), "false");
    let quiver_broker::handler::Reply::Wait(waiting) = h.dispatch(&notification(20_000)) else {
        panic!("an empty topic with a poll time waits");
    };
    let waiting = tokio::spawn(waiting);
    // The waiting notification counts in POLLING_INFO.
    let info = || {
        let ext = quiver_wire::ExtFields::new()
            .with("consumerGroup", GROUP)
            .with("topic", "Notified")
            .with("queueId", -1);
        Command::request(request_code::POLLING_INFO, Encoding::Json).with_ext(ext)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while field(&h.call(info()).await, "pollingNum") != "1" {
        assert!(
            std::time::Instant::now() < deadline,
            "the notification never counted as waiting"
        );
        tokio::task::yield_now().await;
    }
    h.send("Notified", b"here", &on_queue(1)).await;
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("woken by the arrival")
        .unwrap();
    assert_eq!(field(&answer.command, "hasMsg"), "true");
    assert_eq!(field(&h.call(info()).await, "pollingNum"), "0");
}

#[tokio::test]
async fn past_the_in_flight_limit_a_pop_is_told_why() {
    let h = Harness::with_config("popInflightMaxPerQueue=3\npopInflightMaxPerGroup=5\n");
    assert_eq!(
        h.create_topic("Limited", 2).await.code,
        response_code::SUCCESS
    );
    for i in 0..10 {
        h.send("Limited", b"x", &on_queue(i % 2)).await;
    }
    // 3 from one queue (its limit), then 2 from the other (the group's limit of 5).
    let first = h.call(pop_request("Limited", 32, 30_000)).await;
    let held = messages(&first);
    assert_eq!(held.len(), 5);
    let full = h.call(pop_request("Limited", 32, 30_000)).await;
    assert_eq!(full.code, response_code::POLLING_FULL, "{:?}", full.remark);
    assert!(full.remark.unwrap().contains("popInflightMaxPerGroup"));
    // Acknowledging one frees room for one.
    ack(&h, "Limited", &first, &held[0]).await;
    let one = h.call(pop_request("Limited", 32, 30_000)).await;
    assert_eq!(messages(&one).len(), 1);
}

#[tokio::test]
async fn an_ordered_pop_holds_the_queue_until_acked_and_pops_again_in_order_after_a_timeout() {
    let mut h = Harness::new();
    assert_eq!(
        h.create_topic("Ordered", 1).await.code,
        response_code::SUCCESS
    );
    for i in 0..6 {
        h.send("Ordered", format!("o{i}").as_bytes(), &on_queue(0))
            .await;
    }
    let bodies = |answer: &Command| -> Vec<String> {
        messages(answer)
            .iter()
            .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
            .collect()
    };
    let first = h.call(pop_request_with("Ordered", 2, 5_000, true)).await;
    assert_eq!(bodies(&first), ["o0", "o1"]);
    // The queue is held while o0 and o1 are in flight: nobody else gets o2 yet.
    let held = h.call(pop_request_with("Ordered", 2, 5_000, true)).await;
    assert_eq!(held.code, response_code::PULL_NOT_FOUND);
    // Not acknowledged in time: popped again from the same queue, in order, counted.
    h.advance(5_001);
    revive_due(h.broker.background(), h.now_ms);
    let again = h.call(pop_request_with("Ordered", 2, 5_000, true)).await;
    assert_eq!(bodies(&again), ["o0", "o1"]);
    assert!(
        field(&again, "orderCountInfo").contains("qo0%0 1"),
        "{:?}",
        again.ext
    );
    assert_eq!(
        h.broker
            .popping()
            .store
            .bounds(&retry_topic(GROUP, "Ordered"), 0)
            .max_offset,
        0
    );
    let popped = messages(&again);
    for message in &popped {
        ack(&h, "Ordered", &again, message).await;
    }
    let next = h.call(pop_request_with("Ordered", 2, 5_000, true)).await;
    assert_eq!(bodies(&next), ["o2", "o3"]);
    assert!(field(&next, "orderCountInfo").contains("qo0%2 0"));
}

/// `mqadmin resetOffsetByTime` for the pop group: every queue of `topic` to the first message
/// stored at or after `timestamp`.
fn reset_to_time(topic: &str, timestamp: i64) -> Command {
    reset_request(topic, -1, None, timestamp)
}

fn reset_request(topic: &str, queue_id: i32, offset: Option<i64>, timestamp: i64) -> Command {
    let header = ResetOffsetRequestHeader {
        topic: topic.into(),
        group: GROUP.into(),
        timestamp,
        is_force: true,
        queue_id,
        offset,
    };
    Command::request(request_code::INVOKE_BROKER_TO_RESET_OFFSET, Encoding::Json)
        .with_ext(header.to_ext())
}

fn sorted_bodies(answer: &Command) -> Vec<String> {
    let mut bodies: Vec<String> = messages(answer)
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect();
    bodies.sort();
    bodies
}

#[tokio::test]
async fn a_reset_to_an_earlier_time_pops_acknowledged_messages_again() {
    let mut h = Harness::new();
    assert_eq!(
        h.create_topic("Replay", 2).await.code,
        response_code::SUCCESS
    );
    for i in 0..4 {
        h.send("Replay", format!("a{i}").as_bytes(), &on_queue(i % 2))
            .await;
    }
    h.advance(60_000);
    let later = h.now_ms;
    for i in 0..4 {
        h.send("Replay", format!("b{i}").as_bytes(), &on_queue(i % 2))
            .await;
    }
    let first = h.call(pop_request("Replay", 32, 30_000)).await;
    assert_eq!(messages(&first).len(), 8);
    for message in &messages(&first) {
        ack(&h, "Replay", &first, message).await;
    }
    let done = h.call(pop_request("Replay", 32, 30_000)).await;
    assert_eq!(done.code, response_code::PULL_NOT_FOUND, "all acknowledged");

    // Back to the second batch's time: its messages, acknowledged already, come again.
    let answer = h.call(reset_to_time("Replay", later)).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    assert_eq!(h.broker.popping().offsets.get("Replay", GROUP, 0), Some(2));
    let again = h.call(pop_request("Replay", 32, 30_000)).await;
    assert_eq!(sorted_bodies(&again), ["b0", "b1", "b2", "b3"]);
    assert!(
        !h.broker.popping().offsets.reset_pending("Replay", GROUP, 0),
        "the pop spent the reset: a later pull of the group is not sent back to it"
    );
    for message in &messages(&again) {
        ack(&h, "Replay", &again, message).await;
    }
    assert_eq!(
        h.call(pop_request("Replay", 32, 30_000)).await.code,
        response_code::PULL_NOT_FOUND
    );

    // Back to the start: all of them.
    h.call(reset_to_time("Replay", 0)).await;
    let all = h.call(pop_request("Replay", 32, 30_000)).await;
    assert_eq!(
        sorted_bodies(&all),
        ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"]
    );
    for message in &messages(&all) {
        ack(&h, "Replay", &all, message).await;
    }

    // One queue to one offset: queue 1 holds a1, a3, b1, b3 at offsets 0 to 3.
    let one = h.call(reset_request("Replay", 1, Some(3), 0)).await;
    assert_eq!(one.code, response_code::SUCCESS, "{:?}", one.remark);
    let last = h.call(pop_request("Replay", 32, 30_000)).await;
    assert_eq!(sorted_bodies(&last), ["b3"]);
}

#[tokio::test]
async fn a_reset_to_a_later_time_skips_and_what_was_in_flight_still_comes_back() {
    let mut h = Harness::new();
    assert_eq!(h.create_topic("Skip", 1).await.code, response_code::SUCCESS);
    for i in 0..3 {
        h.send("Skip", format!("m{i}").as_bytes(), &on_queue(0))
            .await;
    }
    h.advance(60_000);
    let later = h.now_ms;
    for i in 3..5 {
        h.send("Skip", format!("m{i}").as_bytes(), &on_queue(0))
            .await;
    }
    let first = h.call(pop_request("Skip", 2, 5_000)).await;
    assert_eq!(sorted_bodies(&first), ["m0", "m1"]);

    // Forward past m2, never popped: it is skipped.
    let answer = h.call(reset_to_time("Skip", later)).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    let next = h.call(pop_request("Skip", 32, 5_000)).await;
    assert_eq!(sorted_bodies(&next), ["m3", "m4"]);
    for message in &messages(&next) {
        ack(&h, "Skip", &next, message).await;
    }
    assert_eq!(
        h.call(pop_request("Skip", 32, 5_000)).await.code,
        response_code::PULL_NOT_FOUND
    );

    // m0 and m1 were handed out before the reset and not acknowledged: as RocketMQ keeps
    // their checkpoints, they come back through the retry topic when their time runs out.
    h.advance(5_001);
    revive_due(h.broker.background(), h.now_ms);
    assert_eq!(h.broker.popping().offsets.get("Skip", GROUP, 0), Some(5));
    let back = h.call(pop_request("Skip", 32, 5_000)).await;
    assert_eq!(sorted_bodies(&back), ["m0", "m1"]);
    assert!(messages(&back).iter().all(|m| m.reconsume_times == 1));
}

#[tokio::test]
async fn a_reset_frees_an_ordered_queue_held_by_messages_popped_before_it() {
    let h = Harness::new();
    assert_eq!(
        h.create_topic("OrderedReset", 1).await.code,
        response_code::SUCCESS
    );
    for i in 0..4 {
        h.send("OrderedReset", format!("o{i}").as_bytes(), &on_queue(0))
            .await;
    }
    let first = h
        .call(pop_request_with("OrderedReset", 2, 60_000, true))
        .await;
    assert_eq!(sorted_bodies(&first), ["o0", "o1"]);
    let held = h
        .call(pop_request_with("OrderedReset", 2, 60_000, true))
        .await;
    assert_eq!(held.code, response_code::PULL_NOT_FOUND, "held until acked");

    // As RocketMQ clears the queue's block: popped again from the reset at once, counted
    // from nothing.
    let answer = h.call(reset_to_time("OrderedReset", 0)).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    let again = h
        .call(pop_request_with("OrderedReset", 2, 60_000, true))
        .await;
    assert_eq!(sorted_bodies(&again), ["o0", "o1"]);
    assert!(
        field(&again, "orderCountInfo").contains("qo0%0 0"),
        "{:?}",
        again.ext
    );
    for message in &messages(&again) {
        ack(&h, "OrderedReset", &again, message).await;
    }
    let next = h
        .call(pop_request_with("OrderedReset", 2, 60_000, true))
        .await;
    assert_eq!(sorted_bodies(&next), ["o2", "o3"]);
}

#[tokio::test]
async fn a_non_persistent_topic_is_peeked_popped_acked_and_revived_as_a_persistent_one_is() {
    let mut h = Harness::new();
    let mut create = quiver_testkit::create_topic_request("Ticks", 2, Encoding::Json);
    let ext = create.ext.take().unwrap_or_default();
    let create = create.with_ext(ext.with("attributes", "+persistence=memory"));
    assert_eq!(h.call(create).await.code, response_code::SUCCESS);
    let written_before = h.broker.popping().store.stats().written_position;
    for i in 0..6 {
        let sent = h
            .send("Ticks", format!("tick {i}").as_bytes(), &on_queue(i % 2))
            .await;
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    }
    assert_eq!(
        h.broker.popping().store.stats().written_position,
        written_before,
        "the sends stay in memory"
    );
    let peek = quiver_wire::ExtFields::new()
        .with("consumerGroup", GROUP)
        .with("topic", "Ticks")
        .with("queueId", -1)
        .with("maxMsgNums", 32);
    let peeked = h
        .call(Command::request(request_code::PEEK_MESSAGE, Encoding::Json).with_ext(peek))
        .await;
    assert_eq!(messages(&peeked).len(), 6, "{:?}", peeked.remark);

    let first = h.call(pop_request("Ticks", 32, 30_000)).await;
    assert_eq!(first.code, response_code::SUCCESS, "{:?}", first.remark);
    let popped = messages(&first);
    assert_eq!(popped.len(), 6);
    for message in popped.iter().filter(|m| m.queue_id == 0) {
        ack(&h, "Ticks", &first, message).await;
    }
    assert_eq!(h.broker.popping().offsets.get("Ticks", GROUP, 0), Some(3));

    h.advance(30_001);
    revive_due(h.broker.background(), h.now_ms);
    let again = messages(&h.call(pop_request("Ticks", 32, 30_000)).await);
    let mut bodies: Vec<String> = again
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect();
    bodies.sort();
    assert_eq!(
        bodies,
        ["tick 1", "tick 3", "tick 5"],
        "the unacked ones come back"
    );
    assert!(again
        .iter()
        .all(|m| m.reconsume_times == 1 && m.topic == "Ticks"));
}

/// Eight queues with a 3 MB message each: one pop across all of them would make a 24 MB
/// answer, past the 16 MiB frame limit. Each pop carries whole messages up to
/// `maxTransferBytesOnMessageInMemory` (and always one), so every message is delivered once.
#[tokio::test]
async fn a_pop_across_queues_of_large_messages_answers_what_fits_and_delivers_every_one() {
    let h = Harness::with_config("maxMessageSize=4194304\n");
    assert_eq!(h.create_topic("Big", 8).await.code, response_code::SUCCESS);
    let body = vec![b'x'; 3_000_000];
    for queue_id in 0..8 {
        let sent = h.send("Big", &body, &on_queue(queue_id)).await;
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    }
    let mut queues_seen = Vec::new();
    for _ in 0..8 {
        let answer = h.call(pop_request("Big", 32, 60_000)).await;
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        assert!(answer.body.len() < 4_000_000, "{} bytes", answer.body.len());
        let popped = messages(&answer);
        assert_eq!(popped.len(), 1, "one 3 MB message per pop");
        queues_seen.push(popped[0].queue_id);
    }
    queues_seen.sort_unstable();
    assert_eq!(queues_seen, (0..8).collect::<Vec<_>>());
    let done = h.call(pop_request("Big", 32, 60_000)).await;
    assert_eq!(done.code, response_code::PULL_NOT_FOUND);
}

/// Small messages fill a pop up to the byte cap in whole messages, across queues.
#[tokio::test]
async fn a_pop_stops_at_the_byte_cap_in_whole_messages() {
    let h = Harness::with_config("maxTransferBytesOnMessageInMemory=10240\n");
    assert_eq!(h.create_topic("Cap", 4).await.code, response_code::SUCCESS);
    for i in 0..16 {
        let sent = h.send("Cap", &[b'y'; 1500], &on_queue(i % 4)).await;
        assert_eq!(sent.code, response_code::SUCCESS);
    }
    let mut total = 0;
    while total < 16 {
        let answer = h.call(pop_request("Cap", 32, 60_000)).await;
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        assert!(answer.body.len() <= 10_240, "{} bytes", answer.body.len());
        let popped = messages(&answer).len();
        assert!((1..16).contains(&popped), "{popped} messages");
        total += popped;
    }
    assert_eq!(total, 16);
}

fn batch_ack_request(topic: &str, queue_id: i32, start_offset: i64, bits: &[u8]) -> Command {
    let body = body::BatchAckMessageRequestBody {
        broker_name: "broker-a".into(),
        acks: vec![body::BatchAck {
            consumer_group: GROUP.into(),
            topic: topic.into(),
            retry: "0".into(),
            start_offset,
            queue_id,
            revive_queue_id: 0,
            pop_time: 0,
            invisible_time: 60_000,
            bit_set: quiver_wire::bit_set::encode(bits),
        }],
    };
    Command::request(request_code::BATCH_ACK_MESSAGE, Encoding::Json)
        .with_body(body::to_json(&body))
}

/// BATCH_ACK_MESSAGE acknowledges the offsets its bit set names (they do not come back), and
/// a bit set spanning more offsets than a batch may is refused before anything is taken.
#[tokio::test]
async fn a_batch_ack_acknowledges_its_bits_and_a_huge_bit_set_is_refused() {
    let mut h = Harness::new();
    assert_eq!(
        h.create_topic("Batch", 1).await.code,
        response_code::SUCCESS
    );
    for i in 0..8 {
        let sent = h
            .send("Batch", format!("m{i}").as_bytes(), &on_queue(0))
            .await;
        assert_eq!(sent.code, response_code::SUCCESS);
    }
    let popped = h.call(pop_request("Batch", 32, 30_000)).await;
    assert_eq!(messages(&popped).len(), 8);

    let huge = vec![0xffu8; 1 << 20];
    let refused = h.call(batch_ack_request("Batch", 0, 0, &huge)).await;
    assert_eq!(
        refused.code,
        response_code::INVALID_PARAMETER,
        "{:?}",
        refused.remark
    );
    assert_eq!(
        h.broker.popping().offsets.get("Batch", GROUP, 0),
        Some(0),
        "nothing acked"
    );

    // Offsets 0 to 5: bits 0..6.
    let acked = h
        .call(batch_ack_request("Batch", 0, 0, &[0b0011_1111]))
        .await;
    assert_eq!(acked.code, response_code::SUCCESS, "{:?}", acked.remark);
    assert_eq!(h.broker.popping().offsets.get("Batch", GROUP, 0), Some(6));
    h.advance(30_001);
    revive_due(h.broker.background(), h.now_ms);
    let again = h.call(pop_request("Batch", 32, 30_000)).await;
    let bodies: Vec<String> = messages(&again)
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect();
    assert_eq!(bodies, ["m6", "m7"], "only the unacknowledged come back");
}

/// RocketMQ's proxy pops with init mode 1 (the queue's end) for a group new to a queue; the
/// broker still hands out a young queue from its start (its first message within
/// `accessMessageInMemoryMaxRatio` of the log's end), or else from its last message.
#[tokio::test]
async fn a_new_group_popping_from_the_end_reads_a_young_queue_whole_and_an_old_one_from_its_last_message(
) {
    let first_pop = |topic: &str| {
        let mut request = pop_request(topic, 32, 30_000);
        let ext = request.ext.as_mut().expect("a pop has fields");
        ext.insert("initMode", "1");
        request
    };
    for (ratio, expected) in [("40", vec!["m0", "m1", "m2"]), ("0", vec!["m2"])] {
        let h = Harness::with_config(&format!("accessMessageInMemoryMaxRatio={ratio}"));
        assert_eq!(
            h.create_topic("Young", 1).await.code,
            response_code::SUCCESS
        );
        for i in 0..3 {
            h.send("Young", format!("m{i}").as_bytes(), &on_queue(0))
                .await;
        }
        let popped = messages(&h.call(first_pop("Young")).await);
        let bodies: Vec<String> = popped
            .iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect();
        assert_eq!(bodies, expected, "accessMessageInMemoryMaxRatio={ratio}");
    }
}
