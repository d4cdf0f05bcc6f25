//! The ConsumeQueues.

pub mod consume_queue;
pub mod deleted;
