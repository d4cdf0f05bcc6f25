//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): check the request,
//! build stored records and return them for the store; the answer comes when the store has
//! them durable (at once with async flush, after the covering fsync with sync flush).

use std::sync::Arc;

use bytes::Bytes;
use quiver_store::{AppendError, AppendOutcome, FlushStatus, Record};
use quiver_wire::batch::decode_batch;
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{ext_or_err, SendMessageHeader, SendMessageResponseHeader};
use quiver_wire::message::{
    find_property, offset_msg_id, property, push_property, tags_code, SendProperties,
    StoredMessage, PROPERTY_SEPARATOR,
};
use quiver_wire::Command;

use super::retry::MAX_RECONSUME_TIMES_DEFAULT;
use super::{broker_writable, topic_refusal, topic_writable, Call, Handled, Refusal, Reply};
use crate::state::{Broker, Sending};
use crate::topic::{
    topic_config, validate_topic_name, TopicShape, DLQ_PREFIX, NOT_ALLOWED_SEND_TOPICS,
    PERM_INHERIT, RETRY_PREFIX,
};
use crate::{delay, stored, timer, transaction};

/// The answer to a batch lists every message's id (up to 56 characters and a comma each) in
/// one header, and a frame holds 16 MiB: past this many entries the batch is refused before it
/// is stored, not stored and then unanswerable. A batch within the default maxMessageSize
/// (4 MiB of entries of at least 22 bytes) never reaches it.
const BATCH_ENTRIES_MAX: usize = 200_000;
/// RocketMQ's TOPIC_MAX_LENGTH, which batch sends are held to.
const BATCH_TOPIC_BYTES_MAX: usize = 127;
/// Properties are stored with a signed 16-bit length.
const PROPERTIES_BYTES_MAX: usize = i16::MAX as usize;
/// Room for a generated UNIQ_KEY property (32 hex digits and the name), so adding it and
/// CLUSTER to a copy of the properties does not reallocate.
const UNIQ_KEY_BYTES_MAX: usize = 48;
/// The words of KEYS one message may have, each an entry in the key index.
const KEYS_WORDS_MAX: usize = 64;
/// The region and trace switch RocketMQ's broker writes into every message it stores (its
/// `regionId` and `traceOn` defaults). A consumer with message trace on sends no trace record
/// for a message without MSG_REGION.
pub(super) const MSG_REGION: &str = "DefaultRegion";
pub(super) const TRACE_SWITCH: &str = "true";
/// Room for those two properties with their names and separators.
const REGION_AND_TRACE_BYTES: usize = 40;

pub fn send(call: &Call, request: &Command) -> Handled {
    let prepared = prepare(call, request)?;
    Ok(write(call.broker, request, prepared, |answer| answer))
}

/// Writes prepared records, to the topic's ring or through the store, and answers with what
/// `finish` makes of the send's answer once they are written (or failed to be).
pub(super) fn write(
    broker: &Arc<Broker>,
    request: &Command,
    prepared: Prepared,
    finish: impl FnOnce(Command) -> Command + Send + 'static,
) -> Reply {
    let Prepared {
        records,
        queue_id,
        first_uniq_key,
        ..
    } = prepared;
    let broker = broker.clone();
    // Only the opaque and the encoding: the request itself stays with the connection.
    let response = request.response_to(response_code::SUCCESS);
    // A non-persistent topic's records go to its ring in the store, which answers at once:
    // no flush to wait for, and no replica copies them (`AppendOutcome::log_end`).
    Reply::Append {
        records,
        answer: Box::new(move |result| {
            finish(respond(
                broker.sending(),
                response,
                result,
                queue_id,
                first_uniq_key,
            ))
        }),
    }
}

/// A checked send (or reply), its records built and its topic created.
pub(super) struct Prepared {
    records: Vec<Record>,
    /// The header as sent, but with an exhausted retry's topic turned to its dead-letter topic.
    pub header: SendMessageHeader,
    /// The queue the records go to, picked by the broker when the sender left it to it.
    pub queue_id: i32,
    first_uniq_key: Option<String>,
}

