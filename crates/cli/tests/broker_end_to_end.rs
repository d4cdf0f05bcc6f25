//! `quiver up` serves producers and consumers over the RocketMQ protocol: sends in both header
//! encodings, batches, pulls with long polling, offsets, admin lookups, bad input.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{ext_i64, pull_all, up, wait_for_route};
use quiver_testkit::{pull_header, SendOptions, WireClient};
use quiver_wire::batch::{encode_batch, BatchEntry};
use quiver_wire::body::{self, ClusterInfo, ConsumerIdList, HeartbeatData, TopicList};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::message::{decode_offset_msg_id, encode_properties, StoredMessage};
use quiver_wire::{Command, Encoding, ExtFields};

#[test]
fn sends_in_both_encodings_are_pulled_back_at_their_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut json = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let mut binary = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    assert_eq!(
        json.create_topic("Orders", 4).unwrap().code,
        response_code::SUCCESS
    );
    let route = wait_for_route(quiver.namesrv(), "Orders");
    assert_eq!(route.queue_datas[0].write_queue_nums, 4);
    assert_eq!(
        route.broker_datas[0].broker_addrs.get(&0),
        Some(&quiver.broker().to_string())
    );

    for (client, queue_id) in [(&mut json, 0), (&mut binary, 1)] {
        for i in 0..20 {
            let options = SendOptions {
                queue_id: Some(queue_id),
                tags: Some("TagA".into()),
                keys: Some(format!("key-{queue_id}-{i}")),
                properties: vec![("color".into(), "blue".into())],
            };
            let body = format!("message {i} on queue {queue_id}");
            let response = client.send("Orders", body.as_bytes(), &options).unwrap();
            assert_eq!(
                response.code,
                response_code::SUCCESS,
                "{:?}",
                response.remark
            );
            assert_eq!(
                response.encoding, client.encoding,
                "answered in the request's encoding"
            );
            assert_eq!(ext_i64(&response, "queueId"), i64::from(queue_id));
            assert_eq!(ext_i64(&response, "queueOffset"), i);
            let (host, _) = decode_offset_msg_id(response.ext_get("msgId").unwrap()).unwrap();
            assert_eq!(host, quiver.broker());
        }
    }
    for (client, queue_id) in [(&mut binary, 0), (&mut json, 1)] {
        let messages = pull_all(client, "Orders", queue_id, 0);
        assert_eq!(messages.len(), 20);
        for (i, message) in messages.iter().enumerate() {
            assert_eq!(
                message.body,
                Bytes::from(format!("message {i} on queue {queue_id}"))
            );
            assert_eq!(message.queue_offset, i as i64);
            assert_eq!(message.queue_id, queue_id);
            assert_eq!(message.topic, "Orders");
            assert_eq!(message.property("TAGS").as_deref(), Some("TagA"));
            assert_eq!(
                message.property("KEYS"),
                Some(format!("key-{queue_id}-{i}"))
            );
            assert_eq!(message.property("color").as_deref(), Some("blue"));
            assert!(message.property("UNIQ_KEY").is_some());
            assert_eq!(message.store_host, quiver.broker());
        }
    }
}

#[test]
fn a_batch_is_stored_as_consecutive_messages() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    client.create_topic("Batches", 1).unwrap();
    let entries: Vec<BatchEntry> = (0..3)
        .map(|i| BatchEntry {
            flag: i,
            body: Bytes::from(format!("batch body {i}")),
            properties: encode_properties([
                ("UNIQ_KEY", format!("UNIQ{i:028}").as_str()),
                ("WAIT", "true"),
            ]),
        })
        .collect();
    let mut header = common::send_header("p", "Batches");
    header.batch = true;
    let request = Command::request(request_code::SEND_BATCH_MESSAGE, Encoding::RocketMq)
        .with_ext(header.to_v2())
        .with_body(encode_batch(&entries));
    let response = client.call(request).unwrap();
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    assert_eq!(response.ext_get("msgId").unwrap().split(',').count(), 3);
    let messages = pull_all(&mut client, "Batches", 0, 0);
    let bodies: Vec<_> = messages.iter().map(|m| m.body.clone()).collect();
    assert_eq!(
        bodies,
        vec![
            Bytes::from("batch body 0"),
            Bytes::from("batch body 1"),
            Bytes::from("batch body 2")
        ]
    );
    assert_eq!(
        messages.iter().map(|m| m.flag).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert_eq!(
        messages[2].property("UNIQ_KEY").unwrap(),
        format!("UNIQ{:028}", 2)
    );
}

