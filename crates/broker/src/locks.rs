//! Queue locks for orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ): one client of a group
//! holds a queue at a time. A lock lapses 60 s after it was last taken or renewed, as in
//! RocketMQ; clients renew every 20 s and trust their own lock for 30 s.

use std::collections::HashMap;
use std::sync::Mutex;

use quiver_wire::body::MessageQueue;

/// RocketMQ's `rocketmq.broker.rebalance.lockMaxLiveTime`.
pub const LOCK_LEASE_MS: i64 = 60_000;

#[derive(Debug)]
struct Holder {
    client_id: String,
    renewed_ms: i64,
}

#[derive(Default)]
pub struct QueueLocks {
    /// group -> queue -> holder
    groups: Mutex<HashMap<String, HashMap<MessageQueue, Holder>>>,
}

impl QueueLocks {
    /// Takes or renews the locks `client_id` can have; returns the queues it now holds.
    pub fn lock(
        &self,
        group: &str,
        client_id: &str,
        queues: &[MessageQueue],
        now_ms: i64,
    ) -> Vec<MessageQueue> {
        let mut groups = self.groups.lock().expect("queue locks poisoned");
        let held = groups.entry(group.to_string()).or_default();
        held.retain(|_, holder| now_ms - holder.renewed_ms <= LOCK_LEASE_MS);
        let mut granted = Vec::new();
        for queue in queues {
            let free = held
                .get(queue)
                .is_none_or(|holder| holder.client_id == client_id);
            if free {
                held.insert(
                    queue.clone(),
                    Holder {
                        client_id: client_id.to_string(),
                        renewed_ms: now_ms,
                    },
                );
                granted.push(queue.clone());
            }
        }
        if held.is_empty() {
            groups.remove(group);
        }
        granted
    }

    /// Drops lapsed locks and the groups left with none: a group whose clients all went away
    /// without unlocking would otherwise stay forever.
    pub fn expire(&self, now_ms: i64) {
        let mut groups = self.groups.lock().expect("queue locks poisoned");
        groups.retain(|_, held| {
            held.retain(|_, holder| now_ms - holder.renewed_ms <= LOCK_LEASE_MS);
            !held.is_empty()
        });
    }

    #[cfg(test)]
    fn group_count(&self) -> usize {
        self.groups.lock().expect("queue locks poisoned").len()
    }

    /// Releases the queues `client_id` holds among `queues`; others' locks stay.
    pub fn unlock(&self, group: &str, client_id: &str, queues: &[MessageQueue]) {
        let mut groups = self.groups.lock().expect("queue locks poisoned");
        if let Some(held) = groups.get_mut(group) {
            for queue in queues {
                if held.get(queue).is_some_and(|h| h.client_id == client_id) {
                    held.remove(queue);
                }
            }
            if held.is_empty() {
                groups.remove(group);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(id: i32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: id,
        }
    }

    #[test]
    fn one_holder_per_queue_until_unlock_or_lease_end() {
        let locks = QueueLocks::default();
        assert_eq!(locks.lock("g", "a", &[queue(0), queue(1)], 0).len(), 2);
        assert_eq!(
            locks.lock("g", "b", &[queue(1), queue(2)], 10),
            vec![queue(2)]
        );
        assert_eq!(locks.lock("other", "b", &[queue(1)], 10), vec![queue(1)]);
        locks.unlock("g", "b", &[queue(0)]);
        assert!(locks.lock("g", "b", &[queue(0)], 20).is_empty());
        locks.unlock("g", "a", &[queue(0)]);
        assert_eq!(locks.lock("g", "b", &[queue(0)], 30), vec![queue(0)]);
        assert_eq!(
            locks.lock("g", "b", &[queue(1)], LOCK_LEASE_MS),
            Vec::<MessageQueue>::new(),
            "a's renewal at 0 is still valid at 60 s"
        );
        assert_eq!(
            locks.lock("g", "b", &[queue(1)], LOCK_LEASE_MS + 1),
            vec![queue(1)]
        );
    }

    #[test]
    fn lapsed_locks_and_their_groups_are_swept() {
        let locks = QueueLocks::default();
        assert!(locks.lock("nobody", "a", &[], 0).is_empty());
        assert_eq!(locks.group_count(), 0, "asking for nothing keeps no group");
        locks.lock("g1", "a", &[queue(0)], 0);
        locks.lock("g2", "a", &[queue(0)], 30_000);
        locks.expire(LOCK_LEASE_MS + 1);
        assert_eq!(locks.group_count(), 1);
        locks.expire(30_000 + LOCK_LEASE_MS + 1);
        assert_eq!(locks.group_count(), 0);
    }
}