/// Checks a send (SEND_REPLY_MESSAGE and its V2 alike) as RocketMQ's send processor does,
/// creates its topic when RocketMQ would, and builds its records.
pub(super) fn prepare(call: &Call, request: &Command) -> Result<Prepared, Refusal> {
    let broker = call.broker.sending();
    let ext = ext_or_err(request)?;
    let long_names = matches!(
        request.code,
        request_code::SEND_MESSAGE | request_code::SEND_REPLY_MESSAGE
    );
    let mut header = if long_names {
        SendMessageHeader::from_v1(ext)?
    } else {
        SendMessageHeader::from_v2(ext)?
    };
    let dead_lettered = redirect_exhausted_retry(&mut header);
    let batch = request.code == request_code::SEND_BATCH_MESSAGE || header.batch;
    check_destination(broker, &header, request.body.len(), call.now_ms)?;
    let shape = topic_shape(broker, &header, dead_lettered)?;
    topic_writable(&header.topic, shape.perm)?;
    // A transaction's half message is stored in the half topic, out of consumers' sight, until
    // END_TRANSACTION or the check decides it (`transaction/`).
    let scanned = SendProperties::scan(&header.properties);
    let half = is_transaction_half(&scanned, header.reconsume_times);
    check_half(&header.topic, half, batch, shape.memory)?;
    let queue_id = target_queue(broker, &header, &shape)?;
    let builder = RecordBuilder {
        broker,
        header: &header,
        queue_id,
        born_host: call.connection.peer,
        now_ms: call.now_ms,
        half,
    };
    let (records, first_uniq_key) = if batch {
        (batch_records(&builder, request)?, None)
    } else {
        let body = request.body.clone();
        let (record, uniq_key) =
            builder.record_scanned(body, &header.properties, &scanned, header.flag)?;
        (vec![record], Some(uniq_key))
    };
    // A delayed message waits in the schedule topic, on disk, and is then stored in its own
    // topic by the delivery task, which writes to the store: a non-persistent topic has
    // neither, so the send is refused rather than stored where it would not be served.
    if shape.memory && records.iter().any(|record| record.topic != header.topic) {
        let remark = format!(
            "topic[{}] is non-persistent: delayed messages need a persistent topic",
            header.topic
        );
        return Err(Refusal::new(response_code::MESSAGE_ILLEGAL, remark));
    }
    Ok(Prepared {
        records,
        header,
        queue_id,
        first_uniq_key,
    })
}

/// The broker takes sends, the topic is one a client may send to, and the body fits.
fn check_destination(
    broker: Sending<'_>,
    header: &SendMessageHeader,
    body_bytes: usize,
    now_ms: i64,
) -> Result<(), Refusal> {
    broker_writable(broker, now_ms)?;
    validate_topic_name(&header.topic)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    if NOT_ALLOWED_SEND_TOPICS.contains(&header.topic.as_str()) {
        let remark = format!("Sending message to topic[{}] is forbidden.", header.topic);
        return Err(Refusal::new(response_code::NO_PERMISSION, remark));
    }
    if body_bytes > broker.config.max_message_bytes {
        let remark = format!(
            "the message body size {body_bytes} bytes is over the limit of {} bytes (maxMessageSize)",
            broker.config.max_message_bytes
        );
        return Err(Refusal::new(response_code::MESSAGE_ILLEGAL, remark));
    }
    Ok(())
}

/// A half message is one message, to a persistent topic.
fn check_half(topic: &str, half: bool, batch: bool, memory: bool) -> Result<(), Refusal> {
    if half && batch {
        return Err(Refusal::new(
            response_code::MESSAGE_ILLEGAL,
            "batch messages cannot be transactional",
        ));
    }
    if half && memory {
        let remark = format!(
            "topic[{topic}] is non-persistent: transactional messages need a persistent topic"
        );
        return Err(Refusal::new(response_code::MESSAGE_ILLEGAL, remark));
    }
    Ok(())
}

