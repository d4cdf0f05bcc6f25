//! The producer: sync, async, oneway and batch sends with queue selection, retry on another
//! broker for the codes Java retries, and a send timeout covering all attempts.

use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::BytesMut;
use quiver_wire::body::{HeartbeatData, MessageQueue, ProducerData};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::SendMessageResponseHeader;
use quiver_wire::message::property;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{refused, Client};
use crate::error::ClientError;
use crate::message::{uniq_str, Message, SendResult, SendStatus, UniqIds, UNIQ_ID_BYTES};
use crate::route::{TopicRoute, AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS};
use crate::send_frame::{self, encode_send, SendFields};

/// Messages in one batch; the frame limit (16 MiB) bounds the bytes.
pub const BATCH_MESSAGES_MAX: usize = 4_096;

#[derive(Clone, Debug)]
pub struct ProducerConfig {
    pub group: String,
    /// One send, all attempts included.
    pub send_timeout_ms: u64,
    /// Extra attempts on another queue (preferably another broker) after a retryable failure.
    pub retries: u32,
    pub heartbeat_interval_ms: u64,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            group: "DEFAULT_PRODUCER".into(),
            send_timeout_ms: 3_000,
            retries: 2,
            heartbeat_interval_ms: 30_000,
        }
    }
}

struct Inner {
    client: Client,
    config: ProducerConfig,
    next_queue: AtomicUsize,
    uniq_ids: UniqIds,
    heartbeat_task: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut task) = self.heartbeat_task.lock() {
            if let Some(task) = task.take() {
                task.abort();
            }
        }
    }
}

/// A cheap handle; clones share queue selection and id generation.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

