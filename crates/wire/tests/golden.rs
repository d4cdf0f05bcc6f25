//! Frames captured from real RocketMQ 5.5.0 peers (see golden/README.md) must decode to the
//! values the Java side meant, and binary headers must re-encode to the same bytes.

use bytes::BytesMut;
use quiver_wire::*;

macro_rules! golden {
    ($name:literal) => {
        hex(include_str!(concat!("golden/", $name, ".hex")))
    };
}

fn hex(text: &str) -> Vec<u8> {
    let text = text.trim();
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("golden file is hex"))
        .collect()
}

fn decode_one(raw: &[u8]) -> Command {
    let mut buf = BytesMut::from(raw);
    let cmd = decode_frame(&mut buf)
        .expect("golden frame decodes")
        .expect("golden frame is complete");
    assert!(buf.is_empty(), "frame left {} bytes behind", buf.len());
    cmd
}

fn encode(cmd: &Command) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_frame(cmd, &mut out).expect("encodes");
    out.to_vec()
}

fn all_frames() -> Vec<Vec<u8>> {
    vec![
        golden!("send_v2_request_rocketmq"),
        golden!("send_v2_response_json"),
        golden!("route_request_rocketmq"),
        golden!("route_response_json"),
        golden!("unregister_client_rocketmq"),
        golden!("heartbeat_request_rocketmq"),
        golden!("pull_request_rocketmq"),
        golden!("pull_response_json"),
        golden!("pull_not_found_json"),
        golden!("update_offset_oneway_rocketmq"),
        golden!("notify_ids_changed_oneway_json"),
        golden!("register_broker_request_json"),
        golden!("cluster_info_response_json"),
        golden!("send_v2_request_json"),
        golden!("send_batch_request_json"),
        golden!("send_batch_response_json"),
        golden!("lite_pull_request_json"),
        golden!("lite_pull_response_json"),
        golden!("pop_request_json"),
        golden!("pop_response_json"),
    ]
}

#[test]
fn every_golden_frame_survives_a_round_trip() {
    for raw in all_frames() {
        let cmd = decode_one(&raw);
        assert_eq!(cmd.version, 513);
        assert_eq!(cmd.language, LanguageCode::JAVA);
        let again = encode(&cmd);
        assert_eq!(decode_one(&again), cmd);
        if cmd.encoding == Encoding::RocketMq {
            // Ext entries keep the order they arrived in, so a binary frame comes back as the
            // very bytes Java wrote.
            assert_eq!(again, raw);
        }
    }
}

#[test]
fn frames_split_anywhere_decode_in_order() {
    let frames = all_frames();
    let stream: Vec<u8> = frames.concat();
    let expected: Vec<Command> = frames.iter().map(|raw| decode_one(raw)).collect();
    // Feed in odd-sized pieces so that frame boundaries land everywhere.
    let mut buf = BytesMut::new();
    let mut decoded = Vec::new();
    for piece in stream.chunks(97) {
        buf.extend_from_slice(piece);
        while let Some(cmd) = decode_frame(&mut buf).unwrap() {
            decoded.push(cmd);
        }
    }
    assert!(buf.is_empty());
    assert_eq!(decoded, expected);
}

#[test]
fn send_v2_binary_request_decodes() {
    let cmd = decode_one(&golden!("send_v2_request_rocketmq"));
    assert_eq!(cmd.code, request_code::SEND_MESSAGE_V2);
    assert_eq!(cmd.encoding, Encoding::RocketMq);
    assert_eq!(cmd.opaque, 3);
    assert_eq!(cmd.body.len(), 128);
    let header = SendMessageHeader::from_v2(ext_or_err(&cmd).unwrap()).unwrap();
    assert_eq!(header.producer_group, "benchmark_producer");
    assert_eq!(header.topic, "wire_bench");
    assert_eq!(header.default_topic_queue_nums, 4);
    assert_eq!(header.born_timestamp, 1795293213681);
    assert!(!header.batch);
    assert_eq!(
        find_property(&header.properties, property::KEYS),
        Some("1795293213")
    );
    assert_eq!(
        find_property(&header.properties, property::UNIQ_KEY),
        Some("7F0000010CE930946E096B688BF10000")
    );
    assert_eq!(cmd.ext_get("n"), Some("broker-a"));
}

#[test]
fn send_v2_json_request_unescapes_properties() {
    let cmd = decode_one(&golden!("send_v2_request_json"));
    assert_eq!(cmd.encoding, Encoding::Json);
    assert_eq!((cmd.code, cmd.opaque), (310, 4));
    let header = SendMessageHeader::from_ext(cmd.ext.as_ref().unwrap()).unwrap();
    let properties = decode_properties(&header.properties);
    assert_eq!(properties.len(), 5);
    assert_eq!(find_property(&header.properties, "TAGS"), Some("TagA"));
    assert_eq!(
        find_property(&header.properties, "wireProp"),
        Some("sync-1")
    );
    assert_eq!(&cmd.body[..], b"hello from the wire capture: sync send");
}

