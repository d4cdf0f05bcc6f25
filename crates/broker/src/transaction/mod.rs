//! Transactional messages, kept as RocketMQ keeps them. A half message (TRAN_MSG=true) is
//! stored in `RMQ_SYS_TRANS_HALF_TOPIC` queue 0 with its real topic and queue in REAL_TOPIC /
//! REAL_QID, where no consumer subscribes. END_TRANSACTION (`handler/transaction.rs`) commits
//! it, writing a copy to its real topic, or rolls it back; either way the decision is an op
//! record in `RMQ_SYS_TRANS_OP_HALF_TOPIC` (tag `d`, body the half's queue offset and a comma,
//! the format RocketMQ 5.5.0's batched op records use). A half left undecided past
//! `transactionTimeOut` is checked: the broker asks one of its producer group's connections
//! (CHECK_TRANSACTION_STATE) every `transactionCheckInterval`, at most `transactionCheckMax`
//! times, then moves it to `TRANS_CHECK_MAX_TIME_TOPIC`, as RocketMQ does.
//!
//! Exactly once across crashes. A commit writes the real message and its op record in one
//! append, the real message first: a crash keeps a prefix of a group, so it may lose the op
//! record and keep the message, never the reverse. The check therefore looks, before asking a
//! producer about a half, for a committed copy (found by UNIQ_KEY in the real topic, with the
//! half's position as its prepared-transaction offset) and, finding one, writes only the op
//! record. While running, a half is decided once: `Transactions::claim` refuses a second
//! decision for the same half, whether it comes from the producer's own END_TRANSACTION, the
//! answer to a check, or the check itself.
//!
//! Unlike RocketMQ, the check does not write a half again each time it asks (RocketMQ counts
//! checks in those copies): the broker keeps one copy per half, so no two copies of one
//! transaction can both be committed. Check counts are kept in memory; a restart counts anew.
//! Progress is kept as RocketMQ keeps it, as consumer offsets of `CID_RMQ_SYS_TRANS` on the half
//! and op queues: halves below the half offset are all decided, and op records below the op
//! offset name only halves below it. At start the op queue is read from its offset to know
//! which later halves are decided.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use quiver_store::{ReadStatus, Record, Store};
use quiver_wire::message::{property, sys_flag, StoredMessage};

use crate::offsets::ConsumerOffsets;
use crate::stored;

pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
pub const OP_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
pub const CHECK_MAX_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// The group whose offsets on the half and op queues hold the check's progress.
pub const SYSTEM_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// The tag of an op record.
const REMOVE_TAG: &str = "d";
const READ_MESSAGES_MAX: u32 = 64;
const READ_BYTES_MAX: u32 = 4 * 1024 * 1024;
/// Op offsets per entry of the op records' index: the op offset kept as progress is rounded
/// down to a chunk, which costs reading at most this many more op records at start.
const OP_CHUNK_RECORDS: u64 = 1_024;

/// Turns a message sent with TRAN_MSG=true into its half form, as RocketMQ's
/// `parseHalfMessageInner` does: `__transactionId__` set to its UNIQ_KEY, the real topic and
/// queue in properties, the transaction bits cleared, topic and queue the half queue.
pub fn to_half(message: &mut StoredMessage) {
    let mut properties = message.properties.clone();
    if let Some(uniq) = message
        .property(property::UNIQ_KEY)
        .filter(|u| !u.is_empty())
    {
        properties = stored::with_property(&properties, property::TRANSACTION_ID, &uniq);
    }
    properties = stored::with_property(&properties, property::REAL_TOPIC, &message.topic);
    properties = stored::with_property(
        &properties,
        property::REAL_QID,
        &message.queue_id.to_string(),
    );
    message.properties = properties;
    message.sys_flag &= !sys_flag::TRANSACTION_MASK;
    message.topic = HALF_TOPIC.to_string();
    message.queue_id = 0;
}

