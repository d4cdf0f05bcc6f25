//! Transactional messages: half messages kept out of sight, END_TRANSACTION's commit and
//! rollback, and the check that asks producers about halves left undecided, by the clock the
//! test sets.

mod harness;

use bytes::Bytes;
use harness::{field, messages, Harness};
use quiver_broker::background::transaction_check::{check_round, CheckReport};
use quiver_broker::connection::{Connection, Outgoing};
use quiver_broker::transaction::{self, CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC, SYSTEM_GROUP};
use quiver_store::Append;
use quiver_wire::body::{self, HeartbeatData, ProducerData};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{EndTransactionRequestHeader, SendMessageHeader};
use quiver_wire::message::{encode_properties, property, sys_flag, StoredMessage};
use quiver_wire::{Command, Encoding};
use tokio::sync::mpsc::UnboundedReceiver;

const TOPIC: &str = "Payments";
const GROUP: &str = "payments_tx";

/// A half message as the Java client sends it: TRAN_MSG and PGROUP set, the prepared bits in
/// the sys flag, born at the harness's time.
fn half_request(h: &Harness, body: &[u8], extra: &[(&str, &str)]) -> Command {
    let mut pairs = vec![
        ("TRAN_MSG", "true"),
        ("PGROUP", GROUP),
        ("WAIT", "true"),
        ("TAGS", "paid"),
    ];
    pairs.extend_from_slice(extra);
    let header = SendMessageHeader {
        producer_group: GROUP.into(),
        topic: TOPIC.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 1,
        sys_flag: sys_flag::TRANSACTION_PREPARED,
        born_timestamp: h.now_ms,
        flag: 0,
        properties: encode_properties(pairs),
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
    };
    Command::request(request_code::SEND_MESSAGE, Encoding::Json)
        .with_ext(header.to_v1())
        .with_body(Bytes::copy_from_slice(body))
}

/// What the producer needs to end the transaction, from the send's answer.
struct Sent {
    queue_offset: i64,
    commit_log_offset: i64,
    msg_id: String,
}

async fn send_half(h: &Harness, body: &[u8], extra: &[(&str, &str)]) -> Sent {
    let answer = h.call(half_request(h, body, extra)).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    let offset_id = field(&answer, "msgId");
    let (_, position) =
        quiver_wire::message::decode_offset_msg_id(offset_id).expect("an offset message id");
    Sent {
        queue_offset: field(&answer, "queueOffset").parse().expect("a number"),
        commit_log_offset: position,
        msg_id: field(&answer, "transactionId").to_string(),
    }
}

fn end_request(sent: &Sent, decision: i32, from_check: bool) -> Command {
    let header = EndTransactionRequestHeader {
        producer_group: GROUP.into(),
        tran_state_table_offset: sent.queue_offset,
        commit_log_offset: sent.commit_log_offset,
        commit_or_rollback: decision,
        from_transaction_check: Some(from_check),
        msg_id: sent.msg_id.clone(),
        transaction_id: Some(sent.msg_id.clone()),
        topic: Some(TOPIC.into()),
    };
    Command::request(request_code::END_TRANSACTION, Encoding::Json)
        .with_ext(header.to_ext())
        .oneway()
}

async fn end(h: &Harness, sent: &Sent, decision: i32, from_check: bool) -> Command {
    h.call(end_request(sent, decision, from_check)).await
}

fn producer_heartbeat() -> Command {
    let data = HeartbeatData {
        client_id: "producer-1".into(),
        producer_data_set: vec![ProducerData {
            group_name: GROUP.into(),
        }],
        ..HeartbeatData::default()
    };
    Command::request(request_code::HEART_BEAT, Encoding::Json).with_body(body::to_json(&data))
}

/// A producer connection of the group, and what the broker sends it.
async fn producer(h: &Harness) -> (Connection, UnboundedReceiver<Outgoing>) {
    let (connection, outgoing) = h.second_connection();
    let answer = h.call_on(&connection, producer_heartbeat()).await;
    assert_eq!(answer.code, response_code::SUCCESS);
    (connection, outgoing)
}

