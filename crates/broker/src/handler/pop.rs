//! RocketMQ 5 pop consumption: POP_MESSAGE (200050), ACK_MESSAGE (200051),
//! CHANGE_MESSAGE_INVISIBLETIME (200053) and BATCH_ACK_MESSAGE (200151). Modes and assignments
//! are `assignment.rs`; PEEK, NOTIFICATION and POLLING_INFO are `pop_watch.rs`. The state they
//! change is `crate::pop`; reviving unacknowledged messages is `crate::pop_revive`.

use std::sync::Arc;
use std::time::Duration;

use quiver_store::{QueueBounds, ReadStatus};
use quiver_wire::bit_set;
use quiver_wire::body::{self, BatchAck, BatchAckMessageRequestBody};
use quiver_wire::code::response_code;
use quiver_wire::header::{
    ext_or_err, AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, PopMessageRequestHeader,
};
use quiver_wire::message::{property, StoredMessage};
use quiver_wire::receipt::{ReceiptHandle, RetryFlag};
use quiver_wire::{Command, ExtFields};

use super::{answer, Call, Handled, Refusal, Reply};
use crate::filter::{read_matching, MessageFilter, TagFilter};
use crate::pop::{retry_topic, Claim, QueueKey};
use crate::state::{Broker, Popping};
use crate::topic::{validate_group_name, PERM_READ};

/// Java refuses more per pop.
pub(super) const POP_MESSAGES_MAX: i32 = 32;
/// Clients time a pop out after pollTime + 10 s; hold no longer than this.
pub(super) const POLL_MS_MAX: i64 = 25_000;
/// The offsets one BATCH_ACK_MESSAGE's bit sets may span in all: each set bit is a removal
/// under a pop shard's lock, so a body of any size must not hold the lock for seconds. A Java
/// client's batch covers the messages of a few pops (32 each at most), far below this.
const BATCH_ACK_BITS_MAX: usize = 65_536;
/// The only revive queue: the handle carries it, and Quiver needs no more.
pub(super) const REVIVE_QID: i32 = 0;
/// The retry flag of the offset infos of messages read from the consumed topic.
const NORMAL: RetryFlag = RetryFlag::Normal;

/// What one pass over the queues found.
#[derive(Default)]
struct Found {
    body: Vec<u8>,
    count: usize,
    start_offsets: Vec<String>,
    message_offsets: Vec<String>,
    /// Ordered pops: how many times each message was handed out before.
    order_counts: Vec<String>,
    rest: u64,
    full: bool,
}

