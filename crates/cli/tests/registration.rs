//! Registration with the name server at scale: a broker with 100,000 topics registers (its
//! registration goes compressed, where its JSON would pass the frame limit) and the name
//! server routes a topic from the end of its list.

mod common;

use std::collections::BTreeMap;

use common::{up_with_config, wait_for_route};
use quiver_testkit::WireClient;
use quiver_wire::body::{self, DataVersion, KvTable, TopicConfig, TopicConfigSerializeWrapper};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding};

const TOPICS: usize = 100_000;

/// A topics.json with `TOPICS` topics of 8 queues each, as a broker that made them wrote it.
fn topics_file(count: usize) -> Vec<u8> {
    let topic_config_table: BTreeMap<String, TopicConfig> = (0..count)
        .map(|index| {
            let name = format!("Scale-{index:06}");
            let config = TopicConfig {
                topic_name: name.clone(),
                read_queue_nums: 8,
                write_queue_nums: 8,
                perm: 6,
                topic_filter_type: "SINGLE_TAG".into(),
                ..TopicConfig::default()
            };
            (name, config)
        })
        .collect();
    body::to_json(&TopicConfigSerializeWrapper {
        topic_config_table,
        data_version: DataVersion {
            counter: 1,
            timestamp: 1,
            ..DataVersion::default()
        },
    })
}

#[test]
fn a_broker_with_100000_topics_registers_and_its_last_topic_is_routed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = topics_file(TOPICS);
    assert!(
        file.len() > 16 << 20,
        "the table's JSON alone is past a frame"
    );
    let config = dir.path().join("data").join("config");
    std::fs::create_dir_all(&config).expect("config dir");
    std::fs::write(config.join("topics.json"), file).expect("topics.json");
    let quiver = up_with_config(dir.path(), "quiverTopicsMax=200000\n");

    let last = format!("Scale-{:06}", TOPICS - 1);
    let route = wait_for_route(quiver.namesrv(), &last);
    let queues = &route.queue_datas[0];
    assert_eq!((queues.read_queue_nums, queues.write_queue_nums), (8, 8));
    assert_eq!(queues.perm, 6);

    // The broker holds them all, and says how many.
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let request = Command::request(request_code::GET_BROKER_RUNTIME_INFO, Encoding::Json);
    let answer = client.call(request).expect("runtime info");
    assert_eq!(answer.code, response_code::SUCCESS);
    let table: KvTable = body::from_json(&answer.body).expect("kv table");
    let held: usize = table.table["topicCount"].parse().expect("a number");
    assert!(held > TOPICS, "{held}");
    assert!(
        !quiver.log().contains("registration failed"),
        "{}",
        quiver.log()
    );
}
