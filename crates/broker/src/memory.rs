//! Non-persistent topics: each queue of a topic with the attribute `persistence=memory` is a
//! bounded ring of stored records in memory, never written to the CommitLog. Consumers read it
//! as a ConsumeQueue (the same offsets, tag codes, statuses and record bytes); a send is
//! answered once its records are in the ring. When a ring passes its byte limit the oldest
//! records go, and a consumer behind them is moved to the oldest kept one
//! (PULL_OFFSET_MOVED); both are counted.
//!
//! Offsets survive restarts without the messages: the next offset of every queue is reserved
//! ahead in a small file (`OFFSET_RESERVE` at a time), and a restarted queue starts at the
//! reservation, so no consumer takes an offset it has read for a new message. A clean shutdown
//! writes the exact next offsets (`close`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Mutex;

use quiver_store::{Appended, QueueBounds, QueueRead, ReadStatus, Record};
use serde::{Deserialize, Serialize};

use crate::persist;

/// The topic attribute that makes a topic non-persistent (`mqadmin updateTopic -a
/// +persistence=memory`), and its value.
pub const PERSISTENCE_ATTRIBUTE: &str = "persistence";
pub const PERSISTENCE_MEMORY: &str = "memory";
/// The default: stored in the CommitLog.
pub const PERSISTENCE_DISK: &str = "disk";
/// How far ahead of the next offset a queue's reservation is written: one file write per this
/// many messages of a queue, and the gap a queue's offsets jump after a crash.
const OFFSET_RESERVE: u64 = 1 << 16;
/// The PHYSICALOFFSET of a record in memory: far past any CommitLog position, so a message id
/// made from it is never taken for a record of the log.
pub const NOT_IN_LOG: i64 = i64::MAX;

/// Byte limits of the rings.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Per queue (`nonPersistentQueueBytes`).
    pub queue_bytes: u64,
    /// All queues together (`nonPersistentBytesMax`): each queue gets at most its share.
    pub broker_bytes: u64,
}

struct Entry {
    tags_code: i64,
    store_timestamp_ms: i64,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Ring {
    /// The offset of `entries[0]`.
    first_offset: u64,
    entries: VecDeque<Entry>,
    bytes: u64,
    /// Offsets below this may have been handed out before a restart.
    reserved: u64,
    /// The ring's first offset in this process: offsets below it were never kept here, so a
    /// consumer moved past them after a restart lost nothing to this ring.
    started_at: u64,
}

impl Ring {
    fn next_offset(&self) -> u64 {
        self.first_offset + self.entries.len() as u64
    }
}

/// Dropped records, per topic: evicted from a full ring, and skipped by a consumer group that
/// was behind the ring (counted once per group, when it is moved on).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Drops {
    pub evicted: u64,
    pub skipped_by_group: BTreeMap<String, u64>,
}

struct Inner {
    rings: HashMap<(String, u32), Ring>,
    bytes: u64,
    drops: BTreeMap<String, Drops>,
    /// Reservations as last written (or read at start).
    reserved: OffsetsFile,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct OffsetsFile {
    /// topic -> queue id -> the first offset a new message may take.
    #[serde(default)]
    offsets: BTreeMap<String, BTreeMap<u32, u64>>,
}

pub struct MemoryQueues {
    limits: Limits,
    file: persist::SnapshotFile,
    inner: Mutex<Inner>,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("cannot read the non-persistent queue offsets: {0}")]
    Load(String),
}

impl MemoryQueues {
    /// Opens the reservations at `path` (none yet is fine).
    pub fn open(path: PathBuf, limits: Limits) -> Result<MemoryQueues, MemoryError> {
        let reserved = persist::load(&path, |bytes| {
            serde_json::from_slice::<OffsetsFile>(bytes).map_err(|e| e.to_string())
        })
        .map_err(MemoryError::Load)?;
        let mut rings = HashMap::new();
        for (topic, queues) in &reserved.offsets {
            for (&queue_id, &offset) in queues {
                let ring = Ring {
                    first_offset: offset,
                    reserved: offset,
                    started_at: offset,
                    ..Ring::default()
                };
                rings.insert((topic.clone(), queue_id), ring);
            }
        }
        Ok(MemoryQueues {
            limits,
            file: persist::SnapshotFile::new(path),
            inner: Mutex::new(Inner {
                rings,
                bytes: 0,
                drops: BTreeMap::new(),
                reserved,
            }),
        })
    }

