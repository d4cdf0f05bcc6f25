//! RocketMQ 5's gRPC protocol, `apache.rocketmq.v2`: its messages, and the MessagingService's
//! server (which the broker implements) and client (which the bench drives), generated at build
//! time from `proto/`. This crate owns that byte format; nothing else encodes it.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v2 {
    tonic::include_proto!("apache.rocketmq.v2");
}

pub use prost_types::{Duration, Timestamp};