/// What one request carries.
enum Payload<'a> {
    Single(&'a Message),
    Batch(&'a [Message]),
}

impl Producer {
    /// Must be called inside a tokio runtime (starts the heartbeat task).
    pub fn new(client: Client, config: ProducerConfig) -> Producer {
        let ip: Ipv4Addr = client
            .config()
            .client_ip
            .parse()
            .unwrap_or(Ipv4Addr::LOCALHOST);
        let random_word = client.random().next_u64() as u32;
        let start = client.random().below(1 << 16);
        let inner = Arc::new(Inner {
            uniq_ids: UniqIds::new(ip, random_word, client.now_ms()),
            client,
            config,
            next_queue: AtomicUsize::new(start),
            heartbeat_task: std::sync::Mutex::new(None),
        });
        let task = tokio::spawn(heartbeats(Arc::downgrade(&inner)));
        if let Ok(mut slot) = inner.heartbeat_task.lock() {
            *slot = Some(task);
        }
        Producer { inner }
    }

    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Sends and waits for the broker's answer; queues chosen round robin, retried elsewhere
    /// on a retryable failure.
    pub async fn send(&self, message: &Message) -> Result<SendResult, ClientError> {
        self.send_payload(&message.topic, Payload::Single(message), None, false)
            .await
            .and_then(expect_result)
    }

    /// Sends to the given queue; no retry on another queue.
    pub async fn send_to(
        &self,
        message: &Message,
        queue: &MessageQueue,
    ) -> Result<SendResult, ClientError> {
        self.send_payload(&message.topic, Payload::Single(message), Some(queue), false)
            .await
            .and_then(expect_result)
    }

    /// A send as a future that owns everything it needs, so it can be spawned.
    pub fn send_async(
        &self,
        message: Message,
    ) -> impl Future<Output = Result<SendResult, ClientError>> + Send + 'static {
        let producer = self.clone();
        async move { producer.send(&message).await }
    }

    /// Writes the message and returns without waiting for the broker.
    pub async fn send_oneway(&self, message: &Message) -> Result<(), ClientError> {
        self.send_payload(&message.topic, Payload::Single(message), None, true)
            .await
            .map(drop)
    }

    /// One SEND_BATCH_MESSAGE: all messages must share a topic; they land in one queue with
    /// consecutive offsets.
    pub async fn send_batch(&self, messages: &[Message]) -> Result<SendResult, ClientError> {
        let topic = check_batch(messages)?;
        self.send_payload(topic, Payload::Batch(messages), None, false)
            .await
            .and_then(expect_result)
    }

    /// A batch to the given queue.
    pub async fn send_batch_to(
        &self,
        messages: &[Message],
        queue: &MessageQueue,
    ) -> Result<SendResult, ClientError> {
        let topic = check_batch(messages)?;
        self.send_payload(topic, Payload::Batch(messages), Some(queue), false)
            .await
            .and_then(expect_result)
    }

    /// Tells every broker this producer talked to that it is leaving.
    pub async fn shutdown(&self) {
        let group = self.inner.config.group.clone();
        for addr in known_masters(&self.inner.client).await {
            let _ = self
                .inner
                .client
                .unregister(&addr, Some(&group), None)
                .await;
        }
    }

    async fn send_payload(
        &self,
        topic: &str,
        payload: Payload<'_>,
        fixed: Option<&MessageQueue>,
        oneway: bool,
    ) -> Result<Option<SendResult>, ClientError> {
        let timeout = Duration::from_millis(self.inner.config.send_timeout_ms);
        let deadline = Instant::now() + timeout;
        let attempts = if fixed.is_some() || oneway {
            1
        } else {
            1 + self.inner.config.retries
        };
        let client = &self.inner.client;
        let mut route = client.publish_route(topic).await?;
        let mut failed_broker: Option<String> = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let queue = match fixed {
                Some(queue) => queue.clone(),
                None => self.select_queue(&route, failed_broker.as_deref(), topic)?,
            };
            // The first attempt starts at once; only a retry can find the time used up.
            let expired = attempt > 1 && Instant::now() >= deadline;
            let result = match route.master(&queue.broker_name) {
                None => Err(ClientError::NoBrokerAddr {
                    broker_name: queue.broker_name.clone(),
                }),
                Some(_) if expired => Err(ClientError::Timeout {
                    addr: route
                        .master(&queue.broker_name)
                        .unwrap_or_default()
                        .to_owned(),
                    code: request_code::SEND_MESSAGE_V2,
                    timeout_ms: timeout.as_millis() as u64,
                }),
                Some(addr) => {
                    self.send_once(addr, &queue, &payload, oneway, deadline)
                        .await
                }
            };
            match result {
                Err(error) if error.is_retryable() && attempt < attempts => {
                    tracing::debug!(%error, attempt, "send failed; trying another queue");
                    if matches!(&error, ClientError::Refused { code, .. } if *code == response_code::TOPIC_NOT_EXIST)
                    {
                        if let Ok(fresh) = client.refresh_route(topic).await {
                            route = fresh;
                        }
                    }
                    failed_broker = Some(queue.broker_name);
                }
                other => return other,
            }
        }
    }

    /// Round robin over the write queues, skipping the broker that just failed when another
    /// one exists (Java's `selectOneMessageQueue(lastBrokerName)`).
    fn select_queue(
        &self,
        route: &TopicRoute,
        avoid_broker: Option<&str>,
        topic: &str,
    ) -> Result<MessageQueue, ClientError> {
        let queues = &route.write_queues;
        if queues.is_empty() {
            return Err(ClientError::NoQueue {
                topic: topic.to_owned(),
                what: "writable",
            });
        }
        let start = self.inner.next_queue.fetch_add(1, Ordering::Relaxed);
        if let Some(avoid) = avoid_broker {
            for step in 0..queues.len() {
                let queue = &queues[(start + step) % queues.len()];
                if queue.broker_name != avoid {
                    return Ok(queue.clone());
                }
            }
        }
        Ok(queues[start % queues.len()].clone())
    }

    async fn send_once(
        &self,
        addr: &str,
        queue: &MessageQueue,
        payload: &Payload<'_>,
        oneway: bool,
        deadline: Instant,
    ) -> Result<Option<SendResult>, ClientError> {
        let timeout = Duration::from_millis(self.inner.config.send_timeout_ms);
        let client = &self.inner.client;
        let connection = client.connection(addr).await?;
        let opaque = connection.next_opaque();
        let (code, frame, uniq_id) = self.encode(opaque, queue, payload, oneway)?;
        if oneway {
            let remaining = deadline.saturating_duration_since(Instant::now());
            connection
                .send_encoded_oneway(frame, code, remaining)
                .await?;
            return Ok(None);
        }
        let response = connection
            .call_encoded(opaque, code, frame, deadline, timeout)
            .await?;
        let status = match response.code {
            response_code::SUCCESS => SendStatus::Ok,
            response_code::FLUSH_DISK_TIMEOUT => SendStatus::FlushDiskTimeout,
            response_code::FLUSH_SLAVE_TIMEOUT => SendStatus::FlushSlaveTimeout,
            response_code::SLAVE_NOT_AVAILABLE => SendStatus::SlaveNotAvailable,
            _ => return Err(refused(addr, code, &response)),
        };
        let ext = response
            .ext
            .as_ref()
            .ok_or_else(|| ClientError::bad_response(addr, "send response without header"))?;
        let header = SendMessageResponseHeader::from_ext(ext)
            .map_err(|error| ClientError::bad_response(addr, error))?;
        Ok(Some(SendResult {
            status,
            msg_id: header.msg_id,
            uniq_id,
            queue: MessageQueue {
                topic: queue.topic.clone(),
                broker_name: queue.broker_name.clone(),
                queue_id: header.queue_id,
            },
            queue_offset: header.queue_offset,
        }))
    }

    /// Encodes the request frame; returns the request code, the frame and the UNIQ_KEY(s).
    fn encode(
        &self,
        opaque: i32,
        queue: &MessageQueue,
        payload: &Payload<'_>,
        oneway: bool,
    ) -> Result<(i32, bytes::Bytes, String), ClientError> {
        let now_ms = self.inner.client.now_ms();
        let (topic, flag, body_bytes) = match payload {
            Payload::Single(message) => (&message.topic, message.flag, message.body.len()),
            Payload::Batch(messages) => (&messages[0].topic, 0, batch_len(messages)),
        };
        let header_uniq = self.inner.uniq_ids.next(now_ms);
        let mut uniq_ids = String::new();
        let single_props;
        let header_props: Vec<(&str, &str)> = match payload {
            Payload::Single(message) => {
                single_props = MessageProperties::of(message);
                uniq_ids.push_str(uniq_str(&header_uniq));
                single_props.pairs(uniq_str(&header_uniq))
            }
            Payload::Batch(_) => vec![
                (property::UNIQ_KEY, uniq_str(&header_uniq)),
                (property::WAIT, "true"),
            ],
        };
        let fields = SendFields {
            producer_group: &self.inner.config.group,
            topic,
            // Java names the auto-create template on every send; brokers use it only for a
            // topic they do not have yet.
            default_topic: AUTO_CREATE_TOPIC,
            default_topic_queue_nums: DEFAULT_TOPIC_QUEUE_NUMS,
            queue_id: queue.queue_id,
            sys_flag: 0,
            born_timestamp: now_ms,
            flag,
            properties: &header_props,
            batch: matches!(payload, Payload::Batch(_)),
            oneway,
        };
        let code = match payload {
            Payload::Single(_) => request_code::SEND_MESSAGE_V2,
            Payload::Batch(_) => request_code::SEND_BATCH_MESSAGE,
        };
        let mut frame = BytesMut::with_capacity(body_bytes + 512);
        let mut batch_error = None;
        let encoded = encode_send(&mut frame, code, opaque, &fields, |out| match payload {
            Payload::Single(message) => out.extend_from_slice(&message.body),
            Payload::Batch(messages) => {
                batch_error = self.put_batch(out, messages, now_ms, &mut uniq_ids).err();
            }
        });
        if let Some(error) = batch_error {
            return Err(error);
        }
        encoded.map_err(|error| ClientError::InvalidArgument(error.to_string()))?;
        Ok((code, frame.freeze(), uniq_ids))
    }

    fn put_batch(
        &self,
        out: &mut BytesMut,
        messages: &[Message],
        now_ms: i64,
        uniq_ids: &mut String,
    ) -> Result<(), ClientError> {
        uniq_ids.reserve(messages.len() * (UNIQ_ID_BYTES + 1));
        for message in messages {
            let uniq = self.inner.uniq_ids.next(now_ms);
            let properties = MessageProperties::of(message);
            let pairs = properties.pairs(uniq_str(&uniq));
            let bytes = send_frame::properties_len(&pairs);
            if bytes > send_frame::PROPERTIES_BYTES_MAX {
                return Err(ClientError::InvalidArgument(format!(
                    "properties of {bytes} bytes exceed 32767"
                )));
            }
            send_frame::put_batch_entry(out, message.flag, &message.body, &pairs);
            if !uniq_ids.is_empty() {
                uniq_ids.push(',');
            }
            uniq_ids.push_str(uniq_str(&uniq));
        }
        Ok(())
    }
}