    /// Puts `records` (of one topic and queue) at the end of the queue's ring, with their
    /// QUEUEOFFSET and PHYSICALOFFSET written in, evicting the oldest records past the limits.
    /// Every queue that holds or held records shares the broker's limit equally.
    pub fn append(&self, records: Vec<Record>) -> Vec<Appended> {
        let mut appended = Vec::with_capacity(records.len());
        let Some(first) = records.first() else {
            return appended;
        };
        let key = (first.topic.clone(), first.queue_id);
        let mut guard = self.inner.lock().expect("memory queues lock poisoned");
        let inner = &mut *guard;
        let queue_count = inner.rings.len() + usize::from(!inner.rings.contains_key(&key));
        let ring = inner.rings.entry(key.clone()).or_default();
        let share = self.limits.broker_bytes / queue_count as u64;
        let cap = self.limits.queue_bytes.min(share).max(1);
        let mut added = 0u64;
        for record in records {
            let Record {
                tags_code,
                store_timestamp_ms,
                mut bytes,
                ..
            } = record;
            let offset = ring.next_offset();
            write_i64(&mut bytes, quiver_record::QUEUE_OFFSET_AT, offset as i64);
            write_i64(&mut bytes, quiver_record::PHYSICAL_OFFSET_AT, NOT_IN_LOG);
            let size = bytes.len() as u64;
            appended.push(Appended {
                queue_offset: offset,
                position: NOT_IN_LOG as u64,
                size: size as u32,
            });
            ring.entries.push_back(Entry {
                tags_code,
                store_timestamp_ms,
                bytes,
            });
            ring.bytes += size;
            added += size;
        }
        let mut evicted = 0u64;
        let mut freed = 0u64;
        // The newest record stays, whatever its size: a send that was answered is readable.
        while ring.bytes > cap && ring.entries.len() > 1 {
            let old = ring.entries.pop_front().expect("more than one entry");
            ring.first_offset += 1;
            ring.bytes -= old.bytes.len() as u64;
            freed += old.bytes.len() as u64;
            evicted += 1;
        }
        let next = ring.next_offset();
        let reserve = (next > ring.reserved).then(|| {
            ring.reserved = next + OFFSET_RESERVE;
            ring.reserved
        });
        inner.bytes = inner.bytes + added - freed;
        if evicted > 0 {
            inner.drops.entry(key.0.clone()).or_default().evicted += evicted;
        }
        if let Some(reserved) = reserve {
            inner
                .reserved
                .offsets
                .entry(key.0.clone())
                .or_default()
                .insert(key.1, reserved);
            let snapshot = serde_json::to_vec(&inner.reserved).expect("offsets serialize");
            drop(guard);
            // Rare (once per OFFSET_RESERVE messages of a queue). A failure costs only the
            // guarantee after a crash, never the send: these topics do not depend on the disk.
            if let Err(error) = self.file.write(|| Some(snapshot)) {
                tracing::error!(%error, path = %self.file.path().display(),
                    "cannot write non-persistent queue offsets; after a crash their offsets may repeat");
            }
        }
        appended
    }

