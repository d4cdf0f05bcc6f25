//! Consuming over gRPC: receives as pops (the SimpleConsumer's and the PushConsumer's), their
//! acknowledgements, invisible-time changes and dead-lettering, and the pull consumer's pulls
//! and offsets.
//!
//! A gRPC receipt handle is the pop handle (`POP_CK`, `receipt.rs`) followed by a space and the
//! message's CommitLog position, which dead-lettering needs and the gRPC calls do not carry.

use quiver_proto::v2::{self as pb, Code};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ConsumerSendMsgBackRequestHeader,
    PopMessageRequestHeader, PullMessageRequestHeader, QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader, TopicQueueHeader, UpdateConsumerOffsetRequestHeader,
};
use quiver_wire::message::{property, StoredMessage};
use quiver_wire::{Command, ReceiptHandle, RetryFlag};

use super::super::convert::{self, ok, status, status_of};
use super::super::session::Session;
use super::{name_of, refused_status, Messaging};

/// A receive's messages when the client asks for none in particular, and the most one pop
/// takes (the proxy's bound).
const RECEIVE_BATCH_DEFAULT: i32 = 32;
const RECEIVE_BATCH_MAX: i32 = 32;
/// A pull's most messages.
const PULL_BATCH_MAX: i32 = 1_024;
/// The shortest and longest invisible time a receive may ask for.
const INVISIBLE_MIN_MS: i64 = 10_000;
const INVISIBLE_MAX_MS: i64 = 12 * 3_600_000;
/// A receive's invisible time when the client leaves it to the broker (the PushConsumer, which
/// asks for automatic renewal): the proxy's default.
const INVISIBLE_DEFAULT_MS: i64 = 60_000;
/// The longest long poll a receive or pull is held for; the client waits its long polling
/// timeout and its request timeout.
const LONG_POLLING_MAX_MS: i64 = 20_000;

/// A gRPC receipt handle taken apart: the pop handle and the CommitLog position.
struct Receipt {
    pop: ReceiptHandle,
    pop_text: String,
    commit_log_offset: i64,
}

fn receipt(text: &str) -> Result<Receipt, Option<pb::Status>> {
    let invalid = |why: String| status(Code::InvalidReceiptHandle, why);
    let (pop_text, position) = text.rsplit_once(' ').ok_or_else(|| {
        invalid(format!(
            "receipt handle {text:?} is not one this broker gave"
        ))
    })?;
    let commit_log_offset = position.parse::<i64>().map_err(|_| {
        invalid(format!(
            "receipt handle {text:?} is not one this broker gave"
        ))
    })?;
    let pop = ReceiptHandle::parse(pop_text)
        .map_err(|error| invalid(format!("receipt handle {text:?}: {error}")))?;
    if pop.queue_offset.is_none() {
        return Err(invalid(format!("receipt handle {text:?} names no offset")));
    }
    Ok(Receipt {
        pop,
        pop_text: pop_text.to_string(),
        commit_log_offset,
    })
}

fn encode_receipt(pop: &ReceiptHandle, commit_log_offset: i64) -> String {
    format!("{} {commit_log_offset}", pop.encode())
}

/// A ReceiveMessage: one POP_MESSAGE, answered as the stream the proxy writes: the status,
/// then each message, then the time of delivery.
pub async fn receive(
    messaging: &Messaging,
    session: &Session,
    request: pb::ReceiveMessageRequest,
) -> Vec<pb::ReceiveMessageResponse> {
    let invisible_ms = match invisible_of(&request) {
        Ok(invisible_ms) => invisible_ms,
        Err(refused) => return only_status(refused),
    };
    let header = pop_header(session, request, invisible_ms);
    let topic = header.topic.clone();
    let answer = match session
        .call(convert::request(request_code::POP_MESSAGE, header.to_ext()))
        .await
    {
        Ok(answer) => answer,
        Err(refused) => return only_status(refused_status(refused)),
    };
    match answer.code {
        response_code::SUCCESS => {}
        response_code::PULL_NOT_FOUND | response_code::POLLING_TIMEOUT => {
            return only_status(status(Code::MessageNotFound, "no new message"))
        }
        _ => return only_status(status_of(&answer)),
    }
    let messages = match StoredMessage::decode_all_shared(&answer.body) {
        Ok(messages) => messages,
        Err(error) => {
            let why = format!("popped messages: {error}");
            return only_status(status(Code::InternalServerError, why));
        }
    };
    let broker_name = &messaging.broker.serving().config.broker_name;
    let popped = Popped::of(&answer, broker_name);
    let mut responses = vec![pb::ReceiveMessageResponse {
        content: ok().map(pb::receive_message_response::Content::Status),
    }];
    responses.extend(messages.iter().map(|stored| {
        let (handle, attempt) = popped.handle(stored);
        let delivery = convert::Delivery {
            topic: &topic,
            receipt_handle: Some(encode_receipt(&handle, stored.physical_offset)),
            invisible_ms: Some(invisible_ms),
            attempt,
        };
        pb::ReceiveMessageResponse {
            content: Some(pb::receive_message_response::Content::Message(
                convert::message_of(stored, &delivery),
            )),
        }
    }));
    responses.push(delivered_now());
    responses
}

