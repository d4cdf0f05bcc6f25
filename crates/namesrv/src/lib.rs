//! The name server: brokers register and heartbeat, clients look up topic routes.
//!
//! `route_table` is the state as plain data; `handle` maps requests to responses; `server` is the
//! TCP shell around them.

#[doc(hidden)]
pub mod fuzzing;
pub mod handle;
pub mod route_table;
pub mod server;

pub use route_table::RouteTable;
pub use server::{run, NamesrvConfig};
