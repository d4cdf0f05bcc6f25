//! RocketMQ 5's controller: it gives the brokers of a broker set their ids, keeps which of them
//! is master and which hold everything the master acknowledged (the SyncStateSet), each with an
//! epoch, and elects a new master when the one there is stops sending heartbeats. Apache
//! RocketMQ brokers in controller mode and `mqadmin`'s controller commands talk to it with
//! RocketMQ's requests (904, 1001 to 1013).
//!
//! - `replicas`: the state and its events, and the decisions each request makes from it (pure);
//! - `liveness`: heartbeats, per node;
//! - `raft`: the state replicated over the nodes with openraft: the log, the state machine and
//!   the transport between nodes;
//! - `node`: one node, whose changes are decided on the leader and committed by a majority
//!   before they are answered;
//! - `handle`: requests to answers; `server`: the TCP shell, the inactive-broker scan, the
//!   elections it starts and the role changes it sends;
//! - `config`: RocketMQ's controller keys.
//!
//! A node runs in a name server (`enableControllerInNamesrv`) or on its own (`quiver
//! controller`), on its own address from `controllerDLegerPeers`, where the other nodes reach
//! it too.

pub mod config;
pub mod handle;
pub mod liveness;
pub mod node;
pub mod raft;
pub mod replicas;
pub mod server;

pub use config::ControllerConfig;
pub use node::Controller;
pub use server::run;
