//! Narrow views of the broker's state, one per family of handlers or tasks. Each holds
//! references to just the parts its family uses (and copies of plain values such as the
//! addresses), built per request or per step from `Broker` by copying a few pointers; a family's
//! reach into the state is its view's field list, and code that uses a part its view does not
//! list does not compile. Each part still does its own locking: a view adds none.

use std::net::SocketAddr;
use std::sync::Arc;

use quiver_store::Store;

use super::{Broker, Counters, LiveConfig};
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
use crate::topic::TopicTable;
use crate::transaction::Transactions;

/// Sends, consumers' send-backs, replies and END_TRANSACTION (`handler/send.rs`, `retry.rs`,
/// `reply.rs`, `transaction.rs`): what is checked before a record is built (the broker's and the
/// topic's permissions, the group's retry budget, the requester of a reply), and where the
/// records and their decisions go.
#[derive(Clone, Copy)]
pub struct Sending<'a> {
    pub config: &'a BrokerConfig,
    pub live: &'a LiveConfig,
    pub store: &'a Store,
    pub topics: &'a TopicTable,
    pub groups: &'a SubscriptionGroups,
    pub clients: &'a ClientTable,
    pub transactions: &'a Transactions,
    pub store_host: SocketAddr,
    pub replication: &'a Replication,
    pub counters: &'a Counters,
    /// For the methods below, which reach parts of the broker that this view does not hand out
    /// (its round-robin counters, the registration's wake-up, the clients).
    broker: &'a Broker,
}

/// Pulls and consumer offsets (`handler/pull.rs`, `offset.rs`): the queues read, the offsets
/// committed and reset, and the parked pulls that wait for arrivals.
#[derive(Clone, Copy)]
pub struct Pulling<'a> {
    pub config: &'a BrokerConfig,
    pub live: &'a LiveConfig,
    pub store: &'a Store,
    pub topics: &'a TopicTable,
    pub offsets: &'a ConsumerOffsets,
    pub groups: &'a SubscriptionGroups,
    pub clients: &'a ClientTable,
    pub waiters: &'a PullWaiters,
    pub pop: &'a PopState,
    pub replication: &'a Replication,
    pub counters: &'a Counters,
    /// The broker's byte budget: a parked pull waits for room before it reads.
    pub budget: &'a Budget,
}

/// Who consumes what (`handler/client.rs`, `group.rs`, `lock.rs`, `assignment.rs`): clients
/// and their subscriptions, consumer groups' settings, orderly consumers' queue locks and pop
/// modes.
#[derive(Clone, Copy)]
pub struct Membership<'a> {
    pub config: &'a BrokerConfig,
    pub topics: &'a TopicTable,
    pub offsets: &'a ConsumerOffsets,
    pub groups: &'a SubscriptionGroups,
    pub clients: &'a ClientTable,
    pub locks: &'a QueueLocks,
    pub pop: &'a PopState,
    /// For the methods below, which reach parts of the broker that this view does not hand out
    /// (its round-robin counters, the registration's wake-up, the clients).
    broker: &'a Broker,
}

/// Pop consumption (`handler/pop.rs`, `pop_watch.rs`): queues read, cursors and messages in
/// flight, and the parked pops that wait for arrivals.
#[derive(Clone, Copy)]
pub struct Popping<'a> {
    pub config: &'a BrokerConfig,
    pub store: &'a Store,
    pub topics: &'a TopicTable,
    pub offsets: &'a ConsumerOffsets,
    pub waiters: &'a PullWaiters,
    pub pop: &'a PopState,
    pub counters: &'a Counters,
    /// The broker's byte budget: a parked pop waits for room before it reads.
    pub budget: &'a Budget,
    /// For the methods below, which reach parts of the broker that this view does not hand out
    /// (its round-robin counters, the registration's wake-up, the clients).
    broker: &'a Broker,
}

/// Admin requests, statistics, queries and the master's side of a slave's copy
/// (`handler/admin.rs`, `stats.rs`, `query.rs`, `replica.rs`): they report on nearly every part,
/// and change topics and the settings that may change at run time; queue locks and
/// transactions are not theirs.
#[derive(Clone, Copy)]
pub struct Administering<'a> {
    pub config: &'a BrokerConfig,
    pub live: &'a LiveConfig,
    pub store: &'a Store,
    pub topics: &'a TopicTable,
    pub offsets: &'a ConsumerOffsets,
    pub groups: &'a SubscriptionGroups,
    pub clients: &'a ClientTable,
    pub waiters: &'a PullWaiters,
    pub pop: &'a PopState,
    pub delay_offsets: &'a DelayOffsets,
    pub store_host: SocketAddr,
    pub replication: &'a Replication,
    pub counters: &'a Counters,
    pub started_ms: i64,
    /// The bytes connections' requests and answers hold, for runtime info.
    pub budget: &'a Budget,
    /// Permits for admin work off the runtime's workers (`ADMIN_WORK_MAX`).
    pub admin_work: &'a tokio::sync::Semaphore,
    /// For the methods below, which reach parts of the broker that this view does not hand out
    /// (its round-robin counters, the registration's wake-up, the clients).
    broker: &'a Broker,
}

