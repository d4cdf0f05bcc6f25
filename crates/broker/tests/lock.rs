//! LOCK_BATCH_MQ and UNLOCK_BATCH_MQ: orderly consumers' queue locks and their lease.

mod harness;

use harness::Harness;
use quiver_broker::locks::LOCK_LEASE_MS;
use quiver_wire::body::{self, LockBatchRequestBody, LockBatchResponseBody, MessageQueue};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding};

fn lock_request(code: i32, client_id: &str) -> Command {
    let request_body = LockBatchRequestBody {
        client_id: client_id.into(),
        consumer_group: "g".into(),
        mq_set: vec![MessageQueue {
            topic: "Orders".into(),
            broker_name: "broker-a".into(),
            queue_id: 0,
        }],
        only_this_broker: true,
    };
    Command::request(code, Encoding::Json).with_body(body::to_json(&request_body))
}

async fn granted(h: &Harness, client_id: &str) -> usize {
    let answer = h
        .call(lock_request(request_code::LOCK_BATCH_MQ, client_id))
        .await;
    assert_eq!(answer.code, response_code::SUCCESS);
    let parsed: LockBatchResponseBody = body::from_json(&answer.body).expect("lock answer");
    parsed.lock_ok_mq_set.len()
}

#[tokio::test]
async fn a_lock_is_held_for_its_lease_then_another_client_may_take_it() {
    let mut h = Harness::new();
    assert_eq!(granted(&h, "a").await, 1);
    assert_eq!(granted(&h, "b").await, 0, "held by a");
    h.advance(LOCK_LEASE_MS);
    assert_eq!(granted(&h, "b").await, 0, "the lease lasts LOCK_LEASE_MS");
    h.advance(1);
    assert_eq!(granted(&h, "b").await, 1, "lapsed");
    assert_eq!(granted(&h, "a").await, 0);
}

#[tokio::test]
async fn renewing_extends_the_lease_and_unlocking_frees_the_queue() {
    let mut h = Harness::new();
    assert_eq!(granted(&h, "a").await, 1);
    h.advance(LOCK_LEASE_MS - 1);
    assert_eq!(granted(&h, "a").await, 1, "renewed");
    h.advance(LOCK_LEASE_MS - 1);
    assert_eq!(
        granted(&h, "b").await,
        0,
        "the renewal counts from its own time"
    );
    let unlocked = h
        .call(lock_request(request_code::UNLOCK_BATCH_MQ, "a"))
        .await;
    assert_eq!(unlocked.code, response_code::SUCCESS);
    assert_eq!(granted(&h, "b").await, 1);
}
