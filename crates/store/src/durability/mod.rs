//! Durability.

pub mod checkpoint;
pub mod flusher;
pub mod group_commit;
