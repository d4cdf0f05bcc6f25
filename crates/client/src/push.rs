//! The push consumer, clustering mode: the group's members split the topic's queues (Java's
//! "AVG" allocation, recomputed every 20 s and whenever a broker says the membership changed),
//! each assigned queue has a task that long-polls PULL_MESSAGE and hands what it finds to the
//! listener, and consumed offsets are committed every 5 s and on shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use quiver_wire::body::{ConsumerData, HeartbeatData, MessageQueue};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{pull_sys_flag, PullMessageRequestHeader};
use quiver_wire::message::StoredMessage;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::allocate::allocate_average;
use crate::client::Client;
use crate::error::ClientError;
use crate::requests::PullStatus;
use crate::subscription::Subscription;

/// Where a queue starts when the group has no committed offset for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumeFrom {
    /// The queue's end: only messages sent from now on (Java's default).
    LastOffset,
    /// The queue's first message.
    FirstOffset,
}

impl ConsumeFrom {
    pub(crate) fn java_name(self) -> &'static str {
        match self {
            ConsumeFrom::LastOffset => "CONSUME_FROM_LAST_OFFSET",
            ConsumeFrom::FirstOffset => "CONSUME_FROM_FIRST_OFFSET",
        }
    }
}

#[derive(Clone, Debug)]
pub struct PushConsumerConfig {
    pub group: String,
    pub topic: String,
    /// `*` or `tagA || tagB`.
    pub expression: String,
    pub consume_from: ConsumeFrom,
    pub pull_batch_size: i32,
    /// How long the broker may hold a pull that found nothing.
    pub suspend_ms: i64,
    pub rebalance_interval_ms: u64,
    pub commit_interval_ms: u64,
    pub heartbeat_interval_ms: u64,
    /// Wait after a failed pull (Java: 3 s; FLOW_CONTROL: 20 ms).
    pub pull_error_backoff_ms: u64,
}

impl PushConsumerConfig {
    pub fn new(group: &str, topic: &str) -> PushConsumerConfig {
        PushConsumerConfig {
            group: group.to_owned(),
            topic: topic.to_owned(),
            expression: "*".into(),
            consume_from: ConsumeFrom::LastOffset,
            pull_batch_size: 32,
            suspend_ms: 15_000,
            rebalance_interval_ms: 20_000,
            commit_interval_ms: 5_000,
            heartbeat_interval_ms: 30_000,
            pull_error_backoff_ms: 3_000,
        }
    }
}

/// Called with each batch of messages a pull found (already filtered by tag). The offset moves
/// past them when it returns, so a message is committed only after its listener call ended.
pub type Listener = Arc<dyn Fn(&MessageQueue, &[StoredMessage]) + Send + Sync>;

#[derive(Clone, Copy, Debug)]
struct Progress {
    /// Next offset to consume.
    offset: i64,
    /// Last offset sent to the broker.
    committed: i64,
}

struct Inner {
    client: Client,
    config: PushConsumerConfig,
    subscription: Subscription,
    listener: Listener,
    pulls: Mutex<HashMap<MessageQueue, JoinHandle<()>>>,
    progress: Mutex<HashMap<MessageQueue, Progress>>,
    rebalance_now: Notify,
    background: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in locked(&self.background).drain(..) {
            task.abort();
        }
        for (_, task) in locked(&self.pulls).drain() {
            task.abort();
        }
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Critical sections are single map operations; a poisoned lock still holds sound data.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub struct PushConsumer {
    inner: Arc<Inner>,
}

impl PushConsumer {
    /// Registers with the brokers of `config.topic`, takes this member's share of the queues
    /// and starts pulling. Fails if the topic does not exist or no broker accepts the
    /// heartbeat. Must be called inside a tokio runtime.
    pub async fn start(
        client: Client,
        config: PushConsumerConfig,
        listener: Listener,
    ) -> Result<PushConsumer, ClientError> {
        let subscription = Subscription::new(&config.topic, &config.expression, client.now_ms());
        let inner = Arc::new(Inner {
            client,
            config,
            subscription,
            listener,
            pulls: Mutex::new(HashMap::new()),
            progress: Mutex::new(HashMap::new()),
            rebalance_now: Notify::new(),
            background: Mutex::new(Vec::new()),
        });
        inner.client.refresh_route(&inner.config.topic).await?;
        heartbeat(&inner).await?;
        rebalance(&inner).await?;
        let weak = Arc::downgrade(&inner);
        let tasks = vec![
            tokio::spawn(rebalance_loop(weak.clone())),
            tokio::spawn(heartbeat_loop(weak.clone())),
            tokio::spawn(commit_loop(weak.clone())),
            tokio::spawn(watch_notifications(weak, inner.client.server_requests())),
        ];
        locked(&inner.background).extend(tasks);
        Ok(PushConsumer { inner })
    }

    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The queues this member pulls now, sorted.
    pub fn assigned(&self) -> Vec<MessageQueue> {
        let mut queues: Vec<MessageQueue> = locked(&self.inner.pulls).keys().cloned().collect();
        queues.sort();
        queues
    }