/// The half's real topic and queue, or why it has none.
pub(crate) fn real_queue(half: &StoredMessage) -> Result<(String, i32), String> {
    let topic = half
        .property(property::REAL_TOPIC)
        .filter(|t| !t.is_empty())
        .ok_or("the half message has no REAL_TOPIC")?;
    let queue_id = half
        .property(property::REAL_QID)
        .and_then(|q| q.parse::<i32>().ok())
        .filter(|q| *q >= 0)
        .ok_or("the half message has no valid REAL_QID")?;
    Ok((topic, queue_id))
}

/// The committed copy of `half` for its real topic, as RocketMQ's `endMessageTransaction`
/// builds it: the half-only properties (REAL_TOPIC, REAL_QID, TRAN_MSG) removed, the commit
/// bits set, and the half's position as its prepared-transaction offset, which is how the check
/// recognises a copy whose op record a crash lost.
pub fn committed_record(
    half: &StoredMessage,
    store_host: std::net::SocketAddr,
    now_ms: i64,
) -> Result<Record, String> {
    let (topic, queue_id) = real_queue(half)?;
    let mut message = half.clone();
    let mut properties = stored::without_property(&message.properties, property::REAL_TOPIC);
    properties = stored::without_property(&properties, property::REAL_QID);
    properties = stored::without_property(&properties, property::TRAN_MSG);
    message.properties = properties;
    message.topic = topic;
    message.queue_id = queue_id;
    message.sys_flag = (half.sys_flag & !sys_flag::TRANSACTION_MASK) | sys_flag::TRANSACTION_COMMIT;
    message.prepared_transaction_offset = half.physical_offset;
    message.store_timestamp = now_ms;
    message.store_host = store_host;
    stored::record_of(&message)
}

/// The op record that marks the half at `half_offset` decided.
pub fn op_record(
    store_host: std::net::SocketAddr,
    uniq_key: String,
    half_offset: u64,
    now_ms: i64,
) -> Result<Record, String> {
    let mut properties = String::new();
    for (name, value) in [
        (property::TAGS, REMOVE_TAG.to_string()),
        (property::WAIT, "true".to_string()),
        (property::UNIQ_KEY, uniq_key),
    ] {
        properties = stored::with_property(&properties, name, &value);
    }
    let message = StoredMessage {
        queue_id: 0,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp: now_ms,
        born_host: store_host,
        store_timestamp: now_ms,
        store_host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: format!("{half_offset},").into_bytes().into(),
        topic: OP_TOPIC.to_string(),
        properties,
    };
    stored::record_of(&message)
}

/// The half offsets an op record names: its body split at commas (RocketMQ batches several,
/// each followed by a comma). Words that are not offsets are skipped, as RocketMQ skips them.
fn op_offsets(body: &[u8]) -> impl Iterator<Item = u64> + '_ {
    body.split(|b| *b == b',')
        .filter_map(|word| std::str::from_utf8(word).ok()?.trim().parse().ok())
}

/// What the broker knows of half messages' decisions, and the check's progress.
pub struct Transactions {
    state: Mutex<Progress>,
}

#[derive(Debug, Default)]
struct Progress {
    /// Every half below this offset is decided, moved aside, or removed by retention.
    half_next: u64,
    /// Decided halves at or above `half_next`, as ranges: a half left undecided holds
    /// `half_next` back for up to `transactionCheckMax` rounds while the ones after it are
    /// decided in order, and those stay a few ranges, not one entry each.
    decided: OffsetRanges,
    /// Halves whose decision is being written -> the op queue's end when it began, at or below
    /// where its op record will land.
    deciding: HashMap<u64, u64>,
    /// Op records that may name a half at or above `half_next`, by chunks of
    /// `OP_CHUNK_RECORDS` op offsets: chunk -> the highest half offset its records name.
    op_chunks: BTreeMap<u64, u64>,
    /// Op records below this name only halves below `half_next`.
    op_next: u64,
    /// Checks sent per undecided half.
    checks: HashMap<u64, u32>,
    /// (half, op) offsets last put in the offset table, or loaded at start: RocketMQ writes
    /// the group's offsets only when they move, so a broker without transactions has none.
    committed: (u64, u64),
}

