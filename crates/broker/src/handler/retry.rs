//! CONSUMER_SEND_MSG_BACK (36): a consumer could not consume a message. The broker looks the
//! original up by its CommitLog position and stores a copy for the group's retry topic, delayed
//! by a RocketMQ delay level (3 + reconsume times unless the consumer asks for one), or in the
//! group's dead-letter topic once the message has been retried `maxReconsumeTimes` times.

use quiver_store::Record;
use quiver_wire::code::response_code;
use quiver_wire::header::{ext_or_err, ConsumerSendMsgBackRequestHeader};
use quiver_wire::message::{property, StoredMessage};
use quiver_wire::Command;

use super::{broker_writable, topic_refusal, topic_writable, Call, Handled, Refusal, Reply};
use crate::state::Sending;
use crate::topic::{topic_config, DLQ_PREFIX, RETRY_PREFIX};
use crate::{delay, stored};

/// A group's retry budget when the consumer does not send one (RocketMQ's `retryMaxTimes`).
pub(super) const MAX_RECONSUME_TIMES_DEFAULT: i32 = 16;
/// The first automatic retry uses level 3 (10 s with the default levels), the next 4, ...
const FIRST_RETRY_LEVEL: i32 = 3;

pub fn send_back(call: &Call, request: &Command) -> Handled {
    let (record, destination) = prepare(call, request)?;
    let response = request.response_to(response_code::SUCCESS);
    Ok(Reply::Append {
        records: vec![record],
        answer: Box::new(move |result| match result {
            Ok(_) => response,
            Err(error) => {
                let remark = format!("storing the copy for {destination} failed: {error}");
                response
                    .response_to(response_code::SYSTEM_ERROR)
                    .with_remark(remark)
            }
        }),
    })
}

fn prepare(call: &Call, request: &Command) -> Result<(Record, String), Refusal> {
    let broker = call.broker.sending();
    let header = ConsumerSendMsgBackRequestHeader::from_ext(ext_or_err(request)?)?;
    // As a send; the Java consumer then sends the retry through its producer instead.
    broker_writable(broker, call.now_ms)?;
    let position = u64::try_from(header.offset).map_err(|_| {
        let remark = format!("offset {} is negative", header.offset);
        Refusal::new(response_code::SYSTEM_ERROR, remark)
    })?;
    let bytes = broker.store.read_record(position).map_err(|e| {
        let remark = format!("look message by offset {position} failed: {e}");
        Refusal::new(response_code::SYSTEM_ERROR, remark)
    })?;
    let (original, _) = StoredMessage::decode(&bytes, false).map_err(|e| {
        let remark = format!("message at offset {position} is unreadable: {e}");
        Refusal::new(response_code::SYSTEM_ERROR, remark)
    })?;
    // A negative budget dead-letters at once, as in RocketMQ (Java clients send 16 for -1).
    // A request without one takes the group's retryMaxTimes, as RocketMQ's does.
    let max_reconsume_times = header.max_reconsume_times.unwrap_or_else(|| {
        broker
            .groups
            .find_with(&header.group, call.now_ms, |group| group.retry_max_times)
            .unwrap_or(MAX_RECONSUME_TIMES_DEFAULT)
    });
    let dead = original.reconsume_times >= max_reconsume_times || header.delay_level < 0;
    let destination = if dead {
        format!("{DLQ_PREFIX}{}", header.group)
    } else {
        format!("{RETRY_PREFIX}{}", header.group)
    };
    ensure_topic(broker, &destination)?;

    let mut copy = original.clone();
    let mut properties = copy.properties.clone();
    if copy.property(property::RETRY_TOPIC).is_none() {
        properties = stored::with_property(&properties, property::RETRY_TOPIC, &original.topic);
    }
    if copy.property(property::ORIGIN_MESSAGE_ID).is_none() {
        let origin = header
            .origin_msg_id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| original.offset_msg_id());
        properties = stored::with_property(&properties, property::ORIGIN_MESSAGE_ID, &origin);
    }
    copy.properties = stored::without_property(&properties, property::DELAY);
    copy.topic = destination.clone();
    copy.queue_id = 0;
    // Producer-supplied: a stored i32::MAX must not overflow.
    copy.reconsume_times = original.reconsume_times.saturating_add(1);
    copy.store_timestamp = call.now_ms;
    copy.store_host = broker.store_host;
    let record = if dead {
        stored::record_of(&copy)
    } else {
        let levels = &broker.config.delay_levels_ms;
        let asked = match header.delay_level {
            0 => FIRST_RETRY_LEVEL.saturating_add(original.reconsume_times),
            level => level,
        };
        let level = (asked.max(1) as usize).min(levels.len());
        let deliver_ms = delay::schedule(&mut copy, level, levels);
        stored::record_with_tags_code(&copy, deliver_ms)
    }
    .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e))?;
    Ok((record, destination))
}

/// Retry and dead-letter topics have one queue, readable and writable, and are made on demand;
/// one an operator closed to writes refuses the copy.
fn ensure_topic(broker: Sending<'_>, topic: &str) -> Result<(), Refusal> {
    match broker.topics.create_if_absent(topic_config(topic, 1, 6)) {
        Ok(true) => broker.topics_changed(),
        Ok(false) => {}
        Err(error) => return Err(topic_refusal(error, response_code::SYSTEM_ERROR)),
    }
    match broker.topics.shape(topic) {
        Some(shape) => topic_writable(topic, shape.perm),
        None => Ok(()),
    }
}
