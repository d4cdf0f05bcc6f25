//! RocketMQ 5 timer messages: a send with TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS (or
//! the older `__STARTDELIVERTIME`) due in the future is stored in `rmq_sys_wheel_timer`, queue
//! 0, with its real topic and queue in REAL_TOPIC / REAL_QID and its due time in TIMER_OUT_MS
//! and as its ConsumeQueue tag code (as RocketMQ's send path does). The wheel task below
//! delivers each one at its time, stored again in its real topic.
//!
//! Durable state: the timer queue itself (in the CommitLog, so replicated and recovered like
//! any message) is the source of truth. Over it, per-minute bucket files under
//! `<store>/timer/` hold `(due ms, timer-queue offset)` pairs, so that only the next minutes'
//! entries are in memory however many wait; a checkpoint (`config/timerCheckpoint.json`)
//! says how far the queue was indexed into buckets and up to which `(due, offset)` everything
//! was delivered. After a crash, bucket entries written past the checkpoint are dropped and
//! the queue is indexed again from it: a message may be delivered twice, never lost.
//!
//! Replicas: a slave runs no wheel; its master's deliveries reach it as ordinary messages. It
//! copies the master's progress (GET_TIMER_CHECK_POINT, as RocketMQ's slave does) into its own
//! checkpoint: every timer message below the master's indexed offset and due before its read
//! time was delivered. A slave that becomes a master indexes its whole timer queue and leaves
//! those out, so a failover delivers again only what the master may not have finished, not
//! every timer message the log still holds.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use quiver_store::durable_file::SnapshotFile;
use quiver_store::{AppendError, AppendOutcome, ReadStatus, Record, TimerBuckets};
use quiver_wire::message::{find_property, property, StoredMessage};
use serde::{Deserialize, Serialize};

use crate::clock::now_ms;
use crate::schedule::{run_step, Owner, Ready};
use crate::state::Broker;
use crate::stored;

pub use quiver_record::TIMER_TOPIC;
/// RocketMQ's default `timerMaxDelaySec`: 3 days.
pub const MAX_DELAY_SEC_DEFAULT: u64 = 3 * 24 * 3_600;
const POLL_INTERVAL_MS: u64 = 100;
const PERSIST_EVERY_POLLS: u32 = 10;
const BUCKET_MS: i64 = 60_000;
/// A bucket is loaded this long before its minute starts, so that loading a full one never
/// makes its first messages late.
const LOOKAHEAD_MS: i64 = 5_000;
/// Entries in memory at most before more buckets are loaded (a broker that was down while
/// many fell due catches up a bucket at a time).
const PENDING_MAX: usize = 2_000_000;
/// Timer-queue entries indexed per round, and messages delivered per append.
const INDEX_PER_ROUND: u64 = 65_536;
const DELIVER_PER_APPEND: usize = 256;

/// When a send's timer properties say it falls due, or None for no timer. A DELAY level wins
/// over them (RocketMQ clears them then). Err for a value that is not a number.
pub fn due_time(properties: &str, now_ms: i64) -> Result<Option<i64>, String> {
    let number = |name: &str| -> Result<Option<i64>, String> {
        match find_property(properties, name) {
            None => Ok(None),
            Some(text) => text
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| format!("timer property {name}={text:?} is not a number")),
        }
    };
    if let Some(sec) = number(property::TIMER_DELAY_SEC)? {
        return Ok(Some(now_ms.saturating_add(sec.saturating_mul(1_000))));
    }
    if let Some(ms) = number(property::TIMER_DELAY_MS)? {
        return Ok(Some(now_ms.saturating_add(ms)));
    }
    if let Some(at) = number(property::TIMER_DELIVER_MS)? {
        return Ok(Some(at));
    }
    number(property::START_DELIVER_TIME)
}