    /// Reads up to `max_messages` records (`max_bytes` in all, at least one) from `offset`,
    /// keeping those whose tag code `accept` takes, as a ConsumeQueue read answers. A read
    /// below the ring's oldest record is OffsetTooSmall, counted as skipped for `group`.
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        &self,
        topic: &str,
        queue_id: u32,
        group: &str,
        offset: u64,
        max_messages: u32,
        max_bytes: u32,
        accept: &dyn Fn(i64) -> bool,
    ) -> QueueRead {
        let mut guard = self.inner.lock().expect("memory queues lock poisoned");
        let inner = &mut *guard;
        let (min, max, started_at) = match inner.rings.get(&(topic.to_string(), queue_id)) {
            Some(ring) => (ring.first_offset, ring.next_offset(), ring.started_at),
            None => (0, 0, 0),
        };
        let answer = |status, next_offset| QueueRead {
            status,
            bytes: Vec::new(),
            message_count: 0,
            next_offset,
            min_offset: min,
            max_offset: max,
            damage: None,
        };
        if max == 0 {
            let status = if offset == 0 {
                ReadStatus::NoMessageInQueue
            } else {
                ReadStatus::OffsetOverflowBadly
            };
            return answer(status, 0);
        }
        if offset < min {
            let skipped = min - offset.max(started_at.min(min));
            if skipped > 0 {
                let drops = inner.drops.entry(topic.to_string()).or_default();
                *drops.skipped_by_group.entry(group.to_string()).or_default() += skipped;
                tracing::warn!(
                    topic,
                    queue_id,
                    group,
                    from = offset,
                    to = min,
                    skipped,
                    "a consumer fell behind a non-persistent queue: moved to its oldest message"
                );
            }
            return answer(ReadStatus::OffsetTooSmall, min);
        }
        if offset == max {
            return answer(ReadStatus::OffsetOverflowOne, offset);
        }
        if offset > max {
            return answer(ReadStatus::OffsetOverflowBadly, max);
        }
        let ring = &inner.rings[&(topic.to_string(), queue_id)];
        let mut read = answer(ReadStatus::NoMatchedMessage, offset);
        let mut next = offset;
        for entry in ring.entries.range((offset - min) as usize..) {
            if read.message_count >= max_messages.max(1) {
                break;
            }
            if accept(entry.tags_code) {
                let fits = read.bytes.len() + entry.bytes.len() <= max_bytes as usize;
                if read.message_count > 0 && !fits {
                    break;
                }
                read.bytes.extend_from_slice(&entry.bytes);
                read.message_count += 1;
            }
            next += 1;
        }
        read.next_offset = next;
        if read.message_count > 0 {
            read.status = ReadStatus::Found;
        }
        read
    }

    /// The oldest kept offset and the next to be written.
    pub fn bounds(&self, topic: &str, queue_id: u32) -> QueueBounds {
        let inner = self.inner.lock().expect("memory queues lock poisoned");
        match inner.rings.get(&(topic.to_string(), queue_id)) {
            Some(ring) => QueueBounds {
                min_offset: ring.first_offset,
                max_offset: ring.next_offset(),
            },
            None => QueueBounds {
                min_offset: 0,
                max_offset: 0,
            },
        }
    }

    /// The first kept offset stored at or after `timestamp_ms`, else the next offset.
    pub fn offset_by_time(&self, topic: &str, queue_id: u32, timestamp_ms: i64) -> u64 {
        let inner = self.inner.lock().expect("memory queues lock poisoned");
        let Some(ring) = inner.rings.get(&(topic.to_string(), queue_id)) else {
            return 0;
        };
        let before = ring
            .entries
            .partition_point(|entry| entry.store_timestamp_ms < timestamp_ms);
        ring.first_offset + before as u64
    }

    /// The store time of the record at `offset`, if the ring still holds it.
    pub fn store_time_at(&self, topic: &str, queue_id: u32, offset: u64) -> Option<i64> {
        let inner = self.inner.lock().expect("memory queues lock poisoned");
        let ring = inner.rings.get(&(topic.to_string(), queue_id))?;
        let index = offset.checked_sub(ring.first_offset)?;
        let entry = ring.entries.get(usize::try_from(index).ok()?)?;
        Some(entry.store_timestamp_ms)
    }

    /// The store time of the oldest kept record.
    pub fn earliest_time(&self, topic: &str, queue_id: u32) -> Option<i64> {
        let inner = self.inner.lock().expect("memory queues lock poisoned");
        let ring = inner.rings.get(&(topic.to_string(), queue_id))?;
        ring.entries.front().map(|entry| entry.store_timestamp_ms)
    }

    /// Bytes held in all rings.
    pub fn bytes(&self) -> u64 {
        self.inner
            .lock()
            .expect("memory queues lock poisoned")
            .bytes
    }

    /// What was dropped, per topic.
    pub fn drops(&self) -> BTreeMap<String, Drops> {
        let inner = self.inner.lock().expect("memory queues lock poisoned");
        inner.drops.clone()
    }

    /// Forgets a deleted topic's rings, its offsets included (a topic created anew under the
    /// name starts at 0, as a persistent one does).
    pub fn remove_topic(&self, topic: &str) {
        let mut guard = self.inner.lock().expect("memory queues lock poisoned");
        let inner = &mut *guard;
        let mut freed = 0;
        inner.rings.retain(|(name, _), ring| {
            let keep = name != topic;
            if !keep {
                freed += ring.bytes;
            }
            keep
        });
        inner.bytes -= freed;
        inner.drops.remove(topic);
        if inner.reserved.offsets.remove(topic).is_some() {
            let snapshot = serde_json::to_vec(&inner.reserved).expect("offsets serialize");
            drop(guard);
            if let Err(error) = self.file.write(|| Some(snapshot)) {
                tracing::error!(%error, "cannot write non-persistent queue offsets");
            }
        }
    }

    /// Writes every queue's exact next offset, for a clean shutdown: a restart goes on from
    /// there with no gap.
    pub fn close(&self) -> std::io::Result<()> {
        let mut inner = self.inner.lock().expect("memory queues lock poisoned");
        let mut exact = OffsetsFile::default();
        for ((topic, queue_id), ring) in &inner.rings {
            exact
                .offsets
                .entry(topic.clone())
                .or_default()
                .insert(*queue_id, ring.next_offset());
        }
        let snapshot = serde_json::to_vec(&exact).expect("offsets serialize");
        inner.reserved = exact;
        self.file.write(|| Some(snapshot))
    }
}

fn write_i64(bytes: &mut [u8], at: usize, value: i64) {
    bytes[at..at + 8].copy_from_slice(&value.to_be_bytes());
}
