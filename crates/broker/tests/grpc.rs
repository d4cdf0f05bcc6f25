//! The gRPC port against hostile and malformed calls: each is refused with a status that says
//! why, and the port goes on serving. A broker started as the binary starts it, on free
//! loopback ports; raw MessagingService stubs, plaintext HTTP/2.

use std::time::Duration;

use quiver_broker::{BrokerConfig, RunningBroker};
use quiver_proto::v2::messaging_service_client::MessagingServiceClient;
use quiver_proto::v2::{self as pb, Code};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

async fn running_broker(root: &std::path::Path, properties: &str) -> RunningBroker {
    let mut config = BrokerConfig {
        store_root: root.join("store"),
        listen_port: 0,
        commitlog_segment_bytes: 16 << 20,
        consume_queue_entries_per_file: 1_000,
        index_slots: 1_000,
        index_entries_max: 4_000,
        ..BrokerConfig::default()
    };
    config
        .apply_properties(properties)
        .expect("valid test config");
    quiver_broker::start(config).await.expect("broker starts")
}

async fn stub(broker: &RunningBroker) -> MessagingServiceClient<Channel> {
    let addr = broker.grpc_addr.expect("the gRPC port is bound");
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("connects");
    MessagingServiceClient::new(channel)
}

fn from<T>(client_id: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("x-mq-client-id", client_id.parse().unwrap());
    request
}

fn resource(name: &str) -> Option<pb::Resource> {
    Some(pb::Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

fn message(topic: &str, body: Vec<u8>, properties: &[(&str, &str)]) -> pb::Message {
    pb::Message {
        topic: resource(topic),
        user_properties: properties
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        system_properties: Some(pb::SystemProperties {
            message_id: "0102FC000000000000000000000000000001".into(),
            ..Default::default()
        }),
        body,
    }
}

fn code(status: &Option<pb::Status>) -> Code {
    Code::try_from(status.as_ref().map_or(0, |s| s.code)).unwrap_or(Code::Unspecified)
}

async fn send(
    stub: &mut MessagingServiceClient<Channel>,
    client: &str,
    message: pb::Message,
) -> pb::SendMessageResponse {
    let request = pb::SendMessageRequest {
        messages: vec![message],
    };
    stub.send_message(from(client, request))
        .await
        .expect("answered")
        .into_inner()
}

#[tokio::test]
async fn a_call_without_a_client_id_is_refused_and_a_missing_topic_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let broker = running_broker(dir.path(), "").await;
    let mut stub = stub(&broker).await;
    let route = pb::QueryRouteRequest {
        topic: resource("Nowhere"),
        endpoints: None,
    };
    let refused = stub
        .query_route(tonic::Request::new(route.clone()))
        .await
        .expect_err("no client id");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("x-mq-client-id"), "{refused:?}");
    let answer = stub
        .query_route(from("c1", route))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&answer.status), Code::TopicNotFound);
    assert!(answer.message_queues.is_empty());
    broker.shutdown().await;
}

#[tokio::test]
async fn bad_sends_are_refused_one_by_one_and_a_good_one_after_them_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let broker = running_broker(dir.path(), "maxMessageSize=1024").await;
    let mut stub = stub(&broker).await;
    let too_large = send(&mut stub, "c1", message("Jobs", vec![b'x'; 2048], &[])).await;
    assert_eq!(code(&too_large.status), Code::MessageBodyTooLarge);
    assert_eq!(too_large.entries.len(), 1, "one entry per message");
    let reserved = send(
        &mut stub,
        "c1",
        message("Jobs", b"x".to_vec(), &[("UNIQ_KEY", "x")]),
    )
    .await;
    assert_eq!(code(&reserved.status), Code::IllegalMessagePropertyKey);
    let empty = pb::SendMessageRequest { messages: vec![] };
    let none = stub
        .send_message(from("c1", empty))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&none.status), Code::BadRequest);
    let good = send(&mut stub, "c1", message("Jobs", b"fine".to_vec(), &[])).await;
    assert_eq!(code(&good.status), Code::Ok, "{:?}", good.status);
    assert_eq!(
        good.entries[0].message_id,
        "0102FC000000000000000000000000000001"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_receipt_handle_the_broker_did_not_give_and_a_short_invisible_time_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = running_broker(dir.path(), "").await;
    let mut stub = stub(&broker).await;
    assert_eq!(
        code(
            &send(&mut stub, "c1", message("Jobs", b"m".to_vec(), &[]))
                .await
                .status
        ),
        Code::Ok
    );
    let ack = pb::AckMessageRequest {
        group: resource("g"),
        topic: resource("Jobs"),
        entries: [
            "made up",
            "1 2 3 4 0 broker-a 0 0 not-a-position",
            &"9".repeat(4096),
        ]
        .iter()
        .map(|handle| pb::AckMessageEntry {
            message_id: "m".into(),
            receipt_handle: handle.to_string(),
        })
        .collect(),
    };
    let answer = stub
        .ack_message(from("c1", ack))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.entries.len(), 3);
    for entry in &answer.entries {
        assert_eq!(code(&entry.status), Code::InvalidReceiptHandle, "{entry:?}");
    }
    let receive = pb::ReceiveMessageRequest {
        group: resource("g"),
        message_queue: Some(pb::MessageQueue {
            topic: resource("Jobs"),
            id: -1,
            ..Default::default()
        }),
        batch_size: 16,
        invisible_duration: Some(quiver_proto::Duration {
            seconds: 1,
            nanos: 0,
        }),
        ..Default::default()
    };
    let mut stream = stub
        .receive_message(from("c1", receive))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().expect("a status first");
    match first.content {
        Some(pb::receive_message_response::Content::Status(status)) => {
            assert_eq!(code(&Some(status)), Code::IllegalInvisibleTime)
        }
        other => panic!("expected a status, got {other:?}"),
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn past_the_grpc_client_limit_a_new_client_id_is_refused_and_known_ones_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let max = 3;
    let broker = running_broker(dir.path(), &format!("quiverGrpcClientsMax={max}")).await;
    let mut stub = stub(&broker).await;
    let route = || pb::QueryRouteRequest {
        topic: resource("BenchmarkTest"),
        endpoints: None,
    };
    for id in 0..max {
        let answer = stub.query_route(from(&format!("c{id}"), route())).await;
        assert!(answer.is_ok(), "client {id}: {answer:?}");
    }
    let refused = stub
        .query_route(from("one-too-many", route()))
        .await
        .expect_err("past the limit");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(
        refused.message().contains("quiverGrpcClientsMax"),
        "{refused:?}"
    );
    let known = stub
        .query_route(from("c2", route()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&known.status), Code::Ok);
    broker.shutdown().await;
}

#[tokio::test]
async fn bytes_that_are_neither_tls_nor_http2_close_their_connection_and_the_port_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let broker = running_broker(dir.path(), "").await;
    let addr = broker.grpc_addr.unwrap();
    for junk in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0x16, 0x03, 0x01, 0xff, 0xff, 0, 0][..],
        &[0u8; 64][..],
    ] {
        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        socket.write_all(junk).await.unwrap();
        let mut scratch = [0u8; 1024];
        let closed = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match socket.read(&mut scratch).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "the broker closes a connection sending {junk:?}"
        );
    }
    let mut stub = stub(&broker).await;
    let answer = stub
        .query_route(from(
            "c1",
            pb::QueryRouteRequest {
                topic: resource("BenchmarkTest"),
                endpoints: None,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&answer.status), Code::Ok);
    assert_eq!(answer.message_queues.len(), 8);
    broker.shutdown().await;
}