    /// Recomputes this member's share now instead of at the next timer.
    pub async fn rebalance(&self) -> Result<(), ClientError> {
        rebalance(&self.inner).await
    }

    /// Commits every consumed offset now (acknowledged requests).
    pub async fn commit(&self) -> Result<(), ClientError> {
        commit(&self.inner, true).await
    }

    /// Stops pulling, commits offsets and leaves the group (the other members take over).
    pub async fn shutdown(self) -> Result<(), ClientError> {
        let inner = &self.inner;
        for task in locked(&inner.background).drain(..) {
            task.abort();
        }
        let pulls: Vec<JoinHandle<()>> = locked(&inner.pulls).drain().map(|(_, t)| t).collect();
        for task in pulls {
            task.abort();
            // Wait until it really stopped, so no listener call races the final commit.
            let _ = task.await;
        }
        let committed = commit(inner, true).await;
        let route = inner.client.route(&inner.config.topic).await?;
        for addr in route.masters.values() {
            let _ = inner
                .client
                .unregister(addr, None, Some(&inner.config.group))
                .await;
        }
        committed
    }
}

fn heartbeat_data(inner: &Inner) -> HeartbeatData {
    let retry = Subscription::new(&format!("%RETRY%{}", inner.config.group), "*", 0);
    HeartbeatData {
        client_id: inner.client.client_id().to_owned(),
        consumer_data_set: vec![ConsumerData {
            consume_from_where: inner.config.consume_from.java_name().into(),
            consume_type: "CONSUME_PASSIVELY".into(),
            group_name: inner.config.group.clone(),
            message_model: "CLUSTERING".into(),
            subscription_data_set: vec![inner.subscription.data(), retry.data()],
            unit_mode: false,
        }],
        ..HeartbeatData::default()
    }
}

/// HEART_BEAT to every master of the topic; succeeds if at least one accepted it.
async fn heartbeat(inner: &Inner) -> Result<(), ClientError> {
    let route = inner.client.route(&inner.config.topic).await?;
    let data = heartbeat_data(inner);
    let mut last_error = None;
    let mut accepted = 0;
    for addr in route.masters.values() {
        match inner.client.heartbeat(addr, &data).await {
            Ok(()) => accepted += 1,
            Err(error) => last_error = Some(error),
        }
    }
    match last_error {
        Some(error) if accepted == 0 => Err(error),
        _ => Ok(()),
    }
}

async fn rebalance(inner: &Arc<Inner>) -> Result<(), ClientError> {
    let client = &inner.client;
    let route = client.refresh_route(&inner.config.topic).await?;
    let addrs: Vec<&String> = route.masters.values().collect();
    let Some(addr) = addrs.get(client.random().below(addrs.len())) else {
        return Err(ClientError::NoQueue {
            topic: inner.config.topic.clone(),
            what: "readable",
        });
    };
    let ids = client.consumer_ids(addr, &inner.config.group).await?;
    let mine = allocate_average(&route.read_queues, &ids, client.client_id());
    let current: Vec<MessageQueue> = locked(&inner.pulls).keys().cloned().collect();
    for queue in current.iter().filter(|queue| !mine.contains(queue)) {
        drop_queue(inner, queue).await;
    }
    for queue in mine.iter().filter(|queue| !current.contains(queue)) {
        match start_offset(inner, queue).await {
            Ok(offset) => {
                let progress = Progress {
                    offset,
                    committed: offset,
                };
                locked(&inner.progress).insert(queue.clone(), progress);
                let task = tokio::spawn(pull_loop(Arc::downgrade(inner), queue.clone()));
                locked(&inner.pulls).insert(queue.clone(), task);
            }
            // Skipped for now; the next rebalance tries again.
            Err(error) => tracing::warn!(?queue, %error, "cannot find where to start"),
        }
    }
    Ok(())
}

async fn drop_queue(inner: &Inner, queue: &MessageQueue) {
    let task = locked(&inner.pulls).remove(queue);
    if let Some(task) = task {
        task.abort();
        let _ = task.await;
    }
    let progress = locked(&inner.progress).remove(queue);
    if let Some(progress) = progress.filter(|p| p.offset != p.committed) {
        if let Ok(route) = inner.client.route(&queue.topic).await {
            if let Some(addr) = route.master(&queue.broker_name) {
                let group = &inner.config.group;
                let result = inner
                    .client
                    .commit_offset(addr, group, queue, progress.offset, true)
                    .await;
                if let Err(error) = result {
                    tracing::warn!(?queue, %error, "cannot commit the offset of a dropped queue");
                }
            }
        }
    }
}

/// The committed offset, or where `consume_from` says to start.
async fn start_offset(inner: &Inner, queue: &MessageQueue) -> Result<i64, ClientError> {
    let route = inner.client.route(&queue.topic).await?;
    let addr = route
        .master(&queue.broker_name)
        .ok_or_else(|| ClientError::NoBrokerAddr {
            broker_name: queue.broker_name.clone(),
        })?;
    if let Some(offset) = inner
        .client
        .query_offset(addr, &inner.config.group, queue)
        .await?
    {
        return Ok(offset);
    }
    match inner.config.consume_from {
        ConsumeFrom::FirstOffset => inner.client.queue_offset(addr, queue, false).await,
        ConsumeFrom::LastOffset => inner.client.queue_offset(addr, queue, true).await,
    }
}

async fn pull_loop(inner: Weak<Inner>, queue: MessageQueue) {
    loop {
        let Some(inner) = inner.upgrade() else { return };
        let backoff = match pull_once(&inner, &queue).await {
            Ok(()) => None,
            Err(ClientError::Refused { code, .. }) if code == response_code::FLOW_CONTROL => {
                Some(Duration::from_millis(20))
            }
            Err(error) => {
                tracing::debug!(?queue, %error, "pull failed");
                Some(Duration::from_millis(inner.config.pull_error_backoff_ms))
            }
        };
        drop(inner);
        if let Some(backoff) = backoff {
            tokio::time::sleep(backoff).await;
        }
    }
}

async fn pull_once(inner: &Inner, queue: &MessageQueue) -> Result<(), ClientError> {
    let Some(progress) = locked(&inner.progress).get(queue).copied() else {
        return Ok(());
    };
    let route = inner.client.route(&queue.topic).await?;
    let addr = route
        .master(&queue.broker_name)
        .ok_or_else(|| ClientError::NoBrokerAddr {
            broker_name: queue.broker_name.clone(),
        })?;
    let mut sys_flag = pull_sys_flag::SUSPEND | pull_sys_flag::SUBSCRIPTION;
    if progress.offset > 0 {
        sys_flag |= pull_sys_flag::COMMIT_OFFSET;
    }
    let header = PullMessageRequestHeader {
        consumer_group: inner.config.group.clone(),
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        queue_offset: progress.offset,
        max_msg_nums: inner.config.pull_batch_size,
        sys_flag,
        commit_offset: progress.offset,
        suspend_timeout_millis: inner.config.suspend_ms,
        subscription: Some(inner.subscription.expression.clone()),
        sub_version: inner.subscription.version,
        expression_type: Some("TAG".into()),
        max_msg_bytes: None,
    };
    let result = inner
        .client
        .pull(addr, request_code::PULL_MESSAGE, &header)
        .await?;
    // The broker stored the piggy-backed commit offset.
    let committed = if sys_flag & pull_sys_flag::COMMIT_OFFSET != 0 {
        Some(progress.offset)
    } else {
        None
    };
    if let PullStatus::Found(messages) = &result.status {
        let kept: Vec<StoredMessage> = messages
            .iter()
            .filter(|message| inner.subscription.matches(message))
            .cloned()
            .collect();
        if !kept.is_empty() {
            (inner.listener)(queue, &kept);
        }
    }
    if let Some(entry) = locked(&inner.progress).get_mut(queue) {
        entry.offset = result.next_begin_offset;
        if let Some(committed) = committed {
            entry.committed = entry.committed.max(committed);
        }
    }
    Ok(())
}

/// Sends every offset that moved since it was last sent.
async fn commit(inner: &Inner, acknowledged: bool) -> Result<(), ClientError> {
    let moved: Vec<(MessageQueue, i64)> = locked(&inner.progress)
        .iter()
        .filter(|(_, progress)| progress.offset != progress.committed)
        .map(|(queue, progress)| (queue.clone(), progress.offset))
        .collect();
    if moved.is_empty() {
        return Ok(());
    }
    let route = inner.client.route(&inner.config.topic).await?;
    let mut result = Ok(());
    for (queue, offset) in moved {
        let Some(addr) = route.master(&queue.broker_name) else {
            continue;
        };
        let group = &inner.config.group;
        match inner
            .client
            .commit_offset(addr, group, &queue, offset, acknowledged)
            .await
        {
            Ok(()) => {
                if let Some(entry) = locked(&inner.progress).get_mut(&queue) {
                    entry.committed = offset;
                }
            }
            Err(error) => result = Err(error),
        }
    }
    result
}

async fn rebalance_loop(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let period = Duration::from_millis(strong.config.rebalance_interval_ms.max(100));
        let notified = {
            let wait = strong.rebalance_now.notified();
            tokio::select! {
                _ = wait => true,
                _ = tokio::time::sleep(period) => false,
            }
        };
        if let Err(error) = rebalance(&strong).await {
            tracing::warn!(%error, notified, "rebalance failed");
        }
    }
}

