//! The lite pull consumer: the caller polls. In subscribe mode the group's members split the
//! queues as push consumers do; in assign mode the caller names the queues. Each queue has at
//! most one long-polling LITE_PULL_MESSAGE in flight, kept across polls, so a poll returns as
//! soon as any queue has messages. Offsets move when a poll returns messages and are
//! committed by `commit` or every `auto_commit_interval_ms` during polls.

use std::collections::BTreeMap;
use std::time::Duration;

use quiver_wire::body::{ConsumerData, HeartbeatData, MessageQueue};
use quiver_wire::code::request_code;
use quiver_wire::header::{pull_sys_flag, PullMessageRequestHeader};
use quiver_wire::message::StoredMessage;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};

use crate::allocate::allocate_average;
use crate::client::Client;
use crate::error::ClientError;
use crate::push::ConsumeFrom;
use crate::requests::{PullResult, PullStatus};
use crate::subscription::Subscription;

/// Finished pulls waiting for `poll`; one per queue at most is in flight, so this only needs
/// to exceed the number of queues a consumer can hold.
const OUTCOMES_BUFFERED: usize = 1_024;

#[derive(Clone, Debug)]
pub struct LitePullConfig {
    pub group: String,
    pub pull_batch_size: i32,
    pub suspend_ms: i64,
    pub consume_from: ConsumeFrom,
    /// None: only `commit` sends offsets.
    pub auto_commit_interval_ms: Option<u64>,
    pub rebalance_interval_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub pull_error_backoff_ms: u64,
}

impl LitePullConfig {
    pub fn new(group: &str) -> LitePullConfig {
        LitePullConfig {
            group: group.to_owned(),
            pull_batch_size: 10,
            suspend_ms: 20_000,
            consume_from: ConsumeFrom::LastOffset,
            auto_commit_interval_ms: Some(5_000),
            rebalance_interval_ms: 20_000,
            heartbeat_interval_ms: 30_000,
            pull_error_backoff_ms: 1_000,
        }
    }
}

#[derive(Default)]
struct Cursor {
    /// Next offset to read; None until looked up.
    offset: Option<i64>,
    committed: Option<i64>,
    /// Bumped by `seek`, so a pull started before it is recognised and ignored.
    generation: u64,
    in_flight: Option<JoinHandle<()>>,
    retry_at: Option<Instant>,
}

struct Outcome {
    queue: MessageQueue,
    generation: u64,
    result: Result<PullResult, ClientError>,
}

pub struct LitePullConsumer {
    client: Client,
    config: LitePullConfig,
    subscription: Option<Subscription>,
    cursors: BTreeMap<MessageQueue, Cursor>,
    outcomes_sender: mpsc::Sender<Outcome>,
    outcomes: mpsc::Receiver<Outcome>,
    next_rebalance: Instant,
    next_heartbeat: Instant,
    next_commit: Instant,
}

impl Drop for LitePullConsumer {
    fn drop(&mut self) {
        for cursor in self.cursors.values_mut() {
            if let Some(task) = cursor.in_flight.take() {
                task.abort();
            }
        }
    }
}

impl LitePullConsumer {
    pub fn new(client: Client, config: LitePullConfig) -> LitePullConsumer {
        let (outcomes_sender, outcomes) = mpsc::channel(OUTCOMES_BUFFERED);
        let now = Instant::now();
        LitePullConsumer {
            client,
            config,
            subscription: None,
            cursors: BTreeMap::new(),
            outcomes_sender,
            outcomes,
            next_rebalance: now,
            next_heartbeat: now,
            next_commit: now,
        }
    }

    /// Joins the group for `topic` and takes this member's share of its queues.
    pub async fn subscribe(&mut self, topic: &str, expression: &str) -> Result<(), ClientError> {
        self.client.refresh_route(topic).await?;
        self.subscription = Some(Subscription::new(topic, expression, self.client.now_ms()));
        self.heartbeat().await?;
        self.rebalance().await
    }

    /// Reads exactly these queues, outside any group rebalance.
    pub fn assign(&mut self, queues: &[MessageQueue]) {
        self.subscription = None;
        self.retain_queues(queues);
    }

