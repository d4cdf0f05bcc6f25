//! The durability layer: what makes written records durable and says how far they are.
//!
//! - `Durability` writes the checkpoint: it flushes the ConsumeQueues up to what is dispatched,
//!   then records how far the CommitLog, they and the index are durable (`checkpoint.rs`). The
//!   index is flushed on its own, slower schedule (`Index::flush_if_due`); recovery re-adds keys
//!   from the position the checkpoint gives for it.
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
    /// Serializes checkpoint writers; holds the last checkpoint written.
    last_checkpoint: Mutex<Checkpoint>,
}

impl Durability {
    pub fn new(
        log: Arc<Log>,
        queues: Arc<Queues>,
        index: Arc<Index>,
        checkpoint_path: PathBuf,
    ) -> Durability {
        Durability {
            log,
            queues,
            index,
            checkpoint_path,
            last_checkpoint: Mutex::new(Checkpoint::default()),
        }
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

    /// Flushes ConsumeQueues and index up to what is dispatched now, then records it.
    pub fn write_checkpoint(&self) -> Result<(), OpenError> {
        let mut last = self
            .last_checkpoint
            .lock()
            .expect("checkpoint lock poisoned");
        // Everything below `dispatched` has its entries written: the appender publishes the
        // written position only after dispatching.
        let dispatched = self.log.written();
        let flushed = self.log.durable();
        let target = dispatched.min(flushed);
        if last.dispatched_flushed_position == target
            && last.commitlog_flushed_position == flushed
            && last.index_flushed_position == self.index.durable_end()
        {
            return Ok(());
        }
        for queue in self.queues.all() {
            queue
                .flush()
                .map_err(|e| OpenError::io(&queue.path_for(0), &e))?;
        }
        self.index
            .flush_if_due()
            .map_err(|e| OpenError::io(self.index.dir(), &e))?;
        let now = checkpoint::now_ms();
        let next = Checkpoint {
            commitlog_flushed_position: flushed,
            // A dispatch point past the durable CommitLog would let recovery skip a torn tail.
            dispatched_flushed_position: target,
            commitlog_flushed_ms: now,
            dispatched_flushed_ms: now,
            index_flushed_position: self.index.durable_end(),
        };
        checkpoint::write(&self.checkpoint_path, &next)
            .map_err(|e| OpenError::io(&self.checkpoint_path, &e))?;
        *last = next;
        Ok(())
    }
}
