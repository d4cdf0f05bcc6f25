//! An async client for Apache RocketMQ's remoting protocol, for Quiver and for RocketMQ
//! brokers alike.
//!
//! A [`Client`] is what a process shares: it looks routes up on the name servers (and keeps
//! them fresh), and holds one connection per broker address that every producer and consumer
//! uses, with requests pipelined and matched to responses by opaque. On top of it:
//! [`Producer`] (sync, async, oneway and batch sends), [`PushConsumer`] (clustering, rebalance
//! across the group, long-polling pulls, periodic offset commits) and [`LitePullConsumer`]
//! (subscribe or assign, seek, poll) and [`PopConsumer`] (RocketMQ 5's pop consumption).
//!
//! Everything runs on the caller's tokio runtime; time and randomness come from the
//! [`ClientConfig`], so tests can control them.

mod allocate;
mod client;
mod clock;
mod connection;
mod error;
mod grpc;
mod lite_pull;
mod message;
mod pop;
mod producer;
mod push;
mod requests;
mod route;
mod send_frame;
mod subscription;

pub use allocate::allocate_average;
pub use client::{Client, ClientConfig};
pub use clock::{Clock, Random, SystemClock};
pub use connection::{Connection, ConnectionLimits, ServerRequest};
pub use error::{ClientError, RETRY_CODES};
pub use grpc::{GrpcProducer, GrpcSimpleConsumer, Received};
pub use lite_pull::{LitePullConfig, LitePullConsumer};
pub use message::{Message, SendResult, SendStatus};
pub use pop::{PopConsumer, PopConsumerConfig, PopListener};
pub use producer::{Producer, ProducerConfig, BATCH_MESSAGES_MAX};
pub use push::{ConsumeFrom, PushConsumer, PushConsumerConfig};
pub use quiver_wire::body::MessageQueue;
pub use quiver_wire::message::StoredMessage;
pub use requests::{PullResult, PullStatus};
pub use route::TopicRoute;