/// A batch too large to answer (its message ids would not fit in one frame) is refused before
/// anything is stored; one within the limit is stored and answered.
#[test]
fn a_batch_with_more_entries_than_one_answer_holds_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = common::up_with_config(
        dir.path(),
        "maxMessageSize=8388608
",
    );
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    client.create_topic("Wide", 1).unwrap();
    let batch = |count: usize| {
        let entries: Vec<BatchEntry> = (0..count)
            .map(|_| BatchEntry {
                flag: 0,
                body: Bytes::from_static(b"x"),
                properties: String::new(),
            })
            .collect();
        let mut header = common::send_header("p", "Wide");
        header.batch = true;
        Command::request(request_code::SEND_BATCH_MESSAGE, Encoding::RocketMq)
            .with_ext(header.to_v2())
            .with_body(encode_batch(&entries))
    };
    let refused = client.call(batch(200_001)).unwrap();
    assert_eq!(
        refused.code,
        response_code::MESSAGE_ILLEGAL,
        "{:?}",
        refused.remark
    );
    assert!(refused.remark.unwrap_or_default().contains("200001"));
    let stored = client.call(batch(200_000)).unwrap();
    assert_eq!(stored.code, response_code::SUCCESS, "{:?}", stored.remark);
    assert_eq!(stored.ext_get("msgId").unwrap().split(',').count(), 200_000);
    let max_offset = Command::request(request_code::GET_MAX_OFFSET, Encoding::Json)
        .with_ext(ExtFields::new().with("topic", "Wide").with("queueId", 0));
    let bounds = client.call(max_offset).unwrap();
    assert_eq!(
        ext_i64(&bounds, "offset"),
        200_000,
        "the refused batch left nothing"
    );
}

#[test]
fn a_suspended_pull_is_answered_when_a_message_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut consumer = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    let mut producer = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    consumer.create_topic("Waiting", 1).unwrap();

    // Nothing there: a short suspend ends with PULL_NOT_FOUND and the queue's bounds.
    let response = consumer.pull("Waiting", "g", 0, 0, 32, 300).unwrap();
    assert_eq!(response.code, response_code::PULL_NOT_FOUND);
    assert_eq!(ext_i64(&response, "nextBeginOffset"), 0);
    assert_eq!(ext_i64(&response, "maxOffset"), 0);

    // A long suspend is cut short by the first message.
    let started = Instant::now();
    let header = quiver_wire::header::PullMessageRequestHeader {
        sys_flag: 2 | 4,
        suspend_timeout_millis: 20_000,
        expression_type: None,
        ..pull_header("Waiting", "g", 0)
    };
    let opaque = consumer
        .send_request(
            Command::request(request_code::PULL_MESSAGE, Encoding::RocketMq)
                .with_ext(header.to_ext()),
        )
        .unwrap();
    let sent = producer
        .send("Waiting", b"wake up", &SendOptions::default())
        .unwrap();
    assert_eq!(sent.code, response_code::SUCCESS);
    let response = consumer.wait_response(opaque).unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "answered by arrival, not by timeout"
    );
    let messages = StoredMessage::decode_all(&response.body).unwrap();
    assert_eq!(messages[0].body, Bytes::from_static(b"wake up"));
    assert_eq!(ext_i64(&response, "nextBeginOffset"), 1);
}