    /// The queues read now, sorted.
    pub fn assigned(&self) -> Vec<MessageQueue> {
        self.cursors.keys().cloned().collect()
    }

    /// The queues of `topic` (from its route), for `assign`.
    pub async fn queues_of(&self, topic: &str) -> Result<Vec<MessageQueue>, ClientError> {
        Ok(self.client.refresh_route(topic).await?.read_queues.clone())
    }

    pub fn seek(&mut self, queue: &MessageQueue, offset: i64) -> Result<(), ClientError> {
        let cursor = self.cursors.get_mut(queue).ok_or_else(|| {
            ClientError::InvalidArgument(format!("{queue:?} is not assigned to this consumer"))
        })?;
        if let Some(task) = cursor.in_flight.take() {
            task.abort();
        }
        cursor.generation += 1;
        cursor.offset = Some(offset);
        cursor.retry_at = None;
        Ok(())
    }

    pub async fn seek_to_begin(&mut self, queue: &MessageQueue) -> Result<(), ClientError> {
        let offset = self
            .client
            .queue_offset(&self.addr(queue).await?, queue, false)
            .await?;
        self.seek(queue, offset)
    }

    pub async fn seek_to_end(&mut self, queue: &MessageQueue) -> Result<(), ClientError> {
        let offset = self
            .client
            .queue_offset(&self.addr(queue).await?, queue, true)
            .await?;
        self.seek(queue, offset)
    }

    /// The next offset this consumer reads from `queue`, once known.
    pub fn position(&self, queue: &MessageQueue) -> Option<i64> {
        self.cursors.get(queue).and_then(|cursor| cursor.offset)
    }

