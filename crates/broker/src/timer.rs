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

use std::io;
use std::path::{Path, PathBuf};

use quiver_store::durable_file::SnapshotFile;
use quiver_wire::message::{find_property, property, StoredMessage};
use serde::{Deserialize, Serialize};

use crate::stored;

pub use quiver_record::TIMER_TOPIC;
/// Due times are grouped into buckets of a minute (one file each, `TimerBuckets`).
pub(crate) const BUCKET_MS: i64 = 60_000;

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
pub(crate) struct Checkpoint {
    /// The next timer-queue offset to index.
    pub(crate) indexed: u64,
    /// Everything at or below `(delivered_due, delivered_offset)` was delivered.
    pub(crate) delivered_due: i64,
    pub(crate) delivered_offset: u64,
    /// Whether anything was delivered yet (the pair above means nothing until then).
    pub(crate) delivered_any: bool,
    /// Copied from the master while this broker was its slave: the master had delivered every
    /// timer-queue entry below `master_indexed` that fell due before `master_read_ms`.
    pub(crate) master_read_ms: i64,
    pub(crate) master_indexed: u64,
}

impl Checkpoint {
    pub(crate) fn delivered(&self, entry: (i64, u64)) -> bool {
        self.delivered_any && entry <= (self.delivered_due, self.delivered_offset)
    }

    /// Whether the master this broker replicated delivered the entry at `offset`, due `due`.
    pub(crate) fn delivered_by_master(&self, offset: u64, due: i64) -> bool {
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

pub(crate) fn minute(due_ms: i64) -> i64 {
    due_ms.div_euclid(BUCKET_MS)
}

pub(crate) fn checkpoint_path(store_root: &Path) -> PathBuf {
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
