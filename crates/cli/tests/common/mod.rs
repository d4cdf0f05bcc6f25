//! Shared setup for the end-to-end tests: a real `quiver up` in a temp folder.

#![allow(dead_code)]

pub mod bench;
pub mod controller;
pub mod relay;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quiver_testkit::{wait_until, QuiverProcess, WireClient};
use quiver_wire::body::{self, TopicRouteData};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::SendMessageHeader;
use quiver_wire::message::StoredMessage;
use quiver_wire::{Command, Encoding, ExtFields};

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quiver"))
}

pub fn up(data: &Path) -> QuiverProcess {
    QuiverProcess::up(&binary(), data).expect("quiver up starts")
}

/// `quiver up -c` with a broker config of `text`, written to `dir/broker.conf`; data in
/// `dir/data`.
pub fn up_with_config(dir: &Path, text: &str) -> QuiverProcess {
    let conf = dir.join("broker.conf");
    std::fs::write(&conf, text).expect("write broker.conf");
    QuiverProcess::up_with_config(&binary(), &dir.join("data"), Some(&conf), dir)
        .expect("quiver up starts")
}

/// A send header to queue 0 of `topic`, as a producer of `group` fills it, with no properties.
pub fn send_header(group: &str, topic: &str) -> SendMessageHeader {
    SendMessageHeader {
        producer_group: group.into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 0,
        sys_flag: 0,
        born_timestamp: 1,
        flag: 0,
        properties: String::new(),
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
    }
}

/// Waits until the name server routes `topic` to a broker (registration is asynchronous).
pub fn wait_for_route(namesrv: SocketAddr, topic: &str) -> TopicRouteData {
    wait_for_route_on(namesrv, topic, 1)
}

/// Waits until the name server routes `topic` to at least `brokers` brokers: each master
/// registers its topics on its own schedule.
pub fn wait_for_route_on(namesrv: SocketAddr, topic: &str, brokers: usize) -> TopicRouteData {
    let mut client = WireClient::connect(namesrv, Encoding::Json).expect("connect namesrv");
    wait_until(Duration::from_secs(20), || {
        let request = Command::request(request_code::GET_ROUTEINFO_BY_TOPIC, Encoding::Json)
            .with_ext(ExtFields::new().with("topic", topic));
        let response = client.call(request).ok()?;
        if response.code != response_code::SUCCESS {
            return None;
        }
        let route = body::from_json::<TopicRouteData>(&response.body).ok()?;
        (route.queue_datas.len() >= brokers).then_some(route)
    })
    .unwrap_or_else(|| panic!("no route for {topic} on {brokers} broker(s) within 20 s"))
}

/// Pulls a whole queue from `offset` to its end, checking each response.
pub fn pull_all(
    client: &mut WireClient,
    topic: &str,
    queue_id: i32,
    mut offset: i64,
) -> Vec<StoredMessage> {
    let mut messages = Vec::new();
    loop {
        let response = client
            .pull(topic, "test_group", queue_id, offset, 32, 0)
            .expect("pull");
        match response.code {
            response_code::SUCCESS => {
                let batch = StoredMessage::decode_all(&response.body).expect("decodable pull body");
                assert!(!batch.is_empty(), "SUCCESS pull with no messages");
                offset = response
                    .ext_get("nextBeginOffset")
                    .expect("nextBeginOffset")
                    .parse()
                    .expect("number");
                messages.extend(batch);
            }
            response_code::PULL_NOT_FOUND => return messages,
            other => panic!("pull answered {other}: {:?}", response.remark),
        }
    }
}

pub fn ext_i64(command: &Command, key: &str) -> i64 {
    command
        .ext_get(key)
        .unwrap_or_else(|| panic!("{key} missing in {command:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number"))
}