    /// Messages from any assigned queue, or an empty list when `timeout` passes first.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<StoredMessage>, ClientError> {
        let deadline = Instant::now() + timeout;
        self.housekeeping().await;
        loop {
            let wake = self.start_pulls(deadline).await;
            let outcome = match timeout_at(wake, self.outcomes.recv()).await {
                Ok(Some(outcome)) => outcome,
                // The sender lives in `self`, so the channel cannot close.
                Ok(None) => return Ok(Vec::new()),
                Err(_) if wake >= deadline => return Ok(Vec::new()),
                Err(_) => continue,
            };
            if let Some(messages) = self.take_outcome(outcome) {
                return Ok(messages);
            }
        }
    }

    /// Commits the read offset of every queue that moved (acknowledged requests).
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        self.commit_with(true).await
    }

    /// The group's committed offset for `queue` on the broker.
    pub async fn committed(&self, queue: &MessageQueue) -> Result<Option<i64>, ClientError> {
        let addr = self.addr(queue).await?;
        self.client
            .query_offset(&addr, &self.config.group, queue)
            .await
    }

    /// Stops pulling, commits when auto-commit is on, and leaves the group.
    pub async fn shutdown(mut self) -> Result<(), ClientError> {
        for cursor in self.cursors.values_mut() {
            if let Some(task) = cursor.in_flight.take() {
                task.abort();
            }
        }
        let result = if self.config.auto_commit_interval_ms.is_some() {
            self.commit_with(true).await
        } else {
            Ok(())
        };
        if let Some(subscription) = &self.subscription {
            let route = self.client.route(&subscription.topic).await?;
            for addr in route.masters.values() {
                let _ = self
                    .client
                    .unregister(addr, None, Some(&self.config.group))
                    .await;
            }
        }
        result
    }

    async fn housekeeping(&mut self) {
        let now = Instant::now();
        if self.subscription.is_some() && now >= self.next_heartbeat {
            if let Err(error) = self.heartbeat().await {
                tracing::warn!(%error, "lite pull heartbeat failed");
            }
        }
        if self.subscription.is_some() && now >= self.next_rebalance {
            if let Err(error) = self.rebalance().await {
                tracing::warn!(%error, "lite pull rebalance failed");
            }
        }
        if let Some(interval_ms) = self.config.auto_commit_interval_ms {
            if now >= self.next_commit {
                self.next_commit = now + Duration::from_millis(interval_ms);
                if let Err(error) = self.commit_with(false).await {
                    tracing::debug!(%error, "lite pull auto-commit failed");
                }
            }
        }
    }

    async fn heartbeat(&mut self) -> Result<(), ClientError> {
        let Some(subscription) = &self.subscription else {
            return Ok(());
        };
        self.next_heartbeat =
            Instant::now() + Duration::from_millis(self.config.heartbeat_interval_ms);
        let data = HeartbeatData {
            client_id: self.client.client_id().to_owned(),
            consumer_data_set: vec![ConsumerData {
                consume_from_where: self.config.consume_from.java_name().into(),
                consume_type: "CONSUME_ACTIVELY".into(),
                group_name: self.config.group.clone(),
                message_model: "CLUSTERING".into(),
                subscription_data_set: vec![subscription.data()],
                unit_mode: false,
            }],
            ..HeartbeatData::default()
        };
        let route = self.client.route(&subscription.topic).await?;
        for addr in route.masters.values() {
            self.client.heartbeat(addr, &data).await?;
        }
        Ok(())
    }

    async fn rebalance(&mut self) -> Result<(), ClientError> {
        let Some(subscription) = &self.subscription else {
            return Ok(());
        };
        self.next_rebalance =
            Instant::now() + Duration::from_millis(self.config.rebalance_interval_ms);
        let route = self.client.refresh_route(&subscription.topic).await?;
        let Some(addr) = route.masters.values().next() else {
            return Ok(());
        };
        let ids = self.client.consumer_ids(addr, &self.config.group).await?;
        let mine = allocate_average(&route.read_queues, &ids, self.client.client_id());
        self.retain_queues(&mine);
        Ok(())
    }

    fn retain_queues(&mut self, queues: &[MessageQueue]) {
        self.cursors.retain(|queue, cursor| {
            let keep = queues.contains(queue);
            if !keep {
                if let Some(task) = cursor.in_flight.take() {
                    task.abort();
                }
            }
            keep
        });
        for queue in queues {
            self.cursors.entry(queue.clone()).or_default();
        }
    }

    async fn addr(&self, queue: &MessageQueue) -> Result<String, ClientError> {
        let route = self.client.route(&queue.topic).await?;
        route
            .master(&queue.broker_name)
            .map(String::from)
            .ok_or_else(|| ClientError::NoBrokerAddr {
                broker_name: queue.broker_name.clone(),
            })
    }

    /// Starts a pull on every idle queue; returns when `poll` should look again without an
    /// outcome (the earliest retry after an error, or the deadline).
    async fn start_pulls(&mut self, deadline: Instant) -> Instant {
        let mut wake = deadline;
        let now = Instant::now();
        let queues: Vec<MessageQueue> = self.cursors.keys().cloned().collect();
        for queue in queues {
            let (idle, retry_at, offset) = match self.cursors.get(&queue) {
                Some(c) => (c.in_flight.is_none(), c.retry_at, c.offset),
                None => continue,
            };
            if !idle {
                continue;
            }
            if let Some(retry_at) = retry_at.filter(|at| *at > now) {
                wake = wake.min(retry_at);
                continue;
            }
            let offset = match offset {
                Some(offset) => offset,
                None => match self.initial_offset(&queue).await {
                    Ok(offset) => offset,
                    Err(error) => {
                        tracing::debug!(?queue, %error, "cannot find where to start");
                        self.back_off(&queue, &mut wake);
                        continue;
                    }
                },
            };
            self.spawn_pull(&queue, offset).await;
        }
        wake
    }

    fn back_off(&mut self, queue: &MessageQueue, wake: &mut Instant) {
        let at = Instant::now() + Duration::from_millis(self.config.pull_error_backoff_ms);
        if let Some(cursor) = self.cursors.get_mut(queue) {
            cursor.retry_at = Some(at);
        }
        *wake = (*wake).min(at);
    }

    async fn initial_offset(&mut self, queue: &MessageQueue) -> Result<i64, ClientError> {
        let addr = self.addr(queue).await?;
        let committed = self
            .client
            .query_offset(&addr, &self.config.group, queue)
            .await?;
        let offset = match (committed, self.config.consume_from) {
            (Some(offset), _) => offset,
            (None, ConsumeFrom::FirstOffset) => {
                self.client.queue_offset(&addr, queue, false).await?
            }
            (None, ConsumeFrom::LastOffset) => self.client.queue_offset(&addr, queue, true).await?,
        };
        if let Some(cursor) = self.cursors.get_mut(queue) {
            cursor.offset = Some(offset);
            cursor.committed = committed;
        }
        Ok(offset)
    }

    async fn spawn_pull(&mut self, queue: &MessageQueue, offset: i64) {
        let (subscription, version) = match &self.subscription {
            Some(subscription) => (subscription.expression.clone(), subscription.version),
            None => ("*".to_owned(), 0),
        };
        let header = PullMessageRequestHeader {
            consumer_group: self.config.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            queue_offset: offset,
            max_msg_nums: self.config.pull_batch_size,
            sys_flag: pull_sys_flag::SUSPEND
                | pull_sys_flag::SUBSCRIPTION
                | pull_sys_flag::LITE_PULL,
            commit_offset: 0,
            suspend_timeout_millis: self.config.suspend_ms,
            subscription: Some(subscription),
            sub_version: version,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
        };
        let Some(cursor) = self.cursors.get_mut(queue) else {
            return;
        };
        let (client, sender, queue, generation) = (
            self.client.clone(),
            self.outcomes_sender.clone(),
            queue.clone(),
            cursor.generation,
        );
        cursor.in_flight = Some(tokio::spawn(async move {
            let result = match client.route(&queue.topic).await {
                Ok(route) => match route.master(&queue.broker_name) {
                    Some(addr) => {
                        client
                            .pull(addr, request_code::LITE_PULL_MESSAGE, &header)
                            .await
                    }
                    None => Err(ClientError::NoBrokerAddr {
                        broker_name: queue.broker_name.clone(),
                    }),
                },
                Err(error) => Err(error),
            };
            let _ = sender
                .send(Outcome {
                    queue,
                    generation,
                    result,
                })
                .await;
        }));
    }

    /// Applies a finished pull; returns its messages if it found any for this subscription.
    fn take_outcome(&mut self, outcome: Outcome) -> Option<Vec<StoredMessage>> {
        let backoff = Duration::from_millis(self.config.pull_error_backoff_ms);
        let cursor = self.cursors.get_mut(&outcome.queue)?;
        if cursor.generation != outcome.generation {
            return None;
        }
        cursor.in_flight = None;
        let result = match outcome.result {
            Ok(result) => result,
            Err(error) => {
                tracing::debug!(queue = ?outcome.queue, %error, "lite pull failed");
                cursor.retry_at = Some(Instant::now() + backoff);
                return None;
            }
        };
        cursor.offset = Some(result.next_begin_offset);
        let PullStatus::Found(messages) = result.status else {
            return None;
        };
        let kept: Vec<StoredMessage> = match &self.subscription {
            Some(subscription) => messages
                .into_iter()
                .filter(|message| subscription.matches(message))
                .collect(),
            None => messages,
        };
        (!kept.is_empty()).then_some(kept)
    }

    async fn commit_with(&mut self, acknowledged: bool) -> Result<(), ClientError> {
        let moved: Vec<(MessageQueue, i64)> = self
            .cursors
            .iter()
            .filter_map(|(queue, cursor)| {
                let offset = cursor.offset?;
                (cursor.committed != Some(offset)).then(|| (queue.clone(), offset))
            })
            .collect();
        let mut result = Ok(());
        for (queue, offset) in moved {
            let group = self.config.group.clone();
            let outcome = match self.addr(&queue).await {
                Ok(addr) => {
                    self.client
                        .commit_offset(&addr, &group, &queue, offset, acknowledged)
                        .await
                }
                Err(error) => Err(error),
            };
            match outcome {
                Ok(()) => {
                    if let Some(cursor) = self.cursors.get_mut(&queue) {
                        cursor.committed = Some(offset);
                    }
                }
                Err(error) => result = Err(error),
            }
        }
        result
    }
}