/// The property pairs of one message besides its UNIQ_KEY.
struct MessageProperties<'a> {
    message: &'a Message,
    keys: std::borrow::Cow<'a, str>,
}

impl<'a> MessageProperties<'a> {
    fn of(message: &'a Message) -> MessageProperties<'a> {
        let keys = match message.keys.as_slice() {
            [] => std::borrow::Cow::Borrowed(""),
            [one] => std::borrow::Cow::Borrowed(one.as_str()),
            many => std::borrow::Cow::Owned(many.join(" ")),
        };
        MessageProperties { message, keys }
    }

    fn pairs<'b>(&'b self, uniq: &'b str) -> Vec<(&'b str, &'b str)> {
        let mut pairs = Vec::with_capacity(4 + self.message.properties.len());
        pairs.push((property::UNIQ_KEY, uniq));
        pairs.push((property::WAIT, "true"));
        if let Some(tags) = &self.message.tags {
            pairs.push((property::TAGS, tags.as_str()));
        }
        pairs.push((property::KEYS, &*self.keys));
        for (name, value) in &self.message.properties {
            pairs.push((name.as_str(), value.as_str()));
        }
        pairs
    }
}

fn batch_len(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|message| message.body.len() + 128)
        .sum()
}

fn check_batch(messages: &[Message]) -> Result<&str, ClientError> {
    let Some(first) = messages.first() else {
        return Err(ClientError::InvalidArgument("an empty batch".into()));
    };
    if messages.len() > BATCH_MESSAGES_MAX {
        return Err(ClientError::InvalidArgument(format!(
            "a batch of {} messages exceeds {BATCH_MESSAGES_MAX}",
            messages.len()
        )));
    }
    if messages.iter().any(|message| message.topic != first.topic) {
        return Err(ClientError::InvalidArgument(
            "all messages of a batch must have the same topic".into(),
        ));
    }
    Ok(&first.topic)
}