/// Jump consistent hashing (Lamping and Veach), as Guava's `Hashing.consistentHash` computes it:
/// RocketMQ's proxy places a message group on the queue it gives for the group's Java hash, so
/// a group lands on the same queue whichever of the two takes its sends.
fn consistent_hash(input: i64, buckets: i32) -> i32 {
    let mut state = input;
    let mut candidate: i32 = 0;
    loop {
        state = state
            .wrapping_mul(2_862_933_555_777_941_757)
            .wrapping_add(1);
        let next_double = f64::from(((state as u64) >> 33) as i32 + 1) / f64::from(1u32 << 31);
        let next = (f64::from(candidate + 1) / next_double) as i64;
        if next >= 0 && next < i64::from(buckets) {
            candidate = next as i32;
        } else {
            return candidate;
        }
    }
}

/// The queue the send names, or one the broker picks when it names none (the gRPC front end's
/// sends): the message group's own queue for a FIFO message, so that a group's messages stay
/// in order, else the next in turn.
fn target_queue(
    broker: Sending<'_>,
    header: &SendMessageHeader,
    shape: &crate::topic::TopicShape,
) -> Result<i32, Refusal> {
    let group = find_property(&header.properties, property::SHARDING_KEY);
    let queue_id = match (header.queue_id, group) {
        (id, _) if id >= 0 => id,
        (_, Some(group)) if shape.write_queues > 0 => {
            let hash = quiver_wire::java_string_hash(group);
            consistent_hash(i64::from(hash), shape.write_queues)
        }
        _ => broker.pick_queue(shape.write_queues),
    };
    if queue_id >= shape.write_queues.max(shape.read_queues) {
        let remark = format!(
            "request queueId[{queue_id}] is illegal, topic {} has {} queues",
            header.topic, shape.write_queues
        );
        return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
    }
    Ok(queue_id)
}

/// The records of a batch send, checked as RocketMQ checks a batch.
fn batch_records(builder: &RecordBuilder, request: &Command) -> Result<Vec<Record>, Refusal> {
    let topic = &builder.header.topic;
    if topic.starts_with(RETRY_PREFIX) {
        return Err(Refusal::new(
            response_code::MESSAGE_ILLEGAL,
            "batch messages cannot be sent to a retry topic",
        ));
    }
    // RocketMQ holds a batch's topic to the plain limit, dead-letter topics included.
    if topic.len() > BATCH_TOPIC_BYTES_MAX {
        return Err(Refusal::new(
            response_code::MESSAGE_ILLEGAL,
            format!("message topic length too long {}", topic.len()),
        ));
    }
    let entries = decode_batch(&request.body).map_err(|e| {
        Refusal::new(
            response_code::MESSAGE_ILLEGAL,
            format!("bad batch body: {e}"),
        )
    })?;
    if entries.is_empty() {
        return Err(Refusal::new(response_code::MESSAGE_ILLEGAL, "empty batch"));
    }
    if entries.len() > BATCH_ENTRIES_MAX {
        return Err(Refusal::new(
            response_code::MESSAGE_ILLEGAL,
            format!(
                "a batch of {} messages: at most {BATCH_ENTRIES_MAX} fit in one answer",
                entries.len()
            ),
        ));
    }
    let mut records = Vec::with_capacity(entries.len());
    for entry in entries {
        records.push(builder.record(entry.body, &entry.properties, entry.flag)?.0);
    }
    Ok(records)
}

/// A transaction's half message (TRAN_MSG), unless it is a consumer's retry of one.
fn is_transaction_half(properties: &SendProperties, reconsume_times: i32) -> bool {
    let half = properties
        .transaction
        .is_some_and(|flag| flag.eq_ignore_ascii_case("true"));
    let delay_level = properties
        .delay
        .and_then(|level| level.parse::<i32>().ok())
        .unwrap_or(0);
    half && !(reconsume_times > 0 && delay_level > 0)
}