/// The background owners (`background/`): delay levels, the timer wheel, pop revival and the
/// transaction check read the store and write records back to it.
#[derive(Clone, Copy)]
pub struct Background<'a> {
    pub config: &'a BrokerConfig,
    pub store: &'a Store,
    pub topics: &'a TopicTable,
    pub offsets: &'a ConsumerOffsets,
    pub groups: &'a SubscriptionGroups,
    pub clients: &'a ClientTable,
    pub delay_offsets: &'a DelayOffsets,
    pub pop: &'a PopState,
    pub transactions: &'a Transactions,
    pub store_host: SocketAddr,
    pub counters: &'a Counters,
    /// For the methods below, which reach parts of the broker that this view does not hand out
    /// (its round-robin counters, the registration's wake-up, the clients).
    broker: &'a Broker,
}

/// The connection layer (`server.rs`): the limits a connection is held to, the store its
/// reads' appends go to, and the slaves a synced send waits for.
#[derive(Clone, Copy)]
pub struct Serving<'a> {
    pub config: &'a BrokerConfig,
    pub store: &'a Store,
    pub replication: &'a Replication,
    /// The bytes all connections' requests and answers hold.
    pub budget: &'a Arc<Budget>,
    /// For the methods below, which reach parts of the broker that this view does not hand out
    /// (its round-robin counters, the registration's wake-up, the clients).
    broker: &'a Broker,
}

/// Start-up and shutdown (`start.rs`): the tasks a role runs, retention, and what is made
/// durable when the broker stops.
#[derive(Clone, Copy)]
pub struct Lifecycle<'a> {
    pub config: &'a BrokerConfig,
    pub store: &'a Store,
    pub topics: &'a TopicTable,
    pub offsets: &'a ConsumerOffsets,
    pub groups: &'a SubscriptionGroups,
    pub waiters: &'a PullWaiters,
    pub delay_offsets: &'a DelayOffsets,
    pub pop: &'a PopState,
    pub transactions: &'a Transactions,
    pub replication: &'a Replication,
}

/// Registration with the name servers (`registration.rs`): the broker's names, addresses and
/// topics, and the master a slave learns from them.
#[derive(Clone, Copy)]
pub struct Registering<'a> {
    pub config: &'a BrokerConfig,
    pub topics: &'a TopicTable,
    pub store_host: SocketAddr,
    pub ha_host: SocketAddr,
    pub replication: &'a Replication,
    /// For the methods below, which reach parts of the broker that this view does not hand out
    /// (its round-robin counters, the registration's wake-up, the clients).
    broker: &'a Broker,
}

/// Master/slave replication (`ha/`, `replica_meta.rs`): the log streamed or followed, and a
/// slave's copy of its master's topics, offsets, groups and delay offsets.
#[derive(Clone, Copy)]
pub struct Replicating<'a> {
    pub config: &'a BrokerConfig,
    pub store: &'a Store,
    pub topics: &'a TopicTable,
    pub offsets: &'a ConsumerOffsets,
    pub groups: &'a SubscriptionGroups,
    pub delay_offsets: &'a DelayOffsets,
    pub store_host: SocketAddr,
    pub replication: &'a Replication,
    /// For the methods below, which reach parts of the broker that this view does not hand out
    /// (its round-robin counters, the registration's wake-up, the clients).
    broker: &'a Broker,
}

