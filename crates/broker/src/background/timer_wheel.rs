//! The timer wheel: every 100 ms it indexes new messages of the timer queue into per-minute
//! buckets (`TimerBuckets`), loads the buckets about to fall due, and delivers the due messages
//! to their real topics, a batch per append, moving its checkpoint past them once the store
//! holds them. What is durable, and why a crash delivers twice but loses nothing, is in
//! `timer.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use quiver_store::durable_file::SnapshotFile;
use quiver_store::{AppendError, AppendOutcome, ReadStatus, Record, TimerBuckets};
use quiver_wire::message::{property, StoredMessage};

use super::{run_step, Owner, Ready};
use crate::clock::now_ms;
use crate::state::Background;
use crate::stored;
use crate::timer::{checkpoint_path, minute, Checkpoint, Progress, BUCKET_MS, TIMER_TOPIC};

const POLL_INTERVAL_MS: u64 = 100;
/// A bucket is loaded this long before its minute starts, so that loading a full one never
/// makes its first messages late.
const LOOKAHEAD_MS: i64 = 5_000;
/// Entries in memory at most before more buckets are loaded (a broker that was down while
/// many fell due catches up a bucket at a time).
const PENDING_MAX: usize = 2_000_000;
/// Timer-queue entries indexed per round, and messages delivered per append.
const INDEX_PER_ROUND: u64 = 65_536;
const DELIVER_PER_APPEND: usize = 256;

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
        })
    }

    /// Indexes the timer queue's new entries into buckets (and into `pending` for loaded ones).
    fn index(&mut self, broker: Background<'_>) -> io::Result<()> {
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
    pub fn round(&mut self, broker: Background<'_>, now: i64) -> io::Result<()> {
        while run_step(self, broker, now) {}
        match self.failure.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// The next batch due at `now` (in due order), asked for as one append; the wheel moves
    /// past it once it is stored. Nothing due: a drained round, if every bucket up to now is
    /// loaded (not held back by PENDING_MAX).
    fn next_batch(&mut self, broker: Background<'_>, now: i64, ready: &mut Ready) {
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

    fn step(&mut self, broker: Background<'_>, now: i64) -> Ready {
        let mut ready = Ready::default();
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
        let counters = broker.counters;
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

    fn stored(
        &mut self,
        _: Background<'_>,
        _: u64,
        outcome: Result<AppendOutcome, AppendError>,
    ) -> bool {
        let delivering = std::mem::take(&mut self.delivering);
        if outcome.is_ok() {
            self.delivered(&delivering);
        }
        true
    }

    fn persist(&mut self, _: Background<'_>) -> io::Result<()> {
        Wheel::persist(self)
    }
}

/// The timer message at `offset` of the timer queue, rebuilt for its real topic; None when it
/// cannot be read or rebuilt (logged).
fn real_record(broker: Background<'_>, offset: u64, now: i64) -> Option<Record> {
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

    fn wheel(&mut self, broker: Background<'_>) -> Option<&mut Wheel> {
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

    fn step(&mut self, broker: Background<'_>, now: i64) -> Ready {
        self.wheel(broker)
            .map(|wheel| wheel.step(broker, now))
            .unwrap_or_default()
    }

    fn stored(
        &mut self,
        broker: Background<'_>,
        token: u64,
        outcome: Result<AppendOutcome, AppendError>,
    ) -> bool {
        match self.wheel.as_mut() {
            Some(wheel) => wheel.stored(broker, token, outcome),
            None => true,
        }
    }

    fn persist(&mut self, broker: Background<'_>) -> io::Result<()> {
        match self.wheel.as_mut() {
            Some(wheel) => Owner::persist(wheel, broker),
            None => Ok(()),
        }
    }
}
