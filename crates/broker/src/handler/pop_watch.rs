//! Pop's read-only requests: PEEK_MESSAGE (200052, what the group's next pop would take,
//! taking nothing), NOTIFICATION (200054, whether there is something to pop, long-polled) and
//! POLLING_INFO (200055, pops of a group waiting now).

use std::time::Duration;

use quiver_wire::code::response_code;
use quiver_wire::header::{
    ext_or_err, NotificationRequestHeader, PeekMessageRequestHeader, PollingInfoRequestHeader,
};
use quiver_wire::{Command, ExtFields};

use super::pop::{any_arrival, fitting, records, POLL_MS_MAX, POP_MESSAGES_MAX, REVIVE_QID};
use super::{answer, Call, Handled, Refusal, Reply};
use crate::pop::{retry_topic, QueueKey};
use crate::state::Popping;

/// The readable queues a request names: -1 for all of them.
fn named_queues(broker: Popping<'_>, topic: &str, queue_id: i32) -> Result<Vec<i32>, Refusal> {
    let Some(shape) = broker.topics.shape(topic) else {
        let remark = format!("topic[{topic}] not exist, apply first please!");
        return Err(Refusal::new(response_code::TOPIC_NOT_EXIST, remark));
    };
    if queue_id >= shape.read_queues {
        let remark = format!(
            "queueId[{queue_id}] is illegal, topic {topic} has {} read queues",
            shape.read_queues
        );
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    Ok(if queue_id < 0 {
        (0..shape.read_queues.max(0)).collect()
    } else {
        vec![queue_id]
    })
}

/// Where the group's next pop of a queue starts (its cursor, or its committed offset, or the
/// queue's start).
fn next_pop_offset(broker: Popping<'_>, group: &str, topic: &str, queue_id: i32) -> u64 {
    let key = QueueKey {
        group: group.to_string(),
        topic: topic.to_string(),
        queue_id,
    };
    let min = broker.store.bounds(topic, queue_id as u32).min_offset;
    broker
        .pop
        .cursor(&key)
        .or_else(|| {
            broker
                .offsets
                .get(topic, group, queue_id)
                .map(|o| o.max(0) as u64)
        })
        .unwrap_or(min)
        .max(min)
}

/// PEEK_MESSAGE: up to maxMsgNums messages from where the group's next pop would start,
/// handed out to nobody (no invisible time, no cursor moved).
pub fn peek(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.popping();
    let header = PeekMessageRequestHeader::from_ext(ext_or_err(request)?)?;
    if !(1..=POP_MESSAGES_MAX).contains(&header.max_msg_nums) {
        let remark = format!("the max message number of a peek is 1 to {POP_MESSAGES_MAX}");
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    let mut body = Vec::new();
    let mut count = 0usize;
    let mut rest = 0u64;
    for queue_id in named_queues(broker, &header.topic, header.queue_id)? {
        let from = next_pop_offset(broker, &header.consumer_group, &header.topic, queue_id);
        let end = broker
            .store
            .bounds(&header.topic, queue_id as u32)
            .max_offset;
        let wanted = (header.max_msg_nums as usize).saturating_sub(count);
        // Whole messages up to `maxTransferBytesOnMessageInMemory` in all, and always one.
        let room = (broker.config.transfer_bytes_max as usize).saturating_sub(body.len());
        if wanted > 0 && from < end && (count == 0 || room > 0) {
            if let Ok(read) = broker.store.read(
                &header.topic,
                queue_id as u32,
                from,
                wanted as u32,
                room.max(1) as u32,
                &|_| true,
            ) {
                let records = records(&read.bytes);
                let fit = if count == 0 {
                    records.len()
                } else {
                    fitting(&records, room)
                };
                count += fit;
                let fit_bytes: usize = records[..fit].iter().map(|(_, size)| size).sum();
                body.extend_from_slice(&read.bytes[..fit_bytes]);
            }
        }
        rest += end.saturating_sub(from);
    }
    let ext = ExtFields::new()
        .with("popTime", call.now_ms)
        .with("invisibleTime", 0)
        .with("reviveQid", REVIVE_QID)
        .with("restNum", rest.saturating_sub(count as u64));
    let code = if count > 0 {
        response_code::SUCCESS
    } else {
        response_code::PULL_NOT_FOUND
    };
    answer(request.response_to(code).with_ext(ext).with_body(body))
}

/// Whether the group has something to pop on the queues (or its pop retry topic).
fn has_message(broker: Popping<'_>, group: &str, topic: &str, queues: &[i32]) -> bool {
    let retry = retry_topic(group, topic);
    let retry_waiting = broker.topics.shape(&retry).is_some()
        && next_pop_offset(broker, group, &retry, 0) < broker.store.bounds(&retry, 0).max_offset;
    retry_waiting
        || queues.iter().any(|queue_id| {
            next_pop_offset(broker, group, topic, *queue_id)
                < broker.store.bounds(topic, *queue_id as u32).max_offset
        })
}

/// NOTIFICATION: answers `hasMsg` at once when there is something to pop, else when something
/// lands or the poll time runs out.
pub fn notification(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.popping();
    let header = NotificationRequestHeader::from_ext(ext_or_err(request)?)?;
    let queues = named_queues(broker, &header.topic, header.queue_id)?;
    let response = request.response_to(response_code::SUCCESS);
    let answer_with = |response: Command, has: bool| {
        response.with_ext(
            ExtFields::new()
                .with("hasMsg", has)
                .with("pollingFull", false),
        )
    };
    if has_message(broker, &header.consumer_group, &header.topic, &queues) || header.poll_time <= 0
    {
        let has = has_message(broker, &header.consumer_group, &header.topic, &queues);
        return Ok(Reply::Now(answer_with(response, has)));
    }
    let owner = call.broker.clone();
    Ok(Reply::wait(async move {
        let broker = owner.popping();
        let _polling = broker.pop.polling(&header.topic, &header.consumer_group);
        let hold = Duration::from_millis(header.poll_time.clamp(0, POLL_MS_MAX) as u64);
        let deadline = tokio::time::Instant::now() + hold;
        loop {
            let mut wakes = Vec::new();
            for queue_id in &queues {
                let end = broker
                    .store
                    .bounds(&header.topic, *queue_id as u32)
                    .max_offset;
                wakes.extend(broker.waiters.park(&header.topic, *queue_id as u32, end));
            }
            let has = has_message(broker, &header.consumer_group, &header.topic, &queues);
            if has || tokio::time::Instant::now() >= deadline {
                return answer_with(response, has);
            }
            tokio::select! {
                _ = any_arrival(&mut wakes) => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = broker.waiters.until_closed() => return answer_with(response, false),
            }
        }
    }))
}

/// POLLING_INFO: how many pops (and notifications) of the group wait on the topic now.
pub fn polling_info(call: &Call, request: &Command) -> Handled {
    let header = PollingInfoRequestHeader::from_ext(ext_or_err(request)?)?;
    named_queues(call.broker.popping(), &header.topic, header.queue_id)?;
    let count = call
        .broker
        .popping()
        .pop
        .polling_count(&header.topic, &header.consumer_group);
    let ext = ExtFields::new().with("pollingNum", count);
    answer(request.response_to(response_code::SUCCESS).with_ext(ext))
}
