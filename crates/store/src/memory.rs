//! Non-persistent queues: each queue of a topic marked as kept in memory
//! (`Store::set_memory_topic`) is a bounded ring of stored records, never written to the
//! CommitLog. `Store` sends that topic's appends, reads and bounds here instead of to the log,
//! so a reader sees a ConsumeQueue (the same offsets, tag codes, statuses and record bytes)
//! whatever kind of queue it reads. When a ring passes its byte limit the oldest records go, and
//! a consumer behind them is moved to the oldest kept one (OffsetTooSmall); both are counted.
//!
//! Offsets survive restarts without the messages: the next offset of every queue is reserved
//! ahead in a small file (`OFFSET_RESERVE` at a time), and a restarted queue starts at the
//! reservation, so no consumer takes an offset it has read for a new message. A clean close
//! writes the exact next offsets.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};

use crate::durable_file::SnapshotFile;
use crate::types::{Appended, Boundary, QueueBounds, QueueRead, ReadStatus, Record};

/// How far ahead of the next offset a queue's reservation is written: one file write per this
/// many messages of a queue, and the gap a queue's offsets jump after a crash.
const OFFSET_RESERVE: u64 = 1 << 16;
/// The PHYSICALOFFSET of a record in memory: far past any CommitLog position, so a message id
/// made from it is never taken for a record of the log.
pub const NOT_IN_LOG: i64 = i64::MAX;

/// Byte limits of the rings.
#[derive(Debug, Clone, Copy)]
pub struct MemoryLimits {
    /// Per queue (`nonPersistentQueueBytes`).
    pub queue_bytes: u64,
    /// All queues together (`nonPersistentBytesMax`): each queue gets at most its share.
    pub broker_bytes: u64,
}

impl Default for MemoryLimits {
    fn default() -> MemoryLimits {
        MemoryLimits {
            queue_bytes: 16 * 1024 * 1024,
            broker_bytes: 256 * 1024 * 1024,
        }
    }
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

struct Rings {
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

/// Which topics the store keeps in memory. Shared with whoever owns topics' settings, which
/// marks a topic before its first append and unmarks it when it is deleted.
#[derive(Debug, Default)]
pub struct MemoryTopics {
    names: RwLock<HashSet<String>>,
    /// How many names: the log's path skips the lookup while it is zero.
    count: AtomicUsize,
}

impl MemoryTopics {
    /// Keeps `topic`'s queues in memory (`true`: rings, never written to the CommitLog) or in
    /// the log (`false`, the default). A topic's kind is set before its first append and kept
    /// until it is deleted: a switch would hide what the other kind holds.
    pub fn set(&self, topic: &str, memory: bool) {
        let mut names = self.names.write().expect("memory topics lock poisoned");
        if memory {
            names.insert(topic.to_string());
        } else {
            names.remove(topic);
        }
        self.count.store(names.len(), Ordering::Release);
    }

    /// Whether `topic`'s queues are kept in memory.
    pub fn contains(&self, topic: &str) -> bool {
        self.count.load(Ordering::Acquire) > 0
            && self
                .names
                .read()
                .expect("memory topics lock poisoned")
                .contains(topic)
    }

    fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }
}

pub(crate) struct MemoryQueues {
    limits: MemoryLimits,
    file: SnapshotFile,
    topics: Arc<MemoryTopics>,
    rings: Mutex<Rings>,
}

impl MemoryQueues {
    /// Opens the reservations at `path` (none yet is fine).
    pub(crate) fn open(path: PathBuf, limits: MemoryLimits) -> Result<MemoryQueues, String> {
        let file = SnapshotFile::new(path);
        let reserved = file.load(|bytes| serde_json::from_slice::<OffsetsFile>(bytes))?;
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
            file,
            topics: Arc::default(),
            rings: Mutex::new(Rings {
                rings,
                bytes: 0,
                drops: BTreeMap::new(),
                reserved,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rings> {
        self.rings.lock().expect("memory queues lock poisoned")
    }

    pub(crate) fn topics(&self) -> &Arc<MemoryTopics> {
        &self.topics
    }

    /// Whether `topic`'s queues are rings here.
    pub(crate) fn holds(&self, topic: &str) -> bool {
        self.topics.contains(topic)
    }

    pub(crate) fn any_topic(&self) -> bool {
        self.topics.any()
    }

    /// Puts `records` (of one topic and queue) at the end of the queue's ring, with their
    /// QUEUEOFFSET and PHYSICALOFFSET written in, evicting the oldest records past the limits.
    /// Every queue that holds or held records shares the broker's limit equally.
    pub(crate) fn append(&self, records: Vec<Record>) -> Vec<Appended> {
        let Some(first) = records.first() else {
            return Vec::new();
        };
        let key = (first.topic.clone(), first.queue_id);
        let mut guard = self.lock();
        let rings = &mut *guard;
        let queue_count = rings.rings.len() + usize::from(!rings.rings.contains_key(&key));
        let share = self.limits.broker_bytes / queue_count as u64;
        let cap = self.limits.queue_bytes.min(share).max(1);
        let ring = rings.rings.entry(key.clone()).or_default();
        let (appended, added) = push_records(ring, records);
        let (evicted, freed) = evict_past(ring, cap);
        let next = ring.next_offset();
        let reserve = (next > ring.reserved).then(|| {
            ring.reserved = next + OFFSET_RESERVE;
            ring.reserved
        });
        rings.bytes = rings.bytes + added - freed;
        if evicted > 0 {
            rings.drops.entry(key.0.clone()).or_default().evicted += evicted;
        }
        if let Some(reserved) = reserve {
            let queues = rings.reserved.offsets.entry(key.0).or_default();
            queues.insert(key.1, reserved);
            let snapshot = serde_json::to_vec(&rings.reserved).expect("offsets serialize");
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
    /// keeping those whose tag code `accept` takes, as a ConsumeQueue read answers.
    pub(crate) fn read(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max_messages: u32,
        max_bytes: u32,
        accept: &dyn Fn(i64) -> bool,
    ) -> QueueRead {
        let rings = self.lock();
        let ring = rings.rings.get(&(topic.to_string(), queue_id));
        let (min, max) = ring.map_or((0, 0), |ring| (ring.first_offset, ring.next_offset()));
        let answer = |status, next_offset| QueueRead::empty(status, next_offset, min, max);
        let ring = match ring {
            _ if max == 0 && offset == 0 => return answer(ReadStatus::NoMessageInQueue, 0),
            _ if max == 0 => return answer(ReadStatus::OffsetOverflowBadly, 0),
            _ if offset < min => return answer(ReadStatus::OffsetTooSmall, min),
            _ if offset == max => return answer(ReadStatus::OffsetOverflowOne, offset),
            _ if offset > max => return answer(ReadStatus::OffsetOverflowBadly, max),
            Some(ring) => ring,
            None => unreachable!("a queue with offsets has a ring"),
        };
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

    /// A consumer `group` read below the ring's oldest record at `from` and is moved to it:
    /// what it skipped is counted (offsets from before this process were never kept here).
    pub(crate) fn consumer_moved(&self, topic: &str, queue_id: u32, group: &str, from: u64) {
        let mut guard = self.lock();
        let rings = &mut *guard;
        let Some(ring) = rings.rings.get(&(topic.to_string(), queue_id)) else {
            return;
        };
        let min = ring.first_offset;
        let skipped = min.saturating_sub(from.max(ring.started_at.min(min)));
        if skipped == 0 {
            return;
        }
        let drops = rings.drops.entry(topic.to_string()).or_default();
        *drops.skipped_by_group.entry(group.to_string()).or_default() += skipped;
        tracing::warn!(
            topic,
            queue_id,
            group,
            from,
            to = min,
            skipped,
            "a consumer fell behind a non-persistent queue: moved to its oldest message"
        );
    }

    /// The oldest kept offset and the next to be written.
    pub(crate) fn bounds(&self, topic: &str, queue_id: u32) -> QueueBounds {
        let rings = self.lock();
        let ring = rings.rings.get(&(topic.to_string(), queue_id));
        QueueBounds {
            min_offset: ring.map_or(0, |ring| ring.first_offset),
            max_offset: ring.map_or(0, Ring::next_offset),
        }
    }

    /// As the log's: Lower, the first kept offset stored at or after `timestamp_ms` (the next
    /// offset if none); Upper, the last kept offset stored at or before it (the oldest if none).
    pub(crate) fn offset_by_time(
        &self,
        topic: &str,
        queue_id: u32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> u64 {
        let rings = self.lock();
        let Some(ring) = rings.rings.get(&(topic.to_string(), queue_id)) else {
            return 0;
        };
        let index = match boundary {
            Boundary::Lower => ring
                .entries
                .partition_point(|entry| entry.store_timestamp_ms < timestamp_ms),
            Boundary::Upper => ring
                .entries
                .partition_point(|entry| entry.store_timestamp_ms <= timestamp_ms)
                .saturating_sub(1),
        };
        ring.first_offset + index as u64
    }

    /// The store time of the oldest kept record.
    pub(crate) fn earliest_time(&self, topic: &str, queue_id: u32) -> Option<i64> {
        let rings = self.lock();
        let ring = rings.rings.get(&(topic.to_string(), queue_id))?;
        ring.entries.front().map(|entry| entry.store_timestamp_ms)
    }

    /// Bytes held in all rings, and what was dropped, per topic.
    pub(crate) fn usage(&self) -> (u64, BTreeMap<String, Drops>) {
        let rings = self.lock();
        (rings.bytes, rings.drops.clone())
    }

    /// Forgets a deleted topic's rings, its offsets included (a topic created anew under the
    /// name starts at 0, as a persistent one does).
    pub(crate) fn remove_topic(&self, topic: &str) -> std::io::Result<()> {
        let mut guard = self.lock();
        let rings = &mut *guard;
        let mut freed = 0;
        rings.rings.retain(|(name, _), ring| {
            let keep = name != topic;
            if !keep {
                freed += ring.bytes;
            }
            keep
        });
        rings.bytes -= freed;
        rings.drops.remove(topic);
        if rings.reserved.offsets.remove(topic).is_none() {
            return Ok(());
        }
        let snapshot = serde_json::to_vec(&rings.reserved).expect("offsets serialize");
        drop(guard);
        self.file.write(|| Some(snapshot))
    }

    /// Writes every queue's exact next offset, for a clean shutdown: a restart goes on from
    /// there with no gap.
    pub(crate) fn close(&self) -> std::io::Result<()> {
        let snapshot = {
            let mut rings = self.lock();
            let mut exact = OffsetsFile::default();
            for ((topic, queue_id), ring) in &rings.rings {
                let queues = exact.offsets.entry(topic.clone()).or_default();
                queues.insert(*queue_id, ring.next_offset());
            }
            let snapshot = serde_json::to_vec(&exact).expect("offsets serialize");
            rings.reserved = exact;
            snapshot
        };
        // Written with the rings' lock let go: no append waits behind the fsync.
        self.file.write(|| Some(snapshot))
    }
}

/// Appends `records` to `ring` with their offsets written in; returns where each went and the
/// bytes added.
fn push_records(ring: &mut Ring, records: Vec<Record>) -> (Vec<Appended>, u64) {
    let mut appended = Vec::with_capacity(records.len());
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
    (appended, added)
}

/// Drops the oldest records until the ring fits `cap` bytes; returns how many and their bytes.
/// The newest record stays, whatever its size: a send that was answered is readable.
fn evict_past(ring: &mut Ring, cap: u64) -> (u64, u64) {
    let (mut evicted, mut freed) = (0u64, 0u64);
    while ring.bytes > cap && ring.entries.len() > 1 {
        let old = ring.entries.pop_front().expect("more than one entry");
        ring.first_offset += 1;
        ring.bytes -= old.bytes.len() as u64;
        freed += old.bytes.len() as u64;
        evicted += 1;
    }
    (evicted, freed)
}

fn write_i64(bytes: &mut [u8], at: usize, value: i64) {
    bytes[at..at + 8].copy_from_slice(&value.to_be_bytes());
}
