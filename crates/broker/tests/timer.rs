//! RocketMQ 5 timer messages: held in `rmq_sys_wheel_timer` until their time, then stored in
//! their own topic with RocketMQ's properties; in due order; refused when too far ahead; a
//! restart (clean or not) loses none of them; and a slave that takes over from its master
//! delivers what the master had not, not what it had.

mod harness;

use harness::{field, messages, options, Harness};
use quiver_broker::background::timer_wheel::Wheel;
use quiver_broker::timer::{record_master_progress, Progress, TIMER_TOPIC};
use quiver_testkit::SendOptions;
use quiver_wire::code::response_code;
use quiver_wire::message::{property, StoredMessage};

fn timer(name: &str, value: i64) -> SendOptions {
    SendOptions {
        queue_id: Some(0),
        properties: vec![(name.into(), value.to_string())],
        ..options()
    }
}

/// Everything in queue 0 of `topic`.
async fn delivered(h: &Harness, topic: &str) -> Vec<StoredMessage> {
    let mut all = Vec::new();
    loop {
        let pulled = h.pull(topic, "g", 0, all.len() as i64).await;
        if pulled.code != response_code::SUCCESS {
            return all;
        }
        all.extend(messages(&pulled));
    }
}

/// Sends "job 0", "job 1", ... to queue 0 of Jobs, each due after its delay in ms.
async fn send_jobs(h: &Harness, delays_ms: &[i64]) {
    for (i, delay) in delays_ms.iter().enumerate() {
        let sent = h
            .send(
                "Jobs",
                format!("job {i}").as_bytes(),
                &timer(property::TIMER_DELAY_MS, *delay),
            )
            .await;
        assert_eq!(sent.code, response_code::SUCCESS);
    }
}

fn wheel(h: &Harness) -> Wheel {
    Wheel::open(&h.broker.background().config.store_root, h.now_ms).expect("wheel opens")
}

#[tokio::test]
async fn a_timer_message_is_delivered_at_its_time_not_before() {
    let h = Harness::new();
    assert_eq!(
        h.create_topic("Orders", 1).await.code,
        response_code::SUCCESS
    );
    let mut wheel = wheel(&h);
    let sent = h
        .send(
            "Orders",
            b"close the order",
            &timer(property::TIMER_DELAY_MS, 5_000),
        )
        .await;
    assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    assert_eq!(
        h.broker
            .background()
            .store
            .bounds(TIMER_TOPIC, 0)
            .max_offset,
        1
    );

    wheel
        .round(h.broker.background(), h.now_ms + 4_999)
        .unwrap();
    assert!(
        delivered(&h, "Orders").await.is_empty(),
        "not before its time"
    );
    wheel
        .round(h.broker.background(), h.now_ms + 5_000)
        .unwrap();
    let got = delivered(&h, "Orders").await;
    assert_eq!(got.len(), 1);
    let message = &got[0];
    assert_eq!(&message.body[..], b"close the order");
    assert_eq!(message.queue_id, 0);
    let due = (h.now_ms + 5_000).to_string();
    assert_eq!(
        message.property(property::TIMER_OUT_MS).as_deref(),
        Some(due.as_str())
    );
    assert_eq!(
        message.property(property::TIMER_DELAY_MS).as_deref(),
        Some("5000")
    );
    assert!(message.property(property::TIMER_ENQUEUE_MS).is_some());
    assert_eq!(
        message.property(property::TIMER_DEQUEUE_MS).as_deref(),
        Some(due.as_str())
    );
    assert_eq!(message.property(property::REAL_TOPIC), None);
    assert_eq!(message.store_timestamp, h.now_ms + 5_000);

    // Delivered once.
    wheel
        .round(h.broker.background(), h.now_ms + 60_000)
        .unwrap();
    assert_eq!(delivered(&h, "Orders").await.len(), 1);
}

#[tokio::test]
async fn timers_are_delivered_in_due_order_whatever_the_send_order() {
    let h = Harness::new();
    assert_eq!(
        h.create_topic("Reminders", 1).await.code,
        response_code::SUCCESS
    );
    let mut wheel = wheel(&h);
    // Due times across three minutes, sent out of order; the last two at the same ms.
    let delays = [150_000, 3_000, 70_000, 61_000, 3_000, 119_999, 500];
    for (i, delay) in delays.iter().enumerate() {
        let at = h.now_ms + delay;
        let sent = h
            .send(
                "Reminders",
                format!("{i}").as_bytes(),
                &timer(property::TIMER_DELIVER_MS, at),
            )
            .await;
        assert_eq!(sent.code, response_code::SUCCESS);
    }
    for step in (0..=160_000).step_by(250) {
        wheel.round(h.broker.background(), h.now_ms + step).unwrap();
    }
    let got = delivered(&h, "Reminders").await;
    let order: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect();
    assert_eq!(order, ["6", "1", "4", "3", "2", "5", "0"]);
    for message in &got {
        let due: i64 = message
            .property(property::TIMER_OUT_MS)
            .unwrap()
            .parse()
            .unwrap();
        assert!(message.store_timestamp >= due, "never early");
        assert!(
            message.store_timestamp < due + 250,
            "at most one round late"
        );
    }
}