#[test]
fn send_responses_decode() {
    let cmd = decode_one(&golden!("send_v2_response_json"));
    assert!(cmd.is_response());
    assert_eq!((cmd.code, cmd.opaque), (response_code::SUCCESS, 3));
    let header = SendMessageResponseHeader::from_ext(cmd.ext.as_ref().unwrap()).unwrap();
    assert_eq!(header.msg_id, "7F00000100002A9F0000000000000167");
    assert_eq!(
        decode_offset_msg_id(&header.msg_id).unwrap(),
        ("127.0.0.1:10911".parse().unwrap(), 0x167)
    );
    assert_eq!(cmd.ext_get("MSG_REGION"), Some("DefaultRegion"));

    let batch = decode_one(&golden!("send_batch_response_json"));
    let header = SendMessageResponseHeader::from_ext(batch.ext.as_ref().unwrap()).unwrap();
    assert_eq!(header.msg_id.split(',').count(), 3);
    assert_eq!(header.queue_id, 2);
}

#[test]
fn batch_request_body_splits_into_messages() {
    let cmd = decode_one(&golden!("send_batch_request_json"));
    assert_eq!(cmd.code, request_code::SEND_BATCH_MESSAGE);
    let header = SendMessageHeader::from_v2(cmd.ext.as_ref().unwrap()).unwrap();
    assert!(header.batch);
    let entries = decode_batch(&cmd.body).unwrap();
    assert_eq!(entries.len(), 3);
    for (index, entry) in entries.iter().enumerate() {
        assert_eq!(entry.body, format!("batch message {index}").as_bytes());
        assert_eq!(
            find_property(&entry.properties, "KEYS"),
            Some(format!("wire-batch-{index}").as_str())
        );
    }
    // The Java client writes magic and CRC as 0, exactly as encode_batch does.
    assert_eq!(encode_batch(&entries), &cmd.body[..]);
}

#[test]
fn pull_response_body_holds_stored_messages() {
    let cmd = decode_one(&golden!("pull_response_json"));
    assert_eq!(cmd.remark.as_deref(), Some("FOUND"));
    let header = PullMessageResponseHeader::from_ext(cmd.ext.as_ref().unwrap()).unwrap();
    assert_eq!(header.next_begin_offset, 74);
    assert_eq!(header.max_offset, 74);
    // The records themselves are checked in quiver-record's golden tests.
    assert_eq!(StoredMessage::decode_all(&cmd.body).unwrap().len(), 10);
}

#[test]
fn pop_and_lite_pull_bodies_decode() {
    let pop = decode_one(&golden!("pop_response_json"));
    assert_eq!(StoredMessage::decode_all(&pop.body).unwrap().len(), 5);
    assert_eq!(pop.ext_get("reviveQid"), Some("0"));

    let lite = decode_one(&golden!("lite_pull_response_json"));
    assert_eq!(StoredMessage::decode_all(&lite.body).unwrap().len(), 1);
}

#[test]
fn pull_requests_decode() {
    let cmd = decode_one(&golden!("pull_request_rocketmq"));
    let header = PullMessageRequestHeader::from_ext(ext_or_err(&cmd).unwrap()).unwrap();
    assert_eq!(header.consumer_group, "wire_bench_consumer");
    assert_eq!(header.sys_flag, pull_sys_flag::SUSPEND);
    assert_eq!(header.suspend_timeout_millis, 15000);
    assert_eq!(header.max_msg_bytes, Some(262144));
    assert_eq!(header.subscription, None);

    let lite = decode_one(&golden!("lite_pull_request_json"));
    assert_eq!(lite.code, request_code::LITE_PULL_MESSAGE);
    let header = PullMessageRequestHeader::from_ext(ext_or_err(&lite).unwrap()).unwrap();
    assert_ne!(header.sys_flag & pull_sys_flag::LITE_PULL, 0);
    assert_eq!(header.max_msg_bytes, Some(i32::MAX));

    let not_found = decode_one(&golden!("pull_not_found_json"));
    assert_eq!(not_found.code, response_code::PULL_NOT_FOUND);
    assert!(PullMessageResponseHeader::from_ext(not_found.ext.as_ref().unwrap()).is_ok());
}

#[test]
fn oneway_requests_are_flagged() {
    let update = decode_one(&golden!("update_offset_oneway_rocketmq"));
    assert!(update.is_oneway() && !update.is_response());
    let header = UpdateConsumerOffsetRequestHeader::from_ext(update.ext.as_ref().unwrap()).unwrap();
    assert_eq!((header.queue_id, header.commit_offset), (3, 74));

    let notify = decode_one(&golden!("notify_ids_changed_oneway_json"));
    assert!(notify.is_oneway());
    let header = NotifyConsumerIdsChangedHeader::from_ext(notify.ext.as_ref().unwrap()).unwrap();
    assert_eq!(header.consumer_group, "wire_bench_consumer");
}