fn expect_result(result: Option<SendResult>) -> Result<SendResult, ClientError> {
    result.ok_or_else(|| ClientError::InvalidArgument("a oneway send has no result".into()))
}

/// Master addresses of every cached route.
pub(crate) async fn known_masters(client: &Client) -> Vec<String> {
    let mut addrs = Vec::new();
    for topic in client.cached_topics() {
        if let Ok(route) = client.publish_route(&topic).await {
            addrs.extend(route.masters.values().cloned());
        }
    }
    addrs.sort();
    addrs.dedup();
    addrs
}

async fn heartbeats(inner: Weak<Inner>) {
    loop {
        let period = match inner.upgrade() {
            Some(inner) => {
                let producer = Producer { inner };
                let data = HeartbeatData {
                    client_id: producer.client().client_id().to_owned(),
                    producer_data_set: vec![ProducerData {
                        group_name: producer.inner.config.group.clone(),
                    }],
                    ..HeartbeatData::default()
                };
                for addr in known_masters(producer.client()).await {
                    if let Err(error) = producer.client().heartbeat(&addr, &data).await {
                        tracing::debug!(%addr, %error, "producer heartbeat failed");
                    }
                }
                producer.inner.config.heartbeat_interval_ms.max(100)
            }
            None => return,
        };
        tokio::time::sleep(Duration::from_millis(period)).await;
    }
}