#[tokio::test]
async fn far_ahead_bad_and_past_times_are_answered_as_rocketmq_does() {
    let h = Harness::with_config("timerMaxDelaySec=3600\n");
    assert_eq!(h.create_topic("T", 1).await.code, response_code::SUCCESS);
    let too_far = h
        .send("T", b"x", &timer(property::TIMER_DELAY_SEC, 3_601))
        .await;
    assert_eq!(too_far.code, response_code::MESSAGE_ILLEGAL);
    assert!(too_far.remark.unwrap().contains("max delay"));
    let mut bad = timer(property::TIMER_DELAY_MS, 0);
    bad.properties = vec![("TIMER_DELAY_MS".into(), "soon".into())];
    assert_eq!(
        h.send("T", b"x", &bad).await.code,
        response_code::MESSAGE_ILLEGAL
    );
    // A time already past: stored at once in its topic, as RocketMQ does.
    let past = h
        .send(
            "T",
            b"now",
            &timer(property::START_DELIVER_TIME, h.now_ms - 10),
        )
        .await;
    assert_eq!(past.code, response_code::SUCCESS);
    assert_eq!(delivered(&h, "T").await.len(), 1);
    assert_eq!(
        h.broker
            .background()
            .store
            .bounds(TIMER_TOPIC, 0)
            .max_offset,
        0
    );
    // Within the limit: waits.
    let ok = h
        .send("T", b"later", &timer(property::TIMER_DELAY_SEC, 3_600))
        .await;
    assert_eq!(ok.code, response_code::SUCCESS);
    assert_eq!(field(&ok, "queueId"), "0");
    assert_eq!(
        h.broker
            .background()
            .store
            .bounds(TIMER_TOPIC, 0)
            .max_offset,
        1
    );

    let off = Harness::with_config("timerWheelEnable=false\n");
    let refused = off
        .send("T", b"x", &timer(property::TIMER_DELAY_SEC, 5))
        .await;
    assert_eq!(refused.code, response_code::MESSAGE_ILLEGAL);
}

#[tokio::test]
async fn only_the_next_minutes_are_in_memory() {
    let h = Harness::new();
    assert_eq!(
        h.create_topic("Later", 1).await.code,
        response_code::SUCCESS
    );
    let mut wheel = wheel(&h);
    for i in 0..100 {
        h.send("Later", b"x", &timer(property::TIMER_DELAY_SEC, 600 + i))
            .await;
    }
    wheel.round(h.broker.background(), h.now_ms).unwrap();
    assert_eq!(
        wheel.pending_in_memory(),
        0,
        "ten minutes ahead: on disk only"
    );
    let buckets = std::fs::read_dir(h.broker.background().config.store_root.join("timer"))
        .unwrap()
        .count();
    assert!(buckets >= 1);
    wheel
        .round(h.broker.background(), h.now_ms + 599_000)
        .unwrap();
    assert!(
        wheel.pending_in_memory() > 0,
        "loaded ahead of their minute"
    );
    wheel
        .round(h.broker.background(), h.now_ms + 700_000)
        .unwrap();
    assert_eq!(delivered(&h, "Later").await.len(), 100);
    assert_eq!(wheel.pending_in_memory(), 0);
}

