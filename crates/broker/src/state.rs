//! The broker's state: `Broker` bundles the owners of each piece of it (store, topics, offsets,
//! clients, parked pulls, queue locks, delay offsets); each part does its own locking. Handlers
//! and the background tasks use it; it knows nothing of sockets, tasks or start-up
//! (`start.rs`), and it takes the time as a value.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use quiver_store::{OpenError, QueueBounds, RecoveryReport, Store};
use quiver_wire::code::request_code;
use quiver_wire::{Encoding, ExtFields};
use tokio::sync::Notify;

use crate::clients::ClientTable;
use crate::config::BrokerConfig;
use crate::connection::Connection;
use crate::delay::DelayOffsets;
use crate::ha::Replication;
use crate::locks::QueueLocks;
use crate::long_poll::PullWaiters;
use crate::memory::MemoryQueues;
use crate::offsets::ConsumerOffsets;
use crate::pop::PopState;
use crate::topic::{TopicError, TopicTable};

/// Parked pulls at once; each holds a small task and a 15 s timer.
const PARKED_PULLS_MAX: usize = 100_000;

#[derive(Default)]
pub struct Counters {
    pub messages_put: AtomicU64,
    pub messages_got: AtomicU64,
    /// Timer messages in the wheel's memory (the buckets due within a minute or so).
    pub timer_pending: AtomicU64,
    rates: std::sync::Mutex<Rates>,
}

#[derive(Default)]
struct Rates {
    sampled_ms: i64,
    put: u64,
    got: u64,
    put_tps: f64,
    got_tps: f64,
}

impl Counters {
    /// Messages per second put and got over the last sampling period.
    pub fn tps(&self) -> (f64, f64) {
        let rates = self.rates.lock().expect("rates lock poisoned");
        (rates.put_tps, rates.got_tps)
    }

    pub fn sample(&self, now_ms: i64) {
        let put = self.messages_put.load(Ordering::Relaxed);
        let got = self.messages_got.load(Ordering::Relaxed);
        let mut rates = self.rates.lock().expect("rates lock poisoned");
        let elapsed_ms = now_ms - rates.sampled_ms;
        if rates.sampled_ms > 0 && elapsed_ms > 0 {
            rates.put_tps = (put - rates.put) as f64 * 1000.0 / elapsed_ms as f64;
            rates.got_tps = (got - rates.got) as f64 * 1000.0 / elapsed_ms as f64;
        }
        *rates = Rates {
            sampled_ms: now_ms,
            put,
            got,
            ..*rates
        };
    }
}

pub struct Broker {
    pub config: BrokerConfig,
    pub store: Store,
    pub topics: TopicTable,
    pub offsets: ConsumerOffsets,
    pub clients: ClientTable,
    pub waiters: Arc<PullWaiters>,
    pub locks: QueueLocks,
    pub delay_offsets: DelayOffsets,
    /// The rings of non-persistent topics.
    pub memory: MemoryQueues,
    /// Pop consumption: modes, cursors and messages in flight.
    pub pop: PopState,
    /// The address written into records and message ids: reachable `brokerIP1:port`.
    pub store_host: SocketAddr,
    /// Where slaves reach this broker's HA port (registered as `haServerAddr`).
    pub ha_host: SocketAddr,
    /// Master/slave replication: what a SYNC_MASTER's sends wait for, a slave's master.
    pub replication: Arc<Replication>,
    pub counters: Counters,
    pub started_ms: i64,
    register_now: Notify,
    next_queue: AtomicU32,
    next_uniq: AtomicU32,
}

/// Why the broker's state could not be opened from its store root.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Not a `source`: the message already holds the store's, and `{:#}` would print it twice.
    #[error("cannot open the store: {0}")]
    Store(OpenError),
    #[error(transparent)]
    Topics(#[from] TopicError),
    #[error("cannot read consumer offsets: {0}")]
    Offsets(String),
    #[error("cannot read delay offsets: {0}")]
    DelayOffsets(String),
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryError),
    #[error("cannot read the pop state: {0}")]
    Pop(String),
    #[error("{0}")]
    NonPersistent(String),
}

impl From<OpenError> for StateError {
    fn from(error: OpenError) -> StateError {
        StateError::Store(error)
    }
}

/// What the broker keeps on disk, opened before it has an address to put in records.
pub struct Persisted {
    pub store: Store,
    pub topics: TopicTable,
    pub offsets: ConsumerOffsets,
    pub delay_offsets: DelayOffsets,
    pub memory: MemoryQueues,
    pub pop: PopState,
}