/// Turns `message` into its timer-queue form, due at `due_ms`; returns the tag code to store.
pub fn schedule(message: &mut StoredMessage, due_ms: i64) -> i64 {
    let mut properties =
        stored::with_property(&message.properties, property::REAL_TOPIC, &message.topic);
    properties = stored::with_property(
        &properties,
        property::REAL_QID,
        &message.queue_id.to_string(),
    );
    properties = stored::with_property(&properties, property::TIMER_OUT_MS, &due_ms.to_string());
    message.properties = properties;
    message.topic = TIMER_TOPIC.to_string();
    message.queue_id = 0;
    due_ms
}

#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
struct Checkpoint {
    /// The next timer-queue offset to index.
    indexed: u64,
    /// Everything at or below `(delivered_due, delivered_offset)` was delivered.
    delivered_due: i64,
    delivered_offset: u64,
    /// Whether anything was delivered yet (the pair above means nothing until then).
    delivered_any: bool,
    /// Copied from the master while this broker was its slave: the master had delivered every
    /// timer-queue entry below `master_indexed` that fell due before `master_read_ms`.
    master_read_ms: i64,
    master_indexed: u64,
}

impl Checkpoint {
    fn delivered(&self, entry: (i64, u64)) -> bool {
        self.delivered_any && entry <= (self.delivered_due, self.delivered_offset)
    }

    /// Whether the master this broker replicated delivered the entry at `offset`, due `due`.
    fn delivered_by_master(&self, offset: u64, due: i64) -> bool {
        offset < self.master_indexed && due < self.master_read_ms
    }
}

/// How far a wheel has delivered, as a slave copies it: every timer-queue entry below
/// `indexed` whose time came before `read_ms` is delivered (stored in its real topic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub read_ms: i64,
    pub indexed: u64,
}

/// The wheel's state between rounds.
pub struct Wheel {
    buckets: TimerBuckets,
    file: SnapshotFile,
    state: Checkpoint,
    persisted: Checkpoint,
    /// Buckets up to this minute are in `pending` (or were delivered).
    loaded_through: i64,
    pending: BTreeSet<(i64, u64)>,
    /// The last round since opening that delivered everything due at its time.
    drained: Option<Progress>,
    /// The batch being appended, taken out of `pending` once it is stored.
    delivering: Vec<(i64, u64)>,
    /// Why the last step could not index or load, until one can.
    failure: Option<io::Error>,
    steps: u32,
}

fn minute(due_ms: i64) -> i64 {
    due_ms.div_euclid(BUCKET_MS)
}

fn checkpoint_path(store_root: &Path) -> PathBuf {
    store_root.join("config").join("timerCheckpoint.json")
}

/// A slave's copy of its master's progress, into the checkpoint its own wheel opens with if it
/// becomes a master. Returns whether the file changed. The slave runs no wheel, so nothing
/// else writes the file meanwhile.
pub fn record_master_progress(store_root: &Path, master: Progress) -> io::Result<bool> {
    let file = SnapshotFile::new(checkpoint_path(store_root));
    let mut state = file
        .load(|bytes| serde_json::from_slice::<Checkpoint>(bytes))
        .map_err(io::Error::other)?;
    if (state.master_read_ms, state.master_indexed) == (master.read_ms, master.indexed) {
        return Ok(false);
    }
    state.master_read_ms = master.read_ms;
    state.master_indexed = master.indexed;
    file.write(|| Some(serde_json::to_vec(&state).expect("checkpoint serializes")))?;
    Ok(true)
}

