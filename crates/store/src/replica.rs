//! The store's side of replication: a master hands out its CommitLog as stored
//! (`read_log`), a replica writes its master's bytes at the same positions
//! (`append_replicated`) and cuts a tail its new master never had (`truncate_log`); in
//! controller mode the gate shows readers only what the replicas confirmed (`confirm`).

use std::sync::Arc;

use crate::types::{LogChunk, ReadError, ReplicaError, TruncateError, TruncateReport};
use crate::{read, relock, truncate, Confirmer, Store};

impl Store {
    /// A replica's write path (RocketMQ's slave, `appendToCommitLog`): appends `bytes` copied
    /// from its master's CommitLog at `position`, builds their ConsumeQueue and index entries,
    /// publishes them and tells the arrival listener, as `append` does. Returns the new
    /// written position, where the next call continues.
    ///
    /// Contract:
    /// - `position` is the written position (`stats().written_position`), except in a store
    ///   that holds nothing yet (written position 0, no segment), where it may be any segment
    ///   base (a multiple of the segment size): a master starts a new replica at the base of
    ///   its last segment, and the log, its min position included, then starts there.
    /// - `bytes` is a whole number of units, each either a stored record as its master wrote
    ///   it (PHYSICALOFFSET its position, QUEUEOFFSET set), or an end-of-segment marker
    ///   followed by every byte to the segment's end (the padding is written as it comes and
    ///   never read). Units go on into the next segment after a marker. A client cuts its
    ///   stream into whole units before calling; `Torn` says the bytes end inside one.
    /// - Each record is checked as recovery checks stored records (TOTALSIZE, MAGIC, body CRC,
    ///   PHYSICALOFFSET, topic, queue id and offset), and its QUEUEOFFSET must be its queue's
    ///   next offset, except in a queue that holds no entry (new here, or emptied): the queue
    ///   then starts at that offset, its min offset with it, since the entries below are on
    ///   the master only.
    /// - Both stores use the same segment size: a marker or record that does not end where
    ///   this store's segment does is `SegmentSizeMismatch`.
    ///
    /// On an error nothing of the call is published and its bytes are cut from the files: the
    /// caller reconnects and resumes from the written position, which has not moved.
    /// With sync flush the CommitLog is fsynced before this returns (a replica reports a
    /// position to its master only once it is durable), so call it off any async runtime;
    /// with async flush the flusher syncs it later. It runs under the appender's lock, between
    /// groups of `append` (which a replica's broker refuses anyway), and writes whatever
    /// others queued meanwhile afterwards, as any holder does.
    pub fn append_replicated(&self, position: u64, bytes: &[u8]) -> Result<u64, ReplicaError> {
        let inner = &self.inner;
        let result = {
            let mut appender = relock(inner.appender.lock());
            // Checked under the appender: `close` marks the queue closed before it takes the
            // appender to write the last groups, so a call that gets here first is flushed.
            if !inner.queue().open {
                Err(ReplicaError::Closed)
            } else if let Some(error) = inner.not_writable() {
                Err(ReplicaError::Io(error.to_string()))
            } else {
                appender.append_replicated(position, bytes)
            }
        };
        inner.write_queued();
        // With sync flush the slave's own fsync runs on the sync thread, never on this caller
        // (a runtime worker): its master waits for the slave's report, which says what is
        // written (as RocketMQ's slaves report), not for this fsync, and the next bytes are
        // appended while it runs. Sends written meanwhile get their fsync there too.
        if inner.sync_flush {
            match &result {
                Ok(end) => inner.group_commit.sync_later(*end),
                Err(_) => inner.group_commit.wake_thread(),
            }
        }
        result
    }

    /// A slave's cut of its log (controller mode): drops every record at and past `position`,
    /// which a new master never had, so that the log ends there. Afterwards reads, bounds,
    /// time and key lookups see none of the dropped records, and appends (`append` and
    /// `append_replicated`) go on at `position`, each queue at the offset its first dropped
    /// record had. `position` must lie between the min and written positions and be where a
    /// record, an end-of-segment marker or a segment starts; the written position is a no-op.
    ///
    /// Crash-safe: the cut reaches the disk before any reader or append sees the shorter log,
    /// and a crash part-way leaves a record of it that the next open finishes (see
    /// `truncate.rs`). It runs under the appender's lock, with retention and topic deletions
    /// held off, and fsyncs: call it off any async runtime. Groups waiting for a sync flush's
    /// fsync are completed first. On `Io` the store may be part cut; it refuses appends until
    /// reopened, which finishes the cut.
    pub fn truncate_log(&self, position: u64) -> Result<TruncateReport, TruncateError> {
        let inner = &self.inner;
        let _retaining = relock(inner.retaining.lock());
        let _deleting = relock(inner.deleting.lock());
        if inner.sync_flush {
            inner.group_commit.commit_all();
        }
        let result = {
            let mut appender = relock(inner.appender.lock());
            if !inner.queue().open {
                Err(TruncateError::Closed)
            } else {
                let layers = truncate::Layers {
                    config: &inner.config,
                    log: &inner.log,
                    queues: &inner.queues,
                    index: &inner.index,
                    durability: &inner.durability,
                };
                let result = truncate::truncate(&mut appender, &layers, position);
                inner.queues.gate.truncated(position);
                if let Err(TruncateError::Io { message, .. }) = &result {
                    appender.break_with(format!(
                        "truncating the CommitLog at {position} failed ({message}); reopen the \
                         store to finish the truncation"
                    ));
                }
                result
            }
        };
        inner.write_and_commit();
        result
    }

    /// The master's side of replication: the CommitLog bytes from `position`, at most
    /// `bytes_max`, never past the written position nor across a segment's end (a chunk ends
    /// at the segment's end, the next starts at the next segment's base). In a sealed segment
    /// the bytes go to its end, the end marker's padding included, read as zeros where the
    /// file is shorter. Empty when nothing is written at `position` yet.
    /// `BelowMinPosition` when retention removed `position`; `PastWrittenPosition` when the
    /// log ends before it (a replica that holds what this store does not).
    pub fn read_log(&self, position: u64, bytes_max: usize) -> Result<LogChunk, ReadError> {
        read::read_log(&self.inner.log, position, bytes_max)
    }

    /// The size of one CommitLog segment: a master starts a new replica at the base of its
    /// last one, `written_position - written_position % segment_bytes()`.
    pub fn segment_bytes(&self) -> u64 {
        self.inner.log.segment_bytes()
    }

    /// Controller mode: from now on readers see a queue's entries only once their records are
    /// confirmed (`confirm`), RocketMQ's dispatch up to the confirm offset; what the store
    /// recovered at open stays visible. Nothing is confirmed until the first `confirm`.
    pub fn hold_unconfirmed(&self) {
        self.inner.queues.gate.close();
    }

    /// Every record ending at or below `position` is held by the replicas that must hold it
    /// (`u64::MAX`: no replica needs to): shows the entries that lets through and tells the
    /// arrival listener of each queue that grew.
    pub fn confirm(&self, position: u64) {
        self.inner.queues.confirm(position);
    }

    /// `confirm` for a holder that must not keep the store open (a listener the store's own
    /// listener reaches): does nothing once the store is gone.
    pub fn confirmer(&self) -> Confirmer {
        Confirmer(Arc::downgrade(&self.inner.queues))
    }

    /// Entries held back for confirmation, counted in the gate's steps.
    pub fn unconfirmed_steps(&self) -> usize {
        self.inner.queues.gate.held_steps()
    }
}