impl Progress {
    fn note_op(&mut self, op_offset: u64, halves: impl IntoIterator<Item = u64>) {
        let mut highest = None;
        for half in halves {
            if half >= self.half_next {
                self.decided.insert(half);
                self.checks.remove(&half);
            }
            highest = highest.max(Some(half));
        }
        if let Some(highest) = highest {
            let chunk = self
                .op_chunks
                .entry(op_offset / OP_CHUNK_RECORDS)
                .or_default();
            *chunk = (*chunk).max(highest);
        }
    }

    /// Moves `half_next` past the decided halves at its front, and `op_next` past the op
    /// records that name only halves below it. `op_end` is the op queue's end now.
    fn advance(&mut self, op_end: u64) {
        self.half_next = self.decided.pass_from(self.half_next);
        while let Some((_, &highest)) = self.op_chunks.first_key_value() {
            if highest >= self.half_next {
                break;
            }
            self.op_chunks.pop_first();
        }
        let mut op_next = self
            .op_chunks
            .first_key_value()
            .map_or(op_end, |(&chunk, _)| chunk * OP_CHUNK_RECORDS);
        for &began in self.deciding.values() {
            op_next = op_next.min(began);
        }
        self.op_next = self.op_next.max(op_next);
    }

    fn settled(&self, half: u64) -> bool {
        half < self.half_next || self.decided.contains(half) || self.deciding.contains_key(&half)
    }
}