impl Persisted {
    /// Opens (and, after a crash, recovers) the store and the tables under the store root.
    /// Blocking: recovery reads the log's tail.
    pub fn open(
        config: &BrokerConfig,
        now_ms: i64,
    ) -> Result<(Persisted, RecoveryReport), StateError> {
        let (store, recovery) = Store::open(config.store_config())?;
        let config_dir = config.store_root.join("config");
        let topics = TopicTable::open(
            config_dir.join("topics.json"),
            config.auto_create_topic,
            now_ms,
        )?;
        let offsets = ConsumerOffsets::open(config_dir.join("consumerOffset.json"))
            .map_err(StateError::Offsets)?;
        let delay_offsets = DelayOffsets::open(config_dir.join("delayOffset.json"))
            .map_err(StateError::DelayOffsets)?;
        topics.create_if_absent(crate::topic::topic_config(
            crate::delay::SCHEDULE_TOPIC,
            config.delay_levels_ms.len() as i32,
            crate::topic::PERM_READ | crate::topic::PERM_WRITE,
        ))?;
        topics.create_if_absent(crate::topic::topic_config(
            crate::timer::TIMER_TOPIC,
            1,
            crate::topic::PERM_READ | crate::topic::PERM_WRITE,
        ))?;
        create_client_system_topics(config, &topics)?;
        adopt_stored_topics(&store, &topics);
        mark_non_persistent_topics(config, &topics)?;
        let memory = MemoryQueues::open(
            config_dir.join("memoryQueueOffsets.json"),
            crate::memory::Limits {
                queue_bytes: config.non_persistent_queue_bytes,
                broker_bytes: config.non_persistent_bytes_max,
            },
        )?;
        let pop = PopState::open(
            config_dir.join("popState.json"),
            crate::pop::Limits {
                per_queue: config.pop_in_flight_max_per_queue,
                per_group: config.pop_in_flight_max_per_group,
            },
        )
        .map_err(StateError::Pop)?;
        let persisted = Persisted {
            store,
            topics,
            offsets,
            delay_offsets,
            memory,
            pop,
        };
        Ok((persisted, recovery))
    }
}

/// The topics RocketMQ's broker creates at start for clients' features, with its shapes (one
/// queue, read and write): the cluster's reply topic always, so that a consumer's reply finds a
/// route; the message-trace topic only with `traceTopicEnable` (without it, a client's first
/// trace record creates it from TBW102 like any other topic, when auto-create is on).
fn create_client_system_topics(
    config: &BrokerConfig,
    topics: &TopicTable,
) -> Result<(), StateError> {
    let read_write = crate::topic::PERM_READ | crate::topic::PERM_WRITE;
    let reply_topic = crate::topic::reply_topic(&config.cluster_name);
    topics.create_if_absent(crate::topic::topic_config(&reply_topic, 1, read_write))?;
    if config.trace_topic_enable {
        let trace_topic = &config.msg_trace_topic_name;
        topics.create_if_absent(crate::topic::topic_config(trace_topic, 1, read_write))?;
    }
    Ok(())
}

/// Makes the topics `nonPersistentTopics` lists non-persistent, creating those that are missing
/// with `defaultTopicQueueNums` queues. A listed topic that exists as a persistent one is
/// refused: its messages on disk would no longer be served.
fn mark_non_persistent_topics(
    config: &BrokerConfig,
    topics: &TopicTable,
) -> Result<(), StateError> {
    for name in &config.non_persistent_topics {
        match topics.get(name) {
            Some(existing) if crate::topic::is_memory_topic(&existing) => {}
            Some(_) => {
                return Err(StateError::NonPersistent(format!(
                    "nonPersistentTopics lists {name}, which exists as a persistent topic; \
                     delete it first (mqadmin deleteTopic) or take it off the list"
                )))
            }
            None => {
                let mut topic = crate::topic::topic_config(
                    name,
                    config.default_topic_queue_nums,
                    crate::topic::PERM_READ | crate::topic::PERM_WRITE,
                );
                topic.attributes.insert(
                    crate::memory::PERSISTENCE_ATTRIBUTE.to_string(),
                    crate::memory::PERSISTENCE_MEMORY.to_string(),
                );
                topics.create_if_absent(topic)?;
                tracing::info!(topic = %name, "non-persistent topic created from broker.conf");
            }
        }
    }
    Ok(())
}