/// The CHECK_TRANSACTION_STATE requests queued for a connection.
fn checks(outgoing: &mut UnboundedReceiver<Outgoing>) -> Vec<Command> {
    let mut found = Vec::new();
    while let Ok(frame) = outgoing.try_recv() {
        if frame.command.code == request_code::CHECK_TRANSACTION_STATE {
            found.push(frame.command);
        }
    }
    found
}

/// Every message a consumer of `topic` can pull from its first queues.
async fn pulled(h: &Harness, topic: &str, queues: i32) -> Vec<StoredMessage> {
    let mut all = Vec::new();
    for queue_id in 0..queues {
        let answer = h.pull(topic, "consumers", queue_id, 0).await;
        if answer.code != response_code::PULL_NOT_FOUND {
            all.extend(messages(&answer));
        }
    }
    all
}

async fn delivered(h: &Harness) -> Vec<StoredMessage> {
    pulled(h, TOPIC, 4).await
}

fn op_bodies(h: &Harness) -> Vec<String> {
    let store = h.broker.background().store;
    let bounds = store.bounds(OP_TOPIC, 0);
    let read = store
        .read(OP_TOPIC, 0, 0, 100, 1 << 20, &|_| true)
        .expect("op queue reads");
    assert_eq!(read.message_count as u64, bounds.max_offset);
    let mut rest = &read.bytes[..];
    let mut bodies = Vec::new();
    while !rest.is_empty() {
        let (message, size) = StoredMessage::decode(rest, false).expect("an op record");
        assert_eq!(message.property(property::TAGS).as_deref(), Some("d"));
        bodies.push(String::from_utf8(message.body.to_vec()).expect("text"));
        rest = &rest[size..];
    }
    bodies
}

async fn setup() -> Harness {
    let h = Harness::new();
    h.create_topic(TOPIC, 4).await;
    h
}

#[tokio::test]
async fn a_half_message_is_hidden_until_committed_and_then_delivered_once() {
    let h = setup().await;
    let sent = send_half(&h, b"order 1", &[]).await;
    assert_eq!(sent.queue_offset, 0, "the offset in the half queue");
    assert!(delivered(&h).await.is_empty(), "a half is not consumable");

    let half = pulled(&h, HALF_TOPIC, 1).await;
    assert_eq!(half.len(), 1);
    assert_eq!(
        half[0].property(property::REAL_TOPIC).as_deref(),
        Some(TOPIC)
    );
    assert_eq!(half[0].property(property::REAL_QID).as_deref(), Some("1"));
    assert_eq!(
        half[0].property(property::TRANSACTION_ID).as_deref(),
        Some(sent.msg_id.as_str())
    );
    assert_eq!(half[0].sys_flag & sys_flag::TRANSACTION_MASK, 0);

    end(&h, &sent, sys_flag::TRANSACTION_COMMIT, false).await;
    let committed = delivered(&h).await;
    assert_eq!(committed.len(), 1);
    let message = &committed[0];
    assert_eq!(&message.body[..], b"order 1");
    assert_eq!(message.queue_id, 1);
    assert_eq!(
        message.sys_flag & sys_flag::TRANSACTION_MASK,
        sys_flag::TRANSACTION_COMMIT
    );
    assert_eq!(message.prepared_transaction_offset, sent.commit_log_offset);
    assert_eq!(message.property(property::REAL_TOPIC), None);
    assert_eq!(message.property(property::TRAN_MSG), None);
    assert_eq!(
        message.property(property::UNIQ_KEY).as_deref(),
        Some(sent.msg_id.as_str())
    );
    assert_eq!(op_bodies(&h), vec!["0,"]);

    // A second commit (the producer's answer to a check that crossed its decision) stores
    // nothing more.
    end(&h, &sent, sys_flag::TRANSACTION_COMMIT, true).await;
    end(&h, &sent, sys_flag::TRANSACTION_ROLLBACK, true).await;
    assert_eq!(delivered(&h).await.len(), 1);
    assert_eq!(op_bodies(&h).len(), 1);
    assert_eq!(h.broker.background().transactions.progress(), (1, 1));
}

