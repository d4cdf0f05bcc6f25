//! The broker's state: `Broker` bundles the owners of each piece of it (store, topics, offsets,
//! clients, parked pulls, queue locks, delay offsets); each part does its own locking. Its
//! fields are private: each handler family and each task reaches the parts it uses through a
//! view (`views.rs`), so what a family touches is written in one place and a new reach across
//! families shows up there, not in a field access in a handler. It knows nothing of sockets,
//! tasks or start-up (`start.rs`), and it takes the time as a value.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use quiver_store::{OpenError, RecoveryReport, Store};
use quiver_wire::code::request_code;
use quiver_wire::{Encoding, ExtFields};
use tokio::sync::Notify;

use crate::budget::Budget;
use crate::clients::ClientTable;
use crate::config::BrokerConfig;
use crate::connection::Connection;
use crate::delay::DelayOffsets;
use crate::groups::SubscriptionGroups;
use crate::ha::Replication;
use crate::locks::QueueLocks;
use crate::long_poll::PullWaiters;
use crate::offsets::ConsumerOffsets;
use crate::pop::PopState;
use crate::topic::{TopicError, TopicTable};
use crate::transaction::Transactions;

mod views;
pub use views::{
    Administering, Background, Lifecycle, Membership, Popping, Pulling, Registering, Replicating,
    Sending, Serving,
};

/// Parked pulls at once; each holds a small task and a 15 s timer.
const PARKED_PULLS_MAX: usize = 100_000;
/// Admin requests that work on the blocking pool at once (topic deletions, offset resets,
/// topic creations made durable); RocketMQ runs them on a pool of 16 threads, and one at a
/// time where they change the store. More wait as parked tasks.
pub const ADMIN_WORK_MAX: usize = 4;

#[derive(Default)]
pub struct Counters {
    pub messages_put: AtomicU64,
    /// Messages handed to consumers by pulls.
    pub messages_got: AtomicU64,
    /// Pull reads, and those that found messages (RocketMQ's getTotalTps and getFoundTps).
    pub pulls: AtomicU64,
    pub pulls_found: AtomicU64,
    /// Timer messages in the wheel's memory (the buckets due within a minute or so).
    pub timer_pending: AtomicU64,
    /// The timer wheel's progress after its last round (GET_TIMER_CHECK_POINT); None while no
    /// wheel runs (a slave, or `timerWheelEnable=false`).
    pub timer_progress: std::sync::Mutex<Option<crate::timer::Progress>>,
    rates: std::sync::Mutex<Rates>,
}

/// Totals at the last sample and the rates since the one before.
#[derive(Default)]
struct Rates {
    sampled_ms: i64,
    totals: [u64; 4],
    tps: [f64; 4],
    /// Topic -> (messages stored, per second): from its queues' max offsets, so the send path
    /// pays nothing for it.
    topics: std::collections::HashMap<String, (u64, f64)>,
}

/// Per-second rates over the last sampling period.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Tps {
    pub put: f64,
    pub got: f64,
    pub pulls: f64,
    pub pulls_found: f64,
}

impl Counters {
    /// Messages per second put and got over the last sampling period.
    pub fn tps(&self) -> (f64, f64) {
        let all = self.all_tps();
        (all.put, all.got)
    }

    pub fn all_tps(&self) -> Tps {
        let rates = self.rates.lock().expect("rates lock poisoned");
        Tps {
            put: rates.tps[0],
            got: rates.tps[1],
            pulls: rates.tps[2],
            pulls_found: rates.tps[3],
        }
    }

    /// Messages per second stored in `topic` over the last sampling period.
    pub fn topic_tps(&self, topic: &str) -> f64 {
        let rates = self.rates.lock().expect("rates lock poisoned");
        rates.topics.get(topic).map_or(0.0, |(_, tps)| *tps)
    }