#[test]
fn sending_to_an_unknown_topic_creates_it_from_tbw102() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let tbw = wait_for_route(quiver.namesrv(), "TBW102");
    assert_eq!(tbw.queue_datas[0].perm, 7);
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    let response = client
        .send("FreshTopic", b"first", &SendOptions::default())
        .unwrap();
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let route = wait_for_route(quiver.namesrv(), "FreshTopic");
    assert_eq!(
        route.queue_datas[0].write_queue_nums, 4,
        "min(defaultTopicQueueNums 4, TBW102's 8)"
    );
    assert_eq!(route.queue_datas[0].perm, 6);
}

#[test]
fn unknown_codes_are_refused_and_the_connection_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    for encoding in [Encoding::Json, Encoding::RocketMq] {
        let mut client = WireClient::connect(quiver.broker(), encoding).unwrap();
        let response = client.call(Command::request(9999, encoding)).unwrap();
        assert_eq!(response.code, response_code::REQUEST_CODE_NOT_SUPPORTED);
        assert_eq!(
            response.remark.as_deref(),
            Some("request type 9999 not supported")
        );
        let response = client.create_topic("StillUp", 1).unwrap();
        assert_eq!(response.code, response_code::SUCCESS);
        // A header with a required field missing is an error answer, not a dropped connection.
        let response = client
            .call(
                Command::request(request_code::GET_MAX_OFFSET, encoding).with_ext(ExtFields::new()),
            )
            .unwrap();
        assert_eq!(response.code, response_code::SYSTEM_ERROR);
        assert!(
            response.remark.is_some_and(|r| !r.is_empty()),
            "the refusal says why"
        );
        let response = client.create_topic("StillUp", 1).unwrap();
        assert_eq!(response.code, response_code::SUCCESS);
    }
}

#[test]
fn malformed_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut bad = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    // Claims a 2 GiB frame: refused before anything is allocated.
    bad.write_raw(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1])
        .unwrap();
    assert!(
        bad.read_frame().is_err(),
        "the server closes a connection that sent garbage"
    );
    let mut bad = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    bad.write_raw(&[
        0, 0, 0, 12, 0, 0, 0, 8, b'{', b'x', b'x', b'x', b'x', b'x', b'x', b'}',
    ])
    .unwrap();
    assert!(bad.read_frame().is_err());
    let mut good = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    assert_eq!(
        good.create_topic("Fine", 1).unwrap().code,
        response_code::SUCCESS
    );
}

#[test]
fn sends_to_topics_only_the_broker_writes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    for topic in ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"] {
        let response = client.send(topic, b"x", &SendOptions::default()).unwrap();
        assert_eq!(response.code, response_code::NO_PERMISSION, "{topic}");
        assert!(
            response.remark.unwrap_or_default().contains("forbidden"),
            "{topic}"
        );
    }
    client.create_topic("Open", 1).unwrap();
    let response = client.send("Open", b"x", &SendOptions::default()).unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
}

#[test]
fn transaction_half_messages_are_not_delivered_before_their_commit() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    client.create_topic("Orders", 1).unwrap();
    let half = SendOptions {
        queue_id: Some(0),
        properties: vec![
            ("TRAN_MSG".into(), "true".into()),
            ("PGROUP".into(), "tx".into()),
        ],
        ..SendOptions::default()
    };
    let response = client.send("Orders", b"half", &half).unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
    assert!(pull_all(&mut client, "Orders", 0, 0).is_empty());
}

#[test]
fn a_pull_below_offset_zero_is_told_where_the_queue_starts() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    client.create_topic("Starts", 1).unwrap();
    let options = SendOptions {
        queue_id: Some(0),
        ..SendOptions::default()
    };
    client.send("Starts", b"first", &options).unwrap();
    let response = client.pull("Starts", "starters", 0, -1, 32, 0).unwrap();
    assert_eq!(response.code, response_code::PULL_OFFSET_MOVED);
    assert_eq!(ext_i64(&response, "nextBeginOffset"), 0);
    assert!(response.body.is_empty());
}