async fn heartbeat_loop(inner: Weak<Inner>) {
    loop {
        let period = match inner.upgrade() {
            Some(inner) => Duration::from_millis(inner.config.heartbeat_interval_ms.max(100)),
            None => return,
        };
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(error) = heartbeat(&inner).await {
            tracing::warn!(%error, "consumer heartbeat failed");
        }
    }
}

async fn commit_loop(inner: Weak<Inner>) {
    loop {
        let period = match inner.upgrade() {
            Some(inner) => Duration::from_millis(inner.config.commit_interval_ms.max(100)),
            None => return,
        };
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(error) = commit(&inner, false).await {
            tracing::debug!(%error, "offset commit failed");
        }
    }
}

async fn watch_notifications(
    inner: Weak<Inner>,
    mut requests: tokio::sync::broadcast::Receiver<crate::connection::ServerRequest>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let request = match requests.recv().await {
            Ok(request) => request,
            // Missed some: rebalancing once covers whatever they said.
            Err(RecvError::Lagged(_)) => {
                if let Some(inner) = inner.upgrade() {
                    inner.rebalance_now.notify_one();
                }
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let Some(inner) = inner.upgrade() else { return };
        let command = &request.command;
        if command.code == request_code::NOTIFY_CONSUMER_IDS_CHANGED
            && command.ext_get("consumerGroup") == Some(inner.config.group.as_str())
        {
            inner.rebalance_now.notify_one();
        }
    }
}
