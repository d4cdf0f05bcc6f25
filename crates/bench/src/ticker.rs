//! Waits finer than the runtime's timer. Tokio's timer fires on whole milliseconds, so paced
//! senders woken by it alone send in bursts once a millisecond: at 8,000 msg/s, eight messages
//! at once, each but the first queued behind the others, which is not the rate asked for. One
//! thread per process sleeps until the earliest deadline it was given (a timed futex wait, tens
//! of microseconds late under load, no spinning) and wakes the waiters due by then.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex, OnceLock};
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

/// Deadlines waiting, and the condition the ticker thread sleeps on until the earliest.
struct Ticker {
    pending: Mutex<(BinaryHeap<Wake>, u64)>,
    earlier: Condvar,
}

/// Deadlines this close together are fired in one wake-up.
const SLACK: Duration = Duration::from_micros(20);

/// The process's ticker; None when its thread could not start.
fn ticker() -> Option<&'static Ticker> {
    static TICKER: OnceLock<Option<&'static Ticker>> = OnceLock::new();
    *TICKER.get_or_init(|| {
        let ticker: &'static Ticker = Box::leak(Box::new(Ticker {
            pending: Mutex::new((BinaryHeap::new(), 0)),
            earlier: Condvar::new(),
        }));
        match std::thread::Builder::new()
            .name("bench-ticker".to_owned())
            .spawn(move || run(ticker))
        {
            Ok(_) => Some(ticker),
            Err(error) => {
                eprintln!("no ticker thread ({error}): paced sends wake on the runtime's timer");
                None
            }
        }
    })
}

/// Sleeps (a timed futex wait: no spinning) until the earliest deadline, fires every deadline
/// due by then, and again; a new earliest deadline wakes it early.
fn run(ticker: &Ticker) {
    let mut pending = ticker.pending.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        while pending.0.peek().is_some_and(|wake| wake.at <= now + SLACK) {
            if let Some(wake) = pending.0.pop() {
                let _ = wake.done.send(());
            }
        }
        pending = match pending.0.peek().map(|wake| wake.at - now) {
            Some(wait) => {
                ticker
                    .earlier
                    .wait_timeout(pending, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => ticker
                .earlier
                .wait(pending)
                .unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// Sleeps until `until`, waking within `SLACK` before it to tens of microseconds after it,
/// rather than on the next millisecond.
pub async fn sleep_until(until: tokio::time::Instant) {
    if let Some(coarse) = until.checked_sub(COARSE_MARGIN) {
        if coarse > tokio::time::Instant::now() {
            tokio::time::sleep_until(coarse).await;
        }
    }
    if until <= tokio::time::Instant::now() {
        return;
    }
    let Some(ticker) = ticker() else {
        tokio::time::sleep_until(until).await;
        return;
    };
    let (done, woken) = oneshot::channel();
    let at = until.into_std();
    {
        let mut pending = ticker.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.1 += 1;
        let order = pending.1;
        let earliest = pending.0.peek().is_none_or(|wake| at < wake.at);
        pending.0.push(Wake { at, order, done });
        if earliest {
            ticker.earlier.notify_one();
        }
    }
    let _ = woken.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn waiters_wake_no_earlier_than_the_slack_before_their_deadlines() {
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
                tokio::time::Instant::now() + SLACK >= deadline
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
