//! Consumer offsets and queue bounds: QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET,
//! SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME, and an admin's reset of a group's
//! offsets (INVOKE_BROKER_TO_RESET_OFFSET).

use std::collections::BTreeMap;

use quiver_store::Boundary;
use quiver_wire::body::MessageQueue;
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{
    ext_or_err, OffsetResponseHeader, QueryConsumerOffsetRequestHeader, ResetOffsetRequestHeader,
    SearchOffsetRequestHeader, TimestampResponseHeader, TopicQueueHeader,
    UpdateConsumerOffsetRequestHeader,
};
use quiver_wire::stats::ResetOffsetBody;
use quiver_wire::{Command, ExtFields};

use super::{answer, group_refusal, off_the_workers, Call, Handled, Refusal};
use crate::pop::QueueKey;
use crate::state::Pulling;
use crate::topic::validate_group_name;

fn queue_id(id: i32) -> Result<u32, Refusal> {
    u32::try_from(id).map_err(|_| {
        Refusal::new(
            response_code::INVALID_PARAMETER,
            format!("queueId {id} is negative"),
        )
    })
}

fn offset_response(request: &Command, offset: u64) -> Command {
    let header = OffsetResponseHeader {
        offset: offset as i64,
    };
    request
        .response_to(response_code::SUCCESS)
        .with_ext(header.to_ext())
}

/// No stored offset is QUERY_NOT_FOUND: the client then starts where its consume-from policy
/// says. (Java answers 0 instead when the queue still holds offset 0 in memory; we keep the
/// documented meaning of CONSUME_FROM_LAST_OFFSET.)
pub fn query_consumer_offset(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.pulling();
    let header = QueryConsumerOffsetRequestHeader::from_ext(ext_or_err(request)?)?;
    match broker
        .offsets
        .get(&header.topic, &header.consumer_group, header.queue_id)
    {
        Some(offset) => answer(offset_response(request, offset.max(0) as u64)),
        None => answer(
            request
                .response_to(response_code::QUERY_NOT_FOUND)
                .with_remark("Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"),
        ),
    }
}

pub fn update_consumer_offset(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.pulling();
    let header = UpdateConsumerOffsetRequestHeader::from_ext(ext_or_err(request)?)?;
    validate_group_name(&header.consumer_group)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    if header.commit_offset < 0 {
        return Err(Refusal::new(
            response_code::INVALID_PARAMETER,
            "commitOffset is negative",
        ));
    }
    // As RocketMQ: offsets only for groups and topics this broker has (a push consumer's retry
    // topic is created by its first heartbeat), so the persisted table cannot fill with
    // made-up names. A group is created here when autoCreateSubscriptionGroup allows.
    broker
        .groups
        .lookup(&header.consumer_group, call.now_ms, |_| ())
        .map_err(|missing| group_refusal(&header.consumer_group, missing))?;
    let Some(shape) = broker.topics.shape(&header.topic) else {
        return Err(Refusal::new(
            response_code::TOPIC_NOT_EXIST,
            format!("Topic {} not exist!", header.topic),
        ));
    };
    // Only the queues the topic has, as a pull checks them: an offset for any queue id would
    // let a consumer fill the table (and its file) with queues that do not exist.
    if header.queue_id < 0 || header.queue_id >= shape.read_queues {
        let remark = format!(
            "queueId[{}] is illegal, topic {} has {} read queues",
            header.queue_id, header.topic, shape.read_queues
        );
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    // An admin reset of this queue waits for the group's next pull: this commit carries the
    // offset from before it and would undo it (RocketMQ ignores it the same way).
    if broker
        .offsets
        .reset_pending(&header.topic, &header.consumer_group, header.queue_id)
    {
        return answer(
            request
                .response_to(response_code::SUCCESS)
                .with_remark("Offset has been previously reset"),
        );
    }
    broker.offsets.commit(
        &header.topic,
        &header.consumer_group,
        header.queue_id,
        header.commit_offset,
    );
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_ext(ExtFields::new()),
    )
}

pub fn max_offset(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.pulling();
    let header = TopicQueueHeader::from_ext(ext_or_err(request)?)?;
    let bounds = broker
        .store
        .bounds(&header.topic, queue_id(header.queue_id)?);
    answer(offset_response(request, bounds.max_offset))
}

