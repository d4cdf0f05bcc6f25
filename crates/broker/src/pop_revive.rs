//! Revives popped messages nobody acknowledged in their invisible time: each is copied to its
//! group's pop retry topic with its reconsume count raised (to the group's dead-letter topic
//! past the retry maximum) and taken out of flight, as RocketMQ's PopReviveService does. The
//! task also writes the pop state every second.

use std::sync::Arc;
use std::time::Duration;

use quiver_store::ReadStatus;
use quiver_wire::message::{property, StoredMessage};
use tokio::sync::watch;

use crate::clock::now_ms;
use crate::pop::{retry_topic, QueueKey, RETRY_MAX_DEFAULT};
use crate::state::Broker;
use crate::stored;
use crate::topic::{topic_config, DLQ_PREFIX, PERM_READ, PERM_WRITE};

const POLL_INTERVAL_MS: u64 = 200;
const PERSIST_EVERY_POLLS: u32 = 5;
/// Messages revived per append.
const REVIVE_PER_ROUND: usize = 256;

pub async fn run(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(POLL_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut polls = 0u32;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tick.tick() => {}
        }
        revive_due(&broker, now_ms()).await;
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(PERSIST_EVERY_POLLS) {
            persist(&broker).await;
        }
    }
    persist(&broker).await;
}

async fn persist(broker: &Arc<Broker>) {
    let owner = broker.clone();
    let result = tokio::task::spawn_blocking(move || owner.pop.persist_if_dirty()).await;
    if let Ok(Err(error)) = result {
        tracing::error!(%error, "could not persist the pop state");
    }
}

/// Revives what is past its deadline at `now_ms`, a batch per append until none is left.
pub async fn revive_due(broker: &Broker, now_ms: i64) {
    for (key, low) in broker.pop.expire_ordered(now_ms) {
        broker
            .offsets
            .commit(&key.topic, &key.group, key.queue_id, low as i64);
    }
    loop {
        let expired = broker.pop.expired(now_ms, REVIVE_PER_ROUND);
        if expired.is_empty() {
            return;
        }
        let mut records = Vec::with_capacity(expired.len());
        for (key, offset) in &expired {
            if let Some(record) = revived_record(broker, key, *offset, now_ms) {
                records.push(record);
            }
        }
        if !records.is_empty() {
            if let Err(error) = stored::append(&broker.store, records).await {
                tracing::warn!(%error, "reviving popped messages failed; will retry");
                return;
            }
        }
        for (key, low) in broker.pop.revived(&expired) {
            broker
                .offsets
                .commit(&key.topic, &key.group, key.queue_id, low as i64);
        }
        if expired.len() < REVIVE_PER_ROUND {
            return;
        }
    }
}

/// The copy of a popped message for the retry (or dead-letter) topic; None when the message
/// is gone (retention) or damaged, which is logged and leaves nothing to revive.
fn revived_record(
    broker: &Broker,
    key: &QueueKey,
    offset: u64,
    now_ms: i64,
) -> Option<quiver_store::Record> {
    let read = broker.store.read(
        &key.topic,
        key.queue_id as u32,
        offset,
        1,
        64 * 1024 * 1024,
        &|_| true,
    );
    let bytes = match read {
        Ok(read) if read.status == ReadStatus::Found => read.bytes,
        Ok(read) => {
            tracing::warn!(topic = %key.topic, offset, status = ?read.status, "popped message gone before its revive");
            return None;
        }
        Err(error) => {
            tracing::error!(topic = %key.topic, offset, %error, "cannot read a popped message to revive it");
            return None;
        }
    };
    let (mut message, _) = StoredMessage::decode(&bytes, false).ok()?;
    let retry_prefix = retry_topic(&key.group, "");
    let origin = key
        .topic
        .strip_prefix(&retry_prefix)
        .unwrap_or(&key.topic)
        .to_string();
    let reconsume = message.reconsume_times.saturating_add(1);
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