/// A retry copy that a consumer sent itself (when CONSUMER_SEND_MSG_BACK failed) and that has
/// used up its reconsume budget goes to the group's dead-letter topic, as in RocketMQ.
/// Returns whether it redirected the send there.
fn redirect_exhausted_retry(header: &mut SendMessageHeader) -> bool {
    let Some(group) = header.topic.strip_prefix(RETRY_PREFIX) else {
        return false;
    };
    let max = header
        .max_reconsume_times
        .filter(|times| *times >= 0)
        .unwrap_or(MAX_RECONSUME_TIMES_DEFAULT);
    if header.reconsume_times > max {
        header.topic = format!("{DLQ_PREFIX}{group}");
        header.queue_id = 0;
        header.properties = stored::without_property(&header.properties, property::DELAY);
        return true;
    }
    false
}

/// The topic's shape, creating it first when RocketMQ would: retry topics always (one queue),
/// a dead-letter topic when this send was redirected to it, others from the producer's default
/// topic (TBW102) when auto-create is on.
fn topic_shape(
    broker: Sending<'_>,
    header: &SendMessageHeader,
    dead_lettered: bool,
) -> Result<TopicShape, Refusal> {
    if let Some(shape) = broker.topics.shape(&header.topic) {
        return Ok(shape);
    }
    let config = if header.topic.starts_with(RETRY_PREFIX)
        || (dead_lettered && header.topic.starts_with(DLQ_PREFIX))
    {
        topic_config(&header.topic, 1, 6)
    } else {
        let template = broker
            .topics
            .shape(&header.default_topic)
            .filter(|t| broker.live.auto_create_topic() && t.perm & PERM_INHERIT != 0);
        let Some(template) = template else {
            let remark = format!("topic[{}] not exist, apply first please!", header.topic);
            return Err(Refusal::new(response_code::TOPIC_NOT_EXIST, remark));
        };
        let queues = header
            .default_topic_queue_nums
            .clamp(1, template.write_queues.max(1));
        topic_config(&header.topic, queues, template.perm & !PERM_INHERIT)
    };
    match broker.topics.create_if_absent(config) {
        Ok(true) => {
            tracing::info!(topic = %header.topic, "topic created on first send");
            broker.topics_changed();
        }
        Ok(false) => {}
        Err(error) => return Err(topic_refusal(error, response_code::TOPIC_NOT_EXIST)),
    }
    broker.topics.shape(&header.topic).ok_or_else(|| {
        Refusal::new(
            response_code::SYSTEM_ERROR,
            "topic vanished while being created",
        )
    })
}

struct RecordBuilder<'a> {
    broker: Sending<'a>,
    header: &'a SendMessageHeader,
    queue_id: i32,
    born_host: std::net::SocketAddr,
    now_ms: i64,
    /// A transaction's half message: stored in the half topic, neither delayed nor timed.
    half: bool,
}