pub fn min_offset(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.pulling();
    let header = TopicQueueHeader::from_ext(ext_or_err(request)?)?;
    let bounds = broker
        .store
        .bounds(&header.topic, queue_id(header.queue_id)?);
    answer(offset_response(request, bounds.min_offset))
}

pub fn search_offset_by_timestamp(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.pulling();
    let header = SearchOffsetRequestHeader::from_ext(ext_or_err(request)?)?;
    let boundary = match header
        .boundary_type
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("lower") => Boundary::Lower,
        Some("upper") => Boundary::Upper,
        Some(other) => {
            return Err(Refusal::new(
                response_code::INVALID_PARAMETER,
                format!("boundaryType {other} is not lower or upper"),
            ))
        }
    };
    let queue = queue_id(header.queue_id)?;
    let offset = broker
        .store
        .offset_by_time(&header.topic, queue, header.timestamp, boundary)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    answer(offset_response(request, offset))
}

pub fn earliest_store_time(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.pulling();
    let header = TopicQueueHeader::from_ext(ext_or_err(request)?)?;
    let queue = queue_id(header.queue_id)?;
    let time = broker
        .store
        .earliest_time(&header.topic, queue)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    let header = TimestampResponseHeader {
        timestamp: time.unwrap_or(-1),
    };
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_ext(header.to_ext()),
    )
}

/// The offset of the first message of the queue stored at or after `timestamp`; a negative
/// timestamp means the queue's end (mqadmin's "now").
fn offset_at(broker: Pulling<'_>, topic: &str, queue: u32, timestamp: i64) -> Result<i64, Refusal> {
    if timestamp < 0 {
        return Ok(broker.store.bounds(topic, queue).max_offset as i64);
    }
    let offset = broker
        .store
        .offset_by_time(topic, queue, timestamp, Boundary::Lower)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    Ok(offset as i64)
}

/// INVOKE_BROKER_TO_RESET_OFFSET (`mqadmin resetOffsetByTime`). With
/// `useServerSideResetOffset` (RocketMQ 5's default) the stored offsets change at once and each
/// queue's next pull by the group is told to move there (PULL_OFFSET_MOVED), so running and
/// stopped consumers alike start from the reset; the group's pop cursors move at once too
/// (`PopState::reset`), so its next pop of each queue reads from the reset. Without it, as
/// RocketMQ 4 did, the offsets are sent to the group's running consumers with
/// RESET_CONSUMER_CLIENT_OFFSET (lowered only, unless forced), and a group with none running
/// gets CONSUMER_NOT_ONLINE, on which mqadmin sets the stored offsets itself.
///
/// Worked out off the runtime's workers: each queue's offset by time is a search of its
/// ConsumeQueue and CommitLog, which may read the disk, for every queue of the topic.
pub fn reset_offset(call: &Call, request: &Command) -> Handled {
    let header = ResetOffsetRequestHeader::from_ext(ext_or_err(request)?)?;
    off_the_workers(call, request, move |broker, request| {
        reset(broker.pulling(), request, &header)
    })
}

fn reset(
    broker: Pulling<'_>,
    request: &Command,
    header: &ResetOffsetRequestHeader,
) -> Result<Command, Refusal> {
    if broker.replication.is_slave() {
        return Err(Refusal::new(
            response_code::SYSTEM_ERROR,
            "Can not reset offset in slave broker",
        ));
    }
    let Some(shape) = broker.topics.shape(&header.topic) else {
        let remark = format!("Topic {} does not exist", header.topic);
        return Err(Refusal::new(response_code::TOPIC_NOT_EXIST, remark));
    };
    if broker.groups.get(&header.group).is_none() {
        let remark = format!("Group {} does not exist", header.group);
        return Err(Refusal::new(
            response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
            remark,
        ));
    }
    let targets = reset_targets(broker, header, shape.read_queues)?;
    if targets.is_empty() {
        return Err(Refusal::new(
            response_code::SYSTEM_ERROR,
            "No queues to reset.",
        ));
    }
    if broker.config.use_server_side_reset_offset {
        return Ok(reset_on_the_broker(broker, request, header, &targets));
    }
    reset_by_the_consumers(broker, request, header, &targets)
}

