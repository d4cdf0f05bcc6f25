//! The durability layer: what makes written records durable and says how far they are.
//!
//! - `Durability` writes the checkpoint: it flushes the ConsumeQueues up to what is dispatched,
//!   then records how far the CommitLog, they and the index are durable (`checkpoint.rs`). The
//!   index is flushed on its own, slower schedule (`Index::flush_if_due`); recovery re-adds keys
//!   from the position the checkpoint gives for it. A failed flush of either (or a failed
//!   CommitLog fsync, `Log::durable`) holds its position in every later checkpoint where it was
//!   before the failure, until the store reopens: Linux may drop the pages a failed writeback
//!   held and report the next fsync as a success, so only a rescan proves that range again.
//! - `flusher.rs`: the threads that fsync the CommitLog with async flush and write the
//!   checkpoint in the background.
//! - `group_commit.rs`: with sync flush, who runs the fdatasync that answers written groups.
//!
//! It sits above the log, queues and index and reaches them only through their methods.

pub mod checkpoint;
pub mod flusher;
pub mod group_commit;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::faults::{FileKind, IoFaults, IoOp};
use crate::index::Index;
use crate::log::Log;
use crate::queues::Queues;
use crate::types::OpenError;
use checkpoint::Checkpoint;

pub use group_commit::GroupCommit;

pub struct Durability {
    log: Arc<Log>,
    queues: Arc<Queues>,
    index: Arc<Index>,
    checkpoint_path: PathBuf,
    /// Serializes checkpoint writers.
    rounds: Mutex<Rounds>,
    faults: IoFaults,
}

/// What the checkpoint rounds so far have done.
#[derive(Default)]
struct Rounds {
    /// The last checkpoint written.
    written: Checkpoint,
    /// The written and flushed CommitLog positions and the index's durable end that the last
    /// round found, if it succeeded in everything: a round that finds the same has nothing to
    /// do. A round that failed is tried again in full.
    seen: Option<(u64, u64, u64)>,
    /// The dispatch position of the checkpoint written before the first failed ConsumeQueue
    /// flush since opening. The entries written since may have been on pages whose writeback
    /// failed and which the kernel dropped; a later fsync that succeeds says nothing of them,
    /// so no checkpoint passes this until the store reopens and recovery rebuilds them.
    queues_failed_at: Option<u64>,
}

impl Durability {
    pub fn new(
        log: Arc<Log>,
        queues: Arc<Queues>,
        index: Arc<Index>,
        checkpoint_path: PathBuf,
        faults: IoFaults,
    ) -> Durability {
        Durability {
            log,
            queues,
            index,
            checkpoint_path,
            rounds: Mutex::new(Rounds::default()),
            faults,
        }
    }

    /// The store's record of I/O faults.
    pub fn faults(&self) -> &IoFaults {
        &self.faults
    }

    /// fsyncs everything written so far and writes the checkpoint, now.
    pub fn flush(&self) -> Result<(), OpenError> {
        let written = self.log.written();
        self.log
            .flush(written)
            .map_err(|e| OpenError::io(self.log.dir(), &e))?;
        self.index
            .flush()
            .map_err(|e| OpenError::io(self.index.dir(), &e))?;
        self.write_checkpoint()
    }

    /// Flushes ConsumeQueues and index up to what is dispatched now, then records how far
    /// each is durable: never past a flush (or CommitLog fsync) that failed since the store
    /// opened. A failure does not stop the round: the other queues are flushed and the
    /// checkpoint records what did succeed. Every failure is recorded in the store's faults;
    /// the first is returned.
    pub fn write_checkpoint(&self) -> Result<(), OpenError> {
        let mut rounds = self.rounds.lock().expect("checkpoint lock poisoned");
        // Everything below `dispatched` has its entries written: the appender publishes the
        // written position only after dispatching.
        let dispatched = self.log.written();
        let seen = (dispatched, self.log.flushed(), self.index.durable_end());
        if rounds.seen == Some(seen) {
            return Ok(());
        }
        let queues = self.flush_queues(&mut rounds);
        let index = self
            .index
            .flush_if_due()
            .map_err(|e| OpenError::io(self.index.dir(), &e));
        let flushed = self.log.durable();
        let held = rounds.queues_failed_at.unwrap_or(u64::MAX);
        let now = checkpoint::now_ms();
        let next = Checkpoint {
            commitlog_flushed_position: flushed,
            // A dispatch point past the durable CommitLog would let recovery skip a torn tail.
            dispatched_flushed_position: dispatched.min(flushed).min(held),
            commitlog_flushed_ms: now,
            dispatched_flushed_ms: now,
            index_flushed_position: self.index.durable_end(),
        };
        let last = &rounds.written;
        let unchanged = last.commitlog_flushed_position == next.commitlog_flushed_position
            && last.dispatched_flushed_position == next.dispatched_flushed_position
            && last.index_flushed_position == next.index_flushed_position;
        let written = if unchanged {
            Ok(())
        } else {
            match checkpoint::write(&self.checkpoint_path, &next) {
                Ok(()) => {
                    rounds.written = next;
                    Ok(())
                }
                Err(e) => {
                    let path = &self.checkpoint_path;
                    self.faults
                        .record(FileKind::Checkpoint, IoOp::Replace, path, &e);
                    Err(OpenError::io(path, &e))
                }
            }
        };
        let result = queues.and(index).and(written);
        if result.is_ok() {
            rounds.seen = Some(seen);
        }
        result
    }

    /// Runs a truncation of the CommitLog (`cut`, which lowers the log's, queues' and index's
    /// positions to `position`) with no checkpoint round in between, then writes a checkpoint
    /// that vouches for nothing past `position`: a round begun before the cut could otherwise
    /// write the positions of the longer log after it.
    pub fn truncated<T, E: From<OpenError>>(
        &self,
        position: u64,
        cut: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let mut rounds = self.rounds.lock().expect("checkpoint lock poisoned");
        let done = cut()?;
        let next = rounds.written.truncated_at(position);
        rounds.seen = None;
        if let Some(at) = &mut rounds.queues_failed_at {
            *at = (*at).min(position);
        }
        checkpoint::write(&self.checkpoint_path, &next).map_err(|e| {
            let path = &self.checkpoint_path;
            self.faults
                .record(FileKind::Checkpoint, IoOp::Replace, path, &e);
            OpenError::io(path, &e)
        })?;
        rounds.written = next;
        Ok(done)
    }

    /// Flushes every ConsumeQueue, the failing ones too; a failure holds the checkpoint's
    /// dispatch position where the last checkpoint put it.
    fn flush_queues(&self, rounds: &mut Rounds) -> Result<(), OpenError> {
        let mut first_error = None;
        for queue in self.queues.all() {
            if let Err((path, e)) = queue.flush() {
                self.faults
                    .record(FileKind::ConsumeQueue, IoOp::Flush, &path, &e);
                let last = rounds.written.dispatched_flushed_position;
                rounds.queues_failed_at =
                    Some(rounds.queues_failed_at.map_or(last, |at| at.min(last)));
                first_error.get_or_insert(OpenError::io(&path, &e));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
