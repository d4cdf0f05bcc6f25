//! Transactional messages against a real `quiver up` killed with -9: committed halves are
//! delivered once, rolled-back ones never, and halves left undecided before the crash are
//! checked with their producer after the restart.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::pull_all;
use quiver_testkit::{QuiverProcess, WireClient};
use quiver_wire::body::{self, HeartbeatData, ProducerData};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{
    EndTransactionRequestHeader, QueryConsumerOffsetRequestHeader, SendMessageHeader,
};
use quiver_wire::message::{decode_offset_msg_id, encode_properties, sys_flag};
use quiver_wire::{Command, Encoding};

const TOPIC: &str = "Ledger";
const GROUP: &str = "ledger_tx";
/// Checks start a second after a half is born and come every half second; the count is high
/// so that no half is moved aside while the test is slow.
const CONFIG: &str =
    "transactionTimeOut=1000\ntransactionCheckInterval=500\ntransactionCheckMax=1000\n";
const HALVES: usize = 30;

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Where a half is: its offset in the half queue and its CommitLog position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Half {
    queue_offset: i64,
    position: i64,
}

fn send_half(client: &mut WireClient, body: &str) -> Half {
    let header = SendMessageHeader {
        sys_flag: sys_flag::TRANSACTION_PREPARED,
        born_timestamp: wall_ms(),
        properties: encode_properties([("TRAN_MSG", "true"), ("PGROUP", GROUP), ("WAIT", "true")]),
        ..common::send_header(GROUP, TOPIC)
    };
    let request = Command::request(request_code::SEND_MESSAGE, Encoding::Json)
        .with_ext(header.to_v1())
        .with_body(body.as_bytes().to_vec());
    let answer = client.call(request).expect("send a half");
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    let ext = answer.ext.as_ref().expect("answer fields");
    let (_, position) =
        decode_offset_msg_id(ext.get("msgId").expect("msgId")).expect("an offset id");
    Half {
        queue_offset: ext
            .get("queueOffset")
            .and_then(|o| o.parse().ok())
            .expect("queueOffset"),
        position,
    }
}

/// END_TRANSACTION, oneway as the Java client sends it.
fn end(client: &mut WireClient, half: Half, decision: i32, from_check: bool) {
    let header = EndTransactionRequestHeader {
        producer_group: GROUP.into(),
        tran_state_table_offset: half.queue_offset,
        commit_log_offset: half.position,
        commit_or_rollback: decision,
        from_transaction_check: Some(from_check),
        msg_id: "unused".into(),
        transaction_id: None,
        topic: Some(TOPIC.into()),
    };
    let request = Command::request(request_code::END_TRANSACTION, Encoding::Json)
        .with_ext(header.to_ext())
        .oneway();
    client.send_request(request).expect("end the transaction");
}

/// A producer connection of the group, known to the broker through its heartbeat.
fn producer(quiver: &QuiverProcess) -> WireClient {
    let mut client = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let data = HeartbeatData {
        client_id: "ledger-producer".into(),
        producer_data_set: vec![ProducerData {
            group_name: GROUP.into(),
        }],
        ..HeartbeatData::default()
    };
    let heartbeat =
        Command::request(request_code::HEART_BEAT, Encoding::Json).with_body(body::to_json(&data));
    let answer = client.call(heartbeat).expect("heartbeat");
    assert_eq!(answer.code, response_code::SUCCESS);
    client
}

fn delivered(client: &mut WireClient) -> Vec<String> {
    pull_all(client, TOPIC, 0, 0)
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).expect("text"))
        .collect()
}

/// The check's progress on the half queue: every half below it is decided.
fn half_progress(client: &mut WireClient) -> i64 {
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: "CID_RMQ_SYS_TRANS".into(),
        topic: "RMQ_SYS_TRANS_HALF_TOPIC".into(),
        queue_id: 0,
        set_zero_if_not_found: Some(false),
    };
    let request = Command::request(request_code::QUERY_CONSUMER_OFFSET, Encoding::Json)
        .with_ext(header.to_ext());
    let answer = client.call(request).expect("query offset");
    answer
        .ext
        .as_ref()
        .and_then(|ext| ext.get("offset"))
        .and_then(|o| o.parse().ok())
        .unwrap_or(-1)
}