/// A receive answered with `status` alone, then the time of delivery.
fn only_status(status: Option<pb::Status>) -> Vec<pb::ReceiveMessageResponse> {
    vec![
        pb::ReceiveMessageResponse {
            content: status.map(pb::receive_message_response::Content::Status),
        },
        delivered_now(),
    ]
}

/// How long a receive's messages stay invisible: what the client asks for, within
/// `INVISIBLE_MIN_MS`..=`INVISIBLE_MAX_MS`, or the default for a client that asks the server to
/// renew it.
fn invisible_of(request: &pb::ReceiveMessageRequest) -> Result<i64, Option<pb::Status>> {
    let invisible_ms = match (&request.invisible_duration, request.auto_renew) {
        (Some(duration), _) => convert::duration_millis(duration),
        (None, true) => INVISIBLE_DEFAULT_MS,
        (None, false) => {
            let why = "the invisible duration is required";
            return Err(status(Code::IllegalInvisibleTime, why));
        }
    };
    if !(INVISIBLE_MIN_MS..=INVISIBLE_MAX_MS).contains(&invisible_ms) {
        let why = format!(
            "the invisible duration {invisible_ms} ms is not between {INVISIBLE_MIN_MS} ms and \
             {INVISIBLE_MAX_MS} ms"
        );
        return Err(status(Code::IllegalInvisibleTime, why));
    }
    Ok(invisible_ms)
}

/// The POP_MESSAGE of a receive: every queue of the broker, ordered when the broker told the
/// client its group is.
fn pop_header(
    session: &Session,
    request: pb::ReceiveMessageRequest,
    invisible_ms: i64,
) -> PopMessageRequestHeader {
    let (exp_type, exp) = filter_of(request.filter_expression);
    PopMessageRequestHeader {
        consumer_group: name_of(&request.group),
        topic: request
            .message_queue
            .as_ref()
            .map(|queue| name_of(&queue.topic))
            .unwrap_or_default(),
        queue_id: -1,
        max_msg_nums: match request.batch_size {
            0 => RECEIVE_BATCH_DEFAULT,
            size => size.clamp(1, RECEIVE_BATCH_MAX),
        },
        invisible_time: invisible_ms,
        poll_time: long_poll_ms(&request.long_polling_timeout),
        born_time: crate::clock::now_ms(),
        init_mode: 0,
        exp_type: Some(exp_type),
        exp: Some(exp),
        order: Some(session.client().fifo()),
    }
}

/// A filter expression as remoting carries it: its type (`TAG`, `SQL92`) and text (`*` when
/// empty).
fn filter_of(filter: Option<pb::FilterExpression>) -> (String, String) {
    let filter = filter.unwrap_or_default();
    let sql = filter.r#type == pb::FilterType::Sql as i32;
    let kind = if sql { "SQL92" } else { "TAG" }.to_string();
    let text = if filter.expression.is_empty() {
        "*".to_string()
    } else {
        filter.expression
    };
    (kind, text)
}

/// A long poll the client asks for, at most `LONG_POLLING_MAX_MS`.
fn long_poll_ms(timeout: &Option<quiver_proto::Duration>) -> i64 {
    timeout
        .as_ref()
        .map_or(0, convert::duration_millis)
        .clamp(0, LONG_POLLING_MAX_MS)
}

/// A receive stream's last item: when it was delivered.
fn delivered_now() -> pb::ReceiveMessageResponse {
    pb::ReceiveMessageResponse {
        content: Some(pb::receive_message_response::Content::DeliveryTimestamp(
            convert::timestamp(crate::clock::now_ms()),
        )),
    }
}

/// What a POP_MESSAGE answer says of its messages, for their handles (as a remoting client
/// builds them from the answer).
struct Popped<'a> {
    pop_time_ms: i64,
    invisible_ms: i64,
    revive_queue_id: i32,
    broker_name: &'a str,
    /// (queue id, first offset) of each queue read.
    start_offsets: Vec<(i32, i64)>,
    /// (queue id, offset, times handed out before) of an ordered pop's messages.
    order_counts: Vec<(i32, i64, i32)>,
}