impl RecordBuilder<'_> {
    /// One stored record, with UNIQ_KEY, CLUSTER, MSG_REGION and TRACE_ON added and POP_CK
    /// removed as the Java broker does. Returns the record and its UNIQ_KEY.
    fn record(
        &self,
        body: Bytes,
        raw_properties: &str,
        flag: i32,
    ) -> Result<(Record, String), Refusal> {
        let found = SendProperties::scan(raw_properties);
        self.record_scanned(body, raw_properties, &found, flag)
    }

    /// `record`, with `raw_properties` scanned already (a single send's header was, to tell a
    /// half message).
    fn record_scanned(
        &self,
        body: Bytes,
        raw_properties: &str,
        found: &SendProperties,
        flag: i32,
    ) -> Result<(Record, String), Refusal> {
        // Adding properties or dropping POP_CK changes none of the values read here.
        let (properties, uniq_key) = self.stored_properties(raw_properties, found);
        if properties.len() > PROPERTIES_BYTES_MAX {
            let remark = format!(
                "message properties of {} bytes exceed {PROPERTIES_BYTES_MAX}",
                properties.len()
            );
            return Err(Refusal::new(response_code::MESSAGE_ILLEGAL, remark));
        }
        let tags = found.tags.map_or(0, tags_code);
        let keys = stored::keys_of(found.keys, Some(&uniq_key));
        // Each word of KEYS is an index entry: a send may not make thousands.
        if keys.len() > KEYS_WORDS_MAX + 1 {
            let remark = format!(
                "KEYS holds {} words; a message may have at most {KEYS_WORDS_MAX}",
                keys.len() - 1
            );
            return Err(Refusal::new(response_code::MESSAGE_ILLEGAL, remark));
        }
        let mut message = StoredMessage {
            queue_id: self.queue_id,
            flag,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: self.header.sys_flag,
            born_timestamp: self.header.born_timestamp,
            born_host: self.born_host,
            store_timestamp: self.now_ms,
            store_host: self.broker.store_host,
            reconsume_times: self.header.reconsume_times,
            prepared_transaction_offset: 0,
            body,
            topic: self.header.topic.clone(),
            properties,
        };
        // A delayed message waits in its level's schedule queue; its tag code is the due time.
        let levels = &self.broker.config.delay_levels_ms;
        let tags = if self.half {
            transaction::to_half(&mut message);
            tags
        } else {
            match delay::level_of(found.delay, levels) {
                Some(level) => delay::schedule(&mut message, level, levels),
                None if !found.timer => tags,
                None => match self.timer_due(&message.properties)? {
                    // A timer message waits in the timer queue; its tag code is the due time.
                    Some(due) => timer::schedule(&mut message, due),
                    None => tags,
                },
            }
        };
        let record = stored::record_with(&message, tags, keys)
            .map_err(|e| Refusal::new(response_code::MESSAGE_ILLEGAL, e))?;
        Ok((record, uniq_key))
    }

    /// When a RocketMQ 5 timer message falls due, if it is one and its time is still ahead;
    /// refused as RocketMQ refuses it (MESSAGE_ILLEGAL) when its time is not a number, too far
    /// ahead (`timerMaxDelaySec`), or timers are off (`timerWheelEnable=false`).
    fn timer_due(&self, properties: &str) -> Result<Option<i64>, Refusal> {
        let config = &self.broker.config;
        // A message the wheel delivers is not scheduled again.
        if self.header.topic == timer::TIMER_TOPIC
            || find_property(properties, property::TIMER_OUT_MS).is_some()
        {
            return Ok(None);
        }
        let due = timer::due_time(properties, self.now_ms)
            .map_err(|e| Refusal::new(response_code::MESSAGE_ILLEGAL, e))?;
        let Some(due) = due.filter(|due| *due > self.now_ms) else {
            return Ok(None);
        };
        if !config.timer_wheel_enable {
            return Err(Refusal::new(
                response_code::MESSAGE_ILLEGAL,
                "accurate timer message is not enabled, timerWheelEnable is false",
            ));
        }
        let max_ms = config.timer_max_delay_sec.saturating_mul(1_000);
        if (due - self.now_ms) as u64 > max_ms {
            let remark = format!(
                "timer message illegal, the delay time should not be bigger than the max delay \
                 {max_ms}ms (timerMaxDelaySec={})",
                config.timer_max_delay_sec
            );
            return Err(Refusal::new(response_code::MESSAGE_ILLEGAL, remark));
        }
        Ok(Some(due))
    }

    fn stored_properties(&self, raw: &str, found: &SendProperties<'_>) -> (String, String) {
        let extra = UNIQ_KEY_BYTES_MAX
            + self.broker.config.cluster_name.len()
            + REGION_AND_TRACE_BYTES
            + 32;
        let mut properties = if found.pop_ck {
            let kept = quiver_wire::message::decode_properties(raw);
            quiver_wire::message::encode_properties(
                kept.iter()
                    .filter(|(k, _)| k != property::POP_CK)
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
        } else {
            let mut copy = String::with_capacity(raw.len() + extra);
            copy.push_str(raw);
            copy
        };
        let end = char::from(PROPERTY_SEPARATOR);
        if !properties.is_empty() && !properties.ends_with(end) {
            properties.push(end);
        }
        let uniq_key = match found.uniq_key {
            Some(existing) => existing.to_string(),
            None => {
                let generated = self.broker.new_uniq_id(self.now_ms);
                push_property(&mut properties, property::UNIQ_KEY, &generated);
                generated
            }
        };
        if found.cluster.is_none() {
            push_property(
                &mut properties,
                property::CLUSTER,
                &self.broker.config.cluster_name,
            );
        }
        if found.msg_region.is_none() {
            push_property(&mut properties, property::MSG_REGION, MSG_REGION);
        }
        if found.trace_switch.is_none() {
            push_property(&mut properties, property::TRACE_SWITCH, TRACE_SWITCH);
        }
        (properties, uniq_key)
    }
}

