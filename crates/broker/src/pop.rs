//! RocketMQ 5 pop consumption, the broker's state: which (topic, group) pairs consume by pop
//! (`mqadmin setConsumeMode -m POP`), and for each (group, topic, queue) a cursor (the next
//! offset never handed out) and the messages handed out and not yet acknowledged, each
//! invisible until its deadline. A message past its deadline is revived: copied to the pop
//! retry topic `%RETRY%<group>_<topic>` with its reconsume count raised (to `%DLQ%<group>`
//! past the retry maximum), and pops take it from there. The group's committed offset of a
//! queue is the lowest offset not yet acknowledged, so consumerProgress shows pop groups too.
//!
//! The state is written to `config/popState.json` every second and at shutdown: after
//! SIGTERM nothing acknowledged comes back and nothing unacknowledged is lost; after kill -9
//! what was acknowledged or popped in the last second may come once more, and nothing is lost.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use quiver_store::durable_file::{self, SnapshotFile};
use quiver_wire::body::{
    self, MessageRequestModeSerializeWrapper, SetMessageRequestModeRequestBody,
};
use serde::{Deserialize, Serialize};

/// Messages handed out and not acknowledged, per queue of a group (`popInflightMaxPerQueue`):
/// past it the queue is skipped by pops (POLLING_FULL when nothing else is found) until acks
/// or revives free room.
pub const IN_FLIGHT_MAX_PER_QUEUE: usize = 20_000;
/// The same for all queues of one group (`popInflightMaxPerGroup`).
pub const IN_FLIGHT_MAX_PER_GROUP: usize = 200_000;

/// The in-flight limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub per_queue: usize,
    pub per_group: usize,
}
/// RocketMQ's default for a group's retries before the dead-letter topic.
pub const RETRY_MAX_DEFAULT: i32 = 16;
pub const MODE_POP: &str = "POP";
pub const MODE_PULL: &str = "PULL";

