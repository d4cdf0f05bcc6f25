//! A pop consumer (RocketMQ 5's pop consumption): the broker hands out messages from any queue
//! of the topic, each invisible to the group until acknowledged or its invisible time runs out.
//! Several pop loops per master run at once; a batch's acknowledgements go back in one
//! BATCH_ACK_MESSAGE. The group must be in pop mode on the brokers (`set_pop_mode`, or mqadmin
//! `setConsumeMode -m POP`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quiver_wire::body::{self, BatchAck, BatchAckMessageRequestBody, ConsumerData, HeartbeatData};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::PopMessageRequestHeader;
use quiver_wire::message::{property, StoredMessage};
use quiver_wire::receipt::{ReceiptHandle, RetryFlag};
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::error::ClientError;
use crate::subscription::Subscription;

#[derive(Clone, Debug)]
pub struct PopConsumerConfig {
    pub group: String,
    pub topic: String,
    /// `*` or `tagA || tagB`.
    pub expression: String,
    /// Messages per pop, at most 32.
    pub batch: i32,
    /// How long a popped message stays invisible to the group.
    pub invisible_ms: i64,
    /// How long the broker may hold a pop that found nothing.
    pub poll_ms: i64,
    /// Pop loops per master.
    pub loops: usize,
    /// Where a group new to a queue starts: its first message (true) or its end.
    pub from_first: bool,
}

impl PopConsumerConfig {
    pub fn new(group: &str, topic: &str) -> PopConsumerConfig {
        PopConsumerConfig {
            group: group.to_owned(),
            topic: topic.to_owned(),
            expression: "*".into(),
            batch: 32,
            invisible_ms: 60_000,
            poll_ms: 15_000,
            loops: 1,
            from_first: false,
        }
    }
}

/// Called with each popped message; true acknowledges it, false leaves it to come back after
/// its invisible time (through the group's pop retry topic).
pub type PopListener = Arc<dyn Fn(&StoredMessage) -> bool + Send + Sync>;

pub struct PopConsumer {
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Client {
    /// SET_MESSAGE_REQUEST_MODE on one broker: POP (`pop`) or PULL for the group on the topic.
    pub async fn set_pop_mode(
        &self,
        addr: &str,
        topic: &str,
        group: &str,
        pop: bool,
    ) -> Result<(), ClientError> {
        let mode = body::SetMessageRequestModeRequestBody {
            topic: topic.to_owned(),
            consumer_group: group.to_owned(),
            mode: if pop { "POP" } else { "PULL" }.into(),
            pop_share_queue_num: 0,
        };
        let request = self
            .request(request_code::SET_MESSAGE_REQUEST_MODE)
            .with_body(body::to_json(&mode));
        self.call_expecting(addr, request, &[response_code::SUCCESS])
            .await
            .map(drop)
    }
}

impl PopConsumer {
    pub async fn start(
        client: Client,
        config: PopConsumerConfig,
        listener: PopListener,
    ) -> Result<PopConsumer, ClientError> {
        let route = client.refresh_route(&config.topic).await?;
        let subscription = Subscription::new(&config.topic, &config.expression, client.now_ms());
        let heartbeat = HeartbeatData {
            client_id: client.client_id().to_owned(),
            consumer_data_set: vec![ConsumerData {
                consume_from_where: "CONSUME_FROM_LAST_OFFSET".into(),
                consume_type: "CONSUME_POP".into(),
                group_name: config.group.clone(),
                message_model: "CLUSTERING".into(),
                subscription_data_set: vec![subscription.data()],
                unit_mode: false,
            }],
            ..HeartbeatData::default()
        };
        let mut tasks = Vec::new();
        for (broker_name, addr) in &route.masters {
            client.heartbeat(addr, &heartbeat).await?;
            for _ in 0..config.loops.max(1) {
                tasks.push(tokio::spawn(pop_loop(
                    client.clone(),
                    config.clone(),
                    broker_name.clone(),
                    addr.clone(),
                    listener.clone(),
                )));
            }
        }
        Ok(PopConsumer {
            tasks: Mutex::new(tasks),
        })
    }

