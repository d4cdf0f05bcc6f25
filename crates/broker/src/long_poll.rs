//! Pulls that found nothing wait here until a message lands in their queue or their time runs
//! out. The store's appender calls `arrived` after each group it writes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::{oneshot, Notify};

struct Waiter {
    offset: u64,
    wake: oneshot::Sender<()>,
}

pub struct PullWaiters {
    /// topic -> queue -> waiters; two levels so a lookup by `&str` needs no allocation.
    waiting: Mutex<HashMap<String, HashMap<u32, Vec<Waiter>>>>,
    parked: AtomicUsize,
    parked_max: usize,
    /// Set at shutdown: every pull parked then or later is answered at once.
    closed: AtomicBool,
    /// Wakes the pulls that could not park (past the limit) when `closed` is set.
    closing: Notify,
}

impl PullWaiters {
    pub fn new(parked_max: usize) -> PullWaiters {
        PullWaiters {
            waiting: Mutex::new(HashMap::new()),
            parked: AtomicUsize::new(0),
            parked_max,
            closed: AtomicBool::new(false),
            closing: Notify::new(),
        }
    }

    /// Completes at shutdown: a pull that could not park waits for this or its time, whichever
    /// comes first, so that it does not hold the stop for its whole suspend time.
    pub async fn until_closed(&self) {
        let notified = self.closing.notified();
        tokio::pin!(notified);
        // Registered before the flag is read: a close in between still wakes us.
        notified.as_mut().enable();
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        notified.await;
    }

    /// Parks a pull waiting for offsets at or past `offset`. None when too many are parked;
    /// the caller then answers at once instead.
    pub fn park(&self, topic: &str, queue_id: u32, offset: u64) -> Option<oneshot::Receiver<()>> {
        let mut waiting = self.waiting.lock().expect("pull waiters lock poisoned");
        if self.closed.load(Ordering::Acquire) {
            // A receiver whose sender is gone: the pull wakes at once.
            return Some(oneshot::channel().1);
        }
        if self.parked.load(Ordering::Relaxed) >= self.parked_max {
            // Pulls that timed out on queues nobody parks on or writes to again are still
            // counted: drop them everywhere before refusing, or they would turn long polling
            // off for good.
            let mut dropped = 0;
            waiting.retain(|_, queues| {
                queues.retain(|_, waiters| {
                    let before = waiters.len();
                    waiters.retain(|waiter| !waiter.wake.is_closed());
                    dropped += before - waiters.len();
                    !waiters.is_empty()
                });
                !queues.is_empty()
            });
            self.parked.fetch_sub(dropped, Ordering::Relaxed);
            if self.parked.load(Ordering::Relaxed) >= self.parked_max {
                return None;
            }
        }
        let queue = waiting
            .entry(topic.to_string())
            .or_default()
            .entry(queue_id)
            .or_default();
        // Waiters whose pull already timed out are dropped here, so a queue that never gets a
        // message does not collect them.
        let before = queue.len();
        queue.retain(|waiter| !waiter.wake.is_closed());
        self.parked
            .fetch_sub(before - queue.len(), Ordering::Relaxed);
        let (wake, receiver) = oneshot::channel();
        queue.push(Waiter { offset, wake });
        self.parked.fetch_add(1, Ordering::Relaxed);
        Some(receiver)
    }

    /// Wakes the pulls on this queue that asked for an offset below the new maximum.
    pub fn arrived(&self, topic: &str, queue_id: u32, max_offset: u64) {
        let mut waiting = self.waiting.lock().expect("pull waiters lock poisoned");
        let Some(queue) = waiting
            .get_mut(topic)
            .and_then(|queues| queues.get_mut(&queue_id))
        else {
            return;
        };
        let before = queue.len();
        let mut kept = Vec::new();
        for waiter in queue.drain(..) {
            if waiter.offset < max_offset {
                let _ = waiter.wake.send(());
            } else if !waiter.wake.is_closed() {
                kept.push(waiter);
            }
        }
        self.parked
            .fetch_sub(before - kept.len(), Ordering::Relaxed);
        *queue = kept;
    }

    /// Wakes every parked pull, and every pull that parks from now on, at once.
    pub fn close(&self) {
        let mut waiting = self.waiting.lock().expect("pull waiters lock poisoned");
        self.closed.store(true, Ordering::Release);
        waiting.clear();
        self.parked.store(0, Ordering::Relaxed);
        self.closing.notify_waiters();
    }

    pub fn parked(&self) -> usize {
        self.parked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_wakes_pulls_that_could_not_park() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let waiters = std::sync::Arc::new(PullWaiters::new(0));
        assert!(waiters.park("T", 0, 0).is_none(), "no room to park");
        runtime.block_on(async {
            let waiting = {
                let waiters = waiters.clone();
                tokio::spawn(async move { waiters.until_closed().await })
            };
            tokio::task::yield_now().await;
            assert!(!waiting.is_finished());
            waiters.close();
            tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
                .await
                .expect("woken by the close")
                .expect("task");
            // And one that starts waiting after the close returns at once.
            tokio::time::timeout(std::time::Duration::from_secs(5), waiters.until_closed())
                .await
                .expect("returns at once after the close");
        });
    }

    #[test]
    fn arrival_wakes_only_waiters_below_the_new_maximum() {
        let waiters = PullWaiters::new(10);
        let mut low = waiters.park("T", 0, 5).expect("parked");
        let mut high = waiters.park("T", 0, 9).expect("parked");
        let mut other = waiters.park("T", 1, 0).expect("parked");
        waiters.arrived("T", 0, 6);
        assert!(low.try_recv().is_ok());
        assert!(high.try_recv().is_err());
        assert!(other.try_recv().is_err());
        assert_eq!(waiters.parked(), 2);
    }

    #[test]
    fn parking_stops_at_the_limit_and_timed_out_waiters_are_dropped() {
        let waiters = PullWaiters::new(2);
        let first = waiters.park("T", 0, 0).expect("parked");
        let _second = waiters.park("T", 0, 0).expect("parked");
        assert!(waiters.park("T", 0, 0).is_none());
        drop(first);
        assert!(waiters.park("T", 0, 0).is_some());
    }

    #[test]
    fn timed_out_waiters_on_queues_nobody_touches_again_do_not_fill_the_limit() {
        let waiters = PullWaiters::new(2);
        drop(waiters.park("A", 0, 0).expect("parked"));
        drop(waiters.park("B", 0, 0).expect("parked"));
        // Both timed out; neither queue sees a pull or a message again.
        let parked = waiters
            .park("C", 0, 0)
            .expect("parked once the timed-out ones are dropped");
        assert_eq!(waiters.parked(), 1);
        drop(parked);
    }

    #[test]
    fn close_wakes_parked_pulls_and_later_ones() {
        let waiters = PullWaiters::new(10);
        let mut parked = waiters.park("T", 0, 5).expect("parked");
        waiters.close();
        assert!(matches!(
            parked.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        let mut later = waiters.park("T", 0, 5).expect("answered at once");
        assert!(matches!(
            later.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        assert_eq!(waiters.parked(), 0);
    }
}
