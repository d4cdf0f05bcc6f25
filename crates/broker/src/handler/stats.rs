//! Figures for admin tools: GET_TOPIC_STATS_INFO (202, `mqadmin topicStatus`),
//! GET_CONSUME_STATS (208, `mqadmin consumerProgress`) and GET_TOPIC_CONFIG (351).

use std::collections::BTreeSet;

use quiver_store::ReadStatus;
use quiver_wire::body::{self, MessageQueue};
use quiver_wire::code::response_code;
use quiver_wire::header::{ext_or_err, GetConsumeStatsRequestHeader, TopicHeader};
use quiver_wire::message::StoredMessage;
use quiver_wire::stats::{ConsumeStats, OffsetWrapper, TopicOffset, TopicStatsTable};
use quiver_wire::Command;

use super::{answer, Call, Handled, Refusal};
use crate::state::Administering;

fn topic_missing(topic: &str) -> Refusal {
    Refusal::new(
        response_code::TOPIC_NOT_EXIST,
        format!("topic[{topic}] not exist"),
    )
}

/// Store time of the message at `offset`, 0 when it cannot be read.
fn store_time_at(broker: Administering<'_>, topic: &str, queue_id: u32, offset: u64) -> i64 {
    let read = broker
        .store
        .read(topic, queue_id, offset, 1, 1 << 20, &|_| true);
    match read {
        Ok(read) if read.status == ReadStatus::Found => StoredMessage::decode(&read.bytes, false)
            .map(|(message, _)| message.store_timestamp)
            .unwrap_or(0),
        _ => 0,
    }
}

fn message_queue(broker: Administering<'_>, topic: &str, queue_id: i32) -> MessageQueue {
    MessageQueue {
        topic: topic.to_string(),
        broker_name: broker.config.broker_name.clone(),
        queue_id,
    }
}

pub fn topic_stats(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let header = TopicHeader::from_ext(ext_or_err(request)?)?;
    let shape = broker
        .topics
        .shape(&header.topic)
        .ok_or_else(|| topic_missing(&header.topic))?;
    let mut table = TopicStatsTable::default();
    for queue_id in 0..shape.write_queues.max(0) {
        let bounds = broker.store.bounds(&header.topic, queue_id as u32);
        let last_update_timestamp = match bounds.max_offset {
            0 => 0,
            max => store_time_at(broker, &header.topic, queue_id as u32, max - 1),
        };
        table.offset_table.insert(
            message_queue(broker, &header.topic, queue_id),
            TopicOffset {
                last_update_timestamp,
                max_offset: bounds.max_offset as i64,
                min_offset: bounds.min_offset as i64,
            },
        );
    }
    table.topic_put_tps = broker.counters.topic_tps(&header.topic);
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(table.to_java_json()),
    )
}

pub fn consume_stats(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let header = GetConsumeStatsRequestHeader::from_ext(ext_or_err(request)?)?;
    let committed = broker.offsets.of_group(&header.consumer_group);
    let topics: BTreeSet<String> = match header.topic.as_deref().filter(|t| !t.is_empty()) {
        Some(topic) => BTreeSet::from([topic.to_string()]),
        None => committed.keys().cloned().collect(),
    };
    let mut stats = ConsumeStats::default();
    for topic in &topics {
        let Some(shape) = broker.topics.shape(topic) else {
            continue;
        };
        for queue_id in 0..shape.read_queues.max(0) {
            let bounds = broker.store.bounds(topic, queue_id as u32);
            let consumer_offset = committed
                .get(topic)
                .and_then(|queues| queues.get(&queue_id))
                .copied()
                .unwrap_or(0)
                .max(0);
            let last_timestamp = match consumer_offset {
                0 => 0,
                offset => store_time_at(broker, topic, queue_id as u32, offset as u64 - 1),
            };
            stats.offset_table.insert(
                message_queue(broker, topic, queue_id),
                OffsetWrapper {
                    broker_offset: bounds.max_offset as i64,
                    consumer_offset,
                    last_timestamp,
                    pull_offset: consumer_offset,
                },
            );
        }
    }
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(stats.to_java_json()),
    )
}

pub fn topic_config(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let header = TopicHeader::from_ext(ext_or_err(request)?)?;
    let config = broker
        .topics
        .get(&header.topic)
        .ok_or_else(|| topic_missing(&header.topic))?;
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&config)),
    )
}