/// Queue id -> the offset a reset moves it to: the one the request names (which must be within
/// the queue), or the first stored at or after its timestamp, for one queue or all.
fn reset_targets(
    broker: Pulling<'_>,
    header: &ResetOffsetRequestHeader,
    read_queues: i32,
) -> Result<BTreeMap<i32, i64>, Refusal> {
    let mut targets = BTreeMap::new();
    if header.queue_id < 0 {
        for queue in 0..read_queues.max(0) {
            let offset = offset_at(broker, &header.topic, queue as u32, header.timestamp)?;
            targets.insert(queue, offset);
        }
        return Ok(targets);
    }
    let queue = queue_id(header.queue_id)?;
    let offset = match header.offset.filter(|offset| *offset != -1) {
        Some(offset) => {
            let bounds = broker.store.bounds(&header.topic, queue);
            if offset < bounds.min_offset as i64 || offset > bounds.max_offset as i64 {
                let remark = format!(
                    "Target offset {offset} not in consume queue range [{}-{}]",
                    bounds.min_offset, bounds.max_offset
                );
                return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
            }
            offset
        }
        None => offset_at(broker, &header.topic, queue, header.timestamp)?,
    };
    targets.insert(header.queue_id, offset);
    Ok(targets)
}

fn reset_queue(broker: Pulling<'_>, topic: &str, queue_id: i32) -> MessageQueue {
    MessageQueue {
        topic: topic.to_string(),
        broker_name: broker.config.broker_name.clone(),
        queue_id,
    }
}

/// RocketMQ 5's way (`useServerSideResetOffset`): the stored offsets and the group's pop
/// cursors move now, and each queue's next pull is told to move.
fn reset_on_the_broker(
    broker: Pulling<'_>,
    request: &Command,
    header: &ResetOffsetRequestHeader,
    targets: &BTreeMap<i32, i64>,
) -> Command {
    let mut body = ResetOffsetBody::default();
    let mut pop_cursors = 0;
    for (&queue, &offset) in targets {
        broker
            .offsets
            .assign_reset(&header.topic, &header.group, queue, offset);
        let key = QueueKey {
            group: header.group.clone(),
            topic: header.topic.clone(),
            queue_id: queue,
        };
        pop_cursors += usize::from(broker.pop.reset(&key, offset.max(0) as u64));
        body.offset_table
            .insert(reset_queue(broker, &header.topic, queue), offset);
    }
    tracing::info!(topic = %header.topic, group = %header.group, queues = targets.len(), pop_cursors, timestamp = header.timestamp, "consumer offsets reset");
    request
        .response_to(response_code::SUCCESS)
        .with_body(body.to_java_json())
}

/// RocketMQ 4's way: the consumers are told to move (only back, unless forced); the broker's
/// table follows their next commits.
fn reset_by_the_consumers(
    broker: Pulling<'_>,
    request: &Command,
    header: &ResetOffsetRequestHeader,
    targets: &BTreeMap<i32, i64>,
) -> Result<Command, Refusal> {
    let mut body = ResetOffsetBody::default();
    for (&queue, &target) in targets {
        let Some(committed) = broker.offsets.get(&header.topic, &header.group, queue) else {
            let remark = format!("THe consumer group <{}> not exist", header.group);
            return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
        };
        let offset = if header.is_force || target < committed {
            target
        } else {
            committed
        };
        body.offset_table
            .insert(reset_queue(broker, &header.topic, queue), offset);
    }
    let consumers = broker.clients.consumers(&header.group);
    if consumers.is_empty() {
        let remark = format!(
            "Consumer not online, so can not reset offset, Group: {} Topic: {} Timestamp: {}",
            header.group, header.topic, header.timestamp
        );
        return Err(Refusal::new(response_code::CONSUMER_NOT_ONLINE, remark));
    }
    let told = ResetOffsetRequestHeader {
        offset: None,
        queue_id: -1,
        ..header.clone()
    };
    let json = body.to_java_json();
    for (client_id, connection) in consumers {
        let request =
            Command::request(request_code::RESET_CONSUMER_CLIENT_OFFSET, request.encoding)
                .with_ext(told.to_ext())
                .with_body(json.clone());
        if !connection.send_oneway(request) {
            tracing::warn!(%client_id, group = %header.group, "could not tell a consumer of an offset reset");
        }
    }
    Ok(request.response_to(response_code::SUCCESS).with_body(json))
}