#[test]
fn oversized_messages_are_refused_with_message_illegal() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    client.create_topic("Big", 1).unwrap();
    let body = vec![b'x'; 4 * 1024 * 1024 + 1];
    let response = client.send("Big", &body, &SendOptions::default()).unwrap();
    assert_eq!(response.code, response_code::MESSAGE_ILLEGAL);
    assert!(response.remark.unwrap().contains("maxMessageSize"));
    let response = client
        .send("Big", b"small", &SendOptions::default())
        .unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
}

#[test]
fn offsets_queries_and_lookups_answer_from_what_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    client.create_topic("Lookups", 2).unwrap();
    let mut msg_ids = Vec::new();
    for i in 0..5 {
        let options = SendOptions {
            queue_id: Some(1),
            keys: Some(format!("order-{i} shared")),
            ..SendOptions::default()
        };
        let response = client
            .send("Lookups", format!("body {i}").as_bytes(), &options)
            .unwrap();
        msg_ids.push(response.ext_get("msgId").unwrap().to_string());
    }
    let queue = |code| {
        Command::request(code, Encoding::Json)
            .with_ext(ExtFields::new().with("topic", "Lookups").with("queueId", 1))
    };
    assert_eq!(
        ext_i64(
            &client.call(queue(request_code::GET_MAX_OFFSET)).unwrap(),
            "offset"
        ),
        5
    );
    assert_eq!(
        ext_i64(
            &client.call(queue(request_code::GET_MIN_OFFSET)).unwrap(),
            "offset"
        ),
        0
    );
    let earliest = ext_i64(
        &client
            .call(queue(request_code::GET_EARLIEST_MSG_STORETIME))
            .unwrap(),
        "timestamp",
    );
    assert!(earliest > 1_600_000_000_000);
    let search = queue(request_code::SEARCH_OFFSET_BY_TIMESTAMP);
    let search = Command {
        ext: Some(search.ext.unwrap().with("timestamp", earliest)),
        ..search
    };
    assert_eq!(ext_i64(&client.call(search).unwrap(), "offset"), 0);

    // Query by key through the index.
    let query = Command::request(request_code::QUERY_MESSAGE, Encoding::Json).with_ext(
        ExtFields::new()
            .with("topic", "Lookups")
            .with("key", "order-3")
            .with("maxNum", 32)
            .with("beginTimestamp", 0)
            .with("endTimestamp", i64::MAX),
    );
    let response = client.call(query).unwrap();
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let found = StoredMessage::decode_all(&response.body).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].body, Bytes::from("body 3"));

    // View by the offset message id the send returned.
    let (_, position) = decode_offset_msg_id(&msg_ids[2]).unwrap();
    let view = Command::request(request_code::VIEW_MESSAGE_BY_ID, Encoding::Json)
        .with_ext(ExtFields::new().with("offset", position));
    let response = client.call(view).unwrap();
    assert_eq!(
        StoredMessage::decode_all(&response.body).unwrap()[0].body,
        Bytes::from("body 2")
    );

    // Consumer offsets: none yet, then committed.
    let query_offset = || {
        Command::request(request_code::QUERY_CONSUMER_OFFSET, Encoding::Json).with_ext(
            ExtFields::new()
                .with("consumerGroup", "g1")
                .with("topic", "Lookups")
                .with("queueId", 1),
        )
    };
    assert_eq!(
        client.call(query_offset()).unwrap().code,
        response_code::QUERY_NOT_FOUND
    );
    let update = Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("consumerGroup", "g1")
            .with("topic", "Lookups")
            .with("queueId", 1)
            .with("commitOffset", 3),
    );
    assert_eq!(client.call(update).unwrap().code, response_code::SUCCESS);
    assert_eq!(ext_i64(&client.call(query_offset()).unwrap(), "offset"), 3);
    // Not for a topic the broker does not have.
    let update = Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("consumerGroup", "g1")
            .with("topic", "Nowhere")
            .with("queueId", 1)
            .with("commitOffset", 3),
    );
    let response = client.call(update).unwrap();
    assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
    assert_eq!(response.remark.as_deref(), Some("Topic Nowhere not exist!"));

    // Runtime info carries the put counter.
    let info = client
        .call(Command::request(
            request_code::GET_BROKER_RUNTIME_INFO,
            Encoding::Json,
        ))
        .unwrap();
    let table: quiver_wire::body::KvTable = body::from_json(&info.body).unwrap();
    assert_eq!(
        table.table.get("msgPutTotalTodayNow").map(String::as_str),
        Some("5")
    );
}