    /// Samples the counters, and each topic's stored total (`topics`: topic -> the sum of its
    /// queues' max offsets).
    pub fn sample(&self, now_ms: i64, topics: impl IntoIterator<Item = (String, u64)>) {
        let totals = [
            self.messages_put.load(Ordering::Relaxed),
            self.messages_got.load(Ordering::Relaxed),
            self.pulls.load(Ordering::Relaxed),
            self.pulls_found.load(Ordering::Relaxed),
        ];
        let mut rates = self.rates.lock().expect("rates lock poisoned");
        let elapsed_ms = now_ms - rates.sampled_ms;
        let measured = rates.sampled_ms > 0 && elapsed_ms > 0;
        let per_second = |now: u64, before: u64| {
            now.saturating_sub(before) as f64 * 1000.0 / elapsed_ms.max(1) as f64
        };
        if measured {
            for (index, total) in totals.iter().enumerate() {
                rates.tps[index] = per_second(*total, rates.totals[index]);
            }
        }
        let mut sampled = std::collections::HashMap::new();
        for (topic, total) in topics {
            let tps = match rates.topics.get(&topic) {
                Some((before, _)) if measured => per_second(total, *before),
                _ => 0.0,
            };
            sampled.insert(topic, (total, tps));
        }
        rates.topics = sampled;
        rates.totals = totals;
        rates.sampled_ms = now_ms;
    }
}

/// The settings `mqadmin updateBrokerConfig` may change while the broker runs; they start from
/// `broker.conf` and are read here, not from `config`.
pub struct LiveConfig {
    pub broker_permission: std::sync::atomic::AtomicI32,
    pub auto_create_topic: std::sync::atomic::AtomicBool,
}

impl LiveConfig {
    fn from(config: &BrokerConfig) -> LiveConfig {
        LiveConfig {
            broker_permission: std::sync::atomic::AtomicI32::new(config.broker_permission),
            auto_create_topic: std::sync::atomic::AtomicBool::new(config.auto_create_topic),
        }
    }

    pub fn broker_permission(&self) -> i32 {
        self.broker_permission.load(Ordering::Relaxed)
    }

    pub fn auto_create_topic(&self) -> bool {
        self.auto_create_topic.load(Ordering::Relaxed)
    }
}

/// Every field is private: the views in `views.rs` hand them out by family.
pub struct Broker {
    config: BrokerConfig,
    /// What of `config` can change at run time, as it is now.
    live: LiveConfig,
    store: Store,
    topics: TopicTable,
    offsets: ConsumerOffsets,
    /// Consumer groups' settings (`subscriptionGroup.json`).
    groups: SubscriptionGroups,
    clients: ClientTable,
    waiters: Arc<PullWaiters>,
    locks: QueueLocks,
    delay_offsets: DelayOffsets,
    /// Pop consumption: modes, cursors and messages in flight.
    pop: PopState,
    /// Half messages' decisions and the transaction check's progress.
    transactions: Transactions,
    /// The address written into records and message ids: reachable `brokerIP1:port`.
    store_host: SocketAddr,
    /// Where slaves reach this broker's HA port (registered as `haServerAddr`).
    ha_host: SocketAddr,
    /// Master/slave replication: what a SYNC_MASTER's sends wait for, a slave's master.
    replication: Arc<Replication>,
    counters: Counters,
    /// The bytes all connections' requests and answers hold (`quiverBrokerBytesMax`).
    budget: Arc<Budget>,
    started_ms: i64,
    register_now: Notify,
    next_queue: AtomicU32,
    next_uniq: AtomicU32,
    /// Permits for admin work off the runtime's workers (`ADMIN_WORK_MAX`).
    admin_work: tokio::sync::Semaphore,
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
    #[error("cannot read subscription groups: {0}")]
    Groups(String),
    #[error("cannot read the pop state: {0}")]
    Pop(String),
    #[error("{0}")]
    NonPersistent(String),
    #[error(transparent)]
    Epochs(#[from] quiver_store::EpochFileError),
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
    pub groups: SubscriptionGroups,
    pub delay_offsets: DelayOffsets,
    pub pop: PopState,
    pub transactions: Transactions,
    /// The epoch file, in controller mode.
    pub epochs: Option<quiver_store::EpochFile>,
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
            config.default_topic_queue_nums,
            store.memory_topics(),
            now_ms,
        )?;
        let offsets = ConsumerOffsets::open(config_dir.join("consumerOffset.json"))
            .map_err(StateError::Offsets)?;
        let delay_offsets = DelayOffsets::open(config_dir.join("delayOffset.json"))
            .map_err(StateError::DelayOffsets)?;
        let groups_with_offsets: std::collections::BTreeSet<String> = offsets
            .snapshot()
            .keys()
            .filter_map(|key| key.split_once('@'))
            .map(|(_, group)| group.to_string())
            .collect();
        let groups = SubscriptionGroups::open(
            config_dir.join("subscriptionGroup.json"),
            config.auto_create_subscription_group,
            groups_with_offsets,
            now_ms,
        )
        .map_err(StateError::Groups)?;
        create_broker_system_topics(config, &topics)?;
        create_client_system_topics(config, &topics)?;
        adopt_stored_topics(&store, &topics);
        mark_non_persistent_topics(config, &topics)?;
        let pop = PopState::open(
            config_dir.join("popState.json"),
            crate::pop::Limits {
                per_queue: config.pop_in_flight_max_per_queue,
                per_group: config.pop_in_flight_max_per_group,
            },
        )
        .map_err(StateError::Pop)?;
        let transactions = Transactions::open(&store, &offsets);
        // What start-up added or changed (system topics, adopted ones) reaches the file now.
        topics.persist_if_dirty()?;
        let epochs = match config.controller.enabled {
            true => Some(quiver_store::EpochFile::open(&config.store_root)?),
            false => None,
        };
        let persisted = Persisted {
            epochs,
            store,
            topics,
            offsets,
            groups,
            delay_offsets,
            pop,
            transactions,
        };
        Ok((persisted, recovery))
    }
}