    /// Stops popping; messages popped and not acknowledged come back after their invisible
    /// time.
    pub async fn shutdown(self) {
        let tasks: Vec<JoinHandle<()>> = self.tasks.lock().expect("tasks lock").drain(..).collect();
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
    }
}

async fn pop_loop(
    client: Client,
    config: PopConsumerConfig,
    broker_name: String,
    addr: String,
    listener: PopListener,
) {
    loop {
        match pop_once(&client, &config, &broker_name, &addr, &listener).await {
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%addr, %error, "pop failed; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// One pop, the listener over its messages, and one batch acknowledgement. Returns how many
/// messages the pop got.
async fn pop_once(
    client: &Client,
    config: &PopConsumerConfig,
    broker_name: &str,
    addr: &str,
    listener: &PopListener,
) -> Result<usize, ClientError> {
    let header = PopMessageRequestHeader {
        consumer_group: config.group.clone(),
        topic: config.topic.clone(),
        queue_id: -1,
        max_msg_nums: config.batch.clamp(1, 32),
        invisible_time: config.invisible_ms,
        poll_time: config.poll_ms,
        born_time: client.now_ms(),
        init_mode: if config.from_first { 0 } else { 1 },
        exp_type: Some("TAG".into()),
        exp: Some(config.expression.clone()),
        order: Some(false),
    };
    let request = pop_request(request_code::POP_MESSAGE).with_ext(header.to_ext());
    let timeout = client.request_timeout() + Duration::from_millis(config.poll_ms.max(0) as u64);
    let response = client.call_with_timeout(addr, request, timeout).await?;
    match response.code {
        response_code::SUCCESS => {}
        response_code::PULL_NOT_FOUND | response_code::POLLING_TIMEOUT => return Ok(0),
        response_code::POLLING_FULL => {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Ok(0);
        }
        code => {
            return Err(ClientError::bad_response(
                addr,
                format!(
                    "pop answered {code}: {}",
                    response.remark.unwrap_or_default()
                ),
            ))
        }
    }
    let messages = StoredMessage::decode_all_shared(&response.body)
        .map_err(|error| ClientError::bad_response(addr, error))?;
    // (retry flag, queue id) -> acknowledged offsets.
    let mut acked: BTreeMap<(RetryFlag, i32), Vec<i64>> = BTreeMap::new();
    for message in &messages {
        if !listener(message) {
            continue;
        }
        let Some((retry, queue_id, offset)) = ack_target(message) else {
            continue;
        };
        acked.entry((retry, queue_id)).or_default().push(offset);
    }
    if !acked.is_empty() {
        let batch = BatchAckMessageRequestBody {
            broker_name: broker_name.to_owned(),
            acks: batch_acks(config, &response, acked),
        };
        let request = pop_request(request_code::BATCH_ACK_MESSAGE).with_body(body::to_json(&batch));
        client
            .call_expecting(addr, request, &[response_code::SUCCESS])
            .await?;
    }
    Ok(messages.len())
}

/// One BatchAck per (retry flag, queue): the acknowledged offsets as a bit set from the lowest,
/// with the pop answer's pop time, invisible time and revive queue.
fn batch_acks(
    config: &PopConsumerConfig,
    response: &quiver_wire::Command,
    acked: BTreeMap<(RetryFlag, i32), Vec<i64>>,
) -> Vec<BatchAck> {
    let ext_i64 = |key: &str| -> i64 {
        response
            .ext_get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default()
    };
    let (pop_time, invisible, revive_qid) = (
        ext_i64("popTime"),
        ext_i64("invisibleTime"),
        ext_i64("reviveQid") as i32,
    );
    acked
        .into_iter()
        .map(|((retry, queue_id), offsets)| {
            let start = offsets.iter().copied().min().unwrap_or_default();
            let mut bits = Vec::new();
            for offset in offsets {
                let bit = (offset - start) as usize;
                if bits.len() <= bit / 8 {
                    bits.resize(bit / 8 + 1, 0u8);
                }
                bits[bit / 8] |= 1 << (bit % 8);
            }
            BatchAck {
                consumer_group: config.group.clone(),
                topic: config.topic.clone(),
                retry: retry.as_str().to_owned(),
                start_offset: start,
                queue_id,
                revive_queue_id: revive_qid,
                pop_time,
                invisible_time: invisible,
                bit_set: quiver_wire::bit_set::encode(&bits),
            }
        })
        .collect()
}

/// The retry flag, queue and offset an acknowledgement of `message` names: the broker's handle
/// in POP_CK for a message it read from the pop retry topic, or else the message's own queue.
/// None for a handle that does not parse: acking the message's own queue and offset would ack
/// another message, so this one is left to come back after its invisible time.
fn ack_target(message: &StoredMessage) -> Option<(RetryFlag, i32, i64)> {
    let Some(text) = message.property(property::POP_CK) else {
        return Some((RetryFlag::Normal, message.queue_id, message.queue_offset));
    };
    match ReceiptHandle::parse(&text) {
        Ok(handle) => Some((
            handle.retry,
            handle.queue_id,
            handle.queue_offset.unwrap_or(message.queue_offset),
        )),
        Err(error) => {
            tracing::warn!(handle = %text, %error, "a popped message's POP_CK does not parse");
            None
        }
    }
}

/// Pop codes do not fit the binary header's 16-bit code field (200050 arrives as 3442, which a
/// RocketMQ broker refuses): they always travel JSON-encoded, as Java clients send them.
fn pop_request(code: i32) -> quiver_wire::Command {
    quiver_wire::Command::request(code, quiver_wire::Encoding::Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn popped(queue_id: i32, queue_offset: i64, pop_ck: Option<&str>) -> StoredMessage {
        StoredMessage {
            queue_id,
            flag: 0,
            queue_offset,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp: 0,
            born_host: "127.0.0.1:1".parse().expect("address"),
            store_timestamp: 0,
            store_host: "127.0.0.1:2".parse().expect("address"),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Default::default(),
            topic: "Jobs".into(),
            properties: quiver_wire::encode_properties(pop_ck.map(|ck| (property::POP_CK, ck))),
        }
    }

    #[test]
    fn a_message_is_acked_where_its_handle_says_it_was_read() {
        assert_eq!(
            ack_target(&popped(1, 7, None)),
            Some((RetryFlag::Normal, 1, 7))
        );
        let retried = popped(0, 4, Some("4 1000 60000 0 1 broker-a 0 5"));
        assert_eq!(ack_target(&retried), Some((RetryFlag::Retry, 0, 5)));
        let without_offset = popped(2, 9, Some("4 1000 60000 0 1 broker-a 3"));
        assert_eq!(ack_target(&without_offset), Some((RetryFlag::Retry, 3, 9)));
    }

    #[test]
    fn a_message_whose_handle_does_not_parse_is_not_acked() {
        assert_eq!(ack_target(&popped(1, 7, Some("4 1000 60000 0 1"))), None);
        assert_eq!(ack_target(&popped(1, 7, Some("x 1 2 0 1 b 0 5"))), None);
    }
}
