//! Pulls through the handler table: reads, refusals, and long polling.

mod harness;

use std::time::Duration;

use harness::{finish, messages, options, pull_request, Harness};
use quiver_broker::handler::Reply;
use quiver_wire::code::response_code;

#[tokio::test]
async fn a_pull_reads_from_its_offset_and_says_where_to_go_on() {
    let h = Harness::new();
    h.create_topic("Prices", 1).await;
    for body in [&b"a"[..], b"b", b"c"] {
        h.send("Prices", body, &options()).await;
    }
    let response = h.pull("Prices", "g", 0, 1).await;
    let bodies: Vec<_> = messages(&response)
        .iter()
        .map(|m| m.body.to_vec())
        .collect();
    assert_eq!(bodies, vec![b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(harness::field(&response, "nextBeginOffset"), "3");
}

#[tokio::test]
async fn a_pull_of_an_unknown_topic_or_queue_is_refused() {
    let h = Harness::new();
    assert_eq!(
        h.pull("Nowhere", "g", 0, 0).await.code,
        response_code::TOPIC_NOT_EXIST
    );
    h.create_topic("Prices", 2).await;
    assert_eq!(
        h.pull("Prices", "g", 2, 0).await.code,
        response_code::INVALID_PARAMETER
    );
}

#[tokio::test(start_paused = true)]
async fn a_parked_pull_is_answered_when_a_message_lands() {
    let h = Harness::new();
    h.create_topic("Prices", 1).await;
    let request = pull_request("Prices", "g", 0, 0, 15_000);
    let Reply::Wait(answer) = h.dispatch(&request) else {
        panic!("an empty queue with SUSPEND parks the pull");
    };
    let waiting = tokio::spawn(answer);
    // Let the parked pull register before the message lands.
    tokio::task::yield_now().await;
    h.send("Prices", b"landed", &options()).await;
    // Paused time: had the arrival not woken it, the answer would come only at 15 s.
    let started = tokio::time::Instant::now();
    let response = harness::whole(waiting.await.expect("the parked pull completes"));
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(&messages(&response)[0].body[..], b"landed");
}

#[tokio::test(start_paused = true)]
async fn a_parked_pull_with_nothing_arriving_is_answered_not_found_after_its_suspend_time() {
    let h = Harness::new();
    h.create_topic("Prices", 1).await;
    let started = tokio::time::Instant::now();
    let reply = h.dispatch(&pull_request("Prices", "g", 0, 0, 2_000));
    let response = finish(&h.broker, reply).await;
    assert_eq!(response.code, response_code::PULL_NOT_FOUND);
    assert!(started.elapsed() >= Duration::from_millis(2_000));
}

#[tokio::test]
async fn a_pull_without_suspend_is_answered_at_once() {
    let h = Harness::new();
    h.create_topic("Prices", 1).await;
    let Reply::Now(response) = h.dispatch(&pull_request("Prices", "g", 0, 0, 0)) else {
        panic!("no SUSPEND bit: answered now");
    };
    assert_eq!(response.code, response_code::PULL_NOT_FOUND);
}

#[tokio::test]
async fn with_slave_read_enable_a_pull_far_behind_is_sent_to_the_slave() {
    // With no memory to spare, any pull not at the log's end counts as far behind.
    let h = Harness::with_config("slaveReadEnable=true\naccessMessageInMemoryMaxRatio=0\n");
    h.create_topic("Prices", 1).await;
    for body in [&b"a"[..], b"b", b"c"] {
        h.send("Prices", body, &options()).await;
    }
    let behind = h.call(pull_request("Prices", "g", 0, 0, 0)).await;
    assert_eq!(
        harness::field(&behind, "suggestWhichBrokerId"),
        "0",
        "read to the end"
    );
    let one = h.call(pull_one("Prices", 0)).await;
    assert_eq!(
        harness::field(&one, "suggestWhichBrokerId"),
        "1",
        "two messages behind"
    );

    let default = Harness::new();
    default.create_topic("Prices", 1).await;
    default.send("Prices", b"a", &options()).await;
    default.send("Prices", b"b", &options()).await;
    let answer = default.call(pull_one("Prices", 0)).await;
    assert_eq!(
        harness::field(&answer, "suggestWhichBrokerId"),
        "0",
        "never without it"
    );
}

/// Runs of large messages are left in the CommitLog for the connection to send from the page
/// cache; small ones, and all of them with `transferMsgByHeap`, are copied. Either way the
/// consumer reads the same messages.
#[tokio::test]
async fn large_messages_are_answered_from_the_log_files_unless_transfer_by_heap() {
    let bodies: Vec<Vec<u8>> = [40_000, 100, 70_000, 20_000, 300]
        .iter()
        .enumerate()
        .map(|(i, size)| vec![b'a' + i as u8; *size])
        .collect();
    for (config, from_files) in [("", true), ("transferMsgByHeap=true\n", false)] {
        let h = Harness::with_config(config);
        h.create_topic("Large", 1).await;
        for body in &bodies {
            h.send("Large", body, &options()).await;
        }
        let reply = h.dispatch(&pull_request("Large", "g", 0, 0, 0));
        let answer = match reply {
            Reply::FromFiles(answer) => {
                assert!(from_files, "{config}: copied");
                assert!(!answer.files.is_empty());
                harness::whole(answer)
            }
            Reply::Now(answer) => {
                assert!(!from_files, "{config}: nothing left in files");
                answer
            }
            _ => panic!("a pull of a queue holding messages is answered now"),
        };
        let got: Vec<Vec<u8>> = messages(&answer).iter().map(|m| m.body.to_vec()).collect();
        assert_eq!(got, bodies);
    }
    // Small messages alone are copied.
    let h = Harness::new();
    h.create_topic("Small", 1).await;
    h.send("Small", b"small", &options()).await;
    assert!(matches!(
        h.dispatch(&pull_request("Small", "g", 0, 0, 0)),
        Reply::Now(_)
    ));
}

/// A pull of one message from `offset` of queue 0.
fn pull_one(topic: &str, offset: i64) -> quiver_wire::Command {
    let header = quiver_wire::header::PullMessageRequestHeader {
        queue_offset: offset,
        max_msg_nums: 1,
        ..quiver_testkit::pull_header(topic, "g", 0)
    };
    quiver_wire::Command::request(
        quiver_wire::code::request_code::PULL_MESSAGE,
        quiver_wire::Encoding::Json,
    )
    .with_ext(header.to_ext())
}
