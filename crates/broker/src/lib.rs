//! The broker: accepts RocketMQ clients, stores what they send, serves what they pull, and
//! registers with the name servers.
//!
//! Dependencies point one way: `start` (start-up and shutdown) runs `server` (sockets and
//! connections), which passes each request to `handler` (one table of functions), which uses
//! `state::Broker`: the owners of each piece of state, namely the store, `topic::TopicTable`,
//! `offsets::ConsumerOffsets`, `clients::ClientTable`, `long_poll::PullWaiters`,
//! `locks::QueueLocks` and `delay::DelayOffsets` (whose task moves delayed messages to their
//! topic when due), reached by each family of handlers and tasks through a view of its own
//! (`state::Sending`, `state::Background`, ...). Nothing below `start` depends on it.

pub mod background;
pub mod budget;
pub mod clients;
mod clock;
pub mod config;
pub mod connection;
mod controller_mode;
pub mod delay;
pub mod filter;
#[doc(hidden)]
pub mod fuzzing;
pub mod groups;
pub mod grpc;
pub mod ha;
pub mod handler;
pub mod locks;
pub mod long_poll;
pub mod offsets;
mod outbound;
pub mod pop;
mod registration;
pub mod replica_meta;
mod role;
pub mod server;
mod start;
pub mod state;
mod stored;
pub mod timer;
pub mod topic;
pub mod transaction;

pub use config::{BrokerConfig, BrokerRole, ConfigError, LiveKey, UnknownKey};
pub use start::{start, RunningBroker, StartError};
pub use state::{Broker, Persisted, StateError};
