//! Revives popped messages nobody acknowledged in their invisible time: each is copied to its
//! group's pop retry topic with its reconsume count raised (to the group's dead-letter topic
//! past the retry maximum) and taken out of flight, as RocketMQ's PopReviveService does. The
//! task also writes the pop state every second.

use quiver_store::{AppendError, AppendOutcome, ReadStatus};
use quiver_wire::message::{property, StoredMessage};

use super::{run_step, Owner, Ready};
use crate::pop::{retry_topic, QueueKey, RETRY_MAX_DEFAULT};
use crate::state::Background;
use crate::stored;
use crate::topic::{topic_config, DLQ_PREFIX, PERM_READ, PERM_WRITE};

const POLL_INTERVAL_MS: u64 = 200;
/// Messages revived per append.
const REVIVE_PER_ROUND: usize = 256;

/// Pop revive as a background owner (`schedule.rs`): every 200 ms, ordered queues past their
/// time are popped again, and up to `REVIVE_PER_ROUND` messages past their deadline are copied
/// to their retry (or dead-letter) topic; they leave flight once the store holds the copies.
/// The pop state is written every second.
#[derive(Default)]
pub struct PopRevive {
    /// What the step's batch revives, taken out of flight once it is stored.
    reviving: Vec<(QueueKey, u64)>,
}

impl Owner for PopRevive {
    fn name(&self) -> &'static str {
        "pop revive"
    }

    fn period_ms(&self) -> u64 {
        POLL_INTERVAL_MS
    }

    fn step(&mut self, broker: Background<'_>, now_ms: i64) -> Ready {
        let mut ready = Ready::default();
        for (key, low) in broker.pop.expire_ordered(now_ms) {
            commit_low(broker, &key, low);
        }
        let expired = broker.pop.expired(now_ms, REVIVE_PER_ROUND);
        ready.more = expired.len() >= REVIVE_PER_ROUND;
        let records: Vec<_> = expired
            .iter()
            .filter_map(|(key, offset)| revived_record(broker, key, *offset, now_ms))
            .collect();
        if records.is_empty() {
            // Gone (retention) or damaged, which was logged: nothing to copy, out of flight.
            take_out_of_flight(broker, &expired);
        } else {
            self.reviving = expired;
            ready.append(records, 0);
        }
        ready
    }

    fn stored(
        &mut self,
        broker: Background<'_>,
        _: u64,
        outcome: Result<AppendOutcome, AppendError>,
    ) -> bool {
        let reviving = std::mem::take(&mut self.reviving);
        if outcome.is_ok() {
            take_out_of_flight(broker, &reviving);
        }
        true
    }

    fn persist(&mut self, broker: Background<'_>) -> std::io::Result<()> {
        broker.pop.persist_if_dirty()
    }
}

fn commit_low(broker: Background<'_>, key: &QueueKey, low: u64) {
    broker
        .offsets
        .commit(&key.topic, &key.group, key.queue_id, low as i64);
}

fn take_out_of_flight(broker: Background<'_>, revived: &[(QueueKey, u64)]) {
    for (key, low) in broker.pop.revived(revived) {
        commit_low(broker, &key, low);
    }
}

/// Revives what is past its deadline at `now_ms`, a batch per append until none is left, on
/// this thread (tests and the owner's steps alike).
pub fn revive_due(broker: Background<'_>, now_ms: i64) {
    let mut owner = PopRevive::default();
    while run_step(&mut owner, broker, now_ms) {}
}

/// The copy of a popped message for the retry (or dead-letter) topic; None when the message
/// is gone (retention) or damaged, which is logged and leaves nothing to revive.
fn revived_record(
    broker: Background<'_>,
    key: &QueueKey,
    offset: u64,
    now_ms: i64,
) -> Option<quiver_store::Record> {
    let bytes = read_popped(broker, key, offset)?;
    let (mut message, _) = StoredMessage::decode(&bytes, false).ok()?;
    let reconsume = message.reconsume_times.saturating_add(1);
    let Revival {
        origin,
        target,
        dead,
        retry_max,
    } = revival_target(broker, key, reconsume)?;
    let mut properties = message.properties.clone();
    if message.property(property::ORIGIN_MESSAGE_ID).is_none() {
        if let Some(id) = message.property(property::UNIQ_KEY) {
            properties = stored::with_property(&properties, property::ORIGIN_MESSAGE_ID, &id);
        }
    }
    if message.property(property::FIRST_POP_TIME).is_none() {
        properties =
            stored::with_property(&properties, property::FIRST_POP_TIME, &now_ms.to_string());
    }
    if dead {
        properties = stored::with_property(&properties, property::DLQ_ORIGIN_TOPIC, &origin);
        tracing::warn!(group = %key.group, topic = %origin, offset, "popped message dead-lettered after {retry_max} retries");
    } else {
        message.reconsume_times = reconsume;
    }
    message.properties = properties;
    message.topic = target;
    message.queue_id = 0;
    message.store_timestamp = now_ms;
    message.store_host = broker.store_host;
    stored::record_of(&message).ok()
}

/// The popped message at `offset`, as stored; None when it is gone (retention) or cannot be
/// read, which is logged.
fn read_popped(broker: Background<'_>, key: &QueueKey, offset: u64) -> Option<Vec<u8>> {
    let read = broker.store.read(
        &key.topic,
        key.queue_id as u32,
        offset,
        1,
        64 * 1024 * 1024,
        &|_| true,
    );
    match read {
        Ok(read) if read.status == ReadStatus::Found => Some(read.bytes),
        Ok(read) => {
            tracing::warn!(topic = %key.topic, offset, status = ?read.status, "popped message gone before its revive");
            None
        }
        Err(error) => {
            tracing::error!(topic = %key.topic, offset, %error, "cannot read a popped message to revive it");
            None
        }
    }
}

/// Where a revived message goes.
struct Revival {
    /// The topic it was consumed from (the retry topic's origin for a retry).
    origin: String,
    /// The group's pop retry topic, or its dead-letter topic past the retry maximum.
    target: String,
    dead: bool,
    retry_max: i32,
}

/// Where a message popped from `key` goes back, raised to `reconsume` tries (the group's
/// dead-letter topic past its retryMaxTimes); the target topic is created when missing.
fn revival_target(broker: Background<'_>, key: &QueueKey, reconsume: i32) -> Option<Revival> {
    let retry_prefix = retry_topic(&key.group, "");
    let origin = key
        .topic
        .strip_prefix(&retry_prefix)
        .unwrap_or(&key.topic)
        .to_string();
    // The group's retryMaxTimes (subscription group table), RocketMQ's 16 by default.
    let retry_max = broker
        .groups
        .get(&key.group)
        .map_or(RETRY_MAX_DEFAULT, |group| group.retry_max_times);
    let dead = reconsume > retry_max;
    let target = if dead {
        format!("{DLQ_PREFIX}{}", key.group)
    } else {
        retry_topic(&key.group, &origin)
    };
    match broker
        .topics
        .create_if_absent(topic_config(&target, 1, PERM_READ | PERM_WRITE))
    {
        Ok(true) => broker.topics_changed(),
        Ok(false) => {}
        Err(error) => {
            tracing::error!(topic = %target, %error, "cannot create the pop retry topic");
            return None;
        }
    }
    Some(Revival {
        origin,
        target,
        dead,
        retry_max,
    })
}