#[test]
fn heartbeats_build_consumer_groups_and_members_are_told_of_changes() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let heartbeat = |client_id: &str| {
        let body = format!(
            r#"{{"clientID":"{client_id}","consumerDataSet":[{{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"cg","messageModel":"CLUSTERING","subscriptionDataSet":[{{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1,"tagsSet":[],"topic":"Orders"}}],"unitMode":false}}],"producerDataSet":[{{"groupName":"CLIENT_INNER_PRODUCER"}}]}}"#
        );
        let parsed: HeartbeatData = body::from_json(body.as_bytes()).unwrap();
        assert_eq!(parsed.client_id, client_id);
        Command::request(request_code::HEART_BEAT, Encoding::Json).with_body(body.into_bytes())
    };
    let mut first = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    let mut second = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    assert_eq!(
        first.call(heartbeat("10.0.0.1@1")).unwrap().code,
        response_code::SUCCESS
    );
    assert_eq!(
        second.call(heartbeat("10.0.0.2@2")).unwrap().code,
        response_code::SUCCESS
    );
    let list = Command::request(request_code::GET_CONSUMER_LIST_BY_GROUP, Encoding::Json)
        .with_ext(ExtFields::new().with("consumerGroup", "cg"));
    let ids: ConsumerIdList = body::from_json(&first.call(list.clone()).unwrap().body).unwrap();
    assert_eq!(
        ids.consumer_id_list,
        vec!["10.0.0.1@1".to_string(), "10.0.0.2@2".to_string()]
    );
    assert!(
        first
            .server_requests
            .iter()
            .any(|r| r.code == request_code::NOTIFY_CONSUMER_IDS_CHANGED),
        "the first member was told the group changed"
    );
    // The retry topic exists and is routed.
    wait_for_route(quiver.namesrv(), "%RETRY%cg");
    drop(second);
    let ids = quiver_testkit::wait_until(Duration::from_secs(10), || {
        let ids: ConsumerIdList = body::from_json(&first.call(list.clone()).ok()?.body).ok()?;
        (ids.consumer_id_list.len() == 1).then_some(ids)
    })
    .expect("a closed connection leaves the group");
    assert_eq!(ids.consumer_id_list, vec!["10.0.0.1@1".to_string()]);
}

#[test]
fn the_name_server_reports_clusters_and_topics() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    wait_for_route(quiver.namesrv(), "TBW102");
    for encoding in [Encoding::Json, Encoding::RocketMq] {
        let mut client = WireClient::connect(quiver.namesrv(), encoding).unwrap();
        let info = client
            .call(Command::request(
                request_code::GET_BROKER_CLUSTER_INFO,
                encoding,
            ))
            .unwrap();
        let info: ClusterInfo = body::from_json(&info.body).unwrap();
        assert_eq!(
            info.broker_addr_table["broker-a"].broker_addrs[&0],
            quiver.broker().to_string()
        );
        assert!(info.cluster_addr_table["DefaultCluster"].contains("broker-a"));
        let topics = client
            .call(Command::request(
                request_code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                encoding,
            ))
            .unwrap();
        let topics: TopicList = body::from_json(&topics.body).unwrap();
        assert!(topics.topic_list.contains(&"BenchmarkTest".to_string()));
        let missing = client
            .call(
                Command::request(request_code::GET_ROUTEINFO_BY_TOPIC, encoding)
                    .with_ext(ExtFields::new().with("topic", "nope")),
            )
            .unwrap();
        assert_eq!(missing.code, response_code::TOPIC_NOT_EXIST);
    }
}