/// Gives a topic config to every topic the store holds messages of but the topic table lacks,
/// with as many queues as it has ConsumeQueues. Why: a slave builds ConsumeQueues from the
/// master's log at once, but learns the master's topic table only at its next copy; a slave
/// restarted as master in between would otherwise refuse pulls of messages it holds. Names
/// that are not valid topic names are left alone.
fn adopt_stored_topics(store: &Store, topics: &TopicTable) {
    let mut queues: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    for (topic, queue_id) in store.queues() {
        let count = queues.entry(topic).or_default();
        *count = (*count).max(queue_id + 1);
    }
    for (topic, count) in queues {
        if topics.shape(&topic).is_some() {
            continue;
        }
        let config = crate::topic::topic_config(
            &topic,
            count as i32,
            crate::topic::PERM_READ | crate::topic::PERM_WRITE,
        );
        match topics.create_if_absent(config) {
            Ok(_) => tracing::warn!(
                %topic,
                queues = count,
                "the store holds messages of a topic missing from the topic table: added it"
            ),
            Err(error) => tracing::warn!(%topic, %error, "stored topic left without a config"),
        }
    }
}

impl Broker {
    /// The broker over its opened state, writing `store_host` into what it stores. Parked pulls
    /// are woken by the store's arrivals from here on.
    pub fn new(
        config: BrokerConfig,
        persisted: Persisted,
        store_host: SocketAddr,
        ha_host: SocketAddr,
        now_ms: i64,
    ) -> Broker {
        let Persisted {
            store,
            topics,
            offsets,
            delay_offsets,
            memory,
            pop,
        } = persisted;
        let waiters = Arc::new(PullWaiters::new(PARKED_PULLS_MAX));
        let replication = Arc::new(Replication::new(&config));
        let arrival_waiters = waiters.clone();
        let arrival_replication = replication.clone();
        store.set_arrival_listener(Arc::new(
            move |topic: &str, queue_id: u32, max_offset: u64| {
                arrival_waiters.arrived(topic, queue_id, max_offset);
                arrival_replication.log_grew();
            },
        ));
        Broker {
            config,
            store,
            topics,
            offsets,
            clients: ClientTable::default(),
            waiters,
            locks: QueueLocks::default(),
            delay_offsets,
            memory,
            pop,
            store_host,
            ha_host,
            replication,
            counters: Counters::default(),
            started_ms: now_ms,
            register_now: Notify::new(),
            next_queue: AtomicU32::new(0),
            next_uniq: AtomicU32::new(0),
        }
    }

    /// A queue's oldest and next offsets, from its ring for a non-persistent topic, else from
    /// its ConsumeQueue.
    pub fn queue_bounds(&self, topic: &str, queue_id: u32) -> QueueBounds {
        if self.topics.shape(topic).is_some_and(|shape| shape.memory) {
            self.memory.bounds(topic, queue_id)
        } else {
            self.store.bounds(topic, queue_id)
        }
    }

    /// Round-robin queue choice for sends that leave it to the broker.
    pub fn pick_queue(&self, queues: i32) -> i32 {
        (self.next_queue.fetch_add(1, Ordering::Relaxed) % queues.max(1) as u32) as i32
    }

    /// A UNIQ_KEY for messages whose producer did not set one.
    pub fn new_uniq_id(&self, now_ms: i64) -> String {
        let counter = self.next_uniq.fetch_add(1, Ordering::Relaxed);
        quiver_wire::message::new_uniq_id(self.store_host.ip(), counter, now_ms)
    }

    /// Asks the registration task to register with the name servers now (a topic changed).
    pub fn topics_changed(&self) {
        self.register_now.notify_one();
    }

    /// Completes when a topic changed since the last call (see `topics_changed`).
    pub async fn topics_changed_since(&self) {
        self.register_now.notified().await
    }

    pub fn connection_closed(&self, connection: &Connection) {
        for group in self.clients.connection_closed(connection.id) {
            self.notify_consumers_changed(&group);
        }
    }

    /// Tells every member of a group to rebalance now instead of at its next 20 s timer.
    pub fn notify_consumers_changed(&self, group: &str) {
        for connection in self.clients.consumer_connections(group) {
            let ext = ExtFields::new().with("consumerGroup", group);
            connection.send_oneway_request(
                request_code::NOTIFY_CONSUMER_IDS_CHANGED,
                ext,
                Encoding::Json,
            );
        }
    }

    /// The periodic sweep: samples the put and get rates, forgets clients silent for too long
    /// (telling their groups) and lapsed queue locks.
    pub fn sweep(&self, now_ms: i64) {
        self.counters.sample(now_ms);
        for group in self.clients.expire(now_ms) {
            self.notify_consumers_changed(&group);
        }
        self.locks.expire(now_ms);
    }
}
