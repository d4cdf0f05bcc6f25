//! Consumer offsets and queue bounds: QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET,
//! SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME.

use quiver_store::Boundary;
use quiver_wire::code::response_code;
use quiver_wire::header::{
    ext_or_err, OffsetResponseHeader, QueryConsumerOffsetRequestHeader, SearchOffsetRequestHeader,
    TimestampResponseHeader, TopicQueueHeader, UpdateConsumerOffsetRequestHeader,
};
use quiver_wire::{Command, ExtFields};

use super::{answer, Call, Handled, Refusal};
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
    let broker = call.broker;
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
    let broker = call.broker;
    let header = UpdateConsumerOffsetRequestHeader::from_ext(ext_or_err(request)?)?;
    validate_group_name(&header.consumer_group)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    if header.commit_offset < 0 {
        return Err(Refusal::new(
            response_code::INVALID_PARAMETER,
            "commitOffset is negative",
        ));
    }
    // As RocketMQ: offsets only for topics this broker has (a push consumer's retry topic is
    // created by its first heartbeat), so the persisted table cannot fill with made-up names.
    if broker.topics.shape(&header.topic).is_none() {
        return Err(Refusal::new(
            response_code::TOPIC_NOT_EXIST,
            format!("Topic {} not exist!", header.topic),
        ));
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
    let broker = call.broker;
    let header = TopicQueueHeader::from_ext(ext_or_err(request)?)?;
    let bounds = broker.queue_bounds(&header.topic, queue_id(header.queue_id)?);
    answer(offset_response(request, bounds.max_offset))
}

pub fn min_offset(call: &Call, request: &Command) -> Handled {
    let broker = call.broker;
    let header = TopicQueueHeader::from_ext(ext_or_err(request)?)?;
    let bounds = broker.queue_bounds(&header.topic, queue_id(header.queue_id)?);
    answer(offset_response(request, bounds.min_offset))
}

pub fn search_offset_by_timestamp(call: &Call, request: &Command) -> Handled {
    let broker = call.broker;
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
    let offset = if is_memory(broker, &header.topic) {
        broker
            .memory
            .offset_by_time(&header.topic, queue, header.timestamp)
    } else {
        broker
            .store
            .offset_by_time(&header.topic, queue, header.timestamp, boundary)
            .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?
    };
    answer(offset_response(request, offset))
}

pub fn earliest_store_time(call: &Call, request: &Command) -> Handled {
    let broker = call.broker;
    let header = TopicQueueHeader::from_ext(ext_or_err(request)?)?;
    let queue = queue_id(header.queue_id)?;
    let time = if is_memory(broker, &header.topic) {
        broker.memory.earliest_time(&header.topic, queue)
    } else {
        broker
            .store
            .earliest_time(&header.topic, queue)
            .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?
    };
    let header = TimestampResponseHeader {
        timestamp: time.unwrap_or(-1),
    };
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_ext(header.to_ext()),
    )
}

fn is_memory(broker: &crate::state::Broker, topic: &str) -> bool {
    broker.topics.shape(topic).is_some_and(|shape| shape.memory)
}