/// Waits until `condition` holds, reading the checks the broker sends meanwhile. The producer
/// connection only writes from here on, so its reads may time out.
fn wait_reading_checks(
    client: &mut WireClient,
    timeout: Duration,
    mut condition: impl FnMut(&mut WireClient, &[Command]) -> bool,
) -> Vec<Command> {
    client
        .set_read_timeout(Duration::from_millis(200))
        .expect("read timeout");
    let deadline = Instant::now() + timeout;
    let mut checks = Vec::new();
    loop {
        checks.append(&mut client.server_requests);
        if let Ok(frame) = client.read_frame() {
            if frame.code == request_code::CHECK_TRANSACTION_STATE && !frame.is_response() {
                checks.push(frame);
            }
        }
        if condition(client, &checks) {
            return checks;
        }
        assert!(
            Instant::now() < deadline,
            "condition not met in {timeout:?}"
        );
    }
}

fn checked_offset(check: &Command) -> i64 {
    check
        .ext
        .as_ref()
        .and_then(|ext| ext.get("tranStateTableOffset"))
        .and_then(|o| o.parse().ok())
        .expect("tranStateTableOffset")
}

#[test]
fn decisions_hold_across_kill_9_and_undecided_halves_are_checked_after_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut quiver = common::up_with_config(dir.path(), CONFIG);
    let mut admin = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    admin.create_topic(TOPIC, 1).expect("create topic");
    let mut client = producer(&quiver);

    let mut halves = BTreeMap::new();
    for i in 0..HALVES {
        halves.insert(i, send_half(&mut client, &format!("tx {i}")));
    }
    let committed: BTreeSet<usize> = (0..HALVES).filter(|i| i % 3 == 0).collect();
    let rolled_back: BTreeSet<usize> = (0..HALVES).filter(|i| i % 3 == 1).collect();
    let undecided: BTreeMap<i64, usize> = (0..HALVES)
        .filter(|i| i % 3 == 2)
        .map(|i| (halves[&i].queue_offset, i))
        .collect();
    for i in &committed {
        end(&mut client, halves[i], sys_flag::TRANSACTION_COMMIT, false);
    }
    for i in &rolled_back {
        end(
            &mut client,
            halves[i],
            sys_flag::TRANSACTION_ROLLBACK,
            false,
        );
    }
    // The undecided ones stay so: the broker's checks go unanswered until after the crash.
    wait_reading_checks(&mut client, Duration::from_secs(30), |_, _| {
        delivered(&mut admin).len() == committed.len()
    });
    drop(client);
    quiver.kill9().expect("kill -9");

    let quiver = common::up_with_config(dir.path(), CONFIG);
    let mut admin = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let mut client = producer(&quiver);
    let mut answered = BTreeSet::new();
    let checks = wait_reading_checks(&mut client, Duration::from_secs(60), |client, checks| {
        for check in checks {
            let offset = checked_offset(check);
            if let Some(i) = undecided.get(&offset) {
                if answered.insert(offset) {
                    end(client, halves[i], sys_flag::TRANSACTION_COMMIT, true);
                }
            }
        }
        answered.len() == undecided.len()
    });
    for check in &checks {
        assert!(
            undecided.contains_key(&checked_offset(check)),
            "only undecided halves are checked, not {}",
            checked_offset(check)
        );
    }
    wait_reading_checks(&mut client, Duration::from_secs(30), |_, _| {
        half_progress(&mut admin) == HALVES as i64
    });

    let expected: BTreeSet<String> = committed
        .iter()
        .chain(undecided.values())
        .map(|i| format!("tx {i}"))
        .collect();
    let got = delivered(&mut admin);
    assert_eq!(
        got.len(),
        expected.len(),
        "each committed message once: {got:?}"
    );
    assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), expected);

    // Once more after a second crash: the decisions are read back, nothing is added.
    drop(client);
    let mut quiver = quiver;
    quiver.kill9().expect("kill -9");
    let quiver = common::up_with_config(dir.path(), CONFIG);
    let mut admin = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let mut client = producer(&quiver);
    // A half sent now is checked after its timeout; by then a check round has passed over
    // the decided ones too, and they are not asked about.
    let probe = send_half(&mut client, "probe");
    let checks = wait_reading_checks(&mut client, Duration::from_secs(30), |_, checks| {
        checks
            .iter()
            .any(|check| checked_offset(check) == probe.queue_offset)
    });
    for check in &checks {
        assert_eq!(
            checked_offset(check),
            probe.queue_offset,
            "only the probe is checked"
        );
    }
    end(&mut client, probe, sys_flag::TRANSACTION_ROLLBACK, true);
    wait_reading_checks(&mut client, Duration::from_secs(30), |_, _| {
        half_progress(&mut admin) == HALVES as i64 + 1
    });
    assert_eq!(delivered(&mut admin).len(), expected.len());
}
