//! Test harness: starts the real `quiver` binary on loopback in a temp folder, waits until it is
//! ready, kills it with SIGKILL or stops it with SIGTERM; and a small blocking client that speaks
//! the wire protocol, so tests drive the server exactly as a remote peer would.

mod client;
pub mod crash;
pub mod io_faults;
mod process;

pub use client::{create_topic_request, pull_header, send_request, SendOptions, WireClient};
pub use io_faults::FaultShim;
pub use process::{interrupt_pid, terminate_pid, QuiverProcess, Started};

use std::time::{Duration, Instant};

/// Polls `condition` until it holds or `timeout` passes; tests wait this way, never by sleeping
/// a fixed time.
pub fn wait_until<T>(timeout: Duration, mut condition: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = condition() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
