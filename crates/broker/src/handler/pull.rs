//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361): read a queue from an offset; when nothing is
//! there and the SUSPEND bit is set, park until a message lands or the suspend time runs out.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use quiver_store::{QueueRead, ReadStatus};
use quiver_wire::code::response_code;
use quiver_wire::header::{
    ext_or_err, pull_sys_flag, PullMessageRequestHeader, PullMessageResponseHeader,
};
use quiver_wire::Command;

use super::{Call, Handled, Refusal, Reply};
use crate::connection::Answer;
use crate::filter::{read_matching, MessageFilter};
use crate::state::{Broker, Pulling};
use crate::topic::{validate_group_name, PERM_READ};

/// The answer to a parked pull that found no room in the broker's byte budget.
pub(super) const BUDGET_FULL: &str = "[BUDGET_FULL] the broker holds quiverBrokerBytesMax of \
     answers its clients have not read yet; try again later";
/// Clients time a pull out after 30 s; a longer hold would only turn into their timeout.
const SUSPEND_MS_MAX: i64 = 25_000;

enum Outcome {
    Answer(Answer),
    Wait,
}

pub fn pull(call: &Call, request: &Command) -> Handled {
    let header = PullMessageRequestHeader::from_ext(ext_or_err(request)?)?;
    validate_group_name(&header.consumer_group)
        .map_err(|error| Refusal::new(response_code::SYSTEM_ERROR, error.to_string()))?;
    group_may_consume(call, &header.consumer_group)?;
    match pull_once(call.broker.pulling(), request, &header, true)? {
        Outcome::Answer(answer) if answer.files.is_empty() => Ok(Reply::Now(answer.command)),
        Outcome::Answer(answer) => Ok(Reply::FromFiles(answer)),
        Outcome::Wait => Ok(Reply::Wait(Box::pin(park(
            call.broker.clone(),
            request.response_to(response_code::SUCCESS),
            header,
        )))),
    }
}

/// Waits for an arrival on the queue past the pulled offset (or the suspend time), then reads
/// once more; `response` carries the request's opaque and encoding.
async fn park(owner: Arc<Broker>, response: Command, header: PullMessageRequestHeader) -> Answer {
    let broker = owner.pulling();
    let offset = header.queue_offset.max(0) as u64;
    let queue_id = header.queue_id as u32;
    let wake = broker.waiters.park(&header.topic, queue_id, offset);
    let hold = Duration::from_millis(header.suspend_timeout_millis.clamp(0, SUSPEND_MS_MAX) as u64);
    // A message that landed between the first read and parking would not wake us: look once
    // more before sleeping.
    let already_there = broker.store.bounds(&header.topic, queue_id).max_offset > offset;
    tracing::debug!(
        topic = %header.topic, queue_id, offset, group = %header.consumer_group,
        hold_ms = hold.as_millis() as u64, already_there, "pull parked"
    );
    match (wake, already_there) {
        (_, true) => {}
        (Some(wake), false) => {
            let parked_at = std::time::Instant::now();
            let woken = tokio::time::timeout(hold, wake).await;
            tracing::debug!(
                topic = %header.topic, queue_id, offset, group = %header.consumer_group,
                woken = woken.is_ok(), waited_ms = parked_at.elapsed().as_millis() as u64,
                "parked pull answered"
            );
        }
        // Too many pulls parked to be woken by arrivals: this one still waits out its
        // time (a Java consumer told "nothing new" at once would pull again at once, in a
        // tight loop); the connection's in-flight limit bounds how many wait so.
        // At shutdown it is answered at once, as parked pulls are.
        (None, false) => {
            tokio::select! {
                _ = tokio::time::sleep(hold) => {}
                _ = broker.waiters.until_closed() => {}
            }
        }
    }
    // Woken by an arrival, it reads: with the broker's byte budget full (clients reading their
    // answers slowly), it waits for room first, no longer than its own time again, and is
    // answered SYSTEM_BUSY if none comes (a Java consumer pulls again a little later).
    let room = broker.budget.room(&header.consumer_group);
    if tokio::time::timeout(hold, room).await.is_err() {
        let busy = Refusal::new(response_code::SYSTEM_BUSY, BUDGET_FULL);
        return busy.into_response(&response).into();
    }
    match pull_once(broker, &response, &header, false) {
        Ok(Outcome::Answer(answer)) => answer,
        Ok(Outcome::Wait) => unreachable!("a second pass never parks"),
        Err(refusal) => refusal.into_response(&response).into(),
    }
}