fn respond(
    broker: Sending<'_>,
    mut response: Command,
    result: Result<AppendOutcome, AppendError>,
    queue_id: i32,
    first_uniq_key: Option<String>,
) -> Command {
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(error) => {
            let code = match error {
                AppendError::Busy { .. } => response_code::SYSTEM_BUSY,
                AppendError::TooLarge { .. } => response_code::MESSAGE_ILLEGAL,
                AppendError::DiskFull(_) | AppendError::NotWritable(_) | AppendError::Closed => {
                    response_code::SERVICE_NOT_AVAILABLE
                }
                AppendError::Malformed(_) | AppendError::Io(_) => response_code::SYSTEM_ERROR,
            };
            let remark = match error {
                // Java's wording first, so operators' alerts on it keep working.
                AppendError::DiskFull(_) => format!(
                    "service not available now: the broker's disk is full, sends are refused \
                     until space is freed ({error})"
                ),
                // RocketMQ answers SERVICE_NOT_AVAILABLE while its store is not writable.
                AppendError::NotWritable(_) => format!(
                    "service not available now: the broker's store is not writable, sends are \
                     refused until a write to its disk succeeds again ({error})"
                ),
                _ => error.to_string(),
            };
            response.code = code;
            return response.with_remark(remark);
        }
    };
    broker.counters.messages_put.fetch_add(
        outcome.entries.len() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    let msg_id = outcome
        .entries
        .iter()
        .map(|entry| offset_msg_id(broker.store_host, entry.position as i64))
        .collect::<Vec<_>>()
        .join(",");
    let first = outcome.entries.first().copied();
    let header = SendMessageResponseHeader {
        msg_id,
        queue_id,
        queue_offset: first.map(|e| e.queue_offset as i64).unwrap_or(0),
        transaction_id: first_uniq_key,
    };
    let code = match outcome.flush {
        FlushStatus::Ok => response_code::SUCCESS,
        FlushStatus::TimedOut => response_code::FLUSH_DISK_TIMEOUT,
    };
    response.code = code;
    response.with_ext(header.to_ext())
}

#[cfg(test)]
mod tests {
    use super::consistent_hash;

    /// Jump hashing's defining property: with one more queue, a key either stays where it
    /// was or moves to the new queue, so few groups move when a topic grows.
    #[test]
    fn a_group_stays_on_its_queue_or_moves_to_the_new_one_when_queues_are_added() {
        for group in 0..2_000i64 {
            let input = group.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as i64);
            assert_eq!(consistent_hash(input, 1), 0);
            for queues in 1..64 {
                let before = consistent_hash(input, queues);
                let after = consistent_hash(input, queues + 1);
                assert!((0..queues).contains(&before));
                assert!(
                    after == before || after == queues,
                    "{group}: {before} -> {after}"
                );
            }
        }
    }

    #[test]
    fn groups_spread_over_the_queues() {
        let mut counts = [0u32; 8];
        for group in 0..8_000 {
            let hash = quiver_wire::java_string_hash(&format!("group-{group}"));
            counts[consistent_hash(i64::from(hash), 8) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&n| (700..1_300).contains(&n)),
            "{counts:?}"
        );
    }
}