impl Wheel {
    /// Opens the wheel of the store at `store_root`, dropping bucket entries written after the
    /// last checkpoint (they are indexed again from the queue).
    pub fn open(store_root: &Path, now_ms: i64) -> io::Result<Wheel> {
        let mut buckets = TimerBuckets::open(store_root.join("timer"))?;
        let file = SnapshotFile::new(checkpoint_path(store_root));
        let state = file
            .load(|bytes| serde_json::from_slice::<Checkpoint>(bytes))
            .map_err(io::Error::other)?;
        let checkpoint_time = file.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let listed = buckets.list()?;
        let first_bucket = listed.first().copied();
        for bucket in listed {
            let modified = buckets.modified(bucket)?;
            // Written to since (or about when) the checkpoint was: keep what it covers.
            if modified + Duration::from_secs(2) >= checkpoint_time {
                let kept: Vec<(i64, u64)> = buckets
                    .read(bucket)?
                    .into_iter()
                    .filter(|(_, offset)| *offset < state.indexed)
                    .collect();
                buckets.replace(bucket, &kept)?;
            }
        }
        let cursor_minute = if state.delivered_any {
            minute(state.delivered_due)
        } else {
            i64::MAX
        };
        let start = first_bucket.unwrap_or(i64::MAX).min(cursor_minute);
        Ok(Wheel {
            buckets,
            file,
            state,
            persisted: state,
            loaded_through: if start == i64::MAX {
                minute(now_ms) - 1
            } else {
                start - 1
            },
            pending: BTreeSet::new(),
            drained: None,
            delivering: Vec::new(),
            failure: None,
            steps: 0,
        })
    }

    /// Indexes the timer queue's new entries into buckets (and into `pending` for loaded ones).
    fn index(&mut self, broker: &Broker) -> io::Result<()> {
        loop {
            let (codes, next) = broker
                .store
                .queue_codes(TIMER_TOPIC, 0, self.state.indexed, INDEX_PER_ROUND)
                .map_err(io::Error::other)?;
            if codes.is_empty() {
                self.state.indexed = self.state.indexed.max(next);
                return Ok(());
            }
            let mut by_bucket: BTreeMap<i64, Vec<(i64, u64)>> = BTreeMap::new();
            for (offset, due) in codes {
                if self.state.delivered_by_master(offset, due) {
                    continue;
                }
                // Never below what was delivered: a message indexed late (its time already
                // past) goes after the cursor, so a restart does not skip it.
                let due = if self.state.delivered_any {
                    due.max(self.state.delivered_due)
                } else {
                    due
                };
                by_bucket
                    .entry(minute(due))
                    .or_default()
                    .push((due, offset));
                if minute(due) <= self.loaded_through {
                    self.pending.insert((due, offset));
                }
            }
            for (bucket, entries) in by_bucket {
                self.buckets.append(bucket, &entries)?;
            }
            self.state.indexed = next;
        }
    }

    /// Loads the buckets that start within the lookahead.
    fn load(&mut self, now: i64) -> io::Result<()> {
        while self.pending.len() < PENDING_MAX
            && (self.loaded_through + 1) * BUCKET_MS <= now + LOOKAHEAD_MS
        {
            let bucket = self.loaded_through + 1;
            for entry in self.buckets.read(bucket)? {
                if !self.state.delivered(entry) {
                    self.pending.insert(entry);
                }
            }
            self.loaded_through = bucket;
        }
        Ok(())
    }

    /// Makes bucket appends durable, then the checkpoint; then removes buckets wholly
    /// delivered by the persisted checkpoint.
    pub fn persist(&mut self) -> io::Result<()> {
        if self.state == self.persisted {
            return Ok(());
        }
        self.buckets.sync()?;
        let state = self.state;
        self.file
            .write(|| Some(serde_json::to_vec(&state).expect("checkpoint serializes")))?;
        self.persisted = state;
        if state.delivered_any {
            let done_below = minute(state.delivered_due).min(self.loaded_through + 1);
            self.buckets.remove_below(done_below)?;
        }
        Ok(())
    }

    /// What this wheel has delivered, for a slave to copy: as of its last round that delivered
    /// everything then due, every entry it had indexed that fell due by that round's time.
    /// (A message indexed late is moved up to the cursor, never past the round's time, so that
    /// round delivered it too.) Nothing is claimed before such a round since opening.
    pub fn progress(&self) -> Progress {
        self.drained.unwrap_or_default()
    }

    /// Messages waiting in memory (the loaded buckets).
    pub fn pending_in_memory(&self) -> usize {
        self.pending.len()
    }