fn pull_once(
    broker: Pulling<'_>,
    request: &Command,
    header: &PullMessageRequestHeader,
    may_suspend: bool,
) -> Result<Outcome, Refusal> {
    let shape = readable_queue(broker, header)?;
    if may_suspend {
        if let Some(moved) = reset_answer(broker, request, header) {
            return Ok(Outcome::Answer(moved.into()));
        }
        commit_piggybacked_offset(broker, header);
    }
    let read = read_queue(broker, header)?;
    if let Some(damage) = &read.damage {
        tracing::error!(
            topic = %header.topic,
            queue_id = header.queue_id,
            next_offset = read.next_offset,
            %damage,
            "damaged record not served; consumers move past it"
        );
    }
    let suspends = may_suspend
        && header.sys_flag & pull_sys_flag::SUSPEND != 0
        && header.suspend_timeout_millis > 0;
    let code = match read.status {
        ReadStatus::Found => response_code::SUCCESS,
        ReadStatus::NoNewMessage | ReadStatus::NoMessageInQueue | ReadStatus::OffsetOverflowOne => {
            if suspends {
                return Ok(Outcome::Wait);
            }
            response_code::PULL_NOT_FOUND
        }
        ReadStatus::NoMatchedMessage => response_code::PULL_RETRY_IMMEDIATELY,
        ReadStatus::OffsetTooSmall | ReadStatus::OffsetOverflowBadly => {
            response_code::PULL_OFFSET_MOVED
        }
    };
    count_pull(broker, &read);
    let response_header = PullMessageResponseHeader {
        suggest_which_broker_id: if shape.memory {
            // A slave holds none of a non-persistent topic's messages.
            0
        } else {
            suggested_broker_id(broker, &read)
        },
        next_begin_offset: read.next_offset as i64,
        min_offset: read.min_offset as i64,
        max_offset: read.max_offset as i64,
    };
    let mut response = request.response_to(code).with_ext(response_header.to_ext());
    let mut files = Vec::new();
    if code == response_code::SUCCESS {
        response = response.with_body(read.bytes);
        files = read.files;
    }
    Ok(Outcome::Answer(Answer {
        command: response,
        files,
    }))
}

/// The pulled topic's shape, once the topic, its permission, the broker's and the queue id are
/// checked as RocketMQ checks them.
fn readable_queue(
    broker: Pulling<'_>,
    header: &PullMessageRequestHeader,
) -> Result<crate::topic::TopicShape, Refusal> {
    let Some(shape) = broker.topics.shape(&header.topic) else {
        let remark = format!("topic[{}] not exist, apply first please!", header.topic);
        return Err(Refusal::new(response_code::TOPIC_NOT_EXIST, remark));
    };
    if shape.perm & PERM_READ == 0 || broker.live.broker_permission() & PERM_READ == 0 {
        let remark = format!("the topic[{}] pulling message is forbidden", header.topic);
        return Err(Refusal::new(response_code::NO_PERMISSION, remark));
    }
    if header.queue_id < 0 || header.queue_id >= shape.read_queues {
        let remark = format!(
            "queueId[{}] is illegal, topic {} has {} read queues",
            header.queue_id, header.topic, shape.read_queues
        );
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    Ok(shape)
}

/// An admin reset this queue for the group (mqadmin resetOffsetByTime): the consumer is told to
/// move to the reset offset, once, as RocketMQ's server-side reset does. The offset it
/// piggybacks is from before the reset and is not committed.
fn reset_answer(
    broker: Pulling<'_>,
    request: &Command,
    header: &PullMessageRequestHeader,
) -> Option<Command> {
    let offset =
        broker
            .offsets
            .take_reset(&header.topic, &header.consumer_group, header.queue_id)?;
    let bounds = broker.store.bounds(&header.topic, header.queue_id as u32);
    let response_header = PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset: offset,
        min_offset: bounds.min_offset as i64,
        max_offset: bounds.max_offset as i64,
    };
    Some(
        request
            .response_to(response_code::PULL_OFFSET_MOVED)
            .with_ext(response_header.to_ext()),
    )
}