/// The system topics the broker's own features store into: the schedule topic (a queue per
/// delay level), the timer queue, and the transaction half and op topics (one queue each, as
/// RocketMQ creates them at start).
fn create_broker_system_topics(
    config: &BrokerConfig,
    topics: &TopicTable,
) -> Result<(), StateError> {
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
    // RocketMQ creates both at start, one queue each.
    for topic in [crate::transaction::HALF_TOPIC, crate::transaction::OP_TOPIC] {
        topics.create_if_absent(crate::topic::topic_config(
            topic,
            1,
            crate::topic::PERM_READ | crate::topic::PERM_WRITE,
        ))?;
    }
    Ok(())
}

/// The topics RocketMQ's broker creates at start for clients' features, with its shapes: the
/// cluster's reply topic always (one queue), so that a consumer's reply finds a route; topics
/// named after the cluster (16 queues) and the broker (one), as `clusterTopicEnable` and
/// `brokerTopicEnable` make them by default, which RocketMQ's proxy looks up to find the
/// cluster's brokers; the message-trace topic only with `traceTopicEnable` (without it, a
/// client's first trace record creates it from TBW102 like any other topic, when auto-create is
/// on).
fn create_client_system_topics(
    config: &BrokerConfig,
    topics: &TopicTable,
) -> Result<(), StateError> {
    const CLUSTER_TOPIC_QUEUES: i32 = 16;
    let read_write = crate::topic::PERM_READ | crate::topic::PERM_WRITE;
    let inherited = crate::topic::PERM_INHERIT | read_write;
    topics.create_if_absent(crate::topic::topic_config(
        &config.cluster_name,
        CLUSTER_TOPIC_QUEUES,
        inherited,
    ))?;
    topics.create_if_absent(crate::topic::topic_config(
        &config.broker_name,
        1,
        inherited,
    ))?;
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
                    crate::topic::PERSISTENCE_ATTRIBUTE.to_string(),
                    crate::topic::PERSISTENCE_MEMORY.to_string(),
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
            groups,
            delay_offsets,
            pop,
            transactions,
            epochs,
        } = persisted;
        topics.set_topics_max(config.topics_max);
        groups.set_groups_max(config.subscription_groups_max);
        let clients = ClientTable::new(crate::clients::ClientLimits {
            ids_max: config.client_ids_max,
            ids_per_connection_max: config.client_ids_per_connection_max,
        });
        let waiters = Arc::new(PullWaiters::new(PARKED_PULLS_MAX));
        let replication = Arc::new(Replication::new(&config, epochs));
        let arrival_waiters = waiters.clone();
        store.set_arrival_listener(Arc::new(
            move |topic: &str, queue_id: u32, max_offset: u64| {
                arrival_waiters.arrived(topic, queue_id, max_offset);
            },
        ));
        let written_replication = replication.clone();
        store.set_written_listener(Arc::new(move || written_replication.log_grew()));
        if replication.controlled.is_some() {
            // Controller mode: consumers read only what the SyncStateSet's replicas hold, as
            // RocketMQ dispatches up to the confirm offset; a master tells the store each new
            // acknowledgement position, a slave each confirm offset its master sends.
            store.hold_unconfirmed();
            let gate = store.confirmer();
            replication.set_confirm_listener(Arc::new(move |position| gate.confirm(position)));
        }
        let budget = Budget::new("quiverBrokerBytesMax", config.broker_bytes_max);
        Broker {
            live: LiveConfig::from(&config),
            config,
            store,
            topics,
            offsets,
            groups,
            clients,
            waiters,
            locks: QueueLocks::default(),
            delay_offsets,
            pop,
            transactions,
            store_host,
            ha_host,
            replication,
            counters: Counters::default(),
            budget,
            started_ms: now_ms,
            register_now: Notify::new(),
            next_queue: AtomicU32::new(0),
            next_uniq: AtomicU32::new(0),
            admin_work: tokio::sync::Semaphore::new(ADMIN_WORK_MAX),
        }
    }

    /// Where slaves reach this broker's HA port, for the process that starts a slave beside it.
    pub fn ha_host(&self) -> SocketAddr {
        self.ha_host
    }

    /// Round-robin queue choice for sends that leave it to the broker.
    fn pick_queue(&self, queues: i32) -> i32 {
        (self.next_queue.fetch_add(1, Ordering::Relaxed) % queues.max(1) as u32) as i32
    }

    /// A UNIQ_KEY for messages whose producer did not set one.
    fn new_uniq_id(&self, now_ms: i64) -> String {
        let counter = self.next_uniq.fetch_add(1, Ordering::Relaxed);
        quiver_wire::message::new_uniq_id(self.store_host.ip(), counter, now_ms)
    }

    /// Asks the registration task to register with the name servers now (a topic changed).
    fn topics_changed(&self) {
        self.register_now.notify_one();
    }

    /// Completes when a topic changed since the last call (see `topics_changed`).
    async fn topics_changed_since(&self) {
        self.register_now.notified().await
    }

    fn connection_closed(&self, connection: &Connection) {
        for group in self.clients.connection_closed(connection.id) {
            self.notify_consumers_changed(&group);
        }
    }

    /// Tells every member of a group to rebalance now instead of at its next 20 s timer.
    fn notify_consumers_changed(&self, group: &str) {
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
        let topics = self.topics.names().into_iter().filter_map(|topic| {
            let shape = self.topics.shape(&topic)?;
            let stored = (0..shape.write_queues.max(0) as u32)
                .map(|queue| self.store.bounds(&topic, queue).max_offset)
                .sum::<u64>();
            Some((topic, stored))
        });
        self.counters.sample(now_ms, topics.collect::<Vec<_>>());
        for group in self.clients.expire(now_ms) {
            self.notify_consumers_changed(&group);
        }
        self.locks.expire(now_ms);
    }
}

/// A broker over a new store under `root`, with small files, for unit tests of the parts that
/// need one.
#[cfg(test)]
pub(crate) fn test_broker(root: &std::path::Path) -> Broker {
    let config = BrokerConfig {
        store_root: root.join("store"),
        commitlog_segment_bytes: 16 << 20,
        consume_queue_entries_per_file: 1_000,
        index_slots: 1_000,
        index_entries_max: 4_000,
        ..BrokerConfig::default()
    };
    let (persisted, _) = Persisted::open(&config, 1).expect("state opens");
    let address: SocketAddr = "127.0.0.1:10911".parse().expect("address");
    Broker::new(config, persisted, address, address, 1)
}