    /// One round at `now`, carried out on this thread: index, load, and deliver every batch
    /// due (tests, and each step of the scheduler's owner).
    pub fn round(&mut self, broker: &Broker, now: i64) -> io::Result<()> {
        while run_step(self, broker, now) {}
        match self.failure.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// The next batch due at `now` (in due order), asked for as one append; the wheel moves
    /// past it once it is stored. Nothing due: a drained round, if every bucket up to now is
    /// loaded (not held back by PENDING_MAX).
    fn next_batch(&mut self, broker: &Broker, now: i64, ready: &mut Ready) {
        let due: Vec<(i64, u64)> = self
            .pending
            .iter()
            .take_while(|(due, _)| *due <= now)
            .take(DELIVER_PER_APPEND)
            .copied()
            .collect();
        if due.is_empty() {
            if self.loaded_through >= minute(now) {
                self.drained = Some(Progress {
                    read_ms: now.saturating_add(1),
                    indexed: self.state.indexed,
                });
            }
            return;
        }
        let records: Vec<Record> = due
            .iter()
            .filter_map(|&(_, offset)| real_record(broker, offset, now))
            .collect();
        ready.more = true;
        if records.is_empty() {
            // None could be read or rebuilt (logged): nothing to store, all taken as done.
            self.delivered(&due);
        } else {
            self.delivering = due;
            ready.append(records, 0);
        }
    }

    /// Takes delivered entries out of memory and moves the cursor to the last one.
    fn delivered(&mut self, due: &[(i64, u64)]) {
        let Some(&last) = due.last() else {
            return;
        };
        for entry in due {
            self.pending.remove(entry);
        }
        self.state.delivered_any = true;
        (self.state.delivered_due, self.state.delivered_offset) = last;
    }
}

impl Owner for Wheel {
    fn name(&self) -> &'static str {
        "timer wheel"
    }

    fn period_ms(&self) -> u64 {
        POLL_INTERVAL_MS
    }

    fn step(&mut self, broker: &Broker, now: i64) -> Ready {
        self.steps = self.steps.wrapping_add(1);
        let mut ready = Ready {
            persist: self.steps.is_multiple_of(PERSIST_EVERY_POLLS),
            ..Ready::default()
        };
        match self.index(broker).and_then(|()| self.load(now)) {
            Ok(()) => {
                self.failure = None;
                self.next_batch(broker, now, &mut ready);
            }
            Err(error) => {
                if self.failure.is_none() {
                    tracing::error!(%error, "timer wheel round failed; retrying");
                }
                self.failure = Some(error);
            }
        }
        let counters = &broker.counters;
        let pending = self.pending.len() as u64;
        counters
            .timer_pending
            .store(pending, std::sync::atomic::Ordering::Relaxed);
        let mut progress = counters
            .timer_progress
            .lock()
            .expect("timer progress lock poisoned");
        *progress = Some(self.progress());
        ready
    }

    fn stored(&mut self, _: &Broker, _: u64, outcome: Result<AppendOutcome, AppendError>) -> bool {
        let delivering = std::mem::take(&mut self.delivering);
        if outcome.is_ok() {
            self.delivered(&delivering);
        }
        true
    }

    fn persist(&mut self, _: &Broker) -> io::Result<()> {
        Wheel::persist(self)
    }
}