/// The offset the client piggybacks, once (the first pass is the one that may suspend), and
/// only for a queue that exists: the table is persisted, and a refused pull leaves nothing.
fn commit_piggybacked_offset(broker: Pulling<'_>, header: &PullMessageRequestHeader) {
    if header.sys_flag & pull_sys_flag::COMMIT_OFFSET != 0 && header.commit_offset >= 0 {
        broker.offsets.commit(
            &header.topic,
            &header.consumer_group,
            header.queue_id,
            header.commit_offset,
        );
    }
}

/// Reads what the pull asks for through its filter; an offset below zero is answered as one
/// under the queue's minimum (RocketMQ answers PULL_OFFSET_MOVED with the minimum to carry on
/// from).
fn read_queue(
    broker: Pulling<'_>,
    header: &PullMessageRequestHeader,
) -> Result<QueueRead, Refusal> {
    let filter = filter_for(broker, header)?;
    // As many whole messages as `maxTransferCountOnMessageInMemory` and
    // `maxTransferBytesOnMessageInMemory` allow (and what the client asks, if less); the store
    // hands out the first one whatever its size.
    let max_messages = (header.max_msg_nums.max(1) as u32).min(broker.config.transfer_count_max);
    let max_bytes = header
        .max_msg_bytes
        .map_or(u32::MAX, |bytes| bytes.max(1) as u32);
    let max_bytes = max_bytes.min(broker.config.transfer_bytes_max);
    let queue_id = header.queue_id as u32;
    let below_zero = (header.queue_offset < 0)
        .then(|| broker.store.bounds(&header.topic, queue_id))
        .filter(|bounds| bounds.max_offset > 0);
    if let Some(bounds) = below_zero {
        let (min, max) = (bounds.min_offset, bounds.max_offset);
        return Ok(QueueRead::empty(ReadStatus::OffsetTooSmall, min, min, max));
    }
    let accept = |code: i64| filter.accepts_code(code);
    let offset = header.queue_offset.max(0) as u64;
    // Large records go from the page cache to the socket, unless the filter has to read
    // their properties or `transferMsgByHeap` asks for copies.
    let to_send = !filter.is_sql() && !broker.config.transfer_by_heap;
    read_matching(
        &filter,
        offset,
        max_messages,
        max_bytes,
        |from, count, bytes| {
            let store = broker.store;
            let read = if to_send {
                store.read_to_send(&header.topic, queue_id, from, count, bytes, &accept)
            } else {
                store.read(&header.topic, queue_id, from, count, bytes, &accept)
            };
            let read =
                read.map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
            if read.status == ReadStatus::OffsetTooSmall {
                let group = &header.consumer_group;
                broker
                    .store
                    .consumer_moved(&header.topic, queue_id, group, from);
            }
            Ok::<_, Refusal>(read)
        },
    )
}

/// RocketMQ's getTotalTps / getFoundTps and messages got.
fn count_pull(broker: Pulling<'_>, read: &QueueRead) {
    let counters = broker.counters;
    counters
        .messages_got
        .fetch_add(u64::from(read.message_count), Ordering::Relaxed);
    counters.pulls.fetch_add(1, Ordering::Relaxed);
    if read.message_count > 0 {
        counters.pulls_found.fetch_add(1, Ordering::Relaxed);
    }
}

/// RocketMQ's checks of the group's settings before a pull: the group exists (or may be
/// created), may consume, and may consume by broadcast if its consumers do.
pub(super) fn group_may_consume(call: &Call, group: &str) -> Result<(), Refusal> {
    let broker = call.broker.pulling();
    let flags = broker.groups.find_with(group, call.now_ms, |config| {
        (config.consume_enable, config.consume_broadcast_enable)
    });
    let Some((consume_enable, broadcast_enable)) = flags else {
        let remark = format!("subscription group [{group}] does not exist");
        return Err(Refusal::new(
            response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
            remark,
        ));
    };
    if !consume_enable {
        let remark = format!("subscription group no permission, {group}");
        return Err(Refusal::new(response_code::NO_PERMISSION, remark));
    }
    if !broadcast_enable && broker.clients.is_broadcasting(group) {
        let remark = format!("the consumer group[{group}] can not consume by broadcast way");
        return Err(Refusal::new(response_code::NO_PERMISSION, remark));
    }
    Ok(())
}

