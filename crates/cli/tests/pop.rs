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
use quiver_wire::receipt::{ReceiptHandle, RetryFlag};
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
    let handle = match message.property("POP_CK") {
        Some(handle) => ReceiptHandle::parse(&handle).expect("the broker's handle parses"),
        None => ReceiptHandle {
            start_offset: message.queue_offset,
            pop_time_ms: pop_time.parse().expect("popTime"),
            invisible_ms: INVISIBLE_MS,
            revive_queue_id: 0,
            retry: RetryFlag::Normal,
            broker_name: "broker-a".into(),
            queue_id: message.queue_id,
            queue_offset: Some(message.queue_offset),
        },
    };
    let header = AckMessageRequestHeader {
        consumer_group: GROUP.into(),
        topic: TOPIC.into(),
        queue_id: handle.queue_id,
        extra_info: handle.encode(),
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

/// The Rust client's pop consumer: two members of a group share the messages (each once), and
/// one the listener declines comes back after its invisible time with its reconsume count
/// raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_pop_consumer_shares_messages_and_gets_declined_ones_again() {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use quiver_client::{
        Client, ClientConfig, Message, PopConsumer, PopConsumerConfig, Producer, ProducerConfig,
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let quiver = common::up_with_config(dir.path(), "");
    let client = Client::new(ClientConfig::new(&quiver.namesrv().to_string())).expect("client");
    let broker = quiver.broker().to_string();
    client
        .create_topic(&broker, "RustPop", 4)
        .await
        .expect("topic");
    client
        .set_pop_mode(&broker, "RustPop", "rust_pop", true)
        .await
        .expect("pop mode");
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.refresh_route("RustPop").await.is_err() {
        assert!(Instant::now() < deadline, "no route for the topic");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Member -> body -> (times seen, last reconsume count).
    type Seen = Arc<Mutex<BTreeMap<String, (u32, i32, usize)>>>;
    let seen: Seen = Arc::default();
    let mut consumers = Vec::new();
    for member in 0..2 {
        let seen = seen.clone();
        let mut config = PopConsumerConfig::new("rust_pop", "RustPop");
        config.from_first = true;
        config.invisible_ms = 2_000;
        config.poll_ms = 2_000;
        config.loops = 2;
        let listener = Arc::new(move |message: &quiver_client::StoredMessage| {
            let body = String::from_utf8(message.body.to_vec()).unwrap();
            let mut seen = seen.lock().unwrap();
            let entry = seen.entry(body.clone()).or_insert((0, 0, member));
            entry.0 += 1;
            entry.1 = message.reconsume_times;
            entry.2 = member;
            // "declined" is refused the first time.
            !(body == "declined" && message.reconsume_times == 0)
        });
        let consumer = PopConsumer::start(
            Client::new(ClientConfig::new(&quiver.namesrv().to_string())).expect("client"),
            config,
            listener,
        )
        .await
        .expect("pop consumer starts");
        consumers.push(consumer);
    }
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for i in 0..200 {
        producer
            .send(&Message::new("RustPop", format!("m{i}")))
            .await
            .expect("send");
    }
    producer
        .send(&Message::new("RustPop", "declined"))
        .await
        .expect("send");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = {
            let seen = seen.lock().unwrap();
            seen.len() == 201 && seen.get("declined").is_some_and(|e| e.1 == 1)
        };
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "popped so far: {}",
            seen.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for consumer in consumers {
        consumer.shutdown().await;
    }
    let seen = seen.lock().unwrap();
    let repeated: Vec<_> = seen
        .iter()
        .filter(|(body, entry)| entry.0 != 1 && *body != "declined")
        .collect();
    assert!(
        repeated.is_empty(),
        "handed out more than once: {repeated:?}"
    );
    assert_eq!(seen["declined"].0, 2, "declined once, then consumed");
    let members: std::collections::BTreeSet<usize> = seen.values().map(|e| e.2).collect();
    assert_eq!(members.len(), 2, "both members popped");
}