#[tokio::test]
async fn a_restart_loses_no_timer_and_a_checkpoint_keeps_delivered_ones_from_coming_back() {
    let h = Harness::new();
    assert_eq!(h.create_topic("Jobs", 1).await.code, response_code::SUCCESS);
    let mut wheel = wheel(&h);
    send_jobs(&h, &[1_000, 2_000, 90_000, 200_000]).await;
    wheel
        .round(h.broker.background(), h.now_ms + 1_000)
        .unwrap();
    assert_eq!(delivered(&h, "Jobs").await.len(), 1);
    wheel.persist().unwrap();
    // A crash: what came after the checkpoint (the second delivery) is not recorded.
    wheel
        .round(h.broker.background(), h.now_ms + 2_000)
        .unwrap();
    drop(wheel);
    let start = h.now_ms;
    let h = h.reopen(|_| {});
    let mut wheel = Wheel::open(&h.broker.background().config.store_root, start + 2_000).unwrap();
    for step in (2_000..=210_000).step_by(1_000) {
        wheel.round(h.broker.background(), start + step).unwrap();
    }
    let bodies: Vec<String> = delivered(&h, "Jobs")
        .await
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect();
    // job 1 was delivered after the checkpoint: it may come again, once; job 0 never does.
    assert_eq!(
        bodies.iter().filter(|b| *b == "job 0").count(),
        1,
        "{bodies:?}"
    );
    for job in ["job 1", "job 2", "job 3"] {
        let n = bodies.iter().filter(|b| *b == job).count();
        assert!(
            (1..=2).contains(&n),
            "{job} delivered {n} times: {bodies:?}"
        );
    }
    assert_eq!(
        bodies
            .iter()
            .filter(|b| *b == "job 2" || *b == "job 3")
            .count(),
        2
    );
}

/// The bodies delivered to queue 0 of `topic`, in order.
async fn bodies(h: &Harness, topic: &str) -> Vec<String> {
    delivered(h, topic)
        .await
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect()
}

#[tokio::test]
async fn progress_claims_only_what_a_drained_round_delivered() {
    let h = Harness::new();
    assert_eq!(h.create_topic("Jobs", 1).await.code, response_code::SUCCESS);
    let mut wheel = wheel(&h);
    assert_eq!(
        wheel.progress(),
        Progress::default(),
        "nothing before a round"
    );
    for delay in [1_000, 3_000] {
        let sent = h
            .send("Jobs", b"job", &timer(property::TIMER_DELAY_MS, delay))
            .await;
        assert_eq!(sent.code, response_code::SUCCESS);
    }
    wheel
        .round(h.broker.background(), h.now_ms + 1_000)
        .unwrap();
    assert_eq!(
        wheel.progress(),
        Progress {
            read_ms: h.now_ms + 1_001,
            indexed: 2
        }
    );
    // Sent after that round: indexed by the next one, so not yet counted.
    let sent = h
        .send("Jobs", b"job", &timer(property::TIMER_DELAY_MS, 2_000))
        .await;
    assert_eq!(sent.code, response_code::SUCCESS);
    assert_eq!(wheel.progress().indexed, 2);
    wheel
        .round(h.broker.background(), h.now_ms + 2_500)
        .unwrap();
    assert_eq!(
        wheel.progress(),
        Progress {
            read_ms: h.now_ms + 2_501,
            indexed: 3
        }
    );
    assert_eq!(delivered(&h, "Jobs").await.len(), 2);
    // A reopened wheel claims nothing until it has delivered what fell due meanwhile.
    let mut wheel = self::wheel(&h);
    assert_eq!(wheel.progress(), Progress::default());
    wheel
        .round(h.broker.background(), h.now_ms + 2_600)
        .unwrap();
    assert_eq!(wheel.progress().read_ms, h.now_ms + 2_601);
}

/// A slave copies its master's progress; promoted, it indexes its whole timer queue and leaves
/// out what the master delivered (whose delivered copies it already holds), and delivers the
/// rest. Without the copy, every timer message in the log would be delivered a second time.
#[tokio::test]
async fn a_promoted_slave_delivers_what_its_master_had_not() {
    let h = Harness::new();
    assert_eq!(h.create_topic("Jobs", 1).await.code, response_code::SUCCESS);
    let mut master = wheel(&h);
    send_jobs(&h, &[1_000, 2_000, 90_000]).await;
    master
        .round(h.broker.background(), h.now_ms + 1_000)
        .unwrap();
    assert_eq!(bodies(&h, "Jobs").await, ["job 0"]);
    let progress = master.progress();
    drop(master);

    // The same log as a slave would hold it: no buckets, no checkpoint of its own, only the
    // master's progress.
    let root = h.broker.background().config.store_root.clone();
    std::fs::remove_dir_all(root.join("timer")).unwrap();
    assert!(record_master_progress(&root, progress).unwrap());
    assert!(
        !record_master_progress(&root, progress).unwrap(),
        "no news, no write"
    );
    let mut promoted = Wheel::open(&root, h.now_ms + 1_500).unwrap();
    for step in (1_500..=91_000).step_by(500) {
        promoted
            .round(h.broker.background(), h.now_ms + step)
            .unwrap();
    }
    assert_eq!(bodies(&h, "Jobs").await, ["job 0", "job 1", "job 2"]);
}
