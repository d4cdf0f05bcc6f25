//! Background durability: CommitLog fsyncs and checkpoints.
//!
//! - Async flush: one thread wakes every `interval_ms`, fsyncs when at least `least_pages`
//!   pages are unflushed (or every `THOROUGH_FLUSH_INTERVAL` regardless), then flushes the
//!   ConsumeQueues (and the index when due) and writes the checkpoint. In between, every
//!   `WRITEBACK_INTERVAL`, it starts writeback of the whole pages written since
//!   (`sync_file_range`, no wait, no device flush): an fsync of half a second's appends (16 MB
//!   at 32 MB/s) sent them to the disk in one burst, and on this kind of virtual machine a burst
//!   of disk writes takes CPU time from the guest, which stalled appends for tens of ms.
//! - Sync flush: whoever appends also syncs once (see `group_commit.rs`), or leaves it to the
//!   store's sync thread: it takes every batch of completions waiting, fsyncs once up to the
//!   highest position among them (group commit), and completes them all
//!   (`group_commit::complete_synced`). A thread checkpoints every
//!   `SYNC_CHECKPOINT_INTERVAL`, so that ConsumeQueue fsyncs never delay acks.
//!
//! Errors are not fatal here: an fsync or flush that fails is recorded in the store's faults
//! (logged, counted, and appends refused), retried on the next round, and held below in every
//! checkpoint until the store reopens; sync requests it should have covered are completed as
//! `TimedOut` (written, durability unknown). Both threads also run the faults' probe, which
//! lets appends in again once a write to the disk succeeds.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Durability;

pub const PAGE_BYTES: u64 = 4096;
/// RocketMQ's flushPhysicQueueThoroughInterval.
pub const THOROUGH_FLUSH_INTERVAL: Duration = Duration::from_secs(10);
pub const SYNC_CHECKPOINT_INTERVAL: Duration = Duration::from_millis(1000);
/// How often async flush starts writeback of what was written since, between its fsyncs.
pub const WRITEBACK_INTERVAL: Duration = Duration::from_millis(20);

pub fn run_async(
    durability: Arc<Durability>,
    stop: Receiver<()>,
    interval_ms: u64,
    least_pages: u32,
) {
    let interval = Duration::from_millis(interval_ms.max(1));
    let mut last_thorough = Instant::now();
    let mut kicked = 0;
    loop {
        // Between fsyncs, the pages written so far are handed to the disk every
        // WRITEBACK_INTERVAL, so that the fsync does not write half a second's data at once.
        let round = Instant::now() + interval;
        loop {
            let left = round.saturating_duration_since(Instant::now());
            match stop.recv_timeout(left.min(WRITEBACK_INTERVAL)) {
                Err(RecvTimeoutError::Timeout) => {}
                // Closing: close() does the final flush itself, once everything queued is
                // written.
                _ => return,
            }
            if left <= WRITEBACK_INTERVAL {
                break;
            }
            durability.log.start_writeback(&mut kicked);
        }
        let thorough = last_thorough.elapsed() >= THOROUGH_FLUSH_INTERVAL;
        let log = &durability.log;
        let written = log.written();
        let flushed = log.flushed();
        let unflushed_bytes = written.saturating_sub(flushed);
        // A failure is recorded by the log, which keeps later checkpoints below it; the
        // checkpoint still goes on for the ConsumeQueues and the index.
        let synced = unflushed_bytes == 0
            || !(thorough || unflushed_bytes >= u64::from(least_pages) * PAGE_BYTES)
            || log.flush(written).is_ok();
        if thorough && synced {
            last_thorough = Instant::now();
        }
        checkpoint_and_probe(&durability);
    }
}

pub fn run_checkpointer(durability: Arc<Durability>, stop: Receiver<()>) {
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(SYNC_CHECKPOINT_INTERVAL) {
        checkpoint_and_probe(&durability);
    }
}

fn checkpoint_and_probe(durability: &Durability) {
    // A failed checkpoint leaves the previous one, which is still true; its failure is
    // recorded in the faults and the next round tries again.
    let _ = durability.write_checkpoint();
    durability.faults().probe_if_due();
}
