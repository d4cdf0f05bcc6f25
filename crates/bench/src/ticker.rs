//! Waits finer than the runtime's timer. Tokio's timer fires on whole milliseconds, so paced
//! senders woken by it alone send in bursts once a millisecond: at 8,000 msg/s, eight messages
//! at once, each but the first queued behind the others, which is not the rate asked for. One
//! thread per process sleeps until the earliest deadline it was given (the kernel's timed wait,
//! tens of microseconds late under load) and wakes that waiter.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// Waits further away than this start on the runtime's timer, which fires up to a millisecond
/// late; the ticker takes the rest.
const COARSE_MARGIN: Duration = Duration::from_millis(2);

struct Wake {
    at: Instant,
    /// Arrival order, so that waiters with one deadline wake in the order they came.
    order: u64,
    done: oneshot::Sender<()>,
}

impl PartialEq for Wake {
    fn eq(&self, other: &Wake) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}

impl Eq for Wake {}

impl PartialOrd for Wake {
    fn partial_cmp(&self, other: &Wake) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Wake {
    /// Reversed: the heap's top is the earliest deadline.
    fn cmp(&self, other: &Wake) -> Ordering {
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

fn ticker() -> &'static mpsc::Sender<(Instant, oneshot::Sender<()>)> {
    static TICKER: OnceLock<mpsc::Sender<(Instant, oneshot::Sender<()>)>> = OnceLock::new();
    TICKER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel();
        std::thread::Builder::new()
            .name("bench-ticker".to_owned())
            .spawn(move || run(incoming))
            .expect("spawn the bench's ticker thread");
        requests
    })
}

fn run(incoming: mpsc::Receiver<(Instant, oneshot::Sender<()>)>) {
    let mut pending = BinaryHeap::new();
    let mut order = 0u64;
    loop {
        let now = Instant::now();
        while pending.peek().is_some_and(|wake: &Wake| wake.at <= now) {
            if let Some(wake) = pending.pop() {
                let _ = wake.done.send(());
            }
        }
        let next = match pending.peek() {
            Some(wake) => incoming.recv_timeout(wake.at.saturating_duration_since(now)),
            None => incoming.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, done)) => {
                order += 1;
                pending.push(Wake { at, order, done });
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Sleeps until `until`, waking within tens of microseconds of it rather than on the next
/// millisecond.
pub async fn sleep_until(until: tokio::time::Instant) {
    if let Some(coarse) = until.checked_sub(COARSE_MARGIN) {
        if coarse > tokio::time::Instant::now() {
            tokio::time::sleep_until(coarse).await;
        }
    }
    if until <= tokio::time::Instant::now() {
        return;
    }
    let (done, woken) = oneshot::channel();
    if ticker().send((until.into_std(), done)).is_err() {
        tokio::time::sleep_until(until).await;
        return;
    }
    let _ = woken.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn waiters_wake_at_or_after_their_deadlines_near_or_far() {
        let start = tokio::time::Instant::now();
        // Near deadlines go to the ticker at once; 4.7 ms starts on the runtime's timer.
        let deadlines: Vec<_> = [4_700u64, 300, 1_250, 300, 2_050]
            .iter()
            .map(|&us| start + Duration::from_micros(us))
            .collect();
        let mut tasks = Vec::new();
        for deadline in deadlines {
            tasks.push(tokio::spawn(async move {
                sleep_until(deadline).await;
                tokio::time::Instant::now() >= deadline
            }));
        }
        for task in tasks {
            assert!(
                task.await.expect("waiter"),
                "a waiter woke before its deadline"
            );
        }
        // A deadline already past returns at once.
        sleep_until(start).await;
    }
}
