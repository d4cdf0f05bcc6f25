//! Request-reply: a reply sent with SEND_REPLY_MESSAGE(_V2) is stored in the cluster's reply
//! topic and pushed to the requesting client with PUSH_REPLY_MESSAGE_TO_CLIENT.

mod harness;

use std::time::Duration;

use harness::{field, finish, messages, Harness};
use quiver_broker::connection::Outgoing;
use quiver_broker::handler::Reply;
use quiver_testkit::{send_request, SendOptions};
use quiver_wire::body::{self, HeartbeatData, ProducerData};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::ReplyMessageHeader;
use quiver_wire::message::{find_property, property};
use quiver_wire::{Command, Encoding};
use tokio::sync::mpsc::UnboundedReceiver;

const REPLY_TOPIC: &str = "DefaultCluster_REPLY_TOPIC";
const REQUESTER: &str = "127.0.0.1@requester";
/// How long a test waits for the broker to push a reply.
const PUSH_WAIT: Duration = Duration::from_secs(10);

fn producer_heartbeat(client_id: &str) -> Command {
    let data = HeartbeatData {
        client_id: client_id.into(),
        producer_data_set: vec![ProducerData {
            group_name: "requesters".into(),
        }],
        ..HeartbeatData::default()
    };
    Command::request(request_code::HEART_BEAT, Encoding::Json).with_body(body::to_json(&data))
}

/// A reply as `MessageUtil.createReplyMessage` makes it, sent as the Java client sends one.
fn reply_request(to_client: &str, correlation_id: &str, body: &[u8], long_names: bool) -> Command {
    let options = SendOptions {
        queue_id: Some(0),
        properties: vec![
            (property::CLUSTER.into(), "DefaultCluster".into()),
            (property::REPLY_TO_CLIENT.into(), to_client.into()),
            (property::CORRELATION_ID.into(), correlation_id.into()),
            ("TTL".into(), "3000".into()),
            ("MSG_TYPE".into(), "reply".into()),
        ],
        ..SendOptions::default()
    };
    let mut request = send_request(REPLY_TOPIC, body, &options, long_names);
    request.code = if long_names {
        request_code::SEND_REPLY_MESSAGE
    } else {
        request_code::SEND_REPLY_MESSAGE_V2
    };
    request
}

/// The next request the broker sent the requester's connection.
async fn next_push(outgoing: &mut UnboundedReceiver<Outgoing>) -> Command {
    let frame = tokio::time::timeout(PUSH_WAIT, outgoing.recv())
        .await
        .expect("the broker pushes within the wait")
        .expect("the connection is open")
        .command;
    assert_eq!(frame.code, request_code::PUSH_REPLY_MESSAGE_TO_CLIENT);
    assert!(
        !frame.is_oneway(),
        "the broker waits for the client's answer"
    );
    frame
}

fn push_header(push: &Command) -> ReplyMessageHeader {
    ReplyMessageHeader::from_ext(push.ext.as_ref().expect("a header")).expect("the Java fields")
}

#[tokio::test]
async fn the_cluster_reply_topic_exists_from_start_and_cannot_be_reshaped() {
    let h = Harness::new();
    let shape = h
        .broker
        .sending()
        .topics
        .shape(REPLY_TOPIC)
        .expect("created at start");
    assert_eq!((shape.read_queues, shape.write_queues), (1, 1));
    assert_eq!(shape.perm, 6);
    let answer = h.create_topic(REPLY_TOPIC, 8).await;
    assert_eq!(answer.code, response_code::INVALID_PARAMETER);
}