impl Broker {
    pub fn sending(&self) -> Sending<'_> {
        Sending {
            config: &self.config,
            live: &self.live,
            store: &self.store,
            topics: &self.topics,
            groups: &self.groups,
            clients: &self.clients,
            transactions: &self.transactions,
            store_host: self.store_host,
            replication: &self.replication,
            counters: &self.counters,
            broker: self,
        }
    }

    pub fn pulling(&self) -> Pulling<'_> {
        Pulling {
            config: &self.config,
            live: &self.live,
            store: &self.store,
            topics: &self.topics,
            offsets: &self.offsets,
            groups: &self.groups,
            clients: &self.clients,
            waiters: &self.waiters,
            pop: &self.pop,
            replication: &self.replication,
            counters: &self.counters,
            budget: &self.budget,
        }
    }

    pub fn membership(&self) -> Membership<'_> {
        Membership {
            config: &self.config,
            topics: &self.topics,
            offsets: &self.offsets,
            groups: &self.groups,
            clients: &self.clients,
            locks: &self.locks,
            pop: &self.pop,
            broker: self,
        }
    }

    pub fn popping(&self) -> Popping<'_> {
        Popping {
            config: &self.config,
            store: &self.store,
            topics: &self.topics,
            offsets: &self.offsets,
            waiters: &self.waiters,
            pop: &self.pop,
            counters: &self.counters,
            budget: &self.budget,
            broker: self,
        }
    }

    pub fn administering(&self) -> Administering<'_> {
        Administering {
            config: &self.config,
            live: &self.live,
            store: &self.store,
            topics: &self.topics,
            offsets: &self.offsets,
            groups: &self.groups,
            clients: &self.clients,
            waiters: &self.waiters,
            pop: &self.pop,
            delay_offsets: &self.delay_offsets,
            store_host: self.store_host,
            replication: &self.replication,
            counters: &self.counters,
            started_ms: self.started_ms,
            budget: &self.budget,
            admin_work: &self.admin_work,
            broker: self,
        }
    }

    pub fn background(&self) -> Background<'_> {
        Background {
            config: &self.config,
            store: &self.store,
            topics: &self.topics,
            offsets: &self.offsets,
            groups: &self.groups,
            clients: &self.clients,
            delay_offsets: &self.delay_offsets,
            pop: &self.pop,
            transactions: &self.transactions,
            store_host: self.store_host,
            counters: &self.counters,
            broker: self,
        }
    }

    pub fn serving(&self) -> Serving<'_> {
        Serving {
            config: &self.config,
            store: &self.store,
            replication: &self.replication,
            budget: &self.budget,
            broker: self,
        }
    }

    pub fn lifecycle(&self) -> Lifecycle<'_> {
        Lifecycle {
            config: &self.config,
            store: &self.store,
            topics: &self.topics,
            offsets: &self.offsets,
            groups: &self.groups,
            waiters: &self.waiters,
            delay_offsets: &self.delay_offsets,
            pop: &self.pop,
            transactions: &self.transactions,
            replication: &self.replication,
        }
    }

    pub fn registering(&self) -> Registering<'_> {
        Registering {
            config: &self.config,
            topics: &self.topics,
            store_host: self.store_host,
            ha_host: self.ha_host,
            replication: &self.replication,
            broker: self,
        }
    }

    pub fn replicating(&self) -> Replicating<'_> {
        Replicating {
            config: &self.config,
            store: &self.store,
            topics: &self.topics,
            offsets: &self.offsets,
            groups: &self.groups,
            delay_offsets: &self.delay_offsets,
            store_host: self.store_host,
            replication: &self.replication,
            broker: self,
        }
    }
}

impl Sending<'_> {
    /// A UNIQ_KEY for messages whose producer did not set one.
    pub fn new_uniq_id(&self, now_ms: i64) -> String {
        self.broker.new_uniq_id(now_ms)
    }

    /// Round-robin queue choice for sends that leave it to the broker.
    pub fn pick_queue(&self, queues: i32) -> i32 {
        self.broker.pick_queue(queues)
    }

    /// Asks the registration task to register with the name servers now (a topic changed).
    pub fn topics_changed(&self) {
        self.broker.topics_changed()
    }
}

impl Membership<'_> {
    /// Asks the registration task to register with the name servers now (a topic changed).
    pub fn topics_changed(&self) {
        self.broker.topics_changed()
    }

    /// Tells every member of a group to rebalance now instead of at its next 20 s timer.
    pub fn notify_consumers_changed(&self, group: &str) {
        self.broker.notify_consumers_changed(group)
    }
}

impl Popping<'_> {
    /// Round-robin choice of the queue a pop of every queue starts at (the sends' counter).
    pub fn pick_queue(&self, queues: i32) -> i32 {
        self.broker.pick_queue(queues)
    }
}

impl Administering<'_> {
    /// Asks the registration task to register with the name servers now (a topic changed).
    pub fn topics_changed(&self) {
        self.broker.topics_changed()
    }
}

impl Background<'_> {
    /// A UNIQ_KEY for messages whose producer did not set one.
    pub fn new_uniq_id(&self, now_ms: i64) -> String {
        self.broker.new_uniq_id(now_ms)
    }

    /// Asks the registration task to register with the name servers now (a topic changed).
    pub fn topics_changed(&self) {
        self.broker.topics_changed()
    }
}

impl Serving<'_> {
    /// Forgets a closed connection's clients, telling their groups to rebalance.
    pub fn connection_closed(&self, connection: &Connection) {
        self.broker.connection_closed(connection)
    }
}

impl Registering<'_> {
    /// Completes when a topic changed since the last call (see `topics_changed`).
    pub async fn topics_changed_since(&self) {
        self.broker.topics_changed_since().await
    }
}

impl Replicating<'_> {
    /// Asks the registration task to register with the name servers now (a topic changed).
    pub fn topics_changed(&self) {
        self.broker.topics_changed()
    }
}