#[test]
fn pop_request_keeps_its_full_code_in_json() {
    let cmd = decode_one(&golden!("pop_request_json"));
    assert_eq!(cmd.code, request_code::POP_MESSAGE);
    assert_eq!(cmd.ext_get("queueId"), Some("-1"));
    // Sent in binary the code is cut to 16 bits and must come back whole.
    let binary = Command {
        encoding: Encoding::RocketMq,
        ..cmd.clone()
    };
    let raw = encode(&binary);
    assert_eq!(&raw[8..10], &3442i16.to_be_bytes());
    assert_eq!(decode_one(&raw).code, request_code::POP_MESSAGE);
}

#[test]
fn heartbeat_body_parses_and_re_encodes_identically() {
    let cmd = decode_one(&golden!("heartbeat_request_rocketmq"));
    assert_eq!(cmd.code, request_code::HEART_BEAT);
    assert_eq!(cmd.ext, None);
    let heartbeat: HeartbeatData = from_json(&cmd.body).unwrap();
    assert_eq!(heartbeat.client_id, "127.0.0.1@1795293222483");
    assert_eq!(
        heartbeat.producer_data_set[0].group_name,
        "CLIENT_INNER_PRODUCER"
    );
    let consumer = &heartbeat.consumer_data_set[0];
    assert_eq!(consumer.consume_type, "CONSUME_PASSIVELY");
    let topics: Vec<&str> = consumer
        .subscription_data_set
        .iter()
        .map(|s| s.topic.as_str())
        .collect();
    assert_eq!(topics, ["wire_bench", "%RETRY%wire_bench_consumer"]);
    assert_eq!(to_json(&heartbeat), &cmd.body[..]);
}

#[test]
fn route_body_re_encodes_identically() {
    let cmd = decode_one(&golden!("route_response_json"));
    let route: TopicRouteData = from_json(&cmd.body).unwrap();
    assert_eq!(route.queue_datas[0].write_queue_nums, 4);
    assert_eq!(route.broker_datas[0].broker_addrs[&0], "127.0.0.1:10911");
    assert_eq!(to_json(&route), &cmd.body[..]);
}

#[test]
fn cluster_info_with_bare_integer_keys_parses() {
    let cmd = decode_one(&golden!("cluster_info_response_json"));
    assert!(std::str::from_utf8(&cmd.body).unwrap().contains("{0:"));
    let info: ClusterInfo = from_json(&cmd.body).unwrap();
    let broker = &info.broker_addr_table["broker-a"];
    assert_eq!(broker.cluster, "DefaultCluster");
    assert_eq!(broker.broker_addrs[&0], "127.0.0.1:10911");
    assert!(info.cluster_addr_table["DefaultCluster"].contains("broker-a"));
}

#[test]
fn register_broker_body_and_crc_match_the_header() {
    let cmd = decode_one(&golden!("register_broker_request_json"));
    let header = RegisterBrokerRequestHeader::from_ext(cmd.ext.as_ref().unwrap()).unwrap();
    assert_eq!(header.broker_name, "broker-a");
    assert!(!header.compressed);
    // The broker's bodyCrc32 is the same masked CRC32 we use for BODYCRC.
    assert_eq!(body_crc(&cmd.body), header.body_crc32);
    let body: RegisterBrokerBody = from_json(&cmd.body).unwrap();
    let table = &body.topic_config_serialize_wrapper.topic_config_table;
    assert_eq!(table["TBW102"].perm, 7);
    assert_eq!(table["TBW102"].read_queue_nums, 8);
    assert_eq!(table["BenchmarkTest"].write_queue_nums, 1024);
    assert_eq!(table["TBW102"].topic_filter_type, "SINGLE_TAG");
    assert!(body.topic_config_serialize_wrapper.data_version.timestamp > 0);
}

#[test]
fn unregister_client_decodes() {
    let cmd = decode_one(&golden!("unregister_client_rocketmq"));
    let header = UnregisterClientRequestHeader::from_ext(cmd.ext.as_ref().unwrap()).unwrap();
    assert_eq!(header.client_id, "127.0.0.1@1795293213075");
    assert_eq!(header.producer_group.as_deref(), Some("benchmark_producer"));
    assert_eq!(header.consumer_group, None);
}

#[test]
fn every_strict_prefix_of_a_golden_frame_needs_more() {
    for raw in all_frames() {
        for cut in 0..raw.len() {
            let mut buf = BytesMut::from(&raw[..cut]);
            assert_eq!(decode_frame(&mut buf), Ok(None), "cut at {cut}");
            assert_eq!(&buf[..], &raw[..cut]);
        }
    }
}