#[tokio::test]
async fn a_rolled_back_half_is_never_delivered_nor_checked() {
    let mut h = setup().await;
    let (_producer, mut outgoing) = producer(&h).await;
    let sent = send_half(&h, b"order 2", &[]).await;
    end(&h, &sent, sys_flag::TRANSACTION_ROLLBACK, false).await;
    assert_eq!(op_bodies(&h), vec!["0,"]);
    h.advance(60_000);
    let report = check_round(h.broker.background(), h.now_ms);
    assert_eq!(report, CheckReport::default());
    assert!(checks(&mut outgoing).is_empty());
    end(&h, &sent, sys_flag::TRANSACTION_COMMIT, true).await;
    assert!(delivered(&h).await.is_empty());
}

#[tokio::test]
async fn an_unknown_half_is_checked_after_the_timeout_and_committed_by_the_answer() {
    let mut h = setup().await;
    let (_producer, mut outgoing) = producer(&h).await;
    let sent = send_half(&h, b"order 3", &[]).await;
    end(&h, &sent, 0, false).await;
    assert!(op_bodies(&h).is_empty(), "unknown records nothing");

    // transactionTimeOut is 6 s by default: not yet.
    h.advance(6_000);
    check_round(h.broker.background(), h.now_ms);
    assert!(checks(&mut outgoing).is_empty());

    h.advance(1);
    let report = check_round(h.broker.background(), h.now_ms);
    assert_eq!(report.checked, 1);
    let asked = checks(&mut outgoing);
    assert_eq!(asked.len(), 1);
    let check = &asked[0];
    assert!(check.is_oneway());
    assert_eq!(field(check, "topic"), HALF_TOPIC);
    assert_eq!(field(check, "tranStateTableOffset"), "0");
    assert_eq!(
        field(check, "commitLogOffset"),
        sent.commit_log_offset.to_string()
    );
    assert_eq!(field(check, "msgId"), sent.msg_id);
    assert_eq!(field(check, "transactionId"), sent.msg_id);
    assert_eq!(
        field(check, "bname"),
        h.broker.background().config.broker_name
    );
    let (message, _) = StoredMessage::decode(&check.body, true).expect("the body is a message");
    assert_eq!(message.topic, TOPIC);
    assert_eq!(message.queue_id, 1);
    assert_eq!(message.queue_offset, 0);
    assert_eq!(message.physical_offset, sent.commit_log_offset);
    assert_eq!(field(check, "offsetMsgId"), message.offset_msg_id());
    assert_eq!(
        message.property(property::PRODUCER_GROUP).as_deref(),
        Some(GROUP)
    );
    assert_eq!(&message.body[..], b"order 3");

    // The producer answers UNKNOW at first: asked again next round.
    end(&h, &sent, 0, true).await;
    h.advance(30_000);
    check_round(h.broker.background(), h.now_ms);
    assert_eq!(checks(&mut outgoing).len(), 1);

    end(&h, &sent, sys_flag::TRANSACTION_COMMIT, true).await;
    assert_eq!(delivered(&h).await.len(), 1);
    h.advance(30_000);
    let report = check_round(h.broker.background(), h.now_ms);
    assert_eq!(report, CheckReport::default());
    assert!(checks(&mut outgoing).is_empty());
}

