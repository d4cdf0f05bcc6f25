//! The broker: accepts RocketMQ clients, stores what they send, serves what they pull, and
//! registers with the name servers.
//!
//! `server` moves frames between sockets and `handler`; handlers use the owners of each piece of
//! state: the store, `topic::TopicTable`, `offsets::ConsumerOffsets`, `clients::ClientTable`,
//! `long_poll::PullWaiters`, `locks::QueueLocks` and `delay::DelayOffsets` (whose task moves
//! delayed messages to their topic when due).

pub mod broker;
pub mod clients;
pub mod config;
pub mod connection;
pub mod delay;
mod handler;
pub mod locks;
pub mod long_poll;
pub mod offsets;
mod outbound;
mod persist;
mod requeue;
pub mod server;
pub mod topic;

pub use broker::{start, Broker, RunningBroker, StartError};
pub use config::{BrokerConfig, BrokerRole, ConfigError, UnknownKey};
