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
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use quiver_store::durable_file::SnapshotFile;
use quiver_wire::body::{
    self, MessageRequestModeSerializeWrapper, SetMessageRequestModeRequestBody,
};
use serde::{Deserialize, Serialize};

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

/// RocketMQ's pop retry topic of a group and topic (KeyBuilder's V1 name), which the receipt
/// handle's retry flag names.
pub fn retry_topic(group: &str, topic: &str) -> String {
    quiver_wire::receipt::pop_retry_topic(group, topic)
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
    /// A pop is reading the queue between its reservation and its commit.
    #[serde(skip)]
    reading: bool,
    /// Another pop found the queue reserved meanwhile (and may be waiting for it).
    #[serde(skip)]
    contended: bool,
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

/// Shards of the queue state, by (group, topic): pops of different groups or topics never wait
/// for each other, and the revive scan and the snapshot hold one shard at a time.
const SHARDS: usize = 16;

#[derive(Default)]
struct Shard {
    queues: HashMap<QueueKey, PopQueue>,
}

pub struct PopState {
    pub limits: Limits,
    file: SnapshotFile,
    shards: Box<[Mutex<Shard>]>,
    modes: Mutex<BTreeMap<(String, String), SetMessageRequestModeRequestBody>>,
    /// Messages in flight per group, for its limit: changed under the shard lock of the queue
    /// that changed (this lock is taken inside a shard's, never the other way round).
    group_in_flight: Mutex<HashMap<String, usize>>,
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
    /// Another pop is reading the queue right now: this one leaves it alone, as RocketMQ's
    /// pop skips a queue whose lock it cannot take.
    Busy,
    /// Messages handed out: their offsets, the new low watermark to commit, and whether
    /// another pop found the queue reserved meanwhile (it may be waiting to look again).
    Taken {
        offsets: Vec<u64>,
        low: u64,
        contended: bool,
    },
}

/// The first step of a pop on a queue (`PopState::reserve`).
pub enum Reserve<'a> {
    Full,
    Busy,
    /// An ordered queue held by a consumer until it acknowledges: its low watermark.
    Held {
        low: u64,
    },
    Reserved(Reservation<'a>),
}

/// A queue reserved for one pop: nobody else reads it until this commits or drops, so no two
/// pops hand out the same message, while the read itself holds no lock.
pub struct Reservation<'a> {
    state: &'a PopState,
    key: QueueKey,
    /// Where the read starts, and how many messages the in-flight limits leave room for.
    pub cursor: u64,
    pub room: usize,
    done: bool,
}

impl Reservation<'_> {
    /// Hands out `offsets` (read from `cursor`; `next` is the offset after the last one
    /// scanned), invisible until `now + invisible_ms`. Returns the queue's low watermark, and
    /// whether another pop found the queue reserved meanwhile. A cursor moved meanwhile (an
    /// admin reset) stays where the reset put it.
    pub fn commit(
        mut self,
        offsets: &[u64],
        next: u64,
        now_ms: i64,
        invisible_ms: i64,
    ) -> (u64, bool) {
        self.done = true;
        let flight = Flight {
            deadline_ms: now_ms.saturating_add(invisible_ms),
            pop_time_ms: now_ms,
        };
        let cursor = self.cursor;
        let state = self.state;
        let committed = state.with_queue(&self.key, |queue| {
            queue.reading = false;
            for offset in offsets {
                queue.in_flight.insert(*offset, flight);
            }
            if queue.cursor == cursor {
                queue.cursor = cursor.max(next);
            }
            (queue.low_watermark(), std::mem::take(&mut queue.contended))
        });
        if next != cursor || !offsets.is_empty() {
            state.changed();
        }
        // A queue removed meanwhile (its topic deleted) keeps nothing in flight.
        committed.unwrap_or((next, false))
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.state
                .with_queue(&self.key, |queue| queue.reading = false);
        }
    }
}

