//! Pop state across restarts of a real `quiver up`: after SIGTERM nothing acknowledged comes
//! back and nothing unacknowledged is lost; after kill -9 nothing unacknowledged is lost (an
//! acknowledgement of the last second may be forgotten, so its message comes back once more).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use quiver_testkit::{QuiverProcess, SendOptions, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{AckMessageRequestHeader, PopMessageRequestHeader};
use quiver_wire::message::StoredMessage;
use quiver_wire::{Command, Encoding};

const TOPIC: &str = "PopKept";
const GROUP: &str = "pop_kept";
const INVISIBLE_MS: i64 = 3_000;

fn set_pop_mode(client: &mut WireClient) {
    let body = format!(
        r#"{{"consumerGroup":"{GROUP}","mode":"POP","popShareQueueNum":0,"topic":"{TOPIC}"}}"#
    );
    let request = Command::request(request_code::SET_MESSAGE_REQUEST_MODE, Encoding::Json)
        .with_body(body.into_bytes());
    assert_eq!(client.call(request).unwrap().code, response_code::SUCCESS);
}

/// One pop of up to 32: the messages and the answer's popTime.
fn pop(client: &mut WireClient) -> (Vec<StoredMessage>, String) {
    let header = PopMessageRequestHeader {
        consumer_group: GROUP.into(),
        topic: TOPIC.into(),
        queue_id: -1,
        max_msg_nums: 32,
        invisible_time: INVISIBLE_MS,
        poll_time: 0,
        born_time: 0,
        init_mode: 0,
        exp_type: Some("TAG".into()),
        exp: Some("*".into()),
        order: Some(false),
    };
    let request =
        Command::request(request_code::POP_MESSAGE, Encoding::Json).with_ext(header.to_ext());
    let answer = client.call(request).expect("pop answered");
    if answer.code != response_code::SUCCESS {
        return (Vec::new(), String::new());
    }
    let pop_time = answer.ext_get("popTime").unwrap_or_default().to_string();
    (
        StoredMessage::decode_all(&answer.body).expect("pop body"),
        pop_time,
    )
}

fn ack(client: &mut WireClient, message: &StoredMessage, pop_time: &str) {
    let extra_info = message.property("POP_CK").unwrap_or_else(|| {
        format!(
            "{} {pop_time} {INVISIBLE_MS} 0 0 broker-a {} {}",
            message.queue_offset, message.queue_id, message.queue_offset
        )
    });
    let queue_id = extra_info.split(' ').nth(6).unwrap().parse().unwrap();
    let header = AckMessageRequestHeader {
        consumer_group: GROUP.into(),
        topic: TOPIC.into(),
        queue_id,
        extra_info,
        offset: message.queue_offset,
    };
    let request =
        Command::request(request_code::ACK_MESSAGE, Encoding::Json).with_ext(header.to_ext());
    assert_eq!(client.call(request).unwrap().code, response_code::SUCCESS);
}

fn body(message: &StoredMessage) -> String {
    String::from_utf8(message.body.to_vec()).unwrap()
}

/// Starts a broker with 100 messages in pop mode, pops 64 and acknowledges 40 of them.
/// Returns the broker, the acknowledged bodies and every body sent.
fn popped_and_partly_acked(
    dir: &std::path::Path,
) -> (QuiverProcess, BTreeSet<String>, BTreeSet<String>) {
    let quiver = common::up_with_config(dir, "");
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    client.create_topic(TOPIC, 2).expect("topic");
    set_pop_mode(&mut client);
    let mut sent = BTreeSet::new();
    for i in 0..100 {
        let options = SendOptions {
            queue_id: Some(i % 2),
            ..SendOptions::default()
        };
        let text = format!("m{i:03}");
        assert_eq!(
            client.send(TOPIC, text.as_bytes(), &options).unwrap().code,
            response_code::SUCCESS
        );
        sent.insert(text);
    }
    let mut popped = Vec::new();
    while popped.len() < 64 {
        let (messages, pop_time) = pop(&mut client);
        assert!(
            !messages.is_empty(),
            "100 were sent, {} popped",
            popped.len()
        );
        popped.extend(messages.into_iter().map(|m| (m, pop_time.clone())));
    }
    let mut acked = BTreeSet::new();
    for (message, pop_time) in popped.iter().take(40) {
        ack(&mut client, message, pop_time);
        acked.insert(body(message));
    }
    (quiver, acked, sent)
}

/// Pops (and acknowledges) until every body in `wanted` came, or 30 s passed; returns every
/// body popped, with repeats.
fn pop_until(client: &mut WireClient, wanted: &BTreeSet<String>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while Instant::now() < deadline {
        let (messages, pop_time) = pop(client);
        for message in &messages {
            ack(client, message, &pop_time);
            got.push(body(message));
        }
        let seen: BTreeSet<String> = got.iter().cloned().collect();
        if wanted.is_subset(&seen) {
            break;
        }
        if messages.is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    got
}

#[test]
fn after_sigterm_nothing_acknowledged_comes_back_and_nothing_unacknowledged_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut quiver, acked, sent) = popped_and_partly_acked(dir.path());
    quiver.terminate().expect("SIGTERM");
    let quiver = common::up_with_config(dir.path(), "");
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let unacked: BTreeSet<String> = sent.difference(&acked).cloned().collect();
    let got = pop_until(&mut client, &unacked);
    let seen: BTreeSet<String> = got.iter().cloned().collect();
    assert_eq!(
        seen, unacked,
        "exactly the unacknowledged ones, each at least once"
    );
}

#[test]
fn after_kill_9_nothing_unacknowledged_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut quiver, acked, sent) = popped_and_partly_acked(dir.path());
    quiver.kill9().expect("kill -9");
    let quiver = common::up_with_config(dir.path(), "");
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let unacked: BTreeSet<String> = sent.difference(&acked).cloned().collect();
    let got = pop_until(&mut client, &unacked);
    let seen: BTreeSet<String> = got.iter().cloned().collect();
    assert!(
        unacked.is_subset(&seen),
        "lost: {:?}",
        unacked.difference(&seen).collect::<Vec<_>>()
    );
    println!(
        "after kill -9: {} unacknowledged all came back; {} acknowledged ones came back once more",
        unacked.len(),
        seen.intersection(&acked).count()
    );
}