#[tokio::test]
async fn a_reply_is_stored_and_then_pushed_to_the_requester() {
    let h = Harness::new();
    let (requester, mut requester_outgoing) = h.second_connection();
    let heartbeat = h.call_on(&requester, producer_heartbeat(REQUESTER)).await;
    assert_eq!(heartbeat.code, response_code::SUCCESS);

    for long_names in [false, true] {
        let correlation = format!("corr-{long_names}");
        let request = reply_request(REQUESTER, &correlation, b"the answer", long_names);
        let answer = h.call(request).await;
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        assert_ne!(field(&answer, "msgId"), "0", "the stored reply's id");

        let push = next_push(&mut requester_outgoing).await;
        assert_eq!(&push.body[..], b"the answer");
        let header = push_header(&push);
        assert_eq!(header.send.topic, REPLY_TOPIC);
        assert_eq!(header.send.producer_group, "test_producer");
        assert_eq!(header.born_host, h.connection.peer.to_string());
        assert_eq!(header.store_host, "127.0.0.1:10911");
        assert_eq!(header.store_timestamp, h.now_ms);
        let properties = &header.send.properties;
        assert_eq!(
            find_property(properties, property::CORRELATION_ID),
            Some(correlation.as_str())
        );
        let push_time = h.now_ms.to_string();
        assert_eq!(
            find_property(properties, property::PUSH_REPLY_TIME),
            Some(push_time.as_str())
        );
        requester.answered(push.response_to(response_code::SUCCESS));
    }
    let stored = messages(&h.pull(REPLY_TOPIC, "readers", 0, 0).await);
    assert_eq!(stored.len(), 2);
    assert_eq!(&stored[0].body[..], b"the answer");
    assert_eq!(
        stored[1].property(property::CORRELATION_ID).as_deref(),
        Some("corr-true")
    );
}

#[tokio::test]
async fn a_reply_to_a_client_not_connected_is_stored_but_refused_so_the_replier_retries() {
    let h = Harness::new();
    let answer = h.call(reply_request("nobody@1", "c", b"x", false)).await;
    assert_eq!(answer.code, response_code::SYSTEM_ERROR);
    let remark = answer.remark.unwrap_or_default();
    assert!(remark.contains("<nobody@1> not found"), "{remark}");
    assert_eq!(
        h.broker.sending().store.bounds(REPLY_TOPIC, 0).max_offset,
        1
    );

    let mut no_requester = reply_request("x", "c", b"x", false);
    let ext = no_requester.ext.as_mut().expect("a header");
    let properties = ext.get("i").expect("properties").to_string();
    let without = quiver_wire::message::without_property(&properties, property::REPLY_TO_CLIENT);
    ext.insert("i", without);
    let answer = h.call(no_requester).await;
    assert_eq!(answer.code, response_code::SYSTEM_ERROR);
    assert!(answer
        .remark
        .unwrap_or_default()
        .contains("REPLY_TO_CLIENT"));
}

#[tokio::test]
async fn without_store_reply_message_enable_a_reply_is_only_pushed() {
    let h = Harness::with_config("storeReplyMessageEnable=false");
    let (requester, mut requester_outgoing) = h.second_connection();
    h.call_on(&requester, producer_heartbeat(REQUESTER)).await;

    let reply = h.dispatch(&reply_request(REQUESTER, "c1", b"pushed only", false));
    assert!(
        matches!(reply, Reply::Wait(_)),
        "the answer waits for the requester"
    );
    let broker = h.broker.clone();
    let answered = tokio::spawn(async move { finish(&broker, reply).await });
    let push = next_push(&mut requester_outgoing).await;
    assert_eq!(&push.body[..], b"pushed only");
    requester.answered(push.response_to(response_code::SUCCESS));
    let answer = answered.await.expect("the answer");
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    assert_eq!(field(&answer, "msgId"), "0");
    assert_eq!(field(&answer, "queueOffset"), "0");
    assert_eq!(
        h.broker.sending().store.bounds(REPLY_TOPIC, 0).max_offset,
        0
    );

    // A requester that refuses the push fails the reply.
    let reply = h.dispatch(&reply_request(REQUESTER, "c2", b"refused", false));
    let broker = h.broker.clone();
    let answered = tokio::spawn(async move { finish(&broker, reply).await });
    let push = next_push(&mut requester_outgoing).await;
    requester.answered(
        push.response_to(response_code::SYSTEM_ERROR)
            .with_remark("process reply message fail"),
    );
    let answer = answered.await.expect("the answer");
    assert_eq!(answer.code, response_code::SYSTEM_ERROR);
}