impl<'a> Popped<'a> {
    fn of(answer: &Command, broker_name: &'a str) -> Popped<'a> {
        let number = |key: &str| answer.ext_get(key).and_then(|v| v.parse::<i64>().ok());
        let list = |key: &str| -> Vec<String> {
            answer
                .ext_get(key)
                .map(|v| v.split(';').map(String::from).collect())
                .unwrap_or_default()
        };
        let start_offsets = list("startOffsetInfo")
            .iter()
            .filter_map(|entry| {
                let mut fields = entry.split(' ');
                let (_, queue, offset) = (fields.next()?, fields.next()?, fields.next()?);
                Some((queue.parse().ok()?, offset.parse().ok()?))
            })
            .collect();
        let order_counts = list("orderCountInfo")
            .iter()
            .filter_map(|entry| {
                // "<retry flag> qo<queue>%<offset> <count>"
                let mut fields = entry.split(' ');
                let (_, key, count) = (fields.next()?, fields.next()?, fields.next()?);
                let (queue, offset) = key.strip_prefix("qo")?.split_once('%')?;
                Some((
                    queue.parse().ok()?,
                    offset.parse().ok()?,
                    count.parse().ok()?,
                ))
            })
            .collect();
        Popped {
            pop_time_ms: number("popTime").unwrap_or(0),
            invisible_ms: number("invisibleTime").unwrap_or(0),
            revive_queue_id: number("reviveQid").unwrap_or(0) as i32,
            broker_name,
            start_offsets,
            order_counts,
        }
    }

    /// A message's pop handle and delivery attempt: the broker's own handle for a message from
    /// the retry topic, else one built from the answer.
    fn handle(&self, stored: &StoredMessage) -> (ReceiptHandle, i32) {
        let attempt = convert::attempt_of(stored);
        if let Some(handle) = stored
            .property(property::POP_CK)
            .and_then(|text| ReceiptHandle::parse(&text).ok())
        {
            return (handle, attempt);
        }
        let (queue, offset) = (stored.queue_id, stored.queue_offset);
        let start_offset = self
            .start_offsets
            .iter()
            .find(|(q, _)| *q == queue)
            .map_or(offset, |(_, start)| *start);
        let attempt = self
            .order_counts
            .iter()
            .find(|(q, o, _)| *q == queue && *o == offset)
            .map_or(attempt, |(_, _, count)| count.saturating_add(1));
        let handle = ReceiptHandle {
            start_offset,
            pop_time_ms: self.pop_time_ms,
            invisible_ms: self.invisible_ms,
            revive_queue_id: self.revive_queue_id,
            retry: RetryFlag::Normal,
            broker_name: self.broker_name.to_string(),
            queue_id: queue,
            queue_offset: Some(offset),
        };
        (handle, attempt)
    }
}

/// AckMessage: one ACK_MESSAGE per entry.
pub async fn ack(session: &Session, request: pb::AckMessageRequest) -> pb::AckMessageResponse {
    let group = name_of(&request.group);
    let topic = name_of(&request.topic);
    let mut entries = Vec::with_capacity(request.entries.len());
    for entry in request.entries {
        let status = match receipt(&entry.receipt_handle) {
            Ok(receipt) => ack_one(session, &group, &topic, &receipt).await,
            Err(status) => status,
        };
        entries.push(pb::AckMessageResultEntry {
            message_id: entry.message_id,
            receipt_handle: entry.receipt_handle,
            status,
        });
    }
    let failed = entries
        .iter()
        .filter(|entry| {
            entry
                .status
                .as_ref()
                .is_some_and(|s| s.code != Code::Ok as i32)
        })
        .count();
    let status = match failed {
        0 => ok(),
        n if n == entries.len() => entries[0].status.clone(),
        _ => status(Code::MultipleResults, "some entries failed"),
    };
    pb::AckMessageResponse { status, entries }
}

async fn ack_one(
    session: &Session,
    group: &str,
    topic: &str,
    receipt: &Receipt,
) -> Option<pb::Status> {
    let header = AckMessageRequestHeader {
        consumer_group: group.to_string(),
        topic: topic.to_string(),
        queue_id: receipt.pop.queue_id,
        extra_info: receipt.pop_text.clone(),
        offset: receipt.pop.queue_offset.unwrap_or(0),
    };
    match session
        .call(convert::request(request_code::ACK_MESSAGE, header.to_ext()))
        .await
    {
        Ok(answer) => status_of(&answer),
        Err(refused) => refused_status(refused),
    }
}

/// ChangeInvisibleDuration: CHANGE_MESSAGE_INVISIBLETIME, and the handle the change makes.
pub async fn change_invisible_duration(
    session: &Session,
    request: pb::ChangeInvisibleDurationRequest,
) -> pb::ChangeInvisibleDurationResponse {
    let failed = |status: Option<pb::Status>| pb::ChangeInvisibleDurationResponse {
        status,
        receipt_handle: String::new(),
    };
    let receipt = match receipt(&request.receipt_handle) {
        Ok(receipt) => receipt,
        Err(status) => return failed(status),
    };
    let invisible_ms = request
        .invisible_duration
        .as_ref()
        .map_or(0, convert::duration_millis);
    if invisible_ms < 0 {
        return failed(status(
            Code::IllegalInvisibleTime,
            "the invisible duration is negative",
        ));
    }
    let offset = receipt.pop.queue_offset.unwrap_or(0);
    let header = ChangeInvisibleTimeRequestHeader {
        consumer_group: name_of(&request.group),
        topic: name_of(&request.topic),
        queue_id: receipt.pop.queue_id,
        extra_info: receipt.pop_text.clone(),
        offset,
        invisible_time: invisible_ms,
    };
    let answer = match session
        .call(convert::request(
            request_code::CHANGE_MESSAGE_INVISIBLETIME,
            header.to_ext(),
        ))
        .await
    {
        Ok(answer) => answer,
        Err(refused) => return failed(refused_status(refused)),
    };
    if answer.code != response_code::SUCCESS {
        return failed(status_of(&answer));
    }
    let number = |key: &str| answer.ext_get(key).and_then(|v| v.parse::<i64>().ok());
    let changed = ReceiptHandle {
        start_offset: offset,
        pop_time_ms: number("popTime").unwrap_or(receipt.pop.pop_time_ms),
        invisible_ms: number("invisibleTime").unwrap_or(invisible_ms),
        revive_queue_id: number("reviveQid").map_or(receipt.pop.revive_queue_id, |q| q as i32),
        ..receipt.pop
    };
    pb::ChangeInvisibleDurationResponse {
        status: ok(),
        receipt_handle: encode_receipt(&changed, receipt.commit_log_offset),
    }
}

/// ForwardMessageToDeadLetterQueue: CONSUMER_SEND_MSG_BACK to the DLQ, then the pop's
/// acknowledgement, so the message does not come back after its invisible time.
pub async fn to_dead_letter_queue(
    session: &Session,
    request: pb::ForwardMessageToDeadLetterQueueRequest,
) -> Option<pb::Status> {
    let receipt = match receipt(&request.receipt_handle) {
        Ok(receipt) => receipt,
        Err(status) => return status,
    };
    let group = name_of(&request.group);
    let topic = name_of(&request.topic);
    let header = ConsumerSendMsgBackRequestHeader {
        offset: receipt.commit_log_offset,
        group: group.clone(),
        delay_level: -1,
        origin_msg_id: Some(request.message_id),
        origin_topic: Some(topic.clone()),
        unit_mode: false,
        max_reconsume_times: Some(request.max_delivery_attempts.saturating_sub(1).max(0)),
    };
    let answer = session
        .call(convert::request(
            request_code::CONSUMER_SEND_MSG_BACK,
            header.to_ext(),
        ))
        .await;
    match answer {
        Ok(answer) if answer.code == response_code::SUCCESS => {
            ack_one(session, &group, &topic, &receipt).await
        }
        Ok(answer) => status_of(&answer),
        Err(refused) => refused_status(refused),
    }
}

fn queue_of(queue: &Option<pb::MessageQueue>) -> (String, i32) {
    queue
        .as_ref()
        .map(|q| (name_of(&q.topic), q.id))
        .unwrap_or_default()
}

/// PullMessage: one PULL_MESSAGE from the offset given; the status, the messages, then the
/// offset to pull from next.
pub async fn pull(
    session: &Session,
    request: pb::PullMessageRequest,
) -> Vec<pb::PullMessageResponse> {
    use pb::pull_message_response::Content;
    let (topic, queue_id) = queue_of(&request.message_queue);
    let (expression_type, subscription) = filter_of(request.filter_expression);
    let header = PullMessageRequestHeader {
        consumer_group: name_of(&request.group),
        topic: topic.clone(),
        queue_id,
        queue_offset: request.offset,
        max_msg_nums: request.batch_size.clamp(1, PULL_BATCH_MAX),
        // Suspend (2) and subscription (4) flags.
        sys_flag: 2 | 4,
        commit_offset: 0,
        suspend_timeout_millis: long_poll_ms(&request.long_polling_timeout),
        subscription: Some(subscription),
        sub_version: crate::clock::now_ms(),
        expression_type: Some(expression_type),
        max_msg_bytes: None,
    };
    let only = |status: Option<pb::Status>| {
        vec![pb::PullMessageResponse {
            content: status.map(Content::Status),
        }]
    };
    let answer = match session
        .call(convert::request(
            request_code::PULL_MESSAGE,
            header.to_ext(),
        ))
        .await
    {
        Ok(answer) => answer,
        Err(refused) => return only(refused_status(refused)),
    };
    let next = answer
        .ext_get("nextBeginOffset")
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(request.offset);
    let mut responses = match answer.code {
        response_code::SUCCESS => only(ok()),
        response_code::PULL_NOT_FOUND | response_code::PULL_RETRY_IMMEDIATELY => {
            only(status(Code::MessageNotFound, "no new message"))
        }
        response_code::PULL_OFFSET_MOVED => only(status(Code::IllegalOffset, "the offset moved")),
        _ => return only(status_of(&answer)),
    };
    if answer.code == response_code::SUCCESS {
        let messages = StoredMessage::decode_all_shared(&answer.body).unwrap_or_default();
        responses.extend(messages.iter().map(|stored| {
            let delivery = convert::Delivery {
                topic: &topic,
                receipt_handle: None,
                invisible_ms: None,
                attempt: convert::attempt_of(stored),
            };
            pb::PullMessageResponse {
                content: Some(Content::Message(convert::message_of(stored, &delivery))),
            }
        }));
    }
    responses.push(pb::PullMessageResponse {
        content: Some(Content::NextOffset(next)),
    });
    responses
}

pub async fn update_offset(
    session: &Session,
    request: pb::UpdateOffsetRequest,
) -> Option<pb::Status> {
    let (topic, queue_id) = queue_of(&request.message_queue);
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: name_of(&request.group),
        topic,
        queue_id,
        commit_offset: request.offset,
    };
    let request = convert::request(request_code::UPDATE_CONSUMER_OFFSET, header.to_ext());
    match session.call(request).await {
        Ok(answer) => status_of(&answer),
        Err(refused) => refused_status(refused),
    }
}

