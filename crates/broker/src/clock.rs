//! The wall clock, read at the edges only: the connection layer stamps each request with it
//! (`handler::Call::now_ms`) and the background tasks read it once per round, so that handlers
//! and the state they change take the time as a value and tests can choose it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as RocketMQ stamps records.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