#[tokio::test]
async fn a_half_checked_the_maximum_times_is_moved_aside_and_never_delivered() {
    let mut h = Harness::with_config("transactionCheckMax=2\ntransactionTimeOut=1000\n");
    h.create_topic(TOPIC, 4).await;
    let (_producer, mut outgoing) = producer(&h).await;
    let sent = send_half(&h, b"order 4", &[]).await;
    for round in 0..2 {
        h.advance(5_000);
        let report = check_round(h.broker.background(), h.now_ms);
        assert_eq!(report.checked, 1, "round {round}");
    }
    assert_eq!(checks(&mut outgoing).len(), 2);
    h.advance(5_000);
    let report = check_round(h.broker.background(), h.now_ms);
    assert_eq!(report.discarded, 1);
    assert!(checks(&mut outgoing).is_empty());
    let aside = pulled(&h, CHECK_MAX_TOPIC, 1).await;
    assert_eq!(aside.len(), 1);
    assert_eq!(&aside[0].body[..], b"order 4");
    assert!(h
        .broker
        .background()
        .topics
        .shape(CHECK_MAX_TOPIC)
        .is_some());

    // Decided for good: a late commit stores nothing, later rounds ask nothing.
    end(&h, &sent, sys_flag::TRANSACTION_COMMIT, true).await;
    h.advance(5_000);
    assert_eq!(
        check_round(h.broker.background(), h.now_ms),
        CheckReport::default()
    );
    assert!(delivered(&h).await.is_empty());
}

#[tokio::test]
async fn a_half_with_no_producer_connected_is_counted_and_asked_when_one_is() {
    let mut h = setup().await;
    send_half(&h, b"order 5", &[]).await;
    h.advance(7_000);
    let report = check_round(h.broker.background(), h.now_ms);
    assert_eq!(report.no_producer, 1);
    let (_producer, mut outgoing) = producer(&h).await;
    h.advance(30_000);
    check_round(h.broker.background(), h.now_ms);
    assert_eq!(checks(&mut outgoing).len(), 1);
}

#[tokio::test]
async fn a_commit_whose_op_record_was_lost_is_recognised_not_asked_again() {
    let h = setup().await;
    let sent = send_half(&h, b"order 6", &[]).await;
    // As after a crash that kept the committed copy and lost the op record behind it.
    let half = pulled(&h, HALF_TOPIC, 1).await.remove(0);
    let record = transaction::committed_record(&half, h.broker.background().store_host, h.now_ms)
        .expect("a committed copy");
    let (done, written) = std::sync::mpsc::channel();
    drop(h.broker.background().store.append(vec![Append {
        records: vec![record],
        done: Box::new(move |result| {
            let _ = done.send(result.is_ok());
        }),
    }]));
    assert!(written.recv().expect("the store answers"));
    let mut h = h.reopen(|_| {});
    let (_producer, mut outgoing) = producer(&h).await;
    h.advance(7_000);
    let report = check_round(h.broker.background(), h.now_ms);
    assert_eq!(report.found_committed, 1);
    assert_eq!(report.checked, 0);
    assert!(checks(&mut outgoing).is_empty());
    assert_eq!(op_bodies(&h), vec!["0,"]);
    end(&h, &sent, sys_flag::TRANSACTION_COMMIT, true).await;
    assert_eq!(delivered(&h).await.len(), 1, "still one copy");
}

#[tokio::test]
async fn decisions_and_progress_survive_a_restart() {
    let h = setup().await;
    let first = send_half(&h, b"committed", &[]).await;
    let second = send_half(&h, b"rolled back", &[]).await;
    let third = send_half(&h, b"undecided", &[]).await;
    // Decided out of order: the third's op record comes first.
    end(&h, &second, sys_flag::TRANSACTION_ROLLBACK, false).await;
    end(&h, &first, sys_flag::TRANSACTION_COMMIT, false).await;
    let broker = h.broker.background();
    broker
        .transactions
        .commit_progress(broker.store, broker.offsets);
    assert_eq!(
        broker.offsets.get(HALF_TOPIC, SYSTEM_GROUP, 0),
        Some(2),
        "the half offset passed both decided halves"
    );
    assert_eq!(
        h.broker.background().offsets.get(OP_TOPIC, SYSTEM_GROUP, 0),
        Some(2)
    );
    h.broker
        .background()
        .offsets
        .persist_if_dirty()
        .expect("offsets persist");

    let mut h = h.reopen(|_| {});
    assert_eq!(h.broker.background().transactions.progress(), (2, 2));
    for sent in [&first, &second] {
        end(&h, sent, sys_flag::TRANSACTION_COMMIT, true).await;
    }
    let (_producer, mut outgoing) = producer(&h).await;
    h.advance(7_000);
    let report = check_round(h.broker.background(), h.now_ms);
    assert_eq!(report.checked, 1);
    let asked = checks(&mut outgoing);
    assert_eq!(field(&asked[0], "tranStateTableOffset"), "2");
    end(&h, &third, sys_flag::TRANSACTION_COMMIT, true).await;
    let bodies: Vec<_> = delivered(&h)
        .await
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).expect("text"))
        .collect();
    assert_eq!(bodies, vec!["committed", "undecided"]);
}