/// The timer message at `offset` of the timer queue, rebuilt for its real topic; None when it
/// cannot be read or rebuilt (logged).
fn real_record(broker: &Broker, offset: u64, now: i64) -> Option<Record> {
    let read = match broker
        .store
        .read(TIMER_TOPIC, 0, offset, 1, 64 * 1024 * 1024, &|_| true)
    {
        Ok(read) if read.status == ReadStatus::Found => read,
        Ok(read) => {
            tracing::error!(offset, status = ?read.status, "timer message gone before its time");
            return None;
        }
        Err(error) => {
            tracing::error!(offset, %error, "cannot read a timer message");
            return None;
        }
    };
    let rebuilt = StoredMessage::decode(&read.bytes, false)
        .map_err(|e| e.to_string())
        .and_then(|(mut message, _)| {
            let topic = message
                .property(property::REAL_TOPIC)
                .ok_or("no REAL_TOPIC property")?;
            let queue_id: i32 = message
                .property(property::REAL_QID)
                .and_then(|q| q.parse().ok())
                .ok_or("no REAL_QID property")?;
            let mut properties =
                stored::without_property(&message.properties, property::REAL_TOPIC);
            properties = stored::without_property(&properties, property::REAL_QID);
            properties = stored::with_property(
                &properties,
                property::TIMER_ENQUEUE_MS,
                &message.store_timestamp.to_string(),
            );
            properties =
                stored::with_property(&properties, property::TIMER_DEQUEUE_MS, &now.to_string());
            message.properties = properties;
            message.topic = topic;
            message.queue_id = queue_id;
            message.store_timestamp = now;
            message.store_host = broker.store_host;
            stored::record_of(&message)
        });
    match rebuilt {
        Ok(record) => Some(record),
        Err(error) => {
            tracing::error!(offset, %error, "timer message dropped: cannot rebuild it");
            None
        }
    }
}

/// The timer wheel as a background owner: opened at its first step on the scheduler's thread
/// (opening reads and rewrites bucket files), then stepped as the wheel itself.
pub struct TimerDelivery {
    wheel: Option<Wheel>,
    /// Opening failed: timer messages wait until a restart.
    failed: bool,
}

impl TimerDelivery {
    pub fn new() -> TimerDelivery {
        TimerDelivery {
            wheel: None,
            failed: false,
        }
    }

    fn wheel(&mut self, broker: &Broker) -> Option<&mut Wheel> {
        if self.wheel.is_none() && !self.failed {
            match Wheel::open(&broker.config.store_root, now_ms()) {
                Ok(wheel) => self.wheel = Some(wheel),
                Err(error) => {
                    tracing::error!(%error, "cannot open the timer wheel: timer messages wait until a restart");
                    self.failed = true;
                }
            }
        }
        self.wheel.as_mut()
    }
}

impl Default for TimerDelivery {
    fn default() -> TimerDelivery {
        TimerDelivery::new()
    }
}

impl Owner for TimerDelivery {
    fn name(&self) -> &'static str {
        "timer wheel"
    }

    fn period_ms(&self) -> u64 {
        POLL_INTERVAL_MS
    }

    fn step(&mut self, broker: &Broker, now: i64) -> Ready {
        self.wheel(broker)
            .map(|wheel| wheel.step(broker, now))
            .unwrap_or_default()
    }

    fn stored(
        &mut self,
        broker: &Broker,
        token: u64,
        outcome: Result<AppendOutcome, AppendError>,
    ) -> bool {
        match self.wheel.as_mut() {
            Some(wheel) => wheel.stored(broker, token, outcome),
            None => true,
        }
    }

    fn persist(&mut self, broker: &Broker) -> io::Result<()> {
        match self.wheel.as_mut() {
            Some(wheel) => Owner::persist(wheel, broker),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_follow_rocketmqs_precedence() {
        let now = 1_000_000;
        assert_eq!(
            due_time("TIMER_DELAY_SEC\u{1}3\u{2}", now),
            Ok(Some(1_003_000))
        );
        assert_eq!(
            due_time("TIMER_DELAY_MS\u{1}250\u{2}", now),
            Ok(Some(1_000_250))
        );
        assert_eq!(
            due_time("TIMER_DELIVER_MS\u{1}1234567\u{2}", now),
            Ok(Some(1_234_567))
        );
        assert_eq!(
            due_time("__STARTDELIVERTIME\u{1}7654321\u{2}", now),
            Ok(Some(7_654_321))
        );
        assert_eq!(
            due_time("TIMER_DELIVER_MS\u{1}5\u{2}TIMER_DELAY_SEC\u{1}1\u{2}", now),
            Ok(Some(1_001_000))
        );
        assert_eq!(due_time("TAGS\u{1}a\u{2}", now), Ok(None));
        assert!(due_time("TIMER_DELAY_MS\u{1}soon\u{2}", now).is_err());
    }
}
