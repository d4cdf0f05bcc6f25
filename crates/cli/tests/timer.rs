//! RocketMQ 5 timer messages against a real `quiver up`: delivered at their time (not before,
//! and about a second late at most), and none lost when the broker is killed with -9 while
//! they wait.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::pull_all;
use quiver_testkit::{SendOptions, WireClient};
use quiver_wire::code::response_code;
use quiver_wire::message::{property, StoredMessage};
use quiver_wire::Encoding;

const TOPIC: &str = "Scheduled";

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn timed(delay_ms: i64) -> SendOptions {
    SendOptions {
        queue_id: Some(0),
        properties: vec![(property::TIMER_DELAY_MS.into(), delay_ms.to_string())],
        ..SendOptions::default()
    }
}

fn due(message: &StoredMessage) -> i64 {
    message
        .property(property::TIMER_OUT_MS)
        .and_then(|due| due.parse().ok())
        .expect("a delivered timer message says when it was due")
}

/// Pulls queue 0 until `count` distinct bodies arrived, or the deadline.
fn wait_for(client: &mut WireClient, count: usize) -> Vec<StoredMessage> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let all = pull_all(client, TOPIC, 0, 0);
        let distinct: BTreeSet<_> = all.iter().map(|m| m.body.clone()).collect();
        if distinct.len() >= count || std::time::Instant::now() > deadline {
            return all;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn timer_messages_arrive_at_their_time_and_survive_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut quiver = common::up_with_config(dir.path(), "");
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    client.create_topic(TOPIC, 1).expect("create topic");

    // 1. In time: 1.5 s ahead, delivered no earlier and at most about a second later.
    let sent_at = wall_ms();
    for i in 0..20 {
        let sent = client
            .send(TOPIC, format!("soon {i}").as_bytes(), &timed(1_500))
            .expect("send");
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    }
    assert!(
        pull_all(&mut client, TOPIC, 0, 0).is_empty() || wall_ms() - sent_at >= 1_500,
        "nothing before its time"
    );
    let got = wait_for(&mut client, 20);
    assert_eq!(got.len(), 20);
    let mut lateness = Vec::new();
    for message in &got {
        let due = due(message);
        assert!(
            message.store_timestamp >= due,
            "stored in its topic before its time"
        );
        lateness.push(message.store_timestamp - due);
    }
    let worst = lateness.iter().max().copied().unwrap_or_default();
    println!("lateness of 20 timers 1.5 s ahead: worst {worst} ms");
    assert!(worst < 1_500, "a timer delivered {worst} ms late");

    // 2. 300 timers 2 to 5 s ahead; the broker is killed with -9 while they wait.
    for i in 0..300 {
        let sent = client
            .send(
                TOPIC,
                format!("later {i}").as_bytes(),
                &timed(2_000 + i * 10),
            )
            .expect("send");
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    }
    drop(client);
    quiver.kill9().expect("kill -9");
    let quiver = common::up_with_config(dir.path(), "");
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let got = wait_for(&mut client, 320);
    let distinct: BTreeSet<_> = got.iter().map(|m| m.body.clone()).collect();
    assert_eq!(
        distinct.len(),
        320,
        "every timer message delivered after the restart"
    );
    for message in &got {
        assert!(
            message.store_timestamp >= due(message),
            "never before its time"
        );
    }
}