pub fn pop(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.popping();
    let header = PopMessageRequestHeader::from_ext(ext_or_err(request)?)?;
    validate_group_name(&header.consumer_group)
        .map_err(|e| Refusal::new(response_code::INVALID_PARAMETER, e.to_string()))?;
    if header.max_msg_nums > POP_MESSAGES_MAX || header.max_msg_nums < 1 {
        let remark = format!(
            "the max message number of a pop is 1 to {POP_MESSAGES_MAX}, not {}",
            header.max_msg_nums
        );
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    if header.invisible_time < 1 {
        return Err(Refusal::new(
            response_code::INVALID_PARAMETER,
            "invisibleTime must be positive",
        ));
    }
    super::pull::group_may_consume(call, &header.consumer_group)?;
    let Some(shape) = broker.topics.shape(&header.topic) else {
        let remark = format!("topic[{}] not exist, apply first please!", header.topic);
        return Err(Refusal::new(response_code::TOPIC_NOT_EXIST, remark));
    };
    if shape.perm & PERM_READ == 0 {
        let remark = format!("the topic[{}] peeking message is forbidden", header.topic);
        return Err(Refusal::new(response_code::NO_PERMISSION, remark));
    }
    if header.queue_id >= shape.read_queues {
        let remark = format!(
            "queueId[{}] is illegal, topic {} has {} read queues",
            header.queue_id, header.topic, shape.read_queues
        );
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    // As RocketMQ: no expression is "*" whatever the type, and pop serves SQL92 without
    // looking at enablePropertyFilter (only pulls and CHECK_CLIENT_CONFIG do).
    let filter = match header.exp.as_deref().filter(|exp| !exp.is_empty()) {
        None => MessageFilter::Tags(TagFilter::All),
        Some(exp) => MessageFilter::parse(header.exp_type.as_deref(), exp).map_err(|error| {
            let remark = format!("parse the consumer's subscription failed: {error}");
            Refusal::new(response_code::SUBSCRIPTION_PARSE_FAILED, remark)
        })?,
    };
    let queues: Vec<i32> = if header.queue_id < 0 {
        let n = shape.read_queues.max(0);
        let first = broker.pick_queue(n.max(1));
        (0..n).map(|i| (first + i) % n.max(1)).collect()
    } else {
        vec![header.queue_id]
    };
    let found = pop_once(broker, &header, &queues, &filter, call.now_ms);
    if found.count > 0 || header.poll_time <= 0 {
        return Ok(Reply::Now(pop_response(
            request.response_to(response_code::SUCCESS),
            &header,
            found,
            call.now_ms,
            broker.pop.limits,
        )));
    }
    let owner = call.broker.clone();
    let response = request.response_to(response_code::SUCCESS);
    let called_ms = call.now_ms;
    Ok(Reply::wait(async move {
        poll(owner, response, header, (queues, filter), called_ms).await
    }))
}

/// Waits for a message on any of the queues (or the retry topic) until the poll time runs out,
/// and pops again after each arrival. The time of each pop is the request's (`called_ms`) plus
/// how long it has waited on the runtime's clock: no wall clock is read here, and a test that
/// pauses the runtime's clock controls both.
async fn poll(
    owner: Arc<Broker>,
    response: Command,
    header: PopMessageRequestHeader,
    (queues, filter): (Vec<i32>, MessageFilter),
    called_ms: i64,
) -> Command {
    let broker = owner.popping();
    let hold = Duration::from_millis(header.poll_time.clamp(0, POLL_MS_MAX) as u64);
    let started = tokio::time::Instant::now();
    let deadline = started + hold;
    let now_ms = || called_ms.saturating_add(started.elapsed().as_millis() as i64);
    let retry = retry_topic(&header.consumer_group, &header.topic);
    let _polling = broker.pop.polling(&header.topic, &header.consumer_group);
    loop {
        let mut wakes = Vec::new();
        for queue_id in &queues {
            let end = broker
                .store
                .bounds(&header.topic, *queue_id as u32)
                .max_offset;
            wakes.extend(broker.waiters.park(&header.topic, *queue_id as u32, end));
        }
        let retry_end = broker.store.bounds(&retry, 0).max_offset;
        wakes.extend(broker.waiters.park(&retry, 0, retry_end));
        // With the broker's byte budget full it waits for room before it reads, as a parked
        // pull does, and is answered SYSTEM_BUSY if none comes in its time.
        let room = broker.budget.room(&header.consumer_group);
        if tokio::time::timeout_at(deadline, room).await.is_err() {
            let busy = Refusal::new(response_code::SYSTEM_BUSY, super::pull::BUDGET_FULL);
            return busy.into_response(&response);
        }
        let now = now_ms();
        let found = pop_once(broker, &header, &queues, &filter, now);
        if found.count > 0 || tokio::time::Instant::now() >= deadline {
            return pop_response(response, &header, found, now, broker.pop.limits);
        }
        // Woken by an arrival, or by a pop that held one of the queues when this one looked.
        tokio::select! {
            _ = any_arrival(&mut wakes) => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = broker.waiters.until_closed() => {
                let now = now_ms();
                let found = pop_once(broker, &header, &queues, &filter, now);
                return pop_response(response, &header, found, now, broker.pop.limits);
            }
        }
    }
}

/// Completes when any of the parked wake-ups fires (a message landed on one of the queues).
pub(super) async fn any_arrival(wakes: &mut [tokio::sync::oneshot::Receiver<()>]) {
    use std::future::Future;
    std::future::poll_fn(|cx| {
        for wake in wakes.iter_mut() {
            if std::pin::Pin::new(wake).poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn pop_response(
    mut response: Command,
    header: &PopMessageRequestHeader,
    found: Found,
    now_ms: i64,
    limits: crate::pop::Limits,
) -> Command {
    let mut ext = ExtFields::new()
        .with("popTime", now_ms)
        .with("invisibleTime", header.invisible_time)
        .with("reviveQid", REVIVE_QID)
        .with("restNum", found.rest);
    if found.count == 0 {
        response.code = if found.full {
            response_code::POLLING_FULL
        } else {
            response_code::PULL_NOT_FOUND
        };
        let remark = if found.full {
            format!(
                "the group has as many popped and unacknowledged messages as it may hold \
                 ({} per queue, {} per group; popInflightMaxPerQueue, popInflightMaxPerGroup): \
                 acknowledge some first",
                limits.per_queue, limits.per_group
            )
        } else {
            "no new message".to_string()
        };
        return response.with_ext(ext).with_remark(remark);
    }
    if !found.start_offsets.is_empty() {
        ext = ext
            .with("startOffsetInfo", found.start_offsets.join(";"))
            .with("msgOffsetInfo", found.message_offsets.join(";"));
    }
    if !found.order_counts.is_empty() {
        ext = ext.with("orderCountInfo", found.order_counts.join(";"));
    }
    response.with_ext(ext).with_body(found.body)
}

/// One pass: the group's pop retry topic first, then the queues in order, up to the pop's
/// maximum.
fn pop_once(
    broker: Popping<'_>,
    header: &PopMessageRequestHeader,
    queues: &[i32],
    filter: &MessageFilter,
    now_ms: i64,
) -> Found {
    let mut found = Found::default();
    let retry = retry_topic(&header.consumer_group, &header.topic);
    if broker.topics.shape(&retry).is_some() {
        pop_queue(broker, header, &retry, 0, filter, now_ms, &mut found);
    }
    for queue_id in queues {
        pop_queue(
            broker,
            header,
            &header.topic,
            *queue_id,
            filter,
            now_ms,
            &mut found,
        );
    }
    found
}

/// What a pop still takes from the next queue it reads: the answer holds
/// `maxTransferBytesOnMessageInMemory` at most, in whole messages, and always one.
#[derive(Clone, Copy)]
struct Wanted {
    messages: usize,
    bytes: u32,
    /// Nothing is in the answer yet: its first message goes out whatever its size.
    first_may_exceed: bool,
}

/// What the pop takes from its next queue; None once its answer holds as many messages as
/// asked, or (with one at least) `maxTransferBytesOnMessageInMemory`.
fn still_wanted(
    broker: Popping<'_>,
    header: &PopMessageRequestHeader,
    found: &Found,
) -> Option<Wanted> {
    let messages = (header.max_msg_nums as usize).saturating_sub(found.count);
    let bytes = (broker.config.transfer_bytes_max as usize).saturating_sub(found.body.len());
    if messages == 0 || (found.count > 0 && bytes == 0) {
        return None;
    }
    Some(Wanted {
        messages,
        bytes: bytes.max(1) as u32,
        first_may_exceed: found.count == 0,
    })
}

/// One queue a pop looks at: what it asks of the queue, and where the queue stands.
struct PopTarget<'a> {
    header: &'a PopMessageRequestHeader,
    topic: &'a str,
    queue_id: i32,
    /// The consumed topic's pop retry topic: its copies were filtered once and are handed out
    /// under the consumed topic's name.
    is_retry: bool,
    bounds: QueueBounds,
}

fn pop_queue(
    broker: Popping<'_>,
    header: &PopMessageRequestHeader,
    topic: &str,
    queue_id: i32,
    filter: &MessageFilter,
    now_ms: i64,
    found: &mut Found,
) {
    let target = PopTarget {
        header,
        topic,
        queue_id,
        is_retry: topic != header.topic,
        bounds: broker.store.bounds(topic, queue_id as u32),
    };
    let bounds = target.bounds;
    let group = &header.consumer_group;
    let key = QueueKey {
        group: group.clone(),
        topic: topic.to_string(),
        queue_id,
    };
    let ordered = header.order.unwrap_or(false) && !target.is_retry;
    let Some(wanted) = still_wanted(broker, header, found) else {
        let cursor = broker.pop.cursor(&key).unwrap_or(bounds.min_offset);
        return found.rest += bounds.max_offset.saturating_sub(cursor);
    };
    // An admin reset moved this queue's pop cursor when it came (`PopState::reset`); the
    // copy of it waiting for a pull is spent by a pop, as RocketMQ's pop takes it, or the
    // group's first pull of the queue, later, would be sent back to it.
    broker.offsets.take_reset(topic, group, queue_id);
    let mut bytes = Vec::new();
    let claim = broker.pop.claim(
        &key,
        (now_ms, header.invisible_time),
        ordered,
        || first_pop_offset(broker, &target),
        |cursor, room| {
            let wanted = Wanted {
                messages: wanted.messages.min(room),
                ..wanted
            };
            let (offsets, next, read) = read_for_pop(broker, &target, filter, cursor, wanted);
            bytes = read;
            (offsets, next)
        },
    );
    let Some((offsets, low)) = taken(broker, &target, &key, claim, found) else {
        return;
    };
    broker.offsets.commit(topic, group, queue_id, low as i64);
    found.rest += rest_after_cursor(broker, &key, bounds);
    if offsets.is_empty() {
        return;
    }
    found.count += offsets.len();
    let got = &broker.counters.messages_got;
    got.fetch_add(offsets.len() as u64, std::sync::atomic::Ordering::Relaxed);
    hand_out_taken(
        broker,
        &target,
        (&key, ordered),
        (&offsets, bytes),
        now_ms,
        found,
    );
}

/// The offsets a claim took and the queue's low watermark; None (with `found` told why) for a
/// queue at its in-flight limit or reserved by another pop.
fn taken(
    broker: Popping<'_>,
    target: &PopTarget,
    key: &QueueKey,
    claim: Claim,
    found: &mut Found,
) -> Option<(Vec<u64>, u64)> {
    match claim {
        Claim::Full => {
            found.full = true;
            None
        }
        Claim::Busy => {
            found.rest += rest_after_cursor(broker, key, target.bounds);
            None
        }
        Claim::Taken {
            offsets,
            low,
            contended,
        } => {
            if contended {
                // A pop that found the queue reserved may be parked on it: wake it to look
                // again (no message may arrive to wake it otherwise).
                let queue_id = target.queue_id as u32;
                broker.waiters.arrived(target.topic, queue_id, u64::MAX);
            }
            Some((offsets, low))
        }
    }
}

/// What a pop took from one queue goes into its answer: retry copies with the broker's
/// handles, the consumed topic's messages as stored (with their hand-out counts when ordered).
fn hand_out_taken(
    broker: Popping<'_>,
    target: &PopTarget,
    (key, ordered): (&QueueKey, bool),
    (offsets, bytes): (&[u64], Vec<u8>),
    now_ms: i64,
    found: &mut Found,
) {
    if target.is_retry {
        hand_out_retries(broker, target, offsets, &bytes, now_ms, found);
    } else {
        let attempts = ordered.then(|| broker.pop.attempts(key, offsets));
        hand_out(target.queue_id, offsets, attempts, bytes, found);
    }
}

/// Messages of the queue past the group's pop cursor (none for a queue it never popped).
fn rest_after_cursor(broker: Popping<'_>, key: &QueueKey, bounds: QueueBounds) -> u64 {
    let cursor = broker.pop.cursor(key).unwrap_or(bounds.max_offset);
    bounds.max_offset.saturating_sub(cursor)
}

/// Where a group's first pop of a queue starts: a group that consumed it before (by pull) goes
/// on from its committed offset; else, with init mode 1 (the consumed topic only), as RocketMQ
/// does: the queue's start while it has lost nothing and its first message is still within
/// `accessMessageInMemoryMaxRatio` of the log's end (a young queue is read whole), else its
/// last message; its start with init mode 0.
fn first_pop_offset(broker: Popping<'_>, target: &PopTarget) -> u64 {
    let header = target.header;
    let committed = broker
        .offsets
        .get(target.topic, &header.consumer_group, target.queue_id)
        .map(|o| o.max(0) as u64);
    if let Some(committed) = committed {
        return committed;
    }
    let bounds = &target.bounds;
    if header.init_mode != 1 || target.is_retry {
        return bounds.min_offset;
    }
    let first_in_memory = bounds.min_offset == 0
        && broker
            .store
            .entry_position(target.topic, target.queue_id as u32, 0)
            .ok()
            .flatten()
            .is_some_and(|position| {
                let behind = broker
                    .store
                    .stats()
                    .written_position
                    .saturating_sub(position);
                behind <= broker.config.in_memory_bytes_max()
            });
    if first_in_memory {
        0
    } else {
        bounds.max_offset.saturating_sub(1).max(bounds.min_offset)
    }
}

/// Reads up to `wanted` matching messages from `cursor`, with no lock held: their offsets, the
/// offset after the last one scanned, and their bytes.
fn read_for_pop(
    broker: Popping<'_>,
    target: &PopTarget,
    filter: &MessageFilter,
    cursor: u64,
    wanted: Wanted,
) -> (Vec<u64>, u64, Vec<u8>) {
    let (topic, queue_id) = (target.topic, target.queue_id);
    let cursor = cursor.max(target.bounds.min_offset);
    if cursor >= target.bounds.max_offset {
        return (Vec::new(), cursor, Vec::new());
    }
    // Retry copies were selected once already: they are not filtered again.
    let all = MessageFilter::Tags(TagFilter::All);
    let filter = if target.is_retry { &all } else { filter };
    let accept = |code: i64| filter.accepts_code(code);
    let read = read_matching(
        filter,
        cursor,
        wanted.messages as u32,
        wanted.bytes,
        |from, count, bytes| {
            broker
                .store
                .read(topic, queue_id as u32, from, count, bytes, &accept)
        },
    );
    match read {
        Ok(read) => {
            let records = records(&read.bytes);
            let mut bytes = if read.status == ReadStatus::Found {
                read.bytes
            } else {
                Vec::new()
            };
            let mut next_offset = read.next_offset;
            // The store hands out a first message whatever its size: past the first queue of
            // the pop's answer, one that does not fit waits for the next pop.
            let fit = if wanted.first_may_exceed {
                records.len()
            } else {
                fitting(&records, wanted.bytes as usize)
            };
            if let Some(&(offset, _)) = records.get(fit) {
                next_offset = offset;
                bytes.truncate(records[..fit].iter().map(|(_, size)| size).sum());
            }
            let offsets = records[..fit].iter().map(|(offset, _)| *offset).collect();
            (offsets, next_offset, bytes)
        }
        Err(error) => {
            tracing::warn!(topic, queue_id, %error, "pop could not read the queue");
            (Vec::new(), cursor, Vec::new())
        }
    }
}

/// Copies from the retry topic are handed out under the consumed topic's name, with the handle
/// built here: the client keeps a POP_CK it finds and acks the retry topic's queue and offset
/// through it.
fn hand_out_retries(
    broker: Popping<'_>,
    target: &PopTarget,
    offsets: &[u64],
    bytes: &[u8],
    now_ms: i64,
    found: &mut Found,
) {
    let header = target.header;
    let mut rest = bytes;
    while !rest.is_empty() {
        let Ok((mut message, size)) = StoredMessage::decode(rest, false) else {
            break;
        };
        rest = &rest[size..];
        let handle = ReceiptHandle {
            start_offset: offsets[0] as i64,
            pop_time_ms: now_ms,
            invisible_ms: header.invisible_time,
            revive_queue_id: REVIVE_QID,
            retry: RetryFlag::Retry,
            broker_name: broker.config.broker_name.clone(),
            queue_id: target.queue_id,
            queue_offset: Some(message.queue_offset),
        };
        message.topic = header.topic.clone();
        message.properties =
            crate::stored::with_property(&message.properties, property::POP_CK, &handle.encode());
        let _ = message.encode(&mut found.body);
    }
}

/// Messages of the consumed topic go out as stored; the client builds their handles from the
/// answer's offset lists (and, for an ordered queue, how often each was handed out).
fn hand_out(
    queue_id: i32,
    offsets: &[u64],
    attempts: Option<Vec<i32>>,
    bytes: Vec<u8>,
    found: &mut Found,
) {
    let list: Vec<String> = offsets.iter().map(u64::to_string).collect();
    found
        .start_offsets
        .push(format!("{NORMAL} {queue_id} {}", offsets[0]));
    found
        .message_offsets
        .push(format!("{NORMAL} {queue_id} {}", list.join(",")));
    for (offset, count) in offsets.iter().zip(attempts.into_iter().flatten()) {
        found
            .order_counts
            .push(format!("{NORMAL} qo{queue_id}%{offset} {count}"));
    }
    if found.body.is_empty() {
        found.body = bytes;
    } else {
        found.body.extend_from_slice(&bytes);
    }
}

/// The QUEUEOFFSET of each record in a read's bytes.
/// How many of `records` (queue offset, size) fit in `room` bytes, from the first.
pub(super) fn fitting(records: &[(u64, usize)], room: usize) -> usize {
    let mut total = 0;
    records
        .iter()
        .take_while(|(_, size)| {
            total += size;
            total <= room
        })
        .count()
}

/// Each record's queue offset and size, in order.
pub(super) fn records(mut bytes: &[u8]) -> Vec<(u64, usize)> {
    let mut records = Vec::new();
    while bytes.len() >= quiver_record::PHYSICAL_OFFSET_AT {
        let (Some(size), Some(offset)) = (
            quiver_record::read_i32(bytes, quiver_record::TOTAL_SIZE_AT),
            quiver_record::read_i64(bytes, quiver_record::QUEUE_OFFSET_AT),
        ) else {
            break;
        };
        let Some(size) = usize::try_from(size)
            .ok()
            .filter(|s| *s > 0 && *s <= bytes.len())
        else {
            break;
        };
        records.push((offset as u64, size));
        bytes = &bytes[size..];
    }
    records
}

/// The retry flag of an ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME's `extraInfo`.
fn handle_retry(extra_info: &str) -> Result<RetryFlag, Refusal> {
    // The remark names the error, not the handle: an overlong one would be echoed whole.
    ReceiptHandle::parse(extra_info)
        .map(|handle| handle.retry)
        .map_err(|error| {
            Refusal::new(
                response_code::INVALID_PARAMETER,
                format!("extraInfo is not a pop receipt handle: {error}"),
            )
        })
}

/// The queue an acknowledged message was read from: the retry topic when its retry flag says so.
fn handle_key(
    group: &str,
    topic: &str,
    queue_id: i32,
    retry: RetryFlag,
) -> Result<QueueKey, Refusal> {
    // Quiver revives into the V1 retry topic only, so it never hands out a V2 handle.
    if retry == RetryFlag::RetryV2 {
        return Err(Refusal::new(
            response_code::INVALID_PARAMETER,
            format!("retry flag {retry} names a V2 pop retry topic, which Quiver does not keep"),
        ));
    }
    Ok(QueueKey {
        group: group.to_string(),
        topic: retry.real_topic(group, topic),
        queue_id,
    })
}

/// Acknowledges offsets of one queue (negative ones are no message) under one lock, and
/// commits the group's offset once if any was in flight.
fn acked(broker: Popping<'_>, key: &QueueKey, offsets: impl IntoIterator<Item = i64>) {
    let offsets = offsets.into_iter().filter_map(|o| u64::try_from(o).ok());
    if let Some(low) = broker.pop.ack_many(key, offsets) {
        broker
            .offsets
            .commit(&key.topic, &key.group, key.queue_id, low as i64);
    }
}

pub fn ack(call: &Call, request: &Command) -> Handled {
    let header = AckMessageRequestHeader::from_ext(ext_or_err(request)?)?;
    let key = handle_key(
        &header.consumer_group,
        &header.topic,
        header.queue_id,
        handle_retry(&header.extra_info)?,
    )?;
    // Acked already or revived: as RocketMQ, the ack is answered SUCCESS (an ack that comes
    // after the revive leaves the retry copy to be consumed once more).
    acked(call.broker.popping(), &key, [header.offset]);
    answer(request.response_to(response_code::SUCCESS))
}

pub fn batch_ack(call: &Call, request: &Command) -> Handled {
    let batch: BatchAckMessageRequestBody = body::from_json(&request.body)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    let mut decoded = Vec::with_capacity(batch.acks.len());
    let mut span_bits = 0usize;
    for entry in &batch.acks {
        let bits = bit_set::decode(&entry.bit_set).ok_or_else(|| {
            Refusal::new(response_code::INVALID_PARAMETER, "bit set is not base64")
        })?;
        span_bits += bits.len() * 8;
        if span_bits > BATCH_ACK_BITS_MAX {
            let remark = format!(
                "a batch ack's bit sets span more than {BATCH_ACK_BITS_MAX} offsets: ack in \
                 smaller batches"
            );
            return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
        }
        decoded.push(bits);
    }
    for (entry, bits) in batch.acks.into_iter().zip(decoded) {
        let retry = RetryFlag::parse(&entry.retry)
            .map_err(|error| Refusal::new(response_code::INVALID_PARAMETER, error.to_string()))?;
        let key = handle_key(&entry.consumer_group, &entry.topic, entry.queue_id, retry)?;
        let offsets = set_bits_from(entry.start_offset, bits);
        acked(call.broker.popping(), &key, offsets);
    }
    answer(request.response_to(response_code::SUCCESS))
}

pub fn change_invisible_time(call: &Call, request: &Command) -> Handled {
    let header = ChangeInvisibleTimeRequestHeader::from_ext(ext_or_err(request)?)?;
    let key = handle_key(
        &header.consumer_group,
        &header.topic,
        header.queue_id,
        handle_retry(&header.extra_info)?,
    )?;
    let changed = u64::try_from(header.offset).is_ok_and(|offset| {
        call.broker.popping().pop.change_invisible(
            &key,
            offset,
            call.now_ms,
            header.invisible_time.max(0),
        )
    });
    if !changed {
        return Err(Refusal::new(
            response_code::NO_MESSAGE,
            "the message is not in flight: acknowledged already, or its invisible time ran out",
        ));
    }
    let ext = ExtFields::new()
        .with("popTime", call.now_ms)
        .with("invisibleTime", header.invisible_time)
        .with("reviveQid", REVIVE_QID);
    answer(request.response_to(response_code::SUCCESS).with_ext(ext))
}

/// The offsets a BATCH_ACK_MESSAGE entry acknowledges: bit i of its bit set stands for
/// `start_offset + i`. None when the bit set is not base64. The start comes from the client:
/// bits that would count past i64::MAX name no offset a queue can hold and are left out.
pub(crate) fn batch_ack_offsets(entry: &BatchAck) -> Option<impl Iterator<Item = i64>> {
    Some(set_bits_from(
        entry.start_offset,
        bit_set::decode(&entry.bit_set)?,
    ))
}

/// The offsets a BitSet's bytes name from `start_offset`; those past `i64::MAX` are left out.
fn set_bits_from(start_offset: i64, bits: Vec<u8>) -> impl Iterator<Item = i64> {
    bits.into_iter()
        .enumerate()
        .flat_map(move |(byte_index, byte)| {
            (0..8)
                .filter(move |bit| byte & (1 << bit) != 0)
                .filter_map(move |bit| start_offset.checked_add((byte_index * 8 + bit) as i64))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_ack_bits_past_the_largest_offset_are_left_out() {
        let entry = BatchAck {
            start_offset: i64::MAX - 1,
            bit_set: "Bw==".to_string(),
            ..BatchAck::default()
        };
        let offsets: Vec<i64> = batch_ack_offsets(&entry).expect("base64").collect();
        assert_eq!(offsets, vec![i64::MAX - 1, i64::MAX]);
    }

    #[test]
    fn an_ack_goes_to_the_queue_its_handle_was_read_from() {
        let retry = handle_retry("4 1000 60000 0 1 broker-a 0 5").expect("a handle");
        let key = handle_key("g", "Jobs", 0, retry).expect("a V1 retry handle");
        assert_eq!(key.topic, "%RETRY%g_Jobs");
        let key = handle_key("g", "Jobs", 2, RetryFlag::Normal).expect("a normal handle");
        assert_eq!((key.topic.as_str(), key.queue_id), ("Jobs", 2));
    }

    #[test]
    fn acks_with_a_malformed_or_v2_handle_are_invalid_parameters() {
        let refused = handle_retry("4 1000 60000 0").expect_err("four fields");
        assert_eq!(refused.code, response_code::INVALID_PARAMETER);
        let refused = handle_key("g", "Jobs", 0, RetryFlag::RetryV2).expect_err("V2");
        assert_eq!(refused.code, response_code::INVALID_PARAMETER);
    }

    #[test]
    fn records_read_each_records_queue_offset() {
        assert!(records(&[]).is_empty());
    }

    #[test]
    fn records_fit_from_the_first_while_their_sizes_add_up_to_the_room() {
        let records = [(7, 100), (8, 50), (9, 10)];
        assert_eq!(fitting(&records, 99), 0);
        assert_eq!(fitting(&records, 150), 2);
        assert_eq!(fitting(&records, 1_000), 3);
    }
}