/// The `offset` field of an answer, with its status.
fn offset_answer(answer: Result<Command, super::Refused>) -> (Option<pb::Status>, i64) {
    match answer {
        Ok(answer) if answer.code == response_code::SUCCESS => {
            let offset = answer.ext_get("offset").and_then(|v| v.parse().ok());
            (ok(), offset.unwrap_or(0))
        }
        Ok(answer) if answer.code == response_code::QUERY_NOT_FOUND => (
            status(
                Code::OffsetNotFound,
                "the group has no offset for the queue",
            ),
            0,
        ),
        Ok(answer) => (status_of(&answer), 0),
        Err(refused) => (refused_status(refused), 0),
    }
}

pub async fn get_offset(
    session: &Session,
    request: pb::GetOffsetRequest,
) -> (Option<pb::Status>, i64) {
    let (topic, queue_id) = queue_of(&request.message_queue);
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: name_of(&request.group),
        topic,
        queue_id,
        set_zero_if_not_found: Some(false),
    };
    let request = convert::request(request_code::QUERY_CONSUMER_OFFSET, header.to_ext());
    offset_answer(session.call(request).await)
}

pub async fn query_offset(
    session: &Session,
    request: pb::QueryOffsetRequest,
) -> (Option<pb::Status>, i64) {
    let (topic, queue_id) = queue_of(&request.message_queue);
    let policy = pb::QueryOffsetPolicy::try_from(request.query_offset_policy)
        .unwrap_or(pb::QueryOffsetPolicy::Beginning);
    let request = match policy {
        pb::QueryOffsetPolicy::Beginning | pb::QueryOffsetPolicy::End => {
            let code = if policy == pb::QueryOffsetPolicy::End {
                request_code::GET_MAX_OFFSET
            } else {
                request_code::GET_MIN_OFFSET
            };
            convert::request(code, TopicQueueHeader { topic, queue_id }.to_ext())
        }
        pb::QueryOffsetPolicy::Timestamp => {
            let header = SearchOffsetRequestHeader {
                topic,
                queue_id,
                timestamp: request.timestamp.as_ref().map_or(0, convert::millis_of),
                boundary_type: None,
            };
            convert::request(request_code::SEARCH_OFFSET_BY_TIMESTAMP, header.to_ext())
        }
    };
    offset_answer(session.call(request).await)
}