impl Transactions {
    /// The progress kept in `offsets`, and the decisions the op queue holds past it.
    /// Blocking: reads the op queue from the op offset.
    pub fn open(store: &Store, offsets: &ConsumerOffsets) -> Transactions {
        let half = store.bounds(HALF_TOPIC, 0);
        let op = store.bounds(OP_TOPIC, 0);
        let kept = |topic| {
            offsets
                .get(topic, SYSTEM_GROUP, 0)
                .filter(|o| *o >= 0)
                .map(|o| o as u64)
        };
        let mut progress = Progress {
            half_next: kept(HALF_TOPIC)
                .unwrap_or(half.min_offset)
                .clamp(half.min_offset, half.max_offset.max(half.min_offset)),
            op_next: kept(OP_TOPIC)
                .unwrap_or(op.min_offset)
                .clamp(op.min_offset, op.max_offset.max(op.min_offset)),
            ..Progress::default()
        };
        let mut offset = progress.op_next;
        while offset < op.max_offset {
            let Some((messages, next)) = read_from(store, OP_TOPIC, offset) else {
                break;
            };
            for message in messages {
                if message.property(property::TAGS).as_deref() == Some(REMOVE_TAG) {
                    let op_offset = message.queue_offset as u64;
                    progress.note_op(op_offset, op_offsets(&message.body));
                }
            }
            offset = next;
        }
        progress.committed = (progress.half_next, progress.op_next);
        progress.advance(op.max_offset);
        tracing::info!(
            half_offset = progress.half_next,
            op_offset = progress.op_next,
            decided_ranges_ahead = progress.decided.ranges.len(),
            "transaction check progress loaded"
        );
        Transactions {
            state: Mutex::new(progress),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.state.lock().expect("transaction state lock poisoned")
    }

    /// Takes the right to decide the half at `half_offset`: false when it is decided already or
    /// being decided. `op_end` is the op queue's end now. A claim ends with `decided` or
    /// `abandoned`.
    pub fn claim(&self, half_offset: u64, op_end: u64) -> bool {
        let mut state = self.lock();
        if state.settled(half_offset) {
            return false;
        }
        state.deciding.insert(half_offset, op_end);
        true
    }

    /// The decision on a claimed half is stored, with its op record at `op_offset`.
    pub fn decided(&self, half_offset: u64, op_offset: u64, op_end: u64) {
        let mut state = self.lock();
        state.deciding.remove(&half_offset);
        state.note_op(op_offset, [half_offset]);
        state.advance(op_end);
    }

    /// The decision on a claimed half could not be stored: it may be decided again.
    pub fn abandoned(&self, half_offset: u64) {
        self.lock().deciding.remove(&half_offset);
    }

    /// Whether the half at `half_offset` is decided, or being decided.
    pub fn is_settled(&self, half_offset: u64) -> bool {
        self.lock().settled(half_offset)
    }

    /// The check's progress: (half offset, op offset).
    pub fn progress(&self) -> (u64, u64) {
        let state = self.lock();
        (state.half_next, state.op_next)
    }

    /// Puts the progress in the offset table (persisted with it). The half offset goes first:
    /// a snapshot taken between the two then holds an op offset that is lower than the half
    /// offset needs, which only costs reading a few more op records at start.
    pub fn commit_progress(&self, store: &Store, offsets: &ConsumerOffsets) {
        let half_min = store.bounds(HALF_TOPIC, 0).min_offset;
        let op_end = store.bounds(OP_TOPIC, 0).max_offset;
        let (half_next, op_next) = {
            let mut state = self.lock();
            if state.half_next < half_min {
                // Retention removed halves nobody decided: nothing is left to check of them.
                tracing::warn!(
                    from = state.half_next,
                    to = half_min,
                    "undecided half messages removed by retention"
                );
                state.half_next = half_min;
                state.decided.drop_below(half_min);
            }
            state.advance(op_end);
            let now = (state.half_next, state.op_next);
            if now == state.committed {
                return;
            }
            state.committed = now;
            now
        };
        offsets.commit(HALF_TOPIC, SYSTEM_GROUP, 0, half_next as i64);
        offsets.commit(OP_TOPIC, SYSTEM_GROUP, 0, op_next as i64);
    }

    /// Counts a check sent for the half; returns how many were sent before it.
    pub fn count_check(&self, half_offset: u64) -> u32 {
        let mut state = self.lock();
        let times = state.checks.entry(half_offset).or_default();
        let before = *times;
        *times += 1;
        before
    }

    pub fn checks_sent(&self, half_offset: u64) -> u32 {
        self.lock().checks.get(&half_offset).copied().unwrap_or(0)
    }
}

/// A set of offsets kept as ranges: start -> end (exclusive), neither touching nor overlapping.
#[derive(Debug, Default)]
struct OffsetRanges {
    ranges: BTreeMap<u64, u64>,
}

impl OffsetRanges {
    fn contains(&self, offset: u64) -> bool {
        self.ranges
            .range(..=offset)
            .next_back()
            .is_some_and(|(_, &end)| offset < end)
    }

    fn insert(&mut self, offset: u64) {
        if self.contains(offset) {
            return;
        }
        let mut start = offset;
        let mut end = offset + 1;
        if let Some((&before, &before_end)) = self.ranges.range(..offset).next_back() {
            if before_end == offset {
                start = before;
                self.ranges.remove(&before);
            }
        }
        if let Some(after_end) = self.ranges.remove(&end) {
            end = after_end;
        }
        self.ranges.insert(start, end);
    }

    /// The first offset at or after `from` that is not in the set, forgetting the offsets
    /// below it.
    fn pass_from(&mut self, mut from: u64) -> u64 {
        while let Some((&start, &end)) = self.ranges.first_key_value() {
            if start > from {
                break;
            }
            from = from.max(end);
            self.ranges.pop_first();
        }
        from
    }