impl PopState {
    /// Opens the state at `path` (none yet is fine).
    pub fn open(path: PathBuf, limits: Limits) -> Result<PopState, String> {
        let file = SnapshotFile::new(path);
        let snapshot: Snapshot = file.load(body::from_json::<Snapshot>)?;
        let state = PopState {
            limits,
            file,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            modes: Mutex::new(
                snapshot
                    .modes
                    .into_iter()
                    .map(|m| ((m.topic.clone(), m.consumer_group.clone()), m))
                    .collect(),
            ),
            group_in_flight: Mutex::default(),
            dirty: AtomicBool::new(false),
            polling: Mutex::new(HashMap::new()),
        };
        for (key, queue) in snapshot.queues {
            state.count_group(&key.group, 0, queue.in_flight.len());
            state.shard(&key).queues.insert(key, queue);
        }
        Ok(state)
    }

    fn shard(&self, key: &QueueKey) -> std::sync::MutexGuard<'_, Shard> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&key.group, &key.topic).hash(&mut hasher);
        let index = hasher.finish() as usize % self.shards.len();
        self.shards[index].lock().expect("pop shard lock poisoned")
    }

    fn shards(&self) -> impl Iterator<Item = std::sync::MutexGuard<'_, Shard>> {
        self.shards
            .iter()
            .map(|shard| shard.lock().expect("pop shard lock poisoned"))
    }

    fn modes_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), SetMessageRequestModeRequestBody>>
    {
        self.modes.lock().expect("pop modes lock poisoned")
    }

    /// Applies `change` to a queue, if a pop started it, keeping its group's in-flight count.
    fn with_queue<R>(&self, key: &QueueKey, change: impl FnOnce(&mut PopQueue) -> R) -> Option<R> {
        let mut shard = self.shard(key);
        let queue = shard.queues.get_mut(key)?;
        let before = queue.in_flight.len();
        let result = change(queue);
        self.count_group(&key.group, before, queue.in_flight.len());
        Some(result)
    }

    fn count_group(&self, group: &str, before: usize, after: usize) {
        if before == after {
            return;
        }
        let mut counts = self
            .group_in_flight
            .lock()
            .expect("group counts lock poisoned");
        let count = counts.entry(group.to_string()).or_default();
        *count = (*count + after).saturating_sub(before);
        if *count == 0 {
            counts.remove(group);
        }
    }

    fn group_count(&self, group: &str) -> usize {
        let counts = self
            .group_in_flight
            .lock()
            .expect("group counts lock poisoned");
        counts.get(group).copied().unwrap_or(0)
    }

    fn changed(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// SET_MESSAGE_REQUEST_MODE: POP or PULL for a (topic, group).
    pub fn set_mode(&self, mode: SetMessageRequestModeRequestBody) {
        let mut modes = self.modes_lock();
        let key = (mode.topic.clone(), mode.consumer_group.clone());
        if mode.mode == MODE_POP {
            modes.insert(key, mode);
        } else {
            modes.remove(&key);
        }
        self.changed();
    }

    pub fn is_pop(&self, topic: &str, group: &str) -> bool {
        self.modes_lock()
            .contains_key(&(topic.to_string(), group.to_string()))
    }

    /// GET_ALL_MESSAGE_REQUEST_MODE's answer.
    pub fn modes(&self) -> MessageRequestModeSerializeWrapper {
        let modes = self.modes_lock();
        let mut wrapper = MessageRequestModeSerializeWrapper::default();
        for ((topic, group), mode) in modes.iter() {
            wrapper
                .message_request_mode_map
                .entry(topic.clone())
                .or_default()
                .insert(group.clone(), mode.clone());
        }
        wrapper
    }

    /// The first step of a pop on a queue: checks the in-flight limits and reserves the queue
    /// for this pop (its first pop starts at `init()`). The read happens outside any lock; the
    /// reservation's `commit` hands out what it found.
    pub fn reserve(
        &self,
        key: &QueueKey,
        ordered: bool,
        init: impl FnOnce() -> u64,
    ) -> Reserve<'_> {
        let group_in_flight = self.group_count(&key.group);
        if group_in_flight >= self.limits.per_group {
            return Reserve::Full;
        }
        let mut shard = self.shard(key);
        let queue = shard.queues.entry(key.clone()).or_insert_with(|| PopQueue {
            cursor: init(),
            ..PopQueue::default()
        });
        if queue.reading {
            queue.contended = true;
            return Reserve::Busy;
        }
        if ordered && !queue.in_flight.is_empty() {
            return Reserve::Held {
                low: queue.low_watermark(),
            };
        }
        if queue.in_flight.len() >= self.limits.per_queue {
            return Reserve::Full;
        }
        queue.ordered = ordered;
        queue.reading = true;
        let room = (self.limits.per_queue - queue.in_flight.len())
            .min(self.limits.per_group - group_in_flight);
        Reserve::Reserved(Reservation {
            state: self,
            key: key.clone(),
            cursor: queue.cursor,
            room,
            done: false,
        })
    }

    /// A pop on one queue in its three steps: reserve, `read(cursor, room)` with no lock held
    /// (at most `room` messages from the cursor: the offsets found and the offset after the
    /// last one scanned), commit them as invisible until `now + invisible_ms`.
    pub fn claim(
        &self,
        key: &QueueKey,
        (now_ms, invisible_ms): (i64, i64),
        ordered: bool,
        init: impl FnOnce() -> u64,
        read: impl FnOnce(u64, usize) -> (Vec<u64>, u64),
    ) -> Claim {
        match self.reserve(key, ordered, init) {
            Reserve::Full => Claim::Full,
            Reserve::Busy => Claim::Busy,
            Reserve::Held { low } => Claim::Taken {
                offsets: Vec::new(),
                low,
                contended: false,
            },
            Reserve::Reserved(reservation) => {
                let (offsets, next) = read(reservation.cursor, reservation.room);
                let (low, contended) = reservation.commit(&offsets, next, now_ms, invisible_ms);
                Claim::Taken {
                    offsets,
                    low,
                    contended,
                }
            }
        }
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
        let found = self.with_queue(key, |queue| {
            queue.cursor = offset;
            if queue.ordered {
                queue.in_flight.clear();
                queue.attempts.clear();
            }
        });
        if found.is_some() {
            self.changed();
        }
        found.is_some()
    }

    /// How many times each of `offsets` was handed out before (ordered queues).
    pub fn attempts(&self, key: &QueueKey, offsets: &[u64]) -> Vec<i32> {
        let shard = self.shard(key);
        let queue = shard.queues.get(key);
        offsets
            .iter()
            .map(|o| queue.and_then(|q| q.attempts.get(o)).copied().unwrap_or(0))
            .collect()
    }

    /// Ordered queues whose popped messages ran out of invisible time: popped again from the
    /// first of them, each counted once more. Returns each such queue's low watermark.
    pub fn expire_ordered(&self, now_ms: i64) -> Vec<(QueueKey, u64)> {
        let mut lows = Vec::new();
        for mut shard in self.shards() {
            for (key, queue) in shard.queues.iter_mut() {
                if !queue.ordered || !queue.in_flight.values().any(|f| f.deadline_ms <= now_ms) {
                    continue;
                }
                let first = *queue.in_flight.keys().next().expect("in flight");
                for offset in queue.in_flight.keys() {
                    *queue.attempts.entry(*offset).or_default() += 1;
                }
                self.count_group(&key.group, queue.in_flight.len(), 0);
                queue.in_flight.clear();
                queue.cursor = queue.cursor.min(first);
                lows.push((key.clone(), queue.low_watermark()));
            }
        }
        if !lows.is_empty() {
            self.changed();
        }
        lows
    }

    /// The queue's cursor, if a pop started it.
    pub fn cursor(&self, key: &QueueKey) -> Option<u64> {
        self.shard(key).queues.get(key).map(|q| q.cursor)
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
        let low = self.with_queue(key, |queue| {
            let mut any = false;
            for offset in offsets {
                if queue.in_flight.remove(&offset).is_some() {
                    queue.attempts.remove(&offset);
                    any = true;
                }
            }
            any.then(|| queue.low_watermark())
        })??;
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
        let changed = self.with_queue(key, |queue| {
            let Some(flight) = queue.in_flight.get_mut(&offset) else {
                return false;
            };
            flight.deadline_ms = now_ms.saturating_add(invisible_ms);
            flight.pop_time_ms = now_ms;
            true
        });
        if changed == Some(true) {
            self.changed();
        }
        changed == Some(true)
    }

    /// Messages past their deadline, at most `max`.
    pub fn expired(&self, now_ms: i64, max: usize) -> Vec<(QueueKey, u64)> {
        let mut out = Vec::new();
        for shard in self.shards() {
            for (key, queue) in shard.queues.iter().filter(|(_, q)| !q.ordered) {
                for (offset, flight) in &queue.in_flight {
                    if flight.deadline_ms <= now_ms {
                        out.push((key.clone(), *offset));
                        if out.len() >= max {
                            return out;
                        }
                    }
                }
            }
        }
        out
    }

    /// Messages in flight in all groups.
    pub fn in_flight(&self) -> usize {
        let counts = self
            .group_in_flight
            .lock()
            .expect("group counts lock poisoned");
        counts.values().sum()
    }

    /// Takes revived messages out of flight (their copies are in the retry or dead-letter
    /// topic now). Returns each touched queue's new low watermark.
    pub fn revived(&self, revived: &[(QueueKey, u64)]) -> Vec<(QueueKey, u64)> {
        let mut lows = BTreeMap::new();
        for (key, offset) in revived {
            let low = self.with_queue(key, |queue| {
                queue
                    .in_flight
                    .remove(offset)
                    .map(|_| queue.low_watermark())
            });
            if let Some(Some(low)) = low {
                lows.insert(key.clone(), low);
            }
        }
        self.changed();
        lows.into_iter().collect()
    }

    /// Forgets a deleted topic's queues and modes.
    pub fn remove_topic(&self, topic: &str) {
        for mut shard in self.shards() {
            shard.queues.retain(|key, queue| {
                let keep = key.topic != topic;
                if !keep {
                    self.count_group(&key.group, queue.in_flight.len(), 0);
                }
                keep
            });
        }
        self.modes_lock().retain(|(t, _), _| t != topic);
        self.changed();
    }

    pub fn persist_if_dirty(&self) -> std::io::Result<()> {
        let result = self.file.write(|| {
            if !self.dirty.swap(false, Ordering::AcqRel) {
                return None;
            }
            let mut queues = Vec::new();
            for shard in self.shards() {
                queues.extend(shard.queues.iter().map(|(k, q)| (k.clone(), q.clone())));
            }
            let modes = self.modes_lock().values().cloned().collect();
            let snapshot = Snapshot { queues, modes };
            Some(serde_json::to_vec(&snapshot).expect("pop state serializes"))
        });
        if result.is_err() {
            self.changed();
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(per_queue: usize, per_group: usize) -> (tempfile::TempDir, PopState) {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = Limits {
            per_queue,
            per_group,
        };
        let state = PopState::open(dir.path().join("popState.json"), limits).expect("open");
        (dir, state)
    }

    fn key(group: &str, topic: &str, queue_id: i32) -> QueueKey {
        QueueKey {
            group: group.into(),
            topic: topic.into(),
            queue_id,
        }
    }

    #[test]
    fn a_reserved_queue_is_left_alone_by_other_pops_until_its_reader_commits() {
        let (_dir, state) = state(100, 1_000);
        let queue = key("g", "T", 0);
        let Reserve::Reserved(first) = state.reserve(&queue, false, || 10) else {
            panic!("a free queue is reserved");
        };
        assert_eq!((first.cursor, first.room), (10, 100));
        assert!(matches!(state.reserve(&queue, false, || 0), Reserve::Busy));
        // Another queue of the same group, and the same queue of another group, are free.
        assert!(matches!(
            state.reserve(&key("g", "T", 1), false, || 0),
            Reserve::Reserved(_)
        ));
        assert!(matches!(
            state.reserve(&key("h", "T", 0), false, || 0),
            Reserve::Reserved(_)
        ));
        let (low, contended) = first.commit(&[10, 12], 13, 1_000, 30_000);
        assert_eq!(low, 10);
        assert!(
            contended,
            "a pop found it reserved and may wait to look again"
        );
        assert_eq!(state.cursor(&queue), Some(13));
        assert_eq!(state.in_flight(), 2);
        let Reserve::Reserved(second) = state.reserve(&queue, false, || 0) else {
            panic!("free again after the commit");
        };
        assert_eq!((second.cursor, second.room), (13, 98));
        assert_eq!(second.commit(&[], 13, 1_000, 30_000), (10, false));
    }

    #[test]
    fn a_dropped_reservation_frees_the_queue_and_hands_out_nothing() {
        let (_dir, state) = state(100, 1_000);
        let queue = key("g", "T", 0);
        drop(state.reserve(&queue, false, || 5));
        assert_eq!(state.cursor(&queue), Some(5));
        assert_eq!(state.in_flight(), 0);
        assert!(matches!(
            state.reserve(&queue, false, || 0),
            Reserve::Reserved(_)
        ));
    }

    #[test]
    fn a_reset_while_a_pop_reads_keeps_the_cursor_where_the_reset_put_it() {
        let (_dir, state) = state(100, 1_000);
        let queue = key("g", "T", 0);
        let Reserve::Reserved(reading) = state.reserve(&queue, false, || 50) else {
            panic!("reserved");
        };
        assert!(state.reset(&queue, 20));
        reading.commit(&[50], 51, 0, 1_000);
        assert_eq!(state.cursor(&queue), Some(20));
    }

    #[test]
    fn the_group_limit_counts_every_queue_of_the_group_and_frees_with_acks_revives_and_deletes() {
        let (_dir, state) = state(10, 5);
        let claim = |topic: &str, queue_id: i32, offsets: Vec<u64>| {
            let next = offsets.last().map_or(0, |o| o + 1);
            state.claim(
                &key("g", topic, queue_id),
                (0, 1_000),
                false,
                || 0,
                |_, room| (offsets.into_iter().take(room).collect(), next),
            )
        };
        assert!(matches!(claim("A", 0, vec![0, 1, 2]), Claim::Taken { .. }));
        let Claim::Taken { offsets, .. } = claim("B", 1, vec![0, 1, 2]) else {
            panic!("room for two more");
        };
        assert_eq!(offsets, [0, 1], "only what the group's limit leaves");
        assert!(matches!(claim("A", 2, vec![0]), Claim::Full));
        assert_eq!(state.ack_many(&key("g", "A", 0), [0]), Some(1));
        let revived = state.revived(&[(key("g", "B", 1), 0)]);
        assert_eq!(revived, [(key("g", "B", 1), 1)]);
        assert_eq!(state.in_flight(), 3);
        state.remove_topic("A");
        assert_eq!(state.in_flight(), 1);
        assert_eq!(state.expired(1_000, 10), [(key("g", "B", 1), 1)]);
    }

    #[test]
    fn the_state_comes_back_whole_from_its_snapshot() {
        let (dir, state) = state(10, 100);
        let queue = key("g", "T", 3);
        state.claim(
            &queue,
            (0, 1_000),
            false,
            || 7,
            |cursor, _| (vec![cursor], cursor + 1),
        );
        state.persist_if_dirty().expect("persist");
        let limits = state.limits;
        drop(state);
        let reopened = PopState::open(dir.path().join("popState.json"), limits).expect("reopen");
        assert_eq!(reopened.cursor(&queue), Some(8));
        assert_eq!(reopened.in_flight(), 1);
        assert!(matches!(
            reopened.reserve(&queue, false, || 0),
            Reserve::Reserved(_)
        ));
    }
}
