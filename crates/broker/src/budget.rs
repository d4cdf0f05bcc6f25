//! Byte budgets: how much memory requests and their answers may hold, per connection and in the
//! whole broker. A request's frame is charged when it is read and its answer when it is
//! queued; both are let go once the answer is written (or, for a oneway request, once it is
//! handled). Past a budget the connection stops reading (`server.rs` waits for room before it
//! hands the next request to a handler or reads more), and a parked pull or pop that an
//! arrival wakes waits for room before it reads: a client that reads its answers slowly holds
//! at most its connection's budget, and all of them together the broker's.
//!
//! A charge is taken without waiting and may take a budget past its limit: only the next one
//! waits. Since every answer is charged in the same poll that built it, a budget is passed by
//! at most one answer per task that checked it at the same moment (one per runtime worker).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{Notify, OwnedSemaphorePermit};

/// The bytes an answer is charged for beside its body: its header fields and frame head.
pub fn answer_bytes(command: &quiver_wire::Command) -> usize {
    const HEAD_BYTES: usize = 128;
    let ext = command.ext.as_ref().map_or(0, |ext| {
        ext.iter()
            .map(|(key, value)| key.len() + value.len() + 8)
            .sum()
    });
    HEAD_BYTES + ext + command.remark.as_ref().map_or(0, String::len) + command.body.len()
}

/// One limit on bytes held, with the bytes held now.
#[derive(Debug)]
pub struct Budget {
    /// What the log and the refusal call it: the key that sets it.
    key: &'static str,
    max: usize,
    used: AtomicUsize,
    freed: Notify,
    /// Whether the log has said the budget is full since it last had room.
    said_full: AtomicBool,
}

impl Budget {
    pub fn new(key: &'static str, max: usize) -> Arc<Budget> {
        Arc::new(Budget {
            key,
            max,
            used: AtomicUsize::new(0),
            freed: Notify::new(),
            said_full: AtomicBool::new(false),
        })
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn has_room(&self) -> bool {
        self.used() < self.max
    }

    fn charge(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    fn release(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(before >= bytes, "a budget released more than was charged");
        // Only a release that makes room can end a wait (`room` waits only while there is
        // none): the others skip the waiters' lock, which every answer written would take.
        if before >= self.max && before - bytes < self.max {
            self.said_full.store(false, Ordering::Relaxed);
            self.freed.notify_waiters();
        }
    }

    /// Completes once the budget has room. Says so in the log, once per time it fills, with
    /// what the caller is (`who`).
    pub async fn room(&self, who: &(dyn std::fmt::Display + Sync)) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check: a release in between still wakes us.
            freed.as_mut().enable();
            if self.has_room() {
                return;
            }
            if !self.said_full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    key = self.key,
                    max = self.max,
                    used = self.used(),
                    %who,
                    "byte budget reached: reading stops until answers are written"
                );
            }
            freed.await;
        }
    }
}

/// A connection's budget and the broker's, charged and let go together.
#[derive(Clone, Debug)]
pub struct Budgets {
    pub connection: Arc<Budget>,
    pub broker: Arc<Budget>,
}

impl Budgets {
    pub fn has_room(&self) -> bool {
        self.connection.has_room() && self.broker.has_room()
    }

    /// Completes once both budgets have room.
    pub async fn room(&self, who: &(dyn std::fmt::Display + Sync)) {
        while !self.has_room() {
            self.connection.room(who).await;
            self.broker.room(who).await;
        }
    }

    /// Charges `bytes` to both, without waiting; let go when the `Held` is dropped.
    pub fn hold(&self, bytes: usize) -> Held {
        let mut held = Held {
            budgets: self.clone(),
            bytes: 0,
            permit: None,
        };
        held.add(bytes);
        held
    }
}

/// Bytes charged to a connection's and the broker's budget (and the in-flight permit of the
/// request they belong to), let go when dropped: once the answer is written.
#[derive(Debug)]
pub struct Held {
    budgets: Budgets,
    bytes: usize,
    permit: Option<OwnedSemaphorePermit>,
}

impl Held {
    pub fn add(&mut self, bytes: usize) {
        self.budgets.connection.charge(bytes);
        self.budgets.broker.charge(bytes);
        self.bytes += bytes;
    }

    /// Sets the charge to `bytes` (more or fewer than before).
    pub fn set(&mut self, bytes: usize) {
        if bytes >= self.bytes {
            self.add(bytes - self.bytes);
        } else {
            let less = self.bytes - bytes;
            self.budgets.connection.release(less);
            self.budgets.broker.release(less);
            self.bytes = bytes;
        }
    }

    pub fn with_permit(mut self, permit: OwnedSemaphorePermit) -> Held {
        self.permit = Some(permit);
        self
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn budgets(connection: usize, broker: usize) -> Budgets {
        Budgets {
            connection: Budget::new("quiverConnectionBytesMax", connection),
            broker: Budget::new("quiverBrokerBytesMax", broker),
        }
    }

    #[test]
    fn held_bytes_count_against_both_budgets_until_dropped() {
        let budgets = budgets(100, 1_000);
        let mut first = budgets.hold(60);
        assert!(budgets.has_room());
        first.add(50);
        assert!(!budgets.has_room(), "110 of 100 held on the connection");
        assert_eq!(budgets.broker.used(), 110);
        first.set(10);
        assert!(budgets.has_room());
        drop(first);
        assert_eq!(budgets.connection.used(), 0);
        assert_eq!(budgets.broker.used(), 0);
    }

    #[tokio::test]
    async fn a_wait_for_room_ends_when_held_bytes_are_let_go() {
        let budgets = budgets(1_000, 100);
        let held = budgets.hold(150);
        let waiting = {
            let budgets = budgets.clone();
            tokio::spawn(async move { budgets.room(&"test").await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room while 150 of 100 are held");
        drop(held);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("room once the bytes are let go")
            .unwrap();
    }
}