    fn drop_below(&mut self, min: u64) {
        let kept = self.ranges.split_off(&min);
        let cut = std::mem::replace(&mut self.ranges, kept);
        if let Some((_, &end)) = cut.last_key_value() {
            if end > min {
                self.ranges.insert(min, end);
            }
        }
    }
}

/// The messages of queue 0 of a transaction topic from `offset`, and the offset after them
/// (past a gap, with no messages); None when nothing more can be read now.
pub(crate) fn read_from(
    store: &Store,
    topic: &str,
    offset: u64,
) -> Option<(Vec<StoredMessage>, u64)> {
    let read = match store.read(topic, 0, offset, READ_MESSAGES_MAX, READ_BYTES_MAX, &|_| {
        true
    }) {
        Ok(read) => read,
        Err(error) => {
            tracing::warn!(topic, offset, %error, "cannot read a transaction queue; the next round tries again");
            return None;
        }
    };
    match read.status {
        ReadStatus::Found => Some((decode_all(&read.bytes), read.next_offset.max(offset + 1))),
        _ if read.next_offset > offset => Some((Vec::new(), read.next_offset)),
        _ => None,
    }
}

fn decode_all(bytes: &[u8]) -> Vec<StoredMessage> {
    let mut messages = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        match StoredMessage::decode(rest, false) {
            Ok((message, size)) => {
                messages.push(message);
                rest = &rest[size..];
            }
            Err(error) => {
                tracing::error!(%error, "undecodable record in a transaction queue skipped");
                break;
            }
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_bodies_name_one_or_many_offsets() {
        assert_eq!(op_offsets(b"12,").collect::<Vec<_>>(), vec![12]);
        assert_eq!(op_offsets(b"1,2,30,").collect::<Vec<_>>(), vec![1, 2, 30]);
        assert_eq!(op_offsets(b"7").collect::<Vec<_>>(), vec![7]);
        assert_eq!(op_offsets(b"x,,-1,5").collect::<Vec<_>>(), vec![5]);
    }

    #[test]
    fn progress_passes_decided_halves_and_the_op_records_naming_only_them() {
        let mut progress = Progress::default();
        progress.note_op(0, [1]);
        progress.advance(1);
        assert_eq!((progress.half_next, progress.op_next), (0, 0));
        progress.note_op(1, [0]);
        progress.advance(2);
        assert_eq!((progress.half_next, progress.op_next), (2, 2));
        // A decision being written holds the op offset where its record may land.
        progress.deciding.insert(2, 2);
        progress.note_op(2, [3]);
        progress.advance(3);
        assert_eq!((progress.half_next, progress.op_next), (2, 2));
        progress.deciding.remove(&2);
        progress.note_op(3, [2]);
        progress.advance(4);
        assert_eq!((progress.half_next, progress.op_next), (4, 4));
    }

    #[test]
    fn op_progress_is_the_start_of_the_first_chunk_still_needed() {
        let mut progress = Progress::default();
        // Half 0 stays undecided while 1..=3000 are decided by op records 0..3000.
        for half in 1..=3_000 {
            progress.note_op(half - 1, [half]);
        }
        progress.advance(3_000);
        assert_eq!((progress.half_next, progress.op_next), (0, 0));
        assert_eq!(progress.decided.ranges.len(), 1);
        progress.note_op(3_000, [0]);
        progress.advance(3_001);
        assert_eq!((progress.half_next, progress.op_next), (3_001, 3_001));
        assert!(progress.op_chunks.is_empty());
    }

    #[test]
    fn offset_ranges_merge_and_pass() {
        let mut set = OffsetRanges::default();
        for offset in [5, 3, 4, 9, 7, 8] {
            set.insert(offset);
        }
        assert_eq!(set.ranges.len(), 2);
        assert!(set.contains(3) && set.contains(5) && set.contains(9));
        assert!(!set.contains(6) && !set.contains(2) && !set.contains(10));
        assert_eq!(set.pass_from(2), 2);
        assert_eq!(set.pass_from(3), 6);
        set.insert(6);
        assert_eq!(set.pass_from(6), 10);
        assert!(set.ranges.is_empty());
        for offset in [1, 2, 3, 7] {
            set.insert(offset);
        }
        set.drop_below(2);
        assert!(!set.contains(1) && set.contains(2) && set.contains(7));
    }
}