#[tokio::test]
async fn decisions_read_back_from_op_records_when_the_progress_was_not_persisted() {
    let h = setup().await;
    let first = send_half(&h, b"a", &[]).await;
    let second = send_half(&h, b"b", &[]).await;
    end(&h, &second, sys_flag::TRANSACTION_COMMIT, false).await;
    // Killed before the progress reached the offset file: the op queue is read from 0.
    let mut h = h.reopen(|_| {});
    assert_eq!(h.broker.background().transactions.progress(), (0, 0));
    assert!(h.broker.background().transactions.is_settled(1));
    end(&h, &second, sys_flag::TRANSACTION_COMMIT, true).await;
    end(&h, &first, sys_flag::TRANSACTION_ROLLBACK, false).await;
    h.advance(60_000);
    check_round(h.broker.background(), h.now_ms);
    assert_eq!(h.broker.background().transactions.progress(), (2, 2));
    assert_eq!(delivered(&h).await.len(), 1);
}

#[tokio::test]
async fn a_check_immunity_time_delays_the_check_and_refuses_a_late_own_decision() {
    let mut h = setup().await;
    let (_producer, mut outgoing) = producer(&h).await;
    let sent = send_half(&h, b"slow", &[("CHECK_IMMUNITY_TIME_IN_SECONDS", "60")]).await;
    // Born later, with no immunity: checked at its own time although the first waits.
    h.advance(1_000);
    send_half(&h, b"fast", &[]).await;
    h.advance(10_000);
    let report = check_round(h.broker.background(), h.now_ms);
    assert_eq!(report.checked, 1);
    assert_eq!(
        field(&checks(&mut outgoing)[0], "tranStateTableOffset"),
        "1"
    );
    h.advance(50_000);
    let late = end(&h, &sent, sys_flag::TRANSACTION_COMMIT, false).await;
    assert_eq!(late.code, response_code::ILLEGAL_OPERATION);
    check_round(h.broker.background(), h.now_ms);
    let asked = checks(&mut outgoing);
    assert_eq!(asked.len(), 2, "both are past their time now");
    end(&h, &sent, sys_flag::TRANSACTION_COMMIT, true).await;
    assert_eq!(delivered(&h).await.len(), 1);
}

#[tokio::test]
async fn an_end_transaction_naming_no_half_message_is_refused() {
    let h = setup().await;
    h.send(TOPIC, b"plain", &harness::options()).await;
    let plain = Sent {
        queue_offset: 0,
        commit_log_offset: 0,
        msg_id: "x".into(),
    };
    let answer = end(&h, &plain, sys_flag::TRANSACTION_COMMIT, false).await;
    assert_eq!(answer.code, response_code::SYSTEM_ERROR);
    let nowhere = Sent {
        commit_log_offset: 1 << 40,
        ..plain
    };
    let answer = end(&h, &nowhere, sys_flag::TRANSACTION_COMMIT, false).await;
    assert_eq!(answer.code, response_code::SYSTEM_ERROR);
    let wrong_group = {
        let sent = send_half(&h, b"x", &[]).await;
        let mut request = end_request(&sent, sys_flag::TRANSACTION_COMMIT, false);
        if let Some(ext) = request.ext.as_mut() {
            ext.insert("producerGroup", "someone_else");
        }
        h.call(request).await
    };
    assert_eq!(wrong_group.code, response_code::SYSTEM_ERROR);
    assert_eq!(delivered(&h).await.len(), 1, "only the plain message");
}