#[test]
fn a_client_with_more_requests_in_flight_than_the_limit_gets_every_answer_in_order() {
    // Each answer holds its request's in-flight permit until it is written, so the broker
    // stops reading from a client that stops reading; this one writes from one thread and
    // reads from another, past the limit of 4,096.
    use std::io::{Read, Write};
    const REQUESTS: i32 = 6_000;
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::RocketMq).unwrap();
    client.create_topic("Flood", 1).unwrap();
    let stream = std::net::TcpStream::connect(quiver.broker()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut frames = bytes::BytesMut::new();
        for opaque in 1..=REQUESTS {
            let options = SendOptions {
                queue_id: Some(0),
                ..SendOptions::default()
            };
            let mut request = quiver_testkit::send_request(
                "Flood",
                format!("m{opaque}").as_bytes(),
                &options,
                false,
            );
            request.opaque = opaque;
            request.encoding = Encoding::RocketMq;
            quiver_wire::encode_frame(&request, &mut frames).unwrap();
        }
        writer.write_all(&frames).unwrap();
    });
    let mut reader = stream;
    let mut input = bytes::BytesMut::new();
    let mut expected = 1;
    while expected <= REQUESTS {
        match quiver_wire::decode_frame(&mut input).unwrap() {
            Some(response) => {
                assert_eq!(response.opaque, expected);
                assert_eq!(response.code, response_code::SUCCESS);
                expected += 1;
            }
            None => {
                let mut chunk = [0u8; 64 * 1024];
                let read = reader.read(&mut chunk).expect("answers keep coming");
                assert!(read > 0, "connection closed after {} answers", expected - 1);
                input.extend_from_slice(&chunk[..read]);
            }
        }
    }
    sender.join().unwrap();
}

#[test]
fn a_pull_newer_than_the_groups_heartbeat_is_told_its_subscription_is_not_latest() {
    let dir = tempfile::tempdir().unwrap();
    let quiver = up(dir.path());
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).unwrap();
    client.create_topic("Subs", 1).unwrap();
    let heartbeat = r#"{"clientID":"c1","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"sg","messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"TagA","subVersion":100,"tagsSet":["TagA"],"topic":"Subs"}],"unitMode":false}],"producerDataSet":[]}"#;
    let response = client
        .call(
            Command::request(request_code::HEART_BEAT, Encoding::Json)
                .with_body(heartbeat.as_bytes().to_vec()),
        )
        .unwrap();
    assert_eq!(response.code, response_code::SUCCESS);
    // A push consumer's pull: no subscription in it, only the version it has.
    let pull = |version: i64| {
        let header = quiver_wire::header::PullMessageRequestHeader {
            sys_flag: 0,
            subscription: None,
            sub_version: version,
            expression_type: None,
            ..pull_header("Subs", "sg", 0)
        };
        Command::request(request_code::PULL_MESSAGE, Encoding::Json).with_ext(header.to_ext())
    };
    let response = client.call(pull(200)).unwrap();
    assert_eq!(response.code, response_code::SUBSCRIPTION_NOT_LATEST);
    let response = client.call(pull(100)).unwrap();
    assert_eq!(
        response.code,
        response_code::PULL_NOT_FOUND,
        "{:?}",
        response.remark
    );
}