/// RocketMQ's pop retry topic of a group and topic (KeyBuilder's V1 name).
pub fn retry_topic(group: &str, topic: &str) -> String {
    format!("%RETRY%{group}_{topic}")
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QueueKey {
    pub group: String,
    /// The topic the messages are read from: the consumed topic, or its pop retry topic.
    pub topic: String,
    pub queue_id: i32,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Flight {
    deadline_ms: i64,
    pop_time_ms: i64,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct PopQueue {
    cursor: u64,
    in_flight: BTreeMap<u64, Flight>,
    /// Popped in order: the queue is handed to nobody else while any of its messages is in
    /// flight, and one not acknowledged in time is popped again from the same queue (not
    /// revived through the retry topic), so the order holds.
    #[serde(default)]
    ordered: bool,
    /// Ordered queues: how many times each offset was handed out before (orderCountInfo).
    #[serde(default)]
    attempts: BTreeMap<u64, i32>,
}

impl PopQueue {
    /// The lowest offset not yet acknowledged.
    fn low_watermark(&self) -> u64 {
        self.in_flight
            .keys()
            .next()
            .copied()
            .unwrap_or(self.cursor)
            .min(self.cursor)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Snapshot {
    queues: Vec<(QueueKey, PopQueue)>,
    /// (topic, group) pairs in pop mode.
    modes: Vec<SetMessageRequestModeRequestBody>,
}

#[derive(Default)]
struct Inner {
    queues: HashMap<QueueKey, PopQueue>,
    modes: BTreeMap<(String, String), SetMessageRequestModeRequestBody>,
}

pub struct PopState {
    pub limits: Limits,
    file: SnapshotFile,
    inner: Mutex<Inner>,
    dirty: AtomicBool,
    /// (topic, group) -> pops and notifications waiting now (POLLING_INFO).
    polling: Mutex<HashMap<(String, String), usize>>,
}

/// Counts one waiting pop of a (topic, group) while it lives.
pub struct Polling<'a> {
    state: &'a PopState,
    key: (String, String),
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        let mut polling = self.state.polling.lock().expect("polling lock poisoned");
        if let Some(count) = polling.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                polling.remove(&self.key);
            }
        }
    }
}

/// What a claim on a queue found.
pub enum Claim {
    /// The queue is at its in-flight limit.
    Full,
    /// Messages handed out: their offsets, and the new low watermark to commit.
    Taken { offsets: Vec<u64>, low: u64 },
}

impl PopState {
    pub fn open(path: PathBuf, limits: Limits) -> Result<PopState, String> {
        let snapshot: Snapshot = durable_file::load(&path, body::from_json::<Snapshot>)?;
        let inner = Inner {
            queues: snapshot.queues.into_iter().collect(),
            modes: snapshot
                .modes
                .into_iter()
                .map(|m| ((m.topic.clone(), m.consumer_group.clone()), m))
                .collect(),
        };
        Ok(PopState {
            limits,
            file: SnapshotFile::new(path),
            inner: Mutex::new(inner),
            dirty: AtomicBool::new(false),
            polling: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("pop state lock poisoned")
    }

    fn changed(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// SET_MESSAGE_REQUEST_MODE: POP or PULL for a (topic, group).
    pub fn set_mode(&self, mode: SetMessageRequestModeRequestBody) {
        let mut inner = self.lock();
        let key = (mode.topic.clone(), mode.consumer_group.clone());
        if mode.mode == MODE_POP {
            inner.modes.insert(key, mode);
        } else {
            inner.modes.remove(&key);
        }
        self.changed();
    }

    pub fn is_pop(&self, topic: &str, group: &str) -> bool {
        self.lock()
            .modes
            .contains_key(&(topic.to_string(), group.to_string()))
    }

    /// GET_ALL_MESSAGE_REQUEST_MODE's answer.
    pub fn modes(&self) -> MessageRequestModeSerializeWrapper {
        let inner = self.lock();
        let mut wrapper = MessageRequestModeSerializeWrapper::default();
        for ((topic, group), mode) in &inner.modes {
            wrapper
                .message_request_mode_map
                .entry(topic.clone())
                .or_default()
                .insert(group.clone(), mode.clone());
        }
        wrapper
    }

    /// Hands out messages of one queue: `read(cursor, room)` reads at most `room` messages
    /// (what the in-flight limits leave) from the cursor (the queue's first pop starts at
    /// `init()`) and returns the offsets found and the offset after the last one scanned; they become invisible until `now + invisible_ms`. Runs under the
    /// state's lock, so two pops never hand out the same message.
    #[allow(clippy::too_many_arguments)]
    pub fn claim(
        &self,
        key: &QueueKey,
        now_ms: i64,
        invisible_ms: i64,
        ordered: bool,
        init: impl FnOnce() -> u64,
        read: impl FnOnce(u64, usize) -> (Vec<u64>, u64),
    ) -> Claim {
        let mut inner = self.lock();
        let group_in_flight: usize = inner
            .queues
            .iter()
            .filter(|(k, _)| k.group == key.group)
            .map(|(_, q)| q.in_flight.len())
            .sum();
        if group_in_flight >= self.limits.per_group {
            return Claim::Full;
        }
        let queue = inner.queues.entry(key.clone()).or_insert_with(|| PopQueue {
            cursor: init(),
            ..PopQueue::default()
        });
        if ordered && !queue.in_flight.is_empty() {
            // Held by the consumer that popped it until it acknowledges.
            return Claim::Taken {
                offsets: Vec::new(),
                low: queue.low_watermark(),
            };
        }
        if queue.in_flight.len() >= self.limits.per_queue {
            return Claim::Full;
        }
        queue.ordered = ordered;
        let room = (self.limits.per_queue - queue.in_flight.len())
            .min(self.limits.per_group - group_in_flight);
        let (offsets, next) = read(queue.cursor, room);
        let flight = Flight {
            deadline_ms: now_ms.saturating_add(invisible_ms),
            pop_time_ms: now_ms,
        };
        for offset in &offsets {
            queue.in_flight.insert(*offset, flight);
        }
        let moved = next != queue.cursor;
        queue.cursor = queue.cursor.max(next);
        let low = queue.low_watermark();
        if moved || !offsets.is_empty() {
            self.changed();
        }
        Claim::Taken { offsets, low }
    }

    /// An admin's reset of the group's queue (INVOKE_BROKER_TO_RESET_OFFSET): the next pop
    /// reads from `offset`, behind the cursor (messages acknowledged already come again) or
    /// past it (messages not popped yet are skipped). Messages popped before the reset and not
    /// acknowledged stay in flight, as RocketMQ keeps their checkpoints: their handles still
    /// acknowledge them, and they are revived through the retry topic if they are not, so a
    /// reset loses nothing a consumer was handed. An ordered queue is the exception, as
    /// RocketMQ clears its block: its messages in flight and their counts are forgotten, or
    /// the queue would stay held by messages from before the reset. A rewind over a message
    /// still in flight hands it out again with a new invisible time; either handle
    /// acknowledges it. False when the group never popped the queue: its first pop starts at
    /// the committed offset, which the reset set.
    pub fn reset(&self, key: &QueueKey, offset: u64) -> bool {
        let mut inner = self.lock();
        let Some(queue) = inner.queues.get_mut(key) else {
            return false;
        };
        queue.cursor = offset;
        if queue.ordered {
            queue.in_flight.clear();
            queue.attempts.clear();
        }
        self.changed();
        true
    }

    /// How many times each of `offsets` was handed out before (ordered queues).
    pub fn attempts(&self, key: &QueueKey, offsets: &[u64]) -> Vec<i32> {
        let inner = self.lock();
        let queue = inner.queues.get(key);
        offsets
            .iter()
            .map(|o| queue.and_then(|q| q.attempts.get(o)).copied().unwrap_or(0))
            .collect()
    }

    /// Ordered queues whose popped messages ran out of invisible time: popped again from the
    /// first of them, each counted once more. Returns each such queue's low watermark.
    pub fn expire_ordered(&self, now_ms: i64) -> Vec<(QueueKey, u64)> {
        let mut inner = self.lock();
        let mut lows = Vec::new();
        for (key, queue) in inner.queues.iter_mut() {
            if !queue.ordered || !queue.in_flight.values().any(|f| f.deadline_ms <= now_ms) {
                continue;
            }
            let first = *queue.in_flight.keys().next().expect("in flight");
            for offset in queue.in_flight.keys() {
                *queue.attempts.entry(*offset).or_default() += 1;
            }
            queue.in_flight.clear();
            queue.cursor = queue.cursor.min(first);
            lows.push((key.clone(), queue.low_watermark()));
        }
        if !lows.is_empty() {
            self.changed();
        }
        lows
    }

    /// The queue's cursor, if a pop started it.
    pub fn cursor(&self, key: &QueueKey) -> Option<u64> {
        self.lock().queues.get(key).map(|q| q.cursor)
    }

    /// Marks a pop of `group` on `topic` as waiting until the guard drops.
    pub fn polling(&self, topic: &str, group: &str) -> Polling<'_> {
        let key = (topic.to_string(), group.to_string());
        *self
            .polling
            .lock()
            .expect("polling lock poisoned")
            .entry(key.clone())
            .or_default() += 1;
        Polling { state: self, key }
    }

    /// Pops of `group` waiting on `topic` now.
    pub fn polling_count(&self, topic: &str, group: &str) -> usize {
        let polling = self.polling.lock().expect("polling lock poisoned");
        polling
            .get(&(topic.to_string(), group.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Acknowledges messages of one queue: the queue's new lowest unacknowledged offset, or
    /// None when none of them was in flight (acknowledged already, or revived).
    pub fn ack_many(&self, key: &QueueKey, offsets: impl IntoIterator<Item = u64>) -> Option<u64> {
        let mut inner = self.lock();
        let queue = inner.queues.get_mut(key)?;
        let mut any = false;
        for offset in offsets {
            if queue.in_flight.remove(&offset).is_some() {
                queue.attempts.remove(&offset);
                any = true;
            }
        }
        if !any {
            return None;
        }
        let low = queue.low_watermark();
        self.changed();
        Some(low)
    }

    /// Moves a message's deadline to `now + invisible_ms`. False when it is not in flight.
    pub fn change_invisible(
        &self,
        key: &QueueKey,
        offset: u64,
        now_ms: i64,
        invisible_ms: i64,
    ) -> bool {
        let mut inner = self.lock();
        let Some(flight) = inner
            .queues
            .get_mut(key)
            .and_then(|q| q.in_flight.get_mut(&offset))
        else {
            return false;
        };
        flight.deadline_ms = now_ms.saturating_add(invisible_ms);
        flight.pop_time_ms = now_ms;
        self.changed();
        true
    }

    /// Messages past their deadline, at most `max`.
    pub fn expired(&self, now_ms: i64, max: usize) -> Vec<(QueueKey, u64)> {
        let inner = self.lock();
        let mut out = Vec::new();
        for (key, queue) in inner.queues.iter().filter(|(_, q)| !q.ordered) {
            for (offset, flight) in &queue.in_flight {
                if flight.deadline_ms <= now_ms {
                    out.push((key.clone(), *offset));
                    if out.len() >= max {
                        return out;
                    }
                }
            }
        }
        out
    }

    /// Messages in flight per (group, topic) for the in-flight figures.
    pub fn in_flight(&self) -> usize {
        self.lock().queues.values().map(|q| q.in_flight.len()).sum()
    }

    /// Takes revived messages out of flight (their copies are in the retry or dead-letter
    /// topic now). Returns each touched queue's new low watermark.
    pub fn revived(&self, revived: &[(QueueKey, u64)]) -> Vec<(QueueKey, u64)> {
        let mut inner = self.lock();
        let mut lows = BTreeMap::new();
        for (key, offset) in revived {
            if let Some(queue) = inner.queues.get_mut(key) {
                if queue.in_flight.remove(offset).is_some() {
                    lows.insert(key.clone(), queue.low_watermark());
                }
            }
        }
        self.changed();
        lows.into_iter().collect()
    }

    /// Forgets a deleted topic's queues and modes.
    pub fn remove_topic(&self, topic: &str) {
        let mut inner = self.lock();
        inner.queues.retain(|key, _| key.topic != topic);
        inner.modes.retain(|(t, _), _| t != topic);
        self.changed();
    }

    pub fn persist_if_dirty(&self) -> std::io::Result<()> {
        let result = self.file.write(|| {
            if !self.dirty.swap(false, Ordering::AcqRel) {
                return None;
            }
            let inner = self.lock();
            let snapshot = Snapshot {
                queues: inner
                    .queues
                    .iter()
                    .map(|(k, q)| (k.clone(), q.clone()))
                    .collect(),
                modes: inner.modes.values().cloned().collect(),
            };
            Some(serde_json::to_vec(&snapshot).expect("pop state serializes"))
        });
        if result.is_err() {
            self.changed();
        }
        result
    }
}