/// Which broker of the pair the consumer should pull from next, as RocketMQ suggests it: with
/// `slaveReadEnable`, a slave (id 1) when the consumer is further behind the log's end than
/// `accessMessageInMemoryMaxRatio` percent of the machine's memory (its reads would come from
/// disk and compete with the writes), else the master (id 0); without it, always the master.
fn suggested_broker_id(broker: Pulling<'_>, read: &QueueRead) -> i64 {
    const MASTER_ID: i64 = 0;
    const SLAVE_ID: i64 = 1;
    if !broker.config.slave_read_enable || read.message_count == 0 {
        return MASTER_ID;
    }
    let Some(last) = read.end_position.or_else(|| last_record_end(&read.bytes)) else {
        return MASTER_ID;
    };
    let behind_bytes = broker.store.stats().written_position.saturating_sub(last);
    if behind_bytes > broker.config.in_memory_bytes_max() {
        SLAVE_ID
    } else {
        MASTER_ID
    }
}

/// Where the last record of a pull body ends in the CommitLog: its PHYSICALOFFSET plus size.
fn last_record_end(mut bytes: &[u8]) -> Option<u64> {
    let mut end = None;
    while bytes.len() >= quiver_record::PHYSICAL_OFFSET_AT + 8 {
        let size = quiver_record::read_i32(bytes, quiver_record::TOTAL_SIZE_AT)?;
        let position = quiver_record::read_i64(bytes, quiver_record::PHYSICAL_OFFSET_AT)?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s > 0 && *s <= bytes.len())?;
        end = Some(position as u64 + size as u64);
        bytes = &bytes[size..];
    }
    end
}

/// The subscription to filter by: from the request when it carries one (lite pull), else from
/// the group's last heartbeat (push consumers), as Java brokers do, with their codes.
fn filter_for(
    broker: Pulling<'_>,
    header: &PullMessageRequestHeader,
) -> Result<MessageFilter, Refusal> {
    let filter = if header.sys_flag & pull_sys_flag::SUBSCRIPTION != 0 {
        let expression = header.subscription.as_deref().unwrap_or("*");
        MessageFilter::parse(header.expression_type.as_deref(), expression).map_err(|error| {
            let remark = format!("parse the consumer's subscription failed: {error}");
            Refusal::new(response_code::SUBSCRIPTION_PARSE_FAILED, remark)
        })?
    } else {
        let subscribed = broker
            .clients
            .subscription(&header.consumer_group, &header.topic)
            .ok_or_else(|| {
                let remark = format!(
                    "the consumer's subscription of group {} to topic {} does not exist; send a heartbeat first",
                    header.consumer_group, header.topic
                );
                Refusal::new(response_code::SUBSCRIPTION_NOT_EXIST, remark)
            })?;
        // The consumer changed its subscription and this pull overtook the heartbeat saying
        // so: filtering by the old one would skip, for good, messages the new one wants.
        if subscribed.version < header.sub_version {
            return Err(Refusal::new(
                response_code::SUBSCRIPTION_NOT_LATEST,
                "the consumer's subscription not latest",
            ));
        }
        subscribed.filter.map_err(|error| {
            let remark = format!(
                "The broker's consumer filter data is not exist!Your expression may be wrong! {error}"
            );
            Refusal::new(response_code::FILTER_DATA_NOT_EXIST, remark)
        })?
    };
    property_filter_enabled(broker, &filter)?;
    Ok(filter)
}

/// RocketMQ serves SQL92 subscriptions only with `enablePropertyFilter`, and refuses them
/// with SYSTEM_ERROR otherwise.
pub(super) fn property_filter_enabled(
    broker: Pulling<'_>,
    filter: &MessageFilter,
) -> Result<(), Refusal> {
    if filter.is_sql() && !broker.config.enable_property_filter {
        return Err(Refusal::new(
            response_code::SYSTEM_ERROR,
            "The broker does not support consumer to filter message by SQL92 (enablePropertyFilter=false)",
        ));
    }
    Ok(())
}
